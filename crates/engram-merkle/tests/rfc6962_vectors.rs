#![allow(clippy::unwrap_used)]
//! The published RFC 6962 (SHA-256) known-answer vectors for the eight-leaf reference tree.
//!
//! Sources (data only; no code is taken from them):
//! * google/certificate-transparency, `cpp/merkletree/merkle_tree_test.cc`: `kInputs`,
//!   `kSHA256EmptyTreeHash`, `kSHA256Roots`, `kSHA256Paths` and `kSHA256Proofs`;
//! * transparency-dev/merkle, `testonly/constants.go`: `NodeHashes` and `CompactTrees` (the
//!   same tree's perfect-subtree hashes; its `LeafInputs` and `RootHashes` repeat the above);
//! * transparency-dev/merkle, `proof/verify_test.go`: the one consistency vector (6 -> 7) the
//!   C++ file lacks; its other vectors repeat the C++ ones.
//!
//! The C++ file numbers leaves from 1 in its paths; the constants below use 0-based indices.

mod support;

use std::ops::Range;

use engram_merkle::{
    CompactTree, MerkleHasher, ProofError, consistency_proof, inclusion_proof, subtree_root,
    verify_consistency, verify_inclusion,
};
use support::{Sha256, reference_path_ranges, reference_subproof_ranges};

type Digest = [u8; 32];

/// The leaf inputs, hex-encoded (`kInputs`).
const LEAF_INPUTS_HEX: [&str; 8] = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
];

/// SHA-256 of the empty string: the empty tree's root (`kSHA256EmptyTreeHash`).
const EMPTY_ROOT_HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Roots of the trees of the first 1, 2, ..., 8 leaves (`kSHA256Roots`).
const ROOTS_HEX: [&str; 8] = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

/// Hashes of every perfect subtree of the eight-leaf tree (`NodeHashes`): `NODE_HASHES_HEX[l][i]`
/// is the root of leaves `i * 2^l .. (i + 1) * 2^l`. Level 0 holds the leaf hashes.
const NODE_HASHES_HEX: [&[&str]; 4] = [
    &[
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
        "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
        "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
        "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
    ],
    &[
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    ],
    &[
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    ],
    &["5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"],
];

/// The compact-tree frontier of each tree size 0..=8, as (level, index) into `NODE_HASHES_HEX`
/// (`CompactTrees`).
const FRONTIERS: [&[(usize, usize)]; 9] = [
    &[],
    &[(0, 0)],
    &[(1, 0)],
    &[(1, 0), (0, 2)],
    &[(2, 0)],
    &[(2, 0), (0, 4)],
    &[(2, 0), (1, 2)],
    &[(2, 0), (1, 2), (0, 6)],
    &[(3, 0)],
];

/// Published inclusion paths: (0-based leaf index, tree size, path) (`kSHA256Paths`, whose
/// leaf numbers are these plus one; its entry for leaf "0" of size 0 is the invalid case, tested
/// separately).
const INCLUSION_VECTORS: [(u64, u64, &[&str]); 5] = [
    (0, 1, &[]),
    (
        0,
        8,
        &[
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        &[
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        3,
        &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
    ),
    (
        1,
        5,
        &[
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
];

/// Published consistency proofs: (old size, new size, proof) (`kSHA256Proofs`, and 6 -> 7 from
/// `verify_test.go`).
const CONSISTENCY_VECTORS: [(u64, u64, &[&str]); 5] = [
    (1, 1, &[]),
    (
        1,
        8,
        &[
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        &[
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        &[
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        &[
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
];

fn digest(hex_str: &str) -> Digest {
    hex::decode(hex_str).unwrap().try_into().unwrap()
}

fn digests(hex_strs: &[&str]) -> Vec<Digest> {
    hex_strs.iter().map(|h| digest(h)).collect()
}

fn leaf_inputs() -> Vec<Vec<u8>> {
    LEAF_INPUTS_HEX.iter().map(|h| hex::decode(h).unwrap()).collect()
}

fn leaf_hashes() -> Vec<Digest> {
    leaf_inputs().iter().map(|leaf| Sha256::hash_leaf(leaf)).collect()
}

/// The published root of the tree of the first `size` leaves.
fn root(size: u64) -> Digest {
    match size {
        0 => digest(EMPTY_ROOT_HEX),
        _ => digest(ROOTS_HEX[size as usize - 1]),
    }
}

/// The hash of the leaves `range`, built from published hashes alone: a perfect subtree's or a
/// prefix's is published; any other range (in this tree only 4..7) is split as RFC 9162 §2.1.1
/// splits it until its parts are published, and those hashed together.
fn published_range_hash(range: &Range<u64>) -> Digest {
    let len = range.end - range.start;
    if len.is_power_of_two() && range.start.is_multiple_of(len) {
        let level = len.trailing_zeros() as usize;
        return digest(NODE_HASHES_HEX[level][(range.start / len) as usize]);
    }
    if range.start == 0 {
        return root(range.end);
    }
    let mid = range.start + support::reference_split(len);
    Sha256::hash_children(
        &published_range_hash(&(range.start..mid)),
        &published_range_hash(&(mid..range.end)),
    )
}

#[test]
fn empty_tree_root_is_sha256_of_nothing() {
    assert_eq!(Sha256::empty_root(), digest(EMPTY_ROOT_HEX));
    assert_eq!(CompactTree::<Sha256>::new().root(), digest(EMPTY_ROOT_HEX));
    assert_eq!(
        subtree_root::<Sha256>(&leaf_hashes(), 0, 0).unwrap(),
        digest(EMPTY_ROOT_HEX)
    );
}

#[test]
fn leaf_hashes_match_published_level_zero() {
    assert_eq!(leaf_hashes(), digests(NODE_HASHES_HEX[0]));
}

#[test]
fn roots_match_for_every_size() {
    let leaves = leaf_hashes();
    let mut tree = CompactTree::<Sha256>::new();
    assert_eq!(tree.root(), root(0));
    for (i, input) in leaf_inputs().iter().enumerate() {
        assert_eq!(tree.push(input), i as u64);
        let size = tree.size();
        assert_eq!(tree.root(), root(size), "compact tree, size {size}");
        assert_eq!(
            subtree_root::<Sha256>(&leaves, 0, size).unwrap(),
            root(size),
            "subtree_root, size {size}"
        );
    }
}

#[test]
fn perfect_subtree_hashes_match() {
    let leaves = leaf_hashes();
    for (level, hashes) in NODE_HASHES_HEX.iter().enumerate() {
        let width = 1u64 << level;
        for (i, hash) in hashes.iter().enumerate() {
            let start = i as u64 * width;
            assert_eq!(
                subtree_root::<Sha256>(&leaves, start, start + width).unwrap(),
                digest(hash),
                "level {level} index {i}"
            );
        }
    }
}

#[test]
fn compact_tree_frontiers_match() {
    let mut tree = CompactTree::<Sha256>::new();
    for (size, frontier) in FRONTIERS.iter().enumerate() {
        if size > 0 {
            tree.push(&leaf_inputs()[size - 1]);
        }
        let expected: Vec<Digest> = frontier
            .iter()
            .map(|&(level, index)| digest(NODE_HASHES_HEX[level][index]))
            .collect();
        assert_eq!(tree.frontier(), expected.as_slice(), "size {size}");
    }
}

#[test]
fn published_inclusion_paths_are_computed_and_verify() {
    let leaves = leaf_hashes();
    for (index, size, path) in INCLUSION_VECTORS {
        let expected = digests(path);
        assert_eq!(
            inclusion_proof::<Sha256>(&leaves, index, size).unwrap(),
            expected,
            "({index}, {size})"
        );
        verify_inclusion::<Sha256>(&leaves[index as usize], index, size, &expected, &root(size)).unwrap();
    }
}

#[test]
fn published_consistency_proofs_are_computed_and_verify() {
    let leaves = leaf_hashes();
    for (old_size, new_size, proof) in CONSISTENCY_VECTORS {
        let expected = digests(proof);
        assert_eq!(
            consistency_proof::<Sha256>(&leaves, old_size, new_size).unwrap(),
            expected,
            "({old_size}, {new_size})"
        );
        verify_consistency::<Sha256>(old_size, new_size, &root(old_size), &root(new_size), &expected)
            .unwrap();
    }
}

/// Every (index, size) pair of the eight-leaf tree: the path the crate computes is the one
/// RFC 9162 §2.1.3.1 defines, hashed from published hashes only, and it verifies against the
/// published root.
#[test]
fn every_inclusion_path_in_the_reference_tree() {
    let leaves = leaf_hashes();
    for size in 1..=8u64 {
        for index in 0..size {
            let expected: Vec<Digest> = reference_path_ranges(index, 0..size)
                .iter()
                .map(published_range_hash)
                .collect();
            let proof = inclusion_proof::<Sha256>(&leaves, index, size).unwrap();
            assert_eq!(proof, expected, "({index}, {size})");
            verify_inclusion::<Sha256>(&leaves[index as usize], index, size, &proof, &root(size)).unwrap();
        }
    }
}

/// Every (old, new) pair of the eight-leaf tree, likewise for RFC 9162 §2.1.4.1.
#[test]
fn every_consistency_proof_in_the_reference_tree() {
    let leaves = leaf_hashes();
    for new_size in 0..=8u64 {
        for old_size in 0..=new_size {
            let expected: Vec<Digest> = if old_size == 0 {
                vec![]
            } else {
                reference_subproof_ranges(old_size, 0..new_size, true)
                    .iter()
                    .map(published_range_hash)
                    .collect()
            };
            let proof = consistency_proof::<Sha256>(&leaves, old_size, new_size).unwrap();
            assert_eq!(proof, expected, "({old_size}, {new_size})");
            verify_consistency::<Sha256>(old_size, new_size, &root(old_size), &root(new_size), &proof)
                .unwrap();
        }
    }
}

/// The invalid requests of the published suites (`MerkleVerifierTest.VerifyPath` and
/// `VerifyConsistencyProof`), with the precise error each must give here.
#[test]
fn published_invalid_cases_fail_precisely() {
    let empty_root = digest(EMPTY_ROOT_HEX);
    let leaf = Sha256::hash_leaf(b"");
    // Leaf index not below the tree size, including the empty tree.
    for (index, size) in [(0, 0), (1, 0), (1, 1), (2, 1)] {
        assert_eq!(
            verify_inclusion::<Sha256>(&leaf, index, size, &[], &empty_root),
            Err(ProofError::IndexOutOfRange { index, size })
        );
    }
    // A one-leaf tree whose root is not the leaf hash.
    assert_eq!(
        verify_inclusion::<Sha256>(&leaf, 0, 1, &[], &empty_root),
        Err(ProofError::RootMismatch)
    );

    let some_root = digest(ROOTS_HEX[3]);
    let other_root = digest(ROOTS_HEX[4]);
    // Time travel to the past.
    for (old_size, new_size) in [(1, 0), (2, 1)] {
        assert_eq!(
            verify_consistency::<Sha256>(old_size, new_size, &some_root, &other_root, &[]),
            Err(ProofError::OldSizeExceedsNewSize { old_size, new_size })
        );
    }
    // An empty proof between different sizes.
    assert_eq!(
        verify_consistency::<Sha256>(1, 2, &some_root, &other_root, &[]),
        Err(ProofError::WrongProofLength {
            expected: 1,
            actual: 0
        })
    );
    // Equal sizes, different roots.
    assert_eq!(
        verify_consistency::<Sha256>(1, 1, &some_root, &other_root, &[]),
        Err(ProofError::NewRootMismatch)
    );
    // The empty tree has one root; equal sizes 0 need it on both sides.
    assert_eq!(
        verify_consistency::<Sha256>(0, 0, &some_root, &some_root, &[]),
        Err(ProofError::OldRootMismatch)
    );
    assert_eq!(
        verify_consistency::<Sha256>(0, 0, &empty_root, &some_root, &[]),
        Err(ProofError::NewRootMismatch)
    );
    // Sizes that are always consistent, given the right roots.
    verify_consistency::<Sha256>(0, 0, &empty_root, &empty_root, &[]).unwrap();
    verify_consistency::<Sha256>(0, 1, &empty_root, &other_root, &[]).unwrap();
    verify_consistency::<Sha256>(1, 1, &some_root, &some_root, &[]).unwrap();
    // Roots that match, but a proof that should be empty is not.
    for (old_size, new_size) in [(0, 0), (0, 1), (1, 1)] {
        assert_eq!(
            verify_consistency::<Sha256>(old_size, new_size, &empty_root, &empty_root, &[empty_root]),
            Err(ProofError::WrongProofLength {
                expected: 0,
                actual: 1
            })
        );
    }
}
