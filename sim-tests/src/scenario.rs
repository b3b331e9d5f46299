//! One seed, end to end: draw the fault mix, boot the pool, initialise three voters, create
//! the registers, run the agents while faults fire (the monitor sampling every replica), heal,
//! demand liveness, then run every checker over the history and the final replicas.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engram_core::planted::{self, PlantedBug};
use madsim::runtime::{Handle, Runtime};

use crate::checkers::liveness::Recovery;
use crate::checkers::monitor::Monitor;
use crate::checkers::{
    Replica, Violation, acked_durable, asof_stable, audit_verifies, chain_continuity, linearizable, liveness,
    no_partial_apply, replica_agreement, signatures_valid, tx_time_monotonic, watch_complete,
};
use crate::cluster::{Cluster, NodeSettings, node_addr};
use crate::faults::{Driver, FaultMix, draw_skew_ns};
use crate::history::{History, Outcome};
use crate::workload::{self, Workload};

/// Watchers per seed, each held to the watch's promise on its own.
const WATCHERS: usize = 100;
/// How far apart the watchers open (the last opens about 4 s into the run).
const WATCHER_STAGGER: Duration = Duration::from_millis(40);
/// How often the leader runs retention policies in a run with redactions on (the server's
/// default, a minute, would not run them within a seed).
const RETENTION_CHECK_MS: u64 = 1_000;

/// How to run a seed.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// A planted bug to switch on (test builds of the suite only).
    pub bug: Option<PlantedBug>,
    /// Overrides the drawn fault phase length, in simulated ms.
    pub fault_phase_ms: Option<u64>,
    /// Switches the Byzantine-client fault on with this mean gap, whatever the draw said.
    pub forge_every_ms: Option<u64>,
    /// Switches the crash-in-install fault on, with crashes (which leave nodes behind) and a
    /// snapshot every 16 entries, whatever the draw said: lagging nodes install snapshots and
    /// crash inside them.
    pub install_crashes: bool,
    /// Crashes that leave nodes behind and a snapshot every 16 entries, without the crashes
    /// inside installs: lagging nodes install snapshots and go on serving their watchers
    /// (a crash inside the install restarts the node's watch hub from its store instead).
    pub lagging_installs: bool,
    /// The speculator also writes and redacts a plan every fourth round (`speculator.rs`), and
    /// a keeper rewrites slots under retention policies of both kinds, which the leader runs
    /// every second (`keeper.rs`). Off by default: the extra requests change every seed's
    /// schedule, which the seed-pinned planted tests rely on; `ENGRAM_SIM_FORGETTING=1` turns
    /// it on for a sweep.
    pub forgetting: bool,
    /// A snapshot every this many entries, whatever the draw said (a planted test that needs
    /// snapshots at many points of the run).
    pub snapshot_every_entries: Option<u64>,
}

/// What a seed did and found.
#[derive(Clone, Debug)]
pub struct SeedReport {
    pub seed: u64,
    pub bug: Option<PlantedBug>,
    /// Whether the run had redactions on (`Options::forgetting`).
    pub forgetting: bool,
    pub mix: Option<FaultMix>,
    pub violations: Vec<Violation>,
    /// A panic inside the simulation (a node's assertion, a harness failure).
    pub panic: Option<String>,
    /// blake3 over the fault log, the history and every replica's final chain and state: the
    /// same seed must give the same hash.
    pub trace_hash: String,
    pub ops: usize,
    pub acked_writes: usize,
    pub unknown_writes: usize,
    pub refused_cas: usize,
    pub reads: usize,
    pub chain_len: u64,
    /// Branch merges and abandons the speculator had acknowledged.
    pub branch_merges: usize,
    /// Entries a crash rolled back that the node applied again, each checked equal.
    pub reapplied: u64,
    pub branch_abandons: usize,
    /// Redactions the speculator had acknowledged.
    pub redactions: usize,
    /// Datoms of the keeper's entity its retention policies took (the most on any member).
    pub retention_taken: usize,
    /// Notes in the keeper's session namespace forgotten (the most on any member), and session
    /// lapses its chain records (the most on any member).
    pub session_forgotten: usize,
    pub session_lapses: usize,
    pub fault_counts: BTreeMap<&'static str, u64>,
    pub fault_log: Vec<String>,
    pub recovery: Recovery,
    /// What the nodes logged: snapshots built and installed, elections won.
    pub events: BTreeMap<&'static str, u64>,
    pub sim_ms: u64,
    pub wall_ms: u64,
}

impl SeedReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.panic.is_none()
    }

    /// The checkers (or "panic") that failed.
    pub fn failed_checkers(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.violations.iter().map(|v| v.checker).collect();
        if self.panic.is_some() {
            names.push("panic");
        }
        names.sort_unstable();
        names.dedup();
        names
    }

    /// One line that replays this seed.
    pub fn repro_command(&self) -> String {
        let bug = self
            .bug
            .map_or(String::new(), |b| format!(" ENGRAM_SIM_BUG={b:?}"));
        let forgetting = if self.forgetting {
            " ENGRAM_SIM_FORGETTING=1"
        } else {
            ""
        };
        format!(
            "ENGRAM_SIM_SEED={}{bug}{forgetting} cargo sim -p engram-sim-tests --test seeds -- one_seed --exact --nocapture",
            self.seed
        )
    }

    /// A multi-line failure report: seed, mix, what broke, how to replay.
    pub fn failure_text(&self) -> String {
        let mut s = format!("seed {} FAILED", self.seed);
        if let Some(mix) = &self.mix {
            s.push_str(&format!("\n  fault mix: {mix}"));
        }
        if let Some(p) = &self.panic {
            s.push_str(&format!("\n  panic: {p}"));
        }
        for v in self.violations.iter().take(12) {
            s.push_str(&format!("\n  {v}"));
        }
        if self.violations.len() > 12 {
            s.push_str(&format!("\n  ... {} more", self.violations.len() - 12));
        }
        let tail: Vec<&String> = self.fault_log.iter().rev().take(8).collect();
        if !tail.is_empty() {
            s.push_str("\n  last faults:");
            for line in tail.into_iter().rev() {
                s.push_str(&format!("\n    {line}"));
            }
        }
        s.push_str(&format!("\n  reproduce: {}", self.repro_command()));
        s
    }
}

struct Finished {
    mix: FaultMix,
    violations: Vec<Violation>,
    trace_hash: String,
    history: Vec<crate::history::Op>,
    chain_len: u64,
    branch_merges: usize,
    reapplied: u64,
    branch_abandons: usize,
    redactions: usize,
    retention_taken: usize,
    session_forgotten: usize,
    session_lapses: usize,
    fault_counts: BTreeMap<&'static str, u64>,
    fault_log: Vec<String>,
    recovery: Recovery,
    sim_ms: u64,
}

/// Runs one seed in a fresh simulation and reports. Never panics: a panic inside the
/// simulation becomes part of the report.
///
/// Each seed runs on a new thread: the standard library seeds its hash maps once per thread,
/// and madsim can make that seed deterministic only on a thread that has not created a hash
/// map yet. On a reused thread a seed's run would depend on the seeds before it.
pub fn run_seed(seed: u64, options: &Options) -> SeedReport {
    // The process-wide subscriber is set up here, not on the seed's thread (see above).
    crate::events::init();
    let options = options.clone();
    match std::thread::Builder::new()
        .name(format!("seed-{seed}"))
        .spawn(move || run_seed_here(seed, &options))
        .map(|t| t.join())
    {
        Ok(Ok(report)) => report,
        Ok(Err(_)) => panic!("seed {seed}: the harness itself panicked outside the simulation"),
        Err(e) => panic!("seed {seed}: cannot start a thread: {e}"),
    }
}

fn run_seed_here(seed: u64, options: &Options) -> SeedReport {
    crate::events::reset();
    let wall = Instant::now();
    let mut runtime = Runtime::with_seed_and_config(seed, madsim::Config::default());
    // A run that never ends is a liveness bug too; madsim panics past this much simulated time.
    runtime.set_time_limit(Duration::from_secs(600));
    let opts = options.clone();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on(simulate(opts))));
    planted::set(None);
    let wall_ms = wall.elapsed().as_millis() as u64;
    let mut report = SeedReport {
        seed,
        bug: options.bug,
        forgetting: options.forgetting,
        mix: None,
        violations: Vec::new(),
        panic: None,
        trace_hash: String::new(),
        ops: 0,
        acked_writes: 0,
        unknown_writes: 0,
        refused_cas: 0,
        reads: 0,
        chain_len: 0,
        branch_merges: 0,
        reapplied: 0,
        branch_abandons: 0,
        redactions: 0,
        retention_taken: 0,
        session_forgotten: 0,
        session_lapses: 0,
        fault_counts: BTreeMap::new(),
        fault_log: Vec::new(),
        recovery: Recovery::default(),
        events: crate::events::take(),
        sim_ms: 0,
        wall_ms,
    };
    match result {
        Ok(Ok(o)) => {
            report.ops = o.history.len();
            for op in &o.history {
                match op.outcome {
                    Outcome::Written { .. } => report.acked_writes += 1,
                    Outcome::Unknown => report.unknown_writes += 1,
                    Outcome::CasFailed => report.refused_cas += 1,
                    Outcome::Value { .. } => report.reads += 1,
                }
            }
            report.mix = Some(o.mix);
            report.violations = o.violations;
            report.trace_hash = o.trace_hash;
            report.chain_len = o.chain_len;
            report.branch_merges = o.branch_merges;
            report.reapplied = o.reapplied;
            report.branch_abandons = o.branch_abandons;
            report.redactions = o.redactions;
            report.retention_taken = o.retention_taken;
            report.session_forgotten = o.session_forgotten;
            report.session_lapses = o.session_lapses;
            report.fault_counts = o.fault_counts;
            report.fault_log = o.fault_log;
            report.recovery = o.recovery;
            report.sim_ms = o.sim_ms;
        }
        Ok(Err(failure)) => {
            report.mix = Some(failure.mix);
            report.panic = Some(failure.reason);
        }
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into());
            report.panic = Some(msg);
        }
    }
    report
}

/// A short run (8 simulated seconds of faults) for madsim's determinism check, which needs a
/// plain `fn` to call twice.
pub async fn simulate_short() {
    let _ = simulate(Options {
        fault_phase_ms: Some(8_000),
        ..Options::default()
    })
    .await;
}

/// The harness could not set the scenario up (the mix is kept for the report).
struct SetupFailure {
    mix: FaultMix,
    reason: String,
}

type SimResult = Result<Finished, Box<SetupFailure>>;

async fn simulate(options: Options) -> SimResult {
    let handle = Handle::current();
    let start = Instant::now();
    let mut mix = FaultMix::draw();
    if let Some(ms) = options.fault_phase_ms {
        mix.fault_phase_ms = ms;
    }
    if let Some(ms) = options.forge_every_ms {
        mix.forge_every_ms = Some(ms);
    }
    if options.install_crashes || options.lagging_installs {
        mix.snapshot_every_entries = 16;
        mix.crash_every_ms
            .get_or_insert(if options.lagging_installs { 800 } else { 1_500 });
    }
    if options.install_crashes {
        mix.crash_in_install = true;
    }
    if let Some(every) = options.snapshot_every_entries {
        mix.snapshot_every_entries = every;
    }
    let pool = mix.pool_size();
    let skews: Vec<i64> = (0..pool).map(|_| draw_skew_ns(mix.clock_skew_ms)).collect();
    let settings = NodeSettings {
        snapshot_every_entries: mix.snapshot_every_entries,
        ..NodeSettings::default()
    };
    let retention_check_ms = options.forgetting.then_some(RETENTION_CHECK_MS);
    let mut cluster = Cluster::boot(
        handle.clone(),
        pool,
        &settings,
        &skews,
        handle.seed(),
        retention_check_ms,
    );
    let fail = |mix: &FaultMix, reason: String| {
        Err(Box::new(SetupFailure {
            mix: mix.clone(),
            reason,
        }))
    };

    // Three initial voters; the rest of the pool waits to be added.
    let mut initialised = false;
    for _ in 0..50 {
        madsim::time::sleep(Duration::from_millis(100)).await;
        match cluster.init(&[1, 2, 3]).await {
            Ok(()) => {
                initialised = true;
                break;
            }
            // An earlier attempt that timed out finished after all (genesis and the security
            // mode are recorded): only this loop initialises the simulated cluster.
            Err(status) if status.message().contains("already initialised") => {
                initialised = true;
                break;
            }
            Err(_) => {}
        }
    }
    if !initialised {
        return fail(&mix, "Cluster.Init did not succeed in 50 attempts".into());
    }
    let targets: Vec<String> = cluster.nodes.keys().map(|id| node_addr(*id)).collect();
    let registers = match cluster
        .control(workload::create_registers(targets.clone(), mix.registers))
        .await
    {
        Ok(r) => r,
        Err(e) => return fail(&mix, e),
    };

    // A planted bug goes live once the registers exist (setup needs real receipts), on this
    // thread, which runs the whole simulation.
    planted::set(options.bug);

    let history = History::default();
    let w = Arc::new(Workload {
        history: history.clone(),
        registers: registers.clone(),
        targets,
        stop: AtomicBool::new(false),
        start,
        unexpected: Mutex::new(Vec::new()),
        acked_tx: Mutex::new(BTreeMap::new()),
    });
    let mut clients = Vec::new();
    for c in 0..mix.clients {
        let node = handle
            .create_node()
            .name(format!("agent-{c}"))
            .ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(
                10,
                0,
                1,
                c as u8 + 1,
            )))
            .build();
        clients.push(node.spawn(workload::run_client(c, w.clone())));
    }

    // The watchers follow the namespace from their start to the end of the run, on a host of
    // their own; they open over the first seconds, so later ones start behind and read pages.
    let watch_logs: Vec<Arc<crate::watcher::WatchLog>> = (0..WATCHERS).map(|_| Arc::default()).collect();
    let watcher_host = handle
        .create_node()
        .name("watcher")
        .ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 2, 1)))
        .build();
    let watchers: Vec<_> = watch_logs
        .iter()
        .enumerate()
        .map(|(i, log)| {
            // Spread over the nodes: each starts on another one.
            let mut targets = w.targets.clone();
            let first = i % targets.len().max(1);
            targets.rotate_left(first);
            watcher_host.spawn(crate::watcher::run_watcher(
                targets,
                log.clone(),
                Duration::from_secs(300),
                WATCHER_STAGGER * i as u32,
            ))
        })
        .collect();

    // The speculator works on branches of its own namespace, on its own host.
    let speculation = Arc::new(crate::speculator::SpeculationLog::default());
    let speculator = handle
        .create_node()
        .name("speculator")
        .ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 2, 2)))
        .build()
        .spawn(crate::speculator::run_speculator(
            w.targets.clone(),
            speculation.clone(),
            options.forgetting,
        ));

    // The keeper (with redactions on) writes under retention policies, on its own host.
    let kept = Arc::new(crate::keeper::KeeperLog::default());
    let keeper = options.forgetting.then(|| {
        handle
            .create_node()
            .name("keeper")
            .ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 2, 3)))
            .build()
            .spawn(crate::keeper::run_keeper(w.targets.clone(), kept.clone()))
    });

    // The Byzantine client: forged Raft requests from a host outside the cluster, for the
    // fault phase.
    let forged = Arc::new(crate::forger::ForgeLog::default());
    let forger = mix.forge_every_ms.map(|every_ms| {
        handle
            .create_node()
            .name("forger")
            .ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 8, 1)))
            .build()
            .spawn(crate::forger::run_forger(
                cluster.nodes.keys().copied().collect(),
                every_ms,
                forged.clone(),
            ))
    });

    let mut monitor = Monitor::default();
    monitor.speculation = options.forgetting.then(|| speculation.clone());
    let (mut fault_log, mut fault_counts) = {
        let mut driver = Driver::new(&mut cluster, mix.clone(), start);
        driver.run(&mut monitor).await;
        driver.heal();
        (driver.log, driver.counts)
    };
    forged.stop.store(true, Ordering::Relaxed);
    if let Some(forger) = forger {
        if let Err(e) = forger.await {
            return fail(&mix, format!("the forger task failed: {e}"));
        }
        let sent = *forged.sent.lock().unwrap_or_else(|e| e.into_inner());
        let refused = *forged.refused.lock().unwrap_or_else(|e| e.into_inner());
        fault_counts.insert("byzantine-client", sent);
        fault_log.push(format!(
            "forged raft requests: {sent} sent, {refused} refused as unauthenticated"
        ));
    }
    w.stop.store(true, Ordering::Relaxed);
    speculation.stop.store(true, Ordering::Relaxed);
    for c in clients {
        if let Err(e) = c.await {
            return fail(&mix, format!("a client task failed: {e}"));
        }
    }
    if let Err(e) = speculator.await {
        return fail(&mix, format!("the speculator task failed: {e}"));
    }
    kept.stop.store(true, Ordering::Relaxed);
    if let Some(keeper) = keeper
        && let Err(e) = keeper.await
    {
        return fail(&mix, format!("the keeper task failed: {e}"));
    }

    let (recovery, mut violations) = liveness::check(&cluster, registers[0]).await;
    // The watcher must catch up with the last committed transaction of its namespace.
    let last_tx = cluster
        .nodes
        .values()
        .filter_map(|n| {
            engram_core::inspect::stored_audit_entries(&*n.store)
                .ok()?
                .into_iter()
                .filter_map(|s| s.entry.ok())
                .filter(|s| s.entry.namespace == workload::NAMESPACE)
                .map(|s| s.entry.tx.0)
                .max()
        })
        .max()
        .unwrap_or(0);
    for log in &watch_logs {
        log.until_tx.store(last_tx.max(1), Ordering::Relaxed);
    }
    for (i, watcher) in watchers.into_iter().enumerate() {
        if let Err(e) = watcher.await {
            return fail(&mix, format!("watcher {i}'s task failed: {e}"));
        }
    }
    monitor.sample(&cluster);
    violations.extend(monitor.violations.iter().cloned());

    let members: Vec<u64> = recovery
        .voters
        .iter()
        .chain(&recovery.learners)
        .copied()
        .collect();
    let mut replicas = Vec::new();
    for (id, node) in &cluster.nodes {
        match Replica::read(*id, members.contains(id), &*node.store) {
            Ok(r) => replicas.push(r),
            Err(v) => violations.push(v),
        }
    }
    let ops = history.ops();
    let pool_keys: BTreeMap<u64, _> = cluster
        .nodes
        .iter()
        .map(|(id, n)| (*id, n.key.public()))
        .collect();
    let refusals = unadmitted_answers(&cluster).await;
    violations.extend(chain_continuity::check(&replicas));
    violations.extend(replica_agreement::check(&replicas, &monitor.samples));
    violations.extend(acked_durable::check(&ops, &registers, &replicas));
    violations.extend(signatures_valid::check(&replicas, &pool_keys, &refusals));
    let member_stores: Vec<(u64, &dyn engram_storage::Store)> = cluster
        .nodes
        .iter()
        .filter(|(id, _)| members.contains(id))
        .map(|(id, n)| (*id, &*n.store as &dyn engram_storage::Store))
        .collect();
    violations.extend(asof_stable::check(&ops, &registers, &member_stores));
    violations.extend(crate::checkers::branches_durable::check(
        &member_stores,
        &speculation,
    ));
    violations.extend(crate::checkers::forgotten::check(&member_stores, &speculation));
    let (retention_violations, retention_taken) = crate::checkers::retention::check(&member_stores, &kept);
    violations.extend(retention_violations);
    let sessions = crate::checkers::sessions::check(&member_stores, &kept);
    violations.extend(sessions.violations);
    violations.extend(tx_time_monotonic::check(&replicas));
    let unadmitted: Vec<u64> = refusals.keys().copied().collect();
    violations.extend(audit_verifies::check(&replicas, &pool_keys, &unadmitted));
    // Every watcher is held to the promise; the first few that break it are named.
    violations.extend(
        watch_logs
            .iter()
            .enumerate()
            .flat_map(|(i, log)| {
                let delivered = log.txs.lock().unwrap_or_else(|e| e.into_inner()).clone();
                watch_complete::check(&replicas, &delivered, i)
            })
            .take(3),
    );
    violations.extend(no_partial_apply::check(&replicas));
    let all_stores: Vec<(u64, &dyn engram_storage::Store)> = cluster
        .nodes
        .iter()
        .map(|(id, n)| (*id, &*n.store as &dyn engram_storage::Store))
        .collect();
    violations.extend(crate::checkers::state_consistent::check(&all_stores));
    violations.extend(crate::checkers::purged::check(&all_stores, &speculation));
    // As of a transaction every member has applied, so each can answer it from its own state.
    if let Some(as_of) = replicas
        .iter()
        .filter(|r| r.member)
        .map(|r| r.applied_index)
        .min()
        .filter(|at| *at > 0)
    {
        violations.extend(crate::checkers::search_agrees::check(&cluster, &members, as_of).await);
    }
    violations.extend(crate::checkers::peer_auth::check(&forged));
    violations.extend(linearizable::check(
        &ops,
        &committed_values(&replicas, &registers),
    ));
    for u in w.unexpected.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        violations.push(Violation::new("client-errors", u.clone()));
    }
    violations.dedup();

    let chain_len = replicas.iter().map(|r| r.entries.len() as u64).max().unwrap_or(0);
    let trace_hash = trace_hash(&fault_log, &ops, &replicas, &violations);
    Ok(Finished {
        mix,
        violations,
        trace_hash,
        history: ops,
        chain_len,
        reapplied: monitor.reapplied,
        branch_merges: speculation.merged.lock().unwrap_or_else(|e| e.into_inner()).len(),
        branch_abandons: speculation
            .abandoned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len(),
        redactions: speculation
            .forgotten
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len(),
        retention_taken,
        session_forgotten: sessions.forgotten,
        session_lapses: sessions.lapses,
        fault_counts,
        fault_log,
        recovery,
        sim_ms: start.elapsed().as_millis() as u64,
    })
}

/// The (register, value) pairs the final log holds, over every member replica (they agree
/// when I2 holds; when they do not, I2 reports it, and the union keeps a lagging replica from
/// making a committed write look like one that never happened).
fn committed_values(replicas: &[Replica], registers: &[u64]) -> std::collections::BTreeSet<(usize, i64)> {
    let mut out = std::collections::BTreeSet::new();
    for r in replicas.iter().filter(|r| r.member) {
        for tx in r.datoms.values() {
            for (_, d) in &tx.datoms {
                if d.attribute.as_str() != workload::REG_VALUE {
                    continue;
                }
                if let (Some(key), engram_types::Value::I64(v)) =
                    (registers.iter().position(|e| *e == d.entity.0), &d.value)
                {
                    out.insert((key, *v));
                }
            }
        }
    }
    out
}

/// For each node whose own key its chain does not admit (and whose chain is not empty), what
/// `Audit.Entries` answers: such a node must refuse rather than serve unverifiable entries.
async fn unadmitted_answers(cluster: &Cluster) -> BTreeMap<u64, Option<tonic::Code>> {
    let mut out = BTreeMap::new();
    for (id, node) in &cluster.nodes {
        let store = &*node.store;
        let empty = engram_core::reads::head(store).map_or(true, |h| h.index == 0);
        let admitted =
            engram_core::reads::signer_admitted(store, node.key.public().key_id()).unwrap_or(false);
        if empty || admitted {
            continue;
        }
        let target = node_addr(*id);
        let answer = cluster
            .control(async move {
                let mut client =
                    engram_proto::pb::audit_client::AuditClient::new(crate::cluster::channel(&target));
                let mut req = tonic::Request::new(engram_proto::pb::EntriesRequest {
                    from_index: 1,
                    limit: 1,
                });
                req.set_timeout(Duration::from_secs(3));
                match client.entries(req).await {
                    Err(s) => Some(s.code()),
                    Ok(resp) => {
                        let mut stream = resp.into_inner();
                        match futures::StreamExt::next(&mut stream).await {
                            Some(Err(s)) => Some(s.code()),
                            _ => None,
                        }
                    }
                }
            })
            .await;
        out.insert(*id, answer);
    }
    out
}

fn trace_hash(
    log: &[String],
    ops: &[crate::history::Op],
    replicas: &[Replica],
    violations: &[Violation],
) -> String {
    let mut h = blake3::Hasher::new();
    for line in log {
        h.update(line.as_bytes());
        h.update(b"\n");
    }
    for op in ops {
        h.update(format!("{op:?}\n").as_bytes());
    }
    for r in replicas {
        h.update(&r.node.to_le_bytes());
        h.update(&r.applied_index.to_le_bytes());
        h.update(r.digest.as_bytes());
        for (index, hash) in r.entry_hashes() {
            h.update(&index.to_le_bytes());
            h.update(hash.as_bytes());
        }
    }
    for v in violations {
        h.update(v.to_string().as_bytes());
    }
    h.finalize().to_hex().to_string()
}
