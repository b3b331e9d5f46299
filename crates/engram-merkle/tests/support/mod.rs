//! Shared by the integration tests: a SHA-256 hasher (the RFC 6962 one, for the published test
//! vectors) and reference versions of the RFC 9162 definitions, written as the RFC's recursive
//! equations over leaf ranges, independent of the crate's iterative, bit-twiddling code.

// Each test file uses a different part of this module.
#![allow(dead_code)]

use std::ops::Range;

use engram_merkle::{LEAF_PREFIX, MerkleHasher, NODE_PREFIX};
use sha2::{Digest as _, Sha256 as Sha256Core};

/// SHA-256 in the RFC 6962 tree shapes. Only the tests need it, so the library has no SHA-256
/// dependency.
#[derive(Debug, Clone, Copy)]
pub struct Sha256;

impl MerkleHasher for Sha256 {
    type Digest = [u8; 32];

    const DIGEST_LEN_BYTES: usize = 32;

    fn hash_leaf(data: &[u8]) -> [u8; 32] {
        Sha256Core::new()
            .chain_update([LEAF_PREFIX])
            .chain_update(data)
            .finalize()
            .into()
    }

    fn hash_children(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
        Sha256Core::new()
            .chain_update([NODE_PREFIX])
            .chain_update(left)
            .chain_update(right)
            .finalize()
            .into()
    }

    fn empty_root() -> [u8; 32] {
        Sha256Core::digest(b"").into()
    }

    fn digest_from_slice(bytes: &[u8]) -> Option<[u8; 32]> {
        bytes.try_into().ok()
    }
}

/// Leaf hashes of `n` distinct leaves.
pub fn leaf_hashes<H: MerkleHasher>(n: u64) -> Vec<H::Digest> {
    (0..n)
        .map(|i| H::hash_leaf(format!("audit entry {i}").as_bytes()))
        .collect()
}

/// A copy of `digest` with byte `position` flipped.
pub fn flip_byte<H: MerkleHasher>(digest: &H::Digest, position: usize) -> H::Digest {
    let mut bytes = digest.as_ref().to_vec();
    bytes[position] ^= 0x5a;
    H::digest_from_slice(&bytes).expect("same length")
}

/// The largest power of two smaller than `n` (n >= 2), by doubling, as the RFC states it.
pub fn reference_split(n: u64) -> u64 {
    assert!(n >= 2);
    let mut k = 1;
    while 2 * k < n {
        k *= 2;
    }
    k
}

/// MTH(D[n]) of RFC 9162 §2.1.1, by its recursive definition.
pub fn reference_mth<H: MerkleHasher>(leaves: &[H::Digest]) -> H::Digest {
    match leaves.len() {
        0 => H::empty_root(),
        1 => leaves[0],
        n => {
            let k = reference_split(n as u64) as usize;
            H::hash_children(
                &reference_mth::<H>(&leaves[..k]),
                &reference_mth::<H>(&leaves[k..]),
            )
        }
    }
}

/// PATH(m, D[n]) of RFC 9162 §2.1.3.1, as the leaf ranges whose MTHs make up the path, for
/// the leaf `m` of the leaves `range`.
pub fn reference_path_ranges(m: u64, range: Range<u64>) -> Vec<Range<u64>> {
    let n = range.end - range.start;
    if n == 1 {
        return vec![];
    }
    let mid = range.start + reference_split(n);
    if m < mid - range.start {
        let mut path = reference_path_ranges(m, range.start..mid);
        path.push(mid..range.end);
        path
    } else {
        let mut path = reference_path_ranges(m - (mid - range.start), mid..range.end);
        path.push(range.start..mid);
        path
    }
}

/// SUBPROOF(m, D[n], b) of RFC 9162 §2.1.4.1, as leaf ranges; PROOF(m, D[n]) is
/// `reference_subproof_ranges(m, 0..n, true)`.
pub fn reference_subproof_ranges(m: u64, range: Range<u64>, b: bool) -> Vec<Range<u64>> {
    let n = range.end - range.start;
    if m == n {
        return if b { vec![] } else { vec![range] };
    }
    let mid = range.start + reference_split(n);
    let k = mid - range.start;
    if m <= k {
        let mut proof = reference_subproof_ranges(m, range.start..mid, b);
        proof.push(mid..range.end);
        proof
    } else {
        let mut proof = reference_subproof_ranges(m - k, mid..range.end, false);
        proof.push(range.start..mid);
        proof
    }
}

/// The hashes of `ranges` over `leaves`.
pub fn hash_ranges<H: MerkleHasher>(leaves: &[H::Digest], ranges: &[Range<u64>]) -> Vec<H::Digest> {
    ranges
        .iter()
        .map(|r| reference_mth::<H>(&leaves[r.start as usize..r.end as usize]))
        .collect()
}

/// The root the path leads to, undoing PATH's recursion: `None` if the path's length does not
/// fit `m` in a tree of `n`. A verifier written from the definition, not from §2.1.3.2.
pub fn reference_root_from_path<H: MerkleHasher>(
    m: u64,
    n: u64,
    leaf: &H::Digest,
    path: &[H::Digest],
) -> Option<H::Digest> {
    if m >= n {
        return None;
    }
    if n == 1 {
        return path.is_empty().then_some(*leaf);
    }
    let (last, rest) = path.split_last()?;
    let k = reference_split(n);
    if m < k {
        Some(H::hash_children(
            &reference_root_from_path::<H>(m, k, leaf, rest)?,
            last,
        ))
    } else {
        Some(H::hash_children(
            last,
            &reference_root_from_path::<H>(m - k, n - k, leaf, rest)?,
        ))
    }
}

/// The (old, new) roots a consistency proof leads to, undoing SUBPROOF's recursion, for
/// `0 < m <= n`; `old_root` stands for the subtree SUBPROOF(.., true) leaves out. `None` if the
/// proof's length does not fit.
pub fn reference_roots_from_consistency<H: MerkleHasher>(
    m: u64,
    n: u64,
    old_root: &H::Digest,
    proof: &[H::Digest],
) -> Option<(H::Digest, H::Digest)> {
    fn sub<H: MerkleHasher>(
        m: u64,
        n: u64,
        b: bool,
        old_root: &H::Digest,
        proof: &[H::Digest],
    ) -> Option<(H::Digest, H::Digest)> {
        if m == n {
            return match (b, proof) {
                (true, []) => Some((*old_root, *old_root)),
                (false, [only]) => Some((*only, *only)),
                _ => None,
            };
        }
        let (last, rest) = proof.split_last()?;
        let k = reference_split(n);
        if m <= k {
            let (old, new) = sub::<H>(m, k, b, old_root, rest)?;
            Some((old, H::hash_children(&new, last)))
        } else {
            let (old, new) = sub::<H>(m - k, n - k, false, old_root, rest)?;
            Some((H::hash_children(last, &old), H::hash_children(last, &new)))
        }
    }
    if m == 0 || m > n {
        return None;
    }
    sub::<H>(m, n, true, old_root, proof)
}

/// Whether the definition-based verifier accepts the consistency proof.
pub fn reference_consistency_ok<H: MerkleHasher>(
    m: u64,
    n: u64,
    old_root: &H::Digest,
    new_root: &H::Digest,
    proof: &[H::Digest],
) -> bool {
    reference_roots_from_consistency::<H>(m, n, old_root, proof)
        .is_some_and(|(old, new)| old == *old_root && new == *new_root)
}
