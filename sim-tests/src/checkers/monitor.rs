//! The cheap checks that run while faults fire, so a violation is caught near the moment it
//! happens (and a later repair cannot hide it). Every sample, for every node, read straight
//! from its store:
//! - an applied entry is never rewritten, and vanishes only in a crash: the state machine
//!   does not sync its writes (durability comes from the Raft log, synced on a majority before
//!   commit), so a crash may roll applied state back, and Raft applies those entries again;
//!   an index applied again must get the same entry as before (I1, I3);
//! - new entries link to the ones before them (I1) and keep tx time monotonic (I7);
//! - the state digest is recorded against the node's applied log index, for I2's per-index
//!   comparison across replicas (which also compares a node with itself before and after a
//!   crash, so a re-apply that reaches another state is caught there).
//!
//! And right after each crash, on what the crash left ([`Monitor::after_crash`]): the store
//! passes the scrub, unless it records a snapshot install in progress (which the node
//! finishes when it opens). A crash inside an install that nothing records would leave part
//! of two states for the node to serve.

use std::collections::BTreeMap;
use std::sync::Arc;

use engram_audit::GENESIS_PREV_HASH;
use engram_core::{inspect, reads};
use engram_types::Hash;

use super::{Violation, chain_continuity, purged, state_consistent, tx_time_monotonic};
use crate::cluster::Cluster;
use crate::speculator::SpeculationLog;

#[derive(Default)]
struct Seen {
    /// The hash of every entry the node ever applied, by index. Kept across crashes: an
    /// index applied again must get the same entry.
    hashes: Vec<Hash>,
    /// How many of `hashes` the node's store holds now (fewer after a crash rolled it back).
    held: u64,
    /// The node's crash count at the last sample.
    crashes: u64,
    last_tx_time_ns: i64,
}

#[derive(Default)]
pub struct Monitor {
    nodes: BTreeMap<u64, Seen>,
    /// Applied log index → (node, state digest) samples.
    pub samples: BTreeMap<u64, Vec<(u64, Hash)>>,
    pub violations: Vec<Violation>,
    pub rounds: u64,
    /// Entries that a crash rolled back and the node applied again, each checked equal.
    pub reapplied: u64,
    /// The speculator's redactions: with it, each time a node's purge row moves forward its
    /// store is read for their values at once (`purged.rs`), before a later snapshot build
    /// deletes what the purge should have.
    pub speculation: Option<Arc<SpeculationLog>>,
    /// Per node, the purge row at the last read.
    purged: BTreeMap<u64, u64>,
}

impl Monitor {
    /// Checks what a crash of `node` left in its store (see the module docs).
    pub fn after_crash(&mut self, node: u64, store: &dyn engram_storage::Store) {
        match engram_raft::install_recorded(store) {
            Ok(true) => {}
            Ok(false) => {
                for mut v in state_consistent::check(&[(node, store)]) {
                    v.detail = format!("after a crash, with no install recorded: {}", v.detail);
                    self.violations.push(v);
                }
            }
            Err(e) => self.violations.push(Violation::new(
                "store-readable",
                format!("node {node}: the install record: {e}"),
            )),
        }
    }

    pub fn sample(&mut self, cluster: &Cluster) {
        self.rounds += 1;
        for (id, node) in &cluster.nodes {
            let store = &*node.store;
            // A store in the middle of a snapshot install holds part of two states (recorded,
            // so the node finishes the install if it crashes): nothing to compare until then.
            if engram_raft::install_recorded(store).unwrap_or(false) {
                continue;
            }
            let seen = self.nodes.entry(*id).or_default();
            if node.crashes != seen.crashes {
                seen.crashes = node.crashes;
                match reads::head(store) {
                    Ok(head) => seen.held = seen.held.min(head.index),
                    Err(e) => {
                        self.violations.push(Violation::new(
                            "store-readable",
                            format!("node {id}: chain head: {e}"),
                        ));
                        continue;
                    }
                }
            }
            let from = seen.held;
            // Re-read the last known entry too, to catch a rewrite or a loss of it.
            let rows = match inspect::stored_audit_entries_from(store, from.max(1)) {
                Ok(rows) => rows,
                Err(e) => {
                    self.violations.push(Violation::new(
                        "store-readable",
                        format!("node {id}: audit rows: {e}"),
                    ));
                    continue;
                }
            };
            if from > 0 {
                match rows.first() {
                    Some(first) if first.index == from => {
                        let same = first
                            .entry
                            .as_ref()
                            .is_ok_and(|s| s.entry.hash() == seen.hashes[from as usize - 1]);
                        if !same {
                            self.violations.push(Violation::new(
                                chain_continuity::NAME,
                                format!("node {id} index {from}: the entry changed after it was applied"),
                            ));
                            seen.hashes.truncate(from as usize - 1);
                            seen.held = from - 1;
                            continue;
                        }
                    }
                    _ => {
                        self.violations.push(Violation::new(
                            chain_continuity::NAME,
                            format!("node {id} index {from}: an applied entry vanished without a crash"),
                        ));
                        seen.hashes.truncate(from as usize - 1);
                        seen.held = from - 1;
                        continue;
                    }
                }
            }
            let mut prev = match from {
                0 => GENESIS_PREV_HASH,
                n => seen.hashes[n as usize - 1],
            };
            for stored in rows.iter().skip(usize::from(from > 0)) {
                let expected = seen.held + 1;
                let signed = match (&stored.entry, stored.index == expected) {
                    (Ok(s), true) if s.entry.prev_hash == prev && s.entry.index == expected => s,
                    _ => {
                        self.violations.push(Violation::new(
                            chain_continuity::NAME,
                            format!(
                                "node {id} index {expected}: does not continue the chain (seen while running)"
                            ),
                        ));
                        break;
                    }
                };
                let hash = signed.entry.hash();
                if let Some(before) = seen.hashes.get(expected as usize - 1) {
                    if *before != hash {
                        self.violations.push(Violation::new(
                            chain_continuity::NAME,
                            format!(
                                "node {id} index {expected}: applied again after a crash, the entry differs from the one applied before"
                            ),
                        ));
                        seen.hashes.truncate(expected as usize - 1);
                        break;
                    }
                    self.reapplied += 1;
                } else {
                    if signed.entry.tx_time_ns < seen.last_tx_time_ns {
                        self.violations.push(Violation::new(
                            tx_time_monotonic::NAME,
                            format!(
                                "node {id} index {expected}: tx time {} ns before {} ns (seen while running)",
                                signed.entry.tx_time_ns, seen.last_tx_time_ns
                            ),
                        ));
                    }
                    seen.last_tx_time_ns = seen.last_tx_time_ns.max(signed.entry.tx_time_ns);
                    seen.hashes.push(hash);
                }
                prev = hash;
                seen.held = expected;
            }
            match (engram_raft::applied_index(store), inspect::state_digest(store)) {
                (Ok(index), Ok(digest)) => {
                    let at = self.samples.entry(index).or_default();
                    if !at.iter().any(|(n, d)| n == id && *d == digest) {
                        at.push((*id, digest));
                    }
                }
                (Err(e), _) => self
                    .violations
                    .push(Violation::new("store-readable", format!("node {id}: {e}"))),
                (_, Err(e)) => self
                    .violations
                    .push(Violation::new("store-readable", format!("node {id}: {e}"))),
            }
        }
        self.check_purges(cluster);
    }

    /// Reads the store of each node whose purge row moved forward since the last sample.
    fn check_purges(&mut self, cluster: &Cluster) {
        let Some(log) = self.speculation.clone() else {
            return;
        };
        for (id, node) in &cluster.nodes {
            let store = &*node.store;
            // An unreadable row is reported by the final check.
            let Ok(now) = engram_raft::purged_through(store) else {
                continue;
            };
            let seen = self.purged.entry(*id).or_insert(0);
            if now <= *seen {
                continue;
            }
            *seen = now;
            for mut v in purged::check(&[(*id, store)], &log) {
                v.detail = format!("right after the purge: {}", v.detail);
                self.violations.push(v);
            }
        }
    }
}
