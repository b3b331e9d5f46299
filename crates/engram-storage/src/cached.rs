//! A store whose rows under chosen key prefixes are read once and then answered from memory.
//!
//! For rows that nearly every write reads and almost none writes (a namespace's schema rows):
//! under a write load, reading them from the store for every transaction was about 6% of a
//! node's CPU. The cache sits under any [`crate::Overlay`], so it only ever holds what the
//! store itself holds; whoever writes the store through other hands tells it which rows
//! changed ([`CachedStore::written`]) or that anything may have ([`CachedStore::clear`]).
//! A read that the cache answers is the read the store would answer: misses (`None`) are
//! cached too, and a row written is forgotten, never patched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::{KeyValue, Mutation, ReadView, Space, StorageError, Store, WriteBatch};

/// Past this many rows the cache starts over: the rows it is meant for are few (one per
/// declared attribute of the namespaces being written), and a bound keeps a store with
/// millions of attributes from growing it without end.
const MAX_CACHED_ROWS: usize = 4096;

pub struct CachedStore {
    store: Arc<dyn Store>,
    space: Space,
    /// First key bytes of the cached rows (`space` only).
    prefixes: &'static [u8],
    rows: Mutex<HashMap<Vec<u8>, Option<Vec<u8>>>>,
}

impl CachedStore {
    /// Caches the rows of `space` whose key starts with one of `prefixes`.
    pub fn new(store: Arc<dyn Store>, space: Space, prefixes: &'static [u8]) -> CachedStore {
        CachedStore {
            store,
            space,
            prefixes,
            rows: Mutex::new(HashMap::new()),
        }
    }

    /// The store underneath, for what must not go through the cache (writes, whole scans).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn cached(&self, space: Space, key: &[u8]) -> bool {
        space == self.space && key.first().is_some_and(|b| self.prefixes.contains(b))
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Option<Vec<u8>>>> {
        // The map holds no invariant a panic could break halfway: at worst an entry is missing.
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets every cached row `batch` writes; call it before the batch reaches the store
    /// (between the two, nothing may read through the cache). A range delete in the cached
    /// space forgets everything.
    pub fn written(&self, batch: &WriteBatch) {
        let mut rows = self.rows();
        if rows.is_empty() {
            return;
        }
        for m in &batch.mutations {
            match m {
                Mutation::Put { space, key, .. } | Mutation::Delete { space, key } => {
                    if self.cached(*space, key) {
                        rows.remove(key);
                    }
                }
                Mutation::DeleteRange { space, .. } => {
                    if *space == self.space {
                        rows.clear();
                    }
                }
            }
        }
    }

    /// Forgets everything: the store changed underneath (a snapshot was installed).
    pub fn clear(&self) {
        self.rows().clear();
    }
}

impl ReadView for CachedStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if !self.cached(space, key) {
            return self.store.get(space, key);
        }
        if let Some(row) = self.rows().get(key) {
            return Ok(row.clone());
        }
        // Read outside the lock; only the thread that writes the store reads through the
        // cache, so no write can land between this read and the insert below.
        let row = self.store.get(space, key)?;
        let mut rows = self.rows();
        if rows.len() >= MAX_CACHED_ROWS {
            rows.clear();
        }
        rows.insert(key.to_vec(), row.clone());
        Ok(row)
    }

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.store.scan(space, start, end, limit)
    }

    fn scan_rev(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.store.scan_rev(space, start, end, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Durability, MemStore};

    fn put(store: &dyn Store, key: &[u8], value: &[u8]) {
        let mut b = WriteBatch::new();
        b.put(Space::State, key.to_vec(), value.to_vec());
        store.write(b, Durability::Buffered).unwrap();
    }

    #[test]
    fn a_cached_row_is_read_once_and_forgotten_when_written() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        put(&*store, b"Sa", b"1");
        let cached = CachedStore::new(store.clone(), Space::State, b"SQ");
        assert_eq!(cached.get(Space::State, b"Sa").unwrap(), Some(b"1".to_vec()));
        assert_eq!(cached.get(Space::State, b"Qx").unwrap(), None);

        // Written behind the cache's back: the cache still answers what it read.
        put(&*store, b"Sa", b"2");
        put(&*store, b"Qx", b"3");
        assert_eq!(cached.get(Space::State, b"Sa").unwrap(), Some(b"1".to_vec()));
        assert_eq!(cached.get(Space::State, b"Qx").unwrap(), None);

        // Told of the write: both rows (the miss too) are read again.
        let mut b = WriteBatch::new();
        b.put(Space::State, b"Sa".to_vec(), b"2".to_vec());
        b.delete(Space::State, b"Qx".to_vec());
        cached.written(&b);
        assert_eq!(cached.get(Space::State, b"Sa").unwrap(), Some(b"2".to_vec()));
        assert_eq!(cached.get(Space::State, b"Qx").unwrap(), Some(b"3".to_vec()));
    }

    #[test]
    fn other_rows_and_spaces_are_always_read_from_the_store() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let cached = CachedStore::new(store.clone(), Space::State, b"S");
        assert_eq!(cached.get(Space::State, b"Ea").unwrap(), None);
        put(&*store, b"Ea", b"1");
        assert_eq!(cached.get(Space::State, b"Ea").unwrap(), Some(b"1".to_vec()));
        let mut b = WriteBatch::new();
        b.put(Space::Raft, b"Sa".to_vec(), b"r".to_vec());
        store.write(b, Durability::Buffered).unwrap();
        assert_eq!(cached.get(Space::Raft, b"Sa").unwrap(), Some(b"r".to_vec()));
    }

    #[test]
    fn a_range_delete_or_a_clear_forgets_everything() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        put(&*store, b"Sa", b"1");
        let cached = CachedStore::new(store.clone(), Space::State, b"S");
        assert_eq!(cached.get(Space::State, b"Sa").unwrap(), Some(b"1".to_vec()));
        put(&*store, b"Sa", b"2");
        let mut b = WriteBatch::new();
        b.delete_range(Space::State, b"X".to_vec(), b"Y".to_vec());
        cached.written(&b);
        assert_eq!(cached.get(Space::State, b"Sa").unwrap(), Some(b"2".to_vec()));
        put(&*store, b"Sa", b"3");
        cached.clear();
        assert_eq!(cached.get(Space::State, b"Sa").unwrap(), Some(b"3".to_vec()));
    }
}
