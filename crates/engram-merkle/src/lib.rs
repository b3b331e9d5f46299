//! The append-only Merkle tree over Engram's audit-entry hashes, with inclusion and consistency
//! proofs.
//!
//! The tree has the shape RFC 9162 §2.1 (identical to RFC 6962 §2.1) defines, over any hash
//! function `H` (see [`MerkleHasher`]):
//!
//! * the hash of an empty tree is `H()`, the hash of the empty string;
//! * a leaf hash is `H(0x00 || leaf)`;
//! * an interior node hash is `H(0x01 || left || right)`;
//! * a tree of `n > 1` leaves is split at `k`, the largest power of two smaller than `n`: its
//!   hash is the node hash of the tree of the first `k` leaves and the tree of the other
//!   `n - k`.
//!
//! The distinct leaf and node prefixes keep a leaf from ever being passed off as an interior
//! node (second-preimage resistance of the tree).
//!
//! What is here:
//!
//! * [`CompactTree`]: the tree's root, maintained incrementally in O(log n) memory (only the
//!   roots of its perfect subtrees, the "frontier"), with O(1) amortised appends;
//! * [`inclusion_proof`], [`consistency_proof`] and [`subtree_root`]: proofs computed from a
//!   [`LeafSource`], anything that can give the leaf hash at an index (a slice of digests is
//!   one);
//! * [`verify_inclusion`] and [`verify_consistency`]: verifiers that need nothing but the proof,
//!   the sizes and the roots, implementing RFC 9162 §2.1.3.2 and §2.1.4.2 in O(log n). They
//!   never panic and fail with a [`ProofError`] that names what is wrong.
//!
//! What a proof does not do: an inclusion proof binds a leaf hash to a root, and a consistency
//! proof binds two roots, but the tree sizes are only as trustworthy as whatever vouched for
//! them together with the roots (in Engram, a signed tree head). A verifier must take a size
//! and its root from the same signed statement, never a size from the prover.
//!
//! Must not depend on: storage, networking, an async runtime or a clock. Everything here is a
//! pure computation over the hashes given to it.

mod compact;
mod error;
mod hasher;
mod prove;
mod verify;

pub use compact::{CompactTree, FrontierError};
pub use error::ProofError;
pub use hasher::{Blake3, LEAF_PREFIX, MerkleHasher, NODE_PREFIX};
pub use prove::{LeafSource, consistency_proof, inclusion_proof, subtree_root};
pub use verify::{
    ConsistencyRole, ConsistencyStep, InclusionStep, consistency_proof_len, inclusion_proof_len, parse_proof,
    root_from_inclusion_proof, root_from_inclusion_proof_visiting, verify_consistency,
    verify_consistency_visiting, verify_inclusion,
};

/// `k` of RFC 9162 §2.1.1: the largest power of two strictly smaller than `n`.
///
/// Only meaningful for `n >= 2`; callers never pass less.
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    // For n >= 2, n - 1 >= 1, so the highest set bit of n - 1 is the answer: it is a power of
    // two, it is <= n - 1 < n, and doubling it exceeds n - 1, i.e. reaches at least n.
    1 << (63 - (n - 1).leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::split_point;

    #[test]
    fn split_point_is_largest_power_of_two_below() {
        for n in 2u64..=1025 {
            let k = split_point(n);
            assert!(k.is_power_of_two() && k < n && 2 * k >= n, "n={n} k={k}");
        }
        assert_eq!(split_point(u64::MAX), 1 << 63);
        assert_eq!(split_point((1 << 63) + 1), 1 << 63);
        assert_eq!(split_point(1 << 63), 1 << 62);
    }
}
