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
//! Derived state (see `engram_recall`): it lives in memory only, starts empty when the node
//! starts, and is never part of the chain, a snapshot or the replica digest. A snapshot install
//! needs no rebuild: the transactions it brings up to the index's position are the ones the
//! index already read (applied state is replicated exactly), and the index goes on from there.

use engram_core::reads::{self, LoggedTx};
use engram_core::schema;
use engram_raft::RaftNode;
use std::sync::Arc;
use std::time::Duration;

use engram_recall::{Feeder, Hit, Indexing, Query, RecallIndex, Scope};
use engram_types::{Attribute, Datom, Namespace, TxId};
use tokio::sync::Mutex;

use crate::error::ApiError;

/// Datom bytes read from the store per step of a catch-up, so a first search over a large
/// store holds no more than this of the log in memory at once.
const CATCH_UP_BYTES: usize = 8 << 20;

#[derive(Default)]
pub struct SearchIndex {
    state: Mutex<Fed>,
}

#[derive(Default)]
struct Fed {
    index: RecallIndex,
    feeder: Feeder,
    /// The next transaction to read from the log.
    next: TxId,
}

impl SearchIndex {
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
        Self::feed(&mut fed, node, through).await?;
        fed.index
            .recall_where(scope, query, shown)
            .map_err(|e| ApiError::Invalid(e.to_string()))
    }

    /// Feeds what `node` has applied through `through`.
    pub async fn catch_up(&self, node: &RaftNode, through: u64) -> Result<(), ApiError> {
        let mut fed = self.state.lock().await;
        Self::feed(&mut fed, node, through).await
    }

    /// Feeds every transaction applied through `through` (and any later ones apply already
    /// handed over): first what apply handed over in memory, then, for any gap, the store.
    async fn feed(fed: &mut Fed, node: &RaftNode, through: u64) -> Result<(), ApiError> {
        if fed.next == TxId(0)
            && engram_core::planted::active(engram_core::planted::PlantedBug::SearchIndexNotRebuilt)
        {
            fed.next = TxId(node.startup_log_index() + 1);
        }
        // Consecutive handed-over groups are fed together, with one read of the schema.
        let mut run: Vec<LoggedTx> = Vec::new();
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
                Self::feed_from_store(fed, node, group.from - 1).await?;
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
        Self::feed_from_store(fed, node, through).await
    }

    /// Feeds what the store holds from the index's position through `through`, a bounded
    /// step at a time.
    async fn feed_from_store(fed: &mut Fed, node: &RaftNode, through: u64) -> Result<(), ApiError> {
        while fed.next.0 <= through {
            let from = fed.next;
            let (txs, next) = super::read_state(node, |store| {
                reads::tx_log_range(store, from, TxId(through), CATCH_UP_BYTES)
            })?;
            Self::feed_txs(fed, node, txs, next.max(from))?;
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
    fn feed_txs(fed: &mut Fed, node: &RaftNode, txs: Vec<LoggedTx>, next: TxId) -> Result<(), ApiError> {
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

/// How often the feeder looks for newly applied transactions. A poll, not a wait on Raft's
/// metrics: a wait draws on a generator the simulation does not seed, and a poll of an
/// atomic is cheap. It bounds how far behind apply the index runs between searches (a search
/// feeds the rest itself).
const FOLLOW_EVERY: Duration = Duration::from_millis(25);

/// Keeps the index of `shared`'s node current: feeds each batch of transactions soon after it
/// is applied, so searches rarely wait for a feed and the first search after a start does not
/// read the whole log. Ends when the node's Raft core stops or `stopped` turns true.
pub async fn keep_current(shared: Arc<super::Shared>, mut stopped: tokio::sync::watch::Receiver<bool>) {
    let mut fed_through = 0;
    loop {
        let applied = shared.applied_index();
        if applied > fed_through {
            match shared.search.catch_up(&shared.node, applied).await {
                Ok(()) => fed_through = applied,
                Err(e) => tracing::warn!(error = %e, "search index: feed failed; it is rebuilt from the log"),
            }
        }
        if shared.node.has_stopped() {
            return;
        }
        tokio::select! {
            // Polled in order, not at random: a random pick draws from a generator the
            // simulation does not seed, and would make runs differ.
            biased;
            _ = stopped.changed() => return,
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
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
