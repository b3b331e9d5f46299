//! Verified reads: what a client trusts about a cluster's audit log, and the checks that let
//! it accept an answer only with a proof.
//!
//! A [`TrustedLog`] holds the keys allowed to sign checkpoints and the last checkpoint the
//! client verified (its tree size and root). [`Client::get_verified`] and
//! [`Client::history_verified`] ask the server to prove its answer: with each datom comes its
//! transaction's audit entry, every datom hash of that transaction and the entry's inclusion
//! proof in a checkpoint the server signs at its head, plus a consistency proof from the
//! client's trusted checkpoint to that one. [`verify_read_proof`] checks all of it; only then
//! does the trusted checkpoint move forward. A server whose checkpoint is older than the
//! trusted one has rewound its history ([`ClientError::Rewound`]); one whose tree does not
//! extend the trusted tree has forked it ([`ClientError::Forked`]).

use engram_audit::{EntryKind, PublicKey, SignedCheckpoint, SignedEntry, tx_content_hash};
use engram_merkle::{Blake3, MerkleHasher, parse_proof, verify_consistency, verify_inclusion};
use engram_proto::pb;
use engram_types::{EntityId, Hash, Namespace};

use crate::client::{get_request, history_request, search_request};
use crate::pages::Follow;
use crate::{Client, ClientError, Consistency, GetOptions, HistoryTarget, SearchQuery};

/// The client's view of a cluster's log that it has verified.
#[derive(Clone, Debug)]
pub struct TrustedLog {
    keys: Vec<PublicKey>,
    checkpoint: SignedCheckpoint,
}

impl TrustedLog {
    /// Trusts `checkpoint`, which one of `keys` must have signed.
    pub fn new(checkpoint: SignedCheckpoint, keys: Vec<PublicKey>) -> Result<TrustedLog, String> {
        if checkpoint.signers(&keys).is_empty() {
            return Err("the checkpoint is signed by none of the trusted keys".into());
        }
        Ok(TrustedLog { keys, checkpoint })
    }

    /// The last verified checkpoint.
    pub fn checkpoint(&self) -> &SignedCheckpoint {
        &self.checkpoint
    }

    pub fn size(&self) -> u64 {
        self.checkpoint.checkpoint.size
    }

    pub fn keys(&self) -> &[PublicKey] {
        &self.keys
    }
}

/// Why a proof does not verify, before it is attributed to an endpoint.
#[derive(Debug)]
pub enum ProofFailure {
    Invalid(String),
    Rewound {
        trusted: u64,
        served: u64,
    },
    Forked {
        trusted: u64,
        served: u64,
        reason: String,
    },
}

impl ProofFailure {
    pub(crate) fn at(self, endpoint: &str) -> ClientError {
        let endpoint = endpoint.to_string();
        match self {
            ProofFailure::Invalid(reason) => ClientError::Proof { endpoint, reason },
            ProofFailure::Rewound { trusted, served } => ClientError::Rewound {
                endpoint,
                trusted_size: trusted,
                served_size: served,
            },
            ProofFailure::Forked {
                trusted,
                served,
                reason,
            } => ClientError::Forked {
                endpoint,
                trusted_size: trusted,
                served_size: served,
                reason,
            },
        }
    }
}

pub(crate) fn invalid(reason: impl Into<String>) -> ProofFailure {
    ProofFailure::Invalid(reason.into())
}

pub(crate) fn digests(list: &[Vec<u8>], what: &str) -> Result<Vec<[u8; 32]>, ProofFailure> {
    parse_proof::<Blake3>(list).map_err(|e| invalid(format!("{what}: {e}")))
}

/// Checks a server's checkpoint against the trusted one: signed by a trusted key, same
/// origin, and its tree extends the trusted tree (by `consistency`). Returns the new trust.
pub fn verify_checkpoint(
    trust: &TrustedLog,
    checkpoint: &pb::SignedCheckpoint,
    consistency: &[Vec<u8>],
) -> Result<TrustedLog, ProofFailure> {
    let note = SignedCheckpoint::parse(&checkpoint.note).map_err(|e| invalid(format!("checkpoint: {e}")))?;
    if note.signers(&trust.keys).is_empty() {
        return Err(invalid("checkpoint: signed by none of the trusted keys"));
    }
    let old = &trust.checkpoint.checkpoint;
    let new = &note.checkpoint;
    if new.origin != old.origin {
        return Err(invalid(format!(
            "checkpoint: origin {:?} is not the trusted log's {:?}",
            new.origin, old.origin
        )));
    }
    if new.size < old.size {
        return Err(ProofFailure::Rewound {
            trusted: old.size,
            served: new.size,
        });
    }
    let path = digests(consistency, "consistency proof")?;
    verify_consistency::<Blake3>(old.size, new.size, &old.root.0, &new.root.0, &path).map_err(|e| {
        ProofFailure::Forked {
            trusted: old.size,
            served: new.size,
            reason: e.to_string(),
        }
    })?;
    Ok(TrustedLog {
        keys: trust.keys.clone(),
        checkpoint: note,
    })
}

/// Checks a read's proof: the checkpoint against the trusted log, then that every datom was
/// recorded by an audit entry included in the checkpoint's tree. Returns the new trust.
pub fn verify_read_proof(
    trust: &TrustedLog,
    datoms: &[pb::Datom],
    proof: &pb::ReadProof,
) -> Result<TrustedLog, ProofFailure> {
    let checkpoint = proof
        .checkpoint
        .as_ref()
        .ok_or_else(|| invalid("the answer carries no checkpoint"))?;
    let next = verify_checkpoint(trust, checkpoint, &proof.consistency)?;
    let cp = &next.checkpoint.checkpoint;
    if proof.proofs.len() != datoms.len() {
        return Err(invalid(format!(
            "{} datoms but {} datom proofs",
            datoms.len(),
            proof.proofs.len()
        )));
    }
    for (i, (datom, p)) in datoms.iter().zip(&proof.proofs).enumerate() {
        let at = |reason: String| invalid(format!("datom {i}: {reason}"));
        // The hash is recomputed from what was sent: the value, or, for a datom sent without
        // it (redacted, or withheld by grants), its value's commitment and every other field.
        // Only a datom written before salts and sent without its value is taken by its hash
        // as sent: the proof shows that hash was recorded, not what its other fields say.
        if datom.redacted.is_empty() && datom.value.is_none() {
            return Err(at("it has neither a value nor a reason for its absence".into()));
        }
        let hash = engram_proto::sent_datom_hash(datom).map_err(|e| at(format!("does not decode: {e}")))?;
        let tx = engram_types::TxId(datom.tx);
        let hashes: Vec<Hash> = p
            .tx_datom_hashes
            .iter()
            .map(|h| Hash::from_slice(h).ok_or_else(|| at("a transaction datom hash is not 32 bytes".into())))
            .collect::<Result<_, _>>()?;
        if hashes.get(p.seq as usize) != Some(&hash) {
            return Err(at(format!(
                "its hash {hash} is not at position {} of its transaction",
                p.seq
            )));
        }
        let entry = p.entry.as_ref().ok_or_else(|| at("no audit entry".into()))?;
        let signed = SignedEntry::decode(&entry.signed).map_err(|e| at(format!("audit entry: {e}")))?;
        let EntryKind::Transaction {
            content_hash,
            datoms: count,
            ..
        } = signed.entry.kind
        else {
            return Err(at("its audit entry does not record a transaction".into()));
        };
        if signed.entry.tx != tx {
            return Err(at(format!(
                "its audit entry is for tx {}, the datom says tx {}",
                signed.entry.tx.0, tx.0
            )));
        }
        if tx_content_hash(&hashes) != content_hash || count as usize != hashes.len() {
            return Err(at(
                "the transaction's datom hashes do not give its entry's content hash".into(),
            ));
        }
        let index = signed.entry.index;
        if index == 0 || index > cp.size {
            return Err(at(format!(
                "audit entry {index} is outside the checkpoint of {}",
                cp.size
            )));
        }
        let path = digests(&p.inclusion_path, "inclusion proof")?;
        let leaf = Blake3::hash_leaf(signed.entry.hash().as_bytes());
        verify_inclusion::<Blake3>(&leaf, index - 1, cp.size, &path, &cp.root.0).map_err(|e| {
            at(format!(
                "audit entry {index} is not in the checkpoint's tree: {e}"
            ))
        })?;
    }
    Ok(next)
}

impl Client {
    /// Establishes trust in a cluster's log: verifies the answering node's whole chain (every
    /// link and attestation, from genesis), then takes a checkpoint of its head, which must be
    /// signed by a key the chain trusts and agree with (or extend, by a checked consistency
    /// proof) the tree of the entries just verified. Trust on first use, with nothing taken
    /// on faith beyond the genesis entry.
    pub async fn trust_chain(&self) -> Result<TrustedLog, ClientError> {
        let report = self.verify_chain(|_| {}).await?;
        let endpoint = report.endpoint.clone();
        let node = self.node_named(&endpoint).unwrap_or_else(|| self.clone());
        let (_, checkpoint) = node.checkpoint_from(true).await?;
        let note = SignedCheckpoint::parse(&checkpoint.note).map_err(|e| ClientError::Proof {
            endpoint: endpoint.clone(),
            reason: format!("checkpoint: {e}"),
        })?;
        let verified = engram_audit::Checkpoint {
            origin: report.origin.clone().unwrap_or_default(),
            size: report.head_index,
            root: report.tree_root,
            tx_time_ns: note.checkpoint.tx_time_ns,
        };
        // The verified chain's own tree, as the starting point the checkpoint must extend.
        let base = TrustedLog {
            keys: report.active_keys.clone(),
            checkpoint: SignedCheckpoint {
                checkpoint: verified,
                signatures: Vec::new(),
            },
        };
        let consistency = if note.checkpoint.size > report.head_index {
            node.consistency_proof(report.head_index, note.checkpoint.size)
                .await?
                .path
        } else {
            Vec::new()
        };
        verify_checkpoint(&base, &checkpoint, &consistency).map_err(|f| f.at(&endpoint))
    }

    /// Establishes trust from node keys the caller pins (an operator hands them out, as
    /// `engram cluster status` lists them): the answering node's checkpoint of its head must
    /// be signed by one of `keys`. Reads neither the chain nor any datom, so a principal
    /// without the `audit` grant can make proven reads; what it takes on faith is the keys,
    /// which must be pinned again after a rotation retires them.
    pub async fn trust_keys(&self, keys: &[PublicKey]) -> Result<TrustedLog, ClientError> {
        let (endpoint, checkpoint) = self.checkpoint_from(true).await?;
        let note = SignedCheckpoint::parse(&checkpoint.note).map_err(|e| ClientError::Proof {
            endpoint: endpoint.clone(),
            reason: format!("checkpoint: {e}"),
        })?;
        TrustedLog::new(note, keys.to_vec()).map_err(|reason| ClientError::Proof { endpoint, reason })
    }

    /// The log kept in `slot`, taken out for a proven read to move forward (the caller puts
    /// it back), or, on first use, established from the keys the client pins
    /// ([`ClientConfig::trust_keys`](crate::ClientConfig), [`Client::trust_keys`]) or else from
    /// the whole chain ([`Client::trust_chain`]).
    pub async fn trusted(&self, slot: &mut Option<TrustedLog>) -> Result<TrustedLog, ClientError> {
        match slot.take() {
            Some(log) => Ok(log),
            None => {
                let pinned = self.config().trust_keys;
                if pinned.is_empty() {
                    self.trust_chain().await
                } else {
                    self.trust_keys(&pinned).await
                }
            }
        }
    }

    /// [`Client::get`] with a proof: the answer is returned only if it verifies against
    /// `trust`, which then moves to the server's checkpoint.
    pub async fn get_verified(
        &self,
        trust: &mut TrustedLog,
        namespace: &Namespace,
        entity: EntityId,
        opts: GetOptions,
    ) -> Result<pb::GetResponse, ClientError> {
        let mut req = get_request(namespace, entity, opts, true);
        req.trusted_size = trust.size();
        let (endpoint, resp) = self.get_raw(req).await?;
        let proof = resp.proof.as_ref().ok_or_else(|| ClientError::Proof {
            endpoint: endpoint.clone(),
            reason: "the server sent no proof".into(),
        })?;
        *trust = verify_read_proof(trust, &resp.datoms, proof).map_err(|f| f.at(&endpoint))?;
        Ok(resp)
    }

    /// [`Client::history`] with a proof, as [`Client::get_verified`]: every page is proven
    /// and checked before the next is asked for (the answer's `proof` is the first page's).
    pub async fn history_verified(
        &self,
        trust: &mut TrustedLog,
        namespace: &Namespace,
        target: HistoryTarget,
        limit: u32,
        consistency: Consistency,
    ) -> Result<pb::HistoryResponse, ClientError> {
        let mut pages = Follow::new(limit, &[]);
        while let Some((cursor, size)) = pages.next() {
            let mut req = history_request(namespace, target.clone(), size, consistency, true);
            req.trusted_size = trust.size();
            req.cursor = cursor;
            let (endpoint, resp) = self.history_raw(req).await?;
            let proof = resp.proof.as_ref().ok_or_else(|| ClientError::Proof {
                endpoint: endpoint.clone(),
                reason: "the server sent no proof".into(),
            })?;
            *trust = verify_read_proof(trust, &resp.datoms, proof).map_err(|f| f.at(&endpoint))?;
            pages.add(resp);
        }
        Ok(pages.finish().unwrap_or_default())
    }

    /// [`Client::search`] with a proof of every hit's datom (not of the ranking), as
    /// [`Client::get_verified`].
    pub async fn search_verified(
        &self,
        trust: &mut TrustedLog,
        query: &SearchQuery,
    ) -> Result<pb::SearchResponse, ClientError> {
        let mut req = search_request(query);
        req.prove = true;
        req.trusted_size = trust.size();
        let (endpoint, resp) = self.search_raw(req).await?;
        let proof = resp.proof.as_ref().ok_or_else(|| ClientError::Proof {
            endpoint: endpoint.clone(),
            reason: "the server sent no proof".into(),
        })?;
        let datoms: Vec<pb::Datom> = resp
            .hits
            .iter()
            .map(|h| h.datom.clone().unwrap_or_default())
            .collect();
        *trust = verify_read_proof(trust, &datoms, proof).map_err(|f| f.at(&endpoint))?;
        Ok(resp)
    }
}
