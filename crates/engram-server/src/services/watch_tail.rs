//! The newest transactions of a node's tx log, read once and shared by all its watchers.
//!
//! Before, every watcher read each new transaction from the store itself: with a thousand
//! watchers on a node, one commit cost a thousand tx-log scans and datom reads. Now the first
//! watcher to need a new transaction reads it, of whatever namespace, into this tail; the others
//! take it from memory and filter it for themselves. A watcher further behind than the tail
//! reaches reads the store as before, a page at a time, until it catches up.
//!
//! Sharing is safe because an applied transaction never changes: only committed entries are
//! applied, committed entries are never replaced, and a snapshot install only moves the state
//! forward. The tail only ever covers transactions at or below the applied index the state
//! machine published, which it publishes after the state holding them is written.

use std::collections::VecDeque;
use std::sync::Arc;

use engram_core::CoreError;
use engram_core::reads::{self, LoggedTx};
use engram_raft::{NodeError, RaftNode};
use engram_types::TxId;

/// Transactions the tail keeps: a watcher that falls further behind reads the store.
pub const TAIL_TXS: usize = 4096;
/// The most stored datom bytes the tail keeps (transactions may be up to the largest accepted
/// size each), and reads in one fill.
pub const TAIL_BYTES: usize = 32 << 20;

/// A node's shared tail of the tx log.
pub struct WatchTail {
    tail: tokio::sync::Mutex<Tail>,
}

/// What [`WatchTail::page`] found for one watcher.
pub enum TailPage {
    /// The transactions from the watcher's position through `through`, oldest first (any
    /// namespace; the watcher filters), and where it goes on from.
    Served { txs: Vec<Arc<LoggedTx>>, next: TxId },
    /// The watcher is behind what the tail holds: it must read the store.
    Behind,
}

/// Every transaction with a tx id in `(floor, filled]` is in `txs`, oldest first; `bytes` is
/// their datoms' stored size.
struct Tail {
    floor: u64,
    filled: u64,
    txs: VecDeque<Arc<LoggedTx>>,
    bytes: usize,
}

impl Default for WatchTail {
    fn default() -> Self {
        WatchTail {
            tail: tokio::sync::Mutex::new(Tail {
                floor: 0,
                filled: 0,
                txs: VecDeque::new(),
                bytes: 0,
            }),
        }
    }
}

impl WatchTail {
    /// At most `limit` transactions from tx id `next` through `applied` (an index the state
    /// machine has published), reading into the tail first what it lacks. A snapshot install
    /// in progress is `NodeError::Unavailable`, as for every read of the state
    /// (`RaftNode::read_state`).
    pub async fn page(
        &self,
        node: &RaftNode,
        next: TxId,
        applied: u64,
        limit: usize,
    ) -> Result<Result<TailPage, CoreError>, NodeError> {
        let mut tail = self.tail.lock().await;
        if applied > tail.filled {
            if applied - tail.filled > TAIL_TXS as u64 {
                // Too far to fill (a first use, or a snapshot install): start over at the
                // applied index; watchers behind it read the store.
                tail.txs.clear();
                tail.bytes = 0;
                tail.floor = applied;
                tail.filled = applied;
            } else {
                let from = TxId(tail.filled + 1);
                let read =
                    node.read_state(|store| reads::tx_log_range(store, from, TxId(applied), TAIL_BYTES))?;
                let (fresh, after) = match read {
                    Ok(read) => read,
                    Err(e) => return Ok(Err(e)),
                };
                for logged in fresh {
                    tail.bytes += logged.datom_bytes;
                    tail.txs.push_back(Arc::new(logged));
                }
                // The budget may have cut the read short of `applied`; the next page goes on.
                tail.filled = after.0 - 1;
                while tail.txs.len() > TAIL_TXS || tail.bytes > TAIL_BYTES {
                    match tail.txs.pop_front() {
                        Some(old) => {
                            tail.bytes -= old.datom_bytes;
                            tail.floor = old.record.receipt.tx.0;
                        }
                        None => break,
                    }
                }
            }
        }
        if next.0 <= tail.floor {
            return Ok(Ok(TailPage::Behind));
        }
        let start = tail.txs.partition_point(|t| t.record.receipt.tx < next);
        let txs: Vec<Arc<LoggedTx>> = tail.txs.iter().skip(start).take(limit).cloned().collect();
        let next = match txs.last() {
            // Cut short by the limit: go on after the last one served.
            Some(last) if txs.len() == limit => TxId(last.record.receipt.tx.0 + 1),
            _ => TxId(next.0.max(tail.filled + 1)),
        };
        Ok(Ok(TailPage::Served { txs, next }))
    }
}
