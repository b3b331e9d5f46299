//! `engram-bench versus`: Engram and etcd side by side under the same closed-loop load.
//!
//! Starts a 3-node Engram cluster and a 3-member etcd cluster on loopback (both fsync every
//! log append), drives both with the same load generator, taking turns point by point
//! (A B A B), and prints one table with the Engram/etcd ratio at each point.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use engram_bench::engram::{BenchCluster, BenchTls, Credentials, EngramSystem, UiProgress, emit, failures};
use engram_bench::etcd::{EtcdCluster, EtcdSystem};
use engram_bench::process::engram_exe;
use engram_bench::suite::{BenchArgs, check_args, suite_spec};
use engram_cli::ui::Ui;
use engram_loadgen::{System, run_suite};

#[derive(Parser, Debug)]
#[command(
    name = "versus",
    about = "Engram and etcd side by side: the same closed-loop load against a 3-node cluster of each, interleaved",
    after_help = "EXAMPLES\n  versus --phases writes --clients 1,16,64,256 --seconds 10 --rounds 2\n  \
        versus --out bench/results/versus.json   # then: python3 bench/plot.py bench/results/versus.json docs/img"
)]
struct Args {
    #[command(flatten)]
    bench: BenchArgs,
    /// The `engram` executable (default: the one built beside this binary).
    #[arg(long, value_name = "FILE")]
    engram_bin: Option<PathBuf>,
    /// Also run a second Engram cluster in enforced mode (signed requests, grants checked)
    /// in the same rounds, reported as "engram-enforced".
    #[arg(long)]
    engram_enforced: bool,
    /// Every Engram cluster serves mutual TLS, and the bench presents a client certificate
    /// (made with openssl for the run) whose common name is the bench's agent.
    #[arg(long)]
    tls: bool,
    /// How the enforced cluster authenticates the bench: a signature on every request, or
    /// (with --tls) the client certificate alone.
    #[arg(long, value_enum, default_value = "signature", requires = "engram_enforced")]
    enforced_auth: EnforcedAuth,
    /// The `etcd` executable (etcd 3.4, e.g. Debian's etcd-server).
    #[arg(long, value_name = "FILE", default_value = "etcd")]
    etcd_bin: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EnforcedAuth {
    Signature,
    Certificate,
}

fn which(bin: &std::path::Path) -> Result<PathBuf> {
    if bin.components().count() > 1 {
        return Ok(bin.to_path_buf());
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "{} is not on PATH: install etcd 3.4 (apt-get install etcd-server) or pass --etcd-bin",
                bin.display()
            )
        })
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    check_args(&args.bench)?;
    if args.bench.attach {
        bail!("versus starts both clusters itself; --attach is for `load`");
    }
    let ui = Ui::new(args.json);
    let engram_bin = engram_exe(args.engram_bin.clone()).map_err(|e| anyhow!(e))?;
    let etcd_bin = which(&args.etcd_bin)?;
    let spec = suite_spec(&args.bench);
    if args.enforced_auth == EnforcedAuth::Certificate && !args.tls {
        bail!("--enforced-auth certificate needs --tls");
    }
    let tls = if args.tls {
        Some(BenchTls::generate()?)
    } else {
        None
    };
    let tls_client = tls.as_ref().map(|t| t.client.clone());

    let engram_dir = args.bench.data_dir.as_ref().map(|d| d.join("engram"));
    let etcd_dir = args.bench.data_dir.as_ref().map(|d| d.join("etcd"));
    let engram = BenchCluster::start(
        &engram_bin,
        engram_dir.as_deref(),
        args.bench.snapshot_every_entries,
        false,
        tls.as_ref(),
        ui,
    )
    .await?;
    // With --engram-enforced, a second Engram cluster in enforced mode (every request signed
    // and checked against grants) runs in the same interleaved rounds.
    let enforced = if args.engram_enforced {
        let dir = args.bench.data_dir.as_ref().map(|d| d.join("engram-enforced"));
        Some(
            BenchCluster::start(
                &engram_bin,
                dir.as_deref(),
                args.bench.snapshot_every_entries,
                true,
                tls.as_ref(),
                ui,
            )
            .await?,
        )
    } else {
        None
    };
    let pb = ui.spinner("starting 3 etcd members");
    let mut etcd = EtcdCluster::start(&etcd_bin, etcd_dir.as_deref())?;
    let etcd_leader = etcd.wait_for_leader(Duration::from_secs(30)).await?;
    ui.done(&pb, format!("etcd cluster up; leader at {etcd_leader}"));

    let conns = args.bench.connections as usize;
    let open = EngramSystem::connect(
        if args.tls { "engram-tls" } else { "engram" },
        &engram.leader,
        &engram.cluster.endpoints(),
        conns,
        engram.pids(),
        Credentials {
            agent: None,
            tls: tls_client.clone(),
        },
    )?;
    if args.bench.unsearchable {
        open.declare_unsearchable().await?;
    }
    let mut systems: Vec<Arc<dyn System>> = vec![
        Arc::new(open),
        Arc::new(EtcdSystem::connect(&etcd_leader, &etcd.client_urls, conns, etcd.pids()).await?),
    ];
    if let Some(e) = &enforced {
        let (name, agent) = match (args.enforced_auth, args.tls) {
            (EnforcedAuth::Signature, false) => ("engram-enforced", e.agent.clone()),
            (EnforcedAuth::Signature, true) => ("engram-enforced-tls", e.agent.clone()),
            (EnforcedAuth::Certificate, _) => ("engram-enforced-cert", None),
        };
        let enforced = EngramSystem::connect(
            name,
            &e.leader,
            &e.cluster.endpoints(),
            conns,
            e.pids(),
            Credentials {
                agent,
                tls: tls_client.clone(),
            },
        )?;
        if args.bench.unsearchable {
            enforced.declare_unsearchable().await?;
        }
        systems.push(Arc::new(enforced));
    }
    let progress = UiProgress::new(ui);
    let report = run_suite(&systems, &spec, &progress).await;
    drop(progress);
    // Where Engram's writes spent their time on the leader, over every write of this run (run
    // with `--phases writes --clients 1` for the single-client path).
    let stages = engram.write_stages().await.unwrap_or_else(|e| {
        eprintln!("no write-stage breakdown: {e:#}");
        Vec::new()
    });
    emit(&args.bench, &spec, &report, &stages, args.json)?;
    let failed = failures(&report);
    if !failed.is_empty() {
        bail!("requests failed during the bench:\n  {}", failed.join("\n  "));
    }
    Ok(())
}
