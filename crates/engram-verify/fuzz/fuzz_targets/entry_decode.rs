//! `SignedEntry::decode` on arbitrary bytes: `Ok` or `Err`, never a panic. The encoding is
//! canonical (fixed-width fields, length-prefixed strings, no trailing bytes), so on success:
//! * `encode()` is exactly the input;
//! * `decode(encode())` is the same entry;
//! * the inner `AuditEntry` round-trips on its own, and hashing it does not panic;
//! * feeding the entry to a fresh `ChainVerifier` (as the export verifier does) returns `Ok`
//!   or a `ChainError`, never a panic, in both `push` and `push_all`.

#![no_main]

use engram_audit::{AuditEntry, ChainVerifier, SignedEntry};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(decoded) = SignedEntry::decode(data) else {
        return;
    };
    let encoded = decoded.encode();
    assert_eq!(encoded, data, "an entry that decodes re-encodes differently: {decoded:?}");
    assert_eq!(SignedEntry::decode(&encoded).as_ref(), Ok(&decoded));

    let inner = decoded.entry.encode();
    assert_eq!(AuditEntry::decode(&inner).as_ref(), Ok(&decoded.entry));
    let _ = decoded.entry.hash();

    let mut chain = ChainVerifier::new();
    if chain.push(&decoded).is_ok() {
        assert_eq!(chain.checked(), 1);
    } else {
        assert_eq!(chain.checked(), 0, "a refused entry changed the verifier");
    }
    let _ = chain.finish();
    let mut all = ChainVerifier::new();
    let (hash, _errors) = all.push_all(&decoded);
    assert_eq!(hash, decoded.entry.hash());
    assert_eq!(all.checked(), 1);
    let _ = all.unadmitted();
});
