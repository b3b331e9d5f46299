//! **Search agrees**: every member node answers the same search, as of the same transaction,
//! with the same hits, scores and signal ranks. Each node's recall index is its own, in
//! memory, fed from what it applied: a node that crashed rebuilt it from its store, and a node
//! that installed a snapshot went on from it; any of them answering otherwise has an index
//! that does not follow the replicated state.

use std::time::Duration;

use engram_proto::pb;

use super::Violation;
use crate::cluster::{Cluster, channel, node_addr};
use crate::workload;

pub const NAME: &str = "search-agrees";

/// Words the workload writes: its agents are named `agent-N`.
const QUERY: &str = "agent 0 1 2 3 4 5 6 7";

/// Near some of the vectors the workload writes (see `workload::REG_EMBEDDING`).
const QUERY_VECTOR: [f32; 3] = [3.0, 1.0, 1.0];

/// Asks each of `members` for the same searches as of `as_of` (a transaction every one of them
/// has applied) from its own state, and compares the answers: one over every kind of memory,
/// one over blockers only (see `workload::REG_KIND`).
pub async fn check(cluster: &Cluster, members: &[u64], as_of: u64) -> Vec<Violation> {
    let mut out = check_one(cluster, members, as_of, &[]).await;
    out.extend(check_one(cluster, members, as_of, &["blocker"]).await);
    out
}

async fn check_one(cluster: &Cluster, members: &[u64], as_of: u64, kinds: &[&str]) -> Vec<Violation> {
    let kinds: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
    let mut answers: Vec<(u64, Vec<pb::SearchHit>)> = Vec::new();
    let mut out = Vec::new();
    for &id in members {
        let target = node_addr(id);
        let kinds = kinds.clone();
        let answer = cluster
            .control(async move {
                let mut last = None;
                // A node installing a snapshot refuses reads for a moment: ask again.
                for _ in 0..10 {
                    let mut client = pb::memory_client::MemoryClient::new(channel(&target));
                    let mut req = tonic::Request::new(pb::SearchRequest {
                        namespace: workload::NAMESPACE.into(),
                        text: QUERY.into(),
                        vector: QUERY_VECTOR.to_vec(),
                        hops: Some(2),
                        k: 100,
                        as_of_tx: Some(as_of),
                        consistency: pb::ReadConsistency::Stale as i32,
                        kinds: kinds.clone(),
                        ..Default::default()
                    });
                    req.set_timeout(Duration::from_secs(5));
                    match client.search(req).await {
                        Ok(resp) => return Ok(resp.into_inner().hits),
                        Err(s) if s.code() == tonic::Code::Unavailable => {
                            last = Some(s);
                            madsim::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(s) => return Err(s),
                    }
                }
                Err(last.unwrap_or_else(|| tonic::Status::unavailable("no answer")))
            })
            .await;
        match answer {
            Ok(hits) => answers.push((id, hits)),
            Err(s) => out.push(Violation::new(
                NAME,
                format!("node {id} did not answer the search as of tx {as_of}: {s}"),
            )),
        }
    }
    if let Some((first, reference)) = answers.first() {
        for (id, hits) in &answers[1..] {
            if hits != reference {
                let show = |h: &[pb::SearchHit]| {
                    h.iter()
                        .take(5)
                        .map(|h| {
                            let d = h.datom.clone().unwrap_or_default();
                            format!("(e{} tx{} #{} {:.6})", d.entity, d.tx, h.seq, h.score)
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                out.push(Violation::new(
                    NAME,
                    format!(
                        "as of tx {as_of}, kinds {kinds:?}: node {id} found {} hits [{}…], node {first} found {} [{}…]",
                        hits.len(),
                        show(hits),
                        reference.len(),
                        show(reference)
                    ),
                ));
            }
        }
    }
    out
}
