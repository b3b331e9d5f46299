//! Records the reads, watches and exports this node serves on the namespaces it logs (its
//! `serve --access-log PREFIX` flag, and the prefixes the policy switches on for every node
//! with `engram access --enable`) into its access log (`engram_core::access_log`).
//!
//! A served call hands its event to one writer task over a bounded queue; the writer takes
//! whatever is queued, stamps it with this node's clock (node-local evidence, not replicated
//! state, so the clock is allowed here), and appends it in one synced write signed by the
//! node's current key. The call does not wait for the write: an event is durable within one
//! batch of the answer it records, and a crash in that window loses it. A full queue makes
//! calls wait rather than drop events.
//!
//! Refusals (a call refused for want of authentication or permission) are recorded whatever
//! namespaces the node logs, and without waiting: the refused caller is answered at once, so a
//! flood of refused calls cannot hold up the calls being served. A refusal that finds the queue
//! full is not recorded; it is counted (`engram_access_refusals_unrecorded_total`) and logged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use engram_audit::KeyRing;
use engram_core::access_log::{Access, AccessLog};
use engram_storage::Store;
use tokio::sync::mpsc;
use tracing::{error, warn};

/// Events queued at most before a call waits for the writer.
const QUEUE: usize = 4096;
/// Events appended at most per write.
const BATCH: usize = 1024;

/// Refusals that found the writer's queue full, since the process started.
static REFUSALS_UNRECORDED: AtomicU64 = AtomicU64::new(0);

/// Refusals not recorded since the process started (see the module docs).
#[cfg_attr(madsim, allow(dead_code))] // `/metrics` is served by the Tokio build only
pub fn refusals_unrecorded() -> u64 {
    REFUSALS_UNRECORDED.load(Ordering::Relaxed)
}

/// The recording end, shared by every service of the node.
pub struct AccessRecorder {
    /// Namespace prefixes this node's flag logs (`team` logs `team` and `team/...`; `*` logs
    /// everything, exports included).
    prefixes: Vec<String>,
    queue: mpsc::Sender<(i64, Access)>,
}

/// Whether `prefix` (an access log switch) covers calls on `namespace` (`""`: a cluster-wide
/// call, covered by `*` only).
pub fn prefix_logs(prefix: &str, namespace: &str) -> bool {
    prefix == "*"
        || (!namespace.is_empty()
            && (namespace == prefix
                || namespace
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('/'))))
}

impl AccessRecorder {
    /// Starts the writer over `store`, signing with the ring's current key; `prefixes` are the
    /// node flag's. The policy may switch more on at any time, so the writer always runs.
    pub fn start(
        prefixes: Vec<String>,
        store: Arc<dyn Store>,
        keys: Arc<KeyRing>,
    ) -> Result<AccessRecorder, String> {
        let log = AccessLog::open(store.as_ref()).map_err(|e| format!("cannot open the access log: {e}"))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::task::spawn(write(log, store, keys, rx));
        Ok(AccessRecorder { prefixes, queue: tx })
    }

    /// The node flag's prefixes.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// Whether this node's flag logs calls on `namespace`.
    pub fn covers(&self, namespace: &str) -> bool {
        self.prefixes.iter().any(|p| prefix_logs(p, namespace))
    }

    /// Records a refused call, without waiting (see the module docs).
    pub fn refuse(&self, access: engram_core::access_log::Access) {
        let now_ns = engram_raft::clock::now_ns();
        if let Err(e) = self.queue.try_send((now_ns, access)) {
            let (mpsc::error::TrySendError::Full((_, a)) | mpsc::error::TrySendError::Closed((_, a))) = e;
            REFUSALS_UNRECORDED.fetch_add(1, Ordering::Relaxed);
            warn!(
                principal = %a.principal,
                call = a.call,
                "the access log's queue is full: a refused call was not recorded"
            );
        }
    }

    /// Records `access` (the caller decided it is logged).
    pub async fn record(&self, access: Access) {
        let now_ns = engram_raft::clock::now_ns();
        if self.queue.send((now_ns, access)).await.is_err() {
            error!("the access log writer has stopped: an access event was not recorded");
        }
    }
}

async fn write(
    mut log: AccessLog,
    store: Arc<dyn Store>,
    keys: Arc<KeyRing>,
    mut rx: mpsc::Receiver<(i64, Access)>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let calls = std::mem::take(&mut batch);
        let n = calls.len();
        let key = keys.current();
        let store = store.clone();
        let Some((back, result)) = append(log, store, calls, key).await else {
            error!("the access log writer failed");
            return;
        };
        log = back;
        if let Err(e) = result {
            error!(events = n, error = %e, "cannot write the access log: events lost");
        }
    }
}

type Appended = (AccessLog, Result<(), engram_core::CoreError>);

/// Appends `calls` to `log`. The synced write blocks, so it runs off the async threads; the
/// log moves in and out so the writer task owns it throughout. `None`: the blocking task died.
#[cfg(not(madsim))]
async fn append(
    mut log: AccessLog,
    store: Arc<dyn Store>,
    calls: Vec<(i64, Access)>,
    key: Arc<engram_audit::NodeKey>,
) -> Option<Appended> {
    tokio::task::spawn_blocking(move || {
        let result = log.append(store.as_ref(), calls, &key);
        (log, result)
    })
    .await
    .ok()
}

/// The simulation has no blocking threads: the append runs in the task.
#[cfg(madsim)]
async fn append(
    mut log: AccessLog,
    store: Arc<dyn Store>,
    calls: Vec<(i64, Access)>,
    key: Arc<engram_audit::NodeKey>,
) -> Option<Appended> {
    let result = log.append(store.as_ref(), calls, &key);
    Some((log, result))
}
