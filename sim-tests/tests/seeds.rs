//! The seed sweep: `ENGRAM_SIM_SEEDS` seeds (default 64) from `ENGRAM_SIM_START` (default 0),
//! spread over `ENGRAM_SIM_THREADS` threads (default: every core). Each seed draws its own
//! fault mix; every failure prints its seed, its mix, what broke and a one-line replay.
//! With `ENGRAM_SIM_BUG=<PlantedBug>` it searches instead: every seed runs with that bug
//! planted, and it lists the seeds that caught it and by which checkers (how a planted-bug
//! test's known seeds are found again when the schedule moves).

#![cfg(madsim)]

use std::collections::BTreeMap;
use std::time::Instant;

use engram_core::planted::PlantedBug;
use engram_sim_tests::{Options, SeedReport, run_seed};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn summary_line(r: &SeedReport) -> String {
    format!(
        "seed {:>5} {} ops={} acked={} unknown={} cas-refused={} reads={} chain={} merges={} abandons={} redactions={} retention-taken={} session-forgotten={} session-lapses={} recover={}ms sim={}ms wall={}ms faults={:?} events={:?}",
        r.seed,
        if r.passed() { "ok  " } else { "FAIL" },
        r.ops,
        r.acked_writes,
        r.unknown_writes,
        r.refused_cas,
        r.reads,
        r.chain_len,
        r.branch_merges,
        r.branch_abandons,
        r.redactions,
        r.retention_taken,
        r.session_forgotten,
        r.session_lapses,
        r.recovery.converge_ms.unwrap_or(0),
        r.sim_ms,
        r.wall_ms,
        r.fault_counts,
        r.events,
    )
}

/// Whether `ENGRAM_SIM_FORGETTING=1` asks for the speculator's redactions (`Options::forgetting`).
fn forgetting_from_env() -> bool {
    std::env::var("ENGRAM_SIM_FORGETTING").is_ok_and(|v| v == "1")
}

/// The bug `ENGRAM_SIM_BUG` names, if any.
fn planted_from_env() -> Option<PlantedBug> {
    std::env::var("ENGRAM_SIM_BUG")
        .ok()
        .and_then(|name| PlantedBug::ALL.into_iter().find(|b| format!("{b:?}") == name))
}

#[test]
fn seed_sweep() {
    let bug = planted_from_env();
    let count = env_u64("ENGRAM_SIM_SEEDS", 64);
    let start = env_u64("ENGRAM_SIM_START", 0);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    let threads = env_u64("ENGRAM_SIM_THREADS", cores).clamp(1, count.max(1));
    let wall = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut reports = Vec::new();
                let mut seed = start + t;
                while seed < start + count {
                    let r = run_seed(
                        seed,
                        &Options {
                            bug,
                            forgetting: forgetting_from_env(),
                            ..Options::default()
                        },
                    );
                    println!("{}", summary_line(&r));
                    if !r.passed() {
                        println!("{}", r.failure_text());
                    }
                    reports.push(r);
                    seed += threads;
                }
                reports
            })
        })
        .collect();
    let mut reports: Vec<SeedReport> = Vec::new();
    for w in workers {
        match w.join() {
            Ok(r) => reports.extend(r),
            Err(_) => panic!("a sweep thread panicked outside the simulation"),
        }
    }
    reports.sort_by_key(|r| r.seed);
    let wall_s = wall.elapsed().as_secs_f64();
    let sim_s: f64 = reports.iter().map(|r| r.sim_ms as f64 / 1000.0).sum();
    let busy_s: f64 = reports.iter().map(|r| r.wall_ms as f64 / 1000.0).sum();
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    let mut happened: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &reports {
        for k in r.mix.as_ref().map(|m| m.kinds()).unwrap_or_default() {
            *kinds.entry(k).or_insert(0) += 1;
        }
        for (k, n) in r.fault_counts.iter().chain(r.events.iter()) {
            if *n > 0 {
                *happened.entry(k).or_insert(0) += 1;
            }
        }
    }
    let failed: Vec<&SeedReport> = reports.iter().filter(|r| !r.passed()).collect();
    if let Some(bug) = bug {
        for r in &failed {
            println!(
                "sweep: {bug:?} caught on seed {} by {:?}",
                r.seed,
                r.failed_checkers()
            );
        }
        println!(
            "sweep: {bug:?} planted: caught on {} of {} seeds",
            failed.len(),
            reports.len()
        );
        return;
    }
    println!(
        "sweep: {} seeds from {start}, {} failed, {threads} threads, {wall_s:.1}s wall, {:.1} seeds/min, simulated {sim_s:.0}s in {busy_s:.0}s of thread time (ratio {:.2}), acked writes {}, ops {}, branch merges {}, abandons {}, redactions {}, datoms taken by retention {}, session notes forgotten {}, session lapses {}, entries applied again after a crash {} (each the same)",
        reports.len(),
        failed.len(),
        reports.len() as f64 * 60.0 / wall_s.max(0.001),
        sim_s / busy_s.max(0.001),
        reports.iter().map(|r| r.acked_writes).sum::<usize>(),
        reports.iter().map(|r| r.ops).sum::<usize>(),
        reports.iter().map(|r| r.branch_merges).sum::<usize>(),
        reports.iter().map(|r| r.branch_abandons).sum::<usize>(),
        reports.iter().map(|r| r.redactions).sum::<usize>(),
        reports.iter().map(|r| r.retention_taken).sum::<usize>(),
        reports.iter().map(|r| r.session_forgotten).sum::<usize>(),
        reports.iter().map(|r| r.session_lapses).sum::<usize>(),
        reports.iter().map(|r| r.reapplied).sum::<u64>(),
    );
    println!("sweep: seeds whose mix enabled each kind {kinds:?}");
    println!("sweep: seeds in which each fault fired / event happened {happened:?}");
    assert_eq!(reports.len() as u64, count, "every seed reports");
    // With redactions on, the keeper's retention policies must have taken something somewhere:
    // a retention job that never ran would pass every seed's checker.
    if forgetting_from_env() && count >= 8 {
        assert!(
            reports.iter().any(|r| r.retention_taken > 0),
            "retention took no datom of the keeper's in any of {count} seeds"
        );
        // And its session must have lapsed and been forgotten somewhere, or the sessions
        // checker judged nothing.
        assert!(
            reports
                .iter()
                .any(|r| r.session_lapses > 0 && r.session_forgotten > 0),
            "no keeper's session lapsed and was forgotten in any of {count} seeds"
        );
    }
    if !failed.is_empty() {
        let text: Vec<String> = failed.iter().map(|r| r.failure_text()).collect();
        panic!(
            "{} of {} seeds failed:\n{}",
            failed.len(),
            reports.len(),
            text.join("\n")
        );
    }
}

/// Replays one seed (`ENGRAM_SIM_SEED`, default 0; `ENGRAM_SIM_BUG` plants a bug) with its
/// whole fault log printed.
#[test]
fn one_seed() {
    let seed = env_u64("ENGRAM_SIM_SEED", 0);
    let bug = planted_from_env();
    let r = run_seed(
        seed,
        &Options {
            bug,
            forgetting: forgetting_from_env(),
            ..Options::default()
        },
    );
    println!("{}", summary_line(&r));
    if let Some(mix) = &r.mix {
        println!("fault mix: {mix}");
    }
    for line in &r.fault_log {
        println!("  {line}");
    }
    println!("trace {}", r.trace_hash);
    assert!(r.passed(), "{}", r.failure_text());
}
