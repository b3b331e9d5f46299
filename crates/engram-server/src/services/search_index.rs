//! This node's recall index: fed the transactions it has applied, in order, by a background
//! task that follows the applied index ([`keep_current`]), and by a search that finds it
//! behind (so a linearizable search sees every write acknowledged before it).
//!
//! The transactions come from apply itself: each written apply group hands its committed
//! transactions over in memory (`engram_raft::committed`), so feeding costs no store read of
//! the datoms, only a read of the schema rows they name. Whatever was not handed over (the log
//! applied before this process started, a snapshot install, groups dropped while the index
//! lagged) is read from the store, which holds every applied transaction.
//!
//! Derived state (see `engram_recall`): never part of the chain, a snapshot or the replica
//! digest. A snapshot install needs no rebuild: the transactions it brings up to the index's
//! position are the ones the index already read (applied state is replicated exactly), and the
//! index goes on from there.
//!
//! Saves ([`keep_saved`], `recall_save_ms`): the index is written to `DATA_DIR/recall.index`
//! (`super::recall_file`) when it has taken in something new, at most once a period, so a
//! restarted node takes it from there and reads only the log applied since, instead of the
//! whole log (tens of seconds at millions of facts). A save holds the words of indexed values,
//! and the index in memory keeps the words of a fact after it is redacted, so the first
//! redaction applied after the index's contents were read removes the save at once; once the
//! node's purge is done, the index is rebuilt from the store (which holds only redacted forms),
//! replaces the one in memory, and is saved again.

use engram_core::reads::{self, LoggedTx};
use engram_core::schema;
use engram_raft::RaftNode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::recall_file::{Loaded, SaveFile};

use engram_recall::{Feeder, Hit, Indexing, Query, RecallIndex, SavedAt, Scope};
use engram_types::{Attribute, Datom, Namespace, TxId};
use tokio::sync::Mutex;

use crate::error::ApiError;

/// Datom bytes read from the store per step of a catch-up, so a first search over a large
/// store holds no more than this of the log in memory at once.
const CATCH_UP_BYTES: usize = 8 << 20;

#[derive(Default)]
pub struct SearchIndex {
    state: Arc<Mutex<Fed>>,
    /// Where catch-up reads of the log run (a first search, a restart over a large store).
    pool: Arc<super::read_pool::ReadPool>,
    /// Where the index is saved; `None`: never (it is rebuilt from the log at every start).
    file: Option<SaveFile>,
    /// The position the index was taken from a save at when the node started (0: rebuilt
    /// from the log), for the job log.
    loaded_next: AtomicU64,
}

#[derive(Default)]
struct Fed {
    index: RecallIndex,
    feeder: Feeder,
    /// The next transaction to read from the log.
    next: TxId,
    /// The last redaction this node had applied when the index's contents were first read
    /// (from the log or a save): one applied later may have forgotten values it still holds.
    redactions_seen: u64,
    /// Whether the index was set out from (a save, or nothing) since the node started.
    started: bool,
}

impl SearchIndex {
    /// An empty index whose catch-up reads run on `pool`, saved to `file` if given.
    pub fn new(pool: Arc<super::read_pool::ReadPool>, file: Option<SaveFile>) -> SearchIndex {
        SearchIndex {
            state: Arc::default(),
            pool,
            file,
            loaded_next: AtomicU64::new(0),
        }
    }

    /// Sets out the index after a start: from its save if there is one this store can take
    /// (on the read pool: a save of millions of facts takes a while to decode), else from
    /// nothing, to be fed from the log.
    async fn start(&self, fed: &mut Fed, node: &RaftNode) {
        fed.started = true;
        let redactions = *node.purges.applied.borrow();
        fed.redactions_seen = redactions;
        let Some(file) = self.file.clone() else {
            return;
        };
        let read = self
            .pool
            .read(node, move |store| file.read(store, redactions))
            .await;
        match read {
            Ok(Ok(Some(Loaded { index, feeder, at }))) => {
                tracing::info!(
                    next_tx = at.next.0,
                    "search index: taken from its save; the log applied since is fed to it"
                );
                self.loaded_next.store(at.next.0, Ordering::Relaxed);
                *fed = Fed {
                    index,
                    feeder,
                    next: at.next,
                    redactions_seen: at.redactions_seen,
                    started: true,
                };
            }
            Ok(Ok(None)) => {}
            Ok(Err(why)) => {
                tracing::warn!(%why, "search index: its save is not taken; it is rebuilt from the log")
            }
            Err(e) => {
                tracing::warn!(error = %e, "search index: its save could not be read; it is rebuilt from the log")
            }
        }
    }

    /// Feeds what `node` has applied through `through`, then answers `query` over the facts
    /// whose attribute `shown` accepts.
    pub async fn recall(
        &self,
        node: &RaftNode,
        through: u64,
        scope: &Scope,
        query: &Query,
        shown: &(dyn Fn(&Attribute) -> bool + Sync),
    ) -> Result<Vec<Hit>, ApiError> {
        let mut fed = self.state.lock().await;
        self.feed(&mut fed, node, through).await?;
        fed.index
            .recall_where(scope, query, shown)
            .map_err(|e| ApiError::Invalid(e.to_string()))
    }

    /// Feeds what `node` has applied through `through`.
    pub async fn catch_up(&self, node: &RaftNode, through: u64) -> Result<(), ApiError> {
        let mut fed = self.state.lock().await;
        self.feed(&mut fed, node, through).await
    }

    /// Feeds every transaction applied through `through` (and any later ones apply already
    /// handed over): first what apply handed over in memory, then, for any gap, the store.
    async fn feed(&self, fed: &mut Fed, node: &RaftNode, through: u64) -> Result<(), ApiError> {
        let pool = &*self.pool;
        if !fed.started {
            self.start(fed, node).await;
        }
        if fed.next == TxId(0)
            && engram_core::planted::active(engram_core::planted::PlantedBug::SearchIndexNotRebuilt)
        {
            fed.next = TxId(node.startup_log_index() + 1);
        }
        // Consecutive handed-over groups are fed together, with one read of the schema.
        let mut run: Vec<Arc<LoggedTx>> = Vec::new();
        let mut run_next = fed.next;
        for group in node.take_committed() {
            if group.through < run_next.0 {
                // Fed already (read from the store before apply handed it over).
                continue;
            }
            if group.from > run_next.0
                && !engram_core::planted::active(engram_core::planted::PlantedBug::SearchGapNotRead)
            {
                // A gap: groups dropped while the index lagged, a snapshot installed, or the
                // log applied before this process started. The store holds it.
                Self::feed_txs(fed, node, std::mem::take(&mut run), run_next)?;
                Self::feed_from_store(fed, node, pool, group.from - 1).await?;
                if fed.next.0 < group.from {
                    return Err(ApiError::Internal(format!(
                        "search index: the store's tx log stops at {} before the group applied from {}",
                        fed.next.0, group.from
                    )));
                }
                run_next = fed.next;
            }
            run.extend(group.txs.into_iter().filter(|t| t.record.receipt.tx >= run_next));
            run_next = TxId(group.through + 1);
        }
        Self::feed_txs(fed, node, run, run_next)?;
        Self::feed_from_store(fed, node, pool, through).await
    }

    /// Feeds what the store holds from the index's position through `through`, a bounded
    /// step at a time.
    async fn feed_from_store(
        fed: &mut Fed,
        node: &RaftNode,
        pool: &super::read_pool::ReadPool,
        through: u64,
    ) -> Result<(), ApiError> {
        while fed.next.0 <= through {
            let from = fed.next;
            // On the read pool: a first catch-up over a large log must not hold the workers
            // that drive Raft.
            let (txs, next) = pool
                .read(node, move |store| {
                    reads::tx_log_range(store, from, TxId(through), CATCH_UP_BYTES)
                })
                .await?
                .map_err(ApiError::from)?;
            Self::feed_txs(fed, node, txs.into_iter().map(Arc::new).collect(), next.max(from))?;
            if next <= from {
                break;
            }
            // A first catch-up over a large log is long: let other tasks run between steps.
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// Feeds `txs` (in order, none before the index's position), then moves the index's
    /// position to `next`.
    fn feed_txs(fed: &mut Fed, node: &RaftNode, txs: Vec<Arc<LoggedTx>>, next: TxId) -> Result<(), ApiError> {
        if txs.is_empty() {
            fed.next = fed.next.max(next);
            return Ok(());
        }
        let defs = super::read_state(node, |store| {
            let mut defs = schema::DefsAt::default();
            txs.iter()
                .map(|logged| indexing(store, &mut defs, logged))
                .collect::<Result<Vec<_>, engram_core::CoreError>>()
        })?;
        let Fed { index, feeder, .. } = &mut *fed;
        for (logged, defs) in txs.iter().zip(&defs) {
            let receipt = &logged.record.receipt;
            let schema = |s: &Scope, a: &Attribute| {
                defs.iter()
                    .find(|(ns, attr, _)| *ns == s.namespace && attr == a)
                    .map(|(_, _, i)| *i)
                    .unwrap_or_default()
            };
            if let Err(e) = feeder.feed_tx(
                index,
                receipt.tx,
                receipt.tx_time_ns,
                &logged.record.datoms,
                schema,
            ) {
                // Half fed, the index cannot go on: start again from nothing next time.
                *fed = Fed::default();
                return Err(ApiError::Internal(format!(
                    "search index: {e}; it will be rebuilt"
                )));
            }
        }
        fed.next = fed.next.max(next);
        Ok(())
    }
}

impl SearchIndex {
    /// Replaces the index with one read afresh from the store through log index `through`,
    /// built aside (searches go on meanwhile) from what the store holds now: redacted values
    /// only in their redacted form. `redactions`: the last redaction applied before the read.
    async fn rebuild(&self, node: &RaftNode, through: u64, redactions: u64) -> Result<(), ApiError> {
        let mut fresh = Fed {
            redactions_seen: redactions,
            started: true,
            ..Fed::default()
        };
        Self::feed_from_store(&mut fresh, node, &self.pool, through).await?;
        // Whatever was applied after `through` is fed to it by the next feed, from the store.
        *self.state.lock().await = fresh;
        Ok(())
    }

    /// Writes the index to its save file, unless it holds nothing past `saved` or a redaction
    /// was applied after its contents were read. The index is encoded under its lock, off the
    /// async workers; the file is written after the lock is let go. Returns the position the
    /// save holds, or `None` when nothing was written.
    async fn save(&self, node: &RaftNode, saved: TxId) -> Result<Option<(TxId, usize)>, String> {
        let Some(file) = self.file.clone() else {
            return Ok(None);
        };
        let fed = self.state.clone().lock_owned().await;
        if !fed.started || fed.next <= saved || *node.purges.applied.borrow() > fed.redactions_seen {
            return Ok(None);
        }
        let node = node.clone();
        let write = move || -> Result<(SavedAt, usize), String> {
            let last = fed.index.last_tx();
            let anchor = if last == TxId(0) {
                None
            } else {
                let row = node
                    .read_state(|store| reads::tx(store, last))
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("transaction {} fed but not in the store", last.0))?;
                Some((last, row.receipt.audit_hash))
            };
            let at = SavedAt {
                next: fed.next,
                anchor,
                redactions_seen: fed.redactions_seen,
            };
            let size_hint = FEED_HEALTH.save_bytes.load(Ordering::Relaxed) as usize;
            let bytes =
                engram_recall::save(&fed.index, &fed.feeder, &at, size_hint).map_err(|e| e.to_string())?;
            drop(fed);
            file.write(&bytes)
                .map_err(|e| format!("writing {}: {e}", file.path().display()))?;
            Ok((at, bytes.len()))
        };
        #[cfg(madsim)]
        let (at, bytes) = write()?;
        #[cfg(not(madsim))]
        let (at, bytes) = tokio::task::spawn_blocking(write)
            .await
            .map_err(|e| format!("the save stopped: {e}"))??;
        Ok(Some((at.next, bytes)))
    }
}

/// How often [`keep_saved`] looks at the index between saves: how long a save may outlive a
/// redaction when the redaction's notice is missed, and how soon a purge is followed by the
/// rebuild.
const SAVE_LOOK_EVERY: Duration = Duration::from_secs(1);

/// Keeps the save of `shared`'s recall index: writes it every `every` when the index has taken
/// in something new; removes it as soon as a redaction is applied after the index's contents
/// were read (it may hold the forgotten values), and once this node's purge of that redaction
/// is done, rebuilds the index from the store, replaces the one in memory, and saves again.
/// With saves off (no save file, `--recall-save-ms 0`) it still rebuilds the index after each
/// purge: the index in memory holds a forgotten value's words until it is rebuilt (its hits
/// are filtered out meanwhile). Ends when the node stops.
pub async fn keep_saved(
    shared: Arc<super::Shared>,
    every: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let search = &shared.search;
    let node = &shared.node;
    let file = search.file.clone();
    let mut redactions = node.purges.applied.clone();
    let mut notices = true;
    // The position of the save on disk: once the index is set out, the one it was taken from.
    let mut saved: Option<TxId> = None;
    let mut last_save = tokio::time::Instant::now();
    // A rebuild that failed is tried again after FEED_RETRY's waits, not every round: at
    // millions of facts one costs tens of seconds of a core.
    let mut rebuild_failures = 0;
    let mut next_rebuild = tokio::time::Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = stopped.changed() => return,
            // A redaction applied: look at once, not at the next round.
            changed = redactions.changed(), if notices => notices = changed.is_ok(),
            _ = tokio::time::sleep(SAVE_LOOK_EVERY) => {}
        }
        if *stopped.borrow() || node.has_stopped() {
            return;
        }
        let redacted = *node.purges.applied.borrow();
        let (started, seen) = {
            let fed = search.state.lock().await;
            (fed.started, fed.redactions_seen)
        };
        if !started {
            continue;
        }
        let saved = saved.get_or_insert(TxId(search.loaded_next.load(Ordering::Relaxed)));
        if redacted > seen {
            if let Some(file) = &file {
                match file.remove() {
                    Ok(true) => {
                        FEED_HEALTH.save_bytes.store(0, Ordering::Relaxed);
                        tracing::info!(
                            log_index = redacted,
                            "search index: its save is removed (a redaction was applied after it was read)"
                        )
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(error = %e, path = %file.path().display(), "search index: cannot remove its save after a redaction")
                    }
                }
            }
            *saved = TxId(0);
            if *node.purges.purged.borrow() < redacted || tokio::time::Instant::now() < next_rebuild {
                continue;
            }
            let through = shared.applied_index();
            let job = node.jobs().start(
                engram_raft::jobs::JobKind::SearchRebuild,
                format!("after the redaction at log index {redacted}, through log index {through}"),
            );
            match search.rebuild(node, through, redacted).await {
                Ok(()) => {
                    rebuild_failures = 0;
                    job.done([("log_index", through)]);
                }
                Err(e) => {
                    rebuild_failures += 1;
                    let wait = FEED_RETRY.after(rebuild_failures).unwrap_or(FEED_RETRY.max);
                    next_rebuild = tokio::time::Instant::now() + wait;
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "search index: rebuild after a redaction failed; no save until it succeeds");
                    job.failed(e, [("log_index", through)]);
                    continue;
                }
            }
        }
        if file.is_none() || last_save.elapsed() < every {
            continue;
        }
        match search.save(node, *saved).await {
            Ok(Some((at, bytes))) => {
                *saved = at;
                last_save = tokio::time::Instant::now();
                FEED_HEALTH.saves.fetch_add(1, Ordering::Relaxed);
                FEED_HEALTH.save_bytes.store(bytes as u64, Ordering::Relaxed);
                tracing::debug!(next_tx = at.0, bytes, "search index saved");
                // A redaction applied while the save was written: the next round removes it.
            }
            Ok(None) => {}
            Err(why) => {
                last_save = tokio::time::Instant::now();
                FEED_HEALTH.save_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%why, "search index: cannot save it; tried again later")
            }
        }
    }
}

/// How often the feeder looks for newly applied transactions. A poll, not a wait on Raft's
/// metrics: a wait draws on a generator the simulation does not seed, and a poll of an
/// atomic is cheap. It bounds how far behind apply the index runs between searches (a search
/// feeds the rest itself).
const FOLLOW_EVERY: Duration = Duration::from_millis(25);

/// How the feeder retries a feed that failed. A feed that fails once (a snapshot install
/// replacing state under a read) likely succeeds soon; one that keeps failing (a damaged block
/// in the log it reads) fails the same way on every try, and retrying it every
/// [`FOLLOW_EVERY`] cost a sixth of a core and a log line 40 times a second, for ever. So the
/// wait doubles from `first` up to `max`, and after `give_up_after` failures in a row the
/// feeder stops until the node restarts (see [`keep_current`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedRetry {
    pub first: Duration,
    pub max: Duration,
    pub give_up_after: u32,
}

/// The feeder's retries: 0.1 s, 0.2 s, ... up to 30 s, 10 tries in all (about 80 s of trying).
pub const FEED_RETRY: FeedRetry = FeedRetry {
    first: Duration::from_millis(100),
    max: Duration::from_secs(30),
    give_up_after: 10,
};

impl FeedRetry {
    /// After `failures` feeds in a row failed (1 or more): how long to wait before the next
    /// try, or `None`: try no more.
    pub fn after(&self, failures: u32) -> Option<Duration> {
        if failures >= self.give_up_after {
            return None;
        }
        let doubling = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
        Some(self.first.saturating_mul(doubling).min(self.max))
    }
}

/// What the feeder has met, for `/metrics`.
#[derive(Debug, Default)]
pub struct FeedHealth {
    failures: AtomicU64,
    stopped: AtomicBool,
    /// The log index the feeder has fed the index through.
    fed_through: AtomicU64,
    /// Saves of the index written, saves that failed, and the size of the save on disk (0:
    /// none, or removed after a redaction).
    saves: AtomicU64,
    save_failures: AtomicU64,
    save_bytes: AtomicU64,
}

// Read by `/metrics` only, which the simulation does not serve.
#[cfg_attr(madsim, allow(dead_code))]
impl FeedHealth {
    pub const fn new() -> FeedHealth {
        FeedHealth {
            failures: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            fed_through: AtomicU64::new(0),
            saves: AtomicU64::new(0),
            save_failures: AtomicU64::new(0),
            save_bytes: AtomicU64::new(0),
        }
    }

    /// The log index the feeder has fed the index through (0 until its first feed ends).
    pub fn fed_through(&self) -> u64 {
        self.fed_through.load(Ordering::Relaxed)
    }

    /// Feeds that failed, in all.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Whether the feeder gave up (until the node restarts).
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }
}

/// The feeder of this process's node. A process serves one node; the simulation runs several
/// in one process, but serves no `/metrics` (like `crate::error::corruptions_seen`).
static FEED_HEALTH: FeedHealth = FeedHealth::new();

/// The feeder's lines of the `/metrics` text, for a node that has applied through `applied`.
#[cfg(not(madsim))]
pub fn render_metrics(node_id: u64, applied: u64, out: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "# HELP engram_recall_index_lag_entries Log entries this node has applied that its search index has not yet taken in (after a start: the rebuild still to go).\n# TYPE engram_recall_index_lag_entries gauge\nengram_recall_index_lag_entries{{node_id=\"{node_id}\"}} {}",
        applied.saturating_sub(FEED_HEALTH.fed_through())
    );
    let _ = writeln!(
        out,
        "# HELP engram_recall_feed_failures_total Times the search index's feeder failed to feed it (it retries with backoff, then stops).\n# TYPE engram_recall_feed_failures_total counter\nengram_recall_feed_failures_total{{node_id=\"{node_id}\"}} {}",
        FEED_HEALTH.failures()
    );
    let _ = writeln!(
        out,
        "# HELP engram_recall_feed_stopped 1 once the search index's feeder gave up after repeated failures: the index follows no more writes until the node restarts (each search still feeds it first).\n# TYPE engram_recall_feed_stopped gauge\nengram_recall_feed_stopped{{node_id=\"{node_id}\"}} {}",
        u8::from(FEED_HEALTH.stopped())
    );
    crate::metrics::write_node_samples(
        out,
        node_id,
        &[
            (
                "engram_recall_saves_total",
                "counter",
                "Saves of the search index written to DATA_DIR/recall.index (--recall-save-ms).",
                &FEED_HEALTH.saves,
            ),
            (
                "engram_recall_save_failures_total",
                "counter",
                "Saves of the search index that failed (each logged; tried again a period later).",
                &FEED_HEALTH.save_failures,
            ),
            (
                "engram_recall_save_bytes",
                "gauge",
                "Size of the search index's save on disk (0: none, or removed after a redaction until the index is rebuilt).",
                &FEED_HEALTH.save_bytes,
            ),
        ],
    );
}

/// What the feeder follows: a node's applied index, and how to feed its index through one.
trait Followed {
    fn applied(&self) -> u64;
    async fn feed(&self, through: u64) -> Result<(), ApiError>;
    /// Whether the node's Raft core stopped.
    fn has_stopped(&self) -> bool;
    /// Where the first feed after a start (the rebuild from the log) is recorded.
    fn jobs(&self) -> Option<&Arc<engram_raft::jobs::Jobs>> {
        None
    }
    /// The transaction a save set the index out at (0: it was rebuilt from the log).
    fn save_position(&self) -> u64 {
        0
    }
}

impl Followed for super::Shared {
    fn applied(&self) -> u64 {
        self.applied_index()
    }

    async fn feed(&self, through: u64) -> Result<(), ApiError> {
        self.search.catch_up(&self.node, through).await
    }

    fn has_stopped(&self) -> bool {
        self.node.has_stopped()
    }

    fn jobs(&self) -> Option<&Arc<engram_raft::jobs::Jobs>> {
        Some(self.node.jobs())
    }

    fn save_position(&self) -> u64 {
        self.search.loaded_next.load(Ordering::Relaxed)
    }
}

/// Keeps the index of `shared`'s node current: feeds each batch of transactions soon after it
/// is applied, so searches rarely wait for a feed and the first search after a start does not
/// read the whole log. Ends when the node's Raft core stops or `stopped` turns true, or after
/// [`FEED_RETRY`]'s failures in a row: then `engram_recall_feed_stopped` is 1, and the index,
/// which lives in memory only, is rebuilt from the log when the node restarts. A search still
/// feeds the index itself first, so searches stay complete (each refused while the feed
/// fails), only slower.
pub async fn keep_current(shared: Arc<super::Shared>, stopped: tokio::sync::watch::Receiver<bool>) {
    follow(&*shared, &FEED_HEALTH, FEED_RETRY, stopped).await;
}

async fn follow(
    target: &impl Followed,
    health: &FeedHealth,
    retry: FeedRetry,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut fed_through = 0;
    let mut failures = 0;
    loop {
        let mut wait = FOLLOW_EVERY;
        let applied = target.applied();
        if applied > fed_through {
            // The first feed after a start rebuilds the index (it lives in memory only) from
            // the whole log: a job in the node's log.
            let rebuild = (fed_through == 0).then(|| {
                target.jobs().map(|jobs| {
                    jobs.start(
                        engram_raft::jobs::JobKind::SearchRebuild,
                        format!("through log index {applied}"),
                    )
                })
            });
            let fed = target.feed(applied).await;
            if let Some(job) = rebuild.flatten() {
                match &fed {
                    Ok(()) => job.done([("log_index", applied), ("from_save_tx", target.save_position())]),
                    Err(e) => job.failed(e, [("log_index", applied)]),
                }
            }
            match fed {
                Ok(()) => {
                    fed_through = applied;
                    health.fed_through.store(applied, Ordering::Relaxed);
                    failures = 0;
                }
                Err(e) => {
                    failures += 1;
                    health.failures.fetch_add(1, Ordering::Relaxed);
                    match retry.after(failures) {
                        Some(delay) => {
                            tracing::warn!(
                                error = %e,
                                failures,
                                retry_in_ms = delay.as_millis() as u64,
                                "search index: feed failed; it is rebuilt from the log"
                            );
                            wait = delay;
                        }
                        None => {
                            health.stopped.store(true, Ordering::Relaxed);
                            tracing::error!(
                                error = %e,
                                failures,
                                "search index: feed failed {failures} times in a row; the feeder stops \
                                 (engram_recall_feed_stopped 1) until the node restarts"
                            );
                            return;
                        }
                    }
                }
            }
        }
        if target.has_stopped() {
            return;
        }
        tokio::select! {
            // Polled in order, not at random: a random pick draws from a generator the
            // simulation does not seed, and would make runs differ.
            biased;
            _ = stopped.changed() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// How each attribute `logged` writes was indexed as its transaction found it: a few per
/// transaction, so a list.
fn indexing(
    store: &dyn engram_storage::ReadView,
    defs: &mut schema::DefsAt,
    logged: &LoggedTx,
) -> Result<Vec<(Namespace, Attribute, Indexing)>, engram_core::CoreError> {
    let mut out: Vec<(Namespace, Attribute, Indexing)> = Vec::new();
    for Datom {
        namespace,
        attribute,
        tx,
        ..
    } in &logged.record.datoms
    {
        if out.iter().any(|(ns, a, _)| ns == namespace && a == attribute) {
            continue;
        }
        let def = defs.def_at(store, namespace, attribute, Some(*tx))?;
        let indexing = def.map_or_else(Indexing::default, |d| Indexing {
            cardinality: d.cardinality,
            searchable: d.searchable,
        });
        out.push((namespace.clone(), attribute.clone(), indexing));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    #[test]
    fn the_retry_wait_doubles_to_its_cap_then_gives_up() {
        let waits: Vec<Option<u64>> = (1..=11)
            .map(|n| FEED_RETRY.after(n).map(|d| d.as_millis() as u64))
            .collect();
        assert_eq!(
            waits,
            [
                Some(100),
                Some(200),
                Some(400),
                Some(800),
                Some(1_600),
                Some(3_200),
                Some(6_400),
                Some(12_800),
                Some(25_600),
                None,
                None
            ]
        );
        let long = FeedRetry {
            give_up_after: u32::MAX,
            ..FEED_RETRY
        };
        assert_eq!(long.after(40), Some(FEED_RETRY.max));
        assert_eq!(long.after(u32::MAX - 1), Some(FEED_RETRY.max));
    }

    /// A node whose every feed fails, as a damaged block in its log makes it.
    struct Broken {
        tries: AtomicU32,
    }

    impl Followed for Broken {
        fn applied(&self) -> u64 {
            10
        }

        async fn feed(&self, _: u64) -> Result<(), ApiError> {
            self.tries.fetch_add(1, Ordering::Relaxed);
            Err(ApiError::Internal("block checksum mismatch".into()))
        }

        fn has_stopped(&self) -> bool {
            false
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_feed_that_keeps_failing_is_tried_a_bounded_number_of_times_then_stopped() {
        let node = Broken {
            tries: AtomicU32::new(0),
        };
        let health = FeedHealth::new();
        let (_keep, stopped) = tokio::sync::watch::channel(false);
        let started = tokio::time::Instant::now();
        // Returns by itself: the feeder gives up rather than retry for ever.
        follow(&node, &health, FEED_RETRY, stopped).await;
        let tries = node.tries.load(Ordering::Relaxed);
        assert_eq!(tries, FEED_RETRY.give_up_after);
        assert_eq!(health.failures(), u64::from(tries));
        assert!(health.stopped());
        // The backoff, not the 25 ms poll: 0.1 + 0.2 + ... + 25.6 s between the tries.
        assert_eq!(started.elapsed(), Duration::from_millis(51_100));
    }
}
