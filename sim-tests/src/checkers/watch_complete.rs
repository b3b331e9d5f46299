//! **watch-complete**: each watcher (see `watcher.rs`) received every committed transaction of
//! its namespace exactly once, in tx order, up to the last one the cluster committed — across
//! crashes, partitions, leader changes and reconnects.

use std::collections::BTreeSet;

use engram_audit::EntryKind;

use super::{Replica, Violation};
use crate::workload::NAMESPACE;

pub const NAME: &str = "watch-complete";

/// `watcher`: which watcher delivered `delivered`, named in each violation.
pub fn check(replicas: &[Replica], delivered: &[u64], watcher: usize) -> Vec<Violation> {
    let mut out = check_one(replicas, delivered);
    for v in &mut out {
        v.detail = format!("watcher {watcher}: {}", v.detail);
    }
    out
}

fn check_one(replicas: &[Replica], delivered: &[u64]) -> Vec<Violation> {
    let mut out = Vec::new();
    for pair in delivered.windows(2) {
        if pair[1] <= pair[0] {
            out.push(Violation::new(
                NAME,
                format!(
                    "tx {} delivered after tx {} (a duplicate or out of order)",
                    pair[1], pair[0]
                ),
            ));
            return out;
        }
    }
    // The committed transactions of the namespace: the longest member chain holds them all.
    let Some(chain) = replicas
        .iter()
        .filter(|r| r.member)
        .max_by_key(|r| r.entries.len())
    else {
        return out;
    };
    let committed: BTreeSet<u64> = chain
        .entries
        .iter()
        .filter_map(|s| s.entry.as_ref().ok())
        .filter(|s| matches!(s.entry.kind, EntryKind::Transaction { .. }) && s.entry.namespace == NAMESPACE)
        .map(|s| s.entry.tx.0)
        .collect();
    let got: BTreeSet<u64> = delivered.iter().copied().collect();
    if let Some(extra) = got.difference(&committed).next() {
        out.push(Violation::new(
            NAME,
            format!("tx {extra} was delivered but is not a committed transaction of {NAMESPACE:?}"),
        ));
    }
    if let Some(missing) = committed.difference(&got).next() {
        out.push(Violation::new(
            NAME,
            format!(
                "committed tx {missing} was never delivered ({} of {} delivered, last {:?})",
                got.len(),
                committed.len(),
                delivered.last()
            ),
        ));
    }
    out
}
