//! A node's data directory built from a backup: what `engram restore` writes, and what
//! `engram serve --restore-from` does on its first start (a Kubernetes pod's volume, whose
//! data directory is its mount point).
//!
//! The store is built in `DIR/.restoring` and moved into place only once whole: the key first
//! (`DIR/node.key`), the store last (`DIR/db`), so a restore cut short leaves no store that
//! looks whole, and DIR itself is never moved or replaced (a mount point cannot be).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_audit::NodeKey;
use engram_core::backup::BackupFile;
use engram_proto::pb;
use engram_raft::NodeInfo;
use engram_raft::restore::{RestoreError, Restored};
use engram_storage::Store;
use thiserror::Error;
use tracing::info;

use crate::{RestoreFrom, ServerConfig, ServerError};

/// Where a restore builds the store inside its data directory.
const STAGING: &str = ".restoring";

/// Why a data directory was not built from a backup.
#[derive(Debug, Error)]
pub enum RestoreDirError {
    #[error(
        "{dir} is not empty (it holds {name}): a restore writes a new store (restore into a new or empty directory)"
    )]
    NotEmpty { dir: PathBuf, name: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the store in {dir}: {why}")]
    Store { dir: PathBuf, why: String },
    #[error(transparent)]
    Restore(#[from] RestoreError),
}

/// Refuses a data directory that holds anything a restore would not write over: it may hold
/// nothing but `lost+found` (a fresh volume's; kept), a staging directory a restore cut short
/// left (removed), and the `node.key` such a restore moved in before its store, if it is
/// `key`.
pub fn check_restorable(dir: &Path, key: &NodeKey) -> Result<(), RestoreDirError> {
    let io = |source| RestoreDirError::Io {
        what: "cannot read",
        path: dir.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    };
    let names = entries
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(io)?;
    let has_store = names.iter().any(|n| n == "db");
    for name in &names {
        let left_key = name == "node.key"
            && !has_store
            && crate::node_key::load(&dir.join(name)).is_ok_and(|k| k.public() == key.public());
        if name == "lost+found" || name == STAGING || left_key {
            continue;
        }
        return Err(RestoreDirError::NotEmpty {
            dir: dir.to_path_buf(),
            name: name.to_string_lossy().into_owned(),
        });
    }
    Ok(())
}

/// Builds `dir` from the opened `backup` as the node signing with `key`, reachable at `addr`
/// (see the module docs; `engram_raft::restore` for what the store holds). Checks `dir` with
/// [`check_restorable`] first. A directory this made is removed again if the restore fails.
pub fn restore_into(
    dir: &Path,
    backup: &BackupFile,
    key: &NodeKey,
    node_id: Option<u64>,
    addr: &str,
) -> Result<Restored, RestoreDirError> {
    check_restorable(dir, key)?;
    let io = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| RestoreDirError::Io { what, path, source }
    };
    let made_dir = (!dir.exists()).then(|| RemoveOnDrop(dir.to_path_buf()));
    let staging = dir.join(STAGING);
    let _ = std::fs::remove_dir_all(&staging);
    let cleanup = RemoveOnDrop(staging.clone());
    std::fs::create_dir_all(&staging).map_err(io("cannot create", &staging))?;
    let restored = {
        let store: Arc<dyn Store> = Arc::new(
            engram_storage_rocks::RocksStore::open(&staging.join("db")).map_err(|e| {
                RestoreDirError::Store {
                    dir: staging.clone(),
                    why: e.to_string(),
                }
            })?,
        );
        let info = NodeInfo {
            addr: addr.to_string(),
            public_key: key.public().0,
        };
        let restored = engram_raft::restore::restore(store.clone(), backup, node_id, info)?;
        store.sync().map_err(|e| RestoreDirError::Store {
            dir: staging.clone(),
            why: format!("syncing the restored store: {e}"),
        })?;
        restored
    };
    let key_path = staging.join("node.key");
    crate::node_key::persist(&key_path, key, &[]).map_err(io("cannot write", &key_path))?;
    for part in ["node.key", "db"] {
        std::fs::rename(staging.join(part), dir.join(part))
            .map_err(io("cannot move into place", &dir.join(part)))?;
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("cannot sync", dir))?;
    drop(cleanup);
    if let Some(made) = made_dir {
        std::mem::forget(made);
    }
    Ok(restored)
}

/// Removes a directory (a restore's staging copy, or the data directory it made) unless
/// forgotten.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `engram serve --restore-from FILE` on start: node `from.node_id` builds its data directory
/// from the backup when the directory holds no store yet, and only when no peer answers as a
/// member of a running cluster (restoring beside one would fork its chain). Other nodes, and a
/// node whose store exists (a restart after the restore), start as they would without it.
pub(crate) async fn on_start(config: &ServerConfig, from: &RestoreFrom) -> Result<(), ServerError> {
    if config.node_id != from.node_id {
        info!(
            restoring_node = from.node_id,
            "restore: another node restores from the backup; this one joins it"
        );
        return Ok(());
    }
    if config.data_dir.join("db").exists() {
        info!("restore: the data directory holds a store already; starting from it");
        return Ok(());
    }
    let key_file = config.key_file.as_ref().ok_or_else(|| {
        ServerError::Startup(
            "--restore-from needs --key-file: the key of the backed-up node this one continues".into(),
        )
    })?;
    if let Some(tls) = &config.tls {
        crate::server_tls(tls)?;
    }
    for peer in config.peers.iter().filter(|p| p.id != config.node_id) {
        let Ok(channel) = engram_raft::network::channel(&peer.addr) else {
            continue;
        };
        let mut client = pb::cluster_client::ClusterClient::new(channel);
        let asked = tokio::time::timeout(PEER_ASK, client.status(pb::StatusRequest {})).await;
        if let Ok(Ok(status)) = asked
            && status.get_ref().initialized
        {
            return Err(ServerError::Startup(format!(
                "--restore-from: peer {} at {} answers as a member of a running cluster, and restoring node {} from a backup beside it would fork its chain; a lost node rejoins the running cluster instead (remove it, then start it with an empty data directory), so start this node without --restore-from (ENGRAM_RESTORE_FROM)",
                peer.id, peer.addr, config.node_id
            )));
        }
    }
    let key = crate::node_key::load(key_file)?;
    let backup = BackupFile::open(&from.backup)
        .map_err(|e| ServerError::Startup(format!("--restore-from {}: {e}", from.backup.display())))?;
    info!(backup = %from.backup.display(), "restore: building the data directory from the backup");
    let restored = restore_into(
        &config.data_dir,
        &backup,
        &key,
        Some(config.node_id),
        &config.advertise(),
    )
    .map_err(|e| ServerError::Startup(format!("--restore-from {}: {e}", from.backup.display())))?;
    info!(
        chain_index = restored.verified.head.index,
        applied_index = restored.applied_index,
        "restore: done; this node is a one-node cluster of the backup's chain, which others join"
    );
    Ok(())
}

/// How long a restoring node waits for each peer's answer.
const PEER_ASK: std::time::Duration = std::time::Duration::from_secs(3);
