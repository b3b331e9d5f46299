//! Engram's Raft wiring: openraft 0.10 configured with Engram's types, its log store and state
//! machine adapted onto the [`engram_storage::Store`] trait, and a gRPC network.
//!
//! - [`TypeConfig`]: node ids are `u64`; a node is [`NodeInfo`] (address and Ed25519 public
//!   key, so membership entries carry the keys the audit chain trusts); app data is
//!   [`Command`], which carries the leader's clock reading so apply never reads a clock.
//! - [`LogStore`]: log entries in `Space::Log`, vote/committed/purged in `Space::Raft`; every
//!   append is synced before openraft is told it is flushed.
//! - [`StateMachine`]: applies entries through [`engram_core::Engine`], writing the applied log
//!   id and membership in the same batch as the state change; snapshots are the core's
//!   self-checking snapshot format, stored, sent and installed a chunk at a time
//!   ([`snapshots`](StoredSnapshot)), never whole in memory.
//! - [`network`]: openraft's `RaftNetworkV2` over the internal `engram.v1.Raft` gRPC service,
//!   with messages as postcard bytes; snapshots stream in 1 MiB chunks.
//! - [`peer_auth`]: every Raft request is signed by the sending node's key and checked against
//!   the keys the receiver's chain and membership bind to that node id.
//!
//! The async runtime is openraft's pluggable one: Tokio, or madsim (`engram-sim-rt`) when built
//! with `--cfg madsim`; the simulation swaps that and the `tonic` package, not this code.
//!
//! Must not depend on: RocksDB (storage is the trait), the server crate, or a clock outside
//! [`clock`].

pub mod clock;
pub mod committed;
pub mod jobs;
mod log_store;
pub mod network;
mod node;
pub mod peer_auth;
mod purge;
pub mod refusals;
pub mod restore;
mod snapshots;
pub mod stages;
mod state_machine;

use std::fmt;

use engram_access::{PolicyOp, Principal};
use engram_audit::{Author, KeyChangeRequest};
use engram_types::{RedactPart, RedactRange, RedactRequest, RedactWhere, Salt, TxRequest};
pub use log_store::LogStore;
pub use node::{
    DivergenceAlarm, NodeError, NodeStatus, RaftNode, RaftSettings, RaftTiming, RedactedPart, RedactedWhere,
    Waited,
};
pub use purge::{PurgeProgress, purged_through};
use serde::{Deserialize, Serialize};
pub use snapshots::{CHUNK_BYTES, Receiving, Snapshots, StoredRef, StoredSnapshot, install_recorded};
pub use state_machine::{MAX_GROUP_ENTRIES, StateMachine, StateVersions, applied_index};

/// A cluster member as the membership config records it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeInfo {
    /// `host:port` of the node's gRPC server.
    pub addr: String,
    /// The node's Ed25519 public key, trusted by the audit chain from the membership entry
    /// that adds the node.
    pub public_key: [u8; 32],
}

/// What a log entry asks the state machine to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Apply a transaction. `proposed_time_ns` is the leader's clock when it proposed; apply
    /// uses it (never decreasing) as the transaction time.
    Transact {
        request: TxRequest,
        proposed_time_ns: i64,
    },
    /// Admit, rotate or revoke a key; authorised inside the request by a trusted key.
    KeyChange { request: KeyChangeRequest },
    /// A transaction made by `principal`, the agent whose signature on the request the leader
    /// checked (`None`: an unsigned request). Apply checks it against the policy in force at
    /// this entry. (`Transact` entries, from before principals, apply as unsigned.)
    TransactAs {
        request: TxRequest,
        principal: Option<Principal>,
        proposed_time_ns: i64,
    },
    /// A change to agents, keys, grants or the security mode, made by `principal`.
    Policy {
        op: PolicyOp,
        principal: Option<Principal>,
        proposed_time_ns: i64,
    },
    /// A transaction whose request `author` signed, its signature checked by the leader. Apply
    /// checks that the signature holds at this entry (the agent's key then, the request it
    /// covers) and the agent's grants, and the entry records the signature.
    TransactSigned {
        request: TxRequest,
        author: Author,
        proposed_time_ns: i64,
    },
    /// A policy change whose request `author` signed; checked and recorded like
    /// [`Command::TransactSigned`].
    PolicySigned {
        op: PolicyOp,
        author: Author,
        proposed_time_ns: i64,
    },
    /// Forget the values `request` names (`engram_core::redact`), asked by `principal`
    /// (`None`: unsigned) or signed by `author`. Evaluated at apply against the state then.
    Redact {
        request: RedactRequest,
        principal: Option<Principal>,
        author: Option<Author>,
        proposed_time_ns: i64,
    },
    /// One part of a redaction (`engram_core::redact`): like [`Command::Redact`], checked and
    /// evaluated at apply, but taking only the datoms `part` bounds, and recorded with its
    /// datoms packed. The leader proposes a redaction's parts one after another
    /// ([`RaftNode::propose_redaction`]), so writes commit between them.
    RedactPart {
        request: RedactRequest,
        principal: Option<Principal>,
        author: Option<Author>,
        part: RedactPart,
        proposed_time_ns: i64,
    },
    /// `command`, whose datoms are salted from `salt_seed` (`engram_types::salt_of`): 32
    /// bytes the leader drew at random when it proposed, so the salts are the same on every
    /// replica and no reader of the chain can derive them. Every proposal is wrapped in one;
    /// entries from before salts apply their datoms unsalted.
    Salted {
        salt_seed: [u8; 32],
        command: Box<Command>,
    },
    /// `command`, whose transaction entries record the state root after them (audit entry
    /// format 2, `docs/AUDIT.md` "State commitment"). Every proposal of a leader that keeps the
    /// state commitment is wrapped in one, so every replica records the root for the same
    /// entries; entries from before it record none. A node of an earlier build cannot read it
    /// and stops rather than record another chain.
    StateRooted { command: Box<Command> },
    /// One range of a redaction by predicate (`engram_core::redact_where`), asked by
    /// `principal` or, with `retention_keep_ms`, made by the leader for the retention policy
    /// keeping that long. The leader plans the ranges one after another
    /// ([`RaftNode::propose_redaction_where`]); apply evaluates the predicate again over the
    /// range. (After [`Command::StateRooted`] in the enum: entries keep their encoding.)
    RedactWhere {
        request: RedactWhere,
        principal: Option<Principal>,
        range: RedactRange,
        retention_keep_ms: Option<u64>,
        proposed_time_ns: i64,
    },
    /// One range of a versions policy's redaction: made by the leader for the policy keeping
    /// `keep_versions` of each slot; apply takes only the datoms in the range the policy no
    /// longer keeps (`engram_core::redact_where::superseded`). (Last in the enum: entries keep
    /// their encoding; a node of an earlier build cannot read it and stops.)
    RedactVersions {
        request: RedactWhere,
        range: RedactRange,
        keep_versions: u32,
        proposed_time_ns: i64,
    },
    /// `command`, a redaction entry that takes each value out of a slot whole, with every
    /// datom the fold matched with it (`engram_core::value_groups`). Every redaction a leader
    /// of this build proposes is wrapped in one; entries from before apply as they did. (Last
    /// in the enum: entries keep their encoding; a node of an earlier build cannot read it and
    /// stops rather than take less.)
    WholeValues { command: Box<Command> },
    /// One range of forgetting a namespace whose session ended: made by the leader for the
    /// namespace's last ended session; apply takes it only if that session ended at or after
    /// the predicate's `before_tx` (`engram_core::policy::session_allows`). (Last in the enum:
    /// entries keep their encoding; a node of an earlier build cannot read it and stops.)
    RedactSession {
        request: RedactWhere,
        range: RedactRange,
        proposed_time_ns: i64,
    },
    /// `command`, a redaction that takes what it targets on every branch of the namespace too
    /// (`engram_core::redact::part_targets`, `engram_core::redact_where::plan_range`). Every
    /// redaction a leader of this build proposes is wrapped in one; entries from before apply
    /// to main only, as they did. (Last in the enum: entries keep their encoding; a node of an
    /// earlier build cannot read it and stops rather than leave branches' values behind.)
    OnBranches { command: Box<Command> },
    /// A transaction whose request `author` signed in its committed form
    /// (`TxRequest::committed_bytes`): each value's commitment under its salt in
    /// `value_salts` (one per op, then one per precondition), not the value. Checked like [`Command::TransactSigned`]; each datom takes
    /// its op's salt, so its hash commits to its value as the signature does, and the node
    /// keeps the request in its salted form, which a redaction of any of its values removes.
    /// (Last in the enum: entries keep their encoding; a node of an earlier build cannot read
    /// it and stops.)
    TransactCommitted {
        request: TxRequest,
        author: Author,
        value_salts: Vec<Salt>,
        proposed_time_ns: i64,
    },
}

/// Who asked for a redaction, for a log line: the signing agent, else the principal, else "-".
fn asked_by<'a>(principal: &'a Option<Principal>, author: &'a Option<Author>) -> &'a str {
    author
        .as_ref()
        .map(|a| a.principal.as_str())
        .or(principal.as_ref().map(Principal::as_str))
        .unwrap_or("-")
}

/// Who proposes a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Proposer {
    /// An unsigned request (`None`), or a principal known otherwise.
    Unsigned(Option<Principal>),
    /// A request signed by an agent: the entry will record the signature.
    Signed(Author),
    /// A transaction an agent signed in its committed form, with its value salts (one per op,
    /// then one per precondition: `TxRequest::committed_bytes`); anything but a transaction
    /// proposes it as `Signed`.
    SignedCommitted { author: Author, salts: Vec<Salt> },
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Transact {
                request,
                proposed_time_ns,
            } => {
                write!(
                    f,
                    "transact(ns={}, ops={}, t={proposed_time_ns})",
                    request.namespace,
                    request.ops.len()
                )
            }
            Command::KeyChange { request } => write!(f, "key-change({:?})", request.action),
            Command::TransactAs {
                request,
                principal,
                proposed_time_ns,
            } => write!(
                f,
                "transact(ns={}, ops={}, by={}, t={proposed_time_ns})",
                request.namespace,
                request.ops.len(),
                principal.as_ref().map_or("-", Principal::as_str)
            ),
            Command::TransactSigned {
                request,
                author,
                proposed_time_ns,
            } => write!(
                f,
                "transact(ns={}, ops={}, signed by={}, t={proposed_time_ns})",
                request.namespace,
                request.ops.len(),
                author.principal
            ),
            Command::PolicySigned {
                op,
                author,
                proposed_time_ns,
            } => write!(
                f,
                "policy({}, signed by={}, t={proposed_time_ns})",
                op.kind(),
                author.principal
            ),
            Command::Policy {
                op,
                principal,
                proposed_time_ns,
            } => write!(
                f,
                "policy({}, by={}, t={proposed_time_ns})",
                op.kind(),
                principal.as_ref().map_or("-", Principal::as_str)
            ),
            Command::Redact {
                request,
                principal,
                author,
                proposed_time_ns,
            } => write!(
                f,
                "redact(ns={}, entity={}, by={}, t={proposed_time_ns})",
                request.namespace,
                request.entity,
                asked_by(principal, author)
            ),
            Command::RedactPart {
                request,
                principal,
                author,
                part,
                proposed_time_ns,
            } => write!(
                f,
                "redact-part(ns={}, entity={}, of={}, limit={}, by={}, t={proposed_time_ns})",
                request.namespace,
                request.entity,
                part.first_tx.map_or("-".to_string(), |tx| tx.0.to_string()),
                part.limit,
                asked_by(principal, author)
            ),
            Command::RedactWhere {
                request,
                principal,
                range,
                retention_keep_ms,
                proposed_time_ns,
            } => write!(
                f,
                "redact-where(ns={}, of={}, limit={}, by={}{}, t={proposed_time_ns})",
                request.namespace,
                range.first_tx.map_or("-".to_string(), |tx| tx.0.to_string()),
                range.limit,
                principal.as_ref().map_or("-", Principal::as_str),
                retention_keep_ms.map_or(String::new(), |ms| format!(", retention={ms}ms")),
            ),
            Command::RedactVersions {
                request,
                range,
                keep_versions,
                proposed_time_ns,
            } => write!(
                f,
                "redact-versions(ns={}, of={}, limit={}, keep={keep_versions}, t={proposed_time_ns})",
                request.namespace,
                range.first_tx.map_or("-".to_string(), |tx| tx.0.to_string()),
                range.limit,
            ),
            // The seed stays out of logs: it is as secret as the salts.
            Command::Salted { command, .. } => write!(f, "salted {command}"),
            Command::StateRooted { command } => write!(f, "rooted {command}"),
            Command::WholeValues { command } => write!(f, "whole-values {command}"),
            Command::OnBranches { command } => write!(f, "on-branches {command}"),
            Command::TransactCommitted {
                request,
                author,
                proposed_time_ns,
                ..
            } => write!(
                f,
                "transact(ns={}, ops={}, signed committed by={}, t={proposed_time_ns})",
                request.namespace,
                request.ops.len(),
                author.principal
            ),
            Command::RedactSession {
                request,
                range,
                proposed_time_ns,
            } => write!(
                f,
                "redact-session(ns={}, of={}, limit={}, t={proposed_time_ns})",
                request.namespace,
                range.first_tx.map_or("-".to_string(), |tx| tx.0.to_string()),
                range.limit,
            ),
        }
    }
}

/// What applying an entry returns to the proposer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct CommandResponse {
    /// Set for `Command::Transact`; `None` for blank and membership entries.
    pub outcome: Option<engram_core::TxOutcome>,
    /// Set for `Command::KeyChange`: the audit index of the key-change entry, or why apply
    /// refused it.
    pub key_change: Option<Result<u64, engram_core::Rejection>>,
}

/// The async runtime openraft runs on: Tokio, or madsim's simulated executor and clock in the
/// simulation build.
#[cfg(not(madsim))]
pub type Runtime = openraft::impls::TokioRuntime;
#[cfg(madsim)]
pub type Runtime = engram_sim_rt::MadsimRuntime;

openraft::declare_raft_types!(
    /// Engram's openraft type configuration.
    pub TypeConfig:
        D = Command,
        R = CommandResponse,
        NodeId = u64,
        Node = NodeInfo,
        AsyncRuntime = Runtime,
);

pub type Raft = openraft::Raft<TypeConfig, StateMachine>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type Membership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type SnapshotData = StoredSnapshot;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;

/// Postcard encoding for Raft rows and messages. Decoding never panics: corrupt bytes become
/// an `io::Error` (for storage) or a `Status` (for the network). Public so tests can build the
/// messages a hostile host would send.
pub mod codec {
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    pub fn encode<T: Serialize>(value: &T) -> std::io::Result<Vec<u8>> {
        postcard::to_allocvec(value).map_err(std::io::Error::other)
    }

    pub fn decode<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> std::io::Result<T> {
        postcard::from_bytes(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("corrupt {what}: {e}")))
    }
}
