//! A principal-aware run: a 3-node cluster initialised in enforced mode, two agents with
//! different grants writing through the public client (each also tries the other's namespace,
//! which it may not write, or may only while the administrator allows it), the administrator
//! granting and revoking one of those rights over and over, directly and through a role it
//! assigns and takes away, and nodes crashing and restarting throughout. Then the checker: on every replica, every transaction of the agents'
//! namespaces was allowed, at its own index, by the grants the chain had recorded before it.
//!
//! The checker reads the grants and role assignments from the system namespace's datoms, as of
//! the transaction before each write (`reads::find_on` / `get_facts`), not from the policy rows apply consults,
//! so a bug in either path shows. The planted `SkipGrantCheck` must be caught.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use engram_access::{AgentKey, Principal, SYSTEM_NAMESPACE, attribute_covers, prefix_covers};
use engram_client::{Client, ClientConfig, ClientError};
use engram_core::pages;
use engram_core::planted::{self, PlantedBug};
use engram_core::reads::{self, ReadOptions};
use engram_proto::pb;
use engram_storage::ReadView;
use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, TxId, TxOp, TxRequest, Value};
use madsim::rand::Rng;
use madsim::runtime::{Handle, Runtime};
use madsim::time::Instant;

use crate::cluster::{Cluster, NodeSettings, channel, node_addr};

/// Alice may write here; Bob may only while the administrator's grant stands, or while he
/// holds the role [`ROLE`], which may write here.
pub const NS_A: &str = "sim/a";
/// Bob may write here; Alice never.
pub const NS_B: &str = "sim/b";
/// The role the administrator assigns to Bob and takes away again.
pub const ROLE: &str = "writers";
/// How long the agents write while nodes crash.
const RUN_MS: u64 = 12_000;

/// What one principal-aware seed did and found.
#[derive(Debug, Default)]
pub struct AccessReport {
    pub seed: u64,
    pub bug: Option<PlantedBug>,
    pub violations: Vec<String>,
    pub panic: Option<String>,
    /// Writes acknowledged, and refused with PERMISSION_DENIED.
    pub acked: u64,
    pub denied: u64,
    /// Grant changes the administrator made (grant or revoke acknowledged).
    pub flips: u64,
    pub crashes: u64,
    /// Transactions of the agents' namespaces the checker judged (summed over replicas).
    pub judged: u64,
    /// Transactions whose entries record an agent's signature, each proven by the offline
    /// verifier on the replica's export (summed over replicas).
    pub signed: u64,
}

impl AccessReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.panic.is_none()
    }
}

/// Runs one seed on a fresh thread (see `scenario::run_seed`).
pub fn run_access_seed(seed: u64, bug: Option<PlantedBug>) -> AccessReport {
    crate::events::init();
    match std::thread::Builder::new()
        .name(format!("access-seed-{seed}"))
        .spawn(move || run_here(seed, bug))
        .map(|t| t.join())
    {
        Ok(Ok(report)) => report,
        Ok(Err(_)) => panic!("access seed {seed}: the harness panicked outside the simulation"),
        Err(e) => panic!("access seed {seed}: cannot start a thread: {e}"),
    }
}

fn run_here(seed: u64, bug: Option<PlantedBug>) -> AccessReport {
    let mut runtime = Runtime::with_seed_and_config(seed, madsim::Config::default());
    runtime.set_time_limit(Duration::from_secs(300));
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on(simulate(seed, bug))));
    planted::set(None);
    match result {
        Ok(Ok(report)) => report,
        Ok(Err(reason)) => AccessReport {
            seed,
            bug,
            violations: vec![format!("set-up: {reason}")],
            ..AccessReport::default()
        },
        Err(p) => AccessReport {
            seed,
            bug,
            panic: Some(
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into()),
            ),
            ..AccessReport::default()
        },
    }
}

/// A key for `name`, reproducible from the seed.
fn key(name: &str, seed: u64, n: u8) -> Arc<AgentKey> {
    let mut s = [n; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    Arc::new(AgentKey::from_seed(
        Principal::new(name).expect("a valid principal"),
        s,
    ))
}

fn signed(targets: &[String], key: &Arc<AgentKey>) -> Result<Client, String> {
    let config = ClientConfig {
        agent: Some(key.clone()),
        ..ClientConfig::default()
    };
    Client::with_config(targets.to_vec(), config).map_err(|e| e.to_string())
}

#[derive(Default)]
struct Stats {
    acked: AtomicU64,
    denied: AtomicU64,
    flips: AtomicU64,
}

async fn simulate(seed: u64, bug: Option<PlantedBug>) -> Result<AccessReport, String> {
    planted::set(bug);
    let handle = Handle::current();
    let mut cluster = Cluster::boot(handle, 3, &NodeSettings::default(), &[0, 0, 0], seed, None);
    let targets: Vec<String> = (1..=3).map(node_addr).collect();
    let (root, alice, bob) = (key("root", seed, 1), key("alice", seed, 2), key("bob", seed, 3));

    // Enforced mode, with root as the first administrator.
    let members: Vec<pb::Member> = (1..=3)
        .map(|id| pb::Member {
            id,
            addr: node_addr(id),
            public_key: cluster.node(id).key.public().0.to_vec(),
            voter: true,
        })
        .collect();
    let mut initialised = false;
    for _ in 0..50 {
        madsim::time::sleep(Duration::from_millis(100)).await;
        let req = pb::InitRequest {
            members: members.clone(),
            security: "enforced".into(),
            admin: "root".into(),
            admin_public_key: root.public().0.to_vec(),
        };
        let answer = cluster
            .control(async move {
                let mut client = pb::cluster_client::ClusterClient::new(channel(&node_addr(1)));
                let mut req = tonic::Request::new(req);
                req.set_timeout(Duration::from_secs(5));
                client.init(req).await.map(|_| ())
            })
            .await;
        match answer {
            Ok(()) => initialised = true,
            Err(s) if s.message().contains("already initialised") => initialised = true,
            Err(_) => {}
        }
        if initialised {
            break;
        }
    }
    if !initialised {
        return Err("Cluster.Init did not succeed in 50 attempts".into());
    }

    // The agents and their standing grants.
    let admin = signed(&targets, &root)?;
    let setup = {
        let admin = admin.clone();
        let (alice, bob) = (alice.public().0, bob.public().0);
        async move {
            settle(|| admin.add_agent("alice", alice)).await?;
            settle(|| admin.add_agent("bob", bob)).await?;
            settle(|| admin.grant("alice", "write", NS_A, false)).await?;
            settle(|| admin.grant("bob", "write", NS_B, false)).await?;
            let role = format!("role:{ROLE}");
            settle(|| admin.grant(&role, "write", NS_A, false)).await
        }
    };
    cluster.control(setup).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Stats::default());
    let agents = [
        cluster.spawn_control(write_loop(
            signed(&targets, &alice)?,
            "alice",
            NS_A,
            NS_B,
            stop.clone(),
            stats.clone(),
        )),
        cluster.spawn_control(write_loop(
            signed(&targets, &bob)?,
            "bob",
            NS_B,
            NS_A,
            stop.clone(),
            stats.clone(),
        )),
        cluster.spawn_control(flip_loop(admin, stop.clone(), stats.clone())),
    ];

    // Crashes while they work: one node at a time, so a majority stays up.
    let mut crashes = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(RUN_MS) {
        let (pause, victim, down) = {
            let mut rng = madsim::rand::thread_rng();
            (
                rng.gen_range(500..2_000u64),
                rng.gen_range(1..=3u64),
                rng.gen_range(100..1_500u64),
            )
        };
        madsim::time::sleep(Duration::from_millis(pause)).await;
        cluster.crash(victim, None);
        crashes += 1;
        madsim::time::sleep(Duration::from_millis(down)).await;
        cluster.restart(victim);
    }
    stop.store(true, Ordering::Relaxed);
    for task in agents {
        let _ = task.await;
    }
    converge(&cluster).await?;

    let mut report = AccessReport {
        seed,
        bug,
        acked: stats.acked.load(Ordering::Relaxed),
        denied: stats.denied.load(Ordering::Relaxed),
        flips: stats.flips.load(Ordering::Relaxed),
        crashes,
        ..AccessReport::default()
    };
    for node in cluster.nodes.values() {
        match check_grants(&*node.store) {
            Ok((judged, mut found)) => {
                report.judged += judged;
                report
                    .violations
                    .extend(found.drain(..).map(|v| format!("node {}: {v}", node.id)));
            }
            Err(e) => report
                .violations
                .push(format!("node {}: cannot read: {e}", node.id)),
        }
        // Which agent wrote each transaction, as an auditor proves it from the export.
        match authorship(&*node.store, node.id) {
            Ok((signed, failure)) => {
                report.signed += signed;
                report
                    .violations
                    .extend(failure.map(|f| format!("node {}: audit: {f}", node.id)));
            }
            Err(e) => report
                .violations
                .push(format!("node {}: cannot export: {e}", node.id)),
        }
    }
    Ok(report)
}

/// Exports `store`'s chain and verifies it: the transactions proven signed by an agent, and
/// the first failure, if any.
fn authorship(store: &dyn engram_storage::Store, node: u64) -> Result<(u64, Option<String>), String> {
    let mut bytes = Vec::new();
    engram_core::export::write_export(store, &mut bytes, node, |_, _| {}).map_err(|e| e.to_string())?;
    let report = engram_verify::verify_export(
        bytes.as_slice(),
        &engram_verify::VerifyOptions::default(),
        |_, _| {},
    )
    .map_err(|e| e.to_string())?;
    let signed = report.signed_by_agent.values().sum();
    Ok((signed, report.failures.first().map(ToString::to_string)))
}

/// Retries a policy change until it is acknowledged, or refused as already made.
async fn settle<F, Fut>(mut change: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<pb::PolicyResponse, ClientError>>,
{
    for _ in 0..100 {
        match change().await {
            Ok(_) => return Ok(()),
            Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => return Ok(()),
            Err(_) => madsim::time::sleep(Duration::from_millis(100)).await,
        }
    }
    Err("a policy change did not settle in 100 attempts".into())
}

/// Writes to `own` (allowed), and every fourth write to `other` (refused, or allowed only
/// while a grant stands), each with an idempotency key so the client's retries are safe.
async fn write_loop(
    client: Client,
    agent: &'static str,
    own: &'static str,
    other: &'static str,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
) {
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let ns = if seq.is_multiple_of(4) { other } else { own };
        let mut tx = TxRequest::data(
            Namespace::new(ns).expect("a valid namespace"),
            vec![TxOp {
                op: Op::Assert,
                entity: EntityRef::Temp("note".into()),
                attribute: Attribute::new(":note/n").expect("a valid attribute"),
                value: Value::I64(seq as i64),
                valid_from_ns: None,
                valid_to_ns: None,
            }],
            Provenance {
                agent: agent.into(),
                confidence: 1.0,
                ..Provenance::default()
            },
        );
        tx.idempotency_key = Some(format!("{agent}-{seq}"));
        match client.transact(&tx).await {
            Ok(_) => {
                stats.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.code() == Some(tonic::Code::PermissionDenied) => {
                stats.denied.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        madsim::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Grants Bob write on Alice's namespace and revokes it again, over and over; in between,
/// assigns him the role that may write there and takes it away again.
async fn flip_loop(admin: Client, stop: Arc<AtomicBool>, stats: Arc<Stats>) {
    let mut granted = false;
    let mut assigned = false;
    let mut turn = 0u64;
    while !stop.load(Ordering::Relaxed) {
        madsim::time::sleep(Duration::from_millis(400)).await;
        turn += 1;
        let by_role = turn.is_multiple_of(2);
        let answer = if by_role {
            admin.assign_role("bob", ROLE, assigned).await
        } else {
            admin.grant("bob", "write", NS_A, granted).await
        };
        let flipped = match answer {
            Ok(_) => {
                stats.flips.fetch_add(1, Ordering::Relaxed);
                true
            }
            // Already in the state asked for (an acknowledgement lost to a crash): follow it.
            Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => true,
            Err(_) => false,
        };
        if flipped && by_role {
            assigned = !assigned;
        } else if flipped {
            granted = !granted;
        }
    }
}

/// Waits until every node reports the same applied index and chain length.
async fn converge(cluster: &Cluster) -> Result<(), String> {
    for _ in 0..300 {
        let mut seen = Vec::new();
        for id in 1..=3u64 {
            if let Ok(s) = cluster.status(id).await {
                seen.push((s.applied_index, s.chain_index));
            }
        }
        if seen.len() == 3 && seen.windows(2).all(|w| w[0] == w[1]) {
            return Ok(());
        }
        madsim::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the nodes did not converge within 30 s after the run".into())
}

fn attr(name: &str) -> Attribute {
    Attribute::new(name).expect("a valid attribute")
}

/// Judges every transaction of the agents' namespaces in `store`: its writer must have held a
/// `write` grant covering its namespace as of the transaction before it. Returns how many
/// transactions were judged and the violations.
pub fn check_grants(store: &dyn ReadView) -> Result<(u64, Vec<String>), String> {
    let (logged, _) =
        reads::tx_log_range(store, TxId(1), TxId(u64::MAX), usize::MAX).map_err(|e| e.to_string())?;
    let mut judged = 0;
    let mut violations = Vec::new();
    for tx in logged {
        let ns = tx.namespace.as_str();
        if ns != NS_A && ns != NS_B {
            continue;
        }
        judged += 1;
        let id = tx.record.receipt.tx;
        for datom in &tx.record.datoms {
            let agent = &datom.provenance.agent;
            if !granted_at(
                store,
                agent,
                "write",
                ns,
                datom.attribute.as_str(),
                TxId(id.0 - 1),
            )? {
                violations.push(format!(
                    "tx {id} in {ns} by {agent}: no write grant on {ns} was in force at tx {}",
                    id.0 - 1
                ));
                break;
            }
        }
    }
    Ok((judged, violations))
}

/// The current values of an entity's string attributes in the system namespace, as of `as_of`.
fn text_facts(
    store: &dyn ReadView,
    entity: engram_types::EntityId,
    as_of: TxId,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let system = Namespace::new(SYSTEM_NAMESPACE).map_err(|e| e.to_string())?;
    let opts = ReadOptions {
        as_of: Some(as_of),
        ..ReadOptions::default()
    };
    let facts = reads::get_facts(store, &system, None, entity, &opts).map_err(|e| e.to_string())?;
    Ok(facts
        .current
        .into_iter()
        .filter_map(|d| match d.value {
            Value::String(s) => Some((d.attribute.to_string(), s)),
            _ => None,
        })
        .collect())
}

/// The principals `agent` acts as at `as_of`: itself, and every role an active assignment in
/// the system namespace's datoms gives it.
fn principals_at(store: &dyn ReadView, agent: &str, as_of: TxId) -> Result<Vec<String>, String> {
    let system = Namespace::new(SYSTEM_NAMESPACE).map_err(|e| e.to_string())?;
    let assignments = pages::find_main(
        store,
        &system,
        &attr(":engram.role/agent"),
        Some(&Value::String(agent.into())),
        Some(as_of),
        usize::MAX,
    )
    .map_err(|e| e.to_string())?;
    let mut principals = vec![agent.to_string()];
    for a in assignments {
        let facts = text_facts(store, a.entity, as_of)?;
        if facts.get(":engram.role/status").map(String::as_str) == Some("active")
            && let Some(role) = facts.get(":engram.role/role")
        {
            principals.push(role.clone());
        }
    }
    Ok(principals)
}

/// Whether the system namespace's datoms, as of `as_of`, hold an active grant of `action`
/// on a prefix covering `ns` and on `attribute` (a grant naming no attribute covers all) to
/// `agent` or to a role it held then.
fn granted_at(
    store: &dyn ReadView,
    agent: &str,
    action: &str,
    ns: &str,
    attribute: &str,
    as_of: TxId,
) -> Result<bool, String> {
    let principals = principals_at(store, agent, as_of)?;
    let system = Namespace::new(SYSTEM_NAMESPACE).map_err(|e| e.to_string())?;
    let grants = pages::find_main(
        store,
        &system,
        &attr(":engram.grant/principal"),
        None,
        Some(as_of),
        usize::MAX,
    )
    .map_err(|e| e.to_string())?;
    for g in grants {
        if !matches!(&g.value, Value::String(p) if principals.contains(p)) {
            continue;
        }
        let facts = text_facts(store, g.entity, as_of)?;
        let text = |a: &str| facts.get(a).cloned().unwrap_or_default();
        if text(":engram.grant/action") == action
            && text(":engram.grant/status") == "active"
            && prefix_covers(&text(":engram.grant/prefix"), ns)
            && attribute_covers(&text(":engram.grant/attribute"), attribute)
        {
            return Ok(true);
        }
    }
    Ok(false)
}
