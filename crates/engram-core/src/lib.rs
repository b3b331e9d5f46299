//! Engram's state machine: the deterministic function from (state, log entry) to (new state,
//! receipt), and the reads over the state it leaves.
//!
//! [`Engine::apply_tx`] validates a transaction against the current state (unknown entities,
//! value types, preconditions, idempotency), and either rejects it with no effect or adds its
//! rows to the open apply group: its datoms, the EAVT/AEVT/AVET/VAET index rows, the tx-log
//! row, the audit entry and the caller's own rows (the Raft layer adds its applied log id).
//! [`Engine::end_group`] returns the group as one batch for the caller to write; apply itself
//! writes nothing (key changes aside). The transaction time comes from the log entry; apply
//! reads no clock, no RNG and nothing but the store. Reads ([`reads`]) are free functions over
//! a `ReadView` (a store, or a store with a group's writes over it), so they run beside apply
//! without going through it.
//!
//! Files import one way: `rows` (row layouts, outcomes) and `cursor` at the bottom; `keys`,
//! `current`, `branch`, `schema` and `policy` (who may do what) above them; `value_groups` (what a
//! redaction takes together) above `current`; `reads`, then
//! `commitment` (the state commitment's slot digests),
//! `pages` (History and Find in pages) and `lists` (namespaces, entities, referrers), `plan`,
//! then `engine` on top.
//!
//! Must not depend on: Raft, gRPC, RocksDB, an async runtime or a clock.

pub mod access_log;
pub mod backup;
pub mod branch;
pub mod commitment;
pub mod current;
pub mod cursor;
pub mod durability;
mod engine;
mod error;
pub mod export;
pub mod inspect;
pub mod jobs;
pub mod keys;
pub mod lists;
pub mod pages;
mod plan;
pub mod planted;
pub mod policy;
pub mod proofs;
pub mod query;
pub mod reads;
pub mod redact;
pub mod redact_where;
mod rows;
pub mod schema;
pub mod scrub;
pub mod snapshot;
pub mod state_proof;
pub mod store_format;
pub mod value_groups;

pub use engine::{CheckpointPolicy, Engine, PolicyActor};
pub use error::CoreError;
pub use rows::{ChainHead, LastCheckpoint, Rejection, TxLogRow, TxOutcome};
