//! What one write costs the state machine, apart from RocksDB, Raft and gRPC: the apply of a
//! one-datom transaction (a 100-byte string) unsigned without and with an idempotency key,
//! signed by an agent over its values, and signed over its committed form (each value's salted
//! commitment, the form this build's client signs); and the canonical encodings an agent signs,
//! for a ten-op request. Each apply is one entry, one group, on an in-memory store.
//!
//! `cargo bench -p engram-core --bench write_apply`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use engram_access::request::RequestAuth;
use engram_access::{AgentKey, Mode, PolicyOp, Principal};
use engram_audit::{Author, NodeKey};
use engram_core::{Engine, PolicyActor, policy};
use engram_storage::{MemStore, WriteBatch};
use engram_types::{Attribute, EntityRef, Hash, Namespace, Op, Provenance, TxOp, TxRequest, Value};

const METHOD: &str = "/engram.v1.Memory/Transact";

fn alice() -> AgentKey {
    AgentKey::from_seed(Principal::new("alice").expect("a valid name"), [3; 32])
}

fn request(i: u64, ops: usize, key: Option<String>) -> TxRequest {
    let mut req = TxRequest::data(
        Namespace::new("bench/writes").expect("a valid namespace"),
        (0..ops)
            .map(|k| TxOp {
                op: Op::Assert,
                entity: EntityRef::Temp(format!("e{k}")),
                attribute: Attribute::new(":bench/value").expect("a valid attribute"),
                value: Value::String(format!("{i:>20}{}", "v".repeat(80))),
                valid_from_ns: None,
                valid_to_ns: None,
            })
            .collect(),
        Provenance {
            agent: "alice".into(),
            confidence: 1.0,
            ..Default::default()
        },
    );
    req.idempotency_key = key;
    req
}

fn author(bytes: &[u8], i: u64) -> Author {
    let key = alice();
    let mut nonce = [0u8; 16];
    nonce[..8].copy_from_slice(&i.to_be_bytes());
    let auth = RequestAuth::sign(&key, METHOD, bytes, 3_000, nonce);
    Author {
        principal: key.principal.to_string(),
        key: key.public(),
        method: METHOD.into(),
        request_hash: Hash::of(bytes),
        time_ms: auth.time_ms,
        nonce: auth.nonce,
        signature: auth.signature,
    }
}

/// An engine over an empty store: open, or enforced with alice as its administrator.
fn engine(enforced: bool) -> Engine {
    let store = Arc::new(MemStore::new());
    let key = NodeKey::from_seed([5; 32]);
    let mut engine = Engine::open(store, Arc::new(NodeKey::from_seed(key.seed()))).expect("opens");
    let mut extra = WriteBatch::new();
    if enforced {
        policy::pending_mode_row(&mut extra);
    }
    engine
        .apply_membership(1, vec![(1, key.public())], extra)
        .expect("genesis");
    if enforced {
        let configure = PolicyOp::Configure {
            mode: Mode::Enforced,
            admin: Some((alice().principal.clone(), alice().public())),
        };
        engine
            .apply_policy(
                2,
                2_000,
                &configure,
                &PolicyActor::Unsigned(None),
                WriteBatch::new(),
            )
            .expect("applies")
            .expect("accepted");
    }
    engine
}

/// Runs `iters` applies of `make(i)`'s entry, timing only the applies.
fn applies<T>(
    iters: u64,
    enforced: bool,
    make: impl Fn(u64) -> T,
    apply: impl Fn(&mut Engine, u64, &T),
) -> Duration {
    let mut engine = engine(enforced);
    let entries: Vec<T> = (0..iters).map(&make).collect();
    let start = Instant::now();
    for (i, entry) in entries.iter().enumerate() {
        apply(&mut engine, 10 + i as u64, entry);
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("apply");
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    for (name, keyed) in [("unsigned", false), ("unsigned_keyed", true)] {
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                applies(
                    n,
                    false,
                    |i| request(i, 1, keyed.then(|| format!("key-{i}"))),
                    |e, log, req| {
                        let r = e.apply_tx(log, log as i64 * 1_000, req, WriteBatch::new());
                        black_box(r.expect("applies").expect("accepted"));
                    },
                )
            })
        });
    }
    g.bench_function("signed", |b| {
        b.iter_custom(|n| {
            applies(
                n,
                true,
                |i| {
                    let req = request(i, 1, None);
                    let author = author(&req.signed_bytes(), i);
                    (req, author)
                },
                |e, log, (req, author)| {
                    let r = e.apply_tx_signed(log, log as i64 * 1_000, req, author, WriteBatch::new());
                    black_box(r.expect("applies").expect("accepted"));
                },
            )
        })
    });
    // committed: start
    g.bench_function("signed_committed", |b| {
        b.iter_custom(|n| {
            applies(
                n,
                true,
                |i| {
                    let req = request(i, 1, None);
                    let salts = vec![[(i % 251) as u8; 16]];
                    let author = author(&req.committed_bytes(&salts).expect("a salt per op"), i);
                    (req, author, salts)
                },
                |e, log, (req, author, salts)| {
                    let r =
                        e.apply_tx_committed(log, log as i64 * 1_000, req, author, salts, WriteBatch::new());
                    black_box(r.expect("applies").expect("accepted"));
                },
            )
        })
    });
    // committed: end
    g.finish();

    let mut g = c.benchmark_group("encode_10_ops");
    let req = request(1, 10, Some("key".into()));
    g.bench_function("signed_bytes", |b| b.iter(|| black_box(req.signed_bytes())));
    // committed: start
    let salts = vec![[7u8; 16]; 10];
    g.bench_function("committed_bytes", |b| {
        b.iter(|| black_box(req.committed_bytes(&salts).expect("a salt per op")))
    });
    g.bench_function("salted_bytes", |b| {
        b.iter(|| black_box(req.salted_bytes(&salts).expect("a salt per op")))
    });
    // committed: end
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
