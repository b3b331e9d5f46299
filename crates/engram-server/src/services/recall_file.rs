//! The file that holds this node's saved recall index (`DATA_DIR/recall.index`): written
//! whole and renamed into place, so a crash leaves the last save or none, never half of one;
//! read back only when it belongs to this store (see [`SaveFile::read`]).
//!
//! Node-local evidence like the search index itself: never replicated, never in a snapshot or
//! the replica digest. It holds the words of indexed values, so a redaction removes it (see
//! `search_index::keep_saved`).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use engram_core::reads;
use engram_recall::{Feeder, RecallIndex, SavedAt};
use engram_storage::ReadView;
use engram_types::TxId;

/// The file's name in the node's data directory.
pub const FILE_NAME: &str = "recall.index";

#[derive(Clone, Debug)]
pub struct SaveFile {
    path: PathBuf,
}

/// A save read back and found to belong to the store.
pub struct Loaded {
    pub index: RecallIndex,
    pub feeder: Feeder,
    pub at: SavedAt,
}

impl SaveFile {
    /// The save file of the node whose data directory is `data_dir`.
    pub fn in_dir(data_dir: &Path) -> SaveFile {
        SaveFile {
            path: data_dir.join(FILE_NAME),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The save, if there is one that this store can take: its newest transaction is in the
    /// store with the same audit hash (a save of another cluster, or of a store restored
    /// from an older backup, is not), and no redaction was applied after it was made
    /// (`redactions_now`, the store's last; the save may hold the values it forgot, so it is
    /// removed). `Ok(None)`: no save; `Err`: why the save was not taken.
    pub fn read(&self, store: &dyn ReadView, redactions_now: u64) -> Result<Option<Loaded>, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", self.path.display())),
        };
        let (index, feeder, at) = engram_recall::load(&bytes).map_err(|e| e.to_string())?;
        if redactions_now > at.redactions_seen {
            let removed = self.remove();
            return Err(format!(
                "a redaction (log index {redactions_now}) was applied after it was saved; {}",
                match removed {
                    Ok(_) => "removed".to_string(),
                    Err(e) => format!("cannot remove it: {e}"),
                }
            ));
        }
        if let Some((tx, hash)) = at.anchor {
            let row = reads::tx(store, tx).map_err(|e| format!("reading transaction {}: {e}", tx.0))?;
            match row {
                Some(row) if row.receipt.audit_hash == hash => {}
                Some(_) => {
                    return Err(format!(
                        "transaction {} has another audit hash in this store (a save of another store)",
                        tx.0
                    ));
                }
                None => {
                    return Err(format!(
                        "it holds transaction {}, which this store has not applied",
                        tx.0
                    ));
                }
            }
        } else if at.next > TxId(1) {
            return Err("it names no transaction it holds".into());
        }
        Ok(Some(Loaded { index, feeder, at }))
    }

    /// Replaces the save with `bytes`: written to a temporary file, synced, renamed over the
    /// save, and the directory synced, so the save is the old one or the new one after a crash.
    pub fn write(&self, bytes: &[u8]) -> io::Result<()> {
        let tmp = self.path.with_extension("index.tmp");
        {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// Removes the save (and any half-written one); whether there was one.
    pub fn remove(&self) -> io::Result<bool> {
        let gone = |r: io::Result<()>| match r {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        };
        gone(std::fs::remove_file(self.path.with_extension("index.tmp")))?;
        gone(std::fs::remove_file(&self.path))
    }
}
