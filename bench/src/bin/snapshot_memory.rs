//! `snapshot-memory`: how much a node's resident memory grows while it builds, receives and
//! installs a large snapshot, and how long each step takes.
//!
//! Loads a RocksDB-backed state machine with `--values` values (transactions of 10 new
//! entities with one value of about 100 bytes each), then, in one process:
//!
//! 1. builds a snapshot of it (chunks stored in the source's Raft space);
//! 2. receives it into a second store, in the pieces a snapshot stream delivers;
//! 3. installs it there (checksum and audit chain checked, state replaced in batches).
//!
//! A sampler thread reads the resident set size every 20 ms; each step reports its peak
//! growth over the RSS it started at. The target (docs/benchmarks.md): at most 512 MiB of
//! growth at 10 M values, where a snapshot held whole would grow by its size at least.
//!
//! Usage: `snapshot-memory [--values N] [--json]`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use engram_audit::{KeyRing, NodeKey};
use engram_bench::args::positive;
use engram_bench::process::rss_bytes;
use engram_core::CheckpointPolicy;
use engram_raft::{Command, Entry, LogId, NodeInfo, StateMachine, TypeConfig};
use engram_storage::Store;
use engram_storage_rocks::RocksStore;
use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, Status, TxOp, TxRequest, Value};
use openraft::entry::RaftEntry;
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::vote::RaftLeaderIdExt;
use serde_json::json;

const USAGE: &str = "usage: snapshot-memory [--values N] [--json]";
const VALUES_PER_TX: u64 = 10;
const TARGET_GROWTH_BYTES: u64 = 512 << 20;

struct Args {
    values: u64,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        values: 10_000_000,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut number = |name: &str| positive(&mut it, name, USAGE);
        match a.as_str() {
            "--values" => args.values = number("--values")?,
            "--json" => args.json = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// Samples the RSS every 20 ms and keeps the highest reading since the last `reset`.
struct Sampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Sampler {
    fn start() -> Sampler {
        let peak = Arc::new(AtomicU64::new(rss_bytes("self")));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_bytes("self"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Sampler { peak, stop }
    }

    /// Starts a step: returns the RSS now, and the peak counts from here.
    fn reset(&self) -> u64 {
        let now = rss_bytes("self");
        self.peak.store(now, Ordering::Relaxed);
        now
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed).max(rss_bytes("self"))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct Step {
    name: &'static str,
    secs: f64,
    start_rss: u64,
    peak_growth: u64,
}

fn log_id(index: u64) -> LogId {
    LogId {
        leader_id: openraft::alias::LeaderIdOf::<TypeConfig>::new_committed(1, 1),
        index,
    }
}

fn write(index: u64) -> Entry {
    let attribute = Attribute::new(":bench/v").expect("a valid attribute");
    let ops = (0..VALUES_PER_TX)
        .map(|i| TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp(format!("e{i}")),
            attribute: attribute.clone(),
            value: Value::String(format!("{index:>12}-{i:>3}-{}", "v".repeat(80))),
            valid_from_ns: None,
            valid_to_ns: None,
        })
        .collect();
    let request = TxRequest {
        namespace: Namespace::new("bench/snapshot").expect("a valid namespace"),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops,
        preconditions: vec![],
        idempotency_key: None,
        provenance: Provenance {
            agent: "bench".into(),
            confidence: 1.0,
            status: Status::Candidate,
            ..Default::default()
        },
    };
    Entry::new_normal(
        log_id(index),
        Command::Transact {
            request,
            proposed_time_ns: index as i64 * 1_000,
        },
    )
}

fn open(store: Arc<dyn Store>, key: &Arc<NodeKey>) -> anyhow::Result<StateMachine> {
    Ok(StateMachine::open(
        store,
        Arc::new(KeyRing::new(key.clone())),
        CheckpointPolicy::default(),
    )?)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

async fn run(args: &Args) -> anyhow::Result<bool> {
    let dir = tempfile::tempdir()?;
    let key = Arc::new(NodeKey::from_seed([7; 32]));
    let source_store: Arc<dyn Store> = Arc::new(RocksStore::open(&dir.path().join("source"))?);
    let mut source = open(source_store.clone(), &key)?;
    let members = openraft::Membership::new(
        vec![std::collections::BTreeSet::from([1])],
        std::collections::BTreeMap::from([(
            1,
            NodeInfo {
                addr: "127.0.0.1:1".into(),
                public_key: key.public().0,
            },
        )]),
    )?;
    let genesis = vec![Entry::new_membership(log_id(1), members)];
    source
        .apply(futures::stream::iter(genesis.into_iter().map(|e| Ok((e, None)))))
        .await?;
    let txs = args.values.div_ceil(VALUES_PER_TX);
    let load_started = Instant::now();
    let mut next = 2;
    while next < txs + 2 {
        let last = (next + 4096).min(txs + 2);
        let entries: Vec<_> = (next..last).map(|i| Ok((write(i), None))).collect();
        source.apply(futures::stream::iter(entries)).await?;
        next = last;
        if !args.json {
            eprint!(
                "\rloading: {} of {} values",
                (next - 2) * VALUES_PER_TX,
                txs * VALUES_PER_TX
            );
        }
    }
    if !args.json {
        eprintln!(" in {:.1} s", load_started.elapsed().as_secs_f64());
    }

    let sampler = Sampler::start();
    let mut steps = Vec::new();
    let mut step = |name: &'static str, started: Instant, start_rss: u64| {
        steps.push(Step {
            name,
            secs: started.elapsed().as_secs_f64(),
            start_rss,
            peak_growth: sampler.peak().saturating_sub(start_rss),
        });
    };

    let (start_rss, started) = (sampler.reset(), Instant::now());
    let snapshot = source.get_snapshot_builder().await.build_snapshot().await?;
    step("build", started, start_rss);
    let data = snapshot.snapshot.data.clone();

    let target_store: Arc<dyn Store> = Arc::new(RocksStore::open(&dir.path().join("target"))?);
    let mut target = open(target_store, &key)?;
    let (start_rss, started) = (sampler.reset(), Instant::now());
    let snapshots = target.snapshots();
    let mut receiving = snapshots.receive(data.bytes)?;
    for seq in 0..data.chunks {
        receiving.push(&snapshot.snapshot.read_chunk(seq)?)?;
    }
    let received = receiving.finish(&data.data_hash)?;
    step("receive", started, start_rss);

    let (start_rss, started) = (sampler.reset(), Instant::now());
    target.install_snapshot(&snapshot.meta, received).await?;
    step("install", started, start_rss);

    let worst = steps.iter().map(|s| s.peak_growth).max().unwrap_or(0);
    let met = worst <= TARGET_GROWTH_BYTES;
    if args.json {
        let report = json!({
            "values": txs * VALUES_PER_TX,
            "snapshot_bytes": data.bytes,
            "snapshot_chunks": data.chunks,
            "steps": steps.iter().map(|s| json!({
                "step": s.name,
                "seconds": s.secs,
                "rss_at_start_bytes": s.start_rss,
                "peak_rss_growth_bytes": s.peak_growth,
            })).collect::<Vec<_>>(),
            "target_peak_growth_bytes": TARGET_GROWTH_BYTES,
            "target_met": met,
        });
        println!("{report:#}");
    } else {
        println!(
            "snapshot of {} values: {:.2} GiB in {} chunks",
            txs * VALUES_PER_TX,
            gib(data.bytes),
            data.chunks
        );
        println!("step       seconds   RSS at start   peak growth");
        for s in &steps {
            println!(
                "{:<8} {:>9.1} {:>10.0} MiB {:>9.0} MiB",
                s.name,
                s.secs,
                mib(s.start_rss),
                mib(s.peak_growth)
            );
        }
        println!(
            "target: peak growth <= {:.0} MiB in every step: {}",
            mib(TARGET_GROWTH_BYTES),
            if met { "met" } else { "NOT met" }
        );
    }
    Ok(met)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("snapshot-memory: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("snapshot-memory: {e:#}");
            ExitCode::FAILURE
        }
    }
}
