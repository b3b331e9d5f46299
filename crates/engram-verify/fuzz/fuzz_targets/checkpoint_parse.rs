//! `SignedCheckpoint::parse_bytes` on arbitrary bytes: `Ok` or `Err`, never a panic. The
//! parser is documented as strict and canonical ("every note that parses prints back byte for
//! byte"), so on success:
//! * `to_text()` is exactly the input;
//! * `parse(to_text())` (and `parse_bytes`) give back the same checkpoint;
//! * checking signatures against a key (the seed exports' key, `NodeKey::from_seed([7; 32])`)
//!   returns a boolean, and a key counted by `signers` is one `verify_by` accepts.

#![no_main]

use engram_audit::{NodeKey, SignedCheckpoint};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(parsed) = SignedCheckpoint::parse_bytes(data) else {
        return;
    };
    let text = parsed.to_text();
    assert_eq!(
        text.as_bytes(),
        data,
        "a note that parses does not print back byte for byte: {parsed:?}"
    );
    assert_eq!(SignedCheckpoint::parse(&text).as_ref(), Ok(&parsed));
    assert_eq!(SignedCheckpoint::parse_bytes(text.as_bytes()).as_ref(), Ok(&parsed));
    assert!(!parsed.signatures.is_empty());
    // The body alone is the signed text; it is a prefix of the note.
    assert!(text.starts_with(&parsed.checkpoint.body()));

    let key = NodeKey::from_seed([7; 32]).public();
    let by_key = parsed.verify_by(&key);
    let signers = parsed.signers([&key, &key]);
    assert_eq!(signers.len(), usize::from(by_key), "signers {signers:?}, verify_by {by_key}");
});
