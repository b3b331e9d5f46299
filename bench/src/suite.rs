//! What a bench run of the closed-loop suite measures: the flags `load` and `versus` share
//! ([`BenchArgs`]), checked ([`check_args`]) and turned into the load generator's
//! [`SuiteSpec`] ([`suite_spec`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use engram_loadgen::{ReadKind, SuiteSpec, WatchLayout};
use engram_types::TxRequest;

/// What `load` and `versus` measure.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Which parts to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "writes,reads,history,watch",
        value_name = "LIST"
    )]
    pub phases: Vec<BenchPhase>,
    /// Concurrent closed-loop clients of the write and point-read runs.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,16,64,256",
        value_name = "LIST"
    )]
    pub clients: Vec<usize>,
    /// Datoms per write transaction (each a new entity's value).
    #[arg(long, value_delimiter = ',', default_value = "1", value_name = "LIST")]
    pub datoms: Vec<usize>,
    /// Bytes per written value.
    #[arg(long, value_delimiter = ',', default_value = "100", value_name = "LIST")]
    pub value_bytes: Vec<usize>,
    /// Keys loaded for the point reads.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub keys: usize,
    /// Store sizes (values written by the preload, keys rewritten in turn) at which as-of reads
    /// and histories are measured.
    #[arg(long, value_delimiter = ',', default_value = "1000000", value_name = "LIST")]
    pub history_values: Vec<u64>,
    /// Client counts of the as-of and history runs.
    #[arg(long, value_delimiter = ',', default_value = "1,16", value_name = "LIST")]
    pub history_clients: Vec<usize>,
    /// Subscriber counts of the Watch fan-out runs.
    #[arg(long, value_delimiter = ',', default_value = "100", value_name = "LIST")]
    pub subscribers: Vec<usize>,
    /// How the fan-out's subscribers connect: each on its own connection, multiplexed over
    /// the --connections shared ones, or both in turn.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "own,shared",
        value_name = "LIST"
    )]
    pub watch_layouts: Vec<BenchWatchLayout>,
    /// Markers written per fan-out run (each one transaction).
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub markers: u64,
    /// Measured seconds per point.
    #[arg(long, default_value_t = 10, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub seconds: u64,
    /// Unmeasured seconds before each point.
    #[arg(long, default_value_t = 2, value_name = "S")]
    pub warmup_secs: u64,
    /// Measure every point this many times (systems taking turns); the table shows the median.
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// gRPC connections per system (clients share them round-robin).
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub connections: u64,
    /// Build a snapshot every this many entries on the bench cluster (etcd's default
    /// --snapshot-count is the same).
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub snapshot_every_entries: u64,
    /// Keep the nodes' data and logs here instead of a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Declare the written attribute (`:bench/value`) a string that is not searchable before
    /// the run, so the writes feed no recall index: the "without" of a with/without comparison.
    /// By default its first value declares it, and an implicitly declared string is searchable.
    #[arg(long)]
    pub unsearchable: bool,
    /// Measure the cluster at --endpoint (the first is taken to lead) instead of starting one;
    /// server CPU is then not measured.
    #[arg(long)]
    pub attach: bool,
    /// The mode of the cluster the bench starts: enforced signs every request (as the
    /// cluster's administrator) and checks it at the gate and at apply. With --attach, sign
    /// with --agent-key instead.
    #[arg(long, default_value = "open", value_name = "open|enforced")]
    pub security: engram_access::Mode,
    /// Also write the full report (every round, latency CDFs) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchWatchLayout {
    /// A connection per subscriber.
    Own,
    /// Subscribers multiplexed over the shared connections.
    Shared,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchPhase {
    /// Write transactions at each client count.
    Writes,
    /// Linearizable and stale point reads of loaded keys.
    Reads,
    /// As-of point reads and entity histories at each --history-values size.
    History,
    /// Watch fan-out to each --subscribers count.
    Watch,
    /// Linearizable point reads with proofs the client checks: an inclusion proof per datom,
    /// and the answer proven complete against the state root; plain reads run beside them.
    Proofs,
}

/// The suite `args` ask for.
pub fn suite_spec(args: &BenchArgs) -> SuiteSpec {
    let on = |p: BenchPhase| args.phases.contains(&p);
    SuiteSpec {
        clients: args.clients.clone(),
        writes: if on(BenchPhase::Writes) {
            args.datoms
                .iter()
                .flat_map(|d| args.value_bytes.iter().map(move |v| (*d, *v)))
                .collect()
        } else {
            Vec::new()
        },
        reads: {
            let mut reads = Vec::new();
            if on(BenchPhase::Reads) {
                reads.extend([ReadKind::Linearizable, ReadKind::Stale]);
            }
            if on(BenchPhase::Proofs) {
                if !on(BenchPhase::Reads) {
                    reads.push(ReadKind::Linearizable);
                }
                reads.extend([ReadKind::Proven, ReadKind::Complete]);
            }
            reads
        },
        keys: args.keys,
        value_bytes: args.value_bytes.first().copied().unwrap_or(100),
        history_datoms: if on(BenchPhase::History) {
            args.history_values.clone()
        } else {
            Vec::new()
        },
        history_reads: if on(BenchPhase::History) {
            vec![ReadKind::AsOf, ReadKind::History]
        } else {
            Vec::new()
        },
        history_clients: args.history_clients.clone(),
        fanout_subscribers: if on(BenchPhase::Watch) {
            args.subscribers.clone()
        } else {
            Vec::new()
        },
        fanout_layouts: args
            .watch_layouts
            .iter()
            .map(|l| match l {
                BenchWatchLayout::Own => WatchLayout::Own,
                BenchWatchLayout::Shared => WatchLayout::Shared,
            })
            .collect(),
        fanout_markers: args.markers,
        fanout_gap_ms: 10,
        rounds: args.rounds as usize,
        warmup: Duration::from_secs(args.warmup_secs),
        measure: Duration::from_secs(args.seconds),
    }
}

/// Checks the numbers a suite cannot run with.
pub fn check_args(args: &BenchArgs) -> Result<()> {
    if args
        .clients
        .iter()
        .chain(&args.history_clients)
        .any(|c| *c == 0 || *c > 10_000)
    {
        bail!("client counts must be between 1 and 10000");
    }
    if args.datoms.iter().any(|d| *d == 0 || *d > TxRequest::MAX_OPS) {
        bail!("--datoms must be between 1 and {}", TxRequest::MAX_OPS);
    }
    if args.value_bytes.iter().any(|v| *v > 64 * 1024) {
        bail!("--value-bytes above 65536 is not a point this bench measures");
    }
    if args.keys == 0 {
        bail!("--keys must be at least 1");
    }
    if args.subscribers.iter().any(|s| *s == 0 || *s > 10_000) {
        bail!("subscriber counts must be between 1 and 10000");
    }
    Ok(())
}
