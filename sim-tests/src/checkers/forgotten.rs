//! **I12 forgetting-keeps-proofs** (its replicated half): every redaction the cluster
//! acknowledged to the speculator (see `speculator.rs`) took the values of every datom of its
//! plan on every member replica, each marked as taken by one of that redaction's parts, and
//! every part took something. That the
//! chain still verifies with the values gone, and that no value is missing without a
//! redaction recorded, is judged by the audit verifier and the scrub (`audit_verifies`,
//! `state_consistent`).

use engram_storage::Store;
use engram_types::{BranchName, Namespace, TxId};

use super::Violation;
use crate::speculator::{Forgotten, NAMESPACE, SpeculationLog};

pub const NAME: &str = "I12 forgotten";

pub fn check(members: &[(u64, &dyn Store)], log: &SpeculationLog) -> Vec<Violation> {
    let mut out = Vec::new();
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let forgotten = log.forgotten.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (node, store) in members {
        for f in &forgotten {
            let entity = f.entity;
            let datoms = match super::entity_datoms(NAME, *node, *store, &ns, entity).and_then(|mut d| {
                d.extend(on_branch(*node, *store, &ns, f)?);
                Ok(d)
            }) {
                Ok(d) => d,
                Err(v) => {
                    out.push(v);
                    continue;
                }
            };
            if datoms.is_empty() {
                out.push(Violation::new(
                    NAME,
                    format!(
                        "node {node}: entity {entity}, redacted by txs {:?}, has no datoms",
                        f.part_txs
                    ),
                ));
            }
            let mut took = vec![0usize; f.part_txs.len()];
            for d in &datoms {
                let part = d
                    .value
                    .redacted()
                    .and_then(|r| f.part_txs.iter().position(|tx| TxId(*tx) == r.by_tx));
                match part {
                    Some(i) => took[i] += 1,
                    None => out.push(Violation::new(
                        NAME,
                        format!(
                            "node {node}: entity {entity} {} of tx {}{} is {}, not redacted by a part of the redaction acknowledged as txs {:?}",
                            d.attribute,
                            d.tx.0,
                            d.branch.as_ref().map_or(String::new(), |b| format!(" on branch {b}")),
                            d.value,
                            f.part_txs
                        ),
                    )),
                }
            }
            if let Some(i) = took.iter().position(|n| *n == 0).filter(|_| !datoms.is_empty()) {
                out.push(Violation::new(
                    NAME,
                    format!(
                        "node {node}: entity {entity}: part {} (tx {}) of its redaction took none of its datoms",
                        i + 1,
                        f.part_txs[i]
                    ),
                ));
            }
        }
    }
    out
}

/// The datoms of `f`'s entity on the branch the speculator wrote its third secret on.
fn on_branch(
    node: u64,
    store: &dyn Store,
    ns: &Namespace,
    f: &Forgotten,
) -> Result<Vec<engram_types::Datom>, Violation> {
    let Some(name) = &f.branch else {
        return Ok(Vec::new());
    };
    let name =
        BranchName::new(name.clone()).map_err(|e| Violation::new(NAME, format!("branch {name}: {e}")))?;
    let datoms = engram_core::branch::datoms(store, ns, &name)
        .map_err(|e| Violation::new(NAME, format!("node {node}: reading branch {name}: {e}")))?;
    let datoms: Vec<_> = datoms.into_iter().filter(|d| d.entity.0 == f.entity).collect();
    if datoms.is_empty() {
        return Err(Violation::new(
            NAME,
            format!(
                "node {node}: entity {} has no datom on branch {name}, where its write was acknowledged",
                f.entity
            ),
        ));
    }
    Ok(datoms)
}
