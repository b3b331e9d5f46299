//! A typed async client for an Engram cluster.
//!
//! [`Client`] holds one lazily connected gRPC channel per endpoint and sends each call to the
//! *current* endpoint. Any node accepts any call (a follower forwards writes and confirms
//! linearizable reads with the leader), so the client never needs to know who leads: when a
//! call fails with a transient error (`UNAVAILABLE`, a transport failure, a timeout) it rotates
//! to the next endpoint and retries with bounded exponential backoff ([`RetryPolicy`]), within a
//! bounded total time.
//!
//! Retries are only automatic where they cannot change the outcome: reads, status and audit
//! calls are always retried; a write ([`Client::transact`]) is retried only when it carries an
//! idempotency key, because the server answers a repeated key with the first receipt instead of
//! applying again. A write without a key that fails transiently may or may not have been
//! applied; the error is returned and the caller decides. Membership changes are never retried.
//!
//! [`Client::verify_chain`] streams a node's whole audit chain and checks every link and
//! signature with [`engram_audit::ChainVerifier`], so a caller trusts nothing but the chain.
//! [`Client::trust_chain`] turns that into a [`TrustedLog`], and [`Client::get_verified`] /
//! [`Client::history_verified`] accept an answer only with a Merkle proof against a signed
//! checkpoint that extends the trusted one (see the `trust` module). [`Client::get_complete`]
//! also proves that nothing was left out: every attribute of the entity with its whole history,
//! against the state root the checkpoint covers (see the `complete` module).
//!
//! Must not depend on: the server, Raft, storage or the core. It speaks only the wire API
//! (`engram-proto`) and uses the pure data-model and audit crates.

mod client;
mod complete;
mod endpoint;
mod error;
// The health service is a real-tonic client; madsim's transport cannot carry it.
#[cfg(not(madsim))]
mod health;
mod lists;
mod pages;
mod query;
mod retry;
mod trust;
mod verify;
mod watch;

pub use client::{
    Client, ClientConfig, ClientTls, Consistency, FindQuery, GetOptions, HistoryTarget, Keepalive,
    SearchQuery, node_endpoint,
};
pub use complete::{CompleteGet, CompleteHistory, Currency, verify_state_proof};
pub use endpoint::parse_endpoint;
/// A node's public key, as [`ClientConfig::trust_keys`] pins it.
pub use engram_audit::PublicKey;
pub use engram_proto::pb;
pub use error::{ClientError, code_name};
#[cfg(not(madsim))]
pub use health::{Health, HealthUnanswered, check_health};
pub use lists::{EntitiesQuery, ReferrersQuery};
pub use pages::{DiffQuery, HistoryQuery};
pub use query::Join;
pub use retry::{Idempotency, RetryPolicy, is_transient};
pub use trust::{ProofFailure, TrustedLog, verify_checkpoint, verify_read_proof};
pub use verify::{ChainReport, VerifyProgress};
pub use watch::WatchFilter;
