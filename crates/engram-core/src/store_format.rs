//! The format a node's store is written in: one row (`store/format` in [`Space::Raft`], four
//! bytes, big-endian) that a node reads before anything else, so that a build never reads, and
//! never writes into, a layout it does not know.
//!
//! [`STORE_FORMAT`] is the format this build writes. A store without the row was written before
//! stores carried one; this build reads those (it still reads every earlier layout: tx-log rows
//! without datom keys, unsalted datoms, one record datom per redacted datom) and stamps them on
//! first opening. A store stamped with a newer format is refused, naming both formats: an older
//! build would misread rows it does not know (an earlier build does not find the datoms of a
//! transaction whose keys live in its tx-log row, for one). The row lives in the Raft space,
//! the node's own records: it is in no snapshot and no replica digest, and a snapshot install
//! leaves it alone.
//!
//! A change that an older build would misread bumps [`STORE_FORMAT`], keeps reading the format
//! before it, and says so in docs/deploy.md's upgrade notes.

use engram_storage::{ReadView, Space, StorageError, Store, WriteBatch};

use crate::durability::{Write, durability};

/// The format this build writes.
pub const STORE_FORMAT: u32 = 1;

const KEY: &[u8] = b"store/format";

/// Why a store cannot be opened by this build.
#[derive(Debug, thiserror::Error)]
pub enum StoreFormatError {
    #[error(
        "this store is format {found}, written by a newer Engram; this build reads store formats up to {STORE_FORMAT}: run a build that reads format {found} (a store is never converted back to an older format)"
    )]
    Newer { found: u32 },
    #[error("the store's format row is {len} bytes, not 4: the store is damaged")]
    Malformed { len: usize },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// What opening found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The store was stamped with this build's format.
    Current,
    /// The store carried no format row (a new store, or one written before stores carried
    /// one); it is now stamped with [`STORE_FORMAT`].
    Stamped,
}

/// The format `store` is stamped with, or `None` for a store without the row; a newer format
/// than this build's is an error. For tools that read a stopped node's store and write nothing.
pub fn check(store: &dyn ReadView) -> Result<Option<u32>, StoreFormatError> {
    let Some(bytes) = store.get(Space::Raft, KEY)? else {
        return Ok(None);
    };
    let found = u32::from_be_bytes(
        bytes
            .as_slice()
            .try_into()
            .map_err(|_| StoreFormatError::Malformed { len: bytes.len() })?,
    );
    if found > STORE_FORMAT {
        return Err(StoreFormatError::Newer { found });
    }
    Ok(Some(found))
}

/// Checks `store`'s format ([`check`]) and stamps a store without one with this build's, before
/// the node writes anything else.
pub fn open(store: &dyn Store) -> Result<Opened, StoreFormatError> {
    if check(store)?.is_some() {
        return Ok(Opened::Current);
    }
    stamp(store, STORE_FORMAT)?;
    Ok(Opened::Stamped)
}

/// Writes `format` as `store`'s format row (tests make a newer build's store with it).
pub fn stamp(store: &dyn Store, format: u32) -> Result<(), StorageError> {
    let mut batch = WriteBatch::new();
    batch.put(Space::Raft, KEY.to_vec(), format.to_be_bytes().to_vec());
    store.write(batch, durability(Write::StoreFormat))
}

#[cfg(test)]
mod tests {
    use engram_storage::MemStore;

    use super::*;

    #[test]
    fn a_store_without_a_format_is_stamped_once_and_then_current() {
        let store = MemStore::new();
        assert_eq!(check(&store).unwrap(), None);
        assert_eq!(open(&store).unwrap(), Opened::Stamped);
        assert_eq!(check(&store).unwrap(), Some(STORE_FORMAT));
        assert_eq!(open(&store).unwrap(), Opened::Current);
        // The stamp is synced: a crash right after opening keeps it.
        store.crash();
        assert_eq!(check(&store).unwrap(), Some(STORE_FORMAT));
    }

    #[test]
    fn a_newer_format_is_refused_naming_both_and_left_as_it_is() {
        let store = MemStore::new();
        stamp(&store, STORE_FORMAT + 1).unwrap();
        let e = open(&store).unwrap_err();
        assert!(matches!(e, StoreFormatError::Newer { found } if found == STORE_FORMAT + 1));
        let text = e.to_string();
        assert!(
            text.contains(&format!("format {}", STORE_FORMAT + 1))
                && text.contains(&format!("up to {STORE_FORMAT}")),
            "{text}"
        );
        assert_eq!(
            store.get(Space::Raft, KEY).unwrap(),
            Some((STORE_FORMAT + 1).to_be_bytes().to_vec())
        );
    }

    #[test]
    fn a_damaged_format_row_is_named() {
        let store = MemStore::new();
        let mut batch = WriteBatch::new();
        batch.put(Space::Raft, KEY.to_vec(), vec![0, 1]);
        store.write(batch, engram_storage::Durability::Sync).unwrap();
        let e = open(&store).unwrap_err();
        assert!(matches!(e, StoreFormatError::Malformed { len: 2 }), "{e}");
    }
}
