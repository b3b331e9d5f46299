//! Proof generation: RFC 9162 §2.1.3.1 (inclusion) and §2.1.4.1 (consistency).

use crate::{MerkleHasher, ProofError, split_point};

/// Where the prover reads leaf hashes from: anything that can give the leaf hash at an index.
/// A slice (or `Vec`) of digests is one; a store of audit-entry hashes can be another.
///
/// # Cost of a proof
///
/// A proof is O(log n) subtree roots. Computed from the leaves, a subtree root over `m` leaves
/// costs `m` leaf reads and `m - 1` node hashes, so one proof from a tree of `n` leaves costs
/// O(n): at most `n` leaf reads and `n - 1` node hashes, as the subtrees in a proof are
/// disjoint. A source that stores interior nodes can serve them from
/// [`cached_subtree_root`](Self::cached_subtree_root); with every perfect subtree cached, a
/// proof costs O(log² n) lookups and hashes at most.
pub trait LeafSource<H: MerkleHasher> {
    /// The number of leaves available, indices `0..leaf_count()`.
    fn leaf_count(&self) -> u64;

    /// The leaf hash (`H(0x00 || leaf)`) at `index`, or `None` if there is none.
    fn leaf_hash(&self, index: u64) -> Option<H::Digest>;

    /// The root of the leaves `start..end` (RFC 9162 MTH of that range) if the source has it
    /// at hand, or `None` to have it computed from the leaves. Called only for ranges of two
    /// leaves or more. The default has none.
    ///
    /// A cached value is trusted: a wrong one yields proofs that fail verification. Perfect
    /// subtrees (`end - start` a power of two and `start` a multiple of it) are the ones worth
    /// caching: every other range splits into O(log n) of them. Other ranges are asked for too,
    /// and may be answered.
    fn cached_subtree_root(&self, start: u64, end: u64) -> Option<H::Digest> {
        let _ = (start, end);
        None
    }
}

impl<H: MerkleHasher> LeafSource<H> for [H::Digest] {
    fn leaf_count(&self) -> u64 {
        // usize is at most 64 bits on every target Rust supports.
        self.len() as u64
    }

    fn leaf_hash(&self, index: u64) -> Option<H::Digest> {
        usize::try_from(index).ok().and_then(|i| self.get(i)).copied()
    }
}

impl<H: MerkleHasher> LeafSource<H> for Vec<H::Digest> {
    fn leaf_count(&self) -> u64 {
        <[H::Digest] as LeafSource<H>>::leaf_count(self)
    }

    fn leaf_hash(&self, index: u64) -> Option<H::Digest> {
        <[H::Digest] as LeafSource<H>>::leaf_hash(self, index)
    }
}

/// The root of the leaves `start..end` (RFC 9162 §2.1.1 MTH of `D[start:end]`): `H()` for an
/// empty range. The root of a tree of size `n` is `subtree_root(leaves, 0, n)`.
///
/// Costs `end - start - 1` node hashes unless the source's cache answers.
pub fn subtree_root<H: MerkleHasher>(
    leaves: &(impl LeafSource<H> + ?Sized),
    start: u64,
    end: u64,
) -> Result<H::Digest, ProofError> {
    if start > end {
        return Err(ProofError::InvalidRange { start, end });
    }
    check_available(leaves, end)?;
    mth(leaves, start, end)
}

/// The inclusion proof (audit path) of leaf `index` in the tree of the first `size` leaves,
/// as RFC 9162 §2.1.3.1 defines it: the sibling subtree roots from the leaf up to the root,
/// deepest first. Empty for a tree of one leaf.
///
/// Costs O(size) hashing unless the source caches subtrees; see [`LeafSource`].
pub fn inclusion_proof<H: MerkleHasher>(
    leaves: &(impl LeafSource<H> + ?Sized),
    index: u64,
    size: u64,
) -> Result<Vec<H::Digest>, ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    check_available(leaves, size)?;

    // PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])      if m < k
    //               = PATH(m - k, D[k:n]) : MTH(D[0:k])  if m >= k
    // Unrolled top-down over the range [start, end) that holds the leaf; the sibling at the top
    // comes last in the proof, so collect and then reverse.
    let mut proof = Vec::new();
    let (mut start, mut end) = (0, size);
    while end - start > 1 {
        let mid = start + split_point(end - start);
        if index < mid {
            proof.push(mth(leaves, mid, end)?);
            end = mid;
        } else {
            proof.push(mth(leaves, start, mid)?);
            start = mid;
        }
    }
    proof.reverse();
    Ok(proof)
}

/// The consistency proof from the tree of the first `old_size` leaves to the tree of the first
/// `new_size`, as RFC 9162 §2.1.4.1 defines it for `0 < old_size < new_size`.
///
/// For `old_size == new_size` the proof is empty (RFC 9162 defines it so), and for
/// `old_size == 0` it is empty too: every tree extends the empty tree, and there is nothing to
/// prove (RFC 9162 leaves this case undefined; see [`verify_consistency`](crate::verify_consistency)).
///
/// Costs O(new_size) hashing unless the source caches subtrees; see [`LeafSource`].
pub fn consistency_proof<H: MerkleHasher>(
    leaves: &(impl LeafSource<H> + ?Sized),
    old_size: u64,
    new_size: u64,
) -> Result<Vec<H::Digest>, ProofError> {
    if old_size > new_size {
        return Err(ProofError::OldSizeExceedsNewSize { old_size, new_size });
    }
    check_available(leaves, new_size)?;
    if old_size == 0 || old_size == new_size {
        return Ok(Vec::new());
    }

    // PROOF(m, D[n]) = SUBPROOF(m, D[n], true), where
    //   SUBPROOF(m, D[m], true)  = {}
    //   SUBPROOF(m, D[m], false) = {MTH(D[m])}
    //   SUBPROOF(m, D[n], b)     = SUBPROOF(m, D[0:k], b) : MTH(D[k:n])          if m <= k
    //                            = SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])  if m > k
    // Unrolled top-down over the range [start, end) that holds the old tree's boundary
    // (`old_size`, in absolute leaf numbers), collected and then reversed as for inclusion.
    // `b` records whether the range still starts at leaf 0, i.e. whether its old part is the
    // whole old tree, whose root the verifier already has.
    let mut proof = Vec::new();
    let (mut start, mut end) = (0, new_size);
    let mut starts_at_zero = true;
    while end != old_size {
        let mid = start + split_point(end - start);
        if old_size <= mid {
            proof.push(mth(leaves, mid, end)?);
            end = mid;
        } else {
            proof.push(mth(leaves, start, mid)?);
            start = mid;
            starts_at_zero = false;
        }
    }
    if !starts_at_zero {
        proof.push(mth(leaves, start, end)?);
    }
    proof.reverse();
    Ok(proof)
}

fn check_available<H: MerkleHasher>(
    leaves: &(impl LeafSource<H> + ?Sized),
    size: u64,
) -> Result<(), ProofError> {
    let leaf_count = leaves.leaf_count();
    if size > leaf_count {
        return Err(ProofError::NotEnoughLeaves { size, leaf_count });
    }
    Ok(())
}

/// MTH(D[start:end]) by the RFC 9162 §2.1.1 recursion, asking the source's cache first. Both
/// parts of a split are at most `k < n` leaves, so the recursion is `ceil(log2(n)) <= 64`
/// levels deep.
fn mth<H: MerkleHasher>(
    leaves: &(impl LeafSource<H> + ?Sized),
    start: u64,
    end: u64,
) -> Result<H::Digest, ProofError> {
    match end - start {
        0 => Ok(H::empty_root()),
        1 => leaves
            .leaf_hash(start)
            .ok_or(ProofError::MissingLeaf { index: start }),
        len => {
            if let Some(cached) = leaves.cached_subtree_root(start, end) {
                return Ok(cached);
            }
            let mid = start + split_point(len);
            Ok(H::hash_children(
                &mth(leaves, start, mid)?,
                &mth(leaves, mid, end)?,
            ))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::{Blake3, CompactTree};

    fn leaves(n: u64) -> Vec<[u8; 32]> {
        (0..n).map(|i| Blake3::hash_leaf(&i.to_le_bytes())).collect()
    }

    #[test]
    fn prover_rejects_bad_arguments() {
        let l = leaves(5);
        assert_eq!(
            inclusion_proof::<Blake3>(&l, 5, 5),
            Err(ProofError::IndexOutOfRange { index: 5, size: 5 })
        );
        assert_eq!(
            inclusion_proof::<Blake3>(&l, 0, 0),
            Err(ProofError::IndexOutOfRange { index: 0, size: 0 })
        );
        assert_eq!(
            inclusion_proof::<Blake3>(&l, 0, 6),
            Err(ProofError::NotEnoughLeaves {
                size: 6,
                leaf_count: 5
            })
        );
        assert_eq!(
            consistency_proof::<Blake3>(&l, 4, 3),
            Err(ProofError::OldSizeExceedsNewSize {
                old_size: 4,
                new_size: 3
            })
        );
        assert_eq!(
            consistency_proof::<Blake3>(&l, 2, 7),
            Err(ProofError::NotEnoughLeaves {
                size: 7,
                leaf_count: 5
            })
        );
        assert_eq!(
            subtree_root::<Blake3>(&l, 3, 2),
            Err(ProofError::InvalidRange { start: 3, end: 2 })
        );
        assert_eq!(
            subtree_root::<Blake3>(&l, 0, 6),
            Err(ProofError::NotEnoughLeaves {
                size: 6,
                leaf_count: 5
            })
        );
        assert_eq!(consistency_proof::<Blake3>(&l, 0, 5), Ok(vec![]));
        assert_eq!(consistency_proof::<Blake3>(&l, 5, 5), Ok(vec![]));
        assert_eq!(subtree_root::<Blake3>(&l, 5, 5), Ok(Blake3::empty_root()));
    }

    /// A source that claims more leaves than it can produce.
    struct Holey(Vec<[u8; 32]>);

    impl LeafSource<Blake3> for Holey {
        fn leaf_count(&self) -> u64 {
            self.0.len() as u64 + 3
        }

        fn leaf_hash(&self, index: u64) -> Option<[u8; 32]> {
            self.0.get(index as usize).copied()
        }
    }

    #[test]
    fn missing_leaf_is_reported_by_index() {
        let source = Holey(leaves(4));
        assert_eq!(
            subtree_root::<Blake3>(&source, 0, 6),
            Err(ProofError::MissingLeaf { index: 4 })
        );
        assert_eq!(
            inclusion_proof::<Blake3>(&source, 0, 7),
            Err(ProofError::MissingLeaf { index: 4 })
        );
    }

    /// A source that caches every perfect subtree and counts leaf reads.
    struct Cached {
        leaves: Vec<[u8; 32]>,
        reads: Cell<u64>,
    }

    impl LeafSource<Blake3> for Cached {
        fn leaf_count(&self) -> u64 {
            self.leaves.len() as u64
        }

        fn leaf_hash(&self, index: u64) -> Option<[u8; 32]> {
            self.reads.set(self.reads.get() + 1);
            self.leaves.get(index as usize).copied()
        }

        fn cached_subtree_root(&self, start: u64, end: u64) -> Option<[u8; 32]> {
            let len = end - start;
            if !len.is_power_of_two() || !start.is_multiple_of(len) {
                return None;
            }
            let mut tree = CompactTree::<Blake3>::new();
            for i in start..end {
                tree.push_leaf_hash(self.leaves[i as usize]);
            }
            Some(tree.root())
        }
    }

    #[test]
    fn cached_subtrees_are_used_and_agree() {
        let plain = leaves(300);
        let cached = Cached {
            leaves: plain.clone(),
            reads: Cell::new(0),
        };
        for (index, size) in [(0, 300), (17, 300), (255, 256), (299, 300), (128, 129)] {
            cached.reads.set(0);
            let proof = inclusion_proof::<Blake3>(&cached, index, size).unwrap();
            assert_eq!(proof, inclusion_proof::<Blake3>(&plain, index, size).unwrap());
            // Perfect subtrees come from the cache: only the O(log n) lone leaves are read.
            assert!(cached.reads.get() <= 2 * 64, "{} reads", cached.reads.get());
        }
        for (old, new) in [(1, 300), (100, 300), (256, 300), (299, 300)] {
            let proof = consistency_proof::<Blake3>(&cached, old, new).unwrap();
            assert_eq!(proof, consistency_proof::<Blake3>(&plain, old, new).unwrap());
        }
    }
}
