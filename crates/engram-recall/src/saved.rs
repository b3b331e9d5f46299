//! A recall index written out as bytes and read back, so a node that restarts takes its index
//! from its last save and feeds it only the transactions applied since, instead of rebuilding
//! it from the whole log (tens of seconds at millions of facts).
//!
//! The bytes are: a magic, the format, the body's length and its blake3 hash, then the body
//! (the position the index was saved at, the index and the feeder, in postcard). Any change
//! of the in-memory layout is a new [`SAVED_FORMAT`]: a save of another format, a truncated
//! one or one whose body does not match its hash is refused with [`SavedError`], and the
//! caller rebuilds from the log, which is always possible (the index is derived state).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use engram_types::{Hash, TxId};

use crate::feed::Feeder;
use crate::index::RecallIndex;

/// The layout [`save`] writes and [`load`] reads. Raise it whenever a saved structure changes.
pub const SAVED_FORMAT: u32 = 1;

const MAGIC: &[u8; 8] = b"ENGRAMRI";
/// Magic, format, body length, body hash.
const HEADER_BYTES: usize = 8 + 4 + 8 + 32;

/// Where a saved index stands against the log it was fed from, so a node can tell whether the
/// save belongs to its store before it trusts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedAt {
    /// The next transaction the index takes in: it holds every one before.
    pub next: TxId,
    /// The newest transaction fed and the audit hash of its entry (`None`: nothing fed), to be
    /// matched against the store's own entry before the save is used.
    pub anchor: Option<(TxId, Hash)>,
    /// The last redaction recorded in the store when the index's contents were read from it
    /// (0: none). A store that records a later one may have forgotten values the save holds.
    pub redactions_seen: u64,
}

/// Why a saved index was not taken. The index is rebuilt from the log instead.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SavedError {
    #[error("saved index: {0} bytes, shorter than its header")]
    Truncated(usize),
    #[error("saved index: not a recall index (bad magic)")]
    NotAnIndex,
    #[error("saved index: format {found}, this build reads format {SAVED_FORMAT}")]
    Format { found: u32 },
    #[error("saved index: the body is {found} bytes, its header says {said}")]
    Length { found: usize, said: u64 },
    #[error("saved index: the body does not match its hash (damaged)")]
    Damaged,
    #[error("saved index: cannot decode the body: {0}")]
    Decode(String),
    #[error("saved index: cannot encode: {0}")]
    Encode(String),
}

/// `index` and `feeder`, fed up to `at`, as bytes for [`load`]. `size_hint`: about how many
/// bytes the save will take (the last save's length; 0: unknown). The body is encoded into one
/// buffer of that size behind its header, so a large save is not copied again as the buffer
/// grows (a copy of a growing buffer was a third of the encoding's time).
pub fn save(
    index: &RecallIndex,
    feeder: &Feeder,
    at: &SavedAt,
    size_hint: usize,
) -> Result<Vec<u8>, SavedError> {
    let mut out = Vec::with_capacity(HEADER_BYTES + size_hint + size_hint / 8);
    out.resize(HEADER_BYTES, 0);
    let mut out =
        postcard::to_extend(&(at, index, feeder), out).map_err(|e| SavedError::Encode(e.to_string()))?;
    let body_len = (out.len() - HEADER_BYTES) as u64;
    let hash = blake3::hash(&out[HEADER_BYTES..]);
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&SAVED_FORMAT.to_le_bytes());
    out[12..20].copy_from_slice(&body_len.to_le_bytes());
    out[20..HEADER_BYTES].copy_from_slice(hash.as_bytes());
    Ok(out)
}

/// The index, feeder and position [`save`] wrote into `bytes`, or why they cannot be trusted.
pub fn load(bytes: &[u8]) -> Result<(RecallIndex, Feeder, SavedAt), SavedError> {
    if bytes.len() < HEADER_BYTES {
        return Err(SavedError::Truncated(bytes.len()));
    }
    let (header, body) = bytes.split_at(HEADER_BYTES);
    if &header[..8] != MAGIC {
        return Err(SavedError::NotAnIndex);
    }
    let word = |from: usize| <[u8; 4]>::try_from(&header[from..from + 4]).map(u32::from_le_bytes);
    let format = word(8).map_err(|_| SavedError::Truncated(bytes.len()))?;
    if format != SAVED_FORMAT {
        return Err(SavedError::Format { found: format });
    }
    let said = <[u8; 8]>::try_from(&header[12..20])
        .map(u64::from_le_bytes)
        .map_err(|_| SavedError::Truncated(bytes.len()))?;
    if u64::try_from(body.len()).ok() != Some(said) {
        return Err(SavedError::Length {
            found: body.len(),
            said,
        });
    }
    if blake3::hash(body).as_bytes() != &header[20..52] {
        return Err(SavedError::Damaged);
    }
    let (at, index, feeder): (SavedAt, RecallIndex, Feeder) =
        postcard::from_bytes(body).map_err(|e| SavedError::Decode(e.to_string()))?;
    if index.last_tx() != TxId(0) && at.next <= index.last_tx() {
        return Err(SavedError::Decode(format!(
            "it holds transaction {} but says it takes {} next",
            index.last_tx().0,
            at.next.0
        )));
    }
    Ok((index, feeder, at))
}
