//! The vector and graph signals, fed from committed transactions, and their fusion with the
//! words: what each finds, what a hit shows, what a hidden attribute may not lead to, and the
//! as-of rule (a vector or an edge ended later still counts as of before its end).

#![allow(clippy::unwrap_used)] // tests: a failed step should stop the test loudly

mod common;

use common::{Rng, scope, text};
use engram_recall::{Feeder, Filter, Hit, Indexing, Query, RecallIndex, Scope, Signal};
use engram_types::{Attribute, Cardinality, Datom, EntityId, Op, TxId, Value};

/// An assertion by alice.
fn datom(tx: u64, entity: u64, attribute: &str, value: Value) -> Datom {
    common::datom(tx, Op::Assert, entity, attribute, value, "alice")
}

/// Every attribute cardinality one; `:doc/draft` is not searchable.
fn indexing(_: &Scope, a: &Attribute) -> Indexing {
    Indexing {
        cardinality: Cardinality::One,
        searchable: a.as_str() != ":doc/draft",
    }
}

fn vector(v: &[f32]) -> Value {
    Value::Vector(v.to_vec())
}

fn fed(log: &[Vec<Datom>]) -> RecallIndex {
    let mut index = RecallIndex::new();
    let mut feeder = Feeder::new();
    for datoms in log {
        let tx = datoms[0].tx;
        feeder
            .feed_tx(&mut index, tx, tx.0 as i64 * 1_000, datoms, indexing)
            .unwrap();
    }
    index
}

fn query(text: &str, vector: Option<&[f32]>, hops: usize, as_of: u64) -> Query {
    Query {
        text: text.into(),
        vector: vector.map(<[f32]>::to_vec),
        hops,
        as_of: TxId(as_of),
        k: 10,
        filter: Filter::default(),
    }
}

/// (entity, attribute) of each hit, best first.
fn shown(hits: &[Hit]) -> Vec<(u64, String)> {
    hits.iter()
        .map(|h| (h.fact.entity.0, h.fact.attribute.to_string()))
        .collect()
}

fn signals(hit: &Hit) -> Vec<Signal> {
    hit.found_by.iter().map(|(s, _)| *s).collect()
}

/// Three documents with a text and an embedding each; a person the first two cite.
fn corpus() -> Vec<Vec<Datom>> {
    vec![
        vec![
            datom(1, 1, ":doc/text", text("rotate the deploy key")),
            datom(1, 1, ":doc/embedding", vector(&[1.0, 0.0, 0.0])),
        ],
        vec![
            datom(2, 2, ":doc/text", text("lunch on friday")),
            datom(2, 2, ":doc/embedding", vector(&[0.0, 1.0, 0.0])),
        ],
        vec![
            datom(3, 3, ":doc/text", text("credentials expire soon")),
            datom(3, 3, ":doc/embedding", vector(&[0.9, 0.1, 0.0])),
        ],
        vec![
            datom(4, 9, ":person/bio", text("owns the platform team")),
            datom(4, 1, ":doc/author", Value::Ref(EntityId(9))),
        ],
    ]
}

#[test]
fn a_vector_finds_its_entity_s_text_by_meaning() {
    let index = fed(&corpus());
    // No shared word with "credentials expire soon", but its embedding is near.
    let hits = index
        .recall(&scope(), &query("", Some(&[1.0, 0.05, 0.0]), 0, 10))
        .unwrap();
    assert_eq!(
        shown(&hits)[..3],
        [
            (1, ":doc/text".to_string()),
            (3, ":doc/text".to_string()),
            (2, ":doc/text".to_string())
        ],
        "nearest first, each shown by its text"
    );
    assert_eq!(hits[0].found_by[0], (Signal::Vector, 1));
    assert_eq!(hits[1].found_by[0], (Signal::Vector, 2));
    // Magnitude does not matter (cosine similarity).
    let scaled = index
        .recall(&scope(), &query("", Some(&[100.0, 5.0, 0.0]), 0, 10))
        .unwrap();
    assert_eq!(shown(&scaled), shown(&hits));
    // Another dimension is another space: nothing of 2 components exists.
    assert!(
        index
            .recall(&scope(), &query("", Some(&[1.0, 0.0]), 0, 10))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn words_and_vectors_agreeing_beat_either_alone() {
    let index = fed(&corpus());
    // The words find doc 1 only; the vector ranks 3 first, then 1.
    let hits = index
        .recall(&scope(), &query("deploy key", Some(&[0.9, 0.1, 0.0]), 0, 10))
        .unwrap();
    assert_eq!(hits[0].fact.entity, EntityId(1), "{hits:?}");
    assert_eq!(signals(&hits[0])[..2], [Signal::Text, Signal::Vector]);
    assert_eq!(hits[1].fact.entity, EntityId(3));
    assert_eq!(signals(&hits[1])[0], Signal::Vector);
}

#[test]
fn the_graph_finds_what_the_best_hits_point_at_and_what_points_at_them() {
    let index = fed(&corpus());
    let hits = index.recall(&scope(), &query("deploy", None, 1, 10)).unwrap();
    assert_eq!(
        shown(&hits),
        [(1, ":doc/text".into()), (9, ":person/bio".into())],
        "the author of the deploy doc, one ref away"
    );
    assert_eq!(
        hits[1].found_by[0],
        (Signal::Graph, 2),
        "ranked below the seed that led to it (the graph ranks seeds but credits only what it reached)"
    );
    // From the person, the graph walks the ref backwards to the doc.
    let back = index.recall(&scope(), &query("platform", None, 1, 10)).unwrap();
    assert_eq!(shown(&back), [(9, ":person/bio".into()), (1, ":doc/text".into())]);
    // No hops, no graph; and as of before the ref, no edge.
    assert_eq!(
        shown(&index.recall(&scope(), &query("deploy", None, 0, 10)).unwrap()),
        [(1, ":doc/text".into())]
    );
    assert_eq!(
        shown(&index.recall(&scope(), &query("deploy", None, 1, 3)).unwrap()),
        [(1, ":doc/text".into())]
    );
}

#[test]
fn hops_reach_further_and_count_less() {
    let mut log = corpus();
    // 9 reports to 8, who has a bio: two hops from doc 1.
    log.push(vec![
        datom(5, 8, ":person/bio", text("runs engineering")),
        datom(5, 9, ":person/manager", Value::Ref(EntityId(8))),
    ]);
    let index = fed(&log);
    let one = shown(&index.recall(&scope(), &query("deploy", None, 1, 10)).unwrap());
    assert!(!one.contains(&(8, ":person/bio".into())), "{one:?}");
    let two = index.recall(&scope(), &query("deploy", None, 2, 10)).unwrap();
    assert_eq!(
        shown(&two),
        [
            (1, ":doc/text".into()),
            (9, ":person/bio".into()),
            (8, ":person/bio".into())
        ]
    );
    assert_eq!(two[1].found_by[0], (Signal::Graph, 2));
    assert_eq!(two[2].found_by[0], (Signal::Graph, 3), "further is ranked lower");
}

#[test]
fn an_ended_vector_or_ref_counts_only_before_its_end() {
    let mut log = corpus();
    // Doc 3's embedding is replaced by one far away; the ref 1 → 9 is retracted.
    log.push(vec![datom(5, 3, ":doc/embedding", vector(&[0.0, 0.0, 1.0]))]);
    let mut retract = datom(6, 1, ":doc/author", Value::Ref(EntityId(9)));
    retract.op = Op::Retract;
    log.push(vec![retract]);
    let index = fed(&log);
    let near = |as_of| {
        let hits = index
            .recall(&scope(), &query("", Some(&[0.9, 0.1, 0.0]), 0, as_of))
            .unwrap();
        hits.iter().map(|h| h.fact.entity.0).collect::<Vec<_>>()
    };
    assert_eq!(near(4)[..2], [3, 1], "as of 4 the old embedding holds");
    assert_eq!(near(5)[..2], [1, 2], "from 5 on doc 3 points elsewhere");
    let graph = |as_of| shown(&index.recall(&scope(), &query("deploy", None, 1, as_of)).unwrap());
    assert!(graph(5).contains(&(9, ":person/bio".into())));
    assert!(
        !graph(6).contains(&(9, ":person/bio".into())),
        "the ref ended at 6"
    );
}

#[test]
fn unsearchable_attributes_are_not_indexed() {
    let log = vec![vec![
        datom(1, 1, ":doc/draft", text("secret deploy plan")),
        datom(1, 2, ":doc/text", text("public deploy plan")),
    ]];
    let index = fed(&log);
    assert_eq!(
        shown(&index.recall(&scope(), &query("deploy", None, 0, 1)).unwrap()),
        [(2, ":doc/text".into())]
    );
    assert_eq!(index.sizes().texts, 1);
}

#[test]
fn a_hidden_attribute_leads_nowhere() {
    let index = fed(&corpus());
    let no_refs = |a: &Attribute| a.as_str() != ":doc/author";
    let hits = index
        .recall_where(&scope(), &query("deploy", None, 1, 10), &no_refs)
        .unwrap();
    assert_eq!(
        shown(&hits),
        [(1, ":doc/text".into())],
        "the ref is hidden, so is its walk"
    );
    let no_vectors = |a: &Attribute| a.as_str() != ":doc/embedding";
    let hits = index
        .recall_where(&scope(), &query("", Some(&[0.0, 1.0, 0.0]), 0, 10), &no_vectors)
        .unwrap();
    assert!(hits.is_empty(), "hidden vectors find nothing: {hits:?}");
}

#[test]
fn an_entity_without_text_is_shown_by_its_vector() {
    let log = vec![vec![datom(1, 4, ":img/embedding", vector(&[0.0, 0.0, 1.0]))]];
    let index = fed(&log);
    let hits = index
        .recall(&scope(), &query("", Some(&[0.0, 0.0, 2.0]), 0, 1))
        .unwrap();
    assert_eq!(shown(&hits), [(4, ":img/embedding".into())]);
    assert_eq!(index.sizes().vectors, 1);
}

#[test]
fn every_signal_as_of_t_answers_as_a_replay_up_to_t() {
    const WORDS: [&str; 8] = [
        "deploy", "key", "west", "east", "plan", "agent", "memory", "cache",
    ];
    let mut graph_hits = 0;
    let mut vector_hits = 0;
    let mut kind_hits = 0;
    for seed in 1..=12u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut log: Vec<Vec<Datom>> = Vec::new();
        for tx in 1..=40u64 {
            let mut datoms = Vec::new();
            for _ in 0..=rng.below(2) {
                let e = 1 + rng.below(12);
                let d = match rng.below(5) {
                    0 => {
                        let words: Vec<&str> = (0..1 + rng.below(4))
                            .map(|_| WORDS[rng.below(8) as usize])
                            .collect();
                        datom(tx, e, ":doc/text", text(&words.join(" ")))
                    }
                    1 => {
                        let v: Vec<f32> = (0..3).map(|_| rng.below(21) as f32 - 10.0).collect();
                        datom(tx, e, ":doc/embedding", vector(&v))
                    }
                    2 => datom(tx, e, ":doc/link", Value::Ref(EntityId(1 + rng.below(12)))),
                    3 => {
                        // A kind, replaced by the next one this agent gives the entity.
                        let kind = [":memory.kind/fact", ":memory.kind/blocker"][rng.below(2) as usize];
                        datom(tx, e, ":memory/kind", Value::Keyword(kind.into()))
                    }
                    _ => {
                        // Replacing a text with a number ends the text claim.
                        datom(tx, e, ":doc/text", Value::I64(tx as i64))
                    }
                };
                datoms.push(d);
            }
            log.push(datoms);
        }
        let full = fed(&log);
        for t in [1, 9, 17, 28, 40] {
            let replay = fed(&log[..t as usize]);
            for q in [
                query("deploy key", None, 1, t),
                query("", Some(&[1.0, -1.0, 0.5]), 2, t),
                query("memory", Some(&[0.0, 1.0, 1.0]), 3, t),
                Query {
                    filter: Filter {
                        kinds: vec![":memory.kind/blocker".into()],
                        ..Filter::default()
                    },
                    ..query("deploy plan cache", Some(&[1.0, 1.0, 0.0]), 1, t)
                },
            ] {
                let q = Query { k: 20, ..q };
                let hits = full.recall(&scope(), &q).unwrap();
                assert_eq!(
                    hits,
                    replay.recall(&scope(), &q).unwrap(),
                    "seed {seed}, as of {t}, {q:?}"
                );
                let by = |s: Signal| hits.iter().filter(|h| signals(h).contains(&s)).count();
                graph_hits += by(Signal::Graph);
                vector_hits += by(Signal::Vector);
                if !q.filter.kinds.is_empty() {
                    kind_hits += hits.len();
                }
            }
        }
    }
    // The property is about real answers: both signals, and the kind-filtered query, found
    // things.
    assert!(
        graph_hits > 50 && vector_hits > 50 && kind_hits > 50,
        "graph {graph_hits}, vector {vector_hits}, kind-filtered {kind_hits}"
    );
}

fn kind(tx: u64, entity: u64, kind: &str) -> Datom {
    datom(
        tx,
        entity,
        ":memory/kind",
        Value::Keyword(format!(":memory.kind/{kind}")),
    )
}

/// The entities `q` finds, in id order, each once.
fn entities_found(index: &RecallIndex, q: &Query) -> Vec<u64> {
    let mut e: Vec<u64> = index
        .recall(&scope(), q)
        .unwrap()
        .iter()
        .map(|h| h.fact.entity.0)
        .collect();
    e.sort();
    e.dedup();
    e
}

fn of_kinds(q: Query, kinds: &[&str]) -> Query {
    Query {
        filter: Filter {
            kinds: kinds.iter().map(|k| format!(":memory.kind/{k}")).collect(),
            ..Filter::default()
        },
        ..q
    }
}

/// Three memories that all mention the deploy key: a preference, a blocker, and one of no
/// kind; the blocker points at the preference.
fn memories() -> Vec<Vec<Datom>> {
    vec![
        vec![
            datom(1, 1, ":memory/text", text("use the deploy key from the vault")),
            datom(1, 1, ":memory/embedding", vector(&[1.0, 0.0, 0.0])),
            kind(1, 1, "preference"),
        ],
        vec![
            datom(2, 2, ":memory/text", text("deploy key expired, deploys fail")),
            datom(2, 2, ":memory/embedding", vector(&[0.9, 0.1, 0.0])),
            datom(2, 2, ":memory/about", Value::Ref(EntityId(1))),
            kind(2, 2, "blocker"),
        ],
        vec![datom(
            3,
            3,
            ":memory/text",
            text("the deploy key is rotated monthly"),
        )],
    ]
}

#[test]
fn a_kind_filter_keeps_memories_of_those_kinds_whichever_signal_found_them() {
    let index = fed(&memories());
    let entities = |q: Query| entities_found(&index, &q);
    let words = query("deploy key", None, 0, 3);
    assert_eq!(entities(words.clone()), [1, 2, 3]);
    assert_eq!(entities(of_kinds(words.clone(), &["preference"])), [1]);
    assert_eq!(
        entities(of_kinds(words.clone(), &["preference", "blocker"])),
        [1, 2]
    );
    assert!(entities(of_kinds(words, &["procedure"])).is_empty());
    // By the vector alone: the blocker's vector is near, but only the preference is shown.
    let near = query("", Some(&[0.9, 0.1, 0.0]), 0, 3);
    assert_eq!(entities(of_kinds(near, &["preference"])), [1]);
    // Along a ref: words that find only the blocker reach the preference it is about. The
    // filter applies to every signal, the graph's seeds included: asking for blockers keeps
    // the blocker and drops the preference it reached; asking for preferences finds no seed.
    let about = query("expired fail", None, 1, 3);
    assert_eq!(entities(about.clone()), [1, 2]);
    assert_eq!(entities(of_kinds(about.clone(), &["blocker"])), [2]);
    assert!(entities(of_kinds(about, &["preference"])).is_empty());
}

#[test]
fn a_kind_holds_from_its_claim_until_the_next_one_replaces_it() {
    let mut log = memories();
    // The preference becomes a blocker at 4, and the first blocker's kind is retracted at 5.
    log.push(vec![kind(4, 1, "blocker")]);
    let mut retract = kind(5, 2, "blocker");
    retract.op = Op::Retract;
    log.push(vec![retract]);
    let index = fed(&log);
    let blockers_as_of =
        |t: u64| entities_found(&index, &of_kinds(query("deploy key", None, 0, t), &["blocker"]));
    assert_eq!(blockers_as_of(3), [2]);
    assert_eq!(blockers_as_of(4), [1, 2]);
    assert_eq!(blockers_as_of(5), [1]);
    // A string works as a keyword does, searchable or not.
    let index = fed(&[vec![
        datom(1, 7, ":memory/text", text("deploy key note")),
        datom(1, 7, ":memory/kind", text(":memory.kind/identity")),
    ]]);
    let q = of_kinds(query("deploy", None, 0, 1), &["identity"]);
    assert_eq!(index.recall(&scope(), &q).unwrap().len(), 1);
}
