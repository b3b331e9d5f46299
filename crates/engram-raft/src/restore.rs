//! Restoring a node from a backup (`engram restore`): a new store that holds the backup's state
//! and is a one-voter cluster of the restoring node, which other new nodes then join.
//!
//! The backup is the replicated state at log index L (its applied position), without any
//! node's Raft records. A restored store gets new ones, as if it had installed the backup as
//! a snapshot and purged its log through L:
//! - the backup's state, installed through the same recorded install as a snapshot from a
//!   peer (checked first: structure, digest, every audit entry), and kept as the node's current
//!   snapshot, which is what a joining node is sent;
//! - its membership: this node alone, a voter, at the address given (the backed-up cluster's
//!   members are not started from a backup: they may still exist);
//! - its log purged through L, and a vote one term past L's, so its first election is in a
//!   term no log entry of the old cluster has.
//!
//! The chain continues: the node signs with the key given, which must be a key the backup's
//! chain trusts at its head, held by the node of the same id (a backed-up member's `node.key`).
//! A new key could not be admitted without a trusted key to authorise it; nodes that join later
//! get theirs admitted by this node, as any joining node does.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;

use engram_audit::PublicKey;
use engram_core::backup::{BackupError, BackupFile, Verified};
use engram_storage::{Space, Store};
use thiserror::Error;

use crate::codec::decode;
use crate::log_store::restored_rows;
use crate::snapshots::Snapshots;
use crate::state_machine::{APPLIED, install_recorded_snapshot};
use crate::{LogId, Membership, NodeInfo, SnapshotMeta, Vote};

/// Why a store was not restored.
#[derive(Debug, Error)]
pub enum RestoreError {
    #[error(transparent)]
    Backup(#[from] BackupError),
    #[error("the store to restore into is not empty (it holds {0}); a restore writes a new store")]
    NotEmpty(&'static str),
    #[error("the backup's state has applied no log entry: it is not a node's state")]
    NothingApplied,
    #[error(
        "this node's key {key} is not one the backup's chain trusts at its head; restore with the node key of one of the backed-up cluster's members (its node.key): the keys it trusts are {trusted}"
    )]
    UntrustedKey { key: String, trusted: String },
    #[error(
        "the key given belongs to node {chain_node} in the backup's chain, not node {node_id}: restore it as node {chain_node}"
    )]
    WrongNode { node_id: u64, chain_node: u64 },
    #[error("writing the restored store: {0}")]
    Io(#[from] io::Error),
}

/// What a restore wrote.
#[derive(Clone, Debug)]
pub struct Restored {
    pub node_id: u64,
    pub verified: Verified,
    /// The log index the state applied: the node's log starts after it.
    pub applied_index: u64,
}

/// Writes `backup` into the empty `store` as the node that signs with `info.public_key`
/// (see the module docs), reachable at `info.addr`: node `node_id` if given (it must be the
/// key's node in the chain), else the key's node.
pub fn restore(
    store: Arc<dyn Store>,
    backup: &BackupFile,
    node_id: Option<u64>,
    info: NodeInfo,
) -> Result<Restored, RestoreError> {
    let io = |e: engram_storage::StorageError| RestoreError::Io(io::Error::other(e));
    if !store.scan(Space::State, &[], None, 1).map_err(io)?.is_empty() {
        return Err(RestoreError::NotEmpty("state rows"));
    }
    if !store.scan(Space::Log, &[], None, 1).map_err(io)?.is_empty() {
        return Err(RestoreError::NotEmpty("Raft log entries"));
    }
    let mut applied_row = None;
    let verified = backup.verify(&mut |k, v| {
        if k == APPLIED {
            applied_row = Some(v.to_vec());
        }
    })?;
    let applied: Option<LogId> = match applied_row {
        Some(row) => decode("applied log id", &row)?,
        None => None,
    };
    let applied = applied.ok_or(RestoreError::NothingApplied)?;
    let key = PublicKey(info.public_key);
    let Some(&(chain_node, _)) = verified.active_keys.iter().find(|(_, k)| *k == key) else {
        return Err(RestoreError::UntrustedKey {
            key: key.key_id().to_string(),
            trusted: verified
                .active_keys
                .iter()
                .map(|(node, k)| format!("{} (node {node})", k.key_id()))
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let node_id = node_id.unwrap_or(chain_node);
    if node_id != chain_node {
        return Err(RestoreError::WrongNode { node_id, chain_node });
    }

    engram_core::store_format::open(&*store).map_err(|e| RestoreError::Io(io::Error::other(e)))?;
    let (snapshots, _) = Snapshots::open(store.clone())?;
    let mut receiving = snapshots.receive(backup.snapshot_bytes)?;
    backup.for_each_snapshot_piece(&mut |piece| Ok(receiving.push(piece)?))?;
    let data = receiving.finish(&backup.snapshot_hash)?;
    let members =
        openraft::Membership::new(vec![BTreeSet::from([node_id])], BTreeMap::from([(node_id, info)]))
            .map_err(|e| RestoreError::Io(io::Error::other(e)))?;
    let meta = SnapshotMeta {
        last_log_id: Some(applied),
        last_membership: Membership::new(Some(applied), members),
    };
    data.mark_recorded();
    snapshots.begin_install(&meta, &data.data)?;
    let vote = Vote::new(applied.committed_leader_id().term + 1, node_id);
    install_recorded_snapshot(&*store, &snapshots, &meta, &data, restored_rows(&applied, &vote)?)?;
    Ok(Restored {
        node_id,
        verified,
        applied_index: applied.index(),
    })
}
