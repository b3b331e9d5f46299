//! [`RocksStore`]: Engram's [`Store`] on RocksDB, one column family per [`Space`].
//!
//! This is the only crate in the workspace that depends on `rocksdb`; everything else sees the
//! [`Store`] trait. A synced write sets `WriteOptions::set_sync(true)`, which fsyncs the
//! write-ahead log (and with it every earlier buffered write, since the WAL is one file
//! sequence). `for_each` iterates an implicit RocksDB snapshot, so it sees one point in time
//! while writes continue.
//!
//! Every read verifies block checksums (RocksDB's default, set explicitly here), and an
//! iterator that stops on an error reports it rather than ending quietly. RocksDB's
//! `Corruption` errors become [`StorageError::Corruption`] naming the space and key, with the
//! file path kept out of the message ([`StorageError::file`] has it); other failures are
//! [`StorageError::Engine`]. [`Store::verify_checksums`] runs RocksDB's whole-database check
//! through its C API, which the `rocksdb` crate does not wrap: the crate's one `unsafe` block.
//!
//! Must not depend on: Engram's data model, Raft, or an async runtime.

use std::ffi::{CStr, c_char};
use std::path::Path;

use engram_storage::{
    Durability, KeyValue, Mutation, ReadView, Space, StorageError, Store, Visitor, WriteBatch,
};
use rocksdb::{
    AsRawPtr, BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DB, Direction, ErrorKind,
    IteratorMode, Options, ReadOptions, WriteOptions,
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

/// A RocksDB error met while reading `key` (or scanning from it) in `space`: RocksDB's
/// `Corruption` kind (a block checksum mismatch, a bad block or table format) is corruption of
/// that space; anything else is the engine failing.
fn read_error(space: Space, key: &[u8], e: rocksdb::Error) -> StorageError {
    if e.kind() != ErrorKind::Corruption {
        return engine(e);
    }
    let key = if key.is_empty() {
        // Nothing was read yet: the damage is at the start of the space.
        "(start)".to_string()
    } else {
        engram_storage::short_hex_key(key)
    };
    corruption(space.name(), key, &e.into_string())
}

fn corruption(space: &'static str, key: String, message: &str) -> StorageError {
    let (reason, file) = split_file(message.strip_prefix("Corruption: ").unwrap_or(message));
    StorageError::Corruption {
        space,
        key,
        reason,
        file,
    }
}

/// Splits RocksDB's message into the message with every path cut to its file name (which says
/// which table, without the node's directory layout) and the first path named.
fn split_file(message: &str) -> (String, Option<String>) {
    let mut file = None;
    let words: Vec<String> = message
        .split(' ')
        .map(|word| {
            let trimmed = word.trim_end_matches([',', ':', ';', ')']);
            match trimmed.rsplit_once('/') {
                Some((_, name)) => {
                    file.get_or_insert_with(|| trimmed.to_string());
                    format!("{name}{}", &word[trimmed.len()..])
                }
                None => word.to_string(),
            }
        })
        .collect();
    (words.join(" "), file)
}

/// Read options for every read: checksums verified (RocksDB's default, stated so that no
/// read path can lose it).
fn read_options() -> ReadOptions {
    let mut ro = ReadOptions::default();
    ro.set_verify_checksums(true);
    ro
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
        let db = DB::open_cf_descriptors(&db_opts, dir, spaces).map_err(|e| {
            // Opening reads every table's footer, index and filter: damage there shows now.
            if e.kind() == ErrorKind::Corruption {
                corruption("unknown", "(open)".to_string(), &e.into_string())
            } else {
                engine(e)
            }
        })?;
        Ok(RocksStore { db })
    }

    fn cf(&self, space: Space) -> Result<&ColumnFamily, StorageError> {
        self.db
            .cf_handle(space.name())
            .ok_or_else(|| StorageError::Engine(format!("column family {} missing", space.name())))
    }

    /// The space whose table `path` is, and the key range it holds (`first..last`, shortened
    /// hex), if the file is live.
    fn file_owner(&self, path: &str) -> Option<(&'static str, String)> {
        let name = path.rsplit('/').next()?;
        let live = self.db.live_files().ok()?;
        let file = live.iter().find(|f| f.name.trim_start_matches('/') == name)?;
        let space = Space::ALL
            .into_iter()
            .find(|s| s.name() == file.column_family_name)?;
        let hex = |k: &Option<Vec<u8>>| {
            k.as_deref()
                .map(engram_storage::short_hex_key)
                .unwrap_or_default()
        };
        Some((
            space.name(),
            format!("{}..{}", hex(&file.start_key), hex(&file.end_key)),
        ))
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
        let mut ro = read_options();
        ro.set_iterate_lower_bound(start.to_vec());
        if let Some(end) = end {
            ro.set_iterate_upper_bound(end.to_vec());
        }
        let mode = if reverse {
            IteratorMode::End
        } else {
            IteratorMode::From(start, Direction::Forward)
        };
        let mut out: Vec<KeyValue> = Vec::new();
        // The iterator yields an error (its status) where it stops on one, so a damaged block
        // is reported, never taken for the end of the range.
        for item in self.db.iterator_cf_opt(cf, ro, mode) {
            let (k, v) = item.map_err(|e| read_error(space, out.last().map_or(start, |(k, _)| k), e))?;
            out.push((k.into_vec(), v.into_vec()));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

impl ReadView for RocksStore {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.db
            .get_cf_opt(self.cf(space)?, key, &read_options())
            .map_err(|e| read_error(space, key, e))
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
}

impl Store for RocksStore {
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

    fn sync(&self) -> Result<(), StorageError> {
        // One write-ahead log serves every column family, so syncing it covers all spaces.
        self.db.flush_wal(true).map_err(engine)
    }

    fn for_each(&self, space: Space, visit: &mut Visitor<'_>) -> Result<(), StorageError> {
        let cf = self.cf(space)?;
        let snapshot = self.db.snapshot();
        let mut ro = read_options();
        // A whole-space walk (snapshots, scrubs) would otherwise push the hot blocks out of the
        // shared cache.
        ro.fill_cache(false);
        let mut last: Vec<u8> = Vec::new();
        for item in snapshot.iterator_cf_opt(cf, ro, IteratorMode::Start) {
            let (k, v) = item.map_err(|e| read_error(space, &last, e))?;
            visit(&k, &v)?;
            last = k.into_vec();
        }
        Ok(())
    }

    fn verify_checksums(&self) -> Result<(), StorageError> {
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: the database handle is alive for the whole call (`&self` borrows it), and
        // `rocksdb_verify_checksum` only reads through it. On failure RocksDB stores a
        // malloc'd, NUL-terminated message in `err`, which is copied and then freed with
        // RocksDB's own `rocksdb_free`, exactly once.
        #[allow(unsafe_code)]
        let message = unsafe {
            librocksdb_sys::rocksdb_verify_checksum(self.db.as_raw_ptr(), &mut err);
            if err.is_null() {
                None
            } else {
                let message = CStr::from_ptr(err).to_string_lossy().into_owned();
                librocksdb_sys::rocksdb_free(err.cast());
                Some(message)
            }
        };
        let Some(message) = message else {
            return Ok(());
        };
        if !message.starts_with("Corruption") {
            return Err(StorageError::Engine(message));
        }
        // RocksDB names the table file, not a key: report the space that owns the file and the
        // range of keys it holds.
        let (_, file) = split_file(&message);
        let owner = file.as_deref().and_then(|path| self.file_owner(path));
        let (space, key) = owner.unwrap_or(("unknown", String::new()));
        Err(corruption(space, key, &message))
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

    /// Writes `n` rows to the state space and flushes them into one table file; returns the
    /// file's path.
    fn one_table(dir: &Path, n: u32) -> std::path::PathBuf {
        let store = RocksStore::open(dir).unwrap();
        let mut b = WriteBatch::new();
        for i in 0..n {
            // Incompressible values, so the table is large and its data blocks many.
            let value: Vec<u8> = (0..64u32)
                .map(|j| (i.wrapping_mul(31).wrapping_add(j * 7)) as u8)
                .collect();
            b.put(Space::State, format!("k{i:08}").into_bytes(), value);
        }
        store.write(b, Durability::Sync).unwrap();
        store.db.flush_cf(store.cf(Space::State).unwrap()).unwrap();
        let files = store.db.live_files().unwrap();
        let file = files.iter().find(|f| f.column_family_name == "state").unwrap();
        dir.join(file.name.trim_start_matches('/'))
    }

    fn flip(path: &Path, offset: u64) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[offset as usize] ^= 0x5a;
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_damaged_data_block_is_corruption_on_every_read_path() {
        let dir = tempfile::tempdir().unwrap();
        let table = one_table(dir.path(), 2000);
        // The first data block starts at offset 0 and holds the first keys.
        flip(&table, 10);
        let store = RocksStore::open(dir.path()).unwrap();
        let assert_corrupt = |e: StorageError, what: &str| {
            let StorageError::Corruption {
                space, reason, file, ..
            } = &e
            else {
                panic!("{what}: expected corruption, got {e:?}");
            };
            assert_eq!(*space, "state", "{what}");
            assert!(reason.contains("checksum"), "{what}: {reason}");
            assert!(!e.to_string().contains('/'), "{what}: a path in {e}");
            assert_eq!(file.as_deref(), Some(table.to_str().unwrap()), "{what}");
        };
        let e = store.get(Space::State, b"k00000000").unwrap_err();
        assert_corrupt(e, "get");
        let e = store.scan(Space::State, b"k", None, 10).unwrap_err();
        assert_corrupt(e, "scan");
        let e = store.for_each(Space::State, &mut |_, _| Ok(())).unwrap_err();
        assert_corrupt(e, "for_each");
        let e = store.verify_checksums().unwrap_err();
        assert_corrupt(e, "verify_checksums");
        // The untouched spaces still read.
        assert_eq!(store.get(Space::Raft, b"x").unwrap(), None);
    }

    #[test]
    fn verify_checksums_passes_an_intact_store() {
        let dir = tempfile::tempdir().unwrap();
        one_table(dir.path(), 100);
        let store = RocksStore::open(dir.path()).unwrap();
        store.verify_checksums().unwrap();
    }

    #[test]
    fn paths_are_cut_to_file_names() {
        let (reason, file) = split_file(
            "block checksum mismatch: stored = 1, computed = 2  in /a/b/000012.sst offset 7 size 9",
        );
        assert_eq!(
            reason,
            "block checksum mismatch: stored = 1, computed = 2  in 000012.sst offset 7 size 9"
        );
        assert_eq!(file.as_deref(), Some("/a/b/000012.sst"));
        let (reason, file) = split_file("bad table magic number");
        assert_eq!(reason, "bad table magic number");
        assert_eq!(file, None);
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
