//! **I2 replica-agreement**: replicas never disagree about history. For every audit index
//! that two replicas both hold, the entry hash is the same; after healing, every member holds
//! the same chain; and two replicas that applied the same log index hold the same state
//! digest — checked on the final states and on the samples the [`super::monitor`] took while
//! faults were firing.

use std::collections::BTreeMap;

use engram_types::Hash;

use super::{Replica, Violation};

pub const NAME: &str = "I2 replica-agreement";

/// What a replica's entry at `index` records, to tell two differing entries apart: the log
/// index (transaction) that made it and its namespace.
fn describe(r: &Replica, index: u64) -> String {
    match r.entries.iter().find(|e| e.index == index).map(|e| &e.entry) {
        Some(Ok(signed)) => format!("tx {} in {:?}", signed.entry.tx.0, signed.entry.namespace),
        Some(Err(e)) => format!("undecodable: {e}"),
        None => "none".into(),
    }
}

/// `samples`: applied index → (node, state digest) pairs seen during the run.
pub fn check(replicas: &[Replica], samples: &BTreeMap<u64, Vec<(u64, Hash)>>) -> Vec<Violation> {
    let mut out = Vec::new();
    // Entry hashes: compare every replica with the first one holding each index.
    let mut reference: BTreeMap<u64, (u64, Hash)> = BTreeMap::new();
    for r in replicas {
        for (index, hash) in r.entry_hashes() {
            match reference.get(&index) {
                None => {
                    reference.insert(index, (r.node, hash));
                }
                Some((other, h)) if *h != hash => {
                    out.push(Violation::new(
                        NAME,
                        format!(
                            "audit index {index}: node {} has entry {} ({}), node {other} has {} ({})",
                            r.node,
                            hash.to_hex(),
                            describe(r, index),
                            h.to_hex(),
                            replicas
                                .iter()
                                .find(|o| o.node == *other)
                                .map_or_else(String::new, |o| describe(o, index)),
                        ),
                    ));
                    break;
                }
                Some(_) => {}
            }
        }
    }
    // Members end with the same chain length (they were given time to converge).
    let members: Vec<&Replica> = replicas.iter().filter(|r| r.member).collect();
    if let Some(first) = members.first() {
        for r in &members[1..] {
            if r.entries.len() != first.entries.len() {
                out.push(Violation::new(
                    NAME,
                    format!(
                        "after healing node {} holds {} audit entries, node {} holds {}",
                        r.node,
                        r.entries.len(),
                        first.node,
                        first.entries.len()
                    ),
                ));
            }
        }
    }
    // State digests at equal applied indexes: final states and samples.
    let mut by_index: BTreeMap<u64, Vec<(u64, Hash)>> = samples.clone();
    for r in replicas {
        by_index
            .entry(r.applied_index)
            .or_default()
            .push((r.node, r.digest));
    }
    for (index, seen) in by_index {
        if let Some((n0, d0)) = seen.first()
            && let Some((n1, d1)) = seen.iter().find(|(_, d)| d != d0)
        {
            out.push(Violation::new(
                NAME,
                format!(
                    "applied index {index}: node {n0} has state digest {}, node {n1} has {}",
                    d0.to_hex(),
                    d1.to_hex()
                ),
            ));
        }
    }
    out
}
