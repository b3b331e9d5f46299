//! `redaction`: what forgetting costs on a real 3-node cluster (`engram serve` processes on
//! loopback), for the targets of docs/benchmarks.md, "Redaction and salted commitments":
//!
//! 1. **Space**, with no other load: loads `--space-entities` entities of 1,000 datoms each
//!    (values of `--value-bytes` random hex characters, which the store's compression cannot
//!    shrink), redacts one other datom and waits until every node has purged it (so every
//!    node's files are freshly compacted), reads the size of each node's data directory, then
//!    redacts those entities, waits for the purge again and reads the sizes again. Reported:
//!    how much each node shrank against the values' bytes, and what a redacted datom still
//!    costs (its row without the value, its 45 bytes in the record, the record's entry).
//! 2. **Writes while redacting**: `--writers` clients write one-datom transactions to another
//!    namespace the whole time; after `--before-secs` the bench redacts `--entities` entities
//!    of 1,000 datoms each, one redaction after another, then waits until every node reports
//!    them purged. Reported: write p50/p99 before, during the redactions and during the purge,
//!    and the time until every node has purged. With `--by-predicate`, those entities go in
//!    one redaction by predicate of the whole namespace instead (`Client::redact_where`,
//!    applied in ranges), passing over the datoms phase 1 already redacted.
//!
//! Usage: `redaction [--engram-bin PATH] [--entities N] [--space-entities N] [--value-bytes N]
//! [--writers N] [--before-secs N] [--by-predicate] [--json]`. Exits 1 if a redaction or the
//! purge fails.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use engram_bench::args::positive;
use engram_bench::engram::BenchCluster;
use engram_bench::process::engram_exe;
use engram_cli::ui::Ui;
use engram_client::{Client, ClientConfig};
use engram_types::{
    Attribute, EntityId, EntityRef, Namespace, Op, Provenance, RedactRequest, Status, TxOp, TxRequest, Value,
};
use serde_json::json;

const USAGE: &str = "usage: redaction [--engram-bin PATH] [--entities N] [--space-entities N] \
                     [--value-bytes N] [--writers N] [--before-secs N] [--by-predicate] [--json]";
/// Datoms per redacted entity: the most one redaction took before redactions were applied in
/// parts, kept so figures compare across builds (a node applies it in parts of 100 now).
const DATOMS_PER_ENTITY: usize = 1_000;
/// How long the bench waits for every node to report a purge.
const PURGE_TIMEOUT: Duration = Duration::from_secs(600);

struct Args {
    /// The `engram` executable [default: the one beside this binary].
    engram_bin: Option<PathBuf>,
    entities: u64,
    space_entities: u64,
    value_bytes: u64,
    writers: u64,
    before_secs: u64,
    by_predicate: bool,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        engram_bin: None,
        entities: 100,
        space_entities: 20,
        value_bytes: 100,
        writers: 16,
        before_secs: 10,
        by_predicate: false,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut number = |name: &str| positive(&mut it, name, USAGE);
        match a.as_str() {
            "--engram-bin" => {
                args.engram_bin = Some(PathBuf::from(it.next().ok_or_else(|| USAGE.to_string())?))
            }
            "--entities" => args.entities = number("--entities")?,
            "--space-entities" => args.space_entities = number("--space-entities")?,
            "--value-bytes" => args.value_bytes = number("--value-bytes")?,
            "--writers" => args.writers = number("--writers")?,
            "--before-secs" => args.before_secs = number("--before-secs")?,
            "--by-predicate" => args.by_predicate = true,
            "--json" => args.json = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn provenance() -> Provenance {
    Provenance {
        agent: "redaction-bench".to_string(),
        confidence: 1.0,
        status: Status::Candidate,
        ..Provenance::default()
    }
}

fn namespace(name: &str) -> Result<Namespace> {
    Namespace::new(name).map_err(|e| anyhow!("{name}: {e}"))
}

/// `n` hex characters from a xorshift stream: incompressible to LZ4, distinct per seed.
fn random_hex(state: &mut u64, n: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            HEX[(*state & 15) as usize] as char
        })
        .collect()
}

/// Writes `count` entities of [`DATOMS_PER_ENTITY`] datoms each (one attribute per datom) and
/// returns their ids.
async fn load(
    client: &Client,
    ns: &Namespace,
    count: u64,
    value_bytes: usize,
    seed: u64,
) -> Result<Vec<u64>> {
    let mut state = seed | 1;
    let mut ids = Vec::new();
    for _ in 0..count {
        let ops = (0..DATOMS_PER_ENTITY)
            .map(|i| {
                Ok(TxOp {
                    op: Op::Assert,
                    entity: EntityRef::Temp("e".into()),
                    attribute: Attribute::new(format!(":secret/v{i}")).map_err(|e| anyhow!("{e}"))?,
                    value: Value::String(random_hex(&mut state, value_bytes)),
                    valid_from_ns: None,
                    valid_to_ns: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let receipt = client
            .transact(&TxRequest::data(ns.clone(), ops, provenance()))
            .await
            .context("loading an entity")?;
        let id = receipt
            .temp_ids
            .get("e")
            .copied()
            .ok_or_else(|| anyhow!("the load's receipt names no entity"))?;
        ids.push(id);
    }
    Ok(ids)
}

/// Redacts every datom of each entity, one redaction after another; returns the last
/// redaction's transaction.
async fn redact_all(client: &Client, ns: &Namespace, ids: &[u64]) -> Result<u64> {
    let mut last = 0;
    for id in ids {
        let req = RedactRequest {
            namespace: ns.clone(),
            entity: EntityId(*id),
            attribute: None,
            reason: "redaction bench".into(),
            provenance: provenance(),
        };
        let done = client.redact(&req, false).await.context("a redaction")?;
        last = done.tx;
    }
    Ok(last)
}

/// Redacts every datom of the namespace left with its value, in one redaction by predicate;
/// returns its last range's transaction.
async fn redact_namespace(client: &Client, ns: &Namespace) -> Result<u64> {
    let req = engram_types::RedactWhere {
        namespace: ns.clone(),
        predicate: engram_types::Predicate::default(),
        reason: "redaction bench".into(),
        provenance: provenance(),
    };
    let done = client
        .redact_where(&req, false)
        .await
        .context("a redaction by predicate")?;
    Ok(done.tx)
}

/// Waits until every node reports redactions purged through `tx`.
async fn wait_purged(bench: &BenchCluster, tx: u64) -> Result<()> {
    let deadline = Instant::now() + PURGE_TIMEOUT;
    loop {
        let statuses = bench.cluster.statuses().await;
        let done = statuses
            .iter()
            .all(|(_, s)| s.as_ref().is_ok_and(|s| s.redactions_purged_index >= tx));
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("not every node purged redaction {tx} within {PURGE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

fn node_bytes(bench: &BenchCluster) -> Vec<u64> {
    bench
        .cluster
        .nodes()
        .iter()
        .map(|n| dir_bytes(&n.data_dir))
        .collect()
}

/// One write's start, in seconds from the bench's start, and its latency.
type Sample = (f64, Duration);

/// Writes one-datom transactions until `stop`; returns every write's [`Sample`].
async fn writer(
    client: Client,
    ns: Namespace,
    w: u64,
    epoch: Instant,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Sample>> {
    let mut samples = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15 ^ w;
    let attribute = Attribute::new(":load/v").map_err(|e| anyhow!("{e}"))?;
    while !stop.load(Ordering::Relaxed) {
        let op = TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp("w".into()),
            attribute: attribute.clone(),
            value: Value::String(random_hex(&mut state, 100)),
            valid_from_ns: None,
            valid_to_ns: None,
        };
        let started = Instant::now();
        client
            .transact(&TxRequest::data(ns.clone(), vec![op], provenance()))
            .await
            .context("a write under load")?;
        samples.push((started.duration_since(epoch).as_secs_f64(), started.elapsed()));
    }
    Ok(samples)
}

/// p50 and p99 in milliseconds of the samples that started in `[from, to)` seconds, and how
/// many there were.
fn window(samples: &[Sample], from: f64, to: f64) -> serde_json::Value {
    let mut ms: Vec<f64> = samples
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(_, d)| d.as_secs_f64() * 1e3)
        .collect();
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| {
        if ms.is_empty() {
            0.0
        } else {
            ms[(((ms.len() - 1) as f64) * p).round() as usize]
        }
    };
    json!({
        "writes": ms.len(),
        "writes_per_sec": ms.len() as f64 / (to - from).max(1e-9),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
    })
}

async fn run(args: &Args) -> Result<serde_json::Value> {
    let ui = Ui::new(args.json);
    let exe = engram_exe(args.engram_bin.clone()).map_err(|e| anyhow!(e))?;
    let bench = BenchCluster::start(&exe, None, 100_000, false, None, ui).await?;
    let config = ClientConfig {
        request_timeout: Duration::from_secs(120),
        ..ClientConfig::default()
    };
    let client = Client::with_config(vec![bench.leader.clone()], config.clone())?;
    let secrets = namespace("bench/secrets")?;
    let value_bytes = usize::try_from(args.value_bytes)?;

    // 1. Space, quiet.
    let pb = ui.spinner(format!(
        "loading {} entities of {DATOMS_PER_ENTITY} datoms",
        args.space_entities + args.entities + 1
    ));
    let canary = load(&client, &secrets, 1, 8, 1).await?;
    let space_ids = load(&client, &secrets, args.space_entities, value_bytes, 2).await?;
    let load_ids = load(&client, &secrets, args.entities, value_bytes, 3).await?;
    ui.done(&pb, "loaded");
    let pb = ui.spinner("a first redaction and its purge (every node's files compacted)");
    let canary_tx = redact_all(&client, &secrets, &canary).await?;
    wait_purged(&bench, canary_tx).await?;
    let before = node_bytes(&bench);
    ui.done(&pb, "compacted");
    let pb = ui.spinner(format!(
        "redacting {} entities, no other load",
        args.space_entities
    ));
    let started = Instant::now();
    let space_tx = redact_all(&client, &secrets, &space_ids).await?;
    let space_redact_secs = started.elapsed().as_secs_f64();
    wait_purged(&bench, space_tx).await?;
    let space_purged_secs = started.elapsed().as_secs_f64();
    let after = node_bytes(&bench);
    ui.done(&pb, "purged");
    let space_datoms = args.space_entities * DATOMS_PER_ENTITY as u64;
    let values_bytes = space_datoms * args.value_bytes;
    let per_node: Vec<serde_json::Value> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| {
            let shrink = *b as i64 - *a as i64;
            json!({
                "bytes_before": b,
                "bytes_after": a,
                "shrink_bytes": shrink,
                "shrink_of_values": shrink as f64 / values_bytes as f64,
                // Per datom, the store after against the store before less each value once; a
                // node holds a value in its state row and in each kept snapshot, so this is a
                // lower bound of what a redacted datom keeps (docs/benchmarks.md).
                "bytes_kept_per_datom": (*a as f64 - (*b as f64 - values_bytes as f64)) / space_datoms as f64,
            })
        })
        .collect();

    // 2. Writes while redacting.
    let writes = namespace("bench/writes")?;
    let stop = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..args.writers {
        let c = Client::with_config(vec![bench.leader.clone()], config.clone())?;
        tasks.push(tokio::spawn(writer(c, writes.clone(), w, epoch, stop.clone())));
    }
    let pb = ui.spinner(format!(
        "{} writers: {} s before, then {} redactions of {DATOMS_PER_ENTITY} datoms",
        args.writers, args.before_secs, args.entities
    ));
    tokio::time::sleep(Duration::from_secs(args.before_secs)).await;
    // The first second is warm-up.
    let warm = 1.0f64.min(args.before_secs as f64 / 2.0);
    let redact_from = epoch.elapsed().as_secs_f64();
    let last_tx = match args.by_predicate {
        true => redact_namespace(&client, &secrets).await?,
        false => redact_all(&client, &secrets, &load_ids).await?,
    };
    let redact_to = epoch.elapsed().as_secs_f64();
    wait_purged(&bench, last_tx).await?;
    let purged_at = epoch.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await.context("a writer task")??);
    }
    ui.done(&pb, "every node purged");
    let before_w = window(&samples, warm, redact_from);
    let during = window(&samples, redact_from, redact_to);
    let purging = window(&samples, redact_to, purged_at);
    let ratio = |w: &serde_json::Value| {
        w["p99_ms"].as_f64().unwrap_or(0.0) / before_w["p99_ms"].as_f64().unwrap_or(f64::NAN)
    };
    Ok(json!({
        "value_bytes": args.value_bytes,
        "space": {
            "redacted_datoms": space_datoms,
            "values_bytes_per_node": values_bytes,
            "redact_secs": space_redact_secs,
            "until_every_node_purged_secs": space_purged_secs,
            "nodes": per_node,
        },
        "under_load": {
            "writers": args.writers,
            "redacted_datoms": args.entities * DATOMS_PER_ENTITY as u64,
            "redactions": if args.by_predicate { 1 } else { args.entities },
            "by_predicate": args.by_predicate,
            "redact_secs": redact_to - redact_from,
            "until_every_node_purged_secs": purged_at - redact_from,
            "writes_before": before_w,
            "writes_during_redactions": during,
            "writes_during_purge": purging,
            "p99_during_over_before": ratio(&during),
            "p99_purge_over_before": ratio(&purging),
        },
    }))
}

fn print_text(r: &serde_json::Value) {
    let s = &r["space"];
    println!(
        "space: {} datoms of {} bytes redacted with no other load in {:.1} s; every node purged after {:.1} s",
        s["redacted_datoms"],
        r["value_bytes"],
        s["redact_secs"].as_f64().unwrap_or(0.0),
        s["until_every_node_purged_secs"].as_f64().unwrap_or(0.0)
    );
    for (i, n) in s["nodes"].as_array().into_iter().flatten().enumerate() {
        println!(
            "  node {}: {} -> {} bytes, shrank by {:.0}% of the values' bytes; per datom, {:.0} bytes more than a store that lost each value once (it holds several copies: docs/benchmarks.md)",
            i + 1,
            n["bytes_before"],
            n["bytes_after"],
            n["shrink_of_values"].as_f64().unwrap_or(0.0) * 100.0,
            n["bytes_kept_per_datom"].as_f64().unwrap_or(0.0)
        );
    }
    let u = &r["under_load"];
    println!(
        "under load: {} writers; {} datoms in {} redactions took {:.1} s; every node purged {:.1} s after the first",
        u["writers"],
        u["redacted_datoms"],
        u["redactions"],
        u["redact_secs"].as_f64().unwrap_or(0.0),
        u["until_every_node_purged_secs"].as_f64().unwrap_or(0.0)
    );
    for (name, key) in [
        ("before", "writes_before"),
        ("during the redactions", "writes_during_redactions"),
        ("during the purge", "writes_during_purge"),
    ] {
        let w = &u[key];
        println!(
            "  writes {name}: {} ({:.0}/s), p50 {:.2} ms, p99 {:.2} ms",
            w["writes"],
            w["writes_per_sec"].as_f64().unwrap_or(0.0),
            w["p50_ms"].as_f64().unwrap_or(0.0),
            w["p99_ms"].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "  p99 during the redactions / before: {:.2}x; during the purge / before: {:.2}x (target <= 2x)",
        u["p99_during_over_before"].as_f64().unwrap_or(f64::NAN),
        u["p99_purge_over_before"].as_f64().unwrap_or(f64::NAN)
    );
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("redaction: no async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(report) => {
            if args.json {
                println!("{report}");
            } else {
                print_text(&report);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("redaction: {e:#}");
            ExitCode::FAILURE
        }
    }
}
