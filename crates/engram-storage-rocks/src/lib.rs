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
//! through its C API, which the `rocksdb` crate does not wrap.
//!
//! [`RocksStore::open_read_only`] is for tools that judge a stopped node's directory: it writes
//! nothing there (no flush of the write-ahead log, no new MANIFEST, OPTIONS or info log), replays
//! the log in memory so rows not yet flushed are still read, and refuses a directory whose
//! `LOCK` a running node holds, found with a lock probe that takes nothing.
//!
//! When an open fails on corruption that RocksDB blames on the MANIFEST (it reports a table it
//! could not load while replaying the MANIFEST under the MANIFEST's name), each table file is
//! checked on its own and the first that fails is named instead (see [`damaged_table`]).
//!
//! The `unsafe` blocks are calls into RocksDB's C API for what the `rocksdb` crate does not
//! wrap, and one `fcntl` for the lock probe.
//!
//! Must not depend on: Engram's data model, Raft, or an async runtime.

use std::ffi::{CStr, c_char};
use std::path::Path;

use engram_storage::{
    Durability, KeyValue, Mutation, ReadView, Space, StorageError, Store, Visitor, WriteBatch,
};
use rocksdb::{
    AsRawPtr, BlockBasedOptions, BottommostLevelCompaction, Cache, ColumnFamily, ColumnFamilyDescriptor,
    CompactOptions, DB, Direction, ErrorKind, FlushOptions, IteratorMode, Options, ReadOptions, WriteOptions,
};

/// One block cache shared by every space, so hot index and filter blocks stay in memory.
const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// The options of one space's column family.
fn space_options(space: Space, cache: &Cache) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    // A point `get` (idempotency keys, entity rows, Raft records) skips files without the key.
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks stay in each table reader, outside the cache. Caching them was
    // measured and undone: at 10 M values a file's index block is large, the cache evicted it
    // between reads, and re-reading and decompressing index blocks took half the CPU.
    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    opts.set_compression_per_level(&compression_per_level(space));
    // Engram writes small batches at a steady pace; keep memory modest and predictable.
    opts.set_write_buffer_size(32 << 20);
    // Most point reads an apply makes miss the memtable (is this entity id free, is this
    // idempotency key known): a whole-key bloom filter over the memtable answers those without
    // walking its skip list, at a few bits per key.
    opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
    opts.set_memtable_whole_key_filtering(true);
    opts
}

/// The share of a memtable's size given to its whole-key bloom filter.
const MEMTABLE_BLOOM_RATIO: f64 = 0.02;

/// How each level of a space's tables is compressed. A flush writes level 0 uncompressed: the
/// same bytes are compressed once, when compaction moves them down, instead of at the flush and
/// again at each compaction (LZ4 was 4-5% of a node's CPU under writes). The Raft log is never
/// compressed: its entries are read back by replication soon after they are written and
/// deleted once a snapshot covers them, so compressing them buys nothing.
fn compression_per_level(space: Space) -> [rocksdb::DBCompressionType; 7] {
    use rocksdb::DBCompressionType::{Lz4, None};
    match space {
        Space::Log => [None; 7],
        Space::Raft | Space::State | Space::Access => [None, Lz4, Lz4, Lz4, Lz4, Lz4, Lz4],
    }
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

/// The column family of every space, each with its options.
fn space_descriptors() -> [ColumnFamilyDescriptor; 4] {
    // Column families do not inherit the database's options (`DB::open_cf` gives each one
    // RocksDB's defaults), so every space gets its options explicitly.
    let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    Space::ALL.map(|space| ColumnFamilyDescriptor::new(space.name(), space_options(space, &cache)))
}

/// The error of a failed open of the store in `dir`. Opening reads every table's footer, index,
/// filter and properties, so damage there shows now; when RocksDB blames the MANIFEST for it,
/// the table that fails on its own is named instead.
fn open_error(dir: &Path, e: rocksdb::Error) -> StorageError {
    if e.kind() != ErrorKind::Corruption {
        return engine(e);
    }
    let error = corruption("unknown", "(open)".to_string(), &e.into_string());
    if error.file().is_some_and(|f| f.ends_with(".sst")) {
        return error;
    }
    let StorageError::Corruption { reason: opened, .. } = &error else {
        return error;
    };
    let Some(table) = damaged_table(dir) else {
        return error;
    };
    let name = table.path.rsplit('/').next().unwrap_or(&table.path);
    let (reason, _) = split_file(
        table
            .message
            .strip_prefix("Corruption: ")
            .unwrap_or(&table.message),
    );
    StorageError::Corruption {
        space: table.space.unwrap_or("unknown"),
        key: "(open)".to_string(),
        reason: format!("table file {name}: {reason} (the open reported: {opened})"),
        file: Some(table.path),
    }
}

/// A table file that fails when read on its own.
struct DamagedTable {
    path: String,
    /// The space whose table it is, when the store's MANIFEST still says.
    space: Option<&'static str>,
    /// RocksDB's message.
    message: String,
}

/// The first table file of the store in `dir` that fails when opened and checked on its own
/// (footer, properties, index, filter and every block against its checksum), or `None`.
///
/// RocksDB loads every table while it replays the MANIFEST at open, and a table that fails to
/// load there (its properties block unreadable, say) is reported as corruption of the MANIFEST.
/// Its C API has no table reader, but external-file ingestion opens and checks a table from a
/// path before it copies anything: each table is offered, followed by a path that does not
/// exist, to an empty scratch store, so the ingestion stops at the absent path when the table
/// passed and at the table when it did not. The store in `dir` is only read.
fn damaged_table(dir: &Path) -> Option<DamagedTable> {
    let scratch = tempfile::tempdir().ok()?;
    let mut opts = Options::default();
    opts.create_if_missing(true);
    let checker = DB::open(&opts, scratch.path().join("db")).ok()?;
    let absent = scratch.path().join("absent.sst");
    table_files(dir).into_iter().find_map(|(path, space)| {
        let message = check_table(&checker, &path, &absent)?;
        Some(DamagedTable {
            path: path.to_string_lossy().into_owned(),
            space,
            message,
        })
    })
}

/// The table files of the store in `dir`, oldest first, with their spaces: the live ones, from
/// an open that tolerates tables that do not load (`paranoid_checks` off, read-only), or every
/// `.sst` file in the directory when even that open fails.
fn table_files(dir: &Path) -> Vec<(std::path::PathBuf, Option<&'static str>)> {
    let mut opts = Options::default();
    opts.set_paranoid_checks(false);
    let live = DB::open_cf_descriptors_read_only(&opts, dir, space_descriptors(), false)
        .and_then(|db| db.live_files());
    let mut files: Vec<_> = match live {
        Ok(live) => live
            .into_iter()
            .map(|f| {
                let space = Space::ALL
                    .into_iter()
                    .find(|s| s.name() == f.column_family_name)
                    .map(Space::name);
                (dir.join(f.name.trim_start_matches('/')), space)
            })
            .collect(),
        Err(_) => std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "sst"))
                    .map(|p| (p, None))
                    .collect()
            })
            .unwrap_or_default(),
    };
    // Table files are numbered in the order they were written, with a fixed width.
    files.sort();
    files
}

/// RocksDB's message when the table at `table` fails to open or to pass its checksums, read by
/// offering it to `checker` for ingestion ahead of the path `absent`, which must not exist.
fn check_table(checker: &DB, table: &Path, absent: &Path) -> Option<String> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let paths = [
        CString::new(table.as_os_str().as_bytes()).ok()?,
        CString::new(absent.as_os_str().as_bytes()).ok()?,
    ];
    let list: Vec<*const c_char> = paths.iter().map(|p| p.as_ptr()).collect();
    let mut err: *mut c_char = std::ptr::null_mut();
    // SAFETY: `checker` is alive for the whole call; the options are created, used and
    // destroyed here, exactly once; `list` holds `list.len()` pointers to NUL-terminated strings
    // that `paths` keeps alive past the call. On failure RocksDB stores a malloc'd,
    // NUL-terminated message in `err`, copied and then freed with `rocksdb_free`, exactly once.
    #[allow(unsafe_code)]
    let message = unsafe {
        let opts = librocksdb_sys::rocksdb_ingestexternalfileoptions_create();
        // Copy (never move or link) whatever would be ingested: the table stays untouched.
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_move_files(opts, 0);
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_link_files(opts, 0);
        // A node's own tables, not ones made by a table writer: taken as they are.
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_allow_db_generated_files(opts, 1);
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_snapshot_consistency(opts, 0);
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_allow_blocking_flush(opts, 0);
        // Every block, not only those read to open the table.
        librocksdb_sys::rocksdb_ingestexternalfileoptions_set_verify_checksums_before_ingest(opts, 1);
        librocksdb_sys::rocksdb_ingest_external_file(
            checker.as_raw_ptr(),
            list.as_ptr(),
            list.len(),
            opts,
            &mut err,
        );
        librocksdb_sys::rocksdb_ingestexternalfileoptions_destroy(opts);
        if err.is_null() {
            None
        } else {
            let message = CStr::from_ptr(err).to_string_lossy().into_owned();
            librocksdb_sys::rocksdb_free(err.cast());
            Some(message)
        }
    };
    // No error at all would mean the absent path was found; any error other than corruption is
    // the absent path's (or the scratch store's), not the table's.
    message.filter(|m| m.starts_with("Corruption"))
}

/// Who holds RocksDB's lock on the store in `dir`, if anyone.
///
/// RocksDB locks `LOCK` with `fcntl(F_SETLK)` while a store is open for writing and never for a
/// read-only open, so a read-only open would go ahead on a running node's directory. The probe
/// asks with `F_OFD_GETLK`, which takes no lock and writes nothing: a stale `LOCK` left by a
/// killed node is not locked (the kernel dropped the lock with the process) and passes.
#[cfg(target_os = "linux")]
fn lock_holder(dir: &Path) -> Result<Option<String>, StorageError> {
    use std::os::fd::AsRawFd;
    let path = dir.join("LOCK");
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(StorageError::Engine(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    // SAFETY: `flock` is plain data, valid all zero; `fcntl` with `F_OFD_GETLK` only reads and
    // writes that struct, through a pointer valid for the call, on a descriptor `file` keeps
    // open.
    #[allow(unsafe_code)]
    let (rc, probe) = unsafe {
        let mut probe: libc::flock = std::mem::zeroed();
        probe.l_type = libc::F_WRLCK as libc::c_short;
        probe.l_whence = libc::SEEK_SET as libc::c_short;
        let rc = libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut probe);
        (rc, probe)
    };
    if rc != 0 {
        return Err(StorageError::Engine(format!(
            "cannot probe the lock on {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        )));
    }
    if probe.l_type == libc::F_UNLCK as libc::c_short {
        return Ok(None);
    }
    // Closing any descriptor of a file drops every `fcntl` lock this process holds on it: when
    // the holder is this very process (a store opened for writing here), closing the probe's
    // descriptor would silently unlock that store, so it stays open.
    std::mem::forget(file);
    Ok(Some(if probe.l_pid > 0 {
        format!("process {}", probe.l_pid)
    } else {
        "another process".to_string()
    }))
}

/// Elsewhere no probe: a read-only open there does not notice a running node.
#[cfg(not(target_os = "linux"))]
fn lock_holder(_dir: &Path) -> Result<Option<String>, StorageError> {
    Ok(None)
}

impl RocksStore {
    /// Opens (creating if missing) the store in `dir`.
    pub fn open(dir: &Path) -> Result<RocksStore, StorageError> {
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(2);
        let db =
            DB::open_cf_descriptors(&db_opts, dir, space_descriptors()).map_err(|e| open_error(dir, e))?;
        Ok(RocksStore { db })
    }

    /// Opens the existing store in `dir` for reading, writing nothing in `dir`: rows still only
    /// in the write-ahead log (a node killed before a flush) are replayed into memory and read
    /// like the rest. Refuses a directory whose `LOCK` another process holds (a running node),
    /// naming it. Every write to the returned store fails.
    pub fn open_read_only(dir: &Path) -> Result<RocksStore, StorageError> {
        // RocksDB would create a missing directory even for a read-only open.
        if !dir.join("CURRENT").is_file() {
            return Err(StorageError::Engine(format!(
                "{} holds no store (no CURRENT file)",
                dir.display()
            )));
        }
        if let Some(holder) = lock_holder(dir)? {
            return Err(StorageError::Engine(format!(
                "the store in {} is open in {holder}, which holds its LOCK",
                dir.display()
            )));
        }
        let db = DB::open_cf_descriptors_read_only(&Options::default(), dir, space_descriptors(), false)
            .map_err(|e| open_error(dir, e))?;
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

    fn compact(&self) -> Result<(), StorageError> {
        // Every space's memtable is flushed first: a write-ahead log file is deleted once no
        // column family has unflushed writes in it, so after these flushes none of the files
        // that held the old values is live (recycling, which would reuse them, is off).
        let mut flush = FlushOptions::default();
        flush.set_wait(true);
        for space in Space::ALL {
            self.db.flush_cf_opt(self.cf(space)?, &flush).map_err(engine)?;
        }
        // Then every level, the last one included, is rewritten: a compaction drops the
        // versions a later write or delete shadows, and forcing the bottommost level makes it
        // rewrite files a plain compaction would leave as they are.
        let mut opts = CompactOptions::default();
        opts.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        for space in Space::ALL {
            self.db
                .compact_range_cf_opt(self.cf(space)?, None::<&[u8]>, None::<&[u8]>, &opts);
        }
        Ok(())
    }

    fn space_bytes(&self, space: Space) -> Option<u64> {
        let cf = self.cf(space).ok()?;
        // Both are counters RocksDB keeps: reading them touches no file.
        let property = |name: &str| self.db.property_int_value_cf(cf, name).ok().flatten();
        Some(property("rocksdb.live-sst-files-size")? + property("rocksdb.cur-size-all-mem-tables")?)
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

    #[test]
    fn a_space_s_bytes_count_its_write_buffer_then_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(dir.path()).unwrap();
        let empty = store.space_bytes(Space::State).unwrap();
        let other = store.space_bytes(Space::Access).unwrap();
        // 1 MB that does not compress (a xorshift stream), so the files hold about as much.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut noise = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        };
        let mut batch = WriteBatch::new();
        for i in 0..1_000u32 {
            let value: Vec<u8> = (0..125).flat_map(|_| noise()).collect();
            batch.put(Space::State, i.to_be_bytes().to_vec(), value);
        }
        store.write(batch, Durability::Sync).unwrap();
        let buffered = store.space_bytes(Space::State).unwrap();
        assert!(
            buffered >= empty + 1_000_000,
            "{empty} -> {buffered} after 1 MB written"
        );
        // Flushed and compacted into files: still counted, once.
        store.compact().unwrap();
        let filed = store.space_bytes(Space::State).unwrap();
        assert!(
            (900_000..2 * buffered).contains(&filed),
            "{buffered} buffered -> {filed} in files"
        );
        // Another space holds none of it.
        let other_after = store.space_bytes(Space::Access).unwrap();
        assert!(other_after < other + 100_000, "{other} -> {other_after}");
    }

    /// Whether any file under `dir` holds `needle`.
    fn any_file_holds(dir: &Path, needle: &[u8]) -> bool {
        std::fs::read_dir(dir).unwrap().any(|entry| {
            let path = entry.unwrap().path();
            path.is_file()
                && std::fs::read(&path)
                    .unwrap()
                    .windows(needle.len())
                    .any(|w| w == needle)
        })
    }

    #[test]
    fn compact_leaves_no_overwritten_or_deleted_value_in_any_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(dir.path()).unwrap();
        let (secret, gone) = (
            b"marker-7f3a9c-overwritten".to_vec(),
            b"marker-51d0e2-deleted".to_vec(),
        );
        let mut b = WriteBatch::new();
        b.put(Space::State, b"k1".to_vec(), secret.clone());
        b.put(Space::Log, b"k2".to_vec(), gone.clone());
        store.write(b, Durability::Sync).unwrap();
        // In the write-ahead log now, then in a table file of each space.
        assert!(any_file_holds(dir.path(), &secret));
        store.compact().unwrap();
        assert!(any_file_holds(dir.path(), &secret) && any_file_holds(dir.path(), &gone));

        let mut b = WriteBatch::new();
        b.put(Space::State, b"k1".to_vec(), b"redacted".to_vec());
        b.delete(Space::Log, b"k2".to_vec());
        store.write(b, Durability::Sync).unwrap();
        assert!(
            any_file_holds(dir.path(), &secret),
            "the old version is still on disk"
        );
        store.compact().unwrap();
        assert!(
            !any_file_holds(dir.path(), &secret),
            "an overwritten value survived"
        );
        assert!(!any_file_holds(dir.path(), &gone), "a deleted value survived");
        assert_eq!(
            store.get(Space::State, b"k1").unwrap(),
            Some(b"redacted".to_vec())
        );
        assert_eq!(store.get(Space::Log, b"k2").unwrap(), None);
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

    /// Every file of `dir`: its name, length and contents, in name order.
    fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    }

    #[test]
    fn a_read_only_open_writes_nothing_and_reads_rows_only_in_the_log() {
        let dir = tempfile::tempdir().unwrap();
        one_table(dir.path(), 100);
        {
            // Closing does not flush: these rows stay in the write-ahead log alone.
            let store = RocksStore::open(dir.path()).unwrap();
            let mut b = WriteBatch::new();
            b.put(Space::Log, b"in-the-log".to_vec(), b"only".to_vec());
            store.write(b, Durability::Sync).unwrap();
        }
        let before = files_of(dir.path());
        assert!(
            before
                .iter()
                .any(|(name, bytes)| name.ends_with(".log") && !bytes.is_empty())
        );
        {
            let store = RocksStore::open_read_only(dir.path()).unwrap();
            assert_eq!(
                store.get(Space::Log, b"in-the-log").unwrap(),
                Some(b"only".to_vec())
            );
            let mut rows = 0;
            store
                .for_each(Space::State, &mut |_, _| {
                    rows += 1;
                    Ok(())
                })
                .unwrap();
            assert_eq!(rows, 100);
            store.verify_checksums().unwrap();
            let mut b = WriteBatch::new();
            b.put(Space::Log, b"k".to_vec(), b"v".to_vec());
            assert!(store.write(b, Durability::Sync).is_err());
        }
        assert!(
            before == files_of(dir.path()),
            "the read-only open changed the directory"
        );
    }

    #[test]
    fn a_read_only_open_refuses_a_directory_a_running_store_holds() {
        let dir = tempfile::tempdir().unwrap();
        let _running = RocksStore::open(dir.path()).unwrap();
        let Err(StorageError::Engine(message)) = RocksStore::open_read_only(dir.path()) else {
            panic!("a held store opened read-only");
        };
        assert!(message.contains("holds its LOCK"), "{message}");
        // The probe left the holder's lock in place (closing its descriptor would have dropped
        // the lock this process holds): a second probe still finds it.
        assert!(lock_holder(dir.path()).unwrap().is_some());
    }

    #[test]
    fn a_read_only_open_creates_nothing_where_no_store_is() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("db");
        assert!(RocksStore::open_read_only(&missing).is_err());
        assert!(!missing.exists());
    }

    /// Leaves the names in `table`'s properties block unsorted: the block's first entry holds
    /// the first name ("rocksdb.…") whole, after three one-byte varints (shared length 0, name
    /// length, value length); the second entry's first own byte is where its name departs from
    /// the first, and '!' there sorts it before the first. RocksDB then fails to load the table
    /// while it replays the MANIFEST, and blames the MANIFEST.
    fn unsort_properties(table: &Path) {
        let mut bytes = std::fs::read(table).unwrap();
        let first = bytes.windows(8).position(|w| w == b"rocksdb.").unwrap();
        let entry = first - 3;
        assert_eq!(bytes[entry], 0, "not the start of the properties block");
        let second = first + usize::from(bytes[entry + 1]) + usize::from(bytes[entry + 2]);
        bytes[second + 3] = b'!';
        std::fs::write(table, bytes).unwrap();
    }

    #[test]
    fn a_table_that_fails_to_load_at_open_is_named_not_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let table = one_table(dir.path(), 2000);
        unsort_properties(&table);
        let name = table.file_name().unwrap().to_str().unwrap();
        for (how, result) in [
            ("read-only", RocksStore::open_read_only(dir.path())),
            ("read-write", RocksStore::open(dir.path())),
        ] {
            let Err(e) = result else {
                panic!("{how}: a damaged table opened");
            };
            let StorageError::Corruption {
                space, reason, file, ..
            } = &e
            else {
                panic!("{how}: expected corruption, got {e:?}");
            };
            assert!(
                reason.starts_with(&format!(
                    "table file {name}: properties unsorted (the open reported: "
                )),
                "{how}: {reason}"
            );
            assert_eq!(file.as_deref(), Some(table.to_str().unwrap()), "{how}");
            assert_eq!(*space, "state", "{how}");
            assert!(!e.to_string().contains('/'), "{how}: a path in {e}");
        }
    }

    #[test]
    fn no_table_of_an_intact_store_is_taken_for_damaged() {
        let dir = tempfile::tempdir().unwrap();
        one_table(dir.path(), 100);
        let tables = table_files(dir.path());
        assert!(!tables.is_empty());
        assert!(damaged_table(dir.path()).is_none());
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
