//! Writes a store's audit chain as a portable export (engram-verify's format), streamed page
//! by page: memory stays bounded whatever the chain's length.
//!
//! Everything is copied as stored, never decoded and re-encoded: an entry that no longer
//! decodes, or a datom whose bytes were changed on disk, reaches the verifier exactly as the
//! node holds it, and the verifier names it.

use std::io::{self, Write};

use engram_audit::{EntryKind, SignedEntry};
use engram_storage::{Space, Store, prefix_end};
use engram_verify::{ExportWriter, Record};

use crate::{CoreError, keys, reads};

/// Audit rows read per page.
const PAGE_ENTRIES: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error("writing the export: {0}")]
    Io(#[from] io::Error),
}

impl From<engram_storage::StorageError> for ExportError {
    fn from(e: engram_storage::StorageError) -> Self {
        ExportError::Core(CoreError::Storage(e))
    }
}

/// What an export wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    pub entries: u64,
    pub checkpoints: u64,
    pub bytes: u64,
}

/// Writes the whole chain of `store` to `out`. `progress(entries_written, head_index)` is
/// called after every page.
pub fn write_export<W: Write>(
    store: &dyn Store,
    out: W,
    node_id: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<ExportSummary, ExportError> {
    // The chain this node vouches for: up to its last attested entry. Entries after it (an
    // apply group in progress) follow in a later export, once their attestation is written.
    let mut head = reads::head(store)?;
    head.index = head.index.min(reads::attested_index(store)?);
    let origin = reads::origin(store).ok().flatten().unwrap_or_default();
    let mut writer = ExportWriter::new(out)?;
    writer.write(&Record::Header {
        origin,
        node_id,
        head_index: head.index,
    })?;
    let checkpoint_rows = store.scan(
        Space::State,
        &[keys::CHECKPOINT],
        prefix_end(&[keys::CHECKPOINT]).as_deref(),
        usize::MAX,
    )?;
    let mut checkpoints = checkpoint_rows
        .into_iter()
        .map(|(k, v)| (key_u64(&k), v))
        .peekable();
    let mut summary = ExportSummary::default();
    let end_key = prefix_end(&[keys::AUDIT]);
    let mut next = keys::audit(1);
    loop {
        let page = store.scan(Space::State, &next, end_key.as_deref(), PAGE_ENTRIES)?;
        let Some((last_key, _)) = page.last() else {
            break;
        };
        next = last_key.clone();
        next.push(0); // the smallest key after the last one read
        let mut done = false;
        for (key, bytes) in page {
            let index = key_u64(&key);
            // One consistent export: the chain up to the head read at the start, however far
            // apply has gone since.
            if index > head.index {
                done = true;
                break;
            }
            // Checkpoints of sizes this chain skipped (a gap in the rows) go before the entry
            // that would follow them, where the verifier will find them misplaced.
            while let Some((_, note)) = checkpoints.next_if(|(size, _)| *size < index) {
                writer.write(&Record::Checkpoint(note))?;
                summary.checkpoints += 1;
            }
            writer.write(&Record::Entry(bytes.clone()))?;
            summary.entries += 1;
            if let Ok(signed) = SignedEntry::decode(&bytes)
                && let EntryKind::Transaction { author, .. } = &signed.entry.kind
            {
                let datoms = tx_datoms(store, signed.entry.tx)?;
                writer.write(&Record::Datoms {
                    index: signed.entry.index,
                    datoms,
                })?;
                // A missing request row is exported as absent; the verifier reports it.
                if author.is_some()
                    && let Some(request) = store.get(Space::State, &keys::signed_request(signed.entry.tx))?
                {
                    writer.write(&Record::Request {
                        index: signed.entry.index,
                        bytes: request,
                    })?;
                }
            }
            while let Some((_, note)) = checkpoints.next_if(|(size, _)| *size == index) {
                writer.write(&Record::Checkpoint(note))?;
                summary.checkpoints += 1;
            }
        }
        progress(summary.entries, head.index);
        if done {
            break;
        }
    }
    for (_, note) in checkpoints.take_while(|(size, _)| *size <= head.index) {
        writer.write(&Record::Checkpoint(note))?;
        summary.checkpoints += 1;
    }
    writer.write(&Record::End {
        entries: summary.entries,
        checkpoints: summary.checkpoints,
    })?;
    summary.bytes = writer.bytes_written();
    writer.into_inner()?;
    Ok(summary)
}

/// The stored bytes of a transaction's datoms, in transaction order, through its tx-log row.
fn tx_datoms(store: &dyn Store, tx: engram_types::TxId) -> Result<Vec<Vec<u8>>, ExportError> {
    // A missing or undecodable tx-log row exports the datoms `X` rows name (none, since the
    // row kept its keys); the verifier reports the count against the entry.
    let datom_keys = reads::tx(store, tx).ok().flatten().and_then(|row| row.datom_keys);
    let datom_keys = reads::datom_keys_of_tx(store, tx, datom_keys)?;
    let mut out = Vec::with_capacity(datom_keys.len());
    for eavt_key in datom_keys {
        // A missing datom row is exported as absent; the verifier reports the count.
        if let Some(bytes) = store.get(Space::State, &eavt_key)? {
            out.push(bytes);
        }
    }
    Ok(out)
}

/// The index or size a key names (0 if the key is too short).
fn key_u64(key: &[u8]) -> u64 {
    keys::u64_after_tag(key).unwrap_or(0)
}
