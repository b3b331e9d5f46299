//! `recall`: how well and how fast Engram's recall finds what a labelled query is after, per
//! signal and fused, over a generated corpus of a million facts: in process, and with
//! `--cluster` also end to end through a 3-node cluster, and a follower's restart timed with
//! its index rebuilt from the log and read from its save.
//!
//! The corpus (deterministic; `--entities N` documents, 5 facts each): every document has a
//! topic (one of 500), a `:doc/title` (three topic words and one word only it has), a
//! `:doc/body` (common words, topic words and a second word only it has), a `:doc/note`
//! (common words), a 32-component (`--dimension`) `:doc/embedding` (its topic's direction plus
//! noise of its own) and a `:doc/cites` ref to a document of another topic.
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
//! In process (always): the corpus is fed through the same feeder the server uses, in
//! transactions of 100 facts, straight into an index in this process: no gRPC, no store
//! reads. Reported: recall@10 for words alone, the vector alone, both fused, and both with the
//! graph (the full query); the build rate; resident memory per million facts; the full query's
//! p50/p99 latency at 1 and 16 concurrent callers (threads on this machine's cores).
//!
//! Through a cluster (`--cluster`, see `cluster.rs`): the same corpus written to a 3-node
//! cluster with `Memory.Transact`, the same queries asked with `Memory.Search` (linearizable,
//! at the leader), over gRPC on loopback: recall@10 per signal, latency at 1 and 16 clients,
//! the load rate and the nodes' resident memory.
//!
//! Usage: `recall [--entities N] [--queries N] [--dimension N] [--cluster] [--recall-save-ms MS]
//! [--engram-bin FILE] [--json]` (`--recall-save-ms`: how often the cluster's nodes save their
//! index; the server's default unless given).

mod cluster;
mod corpus;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use corpus::{K, NAMESPACE, Shape, TOPICS, VARIANTS, percentile_ms, share_found};
use engram_bench::args::positive;
use engram_bench::process::{engram_exe, rss_bytes};
use engram_recall::{Feeder, Indexing, RecallIndex, SavedAt, Scope};
use engram_types::{Attribute, Cardinality, Datom, EntityId, Namespace, Op, Provenance, Status, TxId, Value};
use serde_json::json;

const USAGE: &str = "usage: recall [--entities N] [--queries N] [--dimension N] [--cluster] [--recall-save-ms MS] [--engram-bin FILE] [--json]";
/// Components per embedding unless `--dimension` says otherwise.
const DEFAULT_DIMENSION: usize = 32;
const FACTS_PER_TX: usize = 100;

struct Args {
    shape: Shape,
    /// Also run the corpus through a 3-node cluster.
    cluster: bool,
    /// The `engram` executable the cluster runs (default: the one beside this binary).
    engram_bin: Option<PathBuf>,
    /// How often the cluster's nodes save their recall index (`None`: the server's default).
    save_ms: Option<u64>,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        shape: Shape {
            documents: 200_000,
            queries: 400,
            dimension: DEFAULT_DIMENSION,
        },
        cluster: false,
        engram_bin: None,
        save_ms: None,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut number = |name: &str| positive(&mut it, name, USAGE);
        match a.as_str() {
            "--entities" => args.shape.documents = number("--entities")?.max(TOPICS * 2),
            "--queries" => args.shape.queries = number("--queries")? as usize,
            "--dimension" => {
                args.shape.dimension =
                    (number("--dimension")? as usize).min(engram_types::MAX_VECTOR_DIMENSION)
            }
            "--cluster" => args.cluster = true,
            "--recall-save-ms" => args.save_ms = Some(number("--recall-save-ms")?),
            "--engram-bin" => {
                args.engram_bin = Some(
                    it.next()
                        .map(PathBuf::from)
                        .ok_or_else(|| format!("--engram-bin needs a file\n{USAGE}"))?,
                )
            }
            "--json" => args.json = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn datoms_of(e: u64, documents: u64, dimension: usize, tx: TxId) -> Vec<Datom> {
    let ns = Namespace::new(NAMESPACE).unwrap_or_else(|_| unreachable!("a valid namespace"));
    let attr = |a: &str| Attribute::new(a).unwrap_or_else(|_| unreachable!("a valid attribute"));
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
        salt: None,
    };
    let mut datoms: Vec<Datom> = corpus::facts_of(e, dimension)
        .into_iter()
        .map(|(a, v)| d(a, v))
        .collect();
    datoms.push(d(
        corpus::CITES,
        Value::Ref(EntityId(corpus::cites(e, documents) + 1)),
    ));
    datoms
}

fn in_process(shape: Shape) -> Result<serde_json::Value, String> {
    let scope = Scope {
        namespace: Namespace::new(NAMESPACE).map_err(|e| e.to_string())?,
        branch: None,
    };
    let rss_before = rss_bytes("self");
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
    for e in 0..shape.documents {
        if pending.is_empty() {
            tx += 1;
        }
        pending.extend(datoms_of(e, shape.documents, shape.dimension, TxId(tx)));
        if pending.len() >= FACTS_PER_TX || e + 1 == shape.documents {
            facts += pending.len();
            feeder
                .feed_tx(&mut index, TxId(tx), tx as i64 * 1_000, &pending, schema)
                .map_err(|e| e.to_string())?;
            pending.clear();
        }
    }
    let build = started.elapsed();
    let rss_after = rss_bytes("self");
    let sizes = index.sizes();
    let labelled = corpus::queries(shape, TxId(tx));
    let relevant = |r: &[u64; 2]| r.map(|d| EntityId(d + 1));

    // Quality per signal: the same queries with parts taken away.
    let mut quality = serde_json::Map::new();
    let mut by_signal = serde_json::Map::new();
    for (name, variant) in VARIANTS {
        let mut sum = 0.0;
        let mut times = Vec::with_capacity(labelled.len());
        for l in &labelled {
            let q = variant(&l.query);
            let t = Instant::now();
            let hits = index.recall(&scope, &q).map_err(|e| e.to_string())?;
            times.push(t.elapsed());
            let entities: Vec<EntityId> = hits.iter().map(|h| h.fact.entity).collect();
            sum += share_found(&entities, &relevant(&l.relevant));
        }
        times.sort();
        quality.insert(name.to_string(), json!(sum / labelled.len() as f64));
        by_signal.insert(
            name.to_string(),
            json!({ "p50_ms": percentile_ms(&times, 0.5), "p99_ms": percentile_ms(&times, 0.99) }),
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
            json!({ "p50_ms": percentile_ms(&all, 0.5), "p99_ms": percentile_ms(&all, 0.99), "queries": all.len() }),
        );
    }
    // A save of the whole index, as a node writes one (the encoding is what holds the index's
    // lock), and reading it back, as a restarted node does.
    let at = SavedAt {
        next: TxId(tx + 1),
        anchor: None,
        redactions_seen: 0,
    };
    // A node knows its last save's length; the first save here does not: it is timed as a
    // node's later saves are, sized from one made before.
    let first = engram_recall::save(&index, &feeder, &at, 0).map_err(|e| e.to_string())?;
    let size_hint = first.len();
    drop(first);
    let t = Instant::now();
    let saved = engram_recall::save(&index, &feeder, &at, size_hint).map_err(|e| e.to_string())?;
    let encode = t.elapsed();
    let t = Instant::now();
    let (loaded, _, _) = engram_recall::load(&saved).map_err(|e| e.to_string())?;
    let decode = t.elapsed();
    if loaded.sizes() != sizes {
        return Err(format!(
            "the save read back holds {:?}, not {sizes:?}",
            loaded.sizes()
        ));
    }
    drop(loaded);
    let grown = rss_after.saturating_sub(rss_before);
    Ok(json!({
        "save": { "bytes": saved.len(), "encode_secs": encode.as_secs_f64(), "decode_secs": decode.as_secs_f64() },
        "facts": facts,
        "indexed": { "texts": sizes.texts, "vectors": sizes.vectors, "edges": sizes.edges },
        "build_secs": build.as_secs_f64(),
        "build_facts_per_sec": facts as f64 / build.as_secs_f64(),
        "rss_growth_bytes": grown,
        "bytes_per_million_facts": grown as f64 / (facts as f64 / 1e6),
        "recall_at_10": quality,
        "latency_by_signal_1_caller": by_signal,
        "latency": latency,
    }))
}

fn run(args: &Args) -> Result<serde_json::Value, String> {
    let local = in_process(args.shape)?;
    let through_cluster = if args.cluster {
        let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("starting tokio: {e}"))?;
        let exe = engram_exe(args.engram_bin.clone())?;
        Some(
            runtime
                .block_on(cluster::run(&exe, args.shape, args.save_ms, args.json))
                .map_err(|e| format!("{e:#}"))?,
        )
    } else {
        None
    };
    Ok(json!({
        "entities": args.shape.documents,
        "dimension": args.shape.dimension,
        "queries": args.shape.queries,
        "k": K,
        "in_process": local,
        "cluster": through_cluster,
    }))
}

fn print_quality(report: &serde_json::Value) {
    for (name, _) in VARIANTS {
        let (v, t) = (
            &report["recall_at_10"][name],
            &report["latency_by_signal_1_caller"][name],
        );
        println!(
            "  {name:<20} {:.3}   (1 caller: p50 {:.2} ms, p99 {:.2} ms)",
            v.as_f64().unwrap_or(0.0),
            t["p50_ms"].as_f64().unwrap_or(0.0),
            t["p99_ms"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(l) = report["latency"].as_object() {
        for (callers, v) in l {
            println!(
                "  full query, {callers:>2} concurrent: p50 {:.2} ms, p99 {:.2} ms",
                v["p50_ms"].as_f64().unwrap_or(0.0),
                v["p99_ms"].as_f64().unwrap_or(0.0)
            );
        }
    }
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
    let local = &report["in_process"];
    let mib = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0) / (1 << 20) as f64;
    println!(
        "corpus: {} entities, {} facts ({} texts, {} vectors, {} refs indexed), {} labelled queries",
        report["entities"],
        local["facts"],
        local["indexed"]["texts"],
        local["indexed"]["vectors"],
        local["indexed"]["edges"],
        report["queries"]
    );
    println!("in process:");
    println!(
        "  build: {:.1} s, {:.0} facts/s; resident memory grew {:.0} MiB ({:.0} MiB per million facts)",
        local["build_secs"].as_f64().unwrap_or(0.0),
        local["build_facts_per_sec"].as_f64().unwrap_or(0.0),
        mib(&local["rss_growth_bytes"]),
        mib(&local["bytes_per_million_facts"])
    );
    println!(
        "  a save of the index: {:.0} MiB, encoded in {:.2} s, read back in {:.2} s",
        mib(&local["save"]["bytes"]),
        local["save"]["encode_secs"].as_f64().unwrap_or(0.0),
        local["save"]["decode_secs"].as_f64().unwrap_or(0.0)
    );
    println!("  recall@10:");
    print_quality(local);
    let remote = &report["cluster"];
    if remote.is_object() {
        println!("through a 3-node cluster (gRPC on loopback, linearizable searches at the leader):");
        println!(
            "  load: {} facts in {} transactions, {:.1} s, {:.0} facts/s; node resident memory after the queries: {}",
            remote["facts"],
            remote["transactions"],
            remote["load_secs"].as_f64().unwrap_or(0.0),
            remote["load_facts_per_sec"].as_f64().unwrap_or(0.0),
            remote["node_rss_bytes"]
                .as_array()
                .map(|a| a
                    .iter()
                    .map(|b| format!("{:.0} MiB", mib(b)))
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        );
        println!("  recall@10:");
        print_quality(remote);
        for (name, what) in [
            (
                "rebuilt_from_log",
                "its save removed, the index rebuilt from the log",
            ),
            ("from_save", "the index read from its save"),
        ] {
            let r = &remote["restart"][name];
            println!(
                "  a follower restarted, {what}: first search over the whole load {:.1} s after the start; resident memory {:.0} MiB{}",
                r["first_search_secs"].as_f64().unwrap_or(0.0),
                mib(&r["node_rss_bytes"]),
                match r["save_bytes"].as_u64() {
                    Some(b) if b > 0 => format!("; save {:.0} MiB", b as f64 / (1 << 20) as f64),
                    _ => String::new(),
                }
            );
        }
    }
    ExitCode::SUCCESS
}
