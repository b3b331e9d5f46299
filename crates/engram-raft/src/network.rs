//! Raft messages over gRPC: the client side (`RaftNetworkV2` for openraft) and the server
//! side ([`RaftService`], the internal `engram.v1.Raft` service).
//!
//! Messages are postcard-encoded openraft types inside `RaftMessage.payload`, each request
//! signed by the sending node, or tagged once the receiver has said it accepts tags
//! ([`crate::peer_auth`]); the server refuses anything else with
//! `UNAUTHENTICATED` before decoding it. A remote Raft error cannot travel inside openraft's
//! `RPCError`, so the server answers it with a gRPC status and the client reports the peer as
//! unreachable; openraft retries with backoff.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use engram_audit::{KeyRing, PublicKey};
use engram_storage::Store;

use engram_proto::pb;
use engram_proto::pb::raft_client::RaftClient;
use openraft::OptionalSend;
use openraft::entry::RaftEntry;
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, v2::RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status, Streaming};
use tracing::warn;

use crate::codec::{decode, encode};
use crate::peer_auth::{self, ClusterKeys, RpcKind};
use crate::snapshots::Snapshots;
use crate::stages::{Stage, WriteStages};
use crate::{NodeInfo, Raft, Snapshot, SnapshotData, SnapshotMeta, TypeConfig, Vote};

/// Largest gRPC message between nodes: big enough for a full append batch.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Makes one [`Connection`] per peer. Channels connect lazily and reconnect by themselves.
#[derive(Clone)]
pub struct NetworkFactory {
    /// This node: every request it sends is signed as coming from it.
    pub node_id: u64,
    pub keys: Arc<KeyRing>,
    /// Deadline of an append that carries entries (see [`Connection::append_deadline`]).
    pub append_timeout: Duration,
    /// This node's store: its applied chain names the member keys a request lists.
    pub store: Arc<dyn Store>,
    /// Marks each append a follower acknowledged (telemetry; see [`WriteStages`]).
    pub stages: Arc<WriteStages>,
}

pub struct Connection {
    from: u64,
    keys: Arc<KeyRing>,
    target: u64,
    client: Result<RaftClient<Channel>, String>,
    append_timeout: Duration,
    /// The keys this node's chain trusted when the connection was made, listed in every
    /// request: a target outside any membership (being added) trusts them as well as this
    /// sender, so it still accepts whichever member leads next (peer-auth rule 3).
    members: Vec<(u64, PublicKey)>,
    /// The key changes that admitted this node's key, back to a genesis key (postcard): a
    /// target whose chain ends before that admission trusts this node through them (peer-auth
    /// rule 4).
    admissions: Vec<Vec<u8>>,
    stages: Arc<WriteStages>,
    /// The keys this node's keys share with the target's ([`peer_auth::pair_keys`]); empty
    /// when the target's key is unusable.
    pairs: Vec<peer_auth::PairKey>,
    /// Whether requests to the target are tagged or signed.
    tags: TagState,
}

/// Whether a connection tags its requests: not until the target says it accepts tags
/// (`RaftMessage.accepts_mac` on a reply), and never again on this connection once it refused
/// a tagged request (the target rotated its key since the pair keys were made, or was replaced
/// by an older build). Its later replies still say it accepts tags, so without the second rule
/// every other request would be a refused tagged one.
#[derive(Debug, Default)]
pub(crate) struct TagState(AtomicU8);

const SIGN_UNTIL_TOLD: u8 = 0;
const TAG: u8 = 1;
const SIGN_ALWAYS: u8 = 2;

impl TagState {
    pub(crate) fn tagging(&self) -> bool {
        self.0.load(Ordering::Relaxed) == TAG
    }

    /// A reply arrived; `accepts_mac` is what it said.
    pub(crate) fn replied(&self, accepts_mac: bool) {
        if accepts_mac {
            let _ = self
                .0
                .compare_exchange(SIGN_UNTIL_TOLD, TAG, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// A tagged request was refused as unauthenticated.
    pub(crate) fn refused(&self) {
        self.0.store(SIGN_ALWAYS, Ordering::Relaxed);
    }
}

/// TLS for the connections this process opens to other nodes (Raft, forwarding, joining),
/// set once at startup by a node that serves TLS: it presents its own certificate and checks
/// the peer's against the cluster CA. Process-wide because one process runs one node.
#[cfg(not(madsim))]
static PEER_TLS: std::sync::OnceLock<tonic::transport::ClientTlsConfig> = std::sync::OnceLock::new();

/// Makes every later [`channel`] use TLS with `ca_pem` (to verify peers) and this node's
/// certificate and key (PEM). Returns false if TLS was already set.
#[cfg(not(madsim))]
pub fn set_peer_tls(ca_pem: &[u8], cert_pem: &[u8], key_pem: &[u8]) -> bool {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .identity(Identity::from_pem(cert_pem, key_pem));
    PEER_TLS.set(config).is_ok()
}

/// A lazily connecting channel to `addr` (`host:port`), over TLS once [`set_peer_tls`] ran.
pub fn channel(addr: &str) -> Result<Channel, String> {
    #[cfg(not(madsim))]
    let tls = PEER_TLS.get();
    #[cfg(madsim)]
    let tls: Option<&()> = None;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| format!("bad peer address {addr:?}: {e}"))?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true);
    #[cfg(not(madsim))]
    let endpoint = match tls {
        Some(config) => endpoint
            .tls_config(config.clone())
            .map_err(|e| format!("TLS to {addr:?}: {e}"))?,
        None => endpoint,
    };
    Ok(endpoint.connect_lazy())
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, node: &NodeInfo) -> Connection {
        let client = channel(&node.addr).map(|ch| {
            RaftClient::new(ch)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
        });
        if let Err(e) = &client {
            warn!(target_node = target, error = %e, "cannot build a channel to peer");
        }
        let members = peer_auth::chain_member_keys(&*self.store).unwrap_or_else(|e| {
            warn!(target_node = target, error = %e, "cannot read the chain's member keys; the request lists none");
            Vec::new()
        });
        let admissions = peer_auth::admission_chain(&*self.store, &self.keys.current().public())
            .and_then(|chain| {
                chain
                    .iter()
                    .map(|proof| postcard::to_allocvec(proof).map_err(|e| e.to_string()))
                    .collect()
            })
            .unwrap_or_else(|e| {
                warn!(target_node = target, error = %e, "cannot read this node's admission; the request carries none");
                Vec::new()
            });
        // The target's key as this node's chain knows it (rotations included), else as the
        // membership recorded it when the target was added.
        let target_key = members
            .iter()
            .find(|(id, _)| *id == target)
            .map_or(PublicKey(node.public_key), |(_, key)| *key);
        let pairs = peer_auth::pair_keys(&self.keys, &target_key);
        Connection {
            from: self.node_id,
            pairs,
            tags: TagState::default(),
            keys: self.keys.clone(),
            target,
            client,
            append_timeout: self.append_timeout,
            members,
            admissions,
            stages: self.stages.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Msg(String);

fn unreachable(e: impl ToString) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(&Msg(e.to_string())))
}

fn network_err(e: impl ToString) -> NetworkError<TypeConfig> {
    NetworkError::new(&Msg(e.to_string()))
}

impl Connection {
    fn client(&self) -> Result<RaftClient<Channel>, RPCError<TypeConfig>> {
        self.client.clone().map_err(unreachable)
    }

    fn request<T>(message: T, deadline: Duration) -> Request<T> {
        let mut req = Request::new(message);
        req.set_timeout(deadline);
        req
    }

    /// openraft gives every append the heartbeat interval as its deadline. That suits a
    /// heartbeat (no entries), but an append carrying a full batch of large transactions can
    /// take longer than a heartbeat to ship and fsync on a busy follower; cutting it off there
    /// makes the leader resend the same batch forever and the follower never catches up.
    /// Appends with entries therefore get `append_timeout` when it is longer (operators raise
    /// it for bulk loads; the default, 0, keeps the heartbeat interval).
    fn append_deadline(&self, option: &RPCOption, carries_entries: bool) -> Duration {
        if carries_entries {
            option.hard_ttl().max(self.append_timeout)
        } else {
            option.hard_ttl()
        }
    }

    /// One unary Raft RPC: encode, send with `deadline`, decode the reply.
    async fn call<Req, Resp, F, Fut>(
        &self,
        rpc: &Req,
        kind: RpcKind,
        deadline: Duration,
        what: &str,
        send: F,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: serde::Serialize,
        Resp: serde::de::DeserializeOwned,
        F: FnOnce(RaftClient<Channel>, Request<pb::RaftMessage>) -> Fut,
        Fut: Future<Output = Result<Response<pb::RaftMessage>, Status>>,
    {
        let payload = encode(rpc).map_err(|e| RPCError::Network(network_err(e)))?;
        let tagged = self.tags.tagging() && !self.pairs.is_empty();
        let auth = if tagged {
            self.tag(kind, &payload)
        } else {
            self.sign(kind, &payload)
        };
        let reply = send(
            self.client()?,
            Self::request(
                pb::RaftMessage {
                    payload,
                    auth: Some(auth),
                    accepts_mac: false,
                },
                deadline,
            ),
        )
        .await
        .map_err(|s| {
            if tagged && s.code() == tonic::Code::Unauthenticated {
                warn!(target_node = self.target, error = %s.message(), "tagged raft request refused; signing on this connection from now on");
                self.tags.refused();
            }
            self.status_to_rpc(s)
        })?
        .into_inner();
        self.tags.replied(reply.accepts_mac);
        decode(what, &reply.payload).map_err(|e| RPCError::Network(network_err(e)))
    }

    /// This node's signature over a request to the target, with the member keys it lists
    /// (rule 3) and its admissions (rule 4).
    fn sign(&self, kind: RpcKind, payload: &[u8]) -> pb::PeerAuth {
        let mut auth =
            peer_auth::sign_listing(&self.keys, kind, self.from, self.target, payload, &self.members);
        auth.admissions.clone_from(&self.admissions);
        auth
    }

    /// [`Connection::sign`], tagged with the pair keys instead.
    fn tag(&self, kind: RpcKind, payload: &[u8]) -> pb::PeerAuth {
        let mut auth =
            peer_auth::tag_listing(&self.pairs, kind, self.from, self.target, payload, &self.members);
        auth.admissions.clone_from(&self.admissions);
        auth
    }

    fn status_to_rpc(&self, status: Status) -> RPCError<TypeConfig> {
        match status.code() {
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
                unreachable(format!("node {}: {}", self.target, status.message()))
            }
            _ => RPCError::Network(network_err(format!("node {}: {status}", self.target))),
        }
    }
}

impl RaftNetworkV2<TypeConfig> for Connection {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let deadline = self.append_deadline(&option, !rpc.entries.is_empty());
        let last = rpc.entries.last().map(|e| e.index());
        let reply: AppendEntriesResponse<TypeConfig> = self
            .call(
                &rpc,
                RpcKind::AppendEntries,
                deadline,
                "append response",
                |mut c, r| async move { c.append_entries(r).await },
            )
            .await?;
        // A follower answers success only once the entries are synced in its log.
        if let (Some(last), AppendEntriesResponse::Success) = (last, &reply) {
            self.stages.mark(Stage::FollowerDurable, last);
        }
        Ok(reply)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(
            &rpc,
            RpcKind::Vote,
            option.hard_ttl(),
            "vote response",
            |mut c, r| async move { c.vote(r).await },
        )
        .await
    }

    /// A peer too old to know the pre-vote RPC (mid rolling upgrade) counts as granting it,
    /// as openraft does for a network without pre-votes: the real vote that follows is still
    /// judged by every peer, so the cluster stays live and no safety rule is relaxed.
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let granted = VoteResponse::<TypeConfig>::new(rpc.vote, None, true);
        self.call(
            &rpc,
            RpcKind::PreVote,
            option.hard_ttl(),
            "pre-vote response",
            |mut c, r| async move {
                match c.pre_vote(r).await {
                    Err(s) if s.code() == tonic::Code::Unimplemented => {
                        let payload = encode(&granted).map_err(|e| Status::internal(e.to_string()))?;
                        Ok(Response::new(pb::RaftMessage {
                            payload,
                            auth: None,
                            accepts_mac: false,
                        }))
                    }
                    other => other,
                }
            },
        )
        .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let data = snapshot.snapshot;
        let header = SnapshotHeader {
            vote,
            meta: snapshot.meta,
            data_bytes: data.data.bytes,
            data_hash: data.data.data_hash,
        };
        let header = encode(&header).map_err(network_err)?;
        let auth = self.sign(RpcKind::InstallSnapshot, &header);
        let first = pb::SnapshotChunk {
            header,
            data: Vec::new(),
            auth: Some(auth),
        };
        // The chunks are read from the store as the stream is sent, one at a time. A chunk
        // that is gone (a newer snapshot replaced this one) ends the stream short, which the
        // receiver refuses, and openraft sends the newer one.
        let target = self.target;
        let rest = futures::stream::unfold((data, 0u32), move |(data, seq)| async move {
            if seq >= data.data.chunks {
                return None;
            }
            match data.read_chunk(seq) {
                Ok(chunk) => Some((
                    pb::SnapshotChunk {
                        header: Vec::new(),
                        data: chunk,
                        auth: None,
                    },
                    (data, seq + 1),
                )),
                Err(e) => {
                    warn!(target_node = target, error = %e, "snapshot stream cut short");
                    None
                }
            }
        });
        let mut client = self
            .client()
            .map_err(|_| network_err(format!("node {} unreachable", self.target)))?;
        let mut req = Request::new(futures::StreamExt::chain(futures::stream::iter([first]), rest));
        // A snapshot may take long to ship; give it a generous bound rather than the
        // per-append one.
        req.set_timeout(option.hard_ttl().max(Duration::from_secs(60)));
        let reply = client
            .install_snapshot(req)
            .await
            .map_err(|s| network_err(format!("node {}: {s}", self.target)))?;
        decode("snapshot response", &reply.into_inner().payload)
            .map_err(network_err)
            .map_err(Into::into)
    }
}

/// The generated server type (madsim's takes an interceptor type parameter).
#[cfg(not(madsim))]
pub type RaftServer = pb::raft_server::RaftServer<RaftService>;
#[cfg(madsim)]
pub type RaftServer = pb::raft_server::RaftServer<RaftService, tonic::codegen::IdentityInterceptor>;

/// What the first chunk of a snapshot stream declares: the Raft vote and snapshot metadata,
/// and the size and blake3 hash of the data that follows, all covered by the sender's
/// signature. The receiver stops reading past `data_bytes` and checks the hash at the end.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct SnapshotHeader {
    pub vote: Vote,
    pub meta: SnapshotMeta,
    pub data_bytes: u64,
    pub data_hash: [u8; 32],
}

/// The server side of the internal Raft service.
pub struct RaftService {
    raft: Raft,
    node_id: u64,
    keys: ClusterKeys,
    snapshots: Arc<Snapshots>,
    refused: Arc<crate::refusals::PeerRefusals>,
}

impl RaftService {
    /// The service for node `node_id`, which trusts peers by its `store`'s chain and `raft`'s
    /// membership; `refused` counts requests it turns away (exported as a metric).
    pub(crate) fn new(
        raft: Raft,
        node_id: u64,
        store: Arc<dyn Store>,
        keys: Arc<KeyRing>,
        snapshots: Arc<Snapshots>,
        refused: Arc<crate::refusals::PeerRefusals>,
    ) -> RaftService {
        RaftService {
            keys: ClusterKeys {
                me: node_id,
                store,
                raft: raft.clone(),
                first_contact: Default::default(),
                verifiers: Default::default(),
                keys,
                pair_keys: Default::default(),
            },
            raft,
            node_id,
            snapshots,
            refused,
        }
    }

    pub fn into_server(self) -> RaftServer {
        pb::raft_server::RaftServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Checks who sent a request before anything in it is decoded or reaches Raft.
    fn authenticate(
        &self,
        auth: Option<&pb::PeerAuth>,
        kind: RpcKind,
        payload: &[u8],
    ) -> Result<u64, Status> {
        if engram_core::planted::active(engram_core::planted::PlantedBug::AcceptUnauthenticatedPeer) {
            return Ok(auth.map_or(0, |a| a.from_node));
        }
        match peer_auth::verify(auth, kind, self.node_id, payload, &self.keys) {
            Ok((from, proof)) => {
                self.refused.accepted(proof);
                Ok(from)
            }
            Err(e) => {
                self.refused.refused(kind, &e);
                Err(Status::unauthenticated(e.to_string()))
            }
        }
    }

    /// A unary Raft request's payload, decoded only once its sender is authenticated.
    fn open<T: serde::de::DeserializeOwned>(
        &self,
        request: Request<pb::RaftMessage>,
        kind: RpcKind,
        what: &str,
    ) -> Result<T, Status> {
        let message = request.into_inner();
        self.authenticate(message.auth.as_ref(), kind, &message.payload)?;
        decode(what, &message.payload).map_err(bad_payload)
    }
}

fn bad_payload(e: std::io::Error) -> Status {
    Status::invalid_argument(format!("malformed raft message: {e}"))
}

fn reply<T: serde::Serialize>(value: &T) -> Result<Response<pb::RaftMessage>, Status> {
    let payload = encode(value).map_err(|e| Status::internal(format!("encoding raft reply: {e}")))?;
    Ok(Response::new(pb::RaftMessage {
        payload,
        auth: None,
        // Every reply says so: the sender tags its next requests instead of signing them.
        accepts_mac: true,
    }))
}

fn raft_unavailable(e: impl ToString) -> Status {
    Status::unavailable(e.to_string())
}

#[tonic::async_trait]
impl pb::raft_server::Raft for RaftService {
    async fn append_entries(
        &self,
        request: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        let rpc: AppendEntriesRequest<TypeConfig> =
            self.open(request, RpcKind::AppendEntries, "append request")?;
        reply(&self.raft.append_entries(rpc).await.map_err(raft_unavailable)?)
    }

    async fn vote(&self, request: Request<pb::RaftMessage>) -> Result<Response<pb::RaftMessage>, Status> {
        let rpc: VoteRequest<TypeConfig> = self.open(request, RpcKind::Vote, "vote request")?;
        reply(&self.raft.vote(rpc).await.map_err(raft_unavailable)?)
    }

    async fn pre_vote(&self, request: Request<pb::RaftMessage>) -> Result<Response<pb::RaftMessage>, Status> {
        let rpc: VoteRequest<TypeConfig> = self.open(request, RpcKind::PreVote, "pre-vote request")?;
        reply(&self.raft.pre_vote(rpc).await.map_err(raft_unavailable)?)
    }

    /// The header must come first and be signed by a member; the data may not exceed the size
    /// it declares and must hash to what it declares, so nobody can make a node buffer
    /// without bound or install what no member sent.
    async fn install_snapshot(
        &self,
        request: Request<Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        let mut stream = request.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
        if first.header.is_empty() {
            return Err(Status::invalid_argument(
                "snapshot stream must start with its header chunk",
            ));
        }
        self.authenticate(first.auth.as_ref(), RpcKind::InstallSnapshot, &first.header)?;
        let header: SnapshotHeader = decode("snapshot header", &first.header).map_err(bad_payload)?;
        let refused = |e: std::io::Error| Status::invalid_argument(format!("snapshot refused: {e}"));
        // Each piece is stored and its records framed as it arrives: the node holds one chunk
        // of the snapshot, whatever its size. Dropped on any error, the pieces are deleted.
        let mut receiving = self.snapshots.receive(header.data_bytes).map_err(refused)?;
        receiving.push(&first.data).map_err(refused)?;
        while let Some(chunk) = stream.message().await? {
            if !chunk.header.is_empty() || chunk.auth.is_some() {
                return Err(Status::invalid_argument(
                    "snapshot stream carries a second header",
                ));
            }
            receiving.push(&chunk.data).map_err(refused)?;
        }
        let data = receiving.finish(&header.data_hash).map_err(refused)?;
        let resp = self
            .raft
            .install_full_snapshot(
                header.vote,
                Snapshot {
                    meta: header.meta,
                    snapshot: data,
                },
            )
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        reply(&resp)
    }
}

#[cfg(test)]
mod tests {
    use super::TagState;

    #[test]
    fn a_connection_tags_once_told_and_signs_for_good_once_a_tag_is_refused() {
        let tags = TagState::default();
        assert!(!tags.tagging(), "the first request is signed");
        tags.replied(false);
        assert!(!tags.tagging(), "an older build never says it accepts tags");
        tags.replied(true);
        assert!(tags.tagging());
        tags.refused();
        assert!(!tags.tagging());
        // The target's later replies still say it accepts tags: they must not turn tagging
        // back on, or every other request would be refused.
        tags.replied(true);
        assert!(!tags.tagging());
    }
}
