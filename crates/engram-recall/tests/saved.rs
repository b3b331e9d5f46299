//! A saved index read back answers as the index it was saved from, goes on being fed as it
//! would have, and a damaged, truncated or foreign save is refused.

#![allow(clippy::unwrap_used)] // tests: a failed step should stop the test loudly

mod common;

use common::{Rng, scope, text};
use engram_recall::{
    Feeder, Filter, Indexing, Query, RecallIndex, SAVED_FORMAT, SavedAt, SavedError, Scope, load, save,
};
use engram_types::{Attribute, Cardinality, Datom, EntityId, Hash, Op, TxId, Value};

const WORDS: [&str; 8] = [
    "deploy", "key", "west", "east", "plan", "agent", "memory", "cache",
];

/// `:doc/tags` is cardinality many, every other attribute one; all searchable.
fn indexing(_: &Scope, a: &Attribute) -> Indexing {
    Indexing {
        cardinality: if a.as_str() == ":doc/tags" {
            Cardinality::Many
        } else {
            Cardinality::One
        },
        searchable: true,
    }
}

/// A log of 60 transactions of texts, tags, vectors, refs, kinds, expiries and retractions.
fn log(seed: u64) -> Vec<Vec<Datom>> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut log = Vec::new();
    for tx in 1..=60u64 {
        let mut datoms = Vec::new();
        for _ in 0..=rng.below(3) {
            let e = 1 + rng.below(15);
            let agent = ["alice", "bob"][rng.below(2) as usize];
            let (op, attribute, value) = match rng.below(8) {
                0 | 1 => {
                    let words: Vec<&str> = (0..1 + rng.below(4))
                        .map(|_| WORDS[rng.below(8) as usize])
                        .collect();
                    (Op::Assert, ":doc/text", text(&words.join(" ")))
                }
                2 => (Op::Assert, ":doc/tags", text(WORDS[rng.below(8) as usize])),
                3 => (Op::Retract, ":doc/tags", text(WORDS[rng.below(8) as usize])),
                4 => {
                    let v: Vec<f32> = (0..3).map(|_| rng.below(21) as f32 - 10.0).collect();
                    (Op::Assert, ":doc/embedding", Value::Vector(v))
                }
                5 => (Op::Assert, ":doc/link", Value::Ref(EntityId(1 + rng.below(15)))),
                6 => {
                    let kind = [":memory.kind/fact", ":memory.kind/blocker"][rng.below(2) as usize];
                    (Op::Assert, ":memory/kind", Value::Keyword(kind.into()))
                }
                _ => (
                    Op::Assert,
                    ":memory/expires",
                    Value::Instant(1_000 * rng.below(60) as i64),
                ),
            };
            datoms.push(common::datom(tx, op, e, attribute, value, agent));
        }
        log.push(datoms);
    }
    log
}

fn feed(index: &mut RecallIndex, feeder: &mut Feeder, txs: &[Vec<Datom>]) {
    for datoms in txs {
        let tx = datoms[0].tx;
        feeder
            .feed_tx(index, tx, tx.0 as i64 * 1_000, datoms, indexing)
            .unwrap();
    }
}

fn queries(as_of: u64) -> Vec<Query> {
    let q = |text: &str, vector: Option<Vec<f32>>, hops: usize| Query {
        text: text.into(),
        vector,
        hops,
        as_of: TxId(as_of),
        k: 20,
        filter: Filter::default(),
    };
    vec![
        q("deploy key", None, 0),
        q("memory cache plan", None, 2),
        q("", Some(vec![1.0, -1.0, 0.5]), 1),
        q("west", Some(vec![0.0, 1.0, 1.0]), 3),
        Query {
            filter: Filter {
                kinds: vec![":memory.kind/blocker".into()],
                expired_at_ns: Some(30_000),
                ..Filter::default()
            },
            ..q("deploy plan east", Some(vec![1.0, 1.0, 0.0]), 1)
        },
    ]
}

fn at(next: u64) -> SavedAt {
    SavedAt {
        next: TxId(next),
        anchor: Some((TxId(next - 1), Hash([7; 32]))),
        redactions_seen: 3,
    }
}

#[test]
fn a_saved_index_answers_and_goes_on_as_the_one_it_was_saved_from() {
    let mut answered = 0;
    for seed in 1..=8u64 {
        let log = log(seed);
        let (first, rest) = log.split_at(35);
        let mut index = RecallIndex::new();
        let mut feeder = Feeder::new();
        feed(&mut index, &mut feeder, first);
        let bytes = save(&index, &feeder, &at(36), 0).unwrap();
        let (mut loaded, mut loaded_feeder, saved_at) = load(&bytes).unwrap();
        assert_eq!(saved_at, at(36));
        assert_eq!(loaded.last_tx(), TxId(35));
        assert_eq!(loaded.sizes(), index.sizes());
        // Fed the rest, the loaded index and the one never saved answer alike, as of every
        // point before and after the save.
        feed(&mut index, &mut feeder, rest);
        feed(&mut loaded, &mut loaded_feeder, rest);
        for as_of in [1, 12, 35, 36, 47, 60] {
            for q in queries(as_of) {
                let hits = index.recall(&scope(), &q).unwrap();
                assert_eq!(hits, loaded.recall(&scope(), &q).unwrap(), "seed {seed}, {q:?}");
                answered += hits.len();
            }
        }
    }
    assert!(answered > 500, "the queries found {answered} hits in all");
}

#[test]
fn a_damaged_truncated_or_foreign_save_is_refused() {
    let log = log(3);
    let mut index = RecallIndex::new();
    let mut feeder = Feeder::new();
    feed(&mut index, &mut feeder, &log);
    let bytes = save(&index, &feeder, &at(61), 1 << 20).unwrap();
    assert!(load(&bytes).is_ok());

    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(load(&flipped).err(), Some(SavedError::Damaged));

    let body = bytes.len() - 52;
    assert_eq!(
        load(&bytes[..bytes.len() - 10]).err(),
        Some(SavedError::Length {
            found: body - 10,
            said: body as u64
        })
    );
    assert_eq!(load(&bytes[..20]).err(), Some(SavedError::Truncated(20)));

    let mut other_format = bytes.clone();
    other_format[8..12].copy_from_slice(&(SAVED_FORMAT + 1).to_le_bytes());
    assert_eq!(
        load(&other_format).err(),
        Some(SavedError::Format {
            found: SAVED_FORMAT + 1
        })
    );

    let mut foreign = bytes.clone();
    foreign[..8].copy_from_slice(b"SQLite f");
    assert_eq!(load(&foreign).err(), Some(SavedError::NotAnIndex));

    // A save that says it takes a transaction it already holds does not hang together.
    let inconsistent = save(&index, &feeder, &at(60), 0).unwrap();
    assert!(matches!(load(&inconsistent), Err(SavedError::Decode(_))));
}
