//! The history of register operations that agents run against a cluster, and the check that it
//! is linearizable. One implementation serves both the deterministic simulation (`sim-tests`)
//! and the chaos run against real containers (`engram-chaos`), so both hold the cluster to
//! exactly the same standard.
//!
//! - [`history`]: every operation as an invoke and a return, in the order they were observed.
//! - [`linearizable`]: per register, todc-utils' Wing–Gong–Lowe checker against a sequential
//!   register specification with compare-and-set.
//!
//! Must not depend on: the cluster, its client, an async runtime or a clock (callers pass the
//! time of each event).

pub mod history;
pub mod linearizable;
