//! **I9 audit-verifies**: every replica's audit chain passes the offline verifier an auditor
//! would run on its export (`engram audit verify --data-dir`): links, attestations and key
//! changes, every transaction's datoms against its entry's content hash, the Merkle root at
//! every checkpoint the node signed, and every checkpoint's signature against the key history.
//! Crashes, torn writes, snapshot installs and membership changes must leave nothing an
//! auditor would call tampering.

use super::{Replica, Violation};

pub const NAME: &str = "I9 audit-verifies";

pub fn check(replicas: &[Replica]) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in replicas {
        match &r.audit {
            Err(e) => out.push(Violation::new(
                NAME,
                format!("node {}: the export does not read: {e}", r.node),
            )),
            Ok(report) => {
                if let Some(first) = report.failures.first() {
                    out.push(Violation::new(
                        NAME,
                        format!(
                            "node {}: {first} ({} failures in all; {} entries, {} checkpoints checked)",
                            r.node,
                            report.failures.len(),
                            report.entries,
                            report.checkpoints
                        ),
                    ));
                }
            }
        }
    }
    out
}
