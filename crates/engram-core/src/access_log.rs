//! This node's access log (`engram_audit::access_event`): who read what, and when, and which
//! calls it refused.
//!
//! Events live in their own key space ([`Space::Access`]), so they are never in the belief
//! state, the replica digest or a snapshot: each node keeps and signs what it served. Rows are
//! `e` + seq (big-endian) → the signed event. The writer appends a batch of events in one
//! synced write whose last event carries the node's signature, so every stored event is
//! covered by a signature at or after it, whatever the crash.

pub use engram_audit::Refusal;
use engram_audit::{AccessEvent, NodeKey, SignedAccessEvent};
use engram_storage::{ReadView, Space, Store, WriteBatch};
use engram_types::Hash;

use crate::CoreError;
use crate::durability::{Write, durability};

const EVENT: u8 = b'e';

fn event_key(seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(EVENT);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// What a served call records; the log numbers, links, orders in time and signs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub principal: String,
    pub call: &'static str,
    pub namespace: String,
    pub entity: Option<u64>,
    pub as_of_tx: Option<u64>,
    pub read_at: u64,
    pub datoms: u32,
    /// Set when the call was refused, not served.
    pub refused: Option<Refusal>,
}

/// The appending end of the log: its head.
pub struct AccessLog {
    seq: u64,
    prev_hash: Hash,
    time_ns: i64,
}

impl AccessLog {
    /// Opens the log at its last stored event.
    pub fn open(store: &dyn ReadView) -> Result<AccessLog, CoreError> {
        let last = store.scan_rev(Space::Access, &[EVENT], Some(&[EVENT + 1]), 1)?;
        let Some((_, bytes)) = last.into_iter().next() else {
            return Ok(AccessLog {
                seq: 0,
                prev_hash: Hash::ZERO,
                time_ns: i64::MIN,
            });
        };
        let signed = decode(&bytes)?;
        Ok(AccessLog {
            seq: signed.event.seq,
            prev_hash: signed.event.hash(),
            time_ns: signed.event.time_ns,
        })
    }

    /// The last event's number (0: none yet).
    pub fn head(&self) -> u64 {
        self.seq
    }

    /// Appends `calls` (each with the node's clock when it was served) in one synced write,
    /// signing the last with `key`. Times are kept in order: an event is never stamped earlier
    /// than the one before it, whatever the clock did.
    pub fn append(
        &mut self,
        store: &dyn Store,
        calls: Vec<(i64, Access)>,
        key: &NodeKey,
    ) -> Result<(), CoreError> {
        let n = calls.len();
        let mut batch = WriteBatch::new();
        let (mut seq, mut prev_hash, mut time_ns) = (self.seq, self.prev_hash, self.time_ns);
        for (i, (at_ns, a)) in calls.into_iter().enumerate() {
            seq += 1;
            time_ns = time_ns.max(at_ns);
            let event = AccessEvent {
                seq,
                time_ns,
                principal: a.principal,
                call: a.call.to_string(),
                namespace: a.namespace,
                entity: a.entity,
                as_of_tx: a.as_of_tx,
                read_at: a.read_at,
                datoms: a.datoms,
                prev_hash,
                refused: a.refused,
            };
            prev_hash = event.hash();
            let mut signed = SignedAccessEvent {
                event,
                attestation: None,
            };
            if i + 1 == n {
                signed.attest(key);
            }
            batch.put(Space::Access, event_key(seq), signed.encode());
        }
        if n == 0 {
            return Ok(());
        }
        store.write(batch, durability(Write::AccessLog))?;
        (self.seq, self.prev_hash, self.time_ns) = (seq, prev_hash, time_ns);
        Ok(())
    }
}

/// Which events a query wants. Empty strings and `None` match everything.
#[derive(Clone, Debug, Default)]
pub struct AccessQuery {
    /// Events on this namespace or below it (`team` matches `team` and `team/a`).
    pub namespace: String,
    pub principal: String,
    /// Served at or after this time (node clock, ns since the Unix epoch).
    pub since_ns: Option<i64>,
    /// Events after this one (to page; 0: from the first).
    pub after_seq: u64,
    pub limit: usize,
    /// Refusals only.
    pub refused_only: bool,
}

impl AccessQuery {
    fn matches(&self, e: &AccessEvent) -> bool {
        let ns = &self.namespace;
        let ns_ok = ns.is_empty()
            || e.namespace == *ns
            || e.namespace
                .strip_prefix(ns.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        ns_ok
            && (self.principal.is_empty() || e.principal == self.principal)
            && self.since_ns.is_none_or(|since| e.time_ns >= since)
            && (!self.refused_only || e.refused.is_some())
    }
}

/// Rows read per scan while filtering.
const PAGE: usize = 1024;

/// The events `q` matches, in order, at most `q.limit`; and the last event number looked at
/// (to resume from: more may match after it when the result is full).
pub fn query(store: &dyn ReadView, q: &AccessQuery) -> Result<(Vec<SignedAccessEvent>, u64), CoreError> {
    let mut out = Vec::new();
    let mut next = q.after_seq.saturating_add(1);
    let mut last = q.after_seq;
    let end = [EVENT + 1];
    while out.len() < q.limit {
        let page = store.scan(Space::Access, &event_key(next), Some(&end), PAGE)?;
        let Some(_) = page.last() else {
            break;
        };
        for (_, bytes) in page {
            let signed = decode(&bytes)?;
            last = signed.event.seq;
            next = last + 1;
            if q.matches(&signed.event) {
                out.push(signed);
                if out.len() == q.limit {
                    break;
                }
            }
        }
    }
    Ok((out, last))
}

/// The keys node `node_id` may have signed its access events with: every key the chain
/// admitted for it that was never revoked (a rotated-out key signed the events before its
/// rotation; a revoked one may have been stolen, so nothing it signed counts).
pub fn signing_keys(store: &dyn ReadView, node_id: u64) -> Result<Vec<engram_audit::PublicKey>, CoreError> {
    let rows = store.scan(
        Space::State,
        &[crate::keys::SIGNER],
        Some(&[crate::keys::SIGNER + 1]),
        usize::MAX,
    )?;
    let mut out = Vec::new();
    for (_, bytes) in rows {
        let row: engram_audit::KeyRecord = crate::rows::decode_row("key row", &bytes)?;
        if row.node_id == node_id && row.revoked_at.is_none() {
            out.push(row.key);
        }
    }
    Ok(out)
}

fn decode(bytes: &[u8]) -> Result<SignedAccessEvent, CoreError> {
    SignedAccessEvent::decode(bytes).map_err(|e| CoreError::corrupt("access log event", e))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use engram_audit::AccessLogVerifier;
    use engram_storage::MemStore;

    use super::*;

    fn read(ns: &str, who: &str) -> Access {
        Access {
            principal: who.into(),
            call: "get",
            namespace: ns.into(),
            entity: Some(7),
            as_of_tx: None,
            read_at: 12,
            datoms: 3,
            refused: None,
        }
    }

    #[test]
    fn appended_batches_verify_reopen_and_filter() {
        let store = Arc::new(MemStore::new());
        let key = NodeKey::from_seed([4; 32]);
        let mut log = AccessLog::open(store.as_ref()).unwrap();
        log.append(
            store.as_ref(),
            vec![(100, read("team/a", "alice")), (90, read("team/b", "bob"))],
            &key,
        )
        .unwrap();
        // A new opening continues the chain.
        let mut log = AccessLog::open(store.as_ref()).unwrap();
        assert_eq!(log.head(), 2);
        log.append(store.as_ref(), vec![(300, read("teamx", "alice"))], &key)
            .unwrap();

        let all = AccessQuery {
            limit: 100,
            ..Default::default()
        };
        let (events, last) = query(store.as_ref(), &all).unwrap();
        assert_eq!(last, 3);
        // The clock went back between the first two; the log's time did not.
        assert_eq!(events[1].event.time_ns, 100);
        let mut v = AccessLogVerifier::new(&[key.public()]);
        for e in &events {
            v.push(e).unwrap();
        }
        v.finish().unwrap();

        let team = AccessQuery {
            namespace: "team".into(),
            principal: "alice".into(),
            limit: 100,
            ..Default::default()
        };
        let (found, _) = query(store.as_ref(), &team).unwrap();
        assert_eq!(found.iter().map(|e| e.event.seq).collect::<Vec<_>>(), vec![1]);
        let since = AccessQuery {
            since_ns: Some(200),
            limit: 100,
            ..Default::default()
        };
        let (found, _) = query(store.as_ref(), &since).unwrap();
        assert_eq!(found.iter().map(|e| e.event.seq).collect::<Vec<_>>(), vec![3]);
        let paged = AccessQuery {
            limit: 1,
            after_seq: 1,
            ..Default::default()
        };
        let (found, last) = query(store.as_ref(), &paged).unwrap();
        assert_eq!((found[0].event.seq, last), (2, 2));
    }

    #[test]
    fn refusals_are_linked_signed_and_filtered_with_the_reads() {
        let store = Arc::new(MemStore::new());
        let key = NodeKey::from_seed([4; 32]);
        let mut log = AccessLog::open(store.as_ref()).unwrap();
        let refused = Access {
            call: "/engram.v1.Memory/Get",
            entity: None,
            datoms: 0,
            refused: Some(Refusal::new(
                "PERMISSION_DENIED",
                "mallory holds no read grant on team/a",
            )),
            ..read("team/a", "mallory")
        };
        log.append(
            store.as_ref(),
            vec![
                (1, read("team/a", "alice")),
                (2, refused.clone()),
                (3, read("team/a", "bob")),
            ],
            &key,
        )
        .unwrap();
        let only = AccessQuery {
            refused_only: true,
            limit: 100,
            ..Default::default()
        };
        let (found, last) = query(store.as_ref(), &only).unwrap();
        assert_eq!(last, 3);
        assert_eq!(found.len(), 1);
        let e = &found[0].event;
        assert_eq!((e.seq, e.principal.as_str()), (2, "mallory"));
        assert_eq!(e.refused, refused.refused);
        // The refusal sits in the same signed chain as the reads around it.
        let (all, _) = query(
            store.as_ref(),
            &AccessQuery {
                limit: 100,
                ..Default::default()
            },
        )
        .unwrap();
        let mut v = AccessLogVerifier::new(&[key.public()]);
        for e in &all {
            v.push(e).unwrap();
        }
        v.finish().unwrap();
        assert_eq!(v.checked(), 3);
    }
}
