//! Agent clients: concurrent writers, compare-and-set writers and readers against the
//! cluster's public gRPC API, each operation recorded as invoke/return in the [`History`].
//!
//! Registers are entities with a `reg/v` (i64) attribute. Every written value is unique, so a
//! read names the write it saw. Writes carry an idempotency key and are retried with it after
//! a timeout or an unavailable leader until the client's patience runs out; a write that never
//! got a definite answer is recorded as `Unknown` (it may or may not have happened).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_proto::pb;
use madsim::rand::Rng;
use tonic::Code;

use crate::cluster::channel;
use crate::history::{Call, History, Key, Outcome};

pub const NAMESPACE: &str = "sim";
pub const REG_VALUE: &str = ":reg/v";
pub const REG_WRITER: &str = ":reg/by";
pub const REG_NAME: &str = ":reg/name";
/// A 3-component vector derived from the value written, so recall's vector index is fed.
pub const REG_EMBEDDING: &str = ":reg/embedding";
/// A ref to the next register, so recall's ref graph is fed.
pub const REG_PEER: &str = ":reg/peer";
/// A kind of memory by the value's parity (`:memory.kind/fact` even, `/blocker` odd), so
/// recall's kind index is fed and each writer's claim keeps being replaced.
pub const REG_KIND: &str = ":memory/kind";

/// Per-attempt deadline.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long a client keeps retrying one operation before recording it as unknown: drawn per
/// operation, so some give up inside an outage (their writes end unknown) and some outlast it.
const PATIENCE_MS: std::ops::Range<u64> = 500..8000;

/// What the clients share.
pub struct Workload {
    pub history: History,
    /// Register key → entity id.
    pub registers: Vec<u64>,
    /// Node addresses a client may send to (the whole pool: non-members refuse or forward).
    pub targets: Vec<String>,
    pub stop: AtomicBool,
    pub start: Instant,
    /// Statuses a well-formed request must never get (a bug): (client, call, status).
    pub unexpected: Mutex<Vec<String>>,
    /// Highest tx id each client has seen acknowledged, for as-of reads.
    pub acked_tx: Mutex<BTreeMap<usize, u64>>,
}

impl Workload {
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

fn value_i64(v: i64) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::I64(v)),
    }
}

fn assert_op(entity: pb::entity_ref::Kind, attribute: &str, value: pb::Value) -> pb::TxOp {
    pb::TxOp {
        op: pb::Op::Assert as i32,
        entity: Some(pb::EntityRef { kind: Some(entity) }),
        attribute: attribute.to_string(),
        value: Some(value),
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

pub fn provenance(agent: &str) -> pb::Provenance {
    pb::Provenance {
        agent: agent.to_string(),
        session: "sim".into(),
        source: "engram-sim-tests".into(),
        confidence: 1.0,
        status: pb::Status::Candidate as i32,
    }
}

/// Creates the registers (one transaction, retried with an idempotency key until it commits)
/// and returns their entity ids.
pub async fn create_registers(targets: Vec<String>, count: usize) -> Result<Vec<u64>, String> {
    let ops = (0..count)
        .map(|k| {
            assert_op(
                pb::entity_ref::Kind::Temp(format!("r{k}")),
                REG_NAME,
                pb::Value {
                    kind: Some(pb::value::Kind::String(format!("register {k}"))),
                },
            )
        })
        .collect();
    let req = pb::TransactRequest {
        branch: String::new(),
        value_salts: Vec::new(),
        namespace: NAMESPACE.into(),
        ops,
        preconditions: vec![],
        idempotency_key: "setup-registers".into(),
        provenance: Some(provenance("setup")),
    };
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    for attempt in 0..200 {
        let target = &targets[attempt % targets.len()];
        let mut client = pb::memory_client::MemoryClient::new(channel(target));
        let mut r = tonic::Request::new(req.clone());
        r.set_timeout(ATTEMPT_TIMEOUT);
        match client.transact(r).await {
            Ok(resp) => {
                let temp_ids = resp.into_inner().temp_ids;
                return (0..count)
                    .map(|k| {
                        temp_ids
                            .get(&format!("r{k}"))
                            .copied()
                            .ok_or_else(|| format!("no id for r{k}"))
                    })
                    .collect();
            }
            Err(s) if !retryable(s.code()) => {
                return Err(format!(
                    "creating the registers on {target}: {:?} {}",
                    s.code(),
                    s.message()
                ));
            }
            Err(s) => {
                last.insert(target.clone(), format!("{:?} {}", s.code(), s.message()));
                madsim::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    Err(format!(
        "the registers could not be created in 200 attempts; last errors: {last:?}"
    ))
}

fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown | Code::Aborted
    )
}

/// One agent: issues operations until told to stop.
pub async fn run_client(client: usize, w: Arc<Workload>) {
    let agent = format!("agent-{client}");
    let mut seq: u64 = 0;
    let mut last_seen: BTreeMap<Key, Option<i64>> = BTreeMap::new();
    while !w.stop.load(Ordering::Relaxed) {
        seq += 1;
        let key = madsim::rand::thread_rng().gen_range(0..w.registers.len());
        let roll: u32 = madsim::rand::thread_rng().gen_range(0..100);
        let call = if roll < 30 {
            Call::Write {
                key,
                value: unique_value(client, seq),
            }
        } else if roll < 55 {
            Call::Cas {
                key,
                expected: last_seen.get(&key).copied().flatten(),
                value: unique_value(client, seq),
            }
        } else if roll < 88 {
            Call::Read { key }
        } else {
            let acked = w
                .acked_tx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&client)
                .copied();
            match acked {
                Some(top) if top > 0 => Call::ReadAsOf {
                    key,
                    as_of_tx: madsim::rand::thread_rng().gen_range(1..=top),
                },
                _ => Call::Read { key },
            }
        };
        let pending = w.history.invoke(client, call.clone(), w.now_ms());
        let outcome = execute(client, &agent, seq, &call, &w).await;
        match (&call, &outcome) {
            (Call::Read { key }, Outcome::Value { value }) => {
                last_seen.insert(*key, *value);
            }
            (Call::Write { key, value } | Call::Cas { key, value, .. }, Outcome::Written { tx }) => {
                last_seen.insert(*key, Some(*value));
                let mut acked = w.acked_tx.lock().unwrap_or_else(|e| e.into_inner());
                let top = acked.entry(client).or_insert(0);
                *top = (*top).max(*tx);
            }
            _ => {}
        }
        // Reads that never got an answer had no effect: leave them out of the history.
        let drop = matches!(call, Call::Read { .. } | Call::ReadAsOf { .. }) && outcome == Outcome::Unknown;
        if !drop {
            w.history.complete(pending, outcome, w.now_ms());
        }
        let gap = madsim::rand::thread_rng().gen_range(2..40);
        madsim::time::sleep(Duration::from_millis(gap)).await;
    }
}

fn unique_value(client: usize, seq: u64) -> i64 {
    i64::try_from(client as u64 * 1_000_000 + seq).unwrap_or(i64::MAX)
}

fn pick_target(w: &Workload) -> String {
    let i = madsim::rand::thread_rng().gen_range(0..w.targets.len());
    w.targets[i].clone()
}

async fn execute(client: usize, agent: &str, seq: u64, call: &Call, w: &Workload) -> Outcome {
    let patience = madsim::rand::thread_rng().gen_range(PATIENCE_MS);
    let deadline = Instant::now() + Duration::from_millis(patience);
    let request = match call {
        Call::Write { key, value } | Call::Cas { key, value, .. } => {
            let entity = w.registers[*key];
            let preconditions = match call {
                Call::Cas { expected, .. } => vec![pb::Precondition {
                    entity,
                    attribute: REG_VALUE.into(),
                    expected: expected.map(value_i64),
                }],
                _ => vec![],
            };
            Some(pb::TransactRequest {
                branch: String::new(),
                value_salts: Vec::new(),
                namespace: NAMESPACE.into(),
                ops: vec![
                    assert_op(pb::entity_ref::Kind::Id(entity), REG_VALUE, value_i64(*value)),
                    assert_op(
                        pb::entity_ref::Kind::Id(entity),
                        REG_WRITER,
                        pb::Value {
                            kind: Some(pb::value::Kind::String(agent.to_string())),
                        },
                    ),
                    assert_op(
                        pb::entity_ref::Kind::Id(entity),
                        REG_EMBEDDING,
                        pb::Value {
                            kind: Some(pb::value::Kind::Vector(pb::Vector {
                                values: vec![(value % 7) as f32, (value % 5) as f32 - 2.0, 1.0],
                            })),
                        },
                    ),
                    assert_op(
                        pb::entity_ref::Kind::Id(entity),
                        REG_PEER,
                        pb::Value {
                            kind: Some(pb::value::Kind::Ref(w.registers[(*key + 1) % w.registers.len()])),
                        },
                    ),
                    assert_op(
                        pb::entity_ref::Kind::Id(entity),
                        REG_KIND,
                        pb::Value {
                            kind: Some(pb::value::Kind::Keyword(
                                if value % 2 == 0 {
                                    ":memory.kind/fact"
                                } else {
                                    ":memory.kind/blocker"
                                }
                                .into(),
                            )),
                        },
                    ),
                ],
                preconditions,
                idempotency_key: format!("{agent}-{seq}"),
                provenance: Some(provenance(agent)),
            })
        }
        Call::Read { .. } | Call::ReadAsOf { .. } => None,
    };
    while Instant::now() < deadline {
        let mut memory = pb::memory_client::MemoryClient::new(channel(&pick_target(w)));
        let result = match &request {
            Some(req) => {
                let mut r = tonic::Request::new(req.clone());
                r.set_timeout(ATTEMPT_TIMEOUT);
                memory.transact(r).await.map(|resp| Outcome::Written {
                    tx: resp.into_inner().tx,
                })
            }
            None => {
                let (key, as_of_tx) = match call {
                    Call::ReadAsOf { key, as_of_tx } => (*key, Some(*as_of_tx)),
                    other => (other.key(), None),
                };
                let mut r = tonic::Request::new(pb::GetRequest {
                    namespace: NAMESPACE.into(),
                    entity: w.registers[key],
                    as_of_tx,
                    valid_at_ns: None,
                    consistency: pb::ReadConsistency::Linearizable as i32,
                    ..Default::default()
                });
                r.set_timeout(ATTEMPT_TIMEOUT);
                memory.get(r).await.map(|resp| Outcome::Value {
                    value: register_value(&resp.into_inner().datoms),
                })
            }
        };
        match result {
            Ok(outcome) => return outcome,
            Err(s) if s.code() == Code::FailedPrecondition && matches!(call, Call::Cas { .. }) => {
                return Outcome::CasFailed;
            }
            Err(s) if retryable(s.code()) => {
                let backoff = madsim::rand::thread_rng().gen_range(50..300);
                madsim::time::sleep(Duration::from_millis(backoff)).await;
            }
            Err(s) => {
                w.unexpected
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!(
                        "client {client}: {call:?} got {:?}: {}",
                        s.code(),
                        s.message()
                    ));
                return Outcome::Unknown;
            }
        }
    }
    Outcome::Unknown
}

/// The `reg/v` value among an entity's current facts.
pub fn register_value(datoms: &[pb::Datom]) -> Option<i64> {
    datoms.iter().filter(|d| d.attribute == REG_VALUE).find_map(|d| {
        match d.value.as_ref().and_then(|v| v.kind.as_ref()) {
            Some(pb::value::Kind::I64(v)) => Some(*v),
            _ => None,
        }
    })
}
