//! The one shape a set of keys has. A trie over a key set is unique: a single key is a leaf;
//! more keys split at the first bit where they differ, the keys with a 0 there on the left.
//! So the root is a function of the set alone, whatever order the keys were written in, and a
//! verifier given every key under a prefix rebuilds that part of the trie itself.

use crate::hash::{branch_hash, leaf_hash};
use crate::key::{Digest, Key, bit, common_bits};

/// The hash of the trie holding `leaves`: non-empty, sorted by key, no key twice (callers
/// check; a verifier does before it calls this).
pub(crate) fn subtree_hash(leaves: &[(Key, Digest)]) -> Digest {
    match leaves {
        [] => crate::hash::empty_root(),
        [(key, value)] => leaf_hash(key, value),
        [(first, _), .., (last, _)] => {
            // Sorted: the bits every key shares are the bits the first and the last share.
            let split = common_bits(first, last);
            debug_assert!(split < 256, "duplicate key");
            let at = leaves.partition_point(|(k, _)| bit(k, split) == 0);
            branch_hash(
                split as u8,
                first,
                &subtree_hash(&leaves[..at]),
                &subtree_hash(&leaves[at..]),
            )
        }
    }
}
