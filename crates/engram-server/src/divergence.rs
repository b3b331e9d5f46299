//! Run-time divergence detection, in the spirit of etcd's corruption check.
//!
//! Every member applies the same entries, so at every index both chains hold the same entry
//! hash (I2). A replica that applied something else — a forged append, a bug, a bit flip that
//! reached apply — still has a chain that verifies on its own, so the check must compare
//! members. Every `--divergence-check-ms` a node asks each peer for its chain head and compares
//! the entry at the lower of the two heads (hash chaining makes one index enough to tell
//! whether the whole prefix agrees). On a mismatch it bisects to the first index that differs.
//! If this node and the peers it agrees with are a majority of the members, the odd peers are
//! logged (they raise their own alarms); otherwise — it disagrees with the majority, or no
//! majority can be established — it raises the alarm on itself (logged with the first divergent
//! index and the peer, `engram_divergence_alarm` in `/metrics`). From then on the node reports
//! `engram.ready` NOT_SERVING and refuses writes with FAILED_PRECONDITION until an operator
//! repairs and restarts it (the check runs again after a restart, so a node that is still
//! divergent raises the alarm again).
//!
//! A peer that cannot answer (down, partitioned, not yet admitted) is skipped: only a definite
//! disagreement raises the alarm.

use std::sync::Arc;
use std::time::Duration;

use engram_audit::SignedEntry;
use engram_core::keys;
use engram_proto::pb;
use engram_raft::DivergenceAlarm;
use engram_storage::Space;
use engram_types::Hash;
use tracing::{debug, error, warn};

use crate::services::Shared;

/// Compares this node's chain with every peer's every `every`, until `stopped` turns true.
/// It keeps going if this node's Raft has failed: a replica whose log contradicts the
/// leader's may well have, and the alarm is what tells the operator why.
pub async fn watch(shared: Arc<Shared>, every: Duration, mut stopped: tokio::sync::watch::Receiver<bool>) {
    while crate::pacing::tick(every, &mut stopped).await {
        if shared.node.alarm().is_some() {
            continue;
        }
        let job = shared
            .node
            .jobs()
            .start(engram_raft::jobs::JobKind::DivergenceCheck, "");
        let round = check_once(&shared).await;
        let figures = [
            ("members", round.members as u64),
            ("agreeing", round.agreeing as u64),
            ("differing", round.disagreements.len() as u64),
        ];
        let Some(first) = round.disagreements.first().cloned() else {
            job.done(figures);
            continue;
        };
        job.failed(
            format!(
                "peer {}'s chain differs from this node's at index {}",
                first.peer, first.index
            ),
            figures,
        );
        if round.in_majority() {
            // A majority (this node with the peers it agrees with) holds one chain: the
            // disagreeing peers are the ones to repair, and they raise their own alarms.
            for d in &round.disagreements {
                warn!(
                    peer = d.peer,
                    index = d.index,
                    "divergence: a peer's audit chain differs from the majority's"
                );
            }
            continue;
        }
        if shared.node.raise_alarm(first.clone()) {
            error!(
                index = first.index,
                peer = first.peer,
                ours = %first.ours,
                theirs = %first.theirs,
                "DIVERGENCE: this node's audit chain differs from its peers'; refusing writes and reporting not ready until an operator repairs it and restarts it"
            );
        }
    }
}

/// One comparison round over the peers.
#[derive(Debug, Default)]
pub struct Round {
    /// Voters and learners in this node's configuration, itself included.
    pub members: usize,
    /// Peers whose chain agrees with this node's at the common index.
    pub agreeing: usize,
    /// Peers whose chain differs, each with the first index that differs.
    pub disagreements: Vec<DivergenceAlarm>,
}

impl Round {
    /// Whether this node and the peers it agrees with are a majority of the members.
    pub fn in_majority(&self) -> bool {
        (1 + self.agreeing) * 2 > self.members
    }
}

/// Compares with every peer that answers; peers that cannot be compared are skipped.
pub async fn check_once(shared: &Shared) -> Round {
    let me = shared.node.node_id;
    let members = shared.node.status().members;
    let mut round = Round {
        members: members.len(),
        ..Round::default()
    };
    let Ok(Ok(ours_head)) = shared
        .node
        .read_state(|store| engram_core::reads::head(store).map(|h| h.index))
    else {
        return round;
    };
    if ours_head == 0 {
        return round;
    }
    for (peer, info, _) in members {
        if peer == me {
            continue;
        }
        match compare_with(shared, peer, &info.addr, ours_head).await {
            Ok(None) => round.agreeing += 1,
            Ok(Some(found)) => round.disagreements.push(found),
            Err(why) => debug!(peer, error = %why, "divergence check: peer skipped"),
        }
    }
    round
}

async fn compare_with(
    shared: &Shared,
    peer: u64,
    addr: &str,
    ours_head: u64,
) -> Result<Option<DivergenceAlarm>, String> {
    let mut client = pb::audit_client::AuditClient::new(shared.channel(addr).map_err(|e| e.to_string())?);
    let theirs_head = client
        .head(pb::HeadRequest {})
        .await
        .map_err(|s| s.message().to_string())?
        .into_inner()
        .index;
    let at = ours_head.min(theirs_head);
    if at == 0 {
        return Ok(None);
    }
    let store = &*shared.node.store;
    let (ours, theirs) = (local_hash(store, at)?, remote_hash(&mut client, at).await?);
    if ours == theirs {
        return Ok(None);
    }
    let mut search = engram_audit::Bisect::new(at);
    let (mut first_ours, mut first_theirs) = (ours, theirs);
    while let Some(i) = search.probe() {
        let (o, t) = (local_hash(store, i)?, remote_hash(&mut client, i).await?);
        search.record(i, o == t);
        if o != t {
            (first_ours, first_theirs) = (o, t);
        }
    }
    Ok(Some(DivergenceAlarm {
        index: search.first(),
        peer,
        ours: first_ours.to_hex(),
        theirs: first_theirs.to_hex(),
    }))
}

/// The hash of this node's entry at `index`, straight from the store: the entry's own hash,
/// not the attestation, which differs per node.
fn local_hash(store: &dyn engram_storage::Store, index: u64) -> Result<Hash, String> {
    let bytes = store
        .get(Space::State, &keys::audit(index))
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("entry {index} is missing here"))?;
    let signed = SignedEntry::decode(&bytes).map_err(|e| format!("entry {index}: {e}"))?;
    Ok(signed.entry.hash())
}

async fn remote_hash(
    client: &mut pb::audit_client::AuditClient<tonic::transport::Channel>,
    index: u64,
) -> Result<Hash, String> {
    let mut stream = client
        .entries(pb::EntriesRequest {
            from_index: index,
            limit: 1,
        })
        .await
        .map_err(|s| s.message().to_string())?
        .into_inner();
    let entry = stream
        .message()
        .await
        .map_err(|s| s.message().to_string())?
        .ok_or_else(|| format!("peer has no entry {index}"))?;
    let bytes: [u8; 32] = entry
        .hash
        .as_slice()
        .try_into()
        .map_err(|_| format!("peer's entry {index} has a malformed hash"))?;
    Ok(Hash(bytes))
}
