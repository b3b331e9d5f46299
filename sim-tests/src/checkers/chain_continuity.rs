//! **I1 chain-continuity**: on every replica the audit chain is entries 1..=n with no gap,
//! each stored under its own index, each decoding, and each entry's `prev_hash` equal to the
//! hash of the entry before it (the genesis constant for entry 1). A dropped, reordered,
//! rewritten or corrupted entry breaks this at an exact index.

use engram_audit::GENESIS_PREV_HASH;

use super::{Replica, Violation};

pub const NAME: &str = "I1 chain-continuity";

pub fn check(replicas: &[Replica]) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in replicas {
        if let Some(v) = first_break(r) {
            out.push(v);
        }
    }
    out
}

/// The first break in one replica's chain (later ones follow from it).
pub fn first_break(r: &Replica) -> Option<Violation> {
    let mut prev = GENESIS_PREV_HASH;
    for (i, stored) in r.entries.iter().enumerate() {
        let expected_index = i as u64 + 1;
        let fail = |d: String| {
            Some(Violation::new(
                NAME,
                format!("node {} index {expected_index}: {d}", r.node),
            ))
        };
        if stored.index != expected_index {
            return fail(format!(
                "stored index {} where {expected_index} was due (gap or reorder)",
                stored.index
            ));
        }
        let signed = match &stored.entry {
            Ok(s) => s,
            Err(e) => return fail(format!("does not decode: {e}")),
        };
        if signed.entry.index != expected_index {
            return fail(format!("entry says index {}", signed.entry.index));
        }
        if signed.entry.prev_hash != prev {
            return fail(format!(
                "prev_hash {} but the previous entry hashes to {}",
                signed.entry.prev_hash.to_hex(),
                prev.to_hex()
            ));
        }
        prev = signed.entry.hash();
    }
    None
}
