//! Reciprocal rank fusion: several rankings of facts become one, each fact scoring
//! `weight / (RRF_K + rank)` from every ranking it appears in (Cormack, Clarke and Büttcher,
//! SIGIR 2009). Ranks, not scores, are fused, so signals whose scores mean different things
//! (BM25, cosine, recency) need no calibration against each other.

use std::collections::HashMap;

use crate::types::{FactRef, Hit, Signal};

/// The constant of the original paper: it damps the difference between the first few ranks,
/// so one signal's top hit cannot drown every other signal's view.
pub const RRF_K: f64 = 60.0;

/// One ranking to fuse: which signal made it, how much it counts, and the facts with their
/// ranks, best first, no repeats. Ranks start at 1; facts the signal cannot tell apart share a
/// rank (see [`ranks`]), so a tie in one signal leaves the others to decide.
pub struct Ranking<'a> {
    pub signal: Signal,
    pub weight: f64,
    pub facts: &'a [(FactRef, usize)],
}

/// Competition ranks ("1224") of `items`, already sorted best first: an item `same` as the one
/// before it shares that one's rank.
pub fn ranks<T>(items: &[T], same: impl Fn(&T, &T) -> bool) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let rank = match (i.checked_sub(1), out.last()) {
            (Some(prev), Some(&r)) if same(&items[prev], item) => r,
            _ => i + 1,
        };
        out.push(rank);
    }
    out
}

/// Fuses `rankings` and returns the best `k` facts, best first; ties go to the smaller
/// [`FactRef`], so every node orders equal scores the same way. Each hit lists, in the order
/// the rankings were given, the signals that ranked it and its rank there (1 is first).
pub fn fuse(rankings: &[Ranking<'_>], k: usize) -> Vec<Hit> {
    let mut hits: Vec<Hit> = Vec::new();
    let mut at: HashMap<&FactRef, usize> = HashMap::new();
    for ranking in rankings {
        for (fact, rank) in ranking.facts {
            let rank = *rank;
            let slot = *at.entry(fact).or_insert_with(|| {
                hits.push(Hit {
                    fact: fact.clone(),
                    score: 0.0,
                    found_by: Vec::new(),
                });
                hits.len() - 1
            });
            let hit = &mut hits[slot];
            // Summed in the order the rankings are given: the same on every node.
            hit.score += ranking.weight / (RRF_K + rank as f64);
            hit.found_by.push((ranking.signal, rank));
        }
    }
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.fact.cmp(&b.fact)));
    hits.truncate(k);
    hits
}

/// The best `k` of `items` under `better` that `admit` accepts, in order. Orders only a
/// growing head of `items` (selected, then sorted) and checks only it, so a query whose
/// filters pass most items orders about `k` of them, not all.
pub(crate) fn best_admitted<T, D>(
    items: &mut [T],
    k: usize,
    better: impl Fn(&T, &T) -> std::cmp::Ordering,
    admit: impl Fn(T) -> Option<D>,
) -> Vec<(T, D)>
where
    T: Copy,
{
    let mut out = Vec::with_capacity(k.min(items.len()));
    let mut start = 0;
    let mut chunk = k.max(16);
    while out.len() < k && start < items.len() {
        let rest = &mut items[start..];
        let take = chunk.min(rest.len());
        if take < rest.len() {
            rest.select_nth_unstable_by(take - 1, &better);
        }
        rest[..take].sort_by(&better);
        for item in &rest[..take] {
            if let Some(d) = admit(*item) {
                out.push((*item, d));
                if out.len() == k {
                    break;
                }
            }
        }
        start += take;
        chunk = chunk.saturating_mul(4);
    }
    out
}

#[cfg(test)]
mod tests {
    use engram_types::{Attribute, EntityId, TxId};

    use super::*;

    fn fact(tx: u64) -> FactRef {
        FactRef {
            tx: TxId(tx),
            seq: 0,
            entity: EntityId(tx),
            attribute: Attribute::new(":note/text").expect("a valid attribute"),
        }
    }

    /// Fuses two rankings: `a` by `sa` with weight `wa`, then `b` by `sb` with weight `wb`.
    fn fuse_two(
        (sa, wa, a): (Signal, f64, &[(FactRef, usize)]),
        (sb, wb, b): (Signal, f64, &[(FactRef, usize)]),
        k: usize,
    ) -> Vec<Hit> {
        fuse(
            &[
                Ranking {
                    signal: sa,
                    weight: wa,
                    facts: a,
                },
                Ranking {
                    signal: sb,
                    weight: wb,
                    facts: b,
                },
            ],
            k,
        )
    }

    /// Facts `txs` ranked 1, 2, 3... in that order.
    fn order(txs: &[u64]) -> Vec<(FactRef, usize)> {
        txs.iter().enumerate().map(|(i, tx)| (fact(*tx), i + 1)).collect()
    }

    #[test]
    fn ties_share_a_rank() {
        let scores = [9.0, 7.0, 7.0, 7.0, 1.0];
        assert_eq!(ranks(&scores, |a, b| a == b), [1, 2, 2, 2, 5]);
        assert!(ranks(&[] as &[f64], |a, b| a == b).is_empty());
        let text = [(fact(1), 1), (fact(2), 1)];
        let recency = order(&[2, 1]);
        let hits = fuse_two((Signal::Text, 1.0, &text), (Signal::Recency, 0.1, &recency), 2);
        assert_eq!(
            hits[0].fact,
            fact(2),
            "the text tie is left to recency, however light"
        );
    }

    #[test]
    fn a_fact_two_signals_agree_on_beats_one_signal_s_favourite() {
        let text = order(&[1, 2, 3]);
        let recency = order(&[3, 2, 9]);
        let hits = fuse_two((Signal::Text, 1.0, &text), (Signal::Recency, 1.0, &recency), 10);
        let order: Vec<u64> = hits.iter().map(|h| h.fact.tx.0).collect();
        // 2: 1/62 + 1/62; 3: 1/63 + 1/61; 1: 1/61; 9: 1/63.
        assert_eq!(order, [3, 2, 1, 9]);
        assert_eq!(hits[0].found_by, [(Signal::Text, 3), (Signal::Recency, 1)]);
        assert_eq!(hits[3].found_by, [(Signal::Recency, 3)]);
        let expected = 1.0 / 63.0 + 1.0 / 61.0;
        assert!((hits[0].score - expected).abs() < 1e-15);
    }

    #[test]
    fn weights_scale_a_signal_s_say() {
        let text = order(&[1, 2]);
        let recency = order(&[2, 1]);
        let light = fuse_two((Signal::Text, 1.0, &text), (Signal::Recency, 0.2, &recency), 2);
        assert_eq!(light[0].fact, fact(1), "text outweighs a light recency signal");
        let heavy = fuse_two((Signal::Text, 0.2, &text), (Signal::Recency, 1.0, &recency), 2);
        assert_eq!(heavy[0].fact, fact(2));
    }

    #[test]
    fn equal_scores_are_ordered_by_fact_and_k_cuts() {
        let a = order(&[5]);
        let b = order(&[4]);
        let hits = fuse_two((Signal::Text, 1.0, &a), (Signal::Prior, 1.0, &b), 1);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].fact, fact(4));
        assert!(fuse(&[], 5).is_empty());
    }

    #[test]
    fn best_admitted_is_a_full_sort_then_filter() {
        // Scores with many ties, filters that pass everything, every third, or nearly nothing:
        // always the first k of the fully sorted, filtered list.
        let mut z: u64 = 7;
        for round in 0..200u64 {
            let n = (round * 37 % 500) as usize;
            let items: Vec<(u32, u32)> = (0..n as u32)
                .map(|i| {
                    z = z
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((z >> 59) as u32, i)
                })
                .collect();
            let better = |a: &(u32, u32), b: &(u32, u32)| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1));
            let every = [1, 3, 97][(round % 3) as usize];
            let admit = |(_, i): (u32, u32)| (i % every == 0).then_some(i);
            for k in [1, 10, 40] {
                let mut expected = items.clone();
                expected.sort_by(better);
                let expected: Vec<((u32, u32), u32)> = expected
                    .into_iter()
                    .filter_map(|it| admit(it).map(|d| (it, d)))
                    .take(k)
                    .collect();
                let mut work = items.clone();
                assert_eq!(
                    best_admitted(&mut work, k, better, admit),
                    expected,
                    "n {n}, every {every}, k {k}"
                );
            }
        }
    }
}
