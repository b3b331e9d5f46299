//! Keys and their bits: a key is 256 bits, read most significant bit of byte 0 first.

/// A key of the map: 32 bytes, compared bit by bit from the most significant bit of byte 0.
pub type Key = [u8; 32];

/// A 32-byte hash: a value's digest, a node's hash, a root.
pub type Digest = [u8; 32];

/// Bits in a key.
pub const KEY_BITS: u16 = 256;

/// Bit `i` of `key` (0 or 1); `i` < 256.
pub(crate) fn bit(key: &Key, i: u16) -> usize {
    ((key[usize::from(i / 8)] >> (7 - (i % 8))) & 1) as usize
}

/// How many leading bits `a` and `b` share: 256 when they are equal.
///
/// Compared eight bytes at a time, read big-endian so the first differing bit is the word's
/// leading one: every insert calls this once per level of its path, and a byte loop was about
/// 1.6% of a whole write-loaded machine.
pub(crate) fn common_bits(a: &Key, b: &Key) -> u16 {
    for (i, (x, y)) in a.chunks_exact(8).zip(b.chunks_exact(8)).enumerate() {
        let word = |bytes: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(bytes);
            u64::from_be_bytes(w)
        };
        let diff = word(x) ^ word(y);
        if diff != 0 {
            return i as u16 * 64 + diff.leading_zeros() as u16;
        }
    }
    KEY_BITS
}

/// `key` with every bit from `bits` on cleared: the first `bits` bits of `key` as a key.
pub fn masked(key: &Key, bits: u16) -> Key {
    let bits = bits.min(KEY_BITS);
    let mut out = [0u8; 32];
    let full = usize::from(bits / 8);
    out[..full].copy_from_slice(&key[..full]);
    if !bits.is_multiple_of(8) {
        out[full] = key[full] & (0xFFu8 << (8 - bits % 8));
    }
    out
}

/// Whether `key` begins with the first `bits` bits of `prefix`.
pub(crate) fn has_prefix(key: &Key, prefix: &Key, bits: u16) -> bool {
    common_bits(key, prefix) >= bits.min(KEY_BITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_read_from_the_top_of_byte_zero() {
        let mut k = [0u8; 32];
        k[0] = 0b1000_0000;
        k[31] = 0b0000_0001;
        assert_eq!(bit(&k, 0), 1);
        assert_eq!(bit(&k, 1), 0);
        assert_eq!(bit(&k, 255), 1);
        assert_eq!(bit(&k, 254), 0);
        assert_eq!(common_bits(&k, &k), 256);
        let mut other = k;
        other[31] = 0;
        assert_eq!(common_bits(&k, &other), 255);
        other[0] = 0;
        assert_eq!(common_bits(&k, &other), 0);
        // Every position, against the bit-by-bit definition.
        for i in 0..KEY_BITS {
            let mut flipped = k;
            flipped[usize::from(i / 8)] ^= 0x80 >> (i % 8);
            let by_bits = (0..KEY_BITS).find(|&j| bit(&k, j) != bit(&flipped, j)).unwrap();
            assert_eq!(by_bits, i);
            assert_eq!(common_bits(&k, &flipped), i, "bit {i}");
            assert_eq!(common_bits(&flipped, &k), i, "bit {i}");
        }
        assert_eq!(masked(&k, 1), {
            let mut m = [0u8; 32];
            m[0] = 0b1000_0000;
            m
        });
        assert_eq!(masked(&k, 0), [0u8; 32]);
        assert_eq!(masked(&k, 256), k);
        assert!(has_prefix(&k, &masked(&k, 200), 200));
        assert!(!has_prefix(&other, &k, 1));
        assert!(has_prefix(&other, &k, 0));
    }
}
