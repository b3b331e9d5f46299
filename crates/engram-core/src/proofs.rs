//! Merkle proofs and checkpoints served from the state: inclusion of an audit entry in a tree
//! of a given size, consistency between two sizes, and signed checkpoints.
//!
//! Proofs read the stored perfect-subtree roots (`L` rows), so each costs O(log² n) reads at
//! most. A wrong stored node cannot make a false proof pass: it yields a proof that fails
//! verification against a signed checkpoint, which is what the client checks.

use engram_audit::{Checkpoint, NodeKey, SignedCheckpoint, SignedEntry};
use engram_merkle::{Blake3, LeafSource, MerkleHasher, ProofError, consistency_proof, inclusion_proof};
use engram_storage::{ReadView, Space, prefix_end};
use engram_types::Hash;
use thiserror::Error;

use crate::{ChainHead, CoreError, keys, reads};

#[derive(Debug, Error)]
pub enum ProofReadError {
    /// The request names sizes or indexes the chain does not have.
    #[error("{0}")]
    OutOfRange(String),
    /// What was asked cannot be proven from this store (yet): the reason says why.
    #[error("{0}")]
    Unproven(String),
    #[error("Merkle proof: {0}")]
    Proof(#[from] ProofError),
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// The stored tree, as a proof source: leaves are the audit entries' hashes, and perfect
/// subtrees from [`keys::MERKLE_STORED_LEVEL`] up are read from their `L` rows; the levels
/// between are recomputed from the entries.
struct StoredTree<'a> {
    store: &'a dyn ReadView,
    size: u64,
}

impl StoredTree<'_> {
    fn node(&self, level: u32, position: u64) -> Option<[u8; 32]> {
        let bytes = self
            .store
            .get(Space::State, &keys::merkle_node(level, position))
            .ok()??;
        <[u8; 32]>::try_from(bytes.as_slice()).ok()
    }
}

impl LeafSource<Blake3> for StoredTree<'_> {
    fn leaf_count(&self) -> u64 {
        self.size
    }

    /// Leaf `index` is audit entry `index + 1`; a missing or undecodable entry is a missing
    /// leaf, which the proof reports by index.
    fn leaf_hash(&self, index: u64) -> Option<[u8; 32]> {
        let bytes = self.store.get(Space::State, &keys::audit(index + 1)).ok()??;
        let entry = SignedEntry::decode(&bytes).ok()?;
        Some(Blake3::hash_leaf(entry.entry.hash().as_bytes()))
    }

    fn cached_subtree_root(&self, start: u64, end: u64) -> Option<[u8; 32]> {
        let width = end - start;
        if !width.is_power_of_two() || !start.is_multiple_of(width) {
            return None;
        }
        let level = width.trailing_zeros();
        if level < keys::MERKLE_STORED_LEVEL {
            return None;
        }
        self.node(level, start / width)
    }
}

/// An audit entry with its inclusion proof in the tree of the first `tree_size` entries.
#[derive(Clone, Debug)]
pub struct Inclusion {
    pub entry: SignedEntry,
    pub tree_size: u64,
    /// RFC 9162 audit path, deepest sibling first.
    pub path: Vec<Hash>,
}

fn check_size(head: &ChainHead, size: u64) -> Result<(), ProofReadError> {
    if size > head.index {
        return Err(ProofReadError::OutOfRange(format!(
            "tree size {size} is beyond the chain head {}",
            head.index
        )));
    }
    Ok(())
}

/// The inclusion proof of audit entry `index` (1-based) in the tree of `tree_size` entries
/// (0: the current head).
pub fn inclusion(store: &dyn ReadView, index: u64, tree_size: u64) -> Result<Inclusion, ProofReadError> {
    let head = reads::head(store)?;
    let size = if tree_size == 0 { head.index } else { tree_size };
    check_size(&head, size)?;
    if index == 0 || index > size {
        return Err(ProofReadError::OutOfRange(format!(
            "audit entry {index} is not in a tree of {size} entries (indexes start at 1)"
        )));
    }
    let entry = stored_entry(store, index)?;
    let tree = StoredTree { store, size };
    let path = inclusion_proof::<Blake3>(&tree, index - 1, size)?;
    Ok(Inclusion {
        entry,
        tree_size: size,
        path: path.into_iter().map(Hash).collect(),
    })
}

/// Audit entry `index` (1-based) of a chain whose head is at or past it.
pub(crate) fn stored_entry(store: &dyn ReadView, index: u64) -> Result<SignedEntry, CoreError> {
    let bytes = store
        .get(Space::State, &keys::audit(index))?
        .ok_or_else(|| CoreError::corrupt(format!("audit entry {index}"), "missing below the head"))?;
    SignedEntry::decode(&bytes).map_err(|e| CoreError::corrupt(format!("audit entry {index}"), e))
}

/// The consistency proof from the tree of `old_size` entries to the tree of `new_size` (0: the
/// current head).
pub fn consistency(
    store: &dyn ReadView,
    old_size: u64,
    new_size: u64,
) -> Result<(u64, Vec<Hash>), ProofReadError> {
    let head = reads::head(store)?;
    let new_size = if new_size == 0 { head.index } else { new_size };
    check_size(&head, new_size)?;
    if old_size > new_size {
        return Err(ProofReadError::OutOfRange(format!(
            "old size {old_size} exceeds new size {new_size}"
        )));
    }
    let tree = StoredTree {
        store,
        size: new_size,
    };
    let path = consistency_proof::<Blake3>(&tree, old_size, new_size)?;
    Ok((new_size, path.into_iter().map(Hash).collect()))
}

/// The latest checkpoint this node signed by policy, if any.
pub fn latest_checkpoint(store: &dyn ReadView) -> Result<Option<SignedCheckpoint>, CoreError> {
    let rows = store.scan_rev(
        Space::State,
        &[keys::CHECKPOINT],
        prefix_end(&[keys::CHECKPOINT]).as_deref(),
        1,
    )?;
    match rows.into_iter().next() {
        Some((k, v)) => SignedCheckpoint::parse_bytes(&v)
            .map(Some)
            .map_err(|e| CoreError::corrupt(format!("checkpoint row {}", hex_key(&k)), e)),
        None => Ok(None),
    }
}

/// A checkpoint of the current head, signed now by `key`. Its content is a function of the
/// chain alone (origin, size, root, the head's transaction time), so it is the checkpoint any
/// replica at this head would sign; only the signature is this node's.
pub fn checkpoint_at_head(
    store: &dyn ReadView,
    key: &NodeKey,
) -> Result<Option<SignedCheckpoint>, CoreError> {
    let head = reads::head(store)?;
    let Some(origin) = reads::origin(store)? else {
        return Ok(None);
    };
    Ok(Some(
        Checkpoint {
            origin,
            size: head.index,
            root: head.tree_root()?,
            tx_time_ns: head.tx_time_ns,
        }
        .sign(key),
    ))
}

fn hex_key(k: &[u8]) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

/// The proof that one datom was recorded by an audit entry included in a checkpoint's tree.
#[derive(Clone, Debug)]
pub struct DatomProof {
    pub entry: SignedEntry,
    /// Every datom hash of the entry's transaction, in order: their content hash is the
    /// entry's.
    pub tx_datom_hashes: Vec<Hash>,
    /// The datom's position among them.
    pub seq: u32,
    pub inclusion_path: Vec<Hash>,
}

/// Proves `datoms` (read from this store just before) against a checkpoint of the current
/// head signed by `key`: per datom, its transaction's entry, datom hashes and inclusion proof.
pub fn read_proof(
    store: &dyn ReadView,
    key: &NodeKey,
    datoms: &[engram_types::Datom],
) -> Result<(SignedCheckpoint, Vec<DatomProof>), ProofReadError> {
    // The checkpoint is taken after the datoms were read, so it covers every one of them.
    let checkpoint = checkpoint_at_head(store, key)?
        .ok_or_else(|| ProofReadError::OutOfRange("the chain is empty: nothing to prove".into()))?;
    let size = checkpoint.checkpoint.size;
    // Datoms of one transaction share its tx-log row and inclusion proof: read each once.
    let mut per_tx: std::collections::BTreeMap<engram_types::TxId, (Vec<Hash>, Inclusion)> =
        Default::default();
    let mut out = Vec::with_capacity(datoms.len());
    for datom in datoms {
        let (hashes, proof) = match per_tx.entry(datom.tx) {
            std::collections::btree_map::Entry::Occupied(seen) => seen.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let row = reads::tx(store, datom.tx)?.ok_or_else(|| {
                    CoreError::corrupt(
                        format!("tx-log row of tx {}", datom.tx.0),
                        "missing for a stored datom",
                    )
                })?;
                let proof = inclusion(store, row.receipt.audit_index, size)?;
                slot.insert((row.receipt.datom_hashes, proof))
            }
        };
        let hash = datom.hash();
        let seq = hashes.iter().position(|h| *h == hash).ok_or_else(|| {
            CoreError::corrupt(
                format!("tx {}", datom.tx.0),
                "a stored datom is not among its transaction's datom hashes",
            )
        })?;
        out.push(DatomProof {
            entry: proof.entry.clone(),
            tx_datom_hashes: hashes.clone(),
            seq: u32::try_from(seq).unwrap_or(u32::MAX),
            inclusion_path: proof.path.clone(),
        });
    }
    Ok((checkpoint, out))
}
