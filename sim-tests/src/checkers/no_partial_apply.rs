//! **I8 no-partial-apply**: a transaction is applied entirely or not at all. On every replica,
//! each transaction entry of the audit chain is matched by exactly the datoms it counts, whose
//! hashes (in order) reproduce its content hash, each with all of its index rows; and no datom
//! exists for a transaction the chain does not record.

use std::collections::BTreeSet;

use engram_audit::{EntryKind, tx_content_hash};

use super::{Replica, Violation};

pub const NAME: &str = "I8 no-partial-apply";

pub fn check(replicas: &[Replica]) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in replicas {
        let mut chained = BTreeSet::new();
        for stored in &r.entries {
            let Ok(signed) = &stored.entry else { continue };
            let EntryKind::Transaction {
                content_hash, datoms, ..
            } = &signed.entry.kind
            else {
                continue;
            };
            let tx = signed.entry.tx;
            chained.insert(tx);
            let fail = |d: String| {
                Violation::new(
                    NAME,
                    format!("node {} index {} (tx {}): {d}", r.node, stored.index, tx.0),
                )
            };
            let Some(found) = r.datoms.get(&tx) else {
                out.push(fail(format!("the entry counts {datoms} datoms, none are stored")));
                continue;
            };
            if let Some(c) = found.corrupt.first() {
                out.push(fail(format!("corrupt datom: {c}")));
                continue;
            }
            if found.datoms.len() != *datoms as usize {
                out.push(fail(format!(
                    "the entry counts {datoms} datoms, {} are stored",
                    found.datoms.len()
                )));
                continue;
            }
            let hashes: Vec<_> = found.datoms.iter().map(|(_, d)| d.hash()).collect();
            if tx_content_hash(&hashes) != *content_hash {
                out.push(fail(
                    "the stored datoms do not reproduce the entry's content hash".into(),
                ));
                continue;
            }
            if let Some(missing) = found.missing_index_rows.first() {
                out.push(fail(format!("missing {missing}")));
            }
        }
        for (tx, found) in &r.datoms {
            if !chained.contains(tx) {
                out.push(Violation::new(
                    NAME,
                    format!(
                        "node {}: {} datoms of tx {} are stored but no audit entry records that transaction",
                        r.node,
                        found.datoms.len(),
                        tx.0
                    ),
                ));
                break;
            }
        }
    }
    out
}
