//! A keeper agent (with `Options::forgetting`): in a namespace of its own, it sets retention
//! policies of both kinds, then rewrites the same slots of one entity round after round,
//! through the public client, across every fault, while the leader's retention job redacts
//! what the policies keep no longer. The `retention` checker then reads every replica:
//!
//! - `:keep/owner` (cardinality one) and `:keep/tag` (cardinality many) are kept for their last
//!   [`KEEP_VERSIONS`] versions. The owner slot has two agents' claims: `keeper-a` asserts once,
//!   at the start, and `keeper-b` every round, so `keeper-a`'s claim stays live however many
//!   later transactions write the slot. The tag slot gets a new value every round, each a live
//!   claim however old, except that every third round also retracts the tag of two rounds
//!   before ([`retracted_in`]). The policy may take such a tag's assertion only with its
//!   retraction, in one redaction (`engram_core::value_groups`): taken apart, a fold of the
//!   slot's history could no longer tell that the retraction ended the claim, which the store
//!   scrub reports against the slot's current-claims row.
//! - `:keep/note` (cardinality one) is kept for [`NOTE_KEEP_MS`].
//!
//! Each round also writes a note to [`SESSION_NAMESPACE`] and moves a session on it through a
//! cycle ([`session_step`]): opened, renewed, left to lapse ([`SESSION_TTL_MS`]), opened and
//! ended. When the run stops it ends the session and waits until the leader has forgotten the
//! namespace. The `sessions` checker then holds every lapse to its deadline, every forgotten
//! note to a session end after it, and, once the keeper saw the last end forgotten, every note
//! to being forgotten on every member.
//!
//! Each round is retried with its idempotency key until it is acknowledged, so the rounds are
//! applied in order, each once; only the one in flight when the run stops may be applied
//! without an acknowledgement. The log records every acknowledged round's transaction. When the
//! run stops (the faults healed), the keeper ends its policies, so no retention redaction is
//! still being proposed while the final checkers read the replicas.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engram_client::{Client, ClientConfig, ClientError};
use engram_types::{
    Attribute, AttributeDef, Cardinality, EntityId, EntityRef, Namespace, Op, Provenance, Status, TxOp,
    TxRequest, Value, ValueType,
};

pub const NAMESPACE: &str = "sim/keep";
pub const OWNER: &str = ":keep/owner";
pub const TAG: &str = ":keep/tag";
pub const NOTE: &str = ":keep/note";
/// Versions the policies on `:keep/owner` and `:keep/tag` keep.
pub const KEEP_VERSIONS: u32 = 2;
/// How long the policy on `:keep/note` keeps a value.
pub const NOTE_KEEP_MS: u64 = 600;
/// The agent of the one `:keep/owner` claim that must outlive every later version.
pub const FIRST_OWNER: &str = "keeper-a";
/// The namespace the keeper's session makes volatile.
pub const SESSION_NAMESPACE: &str = "sim/session";
/// The attribute of the notes it writes there, one a round.
pub const SESSION_NOTE: &str = ":session/note";
/// How long the session lives without a renewal: longer than the leader's one-second look for
/// lapsed sessions, shorter than the five rounds it is left alone.
pub const SESSION_TTL_MS: u64 = 1_500;
/// The agent of every round.
pub const ROUND_AGENT: &str = "keeper-b";

/// What the keeper did, shared with the harness.
#[derive(Default)]
pub struct KeeperLog {
    /// The entity, once created.
    pub entity: Mutex<Option<u64>>,
    /// Each acknowledged round, in order: (round, its transaction).
    pub rounds: Mutex<Vec<(u64, u64)>>,
    /// Each acknowledged note in the session's namespace: (round, its transaction, its entity).
    pub session_notes: Mutex<Vec<(u64, u64, u64)>>,
    /// Whether, once the run stopped, the keeper ended the session and saw its last note
    /// forgotten (read from the leader).
    pub session_forgotten: AtomicBool,
    /// A write the cluster refused for good (every write the keeper makes is valid).
    pub refused: Mutex<Vec<String>>,
    pub stop: AtomicBool,
}

impl KeeperLog {
    fn refuse(&self, what: String) {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).push(what);
    }
}

pub fn tag_of(round: u64) -> String {
    format!("tag {round}")
}

/// The round whose tag round `round` retracts, if it retracts one: every third round, the tag
/// of two rounds before (still a live claim then).
pub fn retracted_in(round: u64) -> Option<u64> {
    (round >= 3 && round.is_multiple_of(3)).then(|| round - 2)
}

fn provenance(agent: &str) -> Provenance {
    Provenance {
        agent: agent.into(),
        confidence: 0.9,
        status: Status::Verified,
        ..Provenance::default()
    }
}

fn attribute(name: &str) -> Attribute {
    Attribute::new(name).expect("a valid attribute")
}

fn op(op: Op, entity: EntityRef, attr: &str, value: String) -> TxOp {
    TxOp {
        op,
        entity,
        attribute: attribute(attr),
        value: Value::String(value),
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

/// A transient failure (no leader, a cut network, a crashed node): the same request, with its
/// idempotency key, is sent again. Anything else is a refusal the keeper's valid writes must
/// never get.
fn transient(e: &ClientError) -> bool {
    !matches!(
        e.code(),
        Some(tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition | tonic::Code::PermissionDenied)
    )
}

/// Sends `tx` until it is acknowledged (its answer) or the run stops (`None`).
async fn until_acknowledged(
    client: &Client,
    tx: &TxRequest,
    log: &KeeperLog,
) -> Option<engram_proto::pb::TransactResponse> {
    while !log.stop.load(Ordering::Relaxed) {
        match client.transact(tx).await {
            Ok(r) => return Some(r),
            Err(e) if transient(&e) => madsim::time::sleep(Duration::from_millis(200)).await,
            Err(e) => {
                log.refuse(format!("{:?}: {e}", tx.idempotency_key));
                return None;
            }
        }
    }
    None
}

/// The policies the keeper sets: (attribute, versions kept, or else ms kept).
const POLICIES: [(&str, Option<u32>, u64); 3] = [
    (OWNER, Some(KEEP_VERSIONS), 0),
    (TAG, Some(KEEP_VERSIONS), 0),
    (NOTE, None, NOTE_KEEP_MS),
];

/// Sets (or, with `end`, ends) the keeper's policies, each retried until it holds: a lost
/// acknowledgement shows up on a retry as "already kept" (or "has no policy"). Gives up after
/// `attempts` tries of each.
async fn set_policies(client: &Client, end: bool, attempts: u32, log: &KeeperLog) {
    for (attr, versions, keep_ms) in POLICIES {
        for _ in 0..attempts {
            if !end && log.stop.load(Ordering::Relaxed) {
                return;
            }
            let set = match versions {
                Some(n) => {
                    client
                        .set_retention_versions(NAMESPACE, attr, if end { 0 } else { n })
                        .await
                }
                None => {
                    client
                        .set_retention(NAMESPACE, attr, if end { 0 } else { keep_ms })
                        .await
                }
            };
            match set {
                Ok(_) => break,
                Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => break,
                Err(_) => madsim::time::sleep(Duration::from_millis(300)).await,
            }
        }
    }
}

/// What a round does to the keeper's session.
#[derive(Clone, Copy, Debug)]
enum SessionStep {
    Open,
    Renew,
    End,
}

/// The round's session change, in a cycle of twelve rounds: opened in the first, renewed in the
/// next two, left alone for five (at 300 ms a round or more it lapses), opened again in the
/// ninth and ended in the tenth. Retried until the cluster answers; a refusal is expected
/// under faults (a renewal of a session that lapsed while the network was cut, an open whose
/// first try committed without an answer) and is not the keeper's concern: the checker judges
/// what the chain records.
async fn session_step(client: &Client, round: u64, log: &KeeperLog) {
    let step = match round % 12 {
        1 | 9 => SessionStep::Open,
        2 | 3 => SessionStep::Renew,
        10 => SessionStep::End,
        _ => return,
    };
    change_session(client, step, log, u32::MAX).await;
}

/// Sends the session change until the cluster answers it, or the run stops (with `attempts`
/// `u32::MAX`), or `attempts` tries failed.
async fn change_session(client: &Client, step: SessionStep, log: &KeeperLog, attempts: u32) {
    for _ in 0..attempts {
        if attempts == u32::MAX && log.stop.load(Ordering::Relaxed) {
            return;
        }
        let answer = match step {
            SessionStep::Open => client.open_session(SESSION_NAMESPACE, SESSION_TTL_MS).await,
            SessionStep::Renew => client.renew_session(SESSION_NAMESPACE, SESSION_TTL_MS).await,
            SessionStep::End => client.end_session(SESSION_NAMESPACE).await,
        };
        match answer {
            Ok(_) => return,
            Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => return,
            Err(e) if transient(&e) => madsim::time::sleep(Duration::from_millis(200)).await,
            Err(e) => {
                log.refuse(format!("session {step:?}: {e}"));
                return;
            }
        }
    }
}

/// Once the run stopped: opens a session (unless one is open) and ends it, so the last end
/// comes after every note, and waits until the leader has forgotten the last note.
async fn forget_session(client: &Client, log: &KeeperLog) {
    change_session(client, SessionStep::Open, log, 100).await;
    change_session(client, SessionStep::End, log, 100).await;
    let last = log
        .session_notes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .last()
        .copied();
    let Some((_, _, entity)) = last else {
        return;
    };
    let ns = Namespace::new(SESSION_NAMESPACE).expect("a valid namespace");
    for _ in 0..200 {
        if let Ok(got) = client.get(&ns, EntityId(entity), Default::default()).await
            && got.datoms.first().is_some_and(|d| d.redacted_by_tx != 0)
        {
            log.session_forgotten.store(true, Ordering::Relaxed);
            return;
        }
        madsim::time::sleep(Duration::from_millis(300)).await;
    }
}

pub async fn run_keeper(targets: Vec<String>, log: Arc<KeeperLog>) {
    let Ok(client) = Client::with_config(targets, ClientConfig::default()) else {
        return;
    };
    write_rounds(&client, &log).await;
    set_policies(&client, true, 100, &log).await;
    forget_session(&client, &log).await;
}

async fn write_rounds(client: &Client, log: &KeeperLog) {
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let pause = || madsim::time::sleep(Duration::from_millis(300));
    let mut tag = AttributeDef::new(attribute(TAG), ValueType::String);
    tag.cardinality = Cardinality::Many;
    let defs = [
        AttributeDef::new(attribute(OWNER), ValueType::String),
        tag,
        AttributeDef::new(attribute(NOTE), ValueType::String),
    ];
    // Set-up, each step retried until it holds: a lost acknowledgement of the schema shows up
    // on a retry as "nothing to change".
    while !log.stop.load(Ordering::Relaxed) {
        match client
            .apply_schema(&ns, &defs, &provenance(ROUND_AGENT), Some("keeper-schema"))
            .await
        {
            Ok(_) => break,
            Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => break,
            Err(_) => pause().await,
        }
    }
    set_policies(client, false, u32::MAX, log).await;
    let mut seed = TxRequest::data(
        ns.clone(),
        vec![op(
            Op::Assert,
            EntityRef::Temp("kept".into()),
            OWNER,
            "owner a".into(),
        )],
        provenance(FIRST_OWNER),
    );
    seed.idempotency_key = Some("keeper-seed".into());
    let Some(entity) = until_acknowledged(client, &seed, log)
        .await
        .and_then(|r| r.temp_ids.get("kept").copied())
    else {
        return;
    };
    *log.entity.lock().unwrap_or_else(|e| e.into_inner()) = Some(entity);

    let e = || EntityRef::Id(EntityId(entity));
    let mut round = 0u64;
    while !log.stop.load(Ordering::Relaxed) {
        round += 1;
        let mut ops = vec![
            op(Op::Assert, e(), OWNER, format!("owner b {round}")),
            op(Op::Assert, e(), TAG, tag_of(round)),
            op(Op::Assert, e(), NOTE, format!("note {round}")),
        ];
        if let Some(earlier) = retracted_in(round) {
            ops.push(op(Op::Retract, e(), TAG, tag_of(earlier)));
        }
        let mut write = TxRequest::data(ns.clone(), ops, provenance(ROUND_AGENT));
        write.idempotency_key = Some(format!("keeper-{round}"));
        let Some(answer) = until_acknowledged(client, &write, log).await else {
            return;
        };
        log.rounds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((round, answer.tx));
        session_step(client, round, log).await;
        let mut note = TxRequest::data(
            Namespace::new(SESSION_NAMESPACE).expect("a valid namespace"),
            vec![op(
                Op::Assert,
                EntityRef::Temp("note".into()),
                SESSION_NOTE,
                format!("session note {round}"),
            )],
            provenance(ROUND_AGENT),
        );
        note.idempotency_key = Some(format!("keeper-note-{round}"));
        let Some(answer) = until_acknowledged(client, &note, log).await else {
            return;
        };
        let Some(entity) = answer.temp_ids.get("note").copied() else {
            log.refuse(format!("note of round {round}: no entity in the answer"));
            return;
        };
        log.session_notes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((round, answer.tx, entity));
        pause().await;
    }
}
