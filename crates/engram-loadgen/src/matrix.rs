//! The workloads, the [`System`] they run against, and one measured point.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::OpFuture;
use crate::driver::{Plan, closed_loop};
use crate::latency::{Latency, LatencyRecorder};

/// Which read a read workload makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadKind {
    /// The current value, confirmed with a quorum (Engram's default; etcd's default Range).
    Linearizable,
    /// The current value from the answering member's applied state (Engram `stale`, etcd
    /// `serializable`).
    Stale,
    /// One key's value as of a random earlier version (Engram `as_of_tx`, etcd `revision`).
    AsOf,
    /// Every version of one key (Engram `History`; etcd has no history call).
    History,
    /// The current value, linearizable, with an inclusion proof the client checks (Engram
    /// `get_verified`; etcd proves nothing).
    Proven,
    /// The current value, linearizable, proven complete and current against the state root
    /// and folded by the client (Engram `get_complete`).
    Complete,
}

/// How a fan-out run's subscriptions reach the servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WatchLayout {
    /// Each subscription on a connection of its own (many processes, one agent each).
    #[default]
    Own,
    /// The subscriptions multiplexed over the system's few shared connections (one process
    /// holding many watches), round-robin.
    Shared,
}

impl std::fmt::Display for WatchLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WatchLayout::Own => "own connections",
            WatchLayout::Shared => "shared connections",
        })
    }
}

/// One workload of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Workload {
    /// Transactions of `datoms` new values of `value_bytes` bytes each.
    Write { datoms: usize, value_bytes: usize },
    /// Point reads of keys loaded before the run.
    Read { read: ReadKind },
}

/// A system under test, seen through the operations the workloads need. Every future is
/// `'static` so the driver can run it on its own task; implementations clone their handles in.
pub trait System: Send + Sync + 'static {
    fn name(&self) -> String;
    /// The server processes whose CPU a run charges to the system.
    fn server_pids(&self) -> Vec<u32>;
    /// One transaction writing `datoms` new values, each `value`; `client` picks the
    /// connection and `seq` makes the keys distinct.
    fn write(&self, client: usize, seq: u64, datoms: usize, value: Arc<[u8]>) -> OpFuture;
    /// Loads `keys` keys of `value_bytes` bytes, then rewrites them until the store holds at
    /// least `total_datoms` values in all (so as-of reads and histories have versions to
    /// walk). `progress` is told the values written so far.
    fn preload(
        &self,
        keys: usize,
        value_bytes: usize,
        total_datoms: u64,
        progress: Box<dyn Fn(u64) + Send + Sync>,
    ) -> BoxFuture<'static, Result<(), String>>;
    /// One read of the preloaded key chosen by `pick` (and, for as-of, the version).
    fn read(&self, client: usize, pick: u64, read: ReadKind) -> OpFuture;
    /// Called before each measured point: a system can follow a leader change here, so every
    /// point measures the path the workload means (writes to the leader, not forwarded).
    fn prepare(&self) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
    /// Whether the system has this read at all.
    fn supports(&self, read: ReadKind) -> bool {
        let _ = read;
        true
    }
    /// A subscription to the markers [`System::write_marker`] writes in fan-out run `run`,
    /// delivering each marker's number; it sees nothing of other runs. `layout` says whether
    /// it gets a connection of its own.
    fn subscribe(
        &self,
        run: u64,
        subscriber: usize,
        layout: WatchLayout,
    ) -> BoxFuture<'static, Result<BoxStream<'static, Result<u64, String>>, String>>;
    /// Writes marker `n` of run `run` (one small transaction) where its subscriptions see it.
    fn write_marker(&self, run: u64, n: u64) -> OpFuture;
}

/// One measured point of the matrix, as the report and the plots read it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    pub system: String,
    pub workload: Workload,
    pub clients: usize,
    /// Which interleaved round this is (0-based).
    pub round: usize,
    /// For history reads: the values the preload had written when this ran.
    pub at_values: Option<u64>,
    pub ops: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub window_s: f64,
    pub throughput_per_s: f64,
    pub latency: Latency,
    /// Server CPU (all members together) per successful operation.
    pub server_cpu_us_per_op: f64,
    /// Load-generator CPU per successful operation.
    pub client_cpu_us_per_op: f64,
}

/// The payload of a write workload: `bytes` printable bytes (both systems store strings), in
/// words of five letters, so Engram's recall index has words to index, as it would in prose.
pub fn value_of(bytes: usize) -> Arc<[u8]> {
    (0..bytes)
        .map(|i| if i % 6 == 5 { b' ' } else { b'a' + (i % 26) as u8 })
        .collect::<Vec<u8>>()
        .into()
}

/// A well-mixed 64-bit value from a client and its sequence number (SplitMix64), so the keys a
/// read run picks are spread evenly, without an RNG dependency and the same in every run.
fn mix(client: usize, seq: u64) -> u64 {
    let mut z = (client as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(seq)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Runs one point: `workload` from `plan.clients` clients against `system`.
pub async fn measure(system: Arc<dyn System>, workload: Workload, plan: &Plan, round: usize) -> Measurement {
    let prepared = system
        .prepare()
        .await
        .err()
        .map(|e| format!("before the run: {e}"));
    let pids = system.server_pids();
    let sys = system.clone();
    let outcome = match workload {
        Workload::Write { datoms, value_bytes } => {
            let value = value_of(value_bytes);
            closed_loop(plan, &pids, move |client, seq| {
                sys.write(client, seq, datoms, value.clone())
            })
            .await
        }
        Workload::Read { read } => {
            closed_loop(plan, &pids, move |client, seq| {
                sys.read(client, mix(client, seq), read)
            })
            .await
        }
    };
    let per_op = |cpu_s: f64| {
        if outcome.ops == 0 {
            0.0
        } else {
            cpu_s * 1e6 / outcome.ops as f64
        }
    };
    Measurement {
        system: system.name(),
        workload,
        clients: plan.clients,
        round,
        at_values: None,
        ops: outcome.ops,
        errors: outcome.errors,
        first_error: outcome.first_error.clone().or(prepared),
        window_s: outcome.window_s,
        throughput_per_s: outcome.throughput_per_s(),
        latency: outcome.latency.summary(200),
        server_cpu_us_per_op: per_op(outcome.server_cpu_s),
        client_cpu_us_per_op: per_op(outcome.client_cpu_s),
    }
}

/// The rewrite half of a [`System::preload`]: `writers` concurrent writers rewrite keys
/// `0..keys` in turn, `batch` per transaction (so each key at most once per transaction), until
/// `written` reaches `target`. `write(start, n)` writes keys `start..start + n` (modulo `keys`)
/// as one transaction and returns its position in the system's history (tx id, revision); the
/// lowest and highest positions written come back (`None`: nothing was written).
pub async fn rewrite_in_turn<W>(
    keys: u64,
    batch: u64,
    writers: usize,
    target: u64,
    written: Arc<AtomicU64>,
    progress: Arc<dyn Fn(u64) + Send + Sync>,
    write: W,
) -> Result<Option<(u64, u64)>, String>
where
    W: Fn(u64, u64) -> BoxFuture<'static, Result<u64, String>> + Send + Sync + 'static,
{
    let batch = batch.min(keys);
    let write = Arc::new(write);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(writers);
    for _ in 0..writers {
        let (write, next, written, progress) =
            (write.clone(), next.clone(), written.clone(), progress.clone());
        tasks.push(tokio::spawn(async move {
            let mut range: Option<(u64, u64)> = None;
            while written.load(Ordering::Relaxed) < target && batch > 0 {
                let start = next.fetch_add(batch, Ordering::Relaxed) % keys;
                let at = write(start, batch).await?;
                range = Some(range.map_or((at, at), |(lo, hi)| (lo.min(at), hi.max(at))));
                progress(written.fetch_add(batch, Ordering::Relaxed) + batch);
            }
            Ok::<_, String>(range)
        }));
    }
    let mut all: Option<(u64, u64)> = None;
    for t in tasks {
        if let Some((lo, hi)) = t.await.map_err(|e| e.to_string())?? {
            all = Some(all.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
    }
    Ok(all)
}

/// Watch fan-out: what `subscribers` subscriptions saw of `markers` writes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fanout {
    pub system: String,
    pub subscribers: usize,
    #[serde(default)]
    pub layout: WatchLayout,
    pub markers: u64,
    /// Deliveries expected (`subscribers × markers`) and made within the deadline.
    pub expected: u64,
    pub delivered: u64,
    /// From the start of the write to its arrival at each subscriber.
    pub latency: Latency,
    /// How long each marker's write took to be acknowledged: the part of `latency` that is
    /// the write's commit, not the delivery (absent from reports made before it was kept).
    #[serde(default)]
    pub write_latency: Latency,
    /// The servers' resident memory grown by opening the subscriptions, per subscription,
    /// before any marker was written: what an idle watcher costs (bytes).
    #[serde(default)]
    pub server_bytes_per_watcher: f64,
}

/// How long the fan-out waits after opening its subscriptions before it measures the servers'
/// memory and writes the first marker (plus 0.2 ms per subscription).
const IDLE_WATCH_SETTLE_MS: u64 = 500;

/// Opens `subscribers` subscriptions to run `run` (a number no earlier run used) in `layout`,
/// writes `markers` markers one after another (`gap_ms` apart), and measures how long each
/// took to reach every subscriber.
pub async fn watch_fanout(
    system: Arc<dyn System>,
    run: u64,
    subscribers: usize,
    layout: WatchLayout,
    markers: u64,
    gap_ms: u64,
) -> Result<Fanout, String> {
    let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let pids = system.server_pids();
    let rss_before = crate::cpu::resident_bytes(&pids);
    let mut streams = Vec::with_capacity(subscribers);
    for s in 0..subscribers {
        streams.push(system.subscribe(run, s, layout).await?);
    }
    let base = 0;
    let mut tasks = Vec::with_capacity(subscribers);
    for mut stream in streams {
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let mut rec = LatencyRecorder::default();
            let mut seen = 0u64;
            let deadline =
                tokio::time::sleep(Duration::from_secs(30) + Duration::from_millis(gap_ms * markers));
            tokio::pin!(deadline);
            while seen < markers {
                tokio::select! {
                    _ = &mut deadline => break,
                    item = stream.next() => match item {
                        Some(Ok(n)) if n >= base && n < base + markers => {
                            let at = sent.lock().ok().and_then(|m| m.get(&n).copied());
                            if let Some(at) = at {
                                rec.record(at.elapsed());
                            }
                            seen += 1;
                        }
                        Some(Ok(_)) => {}
                        Some(Err(_)) | None => break,
                    }
                }
            }
            rec
        }));
    }
    // The subscription tasks open their calls as they start polling (some clients open a
    // watch lazily); give the last ones a moment before measuring what they hold.
    tokio::time::sleep(Duration::from_millis(
        IDLE_WATCH_SETTLE_MS + subscribers as u64 / 5,
    ))
    .await;
    let rss_grown = crate::cpu::resident_bytes(&pids).saturating_sub(rss_before);
    let mut writes = LatencyRecorder::default();
    for i in 0..markers {
        let n = base + i;
        let start = Instant::now();
        if let Ok(mut m) = sent.lock() {
            m.insert(n, start);
        }
        system.write_marker(run, n).await?;
        writes.record(start.elapsed());
        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
    }
    let mut all = LatencyRecorder::default();
    for t in tasks {
        if let Ok(rec) = t.await {
            all.merge(rec);
        }
    }
    Ok(Fanout {
        system: system.name(),
        subscribers,
        layout,
        markers,
        expected: subscribers as u64 * markers,
        delivered: all.len() as u64,
        latency: all.summary(200),
        write_latency: writes.summary(200),
        server_bytes_per_watcher: rss_grown as f64 / subscribers.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_spread_over_the_keys() {
        let mut hits = [0u32; 10];
        for seq in 0..10_000 {
            hits[(mix(3, seq) % 10) as usize] += 1;
        }
        assert!(hits.iter().all(|h| (800..1200).contains(h)), "{hits:?}");
        assert_ne!(mix(0, 1), mix(1, 0));
    }

    #[test]
    fn values_have_the_asked_size_and_are_words() {
        let v = value_of(100);
        assert_eq!(v.len(), 100);
        assert!(v.iter().all(|b| b.is_ascii_lowercase() || *b == b' '));
        let text = String::from_utf8(v.to_vec()).unwrap();
        assert_eq!(text.split(' ').filter(|w| w.len() == 5).count(), 16, "{text}");
    }
}
