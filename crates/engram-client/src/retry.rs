use std::time::Duration;

use tonic::{Code, Status};

/// Whether repeating a request can change the outcome.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Idempotency {
    /// Reads, status, audit, and writes that carry an idempotency key: repeating them yields
    /// the same result, so transient failures are retried.
    Safe,
    /// Writes without an idempotency key and membership changes: a transient failure may hide
    /// an applied change, so the error goes back to the caller.
    Unsafe,
}

/// Bounded exponential backoff: the delay doubles from `initial_backoff` up to `max_backoff`,
/// and no retry starts after `max_elapsed` has passed since the first attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    /// 50 ms doubling to 250 ms, for at most 15 s. The budget rides out a leader election
    /// (about a second) or a node restart and still reports a dead cluster quickly. The cap is
    /// the server's own `retry-after-ms` hint: a longer one would leave clients idle after the
    /// new leader is up (with a 1 s cap, the write pause seen in a failover was the backoff
    /// schedule's 1.55 s rather than the 1.3 s election), and a retry every 250 ms per client
    /// costs the cluster nothing.
    fn default() -> RetryPolicy {
        RetryPolicy {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(250),
            max_elapsed: Duration::from_secs(15),
        }
    }
}

impl RetryPolicy {
    /// No retries at all: every call makes exactly one attempt.
    pub fn never() -> RetryPolicy {
        RetryPolicy {
            initial_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
            max_elapsed: Duration::ZERO,
        }
    }

    /// The delay before retry number `retry` (0 for the first retry).
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }

    /// Decides what to do after a failed attempt: `Some(delay)` to retry after `delay`, `None`
    /// to give up. `elapsed` is the time since the first attempt; a retry whose delay would end
    /// past the budget is not started.
    pub fn next_delay(
        &self,
        status: &Status,
        idempotency: Idempotency,
        retry: u32,
        elapsed: Duration,
    ) -> Option<Duration> {
        if idempotency == Idempotency::Unsafe || !is_transient(status) {
            return None;
        }
        // A server without a leader says when to come back; its hint wins over a shorter
        // backoff (the max_backoff cap still applies).
        let hint = retry_after(status).unwrap_or_default().min(self.max_backoff);
        let delay = self.backoff(retry).max(hint);
        (elapsed.saturating_add(delay) < self.max_elapsed).then_some(delay)
    }
}

/// The server's `retry-after-ms` hint, sent with `UNAVAILABLE`.
pub fn retry_after(status: &Status) -> Option<Duration> {
    let ms = status
        .metadata()
        .get("retry-after-ms")?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(Duration::from_millis(ms))
}

/// Whether a failure says nothing about the request itself, so another attempt (possibly at
/// another node) may succeed.
///
/// - `UNAVAILABLE`: no leader yet, a node shutting down, or the connection was refused;
/// - `DEADLINE_EXCEEDED`: the server or the client deadline ran out;
/// - `CANCELLED`: the client's request timeout fired or the connection closed under the call
///   (a server never cancels a call on its own);
/// - `UNKNOWN`: the connection broke mid-call, e.g. because the node was killed. Engram's
///   server maps every error of its own to a specific code and never answers `UNKNOWN`
///   itself, but a node that forwards a write to a leader that dies relays the broken
///   connection as `UNKNOWN` (seen as "h2 protocol error: error reading a body from
///   connection"), and that write may or may not have been applied: exactly the case a keyed
///   retry resolves;
/// - `INTERNAL` reporting an HTTP/2 protocol failure (the same broken connection, as tonic
///   reports it for some stream resets). Any other `INTERNAL` is a server bug, not retried.
pub fn is_transient(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => true,
        Code::Internal => status.message().starts_with("h2 protocol error"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy with a wider range than the default, so doubling and capping both show.
    fn policy() -> RetryPolicy {
        RetryPolicy {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            max_elapsed: Duration::from_secs(15),
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let p = policy();
        assert_eq!(p.backoff(0), Duration::from_millis(50));
        assert_eq!(p.backoff(1), Duration::from_millis(100));
        assert_eq!(p.backoff(4), Duration::from_millis(800));
        assert_eq!(p.backoff(5), Duration::from_secs(1));
        assert_eq!(p.backoff(1000), Duration::from_secs(1));
        let d = RetryPolicy::default();
        assert_eq!(
            (d.backoff(0), d.backoff(2), d.backoff(3)),
            (d.initial_backoff, Duration::from_millis(200), d.max_backoff)
        );
    }

    #[test]
    fn transient_failures_of_safe_requests_are_retried_within_budget() {
        let p = policy();
        let unavailable = Status::unavailable("no leader");
        assert_eq!(
            p.next_delay(&unavailable, Idempotency::Safe, 0, Duration::ZERO),
            Some(Duration::from_millis(50))
        );
        assert_eq!(
            p.next_delay(
                &Status::deadline_exceeded("slow"),
                Idempotency::Safe,
                2,
                Duration::from_secs(1)
            ),
            Some(Duration::from_millis(200))
        );
        // The budget bounds the total time, including the delay about to be slept.
        assert_eq!(
            p.next_delay(&unavailable, Idempotency::Safe, 9, Duration::from_millis(14_500)),
            None
        );
        assert_eq!(
            p.next_delay(&unavailable, Idempotency::Safe, 0, Duration::from_secs(15)),
            None
        );
        assert_eq!(
            RetryPolicy::never().next_delay(&unavailable, Idempotency::Safe, 0, Duration::ZERO),
            None
        );
    }

    #[test]
    fn the_servers_retry_hint_lengthens_the_backoff_up_to_the_cap() {
        let p = policy();
        let mut hinted = Status::unavailable("no leader");
        hinted
            .metadata_mut()
            .insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&hinted), Some(Duration::from_millis(250)));
        assert_eq!(
            p.next_delay(&hinted, Idempotency::Safe, 0, Duration::ZERO),
            Some(Duration::from_millis(250))
        );
        // A longer backoff is not shortened by the hint.
        assert_eq!(
            p.next_delay(&hinted, Idempotency::Safe, 3, Duration::ZERO),
            Some(Duration::from_millis(400))
        );
        hinted
            .metadata_mut()
            .insert("retry-after-ms", "60000".parse().unwrap());
        assert_eq!(
            p.next_delay(&hinted, Idempotency::Safe, 0, Duration::ZERO),
            Some(Duration::from_secs(1))
        );
        hinted
            .metadata_mut()
            .insert("retry-after-ms", "soon".parse().unwrap());
        assert_eq!(retry_after(&hinted), None);
    }

    #[test]
    fn unsafe_requests_and_definite_answers_are_never_retried() {
        let p = policy();
        assert_eq!(
            p.next_delay(&Status::unavailable("x"), Idempotency::Unsafe, 0, Duration::ZERO),
            None
        );
        for definite in [
            Status::invalid_argument("namespace: invalid"),
            Status::failed_precondition("conflict"),
            Status::not_found("entity"),
            Status::resource_exhausted("too big"),
            Status::data_loss("chain"),
            Status::internal("bug"),
        ] {
            assert_eq!(
                p.next_delay(&definite, Idempotency::Safe, 0, Duration::ZERO),
                None,
                "{definite:?}"
            );
        }
    }

    #[test]
    fn local_transport_failures_are_transient() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let broken = Status::from_error(Box::new(io));
        assert!(is_transient(&broken), "{broken:?}");
        // The same failure relayed by a forwarding node arrives without a source.
        assert!(is_transient(&Status::unknown(
            "h2 protocol error: error reading a body from connection"
        )));
        assert!(is_transient(&Status::cancelled("Timeout expired")));
        assert!(is_transient(&Status::internal(
            "h2 protocol error: connection reset"
        )));
        assert!(!is_transient(&Status::internal("apply failed")));
    }
}
