//! The node's job log (`engram_core::jobs`) as its background work uses it: each job's times
//! from the node's clock, and a failure to record a job logged as a warning, never a failure
//! of the job itself.

use std::fmt::Display;
use std::sync::Arc;

pub use engram_core::jobs::{Job, JobKind, JobOutcome};
use engram_core::jobs::{JobLog, Started};
use engram_storage::Store;
use tracing::warn;

use crate::clock;

/// The node's job log, shared by every task that records background work.
pub struct Jobs {
    log: JobLog,
    store: Arc<dyn Store>,
}

impl Jobs {
    /// Opens the log on `store` (a job a stop cut short is marked interrupted).
    pub fn open(store: Arc<dyn Store>) -> Result<Arc<Jobs>, engram_core::CoreError> {
        Ok(Arc::new(Jobs {
            log: JobLog::open(store.clone())?,
            store,
        }))
    }

    /// Records that a job of `kind` starts now. Dropping the answer without [`Running::done`]
    /// or [`Running::failed`] records the job as failed (an early return by `?`).
    pub fn start(self: &Arc<Jobs>, kind: JobKind, subject: impl Into<String>) -> Running {
        let started = match self.log.start(kind, subject, clock::now_ns()) {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(job = kind.name(), error = %e, "job log: cannot record a job's start");
                None
            }
        };
        Running {
            jobs: self.clone(),
            started,
        }
    }

    /// The newest jobs first, at most `limit`, of `kind` only when given.
    pub fn list(&self, kind: Option<JobKind>, limit: usize) -> Result<Vec<Job>, engram_core::CoreError> {
        engram_core::jobs::list(&*self.store, kind, limit)
    }
}

/// A job under way.
pub struct Running {
    jobs: Arc<Jobs>,
    started: Option<Started>,
}

impl Running {
    /// The job ended well, having done `figures`.
    pub fn done(mut self, figures: impl IntoIterator<Item = (&'static str, u64)>) {
        self.end(Ok(()), figures);
    }

    /// The job ended in `why`.
    pub fn failed(mut self, why: impl Display, figures: impl IntoIterator<Item = (&'static str, u64)>) {
        self.end(Err(why.to_string()), figures);
    }

    fn end(&mut self, outcome: Result<(), String>, figures: impl IntoIterator<Item = (&'static str, u64)>) {
        if let Some(started) = self.started.take()
            && let Err(e) = self.jobs.log.finish(started, outcome, figures, clock::now_ns())
        {
            warn!(error = %e, "job log: cannot record a job's end");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.end(Err("stopped before it finished".into()), []);
    }
}
