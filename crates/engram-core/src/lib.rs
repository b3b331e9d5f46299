//! Engram's state machine: the deterministic function from (state, log entry) to (new state,
//! receipt), and the reads over the state it leaves.
//!
//! [`Engine::apply_tx`] validates a transaction against the current state (unknown entities,
//! value types, preconditions, idempotency), and either rejects it with no effect or builds
//! ONE write batch holding its datoms, the EAVT/AEVT/AVET/VAET index rows, the tx-log row, the
//! signed audit entry and the caller's own rows (the Raft layer adds its applied log id), then
//! writes it. The transaction time comes from the log entry; apply reads no clock, no RNG and
//! nothing but the store. Reads ([`reads`]) are free functions over a [`Store`], so they run
//! beside apply without going through it.
//!
//! Must not depend on: Raft, gRPC, RocksDB, an async runtime or a clock.

pub mod branch;
pub mod current;
mod engine;
mod error;
pub mod export;
pub mod inspect;
pub mod keys;
mod plan;
pub mod planted;
pub mod proofs;
pub mod reads;
pub mod schema;
pub mod scrub;
pub mod snapshot;

pub use engine::{ChainHead, CheckpointPolicy, Engine, LastCheckpoint, Rejection, TxOutcome};
pub use error::CoreError;
