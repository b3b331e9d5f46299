//! The gRPC services a node serves, and what they share.

pub mod access;
pub mod audit;
pub mod cluster;
pub mod exposure;
pub mod gate;
pub mod memory;
pub mod read_pool;
pub mod recall_file;
pub mod rpc_metrics;
pub mod search_index;
pub mod watch_hub;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use engram_proto::pb;
use engram_raft::{NodeError, RaftNode};
use tonic::transport::Channel;

use crate::ServerConfig;
use crate::error::ApiError;

/// Marks a request a node forwarded to the leader, so it is never forwarded twice; signed by
/// that node, so a client cannot set it (see `gate`).
pub const FORWARDED: &str = "x-engram-forwarded";

/// State shared by the services of one node.
pub struct Shared {
    pub node: RaftNode,
    pub config: ServerConfig,
    /// What this node's watchers share: the newest transactions and pages of older ones.
    pub watch_hub: Arc<watch_hub::WatchHub>,
    /// Where long store reads run, off the async workers that drive Raft.
    pub reads: Arc<read_pool::ReadPool>,
    /// Checks who calls, and whether they may.
    pub gate: gate::Gate,
    /// Records the reads this node serves on the namespaces it logs.
    pub access: crate::access_log::AccessRecorder,
    /// The recall index `Memory.Search` answers from.
    pub search: search_index::SearchIndex,
    channels: Mutex<HashMap<String, Channel>>,
}

/// Where a request must be served.
pub enum Route {
    /// Here: this node leads (and, for linearizable reads, has confirmed it).
    Local,
    /// At the leader, whose address this is.
    Leader(String),
}

impl Shared {
    pub fn new(
        node: RaftNode,
        config: ServerConfig,
        access: crate::access_log::AccessRecorder,
    ) -> Arc<Shared> {
        let reads = Arc::new(read_pool::ReadPool::for_this_machine());
        let watch_hub = Arc::new(watch_hub::WatchHub::new(node.applied_index(), reads.clone()));
        let saves = (config.recall_save_ms > 0).then(|| recall_file::SaveFile::in_dir(&config.data_dir));
        let search = search_index::SearchIndex::new(reads.clone(), saves);
        Arc::new(Shared {
            watch_hub,
            reads,
            search,
            node,
            config,
            gate: gate::Gate::default(),
            access,
            channels: Mutex::new(HashMap::new()),
        })
    }

    /// Records a read this node served (see `crate::access_log`): `datoms` returned, about
    /// `entity` when the call was about one, as of `as_of_tx` when it asked.
    pub async fn record_access(
        &self,
        caller: &gate::Caller,
        call: &'static str,
        namespace: &str,
        entity: Option<u64>,
        as_of_tx: Option<u64>,
        datoms: usize,
    ) {
        // The policy's switches were read with the caller's grants (`Caller::access_logged`).
        if !caller.access_logged && !self.access.covers(namespace) {
            return;
        }
        self.access
            .record(engram_core::access_log::Access {
                principal: caller
                    .principal
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                call,
                namespace: namespace.to_string(),
                entity,
                as_of_tx,
                read_at: self.applied_index(),
                datoms: u32::try_from(datoms).unwrap_or(u32::MAX),
                refused: None,
            })
            .await;
    }

    /// A cached lazily-connecting channel to `addr`.
    pub fn channel(&self, addr: &str) -> Result<Channel, ApiError> {
        let mut channels = self
            .channels
            .lock()
            .map_err(|_| ApiError::Internal("channel cache poisoned".into()))?;
        if let Some(ch) = channels.get(addr) {
            return Ok(ch.clone());
        }
        let ch = engram_raft::network::channel(addr).map_err(ApiError::Internal)?;
        channels.insert(addr.to_string(), ch.clone());
        Ok(ch)
    }

    pub fn memory_client(&self, addr: &str) -> Result<pb::memory_client::MemoryClient<Channel>, ApiError> {
        let limit = self.config.max_tx_bytes.saturating_mul(4).max(4 << 20);
        Ok(pb::memory_client::MemoryClient::new(self.channel(addr)?)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(limit))
    }

    pub fn access_client(&self, addr: &str) -> Result<pb::access_client::AccessClient<Channel>, ApiError> {
        Ok(pb::access_client::AccessClient::new(self.channel(addr)?))
    }

    pub fn cluster_client(&self, addr: &str) -> Result<pb::cluster_client::ClusterClient<Channel>, ApiError> {
        Ok(pb::cluster_client::ClusterClient::new(self.channel(addr)?))
    }

    /// Where a write (or a membership change) must go.
    pub fn route_write(&self, forwarded: bool) -> Result<Route, ApiError> {
        // A node whose chain diverged neither proposes nor forwards: its view of the cluster
        // cannot be trusted until an operator has looked.
        if let Some(alarm) = self.node.alarm() {
            return Err(ApiError::Diverged(alarm.to_string()));
        }
        match self.node.leader() {
            Some((id, _)) if id == self.node.node_id => Ok(Route::Local),
            Some((_, info)) if !forwarded => Ok(Route::Leader(info.addr)),
            Some(_) => Err(ApiError::Unavailable("leadership is moving; retry".into())),
            None => Err(ApiError::Unavailable("no leader elected yet; retry".into())),
        }
    }

    /// Where a read must go: stale reads are served here; linearizable ones by the leader
    /// after a read-index round.
    pub async fn route_read(&self, consistency: i32, forwarded: bool) -> Result<Route, ApiError> {
        let stale = pb::ReadConsistency::try_from(consistency)
            .map_err(|_| ApiError::Invalid(format!("consistency: unknown value {consistency}")))?
            == pb::ReadConsistency::Stale;
        if stale {
            return Ok(Route::Local);
        }
        match self.route_write(forwarded)? {
            Route::Local => match self.node.ensure_linearizable().await {
                Ok(()) => Ok(Route::Local),
                Err(NodeError::NotLeader {
                    leader: Some((_, info)),
                }) if !forwarded => Ok(Route::Leader(info.addr)),
                Err(e) => Err(e.into()),
            },
            leader => Ok(leader),
        }
    }

    /// A client of the leader when a read must be served there; `None`: serve it here.
    pub async fn read_leader(
        &self,
        consistency: i32,
        forwarded: bool,
    ) -> Result<Option<pb::memory_client::MemoryClient<Channel>>, ApiError> {
        match self.route_read(consistency, forwarded).await? {
            Route::Local => Ok(None),
            Route::Leader(addr) => Ok(Some(self.memory_client(&addr)?)),
        }
    }

    /// A client of the leader when a membership or key change must be made there; `None`: here.
    pub fn write_leader(
        &self,
        forwarded: bool,
    ) -> Result<Option<pb::cluster_client::ClusterClient<Channel>>, ApiError> {
        match self.route_write(forwarded)? {
            Route::Local => Ok(None),
            Route::Leader(addr) => Ok(Some(self.cluster_client(&addr)?)),
        }
    }

    /// Runs a read of this node's state (see [`read_state`]).
    pub fn read_state<T, E: Into<ApiError>>(
        &self,
        read: impl FnOnce(&dyn engram_storage::Store) -> Result<T, E>,
    ) -> Result<T, ApiError> {
        read_state(&self.node, read)
    }

    /// Runs a read on the read pool, off the async workers that drive Raft (see `read_pool`),
    /// when it may be long (`long`: a page over an attribute's or a namespace's rows), else in
    /// place: the hop to a pool thread costs more than a short read (an entity's history of
    /// ten datoms ran at 0.68-0.78x its throughput through the pool).
    pub async fn read_sized<T: Send + 'static, E: Into<ApiError> + Send + 'static>(
        &self,
        long: bool,
        read: impl FnOnce(&dyn engram_storage::Store) -> Result<T, E> + Send + 'static,
    ) -> Result<T, ApiError> {
        if long {
            self.reads.read(&self.node, read).await?.map_err(Into::into)
        } else {
            self.read_state(read)
        }
    }

    pub fn applied_index(&self) -> u64 {
        self.node.applied_index()
    }
}

/// Runs a read of `node`'s state, refused as `UNAVAILABLE` if a snapshot install replaced part
/// of the state during it (see `RaftNode::read_state`); for tasks that hold the node, not the
/// shared server state.
pub fn read_state<T, E: Into<ApiError>>(
    node: &engram_raft::RaftNode,
    read: impl FnOnce(&dyn engram_storage::Store) -> Result<T, E>,
) -> Result<T, ApiError> {
    node.read_state(read)?.map_err(Into::into)
}

/// A page of a list read whole by key (the policy's lists, a namespace's branches): the items
/// after `cursor` in key order (`engram_core::lists::keyed_page`), and the cursor of the next
/// page (empty: the list ends here).
pub(crate) fn list_page<T>(
    kind: engram_core::cursor::CursorKind,
    query: &[&[u8]],
    items: Vec<(Vec<u8>, T)>,
    cursor: &[u8],
    limit: u32,
) -> Result<(Vec<T>, Vec<u8>), ApiError> {
    let size = engram_core::lists::keyed_page_size(limit);
    let (page, next) = engram_core::lists::keyed_page(kind, query, items, cursor, size)?;
    Ok((page, next.map(|c| c.encode()).unwrap_or_default()))
}

/// A status from the leader passes through unchanged, except a broken connection to it
/// (tonic reports those as UNKNOWN or CANCELLED), which is UNAVAILABLE: the client should retry,
/// likely against a new leader.
pub fn forwarded_err(status: tonic::Status) -> ApiError {
    match status.code() {
        tonic::Code::Unknown | tonic::Code::Cancelled => {
            ApiError::Unavailable(format!("lost the connection to the leader: {}", status.message()))
        }
        _ => ApiError::Forwarded(status),
    }
}

/// Runs `call`, forwarded to the leader at `addr`, until it answers or this node sees another
/// leader, or none. A leader that froze or was cut off from its peers answers nothing, and the
/// call would wait out the client's deadline although the others elect a new leader within a
/// second; ended as `UNAVAILABLE` here, it is retried by the client (a keyed write safely) and
/// forwarded to the new leader. A slow leader that still leads is waited for.
pub async fn while_leading<T>(
    node: &RaftNode,
    addr: &str,
    call: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let moved = node.until_leader_moves_from(addr);
    // Biased: the answer first, and no random draw the simulation could not replay.
    tokio::select! {
        biased;
        answer = call => answer,
        why = moved => Err(ApiError::Unavailable(why)),
    }
}

/// The leader's answer to a request this node forwarded, as this node's own answer (see
/// [`forwarded_err`]).
pub fn relay<T>(
    answer: Result<tonic::Response<T>, tonic::Status>,
) -> Result<tonic::Response<T>, tonic::Status> {
    answer.map_err(|status| forwarded_err(status).into())
}
