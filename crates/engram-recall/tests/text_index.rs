//! The text index's behaviour: BM25 ranking, filters, the as-of rule (an answer as of `T` is
//! the answer of an index fed only up to `T`), fusion, and refused queries.

#![allow(clippy::unwrap_used)] // tests: a failed step should stop the test loudly

mod common;

use common::Rng;
use engram_recall::{
    FactMeta, FactRef, Filter, MAX_K, Query, RecallError, RecallIndex, Scope, Signal, TextIndex,
};
use engram_types::{Attribute, EntityId, Namespace, Status, TxId};

fn scope(ns: &str) -> Scope {
    Scope {
        namespace: Namespace::new(ns).unwrap(),
        branch: None,
    }
}

fn fact(tx: u64, seq: u32, entity: u64, attribute: &str) -> FactRef {
    FactRef {
        tx: TxId(tx),
        seq,
        entity: EntityId(entity),
        attribute: Attribute::new(attribute).unwrap(),
    }
}

fn meta(agent: &str, tx: u64) -> FactMeta {
    FactMeta {
        agent: agent.into(),
        status: Status::Candidate,
        confidence: 0.5,
        tx_time_ns: tx as i64 * 1_000,
        valid_from_ns: 0,
        valid_to_ns: None,
    }
}

fn query(text: &str, as_of: u64) -> Query {
    Query {
        text: text.into(),
        as_of: TxId(as_of),
        k: 10,
        filter: Filter::default(),
        ..Query::default()
    }
}

fn found(index: &TextIndex, s: &Scope, q: &Query) -> Vec<u64> {
    index
        .search(s, q)
        .unwrap()
        .iter()
        .map(|h| h.fact.entity.0)
        .collect()
}

/// Three notes in `team/a`, one in `team/b`.
fn notes() -> (TextIndex, Scope) {
    let a = scope("team/a");
    let mut index = TextIndex::new();
    let texts = [
        (1, "the deploy failed on the eu cluster"),
        (2, "deploy key rotated; deploy again tomorrow"),
        (3, "lunch menu for friday"),
    ];
    for (tx, text) in texts {
        assert!(
            index
                .add(&a, fact(tx, 0, tx, ":note/text"), text, meta("planner", tx))
                .unwrap()
        );
    }
    index
        .add(
            &scope("team/b"),
            fact(4, 0, 40, ":note/text"),
            "deploy deploy deploy",
            meta("ops", 4),
        )
        .unwrap();
    (index, a)
}

#[test]
fn bm25_ranks_by_how_often_and_how_rare_a_word_is() {
    let (index, a) = notes();
    // "deploy" is in two of three notes; note 2 says it twice.
    assert_eq!(found(&index, &a, &query("deploy", 10)), [2, 1]);
    // "eu" is rarer than "deploy", so the note with both leads.
    assert_eq!(found(&index, &a, &query("Deploy EU", 10)), [1, 2]);
    assert_eq!(found(&index, &a, &query("friday", 10)), [3]);
    assert!(found(&index, &a, &query("kubernetes", 10)).is_empty());
    let scores = index.search(&a, &query("deploy", 10)).unwrap();
    assert!(scores[0].score > scores[1].score && scores[1].score > 0.0);
}

#[test]
fn scopes_do_not_see_each_other() {
    let (index, _) = notes();
    assert_eq!(found(&index, &scope("team/b"), &query("deploy", 10)), [40]);
    assert!(found(&index, &scope("team/c"), &query("deploy", 10)).is_empty());
    let branch = Scope {
        branch: Some(engram_types::BranchName::new("try").unwrap()),
        ..scope("team/a")
    };
    assert!(found(&index, &branch, &query("deploy", 10)).is_empty());
}

#[test]
fn a_retracted_fact_is_found_before_its_retraction_and_not_after() {
    let (mut index, a) = notes();
    assert!(index.end(&a, &fact(2, 0, 2, ":note/text"), TxId(7)).unwrap());
    assert_eq!(found(&index, &a, &query("deploy", 6)), [2, 1], "as of tx 6");
    assert_eq!(
        found(&index, &a, &query("deploy", 7)),
        [1],
        "as of the retraction"
    );
    assert_eq!(found(&index, &a, &query("deploy", 100)), [1]);
    assert!(
        found(&index, &a, &query("deploy", 0)).is_empty(),
        "before anything was written"
    );
    assert_eq!(
        found(&index, &a, &query("deploy", 1)),
        [1],
        "as of tx 1: only note 1"
    );
    // Ending it twice, or ending what was never indexed, changes nothing.
    assert!(!index.end(&a, &fact(2, 0, 2, ":note/text"), TxId(8)).unwrap());
    assert!(!index.end(&a, &fact(9, 0, 9, ":note/text"), TxId(8)).unwrap());
}

#[test]
fn filters_keep_only_the_facts_asked_for() {
    let a = scope("team/a");
    let mut index = TextIndex::new();
    index
        .add(&a, fact(1, 0, 1, ":note/text"), "deploy plan", meta("planner", 1))
        .unwrap();
    let mut verified = meta("reviewer", 2);
    verified.status = Status::Verified;
    verified.valid_from_ns = 1_000;
    verified.valid_to_ns = Some(2_000);
    index
        .add(&a, fact(2, 0, 2, ":task/title"), "deploy review", verified)
        .unwrap();

    let with = |filter: Filter| {
        let mut q = query("deploy", 10);
        q.filter = filter;
        found(&index, &a, &q)
    };
    assert_eq!(
        with(Filter {
            attributes: vec![Attribute::new(":task/title").unwrap()],
            ..Filter::default()
        }),
        [2]
    );
    assert_eq!(
        with(Filter {
            agents: vec!["planner".into()],
            ..Filter::default()
        }),
        [1]
    );
    assert_eq!(
        with(Filter {
            statuses: vec![Status::Verified],
            ..Filter::default()
        }),
        [2]
    );
    assert_eq!(
        with(Filter {
            valid_between_ns: Some((1_500, 1_600)),
            ..Filter::default()
        })
        .len(),
        2
    );
    assert_eq!(
        with(Filter {
            valid_between_ns: Some((2_000, 3_000)),
            ..Filter::default()
        }),
        [1],
        "fact 2's valid time ends at 2,000 (exclusive)"
    );
}

#[test]
fn recall_says_which_signals_ranked_each_hit() {
    let a = scope("team/a");
    let mut index = RecallIndex::new();
    // Equal words, so BM25 ties and recency and the priors decide.
    index
        .add_text(
            &a,
            fact(1, 0, 1, ":note/text"),
            "incident in region west",
            meta("a", 1),
        )
        .unwrap();
    let mut sure = meta("b", 2);
    sure.status = Status::Verified;
    sure.confidence = 0.9;
    index
        .add_text(&a, fact(2, 0, 2, ":note/text"), "incident in region east", sure)
        .unwrap();
    index
        .add_text(&a, fact(3, 0, 3, ":note/text"), "unrelated words", meta("c", 3))
        .unwrap();

    let hits = index.recall(&a, &query("incident", 10)).unwrap();
    let order: Vec<u64> = hits.iter().map(|h| h.fact.entity.0).collect();
    assert_eq!(order, [2, 1], "newer and verified beats older and candidate");
    assert_eq!(
        hits[0].found_by,
        [(Signal::Text, 1), (Signal::Recency, 1), (Signal::Prior, 1)],
        "the two tie on words, so both rank first there"
    );
    assert_eq!(
        hits[1].found_by,
        [(Signal::Text, 1), (Signal::Recency, 2), (Signal::Prior, 2)]
    );
    assert!(hits[0].score > hits[1].score);
}

#[test]
fn bad_queries_are_refused_naming_the_field() {
    let (index, a) = notes();
    let field = |q: Query| match index.search(&a, &q) {
        Err(RecallError::InvalidQuery { field, .. }) => field,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(
        field(Query {
            k: 0,
            ..query("deploy", 1)
        }),
        "k"
    );
    assert_eq!(
        field(Query {
            k: MAX_K + 1,
            ..query("deploy", 1)
        }),
        "k"
    );
    assert_eq!(field(query("", 1)), "text");
    assert_eq!(field(query(" ?! ", 1)), "text");
    assert_eq!(field(query(&"word ".repeat(1000), 1)), "text");
    let mut empty_window = query("deploy", 1);
    empty_window.filter.valid_between_ns = Some((5, 5));
    assert_eq!(field(empty_window), "filter.valid_between_ns");
    let recall = RecallIndex::new();
    let field = |q: Query| match recall.recall(&a, &q) {
        Err(RecallError::InvalidQuery { field, .. }) => field,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(
        field(Query {
            k: 0,
            ..query("deploy", 1)
        }),
        "k"
    );
    assert_eq!(field(query("", 1)), "text", "no words and no vector");
    for bad in [vec![1.0, f32::NAN], vec![0.0, 0.0], vec![0.5; 4097], vec![]] {
        assert_eq!(
            field(Query {
                vector: Some(bad.clone()),
                ..query("", 1)
            }),
            "vector",
            "{:?}",
            &bad[..bad.len().min(2)]
        );
    }
    assert_eq!(
        field(Query {
            hops: 4,
            ..query("deploy", 1)
        }),
        "hops"
    );
    let vector_alone = Query {
        vector: Some(vec![1.0, 0.0]),
        ..query("", 1)
    };
    assert_eq!(recall.recall(&a, &vector_alone), Ok(vec![]));
}

#[test]
fn the_index_is_fed_in_transaction_order() {
    let (mut index, a) = notes();
    assert_eq!(index.last_tx(), TxId(4));
    let late = index.add(&a, fact(3, 1, 3, ":note/text"), "late words", meta("x", 3));
    assert_eq!(late, Err(RecallError::OutOfOrder { last: 4, got: 3 }));
    assert_eq!(
        index.end(&a, &fact(1, 0, 1, ":note/text"), TxId(2)),
        Err(RecallError::OutOfOrder { last: 4, got: 2 })
    );
    // A text without words, or the same fact again, indexes nothing.
    assert!(
        !index
            .add(&a, fact(5, 0, 5, ":note/text"), "...", meta("x", 5))
            .unwrap()
    );
    for again in [true, false] {
        assert_eq!(
            index
                .add(&a, fact(5, 1, 5, ":note/text"), "deploy", meta("x", 5))
                .unwrap(),
            again
        );
    }
    assert_eq!(index.facts(), 5);
}

enum Event {
    Add(FactRef, String, FactMeta),
    End(FactRef, TxId),
}

#[test]
fn an_answer_as_of_t_is_the_answer_of_an_index_fed_only_up_to_t() {
    const WORDS: [&str; 12] = [
        "deploy", "rollback", "incident", "west", "east", "key", "rotate", "plan", "review", "agent",
        "memory", "cache",
    ];
    let a = scope("team/a");
    for seed in 1..=20u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut events: Vec<(u64, Event)> = Vec::new();
        let mut live: Vec<FactRef> = Vec::new();
        for tx in 1..=60u64 {
            for seq in 0..=rng.below(3) as u32 {
                if !live.is_empty() && rng.below(4) == 0 {
                    let gone = live.swap_remove(rng.below(live.len() as u64) as usize);
                    events.push((tx, Event::End(gone, TxId(tx))));
                } else {
                    let text: Vec<&str> = (0..1 + rng.below(6))
                        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
                        .collect();
                    let f = fact(tx, seq, tx * 10 + u64::from(seq), ":note/text");
                    live.push(f.clone());
                    events.push((tx, Event::Add(f, text.join(" "), meta("a", tx))));
                }
            }
        }
        let feed = |index: &mut RecallIndex, through: u64| {
            for (tx, event) in &events {
                if *tx > through {
                    break;
                }
                match event {
                    Event::Add(f, text, m) => {
                        index.add_text(&a, f.clone(), text, m.clone()).unwrap();
                    }
                    Event::End(f, at) => {
                        index.end(&a, f, *at).unwrap();
                    }
                }
            }
        };
        let mut full = RecallIndex::new();
        feed(&mut full, u64::MAX);
        for t in [0, 1, 7, 20, 33, 59, 60] {
            let mut replay = RecallIndex::new();
            feed(&mut replay, t);
            for q in [
                "deploy",
                "incident west",
                "key rotate plan",
                "memory cache agent review",
            ] {
                let q = Query { k: 25, ..query(q, t) };
                let now = full.text().search(&a, &q).unwrap();
                let then = replay.text().search(&a, &q).unwrap();
                assert_eq!(
                    now, then,
                    "seed {seed}, as of {t}, query {:?}: scores and order",
                    q.text
                );
                assert_eq!(full.recall(&a, &q).unwrap(), replay.recall(&a, &q).unwrap());
            }
        }
    }
}
