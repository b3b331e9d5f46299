//! The whole comparison: writes, point reads, as-of reads and histories at growing store
//! sizes, and Watch fan-out, every point run against each system in turn (A B A B).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::driver::Plan;
use crate::matrix::{Fanout, Measurement, ReadKind, System, WatchLayout, Workload, measure, watch_fanout};

/// What a suite runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SuiteSpec {
    /// Client counts of the write and point-read runs.
    pub clients: Vec<usize>,
    /// `(datoms per transaction, value bytes)` of the write runs.
    pub writes: Vec<(usize, usize)>,
    /// Point reads (linearizable, stale) after the keys are loaded.
    pub reads: Vec<ReadKind>,
    /// Keys the reads pick from.
    pub keys: usize,
    /// Value size of the loaded keys.
    pub value_bytes: usize,
    /// Store sizes (values written by the preload) at which the history reads run.
    pub history_datoms: Vec<u64>,
    /// Reads run at each history size (as-of, history).
    pub history_reads: Vec<ReadKind>,
    /// Client counts of the history reads.
    pub history_clients: Vec<usize>,
    /// Subscriber counts of the Watch fan-out runs.
    pub fanout_subscribers: Vec<usize>,
    /// The connection layouts each subscriber count runs in.
    pub fanout_layouts: Vec<WatchLayout>,
    pub fanout_markers: u64,
    pub fanout_gap_ms: u64,
    /// Each point is measured this many times per system, the systems taking turns.
    pub rounds: usize,
    pub warmup: Duration,
    pub measure: Duration,
}

/// Everything a suite measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SuiteReport {
    pub measurements: Vec<Measurement>,
    pub fanouts: Vec<Fanout>,
    /// `(system, values, seconds)` of each preload stage.
    pub preloads: Vec<(String, u64, f64)>,
    /// What could not be measured, and why.
    pub skipped: Vec<String>,
}

/// Progress of a suite, for a progress bar.
pub trait Progress: Send + Sync {
    /// A new phase starts (`steps` measured points in it).
    fn phase(&self, name: &str, steps: u64);
    fn step(&self, note: &str);
    /// Values a preload has written so far.
    fn loaded(&self, system: &str, values: u64, target: u64);
}

/// Runs `spec` against every system.
pub async fn run_suite(
    systems: &[Arc<dyn System>],
    spec: &SuiteSpec,
    progress: &dyn Progress,
) -> SuiteReport {
    let mut report = SuiteReport::default();
    let plan = |clients| Plan {
        clients,
        warmup: spec.warmup,
        measure: spec.measure,
    };
    let point = |report: &mut SuiteReport, m: Measurement| {
        progress.step(&format!(
            "{} {:?} x{}: {:.0}/s p50 {:.2} ms",
            m.system,
            m.workload,
            m.clients,
            m.throughput_per_s,
            m.latency.p50_us / 1000.0
        ));
        report.measurements.push(m);
    };
    let n = systems.len() as u64 * spec.rounds as u64;

    progress.phase("writes", spec.writes.len() as u64 * spec.clients.len() as u64 * n);
    for &(datoms, value_bytes) in &spec.writes {
        for &clients in &spec.clients {
            for round in 0..spec.rounds {
                for sys in systems {
                    let w = Workload::Write { datoms, value_bytes };
                    point(&mut report, measure(sys.clone(), w, &plan(clients), round).await);
                }
            }
        }
    }

    let needs_keys = !spec.reads.is_empty() || !spec.history_reads.is_empty();
    if needs_keys {
        preload_all(systems, spec, spec.keys as u64, &mut report, progress).await;
    }
    progress.phase(
        "point reads",
        spec.reads.len() as u64 * spec.clients.len() as u64 * n,
    );
    for &read in &spec.reads {
        for &clients in &spec.clients {
            for round in 0..spec.rounds {
                for sys in systems.iter().filter(|s| s.supports(read)) {
                    let w = Workload::Read { read };
                    point(&mut report, measure(sys.clone(), w, &plan(clients), round).await);
                }
            }
        }
    }

    for &size in &spec.history_datoms {
        preload_all(systems, spec, size, &mut report, progress).await;
        progress.phase(
            &format!("history reads at {size} values"),
            spec.history_reads.len() as u64 * spec.history_clients.len() as u64 * n,
        );
        for &read in &spec.history_reads {
            for &clients in &spec.history_clients {
                for round in 0..spec.rounds {
                    for sys in systems {
                        if !sys.supports(read) {
                            continue;
                        }
                        let w = Workload::Read { read };
                        let mut m = measure(sys.clone(), w, &plan(clients), round).await;
                        m.at_values = Some(size);
                        point(&mut report, m);
                    }
                }
            }
        }
        for sys in systems {
            for &read in &spec.history_reads {
                if !sys.supports(read) {
                    report
                        .skipped
                        .push(format!("{} has no {read:?} read", sys.name()));
                }
            }
        }
    }

    let fanouts: Vec<(usize, WatchLayout)> = spec
        .fanout_subscribers
        .iter()
        .flat_map(|&subs| spec.fanout_layouts.iter().map(move |&layout| (subs, layout)))
        .collect();
    progress.phase("watch fan-out", fanouts.len() as u64 * n);
    let mut run = 0u64;
    for &(subs, layout) in &fanouts {
        for _round in 0..spec.rounds {
            for sys in systems {
                run += 1;
                let markers = spec.fanout_markers;
                match watch_fanout(sys.clone(), run, subs, layout, markers, spec.fanout_gap_ms).await {
                    Ok(f) => {
                        progress.step(&format!(
                            "{} fan-out to {subs} ({layout}): {}/{} delivered, p99 {:.2} ms",
                            f.system,
                            f.delivered,
                            f.expected,
                            f.latency.p99_us / 1000.0
                        ));
                        report.fanouts.push(f);
                    }
                    Err(e) => report
                        .skipped
                        .push(format!("{} fan-out to {subs} ({layout}): {e}", sys.name())),
                }
            }
        }
    }
    report.skipped.sort();
    report.skipped.dedup();
    report
}

async fn preload_all(
    systems: &[Arc<dyn System>],
    spec: &SuiteSpec,
    total: u64,
    report: &mut SuiteReport,
    progress: &dyn Progress,
) {
    for sys in systems {
        let name = sys.name();
        progress.phase(&format!("loading {name} to {total} values"), 0);
        let started = std::time::Instant::now();
        // The preload's callback must be 'static; it counts into an atomic this loop reports.
        let written = Arc::new(AtomicU64::new(0));
        let sink = written.clone();
        let load = sys.preload(
            spec.keys,
            spec.value_bytes,
            total,
            Box::new(move |n| sink.store(n, Ordering::Relaxed)),
        );
        tokio::pin!(load);
        let result = loop {
            tokio::select! {
                r = &mut load => break r,
                _ = tokio::time::sleep(Duration::from_millis(250)) => {
                    progress.loaded(&name, written.load(Ordering::Relaxed), total);
                }
            }
        };
        progress.loaded(&name, written.load(Ordering::Relaxed), total);
        match result {
            Ok(()) => report
                .preloads
                .push((name, total, started.elapsed().as_secs_f64())),
            Err(e) => report
                .skipped
                .push(format!("{name}: preload to {total} values failed: {e}")),
        }
    }
}
