//! The simulation is a function of its seed: the same seed run twice, each time in a process
//! of its own, gives the same trace (fault log, every operation and outcome, every replica's
//! chain and state); different seeds give different traces; and madsim's own check — which
//! records every random draw of a run and replays it against a second run — finds no
//! divergence.
//!
//! Why a process per run: two runs of one seed in the same process can differ. Measured with
//! seed 3 (8-second fault phase), eight runs one after another in one process gave two traces,
//! in no fixed pattern (a a b a b b a b), the same two in every repetition; they part where one
//! node's reply to a forwarded read draws its network delay — every log line before that point,
//! with its timestamp, is the same. So what differs is state kept for the whole process, not a
//! node's; which state is not pinned down (madsim's task-id counter is one such). A seed is
//! reproduced the way this test runs it (`ENGRAM_SIM_SEED=N cargo sim ... one_seed`: one seed,
//! one fresh process), so that is the property asserted here.

#![cfg(madsim)]

use std::collections::BTreeMap;

#[test]
fn same_seed_gives_the_same_trace_in_fresh_processes() {
    let seeds_binary = match seeds_test_binary() {
        Ok(path) => path,
        Err(e) => panic!(
            "cannot find the seeds test binary next to {:?}: {e}",
            std::env::current_exe()
        ),
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
    let mut traces = BTreeMap::new();
    for seed in [0, 3, 11, 17] {
        let first = trace(seed);
        assert_eq!(first, trace(seed), "seed {seed} differs between processes");
        traces.insert(first, seed);
    }
    // The trace does tell seeds apart.
    assert_eq!(traces.len(), 4, "two seeds gave one trace: {traces:?}");
}

#[test]
fn madsim_replays_every_random_draw() {
    madsim::runtime::Runtime::check_determinism(5, madsim::Config::default(), || {
        engram_sim_tests::scenario::simulate_short()
    });
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
