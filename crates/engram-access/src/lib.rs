//! Who may do what in Engram.
//!
//! - [`Principal`]: the validated name of an agent (or operator) that calls the cluster.
//! - [`request`]: a request signed by a principal's Ed25519 key — over the method, the blake3
//!   hash of the request body, a timestamp and a nonce — carried in gRPC metadata, and its
//!   check; [`ReplayGuard`] refuses a stale timestamp or a nonce seen inside the window.
//! - [`Action`], [`Grant`], [`Mode`] and [`Policy`]: grants are data (recorded by transactions
//!   in the system namespace, [`SYSTEM_NAMESPACE`]); [`Policy::allows`] is the one rule that
//!   decides, at the gateway and again at apply.
//! - [`PolicyOp`]: the replicated change to agents, keys, grants or the mode.
//! - [`cert`]: the principal a client's TLS certificate names (a URI `engram:agent:NAME`, or
//!   the subject's common name).
//!
//! Pure: no I/O but reading and writing an agent key file ([`AgentKey`]), no clock (callers
//! pass the time), no async. Must not depend on: storage, the core, Raft, gRPC.

pub mod cert;
mod keyfile;
mod policy;
mod policy_codec;
mod replay;
pub mod request;

pub use keyfile::{AgentKey, KeyFileError};
pub use policy::{
    Action, Grant, Mode, Policy, PolicyOp, Principal, PrincipalError, SYSTEM_NAMESPACE, access_log_prefix,
    attribute_covers, prefix_covers, retention_target, session_target,
};
pub use policy_codec::POLICY_FORMAT_VERSION;
pub use replay::{ReplayError, ReplayGuard};
pub use request::{RequestAuth, RequestError};
