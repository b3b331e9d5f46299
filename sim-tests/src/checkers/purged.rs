//! **I12 purged** (forgetting's node-local half): a node that reports a redaction purged (its
//! purge row, what `engram redact status` shows) holds none of the values that redaction took
//! anywhere in its store: not in a state row, not in a snapshot chunk (the current one, the one
//! it replaced, one received), not in a Raft or access-log row, and not in a log entry up to
//! the redaction. Log entries after the redaction are out of that purge's reach: a late
//! duplicate of the write (a retry the leader receives after the redaction; it is answered from
//! its idempotency row, not applied) can still carry the value until the log is next purged.
//!
//! The values are the speculator's secrets (`speculator.rs`), each naming its round, so one
//! pass over a row finds every secret in it.

use std::collections::BTreeMap;

use engram_storage::{Space, Store};

use super::Violation;
use crate::speculator::{SpeculationLog, secrets_in};

pub const NAME: &str = "I12 purged";

pub fn check(stores: &[(u64, &dyn Store)], log: &SpeculationLog) -> Vec<Violation> {
    let mut out = Vec::new();
    let forgotten = log.forgotten.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (node, store) in stores {
        let purged = match engram_raft::purged_through(*store) {
            Ok(p) => p,
            Err(e) => {
                out.push(Violation::new(NAME, format!("node {node}: its purge row: {e}")));
                continue;
            }
        };
        // Round → the redaction that took its secrets, for those this node says it purged.
        let taken: BTreeMap<u64, u64> = forgotten
            .iter()
            .filter(|f| f.last_tx() <= purged)
            .map(|f| (f.round, f.last_tx()))
            .collect();
        if taken.is_empty() {
            continue;
        }
        for space in Space::ALL {
            let mut found: Vec<String> = Vec::new();
            let walked = store.for_each(space, &mut |key, value| {
                // A log row's key is its index: entries after the purged redaction are out of
                // this purge's reach (see above).
                if space == Space::Log
                    && <[u8; 8]>::try_from(key).is_ok_and(|k| u64::from_be_bytes(k) > purged)
                {
                    return Ok(());
                }
                for round in secrets_in(key).chain(secrets_in(value)) {
                    if let Some(by_tx) = taken.get(&round) {
                        found.push(format!(
                            "node {node} reports redactions purged through tx {purged}, yet its {} row {} holds the secret of round {round}, redacted by tx {by_tx}",
                            space.name(),
                            String::from_utf8_lossy(&key[..key.len().min(48)]).escape_debug(),
                        ));
                    }
                }
                Ok(())
            });
            if let Err(e) = walked {
                out.push(Violation::new(
                    NAME,
                    format!("node {node}: reading its {} rows: {e}", space.name()),
                ));
            }
            out.extend(found.into_iter().take(3).map(|d| Violation::new(NAME, d)));
        }
    }
    out
}
