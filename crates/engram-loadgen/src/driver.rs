//! The closed-loop driver.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::OpFuture;
use crate::cpu::CpuMeter;
use crate::latency::LatencyRecorder;

/// How long and how wide one run is.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Concurrent clients, each with at most one request in flight.
    pub clients: usize,
    /// Requests that start before this has passed do not count (connections, caches, leases).
    pub warmup: Duration,
    /// The measured window.
    pub measure: Duration,
}

/// What one run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Requests that succeeded inside the window.
    pub ops: u64,
    /// Requests that failed inside the window.
    pub errors: u64,
    /// The first failure of the run (warm-up included), for the report.
    pub first_error: Option<String>,
    pub window_s: f64,
    pub latency: LatencyRecorder,
    /// CPU seconds the given server processes used during the window.
    pub server_cpu_s: f64,
    /// CPU seconds this process (the clients) used during the window.
    pub client_cpu_s: f64,
}

impl Outcome {
    pub fn throughput_per_s(&self) -> f64 {
        if self.window_s > 0.0 {
            self.ops as f64 / self.window_s
        } else {
            0.0
        }
    }
}

struct ClientTally {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    latency: LatencyRecorder,
}

/// Runs `op(client, seq)` in a closed loop from `plan.clients` concurrent clients, measuring
/// the requests that start after the warm-up and finish before the window ends, and the CPU of
/// `server_pids` over the window.
pub async fn closed_loop<F>(plan: &Plan, server_pids: &[u32], op: F) -> Outcome
where
    F: Fn(usize, u64) -> OpFuture + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let measure_start = start + plan.warmup;
    let end = measure_start + plan.measure;

    let pids = server_pids.to_vec();
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until(measure_start).await;
        let servers = CpuMeter::start(&pids);
        let me = CpuMeter::start(&[std::process::id()]);
        tokio::time::sleep_until(end).await;
        (servers.seconds(), me.seconds())
    });

    let mut tasks = Vec::with_capacity(plan.clients);
    for client in 0..plan.clients {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut t = ClientTally {
                ops: 0,
                errors: 0,
                first_error: None,
                latency: LatencyRecorder::default(),
            };
            let mut seq = 0u64;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let result = op(client, seq).await;
                let t1 = Instant::now();
                seq += 1;
                let counted = t0 >= measure_start && t1 <= end;
                match result {
                    Ok(()) if counted => {
                        t.ops += 1;
                        t.latency.record(t1 - t0);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        if counted {
                            t.errors += 1;
                        }
                        t.first_error.get_or_insert(e);
                    }
                }
            }
            t
        }));
    }

    let mut out = Outcome {
        window_s: plan.measure.as_secs_f64(),
        ..Outcome::default()
    };
    for task in tasks {
        match task.await {
            Ok(t) => {
                out.ops += t.ops;
                out.errors += t.errors;
                out.latency.merge(t.latency);
                if out.first_error.is_none() {
                    out.first_error = t.first_error;
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(format!("client task failed: {e}"));
            }
        }
    }
    if let Ok((servers, me)) = cpu.await {
        out.server_cpu_s = servers;
        out.client_cpu_s = me;
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn every_client_runs_and_only_the_window_counts() {
        let calls = Arc::new(AtomicU64::new(0));
        let seen = calls.clone();
        let plan = Plan {
            clients: 4,
            warmup: Duration::from_millis(100),
            measure: Duration::from_millis(300),
        };
        let out = closed_loop(&plan, &[], move |client, seq| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
                // One client fails every tenth request.
                if client == 3 && seq % 10 == 9 {
                    Err(format!("planned failure {seq}"))
                } else {
                    Ok(())
                }
            }
            .boxed()
        })
        .await;
        // 4 clients × 300 ms / ~5 ms: about 240 counted; timers are coarse, so bound loosely.
        assert!(out.ops > 60 && out.ops < 250, "ops {}", out.ops);
        assert!(out.errors >= 1, "the planned failures are counted");
        assert!(
            out.first_error
                .as_deref()
                .is_some_and(|e| e.starts_with("planned failure"))
        );
        // Warm-up requests ran but were not counted.
        assert!(calls.load(Ordering::Relaxed) > out.ops + out.errors);
        let l = out.latency.summary(10);
        assert_eq!(l.samples, out.ops);
        assert!(l.p50_us >= 5_000.0, "each request sleeps 5 ms: {l:?}");
        assert!((out.throughput_per_s() - out.ops as f64 / 0.3).abs() < 1e-6);
    }
}
