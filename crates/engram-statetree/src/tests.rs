use crate::shape::subtree_hash;
use crate::*;

/// A small deterministic generator, so every run checks the same maps.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn digest(&mut self) -> Digest {
        let mut d = [0u8; 32];
        for chunk in d.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_be_bytes());
        }
        d
    }
}

/// An entity-like key: 16 bytes naming an entity, 16 naming an attribute, the layout Engram
/// gives a slot.
fn slot(entity: u8, attribute: u8) -> Key {
    let mut k = [0u8; 32];
    k[..16].copy_from_slice(&blake3::hash(&[b'e', entity]).as_bytes()[..16]);
    k[16..].copy_from_slice(&blake3::hash(&[b'a', attribute]).as_bytes()[..16]);
    k
}

fn value(n: u64) -> Digest {
    blake3::hash(&n.to_be_bytes()).into()
}

#[test]
fn the_root_is_a_function_of_the_pairs_alone() {
    // Random writes and removals, some of keys that differ only in their last bits: after each,
    // the root equals the one built from the pairs from scratch, in another order.
    let mut rng = Lcg(7);
    let mut tree = StateTree::new();
    let mut model = std::collections::BTreeMap::new();
    let keys: Vec<Key> = (0..64)
        .map(|i| {
            let mut k = rng.digest();
            if i % 4 == 0 {
                // Neighbours: the same key with its last byte changed.
                k[31] ^= 1 + (i as u8 % 7);
            }
            k
        })
        .collect();
    for round in 0..2_000 {
        let key = keys[rng.below(keys.len() as u64) as usize];
        if rng.below(3) == 0 {
            assert_eq!(tree.remove(&key), model.remove(&key), "round {round}");
        } else {
            let v = value(rng.below(5));
            tree.insert(key, v);
            model.insert(key, v);
        }
        assert_eq!(tree.len(), model.len() as u64);
        let pairs: Vec<(Key, Digest)> = model.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(tree.pairs(), pairs);
        assert_eq!(tree.root(), subtree_hash(&pairs), "round {round}");
        let reversed = StateTree::from_pairs(pairs.iter().rev().copied());
        assert_eq!(reversed.root(), tree.root(), "round {round}");
    }
    assert_eq!(StateTree::new().root(), empty_root());
}

#[test]
fn writing_what_a_key_holds_changes_nothing_and_versions_stay_apart() {
    let mut tree = StateTree::from_pairs((0..100).map(|i| (slot(i, 0), value(u64::from(i)))));
    let before = tree.clone();
    let root = tree.root();
    tree.insert(slot(5, 0), value(5));
    assert_eq!(tree.root(), root);
    tree.insert(slot(5, 0), value(500));
    tree.insert(slot(200, 1), value(1));
    assert!(tree.remove(&slot(6, 0)).is_some());
    assert_ne!(tree.root(), root);
    // The earlier version is untouched, and its proofs are still against its own root.
    assert_eq!(before.root(), root);
    assert_eq!(before.get(&slot(5, 0)), Some(value(5)));
    assert_eq!(
        before.prove(&slot(6, 0)).verify(&root, &slot(6, 0)),
        Ok(Some(value(6)))
    );
    assert_eq!(before.prove(&slot(200, 1)).verify(&root, &slot(200, 1)), Ok(None));
    assert_eq!(tree.get(&slot(5, 0)), Some(value(500)));
    assert_eq!(tree.len(), 100);
}

#[test]
fn an_update_sees_what_the_key_held_and_a_declined_one_changes_nothing() {
    // `update` against a model map: it sees what the key holds, the root is the one built from
    // the model's pairs from scratch, and an update that declines leaves root and length as
    // they were (absent keys, present ones, and the empty map).
    let mut rng = Lcg(11);
    let mut tree = StateTree::new();
    let mut model = std::collections::BTreeMap::new();
    assert_eq!(tree.update(slot(1, 1), |_| None), None);
    assert!(tree.is_empty());
    let keys: Vec<Key> = (0..40).map(|i| slot(i, i % 3)).collect();
    for round in 0..1_000u64 {
        let key = keys[rng.below(keys.len() as u64) as usize];
        let (root, len) = (tree.root(), tree.len());
        if rng.below(4) == 0 {
            let mut seen = None;
            let set = tree.update(key, |prev| {
                seen = Some(prev.copied());
                None
            });
            assert_eq!(set, None, "round {round}");
            assert_eq!(seen, Some(model.get(&key).copied()), "round {round}");
            assert_eq!((tree.root(), tree.len()), (root, len), "round {round}");
            continue;
        }
        let fresh = value(round);
        let expected_prev = model.get(&key).copied();
        let set = tree.update(key, |prev| {
            assert_eq!(prev.copied(), expected_prev, "round {round}");
            Some(fresh)
        });
        assert_eq!(set, Some(fresh));
        model.insert(key, fresh);
        let built = StateTree::from_pairs(model.iter().map(|(k, v)| (*k, *v)));
        assert_eq!(tree.root(), built.root(), "round {round}");
        assert_eq!(tree.len(), model.len() as u64, "round {round}");
    }
}

#[test]
fn key_proofs_show_presence_and_absence() {
    let mut rng = Lcg(11);
    for size in [0usize, 1, 2, 3, 17, 500] {
        let pairs: Vec<(Key, Digest)> = (0..size).map(|_| (rng.digest(), rng.digest())).collect();
        let tree = StateTree::from_pairs(pairs.clone());
        let root = tree.root();
        for (k, v) in &pairs {
            let proof = tree.prove(k);
            assert_eq!(proof.verify(&root, k), Ok(Some(*v)), "size {size}");
            let decoded = KeyProof::decode(&proof.encode()).unwrap();
            assert_eq!(decoded, proof);
        }
        for _ in 0..50 {
            let absent = rng.digest();
            let proof = tree.prove(&absent);
            assert_eq!(proof.verify(&root, &absent), Ok(None), "size {size}");
            // The same proof says nothing of another key: it is refused, not read as absence.
            if let Some((k, _)) = pairs.first()
                && let Ok(found) = proof.verify(&root, k)
            {
                assert_eq!(found, tree.get(k), "a proof answered for another key");
            }
        }
        // Keys next to a present one (last bit flipped) are absent, proven by its leaf.
        if let Some((k, _)) = pairs.first() {
            let mut near = *k;
            near[31] ^= 1;
            assert_eq!(tree.prove(&near).verify(&root, &near), Ok(None));
        }
    }
}

#[test]
fn every_altered_byte_of_a_key_proof_is_refused() {
    let mut rng = Lcg(3);
    let pairs: Vec<(Key, Digest)> = (0..200).map(|_| (rng.digest(), rng.digest())).collect();
    let tree = StateTree::from_pairs(pairs.clone());
    let root = tree.root();
    let present = pairs[10].0;
    let absent = rng.digest();
    for (key, want) in [(present, Some(pairs[10].1)), (absent, None)] {
        let bytes = tree.prove(&key).encode();
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                let verdict = KeyProof::decode(&bad).and_then(|p| p.verify(&root, &key));
                assert!(
                    verdict.is_err(),
                    "byte {i} ^ {flip:#x} still verified: {verdict:?} (want {want:?})"
                );
            }
        }
        assert!(matches!(
            KeyProof::decode(&bytes[..bytes.len() - 1]),
            Err(ProofError::Truncated { .. })
        ));
        assert!(matches!(
            KeyProof::decode(&[bytes.as_slice(), &[0]].concat()),
            Err(ProofError::TrailingBytes { extra: 1 })
        ));
        // Against another root, and for another key with a present key's proof.
        let other_root = value(1);
        assert!(matches!(
            tree.prove(&key).verify(&other_root, &key),
            Err(ProofError::RootMismatch { .. })
        ));
    }
    let proof_of_present = tree.prove(&present);
    let verdict = proof_of_present.verify(&root, &pairs[11].0);
    assert!(verdict.is_err(), "{verdict:?}");
}

#[test]
fn prefix_proofs_list_every_slot_of_an_entity_and_nothing_else() {
    // 40 entities with 0 to 12 attributes each: a prefix proof over an entity's 128 bits lists
    // exactly its slots; an entity without any is proven empty.
    let mut rng = Lcg(5);
    let mut pairs = Vec::new();
    for e in 0..40u8 {
        for a in 0..(e % 13) {
            pairs.push((slot(e, a), rng.digest()));
        }
    }
    let tree = StateTree::from_pairs(pairs.clone());
    let root = tree.root();
    for e in 0..45u8 {
        let prefix = slot(e, 0);
        let mut want: Vec<(Key, Digest)> = pairs
            .iter()
            .filter(|(k, _)| k[..16] == prefix[..16])
            .copied()
            .collect();
        want.sort();
        let proof = tree.prove_prefix(&prefix, 128);
        assert_eq!(proof.verify(&root, &prefix, 128), Ok(want.clone()), "entity {e}");
        let decoded = PrefixProof::decode(&proof.encode()).unwrap();
        assert_eq!(decoded.verify(&root, &prefix, 128), Ok(want.clone()));

        if let PrefixEnd::Subtree(leaves) = &proof.end {
            // One slot left out, one added from another entity, two swapped: each refused.
            if leaves.len() > 1 {
                for drop in 0..leaves.len() {
                    let mut fewer = proof.clone();
                    let PrefixEnd::Subtree(l) = &mut fewer.end else {
                        unreachable!()
                    };
                    l.remove(drop);
                    assert!(matches!(
                        fewer.verify(&root, &prefix, 128),
                        Err(ProofError::RootMismatch { .. })
                    ));
                }
                let mut swapped = proof.clone();
                let PrefixEnd::Subtree(l) = &mut swapped.end else {
                    unreachable!()
                };
                l.swap(0, 1);
                assert_eq!(
                    swapped.verify(&root, &prefix, 128),
                    Err(ProofError::Unsorted { index: 1 })
                );
            }
            let mut more = proof.clone();
            let PrefixEnd::Subtree(l) = &mut more.end else {
                unreachable!()
            };
            l.push((slot(e.wrapping_add(1), 0), value(0)));
            assert!(more.verify(&root, &prefix, 128).is_err());
            // A stale value in the listing.
            let mut stale = proof.clone();
            let PrefixEnd::Subtree(l) = &mut stale.end else {
                unreachable!()
            };
            l[0].1 = value(99);
            assert!(matches!(
                stale.verify(&root, &prefix, 128),
                Err(ProofError::RootMismatch { .. })
            ));
        } else {
            assert!(want.is_empty(), "entity {e} proven empty but holds slots");
            // Claiming an empty entity as a subtree with nothing in it is refused.
            let empty = PrefixProof {
                steps: proof.steps.clone(),
                end: PrefixEnd::Subtree(Vec::new()),
            };
            assert_eq!(empty.verify(&root, &prefix, 128), Err(ProofError::EmptySubtree));
        }
        // A proof of one entity is not a proof of another's.
        let other = slot(e.wrapping_add(1), 0);
        if let Ok(listed) = proof.verify(&root, &other, 128) {
            let mut theirs: Vec<(Key, Digest)> = pairs
                .iter()
                .filter(|(k, _)| k[..16] == other[..16])
                .copied()
                .collect();
            theirs.sort();
            assert_eq!(listed, theirs, "a proof of entity {e} answered for another");
        }
    }
    // Every bit length, on a map with neighbours: the listing is every key with the prefix.
    let sample = pairs[7].0;
    for bits in 0..=256u16 {
        let proof = tree.prove_prefix(&sample, bits);
        let want: Vec<(Key, Digest)> = tree
            .pairs()
            .into_iter()
            .filter(|(k, _)| masked(k, bits) == masked(&sample, bits))
            .collect();
        assert_eq!(proof.verify(&root, &sample, bits), Ok(want), "{bits} bits");
    }
}

#[test]
fn every_altered_byte_of_a_prefix_proof_is_refused() {
    let mut rng = Lcg(9);
    let mut pairs = Vec::new();
    for e in 0..30u8 {
        for a in 0..4 {
            pairs.push((slot(e, a), rng.digest()));
        }
    }
    let tree = StateTree::from_pairs(pairs);
    let root = tree.root();
    for e in [3u8, 200] {
        let prefix = slot(e, 0);
        let bytes = tree.prove_prefix(&prefix, 128).encode();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            let verdict = PrefixProof::decode(&bad).and_then(|p| p.verify(&root, &prefix, 128));
            assert!(
                verdict.is_err(),
                "entity {e}: byte {i} altered still verified: {verdict:?}"
            );
        }
    }
}

#[test]
fn malformed_proofs_are_refused_by_name_and_never_panic() {
    assert_eq!(
        KeyProof::decode(&[]),
        Err(ProofError::Truncated { what: "format" })
    );
    assert_eq!(
        KeyProof::decode(&[2, 0, 0, 0]),
        Err(ProofError::Format {
            found: 2,
            supported: 1
        })
    );
    assert_eq!(
        KeyProof::decode(&[1, 0, 0, 9]),
        Err(ProofError::Tag { what: "end", tag: 9 })
    );
    assert_eq!(
        KeyProof::decode(&[1, 0, 0, 3]),
        Err(ProofError::Tag { what: "end", tag: 3 })
    );
    assert_eq!(
        PrefixProof::decode(&[1, 0, 0, 3, 0xFF, 0xFF, 0xFF, 0xFF]),
        Err(ProofError::Truncated {
            what: "the subtree's keys"
        })
    );
    assert_eq!(
        KeyProof::decode(&[1, 0xFF, 0xFF]),
        Err(ProofError::Truncated { what: "the steps" })
    );
    // Steps out of order, an empty map with steps, a branch end that does not leave the path.
    let key = value(1);
    let unordered = KeyProof {
        steps: vec![
            Step {
                split: 4,
                sibling: value(2),
            },
            Step {
                split: 4,
                sibling: value(3),
            },
        ],
        end: End::Leaf { key, value: value(4) },
    };
    assert_eq!(
        unordered.verify(&empty_root(), &key),
        Err(ProofError::StepOrder {
            step: 1,
            split: 4,
            above: 4
        })
    );
    let empty_with_steps = KeyProof {
        steps: vec![Step {
            split: 0,
            sibling: value(2),
        }],
        end: End::Empty,
    };
    assert_eq!(
        empty_with_steps.verify(&empty_root(), &key),
        Err(ProofError::EmptyWithSteps { steps: 1 })
    );
    let early = KeyProof {
        steps: Vec::new(),
        end: End::Branch {
            split: 9,
            prefix: masked(&key, 9),
            left: value(5),
            right: value(6),
        },
    };
    assert_eq!(
        early.verify(&empty_root(), &key),
        Err(ProofError::StopsEarly { split: 9 })
    );
    let sloppy = KeyProof {
        steps: Vec::new(),
        end: End::Branch {
            split: 9,
            prefix: key,
            left: value(5),
            right: value(6),
        },
    };
    assert_eq!(
        sloppy.verify(&empty_root(), &key),
        Err(ProofError::PrefixNotCanonical { split: 9 })
    );
    // A leaf under the prefix offered as proof that nothing is under it.
    let inside = PrefixProof {
        steps: Vec::new(),
        end: PrefixEnd::Outside(End::Leaf { key, value: value(7) }),
    };
    let root = leaf_hash(&key, &value(7));
    assert_eq!(inside.verify(&root, &key, 100), Err(ProofError::LeafNotOutside));
    // A prefix proof whose step splits past the prefix.
    let deep = PrefixProof {
        steps: vec![Step {
            split: 200,
            sibling: value(2),
        }],
        end: PrefixEnd::Subtree(vec![(key, value(7))]),
    };
    assert_eq!(
        deep.verify(&root, &key, 100),
        Err(ProofError::StepInsidePrefix {
            step: 0,
            split: 200,
            bits: 100
        })
    );
    // Random bytes: refused or, by chance, a well-formed proof that does not verify.
    let mut rng = Lcg(13);
    for len in 0..400 {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if let Ok(p) = KeyProof::decode(&bytes) {
            assert!(p.verify(&root, &key).is_err());
        }
        if let Ok(p) = PrefixProof::decode(&bytes) {
            assert!(p.verify(&root, &key, 128).is_err());
        }
    }
}

#[test]
fn the_empty_map_and_a_single_key() {
    let empty = StateTree::new();
    let key = value(1);
    assert_eq!(empty.prove(&key).verify(&empty_root(), &key), Ok(None));
    assert_eq!(
        empty.prove_prefix(&key, 128).verify(&empty_root(), &key, 128),
        Ok(vec![])
    );
    let mut one = StateTree::new();
    one.insert(key, value(2));
    assert_eq!(one.root(), leaf_hash(&key, &value(2)));
    assert_eq!(one.prove(&key).verify(&one.root(), &key), Ok(Some(value(2))));
    assert_eq!(one.remove(&key), Some(value(2)));
    assert_eq!(one.root(), empty_root());
    assert!(one.is_empty());
    // Two keys differing in their last bit: a branch at bit 255.
    let mut low = key;
    low[31] &= 0xFE;
    let mut high = low;
    high[31] |= 1;
    let pair = StateTree::from_pairs([(low, value(3)), (high, value(4))]);
    assert_eq!(
        pair.root(),
        branch_hash(
            255,
            &low,
            &leaf_hash(&low, &value(3)),
            &leaf_hash(&high, &value(4))
        )
    );
    assert_eq!(pair.prove(&high).verify(&pair.root(), &high), Ok(Some(value(4))));
    assert_eq!(
        pair.prove_prefix(&low, 255)
            .verify(&pair.root(), &low, 255)
            .unwrap()
            .len(),
        2
    );
}
