//! Recall over every signal at once: the text, vector and graph indexes of a node, fed
//! together, and the query that fuses them.
//!
//! How one query is answered, as of its transaction `T`:
//! 1. **text**: the facts whose words match, by BM25 (see `text`);
//! 2. **vector**: the vectors nearest the query vector, by cosine similarity (see `vector`).
//!    A vector describes its entity, so its rank is credited to the entity's facts the words
//!    found, else to its first text fact (the vector fact itself stands in when the entity
//!    has no text): one hit per entity, so an entity with many texts does not fill the page;
//! 3. **graph**: from the best entities of 1 and 2, the entities up to `hops` refs away, either
//!    direction, each hop counting [`HOP_DECAY`] of the one before, ranked among the seeds (so
//!    never above the hit that led to them); credited like 2;
//! 4. **recency** and **prior** re-order every fact 1–3 found;
//! 5. reciprocal rank fusion of the five rankings ([`WEIGHTS`]).
//!
//! Everything reads only what held at `T` (facts, vectors, edges and the text statistics), so
//! the answer is the one an index fed the log only up to `T` gives.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};

use engram_types::{Attribute, EntityId, Status, TxId};

use crate::expiry::Expiries;
use crate::fuse::{Ranking, fuse, ranks};
use crate::graph::Graph;
use crate::kind::Kinds;
use crate::text::{TextIndex, validate};
use crate::types::{FactMeta, FactRef, Hit, Query, RecallError, Scope, Signal};
use crate::vector::{VectorIndex, unit};

/// Hits each finding signal gathers per requested hit, before fusion re-ranks them.
const CANDIDATES_PER_HIT: usize = 4;

/// How much of a seed's weight one ref hop keeps.
pub const HOP_DECAY: f64 = 0.5;

/// How much each signal counts in the fusion. Text, vectors and the graph each find facts
/// (the graph's own ranking already halves each hop); recency and the priors only re-order,
/// so they weigh least. Chosen against the labelled corpus in `bench/` (`recall`): at 0.5 the
/// graph never lifted a neighbour into the first ten, since reciprocal rank fusion is flat
/// (0.5/61 is below the tenth rank of a full-weight signal, 1/70).
pub const WEIGHTS: [(Signal, f64); 5] = [
    (Signal::Text, 1.0),
    (Signal::Vector, 1.0),
    (Signal::Graph, 1.0),
    (Signal::Recency, 0.2),
    (Signal::Prior, 0.2),
];

/// Every recall index of a node: text, vectors, and the ref graph. Fed the committed log in
/// order (see [`crate::Feeder`]); derived state, kept out of the audit chain and the replica
/// digest.
#[derive(Default, Serialize, Deserialize)]
pub struct RecallIndex {
    pub(crate) text: TextIndex,
    pub(crate) vectors: VectorIndex,
    pub(crate) graph: Graph,
    pub(crate) kinds: Kinds,
    pub(crate) expiries: Expiries,
}

/// What an index holds, for metrics and the benchmark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    pub texts: usize,
    pub vectors: usize,
    pub edges: usize,
}

impl RecallIndex {
    pub fn new() -> RecallIndex {
        RecallIndex::default()
    }

    /// The newest transaction fed so far.
    pub fn last_tx(&self) -> TxId {
        self.text.last_tx()
    }

    /// The text index alone (BM25 without fusion).
    pub fn text(&self) -> &TextIndex {
        &self.text
    }

    pub fn sizes(&self) -> Sizes {
        Sizes {
            texts: self.text.facts(),
            vectors: self.vectors.facts(),
            edges: self.graph.edges(),
        }
    }

    /// Indexes `text`, asserted by `fact`. Returns whether anything was indexed.
    pub fn add_text(
        &mut self,
        scope: &Scope,
        fact: FactRef,
        text: &str,
        meta: FactMeta,
    ) -> Result<bool, RecallError> {
        self.text.add(scope, fact, text, meta)
    }

    /// Indexes `vector`, asserted by `fact`. Returns whether it was indexed (the zero vector
    /// is not).
    pub fn add_vector(
        &mut self,
        scope: &Scope,
        fact: FactRef,
        vector: &[f32],
        meta: FactMeta,
    ) -> Result<bool, RecallError> {
        self.text.advance(fact.tx)?;
        Ok(self.vectors.add(scope, fact, vector, meta))
    }

    /// Records the ref `fact.entity → target` asserted by `fact`.
    pub fn add_edge(&mut self, scope: &Scope, fact: FactRef, target: EntityId) -> Result<bool, RecallError> {
        self.text.advance(fact.tx)?;
        Ok(self.graph.add(scope, fact, target))
    }

    /// Records that `fact` says its entity is a memory of `kind` (see [`crate::MEMORY_KIND`]).
    /// Returns whether it was new.
    pub fn add_kind(&mut self, scope: &Scope, fact: FactRef, kind: &str) -> Result<bool, RecallError> {
        self.text.advance(fact.tx)?;
        Ok(self.kinds.add(scope, fact, kind))
    }

    /// Records that `fact` says its entity stops being worth recalling at `at_ns` (see
    /// [`crate::MEMORY_EXPIRES`]). Returns whether it was new.
    pub fn add_expiry(&mut self, scope: &Scope, fact: FactRef, at_ns: i64) -> Result<bool, RecallError> {
        self.text.advance(fact.tx)?;
        Ok(self.expiries.add(scope, fact, at_ns))
    }

    /// Records that `fact` no longer holds from `at` on, whichever index holds it. Returns
    /// whether it was indexed and holding.
    pub fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> Result<bool, RecallError> {
        let text = self.text.end(scope, fact, at)?;
        let vector = self.vectors.end(scope, fact, at);
        let edge = self.graph.end(scope, fact, at);
        let kind = self.kinds.end(scope, fact, at);
        let expiry = self.expiries.end(scope, fact, at);
        Ok(text || vector || edge || kind || expiry)
    }

    /// The best `query.k` facts of `scope` for `query`, fused from every signal.
    pub fn recall(&self, scope: &Scope, query: &Query) -> Result<Vec<Hit>, RecallError> {
        self.recall_where(scope, query, &|_| true)
    }

    /// [`recall`](Self::recall) over the facts whose attribute `shown` accepts only (a reader
    /// whose grants cover some attributes): the others are neither returned nor let lead to a
    /// hit (no vector, text or ref of a hidden attribute finds anything), though they still
    /// count in the text statistics, as in a replay.
    pub fn recall_where(
        &self,
        scope: &Scope,
        query: &Query,
        shown: &dyn Fn(&Attribute) -> bool,
    ) -> Result<Vec<Hit>, RecallError> {
        let words = validate(query)?;
        let as_of = query.as_of;
        let limit = query.k.saturating_mul(CANDIDATES_PER_HIT);
        let filter = &query.filter;
        // Which facts may be hits, beyond the filters on the fact itself: the caller may see
        // the attribute, and the entity is a kind of memory asked for that had not expired.
        // (What may merely lead to a hit, a ref walked, is `shown`'s alone.)
        let kind_ok =
            |e: EntityId| filter.kinds.is_empty() || self.kinds.is_any(scope, e, as_of, &filter.kinds);
        let live = |e: EntityId| {
            filter
                .expired_at_ns
                .is_none_or(|now_ns| !self.expiries.expired(scope, e, as_of, now_ns))
        };
        let admit = |f: &FactRef| shown(&f.attribute) && kind_ok(f.entity) && live(f.entity);

        // 1. Words.
        let found = if words.is_empty() {
            Vec::new()
        } else {
            self.text.ranked(scope, &words, query, &admit, limit)
        };
        let text_ranks = ranks(&found, |a, b| a.score == b.score);
        let text: Vec<(FactRef, usize)> = found.into_iter().map(|s| s.fact).zip(text_ranks).collect();

        // The facts an entity found by a vector or a ref shows as hits: those of its facts the
        // words found; else its first text fact that passes the filters (one hit per entity,
        // so an entity with many texts does not fill the page); else its first vector fact.
        let shows = |e: EntityId| -> Vec<FactRef> {
            let by_words: Vec<FactRef> = text
                .iter()
                .filter(|(f, _)| f.entity == e)
                .map(|(f, _)| f.clone())
                .collect();
            if !by_words.is_empty() {
                return by_words;
            }
            let passes = |f: &FactRef, m: &FactMeta| filter.admits(f, m) && admit(f);
            let first_text = self
                .text
                .of_entity(scope, e, as_of)
                .filter(|d| passes(&d.fact, &d.meta))
                .map(|d| &d.fact)
                .min();
            let first = first_text.or_else(|| {
                self.vectors
                    .of_entity(scope, e, as_of)
                    .filter(|d| passes(&d.fact, &d.meta))
                    .map(|d| &d.fact)
                    .min()
            });
            first.into_iter().cloned().collect()
        };

        // 2. Nearest vectors, as entities.
        let mut near_entities: Vec<(EntityId, usize)> = Vec::new();
        if let Some(q) = query.vector.as_deref().and_then(unit) {
            let keep = |d: &crate::vector::Doc| filter.admits_meta(&d.meta) && admit(&d.fact);
            let near = self.vectors.nearest(scope, &q, as_of, &keep, limit);
            let near_ranks = ranks(&near, |a, b| a.1 == b.1);
            for ((fact, _), rank) in near.iter().zip(near_ranks) {
                if !near_entities.iter().any(|(e, _)| *e == fact.entity) {
                    near_entities.push((fact.entity, rank));
                }
            }
        }
        let vector = credit(&near_entities, &shows);

        // 3. The graph around the best entities of 1 and 2.
        let mut graph: Vec<(FactRef, usize)> = Vec::new();
        if query.hops > 0 {
            let text_entities = first_per_entity(&text);
            let seeds = fuse_entities(&[(&text_entities, 1.0), (&near_entities, 1.0)], query.k);
            let reached = expand(&self.graph, scope, &seeds, query.hops, as_of, shown, limit);
            // Ranked among the seeds too (which the graph does not credit: the words and the
            // vectors already did), so a neighbour never ranks above the hit that led to it.
            let mut all: Vec<(EntityId, f64, bool)> = seeds.iter().map(|(e, w)| (*e, *w, true)).collect();
            all.extend(reached.iter().map(|(e, w)| (*e, *w, false)));
            all.sort_by(|a, b| {
                b.1.total_cmp(&a.1)
                    .then_with(|| b.2.cmp(&a.2))
                    .then_with(|| a.0.cmp(&b.0))
            });
            let all_ranks = ranks(&all, |a, b| a.1 == b.1);
            let reached: Vec<(EntityId, usize)> = all
                .iter()
                .zip(all_ranks)
                .filter(|((_, _, seed), _)| !seed)
                .map(|((e, _, _), rank)| (*e, rank))
                .collect();
            graph = credit(&reached, &shows);
        }

        // 4. Recency and the priors over everything found.
        let mut found: Vec<&FactRef> = Vec::new();
        let mut seen: HashSet<&FactRef> = HashSet::new();
        for (f, _) in text.iter().chain(&vector).chain(&graph) {
            if seen.insert(f) {
                found.push(f);
            }
        }
        let meta = |f: &FactRef| self.text.meta(scope, f).or_else(|| self.vectors.meta(scope, f));
        let when = |f: &FactRef| meta(f).map(|m| m.tx_time_ns);
        let mut recency = found.clone();
        recency.sort_by(|a, b| when(b).cmp(&when(a)).then_with(|| a.cmp(b)));
        let recency = ranked_by(&recency, |a, b| when(a) == when(b));
        let belief =
            |f: &FactRef| meta(f).map_or((false, 0.0), |m| (m.status == Status::Verified, m.confidence));
        let mut prior = found;
        prior.sort_by(|a, b| {
            let ((va, ca), (vb, cb)) = (belief(a), belief(b));
            vb.cmp(&va).then_with(|| cb.total_cmp(&ca)).then_with(|| a.cmp(b))
        });
        let prior = ranked_by(&prior, |a, b| belief(a) == belief(b));

        // 5. Fusion.
        let weight = |s: Signal| WEIGHTS.iter().find(|(w, _)| *w == s).map_or(0.0, |(_, w)| *w);
        let rankings: Vec<Ranking<'_>> = [
            (Signal::Text, &text),
            (Signal::Vector, &vector),
            (Signal::Graph, &graph),
            (Signal::Recency, &recency),
            (Signal::Prior, &prior),
        ]
        .into_iter()
        .filter(|(_, facts)| !facts.is_empty())
        .map(|(signal, facts)| Ranking {
            signal,
            weight: weight(signal),
            facts,
        })
        .collect();
        Ok(fuse(&rankings, query.k))
    }
}

/// Each entity's ranks handed to the facts it shows, in entity order; a fact already credited
/// (an entity reached twice) keeps its first rank.
fn credit(entities: &[(EntityId, usize)], shows: &dyn Fn(EntityId) -> Vec<FactRef>) -> Vec<(FactRef, usize)> {
    let mut out: Vec<(FactRef, usize)> = Vec::new();
    let mut seen: HashSet<FactRef> = HashSet::new();
    for (e, rank) in entities {
        for f in shows(*e) {
            if seen.insert(f.clone()) {
                out.push((f, *rank));
            }
        }
    }
    out
}

/// The entities of a fact ranking, each at the rank of its best fact.
fn first_per_entity(facts: &[(FactRef, usize)]) -> Vec<(EntityId, usize)> {
    let mut out: Vec<(EntityId, usize)> = Vec::new();
    for (f, rank) in facts {
        if !out.iter().any(|(e, _)| *e == f.entity) {
            out.push((f.entity, *rank));
        }
    }
    out
}

/// Reciprocal rank fusion of entity rankings: the best `k` entities with their fused scores,
/// best first, ties by entity id.
fn fuse_entities(rankings: &[(&[(EntityId, usize)], f64)], k: usize) -> Vec<(EntityId, f64)> {
    let mut scores: Vec<(EntityId, f64)> = Vec::new();
    let mut at: HashMap<EntityId, usize> = HashMap::new();
    for (ranking, weight) in rankings {
        for (e, rank) in *ranking {
            let i = *at.entry(*e).or_insert_with(|| {
                scores.push((*e, 0.0));
                scores.len() - 1
            });
            scores[i].1 += weight / (crate::fuse::RRF_K + *rank as f64);
        }
    }
    scores.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    scores.truncate(k);
    scores
}

/// Breadth-first from `seeds` (entity, weight) up to `hops` refs, either way along edges of
/// attributes `shown` accepts: every entity reached that is not a seed, with the best weight
/// that reaches it (`weight * HOP_DECAY^hops`); best first, ties by entity id, at most `limit`.
fn expand(
    graph: &Graph,
    scope: &Scope,
    seeds: &[(EntityId, f64)],
    hops: usize,
    as_of: TxId,
    shown: &dyn Fn(&Attribute) -> bool,
    limit: usize,
) -> Vec<(EntityId, f64)> {
    let seed_set: HashSet<EntityId> = seeds.iter().map(|(e, _)| *e).collect();
    let mut best: HashMap<EntityId, f64> = HashMap::new();
    let mut frontier: Vec<(EntityId, f64)> = seeds.to_vec();
    for _ in 0..hops {
        let mut next: Vec<(EntityId, f64)> = Vec::new();
        for (e, weight) in &frontier {
            let reached = weight * HOP_DECAY;
            for n in graph.neighbours(scope, *e, as_of, shown) {
                if seed_set.contains(&n) {
                    continue;
                }
                let better = best.get(&n).is_none_or(|w| reached > *w);
                if better {
                    best.insert(n, reached);
                    next.push((n, reached));
                }
            }
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    let mut out: Vec<(EntityId, f64)> = best.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out.truncate(limit);
    out
}

/// `sorted` with competition ranks, facts `same` as the one before sharing its rank.
fn ranked_by(sorted: &[&FactRef], same: impl Fn(&FactRef, &FactRef) -> bool) -> Vec<(FactRef, usize)> {
    let r = ranks(sorted, |a, b| same(a, b));
    sorted.iter().map(|f| (*f).clone()).zip(r).collect()
}
