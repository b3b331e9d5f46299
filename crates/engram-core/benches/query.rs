//! Join queries over an in-memory store: what the planner and the executor cost, apart from
//! RocksDB, gRPC and the network (the `join` binary in `bench/` measures those end to end).
//!
//! The store holds 240 agents in 4 teams and 24,000 tasks, each with a status (indexed: a third
//! open, a third blocked, a third done), an owner (a reference to an agent) and a priority
//! (1-5). Each query reads as of the head, a page of at most 10,000 rows.
//!
//! `cargo bench -p engram-core --bench query`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use engram_audit::{KeyRing, NodeKey};
use engram_core::query::{self, QueryOptions};
use engram_core::{CheckpointPolicy, Engine};
use engram_storage::{MemStore, WriteBatch};
use engram_types::query::{Clause, EntityTerm, Query, ValueTerm, Variable};
use engram_types::{
    Attribute, AttributeDef, EntityId, EntityRef, Namespace, Op, Provenance, Status, TxOp, TxRequest, Value,
    ValueType,
};

const AGENTS: usize = 240;
const TASKS: usize = 24_000;
const TEAMS: [&str; 4] = ["infra", "web", "data", "ops"];
const STATUSES: [&str; 3] = [":s/open", ":s/blocked", ":s/done"];

fn attr(a: &str) -> Attribute {
    Attribute::new(a).expect("a valid attribute")
}

fn assert_op(entity: EntityRef, a: &str, value: Value) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity,
        attribute: attr(a),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

fn request(ns: &Namespace, ops: Vec<TxOp>) -> TxRequest {
    TxRequest::data(
        ns.clone(),
        ops,
        Provenance {
            agent: "planner".into(),
            session: "bench".into(),
            source: "bench".into(),
            confidence: 1.0,
            status: Status::Verified,
        },
    )
}

/// The store and its namespace, filled as the module's doc says.
fn filled() -> (Arc<MemStore>, Namespace) {
    let store = Arc::new(MemStore::new());
    let key = NodeKey::from_seed([7; 32]);
    let public = key.public();
    let ring = Arc::new(KeyRing::new(Arc::new(key)));
    let mut engine = Engine::open_with(store.clone(), ring, CheckpointPolicy::default()).expect("opens");
    engine
        .apply_membership(1, vec![(1, public)], WriteBatch::new())
        .expect("genesis");
    let ns = Namespace::new("bench/tasks").expect("a valid namespace");
    let mut log = 1;
    let mut apply = |engine: &mut Engine, req: &TxRequest| {
        log += 1;
        engine
            .apply_tx(log, log as i64 * 1_000, req, WriteBatch::new())
            .expect("applies")
            .expect("accepted")
    };
    let mut schema = request(&ns, Vec::new());
    schema.schema = vec![
        AttributeDef {
            indexed: true,
            ..AttributeDef::new(attr(":task/status"), ValueType::Keyword)
        },
        AttributeDef::new(attr(":task/owner"), ValueType::Ref),
        AttributeDef::new(attr(":task/priority"), ValueType::I64),
        AttributeDef {
            indexed: true,
            ..AttributeDef::new(attr(":agent/team"), ValueType::String)
        },
    ];
    apply(&mut engine, &schema);
    let agents = request(
        &ns,
        (0..AGENTS)
            .map(|i| {
                assert_op(
                    EntityRef::Temp(format!("a{i}")),
                    ":agent/team",
                    Value::String(TEAMS[i % TEAMS.len()].into()),
                )
            })
            .collect(),
    );
    let receipt = apply(&mut engine, &agents);
    let agent_ids: Vec<EntityId> = (0..AGENTS).map(|i| receipt.temp_ids[&format!("a{i}")]).collect();
    for chunk in (0..TASKS).collect::<Vec<_>>().chunks(1_000) {
        let ops = chunk
            .iter()
            .flat_map(|&i| {
                let t = EntityRef::Temp(format!("t{i}"));
                [
                    assert_op(t.clone(), ":task/status", Value::Keyword(STATUSES[i % 3].into())),
                    assert_op(t.clone(), ":task/owner", Value::Ref(agent_ids[i % AGENTS])),
                    assert_op(t, ":task/priority", Value::I64((i % 5) as i64 + 1)),
                ]
            })
            .collect();
        apply(&mut engine, &request(&ns, ops));
    }
    (store, ns)
}

fn var(name: &str) -> Variable {
    Variable::new(name).expect("a valid variable")
}

fn clause(e: &str, a: &str, v: ValueTerm) -> Clause {
    Clause {
        entity: EntityTerm::Var(var(e)),
        attribute: attr(a),
        value: v,
    }
}

fn val(v: Value) -> ValueTerm {
    ValueTerm::Value(v)
}

fn status(s: &str) -> ValueTerm {
    val(Value::Keyword(s.into()))
}

/// An `or` group of lone clauses.
fn or_of(alternatives: Vec<Clause>) -> Vec<Vec<Clause>> {
    alternatives.into_iter().map(|c| vec![c]).collect()
}

/// `not` clauses, each alone.
fn nots(clauses: Vec<Clause>) -> Vec<Vec<Clause>> {
    clauses.into_iter().map(|c| vec![c]).collect()
}

/// The queries, by name: a three-clause join, an `or` of two clauses beside one, a `not`
/// clause (all three in every build), and an `or` with a conjunction and a `not` of two
/// clauses.
fn queries() -> Vec<(&'static str, Query)> {
    let open = clause("?t", ":task/status", status(":s/open"));
    let owner = clause("?t", ":task/owner", ValueTerm::Var(var("?o")));
    let infra = clause("?o", ":agent/team", val(Value::String("infra".into())));
    let urgent = clause("?t", ":task/priority", val(Value::I64(5)));
    let t = || vec![var("?t")];
    let mut out = vec![
        (
            "join3",
            Query::new(t(), vec![open.clone(), owner.clone(), infra.clone()]).expect("valid"),
        ),
        (
            "or2",
            Query::with_or(
                t(),
                vec![urgent.clone()],
                vec![or_of(vec![
                    open.clone(),
                    clause("?t", ":task/status", status(":s/blocked")),
                ])],
            )
            .expect("valid"),
        ),
        (
            "not1",
            Query::new(t(), vec![open.clone()])
                .and_then(|q| q.negated(nots(vec![urgent.clone()])))
                .expect("valid"),
        ),
    ];
    out.extend(conjunction_queries(open, owner, infra, urgent));
    out
}

/// The queries only a build with conjunctions in `or` and `not` runs.
fn conjunction_queries(
    open: Clause,
    owner: Clause,
    infra: Clause,
    urgent: Clause,
) -> Vec<(&'static str, Query)> {
    vec![
        (
            "or_and",
            Query::with_or(
                vec![var("?t")],
                vec![urgent],
                vec![vec![vec![open.clone()], vec![owner.clone(), infra.clone()]]],
            )
            .expect("valid"),
        ),
        (
            "not2",
            Query::new(vec![var("?t")], vec![open])
                .and_then(|q| q.negated(vec![vec![owner, infra]]))
                .expect("valid"),
        ),
    ]
}

fn joins(c: &mut Criterion) {
    let (store, ns) = filled();
    let opts = QueryOptions {
        as_of: None,
        valid_at_ns: None,
        expired_at_ns: None,
        max_rows_read: query::DEFAULT_MAX_ROWS_READ,
    };
    let mut group = c.benchmark_group("query");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    for (name, q) in queries() {
        let rows = query::run(&*store, &ns, None, &q, &opts, &[], query::MAX_PAGE_ROWS)
            .expect("runs")
            .rows
            .len();
        assert!(rows > 0, "{name} answers something");
        group.bench_function(BenchmarkId::new(name, format!("{rows}_rows")), |b| {
            b.iter(|| {
                black_box(query::run(
                    &*store,
                    &ns,
                    None,
                    &q,
                    &opts,
                    &[],
                    query::MAX_PAGE_ROWS,
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, joins);
criterion_main!(benches);
