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

use crate::history::{Call, Key, Op, Outcome};

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

/// Every register whose operations admit no linearization, described with its latest
/// operations. `committed` holds the (register, value) pairs the final, agreed log contains.
pub fn check(ops: &[Op], committed: &BTreeSet<(Key, i64)>) -> Vec<String> {
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
            out.push(format!(
                "register {key}: {} operations admit no linearization; latest: {}",
                ops.len(),
                last.join("; ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::History as Recorder;

    fn run(steps: &[(usize, Call, Outcome)]) -> Vec<Op> {
        // Each step is invoked and completed before the next: a sequential history.
        let h = Recorder::default();
        for (client, call, outcome) in steps {
            let p = h.invoke(*client, call.clone(), 0);
            h.complete(p, outcome.clone(), 0);
        }
        h.ops()
    }

    #[test]
    fn a_sequential_register_history_is_linearizable() {
        let ops = run(&[
            (0, Call::Write { key: 0, value: 1 }, Outcome::Written { tx: 2 }),
            (1, Call::Read { key: 0 }, Outcome::Value { value: Some(1) }),
            (
                1,
                Call::Cas {
                    key: 0,
                    expected: Some(1),
                    value: 2,
                },
                Outcome::Written { tx: 3 },
            ),
            (
                0,
                Call::Cas {
                    key: 0,
                    expected: Some(1),
                    value: 3,
                },
                Outcome::CasFailed,
            ),
            (0, Call::Read { key: 0 }, Outcome::Value { value: Some(2) }),
        ]);
        let committed = BTreeSet::from([(0, 1), (0, 2)]);
        assert!(check(&ops, &committed).is_empty());
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_not() {
        let ops = run(&[
            (0, Call::Write { key: 0, value: 1 }, Outcome::Written { tx: 2 }),
            (0, Call::Write { key: 0, value: 2 }, Outcome::Written { tx: 3 }),
            (1, Call::Read { key: 0 }, Outcome::Value { value: Some(1) }),
        ]);
        let committed = BTreeSet::from([(0, 1), (0, 2)]);
        let found = check(&ops, &committed);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].starts_with("register 0: 3 operations admit no linearization"),
            "{found:?}"
        );
    }

    #[test]
    fn an_unanswered_write_counts_only_if_the_log_has_it() {
        let steps = [
            (0, Call::Write { key: 0, value: 1 }, Outcome::Written { tx: 2 }),
            (1, Call::Write { key: 0, value: 9 }, Outcome::Unknown),
            (0, Call::Read { key: 0 }, Outcome::Value { value: Some(9) }),
        ];
        let ops = run(&steps);
        assert!(check(&ops, &BTreeSet::from([(0, 1), (0, 9)])).is_empty());
        assert_eq!(
            check(&ops, &BTreeSet::from([(0, 1)])).len(),
            1,
            "9 was never written"
        );
    }
}
