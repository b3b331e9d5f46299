//! **State consistent** (the store scrub over every replica): every index row points at the
//! datom it indexes and every datom has its index rows, every transaction entry's datoms
//! reproduce its content hash, and every current-claims row is its slot's history folded.
//! A current-claims row that drifts from its history makes writes check a wrong view of what
//! a slot holds on every replica alike, so replica agreement cannot see it; this does.

use engram_core::scrub;
use engram_storage::Store;

use super::Violation;

pub const NAME: &str = "state-consistent";

pub fn check(stores: &[(u64, &dyn Store)]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (node, store) in stores {
        match scrub::scrub(*store, &mut |_, _| {}) {
            Ok(report) => {
                for f in &report.findings {
                    out.push(Violation::new(
                        NAME,
                        format!("node {node}: {} row {}: {}", f.space, f.key, f.what),
                    ));
                }
            }
            Err(e) => out.push(Violation::new(
                NAME,
                format!("node {node}: the scrub failed: {e}"),
            )),
        }
    }
    out
}
