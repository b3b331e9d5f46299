use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use crate::{
    Durability, FIRST_INVALID_KEY_BYTE, KeyValue, Mutation, ReadView, Space, StorageError, Store, Visitor,
    WriteBatch, remove_range,
};

type Maps = BTreeMap<Space, BTreeMap<Vec<u8>, Vec<u8>>>;

#[derive(Default)]
struct Inner {
    /// What readers see.
    live: Maps,
    /// What would be on disk after a crash right now.
    durable: Maps,
    /// Buffered batches not yet covered by a synced write, oldest first.
    unsynced: Vec<WriteBatch>,
}

/// An in-memory [`Store`] that models crash semantics.
///
/// Writes with [`Durability::Buffered`] are visible at once but reach the "disk" only when a
/// later synced write flushes them (as a write-ahead log would); [`MemStore::crash`] throws
/// away whatever was never flushed. The store outlives the node that uses it, so a test can
/// crash a node and boot a new one on the same store.
#[derive(Default)]
pub struct MemStore {
    inner: Mutex<Inner>,
}

fn apply(maps: &mut Maps, batch: &WriteBatch) {
    for m in &batch.mutations {
        match m {
            Mutation::Put { space, key, value } => {
                maps.entry(*space).or_default().insert(key.clone(), value.clone());
            }
            Mutation::Delete { space, key } => {
                maps.entry(*space).or_default().remove(key);
            }
            Mutation::DeleteRange { space, start, end } => {
                remove_range(maps.entry(*space).or_default(), start, end);
            }
        }
    }
}

fn check_keys(batch: &WriteBatch) -> Result<(), StorageError> {
    for m in &batch.mutations {
        if let Mutation::Put { space, key, .. } = m
            && key.first() == Some(&FIRST_INVALID_KEY_BYTE)
        {
            return Err(StorageError::corruption(
                *space,
                key,
                "keys must not start with 0xff",
            ));
        }
    }
    Ok(())
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock means a panic while mutating; the data may be half-written, which
        // the crash model cannot represent, so it is a bug worth stopping for.
        self.inner.lock().expect("MemStore lock poisoned")
    }

    /// Simulates a process crash: every write that was not synced is lost.
    pub fn crash(&self) {
        let mut inner = self.lock();
        inner.live = inner.durable.clone();
        inner.unsynced.clear();
    }

    /// Simulates a crash in which the write-ahead log reached the disk only in part: the
    /// oldest `keep` unsynced batches survive, whole and in order, and every later one is lost.
    /// This is what RocksDB guarantees: each write batch is one checksummed WAL record, and
    /// recovery (point-in-time, the default) replays records up to the first torn one and drops
    /// it and everything after it. A batch is never half applied, but any prefix of the
    /// unsynced batches can survive, so the layers above must not depend on unsynced writes
    /// being lost together.
    pub fn crash_torn(&self, keep: usize) {
        let mut inner = self.lock();
        let kept: Vec<WriteBatch> = inner.unsynced.iter().take(keep).cloned().collect();
        for batch in &kept {
            apply(&mut inner.durable, batch);
        }
        inner.live = inner.durable.clone();
        inner.unsynced.clear();
    }

    /// Number of buffered batches a crash would lose now.
    pub fn unsynced_batches(&self) -> usize {
        self.lock().unsynced.len()
    }
}

fn collect<'a>(iter: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>, limit: usize) -> Vec<KeyValue> {
    iter.take(limit).map(|(k, v)| (k.clone(), v.clone())).collect()
}

impl MemStore {
    fn range(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        reverse: bool,
    ) -> Vec<KeyValue> {
        let inner = self.lock();
        let Some(map) = inner.live.get(&space) else {
            return Vec::new();
        };
        if end.is_some_and(|e| e <= start) {
            return Vec::new();
        }
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let range = map.range::<[u8], _>((Bound::Included(start), upper));
        if reverse {
            collect(range.rev(), limit)
        } else {
            collect(range, limit)
        }
    }
}

impl ReadView for MemStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.lock().live.get(&space).and_then(|m| m.get(key)).cloned())
    }

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        Ok(self.range(space, start, end, limit, false))
    }

    fn scan_rev(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        Ok(self.range(space, start, end, limit, true))
    }
}

impl Store for MemStore {
    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), StorageError> {
        check_keys(&batch)?;
        let mut inner = self.lock();
        apply(&mut inner.live, &batch);
        match durability {
            Durability::Buffered => inner.unsynced.push(batch),
            Durability::Sync => {
                // A sync flushes the whole write-ahead log: earlier buffered batches too.
                let pending = std::mem::take(&mut inner.unsynced);
                for b in pending.iter().chain(std::iter::once(&batch)) {
                    apply(&mut inner.durable, b);
                }
            }
        }
        Ok(())
    }

    fn for_each(&self, space: Space, visit: &mut Visitor<'_>) -> Result<(), StorageError> {
        // Copy first: the view stays consistent and the lock is not held across callbacks.
        let view = self.lock().live.get(&space).cloned().unwrap_or_default();
        for (k, v) in &view {
            visit(k, v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_loses_only_unsynced_writes() {
        let s = MemStore::new();
        let mut a = WriteBatch::new();
        a.put(Space::State, b"a".to_vec(), b"1".to_vec());
        s.write(a, Durability::Sync).unwrap();
        let mut b = WriteBatch::new();
        b.put(Space::State, b"b".to_vec(), b"2".to_vec());
        s.write(b, Durability::Buffered).unwrap();
        assert_eq!(s.get(Space::State, b"b").unwrap(), Some(b"2".to_vec()));
        assert_eq!(s.unsynced_batches(), 1);
        s.crash();
        assert_eq!(s.get(Space::State, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(s.get(Space::State, b"b").unwrap(), None);
    }

    #[test]
    fn sync_flushes_earlier_buffered_writes() {
        let s = MemStore::new();
        let mut b = WriteBatch::new();
        b.put(Space::Log, b"x".to_vec(), b"1".to_vec());
        s.write(b, Durability::Buffered).unwrap();
        let mut c = WriteBatch::new();
        c.put(Space::Raft, b"y".to_vec(), b"2".to_vec());
        s.write(c, Durability::Sync).unwrap();
        s.crash();
        assert_eq!(s.get(Space::Log, b"x").unwrap(), Some(b"1".to_vec()));
    }

    #[test]
    fn an_explicit_sync_makes_earlier_buffered_writes_durable() {
        let s = MemStore::new();
        let mut b = WriteBatch::new();
        b.put(Space::Log, b"x".to_vec(), b"1".to_vec());
        s.write(b, Durability::Buffered).unwrap();
        s.sync().unwrap();
        assert_eq!(s.unsynced_batches(), 0);
        let mut c = WriteBatch::new();
        c.put(Space::Log, b"z".to_vec(), b"3".to_vec());
        s.write(c, Durability::Buffered).unwrap();
        s.crash();
        assert_eq!(s.get(Space::Log, b"x").unwrap(), Some(b"1".to_vec()));
        assert_eq!(s.get(Space::Log, b"z").unwrap(), None, "written after the sync");
    }

    #[test]
    fn torn_crash_keeps_a_prefix_of_whole_batches() {
        let s = MemStore::new();
        for (key, value) in [(b"1", b"x"), (b"2", b"y"), (b"3", b"z")] {
            let mut b = WriteBatch::new();
            b.put(Space::State, key.to_vec(), value.to_vec());
            b.put(Space::Raft, key.to_vec(), value.to_vec());
            s.write(b, Durability::Buffered).unwrap();
        }
        s.crash_torn(2);
        for key in [b"1", b"2"] {
            assert!(s.get(Space::State, key).unwrap().is_some());
            assert!(
                s.get(Space::Raft, key).unwrap().is_some(),
                "a kept batch is kept whole"
            );
        }
        assert!(s.get(Space::State, b"3").unwrap().is_none());
        assert!(s.get(Space::Raft, b"3").unwrap().is_none());
    }
}
