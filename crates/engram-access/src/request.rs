//! A request signed by an agent key, carried in four gRPC metadata entries.
//!
//! The signature covers the gRPC method path, the blake3 hash of the request message as
//! protobuf bytes, the principal, a timestamp (milliseconds since the Unix epoch) and a random
//! 16-byte nonce, under a domain tag, so a signature made for one call, body, principal or
//! moment verifies for no other. Servers re-encode the message they decoded to get the body;
//! prost's encoding of a message is deterministic, so a client that encodes with prost (every
//! Engram client does) and a server agree byte for byte.

use engram_audit::{PublicKey, Verifier};

use crate::{AgentKey, Principal};

/// The principal the request acts as.
pub const AGENT_HEADER: &str = "x-engram-agent";
/// Milliseconds since the Unix epoch, when the client signed.
pub const TIME_HEADER: &str = "x-engram-time-ms";
/// 16 random bytes, hex.
pub const NONCE_HEADER: &str = "x-engram-nonce";
/// The Ed25519 signature, hex.
pub const SIGNATURE_HEADER: &str = "x-engram-signature";
/// Every header a signed request carries (a node forwarding the request copies them).
pub const HEADERS: [&str; 4] = [AGENT_HEADER, TIME_HEADER, NONCE_HEADER, SIGNATURE_HEADER];

const DOMAIN: &[u8] = b"engram-request-v1\0";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("request signature: header {0} is missing")]
    Missing(&'static str),
    #[error("request signature: header {header} is malformed: {reason}")]
    Malformed { header: &'static str, reason: String },
    #[error(
        "request signature does not verify for agent {principal} (key {key_id}): the request was altered, signed for another call, or signed by another key"
    )]
    BadSignature { principal: String, key_id: String },
}

/// The signature part of a request, as its headers carry it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RequestAuth {
    pub principal: Principal,
    pub time_ms: i64,
    pub nonce: [u8; 16],
    pub signature: [u8; 64],
}

impl RequestAuth {
    /// Signs a call of `method` (the gRPC path, `/engram.v1.Memory/Transact`) with body
    /// `body` (the request message's protobuf bytes).
    pub fn sign(key: &AgentKey, method: &str, body: &[u8], time_ms: i64, nonce: [u8; 16]) -> RequestAuth {
        let message = signed_message(
            &key.principal,
            method,
            blake3::hash(body).as_bytes(),
            time_ms,
            &nonce,
        );
        RequestAuth {
            principal: key.principal.clone(),
            time_ms,
            nonce,
            signature: key.sign(&message),
        }
    }

    /// Checks the signature against `key` for this `method` and `body`.
    pub fn verify(&self, key: &PublicKey, method: &str, body: &[u8]) -> Result<(), RequestError> {
        self.verify_with(key, key.verifier().as_ref(), method, body)
    }

    /// [`RequestAuth::verify`] with `key` already decompressed (`None`: not a curve point, so
    /// nothing verifies).
    pub fn verify_with(
        &self,
        key: &PublicKey,
        verifier: Option<&Verifier>,
        method: &str,
        body: &[u8],
    ) -> Result<(), RequestError> {
        self.verify_hash(key, verifier, method, blake3::hash(body).as_bytes())
    }

    /// [`RequestAuth::verify_with`] given the blake3 hash of the body instead of the body: what
    /// an offline verifier holds for a transaction (the entry records the hash).
    pub fn verify_hash(
        &self,
        key: &PublicKey,
        verifier: Option<&Verifier>,
        method: &str,
        body_hash: &[u8; 32],
    ) -> Result<(), RequestError> {
        let message = signed_message(&self.principal, method, body_hash, self.time_ms, &self.nonce);
        if verifier.is_some_and(|v| v.verify(&message, &self.signature)) {
            Ok(())
        } else {
            Err(RequestError::BadSignature {
                principal: self.principal.to_string(),
                key_id: key.key_id().to_string(),
            })
        }
    }

    /// The headers to send, in [`HEADERS`] order.
    pub fn headers(&self) -> [(&'static str, String); 4] {
        [
            (AGENT_HEADER, self.principal.to_string()),
            (TIME_HEADER, self.time_ms.to_string()),
            (NONCE_HEADER, hex::encode(self.nonce)),
            (SIGNATURE_HEADER, hex::encode(self.signature)),
        ]
    }

    /// Reads the headers through `get`: `Ok(None)` when the request carries none of them (an
    /// unsigned request), an error when it carries some but not all, or a malformed one.
    pub fn from_headers<'a>(
        get: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<Option<RequestAuth>, RequestError> {
        if HEADERS.iter().all(|h| get(h).is_none()) {
            return Ok(None);
        }
        let field = |h: &'static str| get(h).ok_or(RequestError::Missing(h));
        let malformed = |header: &'static str, reason: String| RequestError::Malformed { header, reason };
        let principal =
            Principal::new(field(AGENT_HEADER)?).map_err(|e| malformed(AGENT_HEADER, e.to_string()))?;
        let time_ms = field(TIME_HEADER)?
            .parse::<i64>()
            .map_err(|e| malformed(TIME_HEADER, e.to_string()))?;
        let nonce = hex_array::<16>(field(NONCE_HEADER)?).map_err(|r| malformed(NONCE_HEADER, r))?;
        let signature =
            hex_array::<64>(field(SIGNATURE_HEADER)?).map_err(|r| malformed(SIGNATURE_HEADER, r))?;
        Ok(Some(RequestAuth {
            principal,
            time_ms,
            nonce,
            signature,
        }))
    }
}

fn hex_array<const N: usize>(text: &str) -> Result<[u8; N], String> {
    let bytes = hex::decode(text).map_err(|e| format!("not hex: {e}"))?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| format!("{} bytes, expected {N}", bytes.len()))
}

/// What the agent signs: the domain tag, then each field length-prefixed, so no two field
/// lists give the same bytes.
fn signed_message(
    principal: &Principal,
    method: &str,
    body_hash: &[u8; 32],
    time_ms: i64,
    nonce: &[u8; 16],
) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN.len() + 160 + method.len());
    m.extend_from_slice(DOMAIN);
    for part in [principal.as_str().as_bytes(), method.as_bytes()] {
        m.extend_from_slice(&(part.len() as u32).to_be_bytes());
        m.extend_from_slice(part);
    }
    m.extend_from_slice(body_hash);
    m.extend_from_slice(&time_ms.to_be_bytes());
    m.extend_from_slice(nonce);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, seed: u8) -> AgentKey {
        AgentKey::from_seed(Principal::new(name).unwrap(), [seed; 32])
    }

    const METHOD: &str = "/engram.v1.Memory/Transact";

    #[test]
    fn a_signature_verifies_for_its_call_only() {
        let alice = key("alice", 1);
        let auth = RequestAuth::sign(&alice, METHOD, b"body", 1_000, [7; 16]);
        let public = alice.public();
        auth.verify(&public, METHOD, b"body").unwrap();
        assert!(auth.verify(&public, METHOD, b"other body").is_err());
        assert!(auth.verify(&public, "/engram.v1.Memory/Get", b"body").is_err());
        assert!(auth.verify(&key("alice", 2).public(), METHOD, b"body").is_err());
        // The body's hash is enough to check a signature (what an audit entry records).
        let hash = *blake3::hash(b"body").as_bytes();
        auth.verify_hash(&public, public.verifier().as_ref(), METHOD, &hash)
            .unwrap();
        let other = *blake3::hash(b"other body").as_bytes();
        assert!(
            auth.verify_hash(&public, public.verifier().as_ref(), METHOD, &other)
                .is_err()
        );
        let mut later = auth.clone();
        later.time_ms += 1;
        assert!(later.verify(&public, METHOD, b"body").is_err());
        let mut other_nonce = auth.clone();
        other_nonce.nonce[0] ^= 1;
        assert!(other_nonce.verify(&public, METHOD, b"body").is_err());
        // The same key, claimed by another principal name, does not verify either.
        let mut renamed = auth;
        renamed.principal = Principal::new("bob").unwrap();
        assert!(renamed.verify(&public, METHOD, b"body").is_err());
    }

    #[test]
    fn headers_round_trip_and_partial_headers_are_refused() {
        let auth = RequestAuth::sign(&key("alice", 1), METHOD, b"x", -5, [9; 16]);
        let headers = auth.headers();
        let get = |name: &str| headers.iter().find(|(h, _)| *h == name).map(|(_, v)| v.as_str());
        assert_eq!(RequestAuth::from_headers(get).unwrap(), Some(auth.clone()));
        assert_eq!(RequestAuth::from_headers(|_| None).unwrap(), None);
        let without_sig = |name: &str| if name == SIGNATURE_HEADER { None } else { get(name) };
        assert_eq!(
            RequestAuth::from_headers(without_sig).unwrap_err(),
            RequestError::Missing(SIGNATURE_HEADER)
        );
        let bad_nonce = |name: &str| {
            if name == NONCE_HEADER {
                Some("abcd")
            } else {
                get(name)
            }
        };
        assert!(matches!(
            RequestAuth::from_headers(bad_nonce).unwrap_err(),
            RequestError::Malformed {
                header: NONCE_HEADER,
                ..
            }
        ));
    }
}
