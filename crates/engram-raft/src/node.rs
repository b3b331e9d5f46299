use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use engram_access::PolicyOp;
use engram_audit::{KeyAction, KeyChangeRequest, KeyId, KeyRing, PublicKey};
use engram_core::{CheckpointPolicy, Rejection, TxOutcome, reads};
use engram_storage::Store;
use engram_types::{RedactPart, RedactRequest, RedactWhere, RetentionRule, TxRequest};
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::storage::RaftLogStorage;
use openraft::{ChangeMembers, Config, ReadPolicy, ServerState, SnapshotPolicy};
use thiserror::Error;

use crate::network::NetworkFactory;
use crate::stages::{Stage, WriteStages};
use crate::{Command, LogStore, NodeInfo, Proposer, Raft, StateMachine, clock};

/// The Raft timing and compaction settings of a node: the one type every layer passes on
/// (server config, command-line flags, the benchmark cluster, the simulation), so the knobs
/// are named, defaulted and checked in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftTiming {
    pub heartbeat_interval_ms: u64,
    /// Deadline of a replication RPC that carries entries when longer than the heartbeat
    /// interval (0: the interval); heartbeats always keep the interval.
    pub append_timeout_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// A snapshot is built every this many applied entries, and the log purged before it.
    pub snapshot_every_entries: u64,
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat_interval_ms: 100,
            // A batch of large entries can take a busy follower longer than a heartbeat to
            // receive and fsync; cut off at the heartbeat, it would be resent whole, forever.
            append_timeout_ms: 1_000,
            // A follower stands only once the leader has been silent for the lease (openraft
            // sets it to the maximum) plus its own draw between the bounds: 600-800 ms here.
            // That keeps a leader kill's write pause under a second (`engram demo`), with six
            // heartbeats of slack before a busy but live leader is deposed.
            election_timeout_min_ms: 200,
            election_timeout_max_ms: 400,
            snapshot_every_entries: 5_000,
        }
    }
}

impl RaftTiming {
    /// The openraft configuration these settings make, or why they cannot make one (named by
    /// the command-line flags an operator sets them with).
    pub fn openraft_config(&self) -> Result<Config, String> {
        if self.heartbeat_interval_ms == 0 {
            return Err("--heartbeat-interval-ms must be above 0".into());
        }
        if self.election_timeout_min_ms >= self.election_timeout_max_ms {
            return Err(format!(
                "--election-timeout-min-ms ({}) must be below --election-timeout-max-ms ({})",
                self.election_timeout_min_ms, self.election_timeout_max_ms
            ));
        }
        if self.snapshot_every_entries == 0 {
            return Err("--snapshot-every-entries must be above 0".into());
        }
        Config {
            cluster_name: "engram".into(),
            heartbeat_interval: self.heartbeat_interval_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            // A node whose election timer fires first but cannot win (its log is behind the
            // other survivor's) would otherwise take the next term, and the node that could win
            // must then wait out another timeout before it may stand: the leader-kill pause
            // grew by a whole election timeout whenever the followers' logs differed.
            enable_pre_vote: Some(true),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every_entries),
            max_in_snapshot_log_to_keep: self.snapshot_every_entries / 2,
            ..Default::default()
        }
        .validate()
        .map_err(|e| format!("invalid Raft timing: {e}"))
    }

    /// The deadline of a replication RPC that carries entries.
    pub fn append_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.append_timeout_ms)
    }
}

/// Rows the leader reads per step when it plans a redaction by predicate's next range.
const PLAN_ROWS: usize = 2_000;

/// What a redaction by predicate did ([`RaftNode::propose_redaction_where`]).
#[derive(Clone, Debug, Default)]
pub struct RedactedWhere {
    /// Every range's receipt, first to last.
    pub receipts: Vec<engram_types::TxReceipt>,
    /// How many datoms the ranges took.
    pub datoms: u64,
    /// The first of them, with the range that took each.
    pub listed: Vec<(
        engram_core::redact::RedactedRef,
        engram_types::Datom,
        engram_types::TxId,
    )>,
}

/// What a node is started with besides its store and keys.
#[derive(Clone, Debug)]
pub struct RaftSettings {
    pub timing: RaftTiming,
    /// Added to the wall clock when this node stamps a proposal: zero in production; the
    /// simulation uses it to skew nodes' clocks against each other.
    pub clock_skew_ns: i64,
    /// When this node signs checkpoints of its chain.
    pub checkpoints: CheckpointPolicy,
    /// Most datoms each part of a redaction this node proposes as leader takes (at most
    /// [`RedactPart::MAX_DATOMS`]): each part is one log entry, applied between writes.
    pub redact_part_datoms: u32,
}

impl RaftSettings {
    /// The part size of a redaction unless a node is told otherwise: applied in about 2 ms on
    /// the machine of `docs/benchmarks.md`, so a write waits at most that long behind one.
    pub const REDACT_PART_DATOMS: u32 = 100;
}

/// Why a Raft operation did not complete. The server maps these to gRPC codes.
#[derive(Debug, Error)]
pub enum NodeError {
    /// This node is not the leader; `leader` is the current one if known.
    #[error("not the leader (leader: {})", .leader.as_ref().map_or("unknown".to_string(), |(id, n)| format!("{id} at {}", n.addr)))]
    NotLeader { leader: Option<(u64, NodeInfo)> },
    /// The cluster cannot serve this now (no leader, leadership changed mid-request);
    /// retrying later is safe for reads and for writes that carry an idempotency key.
    #[error("{0}")]
    Unavailable(String),
    /// The request conflicts with the cluster's state (e.g. an invalid membership change).
    #[error("{0}")]
    Rejected(String),
    /// The node has stopped or its storage failed.
    #[error("raft node failed: {0}")]
    Fatal(String),
}

/// One node's Raft handle and the operations the services need.
#[derive(Clone)]
pub struct RaftNode {
    pub raft: Raft,
    pub node_id: u64,
    pub store: Arc<dyn Store>,
    pub info: NodeInfo,
    /// This node's signing keys: the current one attests entries, signs checkpoints and
    /// authorises the key changes this node proposes as leader.
    pub keys: Arc<KeyRing>,
    /// Raft requests this node refused because their sender was not authenticated.
    pub peer_refused: Arc<crate::refusals::PeerRefusals>,
    /// Set when this node found its chain differs from a peer's (see [`DivergenceAlarm`]);
    /// cleared only by a restart, which checks again.
    pub alarm: Arc<Mutex<Option<DivergenceAlarm>>>,
    /// Where this node's writes spend their time, as leader (telemetry).
    pub stages: Arc<WriteStages>,
    snapshots: Arc<crate::snapshots::Snapshots>,
    /// The state machine's applied index, moved once the state it names is readable.
    applied: tokio::sync::watch::Receiver<u64>,
    /// The state machine's policy-change counter (see [`RaftNode::policy_epoch`]).
    policy_epoch: Arc<AtomicU64>,
    clock_skew_ns: i64,
    /// openraft's leader lease (the longest election timeout): a leader that has not heard
    /// from a quorum for this long may have been replaced (see [`RaftNode::while_quorate`]).
    lease: std::time::Duration,
    /// The last index of the Raft log when this process started. Linearizable reads wait
    /// until it is applied: see [`RaftNode::ensure_linearizable`].
    startup_log_index: u64,
    /// What apply hands the recall index (see [`crate::committed`]).
    committed: Arc<crate::committed::CommittedFeed>,
    /// What apply hands the node's watchers.
    watched: Arc<crate::committed::CommittedFeed>,
    /// Where this node's purges after redactions stand (see [`crate::PurgeProgress`]).
    pub purges: crate::PurgeProgress,
    /// Most datoms each part of a redaction this node proposes takes.
    redact_part_datoms: u32,
    /// The state map as of the last written state, for proven reads.
    versions: Arc<crate::StateVersions>,
}

/// One part of a redaction, as applied: its receipt, and each datom it took (as listed by
/// its record, and as stored now, redacted).
#[derive(Clone, Debug)]
pub struct RedactedPart {
    pub receipt: engram_types::TxReceipt,
    pub taken: Vec<(engram_core::redact::RedactedRef, engram_types::Datom)>,
}

/// How often a call waiting on a leader (a proposal on the leader, a call a follower forwarded
/// to it) checks that the leader still leads.
const LEADERSHIP_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a linearizable read waits for a restarted node to apply the log it restarted with.
const RESTART_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(2);

/// How [`RaftNode::wait_applied`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    Applied,
    TimedOut,
    /// The Raft core has stopped: waiting again would return at once, forever.
    Stopped,
}

/// Two members hold different audit entries at the same index: one of them applied something
/// the other did not. Corruption-class: the node stops taking writes and reports not ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DivergenceAlarm {
    /// The first index at which the entries differ.
    pub index: u64,
    pub peer: u64,
    pub ours: String,
    pub theirs: String,
}

impl std::fmt::Display for DivergenceAlarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "chain diverges from node {} at entry {}: ours {}, theirs {}",
            self.peer, self.index, self.ours, self.theirs
        )
    }
}

/// A point-in-time view of the node, for status reporting.
#[derive(Clone, Debug)]
pub struct NodeStatus {
    pub role: String,
    pub leader_id: Option<u64>,
    pub term: u64,
    pub last_log_index: u64,
    pub applied_index: u64,
    /// The last index known committed by a quorum, as the leader last reported it.
    pub cluster_committed_index: u64,
    pub members: Vec<(u64, NodeInfo, bool)>,
    /// The log index of the last redaction this node applied, and of the last one whose
    /// values are purged from its Raft log and files (0: none).
    pub redactions_applied_index: u64,
    pub redactions_purged_index: u64,
}

fn write_error(e: RaftError<crate::TypeConfig, ClientWriteError<crate::TypeConfig>>) -> NodeError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
            NodeError::NotLeader { leader: f.leader_id.zip(f.leader_node) }
        }
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)) => NodeError::Unavailable(
            "leadership changed before the entry committed; its fate is unknown: retry with the same idempotency key"
                .into(),
        ),
        RaftError::APIError(other) => NodeError::Rejected(other.to_string()),
        RaftError::Fatal(f) => NodeError::Fatal(f.to_string()),
    }
}

impl RaftNode {
    /// Opens the log and state machine on `store` and starts Raft.
    pub async fn start(
        node_id: u64,
        info: NodeInfo,
        store: Arc<dyn Store>,
        keys: Arc<KeyRing>,
        settings: &RaftSettings,
    ) -> Result<RaftNode, NodeError> {
        let config = settings
            .timing
            .openraft_config()
            .map_err(|e| NodeError::Fatal(format!("invalid raft settings: {e}")))?;
        let stages = Arc::new(WriteStages::default());
        let mut log_store = LogStore::new(store.clone(), stages.clone());
        let startup_log_index = log_store
            .get_log_state()
            .await
            .map_err(|e| NodeError::Fatal(format!("reading the Raft log: {e}")))?
            .last_log_id
            .map_or(0, |id| id.index());
        let state_machine = StateMachine::open(store.clone(), keys.clone(), settings.checkpoints)
            .map_err(|e| NodeError::Fatal(e.to_string()))?;
        let snapshots = state_machine.snapshots();
        let applied = state_machine.applied_index_watch();
        let policy_epoch = state_machine.policy_epoch();
        let committed = state_machine.committed_feed();
        let watched = state_machine.watch_feed();
        let versions = state_machine.state_versions();
        let redactions_applied = state_machine.redactions_applied_watch();
        let raft = Raft::new(
            node_id,
            Arc::new(config),
            NetworkFactory {
                node_id,
                keys: keys.clone(),
                append_timeout: settings.timing.append_timeout(),
                store: store.clone(),
                stages: stages.clone(),
            },
            log_store,
            state_machine,
        )
        .await
        .map_err(|e| NodeError::Fatal(e.to_string()))?;
        let purges = crate::purge::spawn(raft.clone(), store.clone(), snapshots.clone(), redactions_applied)
            .map_err(|e| NodeError::Fatal(format!("reading the purge rows: {e}")))?;
        Ok(RaftNode {
            purges,
            raft,
            node_id,
            store,
            info,
            keys,
            peer_refused: Arc::default(),
            alarm: Arc::default(),
            stages,
            snapshots,
            applied,
            policy_epoch,
            clock_skew_ns: settings.clock_skew_ns,
            redact_part_datoms: settings.redact_part_datoms,
            lease: std::time::Duration::from_millis(settings.timing.election_timeout_max_ms),
            startup_log_index,
            committed,
            watched,
            versions,
        })
    }

    /// Proposes a transaction, stamping it with this node's clock. Only the leader accepts.
    pub async fn propose(&self, request: TxRequest, by: Proposer) -> Result<TxOutcome, NodeError> {
        let proposed_time_ns = clock::now_ns().saturating_add(self.clock_skew_ns);
        let command = match by {
            Proposer::Unsigned(principal) => Command::TransactAs {
                request,
                principal,
                proposed_time_ns,
            },
            Proposer::Signed(author) => Command::TransactSigned {
                request,
                author,
                proposed_time_ns,
            },
            Proposer::SignedCommitted { author, salts } => Command::TransactCommitted {
                request,
                author,
                value_salts: salts,
                proposed_time_ns,
            },
        };
        let command = salted(command)?;
        if engram_core::planted::active(engram_core::planted::PlantedBug::AckBeforeCommit) {
            return Ok(self.planted_ack_before_commit(command, proposed_time_ns));
        }
        let resp = self.while_quorate(self.raft.client_write(command)).await?;
        self.stages.mark(Stage::Applied, resp.log_id.index());
        resp.data
            .outcome
            .ok_or_else(|| NodeError::Fatal("apply returned no outcome for a transaction".into()))
    }

    /// Proposes a change to agents, keys, grants or the security mode, made by `principal`;
    /// apply checks it against the policy in force and records it as a transaction of the
    /// system namespace.
    pub async fn propose_policy(&self, op: PolicyOp, by: Proposer) -> Result<TxOutcome, NodeError> {
        let proposed_time_ns = clock::now_ns().saturating_add(self.clock_skew_ns);
        let command = match by {
            Proposer::Unsigned(principal) => Command::Policy {
                op,
                principal,
                proposed_time_ns,
            },
            Proposer::Signed(author) | Proposer::SignedCommitted { author, .. } => Command::PolicySigned {
                op,
                author,
                proposed_time_ns,
            },
        };
        let resp = self
            .while_quorate(self.raft.client_write(salted(command)?))
            .await?;
        resp.data
            .outcome
            .ok_or_else(|| NodeError::Fatal("apply returned no outcome for a policy change".into()))
    }

    /// Proposes a redaction (`engram_core::redact`), asked by `by`, in parts of at most
    /// `redact_part_datoms` datoms (the node's setting), one after another, so writes commit
    /// between them; apply checks each against the policy in force and evaluates it against the
    /// state at its entry. First the target is checked here against
    /// [`RedactRequest::MAX_DATOMS`] (a larger one is refused before anything is proposed).
    /// Answers every part, first to last, with the datoms each took. If leadership moves or a
    /// later part is refused (a grant revoked meanwhile), the parts applied stay applied: asking
    /// again takes what is left.
    pub async fn propose_redaction(
        &self,
        request: RedactRequest,
        by: Proposer,
    ) -> Result<Result<Vec<RedactedPart>, Rejection>, NodeError> {
        let fatal =
            |e: engram_core::CoreError| NodeError::Fatal(format!("reading a redaction's target: {e}"));
        let max = RedactRequest::MAX_DATOMS;
        // Up to 100,000 rows of the target: read off the async workers.
        let checked = request.clone();
        if let Err(rejection) = self
            .read_state_off_runtime(move |store| {
                engram_core::redact::targets(store, &checked, max, true).map(|t| t.map(|_| ()))
            })
            .await?
            .map_err(fatal)?
        {
            return Ok(Err(rejection));
        }
        let (mut principal, mut author) = match by {
            Proposer::Unsigned(principal) => (principal, None),
            Proposer::Signed(author) | Proposer::SignedCommitted { author, .. } => (None, Some(author)),
        };
        let mut part = RedactPart {
            first_tx: None,
            after_key: None,
            limit: self.redact_part_datoms,
        };
        let mut parts: Vec<RedactedPart> = Vec::new();
        loop {
            let command = Command::RedactPart {
                request: request.clone(),
                principal: principal.clone(),
                author: author.clone(),
                part: part.clone(),
                proposed_time_ns: clock::now_ns().saturating_add(self.clock_skew_ns),
            };
            let resp = self
                .while_quorate(self.raft.client_write(on_branches(command)?))
                .await?;
            let outcome = resp
                .data
                .outcome
                .ok_or_else(|| NodeError::Fatal("apply returned no outcome for a redaction".into()))?;
            let receipt = match outcome {
                Ok(receipt) => receipt,
                // Another redaction took the rest between two parts.
                Err(Rejection::NothingToRedact(_)) if !parts.is_empty() => break,
                Err(rejection) => {
                    if let Some(last) = parts.last() {
                        tracing::warn!(
                            parts = parts.len(),
                            last_tx = last.receipt.tx.0,
                            %rejection,
                            "a redaction's later part was refused; the parts before it stay applied"
                        );
                    }
                    return Ok(Err(rejection));
                }
            };
            let taken = self
                .read_state(|store| engram_core::redact::redacted_by(store, receipt.tx))?
                .map_err(fatal)?;
            let first_tx = part.first_tx.unwrap_or(receipt.tx);
            let after = engram_core::redact::last_key_of(&request.namespace, &taken);
            let full = taken.len() >= part.applied_limit();
            parts.push(RedactedPart { receipt, taken });
            if engram_core::planted::active(engram_core::planted::PlantedBug::RedactionStopsAfterFirstPart) {
                break;
            }
            let Some(after) = after.filter(|_| full) else {
                break;
            };
            let more = self
                .read_state(|store| engram_core::redact::more_after(store, &request, first_tx, &after, true))?
                .map_err(fatal)?;
            if !more {
                break;
            }
            part = RedactPart {
                first_tx: Some(first_tx),
                after_key: Some(after),
                limit: self.redact_part_datoms,
            };
            // A signed request's signature and nonce were checked and recorded by the first
            // part: a second use of the nonce would be refused as a replay. The later parts are
            // proposed as the agent the signature authenticated, and apply checks its grant at
            // each of them; their records name the signed first part.
            if let Some(signed) = author.take() {
                principal = engram_access::Principal::new(signed.principal).ok();
            }
        }
        Ok(Ok(parts))
    }

    /// Proposes a redaction by predicate (`engram_core::redact_where`) asked by `principal`,
    /// or, with `retention`, made for the retention policy with that rule (a versions rule
    /// takes only what the policy no longer keeps): range
    /// after range, each planned here against this node's state (a bounded scan, off the apply
    /// path) and evaluated again at apply, so writes commit between them. Answers every range's
    /// receipt, how many datoms they took, and the first `list_max` of those datoms. A range
    /// that finds its datoms taken meanwhile is passed over; nothing matching at all is
    /// [`Rejection::NothingToRedact`]. If leadership moves, the ranges applied stay applied:
    /// asking again takes what is left.
    pub async fn propose_redaction_where(
        &self,
        request: RedactWhere,
        principal: Option<engram_access::Principal>,
        retention: Option<RetentionRule>,
        list_max: usize,
    ) -> Result<Result<RedactedWhere, Rejection>, NodeError> {
        let fatal =
            |e: engram_core::CoreError| NodeError::Fatal(format!("planning a redaction by predicate: {e}"));
        let mut done = RedactedWhere::default();
        let mut first_tx: Option<engram_types::TxId> = None;
        let mut after: Option<Vec<u8>> = None;
        // Datoms per range: halved for a range whose slots are too many rows to read in one
        // entry (`Rejection::GroupsTooLarge`), back to the node's setting after it.
        let mut limit = self.redact_part_datoms;
        loop {
            // Each step reads up to `PLAN_ROWS` index rows and the slots of what they match,
            // on a thread of its own: never on the workers that run Raft and the network.
            let step = (request.clone(), after.clone(), limit);
            let plan = self
                .read_state_off_runtime(move |store| {
                    let (request, after, limit) = step;
                    engram_core::redact_where::plan_range(
                        store,
                        &request,
                        retention.and_then(|r| r.keep_versions()),
                        match retention {
                            Some(_) => engram_core::redact_where::Groups::WholeIfAllMatch,
                            None => engram_core::redact_where::Groups::Whole,
                        },
                        first_tx,
                        after.as_deref(),
                        limit,
                        PLAN_ROWS,
                        true,
                    )
                })
                .await?
                .map_err(fatal)?;
            let range = match plan {
                engram_core::redact_where::Plan::Done => break,
                engram_core::redact_where::Plan::Skip { after: next } => {
                    after = Some(next);
                    // A long stretch of rows that match nothing: let other tasks run between
                    // the scans.
                    tokio::task::yield_now().await;
                    continue;
                }
                engram_core::redact_where::Plan::Range { range, .. } => range,
            };
            let before = after.replace(range.through_key.clone());
            let proposed_time_ns = clock::now_ns().saturating_add(self.clock_skew_ns);
            let command = match retention {
                Some(RetentionRule::KeepVersions(keep_versions)) => Command::RedactVersions {
                    request: request.clone(),
                    range,
                    keep_versions,
                    proposed_time_ns,
                },
                Some(RetentionRule::SessionEnded) => Command::RedactSession {
                    request: request.clone(),
                    range,
                    proposed_time_ns,
                },
                _ => Command::RedactWhere {
                    request: request.clone(),
                    principal: principal.clone(),
                    range,
                    retention_keep_ms: retention.and_then(|r| r.keep_ms()),
                    proposed_time_ns,
                },
            };
            let resp = self
                .while_quorate(self.raft.client_write(on_branches(command)?))
                .await?;
            let outcome = resp.data.outcome.ok_or_else(|| {
                NodeError::Fatal("apply returned no outcome for a redaction by predicate".into())
            })?;
            let receipt = match outcome {
                Ok(receipt) => receipt,
                // Taken by another redaction between the plan and the apply.
                Err(Rejection::NothingToRedact(_)) => continue,
                // The range's slots hold too many rows to read in one entry: the same start,
                // fewer datoms (one datom's slots always fit: a larger slot is `SlotTooLarge`).
                Err(Rejection::GroupsTooLarge { .. }) if limit > 1 => {
                    after = before;
                    limit = (limit / 2).max(1);
                    continue;
                }
                Err(rejection) => {
                    if let Some(last) = done.receipts.last() {
                        tracing::warn!(
                            ranges = done.receipts.len(),
                            last_tx = last.tx.0,
                            %rejection,
                            "a redaction by predicate's later range was refused; the ranges before it stay applied"
                        );
                    }
                    return Ok(Err(rejection));
                }
            };
            first_tx.get_or_insert(receipt.tx);
            limit = self.redact_part_datoms;
            let listed = done.listed.len() < list_max;
            let taken = self
                .read_state(|store| match listed {
                    true => {
                        engram_core::redact::redacted_by(store, receipt.tx).map(|taken| (taken.len(), taken))
                    }
                    false => {
                        engram_core::redact::listed_in(store, receipt.tx).map(|refs| (refs.len(), Vec::new()))
                    }
                })?
                .map_err(fatal)?;
            done.datoms += taken.0 as u64;
            let room = list_max.saturating_sub(done.listed.len());
            done.listed
                .extend(taken.1.into_iter().take(room).map(|(r, d)| (r, d, receipt.tx)));
            done.receipts.push(receipt);
        }
        if done.receipts.is_empty() {
            return Ok(Err(Rejection::NothingToRedact(format!(
                "nothing in namespace {} matches the predicate",
                request.namespace
            ))));
        }
        Ok(Ok(done))
    }

    /// Runs `write` (this node's proposal as leader) until it answers, or until this node has
    /// stopped leading or has heard from no quorum for a whole leader lease. A leader cut off
    /// from its peers but not from its clients stops accepting proposals once its lease runs
    /// out, but the ones it accepted just before would wait for their clients' deadlines
    /// (seconds), though the others elect a new leader within an election timeout; ended as
    /// `UNAVAILABLE` here, a keyed write is retried at once on the new leader (and returns the
    /// first receipt if the entry did commit after all), an unkeyed one learns sooner that its
    /// outcome is unknown. A single voter is never cut off from its quorum.
    async fn while_quorate<T>(
        &self,
        write: impl std::future::Future<
            Output = Result<T, RaftError<crate::TypeConfig, ClientWriteError<crate::TypeConfig>>>,
        >,
    ) -> Result<T, NodeError> {
        let started = tokio::time::Instant::now();
        let lost = self.until(move || {
            if started.elapsed() < self.lease {
                return None;
            }
            let m = self.raft.metrics().borrow_watched().clone();
            let voters = m.membership_config.membership().voter_ids().count();
            let lost = match m.state {
                ServerState::Leader => {
                    voters > 1
                        && m.last_quorum_acked
                            .as_ref()
                            .is_none_or(|at| openraft::Instant::elapsed(&**at) > self.lease)
                }
                _ => true,
            };
            lost.then(|| {
                format!(
                    "this node has stopped leading or heard from no quorum for {} ms; the write may still commit: retry with the same idempotency key",
                    self.lease.as_millis()
                )
            })
        });
        // Biased: the answer first, and no random draw the simulation could not replay.
        tokio::select! {
            biased;
            answer = write => answer.map_err(write_error),
            why = lost => Err(NodeError::Unavailable(why)),
        }
    }

    /// Resolves once this node sees a leader other than the one at `addr`, or none: for a call
    /// forwarded to that leader to race against (see [`RaftNode::until`]).
    pub fn until_leader_moves_from<'a>(
        &'a self,
        addr: &'a str,
    ) -> impl std::future::Future<Output = String> + 'a {
        self.until(move || {
            self.leader()
                .is_none_or(|(_, info)| info.addr != addr)
                .then(|| format!("the leader this call was forwarded to ({addr}) no longer leads; retry"))
        })
    }

    /// Resolves with the reason `lost` gives, checked every [`LEADERSHIP_CHECK_EVERY`]
    /// (first at once): what a call waiting on a leader races against, so that it does not wait
    /// out its client's deadline for a leader the others have replaced. The timer starts here,
    /// not when the future is first polled.
    fn until<'a>(
        &'a self,
        lost: impl Fn() -> Option<String> + 'a,
    ) -> impl std::future::Future<Output = String> + 'a {
        let mut check = tokio::time::interval(LEADERSHIP_CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        async move {
            loop {
                check.tick().await;
                if let Some(why) = lost() {
                    return why;
                }
            }
        }
    }

    /// The planted bug: submit the entry and answer at once with the receipt it would get if
    /// nothing else were proposed and it committed.
    fn planted_ack_before_commit(&self, command: Command, proposed_time_ns: i64) -> TxOutcome {
        let m = self.raft.metrics().borrow_watched().clone();
        let predicted = m.last_log_index.unwrap_or(0) + 1;
        let raft = self.raft.clone();
        tokio::task::spawn(async move {
            let _ = raft.client_write(command).await;
        });
        Ok(engram_types::TxReceipt {
            tx: engram_types::TxId(predicted),
            tx_time_ns: proposed_time_ns,
            datom_hashes: Vec::new(),
            audit_index: predicted,
            audit_hash: engram_types::Hash::of(b""),
            temp_ids: Default::default(),
        })
    }

    /// Waits until this node (the leader) has confirmed leadership with a quorum and applied
    /// everything committed before the call (the read-index protocol).
    ///
    /// One more wait after a restart. The state machine does not sync (durability comes from
    /// the log), so a crash can roll its applied state back behind entries this node had
    /// already acknowledged. openraft may restore a restarted node straight to leader on the
    /// vote it persisted, without a new blank entry, and its persisted commit index may be
    /// behind too (it is not synced either); its read index can then be lower than an entry it
    /// acknowledged before the crash, and the read would miss that write. Every entry this
    /// node can have acknowledged is in the log it restarted with, and a leader never drops
    /// its own entries, so waiting until that log is applied closes the gap. The simulation
    /// found this (a linearizable read after a leader crash-restart returned the value before
    /// an acknowledged write).
    pub async fn ensure_linearizable(&self) -> Result<(), NodeError> {
        match self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(_) => {
                let planted =
                    engram_core::planted::active(engram_core::planted::PlantedBug::ReadBeforeRestartCatchUp);
                if planted || self.applied_index() >= self.startup_log_index {
                    return Ok(());
                }
                match self.wait_applied(self.startup_log_index, RESTART_CATCH_UP).await {
                    Waited::Applied => Ok(()),
                    Waited::TimedOut => Err(NodeError::Unavailable(format!(
                        "this node restarted and has not yet applied the log it restarted with (up to index {}); retry",
                        self.startup_log_index
                    ))),
                    Waited::Stopped => Err(NodeError::Fatal("the Raft core has stopped".into())),
                }
            }
            Err(RaftError::Fatal(f)) => Err(NodeError::Fatal(f.to_string())),
            Err(RaftError::APIError(e)) => match self.leader() {
                Some(leader) if leader.0 != self.node_id => {
                    Err(NodeError::NotLeader { leader: Some(leader) })
                }
                _ => Err(NodeError::Unavailable(format!(
                    "linearizable read not possible now: {e}"
                ))),
            },
        }
    }

    /// Runs `read` over this node's state, unless a snapshot install replaced part of the
    /// state before or during it: between an install's batches the state is part old, part
    /// new, so such a read is refused as `Unavailable` (retry, or read from another node)
    /// rather than answered from a mixture. A seqlock: the install counter is odd during an
    /// install and must be the same, and even, before and after the read.
    pub fn read_state<T>(&self, read: impl FnOnce(&dyn Store) -> T) -> Result<T, NodeError> {
        read_state_of(&*self.store, &self.snapshots, read)
    }

    /// [`Self::read_state`] on a blocking thread, for a read long enough to hold up the async
    /// workers that run Raft, its network and apply's callers. (Inside the simulation no
    /// thread may start: it reads in place.)
    pub async fn read_state_off_runtime<T, F>(&self, read: F) -> Result<T, NodeError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> T + Send + 'static,
    {
        #[cfg(madsim)]
        {
            self.read_state(read)
        }
        #[cfg(not(madsim))]
        {
            let store = self.store.clone();
            let snapshots = self.snapshots.clone();
            tokio::task::spawn_blocking(move || read_state_of(&*store, &snapshots, read))
                .await
                .map_err(|e| NodeError::Fatal(format!("a state read's thread failed: {e}")))?
        }
    }

    /// The state commitment's map as of the last state this node wrote (`None` before it
    /// keeps one), for proofs of reads of the current state.
    pub fn state_version(&self) -> Option<Arc<engram_core::state_proof::StateVersion>> {
        self.versions.latest()
    }

    /// The current leader and its address, if known.
    pub fn leader(&self) -> Option<(u64, NodeInfo)> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let id = metrics.current_leader?;
        let node = metrics.membership_config.membership().get_node(&id)?.clone();
        Some((id, node))
    }

    pub fn status(&self) -> NodeStatus {
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        NodeStatus {
            role: match m.state {
                ServerState::Leader => "Leader",
                ServerState::Follower => "Follower",
                ServerState::Candidate => "Candidate",
                ServerState::Learner => "Learner",
                ServerState::Shutdown => "Shutdown",
            }
            .to_string(),
            leader_id: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index.unwrap_or(0),
            applied_index: m.last_applied.as_ref().map_or(0, |l| l.index),
            cluster_committed_index: m.cluster_committed.as_ref().map_or(0, |l| l.index),
            members: membership
                .nodes()
                .map(|(id, n)| (*id, n.clone(), voters.contains(id)))
                .collect(),
            redactions_applied_index: *self.purges.applied.borrow(),
            redactions_purged_index: *self.purges.purged.borrow(),
        }
    }

    /// Why the Raft core stopped, if it failed (an apply or storage error, such as this node's
    /// key having been revoked): nothing is applied here any more.
    pub fn stopped(&self) -> Option<String> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        m.running_state.as_ref().err().map(|fatal| fatal.to_string())
    }

    /// Waits until this node has applied log index `index`, or `timeout` passes.
    pub async fn wait_applied(&self, index: u64, timeout: std::time::Duration) -> Waited {
        let mut applied = self.applied.clone();
        match tokio::time::timeout(timeout, applied.wait_for(|at| *at >= index)).await {
            Ok(Ok(_)) => Waited::Applied,
            // The state machine is gone: the Raft core has stopped, and nothing will ever be
            // applied here again.
            Ok(Err(_)) => Waited::Stopped,
            // The core may also have failed with the state machine still held; a wait on a
            // stopped node must say so, or its caller would wait again at once, forever.
            Err(_) if self.has_stopped() => Waited::Stopped,
            Err(_) => Waited::TimedOut,
        }
    }

    /// How many writes so far changed the policy rows (policy changes, genesis, snapshot
    /// installs); it moves only after the write. Read it before reading policy rows, and drop
    /// what was cached under an older count.
    pub fn policy_epoch(&self) -> u64 {
        self.policy_epoch.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The last index of the Raft log this node started with (0 on a first start).
    pub fn startup_log_index(&self) -> u64 {
        self.startup_log_index
    }

    /// The transactions of the apply groups written since the last call, oldest first (see
    /// [`crate::committed`]): for the node's recall index, which reads any gap from the store.
    pub fn take_committed(&self) -> Vec<crate::committed::CommittedGroup> {
        self.committed.take()
    }

    /// The same groups as [`Self::take_committed`], from the watchers' own feed: for the
    /// node's watch hub, which resets its tail at any gap.
    pub fn take_watched(&self) -> Vec<crate::committed::CommittedGroup> {
        self.watched.take()
    }

    /// The applied index, as of the last written apply group: cheap enough to read per event.
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Whether the Raft core failed or shut down.
    pub fn has_stopped(&self) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        m.running_state.is_err() || m.state == ServerState::Shutdown
    }

    pub async fn is_initialized(&self) -> Result<bool, NodeError> {
        self.raft
            .is_initialized()
            .await
            .map_err(|e| NodeError::Fatal(e.to_string()))
    }

    /// Initialises a new cluster with `members` as voters.
    pub async fn initialize(&self, members: BTreeMap<u64, NodeInfo>) -> Result<(), NodeError> {
        self.raft.initialize(members).await.map_err(|e| match e {
            RaftError::APIError(e) => NodeError::Rejected(e.to_string()),
            RaftError::Fatal(f) => NodeError::Fatal(f.to_string()),
        })
    }

    /// Refuses a membership change unless this node is the leader and still a voter.
    ///
    /// A leader that has just committed its own removal from the voters keeps its leader state
    /// for a moment; openraft 0.10.0-alpha.37 panics ("Only leader is allowed to call
    /// update_effective_membership()") if such a node is asked for another membership change.
    /// The simulation found this by removing the leader (see sim-tests/tests/regressions.rs).
    fn ensure_voting_leader(&self) -> Result<(), NodeError> {
        let m = self.raft.metrics().borrow_watched().clone();
        let voter = m
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == self.node_id);
        if m.current_leader == Some(self.node_id) && voter {
            return Ok(());
        }
        Err(NodeError::NotLeader {
            leader: self.leader().filter(|(id, _)| *id != self.node_id),
        })
    }

    /// Proposes a key change (authorised inside the request). Only the leader accepts.
    pub async fn propose_key_change(
        &self,
        request: KeyChangeRequest,
    ) -> Result<Result<u64, Rejection>, NodeError> {
        let resp = self
            .raft
            .client_write(Command::KeyChange { request })
            .await
            .map_err(write_error)?;
        resp.data
            .key_change
            .ok_or_else(|| NodeError::Fatal("apply returned no outcome for a key change".into()))
    }

    /// Whether the chain, as this node has applied it, trusts `key` now.
    pub fn key_active(&self, key: &PublicKey) -> Result<bool, NodeError> {
        reads::key_active(&*self.store, key.key_id()).map_err(|e| NodeError::Fatal(e.to_string()))
    }

    /// The cluster's checkpoint origin, which key-change statements are bound to.
    pub fn origin(&self) -> Result<String, NodeError> {
        reads::origin(&*self.store)
            .map_err(|e| NodeError::Fatal(e.to_string()))?
            .ok_or_else(|| NodeError::Unavailable("the cluster has no genesis entry yet".into()))
    }

    /// Revokes `key` of node `node_id`: a key change authorised by this node's (the leader's)
    /// key. Returns the audit index of the key-change entry, or why apply refused it.
    ///
    /// Refused (before anything is proposed) when it would leave fewer than a majority of the
    /// voters holding a key the chain trusts: a node whose key is revoked attests nothing, so
    /// such a cluster could no longer commit writes. The operator removes nodes first.
    pub async fn revoke_key(&self, node_id: u64, key: KeyId) -> Result<Result<u64, Rejection>, NodeError> {
        self.ensure_voting_leader()?;
        let voters: BTreeSet<u64> = self
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .voter_ids()
            .collect();
        let keyed: BTreeSet<u64> = reads::active_keys(&*self.store)
            .map_err(|e| NodeError::Fatal(e.to_string()))?
            .into_iter()
            .filter(|row| voters.contains(&row.node_id) && row.key.key_id() != key)
            .map(|row| row.node_id)
            .collect();
        if voters.contains(&node_id) && keyed.len() * 2 <= voters.len() {
            return Ok(Err(Rejection::KeyChange(format!(
                "revoking this key would leave {} of {} voters able to attest, and a cluster without \
                 a majority of them cannot commit; remove node {node_id} first (`engram cluster remove --id {node_id}`)",
                keyed.len(),
                voters.len()
            ))));
        }
        let request = KeyChangeRequest::sign(
            &self.origin()?,
            KeyAction::Revoke { node_id, key },
            &self.keys.current(),
        );
        self.propose_key_change(request).await
    }

    /// Makes sure the chain trusts `key` for node `id`: proposes a key change admitting it,
    /// authorised by this node's (the leader's) key, unless the chain already trusts it.
    async fn admit_key(&self, id: u64, key: PublicKey) -> Result<(), NodeError> {
        if self.key_active(&key)? {
            return Ok(());
        }
        let request = KeyChangeRequest::sign(
            &self.origin()?,
            KeyAction::Admit { node_id: id, key },
            &self.keys.current(),
        );
        match self.propose_key_change(request).await? {
            Ok(_) => Ok(()),
            // Admitted meanwhile (a retried AddNode), which is what was wanted.
            Err(_) if self.key_active(&key)? => Ok(()),
            Err(rejection) => Err(NodeError::Rejected(rejection.to_string())),
        }
    }

    /// Adds a node: records its key in the chain (a key change authorised by this leader),
    /// adds it as a learner, waits for it to catch up, then (unless `learner_only`) promotes
    /// it to voter.
    pub async fn add_node(&self, id: u64, info: NodeInfo, learner_only: bool) -> Result<(), NodeError> {
        self.ensure_voting_leader()?;
        self.admit_key(id, PublicKey(info.public_key)).await?;
        self.ensure_voting_leader()?;
        self.raft.add_learner(id, info, true).await.map_err(write_error)?;
        if !learner_only {
            self.ensure_voting_leader()?;
            self.raft
                .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), true)
                .await
                .map_err(write_error)?;
        }
        Ok(())
    }

    /// Removes a node from the cluster: a voter in one change (not kept as a learner), a
    /// learner by removing it from the nodes. One change, not two, so a leader removing itself
    /// never has to make a second change after it stopped being a voter.
    pub async fn remove_node(&self, id: u64) -> Result<(), NodeError> {
        self.ensure_voting_leader()?;
        let m = self.raft.metrics().borrow_watched().clone();
        let change = if m.membership_config.membership().voter_ids().any(|v| v == id) {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.raft
            .change_membership(change, false)
            .await
            .map_err(write_error)?;
        Ok(())
    }

    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }
}

impl RaftNode {
    /// This node's job log: its background work, with start, end, outcome and figures.
    pub fn jobs(&self) -> &Arc<crate::jobs::Jobs> {
        &self.snapshots.jobs
    }

    /// The divergence alarm, if one is raised.
    pub fn alarm(&self) -> Option<DivergenceAlarm> {
        self.alarm.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Raises the divergence alarm (the first one raised is kept).
    pub fn raise_alarm(&self, alarm: DivergenceAlarm) -> bool {
        let mut slot = self.alarm.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return false;
        }
        *slot = Some(alarm);
        true
    }

    /// The internal Raft service of this node.
    pub fn raft_service(&self) -> crate::network::RaftService {
        crate::network::RaftService::new(
            self.raft.clone(),
            self.node_id,
            self.store.clone(),
            self.keys.clone(),
            self.snapshots.clone(),
            self.peer_refused.clone(),
        )
    }
}

/// `read` over `store`, unless a snapshot install replaced part of the state before or during
/// it (see [`RaftNode::read_state`]).
fn read_state_of<T>(
    store: &dyn Store,
    snapshots: &crate::snapshots::Snapshots,
    read: impl FnOnce(&dyn Store) -> T,
) -> Result<T, NodeError> {
    let installing = || {
        NodeError::Unavailable("this node is installing a snapshot; retry, or read from another node".into())
    };
    let before = snapshots.install_epoch();
    if before % 2 == 1 {
        return Err(installing());
    }
    let out = read(store);
    if snapshots.install_epoch() != before {
        return Err(installing());
    }
    Ok(out)
}

/// A redaction's `command` as it is logged: taking each value out of a slot whole
/// ([`Command::WholeValues`]), around what [`salted`] makes of it (so the simulation's salt
/// seed, a hash of the command, is what it was).
fn whole_values(command: Command) -> Result<Command, NodeError> {
    Ok(Command::WholeValues {
        command: Box::new(salted(command)?),
    })
}

/// A redaction's `command` as it is logged: reaching datoms on branches
/// ([`Command::OnBranches`]) around [`whole_values`].
fn on_branches(command: Command) -> Result<Command, NodeError> {
    Ok(Command::OnBranches {
        command: Box::new(whole_values(command)?),
    })
}

/// `command` as every proposal is logged: asking for the state root in its audit entries
/// ([`Command::StateRooted`]), with a fresh salt seed for its datoms (see [`Command::Salted`]): 32 bytes from
/// the OS's randomness. Inside the simulation the seed is a hash of the command instead:
/// drawing it from the simulation's RNG would shift every later random choice of a run, so
/// every seed's schedule (and the seeds the planted-bug tests pin) would change with it.
fn salted(command: Command) -> Result<Command, NodeError> {
    #[cfg(madsim)]
    let salt_seed = {
        let bytes = postcard::to_allocvec(&command)
            .map_err(|e| NodeError::Fatal(format!("encoding a command: {e}")))?;
        *blake3::hash(&bytes).as_bytes()
    };
    #[cfg(not(madsim))]
    let salt_seed = {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| NodeError::Fatal(format!("no OS randomness for the salts of an entry: {e}")))?;
        seed
    };
    // Rooted outside the salt, so the simulation's seed (a hash of the command) is what it was.
    Ok(Command::StateRooted {
        command: Box::new(Command::Salted {
            salt_seed,
            command: Box::new(command),
        }),
    })
}

#[cfg(test)]
mod timing_tests {
    use super::RaftTiming;

    #[test]
    fn the_defaults_make_a_valid_config() {
        let config = RaftTiming::default().openraft_config().unwrap();
        assert_eq!(config.heartbeat_interval, 100);
        assert_eq!(
            (config.election_timeout_min, config.election_timeout_max),
            (200, 400)
        );
        // Without a pre-vote a leader kill can cost two election timeouts, not one.
        assert_eq!(config.enable_pre_vote, Some(true));
    }

    #[test]
    fn bad_timing_is_refused_by_flag_name() {
        let inverted = RaftTiming {
            election_timeout_min_ms: 800,
            election_timeout_max_ms: 800,
            ..RaftTiming::default()
        };
        let e = inverted.openraft_config().unwrap_err();
        assert!(
            e.contains("--election-timeout-min-ms (800) must be below --election-timeout-max-ms (800)"),
            "{e}"
        );
        let no_heartbeat = RaftTiming {
            heartbeat_interval_ms: 0,
            ..RaftTiming::default()
        };
        assert!(
            no_heartbeat
                .openraft_config()
                .unwrap_err()
                .contains("--heartbeat-interval-ms")
        );
        let no_snapshots = RaftTiming {
            snapshot_every_entries: 0,
            ..RaftTiming::default()
        };
        assert!(
            no_snapshots
                .openraft_config()
                .unwrap_err()
                .contains("--snapshot-every-entries")
        );
    }
}
