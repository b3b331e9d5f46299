//! Proofs that a read of the current state is complete (`docs/AUDIT.md`, "Proven reads of the
//! current state"): an entity's every slot, each with its whole history, against the state root
//! an audit entry records and a checkpoint covers.
//!
//! Apply publishes the map as it stands after each written group ([`StateVersion`]); a proof
//! reads the store for the histories of the slots the map holds under an entity's prefix, up to
//! the version's last transaction, so what it lists and what the root commits to are the same
//! state even while apply moves on. The checkpoint is signed at the version's head, and the
//! entries from the last one that records a root to that head come with it: a verifier sees
//! that none after it is a transaction, so the root is the state at the checkpoint.
//!
//! Must not depend on: the server or the network (it answers with domain types; the server
//! puts them on the wire).

use std::collections::BTreeMap;

use engram_audit::{Checkpoint, EntryKind, NodeKey, SignedCheckpoint, SignedEntry};
use engram_statetree::{PrefixEnd, StateTree};
use engram_storage::ReadView;
use engram_types::resolve::SlotRead;
use engram_types::{Attribute, Cardinality, Datom, EntityId, Hash, Namespace, TxId};

use crate::proofs::{ProofReadError, inclusion, stored_entry};
use crate::{ChainHead, CoreError, commitment, reads, schema};

/// The state map as apply left it after one written group, with the chain head it matches.
#[derive(Clone)]
pub struct StateVersion {
    pub tree: StateTree,
    pub head: ChainHead,
}

/// One slot of an entity and its whole history up to the proof's version.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotHistory {
    pub attribute: Attribute,
    /// The attribute's cardinality as of the read (the version, or the earlier transaction a
    /// read is as of), stated by the node: the map does not commit to the schema (see
    /// `docs/AUDIT.md`).
    pub cardinality: Cardinality,
    /// In (tx, seq) order.
    pub datoms: Vec<Datom>,
}

impl std::fmt::Debug for StateVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateVersion")
            .field("slots", &self.tree.len())
            .field("head", &self.head.index)
            .finish()
    }
}

/// An entity's state, proven complete against a state root.
#[derive(Clone, Debug)]
pub struct EntityStateProof {
    /// Signed by this node at the version's head.
    pub checkpoint: SignedCheckpoint,
    /// The last entry that records a state root, then every later entry up to the
    /// checkpoint's last (none of them a transaction).
    pub entries: Vec<SignedEntry>,
    /// The inclusion path of the last of `entries` in the checkpoint's tree.
    pub head_path: Vec<Hash>,
    /// The map's proof of every pair under the entity's prefix (`PrefixProof::encode`).
    pub slots: Vec<u8>,
    /// One per pair, in attribute order.
    pub histories: Vec<SlotHistory>,
}

/// Entries a proof walks back from the head to find the last one that records a root: only
/// membership and key changes come between, and a run of this many is not a cluster's.
const MAX_ENTRIES_AFTER_ROOT: u64 = 64;

/// Proves entity `e` of `ns` (on main) as of `version`, signing the checkpoint with `key`.
/// The histories run to the version's last transaction whatever `as_of` is: a read as of an
/// earlier transaction is folded from them, its whole history up to then being a part of the
/// proven whole. `as_of` only sets the transaction each slot's cardinality is stated as of;
/// one after the version's is out of range.
pub fn entity_state(
    store: &dyn ReadView,
    key: &NodeKey,
    version: &StateVersion,
    ns: &Namespace,
    e: EntityId,
    as_of: Option<TxId>,
) -> Result<EntityStateProof, ProofReadError> {
    let head = &version.head;
    if head.index == 0 {
        return Err(ProofReadError::OutOfRange(
            "the chain is empty: nothing to prove".into(),
        ));
    }
    if let Some(t) = as_of
        && t > head.tx
    {
        return Err(ProofReadError::OutOfRange(format!(
            "as of tx {}: the state this node can prove is at tx {}",
            t.0, head.tx.0
        )));
    }
    let entries = rooted_entries(store, head.index)?;
    let root = entries.first().and_then(|e| e.entry.state_root);
    if root != Some(Hash(version.tree.root())) {
        return Err(CoreError::corrupt(
            format!("state version at entry {}", head.index),
            "the map's root is not the root its last transaction entry records",
        )
        .into());
    }
    let origin = reads::origin(store)?
        .ok_or_else(|| ProofReadError::OutOfRange("the chain is empty: nothing to prove".into()))?;
    let checkpoint = Checkpoint {
        origin,
        size: head.index,
        root: head.tree_root()?,
        tx_time_ns: head.tx_time_ns,
    }
    .sign(key);
    let head_path = inclusion(store, head.index, head.index)?.path;
    let prefix = commitment::entity_prefix(ns, None, e);
    let slots = version.tree.prove_prefix(&prefix, commitment::ENTITY_PREFIX_BITS);
    let histories = histories(store, version, ns, e, as_of)?;
    // What the map holds and what the store holds must be the same slots: a difference is
    // damage (or a read cut short), never an answer to sign.
    // The proof lists the subtree's pairs in key order: the slots the map holds.
    let listed: Vec<[u8; 32]> = match &slots.end {
        PrefixEnd::Subtree(pairs) => pairs.iter().map(|(k, _)| *k).collect(),
        PrefixEnd::Outside(_) => Vec::new(),
    };
    let mut read: Vec<[u8; 32]> = histories
        .iter()
        .map(|h| commitment::slot_key(ns, None, e, &h.attribute))
        .collect();
    read.sort_unstable();
    if read != listed {
        return Err(CoreError::corrupt(
            format!("entity {} of {ns}", e.0),
            format!(
                "the state map holds {} slots under it, the store's datoms make {}",
                listed.len(),
                read.len()
            ),
        )
        .into());
    }
    Ok(EntityStateProof {
        checkpoint,
        entries,
        head_path,
        slots: slots.encode(),
        histories,
    })
}

/// The entries from the last one that records a state root through `head_index`.
fn rooted_entries(store: &dyn ReadView, head_index: u64) -> Result<Vec<SignedEntry>, ProofReadError> {
    let mut out = Vec::new();
    let mut index = head_index;
    loop {
        let entry = stored_entry(store, index)?;
        let rooted = entry.entry.state_root.is_some();
        let transaction = matches!(entry.entry.kind, EntryKind::Transaction { .. });
        out.push(entry);
        if rooted {
            break;
        }
        if transaction {
            return Err(ProofReadError::Unproven(format!(
                "audit entry {index} is a transaction that records no state root (written by a \
                 build before the state commitment): the current state cannot be proven until a \
                 transaction of this build is applied"
            )));
        }
        if index == 1 || head_index - index >= MAX_ENTRIES_AFTER_ROOT {
            return Err(ProofReadError::Unproven(format!(
                "no audit entry at or before {head_index} records a state root"
            )));
        }
        index -= 1;
    }
    out.reverse();
    Ok(out)
}

/// The entity's slots on main and their datoms up to the version's last transaction.
fn histories(
    store: &dyn ReadView,
    version: &StateVersion,
    ns: &Namespace,
    e: EntityId,
    as_of: Option<TxId>,
) -> Result<Vec<SlotHistory>, ProofReadError> {
    let upto = version.head.tx;
    let datoms = reads::entity_datoms(store, ns, e)?;
    if datoms.len() >= reads::MAX_READ_DATOMS {
        return Err(ProofReadError::Unproven(format!(
            "entity {} has {} datoms or more: too many to prove in one answer",
            e.0,
            reads::MAX_READ_DATOMS
        )));
    }
    let mut by_attr: BTreeMap<Attribute, Vec<Datom>> = BTreeMap::new();
    for d in datoms.into_iter().filter(|d| d.tx <= upto) {
        by_attr.entry(d.attribute.clone()).or_default().push(d);
    }
    let mut out = Vec::with_capacity(by_attr.len());
    for (attribute, mut datoms) in by_attr {
        // Stable: a transaction's datoms keep their seq order, as the slot's digest chains them.
        datoms.sort_by_key(|d| d.tx);
        let cardinality = schema::cardinality_at(store, ns, &attribute, Some(as_of.unwrap_or(upto)))?;
        out.push(SlotHistory {
            attribute,
            cardinality,
            datoms,
        });
    }
    Ok(out)
}

/// The answer a proof's histories give under `read`: per slot the current claims and the
/// conflicts, and when the entity expired if `expired_at_ns` (now) is past its expiry. The node
/// answers with this and a client recomputes it from the same histories.
pub fn facts_of(histories: &[SlotHistory], read: &SlotRead, expired_at_ns: Option<i64>) -> reads::Facts {
    engram_types::resolve::entity_facts(
        histories.iter().map(|h| (h.datoms.as_slice(), h.cardinality)),
        read,
        expired_at_ns,
    )
}
