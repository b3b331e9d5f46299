//! Batched checking of the attestations a [`crate::ChainVerifier`] deferred.
//!
//! Ed25519 batch verification checks many signatures with one multi-scalar multiplication,
//! several times faster per signature than checking them one by one (3.7 times on one core in
//! docs/benchmarks.md), but it only says whether the whole batch holds. A failed batch is
//! therefore re-checked signature by signature with `verify_strict`, which names exactly the
//! entries at fault.
//!
//! # How close this is to `verify_strict`
//!
//! The inline verifier uses `verify_strict`; `ed25519_dalek::verify_batch` is not strict. For
//! every signature that was not crafted by the holder of the signing key the two agree:
//! honest signatures pass both, and a signature altered by anyone else (random corruption, a
//! changed entry, an `R` or `s` swapped for another encoding or a torsion-shifted point) changes
//! `H(R || A || M)` or fails the canonical-`s` check both apply, so it fails both (short of
//! about 2^128 work against the batch's coefficients, which are hashed from all its inputs).
//!
//! Keys are where the two could differ for everyone: under a small-order public key a batch can
//! accept signatures anyone can make (under the identity, `R = sB` passes for any `s`), where
//! `verify_strict` refuses every signature. Attestations by such weak keys, and by keys that do
//! not decode, are therefore never batched: they are checked one by one with `verify_strict`,
//! exactly as inline.
//!
//! The residual difference: the holder of a signing key can craft signatures with a small-order
//! or mixed-order `R` (or register a mixed-order key) that `verify_strict` refuses and a batch
//! accepts (always for an `R` of order 1, otherwise depending on the batch's coefficients, with
//! probability up to 1/2). That gives the key holder nothing it could not have by signing
//! honestly; it only lets it make an attestation that this mode accepts and the inline mode
//! reports as a bad signature.

use std::collections::BTreeMap;

use ed25519_dalek::{Signature, VerifyingKey};
use engram_types::Hash;

use crate::{ChainError, ChainFault, PublicKey};

/// How many signatures one `verify_batch` call checks. Larger batches amortise the
/// multi-scalar multiplication better: on one core of the benchmark machine
/// (docs/benchmarks.md), batches of 64 checked about 30% fewer signatures a second than batches
/// of 1024, batches of 256 about 10% fewer. A failed batch costs this many single checks (some
/// 50 ms), which only a damaged chain pays. Tests use small batches so that a chain of a few
/// hundred entries spans several batches and threads.
const BATCH: usize = if cfg!(test) { 16 } else { 1024 };

/// Below this many signatures per thread a spawned thread costs more than it saves.
const MIN_PER_THREAD: usize = 2 * BATCH;

/// An attestation by a key the chain already trusted when its entry was checked.
#[derive(Debug, Clone)]
pub(crate) struct Deferred {
    /// The entry's position in the chain.
    pub index: u64,
    pub hash: Hash,
    pub key: PublicKey,
    pub signature: [u8; 64],
    /// What the inline check would report if the signature verifies (the signer was rotated
    /// out or revoked before this entry); boxed because it is almost always `None`.
    pub invalid: Option<Box<ChainFault>>,
}

/// A signer as the batch sees it: decoded once per key, not once per signature.
#[derive(Clone, Copy)]
enum Signer {
    Batched(VerifyingKey),
    /// Weak or undecodable: checked one by one with `verify_strict`.
    Single,
}

/// Checks every deferred attestation on `threads` threads and returns the faults the inline
/// check would have reported, ordered by chain index.
pub(crate) fn verify(queue: &[Deferred], threads: usize) -> Vec<ChainError> {
    if queue.is_empty() {
        return Vec::new();
    }
    let mut signers: BTreeMap<[u8; 32], Signer> = BTreeMap::new();
    for item in queue {
        signers
            .entry(item.key.0)
            .or_insert_with(|| match VerifyingKey::from_bytes(&item.key.0) {
                Ok(key) if !key.is_weak() => Signer::Batched(key),
                _ => Signer::Single,
            });
    }
    let threads = threads.clamp(1, queue.len().div_ceil(MIN_PER_THREAD).max(1));
    let mut errors = if threads == 1 {
        verify_slice(queue, &signers)
    } else {
        let chunk = queue.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let workers: Vec<_> = queue
                .chunks(chunk)
                .map(|part| scope.spawn(|| verify_slice(part, &signers)))
                .collect();
            workers
                .into_iter()
                .flat_map(|worker| match worker.join() {
                    Ok(errors) => errors,
                    // A panic in signature code is a bug; surface it, do not report a verdict.
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect::<Vec<_>>()
        })
    };
    errors.sort_by_key(|e| e.index);
    errors
}

fn verify_slice(items: &[Deferred], signers: &BTreeMap<[u8; 32], Signer>) -> Vec<ChainError> {
    let mut errors = Vec::new();
    let mut batch: Vec<(&Deferred, VerifyingKey)> = Vec::with_capacity(BATCH);
    for item in items {
        match signers.get(&item.key.0) {
            Some(Signer::Batched(key)) => {
                batch.push((item, *key));
                if batch.len() == BATCH {
                    verify_batch(&batch, &mut errors);
                    batch.clear();
                }
            }
            Some(Signer::Single) | None => judge(
                item,
                item.key.verify(item.hash.as_bytes(), &item.signature),
                &mut errors,
            ),
        }
    }
    verify_batch(&batch, &mut errors);
    errors
}

fn verify_batch(batch: &[(&Deferred, VerifyingKey)], errors: &mut Vec<ChainError>) {
    if batch.is_empty() {
        return;
    }
    let messages: Vec<&[u8]> = batch
        .iter()
        .map(|(item, _)| item.hash.as_bytes().as_slice())
        .collect();
    let signatures: Vec<Signature> = batch
        .iter()
        .map(|(item, _)| Signature::from_bytes(&item.signature))
        .collect();
    let keys: Vec<VerifyingKey> = batch.iter().map(|(_, key)| *key).collect();
    let all_good = ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok();
    for ((item, key), signature) in batch.iter().zip(&signatures) {
        // A passed batch vouches for each signature in it; a failed one only says that some
        // signature is bad, so each is then judged on its own, exactly as inline.
        let good = all_good || key.verify_strict(item.hash.as_bytes(), signature).is_ok();
        judge(item, good, errors);
    }
}

/// The inline rule: a bad signature first; a good one by a key no longer valid second.
fn judge(item: &Deferred, signature_ok: bool, errors: &mut Vec<ChainError>) {
    let fault = if !signature_ok {
        Some(ChainFault::BadSignature(item.key.key_id()))
    } else {
        item.invalid.as_deref().cloned()
    };
    if let Some(fault) = fault {
        errors.push(ChainError {
            index: item.index,
            fault,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeKey;

    fn items(count: u64, key: &NodeKey) -> Vec<Deferred> {
        (1..=count)
            .map(|index| {
                let hash = Hash::of(&index.to_be_bytes());
                Deferred {
                    index,
                    hash,
                    key: key.public(),
                    signature: key.sign(hash.as_bytes()),
                    invalid: None,
                }
            })
            .collect()
    }

    #[test]
    fn bad_signatures_are_named_in_any_batch_and_on_any_thread() {
        let key = NodeKey::from_seed([1; 32]);
        let mut queue = items(3 * BATCH as u64 + 17, &key);
        // Two in one batch, one in the last (partial) batch, one on the first signature.
        for at in [0, 5, 9, 3 * BATCH + 10] {
            queue[at].signature[40] ^= 0x10;
        }
        for threads in [1, 2, 3, 8] {
            let found: Vec<u64> = verify(&queue, threads).iter().map(|e| e.index).collect();
            assert_eq!(found, vec![1, 6, 10, 3 * BATCH as u64 + 11], "{threads} threads");
        }
        assert!(verify(&items(BATCH as u64 + 1, &key), 2).is_empty());
    }

    #[test]
    fn a_weak_key_gets_no_signature_through_although_a_batch_would_take_it() {
        // The identity point as a public key, and a "signature" with R = 0·B and s = 0: the
        // batch equation holds for any message, the strict check refuses it.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let weak = PublicKey(identity);
        let mut signature = [0u8; 64];
        signature[0] = 1;
        let hash = Hash::of(b"anything");
        let key = VerifyingKey::from_bytes(&identity).unwrap();
        let sig = Signature::from_bytes(&signature);
        assert!(ed25519_dalek::verify_batch(&[hash.as_bytes()], &[sig], &[key]).is_ok());
        assert!(!weak.verify(hash.as_bytes(), &signature));

        let honest = NodeKey::from_seed([2; 32]);
        let mut queue = items(40, &honest);
        queue.push(Deferred {
            index: 41,
            hash,
            key: weak,
            signature,
            invalid: None,
        });
        let errors = verify(&queue, 1);
        assert_eq!(
            errors,
            vec![ChainError {
                index: 41,
                fault: ChainFault::BadSignature(weak.key_id()),
            }]
        );
    }

    #[test]
    fn validity_is_reported_only_for_good_signatures() {
        let key = NodeKey::from_seed([3; 32]);
        let mut queue = items(3, &key);
        let retired = ChainFault::RetiredSigner {
            key: key.key_id(),
            how: "revoked",
            at: 1,
        };
        queue[1].invalid = Some(Box::new(retired.clone()));
        queue[2].invalid = Some(Box::new(retired.clone()));
        queue[2].signature[0] ^= 1;
        let errors = verify(&queue, 1);
        assert_eq!(
            errors,
            vec![
                ChainError {
                    index: 2,
                    fault: retired
                },
                ChainError {
                    index: 3,
                    fault: ChainFault::BadSignature(key.key_id())
                },
            ]
        );
    }
}
