//! Refuses a signed request whose timestamp is outside a window around the node's clock, or
//! whose nonce the node has seen inside that window.

use std::collections::{HashSet, VecDeque};

use crate::RequestAuth;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error(
        "request signed at {time_ms} ms, {skew_ms} ms from this node's clock; the window is ±{window_ms} ms (check the agent's clock)"
    )]
    Stale {
        time_ms: i64,
        skew_ms: i64,
        window_ms: i64,
    },
    #[error("request nonce already used by agent {principal} within the last {window_ms} ms: a replay")]
    Replayed { principal: String, window_ms: i64 },
    #[error("this node remembers {0} nonces, its limit, within the replay window; retry shortly")]
    Full(usize),
}

/// Timestamps and nonces of recently accepted requests. A nonce is forgotten only once its
/// request's timestamp has left the window, after which the timestamp alone refuses a replay;
/// when the guard is full it refuses new requests rather than forget a nonce early.
pub struct ReplayGuard {
    window_ms: i64,
    max_nonces: usize,
    /// blake3(principal, nonce) cut to 16 bytes: a fixed 16 bytes per request remembered,
    /// whatever the principal's length.
    seen: HashSet<[u8; 16]>,
    /// (forget after, key), oldest first by arrival.
    expiry: VecDeque<(i64, [u8; 16])>,
}

fn replay_key(auth: &RequestAuth) -> [u8; 16] {
    let mut h = blake3::Hasher::new();
    h.update(auth.principal.as_str().as_bytes());
    h.update(&[0]);
    h.update(&auth.nonce);
    let mut key = [0u8; 16];
    key.copy_from_slice(&h.finalize().as_bytes()[..16]);
    key
}

impl ReplayGuard {
    pub fn new(window_ms: i64, max_nonces: usize) -> ReplayGuard {
        ReplayGuard {
            window_ms,
            max_nonces,
            seen: HashSet::new(),
            expiry: VecDeque::new(),
        }
    }

    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }

    /// Accepts `auth` at `now_ms` and remembers its nonce, or says why not. Call it only after
    /// the signature verified, so a forger cannot fill the guard.
    pub fn admit(&mut self, auth: &RequestAuth, now_ms: i64) -> Result<(), ReplayError> {
        let skew_ms = auth.time_ms.saturating_sub(now_ms);
        if skew_ms.abs() > self.window_ms {
            return Err(ReplayError::Stale {
                time_ms: auth.time_ms,
                skew_ms,
                window_ms: self.window_ms,
            });
        }
        // Arrival order is not timestamp order, so an entry is dropped once the front's time
        // has passed; later ones wait their turn, which only delays forgetting them.
        while let Some((forget_after, _)) = self.expiry.front()
            && *forget_after < now_ms
        {
            if let Some((_, key)) = self.expiry.pop_front() {
                self.seen.remove(&key);
            }
        }
        let key = replay_key(auth);
        if self.seen.contains(&key) {
            return Err(ReplayError::Replayed {
                principal: auth.principal.to_string(),
                window_ms: self.window_ms,
            });
        }
        if self.seen.len() >= self.max_nonces {
            return Err(ReplayError::Full(self.max_nonces));
        }
        // The nonce must be remembered until the timestamp alone would refuse the request.
        let forget_after = auth.time_ms.saturating_add(self.window_ms);
        self.expiry.push_back((forget_after, key));
        self.seen.insert(key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentKey, Principal};

    fn auth(time_ms: i64, nonce: u8) -> RequestAuth {
        let key = AgentKey::from_seed(Principal::new("alice").unwrap(), [1; 32]);
        RequestAuth::sign(&key, "/m", b"", time_ms, [nonce; 16])
    }

    #[test]
    fn stale_and_replayed_requests_are_refused() {
        let mut guard = ReplayGuard::new(1_000, 100);
        guard.admit(&auth(10_000, 1), 10_000).unwrap();
        assert!(matches!(
            guard.admit(&auth(10_000, 1), 10_500),
            Err(ReplayError::Replayed { .. })
        ));
        guard.admit(&auth(10_000, 2), 10_500).unwrap();
        assert!(matches!(
            guard.admit(&auth(8_000, 3), 10_000),
            Err(ReplayError::Stale { .. })
        ));
        assert!(matches!(
            guard.admit(&auth(12_001, 3), 11_000),
            Err(ReplayError::Stale { .. })
        ));
        // Once the first request's time has left the window its nonce is forgotten, and the
        // timestamp alone refuses the replay.
        assert!(matches!(
            guard.admit(&auth(10_000, 1), 11_001),
            Err(ReplayError::Stale { .. })
        ));
        guard.admit(&auth(11_001, 4), 11_001).unwrap();
        assert!(!guard.seen.contains(&replay_key(&auth(10_000, 1))));
    }

    #[test]
    fn a_full_guard_refuses_rather_than_forgets() {
        let mut guard = ReplayGuard::new(1_000, 2);
        guard.admit(&auth(0, 1), 0).unwrap();
        guard.admit(&auth(0, 2), 0).unwrap();
        assert_eq!(guard.admit(&auth(0, 3), 0), Err(ReplayError::Full(2)));
        assert!(matches!(
            guard.admit(&auth(0, 1), 0),
            Err(ReplayError::Replayed { .. })
        ));
    }
}
