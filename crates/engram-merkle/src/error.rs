use thiserror::Error;

/// Why a proof could not be computed or did not verify. Each variant names the input at fault.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProofError {
    /// The leaf index is not below the tree size (every index is, for a tree of size 0).
    #[error("leaf index {index} is out of range for a tree of size {size}")]
    IndexOutOfRange { index: u64, size: u64 },

    /// A consistency proof was asked for or checked from a larger tree to a smaller one.
    #[error("old tree size {old_size} is larger than new tree size {new_size}")]
    OldSizeExceedsNewSize { old_size: u64, new_size: u64 },

    /// A leaf range whose start is past its end.
    #[error("leaf range start {start} is past its end {end}")]
    InvalidRange { start: u64, end: u64 },

    /// The tree (or range) asked for reaches past the leaves the [`LeafSource`](crate::LeafSource)
    /// has.
    #[error("a tree of {size} leaves was asked for, but the leaf source has only {leaf_count}")]
    NotEnoughLeaves { size: u64, leaf_count: u64 },

    /// The [`LeafSource`](crate::LeafSource) has no hash for a leaf below its own leaf count.
    #[error("the leaf source has no hash for leaf {index}")]
    MissingLeaf { index: u64 },

    /// The proof has the wrong number of hashes for the index and size (or the two sizes). The
    /// number is a function of those alone, so this is checked before any hashing.
    #[error("the proof has {actual} hashes, but one for these sizes has exactly {expected}")]
    WrongProofLength { expected: usize, actual: usize },

    /// An element of an untyped proof is not a digest: it has the wrong length.
    #[error("proof element {position} is {actual_len_bytes} bytes long, a digest is {expected_len_bytes}")]
    DigestLength {
        position: usize,
        expected_len_bytes: usize,
        actual_len_bytes: usize,
    },

    /// The root the inclusion proof leads to is not the expected root: the leaf hash, the index,
    /// the size, a proof element or the root is wrong.
    #[error("the inclusion proof does not lead to the expected root")]
    RootMismatch,

    /// The old root recomputed from the consistency proof is not the given old root: the old
    /// root, the sizes or a proof element is wrong. (For an empty old tree: the old root is not
    /// `H()`.)
    #[error("the consistency proof does not lead to the given old root")]
    OldRootMismatch,

    /// The proof leads to the given old root, but the new root recomputed from it is not the
    /// given new root: the new root, the sizes or a proof element is wrong, or the old root is.
    /// A wrong old root shows here, rather than as [`OldRootMismatch`](Self::OldRootMismatch),
    /// when the new root is rebuilt from it: for equal sizes (the roots must be equal) and when
    /// the old size is a power of two (the old tree is a perfect subtree of the new one, and the
    /// proof starts from its root).
    #[error("the consistency proof does not lead to the given new root")]
    NewRootMismatch,
}
