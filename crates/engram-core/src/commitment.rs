//! The state commitment (invariant I13, `docs/AUDIT.md` "State commitment"): one pair per slot
//! in an [`engram_statetree::StateTree`], whose root commits to every slot's history and live
//! claims.
//!
//! A slot is (namespace, branch, entity, attribute). Its key ([`slot_key`]) is 16 bytes of the
//! entity's hash then 16 of the attribute's, so an entity's slots are one subtree. Its digest is
//! a chain over the transactions that wrote it ([`step`]): each link hashes the link before, the
//! transaction and the hashes of the datoms it wrote there, so the digest commits to the slot's
//! whole history, in order, and a reader given that history recomputes it (and folds the live
//! claims from it, as the reads do). The hashes are those the audit entries commit to, which a
//! redaction keeps, so forgetting a value changes no digest. A branch's slot chains the
//! branch's own datoms; what it sees of main up to the fork is main's slot.
//!
//! Each slot's digest is a state row (`Z`, keyed by the slot key), written in the batch of the
//! transaction that moved it: replicated state, in snapshots and the replica digest, so a
//! restart or an install rebuilds the map from the rows alone ([`load`]). A store written
//! before these rows existed is brought up to date once by [`rebuild`], which chains every
//! slot's datoms exactly as apply would have, and marks the store (`Mstate-commitment`).
//!
//! Must not depend on: the engine or the planner (the engine calls this with what the planner
//! decided), the server or the network.

use std::collections::BTreeMap;

use engram_statetree::{Digest, Key, StateTree};
use engram_storage::{ReadView, Space, WriteBatch, prefix_end};
pub use engram_types::slot::{ENTITY_PREFIX_BITS, entity_prefix, slot_key, step};
use engram_types::{Datom, Hash, TxId};

use crate::{CoreError, keys};

/// The `Z` row's format byte.
const ROW_FORMAT: u8 = 1;

/// Rows a rebuild reads per page.
const PAGE_ROWS: usize = 4096;

/// The `Z` row of a slot: its key.
pub fn row_key(slot: &Key) -> Vec<u8> {
    let mut k = Vec::with_capacity(33);
    k.push(keys::SLOT_COMMITMENT);
    k.extend_from_slice(slot);
    k
}

/// The `Z` row's value: format byte, then the digest.
pub fn encode_row(digest: &Digest) -> Vec<u8> {
    let mut v = Vec::with_capacity(33);
    v.push(ROW_FORMAT);
    v.extend_from_slice(digest);
    v
}

pub fn decode_row(key: &[u8], bytes: &[u8]) -> Result<(Key, Digest), CoreError> {
    let what = || format!("slot commitment row {}", crate::rows::hex(key));
    let slot: Key = key
        .get(1..)
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| CoreError::corrupt(what(), format!("key of {} bytes, expected 33", key.len())))?;
    match bytes.split_first() {
        Some((&ROW_FORMAT, digest)) => Ok((
            slot,
            digest.try_into().map_err(|_| {
                CoreError::corrupt(what(), format!("{} digest bytes, expected 32", digest.len()))
            })?,
        )),
        Some((&format, _)) => Err(CoreError::corrupt(
            what(),
            format!("format {format}, this build reads {ROW_FORMAT}"),
        )),
        None => Err(CoreError::corrupt(what(), "empty")),
    }
}

/// The slot's digest as the store holds it.
pub fn stored(view: &dyn ReadView, slot: &Key) -> Result<Option<Digest>, CoreError> {
    match view.get(Space::State, &row_key(slot))? {
        Some(bytes) => Ok(Some(decode_row(&row_key(slot), &bytes)?.1)),
        None => Ok(None),
    }
}

/// Whether the store's `Z` rows cover every slot: written by a build that keeps them from the
/// store's first transaction on, or brought up to date by [`rebuild`].
pub fn marked(view: &dyn ReadView) -> Result<bool, CoreError> {
    Ok(view.get(Space::State, keys::META_STATE_COMMITMENT)?.is_some())
}

/// The mark [`marked`] reads, for a batch that makes the rows complete.
pub fn mark(batch: &mut WriteBatch) {
    batch.put(
        Space::State,
        keys::META_STATE_COMMITMENT.to_vec(),
        vec![ROW_FORMAT],
    );
}

/// The map the `Z` rows hold.
pub fn load(view: &dyn ReadView) -> Result<StateTree, CoreError> {
    let mut pairs = Vec::new();
    for_each_row(view, &[keys::SLOT_COMMITMENT], &mut |key, value| {
        pairs.push(decode_row(key, value)?);
        Ok(())
    })?;
    Ok(StateTree::from_pairs(pairs))
}

/// Every slot's digest computed from its datoms, as apply computes it one transaction at a
/// time: for a store written before the `Z` rows, and as the reference the scrub holds them
/// to. Reads every datom once; a redaction changes nothing here (its datoms keep their hashes).
pub fn rebuild(view: &dyn ReadView) -> Result<BTreeMap<Key, Digest>, CoreError> {
    let mut out = BTreeMap::new();
    rebuild_each(view, &mut |slot, digest| {
        out.insert(slot, digest);
        Ok(())
    })?;
    Ok(out)
}

/// [`rebuild`], handing each slot's digest to `visit` as soon as its datoms are read (each slot
/// once, in datom order), so a large store is rebuilt in bounded memory.
pub fn rebuild_each(
    view: &dyn ReadView,
    visit: &mut dyn FnMut(Key, Digest) -> Result<(), CoreError>,
) -> Result<(), CoreError> {
    // EAVT (namespace, entity, attribute, tx, seq) and a branch's own (namespace, branch,
    // entity, attribute, tx, seq): each slot's datoms come together, in (tx, seq) order.
    for tag in [keys::EAVT, keys::BRANCH_EAVT] {
        let mut chain = SlotChain::default();
        for_each_datom(view, &[tag], &mut |d| {
            let key = slot_key(&d.namespace, d.branch.as_ref(), d.entity, &d.attribute);
            if chain.slot != Some(key) {
                chain.close(visit)?;
                chain.slot = Some(key);
            }
            match &mut chain.pending {
                Some((tx, hashes)) if *tx == d.tx => hashes.push(d.hash()),
                _ => {
                    chain.link();
                    chain.pending = Some((d.tx, vec![d.hash()]));
                }
            }
            Ok(())
        })?;
        chain.close(visit)?;
    }
    Ok(())
}

/// The slot a rebuild is chaining: its key, its digest so far, and the transaction whose
/// datoms are being gathered.
#[derive(Default)]
struct SlotChain {
    slot: Option<Key>,
    digest: Option<Digest>,
    pending: Option<(TxId, Vec<Hash>)>,
}

impl SlotChain {
    /// Adds the pending transaction's link to the digest.
    fn link(&mut self) {
        if let Some((tx, hashes)) = self.pending.take() {
            self.digest = Some(step(self.digest.as_ref(), tx, &hashes));
        }
    }

    /// Ends the slot: its digest goes to `visit`.
    fn close(
        &mut self,
        visit: &mut dyn FnMut(Key, Digest) -> Result<(), CoreError>,
    ) -> Result<(), CoreError> {
        self.link();
        if let (Some(slot), Some(digest)) = (self.slot.take(), self.digest.take()) {
            visit(slot, digest)?;
        }
        Ok(())
    }
}

fn for_each_datom(
    view: &dyn ReadView,
    prefix: &[u8],
    visit: &mut dyn FnMut(Datom) -> Result<(), CoreError>,
) -> Result<(), CoreError> {
    for_each_row(view, prefix, &mut |key, value| {
        let d = Datom::decode(value)
            .map_err(|e| CoreError::corrupt(format!("datom row {}", crate::rows::hex(key)), e))?;
        visit(d)
    })
}

/// Called with each row's key and value; an error stops the walk.
type RowVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), CoreError> + 'a;

/// Every state row under `prefix`, in key order, read a page at a time.
fn for_each_row(view: &dyn ReadView, prefix: &[u8], visit: &mut RowVisitor<'_>) -> Result<(), CoreError> {
    let end = prefix_end(prefix);
    let mut from = prefix.to_vec();
    loop {
        let rows = view.scan(Space::State, &from, end.as_deref(), PAGE_ROWS)?;
        let full = rows.len() == PAGE_ROWS;
        for (key, value) in &rows {
            visit(key, value)?;
        }
        match rows.last() {
            Some((last, _)) if full => from = [last.as_slice(), &[0]].concat(),
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use engram_storage::{Durability, MemStore, Store};
    use engram_types::{Attribute, EntityId, Namespace, Op, Provenance, Value};

    use super::*;

    fn datom(e: u64, tx: u64) -> Datom {
        Datom {
            namespace: Namespace::new("t/pages").unwrap(),
            branch: None,
            entity: EntityId(e),
            attribute: Attribute::new(":p/v").unwrap(),
            value: Value::I64(tx as i64),
            op: Op::Assert,
            valid_from_ns: 0,
            valid_to_ns: None,
            tx: TxId(tx),
            provenance: Provenance {
                agent: "a1".into(),
                ..Provenance::default()
            },
            salt: None,
        }
    }

    #[test]
    fn rows_and_rebuilds_read_past_one_page() {
        // 3,000 slots of two datoms each: 6,000 datom rows and 3,000 digest rows, past the
        // 4,096 rows a page reads.
        let store = MemStore::new();
        let mut batch = WriteBatch::new();
        let mut want = BTreeMap::new();
        for e in 1..=3_000u64 {
            let (first, second) = (datom(e, 10), datom(e, 20 + e));
            for d in [&first, &second] {
                batch.put(
                    Space::State,
                    keys::eavt(&d.namespace, d.entity, &d.attribute, d.tx, 0),
                    d.encode(),
                );
            }
            let digest = step(
                Some(&step(None, first.tx, &[first.hash()])),
                second.tx,
                &[second.hash()],
            );
            let slot = slot_key(&first.namespace, None, first.entity, &first.attribute);
            batch.put(Space::State, row_key(&slot), encode_row(&digest));
            want.insert(slot, digest);
        }
        store.write(batch, Durability::Sync).unwrap();
        assert_eq!(rebuild(&store).unwrap(), want);
        let tree = load(&store).unwrap();
        assert_eq!(tree.len(), 3_000);
        assert_eq!(tree.root(), StateTree::from_pairs(want).root());
    }

    #[test]
    fn a_damaged_row_is_named() {
        let slot = [7u8; 32];
        let err = decode_row(&row_key(&slot), &[9, 1, 2]).unwrap_err().to_string();
        assert!(
            err.contains("slot commitment row") && err.contains("format 9"),
            "{err}"
        );
        let err = decode_row(&row_key(&slot), &[ROW_FORMAT, 1, 2])
            .unwrap_err()
            .to_string();
        assert!(err.contains("2 digest bytes, expected 32"), "{err}");
        let err = decode_row(&[keys::SLOT_COMMITMENT, 1], &encode_row(&[0; 32]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected 33"), "{err}");
        assert_eq!(
            decode_row(&row_key(&slot), &encode_row(&[3; 32])).unwrap(),
            (slot, [3; 32])
        );
    }
}
