//! Branches: named, isolated lines of writes forked from main at a transaction.
//!
//! A branch's datoms carry its name (datom format version 2) and live only in the branch's
//! own table (`b`), never in main's indexes; a read on the branch merges main as of the fork
//! point with them. Creating, merging and abandoning are transactions on main, recorded as
//! `:db.branch/*` datoms on one entity per branch, so they are in the audit chain like any
//! write. A merge replays the branch's datoms onto main as ONE transaction after re-checking
//! them against main as it is then (see `Engine::apply_tx`); a branch, once merged or
//! abandoned, takes no more writes, and its history stays readable.

use engram_storage::{ReadView, Space, prefix_end};
use engram_types::{BranchName, Datom, EntityId, Namespace, Precondition, TxId};
use serde::{Deserialize, Serialize};

use crate::rows::{decode_row, hex};
use crate::{CoreError, keys};

/// Where a branch is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BranchState {
    Open,
    Merged { tx: TxId },
    Abandoned { tx: TxId },
}

impl BranchState {
    pub fn name(self) -> &'static str {
        match self {
            BranchState::Open => "open",
            BranchState::Merged { .. } => "merged",
            BranchState::Abandoned { .. } => "abandoned",
        }
    }
}

/// The `B` row of a branch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BranchRow {
    pub name: BranchName,
    /// The entity on main carrying the branch's `:db.branch/*` datoms.
    pub entity: EntityId,
    /// Reads on the branch see main as of this transaction.
    pub fork: TxId,
    pub created: TxId,
    pub state: BranchState,
    /// How many transactions were written on the branch.
    pub writes: u64,
    /// Every precondition the branch's transactions carried; a merge re-checks them on main.
    pub preconditions: Vec<Precondition>,
}

pub fn row(store: &dyn ReadView, ns: &Namespace, name: &BranchName) -> Result<Option<BranchRow>, CoreError> {
    match store.get(Space::State, &keys::branch(ns, name))? {
        Some(bytes) => Ok(Some(decode_row(&format!("branch row {name}"), &bytes)?)),
        None => Ok(None),
    }
}

/// Every branch of a namespace, by name.
pub fn list(store: &dyn ReadView, ns: &Namespace) -> Result<Vec<BranchRow>, CoreError> {
    let prefix = keys::branches_prefix(ns);
    store
        .scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), usize::MAX)?
        .into_iter()
        .map(|(_, bytes)| decode_row("branch row", &bytes))
        .collect()
}

/// Every datom written on the branch, in (tx, seq) order.
pub fn datoms(store: &dyn ReadView, ns: &Namespace, name: &BranchName) -> Result<Vec<Datom>, CoreError> {
    let prefix = keys::branch_eavt_prefix(ns, name);
    let mut out = Vec::new();
    for (key, bytes) in store.scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), usize::MAX)? {
        let datom = Datom::decode(&bytes)
            .map_err(|e| CoreError::corrupt(format!("branch datom row {}", hex(&key)), e))?;
        let (tx, seq) = keys::trailing_tx_seq(&key)
            .ok_or_else(|| CoreError::corrupt("branch datom row", "shorter than tx and seq"))?;
        out.push(((tx, seq), datom));
    }
    out.sort_by_key(|(order, _)| *order);
    Ok(out.into_iter().map(|(_, d)| d).collect())
}
