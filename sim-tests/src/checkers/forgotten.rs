//! **I12 forgetting-keeps-proofs** (its replicated half): every redaction the cluster
//! acknowledged to the speculator (see `speculator.rs`) took the values of every datom of its
//! plan on every member replica, each marked as taken by exactly that redaction. That the
//! chain still verifies with the values gone, and that no value is missing without a
//! redaction recorded, is judged by the audit verifier and the scrub (`audit_verifies`,
//! `state_consistent`).

use engram_storage::Store;
use engram_types::{EntityId, Namespace, TxId};

use super::Violation;
use crate::speculator::{NAMESPACE, SpeculationLog};

pub const NAME: &str = "I12 forgotten";

pub fn check(members: &[(u64, &dyn Store)], log: &SpeculationLog) -> Vec<Violation> {
    let mut out = Vec::new();
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let forgotten = log.forgotten.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (node, store) in members {
        for (entity, by_tx, _) in &forgotten {
            let datoms = match engram_core::reads::entity_datoms(*store, &ns, EntityId(*entity)) {
                Ok(d) => d,
                Err(e) => {
                    out.push(Violation::new(
                        NAME,
                        format!("node {node}: reading entity {entity}: {e}"),
                    ));
                    continue;
                }
            };
            if datoms.is_empty() {
                out.push(Violation::new(
                    NAME,
                    format!("node {node}: entity {entity}, redacted by tx {by_tx}, has no datoms"),
                ));
            }
            for d in &datoms {
                if d.value.redacted().map(|r| r.by_tx) != Some(TxId(*by_tx)) {
                    out.push(Violation::new(
                        NAME,
                        format!(
                            "node {node}: entity {entity} {} of tx {} is {}, not redacted by tx {by_tx} as acknowledged",
                            d.attribute, d.tx.0, d.value
                        ),
                    ));
                }
            }
        }
    }
    out
}
