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

use std::sync::Arc;
use std::time::Duration;

use engram_core::Rejection;
use engram_types::{Predicate, Provenance, RedactWhere, Status};
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
        let policies = match shared.read_state(|store| engram_core::policy::retention_policies(store)) {
            Ok(policies) => policies,
            Err(e) => {
                warn!(error = %e, "retention: cannot read the policies");
                continue;
            }
        };
        for policy in policies {
            let keep_ns = i64::try_from(policy.row.keep_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
            // The clock the proposal is stamped with, read before it: the entry's time is at
            // least this, so the cutoff is at least `keep_ms` before it, as apply checks.
            let now_ns = engram_raft::clock::now_ns().saturating_add(shared.config.clock_skew_ns);
            let request = RedactWhere {
                namespace: policy.namespace.clone(),
                predicate: Predicate {
                    attribute: policy.attribute.clone(),
                    written_before_ns: Some(now_ns.saturating_sub(keep_ns)),
                    ..Predicate::default()
                },
                reason: format!("retention policy: keep {} ms", policy.row.keep_ms),
                provenance: Provenance {
                    agent: RETENTION_AGENT.into(),
                    confidence: 1.0,
                    status: Status::Verified,
                    ..Provenance::default()
                },
            };
            let outcome = shared
                .node
                .propose_redaction_where(request, None, Some(policy.row.keep_ms), 0)
                .await;
            match outcome {
                Ok(Ok(done)) => info!(
                    namespace = %policy.namespace,
                    attribute = policy.attribute.as_ref().map(|a| a.to_string()),
                    keep_ms = policy.row.keep_ms,
                    datoms = done.datoms,
                    ranges = done.receipts.len(),
                    "retention: redacted what the policy keeps no longer"
                ),
                Ok(Err(Rejection::NothingToRedact(_))) => {}
                Ok(Err(rejection)) => warn!(
                    namespace = %policy.namespace,
                    %rejection,
                    "retention: the redaction was refused"
                ),
                Err(e) => {
                    // Leadership moved, or the node stops: the next leader's round goes on.
                    warn!(namespace = %policy.namespace, error = %e, "retention: round cut short");
                    break;
                }
            }
        }
    }
}
