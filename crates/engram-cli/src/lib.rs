//! The `engram` command line, as a library so that the integration tests can drive the same
//! local-cluster harness and invariant checkers as `engram demo`.
//!
//! Layout: [`cli`] declares the commands (clap derive), [`commands`] runs them through
//! `engram-client`, [`txjson`] parses the JSON input formats into domain types with field
//! paths in every error, [`demo`] is the local failover demonstration built on
//! [`local_cluster`] (child `engram serve` processes) and [`invariants`] (what must hold after
//! it), [`output`] and [`ui`] print tables and progress.
//!
//! Must not depend on: the server's internals, Raft, storage or the core. It links
//! `engram-server` only to run a node in-process for `engram serve`; everything else goes
//! through the public gRPC API, as any other client would.

pub mod cli;
pub mod commands;
pub mod demo;
pub mod invariants;
pub mod local_cluster;
pub mod output;
pub mod txjson;
pub mod ui;
