//! What a node's watchers share: the newest committed transactions, handed over by apply in
//! memory, and the pages of older ones that watchers behind read from the store.
//!
//! Two groups of watchers, as in etcd's watchable store:
//! - **at the head** (synced): their next transaction is in the ring. One task follows apply
//!   ([`follow`]): it takes each written group from the node's watch feed (the transactions
//!   apply already holds, shared, not read back) and appends them to the ring, then wakes the
//!   watchers. A watcher takes what is new under a short lock (pointer copies), filters it for
//!   itself and encodes from an event built once per transaction ([`HubTx::event`]). Nothing a
//!   watcher does reads the store or holds the lock while it sends.
//! - **behind** (unsynced): their next transaction is older than the ring. They read pages of
//!   their namespace's transactions from the store on the node's read pool, off the async
//!   workers that drive Raft; watchers at the same position (a hundred opened from the first
//!   transaction) share each page: the first reads it, the others wait for it. Once past the
//!   ring's floor a watcher joins the head.
//!
//! A slow reader holds back only itself: its task waits on its own bounded channel while the
//! ring moves on; if the ring leaves it behind it reads pages like any other late watcher, so
//! no watcher makes the node keep more than the ring and the page cache hold.
//!
//! Sharing is safe because an applied transaction changes only by a redaction, which empties
//! the ring and the pages (what they held is read again, redacted, from the store): apply
//! hands a group over only after writing it, committed entries are never replaced, and a
//! snapshot install only moves the state forward. A gap in what apply handed over (a snapshot install, a group dropped
//! while the hub lagged) resets the ring at the applied index; watchers before it read pages.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use engram_core::planted::{self, PlantedBug};
use engram_core::reads::{self, LoggedTx};
use engram_proto::pb;
use engram_raft::committed::CommittedGroup;
use engram_raft::{NodeError, RaftNode, Waited};
use engram_types::{BranchName, Namespace, TxId};

use super::read_pool::ReadPool;

/// Transactions the ring keeps: a watcher further behind reads pages.
pub const RING_TXS: usize = 4096;
/// The most stored datom bytes the ring keeps.
pub const RING_BYTES: usize = 32 << 20;
/// Tx-log rows (of any namespace) one page scans.
pub const PAGE_TXS: usize = 1024;
/// The datom bytes after which a page stops (it ends after the transaction that reaches it).
pub const PAGE_BYTES: usize = 1 << 20;
/// Pages kept for other watchers at the same position. With [`PAGE_BYTES`], bounds what the
/// cache holds to about 64 MiB plus one transaction a page.
pub const PAGES_KEPT: usize = 64;

/// Watches one principal may hold open on a node (calls without a principal, in open mode,
/// count together). Each idle watch costs a task and its channel (a few KiB); the bound keeps
/// a client that opens watches in a loop from taking the node's memory, and is far above what
/// a team of agents holds (the fan-out bench opens 10,000 in one run).
pub const MAX_WATCHES_PER_PRINCIPAL: usize = 25_000;

/// Watches one client connection may hold open on a node. HTTP/2 sets no bound of its own (a
/// stream over the server's limit would wait, unseen, for another to close); this one is a
/// precise refusal instead. Above the 1,250 a connection carries when the fan-out bench
/// multiplexes 10,000 watches over 8 connections.
pub const MAX_WATCHES_PER_CONNECTION: usize = 10_000;

/// The bounds [`WatchHub::open_watch`] applies.
#[derive(Clone, Copy, Debug)]
pub struct WatchLimits {
    pub per_principal: usize,
    pub per_connection: usize,
}

impl Default for WatchLimits {
    fn default() -> Self {
        WatchLimits {
            per_principal: MAX_WATCHES_PER_PRINCIPAL,
            per_connection: MAX_WATCHES_PER_CONNECTION,
        }
    }
}

/// What `/metrics` reports of the node's watches (a process runs one node).
static STATS: WatchStats = WatchStats {
    open: AtomicU64::new(0),
    refused: AtomicU64::new(0),
    pages_read: AtomicU64::new(0),
    resets: AtomicU64::new(0),
    cut_off: AtomicU64::new(0),
};

struct WatchStats {
    open: AtomicU64,
    refused: AtomicU64,
    pages_read: AtomicU64,
    resets: AtomicU64,
    cut_off: AtomicU64,
}

/// Counts a watcher cut off for reading nothing while its buffer was full.
pub fn count_cut_off() {
    STATS.cut_off.fetch_add(1, Ordering::Relaxed);
}

/// The watch lines of the node's `/metrics`: the counters, and how far `hub`'s watches are
/// behind.
#[cfg(not(madsim))]
pub fn render_metrics(node_id: u64, hub: &WatchHub, out: &mut String) {
    let lag = hub.lag();
    let max_entries = AtomicU64::new(lag.max_entries);
    let behind_ring = AtomicU64::new(lag.behind_ring);
    crate::metrics::write_node_samples(
        out,
        node_id,
        &[
            (
                "engram_watches_open",
                "gauge",
                "Watches open on this node.",
                &STATS.open,
            ),
            (
                "engram_watches_refused_total",
                "counter",
                "Watches refused because their principal or their connection held the most open watches it may.",
                &STATS.refused,
            ),
            (
                "engram_watch_pages_read_total",
                "counter",
                "Pages of older transactions read from the store for watchers behind the shared ring (one read serves every watcher at the same position).",
                &STATS.pages_read,
            ),
            (
                "engram_watch_ring_resets_total",
                "counter",
                "Times the shared ring started again at the applied index (a snapshot install, or transactions applied while it lagged).",
                &STATS.resets,
            ),
            (
                "engram_watches_cut_off_total",
                "counter",
                "Watches ended because their reader took nothing for --watch-stall-cutoff-ms while its buffer was full (told where to reopen).",
                &STATS.cut_off,
            ),
            (
                "engram_watch_lag_entries",
                "gauge",
                "Log entries between the newest the watch hub holds and the position of the furthest-behind open watch (0: every watch is at the head).",
                &max_entries,
            ),
            (
                "engram_watches_behind_ring",
                "gauge",
                "Open watches older than the shared ring, reading pages of their namespace from the store.",
                &behind_ring,
            ),
        ],
    );
}

/// A committed transaction as the hub shares it.
pub struct HubTx {
    pub logged: Arc<LoggedTx>,
    event: OnceLock<pb::TxEvent>,
}

impl HubTx {
    fn new(logged: Arc<LoggedTx>) -> Arc<HubTx> {
        Arc::new(HubTx {
            logged,
            event: OnceLock::new(),
        })
    }

    pub fn tx(&self) -> TxId {
        self.logged.record.receipt.tx
    }

    /// The event with every datom of the transaction, built by the first watcher that needs
    /// it; each watcher filters its own copy.
    pub fn event(&self) -> &pb::TxEvent {
        self.event.get_or_init(|| {
            let record = &self.logged.record;
            pb::TxEvent {
                tx: record.receipt.tx.0,
                tx_time_ns: record.receipt.tx_time_ns,
                audit_index: record.receipt.audit_index,
                audit_hash: record.receipt.audit_hash.0.to_vec(),
                datoms: record.datoms.iter().map(Into::into).collect(),
            }
        })
    }
}

/// Where the ring stands, as watchers wait on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Every transaction with tx id at most this has been handed to the ring (or to the
    /// store, before the ring's floor).
    pub filled: u64,
    /// The node's Raft has stopped: nothing more will come.
    pub stopped: bool,
}

/// What [`WatchHub::serve`] found for one watcher.
pub enum Served {
    /// The transactions from the watcher's position on (any namespace; the watcher filters),
    /// oldest first, and where it goes on from.
    Head { txs: Vec<Arc<HubTx>>, next: TxId },
    /// The watcher is older than the ring: it reads pages until it reaches the ring.
    Behind,
}

/// A page of one namespace's transactions from `from`, shared by the watchers at `from`.
pub struct Page {
    ns: Namespace,
    branch: Option<BranchName>,
    from: TxId,
    read: tokio::sync::OnceCell<(Vec<Arc<HubTx>>, TxId)>,
}

impl Page {
    /// The page's transactions, and the tx id after the last row it scanned.
    pub fn read(&self) -> Option<&(Vec<Arc<HubTx>>, TxId)> {
        self.read.get()
    }
}

/// Every transaction with a tx id in `(floor, filled]` is in `txs`, oldest first; `bytes` is
/// their datoms' stored size.
#[derive(Default)]
struct Ring {
    floor: u64,
    filled: u64,
    txs: VecDeque<Arc<HubTx>>,
    bytes: usize,
}

impl Ring {
    fn reset(&mut self, at: u64) {
        self.txs.clear();
        self.bytes = 0;
        self.floor = at;
        self.filled = at;
    }

    fn push(&mut self, logged: Arc<LoggedTx>) {
        self.bytes += logged.datom_bytes;
        self.txs.push_back(HubTx::new(logged));
    }

    fn trim(&mut self) {
        while self.txs.len() > RING_TXS || self.bytes > RING_BYTES {
            let Some(old) = self.txs.pop_front() else { break };
            self.bytes -= old.logged.datom_bytes;
            self.floor = old.tx().0;
        }
    }
}

/// A node's watch hub (see the module docs).
pub struct WatchHub {
    ring: Mutex<Ring>,
    /// [`Progress::filled`] and [`Progress::stopped`], moved under the ring's lock.
    filled: AtomicU64,
    stopped: std::sync::atomic::AtomicBool,
    /// Wakes the watchers waiting for the ring to move. A `Notify`, not a watch channel: a
    /// watch channel spreads its waiters over shards picked at random, which wakes them in an
    /// order the simulation cannot replay.
    moved: tokio::sync::Notify,
    pages: Mutex<VecDeque<Arc<Page>>>,
    reads: Arc<ReadPool>,
    /// The open watches: taken when a watch opens or closes and by a scrape, never while a
    /// watch runs.
    open: Mutex<OpenWatches>,
}

/// What the hub knows of its open watches, under one lock.
#[derive(Default)]
struct OpenWatches {
    /// Open watches by principal (`""`: none) and by client connection.
    counts: HashMap<Holder, usize>,
    /// The position of every open watch (its next transaction), by slot number: what
    /// [`WatchHub::lag`] reports. Positions are atomics the watch moves itself, so a watch never
    /// takes the lock after it opens, and a scrape reads them without stopping any.
    positions: HashMap<u64, Arc<AtomicU64>>,
    /// Slots handed out so far: the next slot's number.
    opened: u64,
}

/// How far this node's open watches are behind what was handed to the hub.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(madsim, allow(dead_code))] // reported by `/metrics`, which the simulation does not build
pub struct Lag {
    /// Log entries between the newest one the hub holds and the furthest-behind open watch's
    /// position (0: every watch is at the head, or none is open).
    pub max_entries: u64,
    /// Open watches older than the ring, reading pages from the store.
    pub behind_ring: u64,
}

/// What a watch is counted against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Holder {
    Principal(String),
    Connection(std::net::SocketAddr),
}

/// One open watch, counted against its principal and its connection until dropped.
pub struct WatchSlot {
    hub: Arc<WatchHub>,
    holders: Vec<Holder>,
    number: u64,
    position: Arc<AtomicU64>,
}

impl WatchSlot {
    /// The watch goes on from `next`: every transaction before it was sent or not wanted.
    pub fn moved_to(&self, next: TxId) {
        self.position.store(next.0, Ordering::Relaxed);
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut open = self.hub.open();
        open.positions.remove(&self.number);
        for holder in &self.holders {
            if let Some(n) = open.counts.get_mut(holder) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    open.counts.remove(holder);
                }
            }
        }
        STATS.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl WatchHub {
    /// A hub whose ring starts empty at `applied`: watchers before it read pages.
    pub fn new(applied: u64, reads: Arc<ReadPool>) -> WatchHub {
        WatchHub {
            ring: Mutex::new(Ring {
                floor: applied,
                filled: applied,
                ..Ring::default()
            }),
            filled: AtomicU64::new(applied),
            stopped: std::sync::atomic::AtomicBool::new(false),
            moved: tokio::sync::Notify::new(),
            pages: Mutex::new(VecDeque::new()),
            reads,
            open: Mutex::default(),
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, OpenWatches> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How far the open watches are behind, now.
    #[cfg_attr(madsim, allow(dead_code))] // reported by `/metrics`, which the simulation does not build
    pub fn lag(&self) -> Lag {
        let (floor, filled) = {
            let ring = self.ring();
            (ring.floor, ring.filled)
        };
        let mut lag = Lag::default();
        for position in self.open().positions.values() {
            let next = position.load(Ordering::Relaxed);
            // Every entry from `next` through `filled` is still to be looked at.
            lag.max_entries = lag.max_entries.max((filled + 1).saturating_sub(next));
            if next <= floor {
                lag.behind_ring += 1;
            }
        }
        lag
    }

    /// Counts a new watch of `principal` (`""`: none) on `connection` (the client's address;
    /// `None` where the transport has none), or refuses it with `RESOURCE_EXHAUSTED` when
    /// either already holds its limit.
    /// `from`: where the watch starts.
    pub fn open_watch(
        self: &Arc<Self>,
        principal: &str,
        connection: Option<std::net::SocketAddr>,
        limits: WatchLimits,
        from: TxId,
    ) -> Result<WatchSlot, crate::error::ApiError> {
        let mut open = self.open();
        let mut holders = vec![(Holder::Principal(principal.to_string()), limits.per_principal)];
        if let Some(addr) = connection {
            holders.push((Holder::Connection(addr), limits.per_connection));
        }
        for (holder, limit) in &holders {
            let n = open.counts.get(holder).copied().unwrap_or(0);
            if n >= *limit {
                let who = match holder {
                    Holder::Principal(p) if p.is_empty() => "callers without a principal".to_string(),
                    Holder::Principal(p) => format!("principal {p}"),
                    Holder::Connection(addr) => format!("the connection from {addr}"),
                };
                STATS.refused.fetch_add(1, Ordering::Relaxed);
                return Err(crate::error::ApiError::Exhausted(format!(
                    "{who} holds {n} open watches on this node, the most it may; close one, \
                     watch several entities with one filter, or open another connection"
                )));
            }
        }
        for (holder, _) in &holders {
            *open.counts.entry(holder.clone()).or_default() += 1;
        }
        let number = open.opened;
        open.opened += 1;
        let position = Arc::new(AtomicU64::new(from.0));
        open.positions.insert(number, position.clone());
        drop(open);
        STATS.open.fetch_add(1, Ordering::Relaxed);
        Ok(WatchSlot {
            hub: self.clone(),
            holders: holders.into_iter().map(|(h, _)| h).collect(),
            number,
            position,
        })
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        // Nothing panics while holding it; a poisoned ring still holds whole transactions.
        self.ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the ring stands.
    pub fn progress(&self) -> Progress {
        Progress {
            filled: self.filled.load(Ordering::Acquire),
            stopped: self.stopped.load(Ordering::Acquire),
        }
    }

    /// Waits until the ring holds everything through `through` or the node stopped, at most
    /// `timeout`; returns where the ring then stands.
    pub async fn wait_for(&self, through: u64, timeout: Duration) -> Progress {
        let moved = self.moved.notified();
        tokio::pin!(moved);
        // Registered before the check, so a move between the check and the wait still wakes.
        moved.as_mut().enable();
        let now = self.progress();
        if now.filled >= through || now.stopped {
            return now;
        }
        let _ = tokio::time::timeout(timeout, moved).await;
        self.progress()
    }

    /// Adds the groups apply handed over (oldest first), given the applied index read before
    /// they were taken. A group that does not follow what the ring holds, or an applied index
    /// beyond the last group, is a gap: the ring starts again there.
    pub fn absorb(&self, applied: u64, groups: Vec<CommittedGroup>) {
        let moved = {
            let mut ring = self.ring();
            for group in groups {
                if group.through <= ring.filled {
                    continue;
                }
                if group.from > ring.filled + 1 && !planted::active(PlantedBug::WatchGapNotRead) {
                    STATS.resets.fetch_add(1, Ordering::Relaxed);
                    ring.reset(group.from - 1);
                }
                let after = ring.filled;
                for logged in group.txs {
                    let tx = logged.record.receipt.tx.0;
                    if tx <= after {
                        continue;
                    }
                    if is_redaction(&logged) {
                        // Transactions before a redaction may hold the values it took: they
                        // are read again from the store, which holds them redacted.
                        STATS.resets.fetch_add(1, Ordering::Relaxed);
                        ring.reset(tx - 1);
                        self.pages
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .clear();
                    }
                    ring.push(logged);
                }
                ring.filled = group.through;
            }
            if applied > ring.filled {
                if planted::active(PlantedBug::WatchGapNotRead) {
                    ring.filled = applied;
                } else {
                    // Applied without being handed over: a snapshot install, or groups
                    // dropped while this hub lagged. The store holds them.
                    STATS.resets.fetch_add(1, Ordering::Relaxed);
                    ring.reset(applied);
                }
            }
            ring.trim();
            let moved = ring.filled != self.filled.load(Ordering::Acquire);
            self.filled.store(ring.filled, Ordering::Release);
            moved
        };
        if moved {
            self.moved.notify_waiters();
        }
    }

    /// Nothing more will come: wakes every watcher so it can say so.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.moved.notify_waiters();
    }

    /// At most `limit` transactions from `next` on, from the ring.
    pub fn serve(&self, next: TxId, limit: usize) -> Served {
        let ring = self.ring();
        if next.0 <= ring.floor {
            return Served::Behind;
        }
        let start = ring.txs.partition_point(|t| t.tx() < next);
        let txs: Vec<Arc<HubTx>> = ring.txs.iter().skip(start).take(limit).cloned().collect();
        let next = match txs.last() {
            // Cut short by the limit: go on after the last one served.
            Some(last) if txs.len() == limit => TxId(last.tx().0 + 1),
            _ => TxId(next.0.max(ring.filled + 1)),
        };
        Served::Head { txs, next }
    }

    /// The page of `ns`'s transactions on `branch` from `from`, read once for every watcher
    /// at that position, on the read pool.
    pub async fn page(
        &self,
        node: &RaftNode,
        ns: &Namespace,
        branch: Option<&BranchName>,
        from: TxId,
    ) -> Result<Result<Arc<Page>, engram_core::CoreError>, NodeError> {
        let page = {
            let mut pages = self
                .pages
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match pages
                .iter()
                .find(|p| p.from == from && &p.ns == ns && p.branch.as_ref() == branch)
            {
                Some(page) => page.clone(),
                None => {
                    let page = Arc::new(Page {
                        ns: ns.clone(),
                        branch: branch.cloned(),
                        from,
                        read: tokio::sync::OnceCell::new(),
                    });
                    pages.push_back(page.clone());
                    while pages.len() > PAGES_KEPT {
                        pages.pop_front();
                    }
                    page
                }
            }
        };
        let read = page
            .read
            .get_or_try_init(|| async {
                let (ns, branch) = (page.ns.clone(), page.branch.clone());
                // Every transaction through the ring's floor is written (the floor is at most
                // the applied index), so a scan that finds no row from `from` on shows there
                // is none through this floor, read before the scan.
                let floor = self.ring().floor;
                STATS.pages_read.fetch_add(1, Ordering::Relaxed);
                let read = self
                    .reads
                    .read(node, move |store| {
                        reads::transactions_page(store, &ns, branch.as_ref(), from, PAGE_TXS, PAGE_BYTES)
                    })
                    .await?;
                // Not kept: a failed read (a damaged row) is read again by the next watcher.
                let (txs, after) = read.map_err(PageError::Core)?;
                let after = if txs.is_empty() && after <= from {
                    TxId(floor + 1).max(from)
                } else {
                    after
                };
                Ok::<_, PageError>((txs.into_iter().map(|t| HubTx::new(Arc::new(t))).collect(), after))
            })
            .await;
        match read {
            Ok(_) => Ok(Ok(page)),
            Err(PageError::Core(e)) => Ok(Err(e)),
            Err(PageError::Node(e)) => Err(e),
        }
    }
}

/// Whether a committed transaction is a redaction's record (`engram_core::redact`).
fn is_redaction(logged: &LoggedTx) -> bool {
    logged.namespace.as_str() == engram_access::SYSTEM_NAMESPACE
        && logged
            .record
            .datoms
            .iter()
            .any(|d| engram_core::redact::RedactedRef::is_listing(d.attribute.as_str()))
}

/// Why a page could not be read.
enum PageError {
    Node(NodeError),
    Core(engram_core::CoreError),
}

impl From<NodeError> for PageError {
    fn from(e: NodeError) -> Self {
        PageError::Node(e)
    }
}

/// How long the hub waits for the applied index before it looks again (it also wakes when the
/// node stops).
const FOLLOW_WAIT: Duration = Duration::from_secs(1);

/// Moves `hub`'s ring along with what `node` applies, until the node's Raft stops or `stopped`
/// says the server did.
pub async fn follow(hub: Arc<WatchHub>, node: RaftNode, mut stopped: tokio::sync::watch::Receiver<bool>) {
    loop {
        let want = hub.progress().filled + 1;
        tokio::select! {
            // Polled in order, not at random: a random pick draws from a generator the
            // simulation does not seed, and would make runs differ.
            biased;
            waited = node.wait_applied(want, FOLLOW_WAIT) => {
                if waited == Waited::Stopped {
                    hub.stop();
                    return;
                }
            }
            changed = stopped.changed() => {
                if changed.is_err() || *stopped.borrow() {
                    hub.stop();
                    return;
                }
            }
        }
        // Read before taking: every group through `applied` was handed over before the index
        // was published, so it is in what is taken (or was dropped, which `absorb` sees).
        let applied = node.applied_index();
        hub.absorb(applied, node.take_watched());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_core::reads::TxRecord;
    use engram_types::{Hash, TxReceipt};

    fn logged(tx: u64) -> Arc<LoggedTx> {
        Arc::new(LoggedTx {
            namespace: Namespace::new("t/ns").unwrap(),
            branch: None,
            record: TxRecord {
                receipt: TxReceipt {
                    tx: TxId(tx),
                    tx_time_ns: 0,
                    datom_hashes: Vec::new(),
                    audit_index: tx,
                    audit_hash: Hash::of(b"test"),
                    temp_ids: Default::default(),
                },
                datoms: Vec::new(),
            },
            datom_bytes: 10,
        })
    }

    /// A group over log indexes `from..=through` holding transactions `txs`.
    fn group(from: u64, through: u64, txs: &[u64]) -> CommittedGroup {
        CommittedGroup {
            from,
            through,
            txs: txs.iter().map(|&t| logged(t)).collect(),
        }
    }

    fn hub(applied: u64) -> Arc<WatchHub> {
        Arc::new(WatchHub::new(applied, Arc::new(ReadPool::new(1))))
    }

    fn head(hub: &WatchHub, next: u64, limit: usize) -> (Vec<u64>, u64) {
        match hub.serve(TxId(next), limit) {
            Served::Head { txs, next } => (txs.iter().map(|t| t.tx().0).collect(), next.0),
            Served::Behind => panic!("{next} is behind the ring"),
        }
    }

    #[test]
    fn groups_in_order_are_served_from_the_ring_once() {
        let hub = hub(5);
        assert!(
            matches!(hub.serve(TxId(5), 10), Served::Behind),
            "before the ring: read pages"
        );
        // Index 8 is an entry without a transaction (a blank, a membership change).
        hub.absorb(7, vec![group(6, 7, &[6, 7])]);
        hub.absorb(9, vec![group(8, 9, &[9])]);
        assert_eq!(hub.progress().filled, 9);
        assert_eq!(head(&hub, 6, 10), (vec![6, 7, 9], 10));
        assert_eq!(
            head(&hub, 7, 1),
            (vec![7], 8),
            "a limit cuts the page after the last served"
        );
        assert_eq!(head(&hub, 10, 10), (vec![], 10), "at the head: nothing new yet");
        // A group handed over again (already taken into the ring) changes nothing.
        hub.absorb(9, vec![group(6, 7, &[6, 7])]);
        assert_eq!(head(&hub, 6, 10), (vec![6, 7, 9], 10));
    }

    #[test]
    fn a_gap_starts_the_ring_again_and_earlier_watchers_read_pages() {
        let hub = hub(0);
        hub.absorb(3, vec![group(1, 3, &[1, 2, 3])]);
        // Indexes 4..=9 were installed by a snapshot: no group for them.
        hub.absorb(10, vec![group(10, 10, &[10])]);
        assert!(matches!(hub.serve(TxId(4), 10), Served::Behind));
        assert!(matches!(hub.serve(TxId(9), 10), Served::Behind));
        assert_eq!(head(&hub, 10, 10), (vec![10], 11));
        // Applied past the last group handed over (groups dropped while the hub lagged).
        hub.absorb(20, vec![]);
        assert!(matches!(hub.serve(TxId(11), 10), Served::Behind));
        assert_eq!(head(&hub, 21, 10), (vec![], 21));
        assert_eq!(hub.progress().filled, 20);
    }

    #[test]
    fn the_ring_keeps_the_newest_transactions_only() {
        let hub = hub(0);
        let n = RING_TXS as u64 + 100;
        hub.absorb(n, vec![group(1, n, &(1..=n).collect::<Vec<_>>())]);
        assert!(matches!(hub.serve(TxId(100), 10), Served::Behind));
        let (txs, _) = head(&hub, 101, usize::MAX);
        assert_eq!(txs.len(), RING_TXS);
        assert_eq!(txs.first(), Some(&101));
    }

    #[test]
    fn the_lag_is_the_furthest_behind_open_watch() {
        let hub = hub(0);
        let limits = WatchLimits::default();
        assert_eq!(hub.lag(), Lag::default(), "no watch: no lag");
        let n = RING_TXS as u64 + 100;
        hub.absorb(n, vec![group(1, n, &(1..=n).collect::<Vec<_>>())]);
        let at_head = hub.open_watch("a", None, limits, TxId(n + 1)).unwrap();
        assert_eq!(hub.lag(), Lag::default(), "a watch at the head");
        let late = hub.open_watch("b", None, limits, TxId(50)).unwrap();
        let in_ring = hub.open_watch("c", None, limits, TxId(n - 9)).unwrap();
        assert_eq!(
            hub.lag(),
            Lag {
                max_entries: n - 49,
                behind_ring: 1
            },
            "entries 50..={n} are still to be looked at by the late watch, which reads pages"
        );
        late.moved_to(TxId(n + 1));
        assert_eq!(
            hub.lag(),
            Lag {
                max_entries: 10,
                behind_ring: 0
            }
        );
        drop(in_ring);
        assert_eq!(hub.lag(), Lag::default(), "a closed watch is not counted");
        hub.absorb(n + 3, vec![group(n + 1, n + 3, &[n + 1, n + 3])]);
        assert_eq!(hub.lag().max_entries, 3, "the ring moved on, the watches did not");
        drop((at_head, late));
        assert_eq!(hub.lag(), Lag::default());
    }

    #[test]
    fn a_principal_holds_a_bounded_number_of_watches() {
        let hub = hub(0);
        let limits = WatchLimits {
            per_principal: 2,
            per_connection: 100,
        };
        let a = hub.open_watch("agent-a", None, limits, TxId(1)).unwrap();
        let _b = hub.open_watch("agent-a", None, limits, TxId(1)).unwrap();
        let refused = hub.open_watch("agent-a", None, limits, TxId(1)).err().unwrap();
        let status = tonic::Status::from(refused);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("principal agent-a holds 2"),
            "{}",
            status.message()
        );
        // Another principal has its own count; a closed watch frees its place.
        assert!(hub.open_watch("agent-b", None, limits, TxId(1)).is_ok());
        drop(a);
        assert!(hub.open_watch("agent-a", None, limits, TxId(1)).is_ok());
    }

    #[test]
    fn a_connection_holds_a_bounded_number_of_watches() {
        let hub = hub(0);
        let limits = WatchLimits {
            per_principal: 100,
            per_connection: 2,
        };
        let one: std::net::SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let other: std::net::SocketAddr = "10.0.0.1:5001".parse().unwrap();
        let a = hub.open_watch("agent-a", Some(one), limits, TxId(1)).unwrap();
        let _b = hub.open_watch("agent-b", Some(one), limits, TxId(1)).unwrap();
        let refused = hub
            .open_watch("agent-c", Some(one), limits, TxId(1))
            .err()
            .unwrap();
        let status = tonic::Status::from(refused);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("connection from 10.0.0.1:5000"),
            "{}",
            status.message()
        );
        // The refusal counted nothing against agent-c; another connection has its own count.
        assert!(hub.open_watch("agent-c", Some(other), limits, TxId(1)).is_ok());
        drop(a);
        assert!(hub.open_watch("agent-c", Some(one), limits, TxId(1)).is_ok());
        // Every holder's count went back with its watches.
        drop(_b);
        assert_eq!(hub.open().counts.get(&Holder::Principal("agent-b".into())), None);
    }

    #[tokio::test]
    async fn a_move_or_a_stop_wakes_the_watchers() {
        let hub = hub(0);
        let waiter = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.wait_for(2, Duration::from_secs(60)).await })
        };
        tokio::task::yield_now().await;
        hub.absorb(2, vec![group(1, 2, &[1, 2])]);
        assert_eq!(waiter.await.unwrap().filled, 2);
        // Already there: no wait at all.
        assert_eq!(hub.wait_for(1, Duration::from_secs(60)).await.filled, 2);
        let waiter = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.wait_for(3, Duration::from_secs(60)).await })
        };
        tokio::task::yield_now().await;
        hub.stop();
        assert!(waiter.await.unwrap().stopped);
    }
}
