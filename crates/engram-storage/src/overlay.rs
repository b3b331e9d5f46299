//! Writes held in memory over a store that does not have them yet.
//!
//! The state machine applies a whole group of committed entries before it writes anything:
//! each entry must read what the entries before it in the group wrote, so planning reads an
//! [`Overlay`] layered over the store ([`Overlay::over`]), and the group reaches the store as
//! one batch ([`Overlay::into_batch`]). Rows rewritten inside the group (the chain head, the
//! applied log id) are written once.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;

use crate::{KeyValue, Mutation, ReadView, Space, StorageError, WriteBatch, remove_range};

/// Pending writes: per space, each key's last put (`Some`) or delete (`None`), and the ranges
/// deleted. A key put after a range delete that covers it is in the map and wins over the range.
#[derive(Default, Debug)]
pub struct Overlay {
    keys: [BTreeMap<Vec<u8>, Option<Vec<u8>>>; Space::ALL.len()],
    ranges: Vec<(Space, Vec<u8>, Vec<u8>)>,
}

fn slot(space: Space) -> usize {
    match space {
        Space::Log => 0,
        Space::Raft => 1,
        Space::State => 2,
        Space::Access => 3,
    }
}

impl Overlay {
    pub fn new() -> Overlay {
        Overlay::default()
    }

    /// Adds a batch after everything already held, as if it had been written.
    pub fn absorb(&mut self, batch: WriteBatch) {
        for m in batch.mutations {
            match m {
                Mutation::Put { space, key, value } => {
                    self.keys[slot(space)].insert(key, Some(value));
                }
                Mutation::Delete { space, key } => {
                    self.keys[slot(space)].insert(key, None);
                }
                Mutation::DeleteRange { space, start, end } => {
                    if start < end {
                        remove_range(&mut self.keys[slot(space)], &start, &end);
                        self.ranges.push((space, start, end));
                    }
                }
            }
        }
    }

    /// One batch with the same effect as every absorbed batch in order: the range deletes
    /// first, then each key's last write, in key order.
    pub fn into_batch(self) -> WriteBatch {
        let mut batch = WriteBatch::new();
        for (space, start, end) in self.ranges {
            batch.delete_range(space, start, end);
        }
        for (space, map) in Space::ALL.into_iter().zip(self.keys) {
            for (key, value) in map {
                match value {
                    Some(value) => batch.put(space, key, value),
                    None => batch.delete(space, key),
                }
            }
        }
        batch
    }

    /// Reads `base` as it will be once these writes reach it.
    pub fn over<'a>(&'a self, base: &'a dyn ReadView) -> Layered<'a> {
        Layered { base, overlay: self }
    }

    fn range_deleted(&self, space: Space, key: &[u8]) -> bool {
        self.ranges
            .iter()
            .any(|(s, start, end)| *s == space && start.as_slice() <= key && key < end.as_slice())
    }

    fn pending<'a>(
        &'a self,
        space: Space,
        start: &'a [u8],
        end: Option<&'a [u8]>,
    ) -> std::collections::btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>> {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        self.keys[slot(space)].range::<[u8], _>((Bound::Included(start), upper))
    }
}

/// A store read through the writes an [`Overlay`] holds for it.
pub struct Layered<'a> {
    base: &'a dyn ReadView,
    overlay: &'a Overlay,
}

impl Layered<'_> {
    /// Merges the base's pairs in `[start, end)` with the pending ones, in `reverse` order or
    /// not, reading the base a page at a time so pending deletes cannot shorten the answer.
    fn merged(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<KeyValue>, StorageError> {
        let mut out = Vec::new();
        if limit == 0 || end.is_some_and(|e| e <= start) {
            return Ok(out);
        }
        let pending = self.overlay.pending(space, start, end);
        if self.overlay.ranges.is_empty() && pending.clone().next().is_none() {
            // Nothing pending in the range: the base answers alone.
            return if reverse {
                self.base.scan_rev(space, start, end, limit)
            } else {
                self.base.scan(space, start, end, limit)
            };
        }
        let mut pending: PendingIter<'_> = if reverse {
            Box::new(pending.rev())
        } else {
            Box::new(pending)
        };
        let mut next_pending = pending.next();
        // The base is read in pages: forward from `from`, or backward below `until`.
        let mut from = start.to_vec();
        let mut until = end.map(<[u8]>::to_vec);
        // Whether `a` comes before `b` in the scan's order.
        let order = |a: &[u8], b: &[u8]| if reverse { b.cmp(a) } else { a.cmp(b) };
        loop {
            let page = if reverse {
                self.base.scan_rev(space, start, until.as_deref(), limit)?
            } else {
                self.base.scan(space, &from, end, limit)?
            };
            let last_page = page.len() < limit;
            let page_end = page.last().map(|(k, _)| k.clone());
            for (key, value) in page {
                // Pending keys before this base key come first.
                while let Some((pk, pv)) = next_pending {
                    if order(pk, &key) == Ordering::Less {
                        if let Some(v) = pv {
                            out.push((pk.clone(), v.clone()));
                            if out.len() == limit {
                                return Ok(out);
                            }
                        }
                        next_pending = pending.next();
                    } else {
                        break;
                    }
                }
                match next_pending {
                    Some((pk, pv)) if *pk == key => {
                        if let Some(v) = pv {
                            out.push((key, v.clone()));
                        }
                        next_pending = pending.next();
                    }
                    _ if self.overlay.range_deleted(space, &key) => {}
                    _ => out.push((key, value)),
                }
                if out.len() == limit {
                    return Ok(out);
                }
            }
            match page_end {
                Some(last) if !last_page => {
                    if reverse {
                        until = Some(last);
                    } else {
                        from = last;
                        from.push(0);
                    }
                }
                _ => break,
            }
        }
        while let Some((pk, pv)) = next_pending {
            if let Some(v) = pv {
                out.push((pk.clone(), v.clone()));
                if out.len() == limit {
                    break;
                }
            }
            next_pending = pending.next();
        }
        Ok(out)
    }
}

impl ReadView for Layered<'_> {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(value) = self.overlay.keys[slot(space)].get(key) {
            return Ok(value.clone());
        }
        if self.overlay.range_deleted(space, key) {
            return Ok(None);
        }
        self.base.get(space, key)
    }

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.merged(space, start, end, limit, false)
    }

    fn scan_rev(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.merged(space, start, end, limit, true)
    }
}

/// Pending writes in scan order: each key with its put value, or `None` for a delete.
type PendingIter<'a> = Box<dyn Iterator<Item = (&'a Vec<u8>, &'a Option<Vec<u8>>)> + 'a>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Durability, MemStore, Store};

    /// A small deterministic generator, so a failure names a reproducible case.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        fn key(&mut self) -> Vec<u8> {
            let len = 1 + self.below(3) as usize;
            (0..len).map(|_| b'a' + self.below(4) as u8).collect()
        }

        fn batch(&mut self) -> WriteBatch {
            let mut batch = WriteBatch::new();
            for _ in 0..1 + self.below(6) {
                let space = Space::ALL[self.below(3) as usize];
                match self.below(10) {
                    0..=5 => batch.put(space, self.key(), vec![self.below(250) as u8]),
                    6..=8 => batch.delete(space, self.key()),
                    _ => batch.delete_range(space, self.key(), self.key()),
                }
            }
            batch
        }
    }

    fn bounds(rng: &mut Rng) -> (Vec<u8>, Option<Vec<u8>>, usize) {
        let start = if rng.below(4) == 0 { Vec::new() } else { rng.key() };
        let end = if rng.below(3) == 0 { None } else { Some(rng.key()) };
        (start, end, 1 + rng.below(12) as usize)
    }

    #[test]
    fn a_store_read_through_an_overlay_reads_as_if_the_writes_had_been_made() {
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let written = MemStore::new();
            let base = MemStore::new();
            for _ in 0..rng.below(12) {
                let batch = rng.batch();
                written.write(batch.clone(), Durability::Buffered).unwrap();
                base.write(batch, Durability::Buffered).unwrap();
            }
            let mut overlay = Overlay::new();
            for _ in 0..rng.below(12) {
                let batch = rng.batch();
                written.write(batch.clone(), Durability::Buffered).unwrap();
                overlay.absorb(batch);
            }
            let view = overlay.over(&base);
            for _ in 0..40 {
                let space = Space::ALL[rng.below(3) as usize];
                let key = rng.key();
                assert_eq!(
                    view.get(space, &key).unwrap(),
                    written.get(space, &key).unwrap(),
                    "seed {seed}"
                );
                let (start, end, limit) = bounds(&mut rng);
                assert_eq!(
                    view.scan(space, &start, end.as_deref(), limit).unwrap(),
                    written.scan(space, &start, end.as_deref(), limit).unwrap(),
                    "seed {seed}: scan {start:?}..{end:?} limit {limit}"
                );
                assert_eq!(
                    view.scan_rev(space, &start, end.as_deref(), limit).unwrap(),
                    written.scan_rev(space, &start, end.as_deref(), limit).unwrap(),
                    "seed {seed}: scan_rev {start:?}..{end:?} limit {limit}"
                );
            }
            // The merged batch has the same effect as the batches one by one.
            base.write(overlay.into_batch(), Durability::Buffered).unwrap();
            for space in Space::ALL {
                assert_eq!(
                    base.scan(space, &[], None, usize::MAX).unwrap(),
                    written.scan(space, &[], None, usize::MAX).unwrap(),
                    "seed {seed}"
                );
            }
        }
    }

    #[test]
    fn rewrites_of_one_key_become_one_write() {
        let mut overlay = Overlay::new();
        for v in 0..5u8 {
            let mut batch = WriteBatch::new();
            batch.put(Space::State, b"head".to_vec(), vec![v]);
            overlay.absorb(batch);
        }
        let batch = overlay.into_batch();
        assert_eq!(
            batch.mutations,
            vec![Mutation::Put {
                space: Space::State,
                key: b"head".to_vec(),
                value: vec![4]
            }]
        );
    }
}
