//! Reads proven complete and current (`docs/AUDIT.md`, "Proven reads of the current state"):
//! [`Client::get_complete`] accepts an entity's answer only if the node proved that it lists
//! every attribute the entity has, each with its whole history, and the client, folding those
//! histories itself, arrives at the same answer.
//!
//! What is checked, in order ([`verify_state_proof`]): the checkpoint against the trusted log
//! (as every proven read); the audit entries from the last one that records a state root to the
//! checkpoint's head, linked and included, none after the first a transaction; the state map's
//! proof of every slot under the entity's prefix against that root; each slot's history chained
//! into its digest; and the answer against the histories resolved under the read's options.

use engram_audit::{EntryKind, SignedEntry};
use engram_merkle::{Blake3, MerkleHasher, verify_inclusion};
use engram_proto::pb;
use engram_statetree::PrefixProof;
use engram_types::resolve::{SlotRead, entity_facts, expiry};
use engram_types::slot::{ENTITY_PREFIX_BITS, entity_prefix, slot_key, step};
use engram_types::{Attribute, Cardinality, Datom, EntityId, Hash, Namespace, TxId};

use crate::client::get_request;
use crate::trust::{ProofFailure, digests, invalid, verify_checkpoint};
use crate::{Client, ClientError, GetOptions, SearchQuery, TrustedLog};

/// A `Get` proven complete and current, and what the proof covered.
#[derive(Clone, Debug)]
pub struct CompleteGet {
    pub response: pb::GetResponse,
    /// The entity's slots (attributes), each proven with its whole history; 0 proves the
    /// entity has no datoms at all.
    pub slots: usize,
    /// The datoms in those histories.
    pub history_datoms: usize,
    /// The transaction whose state root the histories are proven against (the entry that
    /// records it).
    pub state_tx: u64,
    /// The transaction the answer is folded as of, when the read named one (at most
    /// `state_tx`): the proven histories up to it are the whole history then.
    pub as_of_tx: Option<u64>,
    /// Attributes whose histories are proven whole but whose live claims are taken as the node
    /// sent them (each sent claim is still one of the slot's proven datoms): some of their
    /// datoms came without a value (withheld from the caller by its grants, or redacted), and
    /// a fold compares values.
    pub unfolded: Vec<String>,
}

/// An entity's history (or one attribute's) proven whole up to a checkpoint.
#[derive(Clone, Debug)]
pub struct CompleteHistory {
    /// In transaction order; within a transaction, by attribute.
    pub datoms: Vec<pb::Datom>,
    /// The slots the datoms are of (0: the entity, or the attribute of it, was never written,
    /// which is proven too).
    pub slots: usize,
    /// The transaction whose state root the history is proven against.
    pub state_tx: u64,
    /// The transaction the history runs to, when the read named one (else `state_tx`).
    pub as_of_tx: Option<u64>,
}

/// Whether a search hit's fact is still held, by its slot's proven history.
#[derive(Clone, Debug, PartialEq)]
pub enum Currency {
    /// The hit's datom is one of its slot's live claims.
    Current,
    /// It is not: a later datom replaced or retracted it. `by`: the slot's live claims now
    /// (empty when the value was retracted and nothing replaced it).
    Superseded { by: Vec<pb::Datom> },
    /// The slot's values are withheld from this caller or redacted: its history is proven
    /// whole, but liveness is a fold over values.
    Unknown,
    /// The datom is not in its slot's history on main (a branch's datom).
    NotOnMain,
}

/// Checks a `Get` answer's state proof for entity `entity` of `ns`, read under `read`; returns
/// the new trust and what the proof covered.
pub fn verify_state_proof(
    trust: &TrustedLog,
    ns: &Namespace,
    entity: EntityId,
    read: &SlotRead,
    resp: &pb::GetResponse,
) -> Result<(TrustedLog, CompleteGet), ProofFailure> {
    let proof = resp
        .state_proof
        .as_ref()
        .ok_or_else(|| invalid("the answer carries no state proof"))?;
    let checkpoint = proof
        .checkpoint
        .as_ref()
        .ok_or_else(|| invalid("the state proof carries no checkpoint"))?;
    let next = verify_checkpoint(trust, checkpoint, &proof.consistency)?;
    let cp = &next.checkpoint().checkpoint;

    // The root, and that it is the state at the checkpoint.
    let entries: Vec<SignedEntry> = proof
        .entries
        .iter()
        .map(|e| {
            SignedEntry::decode(&e.signed).map_err(|err| invalid(format!("audit entry {}: {err}", e.index)))
        })
        .collect::<Result<_, _>>()?;
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Err(invalid("the state proof carries no audit entry"));
    };
    if last.entry.index != cp.size || cp.size == 0 {
        return Err(invalid(format!(
            "the state proof's entries end at {}, the checkpoint's head is {}",
            last.entry.index, cp.size
        )));
    }
    let path = digests(&proof.head_path, "the head entry's inclusion proof")?;
    let leaf = Blake3::hash_leaf(last.entry.hash().as_bytes());
    verify_inclusion::<Blake3>(&leaf, cp.size - 1, cp.size, &path, &cp.root.0).map_err(|e| {
        invalid(format!(
            "audit entry {} is not the checkpoint's head: {e}",
            last.entry.index
        ))
    })?;
    for pair in entries.windows(2) {
        let (before, after) = (&pair[0].entry, &pair[1].entry);
        if after.index != before.index + 1 || after.prev_hash != before.hash() {
            return Err(invalid(format!(
                "audit entry {} does not follow entry {}",
                after.index, before.index
            )));
        }
        if matches!(after.kind, EntryKind::Transaction { .. }) {
            return Err(invalid(format!(
                "audit entry {} is a transaction after the entry whose state root the answer uses \
                 ({}): the answer is not of the checkpoint's state",
                after.index, before.index
            )));
        }
    }
    let Some(root) = first.entry.state_root else {
        return Err(invalid(format!(
            "audit entry {} records no state root",
            first.entry.index
        )));
    };
    if let Some(t) = read.as_of
        && t > first.entry.tx
    {
        return Err(invalid(format!(
            "the read is as of tx {}, after the state the proof covers (tx {}): histories up to \
             then are not proven whole",
            t.0, first.entry.tx.0
        )));
    }
    if resp.as_of_tx != read.as_of.map_or(0, |t| t.0) {
        return Err(invalid(format!(
            "the answer is as of tx {}, the read as of {}",
            resp.as_of_tx,
            read.as_of.map_or(0, |t| t.0)
        )));
    }

    // Every slot under the entity's prefix, and each one's history.
    let slots = PrefixProof::decode(&proof.slots)
        .and_then(|p| p.verify(&root.0, &entity_prefix(ns, None, entity), ENTITY_PREFIX_BITS))
        .map_err(|e| invalid(format!("the entity's slots: {e}")))?;
    if proof.histories.len() != slots.len() {
        return Err(invalid(format!(
            "the state map holds {} slots of entity {}, the answer lists {} histories",
            slots.len(),
            entity.0,
            proof.histories.len()
        )));
    }
    let mut listed = vec![false; slots.len()];
    let mut folded: Vec<(Vec<Datom>, Cardinality)> = Vec::new();
    let mut unfolded: Vec<(Attribute, Vec<Hash>)> = Vec::new();
    let mut history_datoms = 0;
    for h in &proof.histories {
        let attribute = Attribute::new(&h.attribute)
            .map_err(|e| invalid(format!("slot {:?}: not an attribute: {e}", h.attribute)))?;
        let at = |reason: String| invalid(format!("slot {attribute}: {reason}"));
        let key = slot_key(ns, None, entity, &attribute);
        let Some(i) = slots.iter().position(|(k, _)| *k == key) else {
            return Err(at("the state map holds no such slot of the entity".into()));
        };
        if std::mem::replace(&mut listed[i], true) {
            return Err(at("listed twice".into()));
        }
        let (hashes, chained) = chain(ns, entity, &attribute, &h.datoms).map_err(at)?;
        if chained != slots[i].1 {
            return Err(at(
                "its history does not chain into the digest the state map holds (a datom left \
                 out, added, altered or reordered)"
                    .into(),
            ));
        }
        history_datoms += h.datoms.len();
        let cardinality =
            engram_proto::cardinality("cardinality", h.cardinality).map_err(|e| at(e.to_string()))?;
        if h.datoms.iter().all(|d| d.value.is_some()) {
            let datoms = h
                .datoms
                .iter()
                .map(|d| {
                    engram_proto::datom(d.clone()).map_err(|e| at(format!("a datom does not decode: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            folded.push((datoms, cardinality));
        } else {
            unfolded.push((attribute, hashes));
        }
    }

    // The answer against the histories.
    let expected = entity_facts(folded.iter().map(|(d, c)| (d.as_slice(), *c)), read, None);
    let sent_hashes = |list: &[pb::Datom], what: &str| -> Result<Vec<(String, Hash)>, ProofFailure> {
        list.iter()
            .map(|d| {
                engram_proto::sent_datom_hash(d)
                    .map(|h| (d.attribute.clone(), h))
                    .map_err(|e| invalid(format!("{what}: a datom does not decode: {e}")))
            })
            .collect()
    };
    let is_unfolded = |attr: &str| unfolded.iter().position(|(a, _)| a.as_str() == attr);
    let check = |sent: &[pb::Datom], want: &[Datom], what: &str| -> Result<(), ProofFailure> {
        let mut got: Vec<Hash> = Vec::new();
        for (attr, hash) in sent_hashes(sent, what)? {
            match is_unfolded(&attr) {
                Some(i) if unfolded[i].1.contains(&hash) => {}
                Some(_) => {
                    return Err(invalid(format!(
                        "{what}: a datom of {attr} is not one of its slot's proven datoms"
                    )));
                }
                None => got.push(hash),
            }
        }
        let mut want: Vec<Hash> = want.iter().map(Datom::hash).collect();
        got.sort_unstable();
        want.sort_unstable();
        if got != want {
            let missing = want.iter().filter(|h| !got.contains(h)).count();
            let extra = got.iter().filter(|h| !want.contains(h)).count();
            return Err(invalid(format!(
                "{what}: the proven histories give {} datoms, the answer has {} ({missing} left \
                 out, {extra} not current)",
                want.len(),
                got.len()
            )));
        }
        Ok(())
    };
    match resp.expired_at_ns {
        Some(at_ns) => {
            if !resp.datoms.is_empty() || !resp.conflicts.is_empty() {
                return Err(invalid("the answer says the entity expired but carries datoms"));
            }
            let proven = expiry(expected.current.iter().chain(&expected.conflicts));
            if proven != Some(at_ns) {
                return Err(invalid(format!(
                    "the answer says the entity expired at {at_ns}; its proven claims say {proven:?}"
                )));
            }
        }
        None => {
            check(&resp.datoms, &expected.current, "current datoms")?;
            check(&resp.conflicts, &expected.conflicts, "conflicts")?;
        }
    }
    Ok((
        next,
        CompleteGet {
            response: resp.clone(),
            slots: slots.len(),
            history_datoms,
            state_tx: first.entry.tx.0,
            as_of_tx: read.as_of.map(|t| t.0),
            unfolded: unfolded
                .into_iter()
                .map(|(a, _)| a.as_str().to_string())
                .collect(),
        },
    ))
}

/// Chains a slot's history, as sent, into its digest; returns each datom's hash too. Every
/// datom must be of the slot, in (tx, seq) order.
fn chain(
    ns: &Namespace,
    entity: EntityId,
    attribute: &Attribute,
    datoms: &[pb::Datom],
) -> Result<(Vec<Hash>, [u8; 32]), String> {
    if datoms.is_empty() {
        return Err("no datoms: a slot the map holds was written at least once".into());
    }
    let mut hashes = Vec::with_capacity(datoms.len());
    let mut digest: Option<[u8; 32]> = None;
    let mut group: Vec<Hash> = Vec::new();
    let mut group_tx: Option<u64> = None;
    for (i, d) in datoms.iter().enumerate() {
        if d.namespace != ns.as_str()
            || d.entity != entity.0
            || d.attribute != attribute.as_str()
            || !d.branch.is_empty()
        {
            return Err(format!("datom {i} is not of this slot"));
        }
        let hash = engram_proto::sent_datom_hash(d).map_err(|e| format!("datom {i} does not decode: {e}"))?;
        hashes.push(hash);
        match group_tx {
            Some(tx) if tx == d.tx => {}
            Some(tx) if tx > d.tx => return Err(format!("datom {i} (tx {}) comes after tx {tx}", d.tx)),
            Some(tx) => {
                digest = Some(step(digest.as_ref(), TxId(tx), &group));
                group.clear();
            }
            None => {}
        }
        group_tx = Some(d.tx);
        group.push(hash);
    }
    if let Some(tx) = group_tx {
        digest = Some(step(digest.as_ref(), TxId(tx), &group));
    }
    Ok((hashes, digest.unwrap_or_default()))
}

/// Where `hit` stands in the slot histories a complete `Get` of its entity proved. Every datom
/// here was decoded and hashed when its proof was checked; one that would not decode again
/// leaves the hit `Unknown` rather than guessed.
fn currency(resp: &pb::GetResponse, hit: &pb::Datom) -> Currency {
    let hash_of = |d: &pb::Datom| engram_proto::sent_datom_hash(d).ok();
    let histories = resp
        .state_proof
        .as_ref()
        .map(|p| p.histories.as_slice())
        .unwrap_or_default();
    let (Some(hash), Some(slot)) = (
        hash_of(hit),
        histories.iter().find(|h| h.attribute == hit.attribute),
    ) else {
        return Currency::NotOnMain;
    };
    let hashes: Vec<Option<Hash>> = slot.datoms.iter().map(hash_of).collect();
    if !hashes.contains(&Some(hash)) {
        return Currency::NotOnMain;
    }
    let Ok(datoms) = slot
        .datoms
        .iter()
        .filter(|d| d.value.is_some())
        .map(|d| engram_proto::datom(d.clone()))
        .collect::<Result<Vec<_>, _>>()
    else {
        return Currency::Unknown;
    };
    if datoms.len() != slot.datoms.len() {
        return Currency::Unknown;
    }
    let Ok(cardinality) = engram_proto::cardinality("cardinality", slot.cardinality) else {
        return Currency::Unknown;
    };
    let live: Vec<Hash> = engram_types::resolve::claims(&datoms, cardinality)
        .into_iter()
        .map(Datom::hash)
        .collect();
    if live.contains(&hash) {
        return Currency::Current;
    }
    let by = slot
        .datoms
        .iter()
        .zip(&hashes)
        .filter(|(_, h)| h.is_some_and(|h| live.contains(&h)))
        .map(|(d, _)| d.clone())
        .collect();
    Currency::Superseded { by }
}

impl Client {
    /// [`Client::search_verified`], and for each hit whether its fact is still held on main:
    /// its entity read with [`Client::get_complete`] (one read per entity among the hits, each
    /// proven against the state root), and the hit's datom looked for among its slot's live
    /// claims, folded from the slot's proven history. A superseded hit comes with the claims
    /// that replaced it. Currency is judged at main's current state, whatever `query` reads.
    pub async fn search_current(
        &self,
        trust: &mut TrustedLog,
        query: &SearchQuery,
    ) -> Result<(pb::SearchResponse, Vec<Currency>), ClientError> {
        let resp = self.search_verified(trust, query).await?;
        let mut proven: std::collections::BTreeMap<u64, pb::GetResponse> = Default::default();
        let mut out = Vec::with_capacity(resp.hits.len());
        for hit in &resp.hits {
            let datom = hit.datom.clone().unwrap_or_default();
            let state = match proven.entry(datom.entity) {
                std::collections::btree_map::Entry::Occupied(seen) => seen.into_mut(),
                std::collections::btree_map::Entry::Vacant(slot) => {
                    let opts = GetOptions {
                        include_expired: true,
                        ..GetOptions::default()
                    };
                    let got = self
                        .get_complete(trust, &query.namespace, EntityId(datom.entity), opts)
                        .await?;
                    slot.insert(got.response)
                }
            };
            out.push(currency(state, &datom));
        }
        Ok((resp, out))
    }

    /// The history of `entity` (of its `attribute` only, if given) proven whole: every datom
    /// ever written to it, up to the state a checkpoint that extends `trust` covers. Read from
    /// the proof of a [`Client::get_complete`] (every slot of the entity with its history, each
    /// chained into the digest the state map holds), so it is checked the same way, and an
    /// attribute the entity never had is proven to have no history.
    pub async fn history_complete(
        &self,
        trust: &mut TrustedLog,
        namespace: &Namespace,
        entity: EntityId,
        attribute: Option<&Attribute>,
        as_of: Option<TxId>,
    ) -> Result<CompleteHistory, ClientError> {
        let opts = GetOptions {
            include_expired: true,
            as_of_tx: as_of.map(|t| t.0),
            ..GetOptions::default()
        };
        let proven = self.get_complete(trust, namespace, entity, opts).await?;
        let histories: Vec<pb::SlotHistory> = proven
            .response
            .state_proof
            .map(|p| p.histories)
            .unwrap_or_default()
            .into_iter()
            .filter(|h| attribute.is_none_or(|a| h.attribute == a.as_str()))
            .collect();
        // As of a transaction: the proven whole history's datoms up to it (a slot first
        // written later was not a slot then).
        let upto = as_of.map_or(u64::MAX, |t| t.0);
        let histories: Vec<Vec<pb::Datom>> = histories
            .into_iter()
            .map(|h| h.datoms.into_iter().filter(|d| d.tx <= upto).collect::<Vec<_>>())
            .filter(|datoms| !datoms.is_empty())
            .collect();
        let slots = histories.len();
        let mut datoms: Vec<pb::Datom> = histories.into_iter().flatten().collect();
        // Stable: each slot's datoms are in (tx, seq) order already.
        datoms.sort_by_key(|d| d.tx);
        Ok(CompleteHistory {
            datoms,
            slots,
            state_tx: proven.state_tx,
            as_of_tx: proven.as_of_tx,
        })
    }

    /// [`Client::get`] proven complete and current: the node proves, against the state root
    /// of a checkpoint that extends `trust`, every attribute the entity has and each one's
    /// whole history; this client folds those histories under `opts` and accepts the answer
    /// only if it is what they give. An entity with no datoms is answered empty, its absence
    /// proven. With `opts.as_of_tx`, the same whole histories folded as of that transaction:
    /// the answer then, proven complete. On main: `opts` may not name a branch or an instant.
    pub async fn get_complete(
        &self,
        trust: &mut TrustedLog,
        namespace: &Namespace,
        entity: EntityId,
        opts: GetOptions,
    ) -> Result<CompleteGet, ClientError> {
        let read = SlotRead {
            as_of: opts.as_of_tx.map(TxId),
            valid_at_ns: opts.valid_at_ns,
            rule: match opts.rule {
                pb::Resolution::Verified => engram_types::resolve::Resolution::Verified,
                pb::Resolution::Latest | pb::Resolution::Unspecified => {
                    engram_types::resolve::Resolution::Latest
                }
            },
            verified_only: opts.verified_only,
        };
        let mut req = get_request(namespace, entity, opts, true);
        req.complete = true;
        req.trusted_size = trust.size();
        let (endpoint, resp) = self.get_raw(req).await?;
        let (next, proven) =
            verify_state_proof(trust, namespace, entity, &read, &resp).map_err(|f| f.at(&endpoint))?;
        *trust = next;
        Ok(proven)
    }
}
