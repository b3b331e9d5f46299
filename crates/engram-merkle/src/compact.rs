use std::fmt;
use std::marker::PhantomData;

use thiserror::Error;

use crate::MerkleHasher;

/// A frontier that cannot belong to a tree of the stated size.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("a tree of {size} leaves has {expected} frontier subtree roots, {actual} were given")]
pub struct FrontierError {
    pub size: u64,
    pub expected: usize,
    pub actual: usize,
}

/// An append-only Merkle tree that keeps only what it needs to compute its root: the roots of
/// its perfect subtrees, O(log n) digests.
///
/// A tree of `n` leaves is, left to right, a sequence of perfect subtrees, one per set bit of
/// `n`, largest first (for `n = 13 = 8 + 4 + 1`: leaves 0..8, 8..12 and 12..13). This follows
/// from the RFC 9162 §2.1.1 split at the largest power of two below `n`: the left part is
/// perfect and the right part splits the same way. Appending a leaf merges equal-sized
/// subtrees at the right end, exactly like incrementing a binary counter: O(1) hashes
/// amortised, O(log n) at worst. The root hashes the subtrees together right to left:
/// O(log n).
///
/// It keeps no leaves, so it cannot produce proofs; see [`inclusion_proof`](crate::inclusion_proof)
/// and [`consistency_proof`](crate::consistency_proof), which read leaf hashes from a
/// [`LeafSource`](crate::LeafSource).
pub struct CompactTree<H: MerkleHasher> {
    size: u64,
    /// Roots of the perfect subtrees, leftmost (largest) first; one per set bit of `size`.
    frontier: Vec<H::Digest>,
    // `fn() -> H` rather than `H`: the tree owns no `H` value, so it should not inherit `H`'s
    // auto traits or drop semantics.
    _hasher: PhantomData<fn() -> H>,
}

impl<H: MerkleHasher> CompactTree<H> {
    /// The empty tree.
    pub fn new() -> Self {
        CompactTree {
            size: 0,
            frontier: Vec::new(),
            _hasher: PhantomData,
        }
    }

    /// Restores a tree from its size and [`frontier`](Self::frontier), as saved earlier. The
    /// frontier's digests are trusted; only their number is checked.
    pub fn from_frontier(size: u64, frontier: Vec<H::Digest>) -> Result<Self, FrontierError> {
        let expected = size.count_ones() as usize;
        if frontier.len() != expected {
            return Err(FrontierError {
                size,
                expected,
                actual: frontier.len(),
            });
        }
        Ok(CompactTree {
            size,
            frontier,
            _hasher: PhantomData,
        })
    }

    /// The number of leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The roots of the tree's perfect subtrees, leftmost (largest) first: one per set bit of
    /// [`size`](Self::size), the subtree for bit `2^j` covering `2^j` leaves.
    pub fn frontier(&self) -> &[H::Digest] {
        &self.frontier
    }

    /// Appends a leaf by its data, hashing it as a leaf. Returns the new leaf's index.
    pub fn push(&mut self, data: &[u8]) -> u64 {
        self.push_leaf_hash(H::hash_leaf(data))
    }

    /// Appends a leaf by its leaf hash (`H(0x00 || data)`, as from
    /// [`MerkleHasher::hash_leaf`]). Returns the new leaf's index.
    ///
    /// # Panics
    ///
    /// If the tree already has `u64::MAX` leaves, which no real log reaches.
    pub fn push_leaf_hash(&mut self, leaf_hash: H::Digest) -> u64 {
        self.push_leaf_hash_visiting(leaf_hash, |_, _, _| {})
    }

    /// Like [`push_leaf_hash`](Self::push_leaf_hash), and calls `visit(level, position, root)`
    /// for every perfect subtree the append completes, smallest first: the leaf itself
    /// (level 0, position = its index), then each merge (level `j` covers the `2^j` leaves
    /// from `position * 2^j`). A store that saves what it is shown holds every perfect
    /// subtree root, which is what [`LeafSource::cached_subtree_root`](crate::LeafSource)
    /// wants for O(log² n) proofs.
    pub fn push_leaf_hash_visiting(
        &mut self,
        leaf_hash: H::Digest,
        mut visit: impl FnMut(u32, u64, &H::Digest),
    ) -> u64 {
        let index = self.size;
        let mut node = leaf_hash;
        visit(0, index, &node);
        // Each trailing one bit of the old size is a perfect subtree as large as the one being
        // carried; merge them, as a binary increment carries.
        let mut carry_bits = index;
        let mut level = 0u32;
        while carry_bits & 1 == 1 {
            match self.frontier.pop() {
                Some(left) => node = H::hash_children(&left, &node),
                // Unreachable: the frontier has one entry per set bit of the size.
                None => break,
            }
            carry_bits >>= 1;
            level += 1;
            visit(level, index >> level, &node);
        }
        self.frontier.push(node);
        self.size = index.checked_add(1).expect("Merkle tree size overflows u64");
        index
    }

    /// The tree's root (RFC 9162 §2.1.1 MTH), `H()` for the empty tree.
    pub fn root(&self) -> H::Digest {
        // The rightmost subtree is the deepest right child; fold leftwards.
        let mut subtrees = self.frontier.iter().rev();
        let Some(last) = subtrees.next() else {
            return H::empty_root();
        };
        subtrees.fold(*last, |right, left| H::hash_children(left, &right))
    }
}

impl<H: MerkleHasher> Default for CompactTree<H> {
    fn default() -> Self {
        Self::new()
    }
}

// Hand-written rather than derived: a derive would demand `H: Clone` (and so on) of the marker
// type, which the tree never holds.
impl<H: MerkleHasher> Clone for CompactTree<H> {
    fn clone(&self) -> Self {
        CompactTree {
            size: self.size,
            frontier: self.frontier.clone(),
            _hasher: PhantomData,
        }
    }
}

impl<H: MerkleHasher> PartialEq for CompactTree<H> {
    fn eq(&self, other: &Self) -> bool {
        self.size == other.size && self.frontier == other.frontier
    }
}

impl<H: MerkleHasher> Eq for CompactTree<H> {}

impl<H: MerkleHasher> fmt::Debug for CompactTree<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompactTree")
            .field("size", &self.size)
            .field("frontier", &self.frontier)
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Blake3;

    #[test]
    fn empty_tree_root_is_hash_of_empty_string() {
        let tree = CompactTree::<Blake3>::new();
        assert_eq!(tree.size(), 0);
        assert!(tree.frontier().is_empty());
        assert_eq!(tree.root(), Blake3::empty_root());
    }

    #[test]
    fn small_trees_have_the_rfc_shape() {
        let leaves: Vec<_> = (0u8..3).map(|i| Blake3::hash_leaf(&[i])).collect();
        let mut tree = CompactTree::<Blake3>::new();
        assert_eq!(tree.push(&[0]), 0);
        assert_eq!(tree.root(), leaves[0]);
        assert_eq!(tree.push(&[1]), 1);
        let left = Blake3::hash_children(&leaves[0], &leaves[1]);
        assert_eq!(tree.root(), left);
        assert_eq!(tree.push(&[2]), 2);
        assert_eq!(tree.root(), Blake3::hash_children(&left, &leaves[2]));
        assert_eq!(tree.frontier(), &[left, leaves[2]]);
    }

    #[test]
    fn frontier_has_one_subtree_per_set_bit() {
        let mut tree = CompactTree::<Blake3>::new();
        for i in 0u64..200 {
            tree.push(&i.to_le_bytes());
            assert_eq!(tree.frontier().len(), tree.size().count_ones() as usize);
        }
    }

    #[test]
    fn restored_tree_continues_identically() {
        let mut tree = CompactTree::<Blake3>::new();
        for i in 0u64..11 {
            tree.push(&i.to_le_bytes());
        }
        let mut restored =
            CompactTree::<Blake3>::from_frontier(tree.size(), tree.frontier().to_vec()).unwrap();
        assert_eq!(restored, tree);
        for i in 11u64..40 {
            tree.push(&i.to_le_bytes());
            restored.push(&i.to_le_bytes());
            assert_eq!(restored.root(), tree.root());
        }
    }

    #[test]
    fn visiting_push_reports_every_perfect_subtree_once() {
        use crate::subtree_root;
        let leaves: Vec<[u8; 32]> = (0u32..37).map(|i| Blake3::hash_leaf(&i.to_be_bytes())).collect();
        let mut tree = CompactTree::<Blake3>::new();
        let mut seen = std::collections::BTreeMap::new();
        for leaf in &leaves {
            tree.push_leaf_hash_visiting(*leaf, |level, position, root| {
                assert!(seen.insert((level, position), *root).is_none(), "reported twice");
            });
        }
        // Every perfect subtree inside 37 leaves, and nothing else, with the right root.
        let mut expected = 0;
        for level in 0..6u32 {
            let width = 1u64 << level;
            for position in 0..(37 / width) {
                expected += 1;
                let start = position * width;
                let root = subtree_root::<Blake3>(&leaves, start, start + width).unwrap();
                assert_eq!(
                    seen.get(&(level, position)),
                    Some(&root),
                    "level {level} position {position}"
                );
            }
        }
        assert_eq!(seen.len(), expected);
    }

    #[test]
    fn restore_rejects_wrong_frontier_length() {
        let d = Blake3::hash_leaf(b"x");
        assert_eq!(
            CompactTree::<Blake3>::from_frontier(3, vec![d]),
            Err(FrontierError {
                size: 3,
                expected: 2,
                actual: 1
            })
        );
        assert_eq!(
            CompactTree::<Blake3>::from_frontier(0, vec![d]),
            Err(FrontierError {
                size: 0,
                expected: 0,
                actual: 1
            })
        );
    }
}
