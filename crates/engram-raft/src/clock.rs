//! The one place a node reads wall-clock time: the leader stamping a proposal, and the times
//! of the node's own job log (`crate::jobs`, never replicated). Apply never calls this; it uses
//! the stamp carried in the log entry.

/// Nanoseconds since the Unix epoch, saturating (a clock before 1970 reads as 0).
#[allow(clippy::disallowed_methods)] // the proposer is the designated clock reader
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
