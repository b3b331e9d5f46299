//! The checkers can fail: each known bug, planted behind the `planted-bugs` feature, is caught
//! by the suite within a bounded number of seeds, and by a checker that names it.

#![cfg(madsim)]

use engram_core::planted::PlantedBug;
use engram_sim_tests::{Options, run_seed};

/// Seeds tried per bug before the test gives up. (24 since datoms carry salts: the larger log
/// entries moved every schedule, and `SearchGapNotRead` is now first caught on seed 16; it is
/// caught on 3 of the first 39 seeds.)
const SEED_BOUND: u64 = 24;

/// Runs seeds 0.. with `bug` planted until one fails, and checks that a checker that names
/// the bug is among those that failed. With `ENGRAM_SIM_PLANTED_SEEDS=N` it runs all N seeds
/// and prints the detection rate instead of stopping at the first catch.
fn caught_within_bound(bug: PlantedBug, expected: &[&str]) {
    caught_with(
        Options {
            bug: Some(bug),
            fault_phase_ms: Some(12_000),
            ..Options::default()
        },
        expected,
    );
}

fn caught_with(options: Options, expected: &[&str]) {
    let Some(bug) = options.bug else {
        panic!("caught_with needs a planted bug");
    };
    let measure: Option<u64> = std::env::var("ENGRAM_SIM_PLANTED_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut first_catch = None;
    let mut caught = 0u64;
    let mut by: std::collections::BTreeMap<&'static str, u64> = Default::default();
    for seed in 0..measure.unwrap_or(SEED_BOUND) {
        let r = run_seed(seed, &options);
        if r.passed() {
            println!("{bug:?}: seed {seed} passed (not caught)");
            continue;
        }
        let names = r.failed_checkers();
        println!("{bug:?}: seed {seed} caught by {names:?}");
        // "panic:<text>" accepts a panic whose message contains <text> (an invariant a node
        // asserts itself, e.g. openraft refusing a follower log that went backwards).
        let panic_matches = |want: &str| {
            want.strip_prefix("panic:")
                .is_some_and(|text| r.panic.as_deref().is_some_and(|p| p.contains(text)))
        };
        assert!(
            names.iter().any(|n| expected.contains(n)) || expected.iter().any(|w| panic_matches(w)),
            "{bug:?} was caught by {names:?}, not by any of {expected:?}:\n{}",
            r.failure_text()
        );
        caught += 1;
        for n in names {
            *by.entry(n).or_insert(0) += 1;
        }
        first_catch.get_or_insert(seed);
        if measure.is_none() {
            break;
        }
    }
    if let Some(n) = measure {
        println!("{bug:?}: caught on {caught} of {n} seeds; failing checkers {by:?}");
    }
    match first_catch {
        Some(seed) => assert!(
            seed < SEED_BOUND,
            "{bug:?} first caught on seed {seed}, beyond {SEED_BOUND}"
        ),
        None => panic!("{bug:?} was not caught within {SEED_BOUND} seeds"),
    }
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
fn search_index_not_rebuilt_is_caught() {
    caught_within_bound(PlantedBug::SearchIndexNotRebuilt, &["search-agrees"]);
}

/// The search index meets a gap where the watch hub does (a snapshot install, groups dropped
/// while it lagged), so it runs in the swarm that makes installs frequent, as the watch gap's
/// test does: in the default swarm an install that opens a gap is left to chance.
#[test]
fn search_gap_not_read_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::SearchGapNotRead),
            fault_phase_ms: Some(12_000),
            install_crashes: true,
            ..Options::default()
        },
        &["search-agrees"],
    );
}

/// A gap reaches a watch hub when its node installs a snapshot; lagging nodes install them
/// often with a snapshot every 16 entries and crashes that leave nodes behind. No crash
/// inside the install: it would restart the node's hub from its store, which has no gap.
#[test]
fn watch_gap_not_read_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::WatchGapNotRead),
            fault_phase_ms: Some(12_000),
            lagging_installs: true,
            ..Options::default()
        },
        &["watch-complete"],
    );
}

/// The speculator redacts a plan of its own every few rounds; a record that leaves a datom out
/// is a value missing with no redaction in the chain, which the audit verifier and the scrub
/// both report.
#[test]
fn redaction_lists_too_few_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::RedactionListsTooFew),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            ..Options::default()
        },
        &["I9 audit-verifies", "state-consistent"],
    );
}

/// The leader acknowledges a redaction after its first part: the simulated nodes take one
/// datom per part, so the plan's second secret keeps its value, which the `forgotten` checker
/// reads on every replica.
#[test]
fn redaction_stops_after_first_part_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::RedactionStopsAfterFirstPart),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            ..Options::default()
        },
        &["I12 forgotten"],
    );
}

/// A redaction of an entity takes its datoms on main only: the speculator's secret on a branch
/// keeps its value, which the `forgotten` checker reads on every replica (and the `purged` one
/// finds in a node's files once it reports the redaction purged).
#[test]
fn redaction_skips_branches_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::RedactionSkipsBranches),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            ..Options::default()
        },
        &["I12 forgotten", "I12 purged"],
    );
}

/// The leader plans a redaction by predicate's range one matching row past its limit: the
/// simulated nodes take one datom per range, so the plan's second secret is passed over and
/// keeps its value, which the `forgotten` checker reads on every replica.
#[test]
fn redaction_range_overruns_its_limit_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::RedactionRangeOverrunsItsLimit),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            ..Options::default()
        },
        &["I12 forgotten"],
    );
}

/// A versions policy takes datoms that are still live claims: the keeper's first owner claim
/// (another agent's, under cardinality one) and its tags nobody retracted lose their values,
/// which the `retention` checker reads on every replica.
#[test]
fn retention_takes_live_claims_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::RetentionTakesLiveClaims),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            ..Options::default()
        },
        &["I12 retention"],
    );
}

/// A redaction by predicate reads its time bound from the head its apply group began with: a
/// node that catches up by applying many entries in one group takes less than the others
/// (the keeper's time policy takes something every round), which replica agreement sees.
/// Frequent crashes leave nodes behind, and rare snapshots make them catch up from the log.
#[test]
fn redaction_bound_from_group_start_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::RedactionBoundFromGroupStart),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            lagging_installs: true,
            snapshot_every_entries: Some(400),
            ..Options::default()
        },
        &["I2 replica-agreement", "I1 chain-continuity"],
    );
}

/// A redaction takes each matching datom alone: the keeper's versions policy takes a retracted
/// tag's assertion a round before its retraction, and the fold of the slot's history then
/// holds the ended claim, which the store scrub (`state-consistent`) reports against the
/// slot's current-claims row on every replica.
#[test]
fn redaction_splits_a_value_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::RedactionSplitsAValue),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            ..Options::default()
        },
        &["state-consistent"],
    );
}

/// A session's row forgets its ttl: the leader ends the keeper's session at its next look,
/// before the deadline the session recorded, which the `sessions` checker reads on every
/// replica's chain.
#[test]
fn session_deadline_without_ttl_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::SessionDeadlineWithoutTtl),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            ..Options::default()
        },
        &["I12 sessions"],
    );
}

/// A node's purge leaves the snapshot made before the redaction: the checker reads the store
/// of each node whose purge row moves forward for the values it took. The snapshot left holds
/// a value only if it was built between the write of the value and its redaction, so the
/// test asks for a snapshot every 16 entries.
#[test]
fn purge_keeps_old_snapshot_is_caught() {
    caught_with(
        Options {
            bug: Some(PlantedBug::PurgeKeepsOldSnapshot),
            fault_phase_ms: Some(12_000),
            forgetting: true,
            snapshot_every_entries: Some(16),
            ..Options::default()
        },
        &["I12 purged"],
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

#[test]
fn eager_idempotency_row_is_caught() {
    // The entry applied again after a crash differs from the one applied before (the monitor),
    // or the node's chain differs from the others' (I2), or an acknowledged write is missing.
    caught_within_bound(
        PlantedBug::EagerIdempotencyRow,
        &["I1 chain-continuity", "I2 replica-agreement", "I3 acked-durable"],
    );
}

#[test]
fn accept_unauthenticated_peer_is_caught() {
    // The forger is switched on for every seed: the bug is only reachable through it. Either
    // the checker sees a forged request answered, or a forged append that rewrote committed
    // entries trips openraft's own assertion on the node (a crash in production).
    caught_with(
        Options {
            bug: Some(PlantedBug::AcceptUnauthenticatedPeer),
            fault_phase_ms: Some(12_000),
            forge_every_ms: Some(100),
            ..Options::default()
        },
        &["peer-auth", "panic:assertion failed"],
    );
}

/// A restarted leader reading before it applied the log it restarted with. Leader crashes
/// that land between an acknowledged write and the next synced log write are rare (7 of the
/// 256 sweep seeds met one before the catch-up wait existed), so this runs the sweep seeds
/// known to meet one, rather than seeds from 0: with the bug planted the linearizability
/// checker must fail on at least one of them (the sweep shows all of them pass without it).
/// The seeds move whenever the fault schedule, the Raft timing, the start-up or the workload
/// changes; find them again with `ENGRAM_SIM_BUG=ReadBeforeRestartCatchUp ENGRAM_SIM_SEEDS=400`
/// on the seed sweep. These came from that search after log entries began carrying a salt seed
/// and datoms their salts (the larger entries moved every schedule): caught by I6 on 8, 42,
/// 140 and 252 of seeds 0-255.
#[test]
fn read_before_restart_catch_up_is_caught() {
    let bug = PlantedBug::ReadBeforeRestartCatchUp;
    let mut caught = Vec::new();
    for seed in [8, 42, 140] {
        let r = run_seed(
            seed,
            &Options {
                bug: Some(bug),
                ..Options::default()
            },
        );
        let names = r.failed_checkers();
        println!("{bug:?}: seed {seed} failed checkers {names:?}");
        if names.contains(&"I6 linearizable") {
            caught.push(seed);
        }
    }
    assert!(
        !caught.is_empty(),
        "{bug:?} was not caught by I6 on seeds 8, 42, 140"
    );
}

#[test]
fn skip_group_attestation_is_caught() {
    // No group's covering attestation is stored: every replica's chain ends uncovered, which
    // the I4 checker's verifier names (the first entry after the last attested one).
    caught_within_bound(PlantedBug::SkipGroupAttestation, &["I4 signatures-valid"]);
}

#[test]
fn stale_current_row_is_caught() {
    // A write to a slot that has a current-claims row leaves the row as it was: every replica
    // plans the next write against the same stale view, so they agree; the scrub over each
    // replica's store finds the row that is not its slot's history folded.
    caught_within_bound(PlantedBug::StaleCurrentRow, &["state-consistent"]);
}

#[test]
fn stale_slot_commitment_is_caught() {
    // A rewrite of a slot leaves its state-commitment digest as it was: every replica records
    // the same wrong state root, so replica agreement cannot see it; the scrub recomputes
    // every slot's digest from its history, and the offline verifier rebuilds every recorded
    // root from the exported datoms (I13).
    caught_within_bound(
        PlantedBug::StaleSlotCommitment,
        &["state-consistent", "I9 audit-verifies"],
    );
}

#[test]
fn unrecorded_install_is_caught() {
    // The crash-in-install fault (forced on, with frequent snapshots) kills a node inside each
    // snapshot install; without the install record the node restarts on part of the old state
    // and part of the new, and does not know it.
    caught_with(
        Options {
            bug: Some(PlantedBug::UnrecordedInstall),
            fault_phase_ms: Some(12_000),
            install_crashes: true,
            ..Options::default()
        },
        &[
            "I1 chain-continuity",
            "I2 replica-agreement",
            "I3 acked-durable",
            "I8 no-partial-apply",
            "I4 signatures-valid",
            "I9 audit-verifies",
            "state-consistent",
            "liveness",
            "panic",
        ],
    );
}
