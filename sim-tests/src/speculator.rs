//! A speculator agent: in a namespace of its own, declares a schema, then over and over forks a
//! branch from main, writes a plan on it and merges it — or abandons every third — through the
//! public client, across every fault. It records the merges the cluster acknowledged; the
//! `branches-durable` checker then demands that each one is on every replica, applied to main
//! by exactly its merge transaction. Schema, branch and merge transactions thereby run through
//! crashes, snapshot installs and membership changes, where replica agreement and the audit
//! verifier also judge them. With `Options::forgetting`, every fourth round it also writes a
//! plan holding a secret (on main and on a branch of its own) and redacts it; the `forgotten`
//! checker demands each acknowledged redaction on every replica, on main and on the branch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engram_client::{Client, ClientConfig};
use engram_types::{
    Attribute, AttributeDef, BranchName, EntityRef, Namespace, Op, Provenance, RedactRequest, Status, TxOp,
    TxRequest, Value, ValueType,
};

pub const NAMESPACE: &str = "sim/speculate";
pub const STEP: &str = ":plan/step";
/// Where a plan's second secret goes: a slot of its own, so an entity redaction of the plan
/// takes two parts (a part ends at a slot's end, not inside one).
pub const ASIDE: &str = ":plan/aside";

/// What the speculator did, shared with the harness.
#[derive(Default)]
pub struct SpeculationLog {
    /// The plan entity on main, once created.
    pub entity: Mutex<Option<u64>>,
    /// Acknowledged merges: (branch, merge tx, the value the branch wrote).
    pub merged: Mutex<Vec<(String, u64, String)>>,
    /// Acknowledged redactions of a plan written for it.
    pub forgotten: Mutex<Vec<Forgotten>>,
    pub abandoned: Mutex<Vec<String>>,
    pub stop: AtomicBool,
}

/// An acknowledged redaction of a plan written for it.
#[derive(Clone, Debug)]
pub struct Forgotten {
    /// The plan's entity.
    pub entity: u64,
    /// Each part's record transaction, first to last (the simulated nodes take one datom per
    /// part, so a plan of two secrets is redacted in two).
    pub part_txs: Vec<u64>,
    /// The round whose secrets it took.
    pub round: u64,
    /// The branch the plan's third secret was written on (acknowledged before the redaction
    /// was asked), if any: the redaction took it there too.
    pub branch: Option<String>,
}

impl Forgotten {
    /// The last part's transaction: purged through it, a node holds none of the secrets.
    pub fn last_tx(&self) -> u64 {
        self.part_txs.last().copied().unwrap_or(0)
    }
}

/// What every secret holds, followed by its round: no other value the simulation writes does.
const SECRET: &str = "secret of round ";

/// The round of each secret `bytes` holds (a row of any kind: a value, a log entry, a
/// snapshot chunk).
pub fn secrets_in(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    let needle = SECRET.as_bytes();
    bytes
        .windows(needle.len())
        .enumerate()
        .filter(move |(_, w)| *w == needle)
        .filter_map(move |(at, _)| {
            let digits = &bytes[at + needle.len()..];
            let end = digits
                .iter()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(digits.len());
            std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
        })
}

fn who() -> Provenance {
    Provenance {
        agent: "speculator".into(),
        confidence: 0.8,
        status: Status::Candidate,
        ..Provenance::default()
    }
}

fn step(entity: EntityRef, value: &str) -> TxOp {
    assert_op(entity, STEP, value)
}

fn assert_op(entity: EntityRef, attribute: &str, value: &str) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity,
        attribute: Attribute::new(attribute).expect("a valid attribute"),
        value: Value::String(value.to_string()),
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

/// Writes a plan on main that holds a secret, then redacts it. A redaction that got no answer
/// is not retried (a retry after it applied answers "nothing to redact"): only acknowledged
/// ones are recorded, for the `forgotten` checker.
async fn forget_a_plan(client: &Client, ns: &Namespace, round: u64, log: &SpeculationLog) {
    let secrets = [format!("{SECRET}{round}"), format!("another {SECRET}{round}")];
    // Every other forgetting round (they come every fourth round) forgets by predicate (the
    // datoms its own agent wrote), the others by entity: both end with every datom of the
    // entity redacted.
    let by_predicate = round % 8 == 4;
    let writer = Provenance {
        agent: format!("speculator-secret-{round}"),
        ..who()
    };
    let author = if by_predicate { writer.clone() } else { who() };
    let mut write = TxRequest::data(
        ns.clone(),
        secrets
            .iter()
            .zip([STEP, ASIDE])
            .map(|(secret, attribute)| assert_op(EntityRef::Temp("secret".into()), attribute, secret))
            .collect(),
        author.clone(),
    );
    write.idempotency_key = Some(format!("speculator-secret-{round}"));
    let Ok(written) = client.transact(&write).await else {
        return;
    };
    let Some(entity) = written.temp_ids.get("secret").copied() else {
        return;
    };
    // Every redaction reaches branches: a third secret on a branch forked after the plan was
    // written, left open, by the plan's writer (so a redaction by its agent matches it there).
    let branch = secret_on_a_branch(client, ns, entity, round, &author).await;
    let answer = if by_predicate {
        let req = engram_types::RedactWhere {
            namespace: ns.clone(),
            predicate: engram_types::Predicate {
                agent: Some(writer.agent),
                ..engram_types::Predicate::default()
            },
            reason: format!("round {round}"),
            provenance: who(),
        };
        client.redact_where(&req, false).await
    } else {
        let req = RedactRequest {
            namespace: ns.clone(),
            entity: engram_types::EntityId(entity),
            attribute: None,
            reason: format!("round {round}"),
            provenance: who(),
        };
        client.redact(&req, false).await
    };
    if let Ok(done) = answer {
        log.forgotten
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Forgotten {
                entity,
                part_txs: done.part_txs,
                round,
                branch,
            });
    }
}

/// Forks branch `s{round}` and writes a secret of `round` on it, as `writer`, to the plan
/// `entity`'s step (a slot main's secret holds too, so a part taking it on main takes it on the
/// branch with it). The branch's name once the write is acknowledged.
async fn secret_on_a_branch(
    client: &Client,
    ns: &Namespace,
    entity: u64,
    round: u64,
    writer: &Provenance,
) -> Option<String> {
    let name = BranchName::new(format!("s{round}")).expect("a valid branch name");
    client.create_branch(ns, &name, None, &who()).await.ok()?;
    let mut write = TxRequest::data(
        ns.clone(),
        vec![assert_op(
            EntityRef::Id(engram_types::EntityId(entity)),
            STEP,
            &format!("{SECRET}{round} on a branch"),
        )],
        writer.clone(),
    );
    write.branch = Some(name.clone());
    write.idempotency_key = Some(format!("speculator-secret-{round}-on-a-branch"));
    client.transact(&write).await.ok()?;
    Some(name.to_string())
}

pub async fn run_speculator(targets: Vec<String>, log: Arc<SpeculationLog>, forgetting: bool) {
    let Ok(client) = Client::with_config(targets, ClientConfig::default()) else {
        return;
    };
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let pause = || madsim::time::sleep(Duration::from_millis(300));
    // Set-up: the schema and the plan entity, each retried (with an idempotency key) until it
    // holds. A lost acknowledgement of the schema shows up as "nothing to change" on retry.
    let defs = [STEP, ASIDE]
        .map(|a| AttributeDef::new(Attribute::new(a).expect("a valid attribute"), ValueType::String));
    while !log.stop.load(Ordering::Relaxed) {
        match client
            .apply_schema(&ns, &defs, &who(), Some("speculator-schema"))
            .await
        {
            Ok(_) => break,
            Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => break,
            Err(_) => pause().await,
        }
    }
    let entity = loop {
        if log.stop.load(Ordering::Relaxed) {
            return;
        }
        let mut seed = TxRequest::data(
            ns.clone(),
            vec![step(EntityRef::Temp("plan".into()), "draft")],
            who(),
        );
        seed.idempotency_key = Some("speculator-seed".into());
        // A receipt without the new id is not one this agent can use (a planted bug fakes
        // acknowledgements); the retry gets the recorded receipt by its idempotency key.
        if let Ok(r) = client.transact(&seed).await
            && let Some(id) = r.temp_ids.get("plan")
        {
            break *id;
        }
        pause().await;
    };
    *log.entity.lock().unwrap_or_else(|e| e.into_inner()) = Some(entity);

    let mut round = 0u64;
    while !log.stop.load(Ordering::Relaxed) {
        round += 1;
        let name = BranchName::new(format!("b{round}")).expect("a valid branch name");
        let value = format!("plan of round {round}");
        // Any failure below (unknown outcome, conflict) leaves the branch as it is and moves on
        // with a fresh name: names are never reused.
        if client.create_branch(&ns, &name, None, &who()).await.is_err() {
            pause().await;
            continue;
        }
        let mut write = TxRequest::data(
            ns.clone(),
            vec![step(EntityRef::Id(engram_types::EntityId(entity)), &value)],
            who(),
        );
        write.branch = Some(name.clone());
        write.idempotency_key = Some(format!("speculator-{round}"));
        if client.transact(&write).await.is_err() {
            pause().await;
            continue;
        }
        if forgetting && round.is_multiple_of(4) {
            forget_a_plan(&client, &ns, round, &log).await;
        }
        let merge = !round.is_multiple_of(3);
        match client.close_branch(&ns, &name, merge, &who()).await {
            Ok(r) if merge => {
                log.merged
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((name.to_string(), r.tx, value))
            }
            Ok(_) => log
                .abandoned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(name.to_string()),
            Err(_) => {}
        }
        pause().await;
    }
}
