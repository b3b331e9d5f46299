//! Deterministic simulation of an Engram cluster.
//!
//! Each seed builds a cluster of real Engram nodes — the production `engram_server::serve`,
//! with its Raft wiring, state machine, audit chain and gRPC services — on madsim's simulated
//! network and clock, each over an in-memory store the harness owns so that a crash can drop
//! exactly the writes that were never synced. The seed then draws its own fault mix (which
//! faults, how often), runs concurrent agent clients while the faults fire, heals everything,
//! demands liveness, and runs every named invariant checker over the recorded history and the
//! stores of every replica.
//!
//! - [`scenario`]: one seed end to end; returns a [`scenario::SeedReport`].
//! - [`cluster`]: the simulated nodes, their stores and keys, crash and restart.
//! - [`faults`]: the per-seed fault mix and the driver that applies it; [`forger`]: the
//!   Byzantine-client fault (forged Raft requests from a host that is not a member).
//! - [`workload`]: agent clients; every operation recorded as invoke/return in [`history`].
//! - [`checkers`]: one file per invariant (I1–I8 in the design brief) plus liveness.
//! - [`watcher`], [`speculator`]: agents on their own hosts that follow the namespace through
//!   `Client::watch`, and fork, write, merge and abandon branches in a namespace of their own;
//!   [`keeper`] (with redactions on): rewrites slots under retention policies of both kinds.
//! - [`access`]: a principal-aware run (enforced mode, two agents with different grants, grants
//!   changing mid-run, crashes) and its checker: no transaction applied without a grant at its
//!   index.
//! - [`events`]: what the nodes logged (snapshots installed, elections), counted per seed.
//!
//! Everything is `#[cfg(madsim)]`; build with `cargo sim -p engram-sim-tests`.
//!
//! Must not depend on: RocksDB (the simulation cannot run it), wall-clock time or OS
//! randomness (a seed must replay exactly).

#![cfg(madsim)]

pub mod access;
pub mod checkers;
pub mod cluster;
pub mod events;
pub mod faults;
pub mod forger;
pub mod keeper;
/// The operation history (shared with the chaos run): see `engram-lincheck`.
pub use engram_lincheck::history;
pub mod scenario;
pub mod speculator;
pub mod watcher;
pub mod workload;

pub use scenario::{Options, SeedReport, run_seed};
