//! The Raft requests this node refused: counted per reason for `/metrics`, and logged without
//! letting a flood of forged calls flood the log.
//!
//! The Raft service shares the client port, so anyone who reaches it can send forged requests
//! as fast as the network allows, and each is refused (see [`crate::peer_auth`]). One WARN line
//! per refusal turned ten seconds of forged calls into thousands of lines, burying everything
//! else the node logs and filling its disk. So each reason logs at most one line per
//! [`LOG_EVERY`], naming how many like it were suppressed since its last line, while the
//! counters still count every refusal: the metric says how many, the log says what.
//!
//! Beside them, the requests it accepted, by how the sender proved itself (a signature or a
//! tag, see [`crate::peer_auth`]): mid rolling upgrade, signatures from the nodes not yet
//! upgraded; afterwards, tags alone.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::peer_auth::{AuthError, Proof, RpcKind};

/// At most one log line per refusal reason in this long.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The reasons a Raft request is refused, as metric labels ([`AuthError::reason`]), in the
/// order the counters keep them.
pub const REASONS: [&str; 12] = [
    "missing",
    "wrong_target",
    "too_many_signatures",
    "too_many_members",
    "too_many_admissions",
    "malformed",
    "untrusted",
    "bad_signature",
    "bad_admission",
    "lookup",
    "bad_tag",
    "stale_target",
];

impl AuthError {
    /// This refusal's reason, as a metric label (one of [`REASONS`]).
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing",
            AuthError::WrongTarget { .. } => "wrong_target",
            AuthError::TooManySignatures(_) => "too_many_signatures",
            AuthError::TooManyMembers(_) => "too_many_members",
            AuthError::TooManyAdmissions(_) => "too_many_admissions",
            AuthError::Malformed(_) => "malformed",
            AuthError::Untrusted { .. } => "untrusted",
            AuthError::BadSignature { .. } => "bad_signature",
            AuthError::BadAdmission { .. } => "bad_admission",
            AuthError::Lookup(_) => "lookup",
            AuthError::BadTag { .. } => "bad_tag",
            AuthError::StaleTarget { .. } => "stale_target",
        }
    }
}

/// When one reason last logged, and how many refusals since then did not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogWindow {
    last_logged: Option<Instant>,
    suppressed: u64,
}

impl LogWindow {
    /// A refusal at `now`: `Some(k)` if it is to be logged, `k` being how many were suppressed
    /// since the last line; `None` if it is one of them.
    pub fn refusal(&mut self, now: Instant) -> Option<u64> {
        match self.last_logged {
            Some(last) if now.saturating_duration_since(last) < LOG_EVERY => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last_logged = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// Every refusal this node made, per reason, and every request it accepted, per proof.
#[derive(Debug, Default)]
pub struct PeerRefusals {
    counts: [AtomicU64; REASONS.len()],
    windows: Mutex<[LogWindow; REASONS.len()]>,
    /// Accepted requests: signed, tagged.
    accepted: [AtomicU64; 2],
}

impl PeerRefusals {
    /// Counts a request accepted on the strength of `proof`.
    pub fn accepted(&self, proof: Proof) {
        let slot = match proof {
            Proof::Signature => 0,
            Proof::Tag => 1,
        };
        self.accepted[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// Accepted requests by proof, as metric labels: `signature`, then `tag`.
    pub fn accepted_counts(&self) -> [(&'static str, u64); 2] {
        [
            ("signature", self.accepted[0].load(Ordering::Relaxed)),
            ("tag", self.accepted[1].load(Ordering::Relaxed)),
        ]
    }

    /// Counts a refusal of a `kind` request for `error`, and logs it unless its reason logged
    /// within [`LOG_EVERY`].
    pub fn refused(&self, kind: RpcKind, error: &AuthError) {
        let reason = error.reason();
        let Some(slot) = REASONS.iter().position(|r| *r == reason) else {
            // `reason` names only entries of REASONS; a missing one is a bug in this file.
            debug_assert!(false, "refusal reason {reason} is not in REASONS");
            return;
        };
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        // A poisoned lock only loses the throttle's state: start the window again.
        let logged = match self.windows.lock() {
            Ok(mut windows) => windows[slot].refusal(Instant::now()),
            Err(poisoned) => {
                let mut windows = poisoned.into_inner();
                windows[slot] = LogWindow::default();
                windows[slot].refusal(Instant::now())
            }
        };
        if let Some(suppressed) = logged {
            warn!(
                kind = ?kind,
                reason,
                error = %error,
                suppressed_since_last = suppressed,
                "refused a raft request (one line per reason every {} s; engram_peer_refusals_total counts each)",
                LOG_EVERY.as_secs()
            );
        }
    }

    /// Refusals per reason, every reason listed (zero included).
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        REASONS
            .iter()
            .zip(&self.counts)
            .map(|(reason, count)| (*reason, count.load(Ordering::Relaxed)))
    }

    /// Refusals for any reason.
    pub fn total(&self) -> u64 {
        self.counts().map(|(_, n)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_window_names_what_it_suppressed() {
        let start = Instant::now();
        let mut w = LogWindow::default();
        assert_eq!(w.refusal(start), Some(0));
        for ms in [1, 500, 9_999] {
            assert_eq!(w.refusal(start + Duration::from_millis(ms)), None);
        }
        assert_eq!(w.refusal(start + LOG_EVERY), Some(3));
        assert_eq!(w.refusal(start + LOG_EVERY + Duration::from_secs(1)), None);
        assert_eq!(w.refusal(start + LOG_EVERY * 3), Some(1));
    }

    #[test]
    fn every_refusal_is_counted_under_its_reason() {
        let r = PeerRefusals::default();
        for _ in 0..1000 {
            r.refused(RpcKind::AppendEntries, &AuthError::Missing);
        }
        r.refused(RpcKind::Vote, &AuthError::Untrusted { from: 99 });
        let counts: Vec<_> = r.counts().filter(|(_, n)| *n > 0).collect();
        assert_eq!(counts, [("missing", 1000), ("untrusted", 1)]);
        assert_eq!(r.total(), 1001);
    }

    #[test]
    fn every_reason_has_a_label() {
        let all = [
            AuthError::Missing,
            AuthError::WrongTarget { to: 1, me: 2 },
            AuthError::TooManySignatures(3),
            AuthError::TooManyMembers(3),
            AuthError::TooManyAdmissions(3),
            AuthError::Malformed("x"),
            AuthError::Untrusted { from: 1 },
            AuthError::BadSignature {
                from: 1,
                key: "k".into(),
            },
            AuthError::BadAdmission {
                from: 1,
                authorizer: "k".into(),
            },
            AuthError::Lookup("x".into()),
            AuthError::BadTag {
                from: 1,
                key: "k".into(),
            },
            AuthError::StaleTarget {
                from: 1,
                key: "k".into(),
            },
        ];
        let labels: Vec<_> = all.iter().map(AuthError::reason).collect();
        assert_eq!(labels, REASONS);
    }
}
