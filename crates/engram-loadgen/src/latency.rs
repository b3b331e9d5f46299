//! Latency samples and their distribution.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Every sample of a run, in nanoseconds. A run keeps them all (8 bytes each) rather than a
/// bucketed histogram, so every percentile is exact.
#[derive(Clone, Debug, Default)]
pub struct LatencyRecorder {
    samples_ns: Vec<u64>,
}

impl LatencyRecorder {
    pub fn record(&mut self, d: Duration) {
        self.samples_ns
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn merge(&mut self, other: LatencyRecorder) {
        self.samples_ns.extend(other.samples_ns);
    }

    pub fn len(&self) -> usize {
        self.samples_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples_ns.is_empty()
    }

    /// The distribution: percentiles by the nearest-rank rule, and `cdf_points` points of the
    /// CDF for plots.
    pub fn summary(&self, cdf_points: usize) -> Latency {
        let mut s = self.samples_ns.clone();
        s.sort_unstable();
        let us = |ns: u64| ns as f64 / 1_000.0;
        let rank = |q: f64| -> u64 {
            if s.is_empty() {
                return 0;
            }
            // Nearest rank: the smallest sample with at least q of the samples at or below it.
            let r = (q * s.len() as f64).ceil() as usize;
            s[r.clamp(1, s.len()) - 1]
        };
        let mean_ns = if s.is_empty() {
            0.0
        } else {
            s.iter().map(|v| *v as f64).sum::<f64>() / s.len() as f64
        };
        let cdf = (1..=cdf_points)
            .map(|i| {
                let q = i as f64 / cdf_points as f64;
                (q, us(rank(q)))
            })
            .collect();
        Latency {
            samples: s.len() as u64,
            mean_us: mean_ns / 1_000.0,
            p50_us: us(rank(0.50)),
            p95_us: us(rank(0.95)),
            p99_us: us(rank(0.99)),
            max_us: us(s.last().copied().unwrap_or(0)),
            cdf,
        }
    }
}

/// A latency distribution, in microseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub samples: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// `(quantile, latency_us)` pairs, quantiles rising to 1.
    pub cdf: Vec<(f64, f64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_the_nearest_rank_rule() {
        let mut r = LatencyRecorder::default();
        // 1..=100 µs, recorded out of order.
        for v in (1..=100u64).rev() {
            r.record(Duration::from_micros(v));
        }
        let l = r.summary(4);
        assert_eq!(l.samples, 100);
        assert_eq!(l.p50_us, 50.0);
        assert_eq!(l.p95_us, 95.0);
        assert_eq!(l.p99_us, 99.0);
        assert_eq!(l.max_us, 100.0);
        assert!((l.mean_us - 50.5).abs() < 1e-9);
        assert_eq!(l.cdf, vec![(0.25, 25.0), (0.5, 50.0), (0.75, 75.0), (1.0, 100.0)]);
    }

    #[test]
    fn merged_recorders_pool_their_samples() {
        let mut a = LatencyRecorder::default();
        let mut b = LatencyRecorder::default();
        a.record(Duration::from_micros(10));
        b.record(Duration::from_micros(30));
        b.record(Duration::from_micros(20));
        a.merge(b);
        let l = a.summary(2);
        assert_eq!((l.samples, l.p50_us, l.max_us), (3, 20.0, 30.0));
    }

    #[test]
    fn an_empty_run_has_zero_figures_not_a_panic() {
        let l = LatencyRecorder::default().summary(3);
        assert_eq!((l.samples, l.p99_us, l.max_us), (0, 0.0, 0.0));
    }
}
