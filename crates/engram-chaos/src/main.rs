//! `engram-chaos`: chaos on real containers. Starts the 3-node compose cluster
//! (`deploy/compose.yaml`) from scratch; runs concurrent clients that write, compare-and-set
//! and read registers through the public client while, cycle after cycle, a node (the leader on
//! purpose in a third of the cycles, otherwise one of the three at random) is SIGKILLed and
//! restarted, cut off from the network and
//! reconnected, or paused and resumed. Then it heals everything, waits for the replicas to
//! converge, and checks:
//!
//! - every acknowledged write is on every node, at the transaction it was acknowledged with;
//! - every node's audit chain verifies offline (its export through `engram-verify`) and all
//!   three chains have the same head;
//! - the recorded history is linearizable, by the same checker as the simulation suite
//!   (`engram-lincheck`).
//!
//! Prints the figures (cycles, faults, writes acknowledged, lost, unknown) and exits non-zero if
//! any check fails. The fault schedule is a pure function of `--seed`.
//!
//! The cluster runs in enforced mode, as the compose file's default: each run makes a fresh
//! administrator key (never derived from the seed: the compose ports are published on the
//! host), passes its public half to the nodes as the first administrator, and signs every call
//! with it.

mod docker;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use engram_access::{AgentKey, Principal};
use engram_client::{Client, ClientConfig, Consistency, GetOptions, HistoryTarget, Keepalive, RetryPolicy};
use engram_lincheck::history::{Call, History, Key, Outcome};
use engram_types::{
    Attribute, EntityId, EntityRef, Namespace, Op, Precondition, Provenance, TxOp, TxRequest, Value,
};
use serde_json::json;

use crate::docker::{Compose, Fault};

const NAMESPACE: &str = "chaos";
const REG: &str = ":reg/v";
/// The administrator every call signs as; in enforced mode a transaction's agent must be its
/// signer, so every write names it too.
const AGENT: &str = "chaos";

/// This run's administrator key, made once at its start ([`admin_key`]).
static ADMIN: std::sync::OnceLock<Arc<AgentKey>> = std::sync::OnceLock::new();

/// A fresh administrator key from the OS's randomness: written to a file of its own (that is
/// how the key library draws one), read back and the file removed.
fn admin_key() -> Result<Arc<AgentKey>> {
    let principal = Principal::new(AGENT).context("the administrator's name")?;
    let path = std::env::temp_dir().join(format!("engram-chaos-{}-admin.key", std::process::id()));
    // A leftover of an earlier process with the same id (the key library never overwrites).
    let _ = std::fs::remove_file(&path);
    let key = AgentKey::create(principal, &path).context("making the administrator key");
    let _ = std::fs::remove_file(&path);
    Ok(Arc::new(key?))
}

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Chaos on a real 3-node container cluster, then every acknowledged write, chain and history checked"
)]
struct Args {
    /// Fault cycles: each injects one fault, holds it, heals it and lets the cluster settle.
    #[arg(long, default_value_t = 6)]
    cycles: u32,
    /// Seed of the fault schedule and the clients' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Registers the clients share.
    #[arg(long, default_value_t = 3)]
    registers: usize,
    /// How long each fault is held.
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    fault_ms: u64,
    /// How long the cluster runs healed between faults.
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    settle_ms: u64,
    /// The compose file of the cluster.
    #[arg(long, default_value = "deploy/compose.yaml")]
    compose: PathBuf,
    /// The compose project name (containers, network and volumes are named after it).
    #[arg(long, default_value = "engram-chaos")]
    project: String,
    /// The image to run.
    #[arg(long, default_value = "engram:dev")]
    image: String,
    /// Host port of node 1; nodes 2 and 3 take the next two.
    #[arg(long, default_value_t = 17101)]
    port_base: u16,
    /// Leave the cluster running at the end (it is removed otherwise).
    #[arg(long)]
    keep: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// SplitMix64: a small, seedable generator, so a seed replays the same schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn provenance(agent: &str) -> Provenance {
    Provenance {
        agent: agent.to_string(),
        confidence: 1.0,
        ..Provenance::default()
    }
}

fn reg_op(entity: EntityRef, value: i64) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity,
        attribute: Attribute::new(REG).expect("a valid attribute"),
        value: Value::I64(value),
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

fn client_config(budget: Duration) -> ClientConfig {
    ClientConfig {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        // Every write here carries an idempotency key, so a reconnection is only a retry.
        keepalive: Some(Keepalive::fast()),
        retry: RetryPolicy {
            max_elapsed: budget,
            ..RetryPolicy::default()
        },
        tls: None,
        agent: ADMIN.get().cloned(),
        trust_keys: Vec::new(),
    }
}

/// Waits until every node answers, agrees on a leader and lists three members.
async fn wait_formed(endpoints: &[String], limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let mut ok = 0;
        for e in endpoints {
            let c = Client::with_config(vec![e.clone()], client_config(Duration::ZERO))?;
            if let Ok(s) = c.status().await
                && s.leader_id.is_some()
                && s.members.len() == 3
            {
                ok += 1;
            }
        }
        if ok == endpoints.len() {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!("the cluster did not form within {limit:?} ({ok} of 3 nodes ready)");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The node that says it leads, at the highest term any node reports (a node cut off or paused
/// a moment ago may still name an old leader).
async fn current_leader(endpoints: &[String]) -> Option<u64> {
    let mut best: Option<(u64, u64)> = None;
    for e in endpoints {
        let Ok(c) = Client::with_config(vec![e.clone()], client_config(Duration::ZERO)) else {
            continue;
        };
        if let Ok(s) = c.status().await
            && s.role == "Leader"
            && best.is_none_or(|(term, _)| s.term > term)
        {
            best = Some((s.term, s.node_id));
        }
    }
    best.map(|(_, id)| id)
}

/// Waits until every node has applied the same log position with the same chain head.
async fn wait_converged(endpoints: &[String], limit: Duration) -> Result<(u64, Vec<u8>)> {
    let start = Instant::now();
    loop {
        let mut heads = BTreeSet::new();
        let mut answered = 0;
        for e in endpoints {
            let c = Client::with_config(vec![e.clone()], client_config(Duration::ZERO))?;
            if let Ok(s) = c.status().await
                && s.leader_id.is_some()
            {
                answered += 1;
                heads.insert((s.applied_index, s.chain_index, s.chain_head.clone()));
            }
        }
        if answered == endpoints.len() && heads.len() == 1 {
            let (_, index, head) = heads.into_iter().next().expect("one head");
            return Ok((index, head));
        }
        if start.elapsed() > limit {
            bail!("the replicas did not converge within {limit:?}: {heads:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

struct Shared {
    history: History,
    registers: Vec<EntityId>,
    stop: AtomicBool,
    start: Instant,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// One client: writes (45%), compare-and-sets on the value it last saw (20%), linearizable
/// reads (35%), until told to stop. Every write value is unique.
async fn run_client(id: usize, client: Client, shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng(seed ^ (id as u64).wrapping_mul(0x1000_0000_01b3));
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let agent = format!("chaos-client-{id}");
    let signer = provenance(AGENT);
    let mut seq = 0i64;
    let mut seen: BTreeMap<Key, Option<i64>> = BTreeMap::new();
    while !shared.stop.load(Ordering::Relaxed) {
        seq += 1;
        let key = rng.below(shared.registers.len() as u64) as usize;
        let entity = shared.registers[key];
        let value = (id as i64 + 1) * 1_000_000 + seq;
        let roll = rng.below(100);
        if roll < 65 {
            let expected = if roll < 45 {
                None
            } else {
                Some(seen.get(&key).copied().flatten())
            };
            let mut tx = TxRequest::data(
                ns.clone(),
                vec![reg_op(EntityRef::Id(entity), value)],
                signer.clone(),
            );
            tx.idempotency_key = Some(format!("{agent}-{seq}"));
            let call = match expected {
                None => Call::Write { key, value },
                Some(expected) => {
                    tx.preconditions.push(Precondition {
                        entity,
                        attribute: Attribute::new(REG).expect("a valid attribute"),
                        expected: expected.map(Value::I64),
                    });
                    Call::Cas { key, expected, value }
                }
            };
            let pending = shared.history.invoke(id, call.clone(), shared.now_ms());
            let outcome = match client.transact(&tx).await {
                Ok(r) => {
                    seen.insert(key, Some(value));
                    Outcome::Written { tx: r.tx }
                }
                // A refused precondition is a definite "not applied".
                Err(e)
                    if matches!(call, Call::Cas { .. })
                        && e.code() == Some(tonic_code_failed_precondition()) =>
                {
                    Outcome::CasFailed
                }
                Err(_) => Outcome::Unknown,
            };
            shared.history.complete(pending, outcome, shared.now_ms());
        } else {
            let pending = shared.history.invoke(id, Call::Read { key }, shared.now_ms());
            match client.get(&ns, entity, GetOptions::default()).await {
                Ok(r) => {
                    let v = r.datoms.iter().find(|d| d.attribute == REG).and_then(|d| {
                        match d.value.as_ref().and_then(|v| v.kind.clone()) {
                            Some(engram_proto::pb::value::Kind::I64(i)) => Some(i),
                            _ => None,
                        }
                    });
                    seen.insert(key, v);
                    shared
                        .history
                        .complete(pending, Outcome::Value { value: v }, shared.now_ms());
                }
                // A failed read has no effect; the checker drops it.
                Err(_) => shared
                    .history
                    .complete(pending, Outcome::Unknown, shared.now_ms()),
            }
        }
    }
}

fn tonic_code_failed_precondition() -> tonic::Code {
    tonic::Code::FailedPrecondition
}

/// The (value, tx) of every assertion of each register, as one node has them.
async fn register_log(endpoint: &str, registers: &[EntityId]) -> Result<BTreeMap<Key, BTreeMap<i64, u64>>> {
    let client = Client::with_config(vec![endpoint.to_string()], client_config(Duration::from_secs(10)))?;
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let mut out = BTreeMap::new();
    for (key, entity) in registers.iter().enumerate() {
        let target = HistoryTarget::Entity {
            entity: *entity,
            attribute: Some(Attribute::new(REG).expect("a valid attribute")),
        };
        let resp = client
            .history(&ns, target, 0, Consistency::Stale)
            .await
            .with_context(|| format!("{endpoint}: history of register {key}"))?;
        let mut values = BTreeMap::new();
        for d in resp.datoms {
            if let Some(engram_proto::pb::value::Kind::I64(v)) = d.value.and_then(|v| v.kind) {
                values.insert(v, d.tx);
            }
        }
        out.insert(key, values);
    }
    Ok(out)
}

/// One node's audit chain, exported and verified offline.
async fn verify_chain(endpoint: &str) -> Result<engram_verify::Report> {
    let client = Client::with_config(vec![endpoint.to_string()], client_config(Duration::from_secs(10)))?;
    let bytes = client
        .export_bytes()
        .await
        .with_context(|| format!("{endpoint}: export"))?;
    let options = engram_verify::VerifyOptions {
        all: true,
        ..Default::default()
    };
    engram_verify::verify_export(bytes.as_slice(), &options, |_, _| {})
        .with_context(|| format!("{endpoint}: reading the export"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let env = match admin_key() {
        Ok(key) => {
            let admin = format!("{AGENT}={}", hex::encode(key.public().0));
            let _ = ADMIN.set(key);
            println!(
                "security: enforced; the nodes' first administrator is {admin} (a key made for this run)"
            );
            vec![("ENGRAM_ADMIN".to_string(), admin)]
        }
        Err(e) => {
            eprintln!("engram-chaos: {e:#}");
            Vec::new()
        }
    };
    let compose = Compose {
        file: args.compose.clone(),
        project: args.project.clone(),
        image: args.image.clone(),
        ports: [args.port_base, args.port_base + 1, args.port_base + 2],
        env,
    };
    let result = if compose.env.is_empty() {
        Err(anyhow::anyhow!(
            "no administrator key, so the cluster cannot be enforced"
        ))
    } else {
        run(&args, &compose).await
    };
    compose.heal_all();
    if !args.keep {
        let _ = compose.down();
    }
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("engram-chaos: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// How long the setup waits for the cluster's bootstrap to record its security mode.
const SETUP_WAIT: Duration = Duration::from_secs(90);

/// Runs the scenario; `Ok(false)` when a check failed (the report says which).
async fn run(args: &Args, compose: &Compose) -> Result<bool> {
    let started = Instant::now();
    compose.up_fresh().context("starting the cluster")?;
    let endpoints = compose.endpoints();
    wait_formed(&endpoints, Duration::from_secs(90)).await?;

    let client = Client::with_config(endpoints.clone(), client_config(Duration::from_secs(8)))?;
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let setup_ops = (0..args.registers)
        .map(|i| TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp(format!("r{i}")),
            attribute: Attribute::new(":reg/name").expect("a valid attribute"),
            value: Value::String(format!("register {i}")),
            valid_from_ns: None,
            valid_to_ns: None,
        })
        .collect();
    let mut setup = TxRequest::data(ns.clone(), setup_ops, provenance(AGENT));
    setup.idempotency_key = Some("chaos-setup".into());
    // The cluster has a leader before its bootstrap has recorded the security mode; until
    // then a node refuses callers that are not on loopback ("not initialised yet",
    // UNAVAILABLE). The client retries that within its policy; this loop waits longer, for a
    // slow container start. The setup carries an idempotency key, so trying again is safe.
    let receipt = loop {
        match client.transact(&setup).await {
            Ok(receipt) => break receipt,
            Err(e) if e.code() == Some(tonic::Code::Unavailable) && started.elapsed() < SETUP_WAIT => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context("creating the registers"),
        }
    };
    let registers: Vec<EntityId> = (0..args.registers)
        .map(|i| {
            receipt
                .temp_ids
                .get(&format!("r{i}"))
                .map(|id| EntityId(*id))
                .context("the setup receipt lacks a register id")
        })
        .collect::<Result<_>>()?;

    let shared = Arc::new(Shared {
        history: History::default(),
        registers: registers.clone(),
        stop: AtomicBool::new(false),
        start: Instant::now(),
    });
    let tasks: Vec<_> = (0..args.clients)
        .map(|id| tokio::spawn(run_client(id, client.clone(), shared.clone(), args.seed)))
        .collect();

    let mut rng = Rng(args.seed);
    let mut faults = Vec::new();
    for cycle in 1..=args.cycles {
        tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
        let fault = Fault::ALL[rng.below(3) as usize];
        let leader = current_leader(&endpoints).await;
        let node = match leader {
            Some(l) if rng.below(3) == 0 => l,
            _ => rng.below(3) + 1,
        };
        let on_leader = Some(node) == leader;
        let at_ms = shared.now_ms();
        compose
            .inject(fault, node)
            .with_context(|| format!("cycle {cycle}: {} node {node}", fault.name()))?;
        tokio::time::sleep(Duration::from_millis(args.fault_ms)).await;
        compose
            .heal(fault, node)
            .with_context(|| format!("cycle {cycle}: healing {} of node {node}", fault.name()))?;
        let line = format!(
            "cycle {cycle}: {} node {node}{} at {:.1} s",
            fault.name(),
            if on_leader { " (the leader)" } else { "" },
            at_ms as f64 / 1000.0
        );
        if !args.json {
            println!("{line}");
        }
        faults.push(line);
    }
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    shared.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.context("a client task failed")?;
    }

    let (chain_index, _) = wait_converged(&endpoints, Duration::from_secs(90)).await?;
    let ops = shared.history.ops();
    let mut problems = Vec::new();

    // Every acknowledged write, on every node, at its tx.
    let mut logs = Vec::new();
    for e in &endpoints {
        logs.push((e.clone(), register_log(e, &registers).await?));
    }
    let mut acked = 0;
    let mut lost = 0;
    for op in &ops {
        let (Call::Write { key, value } | Call::Cas { key, value, .. }, Outcome::Written { tx }) =
            (&op.call, &op.outcome)
        else {
            continue;
        };
        acked += 1;
        let missing: Vec<&str> = logs
            .iter()
            .filter(|(_, log)| log.get(key).and_then(|v| v.get(value)) != Some(tx))
            .map(|(e, _)| e.as_str())
            .collect();
        if !missing.is_empty() {
            lost += 1;
            problems.push(format!(
                "acknowledged write of {value} to register {key} at tx {tx} is missing on {missing:?}"
            ));
        }
    }
    let unknown = ops
        .iter()
        .filter(|o| o.outcome == Outcome::Unknown && !matches!(o.call, Call::Read { .. }))
        .count();
    let reads = ops.iter().filter(|o| matches!(o.call, Call::Read { .. })).count();

    // Replica agreement: every node holds the same register log.
    for (e, log) in &logs[1..] {
        if *log != logs[0].1 {
            problems.push(format!("{e} and {} hold different register histories", logs[0].0));
        }
    }

    // Every chain verifies offline, and all end at the same head.
    let mut heads = BTreeSet::new();
    for e in &endpoints {
        let report = verify_chain(e).await?;
        if !report.ok() {
            problems.push(format!(
                "{e}: the audit chain does not verify: {:?}",
                report.failures
            ));
        }
        heads.insert((report.head_index, report.head_hash.clone()));
    }
    if heads.len() != 1 {
        problems.push(format!("the chains end at different heads: {heads:?}"));
    }

    // Linearizability, with unanswered writes resolved against the agreed log.
    let committed: BTreeSet<(Key, i64)> = logs[0]
        .1
        .iter()
        .flat_map(|(key, values)| values.keys().map(move |v| (*key, *v)))
        .collect();
    let nonlinear = engram_lincheck::linearizable::check(&ops, &committed);
    problems.extend(nonlinear.iter().cloned());

    let pauses = longest_pauses(&ops, PAUSES_REPORTED);
    let passed = problems.is_empty();
    let report = json!({
        "passed": passed, "seed": args.seed, "cycles": args.cycles, "faults": faults,
        "clients": args.clients, "operations": ops.len(), "writes_acked": acked, "writes_lost": lost,
        "writes_unknown": unknown, "reads": reads, "chain_entries": chain_index,
        "linearizable": nonlinear.is_empty(), "problems": problems,
        "longest_pauses_ms": pauses.iter().map(|p| json!({"from_ms": p.0, "ms": p.1})).collect::<Vec<_>>(),
        "seconds": started.elapsed().as_secs(),
    });
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_else(|_| report.to_string())
        );
    } else {
        println!(
            "chaos: seed {} · {} cycles · {} operations · {acked} writes acknowledged, {lost} lost, {unknown} unknown · {reads} reads · chains of {chain_index} entries verified and equal on 3 nodes · history {} · {} s",
            args.seed,
            args.cycles,
            ops.len(),
            if nonlinear.is_empty() {
                "linearizable"
            } else {
                "NOT linearizable"
            },
            started.elapsed().as_secs()
        );
        let pauses: Vec<String> = pauses
            .iter()
            .map(|(from, ms)| format!("{:.2} s from {:.1} s", *ms as f64 / 1000.0, *from as f64 / 1000.0))
            .collect();
        println!(
            "longest pauses between acknowledged writes: {}",
            pauses.join(", ")
        );
        for p in &problems {
            println!("FAILED: {p}");
        }
    }
    Ok(passed)
}

/// How many of the longest pauses a run reports.
const PAUSES_REPORTED: usize = 5;

/// The `n` longest stretches of time in which no write was acknowledged, as `(from_ms, ms)`,
/// longest first: from one acknowledgement to the next.
/// Set beside the cycles' fault times they show which fault a client waited out, and for how
/// long.
fn longest_pauses(ops: &[engram_lincheck::history::Op], n: usize) -> Vec<(u64, u64)> {
    let mut acked: Vec<u64> = ops
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Written { .. }))
        .map(|op| op.returned_ms)
        .collect();
    acked.sort_unstable();
    let mut gaps: Vec<(u64, u64)> = acked.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
    gaps.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    gaps.truncate(n);
    gaps
}

#[cfg(test)]
mod tests {
    use engram_client::ClientError;

    use super::*;

    #[test]
    fn pauses_are_the_longest_gaps_between_acknowledgements() {
        let op = |returned_ms: u64, outcome: Outcome| engram_lincheck::history::Op {
            client: 0,
            call: Call::Write { key: 0, value: 1 },
            outcome,
            invoked_at: 0,
            returned_at: 0,
            invoked_ms: 0,
            returned_ms,
        };
        let ops = [
            op(100, Outcome::Written { tx: 1 }),
            op(250, Outcome::Written { tx: 2 }),
            // Not an acknowledgement: it does not end a pause.
            op(900, Outcome::Unknown),
            op(1_750, Outcome::Written { tx: 3 }),
            op(1_800, Outcome::Written { tx: 4 }),
        ];
        assert_eq!(longest_pauses(&ops, 2), vec![(250, 1_500), (100, 150)]);
        assert!(longest_pauses(&ops[..1], 5).is_empty());
    }

    #[test]
    fn the_schedule_is_a_function_of_the_seed() {
        let draw = |seed| {
            let mut r = Rng(seed);
            (0..8).map(|_| r.below(3)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(7).iter().all(|x| *x < 3));
    }

    #[test]
    fn unknown_errors_are_not_taken_for_refusals() {
        // Only FAILED_PRECONDITION on a compare-and-set means "not applied".
        let e = ClientError::Endpoint {
            endpoint: "x".into(),
            reason: "y".into(),
        };
        assert_ne!(e.code(), Some(tonic_code_failed_precondition()));
    }
}
