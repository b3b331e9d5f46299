//! The watcher agents: each follows the workload's namespace through `Client::watch` (the public
//! client, with its resume-on-another-node logic) for the whole run, through every fault, and
//! records the tx ids it is given. The `watch_complete` checker then holds it to the watch's
//! promise: every committed transaction once, in order, none missing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use engram_client::{Client, ClientConfig, WatchFilter};
use engram_types::Namespace;
use futures::StreamExt;

use crate::workload::NAMESPACE;

/// What the watcher saw, shared with the harness.
#[derive(Default)]
pub struct WatchLog {
    /// Tx ids in the order they were delivered.
    pub txs: std::sync::Mutex<Vec<u64>>,
    /// Stop once this tx id has been delivered (0: keep going).
    pub until_tx: AtomicU64,
    /// Streams that ended with an error and were reopened by the watcher from its last tx.
    pub reopened: AtomicU64,
}

/// How long without an event before the watcher moves to another node: a node that left the
/// cluster (or is cut off) keeps its stream open but has nothing new to say.
const STALL: Duration = Duration::from_secs(3);

/// Opens after `delay`, then runs until the harness sets `until_tx` and the watcher has
/// delivered it, or `deadline` after it started.
pub async fn run_watcher(targets: Vec<String>, log: Arc<WatchLog>, deadline: Duration, delay: Duration) {
    let started = madsim::time::Instant::now();
    // A watcher that opens late starts behind the node's ring and reads pages of the store
    // first, with the others that opened at about the same time.
    madsim::time::sleep(delay).await;
    let namespace = Namespace::new(NAMESPACE).expect("the workload namespace is valid");
    let mut last: Option<u64> = None;
    let mut first = 0usize;
    while started.elapsed() < deadline {
        // Each (re)open starts from another node, and resumes after the last tx delivered.
        let mut order = targets.clone();
        order.rotate_left(first % targets.len().max(1));
        first += 1;
        let Ok(client) = Client::with_config(order, ClientConfig::default()) else {
            return;
        };
        let mut stream = client.watch(WatchFilter {
            namespace: namespace.clone(),
            from_tx: last.map_or(0, |t| t + 1),
            attribute: None,
            entity: None,
            branch: None,
        });
        let mut progress = madsim::time::Instant::now();
        loop {
            let until = log.until_tx.load(Ordering::Relaxed);
            if (until > 0 && last.is_some_and(|t| t >= until)) || started.elapsed() >= deadline {
                return;
            }
            match madsim::time::timeout(Duration::from_millis(500), stream.next()).await {
                Ok(Some(Ok(event))) => {
                    last = Some(event.tx);
                    progress = madsim::time::Instant::now();
                    log.txs.lock().unwrap_or_else(|e| e.into_inner()).push(event.tx);
                }
                // The client's retry budget ran out (a long partition): reopen from the last tx,
                // as an application would.
                Ok(Some(Err(_))) | Ok(None) => {
                    log.reopened.fetch_add(1, Ordering::Relaxed);
                    madsim::time::sleep(Duration::from_millis(200)).await;
                    break;
                }
                Err(_) if progress.elapsed() >= STALL => {
                    log.reopened.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(_) => {}
            }
        }
    }
}
