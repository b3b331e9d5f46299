//! Agents under a policy, through crashes: on every replica, every applied transaction was
//! allowed by the grants in force at its index, while the administrator grants and revokes a
//! right over and over; and with the grant check planted away, the checker catches it.

#![cfg(madsim)]

use engram_core::planted::PlantedBug;
use engram_sim_tests::access::run_access_seed;

#[test]
fn no_transaction_applies_without_a_grant_at_its_index() {
    for seed in 0..3 {
        let r = run_access_seed(seed, None);
        println!(
            "access seed {seed}: {} acked, {} denied, {} grant changes, {} crashes, {} transactions judged, {} proven signed",
            r.acked, r.denied, r.flips, r.crashes, r.judged, r.signed
        );
        assert!(r.passed(), "access seed {seed}: {:?} {:?}", r.violations, r.panic);
        // The run must have exercised what it claims: writes, refusals and grant changes.
        assert!(
            r.acked > 50,
            "access seed {seed}: only {} writes acknowledged",
            r.acked
        );
        assert!(
            r.denied > 10,
            "access seed {seed}: only {} writes refused",
            r.denied
        );
        assert!(r.flips > 5, "access seed {seed}: only {} grant changes", r.flips);
        assert!(
            r.signed >= r.acked,
            "access seed {seed}: {} transactions proven signed, {} acked",
            r.signed,
            r.acked
        );
        assert!(
            r.judged >= r.acked,
            "access seed {seed}: judged {} of {} acked",
            r.judged,
            r.acked
        );
    }
}

/// Runs seed 0 with `bug` planted: some violation must contain every one of `needles`.
fn caught(bug: PlantedBug, needles: &[&str]) {
    let r = run_access_seed(0, Some(bug));
    println!(
        "{bug:?}: {} violations, first: {:?}",
        r.violations.len(),
        r.violations.first()
    );
    assert!(r.panic.is_none(), "{:?}", r.panic);
    assert!(
        r.violations.iter().any(|v| needles.iter().all(|n| v.contains(n))),
        "the planted {bug:?} was not caught: {:?}",
        r.violations
    );
}

#[test]
fn a_role_kept_after_it_was_taken_away_is_caught() {
    caught(PlantedBug::StaleRoleAssignment, &["by bob", "no write grant"]);
}

#[test]
fn skipping_the_grant_check_is_caught() {
    caught(PlantedBug::SkipGrantCheck, &["no write grant"]);
}

#[test]
fn a_signed_request_not_kept_is_caught() {
    caught(
        PlantedBug::SignedRequestNotKept,
        &["author.request", "does not carry it"],
    );
}

#[test]
fn committed_datoms_salted_by_the_seed_are_caught() {
    caught(
        PlantedBug::CommittedDatomsSaltedBySeed,
        &["author.request", "is not what the signed request"],
    );
}
