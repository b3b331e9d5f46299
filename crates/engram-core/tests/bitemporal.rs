//! Diffs between transaction times, for an entity and for a namespace, and the bitemporal
//! guarantee that a retroactive correction never changes an earlier as-of read.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::sync::Arc;

use engram_audit::NodeKey;
use engram_core::reads::{self, ReadError};
use engram_core::{Engine, pages};
use engram_storage::{MemStore, WriteBatch};
use engram_types::{Attribute, EntityId, EntityRef, Namespace, Op, Provenance, TxId, TxOp, TxRequest, Value};

fn op(op: Op, entity: EntityRef, value: Value, valid_from_ns: Option<i64>) -> TxOp {
    TxOp {
        op,
        entity,
        attribute: Attribute::new(":pref/color").unwrap(),
        value,
        valid_from_ns,
        valid_to_ns: None,
    }
}

fn tx(ns: &str, ops: Vec<TxOp>) -> TxRequest {
    TxRequest {
        namespace: Namespace::new(ns).unwrap(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops,
        preconditions: vec![],
        idempotency_key: None,
        provenance: Provenance {
            agent: "a1".into(),
            confidence: 1.0,
            ..Default::default()
        },
    }
}

/// A store with its genesis entry applied, and the engine over it.
fn genesis() -> (Arc<MemStore>, Engine) {
    let store = Arc::new(MemStore::new());
    let key = NodeKey::from_seed([3; 32]);
    let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed(key.seed()))).unwrap();
    engine
        .apply_membership(1, vec![(1, key.public())], WriteBatch::new())
        .unwrap();
    (store, engine)
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}

#[test]
fn diffs_split_assertions_and_retractions_by_tx_range() {
    let (store, mut engine) = genesis();
    let mut apply = |log: u64, req: TxRequest| {
        engine
            .apply_tx(log, 1_000 * log as i64, &req, WriteBatch::new())
            .unwrap()
            .unwrap()
    };
    let e = EntityId(
        apply(
            2,
            tx(
                "team/a",
                vec![op(Op::Assert, EntityRef::Temp("e".into()), s("red"), None)],
            ),
        )
        .temp_ids["e"]
            .0,
    );
    apply(
        3,
        tx("team/a", vec![op(Op::Assert, EntityRef::Id(e), s("blue"), None)]),
    );
    apply(
        4,
        tx("team/a", vec![op(Op::Retract, EntityRef::Id(e), s("blue"), None)]),
    );
    let f = EntityId(
        apply(
            5,
            tx(
                "team/a",
                vec![op(Op::Assert, EntityRef::Temp("f".into()), s("green"), None)],
            ),
        )
        .temp_ids["f"]
            .0,
    );
    apply(
        6,
        tx(
            "team/b",
            vec![op(Op::Assert, EntityRef::Temp("g".into()), s("secret"), None)],
        ),
    );
    let ns = Namespace::new("team/a").unwrap();
    let values = |d: &[engram_types::Datom]| d.iter().map(|d| (d.tx.0, d.value.clone())).collect::<Vec<_>>();

    // One entity, after tx 2 up to tx 4: the second assertion and its retraction.
    let d = pages::diff_main(&*store, &ns, Some(e), TxId(2), TxId(4), 100).unwrap();
    assert_eq!(values(&d.asserted), vec![(3, s("blue"))]);
    assert_eq!(values(&d.retracted), vec![(4, s("blue"))]);
    assert!(!d.truncated);
    // since(0) for the entity: everything it ever recorded.
    let d = pages::diff_main(&*store, &ns, Some(e), TxId(0), TxId(6), 100).unwrap();
    assert_eq!(values(&d.asserted), vec![(2, s("red")), (3, s("blue"))]);
    // The namespace, after tx 3: the retraction and f, never team/b's datom.
    let d = pages::diff_main(&*store, &ns, None, TxId(3), TxId(6), 100).unwrap();
    assert_eq!(values(&d.asserted), vec![(5, s("green"))]);
    assert_eq!(values(&d.retracted), vec![(4, s("blue"))]);
    assert!(d.asserted.iter().all(|d| d.entity == f));
    // The upper bound is inclusive, the lower exclusive.
    let d = pages::diff_main(&*store, &ns, None, TxId(2), TxId(3), 100).unwrap();
    assert_eq!(values(&d.asserted), vec![(3, s("blue"))]);
    // A limit is reported, not silently applied.
    let d = pages::diff_main(&*store, &ns, None, TxId(0), TxId(6), 2).unwrap();
    assert_eq!(d.asserted.len() + d.retracted.len(), 2);
    assert!(d.truncated);
    // Another namespace's entity is unknown here.
    let other = Namespace::new("team/b").unwrap();
    assert!(matches!(
        pages::diff_main(&*store, &other, Some(e), TxId(0), TxId(6), 100),
        Err(ReadError::UnknownEntity(_))
    ));
}

#[test]
fn a_retroactive_correction_never_changes_an_earlier_as_of_read() {
    let (store, mut engine) = genesis();
    let r = engine
        .apply_tx(
            2,
            10_000,
            &tx(
                "team/a",
                vec![op(Op::Assert, EntityRef::Temp("e".into()), s("red"), None)],
            ),
            WriteBatch::new(),
        )
        .unwrap()
        .unwrap();
    let e = EntityId(r.temp_ids["e"].0);
    let ns = Namespace::new("team/a").unwrap();
    let before = reads::get(&*store, &ns, e, Some(TxId(2)), Some(5_000)).unwrap();
    // At tx 3 we learn that since t=1000 (before tx 2's time) the value was really "blue".
    engine
        .apply_tx(
            3,
            20_000,
            &tx(
                "team/a",
                vec![op(Op::Assert, EntityRef::Id(e), s("blue"), Some(1_000))],
            ),
            WriteBatch::new(),
        )
        .unwrap()
        .unwrap();
    // What we believed as of tx 2 about valid time 5000 is unchanged...
    assert_eq!(
        reads::get(&*store, &ns, e, Some(TxId(2)), Some(5_000)).unwrap(),
        before
    );
    // ...and what we believe now about valid time 5000 is the correction.
    let now = reads::get(&*store, &ns, e, None, Some(5_000)).unwrap();
    assert_eq!(now[0].value, s("blue"));
}

#[test]
fn a_diff_at_a_valid_instant_keeps_only_the_datoms_valid_then() {
    let (store, mut engine) = genesis();
    let mut log = 1;
    let mut apply = |req: TxRequest| {
        log += 1;
        engine
            .apply_tx(log, 1_000 * log as i64, &req, WriteBatch::new())
            .unwrap()
            .unwrap()
    };
    // e: red from 100, blue from 500 (recorded later); f: green from 300.
    let e = apply(tx(
        "team/a",
        vec![op(Op::Assert, EntityRef::Temp("e".into()), s("red"), Some(100))],
    ))
    .temp_ids["e"];
    let mut blue = op(Op::Assert, EntityRef::Id(e), s("blue"), Some(500));
    blue.valid_to_ns = Some(900);
    apply(tx("team/a", vec![blue]));
    apply(tx(
        "team/a",
        vec![op(Op::Assert, EntityRef::Temp("f".into()), s("green"), Some(300))],
    ));
    let ns = Namespace::new("team/a").unwrap();
    let at = |entity: Option<EntityId>, valid_at: Option<i64>, limit: usize| -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor = Vec::new();
        loop {
            let page = pages::diff(&*store, &ns, entity, TxId(0), None, valid_at, &cursor, limit).unwrap();
            out.extend(page.datoms.into_iter().map(|d| d.value));
            match page.next {
                Some(c) => cursor = c.encode(),
                None => return out,
            }
        }
    };
    assert_eq!(at(None, None, 10), [s("red"), s("blue"), s("green")]);
    assert_eq!(
        at(None, Some(50), 10),
        Vec::<Value>::new(),
        "nothing was valid before 100"
    );
    assert_eq!(at(None, Some(200), 10), [s("red")]);
    assert_eq!(
        at(None, Some(600), 1),
        [s("red"), s("blue"), s("green")],
        "a datom a page"
    );
    assert_eq!(
        at(None, Some(900), 10),
        [s("red"), s("green")],
        "blue ended at 900"
    );
    assert_eq!(at(Some(e), Some(600), 1), [s("red"), s("blue")]);
    assert_eq!(at(Some(e), Some(950), 10), [s("red")]);
    // The instant is part of the query: a cursor of one instant does not continue another.
    let first = pages::diff(&*store, &ns, None, TxId(0), None, Some(600), &[], 1).unwrap();
    assert!(matches!(
        pages::diff(
            &*store,
            &ns,
            None,
            TxId(0),
            None,
            Some(601),
            &first.next.unwrap().encode(),
            1
        ),
        Err(ReadError::Cursor(_))
    ));
}
