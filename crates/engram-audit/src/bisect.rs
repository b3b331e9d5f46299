//! Finding the first entry where two replicas' chains differ.
//!
//! Each entry names the hash of the one before, so two chains that hold the same entry at
//! index *i* agree on every index before it: agreement is a prefix property, and the first
//! difference can be found by bisection with O(log n) comparisons, whoever fetches the
//! entries (a node comparing itself with a peer, or `engram audit verify --each`).

/// The search state: chains agree up to `agree` (0: nothing known) and differ at `differ`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bisect {
    agree: u64,
    differ: u64,
}

impl Bisect {
    /// Starts from a known difference at `differ_at` (≥ 1).
    pub fn new(differ_at: u64) -> Bisect {
        Bisect {
            agree: 0,
            differ: differ_at,
        }
    }

    /// The next index to compare, or `None` once [`Bisect::first`] is the answer.
    pub fn probe(&self) -> Option<u64> {
        (self.differ - self.agree > 1).then(|| self.agree + (self.differ - self.agree) / 2)
    }

    /// Records whether the chains hold equal entries at `index` (the last [`Bisect::probe`]).
    pub fn record(&mut self, index: u64, equal: bool) {
        if equal {
            self.agree = self.agree.max(index);
        } else {
            self.differ = self.differ.min(index);
        }
    }

    /// The first differing index found so far (the answer once `probe` is `None`).
    pub fn first(&self) -> u64 {
        self.differ
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two chains of `len` entries that agree before `split` and differ from it on.
    fn run(len: u64, split: u64) -> (u64, usize) {
        let mut b = Bisect::new(len);
        let mut probes = 0;
        while let Some(i) = b.probe() {
            probes += 1;
            b.record(i, i < split);
        }
        (b.first(), probes)
    }

    #[test]
    fn finds_the_first_difference_in_logarithmic_steps() {
        for len in [1u64, 2, 3, 10, 1000, 1 << 20] {
            for split in [1, 2, len / 2, len - 1, len] {
                let split = split.clamp(1, len);
                let (first, probes) = run(len, split);
                assert_eq!(first, split, "len {len} split {split}");
                assert!(
                    probes <= 64 - len.leading_zeros() as usize,
                    "len {len}: {probes} probes"
                );
            }
        }
    }
}
