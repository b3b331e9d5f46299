//! Feeding committed transactions: a fact is found while the current-claims rule says it
//! holds, and as of any earlier transaction exactly as it held then.

#![allow(clippy::unwrap_used)] // tests: a failed step should stop the test loudly

mod common;

use common::{datom, scope, text};
use engram_recall::{FactRef, Fed, Feeder, Filter, Indexing, Query, RecallError, RecallIndex, Scope};
use engram_types::{Attribute, Cardinality, Datom, Op, TxId, Value};

/// `:note/tags` is cardinality many, every other attribute one; `:note/secret` is not
/// searchable, every other attribute is.
fn cardinality(_: &Scope, a: &Attribute) -> Indexing {
    Indexing {
        cardinality: if a.as_str() == ":note/tags" {
            Cardinality::Many
        } else {
            Cardinality::One
        },
        searchable: a.as_str() != ":note/secret",
    }
}

struct Log {
    index: RecallIndex,
    feeder: Feeder,
}

impl Log {
    fn new() -> Log {
        Log {
            index: RecallIndex::new(),
            feeder: Feeder::new(),
        }
    }

    fn tx(&mut self, tx: u64, datoms: Vec<Datom>) -> Fed {
        self.feeder
            .feed_tx(&mut self.index, TxId(tx), tx as i64 * 1_000, &datoms, cardinality)
            .unwrap()
    }

    /// The query for `words` as of `as_of`, 50 hits, under `filter`.
    fn query(words: &str, as_of: u64, filter: Filter) -> Query {
        Query {
            text: words.into(),
            as_of: TxId(as_of),
            k: 50,
            filter,
            ..Query::default()
        }
    }

    /// (entity, tx) of every text-index hit for `words` as of `as_of`, sorted.
    fn find(&self, words: &str, as_of: u64) -> Vec<(u64, u64)> {
        let hits = self
            .index
            .text()
            .search(&scope(), &Log::query(words, as_of, Filter::default()));
        sorted(hits.unwrap().iter().map(|h| &h.fact))
    }

    /// (entity, tx) of every fused hit for `words` as of `as_of`, with expiry judged at
    /// `now_ns`, sorted.
    fn recall_live(&self, words: &str, as_of: u64, now_ns: Option<i64>) -> Vec<(u64, u64)> {
        let filter = Filter {
            expired_at_ns: now_ns,
            ..Filter::default()
        };
        let hits = self.index.recall(&scope(), &Log::query(words, as_of, filter));
        sorted(hits.unwrap().iter().map(|h| &h.fact))
    }
}

fn sorted<'a>(facts: impl Iterator<Item = &'a FactRef>) -> Vec<(u64, u64)> {
    let mut hits: Vec<(u64, u64)> = facts.map(|f| (f.entity.0, f.tx.0)).collect();
    hits.sort();
    hits
}

#[test]
fn an_agent_s_newer_claim_replaces_its_older_one_and_other_agents_claims_stand() {
    let mut log = Log::new();
    let fed = log.tx(
        1,
        vec![datom(
            1,
            Op::Assert,
            7,
            ":task/title",
            text("ship the parser"),
            "alice",
        )],
    );
    assert_eq!(fed, Fed { added: 1, ended: 0 });
    // Bob disagrees: both claims hold (a contradiction), both are found.
    log.tx(
        2,
        vec![datom(
            2,
            Op::Assert,
            7,
            ":task/title",
            text("ship the lexer"),
            "bob",
        )],
    );
    assert_eq!(log.find("ship", 2), [(7, 1), (7, 2)]);
    // Alice changes her mind: her first claim stops holding at tx 3, Bob's stands.
    let fed = log.tx(
        3,
        vec![datom(
            3,
            Op::Assert,
            7,
            ":task/title",
            text("ship the grammar"),
            "alice",
        )],
    );
    assert_eq!(fed, Fed { added: 1, ended: 1 });
    assert_eq!(log.find("parser", 3), []);
    assert_eq!(log.find("parser", 2), [(7, 1)], "as of tx 2 it still held");
    assert_eq!(log.find("ship", 3), [(7, 2), (7, 3)]);
    // A number replaces Bob's text: his text claim ends although the new value is no text.
    let fed = log.tx(
        4,
        vec![datom(4, Op::Assert, 7, ":task/title", Value::I64(3), "bob")],
    );
    assert_eq!(fed, Fed { added: 0, ended: 1 });
    assert_eq!(log.find("lexer", 4), []);
    assert_eq!(log.find("lexer", 3), [(7, 2)]);
}

#[test]
fn a_retraction_ends_every_claim_of_its_value_whoever_made_it() {
    let mut log = Log::new();
    log.tx(
        1,
        vec![
            datom(
                1,
                Op::Assert,
                1,
                ":note/text",
                text("rotate the deploy key"),
                "alice",
            ),
            datom(
                1,
                Op::Assert,
                1,
                ":note/text",
                text("rotate the deploy key"),
                "bob",
            ),
            datom(1, Op::Assert, 2, ":note/text", text("deploy on friday"), "alice"),
        ],
    );
    assert_eq!(log.find("deploy", 1).len(), 3);
    let fed = log.tx(
        2,
        vec![datom(
            2,
            Op::Retract,
            1,
            ":note/text",
            text("rotate the deploy key"),
            "carol",
        )],
    );
    assert_eq!(fed, Fed { added: 0, ended: 2 });
    assert_eq!(log.find("deploy", 2), [(2, 1)]);
    assert_eq!(
        log.find("rotate", 1),
        [(1, 1), (1, 1)],
        "both held before the retraction"
    );
    // Retracting a value nobody holds ends nothing.
    let fed = log.tx(
        3,
        vec![datom(
            3,
            Op::Retract,
            2,
            ":note/text",
            text("another value"),
            "carol",
        )],
    );
    assert_eq!(fed, Fed { added: 0, ended: 0 });
}

#[test]
fn under_cardinality_many_each_value_holds_until_retracted() {
    let mut log = Log::new();
    log.tx(
        1,
        vec![
            datom(1, Op::Assert, 5, ":note/tags", text("urgent"), "alice"),
            datom(1, Op::Assert, 5, ":note/tags", text("backend"), "alice"),
        ],
    );
    // Re-asserting a value: its newest assertion stands for it.
    let fed = log.tx(
        2,
        vec![datom(2, Op::Assert, 5, ":note/tags", text("urgent"), "bob")],
    );
    assert_eq!(fed, Fed { added: 1, ended: 1 });
    assert_eq!(log.find("urgent backend", 2), [(5, 1), (5, 2)]);
    log.tx(
        3,
        vec![datom(3, Op::Retract, 5, ":note/tags", text("backend"), "alice")],
    );
    assert_eq!(log.find("backend", 3), []);
    assert_eq!(log.find("urgent", 3), [(5, 2)]);
}

#[test]
fn a_transaction_must_hang_together_and_come_in_order() {
    let mut log = Log::new();
    log.tx(5, vec![datom(5, Op::Assert, 1, ":note/text", text("hello"), "a")]);
    let old = log.feeder.feed_tx(&mut log.index, TxId(4), 0, &[], cardinality);
    assert_eq!(old, Err(RecallError::OutOfOrder { last: 5, got: 4 }));
    let mixed = log.feeder.feed_tx(
        &mut log.index,
        TxId(6),
        0,
        &[datom(7, Op::Assert, 1, ":note/text", text("x"), "a")],
        cardinality,
    );
    assert!(matches!(mixed, Err(RecallError::Feed(_))), "{mixed:?}");
}

/// One datom on entity 9's `:note/body` as transaction `tx`.
fn body(log: &mut Log, tx: u64, op: Op, value: Value, agent: &str) -> Fed {
    log.tx(tx, vec![datom(tx, op, 9, ":note/body", value, agent)])
}

#[test]
fn only_indexed_claims_are_kept_and_each_until_it_ends() {
    let mut log = Log::new();
    // Values no index takes (an unsearchable text, numbers): nothing is kept for them.
    for tx in 1..=200 {
        let fed = log.tx(
            tx,
            vec![
                datom(
                    tx,
                    Op::Assert,
                    tx,
                    ":note/secret",
                    text("the vault code"),
                    "alice",
                ),
                datom(tx, Op::Assert, tx, ":note/count", Value::I64(tx as i64), "alice"),
            ],
        );
        assert_eq!(fed, Fed::default());
    }
    assert_eq!(log.feeder.live_claims(), 0);
    assert_eq!(log.find("vault", 200), []);
    // Two agents' texts in one slot are two live claims.
    body(&mut log, 201, Op::Assert, text("green parser"), "alice");
    body(&mut log, 202, Op::Assert, text("blue lexer"), "bob");
    assert_eq!(log.feeder.live_claims(), 2);
    // Alice's number ends her text and is not kept itself; Carol's retraction ends Bob's text.
    let fed = body(&mut log, 203, Op::Assert, Value::I64(1), "alice");
    assert_eq!(fed, Fed { added: 0, ended: 1 });
    assert_eq!(log.feeder.live_claims(), 1);
    let fed = body(&mut log, 204, Op::Retract, text("blue lexer"), "carol");
    assert_eq!(fed, Fed { added: 0, ended: 1 });
    assert_eq!(log.feeder.live_claims(), 0);
    assert_eq!(log.find("green", 204), []);
    assert_eq!(log.find("green", 202), [(9, 201)]);
    assert_eq!(log.find("lexer", 203), [(9, 202)]);
    // A text asserted again after its slot emptied holds again.
    let fed = body(&mut log, 205, Op::Assert, text("green parser"), "alice");
    assert_eq!(fed, Fed { added: 1, ended: 0 });
    assert_eq!(log.feeder.live_claims(), 1);
    assert_eq!(log.find("green", 205), [(9, 205)]);
}

#[test]
fn an_expired_memory_drops_out_as_of_now_and_is_found_as_of_before() {
    let mut log = Log::new();
    let expires = |tx: u64, e: u64, at_ns: i64, agent: &str| {
        datom(
            tx,
            Op::Assert,
            e,
            engram_recall::MEMORY_EXPIRES,
            Value::Instant(at_ns),
            agent,
        )
    };
    let withdraws = |tx: u64, e: u64, at_ns: i64, agent: &str| {
        datom(
            tx,
            Op::Retract,
            e,
            engram_recall::MEMORY_EXPIRES,
            Value::Instant(at_ns),
            agent,
        )
    };
    log.tx(
        1,
        vec![
            datom(
                1,
                Op::Assert,
                1,
                ":note/text",
                text("deploy window friday"),
                "alice",
            ),
            datom(
                1,
                Op::Assert,
                2,
                ":note/text",
                text("deploy freeze monday"),
                "alice",
            ),
        ],
    );
    // Entity 1 stops being worth recalling at 5,000 ns; entity 2 at 9,000 ns.
    log.tx(
        2,
        vec![expires(2, 1, 5_000, "alice"), expires(2, 2, 9_000, "alice")],
    );
    assert_eq!(
        log.recall_live("deploy", 2, None),
        [(1, 1), (2, 1)],
        "expiry not applied"
    );
    assert_eq!(log.recall_live("deploy", 2, Some(4_999)), [(1, 1), (2, 1)]);
    assert_eq!(
        log.recall_live("deploy", 2, Some(5_000)),
        [(2, 1)],
        "expired at its instant"
    );
    assert_eq!(log.recall_live("deploy", 2, Some(9_000)), []);
    // As of tx 1 no expiry claim held yet: both are found whatever the time.
    assert_eq!(log.recall_live("deploy", 1, Some(i64::MAX)), [(1, 1), (2, 1)]);

    // Bob still finds entity 1 worth recalling until 20,000 ns: it stays while any claim has
    // not passed.
    log.tx(3, vec![expires(3, 1, 20_000, "bob")]);
    assert_eq!(log.recall_live("deploy", 3, Some(10_000)), [(1, 1)]);
    // Alice moves her own expiry later (her newer claim replaces hers), Bob retracts his.
    log.tx(
        4,
        vec![expires(4, 2, 30_000, "alice"), withdraws(4, 1, 20_000, "bob")],
    );
    assert_eq!(log.recall_live("deploy", 4, Some(10_000)), [(2, 1)]);
    assert_eq!(
        log.recall_live("deploy", 3, Some(10_000)),
        [(1, 1)],
        "as of tx 3 unchanged"
    );
    // Retracting its last claim makes entity 2 recallable again, whatever the time; entity 1
    // still holds Alice's claim, long passed.
    log.tx(5, vec![withdraws(5, 2, 30_000, "alice")]);
    assert_eq!(log.recall_live("deploy", 5, Some(40_000)), [(2, 1)]);
    assert_eq!(
        log.recall_live("deploy", 4, Some(40_000)),
        [],
        "as of tx 4 both had passed"
    );
}
