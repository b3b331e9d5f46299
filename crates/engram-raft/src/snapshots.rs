//! Where a node keeps its snapshots: as chunk rows in the Raft space of its store, so a
//! snapshot is built, sent, received and installed a chunk at a time and is never whole in
//! memory (a snapshot of 10 M values is gigabytes).
//!
//! Rows (Raft space):
//! - `snapshot/chunk/<id><seq>`: the byte string of snapshot `id`, cut into chunks of
//!   [`CHUNK_BYTES`];
//! - `snapshot/current`: the metadata and [`StoredRef`] of the snapshot openraft is offered;
//! - `snapshot/installing`: written (synced) before an install replaces the first state row,
//!   deleted by the install's last batch. A node that finds it when it opens finishes that
//!   install before it serves anything, so a crash inside an install (which spans several
//!   batches) leaves no mixture of two states.
//!
//! Ids only grow. Each new current snapshot deletes the chunks of every other snapshot up to
//! its id, except the one it replaces (which may still be streaming to a peer) and received
//! snapshots still held (being received, or received and waiting for their install: a build
//! that finishes in between must not delete what the install is about to read); opening
//! deletes chunks nothing refers to (a build or receive cut short by a crash).

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use engram_core::durability::{Write, durability};
use engram_core::snapshot::{self, ChunkSource, SnapshotError, SnapshotReader};
use engram_core::{CoreError, planted};
use engram_storage::{Space, StorageError, Store, WriteBatch};
use serde::{Deserialize, Serialize};

use crate::SnapshotMeta;
use crate::codec::{decode, encode};

/// Bytes per snapshot chunk: one stored row and one message of a snapshot stream. The
/// simulation uses small chunks so its snapshots span many chunks and install batches.
pub const CHUNK_BYTES: usize = if cfg!(madsim) { 2 << 10 } else { 1 << 20 };
/// Bytes of records per install batch.
pub(crate) const INSTALL_BATCH_BYTES: usize = if cfg!(madsim) { 4 << 10 } else { 1 << 20 };

const CURRENT: &[u8] = b"snapshot/current";
const INSTALLING: &[u8] = b"snapshot/installing";
const CHUNK_PREFIX: &[u8] = b"snapshot/chunk/";
/// Rows of builds before chunked snapshots: the metadata and the whole byte string.
const LEGACY_META: &[u8] = b"snapshot/meta";
const LEGACY_DATA: &[u8] = b"snapshot/data";

fn chunk_key(id: u64, seq: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(CHUNK_PREFIX.len() + 12);
    key.extend_from_slice(CHUNK_PREFIX);
    key.extend_from_slice(&id.to_be_bytes());
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Adds to `batch` the deletion of every chunk of every snapshot id up to `upto` (inclusive)
/// but those in `keep`.
fn delete_chunks_except(batch: &mut WriteBatch, mut keep: Vec<u64>, upto: u64) {
    keep.sort_unstable();
    keep.dedup();
    let mut from = 0u64;
    for id in keep.into_iter().filter(|id| *id <= upto) {
        if from < id {
            batch.delete_range(Space::Raft, chunk_key(from, 0), chunk_key(id, 0));
        }
        from = id.saturating_add(1);
    }
    if from <= upto {
        let end = match upto.checked_add(1) {
            Some(next) => chunk_key(next, 0),
            None => chunk_key(u64::MAX, u32::MAX),
        };
        batch.delete_range(Space::Raft, chunk_key(from, 0), end);
    }
}

fn storage_err(e: StorageError) -> io::Error {
    io::Error::other(e)
}

/// Whether `store` records a snapshot install in progress (the node finishes it when it
/// opens); checkers use it to tell a half-replaced state that will be finished from one
/// nothing will.
pub fn install_recorded(store: &dyn Store) -> io::Result<bool> {
    Ok(store.get(Space::Raft, INSTALLING).map_err(storage_err)?.is_some())
}

/// Which stored byte string a snapshot is, and what it must hash to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRef {
    pub id: u64,
    pub chunks: u32,
    pub bytes: u64,
    /// blake3 of the whole byte string.
    pub data_hash: [u8; 32],
}

/// A snapshot and its metadata as a row records them.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Recorded {
    meta: SnapshotMeta,
    data: StoredRef,
}

/// A snapshot held in this node's store, read a chunk at a time: openraft's snapshot data.
#[derive(Clone)]
pub struct StoredSnapshot {
    store: Arc<dyn Store>,
    pub data: StoredRef,
    /// Set on a received snapshot: keeps its chunks from being deleted while any copy of it
    /// lives (until openraft installs or drops it).
    _held: Option<Arc<Held>>,
}

impl fmt::Debug for StoredSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "StoredSnapshot(id {}, {} bytes in {} chunks)",
            self.data.id, self.data.bytes, self.data.chunks
        )
    }
}

impl StoredSnapshot {
    /// Chunk `seq`; an error if it is gone (a newer snapshot replaced this one meanwhile).
    pub fn read_chunk(&self, seq: u32) -> io::Result<Vec<u8>> {
        self.store
            .get(Space::Raft, &chunk_key(self.data.id, seq))
            .map_err(storage_err)?
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "chunk {seq} of snapshot {} is gone (a newer snapshot replaced it)",
                        self.data.id
                    ),
                )
            })
    }

    /// Records that a row names this snapshot from now on (an install's record, or the
    /// current snapshot's), so its chunks are no longer the receive's to delete (see [`Held`]).
    pub(crate) fn mark_recorded(&self) {
        if let Some(held) = &self._held {
            held.recorded.store(true, Ordering::SeqCst);
        }
    }

    /// The whole byte string (tests).
    pub fn to_bytes(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        for seq in 0..self.data.chunks {
            out.extend_from_slice(&self.read_chunk(seq)?);
        }
        Ok(out)
    }
}

impl ChunkSource for StoredSnapshot {
    fn total_bytes(&self) -> u64 {
        self.data.bytes
    }
    fn chunk_count(&self) -> u32 {
        self.data.chunks
    }
    fn chunk(&self, i: u32) -> Result<Vec<u8>, SnapshotError> {
        self.read_chunk(i)
            .map_err(|e| SnapshotError::Malformed(e.to_string()))
    }
}

/// A node's snapshot rows. Shared by the state machine (build, install) and the Raft service
/// (receive).
pub struct Snapshots {
    store: Arc<dyn Store>,
    next_id: AtomicU64,
    /// Ids of received snapshots whose chunks no new current snapshot may delete (see
    /// [`Held`]).
    held: HeldIds,
    /// Held while a snapshot is built or installed: openraft builds in a task of its own, and
    /// an install spans several batches, so a build must not read the state halfway through one.
    pub(crate) busy: tokio::sync::Mutex<()>,
    /// The node's job log: builds, installs and purges are recorded in it.
    pub(crate) jobs: Arc<crate::jobs::Jobs>,
    /// Odd while an install is replacing the state: reads check it before and after (see
    /// `RaftNode::read_state`), since between an install's batches the state is part old,
    /// part new.
    installs: AtomicU64,
}

impl Snapshots {
    /// Opens the snapshot rows of `store`: moves a snapshot stored whole by an older build into
    /// chunks, and deletes chunks no snapshot refers to. Returns an install that a crash cut
    /// short, which the caller must finish before anything reads the state.
    pub(crate) fn open(
        store: Arc<dyn Store>,
    ) -> io::Result<(Snapshots, Option<(SnapshotMeta, StoredSnapshot)>)> {
        let last = store
            .scan_rev(Space::Raft, CHUNK_PREFIX, Some(&chunk_key(u64::MAX, u32::MAX)), 1)
            .map_err(storage_err)?;
        let next_id = match last.first() {
            Some((key, _)) if key.len() == CHUNK_PREFIX.len() + 12 => {
                let mut id = [0u8; 8];
                id.copy_from_slice(&key[CHUNK_PREFIX.len()..CHUNK_PREFIX.len() + 8]);
                u64::from_be_bytes(id).saturating_add(1)
            }
            _ => 1,
        };
        let jobs = crate::jobs::Jobs::open(store.clone()).map_err(|e| io::Error::other(e.to_string()))?;
        let snapshots = Snapshots {
            jobs,
            store,
            next_id: AtomicU64::new(next_id),
            held: HeldIds::default(),
            busy: tokio::sync::Mutex::new(()),
            installs: AtomicU64::new(0),
        };
        snapshots.migrate_legacy()?;
        // Nothing streams from a node that is only opening.
        snapshots.drop_superseded()?;
        let installing = snapshots
            .recorded(INSTALLING)?
            .map(|r| (r.meta, snapshots.stored(r.data)));
        Ok((snapshots, installing))
    }

    /// Deletes every snapshot's chunks but the current one's and an install's under way: at
    /// open, when nothing can be reading any other.
    fn drop_superseded(&self) -> io::Result<()> {
        let keep: Vec<u64> = [self.recorded(CURRENT)?, self.recorded(INSTALLING)?]
            .into_iter()
            .flatten()
            .map(|r| r.data.id)
            .collect();
        let mut batch = WriteBatch::new();
        delete_chunks_except(&mut batch, keep, u64::MAX);
        self.store
            .write(batch, durability(Write::SnapshotChunk))
            .map_err(storage_err)
    }

    fn recorded(&self, key: &[u8]) -> io::Result<Option<Recorded>> {
        match self.store.get(Space::Raft, key).map_err(storage_err)? {
            Some(bytes) => Ok(Some(decode("snapshot record", &bytes)?)),
            None => Ok(None),
        }
    }

    fn stored(&self, data: StoredRef) -> StoredSnapshot {
        StoredSnapshot {
            store: self.store.clone(),
            data,
            _held: None,
        }
    }

    fn held(&self) -> MutexGuard<'_, BTreeSet<u64>> {
        lock_held(&self.held)
    }

    /// An older build kept the latest snapshot as one row: re-store it as chunks.
    fn migrate_legacy(&self) -> io::Result<()> {
        let Some(meta) = self.store.get(Space::Raft, LEGACY_META).map_err(storage_err)? else {
            return Ok(());
        };
        let meta: SnapshotMeta = decode("snapshot meta", &meta)?;
        let mut batch = WriteBatch::new();
        if let Some(data) = self.store.get(Space::Raft, LEGACY_DATA).map_err(storage_err)? {
            let mut receiving = self.receive(data.len() as u64)?;
            for piece in data.chunks(CHUNK_BYTES) {
                receiving.push(piece)?;
            }
            let data_hash = *blake3::hash(&data).as_bytes();
            let stored = receiving.finish(&data_hash)?;
            // The batch below names it current: its chunks are that row's from here.
            stored.mark_recorded();
            batch = self.current_rows(&meta, &stored.data)?;
        }
        batch.delete(Space::Raft, LEGACY_META.to_vec());
        batch.delete(Space::Raft, LEGACY_DATA.to_vec());
        self.store
            .write(batch, durability(Write::LegacyMigration))
            .map_err(storage_err)
    }

    /// The snapshot openraft is offered, if any.
    pub fn current(&self) -> io::Result<Option<(SnapshotMeta, StoredSnapshot)>> {
        Ok(self.recorded(CURRENT)?.map(|r| (r.meta, self.stored(r.data))))
    }

    /// Rows that make `data` the current snapshot, and delete every other snapshot with an id
    /// below it or the one it replaces, except that one (it may still be streaming to a peer)
    /// and the received snapshots still held. A receive that starts after this reads the held
    /// ids takes an id above `data`'s, which the deletion does not reach.
    fn current_rows(&self, meta: &SnapshotMeta, data: &StoredRef) -> io::Result<WriteBatch> {
        let mut batch = WriteBatch::new();
        let previous = self.recorded(CURRENT)?.map(|r| r.data.id);
        let upto = previous.unwrap_or(0).max(data.id);
        let keep = previous
            .into_iter()
            .chain([data.id])
            .chain(self.held().iter().copied())
            .collect();
        delete_chunks_except(&mut batch, keep, upto);
        let row = Recorded {
            meta: meta.clone(),
            data: data.clone(),
        };
        batch.put(Space::Raft, CURRENT.to_vec(), encode(&row)?);
        Ok(batch)
    }

    /// Records `data` as the current snapshot (synced, with every chunk written before it).
    pub(crate) fn set_current(&self, meta: &SnapshotMeta, data: &StoredRef) -> io::Result<()> {
        let batch = self.current_rows(meta, data)?;
        self.store
            .write(batch, durability(Write::SnapshotCurrent))
            .map_err(storage_err)
    }

    /// Builds a snapshot of the state space, chunk by chunk, from one consistent view; also
    /// returns the `wanted` rows as they are in it.
    pub(crate) fn build(&self, wanted: &[&[u8]]) -> io::Result<(StoredSnapshot, snapshot::Captured)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut seq = 0u32;
        let store = &self.store;
        let result = snapshot::write_state(&**store, wanted, CHUNK_BYTES, &mut |chunk| {
            let mut batch = WriteBatch::new();
            batch.put(Space::Raft, chunk_key(id, seq), chunk);
            seq += 1;
            store
                .write(batch, durability(Write::SnapshotChunk))
                .map_err(CoreError::Storage)
        });
        let (sealed, captured) = match result {
            Ok(done) => done,
            Err(e) => {
                self.discard(id);
                return Err(io::Error::other(e));
            }
        };
        let data = StoredRef {
            id,
            chunks: seq,
            bytes: sealed.bytes,
            data_hash: sealed.data_hash,
        };
        Ok((self.stored(data), captured))
    }

    /// Starts storing a snapshot of `total_bytes` that arrives in pieces.
    pub fn receive(&self, total_bytes: u64) -> io::Result<Receiving<'_>> {
        let reader = SnapshotReader::new(total_bytes).map_err(io::Error::other)?;
        // The id is taken and held under one lock, so no new current snapshot can read the
        // held ids between the two and delete this receive's chunks.
        let id = {
            let mut held = self.held();
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            held.insert(id);
            id
        };
        Ok(Receiving {
            snapshots: self,
            held: Some(Held {
                ids: self.held.clone(),
                store: self.store.clone(),
                id,
                recorded: AtomicBool::new(false),
            }),
            id,
            total_bytes,
            chunk: Vec::with_capacity(CHUNK_BYTES.min(total_bytes as usize)),
            seq: 0,
            hasher: blake3::Hasher::new(),
            reader: Some(reader),
        })
    }

    /// Deletes the chunks of snapshot `id` (a build or receive that failed); best effort, as
    /// opening the store deletes them too.
    fn discard(&self, id: u64) {
        discard(&*self.store, id);
    }

    /// Deletes the chunks of a refused snapshot, unless it is the current one.
    pub(crate) fn discard_unless_current(&self, id: u64) {
        discard_unless_current(&*self.store, id);
    }

    /// The install counter: odd while an install is replacing the state.
    pub(crate) fn install_epoch(&self) -> u64 {
        self.installs.load(Ordering::SeqCst)
    }

    /// Marks the state as being replaced until the returned guard is dropped.
    pub(crate) fn replacing(&self) -> Replacing<'_> {
        self.installs.fetch_add(1, Ordering::SeqCst);
        Replacing(self)
    }

    /// Records, synced, that an install of `data` is about to replace the state.
    pub(crate) fn begin_install(&self, meta: &SnapshotMeta, data: &StoredRef) -> io::Result<()> {
        if planted::active(planted::PlantedBug::UnrecordedInstall) {
            return Ok(());
        }
        let row = Recorded {
            meta: meta.clone(),
            data: data.clone(),
        };
        let mut batch = WriteBatch::new();
        batch.put(Space::Raft, INSTALLING.to_vec(), encode(&row)?);
        self.store
            .write(batch, durability(Write::InstallBegin))
            .map_err(storage_err)
    }

    /// The rows an install's last batch carries besides the state: `data` becomes current and
    /// the install record goes.
    pub(crate) fn end_install_rows(&self, meta: &SnapshotMeta, data: &StoredRef) -> io::Result<WriteBatch> {
        let mut batch = self.current_rows(meta, data)?;
        batch.delete(Space::Raft, INSTALLING.to_vec());
        Ok(batch)
    }
}

/// While alive, the state is being replaced (the install counter is odd).
pub(crate) struct Replacing<'a>(&'a Snapshots);

impl Drop for Replacing<'_> {
    fn drop(&mut self) {
        self.0.installs.fetch_add(1, Ordering::SeqCst);
    }
}

/// A snapshot being received: its chunks are stored as they come, its structure checked
/// record by record, and its hash compared with the declared one at the end. Dropped before
/// [`Receiving::finish`], its chunks are deleted.
pub struct Receiving<'a> {
    snapshots: &'a Snapshots,
    /// Moves into the [`StoredSnapshot`] once the snapshot is complete.
    held: Option<Held>,
    id: u64,
    total_bytes: u64,
    /// Bytes of the next chunk to store: received pieces are re-cut to [`CHUNK_BYTES`].
    chunk: Vec<u8>,
    seq: u32,
    hasher: blake3::Hasher,
    /// `None` once finished.
    reader: Option<SnapshotReader>,
}

impl Receiving<'_> {
    pub fn push(&mut self, mut piece: &[u8]) -> io::Result<()> {
        let reader = self
            .reader
            .as_mut()
            .ok_or_else(|| io::Error::other("snapshot already received"))?;
        reader.push(piece, &mut |_, _| Ok(())).map_err(io::Error::other)?;
        self.hasher.update(piece);
        while !piece.is_empty() {
            let take = (CHUNK_BYTES - self.chunk.len()).min(piece.len());
            self.chunk.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
            if self.chunk.len() == CHUNK_BYTES {
                self.store_chunk()?;
            }
        }
        Ok(())
    }

    fn store_chunk(&mut self) -> io::Result<()> {
        let chunk = std::mem::replace(&mut self.chunk, Vec::with_capacity(CHUNK_BYTES));
        let mut batch = WriteBatch::new();
        batch.put(Space::Raft, chunk_key(self.id, self.seq), chunk);
        self.seq += 1;
        self.snapshots
            .store
            .write(batch, durability(Write::SnapshotChunk))
            .map_err(storage_err)
    }

    /// Checks that the whole snapshot arrived, is well formed and hashes to `declared`.
    pub fn finish(mut self, declared: &[u8; 32]) -> io::Result<StoredSnapshot> {
        if !self.chunk.is_empty() {
            self.store_chunk()?;
        }
        if let Some(reader) = self.reader.take() {
            reader.finish().map_err(io::Error::other)?;
        }
        if self.hasher.finalize().as_bytes() != declared {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "snapshot data does not match the hash its header declares",
            ));
        }
        let chunks = std::mem::replace(&mut self.seq, KEPT);
        let mut stored = self.snapshots.stored(StoredRef {
            id: self.id,
            chunks,
            bytes: self.total_bytes,
            data_hash: *declared,
        });
        stored._held = self.held.take().map(Arc::new);
        Ok(stored)
    }
}

/// `Receiving::seq` once the snapshot is complete and its chunks are kept.
const KEPT: u32 = u32::MAX;

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        if self.seq != KEPT {
            self.snapshots.discard(self.id);
        }
    }
}

/// Ids of received snapshots whose chunks must stay (see [`Snapshots::current_rows`]).
type HeldIds = Arc<Mutex<BTreeSet<u64>>>;

fn lock_held(ids: &HeldIds) -> MutexGuard<'_, BTreeSet<u64>> {
    // The set is left whole by every holder (an insert or a remove), so a panic elsewhere
    // while it was locked does not make it wrong.
    ids.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deletes the chunks of snapshot `id`; best effort, as opening the store deletes chunks no
/// snapshot names too.
fn discard(store: &dyn Store, id: u64) {
    let mut batch = WriteBatch::new();
    batch.delete_range(Space::Raft, chunk_key(id, 0), chunk_key(id.saturating_add(1), 0));
    let _ = store.write(batch, durability(Write::SnapshotChunk));
}

/// Deletes the chunks of snapshot `id` unless `snapshot/current` names it.
fn discard_unless_current(store: &dyn Store, id: u64) {
    let current = store
        .get(Space::Raft, CURRENT)
        .ok()
        .flatten()
        .and_then(|bytes| decode::<Recorded>("snapshot record", &bytes).ok());
    if current.is_some_and(|r| r.data.id == id) {
        return;
    }
    discard(store, id);
}

/// Keeps received snapshot `id` from deletion by a new current snapshot until dropped: from
/// the start of its receive until openraft begins to install it (it is then recorded as being
/// installed, then current) or drops it unused (an older snapshot than the state it would
/// replace), when its chunks go at once: they may hold values a redaction since took, which a
/// purge must not leave.
struct Held {
    ids: HeldIds,
    store: Arc<dyn Store>,
    id: u64,
    /// Set once a row names it: an install's record (a node stopped inside the install
    /// finishes it from the chunks when it opens), or the current snapshot's (an older build's
    /// whole snapshot moved into chunks). Once current it may become the snapshot a later one
    /// replaced, still streaming to a peer; its chunks then go by the usual rule.
    recorded: AtomicBool,
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.recorded.load(Ordering::SeqCst) {
            discard_unless_current(&*self.store, self.id);
        }
        lock_held(&self.ids).remove(&self.id);
    }
}
