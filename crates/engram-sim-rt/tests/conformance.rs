//! openraft-rt's own runtime conformance suite (tasks, time, timeouts, select, channels,
//! watch, mutex, task-locals, deterministic RNG), run against [`MadsimRuntime`].

#![cfg(madsim)]

use engram_sim_rt::MadsimRuntime;
use openraft_rt::testing::Suite;

#[test]
fn openraft_runtime_conformance() {
    Suite::<MadsimRuntime>::test_all();
}

/// The same simulation seed gives openraft the same random numbers; another seed does not.
#[test]
fn thread_rng_follows_the_simulation_seed() {
    use openraft_rt::AsyncRuntime;
    use rand::RngExt;
    let draw = |seed: u64| {
        madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default()).block_on(async {
            (0..4)
                .map(|_| MadsimRuntime::thread_rng().random::<u64>())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}
