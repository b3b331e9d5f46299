//! Proof verification: RFC 9162 §2.1.3.2 (inclusion) and §2.1.4.2 (consistency).
//!
//! Both algorithms are followed step by step, with one addition: the number of hashes a proof
//! must have is a function of the sizes (and index) alone, so it is checked first, which turns
//! the RFC's generic "fail" for a short or long proof into a [`ProofError::WrongProofLength`]
//! that says how long it should have been. The RFC's own checks (`sn` reaching 0 exactly when
//! the path runs out) are kept as well; with the length right they always pass.
//!
//! Nothing here can panic: every subtraction is guarded by the comparison before it and every
//! shift is by less than 64 or checked.

use crate::{MerkleHasher, ProofError};

/// The number of hashes in the inclusion proof of leaf `index` in a tree of `size` leaves.
///
/// The path has one hash per level where the leaf's subtree has a sibling: the levels below the
/// highest bit where `index` and `size - 1` differ all have a full sibling subtree ("inner"),
/// and above it one more per set bit of what remains of `index`, where the leaf sits in a right
/// subtree ("border"); the other levels above it have no right sibling yet.
pub fn inclusion_proof_len(index: u64, size: u64) -> Result<usize, ProofError> {
    // RFC 9162 §2.1.3.2 step 1.
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let inner = bit_len(index ^ (size - 1));
    let border = index.checked_shr(inner).unwrap_or(0).count_ones();
    Ok((inner + border) as usize)
}

/// The number of hashes in the consistency proof from a tree of `old_size` leaves to one of
/// `new_size` leaves: 0 when `old_size` is 0 or equal to `new_size`.
///
/// The proof is, bar the adjustments below, the inclusion proof of the old tree's last leaf in
/// the new tree, with the levels inside the old tree's rightmost perfect subtree (of
/// `2^trailing_zeros(old_size)` leaves) replaced by that subtree's root. That root is itself
/// left out when the old tree is that one perfect subtree: the verifier has it as the old root.
pub fn consistency_proof_len(old_size: u64, new_size: u64) -> Result<usize, ProofError> {
    if old_size > new_size {
        return Err(ProofError::OldSizeExceedsNewSize { old_size, new_size });
    }
    if old_size == 0 || old_size == new_size {
        return Ok(0);
    }
    let last = old_size - 1;
    let inner = bit_len(last ^ (new_size - 1));
    let border = last.checked_shr(inner).unwrap_or(0).count_ones();
    // `inner` exceeds the trailing zeros of `old_size`: below them `last` is all ones, and
    // `new_size - 1 > last` must differ from it at or above them.
    let inner = inner.saturating_sub(old_size.trailing_zeros());
    let seed = u32::from(!old_size.is_power_of_two());
    Ok((seed + inner + border) as usize)
}

/// Decodes a proof that arrives as untyped byte strings into digests, failing on the first
/// element that is not [`H::DIGEST_LEN_BYTES`](MerkleHasher::DIGEST_LEN_BYTES) long.
pub fn parse_proof<H: MerkleHasher>(elements: &[impl AsRef<[u8]>]) -> Result<Vec<H::Digest>, ProofError> {
    elements
        .iter()
        .enumerate()
        .map(|(position, element)| {
            let bytes = element.as_ref();
            H::digest_from_slice(bytes).ok_or(ProofError::DigestLength {
                position,
                expected_len_bytes: H::DIGEST_LEN_BYTES,
                actual_len_bytes: bytes.len(),
            })
        })
        .collect()
}

/// The root that leaf hash `leaf_hash` at `index` in a tree of `size` leaves leads to through
/// the inclusion proof `proof` (RFC 9162 §2.1.3.2 steps 1 to 4). The proof is valid for a
/// root if and only if this returns that root; [`verify_inclusion`] compares.
pub fn root_from_inclusion_proof<H: MerkleHasher>(
    leaf_hash: &H::Digest,
    index: u64,
    size: u64,
    proof: &[H::Digest],
) -> Result<H::Digest, ProofError> {
    root_from_inclusion_proof_visiting::<H>(leaf_hash, index, size, proof, |_| ())
}

/// One step up an inclusion proof's path: the proof's element, which side of the node so far
/// it hashes on, and the node the two make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InclusionStep<D> {
    pub sibling: D,
    /// The sibling is the left child (the node so far the right one).
    pub sibling_on_left: bool,
    pub parent: D,
}

/// [`root_from_inclusion_proof`], telling `visit` each step, so a viewer can show the path
/// (an operator's console shows each hash it computed on the way to the root).
pub fn root_from_inclusion_proof_visiting<H: MerkleHasher>(
    leaf_hash: &H::Digest,
    index: u64,
    size: u64,
    proof: &[H::Digest],
    mut visit: impl FnMut(InclusionStep<H::Digest>),
) -> Result<H::Digest, ProofError> {
    let expected = inclusion_proof_len(index, size)?;
    let wrong_length = ProofError::WrongProofLength {
        expected,
        actual: proof.len(),
    };
    if proof.len() != expected {
        return Err(wrong_length);
    }

    // Step 2. `fn` is the node's index within its level, `sn` the index of the level's last
    // node; each step up halves both.
    let mut fn_ = index;
    let mut sn = size - 1;
    // Step 3.
    let mut r = *leaf_hash;
    // Step 4.
    for p in proof {
        // 4a: the path is longer than the tree is tall.
        if sn == 0 {
            return Err(wrong_length);
        }
        // 4b: `fn` is a right child, or the last node of its level and so (lacking a right
        // sibling) promoted to the level where its subtree is a right child or the root.
        let sibling_on_left = fn_ & 1 == 1 || fn_ == sn;
        if sibling_on_left {
            r = H::hash_children(p, &r);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            r = H::hash_children(&r, p);
        }
        visit(InclusionStep {
            sibling: *p,
            sibling_on_left,
            parent: r,
        });
        // 4c.
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 5, first half: the path must reach the root.
    if sn != 0 {
        return Err(wrong_length);
    }
    Ok(r)
}

/// Checks that `proof` proves leaf hash `leaf_hash` is leaf `index` of the tree of `size` leaves
/// whose root is `root` (RFC 9162 §2.1.3.2).
///
/// `leaf_hash` is the leaf's hash (`H(0x00 || leaf)`), not its data. `size` must come with
/// `root` from a trusted statement: a proof fits every size for which the leaf's path has the
/// same shape.
///
/// O(log size). The proof's length, a function of `index` and `size` alone, is checked before
/// any hashing, so a short or long proof fails with [`ProofError::WrongProofLength`].
pub fn verify_inclusion<H: MerkleHasher>(
    leaf_hash: &H::Digest,
    index: u64,
    size: u64,
    proof: &[H::Digest],
    root: &H::Digest,
) -> Result<(), ProofError> {
    // Step 5, second half.
    if root_from_inclusion_proof::<H>(leaf_hash, index, size, proof)? != *root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// Checks that `proof` proves the tree of `new_size` leaves with root `new_root` extends the
/// tree of `old_size` leaves with root `old_root` (RFC 9162 §2.1.4.2).
///
/// Beyond the RFC, which defines the algorithm for `0 < old_size < new_size` only:
/// * equal sizes: the proof must be empty and the roots equal;
/// * `old_size == 0`: the proof must be empty and `old_root` must be `H()`, the one root an
///   empty tree has; any `new_root` extends it (and must equal `H()` too if `new_size` is 0).
///
/// O(log new_size). The proof's length, a function of the sizes alone, is checked before any
/// hashing, so a short or long proof fails with [`ProofError::WrongProofLength`]. On a root
/// mismatch, see [`ProofError::NewRootMismatch`] for which of the two errors a wrong old root
/// gives.
pub fn verify_consistency<H: MerkleHasher>(
    old_size: u64,
    new_size: u64,
    old_root: &H::Digest,
    new_root: &H::Digest,
    proof: &[H::Digest],
) -> Result<(), ProofError> {
    verify_consistency_visiting::<H>(old_size, new_size, old_root, new_root, proof, |_| ())
}

/// One step of [`verify_consistency_visiting`]: a hash of the path and what it made of the two
/// roots being rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsistencyStep<D> {
    pub hash: D,
    pub role: ConsistencyRole,
    /// The old tree's root as rebuilt so far.
    pub old_so_far: D,
    /// The new tree's root as rebuilt so far.
    pub new_so_far: D,
}

/// What a hash of a consistency proof is to the two trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsistencyRole {
    /// Where both rebuilds start: the root of the old tree's rightmost perfect subtree, which
    /// is the old root itself (not sent: `from_old_root`) when the old size is a power of two.
    Seed { from_old_root: bool },
    /// A left sibling, shared by both trees: both roots so far are hashed under it.
    Shared,
    /// A right sibling only the new tree has: the new root so far is hashed over it.
    NewOnly,
}

/// [`verify_consistency`], telling `visit` each step, so a viewer can show how both roots were
/// rebuilt from the path (an operator's console draws each hash).
pub fn verify_consistency_visiting<H: MerkleHasher>(
    old_size: u64,
    new_size: u64,
    old_root: &H::Digest,
    new_root: &H::Digest,
    proof: &[H::Digest],
    mut visit: impl FnMut(ConsistencyStep<H::Digest>),
) -> Result<(), ProofError> {
    let expected = consistency_proof_len(old_size, new_size)?;
    let wrong_length = ProofError::WrongProofLength {
        expected,
        actual: proof.len(),
    };
    if proof.len() != expected {
        return Err(wrong_length);
    }
    if old_size == 0 && *old_root != H::empty_root() {
        return Err(ProofError::OldRootMismatch);
    }
    if old_size == new_size {
        return if old_root == new_root {
            Ok(())
        } else {
            Err(ProofError::NewRootMismatch)
        };
    }
    if old_size == 0 {
        return Ok(());
    }

    // 0 < old_size < new_size from here on.
    // Steps 1 and 2: fail on an empty path; if `old_size` is a power of two, the old tree is a
    // perfect subtree of the new one and the path starts with its root, the old root, which
    // the prover leaves out. Rather than copy the path to prepend it, split it into the
    // starting hash and the rest.
    let (seed, rest) = if old_size.is_power_of_two() {
        (old_root, proof)
    } else {
        match proof.split_first() {
            Some((first, rest)) => (first, rest),
            None => return Err(wrong_length),
        }
    };
    // Step 3. As for inclusion, `fn` and `sn` are node indices within a level: of the old
    // tree's last leaf's ancestor and of the new tree's last node.
    let mut fn_ = old_size - 1;
    let mut sn = new_size - 1;
    // Step 4: skip the levels inside the old tree's rightmost perfect subtree, whose root the
    // path starts with.
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 5: `fr` rebuilds the old root, `sr` the new one.
    let mut fr = *seed;
    let mut sr = *seed;
    visit(ConsistencyStep {
        hash: *seed,
        role: ConsistencyRole::Seed {
            from_old_root: old_size.is_power_of_two(),
        },
        old_so_far: fr,
        new_so_far: sr,
    });
    // Step 6.
    for c in rest {
        // 6a.
        if sn == 0 {
            return Err(wrong_length);
        }
        // 6b: `c` is a left sibling, shared by both trees.
        let role = if fn_ & 1 == 1 || fn_ == sn {
            fr = H::hash_children(c, &fr);
            sr = H::hash_children(c, &sr);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
            ConsistencyRole::Shared
        } else {
            // Otherwise `c` is a right sibling that only the new tree has.
            sr = H::hash_children(&sr, c);
            ConsistencyRole::NewOnly
        };
        visit(ConsistencyStep {
            hash: *c,
            role,
            old_so_far: fr,
            new_so_far: sr,
        });
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 7.
    if sn != 0 {
        return Err(wrong_length);
    }
    if fr != *old_root {
        return Err(ProofError::OldRootMismatch);
    }
    if sr != *new_root {
        return Err(ProofError::NewRootMismatch);
    }
    Ok(())
}

/// The number of bits needed to write `x`: 0 for 0, else one more than its highest set bit.
fn bit_len(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Blake3;

    /// How many path elements the RFC 9162 §2.1.3.2 loop consumes before `sn` reaches 0:
    /// the proof length by simulation rather than by formula.
    fn simulated_inclusion_len(index: u64, size: u64) -> usize {
        let (mut fn_, mut sn, mut count) = (index, size - 1, 0);
        while sn != 0 {
            if fn_ & 1 == 1 || fn_ == sn {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
            fn_ >>= 1;
            sn >>= 1;
            count += 1;
        }
        count
    }

    /// Likewise for the §2.1.4.2 loop, counting the (possibly prepended) old root.
    fn simulated_consistency_len(old_size: u64, new_size: u64) -> usize {
        let (mut fn_, mut sn) = (old_size - 1, new_size - 1);
        while fn_ & 1 == 1 {
            fn_ >>= 1;
            sn >>= 1;
        }
        let mut count = 1;
        while sn != 0 {
            if fn_ & 1 == 1 || fn_ == sn {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
            fn_ >>= 1;
            sn >>= 1;
            count += 1;
        }
        count - usize::from(old_size.is_power_of_two())
    }

    #[test]
    fn proof_length_formulas_match_the_rfc_loops() {
        for size in 1..=300 {
            for index in 0..size {
                assert_eq!(
                    inclusion_proof_len(index, size).unwrap(),
                    simulated_inclusion_len(index, size)
                );
            }
            for old in 1..size {
                assert_eq!(
                    consistency_proof_len(old, size).unwrap(),
                    simulated_consistency_len(old, size)
                );
            }
        }
        for (a, b) in [
            (0, u64::MAX),
            ((1 << 63) + 5, u64::MAX),
            (u64::MAX - 1, u64::MAX),
            (1, 1 << 63),
        ] {
            assert_eq!(inclusion_proof_len(a, b).unwrap(), simulated_inclusion_len(a, b));
            if a > 0 {
                assert_eq!(
                    consistency_proof_len(a, b).unwrap(),
                    simulated_consistency_len(a, b)
                );
            }
        }
        assert_eq!(inclusion_proof_len(0, u64::MAX).unwrap(), 64);
        assert_eq!(inclusion_proof_len(0, (1 << 63) + 1).unwrap(), 64);
    }

    #[test]
    fn extreme_sizes_do_not_panic() {
        let d = Blake3::hash_leaf(b"x");
        let proof = vec![d; 70];
        for size in [
            0,
            1,
            2,
            3,
            (1 << 63) - 1,
            1 << 63,
            (1 << 63) + 1,
            u64::MAX - 1,
            u64::MAX,
        ] {
            for index in [0, 1, size / 2, size.saturating_sub(1), size, u64::MAX] {
                for len in [0, 1, 63, 64, 65, 70] {
                    let _ = verify_inclusion::<Blake3>(&d, index, size, &proof[..len], &d);
                }
            }
            for old in [0, 1, 2, size / 2, size.saturating_sub(1), size, u64::MAX] {
                for len in [0, 1, 63, 64, 65, 70] {
                    let _ = verify_consistency::<Blake3>(old, size, &d, &d, &proof[..len]);
                }
            }
        }
    }

    #[test]
    fn parse_proof_names_the_bad_element() {
        let d = Blake3::hash_leaf(b"x");
        let good: Vec<Vec<u8>> = vec![d.to_vec(), d.to_vec()];
        assert_eq!(parse_proof::<Blake3>(&good).unwrap(), vec![d, d]);
        let bad: Vec<&[u8]> = vec![&d, &d[..31], b""];
        assert_eq!(
            parse_proof::<Blake3>(&bad),
            Err(ProofError::DigestLength {
                position: 1,
                expected_len_bytes: 32,
                actual_len_bytes: 31
            })
        );
        assert_eq!(parse_proof::<Blake3>(&[] as &[&[u8]]), Ok(vec![]));
    }
}
