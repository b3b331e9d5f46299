//! The three hashes of the trie. Tags `0x02` (leaf) and `0x03` (branch) differ from the audit
//! log tree's `0x00`/`0x01`, so a node of one tree is never taken for a node of the other.

use crate::key::{Digest, Key, masked};

/// The byte hashed before a leaf's key and value.
pub const LEAF_TAG: u8 = 0x02;

/// The byte hashed before a branch's split bit, prefix and children.
pub const BRANCH_TAG: u8 = 0x03;

/// The root of the empty map.
pub fn empty_root() -> Digest {
    blake3::hash(b"engram.statetree.v1.empty").into()
}

/// `H(0x02 ‖ key ‖ value)`.
pub fn leaf_hash(key: &Key, value: &Digest) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(&[LEAF_TAG]);
    h.update(key);
    h.update(value);
    h.finalize().into()
}

/// `H(0x03 ‖ split ‖ prefix ‖ left ‖ right)`: a branch whose keys share their first `split`
/// bits, those of `any_key` (the rest of the prefix is zero), and differ at bit `split`.
/// Binding the prefix lets a proof that stops at a branch show that a key is not below it.
pub fn branch_hash(split: u8, any_key: &Key, left: &Digest, right: &Digest) -> Digest {
    let mut h = blake3::Hasher::new();
    h.update(&[BRANCH_TAG, split]);
    h.update(&masked(any_key, u16::from(split)));
    h.update(left);
    h.update(right);
    h.finalize().into()
}
