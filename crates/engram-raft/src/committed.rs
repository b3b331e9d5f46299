//! Committed transactions handed from apply to the node's derived indexes (recall) and to its
//! watchers, so they need not read each transaction back from the store after apply wrote it.
//! Each consumer has a feed of its own; a group's transactions are shared between the feeds
//! (`Arc`), so a second consumer costs apply a pointer copy per transaction, not a copy of it.
//!
//! A hand-off, not a source of truth: each apply group is pushed after its batch is written
//! and before the applied index moves past it, and a consumer that finds a gap (it fell behind
//! and the oldest groups were dropped, a snapshot was installed, the node restarted) reads the
//! missing range from the store, which holds every applied transaction. Node-local and in
//! memory only; nothing replicated reads it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use engram_core::reads::LoggedTx;

/// The most datom bytes waiting in the hand-off. Past it the oldest groups are dropped, and the
/// consumer reads them from the store instead: a consumer that stalls costs no more memory.
pub const MAX_WAITING_BYTES: usize = 32 << 20;

/// One written apply group: the log indexes it covered and the transactions it committed
/// (other entries, blanks, membership, refused transactions, commit none).
#[derive(Clone, Debug)]
pub struct CommittedGroup {
    /// First and last log index the group applied.
    pub from: u64,
    pub through: u64,
    pub txs: Vec<Arc<LoggedTx>>,
}

impl CommittedGroup {
    fn bytes(&self) -> usize {
        self.txs.iter().map(|t| t.datom_bytes).sum()
    }
}

/// The groups written and not yet taken, oldest first.
#[derive(Debug, Default)]
pub struct CommittedFeed {
    waiting: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    groups: VecDeque<CommittedGroup>,
    bytes: usize,
    dropped: u64,
}

impl CommittedFeed {
    /// Adds a written group, dropping the oldest while more than [`MAX_WAITING_BYTES`] wait.
    pub fn push(&self, group: CommittedGroup) {
        let mut w = self.lock();
        w.bytes += group.bytes();
        w.groups.push_back(group);
        while w.bytes > MAX_WAITING_BYTES && w.groups.len() > 1 {
            if let Some(old) = w.groups.pop_front() {
                w.bytes -= old.bytes();
                w.dropped += 1;
            }
        }
    }

    /// Every waiting group, oldest first.
    pub fn take(&self) -> Vec<CommittedGroup> {
        let mut w = self.lock();
        w.bytes = 0;
        w.groups.drain(..).collect()
    }

    /// How many groups were dropped unread since the node started.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // Nothing here can panic while holding the lock; a poisoned lock still holds whole groups.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::reads::TxRecord;
    use engram_types::{Hash, Namespace, TxId, TxReceipt};

    fn group(from: u64, through: u64, bytes: usize) -> CommittedGroup {
        let tx = LoggedTx {
            namespace: Namespace::new("t/ns").unwrap(),
            branch: None,
            record: TxRecord {
                receipt: TxReceipt {
                    tx: TxId(through),
                    tx_time_ns: 0,
                    datom_hashes: Vec::new(),
                    audit_index: through,
                    audit_hash: Hash::of(b"test"),
                    temp_ids: Default::default(),
                },
                datoms: Vec::new(),
            },
            datom_bytes: bytes,
        };
        CommittedGroup {
            from,
            through,
            txs: vec![Arc::new(tx)],
        }
    }

    #[test]
    fn groups_come_out_in_order_once() {
        let feed = CommittedFeed::default();
        feed.push(group(1, 3, 10));
        feed.push(group(4, 4, 10));
        let taken = feed.take();
        assert_eq!(
            taken.iter().map(|g| (g.from, g.through)).collect::<Vec<_>>(),
            [(1, 3), (4, 4)]
        );
        assert!(feed.take().is_empty());
        assert_eq!(feed.dropped(), 0);
    }

    #[test]
    fn the_oldest_groups_go_when_too_much_waits() {
        let feed = CommittedFeed::default();
        let big = MAX_WAITING_BYTES / 2 + 1;
        feed.push(group(1, 1, big));
        feed.push(group(2, 2, big));
        feed.push(group(3, 3, big));
        let taken = feed.take();
        // Each push past the bound dropped the oldest: only the newest fits.
        assert_eq!(taken.iter().map(|g| g.from).collect::<Vec<_>>(), [3]);
        assert_eq!(feed.dropped(), 2);
        // One group larger than the bound is still kept: its consumer needs it.
        feed.push(group(4, 4, MAX_WAITING_BYTES * 2));
        assert_eq!(feed.take().len(), 1);
    }
}
