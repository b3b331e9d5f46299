//! The simulation is a function of its seed: the same seed twice gives the same trace (fault
//! log, every operation and outcome, every replica's chain and state), and madsim's own
//! check — which records every random draw of a run and replays it against a second run —
//! finds no divergence.

#![cfg(madsim)]

use engram_sim_tests::{Options, run_seed};

#[test]
fn same_seed_gives_the_same_trace() {
    let options = Options {
        fault_phase_ms: Some(8_000),
        ..Options::default()
    };
    for seed in [3, 11] {
        let a = run_seed(seed, &options);
        let b = run_seed(seed, &options);
        assert!(!a.trace_hash.is_empty(), "{}", a.failure_text());
        assert_eq!(a.trace_hash, b.trace_hash, "seed {seed} is not deterministic");
        assert_eq!(a.fault_log, b.fault_log);
        assert_eq!(a.ops, b.ops);
    }
    // The hash does tell runs apart.
    assert_ne!(run_seed(3, &options).trace_hash, run_seed(4, &options).trace_hash);
}

#[test]
fn madsim_replays_every_random_draw() {
    madsim::runtime::Runtime::check_determinism(5, madsim::Config::default(), || {
        engram_sim_tests::scenario::simulate_short()
    });
}
