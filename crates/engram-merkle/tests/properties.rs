#![allow(clippy::unwrap_used)]
//! Exhaustive property checks over small trees, for both hashers: every proof the crate
//! computes is the one RFC 9162 defines and verifies, and every corruption of it fails with the
//! error that names the corruption.

mod support;

use engram_merkle::{
    Blake3, CompactTree, ConsistencyRole, MerkleHasher, ProofError, consistency_proof, consistency_proof_len,
    inclusion_proof, inclusion_proof_len, subtree_root, verify_consistency, verify_consistency_visiting,
    verify_inclusion,
};
use support::{
    Sha256, flip_byte, hash_ranges, leaf_hashes, reference_consistency_ok, reference_mth,
    reference_path_ranges, reference_root_from_path, reference_subproof_ranges,
};

/// Trees up to this size are checked for every index and every pair of sizes with BLAKE3,
/// Engram's hasher.
const MAX_PROOF_TREE_SIZE: u64 = 70;

/// The same with SHA-256, whose debug build is about ten times slower: up to a size just past a
/// power of two, which still covers every shape of path and proof the larger size does, only
/// fewer of each.
const MAX_PROOF_TREE_SIZE_SHA256: u64 = 33;

/// Compact trees are checked against the reference root up to this size.
const MAX_COMPACT_TREE_SIZE: u64 = 300;

fn compact_tree_root_is_the_mth<H: MerkleHasher>() {
    let leaves = leaf_hashes::<H>(MAX_COMPACT_TREE_SIZE);
    let mut tree = CompactTree::<H>::new();
    assert_eq!(tree.root(), H::empty_root());
    for size in 1..=MAX_COMPACT_TREE_SIZE {
        tree.push_leaf_hash(leaves[size as usize - 1]);
        assert_eq!(tree.size(), size);
        let expected = subtree_root::<H>(&leaves, 0, size).unwrap();
        assert_eq!(tree.root(), expected, "size {size}");
        assert_eq!(
            expected,
            reference_mth::<H>(&leaves[..size as usize]),
            "size {size}"
        );
    }
}

#[test]
fn compact_tree_root_is_the_mth_sha256() {
    compact_tree_root_is_the_mth::<Sha256>();
}

#[test]
fn compact_tree_root_is_the_mth_blake3() {
    compact_tree_root_is_the_mth::<Blake3>();
}

fn subtree_root_of_every_range<H: MerkleHasher>() {
    let leaves = leaf_hashes::<H>(40);
    for start in 0..=40u64 {
        for end in start..=40 {
            assert_eq!(
                subtree_root::<H>(&leaves, start, end).unwrap(),
                reference_mth::<H>(&leaves[start as usize..end as usize]),
                "{start}..{end}"
            );
        }
    }
}

#[test]
fn subtree_root_of_every_range_sha256() {
    subtree_root_of_every_range::<Sha256>();
}

#[test]
fn subtree_root_of_every_range_blake3() {
    subtree_root_of_every_range::<Blake3>();
}

fn inclusion_proofs_verify_and_corruptions_fail<H: MerkleHasher>(max_size: u64) {
    let leaves = leaf_hashes::<H>(max_size + 2);
    let roots: Vec<H::Digest> = (0..=max_size + 2)
        .map(|n| subtree_root::<H>(&leaves, 0, n).unwrap())
        .collect();
    let zero = H::digest_from_slice(&vec![0; H::DIGEST_LEN_BYTES]).unwrap();
    let mut wrong_size_accepted = 0;

    for size in 1..=max_size {
        let root = roots[size as usize];
        for index in 0..size {
            let leaf = leaves[index as usize];
            let at = format!("(index {index}, size {size})");
            let proof = inclusion_proof::<H>(&leaves, index, size).unwrap();

            // The RFC 9162 §2.1.3.1 path, of the predicted length, verifying.
            let ranges = reference_path_ranges(index, 0..size);
            assert_eq!(proof, hash_ranges::<H>(&leaves, &ranges), "{at}");
            assert_eq!(proof.len(), inclusion_proof_len(index, size).unwrap(), "{at}");
            verify_inclusion::<H>(&leaf, index, size, &proof, &root).unwrap();

            // Any single byte of the proof, of the leaf hash or of the root flipped.
            for (i, element) in proof.iter().enumerate() {
                for byte in 0..H::DIGEST_LEN_BYTES {
                    let mut bad = proof.clone();
                    bad[i] = flip_byte::<H>(element, byte);
                    assert_eq!(
                        verify_inclusion::<H>(&leaf, index, size, &bad, &root),
                        Err(ProofError::RootMismatch),
                        "{at}, element {i} byte {byte}"
                    );
                }
            }
            for byte in 0..H::DIGEST_LEN_BYTES {
                let bad_leaf = flip_byte::<H>(&leaf, byte);
                let bad_root = flip_byte::<H>(&root, byte);
                assert_eq!(
                    verify_inclusion::<H>(&bad_leaf, index, size, &proof, &root),
                    Err(ProofError::RootMismatch)
                );
                assert_eq!(
                    verify_inclusion::<H>(&leaf, index, size, &proof, &bad_root),
                    Err(ProofError::RootMismatch)
                );
            }

            // Wrong roots: other trees' and the empty tree's.
            for other in [size - 1, size + 1, 0] {
                assert!(
                    verify_inclusion::<H>(&leaf, index, size, &proof, &roots[other as usize]).is_err(),
                    "{at}"
                );
            }
            // Another leaf's hash.
            let other_leaf = leaves[((index + 1) % size) as usize];
            if size > 1 {
                assert!(
                    verify_inclusion::<H>(&other_leaf, index, size, &proof, &root).is_err(),
                    "{at}"
                );
            }

            // Every wrong index: a leaf's path fixes its position, so none may verify.
            for wrong in 0..size + 2 {
                if wrong == index {
                    continue;
                }
                let result = verify_inclusion::<H>(&leaf, wrong, size, &proof, &root);
                assert!(result.is_err(), "{at} verified as index {wrong}");
                if wrong >= size {
                    assert_eq!(result, Err(ProofError::IndexOutOfRange { index: wrong, size }));
                }
            }

            // Every wrong size. A path binds the size only through its shape, so a size whose
            // path for this index has the same shape is accepted; the definition-based verifier
            // says exactly which those are, and this one must agree. Doubling or halving the
            // size, as the published suites try, never keeps the shape.
            for wrong in 0..=max_size + 2 {
                if wrong == size {
                    continue;
                }
                let result = verify_inclusion::<H>(&leaf, index, wrong, &proof, &root);
                let reference = reference_root_from_path::<H>(index, wrong, &leaf, &proof) == Some(root);
                assert_eq!(result.is_ok(), reference, "{at} as size {wrong}: {result:?}");
                if wrong == 2 * size || wrong == size / 2 {
                    assert!(result.is_err(), "{at} as size {wrong}");
                }
                if index >= wrong {
                    assert_eq!(result, Err(ProofError::IndexOutOfRange { index, size: wrong }));
                }
                wrong_size_accepted += usize::from(result.is_ok());
            }

            // Truncated, extended or prefixed paths: the length is checked first.
            let expected = proof.len();
            let mut variants = vec![];
            if !proof.is_empty() {
                variants.push(proof[..expected - 1].to_vec());
                variants.push(proof[1..].to_vec());
            }
            for extra in [zero, root, leaf] {
                let mut longer = proof.clone();
                longer.push(extra);
                variants.push(longer);
                let mut prefixed = vec![extra];
                prefixed.extend_from_slice(&proof);
                variants.push(prefixed);
            }
            for bad in variants {
                assert_eq!(
                    verify_inclusion::<H>(&leaf, index, size, &bad, &root),
                    Err(ProofError::WrongProofLength {
                        expected,
                        actual: bad.len()
                    }),
                    "{at}"
                );
            }
        }
    }
    // Shape-equal sizes exist (e.g. leaf 0 has the same path shape in trees of 5 to 8 leaves),
    // so some wrong sizes are accepted; the check above pins down exactly which.
    assert!(wrong_size_accepted > 0);
}

#[test]
fn inclusion_proofs_verify_and_corruptions_fail_sha256() {
    inclusion_proofs_verify_and_corruptions_fail::<Sha256>(MAX_PROOF_TREE_SIZE_SHA256);
}

#[test]
fn inclusion_proofs_verify_and_corruptions_fail_blake3() {
    inclusion_proofs_verify_and_corruptions_fail::<Blake3>(MAX_PROOF_TREE_SIZE);
}

fn consistency_proofs_verify_and_corruptions_fail<H: MerkleHasher>(max_size: u64) {
    let leaves = leaf_hashes::<H>(max_size + 2);
    let roots: Vec<H::Digest> = (0..=max_size + 2)
        .map(|n| subtree_root::<H>(&leaves, 0, n).unwrap())
        .collect();
    let zero = H::digest_from_slice(&vec![0; H::DIGEST_LEN_BYTES]).unwrap();

    for new_size in 0..=max_size {
        for old_size in 0..=new_size {
            let at = format!("(old {old_size}, new {new_size})");
            let (old_root, new_root) = (roots[old_size as usize], roots[new_size as usize]);
            let proof = consistency_proof::<H>(&leaves, old_size, new_size).unwrap();

            // The RFC 9162 §2.1.4.1 proof, of the predicted length, verifying.
            if old_size > 0 {
                let ranges = reference_subproof_ranges(old_size, 0..new_size, true);
                assert_eq!(proof, hash_ranges::<H>(&leaves, &ranges), "{at}");
            } else {
                assert!(proof.is_empty());
            }
            assert_eq!(
                proof.len(),
                consistency_proof_len(old_size, new_size).unwrap(),
                "{at}"
            );
            verify_consistency::<H>(old_size, new_size, &old_root, &new_root, &proof).unwrap();
            // Visited, each hash of the path is one step (after the seed, which a power-of-two
            // old size takes from the old root, not the path), and the last step holds both
            // roots rebuilt.
            let mut steps = Vec::new();
            verify_consistency_visiting::<H>(old_size, new_size, &old_root, &new_root, &proof, |s| {
                steps.push(s)
            })
            .unwrap();
            if old_size > 0 && old_size < new_size {
                let from_old_root = old_size.is_power_of_two();
                assert_eq!(steps.len(), proof.len() + usize::from(from_old_root), "{at}");
                assert_eq!(steps[0].role, ConsistencyRole::Seed { from_old_root }, "{at}");
                let last = steps.last().unwrap();
                assert_eq!((last.old_so_far, last.new_so_far), (old_root, new_root), "{at}");
            } else {
                assert!(steps.is_empty(), "{at}");
            }

            // A larger old tree than new.
            assert_eq!(
                verify_consistency::<H>(new_size + 1, new_size, &old_root, &new_root, &proof),
                Err(ProofError::OldSizeExceedsNewSize {
                    old_size: new_size + 1,
                    new_size
                })
            );

            // Wrong roots: a flipped byte in either, or another tree's. Between equal sizes the
            // two roots must simply be equal, and a difference is reported against the new one;
            // likewise when the old tree is a perfect subtree of the new one, as the new root is
            // then rebuilt from the old. An empty old tree has one possible root, and any new
            // root extends it.
            let bad_old_error = if old_size > 0 && (old_size == new_size || old_size.is_power_of_two()) {
                ProofError::NewRootMismatch
            } else {
                ProofError::OldRootMismatch
            };
            let bad_new_result = if old_size == 0 && new_size > 0 {
                Ok(())
            } else {
                Err(ProofError::NewRootMismatch)
            };
            for byte in 0..H::DIGEST_LEN_BYTES {
                let bad_old = flip_byte::<H>(&old_root, byte);
                let bad_new = flip_byte::<H>(&new_root, byte);
                assert_eq!(
                    verify_consistency::<H>(old_size, new_size, &bad_old, &new_root, &proof),
                    Err(bad_old_error.clone()),
                    "{at}"
                );
                assert_eq!(
                    verify_consistency::<H>(old_size, new_size, &old_root, &bad_new, &proof),
                    bad_new_result.clone(),
                    "{at}"
                );
            }
            if old_size != new_size && old_size > 0 {
                assert!(
                    verify_consistency::<H>(old_size, new_size, &new_root, &old_root, &proof).is_err(),
                    "{at}"
                );
                let other_new = roots[new_size as usize + 1];
                assert!(verify_consistency::<H>(old_size, new_size, &old_root, &other_new, &proof).is_err());
                let other_old = roots[old_size as usize - 1];
                assert!(verify_consistency::<H>(old_size, new_size, &other_old, &new_root, &proof).is_err());
            }

            if proof.is_empty() {
                // Equal sizes or an empty old tree: any hash at all is one too many.
                assert_eq!(
                    verify_consistency::<H>(old_size, new_size, &old_root, &new_root, &[zero]),
                    Err(ProofError::WrongProofLength {
                        expected: 0,
                        actual: 1
                    })
                );
                continue;
            }

            // Any single byte of the proof flipped.
            for (i, element) in proof.iter().enumerate() {
                for byte in 0..H::DIGEST_LEN_BYTES {
                    let mut bad = proof.clone();
                    bad[i] = flip_byte::<H>(element, byte);
                    let result = verify_consistency::<H>(old_size, new_size, &old_root, &new_root, &bad);
                    assert!(
                        matches!(
                            result,
                            Err(ProofError::OldRootMismatch | ProofError::NewRootMismatch)
                        ),
                        "{at}, element {i} byte {byte}: {result:?}"
                    );
                }
            }

            // Truncated, extended or prefixed proofs: the length is checked first.
            let expected = proof.len();
            let mut variants = vec![vec![], proof[..expected - 1].to_vec(), proof[1..].to_vec()];
            for extra in [zero, old_root, new_root, proof[0]] {
                let mut longer = proof.clone();
                longer.push(extra);
                variants.push(longer);
                let mut prefixed = vec![extra];
                prefixed.extend_from_slice(&proof);
                variants.push(prefixed);
            }
            for bad in variants {
                assert_eq!(
                    verify_consistency::<H>(old_size, new_size, &old_root, &new_root, &bad),
                    Err(ProofError::WrongProofLength {
                        expected,
                        actual: bad.len()
                    }),
                    "{at}"
                );
            }

            // Every wrong old or new size. As with inclusion, a proof binds the sizes only
            // through its shape; the definition-based verifier says which sizes share it, and
            // this one must agree. Doubling or halving a size never keeps it.
            // One wrong (old, new) pair: agrees with the reference, and a doubled or halved
            // size never verifies.
            let check_sizes = |o: u64, n: u64, doubled_or_halved: bool, what: &str| {
                let result = verify_consistency::<H>(o, n, &old_root, &new_root, &proof);
                let reference = reference_consistency_ok::<H>(o, n, &old_root, &new_root, &proof);
                assert_eq!(result.is_ok(), reference, "{at} as {what}: {result:?}");
                if doubled_or_halved {
                    assert!(result.is_err(), "{at} as {what}");
                }
            };
            for wrong_old in (1..=new_size).filter(|w| *w != old_size) {
                let halved = wrong_old == 2 * old_size || wrong_old == old_size / 2;
                check_sizes(wrong_old, new_size, halved, &format!("old size {wrong_old}"));
            }
            assert!(verify_consistency::<H>(0, new_size, &old_root, &new_root, &proof).is_err());
            for wrong_new in (old_size..=max_size + 2).filter(|w| *w != new_size) {
                let halved = wrong_new == 2 * new_size || wrong_new == new_size / 2;
                check_sizes(old_size, wrong_new, halved, &format!("new size {wrong_new}"));
            }
        }
    }
}

#[test]
fn consistency_proofs_verify_and_corruptions_fail_sha256() {
    consistency_proofs_verify_and_corruptions_fail::<Sha256>(MAX_PROOF_TREE_SIZE_SHA256);
}

#[test]
fn consistency_proofs_verify_and_corruptions_fail_blake3() {
    consistency_proofs_verify_and_corruptions_fail::<Blake3>(MAX_PROOF_TREE_SIZE);
}

/// A proof for one tree also proves each leaf against the compact tree's root, which is how
/// Engram will use the two together.
#[test]
fn proofs_verify_against_compact_tree_roots() {
    let leaves = leaf_hashes::<Blake3>(100);
    let mut tree = CompactTree::<Blake3>::new();
    let mut old = (0, tree.root());
    for (i, leaf) in leaves.iter().enumerate() {
        tree.push_leaf_hash(*leaf);
        let proof = inclusion_proof::<Blake3>(&leaves, i as u64, tree.size()).unwrap();
        verify_inclusion::<Blake3>(leaf, i as u64, tree.size(), &proof, &tree.root()).unwrap();
        if i % 7 == 0 {
            let proof = consistency_proof::<Blake3>(&leaves, old.0, tree.size()).unwrap();
            verify_consistency::<Blake3>(old.0, tree.size(), &old.1, &tree.root(), &proof).unwrap();
            old = (tree.size(), tree.root());
        }
    }
}

/// Leaves and interior nodes are hashed in separate domains: no leaf can pose as a node.
#[test]
fn blake3_leaf_and_node_hashes_are_domain_separated() {
    let (left, right) = (Blake3::hash_leaf(b"left"), Blake3::hash_leaf(b"right"));
    let mut both = left.to_vec();
    both.extend_from_slice(&right);
    // The same 64 bytes hashed as a leaf and as a node.
    assert_ne!(Blake3::hash_leaf(&both), Blake3::hash_children(&left, &right));
    // So a one-leaf tree whose leaf is the two hashes is not the two-leaf tree.
    let mut forged = CompactTree::<Blake3>::new();
    forged.push(&both);
    let mut honest = CompactTree::<Blake3>::new();
    honest.push_leaf_hash(left);
    honest.push_leaf_hash(right);
    assert_ne!(forged.root(), honest.root());
    // Neither shape is the bare hash of its input, and the empty leaf is not the empty tree.
    assert_ne!(Blake3::hash_leaf(&both), *blake3::hash(&both).as_bytes());
    assert_ne!(
        Blake3::hash_children(&left, &right),
        *blake3::hash(&both).as_bytes()
    );
    assert_ne!(Blake3::hash_leaf(b""), Blake3::empty_root());
    // The same holds for the SHA-256 instance.
    assert_ne!(Sha256::hash_leaf(&both), Sha256::hash_children(&left, &right));
}
