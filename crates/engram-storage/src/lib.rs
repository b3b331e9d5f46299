//! Engram's storage seam: an ordered key-value store with four key spaces and atomic,
//! optionally synced write batches.
//!
//! Everything above this crate (the state machine, the Raft log and vote, snapshots) is
//! written against [`Store`]. Two implementations exist: [`MemStore`] here, which models what
//! a crash does to writes that were never synced (the simulation uses it), and the RocksDB
//! store in `engram-storage-rocks`. Both must pass [`conformance::run_all`].
//!
//! Must not depend on: RocksDB or any other engine, an async runtime, or Engram's data model.
//! The traits speak bytes; meaning lives in the layers above.

mod cached;
pub mod conformance;
mod mem;
mod overlay;

pub use cached::CachedStore;
pub use mem::MemStore;
pub use overlay::{Layered, Overlay};
use thiserror::Error;

/// The key spaces. Each is its own ordered map (a RocksDB column family).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Space {
    /// Raft log entries keyed by big-endian log index.
    Log,
    /// Raft's own small records: vote, committed and purged log ids.
    Raft,
    /// The state machine: datoms, indexes, audit chain, applied log id. Snapshots carry
    /// exactly this space.
    State,
    /// This node's access log: the reads it served, never replicated, never in a snapshot.
    Access,
}

impl Space {
    pub const ALL: [Space; 4] = [Space::Log, Space::Raft, Space::State, Space::Access];

    pub fn name(self) -> &'static str {
        match self {
            Space::Log => "log",
            Space::Raft => "raft",
            Space::State => "state",
            Space::Access => "access",
        }
    }
}

/// Keys never start with this byte, so `[FIRST_INVALID_KEY_BYTE]` is an upper bound for every
/// key in a space (used to clear a space in one range delete).
pub const FIRST_INVALID_KEY_BYTE: u8 = 0xff;

/// One change inside a [`WriteBatch`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Mutation {
    Put {
        space: Space,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        space: Space,
        key: Vec<u8>,
    },
    /// Deletes every key `k` with `start <= k < end`.
    DeleteRange {
        space: Space,
        start: Vec<u8>,
        end: Vec<u8>,
    },
}

/// Changes applied all together or not at all.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct WriteBatch {
    pub mutations: Vec<Mutation>,
}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    pub fn put(&mut self, space: Space, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.mutations.push(Mutation::Put {
            space,
            key: key.into(),
            value: value.into(),
        });
    }

    pub fn delete(&mut self, space: Space, key: impl Into<Vec<u8>>) {
        self.mutations.push(Mutation::Delete {
            space,
            key: key.into(),
        });
    }

    pub fn delete_range(&mut self, space: Space, start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) {
        self.mutations.push(Mutation::DeleteRange {
            space,
            start: start.into(),
            end: end.into(),
        });
    }

    /// Deletes every key of `space`.
    pub fn clear(&mut self, space: Space) {
        self.delete_range(space, Vec::new(), vec![FIRST_INVALID_KEY_BYTE]);
    }

    pub fn is_empty(&self) -> bool {
        self.mutations.is_empty()
    }

    pub fn len(&self) -> usize {
        self.mutations.len()
    }
}

/// Whether a write must reach stable storage before `write` returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Durability {
    /// fsync before returning: survives a crash of the process and of the machine.
    Sync,
    /// Buffered: lost if the process crashes before a later synced write.
    Buffered,
}

#[derive(Debug, Error)]
pub enum StorageError {
    /// The engine failed (disk full, I/O error, lock held by another process...).
    #[error("storage engine error: {0}")]
    Engine(String),
    /// Data read back is not what was written: an engine checksum, decode or invariant
    /// failure. The message names the space and the key but never a file path, so it can be
    /// shown to a remote client; [`StorageError::file`] gives the file to local tools.
    #[error("storage corruption in {space} at key {key}: {reason}")]
    Corruption {
        space: &'static str,
        /// The key read, in hex, shortened when long (see [`short_hex_key`]); for a scan, the
        /// last key read before the failure (or the scan's start).
        key: String,
        /// What failed, free of directory names.
        reason: String,
        /// The file the engine named, with its full path, if it named one.
        file: Option<String>,
    },
}

impl StorageError {
    pub fn corruption(space: Space, key: &[u8], reason: impl Into<String>) -> StorageError {
        StorageError::Corruption {
            space: space.name(),
            key: short_hex_key(key),
            reason: reason.into(),
            file: None,
        }
    }

    /// Whether stored data failed a check (as opposed to the engine failing to run).
    pub fn is_corruption(&self) -> bool {
        matches!(self, StorageError::Corruption { .. })
    }

    /// The file the engine named in a corruption report, for tools running on the node's own
    /// machine; never part of the `Display` message.
    pub fn file(&self) -> Option<&str> {
        match self {
            StorageError::Corruption { file, .. } => file.as_deref(),
            StorageError::Engine(_) => None,
        }
    }
}

/// Bytes of a key shown before it is cut short: enough to tell the table tag, the namespace and
/// usually the entity.
pub const SHOWN_KEY_BYTES: usize = 32;

/// A key in hex; a key longer than [`SHOWN_KEY_BYTES`] is cut there and marked with its length.
pub fn short_hex_key(key: &[u8]) -> String {
    let shown: String = key
        .iter()
        .take(SHOWN_KEY_BYTES)
        .map(|b| format!("{b:02x}"))
        .collect();
    if key.len() > SHOWN_KEY_BYTES {
        format!("{shown}…({} bytes)", key.len())
    } else {
        shown
    }
}

pub type KeyValue = (Vec<u8>, Vec<u8>);

/// Called by [`Store::for_each`] with each pair; an error stops the walk.
pub type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), StorageError> + 'a;

/// The read half of a [`Store`]: what planning and queries need, and all an [`Overlay`] layered
/// over a store offers. Same contract as the store's reads (see [`Store`]).
pub trait ReadView: Send + Sync {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError>;

    fn scan_rev(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError>;
}

/// An ordered key-value store. Implementations are internally synchronised: every method
/// takes `&self` and may be called from several threads.
///
/// Contract (checked by [`conformance`]):
/// - `write` applies the whole batch atomically, in order: readers see all of it or none.
/// - After `write(_, Durability::Sync)` returns, that batch and every earlier one survive a
///   crash.
/// - `scan` returns keys in `[start, end)` ascending, `scan_rev` the same range descending,
///   each at most `limit` pairs; `end = None` means no upper bound.
/// - `for_each` visits every pair of a space in ascending order from one consistent
///   point-in-time view, even while writes continue.
/// - No method panics on any byte string a caller or the disk supplies.
pub trait Store: ReadView + 'static {
    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), StorageError>;

    /// Makes every earlier write durable, as a [`Durability::Sync`] write would. Lets a caller
    /// write buffered (visible at once) and pay one fsync later for several writes.
    fn sync(&self) -> Result<(), StorageError> {
        self.write(WriteBatch::new(), Durability::Sync)
    }

    fn for_each(&self, space: Space, visit: &mut Visitor<'_>) -> Result<(), StorageError>;

    /// Reads every stored block of every space and checks it against the engine's own
    /// checksums, including blocks no read path touches (filters, table properties). An engine
    /// that keeps no checksums (the in-memory store) has nothing to check and returns `Ok`.
    /// A failure is [`StorageError::Corruption`].
    fn verify_checksums(&self) -> Result<(), StorageError> {
        Ok(())
    }

    /// Rewrites the engine's files so that no value overwritten or deleted before the call
    /// survives in any of them: buffered writes flushed, every level compacted down, and the
    /// write-ahead log files that held the old values released. What a purge after a
    /// redaction asks of the engine; it may take long on a large store, so the caller runs it
    /// off any latency-sensitive thread. An engine that keeps nothing beyond its current state
    /// (the in-memory store) has nothing to do.
    fn compact(&self) -> Result<(), StorageError> {
        Ok(())
    }

    /// About how many bytes the engine holds for `space`: its table files and its write
    /// buffers (the write-ahead log, shared by every space, is not counted). For `/metrics`;
    /// `None` from an engine that cannot tell cheaply (the in-memory store).
    fn space_bytes(&self, space: Space) -> Option<u64> {
        let _ = space;
        None
    }
}

/// Removes every key `k` with `start <= k < end` from `map` (nothing when `start >= end`), as a
/// range delete does: the one rule the in-memory store and an overlay both apply.
fn remove_range<V>(map: &mut std::collections::BTreeMap<Vec<u8>, V>, start: &[u8], end: &[u8]) {
    if start >= end {
        return;
    }
    let mut from_start = map.split_off(start);
    let mut from_end = from_start.split_off(end);
    map.append(&mut from_end);
}

/// The smallest key greater than every key starting with `prefix`, or `None` when the prefix
/// is all `0xff` (no such bound).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn long_keys_are_shortened_with_their_length() {
        assert_eq!(short_hex_key(&[0xab, 1]), "ab01");
        let long = [7u8; 40];
        let shown = short_hex_key(&long);
        assert!(shown.starts_with(&"07".repeat(SHOWN_KEY_BYTES)), "{shown}");
        assert!(shown.ends_with("…(40 bytes)"), "{shown}");
    }

    #[test]
    fn mem_store_passes_conformance() {
        conformance::run_all(&|| Box::new(MemStore::new()));
    }
}
