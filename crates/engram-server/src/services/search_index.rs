//! This node's recall index: fed the transactions it has applied, in order, by a background
//! task that follows the applied index ([`keep_current`]), and by a search that finds it
//! behind (so a linearizable search sees every write acknowledged before it).
//!
//! Derived state (see `engram_recall`): it lives in memory only, starts empty when the node
//! starts, and is never part of the chain, a snapshot or the replica digest. A snapshot install
//! needs no rebuild: the transactions it brings up to the index's position are the ones the
//! index already read (applied state is replicated exactly), and the index goes on from there.

use std::collections::HashMap;

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

    async fn feed(fed: &mut Fed, node: &RaftNode, through: u64) -> Result<(), ApiError> {
        if fed.next == TxId(0)
            && engram_core::planted::active(engram_core::planted::PlantedBug::SearchIndexNotRebuilt)
        {
            fed.next = TxId(node.startup_log_index() + 1);
        }
        while fed.next.0 <= through {
            let from = fed.next;
            let (txs, next) = super::read_state(node, |store| {
                let (txs, next) = reads::tx_log_range(store, from, TxId(through), CATCH_UP_BYTES)?;
                let mut out = Vec::with_capacity(txs.len());
                for logged in txs {
                    let defs = indexing(store, &logged)?;
                    out.push((logged, defs));
                }
                Ok::<_, engram_core::CoreError>((out, next))
            })?;
            let Fed { index, feeder, .. } = &mut *fed;
            for (logged, defs) in &txs {
                let receipt = &logged.record.receipt;
                let schema = |s: &Scope, a: &Attribute| {
                    defs.get(&(s.namespace.clone(), a.clone()))
                        .copied()
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
            if next <= from {
                break;
            }
            fed.next = next;
            // A first catch-up over a large log is long: let other tasks run between steps.
            tokio::task::yield_now().await;
        }
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

/// How each attribute `logged` writes was indexed as its transaction found it.
fn indexing(
    store: &dyn engram_storage::ReadView,
    logged: &LoggedTx,
) -> Result<HashMap<(Namespace, Attribute), Indexing>, engram_core::CoreError> {
    let mut out = HashMap::new();
    for Datom {
        namespace,
        attribute,
        tx,
        ..
    } in &logged.record.datoms
    {
        if let std::collections::hash_map::Entry::Vacant(slot) =
            out.entry((namespace.clone(), attribute.clone()))
        {
            let def = schema::def_at(store, namespace, attribute, Some(*tx))?;
            slot.insert(def.map_or_else(Indexing::default, |d| Indexing {
                cardinality: d.cardinality,
                searchable: d.searchable,
            }));
        }
    }
    Ok(out)
}
