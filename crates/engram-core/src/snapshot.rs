//! The snapshot format: the whole state key space at one point in time, as a self-checking
//! byte string that is written and read a piece at a time.
//!
//! Layout: magic `ENGRAMSNAP`, format version (1 byte), then `(key, value)` records as
//! `u32`-length-prefixed byte strings, then the record count (`u64`) and blake3 over all
//! preceding bytes. The format is independent of the storage engine, so a snapshot built on a
//! RocksDB node installs on a simulated node and the other way round.
//!
//! Nothing here holds a whole snapshot in memory: [`SnapshotWriter`] cuts the byte string
//! into chunks as records arrive, [`SnapshotReader`] parses chunks as they come (keeping only
//! an unfinished record), and [`Installer`] writes the records into the store in bounded
//! batches. A snapshot of 10 M values is gigabytes; a node holds one chunk and one batch.
//!
//! Installing re-verifies the audit chain it carries, entry by entry (link, index, signature
//! by an admitted key), and that the chain head row agrees with the last entry and its Merkle
//! frontier, in a pass over the chunks before anything is replaced ([`check`]): a corrupt or
//! forged snapshot is refused and the current state stays as it was. The replacement itself
//! spans several batches; the caller makes it crash-safe (the Raft layer records the install
//! before its first batch and finishes it on restart).

use engram_audit::{ChainError, ChainVerifier, PublicKey, SignedEntry};
use engram_merkle::{Blake3, CompactTree};
use engram_storage::{KeyValue, Space, StorageError, Store, WriteBatch};
use thiserror::Error;

use crate::durability::{Write, durability};
use crate::rows::decode_row;
use crate::{ChainHead, CoreError, keys};

const MAGIC: &[u8] = b"ENGRAMSNAP";
pub const SNAPSHOT_FORMAT_VERSION: u8 = 1;
const HEADER_BYTES: usize = MAGIC.len() + 1;
/// Record count (`u64`) and the blake3 digest.
const TRAILER_BYTES: u64 = 8 + 32;
/// The largest key or value a reader accepts: far above any row Engram writes, and a bound on
/// what a forged length prefix can make a reader buffer.
pub const MAX_RECORD_PART_BYTES: usize = 64 << 20;

#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error("snapshot is malformed: {0}")]
    Malformed(String),
    #[error("snapshot checksum mismatch: the data was altered in transit or at rest")]
    Checksum,
    #[error("snapshot format version {0} is not supported (this build reads version 1)")]
    Version(u8),
    #[error("snapshot carries a broken audit chain: {0}")]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Core(#[from] CoreError),
}

impl From<StorageError> for SnapshotError {
    fn from(e: StorageError) -> Self {
        SnapshotError::Core(CoreError::Storage(e))
    }
}

/// What a finished [`SnapshotWriter`] produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// Length of the whole byte string.
    pub bytes: u64,
    pub records: u64,
    /// blake3 of the whole byte string (digest included): what a sender declares.
    pub data_hash: [u8; 32],
}

/// Builds the byte string record by record and hands it on in chunks of exactly
/// `chunk_bytes` (the last one shorter).
pub struct SnapshotWriter<'a> {
    chunk_bytes: usize,
    buf: Vec<u8>,
    /// Over everything before the digest (what the trailer's digest covers).
    body: blake3::Hasher,
    /// Over every byte.
    whole: blake3::Hasher,
    bytes: u64,
    records: u64,
    emit: &'a mut dyn FnMut(Vec<u8>) -> Result<(), CoreError>,
}

impl<'a> SnapshotWriter<'a> {
    pub fn new(chunk_bytes: usize, emit: &'a mut dyn FnMut(Vec<u8>) -> Result<(), CoreError>) -> Self {
        let chunk_bytes = chunk_bytes.max(1);
        let mut buf = Vec::with_capacity(chunk_bytes.min(1 << 20) + 64);
        buf.extend_from_slice(MAGIC);
        buf.push(SNAPSHOT_FORMAT_VERSION);
        SnapshotWriter {
            chunk_bytes,
            buf,
            body: blake3::Hasher::new(),
            whole: blake3::Hasher::new(),
            bytes: 0,
            records: 0,
            emit,
        }
    }

    pub fn record(&mut self, key: &[u8], value: &[u8]) -> Result<(), CoreError> {
        for part in [key, value] {
            let len = u32::try_from(part.len()).map_err(|_| {
                CoreError::corrupt(
                    "a state row",
                    format!("{} bytes is too long to snapshot", part.len()),
                )
            })?;
            self.buf.extend_from_slice(&len.to_be_bytes());
            self.buf.extend_from_slice(part);
        }
        self.records += 1;
        while self.buf.len() >= self.chunk_bytes {
            let rest = self.buf.split_off(self.chunk_bytes);
            let chunk = std::mem::replace(&mut self.buf, rest);
            self.body.update(&chunk);
            self.send(chunk)?;
        }
        Ok(())
    }

    fn send(&mut self, chunk: Vec<u8>) -> Result<(), CoreError> {
        self.whole.update(&chunk);
        self.bytes += chunk.len() as u64;
        (self.emit)(chunk)
    }

    /// Appends the trailer and hands on the rest.
    pub fn finish(mut self) -> Result<Sealed, CoreError> {
        self.buf.extend_from_slice(&self.records.to_be_bytes());
        self.body.update(&self.buf);
        let digest = self.body.finalize();
        self.buf.extend_from_slice(digest.as_bytes());
        let rest = std::mem::take(&mut self.buf);
        for piece in rest.chunks(self.chunk_bytes) {
            self.send(piece.to_vec())?;
        }
        Ok(Sealed {
            bytes: self.bytes,
            records: self.records,
            data_hash: *self.whole.finalize().as_bytes(),
        })
    }
}

/// Values of requested keys, in request order (`None`: absent).
pub type Captured = Vec<Option<Vec<u8>>>;

/// Writes the state space, from one consistent view, as chunks of `chunk_bytes` handed to
/// `emit`; also returns the values of the `wanted` keys as they are in the snapshot (`None`
/// where absent), read in the same pass so they describe the same instant.
pub fn write_state(
    store: &dyn Store,
    wanted: &[&[u8]],
    chunk_bytes: usize,
    emit: &mut dyn FnMut(Vec<u8>) -> Result<(), CoreError>,
) -> Result<(Sealed, Captured), CoreError> {
    let mut captured = vec![None; wanted.len()];
    let mut writer = SnapshotWriter::new(chunk_bytes, emit);
    let mut failed = None;
    store
        .for_each(Space::State, &mut |k, v| {
            if let Some(i) = wanted.iter().position(|want| *want == k) {
                captured[i] = Some(v.to_vec());
            }
            // The visitor speaks storage errors; keep the writer's own error to return it whole.
            writer.record(k, v).map_err(|e| {
                let message = e.to_string();
                failed = Some(e);
                StorageError::Engine(message)
            })
        })
        .map_err(|e| failed.take().unwrap_or(CoreError::Storage(e)))?;
    Ok((writer.finish()?, captured))
}

/// Serialises the state space from one consistent view, whole (tests and small tools; nodes
/// use [`write_state`]).
pub fn export(store: &dyn Store) -> Result<Vec<u8>, CoreError> {
    let mut bytes = Vec::new();
    write_state(store, &[], 1 << 20, &mut |chunk| {
        bytes.extend_from_slice(&chunk);
        Ok(())
    })?;
    Ok(bytes)
}

/// Parses a snapshot byte string that arrives in pieces of any size. Every record is handed to
/// the visitor as soon as it is complete; `finish` checks the record count and the digest.
/// Records visited before `finish` succeeds are not yet known to be genuine.
pub struct SnapshotReader {
    total: u64,
    offset: u64,
    /// Received record bytes not yet parsed: at most one unfinished record (and the header
    /// until it is checked).
    pending: Vec<u8>,
    header_checked: bool,
    trailer: Vec<u8>,
    body: blake3::Hasher,
    records: u64,
}

/// Receives each record of a snapshot as [`SnapshotReader`] parses it.
pub type RecordVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), SnapshotError> + 'a;

impl SnapshotReader {
    /// A reader for a byte string of `total_bytes` (the length is known up front: from the
    /// stored snapshot, or declared in a signed stream header).
    pub fn new(total_bytes: u64) -> Result<Self, SnapshotError> {
        if total_bytes < HEADER_BYTES as u64 + TRAILER_BYTES {
            return Err(SnapshotError::Malformed(format!(
                "{total_bytes} bytes is shorter than an empty snapshot"
            )));
        }
        Ok(SnapshotReader {
            total: total_bytes,
            offset: 0,
            pending: Vec::new(),
            header_checked: false,
            trailer: Vec::with_capacity(TRAILER_BYTES as usize),
            body: blake3::Hasher::new(),
            records: 0,
        })
    }

    pub fn push(&mut self, chunk: &[u8], visit: &mut RecordVisitor<'_>) -> Result<(), SnapshotError> {
        let end = self.offset.saturating_add(chunk.len() as u64);
        if end > self.total {
            return Err(SnapshotError::Malformed(format!(
                "more than the {} bytes declared",
                self.total
            )));
        }
        let records_end = self.total - TRAILER_BYTES;
        let digest_start = self.total - 32;
        let before = |limit: u64| (limit.saturating_sub(self.offset) as usize).min(chunk.len());
        let (body_part, record_part) = (before(digest_start), before(records_end));
        self.body.update(&chunk[..body_part]);
        self.pending.extend_from_slice(&chunk[..record_part]);
        self.trailer.extend_from_slice(&chunk[record_part..]);
        self.offset = end;
        self.parse(visit)
    }

    fn parse(&mut self, visit: &mut RecordVisitor<'_>) -> Result<(), SnapshotError> {
        let mut pos = 0;
        if !self.header_checked {
            if self.pending.len() < HEADER_BYTES {
                return Ok(());
            }
            if &self.pending[..MAGIC.len()] != MAGIC {
                return Err(SnapshotError::Malformed("missing magic header".into()));
            }
            let version = self.pending[MAGIC.len()];
            if version != SNAPSHOT_FORMAT_VERSION {
                return Err(SnapshotError::Version(version));
            }
            self.header_checked = true;
            pos = HEADER_BYTES;
        }
        let part_len = |bytes: &[u8], at: usize| -> Result<Option<usize>, SnapshotError> {
            let Some(prefix) = bytes.get(at..at + 4) else {
                return Ok(None);
            };
            let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
            if len > MAX_RECORD_PART_BYTES {
                return Err(SnapshotError::Malformed(format!(
                    "a record part of {len} bytes (at most {MAX_RECORD_PART_BYTES})"
                )));
            }
            Ok(Some(len))
        };
        loop {
            let rest = &self.pending[pos..];
            let Some(key_len) = part_len(rest, 0)? else { break };
            let Some(value_len) = part_len(rest, 4 + key_len)? else {
                break;
            };
            let record_len = 8 + key_len + value_len;
            if rest.len() < record_len {
                break;
            }
            visit(&rest[4..4 + key_len], &rest[8 + key_len..record_len])?;
            self.records += 1;
            pos += record_len;
        }
        self.pending.drain(..pos);
        Ok(())
    }

    /// Checks that every declared byte arrived, the records end exactly where the trailer
    /// starts, and the count and digest agree; returns the record count.
    pub fn finish(self) -> Result<u64, SnapshotError> {
        if self.offset != self.total {
            return Err(SnapshotError::Malformed(format!(
                "ended after {} of its {} bytes",
                self.offset, self.total
            )));
        }
        let (count, digest) = self.trailer.split_at(8);
        if self.body.finalize().as_bytes() != digest {
            return Err(SnapshotError::Checksum);
        }
        if !self.header_checked {
            return Err(SnapshotError::Malformed("missing magic header".into()));
        }
        if !self.pending.is_empty() {
            return Err(SnapshotError::Malformed(format!(
                "{} bytes of an unfinished record before the trailer",
                self.pending.len()
            )));
        }
        let mut count_bytes = [0u8; 8];
        count_bytes.copy_from_slice(count);
        let count = u64::from_be_bytes(count_bytes);
        if count != self.records {
            return Err(SnapshotError::Malformed(format!(
                "{} records, trailer says {count}",
                self.records
            )));
        }
        Ok(count)
    }
}

/// A snapshot readable a chunk at a time: stored chunks on a node, or bytes in memory.
pub trait ChunkSource {
    fn total_bytes(&self) -> u64;
    fn chunk_count(&self) -> u32;
    fn chunk(&self, i: u32) -> Result<Vec<u8>, SnapshotError>;
}

/// A whole snapshot in memory as a one-chunk source.
pub struct InMemory<'a>(pub &'a [u8]);

impl ChunkSource for InMemory<'_> {
    fn total_bytes(&self) -> u64 {
        self.0.len() as u64
    }
    fn chunk_count(&self) -> u32 {
        1
    }
    fn chunk(&self, _: u32) -> Result<Vec<u8>, SnapshotError> {
        Ok(self.0.to_vec())
    }
}

/// Checks the audit chain of a snapshot record by record, keeping only the chain verifier's
/// state and the Merkle frontier.
pub struct ChainCheck {
    verifier: ChainVerifier,
    tree: CompactTree<Blake3>,
    head: Option<ChainHead>,
}

impl Default for ChainCheck {
    fn default() -> Self {
        ChainCheck {
            verifier: ChainVerifier::new(),
            tree: CompactTree::new(),
            head: None,
        }
    }
}

impl ChainCheck {
    pub fn visit(&mut self, k: &[u8], v: &[u8]) -> Result<(), SnapshotError> {
        if k.first() == Some(&keys::AUDIT) {
            let signed =
                SignedEntry::decode(v).map_err(|e| SnapshotError::Malformed(format!("audit row: {e}")))?;
            let hash = self.verifier.push(&signed)?;
            self.tree.push(hash.as_bytes());
        } else if k == keys::META_HEAD {
            self.head = Some(decode_row("snapshot chain head", v)?);
        }
        Ok(())
    }

    /// The chain head the snapshot claims, once it is shown to agree with the entries.
    pub fn finish(self) -> Result<ChainHead, SnapshotError> {
        self.finish_with_keys().map(|checked| checked.head)
    }

    /// [`ChainCheck::finish`], with the chain's origin and the keys it trusts at its head.
    pub fn finish_with_keys(self) -> Result<CheckedChain, SnapshotError> {
        // A snapshot may be taken between two entries of an apply group, before the group's
        // attestation: this node attests that tail once installed (`Engine::reload`).
        self.verifier.finish_open_tail()?;
        let head = self.head.unwrap_or(ChainHead {
            next_entity: 1,
            ..ChainHead::default()
        });
        if head.index != self.verifier.checked()
            || (head.index > 0 && Some(head.hash) != self.verifier.head())
        {
            return Err(SnapshotError::Malformed(format!(
                "chain head row says index {} but the snapshot holds {} entries ending in another hash",
                head.index,
                self.verifier.checked()
            )));
        }
        // The receiving node extends the tree from this frontier: it must be the tree of the
        // entries just verified, or every later root and proof would be wrong.
        let frontier: Vec<[u8; 32]> = head.frontier.iter().map(|h| h.0).collect();
        if frontier != self.tree.frontier() {
            return Err(SnapshotError::Malformed(
                "the chain head's Merkle frontier is not the tree of the snapshot's entries".into(),
            ));
        }
        let origin = self.verifier.origin().map(str::to_string);
        let active = self.verifier.active_keys();
        let keys = self
            .verifier
            .keys()
            .values()
            .filter(|record| active.contains(&record.key))
            .map(|record| (record.node_id, record.key))
            .collect();
        Ok(CheckedChain {
            head,
            origin,
            active_keys: keys,
        })
    }
}

/// What [`ChainCheck::finish_with_keys`] established about a snapshot's chain.
#[derive(Clone, Debug)]
pub struct CheckedChain {
    pub head: ChainHead,
    /// `None`: the chain has no genesis entry.
    pub origin: Option<String>,
    /// The keys the chain trusts at its head, each with the node it belongs to.
    pub active_keys: Vec<(u64, PublicKey)>,
}

/// Reads a whole snapshot once, checking its structure, digest and audit chain, and returns
/// the chain head it carries. Touches no store.
pub fn check(source: &dyn ChunkSource) -> Result<ChainHead, SnapshotError> {
    let mut reader = SnapshotReader::new(source.total_bytes())?;
    let mut chain = ChainCheck::default();
    for i in 0..source.chunk_count() {
        reader.push(&source.chunk(i)?, &mut |k, v| chain.visit(k, v))?;
    }
    reader.finish()?;
    chain.finish()
}

/// Parses and checks a whole snapshot in memory without touching any store.
pub fn parse(bytes: &[u8]) -> Result<Vec<KeyValue>, SnapshotError> {
    check_digest(bytes)?;
    let mut reader = SnapshotReader::new(bytes.len() as u64)?;
    let mut out = Vec::new();
    reader.push(bytes, &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        Ok(())
    })?;
    reader.finish()?;
    Ok(out)
}

/// Checks a whole snapshot's digest before its records are parsed, so a flipped byte reads as
/// what it is rather than as a bad length.
fn check_digest(bytes: &[u8]) -> Result<(), SnapshotError> {
    SnapshotReader::new(bytes.len() as u64)?;
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if blake3::hash(body).as_bytes() != digest {
        return Err(SnapshotError::Checksum);
    }
    Ok(())
}

/// Verifies the chain inside parsed snapshot records and returns the head they claim.
pub fn verify(records: &[KeyValue]) -> Result<ChainHead, SnapshotError> {
    let mut chain = ChainCheck::default();
    for (k, v) in records {
        chain.visit(k, v)?;
    }
    chain.finish()
}

/// Replaces the state space with a snapshot's records, chunk by chunk, in batches of about
/// `batch_bytes`. The first batch clears the state space; the last carries the caller's rows.
/// Between the first and the last batch the store holds part of each state: only a caller that
/// has recorded the install durably beforehand (and repeats it after a crash) may use this.
pub struct Installer<'a> {
    store: &'a dyn Store,
    reader: SnapshotReader,
    batch: WriteBatch,
    batch_bytes: usize,
    pending_bytes: usize,
}

impl<'a> Installer<'a> {
    pub fn new(store: &'a dyn Store, total_bytes: u64, batch_bytes: usize) -> Result<Self, SnapshotError> {
        let mut batch = WriteBatch::new();
        batch.clear(Space::State);
        Ok(Installer {
            store,
            reader: SnapshotReader::new(total_bytes)?,
            batch,
            batch_bytes,
            pending_bytes: 0,
        })
    }

    pub fn push(&mut self, chunk: &[u8]) -> Result<(), SnapshotError> {
        let (batch, pending_bytes) = (&mut self.batch, &mut self.pending_bytes);
        self.reader.push(chunk, &mut |k, v| {
            batch.put(Space::State, k.to_vec(), v.to_vec());
            *pending_bytes += k.len() + v.len();
            Ok(())
        })?;
        if self.pending_bytes >= self.batch_bytes {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), SnapshotError> {
        let batch = std::mem::take(&mut self.batch);
        self.store.write(batch, durability(Write::InstallBatch))?;
        self.pending_bytes = 0;
        Ok(())
    }

    /// Writes the last batch with `extra` (synced: the install is complete once it returns).
    pub fn finish(mut self, mut extra: WriteBatch) -> Result<u64, SnapshotError> {
        let records = self.reader.finish()?;
        self.batch.mutations.append(&mut extra.mutations);
        self.store.write(self.batch, durability(Write::InstallEnd))?;
        Ok(records)
    }
}

/// Replaces the whole state with a snapshot held in memory, atomically with `extra` (the Raft
/// layer's rows), after checking it (tests and tools; nodes stream from stored chunks).
pub fn install(store: &dyn Store, bytes: &[u8], extra: WriteBatch) -> Result<ChainHead, SnapshotError> {
    check_digest(bytes)?;
    let head = check(&InMemory(bytes))?;
    let mut installer = Installer::new(store, bytes.len() as u64, usize::MAX)?;
    installer.push(bytes)?;
    installer.finish(extra)?;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use engram_storage::{Durability, MemStore};

    use super::*;

    /// A store with `n` rows of varied sizes in the state space.
    fn store_with(n: usize) -> MemStore {
        let store = MemStore::new();
        let mut batch = WriteBatch::new();
        for i in 0..n {
            let key = format!("k{i:05}").into_bytes();
            batch.put(Space::State, key, vec![i as u8; i % 300]);
        }
        store.write(batch, Durability::Sync).unwrap();
        store
    }

    fn read_in_pieces(bytes: &[u8], piece: usize) -> Result<Vec<KeyValue>, SnapshotError> {
        let mut reader = SnapshotReader::new(bytes.len() as u64)?;
        let mut out = Vec::new();
        for p in bytes.chunks(piece) {
            reader.push(p, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(())
            })?;
        }
        assert_eq!(reader.finish()?, out.len() as u64);
        Ok(out)
    }

    #[test]
    fn chunks_of_any_size_make_the_same_byte_string_and_read_back_in_any_pieces() {
        let store = store_with(500);
        let whole = export(&store).unwrap();
        let expected = parse(&whole).unwrap();
        assert_eq!(expected.len(), 500);
        for chunk_bytes in [1, 7, 300, 4096, 1 << 20] {
            let mut chunks = Vec::new();
            let (sealed, _) = write_state(&store, &[], chunk_bytes, &mut |c| {
                chunks.push(c);
                Ok(())
            })
            .unwrap();
            assert!(chunks.iter().all(|c| c.len() <= chunk_bytes));
            assert!(chunks[..chunks.len() - 1].iter().all(|c| c.len() == chunk_bytes));
            assert_eq!(chunks.concat(), whole, "chunks of {chunk_bytes}");
            assert_eq!(sealed.bytes, whole.len() as u64);
            assert_eq!(sealed.records, 500);
            assert_eq!(&sealed.data_hash, blake3::hash(&whole).as_bytes());
        }
        for piece in [1, 3, 41, 999, whole.len()] {
            assert_eq!(
                read_in_pieces(&whole, piece).unwrap(),
                expected,
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn a_reader_refuses_what_is_not_a_whole_genuine_snapshot() {
        let whole = export(&store_with(50)).unwrap();
        let n = whole.len();

        let mut flipped = whole.clone();
        flipped[n / 2] ^= 1;
        assert!(read_in_pieces(&flipped, 64).is_err());
        let mut digest = whole.clone();
        digest[n - 1] ^= 1;
        assert!(matches!(
            read_in_pieces(&digest, 64),
            Err(SnapshotError::Checksum)
        ));
        let mut magic = whole.clone();
        magic[0] = b'X';
        assert!(matches!(read_in_pieces(&magic, 5), Err(SnapshotError::Malformed(m)) if m.contains("magic")));
        let mut version = whole.clone();
        version[MAGIC.len()] = 9;
        assert!(matches!(
            read_in_pieces(&version, 64),
            Err(SnapshotError::Version(9))
        ));

        // Fewer bytes than declared, or more.
        let mut reader = SnapshotReader::new(n as u64 + 1).unwrap();
        reader.push(&whole, &mut |_, _| Ok(())).unwrap();
        assert!(matches!(reader.finish(), Err(SnapshotError::Malformed(m)) if m.contains("ended after")));
        let mut reader = SnapshotReader::new(n as u64 - 1).unwrap();
        assert!(reader.push(&whole, &mut |_, _| Ok(())).is_err());
        assert!(SnapshotReader::new(10).is_err());

        // A length prefix larger than any row is refused at once, not buffered for.
        let mut giant = Vec::new();
        giant.extend_from_slice(MAGIC);
        giant.push(SNAPSHOT_FORMAT_VERSION);
        giant.extend_from_slice(&u32::MAX.to_be_bytes());
        let mut reader = SnapshotReader::new(u64::MAX).unwrap();
        let err = reader.push(&giant, &mut |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("record part"), "{err}");
    }

    #[test]
    fn an_install_in_small_batches_leaves_the_same_state_as_one_batch() {
        let source = store_with(400);
        let whole = export(&source).unwrap();
        let target = MemStore::new();
        let mut old = WriteBatch::new();
        old.put(
            Space::State,
            b"zz-old".to_vec(),
            b"gone after the install".to_vec(),
        );
        target.write(old, Durability::Sync).unwrap();
        let mut installer = Installer::new(&target, whole.len() as u64, 1_000).unwrap();
        for piece in whole.chunks(333) {
            installer.push(piece).unwrap();
        }
        let mut extra = WriteBatch::new();
        extra.put(Space::State, b"zz-extra".to_vec(), b"x".to_vec());
        installer.finish(extra).unwrap();
        let mut expected = parse(&whole).unwrap();
        expected.push((b"zz-extra".to_vec(), b"x".to_vec()));
        let mut got = Vec::new();
        target
            .for_each(Space::State, &mut |k, v| {
                got.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(got, expected);
    }
}
