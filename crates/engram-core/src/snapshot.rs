//! The snapshot format: the whole state key space at one point in time, as a self-checking
//! byte string.
//!
//! Layout: magic `ENGRAMSNAP`, format version (1 byte), then `(key, value)` records as
//! `u32`-length-prefixed byte strings, then the record count (`u64`) and blake3 over all
//! preceding bytes. The format is independent of the storage engine, so a snapshot built on a
//! RocksDB node installs on a simulated node and the other way round.
//!
//! Installing re-verifies the audit chain it carries, entry by entry (link, index, signature
//! by an admitted key), and that the chain head row agrees with the last entry, before a
//! single write batch replaces the state: a corrupt or forged snapshot is refused and the
//! current state stays as it was.

use engram_audit::{ChainError, ChainVerifier, SignedEntry};
use engram_merkle::{Blake3, CompactTree};
use engram_storage::{KeyValue, Space, StorageError, Store, WriteBatch};
use engram_types::codec::{Reader, Writer};
use thiserror::Error;

use crate::rows::decode_row;
use crate::{ChainHead, CoreError, keys};

const MAGIC: &[u8] = b"ENGRAMSNAP";
pub const SNAPSHOT_FORMAT_VERSION: u8 = 1;

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

/// Serialises the state space from one consistent view.
pub fn export(store: &dyn Store) -> Result<Vec<u8>, CoreError> {
    Ok(export_capturing(store, &[])?.0)
}

/// Values of requested keys, in request order (`None`: absent).
pub type Captured = Vec<Option<Vec<u8>>>;

/// Like [`export`], and also returns the values of the `wanted` keys as they are in the
/// snapshot (`None` where absent), read in the same pass so they describe the same instant.
pub fn export_capturing(store: &dyn Store, wanted: &[&[u8]]) -> Result<(Vec<u8>, Captured), CoreError> {
    let mut w = Writer::with_capacity(1 << 16);
    w.raw(MAGIC).u8(SNAPSHOT_FORMAT_VERSION);
    let mut count = 0u64;
    let mut captured = vec![None; wanted.len()];
    store.for_each(Space::State, &mut |k, v| {
        if let Some(i) = wanted.iter().position(|want| *want == k) {
            captured[i] = Some(v.to_vec());
        }
        w.bytes(k).bytes(v);
        count += 1;
        Ok(())
    })?;
    w.u64(count);
    let mut bytes = w.finish();
    let digest = blake3::hash(&bytes);
    bytes.extend_from_slice(digest.as_bytes());
    Ok((bytes, captured))
}

/// Parses and checks a snapshot without touching any store.
pub fn parse(bytes: &[u8]) -> Result<Vec<KeyValue>, SnapshotError> {
    let malformed = |e: engram_types::DecodeError| SnapshotError::Malformed(e.to_string());
    if bytes.len() < MAGIC.len() + 1 + 8 + 32 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::Malformed("missing magic header".into()));
    }
    let version = bytes[MAGIC.len()];
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(SnapshotError::Version(version));
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if blake3::hash(body).as_bytes() != digest {
        return Err(SnapshotError::Checksum);
    }
    let (records, count) = body.split_at(body.len() - 8);
    let count = Reader::new(count).u64("record count").map_err(malformed)?;
    let mut r = Reader::new(&records[MAGIC.len() + 1..]);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let k = r.bytes("key").map_err(malformed)?.to_vec();
        let v = r.bytes("value").map_err(malformed)?.to_vec();
        out.push((k, v));
    }
    if out.len() as u64 != count {
        return Err(SnapshotError::Malformed(format!(
            "{} records, trailer says {count}",
            out.len()
        )));
    }
    Ok(out)
}

/// Verifies the chain inside parsed snapshot records and returns the head they claim.
pub fn verify(records: &[KeyValue]) -> Result<ChainHead, SnapshotError> {
    let mut verifier = ChainVerifier::new();
    let mut tree = CompactTree::<Blake3>::new();
    let mut head: Option<ChainHead> = None;
    for (k, v) in records {
        if k.first() == Some(&keys::AUDIT) {
            let signed =
                SignedEntry::decode(v).map_err(|e| SnapshotError::Malformed(format!("audit row: {e}")))?;
            let hash = verifier.push(&signed)?;
            tree.push(hash.as_bytes());
        } else if k == keys::META_HEAD {
            head = Some(decode_row("snapshot chain head", v)?);
        }
    }
    // A snapshot may be taken between two entries of an apply group, before the group's
    // attestation: this node attests that tail once installed (`Engine::reload`).
    verifier.finish_open_tail()?;
    let head = head.unwrap_or(ChainHead {
        next_entity: 1,
        ..ChainHead::default()
    });
    if head.index != verifier.checked() || (head.index > 0 && Some(head.hash) != verifier.head()) {
        return Err(SnapshotError::Malformed(format!(
            "chain head row says index {} but the snapshot holds {} entries ending in another hash",
            head.index,
            verifier.checked()
        )));
    }
    // The receiving node extends the tree from this frontier: it must be the tree of the
    // entries just verified, or every later root and proof would be wrong.
    let frontier: Vec<[u8; 32]> = head.frontier.iter().map(|h| h.0).collect();
    if frontier != tree.frontier() {
        return Err(SnapshotError::Malformed(
            "the chain head's Merkle frontier is not the tree of the snapshot's entries".into(),
        ));
    }
    Ok(head)
}

/// Replaces the whole state with the snapshot, atomically with `extra` (the Raft layer's
/// rows), after parsing and verifying it.
pub fn install(store: &dyn Store, bytes: &[u8], mut extra: WriteBatch) -> Result<ChainHead, SnapshotError> {
    let records = parse(bytes)?;
    let head = verify(&records)?;
    let mut batch = WriteBatch::new();
    batch.clear(Space::State);
    for (k, v) in records {
        batch.put(Space::State, k, v);
    }
    batch.mutations.append(&mut extra.mutations);
    store.write(batch, crate::planted::ack_durability())?;
    Ok(head)
}
