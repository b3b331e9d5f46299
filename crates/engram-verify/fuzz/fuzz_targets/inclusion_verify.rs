//! Inclusion proofs (RFC 9162 §2.1.3.2) with `Blake3`.
//!
//! 1. Arbitrary input, read as `index: u64 BE | size: u64 BE | leaf hash: 32 | root: 32 |
//!    proof: 32 * k` (a short tail is an undersized last proof element, which `parse_proof`
//!    must refuse by position). `verify_inclusion` and `root_from_inclusion_proof` must return
//!    `Ok` or `Err`, never panic, and agree with each other. Since a proof of the wrong length
//!    is refused before any hashing, the proof is also resized (cycling its elements) to the
//!    length `inclusion_proof_len` asks for, which reaches the hashing loop for any sizes; with
//!    the length right, `root_from_inclusion_proof` must succeed and its root must verify.
//! 2. An honest tree of `1 + data[0] % 64` leaves derived from the input: the real inclusion
//!    proof of leaf `data[1] % size` verifies against the real root (and `CompactTree` agrees
//!    on that root); then one bit, chosen by `data[2..4]`, is flipped in the index, the leaf
//!    hash, the root or a proof element, and verification must fail. (The size is not flipped:
//!    a proof legitimately fits every size for which the leaf's path has the same shape.)

#![no_main]

use engram_merkle::{
    Blake3, CompactTree, MerkleHasher, ProofError, inclusion_proof, inclusion_proof_len, parse_proof,
    root_from_inclusion_proof, subtree_root, verify_inclusion,
};
use libfuzzer_sys::fuzz_target;

type D = [u8; 32];

fn u64_at(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    for (i, x) in b.iter_mut().enumerate() {
        *x = data.get(at + i).copied().unwrap_or(0);
    }
    u64::from_be_bytes(b)
}

fn digest_at(data: &[u8], at: usize) -> D {
    let mut d = [0u8; 32];
    for (i, x) in d.iter_mut().enumerate() {
        *x = data.get(at + i).copied().unwrap_or(0);
    }
    d
}

fn check(leaf: &D, index: u64, size: u64, proof: &[D], root: &D) {
    let computed = root_from_inclusion_proof::<Blake3>(leaf, index, size, proof);
    let verified = verify_inclusion::<Blake3>(leaf, index, size, proof, root);
    match &computed {
        Ok(r) if r == root => assert_eq!(verified, Ok(())),
        Ok(_) => assert_eq!(verified, Err(ProofError::RootMismatch)),
        Err(e) => assert_eq!(verified.as_ref(), Err(e)),
    }
    match inclusion_proof_len(index, size) {
        Ok(len) if len == proof.len() => {
            assert!(computed.is_ok(), "a proof of the right length ({len}) failed: {computed:?}")
        }
        Ok(len) => assert_eq!(
            computed,
            Err(ProofError::WrongProofLength {
                expected: len,
                actual: proof.len()
            })
        ),
        Err(e) => assert_eq!(computed, Err(e)),
    }
}

fn arbitrary(data: &[u8]) {
    let index = u64_at(data, 0);
    let size = u64_at(data, 8);
    let leaf = digest_at(data, 16);
    let root = digest_at(data, 48);
    let tail = data.get(80..).unwrap_or_default();
    let elements: Vec<&[u8]> = tail.chunks(32).collect();
    let proof: Vec<D> = match parse_proof::<Blake3>(&elements) {
        Ok(proof) => {
            assert_eq!(tail.len() % 32, 0);
            proof
        }
        Err(e) => {
            assert_eq!(
                e,
                ProofError::DigestLength {
                    position: tail.len() / 32,
                    expected_len_bytes: 32,
                    actual_len_bytes: tail.len() % 32,
                }
            );
            tail.chunks_exact(32).map(|c| digest_at(c, 0)).collect()
        }
    };
    check(&leaf, index, size, &proof, &root);

    if let Ok(len) = inclusion_proof_len(index, size) {
        assert!(len <= 64, "an inclusion proof of {len} hashes for index {index} of {size}");
        let filler = if proof.is_empty() { vec![root] } else { proof.clone() };
        let resized: Vec<D> = filler.iter().copied().cycle().take(len).collect();
        check(&leaf, index, size, &resized, &root);
        let r = root_from_inclusion_proof::<Blake3>(&leaf, index, size, &resized)
            .expect("a proof of the right length leads to some root");
        assert_eq!(verify_inclusion::<Blake3>(&leaf, index, size, &resized, &r), Ok(()));
    }
}

fn flip(d: &mut D, bit: usize) {
    d[bit / 8] ^= 1 << (bit % 8);
}

fn honest(data: &[u8]) {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let size = 1 + u64::from(byte(0) % 64);
    let index = u64::from(byte(1)) % size;
    let selector = usize::from(u16::from_be_bytes([byte(2), byte(3)]));
    let leaves: Vec<D> = (0..size)
        .map(|i| {
            let i = i as usize;
            let mut leaf = vec![i as u8];
            leaf.extend_from_slice(data.get(4 + i * 2..4 + i * 2 + 2).unwrap_or_default());
            Blake3::hash_leaf(&leaf)
        })
        .collect();
    let root = subtree_root::<Blake3>(&leaves, 0, size).expect("the leaves are there");
    let mut compact = CompactTree::<Blake3>::new();
    for leaf in &leaves {
        compact.push_leaf_hash(*leaf);
    }
    assert_eq!(compact.size(), size);
    assert_eq!(compact.root(), root, "CompactTree and subtree_root disagree on the root");

    let proof = inclusion_proof::<Blake3>(&leaves, index, size).expect("index < size");
    assert_eq!(Ok(proof.len()), inclusion_proof_len(index, size));
    let leaf = leaves[index as usize];
    assert_eq!(
        verify_inclusion::<Blake3>(&leaf, index, size, &proof, &root),
        Ok(()),
        "an honest proof of leaf {index} in a tree of {size} fails"
    );
    assert_eq!(root_from_inclusion_proof::<Blake3>(&leaf, index, size, &proof), Ok(root));

    // One bit flipped, anywhere in (index, leaf hash, root, proof).
    let total_bits = 64 + 256 + 256 + 256 * proof.len();
    let bit = selector % total_bits;
    let (mut index_f, mut leaf_f, mut root_f, mut proof_f) = (index, leaf, root, proof.clone());
    let what = if bit < 64 {
        index_f ^= 1 << bit;
        "index"
    } else if bit < 64 + 256 {
        flip(&mut leaf_f, bit - 64);
        "leaf hash"
    } else if bit < 64 + 512 {
        flip(&mut root_f, bit - 64 - 256);
        "root"
    } else {
        let b = bit - 64 - 512;
        flip(&mut proof_f[b / 256], b % 256);
        "proof"
    };
    assert!(
        verify_inclusion::<Blake3>(&leaf_f, index_f, size, &proof_f, &root_f).is_err(),
        "leaf {index} of {size}: flipping bit {bit} ({what}) still verifies"
    );
}

fuzz_target!(|data: &[u8]| {
    arbitrary(data);
    honest(data);
});
