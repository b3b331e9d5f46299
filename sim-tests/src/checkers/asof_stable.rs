//! **I5 immutable-history**: an as-of read at transaction t returns the same answer forever.
//! Every as-of read the clients made for the same register and t must agree, and must agree
//! with what every member replica answers for it at the end.

use std::collections::BTreeMap;

use engram_core::reads;
use engram_storage::Store;
use engram_types::{Attribute, EntityId, Namespace, TxId, Value};

use super::Violation;
use crate::history::{Call, Op, Outcome};
use crate::workload::{NAMESPACE, REG_VALUE};

pub const NAME: &str = "I5 as-of-stable";

pub fn check(ops: &[Op], registers: &[u64], members: &[(u64, &dyn Store)]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<(usize, u64), (Option<i64>, usize, u64)> = BTreeMap::new();
    for op in ops {
        let (Call::ReadAsOf { key, as_of_tx }, Outcome::Value { value }) = (&op.call, &op.outcome) else {
            continue;
        };
        match seen.get(&(*key, *as_of_tx)) {
            None => {
                seen.insert((*key, *as_of_tx), (*value, op.client, op.returned_ms));
            }
            Some((first, client, at)) if first != value => {
                out.push(Violation::new(
                    NAME,
                    format!(
                        "register {key} as of tx {as_of_tx}: client {client} read {first:?} at {at} ms, client {} read {value:?} at {} ms",
                        op.client, op.returned_ms
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    let (Ok(ns), Ok(attr)) = (Namespace::new(NAMESPACE), Attribute::new(REG_VALUE)) else {
        out.push(Violation::new(
            NAME,
            "the workload's namespace or attribute does not validate",
        ));
        return out;
    };
    for ((key, as_of), (value, client, _)) in &seen {
        for (node, store) in members {
            let now = match final_value(*store, &ns, &attr, EntityId(registers[*key]), TxId(*as_of)) {
                Ok(v) => v,
                Err(e) => {
                    out.push(Violation::new(
                        NAME,
                        format!("node {node}: as-of read failed: {e}"),
                    ));
                    continue;
                }
            };
            if now != *value {
                out.push(Violation::new(
                    NAME,
                    format!(
                        "register {key} as of tx {as_of}: client {client} read {value:?}, node {node} answers {now:?} at the end"
                    ),
                ));
            }
        }
    }
    out
}

fn final_value(
    store: &dyn Store,
    ns: &Namespace,
    attr: &Attribute,
    entity: EntityId,
    as_of: TxId,
) -> Result<Option<i64>, String> {
    let datoms = reads::entity_datoms(store, ns, entity).map_err(|e| e.to_string())?;
    let current = reads::current_facts(&datoms, Some(as_of), None);
    Ok(current
        .iter()
        .find(|d| &d.attribute == attr)
        .and_then(|d| match d.value {
            Value::I64(v) => Some(v),
            _ => None,
        }))
}
