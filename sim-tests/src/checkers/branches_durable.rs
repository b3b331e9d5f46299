//! **branches-durable**: every merge the cluster acknowledged to the speculator (see
//! `speculator.rs`) is on every member replica: the branch is recorded as merged by exactly
//! that transaction, and main's history of the plan holds the branch's value at that
//! transaction. Every acknowledged abandon is recorded as abandoned.

use engram_core::branch::{self, BranchState};
use engram_storage::Store;
use engram_types::{BranchName, EntityId, Namespace, TxId, Value};

use super::Violation;
use crate::speculator::{NAMESPACE, STEP, SpeculationLog};

pub const NAME: &str = "branches-durable";

pub fn check(members: &[(u64, &dyn Store)], log: &SpeculationLog) -> Vec<Violation> {
    let mut out = Vec::new();
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let entity = *log.entity.lock().unwrap_or_else(|e| e.into_inner());
    let merged = log.merged.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let abandoned = log.abandoned.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (node, store) in members {
        let mut fail = |detail: String| out.push(Violation::new(NAME, format!("node {node}: {detail}")));
        let history = match entity {
            Some(e) => engram_core::pages::entity_history(*store, &ns, EntityId(e), None, usize::MAX)
                .map_err(|e| e.to_string()),
            None => Ok(Vec::new()),
        };
        let history = match history {
            Ok(h) => h,
            Err(e) => {
                fail(format!("reading the plan's history: {e}"));
                continue;
            }
        };
        for (name, tx, value) in &merged {
            let Ok(b) = BranchName::new(name.clone()) else {
                continue;
            };
            match branch::row(*store, &ns, &b) {
                Ok(Some(row)) if row.state == BranchState::Merged { tx: TxId(*tx) } => {}
                other => fail(format!(
                    "acknowledged merge of {name} at tx {tx}, but the branch row is {other:?}"
                )),
            }
            let applied = history.iter().any(|d| {
                d.tx == TxId(*tx)
                    && d.branch.is_none()
                    && d.attribute.as_str() == STEP
                    && d.value == Value::String(value.clone())
            });
            if !applied {
                fail(format!(
                    "acknowledged merge of {name} at tx {tx}, but main has no {STEP} {value:?} at that tx"
                ));
            }
        }
        for name in &abandoned {
            let Ok(b) = BranchName::new(name.clone()) else {
                continue;
            };
            match branch::row(*store, &ns, &b) {
                Ok(Some(row)) if matches!(row.state, BranchState::Abandoned { .. }) => {}
                other => fail(format!(
                    "acknowledged abandon of {name}, but the branch row is {other:?}"
                )),
            }
        }
    }
    out
}
