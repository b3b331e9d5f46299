//! The backup file: one node's whole replicated state at one point in time, with a checkpoint
//! the node signed over the audit chain that state holds, as one self-checking file.
//!
//! Layout (integers big-endian):
//! - magic `ENGRAMBACKUP`, backup format version (1 byte);
//! - the snapshot byte string ([`crate::snapshot`]): every state row, read from one consistent
//!   view, with its own record count and digest;
//! - the signed checkpoint of the snapshot's chain head, in its text form;
//! - the trailer: checkpoint length (`u32`), the id of the node that made it (`u64`), the store
//!   format it was read from (`u32`), the snapshot's length (`u64`) and blake3 (32 bytes), and
//!   last blake3 over every byte before it (32 bytes).
//!
//! The writer streams (the server sends the file as it is made, never whole in memory); the
//! reader checks the sizes and the digest over the whole file before anything else, so a
//! damaged byte is reported as damage, not as whatever the damaged field would then mean.
//! [`BackupFile::verify`] then checks the snapshot (its structure and digest, and the whole
//! audit chain it carries, as a snapshot install does) and the checkpoint against that chain:
//! same log (origin), same size and Merkle root, signed by a key the chain trusts at its head.
//! The node's own Raft records (its log, vote and stored snapshots) are not in a backup; a
//! restore writes new ones (`engram_raft::restore`).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use engram_audit::{Checkpoint, NodeKey, PublicKey, SignedCheckpoint, SignedEntry};
use thiserror::Error;

use crate::rows::decode_row;
use crate::snapshot::{self, ChainCheck, SnapshotError, SnapshotReader};
use crate::store_format::STORE_FORMAT;
use crate::{ChainHead, CoreError, keys};

const MAGIC: &[u8] = b"ENGRAMBACKUP";
/// The backup format this build writes and reads.
pub const BACKUP_FORMAT_VERSION: u8 = 1;
const HEADER_BYTES: u64 = MAGIC.len() as u64 + 1;
/// Checkpoint length, node id, store format, snapshot length and hash, digest.
const TRAILER_BYTES: u64 = 4 + 8 + 4 + 8 + 32 + 32;
/// The largest checkpoint text a reader accepts (a checkpoint is a few hundred bytes; cosigned
/// by every node of a large cluster, a few kilobytes).
const MAX_CHECKPOINT_BYTES: u32 = 64 << 10;
/// Bytes read at a time from a backup file.
const READ_BYTES: usize = 1 << 20;

/// Why a backup cannot be read or does not verify.
#[derive(Debug, Error)]
pub enum BackupError {
    #[error("not an Engram backup (it does not begin with the backup header)")]
    NotABackup,
    #[error(
        "this backup is format {0}, written by a newer Engram; this build reads backup format {BACKUP_FORMAT_VERSION}"
    )]
    Newer(u8),
    #[error("the backup is truncated or damaged: {0}")]
    Damaged(String),
    #[error(
        "the backup's checksum does not match its contents: it was altered or damaged after it was written"
    )]
    Checksum,
    #[error(
        "the backup holds a store of format {0}, written by a newer Engram; this build reads store formats up to {STORE_FORMAT}"
    )]
    StoreFormat(u32),
    #[error("the backup's state: {0}")]
    Snapshot(#[from] SnapshotError),
    #[error("the backup's checkpoint: {0}")]
    Checkpoint(String),
    #[error("reading the backup: {0}")]
    Io(#[from] io::Error),
}

/// What a finished [`BackupWriter`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub bytes: u64,
    /// The audit entry the state ends with (the checkpoint's size).
    pub chain_index: u64,
    pub records: u64,
}

/// Writes a backup of `store`'s state, from one consistent view, as chunks of about
/// `chunk_bytes` handed to `emit`, and signs the checkpoint of the chain head that view holds
/// with `key`. A store with an empty chain has nothing to back up: the caller checks first.
pub fn write_backup(
    store: &dyn engram_storage::Store,
    node_id: u64,
    key: &NodeKey,
    chunk_bytes: usize,
    emit: &mut dyn FnMut(Vec<u8>) -> Result<(), CoreError>,
) -> Result<Written, CoreError> {
    let mut whole = blake3::Hasher::new();
    let mut bytes = 0u64;
    let mut send = |chunk: Vec<u8>, whole: &mut blake3::Hasher, bytes: &mut u64| {
        whole.update(&chunk);
        *bytes += chunk.len() as u64;
        emit(chunk)
    };
    let mut header = MAGIC.to_vec();
    header.push(BACKUP_FORMAT_VERSION);
    send(header, &mut whole, &mut bytes)?;
    let genesis = keys::audit(1);
    let (sealed, captured) =
        snapshot::write_state(store, &[keys::META_HEAD, &genesis], chunk_bytes, &mut |chunk| {
            send(chunk, &mut whole, &mut bytes)
        })?;
    let head: ChainHead = match &captured[0] {
        Some(row) => decode_row("chain head", row)?,
        None => return Err(CoreError::corrupt("backup", "the state has no chain head")),
    };
    let Some(genesis) = &captured[1] else {
        return Err(CoreError::corrupt("backup", "the state has no genesis entry"));
    };
    let genesis = SignedEntry::decode(genesis).map_err(|e| CoreError::corrupt("audit entry 1", e))?;
    let checkpoint = Checkpoint {
        origin: Checkpoint::origin_for(&genesis.entry.hash()),
        size: head.index,
        root: head.tree_root()?,
        tx_time_ns: head.tx_time_ns,
    }
    .sign(key)
    .to_text()
    .into_bytes();
    let mut trailer = Vec::with_capacity(checkpoint.len() + TRAILER_BYTES as usize);
    trailer.extend_from_slice(&checkpoint);
    trailer.extend_from_slice(&(checkpoint.len() as u32).to_be_bytes());
    trailer.extend_from_slice(&node_id.to_be_bytes());
    trailer.extend_from_slice(&STORE_FORMAT.to_be_bytes());
    trailer.extend_from_slice(&sealed.bytes.to_be_bytes());
    trailer.extend_from_slice(&sealed.data_hash);
    whole.update(&trailer);
    trailer.extend_from_slice(whole.finalize().as_bytes());
    let total = bytes + trailer.len() as u64;
    emit(trailer)?;
    Ok(Written {
        bytes: total,
        chain_index: head.index,
        records: sealed.records,
    })
}

/// A backup file whose sizes and digest have been checked ([`BackupFile::open`]); its state and
/// checkpoint are checked by [`BackupFile::verify`].
#[derive(Debug)]
pub struct BackupFile {
    file: File,
    /// The node that made it.
    pub node_id: u64,
    /// The store format its state was read from.
    pub store_format: u32,
    pub snapshot_bytes: u64,
    /// blake3 of the snapshot byte string (what a snapshot's sender declares).
    pub snapshot_hash: [u8; 32],
    pub checkpoint: SignedCheckpoint,
    pub bytes: u64,
}

/// What [`BackupFile::verify`] established.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The chain head the state holds, its entries verified one by one.
    pub head: ChainHead,
    pub origin: String,
    /// The keys the chain trusts at its head, each with its node.
    pub active_keys: Vec<(u64, PublicKey)>,
    /// Which of them signed the checkpoint.
    pub signed_by: Vec<PublicKey>,
}

impl BackupFile {
    /// Opens `path`: checks the header, the sizes the trailer declares against the file's, and
    /// the digest over the whole file, reading it once.
    pub fn open(path: &Path) -> Result<BackupFile, BackupError> {
        let mut file = File::open(path)?;
        let bytes = file.metadata()?.len();
        let mut header = [0u8; HEADER_BYTES as usize];
        if bytes < HEADER_BYTES || file.read_exact(&mut header).is_err() || !header.starts_with(MAGIC) {
            return Err(BackupError::NotABackup);
        }
        let version = header[MAGIC.len()];
        if version > BACKUP_FORMAT_VERSION {
            return Err(BackupError::Newer(version));
        }
        if version == 0 {
            return Err(BackupError::Damaged(format!(
                "backup format {version} does not exist"
            )));
        }
        if bytes < HEADER_BYTES + TRAILER_BYTES {
            return Err(BackupError::Damaged(format!(
                "{bytes} bytes, shorter than a backup's header and trailer"
            )));
        }
        let mut trailer = [0u8; TRAILER_BYTES as usize];
        file.seek(SeekFrom::Start(bytes - TRAILER_BYTES))?;
        file.read_exact(&mut trailer)?;
        let mut at = 0;
        let mut take = |n: usize| {
            let field = &trailer[at..at + n];
            at += n;
            field.to_vec()
        };
        let checkpoint_len = u32::from_be_bytes(fixed(&take(4)));
        let node_id = u64::from_be_bytes(fixed(&take(8)));
        let store_format = u32::from_be_bytes(fixed(&take(4)));
        let snapshot_bytes = u64::from_be_bytes(fixed(&take(8)));
        let snapshot_hash: [u8; 32] = fixed(&take(32));
        let digest: [u8; 32] = fixed(&take(32));
        // Sizes first: a file cut short (a copy interrupted) is named as truncated.
        let expected = HEADER_BYTES
            .checked_add(snapshot_bytes)
            .and_then(|n| n.checked_add(u64::from(checkpoint_len)))
            .and_then(|n| n.checked_add(TRAILER_BYTES));
        if expected != Some(bytes) || checkpoint_len > MAX_CHECKPOINT_BYTES {
            return Err(BackupError::Damaged(format!(
                "the file is {bytes} bytes but its trailer describes {} (truncated, extended, or its trailer is damaged)",
                expected.map_or_else(
                    || "more than a file can hold".to_string(),
                    |n| format!("{n} bytes")
                )
            )));
        }
        let mut whole = blake3::Hasher::new();
        file.seek(SeekFrom::Start(0))?;
        let mut left = bytes - 32;
        let mut buf = vec![0u8; READ_BYTES];
        while left > 0 {
            let n = (left as usize).min(READ_BYTES);
            file.read_exact(&mut buf[..n])?;
            whole.update(&buf[..n]);
            left -= n as u64;
        }
        if whole.finalize().as_bytes() != &digest {
            return Err(BackupError::Checksum);
        }
        if store_format > STORE_FORMAT {
            return Err(BackupError::StoreFormat(store_format));
        }
        let mut text = vec![0u8; checkpoint_len as usize];
        file.seek(SeekFrom::Start(HEADER_BYTES + snapshot_bytes))?;
        file.read_exact(&mut text)?;
        let checkpoint =
            SignedCheckpoint::parse_bytes(&text).map_err(|e| BackupError::Checkpoint(e.to_string()))?;
        Ok(BackupFile {
            file,
            node_id,
            store_format,
            snapshot_bytes,
            snapshot_hash,
            checkpoint,
            bytes,
        })
    }

    /// Reads the snapshot byte string in pieces of at most 1 MiB, in order.
    pub fn for_each_snapshot_piece(
        &self,
        visit: &mut dyn FnMut(&[u8]) -> Result<(), BackupError>,
    ) -> Result<(), BackupError> {
        let mut file = &self.file;
        file.seek(SeekFrom::Start(HEADER_BYTES))?;
        let mut left = self.snapshot_bytes;
        let mut buf = vec![0u8; READ_BYTES];
        while left > 0 {
            let n = (left as usize).min(READ_BYTES);
            file.read_exact(&mut buf[..n])?;
            visit(&buf[..n])?;
            left -= n as u64;
        }
        Ok(())
    }

    /// Checks the state (structure, digest, the audit chain entry by entry) and the checkpoint
    /// against it, reading the snapshot once; `visit` sees every record on the way (it is
    /// genuine only once this returns `Ok`).
    pub fn verify(&self, visit: &mut dyn FnMut(&[u8], &[u8])) -> Result<Verified, BackupError> {
        let mut reader = SnapshotReader::new(self.snapshot_bytes)?;
        let mut chain = ChainCheck::default();
        let mut whole = blake3::Hasher::new();
        self.for_each_snapshot_piece(&mut |piece| {
            whole.update(piece);
            reader.push(piece, &mut |k, v| {
                visit(k, v);
                chain.visit(k, v)
            })?;
            Ok(())
        })?;
        reader.finish()?;
        if whole.finalize().as_bytes() != &self.snapshot_hash {
            return Err(BackupError::Damaged(
                "the state does not hash to what the trailer declares".into(),
            ));
        }
        let checked = chain.finish_with_keys()?;
        let (head, active_keys) = (checked.head, checked.active_keys);
        let Some(origin) = checked.origin else {
            return Err(BackupError::Checkpoint("the backup's chain is empty".into()));
        };
        let cp = &self.checkpoint.checkpoint;
        let expect = Checkpoint {
            origin: origin.clone(),
            size: head.index,
            root: head
                .tree_root()
                .map_err(|e| BackupError::Damaged(e.to_string()))?,
            tx_time_ns: head.tx_time_ns,
        };
        if cp.origin != expect.origin {
            return Err(BackupError::Checkpoint(format!(
                "it names the log {}, but the backup's chain is {}",
                cp.origin, expect.origin
            )));
        }
        if cp.size != expect.size || cp.root != expect.root || cp.tx_time_ns != expect.tx_time_ns {
            return Err(BackupError::Checkpoint(format!(
                "it covers {} entries with another root or time than the backup's chain of {} entries",
                cp.size, expect.size
            )));
        }
        let signed_by = self.checkpoint.signers(active_keys.iter().map(|(_, key)| key));
        if signed_by.is_empty() {
            return Err(BackupError::Checkpoint(
                "no signature on it is by a key the backup's chain trusts at its head".into(),
            ));
        }
        Ok(Verified {
            head,
            origin,
            active_keys,
            signed_by,
        })
    }
}

fn fixed<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}
