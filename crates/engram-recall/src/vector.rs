//! The bitemporal vector index: exact nearest neighbours by cosine similarity, answerable as of
//! any transaction.
//!
//! Every vector is stored unit-length, in one contiguous arena per scope and dimension, with
//! the transactions between which its fact holds (as in the text index). A query scans every
//! vector of its dimension that holds at its transaction and scores it by the dot product with
//! the unit-length query, summed in component order: the same sums, so the same answer, on
//! every node and in a replay. The scan is exact, so as-of answers need no approximation
//! argument; its cost is linear in the vectors ever stored for that dimension (measured in
//! `bench/`). Facts are never removed.

use std::collections::HashMap;

use engram_types::{EntityId, TxId};

use crate::types::{FactMeta, FactRef, Held, Scope};

/// The vector index of every scope a node holds.
#[derive(Default)]
pub(crate) struct VectorIndex {
    shelves: HashMap<Scope, Shelf>,
}

#[derive(Default)]
struct Shelf {
    /// One arena per dimension: vectors of different dimensions are never compared.
    arenas: HashMap<usize, Arena>,
    /// Fact → (dimension, position in that arena).
    by_fact: HashMap<FactRef, (usize, u32)>,
    by_entity: HashMap<EntityId, Vec<(usize, u32)>>,
}

struct Arena {
    /// `docs.len() * dimension` components, each vector unit-length.
    data: Vec<f32>,
    docs: Vec<Doc>,
}

pub(crate) struct Doc {
    pub(crate) fact: FactRef,
    pub(crate) meta: FactMeta,
    held: Held,
}

impl Doc {
    pub(crate) fn holds_at(&self, as_of: TxId) -> bool {
        self.held.at(as_of)
    }
}

/// `v` scaled to length one, or `None` for the zero vector (it has no direction to compare).
pub(crate) fn unit(v: &[f32]) -> Option<Vec<f32>> {
    // The norm is summed in f64, in order, so every node scales by the same factor.
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return None;
    }
    Some(v.iter().map(|x| (f64::from(*x) / norm) as f32).collect())
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl VectorIndex {
    /// How many vectors were ever indexed, across scopes.
    pub(crate) fn facts(&self) -> usize {
        self.shelves
            .values()
            .flat_map(|s| s.arenas.values())
            .map(|a| a.docs.len())
            .sum()
    }

    /// Indexes `vector`, the value `fact` asserted, holding from `fact.tx` on. Returns whether
    /// it was indexed: the zero vector, or a fact already indexed, is not.
    pub(crate) fn add(&mut self, scope: &Scope, fact: FactRef, vector: &[f32], meta: FactMeta) -> bool {
        let Some(unit) = unit(vector) else {
            return false;
        };
        let shelf = self.shelves.entry(scope.clone()).or_default();
        if shelf.by_fact.contains_key(&fact) {
            return false;
        }
        let dim = unit.len();
        let arena = shelf.arenas.entry(dim).or_insert_with(|| Arena {
            data: Vec::new(),
            docs: Vec::new(),
        });
        let Ok(id) = u32::try_from(arena.docs.len()) else {
            return false;
        };
        arena.data.extend_from_slice(&unit);
        shelf.by_fact.insert(fact.clone(), (dim, id));
        shelf.by_entity.entry(fact.entity).or_default().push((dim, id));
        arena.docs.push(Doc {
            held: Held::since(fact.tx),
            fact,
            meta,
        });
        true
    }

    /// Records that `fact` no longer holds from `at` on. Returns whether it was indexed and
    /// holding.
    pub(crate) fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> bool {
        let Some(shelf) = self.shelves.get_mut(scope) else {
            return false;
        };
        let Some(&(dim, id)) = shelf.by_fact.get(fact) else {
            return false;
        };
        let Some(doc) = shelf
            .arenas
            .get_mut(&dim)
            .and_then(|a| a.docs.get_mut(id as usize))
        else {
            return false;
        };
        doc.held.end(at)
    }

    /// The `limit` vectors of `scope` nearest to `query` (unit-length) among those holding at
    /// `as_of` that `keep` accepts, with their cosine similarity; best first, ties by fact.
    pub(crate) fn nearest(
        &self,
        scope: &Scope,
        query: &[f32],
        as_of: TxId,
        keep: &dyn Fn(&Doc) -> bool,
        limit: usize,
    ) -> Vec<(FactRef, f32)> {
        let Some(arena) = self.shelves.get(scope).and_then(|s| s.arenas.get(&query.len())) else {
            return Vec::new();
        };
        let dim = query.len();
        let mut scored: Vec<(f32, u32)> = arena
            .docs
            .iter()
            .zip(arena.data.chunks_exact(dim))
            .enumerate()
            .filter(|(_, (doc, _))| doc.holds_at(as_of) && keep(doc))
            .map(|(i, (_, v))| (dot(query, v), i as u32))
            .collect();
        let better = |a: &(f32, u32), b: &(f32, u32)| {
            b.0.total_cmp(&a.0)
                .then_with(|| arena.docs[a.1 as usize].fact.cmp(&arena.docs[b.1 as usize].fact))
        };
        if scored.len() > limit && limit > 0 {
            scored.select_nth_unstable_by(limit - 1, better);
            scored.truncate(limit);
        }
        scored.truncate(limit);
        scored.sort_by(better);
        scored
            .into_iter()
            .map(|(score, i)| (arena.docs[i as usize].fact.clone(), score))
            .collect()
    }

    /// The vector facts of `entity` in `scope` holding at `as_of`.
    pub(crate) fn of_entity<'a>(
        &'a self,
        scope: &Scope,
        entity: EntityId,
        as_of: TxId,
    ) -> impl Iterator<Item = &'a Doc> + 'a {
        let shelf = self.shelves.get(scope);
        shelf
            .and_then(|s| s.by_entity.get(&entity))
            .into_iter()
            .flatten()
            .filter_map(move |(dim, id)| shelf?.arenas.get(dim)?.docs.get(*id as usize))
            .filter(move |d| d.holds_at(as_of))
    }

    pub(crate) fn meta(&self, scope: &Scope, fact: &FactRef) -> Option<&FactMeta> {
        let shelf = self.shelves.get(scope)?;
        let (dim, id) = shelf.by_fact.get(fact)?;
        Some(&shelf.arenas.get(dim)?.docs.get(*id as usize)?.meta)
    }
}
