//! The access log: who read what, and when.
//!
//! Reads, watches and exports change nothing, so they are not transactions and never enter the
//! audit chain or the belief state. A node that is asked to (per namespace prefix) records each
//! one it serves as an [`AccessEvent`] in a log of its own: numbered from 1, each event linked
//! to the one before by hash, and signed by the node's key in batches under the same coverage
//! rule as audit attestations (every event is covered by a signature at or after it). Another
//! node never sees these events; each node vouches only for what it served.
//!
//! A node also records every call it refused for want of authentication or permission, with
//! the code and the reason it answered, whatever namespaces it logs: an operator can then prove
//! what was refused, to whom and when, as well as what was served.
//!
//! An event's hash is blake3 over a domain tag and its encoding, so a node's signature over an
//! event can never be taken for an attestation of an audit entry (the same key signs both).

use engram_types::codec::{Reader, Writer};
use engram_types::{DecodeError, Hash};

use crate::entry::{decode_attested, encode_attested};
use crate::{Attestation, NodeKey, PublicKey};

/// Format version of a served call's event. A refusal is encoded as
/// [`ACCESS_REFUSAL_FORMAT_VERSION`]; a served call keeps this version's bytes (and so its hash),
/// so logs written before refusals were recorded verify as they did.
pub const ACCESS_FORMAT_VERSION: u8 = 1;
/// Format version of a refused call's event: version 1's fields, then the refusal's code and
/// reason.
pub const ACCESS_REFUSAL_FORMAT_VERSION: u8 = 2;

const HASH_DOMAIN: &[u8] = b"engram.access-event.v1\0";

/// One read, watch or export a node served.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct AccessEvent {
    /// 1-based position in this node's access log; contiguous.
    pub seq: u64,
    /// This node's clock when it served the call (never earlier than the event before).
    pub time_ns: i64,
    /// The authenticated caller; empty for an unsigned one. For a refusal: the agent the call
    /// claimed to come from, which an `UNAUTHENTICATED` refusal did not verify.
    pub principal: String,
    /// What was called: `get`, `history`, `find`, `diff`, `watch`, `schema`, `branches`,
    /// `export`; for a refusal, the gRPC method (`/engram.v1.Memory/Transact`).
    pub call: String,
    /// The namespace read; empty for a cluster-wide call (an export).
    pub namespace: String,
    /// The entity read, for a call about one entity.
    pub entity: Option<u64>,
    /// The transaction the read was as of, when the caller asked for one.
    pub as_of_tx: Option<u64>,
    /// The node's applied log index when it answered: what state the answer came from.
    pub read_at: u64,
    /// Datoms returned (redacted ones included).
    pub datoms: u32,
    pub prev_hash: Hash,
    /// Set when the node refused the call instead of serving it.
    pub refused: Option<Refusal>,
}

/// Why a node refused a call: the gRPC code it answered with and the reason it gave.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Refusal {
    /// The code's name: `UNAUTHENTICATED` or `PERMISSION_DENIED`.
    pub code: String,
    pub reason: String,
}

impl Refusal {
    /// The longest reason kept, in bytes: a reason may quote what the caller sent (a
    /// certificate's name), and a refusal must not let a caller grow the log by much.
    pub const MAX_REASON_BYTES: usize = 1024;

    /// A refusal with `reason` cut to [`Refusal::MAX_REASON_BYTES`] (`engram_types::clip`: at
    /// a character boundary, the full length noted).
    pub fn new(code: &str, reason: &str) -> Refusal {
        Refusal {
            code: code.to_string(),
            reason: engram_types::clip(reason, Refusal::MAX_REASON_BYTES).into_owned(),
        }
    }
}

impl AccessEvent {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(96 + self.principal.len() + self.namespace.len());
        let version = match self.refused {
            None => ACCESS_FORMAT_VERSION,
            Some(_) => ACCESS_REFUSAL_FORMAT_VERSION,
        };
        w.u8(version)
            .u64(self.seq)
            .i64(self.time_ns)
            .str(&self.principal)
            .str(&self.call)
            .str(&self.namespace);
        for v in [self.entity, self.as_of_tx] {
            match v {
                None => w.u8(0),
                Some(v) => w.u8(1).u64(v),
            };
        }
        w.u64(self.read_at)
            .u32(self.datoms)
            .raw(self.prev_hash.as_bytes());
        if let Some(refused) = &self.refused {
            w.str(&refused.code).str(&refused.reason);
        }
        w.finish()
    }

    fn read(r: &mut Reader<'_>) -> Result<AccessEvent, DecodeError> {
        let version = r.u8("access format version")?;
        if version != ACCESS_FORMAT_VERSION && version != ACCESS_REFUSAL_FORMAT_VERSION {
            return Err(DecodeError::Version(version));
        }
        let seq = r.u64("seq")?;
        let time_ns = r.i64("time")?;
        let principal = r.string("principal")?;
        let call = r.string("call")?;
        let namespace = r.string("namespace")?;
        let mut opt = |what| match r.u8(what)? {
            0 => Ok(None),
            1 => r.u64(what).map(Some),
            tag => Err(DecodeError::Tag { what, tag }),
        };
        let entity = opt("entity")?;
        let as_of_tx = opt("as_of_tx")?;
        let read_at = r.u64("read_at")?;
        let datoms = r.u32("datoms")?;
        let prev_hash = r.hash("prev_hash")?;
        let refused = if version == ACCESS_REFUSAL_FORMAT_VERSION {
            Some(Refusal {
                code: r.string("refusal code")?,
                reason: r.string("refusal reason")?,
            })
        } else {
            None
        };
        Ok(AccessEvent {
            seq,
            time_ns,
            principal,
            call,
            namespace,
            entity,
            as_of_tx,
            read_at,
            datoms,
            prev_hash,
            refused,
        })
    }

    pub fn hash(&self) -> Hash {
        let mut bytes = HASH_DOMAIN.to_vec();
        bytes.extend_from_slice(&self.encode());
        Hash::of(&bytes)
    }
}

/// An event as a node stores it: with the node's signature over its hash, or without one when
/// a later signed event covers it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SignedAccessEvent {
    pub event: AccessEvent,
    pub attestation: Option<Attestation>,
}

impl SignedAccessEvent {
    /// Signs the event with `key` (replacing any signature).
    pub fn attest(&mut self, key: &NodeKey) {
        self.attestation = Some(Attestation {
            key_id: key.key_id(),
            signature: key.sign(self.event.hash().as_bytes()),
        });
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_attested(&self.event.encode(), self.attestation.as_ref())
    }

    pub fn decode(bytes: &[u8]) -> Result<SignedAccessEvent, DecodeError> {
        let (event, attestation) = decode_attested(bytes, "access event")?;
        let mut r = Reader::new(event);
        let event = AccessEvent::read(&mut r)?;
        r.finish()?;
        Ok(SignedAccessEvent { event, attestation })
    }
}

/// Why an access log does not verify: the first event that fails, and how.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("access event {seq}, {field}: {message}")]
pub struct AccessFault {
    pub seq: u64,
    pub field: &'static str,
    pub message: String,
}

/// Checks an access log event by event, in order: numbering, links, time order, every
/// signature (by one of the node's keys: a node that rotated signed its earlier events with
/// the key it had then), and, at [`AccessLogVerifier::finish`], that every event is covered.
pub struct AccessLogVerifier {
    keys: Vec<(PublicKey, Option<crate::Verifier>)>,
    next_seq: u64,
    prev_hash: Hash,
    time_ns: i64,
    last_attested: u64,
}

impl AccessLogVerifier {
    /// Verifies events signed by any of `keys` (the node's current key and the ones it rotated
    /// out), from the first.
    pub fn new(keys: &[PublicKey]) -> AccessLogVerifier {
        AccessLogVerifier {
            keys: keys.iter().map(|k| (*k, k.verifier())).collect(),
            next_seq: 1,
            prev_hash: Hash::ZERO,
            time_ns: i64::MIN,
            last_attested: 0,
        }
    }

    pub fn checked(&self) -> u64 {
        self.next_seq - 1
    }

    pub fn push(&mut self, signed: &SignedAccessEvent) -> Result<(), AccessFault> {
        let e = &signed.event;
        let fault = |field, message: String| AccessFault {
            seq: e.seq,
            field,
            message,
        };
        if e.seq != self.next_seq {
            return Err(fault("seq", format!("expected event {}", self.next_seq)));
        }
        if e.prev_hash != self.prev_hash {
            return Err(fault(
                "prev_hash",
                format!(
                    "{} does not link to event {}'s hash {}",
                    e.prev_hash,
                    self.checked(),
                    self.prev_hash
                ),
            ));
        }
        if e.time_ns < self.time_ns {
            return Err(fault("time", "earlier than the event before it".into()));
        }
        let hash = e.hash();
        if let Some(a) = &signed.attestation {
            let Some((_, verifier)) = self.keys.iter().find(|(k, _)| k.key_id() == a.key_id) else {
                let known: Vec<String> = self.keys.iter().map(|(k, _)| k.key_id().to_string()).collect();
                return Err(fault(
                    "attestation.key_id",
                    format!(
                        "signed by key {}, not one of the node's keys ({})",
                        a.key_id,
                        known.join(", ")
                    ),
                ));
            };
            if !verifier
                .as_ref()
                .is_some_and(|v| v.verify(hash.as_bytes(), &a.signature))
            {
                return Err(fault(
                    "attestation.signature",
                    "does not verify (the event was altered)".into(),
                ));
            }
            self.last_attested = e.seq;
        }
        self.next_seq += 1;
        self.prev_hash = hash;
        self.time_ns = e.time_ns;
        Ok(())
    }

    /// Every event must be covered by a signature at or after it.
    pub fn finish(&self) -> Result<(), AccessFault> {
        if self.last_attested < self.checked() {
            return Err(AccessFault {
                seq: self.last_attested + 1,
                field: "attestation",
                message: format!(
                    "no signature at or after this event covers it (events {}..={} are unsigned)",
                    self.last_attested + 1,
                    self.checked()
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(key: &NodeKey, n: u64, sign_every: u64) -> Vec<SignedAccessEvent> {
        let mut prev = Hash::ZERO;
        (1..=n)
            .map(|seq| {
                let event = AccessEvent {
                    seq,
                    time_ns: seq as i64 * 10,
                    principal: "alice".into(),
                    call: "get".into(),
                    namespace: "team/a".into(),
                    entity: Some(seq),
                    as_of_tx: (seq % 2 == 0).then_some(3),
                    read_at: 40 + seq,
                    datoms: 2,
                    prev_hash: prev,
                    // Every third event a refusal, so both formats are linked and signed.
                    refused: (seq % 3 == 0)
                        .then(|| Refusal::new("PERMISSION_DENIED", "alice holds no read grant")),
                };
                prev = event.hash();
                let mut signed = SignedAccessEvent {
                    event,
                    attestation: None,
                };
                if seq % sign_every == 0 || seq == n {
                    signed.attest(key);
                }
                signed
            })
            .collect()
    }

    fn verify(key: &NodeKey, events: &[SignedAccessEvent]) -> Result<u64, AccessFault> {
        let mut v = AccessLogVerifier::new(&[key.public()]);
        for e in events {
            v.push(e)?;
        }
        v.finish()?;
        Ok(v.checked())
    }

    fn served(seq: u64) -> AccessEvent {
        AccessEvent {
            seq,
            time_ns: 1_700_000_000_000_000_000,
            principal: "alice".into(),
            call: "get".into(),
            namespace: "team/a".into(),
            entity: Some(7),
            as_of_tx: None,
            read_at: 42,
            datoms: 3,
            prev_hash: Hash::of(b"the event before"),
            refused: None,
        }
    }

    #[test]
    fn a_served_call_keeps_the_first_format_and_its_hash() {
        // The hash this event had before refusals were recorded (format 1): a log written then
        // verifies unchanged.
        let e = served(5);
        assert_eq!(e.encode()[0], ACCESS_FORMAT_VERSION);
        assert_eq!(e.hash().to_string(), SERVED_EVENT_HASH);
    }

    /// `served(5)`'s hash, computed by the format-1-only encoder.
    const SERVED_EVENT_HASH: &str = "01eb6cf46f13ed062bed7b74967b540acbead5b7d7be5c8bd5558b9de877b044";

    #[test]
    fn a_refusal_is_bound_by_the_hash_and_round_trips() {
        let mut e = served(5);
        e.refused = Some(Refusal::new("UNAUTHENTICATED", "unknown agent mallory"));
        let bytes = e.encode();
        assert_eq!(bytes[0], ACCESS_REFUSAL_FORMAT_VERSION);
        let signed = SignedAccessEvent {
            event: e.clone(),
            attestation: None,
        };
        assert_eq!(SignedAccessEvent::decode(&signed.encode()).unwrap().event, e);
        // The code and the reason are covered: changing either changes the hash.
        let mut other = e.clone();
        other.refused = Some(Refusal::new("PERMISSION_DENIED", "unknown agent mallory"));
        assert_ne!(other.hash(), e.hash());
        other.refused = Some(Refusal::new("UNAUTHENTICATED", "unknown agent mallor"));
        assert_ne!(other.hash(), e.hash());
        // A refusal dropped from a stored event (the version kept) does not decode.
        let mut cut = bytes.clone();
        cut.truncate(served(5).encode().len());
        let mut r = Reader::new(&cut);
        assert!(AccessEvent::read(&mut r).is_err());
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary() {
        let reason = "é".repeat(Refusal::MAX_REASON_BYTES);
        let r = Refusal::new("UNAUTHENTICATED", &reason);
        let kept = r.reason.trim_end_matches(&format!("…({} bytes)", reason.len()));
        assert_eq!(kept, "é".repeat(Refusal::MAX_REASON_BYTES / 2));
        assert_eq!(Refusal::new("UNAUTHENTICATED", "short").reason, "short");
    }

    #[test]
    fn a_log_round_trips_and_verifies() {
        let key = NodeKey::from_seed([1; 32]);
        let events = log(&key, 7, 3);
        for e in &events {
            assert_eq!(&SignedAccessEvent::decode(&e.encode()).unwrap(), e);
        }
        assert_eq!(verify(&key, &events), Ok(7));
    }

    #[test]
    fn alterations_are_named_by_event() {
        let key = NodeKey::from_seed([1; 32]);
        let events = log(&key, 7, 3);
        // A signed event altered.
        let mut altered = events.clone();
        altered[2].event.principal = "bob".into();
        let fault = verify(&key, &altered).unwrap_err();
        assert_eq!((fault.seq, fault.field), (3, "attestation.signature"));
        // An unsigned event altered: the next event's link breaks.
        let mut altered = events.clone();
        altered[0].event.namespace = "team/b".into();
        let fault = verify(&key, &altered).unwrap_err();
        assert_eq!((fault.seq, fault.field), (2, "prev_hash"));
        // An event removed.
        let mut removed = events.clone();
        removed.remove(4);
        assert_eq!(verify(&key, &removed).unwrap_err().field, "seq");
        // The signed tail cut off: the rest is uncovered.
        let fault = verify(&key, &events[..5]).unwrap_err();
        assert_eq!((fault.seq, fault.field), (4, "attestation"));
        // Signed by another key.
        let other = NodeKey::from_seed([2; 32]);
        let fault = verify(&other, &events).unwrap_err();
        assert_eq!((fault.seq, fault.field), (3, "attestation.key_id"));
        // A node that rotated: its earlier events carry the old key's signatures, its later
        // ones the new key's; both keys given, the whole log verifies.
        let mut rotated = events.clone();
        for e in rotated.iter_mut().skip(3).filter(|e| e.attestation.is_some()) {
            e.attest(&other);
        }
        let mut v = AccessLogVerifier::new(&[other.public(), key.public()]);
        for e in &rotated {
            v.push(e).unwrap();
        }
        v.finish().unwrap();
        // An access event's signature is not an attestation of anything else: its hash is
        // domain-separated from its bytes.
        assert_ne!(events[0].event.hash(), Hash::of(&events[0].event.encode()));
    }
}
