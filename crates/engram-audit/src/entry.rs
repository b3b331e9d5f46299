use engram_types::codec::{Reader, Writer};
use engram_types::{DecodeError, Hash, TxId};
use serde::{Deserialize, Serialize};

use crate::{KeyId, NodeKey, PublicKey};

/// Format version of the canonical audit entry encoding, for an entry without a state root.
pub const AUDIT_FORMAT_VERSION: u8 = 1;

/// Format version of an entry that carries the state root after it (format 1's fields, then
/// the root): the state commitment (`docs/AUDIT.md`, "State commitment").
pub const AUDIT_FORMAT_STATE_ROOT: u8 = 2;

/// `prev_hash` of the first entry: fixed, so genesis is recognisable and cannot be preceded.
pub const GENESIS_PREV_HASH: Hash = Hash::ZERO;

/// What an entry records.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum EntryKind {
    /// An applied transaction. `content_hash` is [`tx_content_hash`] of its datoms. `author`:
    /// the agent whose signed request it executes (`None`: an unsigned request, or a change
    /// the cluster makes itself).
    Transaction {
        content_hash: Hash,
        datoms: u32,
        author: Option<Box<Author>>,
    },
    /// A membership change: the members and their public keys, ordered by node id. The first
    /// one is genesis, and its keys are the chain's trust root; later membership entries
    /// record who the members are but trust no key by themselves (see [`EntryKind::KeyChange`]).
    Membership { members: Vec<(u64, PublicKey)> },
    /// A change to the set of trusted keys, authorised by `authorizer`, a key the chain trusts
    /// at this point, whose signature over [`key_statement`] is carried here: a verifier checks
    /// it from the chain alone, whoever attested the entry.
    KeyChange {
        action: KeyAction,
        authorizer: KeyId,
        #[serde(with = "sig_bytes")]
        authorization: [u8; 64],
    },
}

/// The agent whose signed request a transaction executes, and its signature: enough for a
/// verifier to check the signature from the entry alone. The request itself (its canonical
/// bytes, `engram_types::TxRequest::signed_bytes`) is kept beside the entry and exported with
/// it, so the verifier can also hold what was signed against the datoms it produced.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Author {
    /// The agent's name.
    pub principal: String,
    /// The agent's key the signature verifies with: the key the chain's policy records for the
    /// agent at this entry.
    pub key: PublicKey,
    /// The gRPC method the request was signed for (`/engram.v1.Memory/Transact`, ...).
    pub method: String,
    /// blake3 of the request's canonical bytes.
    pub request_hash: Hash,
    /// When the agent signed, milliseconds since the Unix epoch (its clock).
    pub time_ms: i64,
    pub nonce: [u8; 16],
    #[serde(with = "sig_bytes")]
    pub signature: [u8; 64],
}

/// What a [`EntryKind::KeyChange`] does.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum KeyAction {
    /// Trust `key`, the key of node `node_id` (a node being added).
    Admit { node_id: u64, key: PublicKey },
    /// Node `node_id` replaces `old` with `new`: `old` stays valid for what it signed up to this
    /// entry and is refused after it.
    Rotate {
        node_id: u64,
        old: KeyId,
        new: PublicKey,
    },
    /// `key` is compromised: refused for anything after this entry, and every checkpoint it
    /// signed is refused.
    Revoke { node_id: u64, key: KeyId },
}

impl KeyAction {
    pub fn node_id(&self) -> u64 {
        match self {
            KeyAction::Admit { node_id, .. }
            | KeyAction::Rotate { node_id, .. }
            | KeyAction::Revoke { node_id, .. } => *node_id,
        }
    }

    fn write(&self, w: &mut Writer) {
        match self {
            KeyAction::Admit { node_id, key } => {
                w.u8(1).u64(*node_id).raw(&key.0);
            }
            KeyAction::Rotate { node_id, old, new } => {
                w.u8(2).u64(*node_id).raw(&old.0).raw(&new.0);
            }
            KeyAction::Revoke { node_id, key } => {
                w.u8(3).u64(*node_id).raw(&key.0);
            }
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<KeyAction, DecodeError> {
        let key_id = |r: &mut Reader<'_>, what| -> Result<KeyId, DecodeError> {
            let mut id = [0u8; 8];
            id.copy_from_slice(r.take(8, what)?);
            Ok(KeyId(id))
        };
        Ok(match r.u8("key action")? {
            1 => KeyAction::Admit {
                node_id: r.u64("node id")?,
                key: PublicKey(r.hash("admitted key")?.0),
            },
            2 => KeyAction::Rotate {
                node_id: r.u64("node id")?,
                old: key_id(r, "retired key id")?,
                new: PublicKey(r.hash("new key")?.0),
            },
            3 => KeyAction::Revoke {
                node_id: r.u64("node id")?,
                key: key_id(r, "revoked key id")?,
            },
            tag => {
                return Err(DecodeError::Tag {
                    what: "key action",
                    tag,
                });
            }
        })
    }
}

/// A key change as proposed: the action and its authorisation, before it has a place in the
/// chain. Apply turns it into an [`EntryKind::KeyChange`] entry if the authorisation holds.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct KeyChangeRequest {
    pub action: KeyAction,
    pub authorizer: KeyId,
    #[serde(with = "sig_bytes")]
    pub authorization: [u8; 64],
}

impl KeyChangeRequest {
    /// Authorises `action` in the cluster named by `origin` with `key`.
    pub fn sign(origin: &str, action: KeyAction, key: &NodeKey) -> KeyChangeRequest {
        KeyChangeRequest {
            authorization: key.sign(&key_statement(origin, &action)),
            authorizer: key.key_id(),
            action,
        }
    }
}

/// The bytes a key change's authoriser signs: the action, bound to one cluster by its
/// checkpoint origin so that a statement cannot be replayed into another cluster's chain.
pub fn key_statement(origin: &str, action: &KeyAction) -> Vec<u8> {
    let mut w = Writer::with_capacity(96);
    w.raw(b"engram.key-change.v1").str(origin);
    action.write(&mut w);
    w.finish()
}

/// One link of the chain: the content every replica hashes identically.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AuditEntry {
    /// 1-based position in the chain; contiguous.
    pub index: u64,
    /// The Raft log index that produced this entry.
    pub tx: TxId,
    /// Transaction time, chosen by the leader and carried in the log entry.
    pub tx_time_ns: i64,
    /// The transaction's namespace; empty for membership entries.
    pub namespace: String,
    pub kind: EntryKind,
    pub prev_hash: Hash,
    /// The root of the state commitment after this entry: every slot's digest (`None`: an
    /// entry of format 1, from before the state commitment or not a transaction). Covered by
    /// the entry hash, so by the Merkle tree and every checkpoint.
    #[serde(default)]
    pub state_root: Option<Hash>,
}

/// The content hash of a transaction: blake3 over its datom hashes in transaction order.
pub fn tx_content_hash(datom_hashes: &[Hash]) -> Hash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"engram.tx.v1");
    for h in datom_hashes {
        hasher.update(h.as_bytes());
    }
    Hash(*hasher.finalize().as_bytes())
}

impl AuditEntry {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(160);
        w.u8(if self.state_root.is_some() {
            AUDIT_FORMAT_STATE_ROOT
        } else {
            AUDIT_FORMAT_VERSION
        })
        .u64(self.index)
        .u64(self.tx.0)
        .i64(self.tx_time_ns)
        .str(&self.namespace);
        match &self.kind {
            EntryKind::Transaction {
                content_hash,
                datoms,
                author: None,
            } => {
                w.u8(1).raw(content_hash.as_bytes()).u32(*datoms);
            }
            // A separate tag, so entries without an author keep their bytes and hashes.
            EntryKind::Transaction {
                content_hash,
                datoms,
                author: Some(a),
            } => {
                w.u8(4)
                    .raw(content_hash.as_bytes())
                    .u32(*datoms)
                    .str(&a.principal)
                    .raw(&a.key.0)
                    .str(&a.method)
                    .raw(a.request_hash.as_bytes())
                    .i64(a.time_ms)
                    .raw(&a.nonce)
                    .raw(&a.signature);
            }
            EntryKind::Membership { members } => {
                let count = u32::try_from(members.len()).expect("membership beyond u32 members");
                w.u8(2).u32(count);
                for (id, key) in members {
                    w.u64(*id).raw(&key.0);
                }
            }
            EntryKind::KeyChange {
                action,
                authorizer,
                authorization,
            } => {
                w.u8(3);
                action.write(&mut w);
                w.raw(&authorizer.0).raw(authorization);
            }
        }
        w.raw(self.prev_hash.as_bytes());
        if let Some(root) = &self.state_root {
            w.raw(root.as_bytes());
        }
        w.finish()
    }

    pub fn decode(bytes: &[u8]) -> Result<AuditEntry, DecodeError> {
        let mut r = Reader::new(bytes);
        let entry = Self::read(&mut r)?;
        r.finish()?;
        Ok(entry)
    }

    fn read(r: &mut Reader<'_>) -> Result<AuditEntry, DecodeError> {
        let version = r.u8("audit format version")?;
        if version != AUDIT_FORMAT_VERSION && version != AUDIT_FORMAT_STATE_ROOT {
            return Err(DecodeError::Version(version));
        }
        let index = r.u64("index")?;
        let tx = TxId(r.u64("tx")?);
        let tx_time_ns = r.i64("tx_time")?;
        let namespace = r.string("namespace")?;
        let kind = match r.u8("entry kind")? {
            1 => EntryKind::Transaction {
                content_hash: r.hash("content_hash")?,
                datoms: r.u32("datoms")?,
                author: None,
            },
            4 => EntryKind::Transaction {
                content_hash: r.hash("content_hash")?,
                datoms: r.u32("datoms")?,
                author: Some(Box::new(Author {
                    principal: r.string("author principal")?,
                    key: PublicKey(r.hash("author key")?.0),
                    method: r.string("author method")?,
                    request_hash: r.hash("author request hash")?,
                    time_ms: r.i64("author time")?,
                    nonce: {
                        let mut nonce = [0u8; 16];
                        nonce.copy_from_slice(r.take(16, "author nonce")?);
                        nonce
                    },
                    signature: {
                        let mut signature = [0u8; 64];
                        signature.copy_from_slice(r.take(64, "author signature")?);
                        signature
                    },
                })),
            },
            2 => {
                let count = r.u32("member count")? as usize;
                // Each member takes 40 bytes; refuse counts the input cannot hold before
                // allocating for them.
                if count > r.remaining() / 40 {
                    return Err(DecodeError::Truncated("members"));
                }
                let mut members = Vec::with_capacity(count);
                for _ in 0..count {
                    let id = r.u64("member id")?;
                    members.push((id, PublicKey(r.hash("member key")?.0)));
                }
                EntryKind::Membership { members }
            }
            3 => {
                let action = KeyAction::read(r)?;
                let mut authorizer = [0u8; 8];
                authorizer.copy_from_slice(r.take(8, "authorizer key id")?);
                let mut authorization = [0u8; 64];
                authorization.copy_from_slice(r.take(64, "authorization")?);
                EntryKind::KeyChange {
                    action,
                    authorizer: KeyId(authorizer),
                    authorization,
                }
            }
            tag => {
                return Err(DecodeError::Tag {
                    what: "entry kind",
                    tag,
                });
            }
        };
        let prev_hash = r.hash("prev_hash")?;
        let state_root = match version {
            AUDIT_FORMAT_STATE_ROOT => Some(r.hash("state root")?),
            _ => None,
        };
        Ok(AuditEntry {
            index,
            tx,
            tx_time_ns,
            namespace,
            kind,
            prev_hash,
            state_root,
        })
    }

    pub fn hash(&self) -> Hash {
        Hash::of(&self.encode())
    }
}

/// A replica's signature over an entry hash.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Attestation {
    pub key_id: KeyId,
    #[serde(with = "sig_bytes")]
    pub signature: [u8; 64],
}

mod sig_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(sig: &[u8; 64], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(sig)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 64], D::Error> {
        let bytes: Vec<u8> = Deserialize::deserialize(d)?;
        <[u8; 64]>::try_from(bytes.as_slice())
            .map_err(|_| serde::de::Error::invalid_length(bytes.len(), &"64"))
    }
}

/// An entry as a node stores it: with that node's attestation, or without one when a later
/// attestation of the same node covers it.
///
/// An attestation signs the entry's hash, and the hash covers `prev_hash`, so one signature over
/// an entry vouches for every entry before it. A node therefore signs once per apply group: the
/// group's last entry carries the attestation, the ones before it carry none. The rule a
/// verifier checks is *coverage*: every entry has an attestation at or after it, by a key valid
/// at the attested entry ([`crate::ChainVerifier::finish`] names the first entry without one).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct SignedEntry {
    pub entry: AuditEntry,
    pub attestation: Option<Attestation>,
}

/// Bytes an attestation takes after the entry: key id and signature.
const ATTESTATION_BYTES: usize = 8 + 64;

impl SignedEntry {
    /// The entry attested by `key`.
    pub fn sign(entry: AuditEntry, key: &NodeKey) -> SignedEntry {
        let mut signed = SignedEntry::unattested(entry);
        signed.attest(key);
        signed
    }

    /// The entry with no attestation of its own (a later one will cover it).
    pub fn unattested(entry: AuditEntry) -> SignedEntry {
        SignedEntry {
            entry,
            attestation: None,
        }
    }

    /// Attests the entry with `key`, replacing any attestation it had; returns the signature.
    pub fn attest(&mut self, key: &NodeKey) -> [u8; 64] {
        let signature = key.sign(self.entry.hash().as_bytes());
        self.attestation = Some(Attestation {
            key_id: key.key_id(),
            signature,
        });
        signature
    }

    /// The entry's encoding, then the attestation's key id and signature if it has one. An
    /// entry encoded before attestations became optional always has one, so old rows and
    /// exports decode unchanged.
    pub fn encode(&self) -> Vec<u8> {
        encode_attested(&self.entry.encode(), self.attestation.as_ref())
    }

    pub fn decode(bytes: &[u8]) -> Result<SignedEntry, DecodeError> {
        let (entry, attestation) = decode_attested(bytes, "entry")?;
        Ok(SignedEntry {
            entry: AuditEntry::decode(entry)?,
            attestation,
        })
    }
}

/// A signed record's stored form: the record's encoding (length-prefixed), then the
/// attestation's key id and signature if it carries one. Audit entries and access events are
/// stored this way.
pub(crate) fn encode_attested(record: &[u8], attestation: Option<&Attestation>) -> Vec<u8> {
    let mut w = Writer::with_capacity(record.len() + 4 + ATTESTATION_BYTES);
    w.bytes(record);
    if let Some(a) = attestation {
        w.raw(&a.key_id.0).raw(&a.signature);
    }
    w.finish()
}

/// Splits [`encode_attested`]'s bytes into the record's encoding (`what`) and the attestation.
pub(crate) fn decode_attested<'a>(
    bytes: &'a [u8],
    what: &'static str,
) -> Result<(&'a [u8], Option<Attestation>), DecodeError> {
    let mut r = Reader::new(bytes);
    let record = r.bytes(what)?;
    let attestation = match r.remaining() {
        0 => None,
        ATTESTATION_BYTES => {
            let mut key_id = [0u8; 8];
            key_id.copy_from_slice(r.take(8, "key id")?);
            let mut signature = [0u8; 64];
            signature.copy_from_slice(r.take(64, "signature")?);
            Some(Attestation {
                key_id: KeyId(key_id),
                signature,
            })
        }
        n if n < ATTESTATION_BYTES => return Err(DecodeError::Truncated("attestation")),
        n => return Err(DecodeError::Trailing(n - ATTESTATION_BYTES)),
    };
    r.finish()?;
    Ok((record, attestation))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn tx_entry(index: u64, prev: Hash) -> AuditEntry {
        AuditEntry {
            index,
            tx: TxId(index + 2),
            tx_time_ns: 1000 + index as i64,
            namespace: "ns".into(),
            kind: EntryKind::Transaction {
                content_hash: Hash::of(&index.to_be_bytes()),
                datoms: 2,
                author: None,
            },
            prev_hash: prev,
            state_root: None,
        }
    }

    #[test]
    fn entries_round_trip_and_refuse_corruption() {
        let key = NodeKey::from_seed([1; 32]);
        let membership = AuditEntry {
            index: 1,
            tx: TxId(1),
            tx_time_ns: 0,
            namespace: String::new(),
            kind: EntryKind::Membership {
                members: vec![(1, key.public()), (2, key.public())],
            },
            prev_hash: GENESIS_PREV_HASH,
            state_root: None,
        };
        let mut authored = tx_entry(3, Hash::of(b"y"));
        authored.kind = EntryKind::Transaction {
            content_hash: Hash::of(b"datoms"),
            datoms: 1,
            author: Some(Box::new(Author {
                principal: "alice".into(),
                key: NodeKey::from_seed([2; 32]).public(),
                method: "/engram.v1.Memory/Transact".into(),
                request_hash: Hash::of(b"request"),
                time_ms: -7,
                nonce: [5; 16],
                signature: [6; 64],
            })),
        };
        // The author is part of the hash: an entry without it is another entry.
        let mut stripped = authored.clone();
        stripped.kind = EntryKind::Transaction {
            content_hash: Hash::of(b"datoms"),
            datoms: 1,
            author: None,
        };
        assert_ne!(stripped.hash(), authored.hash());
        // A state root makes the entry format 2, bound by the hash; without one, format 1's
        // bytes are what they were.
        let mut rooted = tx_entry(4, Hash::of(b"z"));
        rooted.state_root = Some(Hash::of(b"root"));
        let mut unrooted = rooted.clone();
        unrooted.state_root = None;
        let mut other_root = rooted.clone();
        other_root.state_root = Some(Hash::of(b"another root"));
        assert_eq!(rooted.encode()[0], AUDIT_FORMAT_STATE_ROOT);
        assert_eq!(unrooted.encode()[0], AUDIT_FORMAT_VERSION);
        assert_eq!(rooted.encode().len(), unrooted.encode().len() + 32);
        assert_ne!(rooted.hash(), unrooted.hash());
        assert_ne!(rooted.hash(), other_root.hash());
        for entry in [membership, tx_entry(2, Hash::of(b"x")), authored, rooted] {
            let unattested = SignedEntry::unattested(entry.clone());
            let entry_only = unattested.encode();
            assert_eq!(SignedEntry::decode(&entry_only).unwrap(), unattested);
            let signed = SignedEntry::sign(entry, &key);
            let bytes = signed.encode();
            assert_eq!(SignedEntry::decode(&bytes).unwrap(), signed);
            // Every cut fails but the one at the end of the entry, which is the entry without
            // its attestation: a verifier then finds it uncovered unless a later one covers it.
            for cut in 0..bytes.len() {
                let decoded = SignedEntry::decode(&bytes[..cut]);
                if cut == entry_only.len() {
                    assert_eq!(decoded.unwrap(), unattested_of(&signed));
                } else {
                    assert!(decoded.is_err(), "a cut at {cut} of {} decoded", bytes.len());
                }
            }
        }
    }

    fn unattested_of(signed: &SignedEntry) -> SignedEntry {
        SignedEntry::unattested(signed.entry.clone())
    }

    #[test]
    fn a_huge_member_count_is_refused_without_allocating() {
        let mut w = Writer::new();
        w.u8(AUDIT_FORMAT_VERSION)
            .u64(1)
            .u64(1)
            .i64(0)
            .str("")
            .u8(2)
            .u32(u32::MAX);
        assert!(AuditEntry::decode(&w.finish()).is_err());
    }
}
