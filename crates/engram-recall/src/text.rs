//! The bitemporal text index: BM25 over the words of string values, answerable as of any
//! transaction.
//!
//! Every indexed fact carries the transactions between which it holds: from the one that
//! asserted it to the one that ended it (a retraction, or a newer claim in its slot), if any.
//! A query as of `T` sees exactly the facts holding at `T`, and ranks them with the statistics
//! (how many facts, how many words, how many facts hold each word) of `T`, so its answer is the
//! one an index fed the log only up to `T` would give, score for score. Facts are never
//! removed, so memory grows with the number of facts ever asserted, like the datom store.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use engram_types::{EntityId, TxId};

use crate::tokenize::tokens;
use crate::types::{
    FactMeta, FactRef, Filter, Held, MAX_K, MAX_QUERY_BYTES, Query, RecallError, Scope, Scored,
};

/// BM25's term-frequency saturation and length normalisation (the usual defaults).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// The text index of every scope a node holds. Fed the committed log in order, one
/// transaction after another; derived state, kept out of the audit chain and the replica
/// digest, and rebuilt from the datoms whenever in doubt.
#[derive(Default, Serialize, Deserialize)]
pub struct TextIndex {
    shelves: HashMap<Scope, Shelf>,
    /// The newest transaction fed so far.
    last: TxId,
}

/// One scope's facts, words and running totals.
#[derive(Default, Serialize, Deserialize)]
struct Shelf {
    docs: Vec<Doc>,
    /// Per doc, beside `docs`: when it holds and how many words it has. Ranking a common word
    /// reads these for every posting, and 20 bytes a doc stay in cache where a whole `Doc`
    /// would not.
    spans: Vec<Span>,
    by_fact: HashMap<FactRef, u32>,
    by_entity: HashMap<EntityId, Vec<u32>>,
    /// Word → (doc, occurrences), docs in the order they were added.
    postings: HashMap<String, Vec<(u32, u32)>>,
    /// After each transaction that changed them: how many facts hold, and their words.
    totals: Vec<Totals>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Doc {
    pub(crate) fact: FactRef,
    pub(crate) meta: FactMeta,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct Span {
    held: Held,
    words: u32,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct Totals {
    tx: TxId,
    docs: u64,
    words: u64,
}

impl Shelf {
    fn change_totals(&mut self, tx: TxId, docs: i64, words: i64) {
        let last = self.totals.last().copied().unwrap_or(Totals {
            tx,
            docs: 0,
            words: 0,
        });
        let next = Totals {
            tx,
            docs: last.docs.saturating_add_signed(docs),
            words: last.words.saturating_add_signed(words),
        };
        match self.totals.last_mut() {
            Some(t) if t.tx == tx => *t = next,
            _ => self.totals.push(next),
        }
    }

    fn holds_at(&self, id: u32, as_of: TxId) -> bool {
        self.spans.get(id as usize).is_some_and(|s| s.held.at(as_of))
    }

    fn totals_at(&self, as_of: TxId) -> (u64, u64) {
        let i = self.totals.partition_point(|t| t.tx <= as_of);
        match i.checked_sub(1).and_then(|i| self.totals.get(i)) {
            Some(t) => (t.docs, t.words),
            None => (0, 0),
        }
    }
}

impl TextIndex {
    pub fn new() -> TextIndex {
        TextIndex::default()
    }

    /// The newest transaction fed so far.
    pub fn last_tx(&self) -> TxId {
        self.last
    }

    /// How many facts were ever indexed, across scopes.
    pub fn facts(&self) -> usize {
        self.shelves.values().map(|s| s.docs.len()).sum()
    }

    /// Moves the index to transaction `tx`, refusing to go back.
    pub(crate) fn advance(&mut self, tx: TxId) -> Result<(), RecallError> {
        if tx < self.last {
            return Err(RecallError::OutOfOrder {
                last: self.last.0,
                got: tx.0,
            });
        }
        self.last = tx;
        Ok(())
    }

    /// Indexes `text`, the value `fact` asserted, holding from `fact.tx` on. Returns whether
    /// anything was indexed: a text without words, or a fact already indexed, is not.
    pub fn add(
        &mut self,
        scope: &Scope,
        fact: FactRef,
        text: &str,
        meta: FactMeta,
    ) -> Result<bool, RecallError> {
        self.advance(fact.tx)?;
        let words = tokens(text);
        if words.is_empty() {
            return Ok(false);
        }
        let shelf = self.shelves.entry(scope.clone()).or_default();
        if shelf.by_fact.contains_key(&fact) {
            return Ok(false);
        }
        let Ok(id) = u32::try_from(shelf.docs.len()) else {
            // Four billion facts in one scope: far beyond one node's memory anyway.
            return Ok(false);
        };
        // Each distinct word once, with its count; a word already in the scope's postings
        // (most are) costs no allocation.
        let mut sorted: Vec<&str> = words.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        for run in sorted.chunk_by(|a, b| a == b) {
            let n = u32::try_from(run.len()).unwrap_or(u32::MAX);
            match shelf.postings.get_mut(run[0]) {
                Some(list) => list.push((id, n)),
                None => {
                    shelf.postings.insert(run[0].to_string(), vec![(id, n)]);
                }
            }
        }
        let len = u32::try_from(words.len()).unwrap_or(u32::MAX);
        shelf.change_totals(fact.tx, 1, i64::from(len));
        shelf.by_fact.insert(fact.clone(), id);
        shelf.by_entity.entry(fact.entity).or_default().push(id);
        shelf.spans.push(Span {
            held: Held::since(fact.tx),
            words: len,
        });
        shelf.docs.push(Doc { fact, meta });
        Ok(true)
    }

    /// Records that `fact` no longer holds from transaction `at` on (it was retracted, or a
    /// newer claim replaced it). Returns whether it was indexed and holding.
    pub fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> Result<bool, RecallError> {
        self.advance(at)?;
        let Some(shelf) = self.shelves.get_mut(scope) else {
            return Ok(false);
        };
        let Some(&id) = shelf.by_fact.get(fact) else {
            return Ok(false);
        };
        let Some(span) = shelf.spans.get_mut(id as usize) else {
            return Ok(false);
        };
        if !span.held.end(at) {
            return Ok(false);
        }
        let words = i64::from(span.words);
        shelf.change_totals(at, -1, -words);
        Ok(true)
    }

    /// The facts of `scope` holding at `query.as_of` that match `query.filter`, ranked by
    /// BM25 of the query's words, best `query.k` first.
    pub fn search(&self, scope: &Scope, query: &Query) -> Result<Vec<Scored>, RecallError> {
        let words = validate(query)?;
        if words.is_empty() {
            return Err(RecallError::invalid("text", "has no words to search for"));
        }
        Ok(self.ranked(scope, &words, query, &|_| true, query.k))
    }

    /// The text facts of `entity` in `scope` holding at `as_of`.
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
            .filter(move |id| shelf.is_some_and(|s| s.holds_at(**id, as_of)))
            .filter_map(move |id| shelf?.docs.get(*id as usize))
    }

    pub(crate) fn meta(&self, scope: &Scope, fact: &FactRef) -> Option<&FactMeta> {
        let shelf = self.shelves.get(scope)?;
        Some(&shelf.docs.get(*shelf.by_fact.get(fact)? as usize)?.meta)
    }

    /// The facts holding at `query.as_of` that match `query.filter`'s fact filters and that
    /// `admit` accepts, ranked by BM25 of `words`, best `k` first.
    pub(crate) fn ranked(
        &self,
        scope: &Scope,
        words: &[String],
        query: &Query,
        admit: &dyn Fn(&FactRef) -> bool,
        k: usize,
    ) -> Vec<Scored> {
        let (as_of, filter) = (query.as_of, &query.filter);
        let Some(shelf) = self.shelves.get(scope) else {
            return Vec::new();
        };
        let (n, total_words) = shelf.totals_at(as_of);
        if n == 0 {
            return Vec::new();
        }
        let n = n as f64;
        let avg_len = total_words as f64 / n;
        // Docs are numbered in the order they were fed, so those asserted by `as_of` are a
        // prefix, and numbers order them as their facts (transaction, then datom) do.
        let fed = shelf.spans.partition_point(|s| s.held.begun_by(as_of));
        // Scores by doc number: dense, since a common word scores a large share of the scope.
        // Summed per doc in the query's word order: the same floating-point sums on every node.
        let mut scores: Vec<f64> = vec![0.0; fed];
        let mut scored: Vec<u32> = Vec::new();
        let mut holding: Vec<(u32, u32)> = Vec::new();
        for word in words {
            let Some(postings) = shelf.postings.get(word) else {
                continue;
            };
            let end = postings.partition_point(|(id, _)| (*id as usize) < fed);
            holding.clear();
            holding.extend(
                postings[..end]
                    .iter()
                    .copied()
                    .filter(|(id, _)| shelf.holds_at(*id, as_of)),
            );
            let df = holding.len() as f64;
            if df == 0.0 {
                continue;
            }
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(id, tf) in &holding {
                let (Some(span), Some(score)) = (shelf.spans.get(id as usize), scores.get_mut(id as usize))
                else {
                    continue;
                };
                let tf = f64::from(tf);
                let norm = K1 * (1.0 - B + B * f64::from(span.words) / avg_len);
                // Every term adds more than zero (idf > 0 since df <= n), so zero means unseen.
                if *score == 0.0 {
                    scored.push(id);
                }
                *score += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let mut ranked: Vec<(f64, u32)> = scored.into_iter().map(|id| (scores[id as usize], id)).collect();
        // Best first, ties by doc number (the fact order); only the best are ordered and
        // checked against the filters, a growing slice at a time, until `k` pass.
        let better = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1));
        let admitted = |(_, id): (f64, u32)| {
            shelf
                .docs
                .get(id as usize)
                .filter(|d| matches(filter, d) && admit(&d.fact))
        };
        crate::fuse::best_admitted(&mut ranked, k, better, admitted)
            .into_iter()
            .map(|((score, _), doc)| Scored {
                fact: doc.fact.clone(),
                score,
            })
            .collect()
    }
}

fn matches(filter: &Filter, doc: &Doc) -> bool {
    filter.admits(&doc.fact, &doc.meta)
}

/// Checks `query` and returns its distinct words in order (none when it searches by vector
/// alone).
pub(crate) fn validate(query: &Query) -> Result<Vec<String>, RecallError> {
    if query.k == 0 || query.k > MAX_K {
        return Err(RecallError::invalid(
            "k",
            format!("must be 1 to {MAX_K}, not {}", query.k),
        ));
    }
    if query.text.len() > MAX_QUERY_BYTES {
        return Err(RecallError::invalid(
            "text",
            format!("is {} bytes; at most {MAX_QUERY_BYTES}", query.text.len()),
        ));
    }
    if let Some((from, to)) = query.filter.valid_between_ns
        && from >= to
    {
        return Err(RecallError::invalid(
            "filter.valid_between_ns",
            format!("the window [{from}, {to}) is empty"),
        ));
    }
    let mut words = tokens(&query.text);
    let mut seen = std::collections::HashSet::new();
    words.retain(|w| seen.insert(w.clone()));
    if let Some(v) = &query.vector {
        engram_types::check_vector("vector", v).map_err(|e| match e {
            engram_types::ValidationError::Value { reason, .. } => RecallError::invalid("vector", reason),
            other => RecallError::invalid("vector", other.to_string()),
        })?;
        if crate::vector::unit(v).is_none() {
            return Err(RecallError::invalid(
                "vector",
                "has no direction (every component is zero)",
            ));
        }
    } else if words.is_empty() {
        return Err(RecallError::invalid(
            "text",
            "has no words to search for, and no vector is given",
        ));
    }
    if query.hops > crate::types::MAX_HOPS {
        return Err(RecallError::invalid(
            "hops",
            format!("must be at most {}, not {}", crate::types::MAX_HOPS, query.hops),
        ));
    }
    Ok(words)
}
