//! **Liveness**: once every fault is healed (links restored, loss off, every node restarted),
//! the cluster elects a leader and commits a new write within [`BOUND`], and every member of
//! the final configuration applies up to the leader's commit within the same bound.

use std::time::{Duration, Instant};

use engram_proto::pb;

use super::Violation;
use crate::cluster::{Cluster, channel, node_addr};
use crate::workload::{NAMESPACE, REG_VALUE, provenance};

pub const NAME: &str = "liveness";
/// Simulated time allowed for recovery after healing.
pub const BOUND: Duration = Duration::from_secs(30);

/// What the liveness phase measured.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    /// Simulated ms from healing to the first committed write.
    pub commit_ms: Option<u64>,
    /// Simulated ms from healing until every member had applied that write.
    pub converge_ms: Option<u64>,
    /// The final configuration: (voters, learners).
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
}

pub async fn check(cluster: &Cluster, register: u64) -> (Recovery, Vec<Violation>) {
    let start = Instant::now();
    let mut recovery = Recovery::default();
    let targets: Vec<String> = cluster.nodes.keys().map(|id| node_addr(*id)).collect();
    let committed = cluster
        .control(async move {
            let mut attempt = 0usize;
            while start.elapsed() < BOUND {
                let target = &targets[attempt % targets.len()];
                attempt += 1;
                let mut client = pb::memory_client::MemoryClient::new(channel(target));
                let mut req = tonic::Request::new(pb::TransactRequest {
                    branch: String::new(),
                    value_salts: Vec::new(),
                    namespace: NAMESPACE.into(),
                    ops: vec![pb::TxOp {
                        op: pb::Op::Assert as i32,
                        entity: Some(pb::EntityRef {
                            kind: Some(pb::entity_ref::Kind::Id(register)),
                        }),
                        attribute: REG_VALUE.into(),
                        value: Some(pb::Value {
                            kind: Some(pb::value::Kind::I64(-1)),
                        }),
                        valid_from_ns: None,
                        valid_to_ns: None,
                    }],
                    preconditions: vec![],
                    idempotency_key: "liveness-probe".into(),
                    provenance: Some(provenance("liveness")),
                });
                req.set_timeout(Duration::from_secs(2));
                if let Ok(resp) = client.transact(req).await {
                    return Some(resp.into_inner().tx);
                }
                madsim::time::sleep(Duration::from_millis(200)).await;
            }
            None
        })
        .await;
    let Some(tx) = committed else {
        return (
            recovery,
            vec![Violation::new(
                NAME,
                format!("no write committed within {BOUND:?} of healing"),
            )],
        );
    };
    recovery.commit_ms = Some(start.elapsed().as_millis() as u64);

    // Every member applies it.
    while start.elapsed() < BOUND {
        if let Some(leader) = cluster.leader_status().await {
            recovery.voters = leader.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
            recovery.learners = leader.members.iter().filter(|m| !m.voter).map(|m| m.id).collect();
            let mut all = true;
            for m in &leader.members {
                match cluster.status(m.id).await {
                    Ok(s) if s.applied_index >= tx && s.applied_index >= leader.applied_index => {}
                    _ => all = false,
                }
            }
            if all {
                recovery.converge_ms = Some(start.elapsed().as_millis() as u64);
                return (recovery, Vec::new());
            }
        }
        madsim::time::sleep(Duration::from_millis(200)).await;
    }
    (
        recovery,
        vec![Violation::new(
            NAME,
            format!("tx {tx} committed but the members did not all apply it within {BOUND:?} of healing"),
        )],
    )
}
