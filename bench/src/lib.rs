//! `engram-bench`: Engram's benchmarks. The comparison with etcd (`versus`), the audit chain
//! verification figures (`audit-verify`) and the criterion micro benchmarks (`benches/`).
//!
//! Must not depend on: the server's or the core's internals; the systems are driven through
//! their public gRPC APIs, as their users drive them.

pub mod args;
pub mod etcd;
pub mod process;
