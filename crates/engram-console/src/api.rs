//! The console's views: each one a few read calls to the cluster through
//! [`engram_client::Client`], shaped into the JSON the page renders. Nothing here writes to the
//! cluster: every call is a read (status, audit entries, proofs, history, job and access logs).

use std::time::Duration;

use engram_client::{
    Client, ClientError, Consistency, GetOptions, HistoryQuery, HistoryTarget, ProofFailure, TrustedLog,
    code_name,
};
use engram_proto::pb;
use engram_types::{BranchName, EntityId, Namespace};
use futures::StreamExt;
use serde_json::{Value as Json, json};
use tokio::sync::Mutex;

use crate::proof::{Step, check_entries, consistency_steps, inclusion_steps, kind_name};

/// Most audit entries one page of the audit view lists.
pub const MAX_PAGE_ENTRIES: u64 = 500;
/// Most datoms an entity's timeline shows (main and its branches together).
pub const MAX_TIMELINE_DATOMS: u32 = 5_000;
/// Most branches of the entity's namespace the timeline reads.
pub const MAX_TIMELINE_BRANCHES: usize = 20;

/// What the console serves its views from.
pub struct Api {
    client: Client,
    endpoints: Vec<String>,
    /// The log the console has verified (the whole chain of one node, once, then moved
    /// forward checkpoint by checkpoint by consistency proofs); `None` until the first proof.
    trust: Mutex<Option<TrustedLog>>,
}

impl Api {
    pub fn new(client: Client) -> Api {
        Api {
            endpoints: client.endpoints(),
            client,
            trust: Mutex::new(None),
        }
    }

    /// The client for `node` (an index into the endpoints), or for the first endpoint.
    fn node(&self, node: Option<u64>) -> Result<(usize, Client), ApiError> {
        let i = node.unwrap_or(0) as usize;
        match self.client.node(i) {
            Some(c) => Ok((i, c)),
            None => Err(ApiError::bad(format!(
                "node: {i} is not one of the console's {} endpoints (0 to {})",
                self.endpoints.len(),
                self.endpoints.len().saturating_sub(1)
            ))),
        }
    }

    /// Each endpoint's status and readiness, what they agree on, and what is wrong.
    pub async fn cluster(&self) -> Json {
        let mut nodes = Vec::new();
        let mut alarms = Vec::new();
        let mut heads: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        let (answers, readiness, metrics) = tokio::join!(
            self.each_node(|node| async move { node.status().await }),
            futures::future::join_all((0..self.endpoints.len()).map(|i| self.ready(i))),
            self.each_node(|node| async move { node.metrics().await }),
        );
        for (((endpoint, answer), ready), (_, metrics)) in answers.into_iter().zip(readiness).zip(metrics) {
            // A node's metrics at a glance, or why they could not be read (an agent without
            // read on engram.system is refused them, and sees the code).
            let (glance, metrics_refused) = match metrics {
                Ok(m) => (crate::glance::glance(&m.text), None),
                Err(e) => (Json::Null, Some(e.message)),
            };
            match answer {
                Ok(s) => {
                    if let Err(why) = &ready {
                        alarms.push(format!("node {} ({endpoint}) is not ready: {why}", s.node_id));
                    }
                    heads.push((s.chain_index, s.chain_head.clone(), s.node_id));
                    nodes.push(json!({
                        "endpoint": endpoint,
                        "reachable": true,
                        "ready": ready.is_ok(),
                        "not_ready": ready.err(),
                        "node_id": s.node_id,
                        "role": s.role,
                        "leader_id": s.leader_id,
                        "term": s.term,
                        "last_log_index": s.last_log_index,
                        "applied_index": s.applied_index,
                        "chain_index": s.chain_index,
                        "chain_head": hex::encode(&s.chain_head),
                        "redactions_applied_index": s.redactions_applied_index,
                        "redactions_purged_index": s.redactions_purged_index,
                        "members": s.members.iter().map(|m| json!({
                            "id": m.id, "addr": m.addr, "voter": m.voter,
                        })).collect::<Vec<_>>(),
                        "metrics": glance,
                        "metrics_refused": metrics_refused,
                    }));
                }
                Err(e) => {
                    alarms.push(format!("{endpoint} does not answer: {}", e.message));
                    let mut doc = e.to_json(endpoint);
                    doc["reachable"] = json!(false);
                    doc["ready"] = json!(false);
                    nodes.push(doc);
                }
            }
        }
        // Two nodes at one chain index with different heads have diverged (each node's own
        // divergence check raises its alarm; this page shows it from the outside as well).
        for (i, (index, head, id)) in heads.iter().enumerate() {
            for (other_index, other_head, other_id) in &heads[i + 1..] {
                if index == other_index && head != other_head {
                    alarms.push(format!(
                        "nodes {id} and {other_id} hold different chains at entry {index}"
                    ));
                }
            }
        }
        let leaders: Vec<u64> = nodes
            .iter()
            .filter(|n| n["role"] == "Leader")
            .filter_map(|n| n["node_id"].as_u64())
            .collect();
        if leaders.is_empty() {
            alarms.push("no endpoint reports itself leader".into());
        }
        let applied_max = nodes
            .iter()
            .filter_map(|n| n["applied_index"].as_u64())
            .max()
            .unwrap_or(0);
        for n in &mut nodes {
            if let Some(applied) = n["applied_index"].as_u64() {
                n["behind_entries"] = json!(applied_max - applied);
            }
        }
        json!({ "nodes": nodes, "leaders": leaders, "alarms": alarms })
    }

    /// The `engram.ready` health check of one endpoint: `Err` names why it is not serving.
    /// Whether endpoint `i` serves `engram.ready`, asked over the console's own connection to it.
    async fn ready(&self, i: usize) -> Result<(), String> {
        let node = self.client.node(i).ok_or("no client for this endpoint")?;
        let health = node
            .health("engram.ready", Duration::from_secs(3))
            .await
            .map_err(|e| e.to_string())?;
        if health.serving {
            Ok(())
        } else {
            Err(format!("engram.ready is {}", health.status))
        }
    }

    /// A page of the audit log: `limit` entries from `from` (default: the last `limit`), each
    /// checked against the hash it is listed under and linked to the entry before it.
    pub async fn audit(
        &self,
        node: Option<u64>,
        from: Option<u64>,
        limit: Option<u64>,
    ) -> Result<Json, ApiError> {
        let (i, client) = self.node(node)?;
        let limit = limit.unwrap_or(50);
        if limit == 0 || limit > MAX_PAGE_ENTRIES {
            return Err(ApiError::bad(format!(
                "limit: give 1 to {MAX_PAGE_ENTRIES} entries"
            )));
        }
        let head = client.head().await.map_err(ApiError::cluster)?;
        if head.index == 0 {
            return Ok(json!({ "node": i, "endpoint": self.endpoints[i], "head": 0, "entries": [] }));
        }
        let from = match from {
            Some(0) => return Err(ApiError::bad("from: entries are numbered from 1")),
            Some(f) if f > head.index => {
                return Err(ApiError::not_found(format!(
                    "from: entry {f} is past the head, entry {}",
                    head.index
                )));
            }
            Some(f) => f,
            None => head.index.saturating_sub(limit - 1).max(1),
        };
        // The entry before the page, too: the first entry's link is checked against it.
        let first = from.saturating_sub(1).max(1);
        let count = (from - first) + limit.min(head.index - from + 1);
        let served = read_entries(&client, first, count).await?;
        let (before, page) = if first < from {
            (served.first(), served.get(1..).unwrap_or_default())
        } else {
            (None, served.as_slice())
        };
        let checks = check_entries(before, page);
        let entries: Vec<Json> = page
            .iter()
            .zip(&checks)
            .map(|(e, check)| {
                let (datoms, author) = match check.decoded.as_ref().map(|s| &s.entry.kind) {
                    Some(engram_audit::EntryKind::Transaction { datoms, author, .. }) => {
                        (Some(*datoms), author.as_ref().map(|a| a.principal.clone()))
                    }
                    _ => (None, None),
                };
                json!({
                    "index": e.index,
                    "tx": e.tx,
                    "tx_time_ns": e.tx_time_ns,
                    "namespace": e.namespace,
                    "kind": check.decoded.as_ref().map_or(e.kind.as_str(), |s| kind_name(&s.entry.kind)),
                    "datoms": datoms,
                    "author": author,
                    "hash": hex::encode(&e.hash),
                    "prev_hash": hex::encode(&e.prev_hash),
                    "signer_key_id": hex::encode(&e.signer_key_id),
                    "state_root": hex::encode(&e.state_root),
                    "intact": check.problems.is_empty(),
                    "problems": check.problems,
                })
            })
            .collect();
        Ok(json!({
            "node": i,
            "endpoint": self.endpoints[i],
            "head": head.index,
            "from": from,
            "entries": entries,
        }))
    }

    /// Entry `index`, proven: the console's trust in the log (the whole chain verified here
    /// once, then moved forward by consistency proofs), the node's checkpoint at its head
    /// checked against it, and the entry's inclusion in that checkpoint's tree, step by step.
    pub async fn entry(&self, node: Option<u64>, index: u64) -> Result<Json, ApiError> {
        if index == 0 {
            return Err(ApiError::bad("index: entries are numbered from 1"));
        }
        let (i, client) = self.node(node)?;
        let answer = |checkpoint, entry, steps: &[Step]| {
            proven(i, &self.endpoints[i], index, checkpoint, entry, steps)
        };
        let mut steps = Vec::new();
        // Held for the whole proof, so two pages never move the trust forward at once.
        let mut trust = self.trust.lock().await;
        let trusted = match trust.as_ref() {
            Some(t) => {
                steps.push(Step::new(
                    "Trusted log",
                    true,
                    format!(
                        "{} entries this console verified earlier, root {}",
                        t.size(),
                        hex::encode(t.checkpoint().checkpoint.root.0)
                    ),
                ));
                t.clone()
            }
            None => match client.trust_chain().await {
                Ok(t) => {
                    steps.push(Step::new(
                        "Trusted log",
                        true,
                        format!(
                            "the whole chain, {} entries, verified by this console from genesis (every link and attestation); root {}",
                            t.size(),
                            hex::encode(t.checkpoint().checkpoint.root.0)
                        ),
                    ));
                    *trust = Some(t.clone());
                    t
                }
                Err(e) => {
                    steps.push(Step::new(
                        "Trusted log",
                        false,
                        format!("the chain does not verify: {e}"),
                    ));
                    return Ok(answer(None, None, &steps));
                }
            },
        };
        let checkpoint = client.checkpoint(true).await.map_err(ApiError::cluster)?;
        if index > checkpoint.size {
            return Err(ApiError::not_found(format!(
                "index: entry {index} is past the head, entry {}",
                checkpoint.size
            )));
        }
        let consistency = client
            .consistency_proof(trusted.size(), checkpoint.size)
            .await
            .map_err(ApiError::cluster)?;
        let next = match engram_client::verify_checkpoint(&trusted, &checkpoint, &consistency.path) {
            Ok(next) => {
                steps.push(Step::new(
                    "Checkpoint",
                    true,
                    format!(
                        "the node's checkpoint of {} entries is signed by a key the chain trusts; a consistency proof of {} hashes shows its tree extends the trusted one of {}:",
                        checkpoint.size,
                        consistency.path.len(),
                        trusted.size()
                    ),
                ));
                steps.extend(consistency_steps(
                    &trusted.checkpoint().checkpoint,
                    &next.checkpoint().checkpoint,
                    &consistency.path,
                ));
                next
            }
            Err(failure) => {
                steps.push(Step::new("Checkpoint", false, checkpoint_failure(&failure)));
                // Where the note reads, the proof drawn shows which hash or root failed.
                if let Ok(note) = engram_audit::SignedCheckpoint::parse(&checkpoint.note) {
                    steps.extend(consistency_steps(
                        &trusted.checkpoint().checkpoint,
                        &note.checkpoint,
                        &consistency.path,
                    ));
                }
                return Ok(answer(Some(&checkpoint), None, &steps));
            }
        };
        let cp = next.checkpoint().checkpoint.clone();
        *trust = Some(next);
        drop(trust);
        let proof = client
            .inclusion_proof(index, cp.size)
            .await
            .map_err(ApiError::cluster)?;
        let Some(entry) = proof.entry.clone() else {
            steps.push(Step::new(
                "The entry's bytes",
                false,
                "the proof carries no entry",
            ));
            return Ok(answer(Some(&checkpoint), None, &steps));
        };
        let before = if index > 1 {
            read_entries(&client, index - 1, 1).await?.into_iter().next()
        } else {
            None
        };
        steps.extend(inclusion_steps(&entry, before.as_ref(), &cp, &proof.path));
        Ok(answer(Some(&checkpoint), Some(&entry), &steps))
    }

    /// An entity's timeline: every datom of it on main and on its namespace's branches, on
    /// both time axes (transaction and valid time), with which are current and which are
    /// claims that disagree with the current value.
    pub async fn entity(&self, ns: &str, entity: u64) -> Result<Json, ApiError> {
        let namespace = Namespace::new(ns).map_err(|e| ApiError::bad(format!("ns: {e}")))?;
        let id = EntityId(entity);
        let opts = GetOptions {
            include_expired: true,
            ..GetOptions::default()
        };
        let current = self
            .client
            .get(&namespace, id, opts)
            .await
            .map_err(ApiError::cluster)?;
        let history = self.entity_history(&namespace, id, None).await?;
        if history.datoms.is_empty() {
            return Err(ApiError::not_found(format!(
                "entity {entity} has no datoms in {ns}"
            )));
        }
        let held: Vec<&[u8]> = current.datoms.iter().map(|d| d.hash.as_slice()).collect();
        let conflicting: Vec<&[u8]> = current.conflicts.iter().map(|d| d.hash.as_slice()).collect();
        let mut datoms: Vec<Json> = history
            .datoms
            .iter()
            .map(|d| {
                timeline_datom(
                    d,
                    held.contains(&d.hash.as_slice()),
                    conflicting.contains(&d.hash.as_slice()),
                )
            })
            .collect();
        let branches = self
            .client
            .branches(&namespace, Consistency::Linearizable)
            .await
            .map_err(ApiError::cluster)?;
        let mut branch_rows = Vec::new();
        for b in branches.branches.iter().take(MAX_TIMELINE_BRANCHES) {
            let Ok(name) = BranchName::new(b.name.clone()) else {
                continue;
            };
            let on = self.entity_history(&namespace, id, Some(name)).await?;
            // A branch read merges main as of the fork; only what was written on it is new.
            let own: Vec<Json> = on
                .datoms
                .iter()
                .filter(|d| d.branch == b.name)
                .map(|d| timeline_datom(d, false, false))
                .collect();
            if !own.is_empty() {
                branch_rows.push(json!({ "name": b.name, "state": b.state, "fork_tx": b.fork_tx }));
                datoms.extend(own);
            }
        }
        Ok(json!({
            "namespace": ns,
            "entity": entity,
            "applied_tx": current.applied_tx,
            "expired_at_ns": current.expired_at_ns,
            "datoms": datoms,
            "branches": branch_rows,
            "branches_in_namespace": branches.branches.len(),
            "truncated": history.datoms.len() >= MAX_TIMELINE_DATOMS as usize,
        }))
    }

    /// Every datom of `entity` (up to [`MAX_TIMELINE_DATOMS`]), on main or read on `branch`.
    async fn entity_history(
        &self,
        namespace: &Namespace,
        entity: EntityId,
        branch: Option<BranchName>,
    ) -> Result<pb::HistoryResponse, ApiError> {
        let mut query = HistoryQuery::new(
            namespace.clone(),
            HistoryTarget::Entity {
                entity,
                attribute: None,
            },
        );
        query.branch = branch;
        query.limit = MAX_TIMELINE_DATOMS;
        self.client
            .history_all(&query, &[], |_| ())
            .await
            .map_err(ApiError::cluster)
    }

    /// Each endpoint's job log, newest first.
    pub async fn jobs(&self, limit: Option<u64>) -> Json {
        let limit = limit.unwrap_or(50).min(256) as u32;
        let answers = self
            .each_node(|node| async move { node.list_jobs("", limit).await })
            .await;
        let nodes: Vec<Json> = answers
            .into_iter()
            .map(|(endpoint, answer)| match answer {
                Ok(r) => json!({
                    "endpoint": endpoint,
                    "node_id": r.node_id,
                    "jobs": r.jobs.iter().map(|j| json!({
                        "seq": j.seq, "kind": j.kind, "subject": j.subject,
                        "started_ns": j.started_ns, "ended_ns": j.ended_ns,
                        "outcome": j.outcome, "error": j.error, "figures": j.figures,
                    })).collect::<Vec<_>>(),
                }),
                Err(e) => e.to_json(endpoint),
            })
            .collect();
        json!({ "nodes": nodes })
    }

    /// The newest `limit` events of each endpoint's access log (only refusals, with
    /// `refused_only`).
    pub async fn access(&self, limit: Option<u64>, refused_only: bool) -> Json {
        let limit = limit.unwrap_or(50).min(1_000) as u32;
        let answers = self
            .each_node(|node| async move { newest_events(&node, limit, refused_only).await })
            .await;
        let nodes: Vec<Json> = answers
            .into_iter()
            .map(|(endpoint, answer)| match answer {
                Ok((r, events)) => json!({
                    "endpoint": endpoint,
                    "node_id": r.node_id,
                    "head_seq": r.head_seq,
                    "logged_prefixes": r.logged_prefixes,
                    "events": events.iter().map(|e| json!({
                        "seq": e.seq, "time_ns": e.time_ns, "principal": e.principal,
                        "call": e.call, "namespace": e.namespace, "entity": e.entity,
                        "as_of_tx": e.as_of_tx, "read_at": e.read_at, "datoms": e.datoms,
                        "refused_code": e.refused_code, "refused_reason": e.refused_reason,
                    })).collect::<Vec<_>>(),
                }),
                Err(e) => e.to_json(endpoint),
            })
            .collect();
        json!({ "nodes": nodes })
    }

    /// Asks every endpoint at once, each through a client of that endpoint alone, and waits
    /// at most [`NODE_ANSWER`] for each: a node that does not answer is reported as such
    /// instead of holding the page for the client's whole retry budget.
    async fn each_node<T, Fut>(&self, call: impl Fn(Client) -> Fut) -> Vec<(&str, Result<T, Unanswered>)>
    where
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let asks = self.endpoints.iter().enumerate().map(|(i, endpoint)| {
            let node = self.client.node(i);
            let call = node.map(&call);
            async move {
                let answer = match call {
                    None => Err(Unanswered {
                        message: "no client for this endpoint".into(),
                        code: None,
                    }),
                    Some(call) => match tokio::time::timeout(NODE_ANSWER, call).await {
                        Err(_) => Err(Unanswered {
                            message: format!("no answer within {} s", NODE_ANSWER.as_secs()),
                            code: None,
                        }),
                        Ok(Err(e)) => Err(Unanswered {
                            message: e.to_string(),
                            code: e.code().map(code_name),
                        }),
                        Ok(Ok(answer)) => Ok(answer),
                    },
                };
                (endpoint.as_str(), answer)
            }
        });
        futures::future::join_all(asks).await
    }
}

/// How long a page waits for each node's answer.
pub const NODE_ANSWER: Duration = Duration::from_secs(5);

/// A node that did not answer one of a page's calls, and why.
#[derive(Debug)]
pub struct Unanswered {
    pub message: String,
    pub code: Option<&'static str>,
}

impl Unanswered {
    fn to_json(&self, endpoint: &str) -> Json {
        json!({ "endpoint": endpoint, "error": self.message, "code": self.code })
    }
}

/// The newest `limit` events of a node's access log, newest first: the log pages oldest
/// first, so this reads from `limit` before its head.
async fn newest_events(
    node: &Client,
    limit: u32,
    refused_only: bool,
) -> Result<(pb::AccessEventsResponse, Vec<pb::AccessEventInfo>), ClientError> {
    let probe = node
        .access_events(pb::AccessEventsRequest {
            limit: 1,
            refused_only,
            ..Default::default()
        })
        .await?;
    let after_seq = probe.head_seq.saturating_sub(u64::from(limit) * 4);
    let mut resp = node
        .access_events(pb::AccessEventsRequest {
            after_seq,
            limit: (limit * 4).min(10_000),
            refused_only,
            ..Default::default()
        })
        .await?;
    let mut events = std::mem::take(&mut resp.events);
    events.reverse();
    events.truncate(limit as usize);
    Ok((resp, events))
}

/// Why a node's checkpoint was not taken, in words.
fn checkpoint_failure(failure: &ProofFailure) -> String {
    match failure {
        ProofFailure::Invalid(reason) => reason.clone(),
        ProofFailure::Rewound { trusted, served } => format!(
            "the node's checkpoint of {served} entries is older than the {trusted} this console already verified: its log was rewound"
        ),
        ProofFailure::Forked {
            trusted,
            served,
            reason,
        } => format!(
            "the node's tree of {served} entries does not extend the {trusted} this console verified ({reason}): its log was forked"
        ),
    }
}

async fn read_entries(client: &Client, from: u64, count: u64) -> Result<Vec<pb::AuditEntry>, ApiError> {
    let mut stream = client
        .audit_entries(from, count)
        .await
        .map_err(ApiError::cluster)?;
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        out.push(item.map_err(ApiError::cluster)?);
    }
    Ok(out)
}

fn proven(
    node: usize,
    endpoint: &str,
    index: u64,
    checkpoint: Option<&pb::SignedCheckpoint>,
    entry: Option<&pb::AuditEntry>,
    steps: &[Step],
) -> Json {
    json!({
        "node": node,
        "endpoint": endpoint,
        "index": index,
        "verified": !steps.is_empty() && steps.iter().all(|s| s.ok),
        "steps": steps.iter().map(Step::to_json).collect::<Vec<_>>(),
        "checkpoint": checkpoint.map(|c| json!({
            "origin": c.origin, "size": c.size, "root": hex::encode(&c.root),
            "tx_time_ns": c.tx_time_ns, "note": c.note,
        })),
        "entry": entry.map(|e| json!({
            "index": e.index, "tx": e.tx, "tx_time_ns": e.tx_time_ns, "namespace": e.namespace,
            "kind": e.kind, "hash": hex::encode(&e.hash), "prev_hash": hex::encode(&e.prev_hash),
        })),
    })
}

fn timeline_datom(d: &pb::Datom, current: bool, conflict: bool) -> Json {
    let prov = d.provenance.clone().unwrap_or_default();
    json!({
        "attribute": d.attribute,
        // A string as written (the page shows text); anything else in its usual notation.
        "value": match d.value.as_ref().and_then(engram_proto::value_to_domain_lossy) {
            Some(engram_types::Value::String(s)) => json!(s),
            Some(v) => json!(v.to_string()),
            None => Json::Null,
        },
        "op": if d.op == pb::Op::Retract as i32 { "retract" } else { "assert" },
        "tx": d.tx,
        "valid_from_ns": d.valid_from_ns,
        "valid_to_ns": d.valid_to_ns,
        "agent": prov.agent,
        "confidence": prov.confidence,
        "branch": d.branch,
        "hash": hex::encode(&d.hash),
        "redacted": d.redacted,
        "redacted_by_tx": d.redacted_by_tx,
        "current": current,
        "conflict": conflict,
    })
}

/// A view's failure: the HTTP status the page gets and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// The gRPC code when the cluster refused or failed the call.
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            code: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 404,
            message: message.into(),
            code: None,
        }
    }

    /// A call to the cluster that failed: 502, with its gRPC code (a NOT_FOUND from the
    /// cluster stays a 404).
    pub fn cluster(e: ClientError) -> ApiError {
        let code = e.code();
        ApiError {
            status: if code == Some(tonic::Code::NotFound) {
                404
            } else {
                502
            },
            message: e.to_string(),
            code: code.map(code_name),
        }
    }

    pub fn to_json(&self) -> Json {
        json!({ "error": { "message": self.message, "code": self.code } })
    }
}
