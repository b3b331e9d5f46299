//! Snapshots kept, sent and installed a chunk at a time: the stored chunks are the core's
//! snapshot byte string, a receive that does not match its declared hash leaves nothing
//! behind, an install that a crash cuts short is finished when the node opens, and a
//! snapshot stored whole by an older build is moved into chunks.

#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use engram_raft::{CHUNK_BYTES, Snapshot, StateMachine};
use engram_storage::{
    Durability, KeyValue, MemStore, ReadView, Space, StorageError, Store, Visitor, WriteBatch,
};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};

/// A node's state machine after genesis and writes up to log index `last`, and its snapshot.
async fn source(last: u64) -> (Arc<MemStore>, StateMachine, Snapshot) {
    let store = Arc::new(MemStore::new());
    let mut sm = common::open(store.clone(), 1);
    let entries = common::genesis_and_writes(1, last);
    sm.apply(futures::stream::iter(entries.into_iter().map(|e| Ok((e, None)))))
        .await
        .unwrap();
    let snapshot = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    (store, sm, snapshot)
}

/// A space's rows as (count, blake3 over every key and value): equal exactly when the rows
/// are, and short enough to read in a failure.
fn rows(store: &dyn Store, space: Space) -> (u64, String) {
    let mut hasher = blake3::Hasher::new();
    let mut count = 0;
    store
        .for_each(space, &mut |k, v| {
            for part in [k, v] {
                hasher.update(&(part.len() as u64).to_be_bytes());
                hasher.update(part);
            }
            count += 1;
            Ok(())
        })
        .unwrap();
    (count, hasher.finalize().to_hex().to_string())
}

/// Stores `bytes` on `sm`'s node as a received snapshot, in pieces of `piece` bytes.
fn receive(
    sm: &StateMachine,
    bytes: &[u8],
    piece: usize,
    declared: [u8; 32],
) -> std::io::Result<engram_raft::StoredSnapshot> {
    let snapshots = sm.snapshots();
    let mut receiving = snapshots.receive(bytes.len() as u64)?;
    for p in bytes.chunks(piece) {
        receiving.push(p)?;
    }
    receiving.finish(&declared)
}

#[tokio::test]
async fn a_snapshot_is_stored_in_chunks_that_are_the_state_as_one_byte_string() {
    let (store, _sm, snapshot) = source(6_000).await;
    let data = &snapshot.snapshot;
    assert!(
        data.data.chunks >= 3,
        "{data:?}: the test needs a snapshot of several chunks"
    );
    for seq in 0..data.data.chunks {
        let chunk = data.read_chunk(seq).unwrap();
        let last = seq + 1 == data.data.chunks;
        assert!(
            chunk.len() == CHUNK_BYTES || (last && chunk.len() <= CHUNK_BYTES),
            "chunk {seq}: {} bytes",
            chunk.len()
        );
    }
    let whole = data.to_bytes().unwrap();
    assert_eq!(whole, engram_core::snapshot::export(&*store).unwrap());
    assert_eq!(whole.len() as u64, data.data.bytes);
    assert_eq!(*blake3::hash(&whole).as_bytes(), data.data.data_hash);
    assert_eq!(snapshot.meta.last_log_id.map(|id| id.index), Some(6_000));
}

#[tokio::test]
async fn a_received_snapshot_installs_and_equals_the_source_state() {
    let (source_store, _sm, snapshot) = source(6_000).await;
    let bytes = snapshot.snapshot.to_bytes().unwrap();

    let target = Arc::new(MemStore::new());
    let mut sm = common::open(target.clone(), 1);
    // Pieces that do not line up with chunks or records.
    let received = receive(&sm, &bytes, 77_777, snapshot.snapshot.data.data_hash).unwrap();
    assert_eq!(received.to_bytes().unwrap(), bytes);
    sm.install_snapshot(&snapshot.meta, received).await.unwrap();

    assert_eq!(rows(&*target, Space::State), rows(&*source_store, Space::State));
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, snapshot.meta.last_log_id);
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.snapshot.to_bytes().unwrap(), bytes);
}

#[tokio::test]
async fn a_receive_that_does_not_match_its_hash_or_length_leaves_no_chunk() {
    let (_, _sm, snapshot) = source(600).await;
    let bytes = snapshot.snapshot.to_bytes().unwrap();
    let target = Arc::new(MemStore::new());
    let sm = common::open(target.clone(), 1);
    let before = rows(&*target, Space::Raft);

    let err = receive(&sm, &bytes, 4_096, [7; 32]).unwrap_err();
    assert!(err.to_string().contains("does not match the hash"), "{err}");
    assert_eq!(rows(&*target, Space::Raft), before);

    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    let declared = *blake3::hash(&flipped).as_bytes();
    assert!(
        receive(&sm, &flipped, 4_096, declared).is_err(),
        "the snapshot's own digest no longer matches"
    );
    assert_eq!(rows(&*target, Space::Raft), before);

    let snapshots = sm.snapshots();
    let mut short = snapshots.receive(bytes.len() as u64 + 10).unwrap();
    short.push(&bytes).unwrap();
    let err = short.finish(&snapshot.snapshot.data.data_hash).unwrap_err();
    assert!(err.to_string().contains("ended after"), "{err}");
    let mut long = snapshots.receive(bytes.len() as u64 - 1).unwrap();
    let err = long.push(&bytes).unwrap_err();
    assert!(err.to_string().contains("more than the"), "{err}");
    drop(long);
    assert_eq!(rows(&*target, Space::Raft), before);
}

/// A memory store whose writes fail, as a crashing process's would, once `allowed` more have
/// succeeded.
struct CrashesAfter {
    inner: Arc<MemStore>,
    allowed: AtomicUsize,
}

impl ReadView for CrashesAfter {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.get(space, key)
    }
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.inner.scan(space, start, end, limit)
    }
    fn scan_rev(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.inner.scan_rev(space, start, end, limit)
    }
}

impl Store for CrashesAfter {
    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), StorageError> {
        let left = self.allowed.load(Ordering::SeqCst);
        if left == 0 {
            return Err(StorageError::Engine("the process crashed".into()));
        }
        self.allowed.store(left - 1, Ordering::SeqCst);
        self.inner.write(batch, durability)
    }
    fn for_each(&self, space: Space, visit: &mut Visitor<'_>) -> Result<(), StorageError> {
        self.inner.for_each(space, visit)
    }
}

#[tokio::test]
async fn an_install_cut_short_by_a_crash_is_finished_when_the_node_opens() {
    let (source_store, _sm, snapshot) = source(6_000).await;
    let bytes = snapshot.snapshot.to_bytes().unwrap();

    // The target has a chain of its own (another history, shorter) that the install replaces.
    let mem = Arc::new(MemStore::new());
    let store = Arc::new(CrashesAfter {
        inner: mem.clone(),
        allowed: AtomicUsize::new(usize::MAX),
    });
    let mut sm = common::open(store.clone(), 1);
    let entries = common::genesis_and_writes(1, 40);
    sm.apply(futures::stream::iter(entries.into_iter().map(|e| Ok((e, None)))))
        .await
        .unwrap();
    let received = receive(&sm, &bytes, 1 << 20, snapshot.snapshot.data.data_hash).unwrap();
    // The install's record, its first batch (which clears the state) and one more, then the
    // crash: of the two unsynced batches only the first survives.
    store.allowed.store(3, Ordering::SeqCst);
    sm.install_snapshot(&snapshot.meta, received).await.unwrap_err();
    drop(sm);
    mem.crash_torn(1);
    assert_ne!(
        rows(&*mem, Space::State),
        rows(&*source_store, Space::State),
        "the crash left a partial install"
    );

    let mut sm = common::open(mem.clone(), 1);
    assert_eq!(rows(&*mem, Space::State), rows(&*source_store, Space::State));
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, snapshot.meta.last_log_id);
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.snapshot.to_bytes().unwrap(), bytes);

    // Opened again, there is nothing left to finish and nothing changes.
    drop(sm);
    let _sm = common::open(mem.clone(), 1);
    assert_eq!(rows(&*mem, Space::State), rows(&*source_store, Space::State));
}

#[tokio::test]
async fn a_snapshot_stored_whole_by_an_older_build_is_moved_into_chunks() {
    let (store, sm, snapshot) = source(600).await;
    let bytes = snapshot.snapshot.to_bytes().unwrap();
    drop(sm);
    // What an older build left: the metadata and the whole byte string, one row each, and no
    // chunks.
    let mut batch = WriteBatch::new();
    batch.delete_range(Space::Raft, b"snapshot/".to_vec(), b"snapshot0".to_vec());
    batch.put(
        Space::Raft,
        b"snapshot/meta".to_vec(),
        engram_raft::codec::encode(&snapshot.meta).unwrap(),
    );
    batch.put(Space::Raft, b"snapshot/data".to_vec(), bytes.clone());
    store.write(batch, Durability::Sync).unwrap();

    let mut sm = common::open(store.clone(), 1);
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, snapshot.meta);
    assert_eq!(current.snapshot.to_bytes().unwrap(), bytes);
    assert_eq!(current.snapshot.data.data_hash, *blake3::hash(&bytes).as_bytes());
    assert!(store.get(Space::Raft, b"snapshot/data").unwrap().is_none());
    assert!(store.get(Space::Raft, b"snapshot/meta").unwrap().is_none());
}

#[tokio::test]
async fn a_new_snapshot_deletes_all_but_the_one_it_replaces() {
    let store = Arc::new(MemStore::new());
    let mut sm = common::open(store.clone(), 1);
    let mut entries = common::genesis_and_writes(1, 900).into_iter();
    let mut built = Vec::new();
    for _ in 0..3 {
        let part: Vec<_> = entries.by_ref().take(300).collect();
        sm.apply(futures::stream::iter(part.into_iter().map(|e| Ok((e, None)))))
            .await
            .unwrap();
        built.push(
            sm.get_snapshot_builder()
                .await
                .build_snapshot()
                .await
                .unwrap()
                .snapshot,
        );
    }
    // The newest and the one before it (which may still be streaming to a peer) are kept.
    assert!(
        built[0].read_chunk(0).is_err(),
        "the oldest snapshot's chunks are deleted"
    );
    assert!(built[1].to_bytes().is_ok());
    assert!(built[2].to_bytes().is_ok());
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.snapshot.data, built[2].data);
}

/// Builds a snapshot of `sm`'s node.
async fn build(sm: &mut StateMachine) -> engram_raft::StoredSnapshot {
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
        .snapshot
}

#[tokio::test]
async fn builds_that_finish_during_a_receive_or_before_its_install_leave_its_chunks() {
    let (_, _source, snapshot) = source(1_500).await;
    let bytes = snapshot.snapshot.to_bytes().unwrap();
    let target = Arc::new(MemStore::new());
    let mut sm = common::open(target.clone(), 1);
    let entries = common::genesis_and_writes(1, 300);
    sm.apply(futures::stream::iter(entries.into_iter().map(|e| Ok((e, None)))))
        .await
        .unwrap();
    // A receive under way while two snapshots are built (each new current one deletes every
    // older id but the one it replaces).
    let snapshots = sm.snapshots();
    let mut receiving = snapshots.receive(bytes.len() as u64).unwrap();
    let (first, rest) = bytes.split_at(bytes.len() / 2);
    receiving.push(first).unwrap();
    build(&mut sm).await;
    build(&mut sm).await;
    receiving.push(rest).unwrap();
    let received = receiving.finish(&snapshot.snapshot.data.data_hash).unwrap();
    // Received, its install not begun yet: two more builds.
    build(&mut sm).await;
    let newest = build(&mut sm).await;
    assert!(received.data.id < newest.data.id, "{received:?} {newest:?}");
    assert_eq!(
        received.to_bytes().unwrap(),
        bytes,
        "a build deleted chunks of a snapshot received but not yet installed"
    );
    sm.install_snapshot(&snapshot.meta, received.clone())
        .await
        .unwrap();
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, snapshot.meta.last_log_id);

    // A received snapshot openraft drops without installing goes when its last copy does.
    let unused = receive(&sm, &bytes, 50_000, snapshot.snapshot.data.data_hash).unwrap();
    let id = unused.data.id;
    let probe = unused.clone();
    drop(unused);
    build(&mut sm).await;
    assert!(probe.read_chunk(0).is_ok(), "held while a copy of it lives: {id}");
    drop(probe);
    let mut chunk = b"snapshot/chunk/".to_vec();
    chunk.extend_from_slice(&id.to_be_bytes());
    chunk.extend_from_slice(&0u32.to_be_bytes());
    assert!(
        target.get(Space::Raft, &chunk).unwrap().is_none(),
        "the chunks of dropped snapshot {id} stay"
    );
    // The installed one is current and stays when openraft drops its copy.
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.snapshot.to_bytes().unwrap(), bytes);
}

#[tokio::test]
async fn opening_deletes_chunks_no_snapshot_names() {
    let (store, sm, snapshot) = source(300).await;
    drop(sm);
    // What a build or receive cut short by a crash leaves: chunks under an id nothing names.
    let mut orphan = b"snapshot/chunk/".to_vec();
    orphan.extend_from_slice(&99u64.to_be_bytes());
    orphan.extend_from_slice(&0u32.to_be_bytes());
    let mut batch = WriteBatch::new();
    batch.put(Space::Raft, orphan.clone(), b"half a snapshot".to_vec());
    store.write(batch, Durability::Sync).unwrap();

    let mut sm = common::open(store.clone(), 1);
    assert!(store.get(Space::Raft, &orphan).unwrap().is_none());
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(
        current.snapshot.to_bytes().unwrap(),
        snapshot.snapshot.to_bytes().unwrap()
    );
}

#[tokio::test]
async fn a_forged_snapshot_is_refused_before_anything_is_replaced_and_its_chunks_go() {
    let (source_store, _sm, snapshot) = source(300).await;
    // A forger with a member's snapshot: one audit entry altered, the checksum and the
    // stream's hash recomputed over the altered bytes.
    let mut records = engram_core::snapshot::parse(&snapshot.snapshot.to_bytes().unwrap()).unwrap();
    let row = records
        .iter_mut()
        .find(|(k, _)| k == &engram_core::keys::audit(5))
        .unwrap();
    let mut signed = engram_audit::SignedEntry::decode(&row.1).unwrap();
    signed.entry.tx_time_ns += 1;
    row.1 = signed.encode();
    let forged_store = MemStore::new();
    let mut batch = WriteBatch::new();
    for (k, v) in records {
        batch.put(Space::State, k, v);
    }
    forged_store.write(batch, Durability::Sync).unwrap();
    let forged = engram_core::snapshot::export(&forged_store).unwrap();

    let target = Arc::new(MemStore::new());
    let mut sm = common::open(target.clone(), 1);
    let entries = common::genesis_and_writes(1, 20);
    sm.apply(futures::stream::iter(entries.into_iter().map(|e| Ok((e, None)))))
        .await
        .unwrap();
    let (state, raft) = (rows(&*target, Space::State), rows(&*target, Space::Raft));
    let received = receive(&sm, &forged, 10_000, *blake3::hash(&forged).as_bytes()).unwrap();
    let err = sm.install_snapshot(&snapshot.meta, received).await.unwrap_err();
    // The altered entry no longer hashes to what the next one links to.
    assert!(
        err.to_string()
            .contains("broken audit chain: audit entry 6: prev_hash"),
        "{err}"
    );
    assert_eq!(rows(&*target, Space::State), state);
    assert_eq!(
        rows(&*target, Space::Raft),
        raft,
        "the refused snapshot's chunks are deleted"
    );
    assert_ne!(rows(&*target, Space::State), rows(&*source_store, Space::State));
}
