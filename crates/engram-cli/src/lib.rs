//! The `engram` command line, as a library so that the integration tests can drive the same
//! local-cluster harness and invariant checkers as `engram demo`.
//!
//! Layout: [`cli`] declares the commands (clap derive), [`commands`] dispatches them, the
//! `*_cmd` modules run them through `engram-client` ([`data_cmd`] the memory's reads and writes,
//! [`cluster_cmd`], [`audit_cmd`], [`serve_cmd`] a node in this process, and the rest), [`common`]
//! holds what they share (no module imports `commands`, and no two modules import each other), [`txjson`] parses the JSON input formats into domain types with field
//! paths in every error, [`demo`] is the local failover demonstration built on
//! [`local_cluster`] (child `engram serve` processes) and [`invariants`] (what must hold after
//! it), [`output`] and [`ui`] print tables and progress, and [`mcp`] serves the memory as
//! Model Context Protocol tools (`engram mcp`).
//!
//! [`offline`] is the exception to "everything through the API": `audit export --data-dir` and
//! `audit verify FILE|--data-dir` work on an export file or a stopped node's store, with no
//! cluster, through `engram-core`'s export writer and `engram-verify`.
//!
//! Must not depend on: the server's internals or Raft. It links `engram-server` only to run a
//! node in-process for `engram serve`, and the core and storage only for the offline audit
//! commands; everything else goes through the public gRPC API, as any other client would.

pub mod access_cmd;
pub mod audit_cmd;
pub mod backup_cmd;
pub mod cli;
pub mod cluster_cmd;
pub mod commands;
pub mod common;
pub mod console_cmd;
pub mod data_cmd;
pub mod demo;
pub mod invariants;
pub mod jobs_cmd;
pub mod local_cluster;
pub mod mcp;
pub mod memory_cmd;
pub mod metrics_cmd;
pub mod offline;
pub mod output;
pub mod pki;
pub mod queryjson;
pub mod retention_cmd;
pub mod serve_cmd;
pub mod staged;
pub mod txjson;
pub mod ui;
