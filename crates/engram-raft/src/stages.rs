//! Where a write's time goes on the leader: the moments each stage of the Raft path reached a
//! log index, and per-stage latency histograms of the writes answered.
//!
//! The log store marks its own synced appends and the commit index openraft hands it, the
//! network marks a follower's acknowledged append, and the proposer marks the answer the
//! state machine sent back. When a write is answered, the server looks up, for its log index,
//! the first mark of each stage made after the write was proposed, and records the offsets
//! from its arrival ([`WriteStages::record`]). The log's flusher also times each of its syncs
//! ([`WriteStages::log_synced`]). Telemetry only: nothing here is replicated, and
//! the state machine neither reads a clock nor sees these marks.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A point on a write's path, in the order a write normally passes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The server validated the request and handed it to Raft.
    Proposed,
    /// The leader's log append holding the entry is synced.
    LogDurable,
    /// A follower acknowledged (synced) an append holding the entry.
    FollowerDurable,
    /// The leader knows the entry committed (a majority holds it).
    Committed,
    /// The leader's state machine applied it and its answer reached the proposer.
    Applied,
    /// The client's answer is ready.
    Answered,
}

impl Stage {
    pub const ALL: [Stage; 6] = [
        Stage::Proposed,
        Stage::LogDurable,
        Stage::FollowerDurable,
        Stage::Committed,
        Stage::Applied,
        Stage::Answered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Proposed => "proposed",
            Stage::LogDurable => "leader_log_durable",
            Stage::FollowerDurable => "follower_durable",
            Stage::Committed => "committed",
            Stage::Applied => "applied",
            Stage::Answered => "answered",
        }
    }

    /// The field of the server's `transact` span that carries the stage's offset.
    pub fn span_field(self) -> &'static str {
        match self {
            Stage::Proposed => "proposed_us",
            Stage::LogDurable => "leader_log_durable_us",
            Stage::FollowerDurable => "follower_durable_us",
            Stage::Committed => "committed_us",
            Stage::Applied => "applied_us",
            Stage::Answered => "answered_us",
        }
    }

    /// Where the marks of a stage marked by position (log index) live; `None` for the two
    /// the write itself stamps (proposed, answered).
    fn marked_slot(self) -> Option<usize> {
        match self {
            Stage::LogDurable => Some(0),
            Stage::FollowerDurable => Some(1),
            Stage::Committed => Some(2),
            Stage::Applied => Some(3),
            Stage::Proposed | Stage::Answered => None,
        }
    }
}

/// Marks kept per stage: enough to cover every write in flight at thousands of writes a second
/// (a mark covers every index up to its own).
const KEEP_MARKS: usize = 1024;

/// Upper bounds of the histogram buckets, in microseconds.
const BUCKETS_US: [u64; 16] = [
    50, 100, 200, 300, 500, 750, 1_000, 1_500, 2_000, 3_000, 5_000, 7_500, 10_000, 25_000, 100_000, 1_000_000,
];

#[derive(Default)]
struct Histogram {
    /// Per bucket of [`BUCKETS_US`], then one for larger values.
    counts: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, us: u64) {
        let bucket = BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(BUCKETS_US.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The series `name` with `labels` in the Prometheus text format, in seconds.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0u64;
        for (bound, count) in BUCKETS_US.iter().zip(&self.counts) {
            cumulative += count.load(Ordering::Relaxed);
            let le = *bound as f64 / 1e6;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS_US.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// The marks and histograms of one node.
#[derive(Default)]
pub struct WriteStages {
    marks: Mutex<[VecDeque<(Instant, u64)>; 4]>,
    /// Offsets from arrival, per stage of [`Stage::ALL`].
    histograms: [Histogram; 6],
    /// How long each sync of the Raft log took (one sync covers every append queued before it).
    log_sync: Histogram,
}

impl WriteStages {
    /// `stage` has reached log index `index` now.
    pub fn mark(&self, stage: Stage, index: u64) {
        let Some(slot) = stage.marked_slot() else { return };
        let now = Instant::now();
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        let queue = &mut marks[slot];
        if queue.back().is_some_and(|(_, last)| *last == index) {
            return;
        }
        queue.push_back((now, index));
        if queue.len() > KEEP_MARKS {
            queue.pop_front();
        }
    }

    /// The first time at or after `since` that the stage whose marks are `marks` reached
    /// `index`.
    fn reached(marks: &VecDeque<(Instant, u64)>, index: u64, since: Instant) -> Option<Instant> {
        // Newest first, stopping at marks older than the write: only the few made while it was
        // in flight are looked at.
        marks
            .iter()
            .rev()
            .take_while(|(at, _)| *at >= since)
            .filter(|(_, reached)| *reached >= index)
            .last()
            .map(|(at, _)| *at)
    }

    /// Records a write that arrived at `received`, was proposed at `proposed`, got log index
    /// `index` and is answered now: each stage's offset from arrival. A stage with no mark
    /// (a follower that answered before the leader's own append, a mark pushed out by a burst)
    /// is left out of that write's figures.
    pub fn record(&self, received: Instant, proposed: Instant, index: u64) -> Vec<(Stage, u64)> {
        let answered = Instant::now();
        let mut out = Vec::with_capacity(Stage::ALL.len());
        let marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            let at = match (stage, stage.marked_slot()) {
                (_, Some(slot)) => WriteStages::reached(&marks[slot], index, proposed),
                (Stage::Proposed, None) => Some(proposed),
                (_, None) => Some(answered),
            };
            if let Some(at) = at {
                let us =
                    u64::try_from(at.saturating_duration_since(received).as_micros()).unwrap_or(u64::MAX);
                self.histograms[i].observe(us);
                out.push((stage, us));
            }
        }
        out
    }

    /// A sync of the Raft log took `took` (the flusher's fsync, whatever it covered).
    pub fn log_synced(&self, took: Duration) {
        self.log_sync
            .observe(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
    }

    /// The histograms in the Prometheus text format: one series per stage, and the log syncs.
    pub fn render(&self, node_id: u64, out: &mut String) {
        let name = "engram_write_stage_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from a write's arrival at the leader to each stage of its path (proposed, leader_log_durable, follower_durable, committed, applied, answered)."
        );
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (stage, h) in Stage::ALL.iter().zip(&self.histograms) {
            h.render(
                out,
                name,
                &format!("node_id=\"{node_id}\",stage=\"{}\"", stage.name()),
            );
        }
        let name = "engram_log_sync_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time each sync (fsync) of the Raft log took on this node; one sync makes every append queued before it durable."
        );
        let _ = writeln!(out, "# TYPE {name} histogram");
        self.log_sync.render(out, name, &format!("node_id=\"{node_id}\""));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_write_gets_the_first_mark_at_or_past_its_index_made_after_it_arrived() {
        let stages = WriteStages::default();
        // A mark from before the write arrived never counts for it, even at a higher index.
        stages.mark(Stage::Committed, 90);
        std::thread::sleep(Duration::from_millis(2));
        let received = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let proposed = Instant::now();
        stages.mark(Stage::LogDurable, 99);
        std::thread::sleep(Duration::from_millis(2));
        stages.mark(Stage::LogDurable, 100);
        std::thread::sleep(Duration::from_millis(2));
        stages.mark(Stage::Committed, 104);
        stages.mark(Stage::Applied, 104);
        let got = stages.record(received, proposed, 100);
        let names: Vec<&str> = got.iter().map(|(s, _)| s.name()).collect();
        // No follower mark: that stage is left out, not reported as zero.
        assert_eq!(
            names,
            [
                "proposed",
                "leader_log_durable",
                "committed",
                "applied",
                "answered"
            ]
        );
        let us: Vec<u64> = got.iter().map(|(_, us)| *us).collect();
        assert!(
            us.windows(2).all(|w| w[0] <= w[1]),
            "offsets grow along the path: {us:?}"
        );
        assert!(
            us[1] >= us[0] + 2_000,
            "log durable is the mark at 100, not the one at 99: {us:?}"
        );

        let mut text = String::new();
        stages.render(1, &mut text);
        assert!(
            text.contains("engram_write_stage_seconds_count{node_id=\"1\",stage=\"committed\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("engram_write_stage_seconds_count{node_id=\"1\",stage=\"follower_durable\"} 0"),
            "{text}"
        );
    }
}
