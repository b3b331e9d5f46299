//! The purge after a redaction. Applying a redaction takes its values out of the state, but
//! their bytes stay elsewhere on this node: in the Raft log entries that wrote them, in
//! snapshots built before, and in the store engine's files (old versions of rewritten rows,
//! deleted index rows, write-ahead log files) until compaction. Each node purges its own,
//! in the background, never on the apply path: it builds a snapshot at or after the
//! redaction (which holds only redacted forms), purges its Raft log through the redaction
//! (older snapshot chunks go when the new snapshot becomes current), then compacts the whole
//! store ([`engram_storage::Store::compact`]).
//!
//! Progress: the last redaction in this node's state (a replicated row,
//! `engram_core::keys::META_LAST_REDACTION`, so a node learns of a redaction whether it
//! applied it or installed a snapshot made after it), and, node-local in the Raft space (never
//! replicated, never in a snapshot), the last one whose purge finished here. A node that
//! restarts with the first ahead of the second purges again; a purge that fails is retried.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use engram_core::durability::{Write, durability};
use engram_core::planted;
use engram_storage::{Space, Store, WriteBatch};
use openraft::async_runtime::WatchReceiver;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::Raft;
use crate::snapshots::Snapshots;

/// Raft-space row: the log index of the last redaction whose purge finished on this node.
const REDACTIONS_PURGED: &[u8] = b"redactions/purged";

/// How long no redaction must be applied before a purge starts: one snapshot and one
/// compaction then cover every redaction of a burst (a redaction's parts come tens of
/// milliseconds apart), and a purge's snapshot builds and compaction do not compete with the
/// parts still being applied.
const SETTLE: Duration = Duration::from_millis(500);
/// The longest a purge waits for redactions to stop: a stream that never pauses is still purged
/// this often.
const SETTLE_AT_MOST: Duration = Duration::from_secs(30);
/// How long each step (the snapshot, the log purge) may take before the purge is retried.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a purge looks for the snapshot it asked for.
const POLL: Duration = Duration::from_millis(20);
/// The wait before a failed purge is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// The log index of the last redaction purged on this node (0: none).
pub fn purged_through(store: &dyn Store) -> io::Result<u64> {
    match store
        .get(Space::Raft, REDACTIONS_PURGED)
        .map_err(io::Error::other)?
    {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_be_bytes)
            .map_err(|_| {
                io::Error::other(format!(
                    "row {}: {} bytes, expected 8",
                    String::from_utf8_lossy(REDACTIONS_PURGED),
                    bytes.len()
                ))
            }),
    }
}

/// Where this node's purges stand, as log indexes of redactions.
#[derive(Clone, Debug)]
pub struct PurgeProgress {
    /// The last redaction applied here.
    pub applied: watch::Receiver<u64>,
    /// The last redaction whose values are gone from this node's files.
    pub purged: watch::Receiver<u64>,
}

/// Starts this node's purge task, following `applied` (the state machine's last applied
/// redaction). It ends when the state machine is dropped.
pub(crate) fn spawn(
    raft: Raft,
    store: Arc<dyn Store>,
    snapshots: Arc<Snapshots>,
    applied: watch::Receiver<u64>,
) -> io::Result<PurgeProgress> {
    let (purged_tx, purged) = watch::channel(purged_through(&*store)?);
    let progress = PurgeProgress {
        applied: applied.clone(),
        purged,
    };
    let node = Purger {
        raft,
        store,
        snapshots,
    };
    tokio::task::spawn(node.follow(applied, purged_tx));
    Ok(progress)
}

/// What a purge works on: this node's Raft, its store, and its snapshots.
struct Purger {
    raft: Raft,
    store: Arc<dyn Store>,
    snapshots: Arc<Snapshots>,
}

/// The node stopped: nothing more to purge.
struct Stop;

enum Attempt {
    Stopped,
    Failed(String),
}

impl Purger {
    async fn follow(self, mut applied: watch::Receiver<u64>, purged: watch::Sender<u64>) {
        loop {
            let target = *applied.borrow_and_update();
            if target > *purged.borrow() {
                // Until the burst ends: a quiet SETTLE, or SETTLE_AT_MOST in all.
                let waiting_since = tokio::time::Instant::now();
                let mut seen = target;
                loop {
                    tokio::time::sleep(SETTLE).await;
                    let now = *applied.borrow_and_update();
                    if now == seen || waiting_since.elapsed() >= SETTLE_AT_MOST {
                        break;
                    }
                    seen = now;
                }
                // Redactions applied meanwhile are covered by the same purge.
                let target = *applied.borrow_and_update();
                let job = self.snapshots.jobs.start(
                    crate::jobs::JobKind::RedactionPurge,
                    format!("through log index {target}"),
                );
                match self.purge_through(target).await {
                    Ok(()) => {
                        job.done([("log_index", target)]);
                        purged.send_replace(target);
                        info!(
                            log_index = target,
                            "redacted values purged from the Raft log, the snapshots and the store's files"
                        );
                    }
                    Err(Stop) => {
                        job.failed("the node stopped", []);
                        return;
                    }
                }
                continue;
            }
            if applied.changed().await.is_err() {
                return;
            }
        }
    }

    /// Purges the values of every redaction up to log index `target`, retrying until it is
    /// done or the node stops.
    async fn purge_through(&self, target: u64) -> Result<(), Stop> {
        loop {
            match self.attempt(target).await {
                Ok(()) => return Ok(()),
                Err(Attempt::Stopped) => return Err(Stop),
                Err(Attempt::Failed(why)) => {
                    warn!(log_index = target, %why, "purge after a redaction failed; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    async fn attempt(&self, target: u64) -> Result<(), Attempt> {
        let raft = &self.raft;
        let covered = |id: Option<&crate::LogId>| id.is_some_and(|id| id.index() >= target);
        if raft.metrics().borrow_watched().running_state.is_err() {
            return Err(Attempt::Stopped);
        }
        // Two snapshots at or after the redaction, built one after the other. Making a snapshot
        // current keeps the one it replaces (a peer may still be reading it) and deletes the
        // ones before: the first build replaces the last snapshot made before the redaction,
        // which holds its values, and the second build deletes it by that same rule. (Deleting
        // it at once, while a peer might still stream it, stopped installs in the simulation.)
        let builds = if planted::active(planted::PlantedBug::PurgeKeepsOldSnapshot) {
            1
        } else {
            2
        };
        for _ in 0..builds {
            self.fresh_snapshot(target).await?;
        }
        // The log entries that wrote the values (everything through the redaction).
        raft.trigger()
            .purge_log(target)
            .await
            .map_err(|_| Attempt::Stopped)?;
        raft.wait(Some(STEP_TIMEOUT))
            .metrics(
                |m| covered(m.purged.as_ref()),
                "the log purged through the redaction",
            )
            .await
            .map_err(|e| Attempt::Failed(format!("log purge: {e}")))?;
        // The files: old versions of rewritten rows, deleted rows and log entries, old
        // snapshot chunks, and the write-ahead log files that held any of them.
        compact(self.store.clone()).await.map_err(Attempt::Failed)?;
        let mut row = WriteBatch::new();
        row.put(
            Space::Raft,
            REDACTIONS_PURGED.to_vec(),
            target.to_be_bytes().to_vec(),
        );
        self.store
            .write(row, durability(Write::RedactionPurged))
            .map_err(|e| Attempt::Failed(format!("recording the purge: {e}")))
    }

    /// Has openraft build a snapshot now and waits until it is current and covers `target`.
    async fn fresh_snapshot(&self, target: u64) -> Result<(), Attempt> {
        let current = || -> Result<Option<(u64, u64)>, Attempt> {
            let current = self
                .snapshots
                .current()
                .map_err(|e| Attempt::Failed(format!("reading the current snapshot: {e}")))?;
            Ok(current.map(|(meta, data)| (data.data.id, meta.last_log_id.map_or(0, |id| id.index()))))
        };
        let before = current()?.map(|(id, _)| id);
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|_| Attempt::Stopped)?;
        let built = async {
            loop {
                if let Some((id, index)) = current()?
                    && Some(id) != before
                    && index >= target
                {
                    return Ok(());
                }
                if self.raft.metrics().borrow_watched().running_state.is_err() {
                    return Err(Attempt::Stopped);
                }
                tokio::time::sleep(POLL).await;
            }
        };
        match tokio::time::timeout(STEP_TIMEOUT, built).await {
            Ok(result) => result,
            // A build already under way when the trigger came may end before the redaction;
            // the retry triggers again.
            Err(_) => Err(Attempt::Failed(
                "no snapshot covering the redaction was built".into(),
            )),
        }
    }
}

/// Compacts the store on a thread of its own: it can take long on a large store.
#[cfg(not(madsim))]
async fn compact(store: Arc<dyn Store>) -> Result<(), String> {
    tokio::task::spawn_blocking(move || store.compact())
        .await
        .map_err(|e| format!("compaction task: {e}"))?
        .map_err(|e| format!("compaction: {e}"))
}

/// Inside the simulation the store is in memory (nothing to compact) and no thread may start.
#[cfg(madsim)]
async fn compact(store: Arc<dyn Store>) -> Result<(), String> {
    store.compact().map_err(|e| format!("compaction: {e}"))
}
