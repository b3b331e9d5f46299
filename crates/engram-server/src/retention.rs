//! Retention, applied by the leader (`docs/FORGETTING.md`, "Retention").
//!
//! A retention policy (`PolicyOp::Retention`, replicated like a grant) keeps what is written to
//! a namespace, or to one attribute of it, for `keep_ms`. Every `--retention-check-ms` the
//! node that leads proposes, for each policy, a redaction by predicate of what was written
//! before its clock less `keep_ms` (`RaftNode::propose_redaction_where`). The entry carries the
//! policy's `keep_ms` and the leader's clock, and apply takes it only if the policy in force
//! says so (`engram_core::policy::retention_allows`), in place of a grant: no agent's
//! permission is involved, and a follower never proposes. A round cut short by a change of
//! leader leaves its ranges applied; the next leader's round takes what is left.
//!
//! A versions policy (`PolicyOp::RetentionVersions`) keeps, of each slot, what its last
//! `keep_versions` writing transactions hold and its live claims: its round proposes ranges
//! over the namespace's (or attribute's) rows whose entries carry the policy's
//! `keep_versions`, and apply takes only the datoms the policy no longer keeps
//! (`engram_core::redact_where::superseded`), checked against the policy in force.
//!
//! A session (`PolicyOp::Session`) makes its namespace volatile ([`drive_sessions`]): the node
//! that leads ends each session whose deadline its clock has passed (`PolicyOp::SessionLapsed`,
//! which apply takes only at or past the deadline), and forgets what was written to the
//! namespace of each ended session before it ended (`Command::RedactSession` ranges, which
//! apply takes only for the namespace's last ended session).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use engram_access::{PolicyOp, Principal};
use engram_core::Rejection;
use engram_raft::Proposer;
use engram_types::{Namespace, Predicate, Provenance, RedactWhere, RetentionRule, Status, TxId};
use tracing::{info, warn};

use crate::services::Shared;

/// The agent a retention policy's redactions are recorded as.
pub const RETENTION_AGENT: &str = "engram.retention";

/// The agent (and principal) the leader ends lapsed sessions and forgets ended ones as.
pub const SESSION_AGENT: &str = "engram.session";

/// Whether this node leads and may act for the cluster (no divergence alarm raised).
fn leads(shared: &Shared) -> bool {
    matches!(shared.node.leader(), Some((id, _)) if id == shared.node.node_id)
        && shared.node.alarm().is_none()
}

/// The provenance of what the leader's retention and session jobs record.
fn provenance(agent: &str) -> Provenance {
    Provenance {
        agent: agent.into(),
        confidence: 1.0,
        status: Status::Verified,
        ..Provenance::default()
    }
}

pub async fn drive(shared: Arc<Shared>, every: Duration, mut stopped: tokio::sync::watch::Receiver<bool>) {
    while crate::pacing::tick(every, &mut stopped).await {
        if !leads(&shared) {
            continue;
        }
        let policies = shared.read_state(|store| {
            let by_time = engram_core::policy::retention_policies(store)?
                .into_iter()
                .map(|p| (p.namespace, p.attribute, RetentionRule::KeepMs(p.row.keep_ms)));
            let by_versions = engram_core::policy::versions_policies(store)?
                .into_iter()
                .map(|p| {
                    (
                        p.namespace,
                        p.attribute,
                        RetentionRule::KeepVersions(p.row.keep_versions),
                    )
                });
            Ok::<_, engram_core::CoreError>(by_time.chain(by_versions).collect::<Vec<_>>())
        });
        let policies = match policies {
            Ok(policies) if policies.is_empty() => continue,
            Ok(policies) => policies,
            Err(e) => {
                warn!(error = %e, "retention: cannot read the policies");
                continue;
            }
        };
        let job = shared.node.jobs().start(
            engram_raft::jobs::JobKind::Retention,
            format!("{} policies", policies.len()),
        );
        let (mut datoms, mut ranges, mut refused) = (0u64, 0u64, 0u64);
        let mut cut_short = None;
        for (namespace, attribute, rule) in policies {
            let predicate = match rule {
                RetentionRule::KeepMs(keep_ms) => {
                    let keep_ns = i64::try_from(keep_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
                    // The clock the proposal is stamped with, read before it: the entry's time
                    // is at least this, so the cutoff is at least `keep_ms` before it, as apply
                    // checks.
                    let now_ns = engram_raft::clock::now_ns().saturating_add(shared.config.clock_skew_ns);
                    Predicate {
                        attribute: attribute.clone(),
                        written_before_ns: Some(now_ns.saturating_sub(keep_ns)),
                        ..Predicate::default()
                    }
                }
                // Which datoms a versions policy no longer keeps is decided per datom, by the
                // slot's later transactions (apply checks it again). (No policy row holds a
                // session's rule: sessions are `drive_sessions`'.)
                RetentionRule::KeepVersions(_) | RetentionRule::SessionEnded => Predicate {
                    attribute: attribute.clone(),
                    ..Predicate::default()
                },
            };
            let request = RedactWhere {
                namespace: namespace.clone(),
                predicate,
                reason: format!("retention policy: {}", rule.describe()),
                provenance: provenance(RETENTION_AGENT),
            };
            let outcome = shared
                .node
                .propose_redaction_where(request, None, Some(rule), 0)
                .await;
            match outcome {
                Ok(Ok(done)) => {
                    datoms += done.datoms;
                    ranges += done.receipts.len() as u64;
                    info!(
                        %namespace,
                        attribute = attribute.as_ref().map(|a| a.to_string()),
                        rule = rule.describe(),
                        datoms = done.datoms,
                        ranges = done.receipts.len(),
                        "retention: redacted what the policy keeps no longer"
                    )
                }
                Ok(Err(Rejection::NothingToRedact(_))) => {}
                Ok(Err(rejection)) => {
                    refused += 1;
                    warn!(%namespace, %rejection, "retention: the redaction was refused")
                }
                Err(e) => {
                    // Leadership moved, or the node stops: the next leader's round goes on.
                    warn!(%namespace, error = %e, "retention: round cut short");
                    cut_short = Some(e.to_string());
                    break;
                }
            }
        }
        let figures = [("datoms", datoms), ("ranges", ranges), ("refused", refused)];
        match cut_short {
            None => job.done(figures),
            Some(why) => job.failed(format!("cut short: {why}"), figures),
        }
    }
}

/// Ends lapsed sessions and forgets the namespaces of ended ones, every `every`, while this node
/// leads. What it has forgotten (a namespace and its session's end) it does not read again
/// while it leads; a new leader reads each ended session's namespace once more, finds nothing
/// left before the end, and remembers it.
pub async fn drive_sessions(
    shared: Arc<Shared>,
    every: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut forgotten: HashSet<(Namespace, TxId)> = HashSet::new();
    let by = match Principal::new(SESSION_AGENT) {
        Ok(p) => p,
        Err(e) => {
            warn!(error = %e, "sessions: the session agent's name is not a principal; sessions never lapse");
            return;
        }
    };
    while crate::pacing::tick(every, &mut stopped).await {
        if !leads(&shared) {
            forgotten.clear();
            continue;
        }
        let rows = shared.read_state(|store| {
            Ok::<_, engram_core::CoreError>((
                engram_core::policy::sessions(store)?,
                engram_core::policy::ended_sessions(store)?,
            ))
        });
        let (open, ended) = match rows {
            Ok(rows) => rows,
            Err(e) => {
                warn!(error = %e, "sessions: cannot read the sessions");
                continue;
            }
        };
        // The clock the proposal is stamped with, read before it: the entry's time is at
        // least this, so at or past the deadline, as apply checks.
        let now_ns = engram_raft::clock::now_ns().saturating_add(shared.config.clock_skew_ns);
        let lapsed: Vec<_> = open.into_iter().filter(|s| s.row.deadline_ns <= now_ns).collect();
        let to_forget: Vec<_> = ended
            .into_iter()
            .filter(|s| !forgotten.contains(&(s.namespace.clone(), s.row.ended_tx)))
            .collect();
        if lapsed.is_empty() && to_forget.is_empty() {
            continue;
        }
        let job = shared.node.jobs().start(
            engram_raft::jobs::JobKind::Retention,
            format!(
                "sessions: {} lapsed, {} ended to forget",
                lapsed.len(),
                to_forget.len()
            ),
        );
        let (mut ended_now, mut datoms, mut ranges, mut refused) = (0u64, 0u64, 0u64, 0u64);
        let mut cut_short = None;
        for session in lapsed {
            let op = PolicyOp::SessionLapsed {
                namespace: session.namespace.to_string(),
            };
            match shared
                .node
                .propose_policy(op, Proposer::Unsigned(Some(by.clone())))
                .await
            {
                Ok(Ok(receipt)) => {
                    ended_now += 1;
                    info!(namespace = %session.namespace, tx = receipt.tx.0, "sessions: a session lapsed")
                }
                // A renewal committed between the read and the lapse: expected, not a fault.
                Ok(Err(rejection)) => {
                    refused += 1;
                    info!(namespace = %session.namespace, %rejection, "sessions: the lapse was refused")
                }
                Err(e) => {
                    cut_short = Some(e.to_string());
                    break;
                }
            }
        }
        for session in to_forget {
            if cut_short.is_some() {
                break;
            }
            let ended_tx = session.row.ended_tx;
            let request = RedactWhere {
                namespace: session.namespace.clone(),
                predicate: Predicate {
                    before_tx: Some(ended_tx),
                    ..Predicate::default()
                },
                reason: format!(
                    "session {} at tx {}",
                    if session.row.lapsed { "lapsed" } else { "ended" },
                    ended_tx.0
                ),
                provenance: provenance(SESSION_AGENT),
            };
            let outcome = shared
                .node
                .propose_redaction_where(request, None, Some(RetentionRule::SessionEnded), 0)
                .await;
            match outcome {
                Ok(Ok(done)) => {
                    datoms += done.datoms;
                    ranges += done.receipts.len() as u64;
                    forgotten.insert((session.namespace.clone(), ended_tx));
                    info!(
                        namespace = %session.namespace,
                        ended_tx = ended_tx.0,
                        datoms = done.datoms,
                        ranges = done.receipts.len(),
                        "sessions: forgot what the ended session's namespace held"
                    )
                }
                Ok(Err(Rejection::NothingToRedact(_))) => {
                    forgotten.insert((session.namespace.clone(), ended_tx));
                }
                Ok(Err(rejection)) => {
                    refused += 1;
                    warn!(namespace = %session.namespace, %rejection, "sessions: forgetting was refused")
                }
                Err(e) => cut_short = Some(e.to_string()),
            }
        }
        let figures = [
            ("lapsed", ended_now),
            ("datoms", datoms),
            ("ranges", ranges),
            ("refused", refused),
        ];
        match cut_short {
            None => job.done(figures),
            Some(why) => job.failed(format!("cut short: {why}"), figures),
        }
    }
}
