//! Consistency proofs (RFC 9162 §2.1.4.2) with `Blake3`.
//!
//! 1. Arbitrary input, read as `old_size: u64 BE | new_size: u64 BE | old root: 32 |
//!    new root: 32 | proof: 32 * k`. `verify_consistency` must return `Ok` or `Err`, never
//!    panic, and must refuse a proof whose length is not `consistency_proof_len`. The proof is
//!    also resized (cycling its elements) to that length, which reaches the hashing loop for any
//!    sizes. The documented edge cases are checked: equal sizes verify exactly when the roots
//!    are equal; an empty old tree verifies exactly when its root is `H()`.
//! 2. An honest tree of `1 + data[0] % 64` leaves derived from the input and an old size of
//!    `data[1] % (new_size + 1)`: the real consistency proof verifies between the real roots
//!    (and agrees in length with `consistency_proof_len`); then one bit, chosen by
//!    `data[2..4]`, is flipped in the old root, the new root or a proof element, and
//!    verification must fail. The sizes are not flipped: a proof binds two roots, and the sizes
//!    are only as good as the statement that gives them with the roots (a proof can fit other
//!    sizes). One documented exception is asserted as such: every tree extends the empty tree,
//!    so with `old_size == 0` any new root verifies.

#![no_main]

use engram_merkle::{
    Blake3, MerkleHasher, ProofError, consistency_proof, consistency_proof_len, inclusion_proof, subtree_root,
    verify_consistency, verify_inclusion,
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

fn check(old_size: u64, new_size: u64, old_root: &D, new_root: &D, proof: &[D]) {
    let result = verify_consistency::<Blake3>(old_size, new_size, old_root, new_root, proof);
    match consistency_proof_len(old_size, new_size) {
        Err(e) => assert_eq!(result, Err(e)),
        Ok(len) if len != proof.len() => assert_eq!(
            result,
            Err(ProofError::WrongProofLength {
                expected: len,
                actual: proof.len()
            })
        ),
        Ok(_) => {
            if old_size == 0 && old_root != &Blake3::empty_root() {
                assert_eq!(result, Err(ProofError::OldRootMismatch));
            } else if old_size == new_size {
                assert_eq!(result.is_ok(), old_root == new_root, "equal sizes: {result:?}");
            } else if old_size == 0 {
                assert_eq!(result, Ok(()), "every tree extends the empty tree");
            } else {
                // With the length right the RFC's own length checks always pass: the only
                // failures left are the two root mismatches.
                assert!(
                    matches!(
                        result,
                        Ok(()) | Err(ProofError::OldRootMismatch | ProofError::NewRootMismatch)
                    ),
                    "{old_size} -> {new_size}, proof of {}: {result:?}",
                    proof.len()
                );
            }
        }
    }
}

fn arbitrary(data: &[u8]) {
    let old_size = u64_at(data, 0);
    let new_size = u64_at(data, 8);
    let old_root = digest_at(data, 16);
    let new_root = digest_at(data, 48);
    let tail = data.get(80..).unwrap_or_default();
    let proof: Vec<D> = tail.chunks_exact(32).map(|c| digest_at(c, 0)).collect();
    check(old_size, new_size, &old_root, &new_root, &proof);

    if let Ok(len) = consistency_proof_len(old_size, new_size) {
        let filler = if proof.is_empty() { vec![new_root] } else { proof.clone() };
        let resized: Vec<D> = filler.iter().copied().cycle().take(len).collect();
        check(old_size, new_size, &old_root, &new_root, &resized);
        // And with the old root as the empty tree's, so that `old_size == 0` gets past it.
        check(old_size, new_size, &Blake3::empty_root(), &new_root, &resized);
    }
}

fn flip(d: &mut D, bit: usize) {
    d[bit / 8] ^= 1 << (bit % 8);
}

fn honest(data: &[u8]) {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let new_size = 1 + u64::from(byte(0) % 64);
    let old_size = u64::from(byte(1)) % (new_size + 1);
    let selector = usize::from(u16::from_be_bytes([byte(2), byte(3)]));
    let leaves: Vec<D> = (0..new_size)
        .map(|i| {
            let i = i as usize;
            let mut leaf = vec![i as u8];
            leaf.extend_from_slice(data.get(4 + i * 2..4 + i * 2 + 2).unwrap_or_default());
            Blake3::hash_leaf(&leaf)
        })
        .collect();
    let old_root = subtree_root::<Blake3>(&leaves, 0, old_size).expect("the leaves are there");
    let new_root = subtree_root::<Blake3>(&leaves, 0, new_size).expect("the leaves are there");
    if old_size == 0 {
        assert_eq!(old_root, Blake3::empty_root());
    }
    let proof = consistency_proof::<Blake3>(&leaves, old_size, new_size).expect("old <= new");
    assert_eq!(Ok(proof.len()), consistency_proof_len(old_size, new_size));
    assert_eq!(
        verify_consistency::<Blake3>(old_size, new_size, &old_root, &new_root, &proof),
        Ok(()),
        "an honest proof from {old_size} to {new_size} fails"
    );
    // The old tree's last leaf is in the new tree too: its inclusion proofs in both verify.
    if old_size > 0 {
        let last = old_size - 1;
        for (size, root) in [(old_size, old_root), (new_size, new_root)] {
            let path = inclusion_proof::<Blake3>(&leaves, last, size).expect("last < size");
            assert_eq!(verify_inclusion::<Blake3>(&leaves[last as usize], last, size, &path, &root), Ok(()));
        }
    }

    // One bit flipped, anywhere in (old root, new root, proof).
    let total_bits = 512 + 256 * proof.len();
    let bit = selector % total_bits;
    let (mut old_f, mut new_f, mut proof_f) = (old_root, new_root, proof.clone());
    let what = if bit < 256 {
        flip(&mut old_f, bit);
        "old root"
    } else if bit < 512 {
        flip(&mut new_f, bit - 256);
        "new root"
    } else {
        let b = bit - 512;
        flip(&mut proof_f[b / 256], b % 256);
        "proof"
    };
    let result = verify_consistency::<Blake3>(old_size, new_size, &old_f, &new_f, &proof_f);
    if old_size == 0 && what == "new root" {
        assert_eq!(result, Ok(()), "every tree extends the empty tree, whatever its root");
    } else {
        assert!(
            result.is_err(),
            "{old_size} -> {new_size}: flipping bit {bit} ({what}) still verifies"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    arbitrary(data);
    honest(data);
});
