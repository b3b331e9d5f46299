//! The node's job log (`engram_core::jobs`) as its background work uses it: each job's times
//! from the node's clock, and a failure to record a job logged as a warning, never a failure
//! of the job itself.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use engram_core::jobs::{Job, JobKind, JobOutcome};
use engram_core::jobs::{JobLog, Started};
use engram_storage::Store;
use tracing::warn;

use crate::clock;

/// The node's job log, shared by every task that records background work.
pub struct Jobs {
    log: JobLog,
    store: Arc<dyn Store>,
    /// Jobs ended since this process started, per kind: (done, failed), for `/metrics`.
    ended: [(AtomicU64, AtomicU64); JobKind::ALL.len()],
}

impl Jobs {
    /// Opens the log on `store` (a job a stop cut short is marked interrupted).
    pub fn open(store: Arc<dyn Store>) -> Result<Arc<Jobs>, engram_core::CoreError> {
        Ok(Arc::new(Jobs {
            log: JobLog::open(store.clone())?,
            store,
            ended: Default::default(),
        }))
    }

    /// Jobs ended since this process started: (kind, done, failed) for every kind.
    pub fn ended_counts(&self) -> Vec<(JobKind, u64, u64)> {
        JobKind::ALL
            .into_iter()
            .zip(&self.ended)
            .map(|(kind, (done, failed))| {
                (kind, done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed))
            })
            .collect()
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
            kind: Some(kind),
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
    /// Until the job's end is counted.
    kind: Option<JobKind>,
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
        let Some(kind) = self.kind.take() else {
            return;
        };
        if let Some((done, failed)) = JobKind::ALL
            .iter()
            .position(|k| *k == kind)
            .and_then(|i| self.jobs.ended.get(i))
        {
            match outcome {
                Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                Err(_) => failed.fetch_add(1, Ordering::Relaxed),
            };
        }
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

#[cfg(test)]
mod tests {
    use engram_storage::MemStore;

    use super::*;

    #[test]
    fn ended_jobs_are_counted_by_kind_and_a_dropped_one_as_failed() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let jobs = Jobs::open(store).unwrap();
        jobs.start(JobKind::SnapshotBuild, "").done([("bytes", 10)]);
        jobs.start(JobKind::SnapshotBuild, "").failed("disk full", []);
        drop(jobs.start(JobKind::RedactionPurge, "through log index 7"));
        let counts = |kind| {
            jobs.ended_counts()
                .into_iter()
                .find(|(k, _, _)| *k == kind)
                .map(|(_, done, failed)| (done, failed))
        };
        assert_eq!(counts(JobKind::SnapshotBuild), Some((1, 1)));
        assert_eq!(counts(JobKind::RedactionPurge), Some((0, 1)));
        assert_eq!(counts(JobKind::Backup), Some((0, 0)));
        let listed = jobs.list(Some(JobKind::RedactionPurge), 10).unwrap();
        assert_eq!(
            listed[0].outcome,
            JobOutcome::Failed("stopped before it finished".into()),
            "a job dropped unended is recorded as failed"
        );
    }
}
