//! The generated corpus and its labelled queries, shared by the in-process run and the run
//! through a cluster. Everything is a pure function of the document number and the seeds, so
//! both runs see the same documents and ask the same questions.

use std::time::Duration;

use engram_recall::{Filter, Query};
use engram_types::{EntityId, TxId, Value};

pub const TOPICS: u64 = 500;
const TOPIC_WORDS: u64 = 40;
const COMMON_WORDS: u64 = 5_000;
/// Hits a query asks for, and the cut recall is measured at.
pub const K: usize = 10;
pub const NAMESPACE: &str = "bench/recall";
pub const TITLE: &str = ":doc/title";
pub const BODY: &str = ":doc/body";
pub const NOTE: &str = ":doc/note";
pub const EMBEDDING: &str = ":doc/embedding";
pub const CITES: &str = ":doc/cites";

/// The corpus's size and shape.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub documents: u64,
    pub queries: usize,
    pub dimension: usize,
}

/// splitmix64: a deterministic stream per seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A roughly normal number (sum of four uniforms, centred, unit variance), from `seed`.
fn gauss(seed: u64) -> f32 {
    let s: f64 = (0..4)
        .map(|i| (mix(seed ^ (i * 0x1234_5678)) >> 11) as f64 / (1u64 << 53) as f64)
        .sum();
    ((s - 2.0) * (3.0f64).sqrt()) as f32
}

fn topic_of(e: u64) -> u64 {
    e % TOPICS
}

/// The document `e` cites: one of another topic (shifted by a step that is not a multiple of
/// TOPICS).
pub fn cites(e: u64, documents: u64) -> u64 {
    (e.wrapping_mul(7919) + 13 + TOPICS / 2) % documents
}

fn topic_word(t: u64, seed: u64) -> String {
    format!("t{t}x{}", mix(seed) % TOPIC_WORDS)
}

fn common_word(seed: u64) -> String {
    // Skewed: small numbers far more often, as in text.
    let r = mix(seed) % COMMON_WORDS;
    format!("c{}", r * r / COMMON_WORDS)
}

fn embedding(e: u64, dimension: usize) -> Vec<f32> {
    let t = topic_of(e);
    (0..dimension as u64)
        .map(|i| {
            gauss(component_seed(0, t * 1_000, t, i)) + 0.6 * gauss(component_seed(0xE000_0000, e * 64, e, i))
        })
        .collect()
}

/// The seed of component `i` of the stream `base + first64` for item `n`: the first 64
/// components as the 32-component corpus always had them, wider ones from a stream of their own.
fn component_seed(base: u64, first64: u64, n: u64, i: u64) -> u64 {
    if i < 64 {
        base + first64 + i
    } else {
        0x7000_0000_0000 + base + n * 4_096 + i
    }
}

/// Document `e`'s four own facts (title, body, note, embedding), attribute and value. Its fifth,
/// the citation, is [`cites`]: a ref whose entity id depends on how ids were given out.
pub fn facts_of(e: u64, dimension: usize) -> [(&'static str, Value); 4] {
    let t = topic_of(e);
    let words = |n: u64, f: &dyn Fn(u64) -> String| (0..n).map(f).collect::<Vec<_>>().join(" ");
    let title = format!("{} u{e}a", words(3, &|i| topic_word(t, e * 10 + i)));
    let body = format!(
        "{} {} u{e}b",
        words(10, &|i| common_word(e * 100 + i)),
        words(4, &|i| topic_word(t, e * 10 + 5 + i))
    );
    let note = words(8, &|i| common_word(e * 100 + 50 + i));
    [
        (TITLE, Value::String(title)),
        (BODY, Value::String(body)),
        (NOTE, Value::String(note)),
        (EMBEDDING, Value::Vector(embedding(e, dimension))),
    ]
}

/// A labelled query: what is asked, and the documents (by number) it is after.
pub struct Labelled {
    pub query: Query,
    pub relevant: [u64; 2],
}

/// The labelled queries. Query `i` is after a target document `X` and the document `X` cites.
pub fn queries(shape: Shape, as_of: TxId) -> Vec<Labelled> {
    (0..shape.queries as u64)
        .map(|i| {
            let x = mix(0xABCD_0000 + i) % shape.documents;
            let t = topic_of(x);
            let mut words = vec![
                topic_word(t, x * 10 + mix(i) % 3),
                topic_word(t, 0xF00 + i),
                common_word(0x5000 + i),
                common_word(0x6000 + i),
            ];
            if i % 2 == 0 {
                words.push(format!("u{x}a"));
            }
            let target = embedding(x, shape.dimension);
            let vector: Vec<f32> = target
                .iter()
                .enumerate()
                .map(|(j, v)| v + 0.6 * gauss(component_seed(0xD000_0000, i * 64, i, j as u64)))
                .collect();
            Labelled {
                query: Query {
                    text: words.join(" "),
                    vector: Some(vector),
                    hops: 1,
                    as_of,
                    k: K,
                    filter: Filter::default(),
                },
                relevant: [x, cites(x, shape.documents)],
            }
        })
        .collect()
}

/// One way of asking a labelled query: some of its signals taken away.
pub type Variant = fn(&Query) -> Query;

/// Words alone, the vector alone, both, and both with one graph hop (the full query).
pub const VARIANTS: [(&str, Variant); 4] = [
    ("text", |q| Query {
        vector: None,
        hops: 0,
        ..q.clone()
    }),
    ("vector", |q| Query {
        text: String::new(),
        hops: 0,
        ..q.clone()
    }),
    ("text+vector", |q| Query { hops: 0, ..q.clone() }),
    ("text+vector+graph", Query::clone),
];

/// The share of `relevant` among the entities of the first [`K`] hits.
pub fn share_found(hit_entities: &[EntityId], relevant: &[EntityId]) -> f64 {
    let first = &hit_entities[..hit_entities.len().min(K)];
    let found = relevant.iter().filter(|r| first.contains(r)).count();
    found as f64 / relevant.len() as f64
}

/// The `p` quantile of sorted durations, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
}
