//! `engram demo`: a local 3-node cluster, concurrent agents, a leader SIGKILLed mid-run and
//! restarted, and then the checks that matter: no acknowledged write lost on any node, every
//! chain verifies, all chains agree, nothing applied twice.
//!
//! Timeline over `--duration-secs` D: agents write from 0 to D; at 0.4·D the leader is killed
//! and the election timed; at 0.7·D (and not before the election) the node is restarted with
//! the same id and data directory. After the agents stop, the demo waits until every node has
//! applied every acknowledged transaction, then reads each node separately (stale reads, its own
//! audit stream) and checks the invariants of [`crate::invariants`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use engram_access::AgentKey;
use engram_client::{Client, ClientConfig, ClientError, Consistency, HistoryTarget};
use engram_types::{
    Attribute, EntityId, EntityRef, Hash, Namespace, Op, Precondition, Provenance, Status, TxOp, TxRequest,
    Value,
};
use futures::StreamExt;
use serde::Serialize;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cli::DemoArgs;
use crate::common::Reported;
use crate::invariants::{self, AckedTx, ChainEntry, ExpectedDatom, NodeView, StoredDatom, Violation};
use crate::local_cluster::{LocalCluster, agreed_leader, free_ports};
use crate::output::outln;
use crate::output::print_json;
use crate::ui::Ui;

const NODES: usize = 3;

/// Longer than any healthy pause (an election takes about a second, the client retries for 15 s):
/// no acknowledgement for this long means the cluster is not making progress.
const WRITE_STALL: Duration = Duration::from_secs(30);

/// What the demo measured and checked; printed as prose or, with `--json`, as this document.
#[derive(Debug, Serialize)]
pub struct DemoSummary {
    pub ok: bool,
    pub nodes: usize,
    pub agents: u32,
    pub write_secs: f64,
    pub tx_acked: u64,
    pub datoms_acked: u64,
    pub tx_lost: u64,
    /// Transactions whose outcome an agent never learnt (still failing when the run ended).
    pub tx_unacknowledged: u64,
    pub tx_per_sec: f64,
    pub precondition_txs_acked: u64,
    pub killed_node: u64,
    pub new_leader: u64,
    pub election_ms: u64,
    /// The longest time no agent got an acknowledgement: the write outage seen by clients.
    pub max_write_pause_ms: u64,
    pub restarted_node: u64,
    pub catch_up_ms: Option<u64>,
    pub chain_length: u64,
    pub head_hash: String,
    pub elapsed_ms: u64,
    pub data_dir: Option<String>,
    pub node_heads: Vec<NodeHead>,
    pub checks: Vec<Check>,
}

#[derive(Debug, Serialize)]
pub struct NodeHead {
    pub id: u64,
    pub endpoint: String,
    pub verified_entries: u64,
    pub head_index: u64,
    pub head_hash: String,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Runs the demo and prints its summary. Fails (after printing) if any check fails.
pub async fn run(args: DemoArgs, json: bool) -> Result<DemoSummary> {
    let ui = Ui::new(json);
    let (temp, dir) = match &args.data_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            (None, d.clone())
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("engram-demo-")
                .tempdir()
                .context("creating a temporary directory")?;
            let path = t.path().to_path_buf();
            (Some(t), path)
        }
    };
    let exe = std::env::current_exe().context("locating the engram executable")?;
    // Ctrl-C or SIGTERM drops the demo future, and with it the cluster, whose Drop kills the
    // children.
    let outcome = tokio::select! {
        r = run_in(&args, &exe, &dir, ui) => r,
        signal = interrupted() => Err(anyhow!("interrupted by {signal}")),
    };
    let was_interrupted = matches!(&outcome, Err(e) if e.to_string().starts_with("interrupted by"));
    // Keep the logs of a failed run; an interrupted one was the user's choice, not a failure.
    let keep = args.data_dir.is_some() || (!was_interrupted && !matches!(&outcome, Ok(s) if s.ok));
    let kept_dir = if keep {
        // Keep the nodes' logs for a failed run; the user asked for --data-dir anyway.
        if let Some(t) = temp {
            let _ = t.keep();
        }
        Some(dir.display().to_string())
    } else {
        None
    };
    match outcome {
        Ok(mut summary) => {
            summary.data_dir = kept_dir;
            let printed = if json {
                print_json(&json!(summary))
            } else {
                print_summary(&summary)
            };
            // Failed checks outrank a closed stdout: they still end the demo with an error.
            if !summary.ok {
                let failed: Vec<&str> = summary.checks.iter().filter(|c| !c.ok).map(|c| c.name).collect();
                return Err(Reported(format!("demo checks failed: {}", failed.join(", "))).into());
            }
            printed?;
            Ok(summary)
        }
        Err(e) => {
            if let Some(d) = &kept_dir {
                ui.note(format!("node data and logs kept in {d}"));
            }
            Err(e.context(match kept_dir {
                Some(d) => format!("demo failed (node logs in {d})"),
                None => "demo failed".to_string(),
            }))
        }
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM, naming it.
async fn interrupted() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            // Without a SIGTERM handler, Ctrl-C still works.
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

fn print_summary(s: &DemoSummary) -> Result<()> {
    let verdict = if s.ok {
        "all checks passed"
    } else {
        "CHECKS FAILED"
    };
    outln!()?;
    outln!(
        "Engram demo: {} nodes, {} agents, {:.1} s of writes — {verdict}",
        s.nodes,
        s.agents,
        s.write_secs
    )?;
    outln!(
        "  transactions acknowledged  {} ({:.1} tx/s, {} datoms, {} with preconditions)",
        s.tx_acked,
        s.tx_per_sec,
        s.datoms_acked,
        s.precondition_txs_acked
    )?;
    outln!("  transactions lost          {}", s.tx_lost)?;
    if s.tx_unacknowledged > 0 {
        outln!(
            "  outcome unknown            {} (never acknowledged; not counted as acked)",
            s.tx_unacknowledged
        )?;
    }
    outln!(
        "  leader failover            node {} SIGKILLed; node {} elected in {} ms; longest write pause {} ms",
        s.killed_node,
        s.new_leader,
        s.election_ms,
        s.max_write_pause_ms
    )?;
    outln!(
        "  restart                    node {} rejoined{}",
        s.restarted_node,
        s.catch_up_ms
            .map(|ms| format!(" and caught up in {ms} ms"))
            .unwrap_or_default()
    )?;
    outln!(
        "  audit chain                {} entries, head {}",
        s.chain_length,
        s.head_hash
    )?;
    for n in &s.node_heads {
        outln!(
            "    node {} ({})  verified {} entries, head {} {}",
            n.id,
            n.endpoint,
            n.verified_entries,
            n.head_index,
            &n.head_hash[..n.head_hash.len().min(16)]
        )?;
    }
    outln!(
        "  elapsed                    {:.1} s",
        s.elapsed_ms as f64 / 1000.0
    )?;
    for c in &s.checks {
        outln!(
            "  [{}] {}: {}",
            if c.ok { "ok" } else { "FAIL" },
            c.name,
            c.detail
        )?;
    }
    if let Some(d) = &s.data_dir {
        outln!("  node data and logs         {d}")?;
    }
    Ok(())
}

// ------------------------------------------------------------------ agents

/// State shared by the agents and the controller.
struct Shared {
    stop: AtomicBool,
    /// Past this, an agent stops retrying a transaction and counts it as unacknowledged.
    give_up_at: Mutex<Option<Instant>>,
    ledger: Mutex<Ledger>,
    acked: AtomicU64,
    unacknowledged: AtomicU64,
    with_preconditions: AtomicU64,
    refused: AtomicU64,
    errors: Mutex<Vec<String>>,
}

#[derive(Default)]
struct Ledger {
    acked: Vec<AckedTx>,
    last_ack: Option<Instant>,
    max_pause: Duration,
}

impl Shared {
    fn record(&self, tx: AckedTx, preconditions: bool) {
        let now = Instant::now();
        if let Ok(mut l) = self.ledger.lock() {
            if let Some(last) = l.last_ack {
                l.max_pause = l.max_pause.max(now.duration_since(last));
            }
            l.last_ack = Some(now);
            l.acked.push(tx);
        }
        self.acked.fetch_add(1, Ordering::Relaxed);
        if preconditions {
            self.with_preconditions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a refused write, keeping the first few messages: a server refusing everything
    /// must not grow the demo's memory for the length of the run.
    fn error(&self, message: String) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut e) = self.errors.lock()
            && e.len() < 10
        {
            e.push(message);
        }
    }
}

/// A small deterministic PRNG (xorshift64*): the demo needs variety, not cryptography.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const KINDS: [&str; 4] = [":kind/observation", ":kind/plan", ":kind/fact", ":kind/question"];
const SUBJECTS: [&str; 8] = [
    "the build",
    "the nightly eval",
    "ticket ENG-212",
    "the cache layer",
    "the API schema",
    "the flaky test",
    "the deploy",
    "the retriever",
];
const VERBS: [&str; 6] = [
    "failed on",
    "depends on",
    "is blocked by",
    "was fixed in",
    "regressed after",
    "needs review of",
];
const OBJECTS: [&str; 6] = [
    "step lint",
    "commit 4f2a9c",
    "the auth service",
    "PR #481",
    "the index rebuild",
    "the token budget",
];

fn attr(name: &str) -> Result<Attribute> {
    Attribute::new(name).map_err(|e| anyhow!("demo attribute {name}: {e}"))
}

/// The agent's knowledge of its own memories, kept only from acknowledged transactions.
struct Memory {
    id: EntityId,
    confidence: f64,
    /// `Some` while the status is known to be `:status/open` with these tags.
    open_tags: Option<Value>,
}

struct Planned {
    tx: TxRequest,
    preconditions: bool,
    /// Entities whose state the agent can no longer vouch for if the outcome stays unknown.
    touches: Vec<EntityId>,
}

struct Agent {
    index: u32,
    namespace: Namespace,
    client: Client,
    run_id: String,
    rng: Rng,
    memories: Vec<Memory>,
    seq: u64,
}

impl Agent {
    fn provenance(&self, confidence: f64, status: Status) -> Provenance {
        Provenance {
            agent: format!("agent-{}", self.index),
            session: format!("demo-{}", self.run_id),
            source: "engram demo".into(),
            confidence,
            status,
        }
    }

    fn op(op: Op, entity: EntityRef, attribute: &str, value: Value) -> Result<TxOp> {
        Ok(TxOp {
            op,
            entity,
            attribute: attr(attribute)?,
            value,
            valid_from_ns: None,
            valid_to_ns: None,
        })
    }

    /// Chooses the next transaction: mostly new memories; every third one, when possible, a
    /// compare-and-set that closes an open memory; sometimes a summary referring to an earlier one.
    fn plan(&mut self) -> Result<Planned> {
        self.seq += 1;
        let key = format!("{}/agent-{}/{}", self.run_id, self.index, self.seq);
        let open: Vec<usize> = (0..self.memories.len())
            .filter(|&i| self.memories[i].open_tags.is_some())
            .collect();
        if self.seq.is_multiple_of(3) && !open.is_empty() {
            let m = &self.memories[open[self.rng.below(open.len())]];
            let id = m.id;
            let confidence = (m.confidence + 0.05).min(0.99);
            let tags = m.open_tags.clone().unwrap_or(Value::Json("[]".into()));
            let e = EntityRef::Id(id);
            let tx = TxRequest {
                namespace: self.namespace.clone(),
                branch: None,
                schema: Vec::new(),
                branch_op: None,
                ops: vec![
                    Self::op(
                        Op::Assert,
                        e.clone(),
                        ":memory/status",
                        Value::Keyword(":status/done".into()),
                    )?,
                    Self::op(
                        Op::Assert,
                        e.clone(),
                        ":memory/confidence",
                        Value::F64(confidence),
                    )?,
                    Self::op(Op::Retract, e, ":memory/tags", tags)?,
                ],
                // Closing is only right if the memory is still open: a lost or doubled write
                // would make this guard fail, and the demo count it as an error.
                preconditions: vec![Precondition {
                    entity: id,
                    attribute: attr(":memory/status")?,
                    expected: Some(Value::Keyword(":status/open".into())),
                }],
                idempotency_key: Some(key),
                provenance: self.provenance(confidence, Status::Verified),
            };
            return Ok(Planned {
                tx,
                preconditions: true,
                touches: vec![id],
            });
        }
        let kind = self.rng.pick(&KINDS);
        let text = format!(
            "agent-{} {}: {} {} {}",
            self.index,
            kind.trim_start_matches(":kind/"),
            self.rng.pick(&SUBJECTS),
            self.rng.pick(&VERBS),
            self.rng.pick(&OBJECTS)
        );
        let confidence = 0.5 + self.rng.below(45) as f64 / 100.0;
        let tags = Value::json(&format!(
            r#"["{}","seq-{}"]"#,
            self.rng.pick(&["ci", "infra", "research", "ops"]),
            self.seq
        ))
        .map_err(|e| anyhow!("demo tags: {e}"))?;
        let m = EntityRef::Temp("m".into());
        let mut ops = vec![
            Self::op(Op::Assert, m.clone(), ":memory/kind", Value::Keyword(kind.into()))?,
            Self::op(Op::Assert, m.clone(), ":memory/text", Value::String(text))?,
            Self::op(
                Op::Assert,
                m.clone(),
                ":memory/confidence",
                Value::F64(confidence),
            )?,
            Self::op(
                Op::Assert,
                m.clone(),
                ":memory/status",
                Value::Keyword(":status/open".into()),
            )?,
            Self::op(Op::Assert, m.clone(), ":memory/tags", tags)?,
            Self::op(Op::Assert, m.clone(), ":memory/seq", Value::I64(self.seq as i64))?,
        ];
        let mut touches = Vec::new();
        if self.seq.is_multiple_of(5) && !self.memories.is_empty() {
            let source = self.memories[self.rng.below(self.memories.len())].id;
            ops.push(Self::op(
                Op::Assert,
                m,
                ":memory/derived-from",
                Value::Ref(source),
            )?);
            touches.push(source);
        }
        let tx = TxRequest {
            namespace: self.namespace.clone(),
            branch: None,
            schema: Vec::new(),
            branch_op: None,
            ops,
            preconditions: vec![],
            idempotency_key: Some(key),
            provenance: self.provenance(confidence, Status::Candidate),
        };
        Ok(Planned {
            tx,
            preconditions: false,
            touches,
        })
    }

    /// Sends `tx` until it is acknowledged or refused. The client already retries transient
    /// failures for its budget; past that the agent keeps retrying with the same idempotency
    /// key (so at most one application) until the run gives up.
    async fn submit(
        &self,
        tx: &TxRequest,
        shared: &Shared,
    ) -> Result<engram_client::pb::TransactResponse, ClientError> {
        loop {
            match self.client.transact(tx).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    let transient = e.is_transient();
                    let give_up = shared
                        .give_up_at
                        .lock()
                        .ok()
                        .and_then(|g| *g)
                        .is_some_and(|t| Instant::now() >= t);
                    if !transient || give_up {
                        return Err(e);
                    }
                }
            }
        }
    }

    async fn run(mut self, shared: Arc<Shared>) -> Result<()> {
        while !shared.stop.load(Ordering::Relaxed) {
            let planned = self.plan()?;
            let label = format!("agent-{}#{}", self.index, self.seq);
            match self.submit(&planned.tx, &shared).await {
                Ok(receipt) => {
                    let resolve = |r: &EntityRef| match r {
                        EntityRef::Id(id) => Some(*id),
                        EntityRef::Temp(name) => receipt.temp_ids.get(name).map(|id| EntityId(*id)),
                        // The demo's agents name entities by id or temporary name only.
                        EntityRef::Lookup(..) => None,
                    };
                    let mut datoms = Vec::new();
                    for op in &planned.tx.ops {
                        let Some(entity) = resolve(&op.entity) else {
                            shared.error(format!("{label}: the receipt has no id for {:?}", op.entity));
                            break;
                        };
                        datoms.push(ExpectedDatom {
                            entity,
                            attribute: op.attribute.clone(),
                            value: op.value.clone(),
                            op: op.op,
                        });
                    }
                    let (Some(audit_hash), Some(datom_hashes)) = (
                        Hash::from_slice(&receipt.audit_hash),
                        receipt
                            .datom_hashes
                            .iter()
                            .map(|h| Hash::from_slice(h))
                            .collect::<Option<Vec<_>>>(),
                    ) else {
                        shared.error(format!("{label}: the receipt has malformed hashes"));
                        continue;
                    };
                    // Update what the agent knows only from acknowledged effects.
                    if planned.preconditions {
                        for id in &planned.touches {
                            if let Some(m) = self.memories.iter_mut().find(|m| m.id == *id) {
                                m.open_tags = None;
                            }
                        }
                    } else if let Some(id) = receipt.temp_ids.get("m") {
                        let tags = planned
                            .tx
                            .ops
                            .iter()
                            .find(|o| o.attribute.as_str() == ":memory/tags");
                        self.memories.push(Memory {
                            id: EntityId(*id),
                            confidence: planned.tx.provenance.confidence,
                            open_tags: tags.map(|o| o.value.clone()),
                        });
                    }
                    shared.record(
                        AckedTx {
                            label,
                            namespace: planned.tx.namespace.clone(),
                            tx: receipt.tx,
                            audit_index: receipt.audit_index,
                            audit_hash,
                            datom_hashes,
                            datoms,
                        },
                        planned.preconditions,
                    );
                }
                Err(e) => {
                    // The outcome is unknown (or the write was refused): stop relying on the
                    // state of what it touched.
                    for id in &planned.touches {
                        if let Some(m) = self.memories.iter_mut().find(|m| m.id == *id) {
                            m.open_tags = None;
                        }
                    }
                    // Only a definite rejection says the write changed nothing; any other
                    // failure may hide an applied write, which exactly_once must allow for.
                    if !e.is_definite_rejection() {
                        shared.unacknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                    // Still retrying when the run ended is the one expected failure; anything
                    // else (a refusal, an internal error) is a finding.
                    if !e.is_transient() {
                        shared.error(format!("{label}: {e}"));
                    }
                }
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ the run

fn run_id() -> String {
    // Idempotency keys must not collide with those of an earlier run over the same
    // --data-dir; wall-clock nanoseconds and the pid make them unique per run.
    #[allow(clippy::disallowed_methods)]
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", nanos as u64, std::process::id())
}

/// The nodes' ports. A cluster records its members' addresses, so a data directory reused from
/// an earlier run must get the same ports again: they are kept in `DIR/ports.json`.
fn demo_ports(dir: &Path, base_port: Option<u16>) -> Result<Vec<u16>> {
    let file = dir.join("ports.json");
    let ports: Vec<u16> = match std::fs::read_to_string(&file) {
        Ok(text) => {
            let ports: Vec<u16> =
                serde_json::from_str(&text).with_context(|| format!("reading {}", file.display()))?;
            if ports.len() != NODES {
                bail!("{} lists {} ports, expected {NODES}", file.display(), ports.len());
            }
            if let Some(p) = base_port
                && ports[0] != p
            {
                bail!(
                    "{} was created with ports {ports:?}; its cluster cannot move to --base-port {p}",
                    dir.display()
                );
            }
            ports
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match base_port {
            Some(p) => (0..NODES as u16)
                .map(|i| p.checked_add(i))
                .collect::<Option<_>>()
                .ok_or_else(|| anyhow!("--base-port {p}: the ports do not fit below 65536"))?,
            None => free_ports(NODES)?,
        },
        Err(e) => return Err(e).with_context(|| format!("reading {}", file.display())),
    };
    std::fs::write(&file, serde_json::to_string(&ports)?)
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(ports)
}

enum Phase {
    BeforeKill,
    Electing { killed: u64, at: Instant },
    BeforeRestart { killed: u64 },
    CatchingUp { node: u64, at: Instant, target: u64 },
    Done,
}

/// The key file `NAME.key` in the demo's directory, made on first use (a --data-dir keeps it,
/// so a second run signs as the same agents).
fn key_file(dir: &Path, name: &str) -> Result<AgentKey> {
    let path = dir.join(format!("{name}.key"));
    if path.exists() {
        return Ok(AgentKey::load(&path)?);
    }
    crate::access_cmd::new_key_file(name, &path)
}

fn signed_client(endpoints: Vec<String>, key: Arc<AgentKey>) -> Result<Client> {
    let config = ClientConfig {
        agent: Some(key),
        ..ClientConfig::default()
    };
    Ok(Client::with_config(endpoints, config)?)
}

/// What each demo agent may do, on its own namespace only.
const AGENT_ACTIONS: [&str; 5] = ["read", "read-history", "write", "retract", "promote"];

/// Registers agent `k` and grants it [`AGENT_ACTIONS`] on `demo/agent-k`, unless an earlier
/// run did (`known` and `granted` are what the cluster held before).
async fn register_agent(
    admin: &Client,
    dir: &Path,
    k: u32,
    known: &engram_client::pb::ListAgentsResponse,
    granted: &engram_client::pb::ListGrantsResponse,
) -> Result<Arc<AgentKey>> {
    let name = format!("agent-{k}");
    let key = key_file(dir, &name)?;
    if !known
        .agents
        .iter()
        .any(|a| a.name == name && a.public_key == key.public().0)
    {
        admin.add_agent(&name, key.public().0).await?;
    }
    let held: Vec<_> = granted.grants.iter().filter(|g| g.principal == name).collect();
    let ns = format!("demo/agent-{k}");
    for action in AGENT_ACTIONS {
        if !held.iter().any(|g| g.action == action && g.prefix == ns) {
            admin.grant(&name, action, &ns, false).await?;
        }
    }
    Ok(Arc::new(key))
}

/// Two agents, two sets of rights: agent 1 is refused on agent 2's namespace (and an unsigned
/// client everywhere), and neither refusal moves the chain. `Err` says what went wrong.
async fn check_policy(
    endpoints: &[String],
    keys: &[Arc<AgentKey>],
    admin: &Client,
) -> Result<Result<String, String>> {
    let (Some(first), true) = (keys.first(), keys.len() >= 2) else {
        return Ok(Ok("one agent only: no second namespace to be refused on".into()));
    };
    let before = admin.head().await?.index;
    let intruder = signed_client(endpoints.to_vec(), first.clone())?;
    let mut trespass = TxRequest::data(
        Namespace::new("demo/agent-2").map_err(|e| anyhow!("{e}"))?,
        vec![TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp("note".into()),
            attribute: Attribute::new(":memory/text").map_err(|e| anyhow!("{e}"))?,
            value: Value::String("not mine to write".into()),
            valid_from_ns: None,
            valid_to_ns: None,
        }],
        Provenance {
            agent: "agent-1".into(),
            confidence: 1.0,
            ..Default::default()
        },
    );
    let denied = intruder.transact(&trespass).await;
    trespass.provenance.agent = "anyone".into();
    let anonymous = Client::connect(endpoints.to_vec()).await?;
    let unsigned = anonymous.transact(&trespass).await;
    let after = admin.head().await?.index;
    let code = |r: &Result<engram_client::pb::TransactResponse, ClientError>| {
        r.as_ref().err().and_then(ClientError::code)
    };
    Ok(
        match (code(&denied), code(&unsigned), before == after) {
            (Some(tonic::Code::PermissionDenied), Some(tonic::Code::Unauthenticated), true) => Ok(
                "agent-1 writing demo/agent-2: PERMISSION_DENIED; an unsigned write: UNAUTHENTICATED; the chain did not move".into(),
            ),
            (d, u, same) => Err(format!(
                "expected PERMISSION_DENIED and UNAUTHENTICATED with the chain unchanged, got {d:?}, {u:?}, chain unchanged: {same}"
            )),
        },
    )
}

async fn run_in(args: &DemoArgs, exe: &Path, dir: &Path, ui: Ui) -> Result<DemoSummary> {
    let started = Instant::now();

    // 1. Nodes.
    let pb = ui.spinner(format!("starting {NODES} nodes in {}", dir.display()));
    let ports = demo_ports(dir, args.base_port)?;
    let mut cluster = LocalCluster::start(exe, dir, &ports, &[])?;
    let statuses = cluster.wait_all_answer(Duration::from_secs(60)).await?;
    ui.done(
        &pb,
        format!("{NODES} nodes answering at {}", cluster.endpoints().join(", ")),
    );

    // 2. Cluster, in enforced mode: an administrator, then one key and one namespace's rights
    //    per agent.
    let pb = ui.spinner("initialising the cluster (enforced mode) and electing a leader");
    let root = key_file(dir, "root")?;
    let leader = if statuses.iter().any(|s| s.initialized) {
        // A --data-dir from an earlier run: the cluster exists already.
        cluster.wait_for_leader(None, Duration::from_secs(30)).await?
    } else {
        cluster
            .init_with(Duration::from_secs(30), Some(("root", root.public().0)))
            .await?
    };
    ui.done(&pb, format!("cluster formed; node {leader} leads"));
    let pb = ui.spinner(format!("registering {} agents and their grants", args.agents));
    let endpoints = cluster.endpoints();
    let admin = signed_client(endpoints.clone(), Arc::new(root))?;
    let (known, granted) = (admin.list_agents().await?, admin.list_grants("").await?);
    let mut agent_keys = Vec::new();
    for k in 1..=args.agents {
        agent_keys.push(register_agent(&admin, dir, k, &known, &granted).await?);
    }
    let policy = check_policy(&endpoints, &agent_keys, &admin).await?;
    let start_index = cluster.node(leader)?.probe().status().await?.chain_index;
    ui.done(
        &pb,
        format!(
            "{} agents registered, each granted its own namespace only",
            args.agents
        ),
    );

    // 3. Agents, with the leader killed and restarted under load.
    let run_id = run_id();
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        give_up_at: Mutex::new(None),
        ledger: Mutex::new(Ledger::default()),
        acked: AtomicU64::new(0),
        unacknowledged: AtomicU64::new(0),
        with_preconditions: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        errors: Mutex::new(Vec::new()),
    });
    let mut agents = JoinSet::new();
    for (k, key) in (1..=args.agents).zip(&agent_keys) {
        // Each agent starts at a different node, as agents spread over a real cluster would.
        let mut eps = endpoints.clone();
        let shift = k as usize % eps.len();
        eps.rotate_left(shift);
        let agent = Agent {
            index: k,
            namespace: Namespace::new(format!("demo/agent-{k}")).map_err(|e| anyhow!("{e}"))?,
            client: signed_client(eps, key.clone())?,
            run_id: run_id.clone(),
            rng: Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(k).wrapping_mul(0xbf58_476d_1ce4_e5b9)),
            memories: Vec::new(),
            seq: 0,
        };
        agents.spawn(agent.run(shared.clone()));
    }

    let duration = Duration::from_secs(args.duration_secs);
    let kill_at = duration.mul_f64(0.4);
    let restart_at = duration.mul_f64(0.7);
    let hard_deadline = duration + Duration::from_secs(90);
    let write_start = Instant::now();
    let pb = ui.bar(
        duration.as_millis() as u64,
        "{spinner:.cyan} {msg}\n  [{bar:40}] {elapsed}",
        format!("{} agents writing", args.agents),
    );
    let mut phase = Phase::BeforeKill;
    let mut events: Vec<String> = Vec::new();
    let (mut killed_node, mut new_leader, mut election, mut catch_up) = (0u64, 0u64, None, None);
    loop {
        let t = write_start.elapsed();
        pb.set_position(t.min(duration).as_millis() as u64);
        pb.set_message(format!(
            "{} agents · {} tx acked{}",
            args.agents,
            shared.acked.load(Ordering::Relaxed),
            events.iter().map(|e| format!(" · {e}")).collect::<String>()
        ));
        if t > hard_deadline {
            bail!("the failover did not complete within {hard_deadline:?}");
        }
        // Writes that stop entirely (no quorum, a wedged node) fail the run with a reason
        // instead of waiting for the deadline.
        let last_ack = shared.ledger.lock().ok().and_then(|l| l.last_ack);
        let silent_for = last_ack.map_or(t, |at| at.elapsed());
        if silent_for > WRITE_STALL {
            bail!(
                "no write was acknowledged for {:.0} s ({} so far){}",
                silent_for.as_secs_f64(),
                shared.acked.load(Ordering::Relaxed),
                events.iter().map(|e| format!("; {e}")).collect::<String>()
            );
        }
        if let Some(res) = agents.try_join_next() {
            // An agent ends before the stop only on an internal error or a panic.
            res.map_err(|e| anyhow!("an agent task failed: {e}"))??;
            bail!("an agent stopped early");
        }
        cluster.check_running()?;
        phase = match phase {
            Phase::BeforeKill if t >= kill_at => {
                let statuses = cluster.statuses().await;
                match agreed_leader(&statuses) {
                    Some(leader) => {
                        cluster.kill(leader)?;
                        killed_node = leader;
                        events.push(format!("node {leader} (leader) SIGKILLed"));
                        Phase::Electing {
                            killed: leader,
                            at: Instant::now(),
                        }
                    }
                    // Mid-heartbeat the nodes may briefly disagree; ask again.
                    None => Phase::BeforeKill,
                }
            }
            Phase::Electing { killed, at } => {
                let statuses = cluster.statuses().await;
                let elected = statuses.iter().find_map(|(id, s)| {
                    s.as_ref()
                        .ok()
                        .filter(|s| s.role.eq_ignore_ascii_case("leader"))
                        .map(|_| *id)
                });
                match elected {
                    Some(id) if id != killed => {
                        let ms = at.elapsed().as_millis() as u64;
                        election = Some(ms);
                        new_leader = id;
                        events.push(format!("node {id} elected in {ms} ms"));
                        Phase::BeforeRestart { killed }
                    }
                    _ => Phase::Electing { killed, at },
                }
            }
            Phase::BeforeRestart { killed } if t >= restart_at => {
                // Catching up means replaying at least what the leader had applied by now.
                let target = cluster
                    .node(new_leader)?
                    .probe()
                    .status()
                    .await
                    .map(|s| s.applied_index)
                    .unwrap_or(0);
                cluster.restart(killed)?;
                events.push(format!("node {killed} restarted"));
                Phase::CatchingUp {
                    node: killed,
                    at: Instant::now(),
                    target,
                }
            }
            Phase::CatchingUp { node, at, target } => match cluster.node(node)?.probe().status().await {
                Ok(s) if s.applied_index >= target && s.chain_index > 0 => {
                    let ms = at.elapsed().as_millis() as u64;
                    catch_up = Some(ms);
                    events.push(format!("node {node} caught up in {ms} ms"));
                    Phase::Done
                }
                _ => Phase::CatchingUp { node, at, target },
            },
            other => other,
        };
        let restarted = matches!(phase, Phase::CatchingUp { .. } | Phase::Done);
        if t >= duration && restarted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(
            if matches!(phase, Phase::Electing { .. }) {
                10
            } else {
                50
            },
        ))
        .await;
    }
    let write_secs = write_start.elapsed().as_secs_f64();
    // Agents finish the transaction in flight; one whose outcome is still unknown 30 s from
    // now is given up and counted as unacknowledged.
    shared.stop.store(true, Ordering::Relaxed);
    if let Ok(mut g) = shared.give_up_at.lock() {
        *g = Some(Instant::now() + Duration::from_secs(30));
    }
    while let Some(res) = agents.join_next().await {
        res.map_err(|e| anyhow!("an agent task failed: {e}"))??;
    }
    let acked: Vec<AckedTx> = shared
        .ledger
        .lock()
        .map(|l| l.acked.clone())
        .map_err(|_| anyhow!("ledger poisoned"))?;
    let max_pause = shared.ledger.lock().map(|l| l.max_pause).unwrap_or_default();
    let tx_acked = acked.len() as u64;
    ui.done(
        &pb,
        format!(
            "{} agents wrote {tx_acked} transactions in {write_secs:.1} s ({:.1} tx/s){}",
            args.agents,
            tx_acked as f64 / write_secs,
            events.iter().map(|e| format!("; {e}")).collect::<String>()
        ),
    );

    // 4. Every node applies every acknowledged transaction, and all chains reach one length.
    let pb = ui.spinner("waiting for every node to apply every acknowledged transaction");
    let max_tx = acked.iter().map(|a| a.tx).max().unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        cluster.check_running()?;
        let statuses = cluster.statuses().await;
        let views: Vec<_> = statuses
            .iter()
            .filter_map(|(id, s)| s.as_ref().ok().map(|s| (*id, s)))
            .collect();
        let all = views.len() == NODES;
        let applied = views.iter().all(|(_, s)| s.applied_index >= max_tx);
        let same_chain = views.windows(2).all(|w| w[0].1.chain_index == w[1].1.chain_index);
        if all && applied && same_chain {
            if catch_up.is_none()
                && let Phase::CatchingUp { at, .. } = phase
            {
                catch_up = Some(at.elapsed().as_millis() as u64);
            }
            break;
        }
        if Instant::now() >= deadline {
            let detail: Vec<String> = statuses
                .iter()
                .map(|(id, s)| match s {
                    Ok(s) => format!("node {id}: applied {} chain {}", s.applied_index, s.chain_index),
                    Err(e) => format!("node {id}: {e}"),
                })
                .collect();
            bail!(
                "nodes did not converge within 60 s (need applied ≥ {max_tx}): {}",
                detail.join("; ")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ui.done(&pb, "all nodes applied every acknowledged transaction");

    // 5. Read each node on its own: its verified chain, its head, and the histories written.
    let mut views = Vec::new();
    let mut node_heads = Vec::new();
    let mut verify_failures = Vec::new();
    let entities: BTreeSet<(String, u64)> = acked
        .iter()
        .flat_map(|a| a.datoms.iter().map(|d| (a.namespace.to_string(), d.entity.0)))
        .collect();
    for node in cluster.nodes() {
        let endpoint = node.endpoint();
        let client = admin.node(cluster.nodes().iter().position(|n| n.id == node.id).unwrap_or(0));
        let client = client.ok_or_else(|| anyhow!("node {} has no endpoint", node.id))?;
        let pb = ui.bar(
            0,
            "{spinner:.cyan} {msg} [{bar:30}] {pos}/{len}",
            format!("node {}: verifying the audit chain", node.id),
        );
        let mut chain = BTreeMap::new();
        let report = client
            .verify_chain(|p| {
                pb.set_length(p.head_index.max(p.checked));
                pb.set_position(p.checked);
                let (index, entry) = ChainEntry::verified(&p);
                chain.insert(index, entry);
            })
            .await;
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                ui.failed(&pb, format!("node {}: {e}", node.id));
                verify_failures.push(format!("node {}: {e}", node.id));
                continue;
            }
        };
        pb.set_message(format!("node {}: reading {} entities", node.id, entities.len()));
        let histories = read_histories(&client, &entities).await?;
        let head = client.head().await?;
        let head = Hash::from_slice(&head.hash).map(|h| (head.index, h));
        ui.done(
            &pb,
            format!(
                "node {}: {} chain entries verified, {} entities read",
                node.id,
                report.entries_checked,
                entities.len()
            ),
        );
        node_heads.push(NodeHead {
            id: node.id,
            endpoint,
            verified_entries: report.entries_checked,
            head_index: report.head_index,
            head_hash: report.head_hash.map(|h| h.to_hex()).unwrap_or_default(),
        });
        views.push(NodeView {
            id: node.id,
            chain,
            histories,
            head,
        });
    }

    // 5b. Who wrote what, proven as an auditor would: one node's export verified offline.
    let pb = ui.spinner("exporting the audit chain and verifying it offline");
    let authorship = prove_authorship(&admin).await;
    let signed: u64 = authorship
        .as_ref()
        .map_or(0, |r| r.signed_by_agent.values().sum());
    match &authorship {
        Ok(r) if r.ok() => ui.done(
            &pb,
            format!("export verified: {signed} transactions signed by their agents"),
        ),
        Ok(r) => ui.failed(&pb, format!("export does not verify: {}", r.failures[0])),
        Err(e) => ui.failed(&pb, format!("export: {e}")),
    }

    // 6. The invariants.
    let unacknowledged = shared.unacknowledged.load(Ordering::Relaxed);
    let durable = invariants::acked_writes_durable(&acked, &views);
    let agree = invariants::audit_chains_agree(&views);
    let once = views
        .first()
        .map(|v| invariants::exactly_once(&acked, v, start_index, unacknowledged))
        .unwrap_or_default();
    let errors = shared.errors.lock().map(|e| e.clone()).unwrap_or_default();
    let lost: BTreeSet<u64> = durable.iter().filter_map(|v| v.tx).collect();
    let describe = |vs: &[Violation]| {
        let mut s: Vec<String> = vs
            .iter()
            .take(3)
            .map(|v| match v.node {
                Some(n) => format!("node {n}: {}", v.detail),
                None => v.detail.clone(),
            })
            .collect();
        if vs.len() > 3 {
            s.push(format!("and {} more", vs.len() - 3));
        }
        s.join("; ")
    };
    let checks = vec![
        Check {
            name: "acked_writes_durable",
            ok: durable.is_empty() && views.len() == NODES && tx_acked > 0,
            detail: if tx_acked == 0 {
                "no transaction was acknowledged".into()
            } else if durable.is_empty() {
                format!(
                    "all {tx_acked} acknowledged transactions found in the chain and store of all {} nodes",
                    views.len()
                )
            } else {
                format!(
                    "{} acknowledged transactions missing or altered: {}",
                    lost.len(),
                    describe(&durable)
                )
            },
        },
        Check {
            name: "audit_chains_verify",
            ok: verify_failures.is_empty(),
            detail: if verify_failures.is_empty() {
                format!("every link and signature verified on all {NODES} nodes")
            } else {
                verify_failures.join("; ")
            },
        },
        Check {
            name: "writes_signed_by_their_agents",
            ok: matches!(&authorship, Ok(r) if r.ok()) && signed >= acked.len() as u64,
            detail: match &authorship {
                Ok(r) if r.ok() => format!(
                    "an export verified offline proves {signed} transactions signed by their agents ({}), {} acknowledged agent writes among them",
                    r.signed_by_agent
                        .iter()
                        .map(|(agent, n)| format!("{agent} {n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    acked.len()
                ),
                Ok(r) => format!("the export does not verify: {}", r.failures[0]),
                Err(e) => format!("no export: {e}"),
            },
        },
        Check {
            name: "audit_chains_agree",
            ok: agree.is_empty() && views.len() == NODES,
            detail: if agree.is_empty() {
                "same head index and hash on every node".into()
            } else {
                describe(&agree)
            },
        },
        Check {
            name: "exactly_once",
            ok: once.is_empty(),
            detail: if once.is_empty() {
                "retries with idempotency keys applied nothing twice".into()
            } else {
                describe(&once)
            },
        },
        Check {
            name: "no_failed_writes",
            ok: errors.is_empty(),
            detail: if errors.is_empty() && unacknowledged == 0 {
                "every agent write was acknowledged; preconditions held across the failover".into()
            } else if errors.is_empty() {
                format!(
                    "no write failed; {unacknowledged} were still being retried when the run ended \
                     (outcome unknown, not counted as acknowledged)"
                )
            } else {
                format!(
                    "{} failed: {}",
                    shared.refused.load(Ordering::Relaxed),
                    errors.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
                )
            },
        },
        Check {
            name: "grants_enforced",
            ok: policy.is_ok(),
            detail: match &policy {
                Ok(detail) => detail.clone(),
                Err(e) => e.clone(),
            },
        },
        Check {
            name: "failover",
            ok: election.is_some() && catch_up.is_some(),
            detail: match (election, catch_up) {
                (Some(e), Some(c)) => format!(
                    "node {killed_node} killed, node {new_leader} elected in {e} ms, node {killed_node} caught up in {c} ms"
                ),
                _ => "the failover did not complete".into(),
            },
        },
    ];
    let (chain_length, head_hash) = node_heads
        .first()
        .map(|h| (h.head_index, h.head_hash.clone()))
        .unwrap_or_default();
    Ok(DemoSummary {
        ok: checks.iter().all(|c| c.ok),
        nodes: NODES,
        agents: args.agents,
        write_secs,
        tx_acked,
        datoms_acked: acked.iter().map(|a| a.datom_hashes.len() as u64).sum(),
        tx_lost: lost.len() as u64,
        tx_unacknowledged: unacknowledged,
        tx_per_sec: tx_acked as f64 / write_secs,
        precondition_txs_acked: shared.with_preconditions.load(Ordering::Relaxed),
        killed_node,
        new_leader,
        election_ms: election.unwrap_or(0),
        max_write_pause_ms: max_pause.as_millis() as u64,
        restarted_node: killed_node,
        catch_up_ms: catch_up,
        chain_length,
        head_hash,
        elapsed_ms: started.elapsed().as_millis() as u64,
        data_dir: None,
        node_heads,
        checks,
    })
}

/// Full histories of `entities`, read from the client's one node with stale reads, so what is
/// checked is that node's own state.
pub async fn read_histories(
    client: &Client,
    entities: &BTreeSet<(String, u64)>,
) -> Result<HashMap<(String, u64), Vec<StoredDatom>>> {
    let reads = entities.iter().map(|(ns, entity)| {
        let client = client.clone();
        let key = (ns.clone(), *entity);
        async move {
            let namespace = Namespace::new(key.0.clone()).map_err(|e| anyhow!("{e}"))?;
            let target = HistoryTarget::Entity {
                entity: EntityId(key.1),
                attribute: None,
            };
            let resp = client
                .history(&namespace, target, 0, Consistency::Stale)
                .await
                .with_context(|| format!("history of entity {} in {}", key.1, key.0))?;
            Ok::<_, anyhow::Error>((key, resp.datoms.iter().map(StoredDatom::from_pb).collect()))
        }
    });
    let mut out = HashMap::new();
    let mut stream = futures::stream::iter(reads).buffer_unordered(16);
    while let Some(r) = stream.next().await {
        let (key, datoms) = r?;
        out.insert(key, datoms);
    }
    Ok(out)
}

/// Exports the answering node's audit chain and verifies it offline, as an auditor would.
async fn prove_authorship(client: &Client) -> Result<engram_verify::Report, String> {
    let bytes = client.export_bytes().await.map_err(|e| e.to_string())?;
    engram_verify::verify_export(
        bytes.as_slice(),
        &engram_verify::VerifyOptions::default(),
        |_, _| {},
    )
    .map_err(|e| e.to_string())
}
