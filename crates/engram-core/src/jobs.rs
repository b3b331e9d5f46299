//! This node's job log: the background work it ran (snapshots built and installed, redaction
//! purges, retention rounds, divergence checks, search index rebuilds, backups), each with its
//! start, end, outcome and figures, for operators (`engram jobs`).
//!
//! Rows live in the node's own key space ([`Space::Access`], beside the access log), so they
//! are never in the belief state, the replica digest or a snapshot. Each kind keeps its last
//! [`KEEP_PER_KIND`] jobs (a divergence check every few seconds must not push the last
//! snapshot out). A job is written when it starts and again when it ends; one still running
//! when the log is opened belonged to a process that stopped inside it, and is reported as
//! interrupted.
//!
//! The caller gives every time (the node's clock): nothing here reads a clock, and nothing
//! that applies replicated entries writes here.
//!
//! Must not depend on: the engine, Raft or the network.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use engram_storage::{ReadView, Space, Store, WriteBatch};
use serde::{Deserialize, Serialize};

use crate::CoreError;
use crate::durability::{Write, durability};

/// Jobs kept per kind; older ones are deleted as new ones start.
pub const KEEP_PER_KIND: u64 = 256;

const JOB: u8 = b'j';

/// The kinds of background work a node records. Stored by position (in each row and in its
/// key): a new kind goes at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum JobKind {
    SnapshotBuild,
    SnapshotInstall,
    RedactionPurge,
    Retention,
    DivergenceCheck,
    SearchRebuild,
    Backup,
}

impl JobKind {
    pub const ALL: [JobKind; 7] = [
        JobKind::SnapshotBuild,
        JobKind::SnapshotInstall,
        JobKind::RedactionPurge,
        JobKind::Retention,
        JobKind::DivergenceCheck,
        JobKind::SearchRebuild,
        JobKind::Backup,
    ];

    /// The name operators see and filter by.
    pub fn name(self) -> &'static str {
        match self {
            JobKind::SnapshotBuild => "snapshot-build",
            JobKind::SnapshotInstall => "snapshot-install",
            JobKind::RedactionPurge => "redaction-purge",
            JobKind::Retention => "retention",
            JobKind::DivergenceCheck => "divergence-check",
            JobKind::SearchRebuild => "search-rebuild",
            JobKind::Backup => "backup",
        }
    }

    pub fn from_name(name: &str) -> Option<JobKind> {
        JobKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Each kind's rows are a range of their own, so each keeps its own last jobs.
    fn code(self) -> u8 {
        self as u8
    }
}

/// How a job ended (or that it has not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobOutcome {
    Running,
    Done,
    Failed(String),
    /// Still running when the log was next opened: the process stopped inside it.
    Interrupted,
}

impl JobOutcome {
    pub fn name(&self) -> &'static str {
        match self {
            JobOutcome::Running => "running",
            JobOutcome::Done => "done",
            JobOutcome::Failed(_) => "failed",
            JobOutcome::Interrupted => "interrupted",
        }
    }
}

/// One job as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Numbers every job of the node, in the order they started.
    pub seq: u64,
    pub kind: JobKind,
    /// What it worked on, in words ("through tx 41", "from node 2").
    pub subject: String,
    pub started_ns: i64,
    pub ended_ns: Option<i64>,
    pub outcome: JobOutcome,
    /// What it did, by name ("bytes", "datoms", "entries").
    pub figures: BTreeMap<String, u64>,
}

/// A started job's handle, to end it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    job: Job,
}

/// The appending end of the log. Cheap to share: every writer holds the same one.
pub struct JobLog {
    store: Arc<dyn Store>,
    state: Mutex<Numbering>,
}

/// The next job's number, and each kind's kept jobs' numbers, oldest first.
struct Numbering {
    next_seq: u64,
    kept: BTreeMap<JobKind, VecDeque<u64>>,
}

impl JobLog {
    /// Opens the log; a job still running in it is marked interrupted.
    pub fn open(store: Arc<dyn Store>) -> Result<JobLog, CoreError> {
        let mut numbering = Numbering {
            next_seq: 0,
            kept: BTreeMap::new(),
        };
        let mut batch = WriteBatch::new();
        for kind in JobKind::ALL {
            let rows = kind_rows(&*store, kind, usize::MAX)?;
            let kept = numbering.kept.entry(kind).or_default();
            // Newest first from the scan; kept oldest first.
            for (key, job) in rows.into_iter().rev() {
                numbering.next_seq = numbering.next_seq.max(job.seq + 1);
                kept.push_back(job.seq);
                if job.outcome == JobOutcome::Running {
                    let job = Job {
                        outcome: JobOutcome::Interrupted,
                        ..job
                    };
                    batch.put(Space::Access, key, encode(&job)?);
                }
            }
        }
        if !batch.mutations.is_empty() {
            store.write(batch, durability(Write::JobLog))?;
        }
        Ok(JobLog {
            store,
            state: Mutex::new(numbering),
        })
    }

    /// Records that a job of `kind` started at `now_ns`, and drops that kind's oldest jobs
    /// past [`KEEP_PER_KIND`].
    pub fn start(
        &self,
        kind: JobKind,
        subject: impl Into<String>,
        now_ns: i64,
    ) -> Result<Started, CoreError> {
        let mut numbering = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let seq = numbering.next_seq;
        numbering.next_seq += 1;
        let job = Job {
            seq,
            kind,
            subject: subject.into(),
            started_ns: now_ns,
            ended_ns: None,
            outcome: JobOutcome::Running,
            figures: BTreeMap::new(),
        };
        let mut batch = WriteBatch::new();
        batch.put(Space::Access, key(kind, seq), encode(&job)?);
        let kept = numbering.kept.entry(kind).or_default();
        kept.push_back(seq);
        let mut dropped = None;
        while kept.len() as u64 > KEEP_PER_KIND {
            dropped = kept.pop_front();
        }
        if let Some(newest_dropped) = dropped {
            batch.delete_range(Space::Access, key(kind, 0), key(kind, newest_dropped + 1));
        }
        // Written under the lock, so rows land in the order their numbers say.
        self.store.write(batch, durability(Write::JobLog))?;
        Ok(Started { job })
    }

    /// Records how `started` ended, at `now_ns`, with its figures.
    pub fn finish(
        &self,
        started: Started,
        outcome: Result<(), String>,
        figures: impl IntoIterator<Item = (&'static str, u64)>,
        now_ns: i64,
    ) -> Result<(), CoreError> {
        let mut job = started.job;
        job.ended_ns = Some(now_ns.max(job.started_ns));
        job.outcome = match outcome {
            Ok(()) => JobOutcome::Done,
            Err(why) => JobOutcome::Failed(why),
        };
        job.figures = figures.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let mut batch = WriteBatch::new();
        batch.put(Space::Access, key(job.kind, job.seq), encode(&job)?);
        self.store.write(batch, durability(Write::JobLog))?;
        Ok(())
    }
}

/// The newest jobs first, at most `limit`, of `kind` only when given.
pub fn list(store: &dyn ReadView, kind: Option<JobKind>, limit: usize) -> Result<Vec<Job>, CoreError> {
    let mut jobs = Vec::new();
    for k in JobKind::ALL
        .into_iter()
        .filter(|k| kind.is_none_or(|want| want == *k))
    {
        jobs.extend(kind_rows(store, k, limit)?.into_iter().map(|(_, job)| job));
    }
    jobs.sort_by_key(|j| std::cmp::Reverse(j.seq));
    jobs.truncate(limit);
    Ok(jobs)
}

/// `kind`'s newest `limit` jobs, newest first, with their keys.
fn kind_rows(store: &dyn ReadView, kind: JobKind, limit: usize) -> Result<Vec<(Vec<u8>, Job)>, CoreError> {
    let from = [JOB, kind.code()];
    let to = [JOB, kind.code() + 1];
    let limit = limit.min(KEEP_PER_KIND as usize * 2);
    store
        .scan_rev(Space::Access, &from, Some(&to), limit)?
        .into_iter()
        .map(|(key, bytes)| {
            let job: Job = postcard::from_bytes(&bytes)
                .map_err(|e| CoreError::corrupt(format!("job row {}", crate::rows::hex(&key)), e))?;
            Ok((key, job))
        })
        .collect()
}

fn key(kind: JobKind, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(10);
    k.push(JOB);
    k.push(kind.code());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn encode(job: &Job) -> Result<Vec<u8>, CoreError> {
    postcard::to_allocvec(job).map_err(|e| CoreError::corrupt("job row", e))
}

#[cfg(test)]
mod tests {
    use engram_storage::MemStore;

    use super::*;

    #[test]
    fn a_job_is_listed_running_then_done_with_its_figures_and_newest_first() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let log = JobLog::open(store.clone()).unwrap();
        let build = log.start(JobKind::SnapshotBuild, "at index 10", 1_000).unwrap();
        let check = log.start(JobKind::DivergenceCheck, "", 2_000).unwrap();
        let listed = list(&*store, None, 10).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].kind, JobKind::DivergenceCheck, "newest first");
        assert_eq!(listed[1].outcome, JobOutcome::Running);
        log.finish(build, Ok(()), [("bytes", 4_096)], 3_000).unwrap();
        log.finish(check, Err("node 2 differs".into()), [], 2_500)
            .unwrap();
        let listed = list(&*store, None, 10).unwrap();
        assert_eq!(listed[1].outcome, JobOutcome::Done);
        assert_eq!(listed[1].subject, "at index 10");
        assert_eq!((listed[1].started_ns, listed[1].ended_ns), (1_000, Some(3_000)));
        assert_eq!(listed[1].figures.get("bytes"), Some(&4_096));
        assert_eq!(listed[0].outcome, JobOutcome::Failed("node 2 differs".into()));
        let builds = list(&*store, Some(JobKind::SnapshotBuild), 10).unwrap();
        assert_eq!(builds.len(), 1);
        assert_eq!(list(&*store, None, 1).unwrap().len(), 1);
    }

    #[test]
    fn a_job_running_when_the_log_reopens_is_interrupted_and_numbering_goes_on() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let log = JobLog::open(store.clone()).unwrap();
        let done = log.start(JobKind::Retention, "", 1).unwrap();
        log.finish(done, Ok(()), [("datoms", 3)], 2).unwrap();
        let _left = log.start(JobKind::SnapshotInstall, "from node 1", 3).unwrap();
        drop(log);
        let log = JobLog::open(store.clone()).unwrap();
        let listed = list(&*store, None, 10).unwrap();
        assert_eq!(listed[0].outcome, JobOutcome::Interrupted);
        assert_eq!(
            listed[1].outcome,
            JobOutcome::Done,
            "a finished job stays as it ended"
        );
        let next = log.start(JobKind::Backup, "", 4).unwrap();
        assert_eq!(next.job.seq, 2, "numbers are never reused");
    }

    #[test]
    fn each_kind_keeps_its_own_last_jobs() {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let log = JobLog::open(store.clone()).unwrap();
        let build = log.start(JobKind::SnapshotBuild, "", 0).unwrap();
        log.finish(build, Ok(()), [], 0).unwrap();
        let checks = KEEP_PER_KIND + 40;
        for i in 0..checks {
            let c = log.start(JobKind::DivergenceCheck, "", i as i64).unwrap();
            log.finish(c, Ok(()), [], i as i64).unwrap();
        }
        let kept = list(&*store, Some(JobKind::DivergenceCheck), usize::MAX).unwrap();
        assert_eq!(kept.len() as u64, KEEP_PER_KIND);
        assert_eq!(kept[0].seq, checks, "the newest is kept");
        assert_eq!(kept.last().unwrap().seq, checks - KEEP_PER_KIND + 1);
        let builds = list(&*store, Some(JobKind::SnapshotBuild), 10).unwrap();
        assert_eq!(builds.len(), 1, "another kind's jobs are not pushed out");
    }
}
