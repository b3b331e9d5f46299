//! Exports written by earlier builds still verify: an auditor may hold a file for years, so a
//! change to how nodes store or write their chain must never change what an export means.
//!
//! `fixtures/export-2d01023.engram-audit` was written by the build at commit 2d01023 (format
//! version 2, apply groups written one entry at a time): a one-node cluster's genesis, 40
//! two-datom transactions in namespace `team/a` with idempotency keys, one in `team/b`, and the
//! node's signed checkpoints. The head below was read from the live node (`engram audit head`)
//! when the file was exported, not from the file.

#![allow(clippy::unwrap_used)] // a fixture that does not load should stop the test loudly

use engram_audit::PublicKey;
use engram_verify::{VerifyOptions, verify_export};

const EXPORT: &[u8] = include_bytes!("fixtures/export-2d01023.engram-audit");
const HEAD_HASH: &str = "3d71f0aa48f14f75f2ef57fb348b90b5cfca8f7d210266e2b4ecea32e3b867a0";
const NODE_KEY: &str = "31264f6f89a0dac6b3bb9f98d2bbb8a8e40bd05b91cf8a55150613a03fa685c0";

fn genesis_key() -> PublicKey {
    let bytes: Vec<u8> = (0..NODE_KEY.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&NODE_KEY[i..i + 2], 16).unwrap())
        .collect();
    PublicKey(bytes.try_into().unwrap())
}

#[test]
fn an_export_written_by_an_earlier_build_verifies_anchored_on_its_genesis_key() {
    let options = VerifyOptions {
        genesis_keys: Some(vec![genesis_key()]),
        ..VerifyOptions::default()
    };
    let report = verify_export(EXPORT, &options, |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.failures);
    assert_eq!(report.format_version, 2);
    assert_eq!((report.entries, report.transactions, report.datoms), (42, 41, 81));
    assert_eq!(report.head_index, 42);
    assert_eq!(report.head_hash.as_deref(), Some(HEAD_HASH));
    assert!(report.checkpoints >= 1);
    assert_eq!(report.keys.len(), 1);
    assert_eq!(report.keys[0].public_key, NODE_KEY);
}

#[test]
fn the_earlier_export_altered_anywhere_in_its_entries_fails() {
    // Flip one byte in each of several places past the header: every copy must fail (a
    // failure, or a file the verifier cannot read), so the test above can tell a good file.
    for at in [EXPORT.len() / 4, EXPORT.len() / 2, 3 * EXPORT.len() / 4] {
        let mut altered = EXPORT.to_vec();
        altered[at] ^= 0x01;
        if let Ok(report) = verify_export(&altered[..], &VerifyOptions::default(), |_, _| {}) {
            assert!(!report.ok(), "a byte flipped at {at} went unnoticed");
        }
    }
}
