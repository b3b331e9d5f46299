//! The checkers can fail: each known bug, planted behind the `planted-bugs` feature, is caught
//! by the suite within a bounded number of seeds, and by a checker that names it.

#![cfg(madsim)]

use engram_core::planted::PlantedBug;
use engram_sim_tests::{Options, run_seed};

/// Seeds tried per bug before the test gives up.
const SEED_BOUND: u64 = 12;

fn caught_within_bound(bug: PlantedBug, expected: &[&str]) {
    let options = Options {
        bug: Some(bug),
        fault_phase_ms: Some(12_000),
    };
    for seed in 0..SEED_BOUND {
        let r = run_seed(seed, &options);
        if r.passed() {
            println!("{bug:?}: seed {seed} passed (not caught)");
            continue;
        }
        let names = r.failed_checkers();
        println!(
            "{bug:?}: caught on seed {seed} (attempt {}) by {names:?}",
            seed + 1
        );
        assert!(
            names.iter().any(|n| expected.contains(n)),
            "{bug:?} was caught by {names:?}, not by any of {expected:?}:\n{}",
            r.failure_text()
        );
        return;
    }
    panic!("{bug:?} was not caught within {SEED_BOUND} seeds");
}

#[test]
fn ack_before_commit_is_caught() {
    caught_within_bound(
        PlantedBug::AckBeforeCommit,
        &["I3 acked-durable", "I6 linearizable"],
    );
}

#[test]
fn skip_sync_before_ack_is_caught() {
    caught_within_bound(
        PlantedBug::SkipSyncBeforeAck,
        &[
            "I3 acked-durable",
            "I1 chain-continuity",
            "I2 replica-agreement",
            "panic",
        ],
    );
}

#[test]
fn wrong_prev_hash_is_caught() {
    caught_within_bound(PlantedBug::WrongPrevHash, &["I1 chain-continuity"]);
}

#[test]
fn half_batch_is_caught() {
    caught_within_bound(
        PlantedBug::HalfBatch,
        &[
            "I8 no-partial-apply",
            "I1 chain-continuity",
            "I2 replica-agreement",
        ],
    );
}
