//! **I6 linearizable**: writes and (default, linearizable) reads behave as if each took effect
//! at one instant between its invoke and its return. Checked per register (linearizability
//! is compositional) by todc-utils' Wing–Gong–Lowe checker against a sequential register
//! specification with compare-and-set.
//!
//! A write that never got a definite answer is resolved against the final, agreed log: if its
//! value is not there it never took effect and has no place in the history; if it is, it took
//! effect at some instant after it was invoked, so it gets its own process and a return after
//! every other event. (Keeping both possibilities open instead made the search explode on
//! histories with many unanswered writes: one seed held a sweep thread for minutes.)

use std::collections::{BTreeMap, BTreeSet};

use todc_utils::linearizability::WGLChecker;
use todc_utils::specifications::Specification;
use todc_utils::{Action, History};

use super::Violation;
use crate::history::{Call, Key, Op, Outcome};

pub const NAME: &str = "I6 linearizable";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CasResult {
    Applied,
    Refused,
    Unknown,
}

/// One register operation as the checker sees it (a response carries the result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterOp {
    Write(i64),
    /// A write of unknown fate: it may have taken effect or not.
    MaybeWrite(i64),
    Cas {
        expected: Option<i64>,
        value: i64,
        result: CasResult,
    },
    Read(Option<i64>),
}

/// The sequential specification: a register holding an optional i64.
pub struct RegisterSpec;

impl Specification for RegisterSpec {
    type State = Option<i64>;
    type Operation = RegisterOp;

    fn init() -> Self::State {
        None
    }

    fn apply(op: &RegisterOp, state: &Option<i64>) -> (bool, Option<i64>) {
        match *op {
            RegisterOp::Write(v) => (true, Some(v)),
            // Taking effect here is one choice; never taking effect is covered by the checker
            // placing it last, after which nothing reads it.
            RegisterOp::MaybeWrite(v) => (true, Some(v)),
            RegisterOp::Read(v) => (v == *state, *state),
            RegisterOp::Cas {
                expected,
                value,
                result,
            } => match result {
                CasResult::Applied => (*state == expected, Some(value)),
                CasResult::Refused => (*state != expected, *state),
                CasResult::Unknown if *state == expected => (true, Some(value)),
                CasResult::Unknown => (true, *state),
            },
        }
    }
}

/// The checker's view of one operation; `None` leaves it out. `committed` holds the
/// (register, value) pairs the final log contains.
fn register_op(op: &Op, committed: &BTreeSet<(Key, i64)>) -> Option<RegisterOp> {
    let took_effect = |key: &Key, value: &i64| committed.contains(&(*key, *value));
    Some(match (&op.call, &op.outcome) {
        (Call::Write { value, .. }, Outcome::Written { .. }) => RegisterOp::Write(*value),
        (Call::Write { key, value }, Outcome::Unknown) if took_effect(key, value) => {
            RegisterOp::MaybeWrite(*value)
        }
        (Call::Cas { expected, value, .. }, Outcome::Written { .. }) => RegisterOp::Cas {
            expected: *expected,
            value: *value,
            result: CasResult::Applied,
        },
        (Call::Cas { expected, value, .. }, Outcome::CasFailed) => RegisterOp::Cas {
            expected: *expected,
            value: *value,
            result: CasResult::Refused,
        },
        (Call::Cas { key, expected, value }, Outcome::Unknown) if took_effect(key, value) => {
            RegisterOp::Cas {
                expected: *expected,
                value: *value,
                result: CasResult::Unknown,
            }
        }
        (Call::Read { .. }, Outcome::Value { value }) => RegisterOp::Read(*value),
        // Unanswered writes that never took effect, and as-of reads (I5 checks those).
        _ => return None,
    })
}

/// Builds one register's history in todc-utils' form.
pub fn register_history(ops: &[&Op], committed: &BTreeSet<(Key, i64)>) -> Option<History<RegisterOp>> {
    let clients = ops.iter().map(|o| o.client).max().unwrap_or(0) + 1;
    let mut next_process = clients;
    // (event position, process, action)
    let mut events: Vec<(u64, usize, Action<RegisterOp>)> = Vec::new();
    for op in ops {
        let Some(rop) = register_op(op, committed) else {
            continue;
        };
        let unknown = op.outcome == Outcome::Unknown;
        let process = if unknown {
            next_process += 1;
            next_process
        } else {
            op.client
        };
        events.push((op.invoked_at, process, Action::Call(rop)));
        let returned = if unknown {
            u64::MAX - op.invoked_at
        } else {
            op.returned_at
        };
        events.push((returned, process, Action::Response(rop)));
    }
    if events.is_empty() {
        return None;
    }
    events.sort_by_key(|(at, _, _)| *at);
    Some(History::from_actions(
        events.into_iter().map(|(_, p, a)| (p, a)).collect(),
    ))
}

pub fn check(ops: &[Op], committed: &BTreeSet<(Key, i64)>) -> Vec<Violation> {
    let mut by_key: BTreeMap<Key, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.call.key()).or_default().push(op);
    }
    let mut out = Vec::new();
    for (key, ops) in by_key {
        let Some(history) = register_history(&ops, committed) else {
            continue;
        };
        if !WGLChecker::<RegisterSpec>::is_linearizable(history) {
            let last: Vec<String> = ops
                .iter()
                .rev()
                .take(6)
                .map(|o| {
                    format!(
                        "c{} {:?} -> {:?} [{}..{} ms]",
                        o.client, o.call, o.outcome, o.invoked_ms, o.returned_ms
                    )
                })
                .collect();
            out.push(Violation::new(
                NAME,
                format!(
                    "register {key}: {} operations admit no linearization; latest: {}",
                    ops.len(),
                    last.join("; ")
                ),
            ));
        }
    }
    out
}
