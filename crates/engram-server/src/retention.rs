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

use std::sync::Arc;
use std::time::Duration;

use engram_core::Rejection;
use engram_types::{Predicate, Provenance, RedactWhere, RetentionRule, Status};
use tracing::{info, warn};

use crate::services::Shared;

/// The agent a retention policy's redactions are recorded as.
pub const RETENTION_AGENT: &str = "engram.retention";

pub async fn drive(shared: Arc<Shared>, every: Duration, mut stopped: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
        let leads = matches!(shared.node.leader(), Some((id, _)) if id == shared.node.node_id);
        if !leads || shared.node.alarm().is_some() {
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
                // slot's later transactions (apply checks it again).
                RetentionRule::KeepVersions(_) => Predicate {
                    attribute: attribute.clone(),
                    ..Predicate::default()
                },
            };
            let request = RedactWhere {
                namespace: namespace.clone(),
                predicate,
                reason: format!("retention policy: {}", rule.describe()),
                provenance: Provenance {
                    agent: RETENTION_AGENT.into(),
                    confidence: 1.0,
                    status: Status::Verified,
                    ..Provenance::default()
                },
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
