use std::fmt::Debug;

/// The byte prepended to a leaf before hashing it (RFC 9162 §2.1.1).
pub const LEAF_PREFIX: u8 = 0x00;

/// The byte prepended to two child hashes before hashing them (RFC 9162 §2.1.1).
pub const NODE_PREFIX: u8 = 0x01;

/// The hash function of a tree, in the three shapes RFC 9162 §2.1.1 uses it.
///
/// Implementors are marker types: every method is an associated function, so a tree or a
/// proof function names its hasher as a type parameter (`verify_inclusion::<Blake3>(..)`) and
/// carries no hasher value around.
///
/// An implementation must hash exactly `LEAF_PREFIX || data` in [`hash_leaf`](Self::hash_leaf),
/// `NODE_PREFIX || left || right` in [`hash_children`](Self::hash_children) and the empty string
/// in [`empty_root`](Self::empty_root); anything else produces a tree no other RFC 9162
/// implementation agrees with.
pub trait MerkleHasher {
    /// A hash value. Fixed size: every digest is [`DIGEST_LEN_BYTES`](Self::DIGEST_LEN_BYTES)
    /// bytes long.
    type Digest: Copy + Eq + AsRef<[u8]> + Debug;

    /// The length of every [`Digest`](Self::Digest), in bytes.
    const DIGEST_LEN_BYTES: usize;

    /// `H(0x00 || data)`: the hash of a leaf.
    fn hash_leaf(data: &[u8]) -> Self::Digest;

    /// `H(0x01 || left || right)`: the hash of an interior node.
    fn hash_children(left: &Self::Digest, right: &Self::Digest) -> Self::Digest;

    /// `H()`: the root of the empty tree.
    fn empty_root() -> Self::Digest;

    /// The digest whose bytes are `bytes`, or `None` if `bytes` is not
    /// [`DIGEST_LEN_BYTES`](Self::DIGEST_LEN_BYTES) long. For decoding proofs and roots that
    /// arrive as untyped bytes.
    fn digest_from_slice(bytes: &[u8]) -> Option<Self::Digest>;
}

/// BLAKE3 with 32-byte output, the hash Engram's audit chain uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Blake3;

impl MerkleHasher for Blake3 {
    type Digest = [u8; 32];

    const DIGEST_LEN_BYTES: usize = 32;

    fn hash_leaf(data: &[u8]) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&[LEAF_PREFIX]);
        hasher.update(data);
        hasher.finalize().into()
    }

    fn hash_children(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&[NODE_PREFIX]);
        hasher.update(left);
        hasher.update(right);
        hasher.finalize().into()
    }

    fn empty_root() -> [u8; 32] {
        blake3::hash(b"").into()
    }

    fn digest_from_slice(bytes: &[u8]) -> Option<[u8; 32]> {
        bytes.try_into().ok()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn blake3_shapes_are_the_prefixed_hashes() {
        let leaf = b"audit entry";
        let mut prefixed = vec![LEAF_PREFIX];
        prefixed.extend_from_slice(leaf);
        assert_eq!(Blake3::hash_leaf(leaf), *blake3::hash(&prefixed).as_bytes());

        let (l, r) = (Blake3::hash_leaf(b"l"), Blake3::hash_leaf(b"r"));
        let mut node = vec![NODE_PREFIX];
        node.extend_from_slice(&l);
        node.extend_from_slice(&r);
        assert_eq!(Blake3::hash_children(&l, &r), *blake3::hash(&node).as_bytes());

        assert_eq!(Blake3::empty_root(), *blake3::hash(&[]).as_bytes());
    }

    #[test]
    fn blake3_digest_from_slice_checks_length() {
        let d = Blake3::hash_leaf(b"x");
        assert_eq!(Blake3::digest_from_slice(&d), Some(d));
        assert_eq!(Blake3::digest_from_slice(&d[..31]), None);
        assert_eq!(Blake3::digest_from_slice(&[0; 33]), None);
        assert_eq!(Blake3::digest_from_slice(&[]), None);
    }
}
