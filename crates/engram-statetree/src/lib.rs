//! The state commitment: an authenticated map from 256-bit keys to 32-byte value digests, whose
//! root commits to every pair it holds and to nothing else, with proofs that a key holds a
//! value, that it holds none, and that a list of pairs is every pair under a key prefix.
//!
//! The map is a binary Merkle trie with paths compressed: a branch sits only where keys
//! differ, so a map of `n` random keys is about `log2 n` branches deep. Its shape is a
//! function of the key set alone (`shape`), so every replica that holds the same pairs has the
//! same root whatever order it wrote them in, and a verifier handed every pair under a prefix
//! rebuilds that part of the trie and sees whether one was left out. Hashes are blake3:
//! a leaf `H(0x02 ‖ key ‖ value)`, a branch `H(0x03 ‖ split ‖ prefix ‖ left ‖ right)`, the empty
//! map a fixed constant ([`empty_root`]).
//!
//! Engram keys a slot (namespace, branch, entity, attribute) by 128 bits of its entity and 128
//! bits of its attribute, so one entity's slots form one subtree and a prefix proof over the
//! entity's 128 bits proves every attribute it holds a claim on (and that it holds no other).
//! What a value digest commits to (the slot's live claims and its history) is the caller's
//! (`docs/AUDIT.md`, "State commitment").
//!
//! [`StateTree`] keeps the map in memory as immutable nodes: a clone is a version that later
//! writes do not touch, sharing every node the versions have in common.
//!
//! Must not depend on: storage, networking, an async runtime or a clock; nothing of Engram's
//! but the hash it uses. Everything here is a pure computation.

mod error;
mod hash;
mod key;
mod proof;
mod shape;
mod tree;

pub use error::ProofError;
pub use hash::{BRANCH_TAG, LEAF_TAG, branch_hash, empty_root, leaf_hash};
pub use key::{Digest, KEY_BITS, Key, masked};
pub use proof::{End, KeyProof, PROOF_FORMAT, PrefixEnd, PrefixProof, Step};
pub use tree::StateTree;

#[cfg(test)]
mod tests;
