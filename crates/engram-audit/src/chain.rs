use std::collections::BTreeMap;

use engram_types::Hash;
use thiserror::Error;

use crate::{EntryKind, GENESIS_PREV_HASH, KeyId, PublicKey, SignedEntry};

/// What is wrong with an entry. Each names the field that failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChainFault {
    #[error("index: expected {expected}, found {found} (an entry is missing, duplicated or reordered)")]
    Index { expected: u64, found: u64 },
    #[error("prev_hash: expected {expected}, found {found} (the previous entry was altered or removed)")]
    PrevHash { expected: Hash, found: Hash },
    #[error("tx: {found} does not follow {previous} (transaction ids must increase)")]
    TxOrder { previous: u64, found: u64 },
    #[error("tx_time: {found} ns is before {previous} ns (transaction time went backwards)")]
    TxTime { previous: i64, found: i64 },
    #[error("kind: the first entry must be the genesis membership entry")]
    Genesis,
    #[error("attestation.key_id: {0} is not a key recorded in the chain")]
    UnknownSigner(KeyId),
    #[error("attestation.signature: does not verify against key {0}")]
    BadSignature(KeyId),
    #[error("hash: stored hash {stored} differs from the recomputed {computed} (the entry was altered)")]
    StoredHash { stored: Hash, computed: Hash },
    #[error("entry could not be decoded: {0}")]
    Decode(String),
}

/// The first (or one of the) bad entries, by its exact chain index.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("audit entry {index}: {fault}")]
pub struct ChainError {
    pub index: u64,
    pub fault: ChainFault,
}

/// Checks a chain entry by entry, in order, keeping O(members) state.
///
/// Rules, in the order they are checked for each entry:
/// 1. `index` is one more than the previous entry's (1 for the first);
/// 2. `prev_hash` is the hash of the previous entry ([`GENESIS_PREV_HASH`] for the first), and
///    the first entry is a membership entry (genesis);
/// 3. `tx` increases and `tx_time_ns` never decreases (invariant I7);
/// 4. the attestation verifies, by a key the chain records in a membership entry.
///
/// A key may sign entries that precede its own admission: a node that joins later replays
/// history and attests it with its own key. Such attestations are held pending and checked
/// when a membership entry admits the key; [`ChainVerifier::finish`] fails at the first entry
/// whose signer the chain never admitted. (Pending attestations cost 104 bytes each until the
/// admission is seen.)
#[derive(Debug, Default)]
pub struct ChainVerifier {
    next_index: u64,
    prev_hash: Option<Hash>,
    last_tx: u64,
    last_tx_time_ns: i64,
    trusted: BTreeMap<KeyId, PublicKey>,
    /// Attestations by keys not yet admitted: (index, entry hash, signature), oldest first.
    pending: BTreeMap<KeyId, Vec<(u64, Hash, [u8; 64])>>,
    checked: u64,
}

impl ChainVerifier {
    pub fn new() -> ChainVerifier {
        ChainVerifier {
            next_index: 1,
            ..ChainVerifier::default()
        }
    }

    /// Number of entries accepted so far.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// Hash of the last accepted entry.
    pub fn head(&self) -> Option<Hash> {
        self.prev_hash
    }

    /// Checks the next entry. On error the verifier state is unchanged, so a caller that
    /// wants every failure can report and continue.
    pub fn push(&mut self, signed: &SignedEntry) -> Result<Hash, ChainError> {
        let entry = &signed.entry;
        let fail = |fault| {
            Err(ChainError {
                index: entry.index,
                fault,
            })
        };
        if entry.index != self.next_index {
            return fail(ChainFault::Index {
                expected: self.next_index,
                found: entry.index,
            });
        }
        let expected_prev = self.prev_hash.unwrap_or(GENESIS_PREV_HASH);
        if entry.prev_hash != expected_prev {
            return fail(ChainFault::PrevHash {
                expected: expected_prev,
                found: entry.prev_hash,
            });
        }
        if self.prev_hash.is_none() && !matches!(entry.kind, EntryKind::Membership { .. }) {
            return fail(ChainFault::Genesis);
        }
        if self.prev_hash.is_some() {
            if entry.tx.0 <= self.last_tx {
                return fail(ChainFault::TxOrder {
                    previous: self.last_tx,
                    found: entry.tx.0,
                });
            }
            if entry.tx_time_ns < self.last_tx_time_ns {
                return fail(ChainFault::TxTime {
                    previous: self.last_tx_time_ns,
                    found: entry.tx_time_ns,
                });
            }
        }
        let hash = entry.hash();
        let mut trusted = self.trusted.clone();
        if let EntryKind::Membership { members } = &entry.kind {
            for (_, key) in members {
                trusted.insert(key.key_id(), *key);
            }
        }
        let key_id = signed.attestation.key_id;
        match trusted.get(&key_id) {
            Some(key) if !key.verify(hash.as_bytes(), &signed.attestation.signature) => {
                return fail(ChainFault::BadSignature(key_id));
            }
            Some(_) => {}
            None => {}
        }
        // Attestations that waited for their key: check them now that it is admitted.
        for (id, waiting) in &self.pending {
            if let Some(key) = trusted.get(id) {
                for (index, entry_hash, signature) in waiting {
                    if !key.verify(entry_hash.as_bytes(), signature) {
                        return Err(ChainError {
                            index: *index,
                            fault: ChainFault::BadSignature(*id),
                        });
                    }
                }
            }
        }
        self.pending.retain(|id, _| !trusted.contains_key(id));
        if !trusted.contains_key(&key_id) {
            self.pending
                .entry(key_id)
                .or_default()
                .push((entry.index, hash, signed.attestation.signature));
        }
        self.trusted = trusted;
        self.next_index += 1;
        self.prev_hash = Some(hash);
        self.last_tx = entry.tx.0;
        self.last_tx_time_ns = entry.tx_time_ns;
        self.checked += 1;
        Ok(hash)
    }

    /// Ends the check: fails if some signer was never admitted by the chain.
    pub fn finish(&self) -> Result<(), ChainError> {
        let first = self
            .pending
            .iter()
            .filter_map(|(id, waiting)| waiting.first().map(|(index, _, _)| (*index, *id)))
            .min();
        match first {
            Some((index, key_id)) => Err(ChainError {
                index,
                fault: ChainFault::UnknownSigner(key_id),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use engram_types::TxId;

    use super::*;
    use crate::{AuditEntry, NodeKey};

    fn chain(len: u64, key: &NodeKey) -> Vec<SignedEntry> {
        let mut out = Vec::new();
        let mut prev = GENESIS_PREV_HASH;
        for index in 1..=len {
            let kind = if index == 1 {
                EntryKind::Membership {
                    members: vec![(1, key.public())],
                }
            } else {
                EntryKind::Transaction {
                    content_hash: Hash::of(&index.to_be_bytes()),
                    datoms: 1,
                }
            };
            let entry = AuditEntry {
                index,
                tx: TxId(index * 2),
                tx_time_ns: 100 * index as i64,
                namespace: if index == 1 { String::new() } else { "ns".into() },
                kind,
                prev_hash: prev,
            };
            prev = entry.hash();
            out.push(SignedEntry::sign(entry, key));
        }
        out
    }

    fn verify(entries: &[SignedEntry]) -> Result<(), ChainError> {
        let mut v = ChainVerifier::new();
        for e in entries {
            v.push(e)?;
        }
        v.finish()
    }

    #[test]
    fn an_honest_chain_verifies() {
        let key = NodeKey::from_seed([3; 32]);
        verify(&chain(20, &key)).unwrap();
    }

    #[test]
    fn each_kind_of_tampering_names_its_index() {
        let key = NodeKey::from_seed([3; 32]);
        let good = chain(10, &key);

        let mut altered = good.clone();
        altered[4].entry.tx_time_ns += 1; // entry 5 altered: its signature breaks...
        let err = verify(&altered).unwrap_err();
        assert_eq!(err.index, 5);
        assert!(matches!(err.fault, ChainFault::BadSignature(_)));

        let mut resigned = good.clone();
        resigned[4].entry.tx_time_ns += 1; // ...and re-signing it breaks entry 6's link.
        resigned[4] = SignedEntry::sign(resigned[4].entry.clone(), &key);
        let err = verify(&resigned).unwrap_err();
        assert_eq!(err.index, 6);
        assert!(matches!(err.fault, ChainFault::PrevHash { .. }));

        let mut dropped = good.clone();
        dropped.remove(3);
        let err = verify(&dropped).unwrap_err();
        assert_eq!(
            (
                err.index,
                matches!(
                    err.fault,
                    ChainFault::Index {
                        expected: 4,
                        found: 5
                    }
                )
            ),
            (5, true)
        );

        let mut swapped = good.clone();
        swapped.swap(6, 7);
        assert_eq!(verify(&swapped).unwrap_err().index, 8);

        let mut forged = good.clone();
        let stranger = NodeKey::from_seed([4; 32]);
        forged[8] = SignedEntry::sign(forged[8].entry.clone(), &stranger);
        let err = verify(&forged).unwrap_err();
        assert_eq!(err.index, 9);
        assert!(matches!(err.fault, ChainFault::UnknownSigner(_)));
    }

    #[test]
    fn time_must_not_go_backwards() {
        let key = NodeKey::from_seed([3; 32]);
        let mut entries = chain(3, &key);
        entries[2].entry.tx_time_ns = 0;
        entries[2] = SignedEntry::sign(entries[2].entry.clone(), &key);
        let err = verify(&entries).unwrap_err();
        assert_eq!(err.index, 3);
        assert!(matches!(err.fault, ChainFault::TxTime { .. }));
    }

    #[test]
    fn a_late_joiner_may_attest_history_once_admitted() {
        let founder = NodeKey::from_seed([3; 32]);
        let joiner = NodeKey::from_seed([5; 32]);
        let mut entries = chain(4, &founder);
        // The joiner replays entries 2..=4 and attests them itself...
        for e in entries.iter_mut().skip(1) {
            *e = SignedEntry::sign(e.entry.clone(), &joiner);
        }
        assert!(verify(&entries).is_err(), "not admitted yet");
        // ...and entry 5 admits it.
        let prev = entries[3].entry.hash();
        let admit = AuditEntry {
            index: 5,
            tx: TxId(20),
            tx_time_ns: 1000,
            namespace: String::new(),
            kind: EntryKind::Membership {
                members: vec![(1, founder.public()), (2, joiner.public())],
            },
            prev_hash: prev,
        };
        entries.push(SignedEntry::sign(admit, &joiner));
        verify(&entries).unwrap();

        // A forged attestation among the replayed ones is caught at admission, by index.
        let mut forged = entries.clone();
        forged[2].attestation.signature[0] ^= 1;
        let err = verify(&forged).unwrap_err();
        assert_eq!(err.index, 3);
        assert!(matches!(err.fault, ChainFault::BadSignature(_)));
    }
}
