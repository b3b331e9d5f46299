use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use engram_core::durability::{Write, durability};
use engram_storage::{Durability, Space, Store, WriteBatch};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{OptionalSend, RaftTypeConfig};

use tokio::sync::{mpsc, oneshot};

use crate::codec::{decode, encode};
use crate::stages::{Stage, WriteStages};
use crate::{Entry, LogId, TypeConfig, Vote};

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const PURGED: &[u8] = b"purged";

/// The rows of a node restored from a backup whose state applied `applied`: the log purged
/// through it (the state holds everything before) and `vote` (see `crate::restore`).
pub(crate) fn restored_rows(applied: &LogId, vote: &Vote) -> io::Result<WriteBatch> {
    let mut batch = WriteBatch::new();
    batch.put(Space::Raft, PURGED.to_vec(), encode(applied)?);
    batch.put(Space::Raft, VOTE.to_vec(), encode(vote)?);
    Ok(batch)
}

fn io_err(e: engram_storage::StorageError) -> io::Error {
    io::Error::other(e)
}

fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The Raft log and vote on a [`Store`]. Cheap to clone: clones share the store and the
/// flusher.
///
/// Appends are written buffered, so they are readable (and so replicable) at once, and a
/// flusher task makes them durable before openraft hears they are flushed. That keeps the
/// fsync out of openraft's core loop: a leader ships entries to its followers while its own
/// disk syncs, and appends that arrive during one sync share the next.
#[derive(Clone)]
pub struct LogStore {
    store: Arc<dyn Store>,
    /// Marks each synced append (telemetry; see [`WriteStages`]).
    stages: Arc<WriteStages>,
    flusher: mpsc::UnboundedSender<FlushJob>,
}

/// Work for the flusher, done in the order sent.
enum FlushJob {
    /// Make every earlier append durable, then report it to openraft (and mark the stage for
    /// the last index it holds).
    Flush(IOFlushed<TypeConfig>, Option<u64>),
    /// Answer once every earlier flush has been reported.
    Barrier(oneshot::Sender<()>),
}

impl LogStore {
    /// Must be called inside the runtime: it starts the flusher task, which ends once every
    /// clone of this store is dropped.
    pub fn new(store: Arc<dyn Store>, stages: Arc<WriteStages>) -> LogStore {
        let (flusher, jobs) = mpsc::unbounded_channel();
        tokio::task::spawn(flush_loop(store.clone(), stages.clone(), jobs));
        LogStore {
            store,
            stages,
            flusher,
        }
    }

    /// Waits until every append handed to the flusher so far is durable (or has failed) and
    /// has been reported to openraft.
    async fn flushed(&self) {
        let (done, wait) = oneshot::channel();
        if self.flusher.send(FlushJob::Barrier(done)).is_ok() {
            // An error means the flusher is gone, and with it anything left to wait for.
            let _ = wait.await;
        }
    }

    fn get_row<T: serde::de::DeserializeOwned>(&self, key: &[u8], what: &str) -> io::Result<Option<T>> {
        match self.store.get(Space::Raft, key).map_err(io_err)? {
            Some(bytes) => Ok(Some(decode(what, &bytes)?)),
            None => Ok(None),
        }
    }

    fn put_row<T: serde::Serialize>(&self, key: &[u8], value: &T, write: Write) -> io::Result<()> {
        let mut batch = WriteBatch::new();
        batch.put(Space::Raft, key.to_vec(), encode(value)?);
        self.store.write(batch, durability(write)).map_err(io_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<Entry>> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Some(i.saturating_add(1)),
            Bound::Excluded(i) => Some(*i),
            Bound::Unbounded => None,
        };
        let end_key = end.map(log_key);
        let rows = self
            .store
            .scan(
                Space::Log,
                &log_key(start),
                end_key.as_ref().map(|k| &k[..]),
                usize::MAX,
            )
            .map_err(io_err)?;
        let mut entries = Vec::with_capacity(rows.len());
        for (k, v) in rows {
            let entry: Entry = decode("log entry", &v)?;
            // The key and the entry must agree; a mismatch is corruption, reported not hidden.
            if k.as_slice() != log_key(entry.index()) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "log entry stored under the wrong key: entry index {}",
                        entry.index()
                    ),
                ));
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        self.get_row(VOTE, "vote")
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId> = self.get_row(PURGED, "purged log id")?;
        let last = self.store.scan_rev(Space::Log, &[], None, 1).map_err(io_err)?;
        let last_log_id = match last.into_iter().next() {
            Some((_, v)) => Some(decode::<Entry>("log entry", &v)?.log_id()),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        self.put_row(VOTE, vote, Write::Vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        // Not synced: openraft treats the committed id as a hint that lets a restart apply
        // sooner; losing the latest one only means learning it again from the leader. Syncing
        // it would cost an fsync each time the commit index moves.
        if let Some(id) = &committed {
            self.stages.mark(Stage::Committed, id.index());
        }
        self.put_row(COMMITTED, &committed, Write::CommittedHint)
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(self
            .get_row::<Option<LogId>>(COMMITTED, "committed log id")?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = <TypeConfig as RaftTypeConfig>::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::new();
        let mut last = None;
        for entry in entries {
            last = Some(entry.index());
            batch.put(Space::Log, log_key(entry.index()).to_vec(), encode(&entry)?);
        }
        // Buffered, so replication can ship the entries at once; the flusher syncs them.
        self.store.write(batch, Durability::Buffered).map_err(io_err)?;
        if durability(Write::LogAppend) == Durability::Buffered {
            // The planted bug: report the append as flushed while it is only buffered.
            callback.io_completed(Ok(()));
            return Ok(());
        }
        // Durable before the callback: reporting an unsynced append lets a crash revert a
        // follower's log after it acknowledged the entries, which Raft forbids.
        if let Err(mpsc::error::SendError(job)) = self.flusher.send(FlushJob::Flush(callback, last)) {
            if let FlushJob::Flush(callback, _) = job {
                callback.io_completed(Err(io::Error::other("the log flusher has stopped")));
            }
            return Err(io::Error::other("the log flusher has stopped"));
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        // Appends still being flushed are reported before the entries they wrote vanish, so
        // openraft never hears "flushed" for an entry that is no longer there.
        self.flushed().await;
        let from = last_log_id.map_or(0, |id| id.index() + 1);
        let mut batch = WriteBatch::new();
        batch.delete_range(
            Space::Log,
            log_key(from).to_vec(),
            vec![engram_storage::FIRST_INVALID_KEY_BYTE],
        );
        self.store
            .write(batch, durability(Write::LogTruncate))
            .map_err(io_err)
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        let mut batch = WriteBatch::new();
        batch.put(Space::Raft, PURGED.to_vec(), encode(&log_id)?);
        batch.delete_range(
            Space::Log,
            log_key(0).to_vec(),
            log_key(log_id.index() + 1).to_vec(),
        );
        self.store
            .write(batch, durability(Write::LogPurge))
            .map_err(io_err)
    }
}

/// The flusher: takes every job queued so far, syncs the store once for all of them, then
/// reports each in order.
async fn flush_loop(
    store: Arc<dyn Store>,
    stages: Arc<WriteStages>,
    mut jobs: mpsc::UnboundedReceiver<FlushJob>,
) {
    while let Some(first) = jobs.recv().await {
        let mut round = vec![first];
        while let Ok(more) = jobs.try_recv() {
            round.push(more);
        }
        let needs_sync = round.iter().any(|job| matches!(job, FlushJob::Flush(..)));
        let result = if needs_sync {
            let started = std::time::Instant::now();
            let result = sync(store.clone()).await;
            stages.log_synced(started.elapsed());
            result
        } else {
            Ok(())
        };
        for job in round {
            match job {
                FlushJob::Flush(callback, last) => {
                    if let (Ok(()), Some(last)) = (&result, last) {
                        stages.mark(Stage::LogDurable, last);
                    }
                    callback.io_completed(result.clone().map_err(io::Error::other));
                }
                FlushJob::Barrier(done) => {
                    let _ = done.send(());
                }
            }
        }
    }
}

/// An fsync blocks its thread for a disk round trip; keep it off the async workers.
#[cfg(not(madsim))]
async fn sync(store: Arc<dyn Store>) -> Result<(), String> {
    match tokio::task::spawn_blocking(move || store.sync()).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(format!("log sync task failed: {e}")),
    }
}

/// The simulated store syncs in memory, at once.
#[cfg(madsim)]
async fn sync(store: Arc<dyn Store>) -> Result<(), String> {
    store.sync().map_err(|e| e.to_string())
}
