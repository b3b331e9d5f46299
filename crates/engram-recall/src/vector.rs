//! The bitemporal vector index: exact nearest neighbours by cosine similarity, answerable as of
//! any transaction.
//!
//! Every vector is stored unit-length, in one contiguous arena per scope and dimension, with
//! the transactions between which its fact holds (as in the text index). A query scans every
//! vector of its dimension that holds at its transaction and scores it by the dot product with
//! the unit-length query, summed in a fixed order: the same sums, so the same answer, on every
//! node and in a replay. Its cost is linear in the vectors ever stored for that dimension
//! (measured in `bench/`). Facts are never removed.
//!
//! Wide vectors (at least [`APPROXIMATE_FROM_DIMENSION`] components) are also kept as 8-bit
//! codes; when a query would scan more than [`EXACT_BELOW_VECTORS`] of them it ranks them by
//! the codes first (a quarter of the memory read) and re-ranks the best few hundred exactly.
//! That first pass is approximate (a vector just outside the candidates is missed), but it is
//! deterministic and independent of feed history, so nodes and replays still agree exactly.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use engram_types::{EntityId, TxId};

use crate::types::{FactMeta, FactRef, Held, Scope};

/// The vector index of every scope a node holds.
#[derive(Default, Serialize, Deserialize)]
pub(crate) struct VectorIndex {
    shelves: HashMap<Scope, Shelf>,
}

#[derive(Default, Serialize, Deserialize)]
struct Shelf {
    /// One arena per dimension: vectors of different dimensions are never compared.
    arenas: HashMap<usize, Arena>,
    /// Fact → (dimension, position in that arena).
    by_fact: HashMap<FactRef, (usize, u32)>,
    by_entity: HashMap<EntityId, Vec<(usize, u32)>>,
}

#[derive(Serialize, Deserialize)]
struct Arena {
    /// `docs.len() * dimension` components, each vector unit-length.
    data: Vec<f32>,
    /// The same vectors as 8-bit codes (see [`Codes`]), for the approximate first pass.
    codes: Codes,
    /// Per vector, beside `data`: when its fact holds (the scan reads only these two).
    held: Vec<Held>,
    docs: Vec<Doc>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Doc {
    pub(crate) fact: FactRef,
    pub(crate) meta: FactMeta,
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

/// Lanes of the dot product: components `i`, `i + LANES`, ... are summed in lane `i % LANES`,
/// and the lanes then in order. A fixed order, so every node gets the same sum; eight
/// independent sums, so the processor adds them side by side instead of waiting on one chain.
const LANES: usize = 8;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let (ac, bc) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for i in 0..LANES {
            lanes[i] += x[i] * y[i];
        }
    }
    for (i, (x, y)) in ar.iter().zip(br).enumerate() {
        lanes[i] += x * y;
    }
    lanes.iter().sum()
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
            codes: Codes::default(),
            held: Vec::new(),
            docs: Vec::new(),
        });
        let Ok(id) = u32::try_from(arena.docs.len()) else {
            return false;
        };
        arena.data.extend_from_slice(&unit);
        if dim >= APPROXIMATE_FROM_DIMENSION {
            arena.codes.push(&unit);
        }
        shelf.by_fact.insert(fact.clone(), (dim, id));
        shelf.by_entity.entry(fact.entity).or_default().push((dim, id));
        arena.held.push(Held::since(fact.tx));
        arena.docs.push(Doc { fact, meta });
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
        shelf
            .arenas
            .get_mut(&dim)
            .and_then(|a| a.held.get_mut(id as usize))
            .is_some_and(|held| held.end(at))
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
        // Vectors are numbered in the order they were fed: those asserted by `as_of` are a
        // prefix, and numbers order them as their facts do (the tie-break).
        let fed = arena.held.partition_point(|h| h.begun_by(as_of));
        let better = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1));
        let kept = |(_, i): (f32, u32)| arena.docs.get(i as usize).filter(|d| keep(d));
        let holding = |i: usize| arena.held.get(i).is_some_and(|h| h.at(as_of));
        let exact = |i: u32| {
            let at = i as usize * dim;
            arena
                .data
                .get(at..at + dim)
                .map_or(f32::NEG_INFINITY, |v| dot(query, v))
        };
        // The approximate pass checks `keep` while choosing candidates; the re-rank need not
        // check it again.
        let approximate = dim >= APPROXIMATE_FROM_DIMENSION && fed > EXACT_BELOW_VECTORS;
        let mut scored: Vec<(f32, u32)> = if approximate {
            // Wide vectors, many of them: rank by the 8-bit codes first (a quarter of the
            // memory read), then re-rank the best candidates exactly.
            let q = Codes::of(query);
            let mut approx: Vec<(f32, u32)> = (0..fed)
                .filter(|i| holding(*i))
                .map(|i| (arena.codes.dot(i, &q), i as u32))
                .collect();
            let candidates = limit.saturating_mul(RERANK_PER_HIT).max(MIN_CANDIDATES);
            crate::fuse::best_admitted(&mut approx, candidates, better, kept)
                .into_iter()
                .map(|((_, i), _)| (exact(i), i))
                .collect()
        } else {
            arena.data[..fed * dim]
                .chunks_exact(dim)
                .enumerate()
                .filter(|(i, _)| holding(*i))
                .map(|(i, v)| (dot(query, v), i as u32))
                .collect()
        };
        let admitted = |item: (f32, u32)| {
            if approximate {
                arena.docs.get(item.1 as usize)
            } else {
                kept(item)
            }
        };
        crate::fuse::best_admitted(&mut scored, limit, better, admitted)
            .into_iter()
            .map(|((score, _), doc)| (doc.fact.clone(), score))
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
            .filter_map(move |(dim, id)| {
                let arena = shelf?.arenas.get(dim)?;
                arena
                    .held
                    .get(*id as usize)?
                    .at(as_of)
                    .then(|| arena.docs.get(*id as usize))?
            })
    }

    pub(crate) fn meta(&self, scope: &Scope, fact: &FactRef) -> Option<&FactMeta> {
        let shelf = self.shelves.get(scope)?;
        let (dim, id) = shelf.by_fact.get(fact)?;
        Some(&shelf.arenas.get(dim)?.docs.get(*id as usize)?.meta)
    }
}

/// Vectors at least this wide are also kept as 8-bit codes, and searched through them when
/// there are many: below it the exact scan reads little memory anyway.
pub(crate) const APPROXIMATE_FROM_DIMENSION: usize = 64;

/// Up to this many vectors (asserted by the query's transaction) are always scanned exactly.
pub(crate) const EXACT_BELOW_VECTORS: usize = 4096;

/// Candidates the approximate pass keeps per hit wanted, for the exact re-rank.
const RERANK_PER_HIT: usize = 8;
const MIN_CANDIDATES: usize = 256;

/// Vectors as signed 8-bit codes with one scale each (`component ≈ code * scale`, the scale
/// being the largest magnitude / 127). The approximate similarity of two coded vectors is the
/// integer dot product of their codes times both scales: an integer sum, exact in any order,
/// so every node and every replay ranks the candidates alike. Each vector is coded alone, so
/// the codes do not depend on what else was fed, and an as-of search still answers exactly as
/// a replay to its transaction does.
#[derive(Default, Serialize, Deserialize)]
pub(crate) struct Codes {
    codes: Vec<i8>,
    scales: Vec<f32>,
    dim: usize,
}

impl Codes {
    /// One vector's codes.
    pub(crate) fn of(v: &[f32]) -> Codes {
        let mut c = Codes::default();
        c.push(v);
        c
    }

    pub(crate) fn push(&mut self, v: &[f32]) {
        self.dim = v.len();
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        self.codes
            .extend(v.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8));
        self.scales.push(scale);
    }

    /// The approximate similarity of vector `i` to the one vector of `q`.
    pub(crate) fn dot(&self, i: usize, q: &Codes) -> f32 {
        let at = i * self.dim;
        let (Some(v), Some(scale)) = (self.codes.get(at..at + self.dim), self.scales.get(i)) else {
            return f32::NEG_INFINITY;
        };
        let sum: i32 = v
            .iter()
            .zip(&q.codes)
            .map(|(a, b)| i32::from(*a) * i32::from(*b))
            .sum();
        sum as f32 * scale * q.scales.first().copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use engram_types::{Attribute, Status};

    use super::*;

    fn scope() -> Scope {
        Scope {
            namespace: engram_types::Namespace::new("team/a").expect("valid"),
            branch: None,
        }
    }

    fn fact(i: u64) -> FactRef {
        FactRef {
            tx: TxId(1 + i / 10),
            seq: (i % 10) as u32,
            entity: EntityId(i),
            attribute: Attribute::new(":doc/embedding").expect("valid"),
        }
    }

    fn meta() -> FactMeta {
        FactMeta {
            agent: "a".into(),
            status: Status::Candidate,
            confidence: 0.5,
            tx_time_ns: 0,
            valid_from_ns: 0,
            valid_to_ns: None,
        }
    }

    /// Deterministic noise in [-1, 1).
    struct Noise(u64);
    impl Noise {
        fn next(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
        fn vector(&mut self, dim: usize) -> Vec<f32> {
            (0..dim).map(|_| self.next()).collect()
        }
    }

    /// `n` vectors of `dim` around 40 centres (as embeddings cluster by topic); every 7th is
    /// ended 3 transactions after it began.
    fn clustered(n: u64, dim: usize) -> (VectorIndex, Vec<Vec<f32>>) {
        let mut noise = Noise(11);
        let centres: Vec<Vec<f32>> = (0..40).map(|_| noise.vector(dim)).collect();
        let mut index = VectorIndex::default();
        let mut all = Vec::new();
        for i in 0..n {
            let c = &centres[(i % 40) as usize];
            let v: Vec<f32> = c.iter().map(|x| x + 0.15 * noise.next()).collect();
            assert!(index.add(&scope(), fact(i), &v, meta()));
            if i.is_multiple_of(7) && i >= 30 {
                index.end(&scope(), &fact(i - 30), fact(i).tx);
            }
            all.push(v);
        }
        (index, all)
    }

    /// The `k` nearest of the unit vectors `units` that `held` accepts, in f64.
    fn exact_top(units: &[Vec<f32>], held: impl Fn(u64) -> bool, q: &[f32], k: usize) -> Vec<u64> {
        let q = unit(q).expect("non-zero");
        let mut scored: Vec<(f64, u64)> = units
            .iter()
            .enumerate()
            .filter(|(i, _)| held(*i as u64))
            .map(|(i, v)| {
                (
                    v.iter().zip(&q).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum(),
                    i as u64,
                )
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(k).map(|(_, i)| i).collect()
    }

    #[test]
    fn wide_vectors_found_through_codes_are_nearly_always_the_exact_nearest() {
        let (n, dim) = (12_000, 96);
        let (index, all) = clustered(n, dim);
        let units: Vec<Vec<f32>> = all.iter().map(|v| unit(v).expect("non-zero")).collect();
        let as_of = fact(n - 1).tx;
        // Entity j was ended when entity j + 30 was fed, if that is a multiple of 7.
        let held = |j: u64| {
            let by = j + 30;
            !(by.is_multiple_of(7) && by < n && fact(by).tx <= as_of)
        };
        let mut noise = Noise(99);
        let (mut found, mut wanted, mut first) = (0, 0, 0);
        for t in 0..60 {
            let base = &all[(t * 197) % all.len()];
            let q: Vec<f32> = base.iter().map(|x| x + 0.3 * noise.next()).collect();
            let qu = unit(&q).expect("non-zero");
            let got: Vec<u64> = index
                .nearest(&scope(), &qu, as_of, &|_| true, 10)
                .iter()
                .map(|(f, _)| f.entity.0)
                .collect();
            let want = exact_top(&units, held, &q, 10);
            assert_eq!(got.len(), 10);
            found += got.iter().filter(|e| want.contains(e)).count();
            wanted += want.len();
            first += usize::from(got[0] == want[0]);
        }
        let recall = found as f64 / wanted as f64;
        assert!(recall >= 0.97, "recall@10 against the exact scan: {recall}");
        assert!(first >= 57, "the exact nearest came first {first} times of 60");
    }

    #[test]
    fn an_as_of_search_through_codes_answers_as_a_replay_does() {
        let dim = 64;
        let (full, all) = clustered(9_000, dim);
        let mut noise = Noise(5);
        for upto in [5_000u64, 7_777, 9_000] {
            let (replay, _) = clustered(upto, dim);
            let as_of = fact(upto - 1).tx;
            for t in 0..10 {
                let q: Vec<f32> = all[t * 311].iter().map(|x| x + 0.3 * noise.next()).collect();
                let q = unit(&q).expect("non-zero");
                // Only even entities: the filter is checked in the approximate order too.
                let keep = |d: &Doc| d.fact.entity.0.is_multiple_of(2);
                assert_eq!(
                    full.nearest(&scope(), &q, as_of, &keep, 40),
                    replay.nearest(&scope(), &q, as_of, &keep, 40),
                    "as of {as_of:?}"
                );
            }
        }
    }
}
