use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use engram_access::Action;
use engram_access::{Mode, PolicyOp};
use engram_core::policy::{self, ModeRow};
use engram_core::{Rejection, reads};
use engram_proto::{methods, pb};
use engram_raft::NodeInfo;
use engram_types::excerpt;
use tonic::{Request, Response, Status};

use super::gate::Need;
use super::{Route, Shared, relay};
use crate::error::ApiError;
use engram_raft::jobs::{Job, JobKind, JobOutcome};

/// Jobs a `ListJobs` without a limit answers.
const DEFAULT_JOBS: usize = 100;

/// The node's `/metrics` text, rendered off the async workers (it reads the store's sizes and
/// the chain head).
#[cfg(not(madsim))]
async fn exposition(shared: &Shared) -> Result<String, Status> {
    let (node, watches) = (shared.node.clone(), shared.watch_hub.clone());
    let insecure_open = shared.config.insecure_open;
    tokio::task::spawn_blocking(move || crate::metrics::render(&node, &watches, insecure_open))
        .await
        .map_err(|e| Status::from(ApiError::Internal(format!("metrics: {e}"))))
}

/// The simulation builds no metrics (they read process-wide counters and the clock).
#[cfg(madsim)]
async fn exposition(_: &Shared) -> Result<String, Status> {
    Err(Status::unimplemented("metrics are not built in the simulation"))
}

fn job_info(job: Job) -> pb::JobInfo {
    let error = match &job.outcome {
        JobOutcome::Failed(why) => why.clone(),
        _ => String::new(),
    };
    pb::JobInfo {
        seq: job.seq,
        kind: job.kind.name().to_string(),
        subject: job.subject,
        started_ns: job.started_ns,
        ended_ns: job.ended_ns.unwrap_or(0),
        outcome: job.outcome.name().to_string(),
        error,
        figures: job.figures.into_iter().collect(),
    }
}

/// `engram.v1.Cluster`: initialisation, status and membership.
pub struct ClusterService {
    shared: Arc<Shared>,
}

impl ClusterService {
    pub fn new(shared: Arc<Shared>) -> ClusterService {
        ClusterService { shared }
    }
}

fn members(shared: &Shared) -> Vec<pb::Member> {
    shared
        .node
        .status()
        .members
        .into_iter()
        .map(|(id, info, voter)| pb::Member {
            id,
            addr: info.addr,
            public_key: info.public_key.to_vec(),
            voter,
        })
        .collect()
}

/// Longest member address accepted (`host:port`; DNS names are at most 253 bytes).
const MAX_ADDR_BYTES: usize = 300;

/// Asks the node at `addr` who it is, checking it is node `id`.
pub async fn fetch_node_info(shared: &Shared, id: u64, addr: &str) -> Result<NodeInfo, ApiError> {
    if addr.len() > MAX_ADDR_BYTES {
        return Err(ApiError::Invalid(format!(
            "addr {}: longer than {MAX_ADDR_BYTES} bytes",
            excerpt(addr)
        )));
    }
    if id == shared.node.node_id {
        return Ok(shared.node.info.clone());
    }
    let mut client = shared.cluster_client(addr)?;
    let mut req = Request::new(pb::StatusRequest {});
    req.set_timeout(Duration::from_secs(3));
    let status = client
        .status(req)
        .await
        .map_err(|s| {
            ApiError::Unavailable(format!(
                "node {id} at {} did not answer: {}",
                excerpt(addr),
                s.message()
            ))
        })?
        .into_inner();
    if status.node_id != id {
        return Err(ApiError::Invalid(format!(
            "the node at {} is node {}, not node {id}",
            excerpt(addr),
            status.node_id
        )));
    }
    let public_key = <[u8; 32]>::try_from(status.public_key.as_slice())
        .map_err(|_| ApiError::Invalid(format!("node {id} reported a malformed public key")))?;
    Ok(NodeInfo {
        addr: addr.to_string(),
        public_key,
    })
}

/// Whether any peer named by `--peer` (other than this node) reports an initialised cluster.
pub async fn any_peer_initialized(shared: &Shared) -> bool {
    for peer in shared.config.peers.iter().filter(|p| p.id != shared.node.node_id) {
        let Ok(mut client) = shared.cluster_client(&peer.addr) else {
            continue;
        };
        if let Ok(status) = client.status(pb::StatusRequest {}).await
            && status.into_inner().initialized
        {
            return true;
        }
    }
    false
}

/// Initialises the cluster with `members` (id, addr) as voters, then records its security
/// mode (`security`, a [`PolicyOp::Configure`]).
pub async fn initialize(
    shared: &Shared,
    list: Vec<(u64, String)>,
    security: PolicyOp,
) -> Result<(), ApiError> {
    let mut nodes = BTreeMap::new();
    for (id, addr) in list {
        if id == 0 {
            return Err(ApiError::Invalid("members: node ids start at 1".into()));
        }
        let info = fetch_node_info(shared, id, &addr).await?;
        if nodes.insert(id, info).is_some() {
            return Err(ApiError::Invalid(format!("members: node {id} listed twice")));
        }
    }
    if !nodes.contains_key(&shared.node.node_id) {
        return Err(ApiError::Invalid(
            "members: must include the node receiving Init".into(),
        ));
    }
    shared.node.initialize(nodes).await?;
    configure(shared, security).await
}

/// How long an initialisation waits for the first leader to record the security mode.
const CONFIGURE_TIMEOUT_MS: u64 = 30_000;

/// Records the security mode, unless it is recorded already: on this node if it leads, or by
/// passing the `Init` on to the leader (which finishes an initialisation whose mode is not
/// recorded yet). Until it is recorded every transaction is refused, so nothing is written
/// under a mode nobody chose.
pub async fn configure(shared: &Shared, security: PolicyOp) -> Result<(), ApiError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(CONFIGURE_TIMEOUT_MS);
    loop {
        // Settled (recorded, or a chain from before modes): nothing to do. Before genesis is
        // applied here, the pending row is not written yet: wait for it.
        let (row, settled) = shared.read_state(|store| {
            Ok::<_, engram_core::CoreError>((policy::mode_row(store)?, policy::settled_mode(store)?))
        })?;
        if settled.is_some() {
            return Ok(());
        }
        let attempt = if row == Some(ModeRow::Pending) {
            propose_configure(shared, &security).await
        } else {
            Err(ApiError::Unavailable(
                "the genesis entry is not applied yet".into(),
            ))
        };
        match attempt {
            Ok(()) => return Ok(()),
            Err(e @ ApiError::Rejected(_)) => return Err(e),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(ApiError::Unavailable(format!(
                    "the cluster is initialised but its security mode is not recorded yet ({e}); run init again to finish"
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// One attempt to record the security mode: proposed here if this node leads, else passed to
/// the leader as an `Init`.
async fn propose_configure(shared: &Shared, security: &PolicyOp) -> Result<(), ApiError> {
    match shared.route_write(false)? {
        Route::Local => match shared
            .node
            .propose_policy(security.clone(), engram_raft::Proposer::Unsigned(None))
            .await
        {
            // Refused only because another initialisation recorded a mode first.
            Ok(Ok(_)) | Ok(Err(Rejection::Policy(_))) => Ok(()),
            Ok(Err(rejection)) => Err(ApiError::Rejected(rejection)),
            Err(e) => Err(ApiError::from(e)),
        },
        Route::Leader(addr) => {
            let mut request = tonic::Request::new(init_request(security));
            request
                .metadata_mut()
                .insert(super::FORWARDED, shared.forward_marker()?);
            match shared.cluster_client(&addr)?.init(request).await {
                Ok(_) => Ok(()),
                Err(status) => Err(super::forwarded_err(status)),
            }
        }
    }
}

/// The `Init` that records `security` (no members: the cluster exists).
fn init_request(security: &PolicyOp) -> pb::InitRequest {
    let mut req = pb::InitRequest::default();
    if let PolicyOp::Configure { mode, admin } = security {
        req.security = mode.name().to_string();
        if let Some((name, key)) = admin {
            req.admin = name.to_string();
            req.admin_public_key = key.0.to_vec();
        }
    }
    req
}

/// A node started with `--security enforced --admin NAME=KEY` records no other mode and no
/// other first administrator: whoever reaches it before the operator cannot initialise the
/// cluster (or finish a cut-short initialisation) under an administrator of their own.
fn expected(configured: &crate::Security, asked: &PolicyOp) -> Result<(), ApiError> {
    if !configured.enforced {
        return Ok(());
    }
    let wanted = configured.op();
    if *asked == wanted {
        return Ok(());
    }
    let admin = configured.admin.as_ref().map_or_else(
        || "(none)".to_string(),
        |(name, key)| format!("{name}={}", hex::encode(key.0)),
    );
    Err(ApiError::Conflict(format!(
        "this node was started with --security enforced --admin {admin}; an Init asking for another mode or first administrator is refused"
    )))
}

/// The security mode an `Init` asks for, validated.
fn security_op(req: &pb::InitRequest) -> Result<PolicyOp, ApiError> {
    let mode = match req.security.as_str() {
        "" => Mode::Open,
        other => other
            .parse::<Mode>()
            .map_err(|e| ApiError::Invalid(format!("security: {e}")))?,
    };
    let admin = match (req.admin.is_empty(), req.admin_public_key.is_empty()) {
        (true, true) => None,
        (false, false) => Some((
            engram_proto::principal("admin", req.admin.clone())?,
            engram_proto::public_key("admin_public_key", &req.admin_public_key)?,
        )),
        _ => {
            return Err(ApiError::Invalid(
                "admin and admin_public_key: give both or neither".into(),
            ));
        }
    };
    if mode == Mode::Enforced && admin.is_none() {
        return Err(ApiError::Invalid(
            "admin: enforced mode needs a first administrator (its name and public key)".into(),
        ));
    }
    Ok(PolicyOp::Configure { mode, admin })
}

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterService {
    async fn init(&self, request: Request<pb::InitRequest>) -> Result<Response<pb::InitResponse>, Status> {
        let req = request.into_inner();
        let security = security_op(&req)?;
        expected(&self.shared.config.security, &security)?;
        if let PolicyOp::Configure { mode, .. } = &security {
            let config = &self.shared.config;
            super::exposure::check_init(config.listen, config.insecure_open, *mode)?;
        }
        let list: Vec<(u64, String)> = if req.members.is_empty() {
            vec![(self.shared.node.node_id, self.shared.config.advertise())]
        } else {
            req.members.into_iter().map(|m| (m.id, m.addr)).collect()
        };
        if self.shared.node.is_initialized().await.map_err(ApiError::from)? {
            // An initialisation cut short before its mode was recorded is finished here.
            if self.shared.read_state(|store| policy::mode_row(store))? == Some(ModeRow::Pending) {
                configure(&self.shared, security).await?;
                return Ok(Response::new(pb::InitResponse {
                    members: members(&self.shared),
                }));
            }
            return Err(ApiError::Conflict("the cluster is already initialised".into()).into());
        }
        initialize(&self.shared, list, security).await?;
        // initialize() returns once the config is accepted; the metrics that `members` reads
        // catch up a moment later. Wait briefly so the answer lists the new members.
        for _ in 0..40 {
            if !self.shared.node.status().members.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Response::new(pb::InitResponse {
            members: members(&self.shared),
        }))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let s = self.shared.node.status();
        let head = self.shared.read_state(|store| reads::head(store))?;
        Ok(Response::new(pb::StatusResponse {
            node_id: self.shared.node.node_id,
            addr: self.shared.config.advertise(),
            public_key: self.shared.node.info.public_key.to_vec(),
            initialized: self.shared.node.is_initialized().await.map_err(ApiError::from)?,
            role: s.role,
            leader_id: s.leader_id,
            term: s.term,
            last_log_index: s.last_log_index,
            applied_index: s.applied_index,
            members: members(&self.shared),
            chain_index: head.index,
            chain_head: if head.index == 0 {
                Vec::new()
            } else {
                head.hash.0.to_vec()
            },
            redactions_applied_index: s.redactions_applied_index,
            redactions_purged_index: s.redactions_purged_index,
        }))
    }

    async fn add_node(
        &self,
        request: Request<pb::AddNodeRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        if req.id == 0 {
            return Err(ApiError::Invalid("id: node ids start at 1".into()).into());
        }
        if let Some(mut leader) = self.shared.write_leader(forwarded)? {
            return relay(leader.add_node(caller.forward(req)).await);
        }
        self.shared.admit(
            &meta,
            &req,
            methods::ADD_NODE,
            Need::cluster(Action::ClusterAdmin),
        )?;
        let info = fetch_node_info(&self.shared, req.id, &req.addr).await?;
        self.shared
            .node
            .add_node(req.id, info, req.learner_only)
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::MembershipResponse {
            members: members(&self.shared),
        }))
    }

    async fn remove_node(
        &self,
        request: Request<pb::RemoveNodeRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        if let Some(mut leader) = self.shared.write_leader(forwarded)? {
            return relay(leader.remove_node(caller.forward(req)).await);
        }
        self.shared.admit(
            &meta,
            &req,
            methods::REMOVE_NODE,
            Need::cluster(Action::ClusterAdmin),
        )?;
        if !self
            .shared
            .node
            .status()
            .members
            .iter()
            .any(|(id, _, _)| *id == req.id)
        {
            return Err(ApiError::NotFound(format!("node {} is not a member", req.id)).into());
        }
        self.shared
            .node
            .remove_node(req.id)
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::MembershipResponse {
            members: members(&self.shared),
        }))
    }

    async fn revoke_key(
        &self,
        request: Request<pb::RevokeKeyRequest>,
    ) -> Result<Response<pb::KeyChangeResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        let key_id = match req.key_id.len() {
            0 => None,
            8 => {
                let mut id = [0u8; 8];
                id.copy_from_slice(&req.key_id);
                Some(engram_audit::KeyId(id))
            }
            n => return Err(ApiError::Invalid(format!("key_id: {n} bytes, expected 8 (or none)")).into()),
        };
        if let Some(mut leader) = self.shared.write_leader(forwarded)? {
            return relay(leader.revoke_key(caller.forward(req)).await);
        }
        self.shared
            .admit(&meta, &req, methods::REVOKE_KEY, Need::cluster(Action::KeyAdmin))?;
        let key_id = match key_id {
            Some(id) => id,
            // The key the chain trusts now: after a rotation, the new one (the membership
            // still records the key the node joined with).
            None => self
                .shared
                .read_state(|store| engram_core::reads::active_key_of(store, req.node_id))?
                .map(|row| row.key.key_id())
                .ok_or_else(|| {
                    ApiError::NotFound(format!(
                        "node {} has no key the chain trusts now; name the key to revoke with its key id",
                        req.node_id
                    ))
                })?,
        };
        let audit_index = self
            .shared
            .node
            .revoke_key(req.node_id, key_id)
            .await
            .map_err(ApiError::from)?
            .map_err(ApiError::Rejected)?;
        Ok(Response::new(pb::KeyChangeResponse { audit_index }))
    }

    async fn rotate_key(
        &self,
        request: Request<pb::RotateKeyRequest>,
    ) -> Result<Response<pb::KeyChangeResponse>, Status> {
        self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::ROTATE_KEY,
            Need::cluster(Action::KeyAdmin),
        )?;
        let req = request.into_inner();
        let node = &self.shared.node;
        if req.node_id != node.node_id {
            return Err(ApiError::Conflict(format!(
                "this is node {}, not node {}: send RotateKey to the node whose key rotates, which holds the new key",
                node.node_id, req.node_id
            ))
            .into());
        }
        if self.shared.config.key_file.is_some() {
            return Err(ApiError::Conflict(
                "this node's key comes from --key-file, which it does not rewrite; rotate by starting it with a new key file after a key change, or run it with its key in the data directory".into(),
            )
            .into());
        }
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| ApiError::Internal(format!("no OS randomness for a key: {e}")))?;
        let new = engram_audit::NodeKey::from_seed(seed);
        let new_id = new.key_id();
        let current = node.keys.current();
        let action = engram_audit::KeyAction::Rotate {
            node_id: node.node_id,
            old: current.key_id(),
            new: new.public(),
        };
        let origin = node.origin().map_err(ApiError::from)?;
        let request = engram_audit::KeyChangeRequest::sign(&origin, action, &current);
        // Staged (and written beside the key file) before the entry can exist, so the node
        // can always switch to the key its rotation names.
        node.keys.stage(new);
        let audit_index = self.propose_key_change(request).await?;
        // The entry is committed; answer once this node has applied it too, so the new key is
        // in use (and persisted) when the caller hears back. A follower may apply a moment
        // after the leader committed.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while node.keys.current().key_id() != new_id {
            if tokio::time::Instant::now() >= deadline {
                return Err(ApiError::Unavailable(format!(
                    "the rotation is committed at audit entry {audit_index}, but this node has not applied it yet; it switches keys when it does"
                ))
                .into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Response::new(pb::KeyChangeResponse { audit_index }))
    }

    type BackupStream = BackupStream;

    async fn backup(&self, request: Request<pb::BackupRequest>) -> Result<Response<BackupStream>, Status> {
        let caller = self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::BACKUP,
            Need::cluster(Action::ClusterAdmin),
        )?;
        let node = self.shared.node.clone();
        let origin = node
            .read_state(|store| reads::origin(store))
            .map_err(ApiError::from)?;
        if origin.map_err(ApiError::from)?.is_none() {
            return Err(ApiError::NotFound(
                "this node's chain is empty: there is nothing to back up yet".into(),
            )
            .into());
        }
        // A backup holds every namespace's datoms: logged when everything is (`*`).
        self.shared
            .record_access(&caller, "backup", "", None, None, 0)
            .await;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        // Reads the whole state from one consistent view and signs the checkpoint of the chain
        // head in it; a snapshot install meanwhile would tear it, so the stream then ends with
        // UNAVAILABLE instead of the trailer (`read_state`), and the client keeps no file.
        let job = node.jobs().start(
            engram_raft::jobs::JobKind::Backup,
            match &caller.principal {
                Some(p) => format!("asked by {p}"),
                None => "asked in open mode".to_string(),
            },
        );
        let write = move |emit: &mut dyn FnMut(Vec<u8>) -> Result<(), engram_core::CoreError>| {
            let key = node.keys.current();
            let written = node
                .read_state(|store| {
                    engram_core::backup::write_backup(store, node.node_id, &key, BACKUP_CHUNK_BYTES, emit)
                })
                .map_err(ApiError::from)
                .and_then(|written| Ok(written?));
            match &written {
                Ok(w) => job.done([
                    ("bytes", w.bytes),
                    ("records", w.records),
                    ("chain_index", w.chain_index),
                ]),
                Err(e) => job.failed(e, []),
            }
            written.map(|_| ())
        };
        #[cfg(not(madsim))]
        tokio::task::spawn_blocking(move || {
            let errors = tx.clone();
            let result = write(&mut |data| {
                tx.blocking_send(Ok(pb::BackupChunk { data }))
                    .map_err(|_| engram_storage::StorageError::Engine("the client went away".into()).into())
            });
            if let Err(e) = result {
                let _ = errors.blocking_send(Err(Status::from(e)));
            }
        });
        // The simulation has no blocking threads: the backup is made in memory, then streamed.
        #[cfg(madsim)]
        {
            let mut chunks = Vec::new();
            let result = write(&mut |data| {
                chunks.push(Ok(pb::BackupChunk { data }));
                Ok(())
            });
            if let Err(e) = result {
                chunks.push(Err(Status::from(e)));
            }
            tokio::task::spawn(async move {
                for item in chunks {
                    if tx.send(item).await.is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn list_jobs(
        &self,
        request: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsResponse>, Status> {
        self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::LIST_JOBS,
            Need::on(Action::Read, engram_access::SYSTEM_NAMESPACE),
        )?;
        let req = request.into_inner();
        let kind = match req.kind.as_str() {
            "" => None,
            name => Some(JobKind::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = JobKind::ALL.iter().map(|k| k.name()).collect();
                ApiError::Invalid(format!(
                    "kind: no job kind {name:?}; the kinds are {}",
                    known.join(", ")
                ))
            })?),
        };
        let limit = match req.limit {
            0 => DEFAULT_JOBS,
            n => n as usize,
        };
        let jobs = self
            .shared
            .node
            .jobs()
            .list(kind, limit)
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::ListJobsResponse {
            node_id: self.shared.node.node_id,
            jobs: jobs.into_iter().map(job_info).collect(),
        }))
    }

    async fn metrics(
        &self,
        request: Request<pb::MetricsRequest>,
    ) -> Result<Response<pb::MetricsResponse>, Status> {
        self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::METRICS,
            Need::on(Action::Read, engram_access::SYSTEM_NAMESPACE),
        )?;
        Ok(Response::new(pb::MetricsResponse {
            node_id: self.shared.node.node_id,
            text: exposition(&self.shared).await?,
        }))
    }

    async fn propose_key_change(
        &self,
        request: Request<pb::KeyChangeProposal>,
    ) -> Result<Response<pb::KeyChangeResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        let change: engram_audit::KeyChangeRequest = postcard::from_bytes(&req.request)
            .map_err(|e| ApiError::Invalid(format!("request: not a key-change request: {e}")))?;
        if let Some(mut leader) = self.shared.write_leader(forwarded)? {
            return relay(leader.propose_key_change(caller.forward(req)).await);
        }
        self.shared
            .admit(&meta, &req, methods::PROPOSE_KEY_CHANGE, Need::Nothing)?;
        let audit_index = self
            .shared
            .node
            .propose_key_change(change)
            .await
            .map_err(ApiError::from)?
            .map_err(ApiError::Rejected)?;
        Ok(Response::new(pb::KeyChangeResponse { audit_index }))
    }
}

/// Bytes per backup chunk on the wire.
const BACKUP_CHUNK_BYTES: usize = 1 << 20;

type BackupStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::BackupChunk, Status>> + Send>>;

impl ClusterService {
    /// Proposes an authorised key change here if this node leads, else through the leader.
    async fn propose_key_change(&self, change: engram_audit::KeyChangeRequest) -> Result<u64, Status> {
        let encoded = postcard::to_allocvec(&change)
            .map_err(|e| ApiError::Internal(format!("encoding a key change: {e}")))?;
        let response = pb::cluster_server::Cluster::propose_key_change(
            self,
            Request::new(pb::KeyChangeProposal { request: encoded }),
        )
        .await?;
        Ok(response.into_inner().audit_index)
    }
}
