//! [`RocksStore`]: Engram's [`Store`] on RocksDB, one column family per [`Space`].
//!
//! This is the only crate in the workspace that depends on `rocksdb`; everything else sees the
//! [`Store`] trait. A synced write sets `WriteOptions::set_sync(true)`, which fsyncs the
//! write-ahead log (and with it every earlier buffered write, since the WAL is one file
//! sequence). `for_each` iterates an implicit RocksDB snapshot, so it sees one point in time
//! while writes continue.
//!
//! Must not depend on: Engram's data model, Raft, or an async runtime.

use std::path::Path;

use engram_storage::{Durability, KeyValue, Mutation, Space, StorageError, Store, Visitor, WriteBatch};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options,
    ReadOptions, WriteOptions,
};

/// One block cache shared by every space, so hot index and filter blocks stay in memory.
const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// The options of one space's column family.
fn space_options(cache: &Cache) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    // A point `get` (idempotency keys, entity rows, Raft records) skips files without the key.
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks stay in each table reader, outside the cache. Caching them was
    // measured and undone: at 10 M values a file's index block is large, the cache evicted it
    // between reads, and re-reading and decompressing index blocks took half the CPU.
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    // Engram writes small batches at a steady pace; keep memory modest and predictable.
    opts.set_write_buffer_size(32 << 20);
    opts
}

pub struct RocksStore {
    db: DB,
}

fn engine(e: rocksdb::Error) -> StorageError {
    StorageError::Engine(e.into_string())
}

impl RocksStore {
    /// Opens (creating if missing) the store in `dir`.
    pub fn open(dir: &Path) -> Result<RocksStore, StorageError> {
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(2);
        // Column families do not inherit the database's options (`DB::open_cf` gives each
        // one RocksDB's defaults), so every space gets its options explicitly.
        let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let spaces = Space::ALL.map(|space| ColumnFamilyDescriptor::new(space.name(), space_options(&cache)));
        let db = DB::open_cf_descriptors(&db_opts, dir, spaces).map_err(engine)?;
        Ok(RocksStore { db })
    }

    fn cf(&self, space: Space) -> Result<&ColumnFamily, StorageError> {
        self.db
            .cf_handle(space.name())
            .ok_or_else(|| StorageError::Engine(format!("column family {} missing", space.name())))
    }

    fn range(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<KeyValue>, StorageError> {
        if end.is_some_and(|e| e <= start) || limit == 0 {
            return Ok(Vec::new());
        }
        let cf = self.cf(space)?;
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(start.to_vec());
        if let Some(end) = end {
            ro.set_iterate_upper_bound(end.to_vec());
        }
        let mode = if reverse {
            IteratorMode::End
        } else {
            IteratorMode::From(start, Direction::Forward)
        };
        let mut out = Vec::new();
        for item in self.db.iterator_cf_opt(cf, ro, mode) {
            let (k, v) = item.map_err(engine)?;
            out.push((k.into_vec(), v.into_vec()));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

impl Store for RocksStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.db.get_cf(self.cf(space)?, key).map_err(engine)
    }

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.range(space, start, end, limit, false)
    }

    fn scan_rev(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.range(space, start, end, limit, true)
    }

    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), StorageError> {
        let mut wb = rocksdb::WriteBatch::default();
        for m in &batch.mutations {
            match m {
                Mutation::Put { space, key, value } => wb.put_cf(self.cf(*space)?, key, value),
                Mutation::Delete { space, key } => wb.delete_cf(self.cf(*space)?, key),
                Mutation::DeleteRange { space, start, end } => {
                    if start < end {
                        wb.delete_range_cf(self.cf(*space)?, start, end)
                    }
                }
            }
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(durability == Durability::Sync);
        self.db.write_opt(wb, &wo).map_err(engine)
    }

    fn for_each(&self, space: Space, visit: &mut Visitor<'_>) -> Result<(), StorageError> {
        let cf = self.cf(space)?;
        let snapshot = self.db.snapshot();
        for item in snapshot.iterator_cf(cf, IteratorMode::Start) {
            let (k, v) = item.map_err(engine)?;
            visit(&k, &v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use engram_storage::conformance;

    use super::*;

    #[test]
    fn rocks_store_passes_conformance() {
        let dirs = std::sync::Mutex::new(Vec::new());
        conformance::run_all(&|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = RocksStore::open(dir.path()).expect("open");
            dirs.lock().expect("lock").push(dir);
            Box::new(store)
        });
    }

    #[test]
    fn synced_data_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = RocksStore::open(dir.path()).unwrap();
            let mut b = WriteBatch::new();
            b.put(Space::State, b"k".to_vec(), b"v".to_vec());
            store.write(b, Durability::Sync).unwrap();
        }
        let store = RocksStore::open(dir.path()).unwrap();
        assert_eq!(store.get(Space::State, b"k").unwrap(), Some(b"v".to_vec()));
    }

    #[test]
    fn every_space_gets_the_configured_table_options() {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(dir.path()).unwrap();
        for space in Space::ALL {
            let cf = store.cf(space).unwrap();
            let capacity = store
                .db
                .property_int_value_cf(cf, "rocksdb.block-cache-capacity")
                .unwrap();
            assert_eq!(
                capacity,
                Some(BLOCK_CACHE_BYTES as u64),
                "{} must use the shared block cache, not RocksDB's default",
                space.name()
            );
        }
    }

    #[test]
    fn a_second_open_of_a_live_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let _first = RocksStore::open(dir.path()).unwrap();
        assert!(matches!(
            RocksStore::open(dir.path()),
            Err(StorageError::Engine(_))
        ));
    }
}
