//! `recall`: how well and how fast Engram's recall index finds what a labelled query is after,
//! per signal and fused, over a generated corpus of a million facts.
//!
//! The corpus (deterministic; `--entities N` documents, 5 facts each): every document has a
//! topic (one of 500), a `:doc/title` (three topic words and one word only it has), a
//! `:doc/body` (common words, topic words and a second word only it has), a `:doc/note`
//! (common words), a 32-component (`--dimension`) `:doc/embedding` (its topic's direction plus noise of its
//! own) and a `:doc/cites` ref to a document of another topic. Fed through the same feeder the
//! server uses, in transactions of 100 facts.
//!
//! The labels: query `i` is after a target document `X` and the document `Y` that `X` cites,
//! so its relevant set is `{X, Y}`. Its words are two of `X`'s topic words, two common words
//! and, half of the time, `X`'s own title word (the other half the asker does not know it);
//! its vector is `X`'s embedding plus noise as large as `X`'s own. Words alone find `X` when
//! they hold its word; the vector finds `X` among its topic's neighbours most of the time;
//! `Y` shares neither words nor direction with the query, so only the graph (one hop from `X`)
//! finds it. recall@10 is the share of the relevant set among the entities of the first ten
//! hits, averaged over the queries.
//!
//! Reported: recall@10 for words alone, the vector alone, both fused, and both with the graph
//! (the full query); the build rate; resident memory per million facts; the full query's
//! p50/p99 latency at 1 and 16 concurrent callers (threads in this process, on this machine's
//! cores). The index in process: no gRPC, no store reads (see docs/benchmarks.md for what an
//! end-to-end search adds).
//!
//! Usage: `recall [--entities N] [--queries N] [--dimension N] [--json]`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use engram_recall::{Feeder, Filter, Hit, Indexing, Query, RecallIndex, Scope};
use engram_types::{Attribute, Cardinality, Datom, EntityId, Namespace, Op, Provenance, Status, TxId, Value};
use serde_json::json;

const USAGE: &str = "usage: recall [--entities N] [--queries N] [--dimension N] [--json]";
const TOPICS: u64 = 500;
const TOPIC_WORDS: u64 = 40;
const COMMON_WORDS: u64 = 5_000;
/// Components per embedding unless `--dimension` says otherwise.
const DEFAULT_DIMENSION: usize = 32;
const FACTS_PER_TX: usize = 100;
const K: usize = 10;

struct Args {
    entities: u64,
    queries: usize,
    dimension: usize,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        entities: 200_000,
        queries: 400,
        dimension: DEFAULT_DIMENSION,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.replace('_', "").parse().ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name} needs a positive number\n{USAGE}"))
        };
        match a.as_str() {
            "--entities" => args.entities = number("--entities")?.max(TOPICS * 2),
            "--queries" => args.queries = number("--queries")? as usize,
            "--dimension" => {
                args.dimension = (number("--dimension")? as usize).min(engram_types::MAX_VECTOR_DIMENSION)
            }
            "--json" => args.json = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
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

fn cites(e: u64, entities: u64) -> u64 {
    // Another topic: shift by a step that is not a multiple of TOPICS.
    (e.wrapping_mul(7919) + 13 + TOPICS / 2) % entities
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

fn datoms_of(e: u64, entities: u64, dimension: usize, tx: TxId) -> Vec<Datom> {
    let t = topic_of(e);
    let ns = Namespace::new("bench/recall").unwrap_or_else(|_| unreachable!("a valid namespace"));
    let attr = |a: &str| Attribute::new(a).unwrap_or_else(|_| unreachable!("a valid attribute"));
    let words = |n: u64, f: &dyn Fn(u64) -> String| (0..n).map(f).collect::<Vec<_>>().join(" ");
    let title = format!("{} u{e}a", words(3, &|i| topic_word(t, e * 10 + i)));
    let body = format!(
        "{} {} u{e}b",
        words(10, &|i| common_word(e * 100 + i)),
        words(4, &|i| topic_word(t, e * 10 + 5 + i))
    );
    let note = words(8, &|i| common_word(e * 100 + 50 + i));
    let d = |a: &str, value: Value| Datom {
        namespace: ns.clone(),
        branch: None,
        entity: EntityId(e + 1),
        attribute: attr(a),
        value,
        op: Op::Assert,
        valid_from_ns: 0,
        valid_to_ns: None,
        tx,
        provenance: Provenance {
            agent: format!("agent-{}", e % 8),
            confidence: 0.5,
            status: Status::Candidate,
            ..Provenance::default()
        },
    };
    vec![
        d(":doc/title", Value::String(title)),
        d(":doc/body", Value::String(body)),
        d(":doc/note", Value::String(note)),
        d(":doc/embedding", Value::Vector(embedding(e, dimension))),
        d(":doc/cites", Value::Ref(EntityId(cites(e, entities) + 1))),
    ]
}

/// One way of asking a labelled query: some of its signals taken away.
type Variant = fn(&Query) -> Query;

struct Labelled {
    query: Query,
    relevant: [EntityId; 2],
}

fn queries(args: &Args, as_of: TxId) -> Vec<Labelled> {
    (0..args.queries as u64)
        .map(|i| {
            let x = mix(0xABCD_0000 + i) % args.entities;
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
            let target = embedding(x, args.dimension);
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
                relevant: [EntityId(x + 1), EntityId(cites(x, args.entities) + 1)],
            }
        })
        .collect()
}

fn recall_at_k(hits: &[Hit], relevant: &[EntityId]) -> f64 {
    let found = relevant
        .iter()
        .filter(|r| hits.iter().take(K).any(|h| h.fact.entity == **r))
        .count();
    found as f64 / relevant.len() as f64
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4096)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

fn run(args: &Args) -> Result<serde_json::Value, String> {
    let scope = Scope {
        namespace: Namespace::new("bench/recall").map_err(|e| e.to_string())?,
        branch: None,
    };
    let rss_before = rss_bytes();
    let started = Instant::now();
    let mut index = RecallIndex::new();
    let mut feeder = Feeder::new();
    let schema = |_: &Scope, _: &Attribute| Indexing {
        cardinality: Cardinality::One,
        searchable: true,
    };
    let mut tx = 0u64;
    let mut pending: Vec<Datom> = Vec::new();
    let mut facts = 0usize;
    for e in 0..args.entities {
        if pending.is_empty() {
            tx += 1;
        }
        pending.extend(datoms_of(e, args.entities, args.dimension, TxId(tx)));
        if pending.len() >= FACTS_PER_TX || e + 1 == args.entities {
            facts += pending.len();
            feeder
                .feed_tx(&mut index, TxId(tx), tx as i64 * 1_000, &pending, schema)
                .map_err(|e| e.to_string())?;
            pending.clear();
        }
    }
    let build = started.elapsed();
    let rss_after = rss_bytes();
    let sizes = index.sizes();
    let as_of = TxId(tx);
    let labelled = queries(args, as_of);

    // Quality per signal: the same queries with parts taken away.
    let variants: [(&str, Variant); 4] = [
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
    let mut quality = serde_json::Map::new();
    let mut by_signal = serde_json::Map::new();
    for (name, variant) in variants {
        let mut sum = 0.0;
        let mut times = Vec::with_capacity(labelled.len());
        for l in &labelled {
            let q = variant(&l.query);
            let t = Instant::now();
            let hits = index.recall(&scope, &q).map_err(|e| e.to_string())?;
            times.push(t.elapsed());
            sum += recall_at_k(&hits, &l.relevant);
        }
        times.sort();
        quality.insert(name.to_string(), json!(sum / labelled.len() as f64));
        by_signal.insert(
            name.to_string(),
            json!({ "p50_ms": percentile(&times, 0.5), "p99_ms": percentile(&times, 0.99) }),
        );
    }

    // Latency of the full query, at 1 and 16 concurrent callers.
    let mut latency = serde_json::Map::new();
    for callers in [1usize, 16] {
        let mut all: Vec<Duration> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..callers)
                .map(|c| {
                    let (index, scope, labelled) = (&index, &scope, &labelled);
                    s.spawn(move || {
                        let mut times = Vec::new();
                        for l in labelled.iter().skip(c).step_by(callers) {
                            let t = Instant::now();
                            let hits = index.recall(scope, &l.query);
                            times.push(t.elapsed());
                            std::hint::black_box(hits.ok());
                        }
                        times
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        all.sort();
        latency.insert(
            format!("{callers}"),
            json!({ "p50_ms": percentile(&all, 0.5), "p99_ms": percentile(&all, 0.99), "queries": all.len() }),
        );
    }
    let grown = rss_after.saturating_sub(rss_before);
    Ok(json!({
        "entities": args.entities,
        "dimension": args.dimension,
        "facts": facts,
        "indexed": { "texts": sizes.texts, "vectors": sizes.vectors, "edges": sizes.edges },
        "build_secs": build.as_secs_f64(),
        "build_facts_per_sec": facts as f64 / build.as_secs_f64(),
        "rss_growth_bytes": grown,
        "bytes_per_million_facts": grown as f64 / (facts as f64 / 1e6),
        "queries": labelled.len(),
        "recall_at_10": quality,
        "latency_by_signal_1_caller": by_signal,
        "latency": latency,
    }))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let report = match run(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("recall: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        println!("{report}");
        return ExitCode::SUCCESS;
    }
    println!(
        "corpus: {} entities, {} facts ({} texts, {} vectors, {} refs indexed)",
        report["entities"],
        report["facts"],
        report["indexed"]["texts"],
        report["indexed"]["vectors"],
        report["indexed"]["edges"]
    );
    println!(
        "build: {:.1} s, {:.0} facts/s; resident memory grew {:.0} MiB ({:.0} MiB per million facts)",
        report["build_secs"].as_f64().unwrap_or(0.0),
        report["build_facts_per_sec"].as_f64().unwrap_or(0.0),
        report["rss_growth_bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
        report["bytes_per_million_facts"].as_f64().unwrap_or(0.0) / (1 << 20) as f64
    );
    println!("recall@10 over {} labelled queries:", report["queries"]);
    if let Some(q) = report["recall_at_10"].as_object() {
        for (name, v) in q {
            let t = &report["latency_by_signal_1_caller"][name];
            println!(
                "  {name:<20} {:.3}   (1 caller: p50 {:.2} ms, p99 {:.2} ms)",
                v.as_f64().unwrap_or(0.0),
                t["p50_ms"].as_f64().unwrap_or(0.0),
                t["p99_ms"].as_f64().unwrap_or(0.0)
            );
        }
    }
    if let Some(l) = report["latency"].as_object() {
        for (callers, v) in l {
            println!(
                "full query, {callers:>2} concurrent: p50 {:.2} ms, p99 {:.2} ms",
                v["p50_ms"].as_f64().unwrap_or(0.0),
                v["p99_ms"].as_f64().unwrap_or(0.0)
            );
        }
    }
    ExitCode::SUCCESS
}
