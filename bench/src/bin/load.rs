//! `load`: Engram alone under the closed-loop load generator: write throughput and latency at
//! several client counts, linearizable and stale reads, as-of reads and histories at growing
//! store sizes, Watch fan-out, proven reads. It starts its own 3-node cluster of
//! `engram serve` processes on loopback (fsync on), or with `--attach` measures a running
//! cluster. The same suite beside etcd is `versus`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use engram_access::AgentKey;
use engram_bench::engram::{BenchCluster, Credentials, EngramSystem, UiProgress, emit, failures};
use engram_bench::process::engram_exe;
use engram_bench::suite::{BenchArgs, check_args, suite_spec};
use engram_cli::ui::Ui;
use engram_loadgen::{System, run_suite};

#[derive(Parser, Debug)]
#[command(
    name = "load",
    about = "Engram under closed-loop load: writes, reads, as-of reads and histories, Watch fan-out, proven reads, against a 3-node cluster it starts (or one it attaches to)",
    after_help = "EXAMPLES\n  \
        load --phases writes --clients 1,16,64 --seconds 5\n  \
        load --phases reads,history --history-values 1000000 --json > bench.json\n  \
        load --attach --endpoint 10.0.0.5:7001,10.0.0.6:7001 --phases writes"
)]
struct Args {
    #[command(flatten)]
    bench: BenchArgs,
    /// With --attach: the cluster's nodes, the leader first (comma-separated or repeated).
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT")]
    endpoint: Vec<String>,
    /// With --attach: sign every request as this agent (a key file from `engram agent
    /// keygen`), for a cluster in enforced mode.
    #[arg(long, value_name = "FILE")]
    agent_key: Option<PathBuf>,
    /// The `engram` executable the nodes run (default: the one built beside this binary).
    #[arg(long, value_name = "FILE")]
    engram_bin: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    check_args(&args.bench)?;
    if !args.bench.attach && (!args.endpoint.is_empty() || args.agent_key.is_some()) {
        bail!(
            "--endpoint and --agent-key name a cluster to measure with --attach; without it, load starts its own"
        );
    }
    let ui = Ui::new(args.json);
    let spec = suite_spec(&args.bench);
    let (cluster, system) = if args.bench.attach {
        let leader = args
            .endpoint
            .first()
            .cloned()
            .context("--attach needs --endpoint")?;
        let agent = match &args.agent_key {
            Some(path) => Some(Arc::new(
                AgentKey::load(path).with_context(|| format!("reading {}", path.display()))?,
            )),
            None => None,
        };
        let system = EngramSystem::connect(
            "engram",
            &leader,
            &args.endpoint,
            args.bench.connections as usize,
            Vec::new(),
            Credentials { agent, tls: None },
        )?;
        (None, system)
    } else {
        let exe = engram_exe(args.engram_bin.clone()).map_err(|e| anyhow!(e))?;
        let enforced = args.bench.security == engram_access::Mode::Enforced;
        let c = BenchCluster::start(
            &exe,
            args.bench.data_dir.as_deref(),
            args.bench.snapshot_every_entries,
            enforced,
            None,
            ui,
        )
        .await?;
        let system = EngramSystem::connect(
            if enforced { "engram-enforced" } else { "engram" },
            &c.leader,
            &c.cluster.endpoints(),
            args.bench.connections as usize,
            c.pids(),
            Credentials {
                agent: c.agent.clone(),
                tls: None,
            },
        )?;
        (Some(c), system)
    };
    if args.bench.unsearchable {
        system.declare_unsearchable().await?;
    }
    let systems: Vec<Arc<dyn System>> = vec![Arc::new(system)];
    let progress = UiProgress::new(ui);
    let report = run_suite(&systems, &spec, &progress).await;
    drop(progress);
    // Where the writes spent their time on the leader (a cluster this run started only: an
    // attached cluster's metrics port is not known).
    let stages = match &cluster {
        Some(c) => c.write_stages().await.unwrap_or_else(|e| {
            eprintln!("no write-stage breakdown: {e:#}");
            Vec::new()
        }),
        None => Vec::new(),
    };
    emit(&args.bench, &spec, &report, &stages, args.json)?;
    let failed = failures(&report);
    if !failed.is_empty() {
        bail!("requests failed during the bench:\n  {}", failed.join("\n  "));
    }
    Ok(())
}
