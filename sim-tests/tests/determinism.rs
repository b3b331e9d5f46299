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

/// The same seed in two separate processes (fresh OS randomness, fresh hash-map keys) gives the
/// same trace: nothing outside the seed leaks into a run.
#[test]
fn same_seed_gives_the_same_trace_in_another_process() {
    let Ok(seeds_binary) = seeds_test_binary() else {
        panic!(
            "cannot find the seeds test binary next to {:?}",
            std::env::current_exe()
        );
    };
    let trace = |seed: u64| {
        let out = std::process::Command::new(&seeds_binary)
            .args(["one_seed", "--exact", "--nocapture"])
            .env("ENGRAM_SIM_SEED", seed.to_string())
            .output()
            .expect("run the seeds binary");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "seed {seed} failed:\n{stdout}");
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("trace ").map(str::to_string))
            .expect("a trace line")
    };
    for seed in [0, 17] {
        assert_eq!(trace(seed), trace(seed), "seed {seed} differs between processes");
    }
}

/// Cargo puts every test binary of the package in the same directory.
fn seeds_test_binary() -> Result<std::path::PathBuf, std::io::Error> {
    let me = std::env::current_exe()?;
    let dir = me
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent directory"))?;
    let mut found: Vec<(std::time::SystemTime, std::path::PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("seeds-") && path.extension().is_none() {
            found.push((entry_mtime(&path)?, path));
        }
    }
    found.sort();
    found
        .pop()
        .map(|(_, p)| p)
        .ok_or_else(|| std::io::Error::other("no seeds-* binary"))
}

fn entry_mtime(path: &std::path::Path) -> Result<std::time::SystemTime, std::io::Error> {
    std::fs::metadata(path)?.modified()
}
