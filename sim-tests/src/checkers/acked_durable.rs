//! **I3 acked-durable**: a write the cluster acknowledged survives every crash, torn write,
//! partition and restart: after healing, every member replica holds the acknowledged
//! transaction — at the tx id the receipt named, with the value the client wrote — and its
//! audit chain has an entry for that transaction.

use std::collections::BTreeSet;

use engram_types::{Op, TxId, Value};

use super::{Replica, Violation};
use crate::history::{Call, Op as HistOp, Outcome};
use crate::workload::REG_VALUE;

pub const NAME: &str = "I3 acked-durable";

/// Reports at most this many lost writes per replica (the first ones tell the story).
const LIMIT: usize = 5;

pub fn check(ops: &[HistOp], registers: &[u64], replicas: &[Replica]) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in replicas.iter().filter(|r| r.member) {
        let chained: BTreeSet<u64> = r
            .entries
            .iter()
            .filter_map(|s| s.entry.as_ref().ok())
            .filter(|s| matches!(s.entry.kind, engram_audit::EntryKind::Transaction { .. }))
            .map(|s| s.entry.tx.0)
            .collect();
        let mut lost = 0;
        for op in ops {
            let (Call::Write { key, value } | Call::Cas { key, value, .. }) = &op.call else {
                continue;
            };
            let Outcome::Written { tx } = op.outcome else {
                continue;
            };
            let entity = registers[*key];
            let present = r.datoms.get(&TxId(tx)).is_some_and(|t| {
                t.datoms.iter().any(|(_, d)| {
                    d.entity.0 == entity
                        && d.attribute.as_str() == REG_VALUE
                        && d.value == Value::I64(*value)
                        && d.op == Op::Assert
                })
            });
            let problem = if !present {
                Some("its datom is missing")
            } else if !chained.contains(&tx) {
                Some("it has no audit entry")
            } else {
                None
            };
            if let Some(problem) = problem {
                out.push(Violation::new(
                    NAME,
                    format!(
                        "node {}: client {} was told tx {tx} committed (register {key} = {value}, acknowledged at {} ms) but {problem}",
                        r.node, op.client, op.returned_ms
                    ),
                ));
                lost += 1;
                if lost >= LIMIT {
                    break;
                }
            }
        }
    }
    out
}
