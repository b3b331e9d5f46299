//! `engram-bench`: Engram's benchmarks. The closed-loop suite against Engram alone (`load`) and
//! beside etcd (`versus`), the join, recall and redaction benches, the audit chain
//! verification figures (`audit-verify`) and the criterion micro benchmarks (`benches/`).
//! [`engram`] is Engram's adapter to the load generator and the bench clusters; [`suite`] the
//! flags the suite takes.
//!
//! Must not depend on: the server's or the core's internals; the systems are driven through
//! their public gRPC APIs, as their users drive them (the local clusters are `engram serve`
//! processes, started through the CLI crate's `local_cluster`).

pub mod args;
pub mod engram;
pub mod etcd;
pub mod process;
pub mod suite;
