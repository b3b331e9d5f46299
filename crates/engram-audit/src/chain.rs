use std::collections::BTreeMap;

use engram_types::Hash;
use thiserror::Error;

use crate::batch::{self, Deferred};
use crate::{EntryKind, GENESIS_PREV_HASH, KeyAction, KeyId, PublicKey, SignedEntry, key_statement};

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
    #[error("kind: genesis lists keys {found}, but the trusted genesis keys are {expected}")]
    GenesisKeys { expected: String, found: String },
    #[error("attestation.key_id: {0} is not a key recorded in the chain")]
    UnknownSigner(KeyId),
    #[error("attestation.signature: does not verify against key {0}")]
    BadSignature(KeyId),
    #[error("attestation.key_id: key {key} was {how} at entry {at} and may not sign later entries")]
    RetiredSigner { key: KeyId, how: &'static str, at: u64 },
    #[error(
        "attestation: no attestation at or after this entry covers it (the chain ends at entry {head}, which has none)"
    )]
    Uncovered { head: u64 },
    #[error("key_change.authorizer: {0}")]
    Unauthorized(String),
    #[error("key_change.authorization: the signature of {0} over the key statement does not verify")]
    BadAuthorization(KeyId),
    #[error("hash: stored hash {stored} differs from the recomputed {computed} (the entry was altered)")]
    StoredHash { stored: Hash, computed: Hash },
    #[error("entry could not be decoded: {0}")]
    Decode(String),
}

impl ChainFault {
    /// The entry field the fault is about, as `audit verify` names it.
    pub fn field(&self) -> &'static str {
        match self {
            ChainFault::Index { .. } => "index",
            ChainFault::PrevHash { .. } => "prev_hash",
            ChainFault::TxOrder { .. } => "tx",
            ChainFault::TxTime { .. } => "tx_time",
            ChainFault::Genesis | ChainFault::GenesisKeys { .. } => "kind",
            ChainFault::UnknownSigner(_) | ChainFault::RetiredSigner { .. } => "attestation.key_id",
            ChainFault::BadSignature(_) => "attestation.signature",
            ChainFault::Uncovered { .. } => "attestation",
            ChainFault::Unauthorized(_) => "key_change.authorizer",
            ChainFault::BadAuthorization(_) => "key_change.authorization",
            ChainFault::StoredHash { .. } => "hash",
            ChainFault::Decode(_) => "encoding",
        }
    }
}

/// The first (or one of the) bad entries, by its exact chain index.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("audit entry {index}: {fault}")]
pub struct ChainError {
    pub index: u64,
    pub fault: ChainFault,
}

/// What the chain has said about one key so far. Also the state machine's key row, so apply
/// and the verifier judge keys from the same record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyRecord {
    pub key: PublicKey,
    pub node_id: u64,
    /// The entry that made it trusted (1: genesis).
    pub admitted_at: u64,
    /// The entry that rotated it out: it is valid for entries up to this one.
    pub retired_at: Option<u64>,
    /// The entry that revoked it: it is valid for entries up to this one, and none of its
    /// checkpoints is.
    pub revoked_at: Option<u64>,
}

impl KeyRecord {
    /// Whether the key may sign something at chain position `index` (an entry's attestation,
    /// or a checkpoint of that size). Admission is not checked here: a node may attest entries
    /// from before its admission (it replays history when it joins).
    pub fn valid_at(&self, index: u64) -> Result<(), ChainFault> {
        let id = self.key.key_id();
        if let Some(at) = self.revoked_at.filter(|at| index > *at) {
            return Err(ChainFault::RetiredSigner {
                key: id,
                how: "revoked",
                at,
            });
        }
        if let Some(at) = self.retired_at.filter(|at| index > *at) {
            return Err(ChainFault::RetiredSigner {
                key: id,
                how: "rotated out",
                at,
            });
        }
        Ok(())
    }

    /// Whether the key may authorise or sign at chain position `index`: admitted by an
    /// earlier entry, neither rotated out nor revoked before it.
    pub fn active_at(&self, index: u64) -> bool {
        self.admitted_at < index && self.valid_at(index).is_ok()
    }
}

/// Checks a chain entry by entry, in order, keeping O(keys) state.
///
/// Rules, in the order they are checked for each entry:
/// 1. `index` is one more than the previous entry's (1 for the first);
/// 2. `prev_hash` is the hash of the previous entry ([`GENESIS_PREV_HASH`] for the first), and
///    the first entry is a membership entry (genesis), whose keys are the trust root (and
///    equal the expected genesis keys, when the caller gives them);
/// 3. `tx` increases and `tx_time_ns` never decreases (invariant I7);
/// 4. a key change is authorised by a key active at this point (admitted by an earlier entry,
///    neither rotated out nor revoked), whose signature over [`key_statement`] verifies;
/// 5. the attestation, if the entry has one, verifies, by a key the chain admits, that was not
///    rotated out or revoked before this entry;
/// 6. coverage: every entry has an attestation at or after it (one signature over an entry
///    vouches for every entry before it through `prev_hash`, so a node signs once per apply
///    group). [`ChainVerifier::finish`] names the first entry after the last attested one.
///
/// A key may sign entries that precede its own admission: a node that joins later replays
/// history and attests it with its own key. Such attestations are held pending and checked
/// when a key change admits the key; [`ChainVerifier::finish`] fails at the first entry whose
/// signer the chain never admitted. (Pending attestations cost 104 bytes each until the
/// admission is seen.)
///
/// With [`ChainVerifier::with_deferred_signatures`], rule 5's signature check is queued
/// instead of done inline, and [`ChainVerifier::verify_deferred`] checks the queue in batches
/// on several threads: the entry-by-entry checks stay sequential, the signatures (nearly all
/// of the cost) do not have to.
#[derive(Debug, Default)]
pub struct ChainVerifier {
    next_index: u64,
    prev_hash: Option<Hash>,
    origin: Option<String>,
    expected_genesis: Option<Vec<PublicKey>>,
    last_tx: u64,
    last_tx_time_ns: i64,
    keys: BTreeMap<KeyId, KeyRecord>,
    /// Attestations by keys not yet admitted: (index, entry hash, signature), oldest first.
    pending: BTreeMap<KeyId, Vec<(u64, Hash, [u8; 64])>>,
    checked: u64,
    /// Whether attestations by known keys are queued in `deferred` rather than checked inline.
    defer: bool,
    /// Attestations awaiting [`ChainVerifier::verify_deferred`], in chain order.
    deferred: Vec<Deferred>,
    /// The first entry after the last attested one: no attestation covers it yet.
    uncovered_from: Option<u64>,
}

/// What an entry would change in the verifier, computed before anything is committed.
struct Step {
    hash: Hash,
    faults: Vec<ChainFault>,
    /// Faults found in earlier, pending attestations, by their own index.
    earlier: Vec<ChainError>,
    keys: BTreeMap<KeyId, KeyRecord>,
    /// The attestation, when its check is deferred.
    deferred: Option<Deferred>,
}

impl ChainVerifier {
    pub fn new() -> ChainVerifier {
        ChainVerifier {
            next_index: 1,
            ..ChainVerifier::default()
        }
    }

    /// A verifier that also requires the genesis entry to list exactly `keys` (in any order):
    /// the trust anchor an operator holds apart from the chain.
    pub fn with_genesis_keys(keys: Vec<PublicKey>) -> ChainVerifier {
        ChainVerifier {
            expected_genesis: Some(keys),
            ..ChainVerifier::new()
        }
    }

    /// Defers attestation signatures: `push` and `push_all` check everything but the signature of
    /// an attestation by a key the chain already knows, and queue that signature (with, if the
    /// key is no longer valid at the entry, the fault to report once the signature verifies).
    /// [`ChainVerifier::verify_deferred`] checks the queue and reports what the inline check
    /// would have, at the same indexes; [`ChainVerifier::finish`] includes what is still queued.
    ///
    /// Since a queued entry is accepted before its signature is checked, `push` no longer
    /// stops at the first fault by itself: the first fault of the chain is the lowest-indexed
    /// of `push`'s error and what `verify_deferred` returns. Attestations by keys not yet
    /// admitted are held and checked at admission as in the default mode.
    ///
    /// Batch verification is not `verify_strict`. The two agree on every signature not crafted
    /// by the holder of the signing key: honest signatures pass, altered or corrupted ones fail,
    /// and attestations by small-order (weak) keys, under which a batch would take signatures
    /// anyone can make, are checked one by one with `verify_strict`. What remains: a key holder
    /// can craft a signature with a small- or mixed-order `R` that this mode may accept and the
    /// inline mode refuses, which gives it nothing it could not have by signing honestly.
    pub fn with_deferred_signatures(self) -> ChainVerifier {
        ChainVerifier { defer: true, ..self }
    }

    /// Number of attestations waiting for [`ChainVerifier::verify_deferred`].
    pub fn deferred(&self) -> usize {
        self.deferred.len()
    }

    /// Checks every deferred attestation, split over `threads` threads (at least one), empties
    /// the queue, and returns the faults found, ordered by index: a bad signature, or, for a
    /// good one, a signer rotated out or revoked before the entry.
    pub fn verify_deferred(&mut self, threads: usize) -> Vec<ChainError> {
        let errors = batch::verify(&self.deferred, threads);
        self.deferred.clear();
        errors
    }

    /// Number of entries accepted so far.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// Hash of the last accepted entry.
    pub fn head(&self) -> Option<Hash> {
        self.prev_hash
    }

    /// Transaction time of the last accepted entry.
    pub fn head_tx_time_ns(&self) -> i64 {
        self.last_tx_time_ns
    }

    /// The cluster's checkpoint origin, known once genesis is accepted.
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    /// Every key the chain has mentioned so far, with its history.
    pub fn keys(&self) -> &BTreeMap<KeyId, KeyRecord> {
        &self.keys
    }

    /// The keys trusted after the last accepted entry: admitted, not rotated out or revoked.
    pub fn active_keys(&self) -> Vec<PublicKey> {
        let next = self.next_index;
        self.keys
            .values()
            .filter(|k| k.admitted_at < next && k.valid_at(next).is_ok())
            .map(|k| k.key)
            .collect()
    }

    /// Checks the next entry. On error the verifier state is unchanged.
    pub fn push(&mut self, signed: &SignedEntry) -> Result<Hash, ChainError> {
        let step = self.step(signed);
        if let Some(first) = step.earlier.first() {
            return Err(first.clone());
        }
        if let Some(fault) = step.faults.first() {
            // Reported at the position the entry holds in the chain, which is where the
            // damage is, whatever index the entry itself claims.
            return Err(ChainError {
                index: self.next_index,
                fault: fault.clone(),
            });
        }
        let hash = step.hash;
        self.commit(signed, step);
        Ok(hash)
    }

    /// Checks the next entry, returns every fault found, and accepts it whatever they are, so a
    /// caller listing every failure (`audit verify --all`) sees each later entry judged
    /// against its actual predecessor rather than a cascade of index errors.
    pub fn push_all(&mut self, signed: &SignedEntry) -> (Hash, Vec<ChainError>) {
        let mut step = self.step(signed);
        let mut errors = std::mem::take(&mut step.earlier);
        errors.extend(
            std::mem::take(&mut step.faults)
                .into_iter()
                .map(|fault| ChainError {
                    index: self.next_index,
                    fault,
                }),
        );
        let hash = step.hash;
        self.commit(signed, step);
        (hash, errors)
    }

    fn step(&self, signed: &SignedEntry) -> Step {
        let entry = &signed.entry;
        // The entry's position in the chain: what key validity is judged at.
        let index = self.next_index;
        let mut faults = Vec::new();
        if entry.index != index {
            faults.push(ChainFault::Index {
                expected: index,
                found: entry.index,
            });
        }
        let expected_prev = self.prev_hash.unwrap_or(GENESIS_PREV_HASH);
        if entry.prev_hash != expected_prev {
            faults.push(ChainFault::PrevHash {
                expected: expected_prev,
                found: entry.prev_hash,
            });
        }
        let genesis = self.prev_hash.is_none();
        if genesis && !matches!(entry.kind, EntryKind::Membership { .. }) {
            faults.push(ChainFault::Genesis);
        }
        if !genesis {
            if entry.tx.0 <= self.last_tx {
                faults.push(ChainFault::TxOrder {
                    previous: self.last_tx,
                    found: entry.tx.0,
                });
            }
            if entry.tx_time_ns < self.last_tx_time_ns {
                faults.push(ChainFault::TxTime {
                    previous: self.last_tx_time_ns,
                    found: entry.tx_time_ns,
                });
            }
        }
        let hash = entry.hash();
        let mut keys = self.keys.clone();
        match &entry.kind {
            EntryKind::Membership { members } if genesis => {
                if let Some(expected) = &self.expected_genesis {
                    let mut want: Vec<PublicKey> = expected.clone();
                    let mut got: Vec<PublicKey> = members.iter().map(|(_, k)| *k).collect();
                    want.sort();
                    got.sort();
                    if want != got {
                        let list = |keys: &[PublicKey]| {
                            keys.iter()
                                .map(|k| k.key_id().to_string())
                                .collect::<Vec<_>>()
                                .join(",")
                        };
                        faults.push(ChainFault::GenesisKeys {
                            expected: list(&want),
                            found: list(&got),
                        });
                    }
                }
                for (node_id, key) in members {
                    keys.insert(
                        key.key_id(),
                        KeyRecord {
                            key: *key,
                            node_id: *node_id,
                            admitted_at: index,
                            retired_at: None,
                            revoked_at: None,
                        },
                    );
                }
            }
            EntryKind::Membership { .. } | EntryKind::Transaction { .. } => {}
            EntryKind::KeyChange {
                action,
                authorizer,
                authorization,
            } => {
                let origin = self.origin.as_deref().unwrap_or_default();
                match apply_key_change(&mut keys, index, origin, action, *authorizer, authorization) {
                    Ok(()) => {}
                    Err(fault) => faults.push(fault),
                }
            }
        }
        let mut deferred = None;
        if let Some(attestation) = &signed.attestation
            && let Some(record) = keys.get(&attestation.key_id)
        {
            if self.defer {
                deferred = Some(Deferred {
                    index,
                    hash,
                    key: record.key,
                    signature: attestation.signature,
                    invalid: record.valid_at(index).err().map(Box::new),
                });
            } else if !record.key.verify(hash.as_bytes(), &attestation.signature) {
                faults.push(ChainFault::BadSignature(attestation.key_id));
            } else if let Err(fault) = record.valid_at(index) {
                faults.push(fault);
            }
        }
        // Attestations that waited for their key: check them now that it is admitted.
        let mut earlier = Vec::new();
        for (id, waiting) in &self.pending {
            if let Some(record) = keys.get(id) {
                for (at, entry_hash, signature) in waiting {
                    let fault = if !record.key.verify(entry_hash.as_bytes(), signature) {
                        Some(ChainFault::BadSignature(*id))
                    } else {
                        record.valid_at(*at).err()
                    };
                    if let Some(fault) = fault {
                        earlier.push(ChainError { index: *at, fault });
                    }
                }
            }
        }
        earlier.sort_by_key(|e| e.index);
        Step {
            hash,
            faults,
            earlier,
            keys,
            deferred,
        }
    }

    fn commit(&mut self, signed: &SignedEntry, step: Step) {
        let Step {
            hash, keys, deferred, ..
        } = step;
        let entry = &signed.entry;
        self.deferred.extend(deferred);
        if self.prev_hash.is_none() {
            self.origin = Some(crate::Checkpoint::origin_for(&hash));
        }
        self.pending.retain(|id, _| !keys.contains_key(id));
        match &signed.attestation {
            Some(attestation) => {
                if !keys.contains_key(&attestation.key_id) {
                    self.pending.entry(attestation.key_id).or_default().push((
                        self.next_index,
                        hash,
                        attestation.signature,
                    ));
                }
                // A bad attestation is reported as such at its own index; either way it ends
                // the run of entries waiting for one.
                self.uncovered_from = None;
            }
            None => {
                self.uncovered_from.get_or_insert(self.next_index);
            }
        }
        self.keys = keys;
        self.next_index += 1;
        self.prev_hash = Some(hash);
        self.last_tx = entry.tx.0.max(self.last_tx);
        self.last_tx_time_ns = entry.tx_time_ns.max(self.last_tx_time_ns);
        self.checked += 1;
    }

    /// The first entry no attestation covers yet: every entry after the last attested one.
    pub fn uncovered_from(&self) -> Option<u64> {
        self.uncovered_from
    }

    /// The chain's end as a coverage fault: the first entry after the last attested one, if
    /// the last entry has no attestation.
    pub fn uncovered(&self) -> Option<ChainError> {
        self.uncovered_from.map(|index| ChainError {
            index,
            fault: ChainFault::Uncovered {
                head: self.next_index - 1,
            },
        })
    }

    /// Ends the check: fails if some signer was never admitted by the chain, if the last
    /// entries have no attestation at or after them, or, with deferred signatures, if an
    /// attestation still queued does not verify (the lower index wins).
    pub fn finish(&self) -> Result<(), ChainError> {
        self.first_final_fault(self.uncovered())
    }

    /// Like [`ChainVerifier::finish`], but the last entries may still await the attestation
    /// that covers them: a state snapshot taken while the sender was applying a group. The
    /// receiving node attests them itself once it holds them (it would have, applying them
    /// from the log); every attestation the chain does carry is still checked.
    pub fn finish_open_tail(&self) -> Result<(), ChainError> {
        self.first_final_fault(None)
    }

    fn first_final_fault(&self, uncovered: Option<ChainError>) -> Result<(), ChainError> {
        let queued = batch::verify(&self.deferred, 1).into_iter().next();
        match queued
            .into_iter()
            .chain(self.unadmitted())
            .chain(uncovered)
            .min_by_key(|e| e.index)
        {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Every attestation whose signer the chain never admitted, one per key (its first entry).
    pub fn unadmitted(&self) -> Vec<ChainError> {
        let mut out: Vec<ChainError> = self
            .pending
            .iter()
            .filter_map(|(id, waiting)| {
                waiting.first().map(|(index, _, _)| ChainError {
                    index: *index,
                    fault: ChainFault::UnknownSigner(*id),
                })
            })
            .collect();
        out.sort_by_key(|e| e.index);
        out
    }
}

/// Checks a key change against the keys so far (`keys` must hold at least the authoriser and
/// the keys the action names, where the chain has them) and applies it to `keys`. The one rule
/// shared by the verifier and the state machine, so that what apply accepts is exactly what a
/// verifier accepts.
pub fn apply_key_change(
    keys: &mut BTreeMap<KeyId, KeyRecord>,
    index: u64,
    origin: &str,
    action: &KeyAction,
    authorizer: KeyId,
    authorization: &[u8; 64],
) -> Result<(), ChainFault> {
    let Some(auth) = keys.get(&authorizer) else {
        return Err(ChainFault::Unauthorized(format!(
            "{authorizer} is not a key the chain trusts"
        )));
    };
    if !auth.active_at(index) {
        return Err(ChainFault::Unauthorized(format!(
            "{authorizer} is not active at this entry (rotated out or revoked)"
        )));
    }
    if !auth.key.verify(&key_statement(origin, action), authorization) {
        return Err(ChainFault::BadAuthorization(authorizer));
    }
    let admit = |keys: &mut BTreeMap<KeyId, KeyRecord>, node_id: u64, key: &PublicKey| {
        if let Some(known) = keys.get(&key.key_id()) {
            return Err(ChainFault::Unauthorized(format!(
                "key {} is already known to the chain (admitted at entry {}); a key is admitted once",
                key.key_id(),
                known.admitted_at
            )));
        }
        keys.insert(
            key.key_id(),
            KeyRecord {
                key: *key,
                node_id,
                admitted_at: index,
                retired_at: None,
                revoked_at: None,
            },
        );
        Ok(())
    };
    match action {
        KeyAction::Admit { node_id, key } => admit(keys, *node_id, key),
        KeyAction::Rotate { node_id, old, new } => {
            match keys.get(old) {
                Some(record) if record.node_id == *node_id && record.active_at(index) => {}
                _ => {
                    return Err(ChainFault::Unauthorized(format!(
                        "rotation of {old}, which is not an active key of node {node_id}"
                    )));
                }
            }
            admit(keys, *node_id, new)?;
            if let Some(record) = keys.get_mut(old) {
                record.retired_at = Some(index);
            }
            Ok(())
        }
        KeyAction::Revoke { key, .. } => match keys.get_mut(key) {
            Some(record) if record.revoked_at.is_none() => {
                record.revoked_at = Some(index);
                Ok(())
            }
            Some(_) => Err(ChainFault::Unauthorized(format!("{key} is already revoked"))),
            None => Err(ChainFault::Unauthorized(format!(
                "revocation of {key}, which the chain never admitted"
            ))),
        },
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
                    author: None,
                }
            };
            let entry = AuditEntry {
                index,
                tx: TxId(index * 2),
                tx_time_ns: 100 * index as i64,
                namespace: if index == 1 { String::new() } else { "ns".into() },
                kind,
                prev_hash: prev,
                state_root: None,
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

        // A missing or reordered entry is reported at the position where the chain breaks.
        let mut dropped = good.clone();
        dropped.remove(3);
        let err = verify(&dropped).unwrap_err();
        assert_eq!(
            (err.index, err.fault),
            (
                4,
                ChainFault::Index {
                    expected: 4,
                    found: 5
                }
            )
        );

        let mut swapped = good.clone();
        swapped.swap(6, 7);
        assert_eq!(verify(&swapped).unwrap_err().index, 7);

        let mut forged = good.clone();
        let stranger = NodeKey::from_seed([4; 32]);
        forged[8] = SignedEntry::sign(forged[8].entry.clone(), &stranger);
        let err = verify(&forged).unwrap_err();
        assert_eq!(err.index, 9);
        assert!(matches!(err.fault, ChainFault::UnknownSigner(_)));
    }

    /// A chain attested once per group of `group` entries, as a node applying groups stores
    /// it: only each group's last entry (and the chain's last) carries an attestation.
    fn grouped(len: u64, group: u64, key: &NodeKey) -> Vec<SignedEntry> {
        let mut entries = chain(len, key);
        for e in entries.iter_mut() {
            let index = e.entry.index;
            if index % group != 0 && index != len {
                e.attestation = None;
            }
        }
        entries
    }

    #[test]
    fn one_attestation_covers_the_entries_before_it() {
        let key = NodeKey::from_seed([3; 32]);
        verify(&grouped(20, 7, &key)).unwrap();
        let mut v = ChainVerifier::new().with_deferred_signatures();
        for e in &grouped(20, 7, &key) {
            v.push(e).unwrap();
        }
        assert!(v.verify_deferred(2).is_empty());
        v.finish().unwrap();
    }

    #[test]
    fn an_uncovered_tail_and_a_bad_covering_attestation_are_named_at_their_index() {
        let key = NodeKey::from_seed([3; 32]);
        // The last group lost its attestation: entries 15..=20 are covered by nothing.
        let mut tail = grouped(20, 7, &key);
        tail[19].attestation = None;
        let err = verify(&tail).unwrap_err();
        assert_eq!(err.index, 15);
        assert_eq!(err.fault, ChainFault::Uncovered { head: 20 });
        assert_eq!(err.fault.field(), "attestation");
        // An unattested entry altered: the link of the entry after it breaks first (entry 11),
        // before the group's attestation at 14 is reached.
        let mut altered = grouped(20, 7, &key);
        altered[9].entry.tx_time_ns += 1;
        assert_eq!(verify(&altered).unwrap_err().index, 11);
        // The covering attestation itself forged: named at its entry.
        let mut forged = grouped(20, 7, &key);
        let sig = &mut forged[13].attestation.as_mut().unwrap().signature;
        sig[3] ^= 1;
        let err = verify(&forged).unwrap_err();
        assert_eq!(err.index, 14);
        assert!(matches!(err.fault, ChainFault::BadSignature(_)));
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
        // ...and entry 5, authorised by the founder, admits it.
        let prev = entries[3].entry.hash();
        let origin = crate::Checkpoint::origin_for(&entries[0].entry.hash());
        let action = KeyAction::Admit {
            node_id: 2,
            key: joiner.public(),
        };
        let admit = AuditEntry {
            index: 5,
            tx: TxId(20),
            tx_time_ns: 1000,
            namespace: String::new(),
            kind: EntryKind::KeyChange {
                authorization: founder.sign(&key_statement(&origin, &action)),
                action,
                authorizer: founder.key_id(),
            },
            prev_hash: prev,
            state_root: None,
        };
        entries.push(SignedEntry::sign(admit, &joiner));
        verify(&entries).unwrap();

        // A forged attestation among the replayed ones is caught at admission, by index.
        let mut forged = entries.clone();
        forged[2].attestation.as_mut().unwrap().signature[0] ^= 1;
        let err = verify(&forged).unwrap_err();
        assert_eq!(err.index, 3);
        assert!(matches!(err.fault, ChainFault::BadSignature(_)));
    }

    /// Appends an entry of `kind` to `entries`, attested by `signer`.
    fn append(entries: &mut Vec<SignedEntry>, kind: EntryKind, signer: &NodeKey) {
        let last = &entries[entries.len() - 1].entry;
        let entry = AuditEntry {
            index: last.index + 1,
            tx: TxId(last.tx.0 + 1),
            tx_time_ns: last.tx_time_ns + 1,
            namespace: String::new(),
            kind,
            prev_hash: last.hash(),
            state_root: None,
        };
        entries.push(SignedEntry::sign(entry, signer));
    }

    fn key_change(entries: &[SignedEntry], action: KeyAction, authorizer: &NodeKey) -> EntryKind {
        let origin = crate::Checkpoint::origin_for(&entries[0].entry.hash());
        EntryKind::KeyChange {
            authorization: authorizer.sign(&key_statement(&origin, &action)),
            action,
            authorizer: authorizer.key_id(),
        }
    }

    fn tx_kind() -> EntryKind {
        EntryKind::Transaction {
            content_hash: Hash::of(b"tx"),
            datoms: 1,
            author: None,
        }
    }

    #[test]
    fn a_rotated_key_signs_up_to_its_rotation_and_not_after() {
        let old = NodeKey::from_seed([3; 32]);
        let new = NodeKey::from_seed([6; 32]);
        let mut entries = chain(3, &old);
        let rotate = key_change(
            &entries,
            KeyAction::Rotate {
                node_id: 1,
                old: old.key_id(),
                new: new.public(),
            },
            &old,
        );
        append(&mut entries, rotate, &old); // entry 4: the rotation, still signed by the old key
        append(&mut entries, tx_kind(), &new); // entry 5: the new key takes over
        verify(&entries).unwrap();

        let mut stale = entries.clone();
        append(&mut stale, tx_kind(), &old); // entry 6 by the retired key
        let err = verify(&stale).unwrap_err();
        assert_eq!(err.index, 6);
        assert!(
            matches!(
                err.fault,
                ChainFault::RetiredSigner {
                    how: "rotated out",
                    at: 4,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn key_changes_need_an_active_authoriser_and_a_valid_signature() {
        let founder = NodeKey::from_seed([3; 32]);
        let stranger = NodeKey::from_seed([7; 32]);
        let joiner = NodeKey::from_seed([8; 32]);
        let entries = chain(2, &founder);
        let admit = KeyAction::Admit {
            node_id: 2,
            key: joiner.public(),
        };

        let mut by_stranger = entries.clone();
        let kind = key_change(&entries, admit.clone(), &stranger);
        append(&mut by_stranger, kind, &founder);
        let err = verify(&by_stranger).unwrap_err();
        assert_eq!(err.index, 3);
        assert!(matches!(err.fault, ChainFault::Unauthorized(_)), "{err}");

        let mut forged = entries.clone();
        let mut kind = key_change(&entries, admit.clone(), &founder);
        if let EntryKind::KeyChange { authorization, .. } = &mut kind {
            authorization[5] ^= 1;
        }
        append(&mut forged, kind, &founder);
        let err = verify(&forged).unwrap_err();
        assert_eq!(
            (err.index, err.fault),
            (3, ChainFault::BadAuthorization(founder.key_id()))
        );

        // A statement signed for another cluster does not verify here.
        let mut replayed = entries.clone();
        let other_origin = crate::Checkpoint::origin_for(&Hash::of(b"another cluster"));
        append(
            &mut replayed,
            EntryKind::KeyChange {
                authorization: founder.sign(&key_statement(&other_origin, &admit)),
                action: admit.clone(),
                authorizer: founder.key_id(),
            },
            &founder,
        );
        assert!(matches!(
            verify(&replayed).unwrap_err().fault,
            ChainFault::BadAuthorization(_)
        ));

        // A revoked key can neither sign later entries nor authorise, and is not re-admitted.
        let mut revoked = entries.clone();
        let kind = key_change(&entries, admit.clone(), &founder);
        append(&mut revoked, kind, &founder); // 3: admit the joiner
        let kind = key_change(
            &revoked,
            KeyAction::Revoke {
                node_id: 2,
                key: joiner.key_id(),
            },
            &founder,
        );
        append(&mut revoked, kind, &founder); // 4: revoke it
        verify(&revoked).unwrap();
        let mut after = revoked.clone();
        append(&mut after, tx_kind(), &joiner);
        let err = verify(&after).unwrap_err();
        assert!(
            matches!(
                err.fault,
                ChainFault::RetiredSigner {
                    how: "revoked",
                    at: 4,
                    ..
                }
            ),
            "{err}"
        );
        let mut readmit = revoked.clone();
        let kind = key_change(&revoked, admit, &founder);
        append(&mut readmit, kind, &founder);
        assert!(matches!(
            verify(&readmit).unwrap_err().fault,
            ChainFault::Unauthorized(_)
        ));
    }

    #[test]
    fn later_membership_entries_trust_no_key_by_themselves() {
        let founder = NodeKey::from_seed([3; 32]);
        let joiner = NodeKey::from_seed([8; 32]);
        let mut entries = chain(2, &founder);
        append(
            &mut entries,
            EntryKind::Membership {
                members: vec![(1, founder.public()), (2, joiner.public())],
            },
            &founder,
        );
        append(&mut entries, tx_kind(), &joiner);
        let err = verify(&entries).unwrap_err();
        assert_eq!(
            (err.index, err.fault),
            (4, ChainFault::UnknownSigner(joiner.key_id()))
        );
    }

    #[test]
    fn genesis_keys_are_checked_when_given() {
        let key = NodeKey::from_seed([3; 32]);
        let entries = chain(3, &key);
        let mut v = ChainVerifier::with_genesis_keys(vec![key.public()]);
        for e in &entries {
            v.push(e).unwrap();
        }
        let mut v = ChainVerifier::with_genesis_keys(vec![NodeKey::from_seed([1; 32]).public()]);
        let err = v.push(&entries[0]).unwrap_err();
        assert!(matches!(err.fault, ChainFault::GenesisKeys { .. }));
    }

    #[test]
    fn push_all_reports_every_fault_and_judges_each_entry_against_its_real_predecessor() {
        let key = NodeKey::from_seed([3; 32]);
        let mut entries = chain(8, &key);
        entries[2].entry.tx_time_ns += 1; // entry 3: signature breaks, and entry 4's link
        entries[6].attestation.as_mut().unwrap().signature[0] ^= 1; // entry 7: signature only
        let mut v = ChainVerifier::new();
        let mut found = Vec::new();
        for e in &entries {
            found.extend(v.push_all(e).1);
        }
        let summary: Vec<(u64, &str)> = found
            .iter()
            .map(|e| {
                (
                    e.index,
                    match e.fault {
                        ChainFault::BadSignature(_) => "signature",
                        ChainFault::PrevHash { .. } => "prev_hash",
                        _ => "other",
                    },
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![(3, "signature"), (4, "prev_hash"), (7, "signature")]
        );
        assert_eq!(v.checked(), 8);
    }

    /// What [`eventful_chain`] damages.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Damage {
        /// Entry 50's signature has a flipped bit.
        BadSignature,
        /// Entries 77 and 150 are signed by a key the chain never admits, entry 151 by another.
        Strangers,
        /// The joiner attests 100..=119 before its admission at 120; 105's signature is forged.
        ForgedPending,
        /// Key b, rotated out at 180, signs entry 190.
        Retired,
        /// ...and entry 195, with a flipped bit.
        RetiredBadSignature,
        /// Entry 250's content is altered after signing: its signature and 251's link break.
        Altered,
    }

    const ALL_DAMAGE: [Damage; 6] = [
        Damage::BadSignature,
        Damage::Strangers,
        Damage::ForgedPending,
        Damage::Retired,
        Damage::RetiredBadSignature,
        Damage::Altered,
    ];

    /// 300 entries: genesis trusting a and b, transactions signed round-robin, a late joiner
    /// replaying history and admitted at 120, b rotated to c at 180, plus the `damage`.
    fn eventful_chain(damage: &[Damage]) -> Vec<SignedEntry> {
        let [a, b, c, joiner, stranger, other] =
            [11u8, 12, 13, 14, 15, 16].map(|s| NodeKey::from_seed([s; 32]));
        let genesis = AuditEntry {
            index: 1,
            tx: TxId(1),
            tx_time_ns: 0,
            namespace: String::new(),
            kind: EntryKind::Membership {
                members: vec![(1, a.public()), (2, b.public())],
            },
            prev_hash: GENESIS_PREV_HASH,
            state_root: None,
        };
        let mut entries = vec![SignedEntry::sign(genesis, &a)];
        let has = |d| damage.contains(&d);
        while entries.len() < 300 {
            let next = entries.len() as u64 + 1;
            if next == 120 {
                let admit = KeyAction::Admit {
                    node_id: 3,
                    key: joiner.public(),
                };
                let kind = key_change(&entries, admit, &a);
                append(&mut entries, kind, &joiner);
                continue;
            }
            if next == 180 {
                let rotate = KeyAction::Rotate {
                    node_id: 2,
                    old: b.key_id(),
                    new: c.public(),
                };
                let kind = key_change(&entries, rotate, &b);
                append(&mut entries, kind, &b);
                continue;
            }
            let signer = match next {
                77 | 150 if has(Damage::Strangers) => &stranger,
                151 if has(Damage::Strangers) => &other,
                100..=119 if has(Damage::ForgedPending) => &joiner,
                190 if has(Damage::Retired) => &b,
                195 if has(Damage::RetiredBadSignature) => &b,
                n if n > 180 && n % 2 == 0 => &c,
                n if n % 2 == 0 => &b,
                _ => &a,
            };
            let kind = EntryKind::Transaction {
                content_hash: Hash::of(&next.to_be_bytes()),
                datoms: 2,
                author: None,
            };
            append(&mut entries, kind, signer);
        }
        if has(Damage::BadSignature) {
            entries[49].attestation.as_mut().unwrap().signature[10] ^= 4;
        }
        if has(Damage::ForgedPending) {
            entries[104].attestation.as_mut().unwrap().signature[3] ^= 1;
        }
        if has(Damage::RetiredBadSignature) {
            entries[194].attestation.as_mut().unwrap().signature[60] ^= 2;
        }
        if has(Damage::Altered) {
            entries[249].entry.tx_time_ns += 1;
        }
        entries
    }

    fn sorted(mut errors: Vec<ChainError>) -> Vec<ChainError> {
        errors.sort_by_key(|e| (e.index, e.fault.to_string()));
        errors
    }

    /// Every fault `push_all` finds inline, then the signers never admitted.
    fn all_inline(entries: &[SignedEntry]) -> Vec<ChainError> {
        let mut v = ChainVerifier::new();
        let mut found: Vec<ChainError> = entries.iter().flat_map(|e| v.push_all(e).1).collect();
        found.extend(v.unadmitted());
        sorted(found)
    }

    fn all_deferred(entries: &[SignedEntry], flush_every: usize, threads: usize) -> Vec<ChainError> {
        let mut v = ChainVerifier::new().with_deferred_signatures();
        let mut found = Vec::new();
        for (n, e) in entries.iter().enumerate() {
            found.extend(v.push_all(e).1);
            if (n + 1) % flush_every == 0 {
                found.extend(v.verify_deferred(threads));
            }
        }
        found.extend(v.verify_deferred(threads));
        found.extend(v.unadmitted());
        sorted(found)
    }

    /// The first fault as a deferred caller finds it: `push`'s error or the lowest deferred
    /// fault, whichever has the lower index.
    fn first_deferred(entries: &[SignedEntry], flush_every: usize, threads: usize) -> Result<(), ChainError> {
        let mut v = ChainVerifier::new().with_deferred_signatures();
        let mut first = None;
        for (n, e) in entries.iter().enumerate() {
            if let Err(error) = v.push(e) {
                first = Some(error);
                break;
            }
            if (n + 1) % flush_every == 0
                && let Some(error) = v.verify_deferred(threads).into_iter().next()
            {
                first = Some(error);
                break;
            }
        }
        match first
            .into_iter()
            .chain(v.verify_deferred(threads))
            .min_by_key(|e| e.index)
        {
            Some(error) => Err(error),
            None => v.finish(),
        }
    }

    #[test]
    fn deferred_batched_signatures_find_exactly_what_inline_checks_find() {
        let entries = eventful_chain(&ALL_DAMAGE);
        let inline = all_inline(&entries);
        let named: Vec<(u64, &str)> = inline.iter().map(|e| (e.index, e.fault.field())).collect();
        assert_eq!(
            named,
            vec![
                (50, "attestation.signature"),
                (77, "attestation.key_id"),
                (105, "attestation.signature"),
                (151, "attestation.key_id"),
                (190, "attestation.key_id"),
                (195, "attestation.signature"),
                (250, "attestation.signature"),
                (251, "prev_hash"),
            ],
            "{inline:#?}"
        );
        assert!(matches!(
            inline[4].fault,
            ChainFault::RetiredSigner {
                how: "rotated out",
                at: 180,
                ..
            }
        ));
        for (flush_every, threads) in [(1, 1), (7, 2), (64, 3), (1000, 1), (1000, 2), (1000, 4)] {
            assert_eq!(
                all_deferred(&entries, flush_every, threads),
                inline,
                "flushing every {flush_every} entries on {threads} threads"
            );
        }
        assert_eq!(all_inline(&eventful_chain(&[])), vec![]);
        assert_eq!(all_deferred(&eventful_chain(&[]), 1000, 2), vec![]);
    }

    #[test]
    fn deferred_push_stops_at_the_same_first_fault_as_inline() {
        let mut cases: Vec<Vec<Damage>> = ALL_DAMAGE.iter().map(|d| vec![*d]).collect();
        cases.push(vec![]);
        cases.push(ALL_DAMAGE.to_vec());
        cases.push(vec![Damage::Altered, Damage::Strangers]);
        for damage in cases {
            let entries = eventful_chain(&damage);
            let inline = verify(&entries);
            if damage.is_empty() {
                inline.clone().unwrap();
            } else {
                assert!(inline.is_err(), "{damage:?} goes unnoticed inline");
            }
            for (flush_every, threads) in [(1, 1), (16, 2), (1000, 2)] {
                assert_eq!(
                    first_deferred(&entries, flush_every, threads),
                    inline,
                    "{damage:?}, flushing every {flush_every} entries on {threads} threads"
                );
            }
        }
    }

    #[test]
    fn finish_checks_what_is_still_deferred() {
        let mut entries = eventful_chain(&[]);
        entries[200].attestation.as_mut().unwrap().signature[7] ^= 8;
        let mut v = ChainVerifier::new().with_deferred_signatures();
        for e in &entries {
            v.push(e).unwrap();
        }
        assert_eq!(v.deferred(), 300);
        let err = v.finish().unwrap_err();
        assert_eq!((err.index, err.fault.field()), (201, "attestation.signature"));
        assert_eq!(v.verify_deferred(2).len(), 1);
        assert_eq!(v.deferred(), 0);
        v.finish().unwrap();
    }
}
