//! Store reads that may run long — a watch catching up from an old position, pages of a large
//! log, a page of History or Find — run here: on blocking threads, a bounded number at a time, never on the async
//! workers.
//!
//! The Raft core, its network and apply run as tasks on the node's async workers. A long
//! synchronous read on a worker holds that worker; a hundred watchers reading from the first
//! transaction of a large store held every worker, Raft's heartbeats went unanswered, and the
//! cluster elected a new leader. Here a read waits for a permit without holding a worker, and
//! the readers together hold at most `permits` threads, so the workers that drive Raft always
//! have cores to run on.

use std::sync::Arc;

use engram_raft::{NodeError, RaftNode};
use tokio::sync::Semaphore;

/// Bounded blocking threads for long store reads.
pub struct ReadPool {
    permits: Arc<Semaphore>,
}

impl ReadPool {
    /// A pool that runs at most `threads` reads at once (at least one).
    pub fn new(threads: usize) -> ReadPool {
        ReadPool {
            permits: Arc::new(Semaphore::new(threads.max(1))),
        }
    }

    /// Half the machine's cores, at least two: reads keep going on a small machine, and the
    /// other half is left to Raft and the services.
    pub fn for_this_machine() -> ReadPool {
        // The simulation replays a seed the same way on any machine: its pool does not
        // depend on the cores of the one it runs on.
        #[cfg(madsim)]
        let cores: usize = 2;
        #[cfg(not(madsim))]
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        ReadPool::new(cores.div_ceil(2).max(2))
    }

    /// Runs `read` on `node`'s state (see `RaftNode::read_state`) on a pool thread, once a
    /// permit is free.
    pub async fn read<T: Send + 'static>(
        &self,
        node: &RaftNode,
        read: impl FnOnce(&dyn engram_storage::Store) -> T + Send + 'static,
    ) -> Result<T, NodeError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| NodeError::Unavailable("this node is shutting down".into()))?;
        // The simulation has no blocking threads: there the read runs in the task, still
        // bounded by the permits.
        #[cfg(madsim)]
        {
            let _permit = permit;
            node.read_state(read)
        }
        #[cfg(not(madsim))]
        {
            let node = node.clone();
            match tokio::task::spawn_blocking(move || {
                let _permit = permit;
                node.read_state(read)
            })
            .await
            {
                Ok(out) => out,
                Err(e) => Err(NodeError::Fatal(format!("a store read failed: {e}"))),
            }
        }
    }
}

impl Default for ReadPool {
    fn default() -> Self {
        ReadPool::for_this_machine()
    }
}

/// Runs a watcher's task where it cannot crowd the node's Raft core: on a runtime of its own
/// (about half the cores, one at least), whose blocking threads also run its page reads.
///
/// On the node's own runtime, a hundred watchers reading a 1 M-datom store from its first
/// transaction queued a hundred busy tasks ahead of every Raft task on two workers; heartbeats
/// waited longer than the 200-400 ms election timeout and leadership moved. Here the operating
/// system schedules the watchers' threads beside Raft's, each getting its share. (A lower
/// priority for the watch threads, nice 10, made no difference to Raft in that test and put
/// the fan-out's p99 at 1,000 watchers after a write load from 262 ms to 603-1,052 ms.)
pub fn spawn_watcher<F>(task: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    #[cfg(not(madsim))]
    if let Some(runtime) = watch_runtime() {
        runtime.spawn(task);
        return;
    }
    tokio::task::spawn(task);
}

/// The process's watch runtime, built on first use (`None` if the threads could not be made:
/// watchers then run on the caller's runtime).
#[cfg(not(madsim))]
fn watch_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(2, usize::from);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(cores.div_ceil(2))
                .thread_name("engram-watch")
                .enable_all()
                .build()
                .map_err(|e| tracing::warn!(error = %e, "no watch runtime; watchers share the node's"))
                .ok()
        })
        .as_ref()
}
