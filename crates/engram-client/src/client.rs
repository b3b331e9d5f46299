use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use engram_access::AgentKey;
use engram_proto::pb::access_client::AccessClient;
use engram_proto::pb::audit_client::AuditClient;
use engram_proto::pb::cluster_client::ClusterClient;
use engram_proto::pb::memory_client::MemoryClient;
use engram_proto::{methods, pb};
use engram_types::{
    Attribute, AttributeDef, BranchName, EntityId, Namespace, Provenance, RedactRequest, TxRequest, Value,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::{Response, Status};

use crate::{ClientError, Idempotency, RetryPolicy, parse_endpoint};

/// Largest response accepted. Reads of big entities and histories can exceed tonic's 4 MiB
/// default; the server bounds what it sends by its own limits.
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// The endpoint of one node address as given (`host:port` or a URL), with the timeouts and TLS
/// of `config`: what a [`Client`] dials. For callers that speak another gRPC service to a node
/// (the standard health check), so that they connect exactly as the client does.
pub fn node_endpoint(raw: &str, config: &ClientConfig) -> Result<Endpoint, ClientError> {
    let mut uri = parse_endpoint(raw)?;
    if config.tls.is_some() {
        uri = uri.replacen("http://", "https://", 1);
    }
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|e| ClientError::Endpoint {
            endpoint: raw.to_string(),
            reason: e.to_string(),
        })?
        .connect_timeout(config.connect_timeout)
        .timeout(config.request_timeout)
        .tcp_nodelay(true);
    let endpoint = match config.keepalive {
        Some(keepalive) => endpoint
            .http2_keep_alive_interval(keepalive.interval)
            .keep_alive_timeout(keepalive.timeout)
            .keep_alive_while_idle(false),
        None => endpoint,
    };
    #[cfg(not(madsim))]
    let endpoint = match &config.tls {
        None => endpoint,
        Some(tls) => {
            use tonic::transport::{Certificate, ClientTlsConfig, Identity};
            let mut tls_config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
            if let Some((cert, key)) = &tls.identity {
                tls_config = tls_config.identity(Identity::from_pem(cert, key));
            }
            endpoint
                .tls_config(tls_config)
                .map_err(|e| ClientError::Endpoint {
                    endpoint: raw.to_string(),
                    reason: format!("TLS: {e}"),
                })?
        }
    };
    Ok(endpoint)
}

/// Timeouts, retry policy and TLS of a [`Client`].
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Time allowed to establish a TCP + HTTP/2 connection to one endpoint.
    pub connect_timeout: Duration,
    /// Time allowed for one attempt of one call (not for a whole audit stream).
    pub request_timeout: Duration,
    /// HTTP/2 pings while calls are in flight (`None`: none).
    pub keepalive: Option<Keepalive>,
    pub retry: RetryPolicy,
    /// Connect over TLS: `None` is plaintext.
    pub tls: Option<Arc<ClientTls>>,
    /// Sign every request as this agent (required by clusters in enforced mode).
    pub agent: Option<Arc<AgentKey>>,
    /// Node keys trusted to sign checkpoints. With any, a proven read starts from a checkpoint
    /// one of them signed ([`Client::trust_keys`]) instead of verifying the whole chain
    /// ([`Client::trust_chain`], which needs the `audit` grant).
    pub trust_keys: Vec<engram_audit::PublicKey>,
}

/// HTTP/2 pings on a connection while it carries calls. A node that stops answering (a frozen
/// process, a cut network) fails the calls in flight to it after `interval + timeout`, not
/// after the whole request timeout, and a retryable call moves to the next endpoint at once:
/// that is the write pause a client sees when the node it talks to stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Time between pings.
    pub interval: Duration,
    /// Time a ping may wait for its answer before the connection is closed.
    pub timeout: Duration,
}

impl Default for Keepalive {
    /// 1 s and 1 s: a stopped node is noticed within 2 s, not after the 10 s request timeout.
    /// Not shorter by default: a node too busy to answer a ping in time has its connection
    /// closed, and a call in flight on it without an idempotency key then fails although the
    /// node was live. A client whose writes all carry keys can afford [`Keepalive::fast`].
    fn default() -> Keepalive {
        Keepalive {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        }
    }
}

impl Keepalive {
    /// 500 ms and 500 ms: a stopped node is noticed within a second. For clients whose writes
    /// are all retryable (they carry idempotency keys), where a needless reconnection costs a
    /// retry that returns the first receipt.
    pub fn fast() -> Keepalive {
        Keepalive {
            interval: Duration::from_millis(500),
            timeout: Duration::from_millis(500),
        }
    }
}

/// TLS settings of a client, as PEM: the CA that signed the servers' certificates, and the
/// client's own certificate and key when the servers require one (mutual TLS).
#[derive(Clone, Debug)]
pub struct ClientTls {
    pub ca_pem: Vec<u8>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            keepalive: Some(Keepalive::default()),
            retry: RetryPolicy::default(),
            tls: None,
            agent: None,
            trust_keys: Vec::new(),
        }
    }
}

/// Read consistency, as in the API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Consistency {
    /// Confirmed with a quorum by the leader: sees every write acknowledged before the call.
    #[default]
    Linearizable,
    /// The answering node's applied state, possibly behind; never leaves that node.
    Stale,
}

impl Consistency {
    pub(crate) fn to_pb(self) -> i32 {
        match self {
            Consistency::Linearizable => pb::ReadConsistency::Linearizable as i32,
            Consistency::Stale => pb::ReadConsistency::Stale as i32,
        }
    }
}

/// Options of [`Client::get`].
#[derive(Clone, Debug, Default)]
pub struct GetOptions {
    /// Read the entity as of this transaction (inclusive).
    pub as_of_tx: Option<u64>,
    /// Read the entity as of the last transaction at or before this instant (ns since the Unix
    /// epoch, transaction time); not with `as_of_tx`.
    pub as_of_time_ns: Option<i64>,
    /// Only facts whose valid-time interval contains this instant.
    pub valid_at_ns: Option<i64>,
    pub consistency: Consistency,
    /// Read this branch (main as of its fork plus its writes) instead of main.
    pub branch: Option<BranchName>,
    /// How to pick among disagreeing claims (default: the latest).
    pub rule: pb::Resolution,
    /// Ignore candidate claims.
    pub verified_only: bool,
    /// Read the entity even if its `:memory/expires` has passed (only reads of the current
    /// state leave expired entities out).
    pub include_expired: bool,
}

/// What [`Client::history`] lists.
#[derive(Clone, Debug)]
pub enum HistoryTarget {
    /// Every datom of one entity, optionally only of one attribute.
    Entity {
        entity: EntityId,
        attribute: Option<Attribute>,
    },
    /// Every datom of one attribute, across entities.
    Attribute(Attribute),
}

/// A [`Client::find`] query: the current datoms of `attribute`, optionally with `value`.
#[derive(Clone, Debug)]
pub struct FindQuery {
    pub namespace: Namespace,
    pub attribute: Attribute,
    pub value: Option<Value>,
    pub as_of_tx: Option<u64>,
    /// As of the last transaction at or before this instant (ns since the Unix epoch); not
    /// with `as_of_tx`.
    pub as_of_time_ns: Option<i64>,
    /// At most this many datoms in all, following the server's pages (0: every one); for
    /// [`Client::find_page`], the page size (0: the server's largest).
    pub limit: u32,
    pub consistency: Consistency,
    /// Search this branch instead of main.
    pub branch: Option<BranchName>,
    /// Find entities whose `:memory/expires` has passed too (only reads of the current state
    /// leave them out).
    pub include_expired: bool,
    /// Only current values a transaction after this one wrote.
    pub since_tx: Option<u64>,
    /// Only values whose valid-time interval holds this instant (ns since the Unix epoch).
    pub valid_at_ns: Option<i64>,
}

/// What [`Client::search`] asks: words and or a query vector, and optionally which facts, as
/// of when, and how far along refs.
#[derive(Clone, Debug)]
pub struct SearchQuery {
    pub namespace: Namespace,
    /// Words; may be empty when `vector` is set.
    pub text: String,
    /// A query embedding (the same model as the stored vectors): nearest neighbours among the
    /// searchable vector attributes of its dimension.
    pub vector: Option<Vec<f32>>,
    /// Ref hops from the best hits, 0 to 3; `None`: the server's default (1).
    pub hops: Option<u32>,
    /// Hits wanted, 1 to 100; 0: the server's default (10).
    pub k: u32,
    pub as_of_tx: Option<u64>,
    /// As of the last transaction at or before this instant (ns since the Unix epoch); not
    /// with `as_of_tx`.
    pub as_of_time_ns: Option<i64>,
    /// Only facts of these attributes; empty: any.
    pub attributes: Vec<Attribute>,
    /// Only facts asserted by these agents; empty: any.
    pub agents: Vec<String>,
    /// Only verified facts.
    pub verified_only: bool,
    /// Only facts whose valid time overlaps `[from, to)`.
    pub valid_between_ns: Option<(i64, i64)>,
    /// Only facts of entities of these kinds of memory (`:memory/kind`): keywords, or the
    /// agent-memory schema's short names (`preference`); empty: any.
    pub kinds: Vec<String>,
    pub consistency: Consistency,
    pub branch: Option<BranchName>,
    /// Find entities whose `:memory/expires` has passed too (only searches of the current
    /// state leave them out).
    pub include_expired: bool,
}

impl SearchQuery {
    /// The words `text` in `namespace`, ten hits, latest state, no filter.
    pub fn new(namespace: Namespace, text: impl Into<String>) -> SearchQuery {
        SearchQuery {
            namespace,
            text: text.into(),
            vector: None,
            hops: None,
            k: 0,
            as_of_tx: None,
            as_of_time_ns: None,
            attributes: Vec::new(),
            agents: Vec::new(),
            verified_only: false,
            valid_between_ns: None,
            kinds: Vec::new(),
            consistency: Consistency::default(),
            branch: None,
            include_expired: false,
        }
    }
}

struct Node {
    /// As the user wrote it, for messages.
    name: String,
    channel: Channel,
}

struct Inner {
    nodes: Vec<Node>,
    /// Index into `nodes` of the endpoint calls go to first.
    current: AtomicUsize,
    config: ClientConfig,
}

/// A handle to a cluster through one or more endpoints. Cheap to clone; clones share
/// channels and the current endpoint.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

impl Client {
    /// A client over `endpoints` (`host:port` or `http://host:port`) with the default
    /// [`ClientConfig`]. Channels connect lazily, so this succeeds while nodes are down; must be
    /// called within a Tokio runtime.
    pub async fn connect(endpoints: Vec<String>) -> Result<Client, ClientError> {
        Client::with_config(endpoints, ClientConfig::default())
    }

    /// As [`Client::connect`], with explicit timeouts and retry policy.
    pub fn with_config(endpoints: Vec<String>, config: ClientConfig) -> Result<Client, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::Endpoint {
                endpoint: String::new(),
                reason: "no endpoints given".into(),
            });
        }
        let mut nodes = Vec::with_capacity(endpoints.len());
        for raw in endpoints {
            nodes.push(Node {
                name: raw.trim().to_string(),
                channel: node_endpoint(&raw, &config)?.connect_lazy(),
            });
        }
        Ok(Client {
            inner: Arc::new(Inner {
                nodes,
                current: AtomicUsize::new(0),
                config,
            }),
        })
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> Vec<String> {
        self.inner.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// A client over the single endpoint `index` of this one, sharing its channel: for calls
    /// that must reach one particular node (stale reads, per-node status, chain verification).
    pub fn node(&self, index: usize) -> Option<Client> {
        let node = self.inner.nodes.get(index)?;
        Some(Client {
            inner: Arc::new(Inner {
                nodes: vec![Node {
                    name: node.name.clone(),
                    channel: node.channel.clone(),
                }],
                current: AtomicUsize::new(0),
                config: self.inner.config.clone(),
            }),
        })
    }

    pub fn config(&self) -> ClientConfig {
        self.inner.config.clone()
    }

    /// The first endpoint as given and its channel: for a call made outside the retry loop (the
    /// health check).
    #[cfg(not(madsim))]
    pub(crate) fn first_channel(&self) -> (String, Channel) {
        // `with_config` refuses an empty list, and `node` keeps one endpoint.
        let node = &self.inner.nodes[0];
        (node.name.clone(), node.channel.clone())
    }

    // ------------------------------------------------------------------ Memory

    /// Submits a transaction.
    ///
    /// Retried on transient failures (rotating endpoints) **only if** `tx.idempotency_key` is
    /// set: the server answers a repeated key in the same namespace with the first receipt, so
    /// the retry cannot apply twice. Without a key a transient failure is returned as is, since
    /// the transaction may or may not have been applied.
    ///
    /// A client that signs as an agent commits to the values instead of signing them: it draws
    /// a salt per op and per precondition and signs each value's salted commitment
    /// (`value_salts`, the request's committed form), so once a redaction takes a value and its
    /// salt, nothing the chain keeps of the signed request lets anyone test a guess of it.
    pub async fn transact(&self, tx: &TxRequest) -> Result<pb::TransactResponse, ClientError> {
        let mut req = pb::TransactRequest::from(tx);
        if self.inner.config.agent.is_some() && !tx.ops.is_empty() {
            req.value_salts = value_salts(tx.ops.len() + tx.preconditions.len())?;
        }
        self.transact_raw(req).await
    }

    /// Submits a wire-level request as given, without client-side validation: for tools and
    /// tests that need to send what [`TxRequest`] cannot express. Same retry rule as
    /// [`Client::transact`].
    pub async fn transact_raw(&self, req: pb::TransactRequest) -> Result<pb::TransactResponse, ClientError> {
        let idempotency = if req.idempotency_key.is_empty() {
            Idempotency::Unsafe
        } else {
            Idempotency::Safe
        };
        self.call(idempotency, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).transact(s.sign(methods::TRANSACT, req)).await }
        })
        .await
    }

    /// The current facts of `entity` (one datom per attribute).
    pub async fn get(
        &self,
        namespace: &Namespace,
        entity: EntityId,
        opts: GetOptions,
    ) -> Result<pb::GetResponse, ClientError> {
        self.get_raw(get_request(namespace, entity, opts, false))
            .await
            .map(|(_, r)| r)
    }

    pub(crate) async fn get_raw(
        &self,
        req: pb::GetRequest,
    ) -> Result<(String, pb::GetResponse), ClientError> {
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).get(s.sign(methods::GET, req)).await }
        })
        .await
    }

    pub(crate) async fn history_raw(
        &self,
        req: pb::HistoryRequest,
    ) -> Result<(String, pb::HistoryResponse), ClientError> {
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).history(s.sign(methods::HISTORY, req)).await }
        })
        .await
    }

    /// Facts found by their words, ranked (BM25, then recency and the priors fused); each hit
    /// names the signals that ranked it. See `Memory.Search`.
    pub async fn search(&self, query: &SearchQuery) -> Result<pb::SearchResponse, ClientError> {
        self.search_raw(search_request(query)).await.map(|(_, resp)| resp)
    }

    /// `Memory.Search` as given, with the endpoint that answered.
    pub(crate) async fn search_raw(
        &self,
        req: pb::SearchRequest,
    ) -> Result<(String, pb::SearchResponse), ClientError> {
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).search(s.sign(methods::SEARCH, req)).await }
        })
        .await
    }

    /// A branch against main: its own writes (`asserted`, `retracted`) and what main recorded
    /// since the fork on the same (entity, attribute) pairs (`main_changed`).
    pub async fn branch_diff(
        &self,
        namespace: &Namespace,
        branch: &BranchName,
        entity: Option<EntityId>,
        limit: u32,
        consistency: Consistency,
    ) -> Result<pb::DiffResponse, ClientError> {
        let req = pb::DiffRequest {
            namespace: namespace.to_string(),
            entity: entity.map(|e| e.0),
            limit,
            consistency: consistency.to_pb(),
            branch: branch.to_string(),
            ..Default::default()
        };
        self.call(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).diff(s.sign(methods::DIFF, req)).await }
        })
        .await
    }

    /// Forgets the values `req` names on every replica (`Memory.Redact`), or with `dry_run`
    /// lists what would go and changes nothing. A redaction is not retried (a retry after it
    /// applied would answer `NOT_FOUND`: nothing left to redact); a dry run is.
    pub async fn redact(
        &self,
        req: &RedactRequest,
        dry_run: bool,
    ) -> Result<pb::RedactResponse, ClientError> {
        let msg = pb::RedactRequest {
            namespace: req.namespace.to_string(),
            entity: req.entity.0,
            attribute: req
                .attribute
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            reason: req.reason.clone(),
            provenance: Some((&req.provenance).into()),
            dry_run,
            matching: None,
        };
        self.send_redact(msg).await
    }

    /// Sends a redaction (retried on transient failures only as a dry run: a redaction
    /// retried after it applied would be answered "nothing to redact").
    async fn send_redact(&self, msg: pb::RedactRequest) -> Result<pb::RedactResponse, ClientError> {
        let idempotency = if msg.dry_run {
            Idempotency::Safe
        } else {
            Idempotency::Unsafe
        };
        self.call(idempotency, move |ch, s| {
            let msg = msg.clone();
            async move { memory(ch).redact(s.sign(methods::REDACT, msg)).await }
        })
        .await
    }

    /// Forgets the values of every datom of a namespace that `req`'s predicate matches
    /// (`docs/FORGETTING.md`, "Redaction by predicate"), or with `dry_run` counts and lists
    /// what would go. The answer counts every datom taken and lists the first 1,000.
    pub async fn redact_where(
        &self,
        req: &engram_types::RedactWhere,
        dry_run: bool,
    ) -> Result<pb::RedactResponse, ClientError> {
        let p = &req.predicate;
        let msg = pb::RedactRequest {
            namespace: req.namespace.to_string(),
            reason: req.reason.clone(),
            provenance: Some((&req.provenance).into()),
            dry_run,
            matching: Some(pb::RedactPredicate {
                attribute: p.attribute.as_ref().map(ToString::to_string).unwrap_or_default(),
                agent: p.agent.clone().unwrap_or_default(),
                value: p.value.as_ref().map(Into::into),
                before_tx: p.before_tx.map_or(0, |tx| tx.0),
                written_before_ns: p.written_before_ns,
                valid_from_before_ns: p.valid_from_before_ns,
            }),
            ..pb::RedactRequest::default()
        };
        self.send_redact(msg).await
    }

    /// Declares or migrates attributes as one transaction (retried on transient failures only
    /// with an idempotency key, like [`Client::transact`]).
    pub async fn apply_schema(
        &self,
        namespace: &Namespace,
        attributes: &[AttributeDef],
        provenance: &Provenance,
        idempotency_key: Option<&str>,
    ) -> Result<pb::TransactResponse, ClientError> {
        let req = pb::ApplySchemaRequest {
            namespace: namespace.to_string(),
            attributes: attributes.iter().map(Into::into).collect(),
            provenance: Some(provenance.into()),
            idempotency_key: idempotency_key.unwrap_or_default().to_string(),
        };
        let idempotency = if req.idempotency_key.is_empty() {
            Idempotency::Unsafe
        } else {
            Idempotency::Safe
        };
        self.call(idempotency, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).apply_schema(s.sign(methods::APPLY_SCHEMA, req)).await }
        })
        .await
    }

    /// The namespace's schema, now or as of a transaction.
    pub async fn schema(
        &self,
        namespace: &Namespace,
        as_of_tx: Option<u64>,
        consistency: Consistency,
    ) -> Result<pb::GetSchemaResponse, ClientError> {
        let req = pb::GetSchemaRequest {
            namespace: namespace.to_string(),
            as_of_tx,
            consistency: consistency.to_pb(),
        };
        self.call(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).get_schema(s.sign(methods::GET_SCHEMA, req)).await }
        })
        .await
    }

    /// Forks a branch from main as of `from_tx` (`None`: the head).
    pub async fn create_branch(
        &self,
        namespace: &Namespace,
        name: &BranchName,
        from_tx: Option<u64>,
        provenance: &Provenance,
    ) -> Result<pb::TransactResponse, ClientError> {
        let req = pb::CreateBranchRequest {
            namespace: namespace.to_string(),
            name: name.to_string(),
            from_tx,
            provenance: Some(provenance.into()),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move {
                memory(ch)
                    .create_branch(s.sign(methods::CREATE_BRANCH, req))
                    .await
            }
        })
        .await
    }

    /// Merges a branch into main as one transaction, or abandons it.
    pub async fn close_branch(
        &self,
        namespace: &Namespace,
        name: &BranchName,
        merge: bool,
        provenance: &Provenance,
    ) -> Result<pb::TransactResponse, ClientError> {
        let req = pb::BranchRequest {
            namespace: namespace.to_string(),
            name: name.to_string(),
            provenance: Some(provenance.into()),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move {
                if merge {
                    memory(ch).merge_branch(s.sign(methods::MERGE_BRANCH, req)).await
                } else {
                    memory(ch)
                        .abandon_branch(s.sign(methods::ABANDON_BRANCH, req))
                        .await
                }
            }
        })
        .await
    }

    // ------------------------------------------------------------------ Cluster

    /// The answering node's view of the cluster. With several endpoints, that is whichever node
    /// answers first; use [`Client::node`] to ask a particular one.
    pub async fn status(&self) -> Result<pb::StatusResponse, ClientError> {
        self.call(Idempotency::Safe, |ch, s| async move {
            cluster(ch)
                .status(s.sign(methods::STATUS, pb::StatusRequest {}))
                .await
        })
        .await
    }

    /// Initialises the cluster with `members` as `(node id, host:port)`; the server fetches
    /// their keys. Open mode. Not retried: the caller checks [`Client::status`] before trying
    /// again.
    pub async fn init(&self, members: &[(u64, String)]) -> Result<pb::InitResponse, ClientError> {
        self.init_with(members, None).await
    }

    /// [`Client::init`] in enforced mode when `admin` names the first administrator (a name
    /// and an Ed25519 public key), open mode otherwise.
    pub async fn init_with(
        &self,
        members: &[(u64, String)],
        admin: Option<(&str, [u8; 32])>,
    ) -> Result<pb::InitResponse, ClientError> {
        let (security, admin, admin_public_key) = match admin {
            Some((name, key)) => ("enforced".to_string(), name.to_string(), key.to_vec()),
            None => ("open".to_string(), String::new(), Vec::new()),
        };
        let req = pb::InitRequest {
            security,
            admin,
            admin_public_key,
            members: members
                .iter()
                .map(|(id, addr)| pb::Member {
                    id: *id,
                    addr: addr.clone(),
                    public_key: Vec::new(),
                    voter: true,
                })
                .collect(),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move { cluster(ch).init(s.sign(methods::INIT, req)).await }
        })
        .await
    }

    /// Adds a node (as a learner that is promoted once caught up, unless `learner_only`).
    /// Not retried.
    pub async fn add_node(
        &self,
        id: u64,
        addr: &str,
        learner_only: bool,
    ) -> Result<pb::MembershipResponse, ClientError> {
        let req = pb::AddNodeRequest {
            id,
            addr: addr.to_string(),
            learner_only,
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move { cluster(ch).add_node(s.sign(methods::ADD_NODE, req)).await }
        })
        .await
    }

    /// Revokes a node's key (its current one unless `key_id` names another): a key-change
    /// entry authorised by the leader. Not retried. Returns the entry's audit index.
    pub async fn revoke_key(&self, node_id: u64, key_id: Option<[u8; 8]>) -> Result<u64, ClientError> {
        let req = pb::RevokeKeyRequest {
            node_id,
            key_id: key_id.map(|k| k.to_vec()).unwrap_or_default(),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move { cluster(ch).revoke_key(s.sign(methods::REVOKE_KEY, req)).await }
        })
        .await
        .map(|r| r.audit_index)
    }

    /// Rotates the key of node `node_id`, which must be the node this client talks to (it
    /// generates and keeps the new key). Not retried. Returns the key-change entry's index.
    pub async fn rotate_key(&self, node_id: u64) -> Result<u64, ClientError> {
        self.call(Idempotency::Unsafe, move |ch, s| async move {
            cluster(ch)
                .rotate_key(s.sign(methods::ROTATE_KEY, pb::RotateKeyRequest { node_id }))
                .await
        })
        .await
        .map(|r| r.audit_index)
    }

    /// Removes a node from the membership. Not retried.
    pub async fn remove_node(&self, id: u64) -> Result<pb::MembershipResponse, ClientError> {
        self.call(Idempotency::Unsafe, move |ch, s| async move {
            cluster(ch)
                .remove_node(s.sign(methods::REMOVE_NODE, pb::RemoveNodeRequest { id }))
                .await
        })
        .await
    }

    // ------------------------------------------------------------------ Access

    /// Registers an agent and its public key. Not retried (a retry after an unknown outcome
    /// answers that the agent exists).
    pub async fn add_agent(
        &self,
        name: &str,
        public_key: [u8; 32],
    ) -> Result<pb::PolicyResponse, ClientError> {
        let req = pb::AddAgentRequest {
            name: name.to_string(),
            public_key: public_key.to_vec(),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move { access(ch).add_agent(s.sign(methods::ADD_AGENT, req)).await }
        })
        .await
    }

    /// Replaces an agent's key (an agent may rotate its own). Not retried.
    pub async fn rotate_agent_key(
        &self,
        name: &str,
        public_key: [u8; 32],
    ) -> Result<pb::PolicyResponse, ClientError> {
        let req = pb::RotateAgentKeyRequest {
            name: name.to_string(),
            public_key: public_key.to_vec(),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move {
                access(ch)
                    .rotate_agent_key(s.sign(methods::ROTATE_AGENT_KEY, req))
                    .await
            }
        })
        .await
    }

    /// Revokes every key of an agent. Not retried.
    pub async fn revoke_agent(&self, name: &str) -> Result<pb::PolicyResponse, ClientError> {
        let req = pb::RevokeAgentRequest {
            name: name.to_string(),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move { access(ch).revoke_agent(s.sign(methods::REVOKE_AGENT, req)).await }
        })
        .await
    }

    /// Grants (or, with `revoke`, revokes) `action` on namespaces under `prefix` to
    /// `principal`, on every attribute. Not retried.
    pub async fn grant(
        &self,
        principal: &str,
        action: &str,
        prefix: &str,
        revoke: bool,
    ) -> Result<pb::PolicyResponse, ClientError> {
        self.grant_on(principal, action, prefix, "", revoke).await
    }

    /// [`Client::grant`] limited to `attribute` (`:hr/salary`, or `:hr/*`; empty: every
    /// attribute). Not retried.
    pub async fn grant_on(
        &self,
        principal: &str,
        action: &str,
        prefix: &str,
        attribute: &str,
        revoke: bool,
    ) -> Result<pb::PolicyResponse, ClientError> {
        let req = pb::GrantRequest {
            principal: principal.to_string(),
            action: action.to_string(),
            prefix: prefix.to_string(),
            attribute: attribute.to_string(),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move {
                if revoke {
                    access(ch).revoke_grant(s.sign(methods::REVOKE_GRANT, req)).await
                } else {
                    access(ch).grant(s.sign(methods::GRANT, req)).await
                }
            }
        })
        .await
    }

    /// Assigns `role` (its name, without `role:`) to `agent`, or with `unassign` takes it
    /// away. Not retried.
    pub async fn assign_role(
        &self,
        agent: &str,
        role: &str,
        unassign: bool,
    ) -> Result<pb::PolicyResponse, ClientError> {
        let req = pb::RoleRequest {
            agent: agent.to_string(),
            role: role.to_string(),
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move {
                if unassign {
                    access(ch)
                        .unassign_role(s.sign(methods::UNASSIGN_ROLE, req))
                        .await
                } else {
                    access(ch).assign_role(s.sign(methods::ASSIGN_ROLE, req)).await
                }
            }
        })
        .await
    }

    /// Who the cluster takes this client for, its mode, and the grants that apply.
    pub async fn who_am_i(&self) -> Result<pb::WhoAmIResponse, ClientError> {
        self.call(Idempotency::Safe, move |ch, s| async move {
            access(ch)
                .who_am_i(s.sign(methods::WHO_AM_I, pb::WhoAmIRequest {}))
                .await
        })
        .await
    }

    /// Switches the access log of every node on (`enabled`) or off for the reads under
    /// `prefix` (`*`: everything): a policy change, recorded in the audit chain.
    pub async fn set_access_log(
        &self,
        prefix: &str,
        enabled: bool,
    ) -> Result<pb::PolicyResponse, ClientError> {
        let req = pb::AccessLogRequest {
            prefix: prefix.to_string(),
            enabled,
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move {
                access(ch)
                    .set_access_log(s.sign(methods::SET_ACCESS_LOG, req))
                    .await
            }
        })
        .await
    }

    /// Keeps what is written to `namespace` (only to `attribute`, when not empty) for
    /// `keep_ms`, after which the leader redacts it; `keep_ms` 0 ends the policy.
    pub async fn set_retention(
        &self,
        namespace: &str,
        attribute: &str,
        keep_ms: u64,
    ) -> Result<pb::PolicyResponse, ClientError> {
        self.send_retention(pb::RetentionRequest {
            namespace: namespace.to_string(),
            attribute: attribute.to_string(),
            keep_ms,
            keep_versions: None,
        })
        .await
    }

    /// Keeps, of each slot (entity, attribute) of `namespace` (only of `attribute`, when not
    /// empty), what the last `keep_versions` transactions that wrote it hold, and its live
    /// claims; the leader redacts older datoms. `keep_versions` 0 ends the policy.
    pub async fn set_retention_versions(
        &self,
        namespace: &str,
        attribute: &str,
        keep_versions: u32,
    ) -> Result<pb::PolicyResponse, ClientError> {
        self.send_retention(pb::RetentionRequest {
            namespace: namespace.to_string(),
            attribute: attribute.to_string(),
            keep_ms: 0,
            keep_versions: Some(keep_versions),
        })
        .await
    }

    async fn send_retention(&self, req: pb::RetentionRequest) -> Result<pb::PolicyResponse, ClientError> {
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move {
                access(ch)
                    .set_retention(s.sign(methods::SET_RETENTION, req))
                    .await
            }
        })
        .await
    }

    /// Opens a session on `namespace` for `ttl_ms` from now (refused if one is open there):
    /// while it is open the namespace is volatile, and when it ends, or lapses for want of a
    /// renewal, the leader forgets everything written there before the end.
    pub async fn open_session(
        &self,
        namespace: &str,
        ttl_ms: u64,
    ) -> Result<pb::PolicyResponse, ClientError> {
        self.set_session(namespace, ttl_ms.max(1), false).await
    }

    /// Renews the session open on `namespace`: it lapses `ttl_ms` from now (refused if none
    /// is open: it lapsed or was ended, and what it held is forgotten).
    pub async fn renew_session(
        &self,
        namespace: &str,
        ttl_ms: u64,
    ) -> Result<pb::PolicyResponse, ClientError> {
        self.set_session(namespace, ttl_ms.max(1), true).await
    }

    async fn set_session(
        &self,
        namespace: &str,
        ttl_ms: u64,
        renew: bool,
    ) -> Result<pb::PolicyResponse, ClientError> {
        let req = pb::SessionRequest {
            namespace: namespace.to_string(),
            ttl_ms,
            renew,
        };
        self.call(Idempotency::Unsafe, move |ch, s| {
            let req = req.clone();
            async move { access(ch).set_session(s.sign(methods::SET_SESSION, req)).await }
        })
        .await
    }

    /// Ends the session on `namespace`: the leader forgets what was written there before now.
    pub async fn end_session(&self, namespace: &str) -> Result<pb::PolicyResponse, ClientError> {
        self.set_session(namespace, 0, false).await
    }

    /// One page of the answering node's access log (each node logs the reads it served; use
    /// [`Client::node`] to ask a given one).
    pub async fn access_events(
        &self,
        req: pb::AccessEventsRequest,
    ) -> Result<pb::AccessEventsResponse, ClientError> {
        self.call(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { access(ch).events(s.sign(methods::ACCESS_EVENTS, req)).await }
        })
        .await
    }

    // ------------------------------------------------------------------ Audit

    /// The tip of the answering node's audit chain.
    pub async fn head(&self) -> Result<pb::HeadResponse, ClientError> {
        self.call(Idempotency::Safe, |ch, s| async move {
            audit(ch).head(s.sign(methods::HEAD, pb::HeadRequest {})).await
        })
        .await
    }

    /// Streams audit entries from `from_index` (1-based; 0 means 1), at most `limit` of them
    /// (0: up to the head). Opening the stream is retried like any read; an error in the middle
    /// of the stream ends it with that error (resume from the next index if needed). The
    /// request timeout bounds only the opening: the stream itself may take as long as the chain
    /// needs, so a caller that must not hang bounds the wait for each item.
    pub async fn audit_entries(
        &self,
        from_index: u64,
        limit: u64,
    ) -> Result<BoxStream<'static, Result<pb::AuditEntry, ClientError>>, ClientError> {
        let (endpoint, stream) = self
            .call_with_endpoint(Idempotency::Safe, move |ch, s| async move {
                audit(ch)
                    .entries(s.sign(methods::ENTRIES, pb::EntriesRequest { from_index, limit }))
                    .await
            })
            .await?;
        Ok(stream
            .map_err(move |status| ClientError::rpc(&endpoint, &status, 1))
            .boxed())
    }

    /// The answering node's latest checkpoint (signed by its policy), or with `at_head` one of
    /// its current head, signed on request.
    pub async fn checkpoint(&self, at_head: bool) -> Result<pb::SignedCheckpoint, ClientError> {
        self.checkpoint_from(at_head).await.map(|(_, c)| c)
    }

    pub(crate) async fn checkpoint_from(
        &self,
        at_head: bool,
    ) -> Result<(String, pb::SignedCheckpoint), ClientError> {
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| async move {
            audit(ch)
                .checkpoint(s.sign(methods::CHECKPOINT, pb::CheckpointRequest { at_head }))
                .await
        })
        .await
    }

    /// The inclusion proof of audit entry `index` in the tree of `tree_size` entries (0: the
    /// node's head).
    pub async fn inclusion_proof(
        &self,
        index: u64,
        tree_size: u64,
    ) -> Result<pb::InclusionProofResponse, ClientError> {
        self.call(Idempotency::Safe, move |ch, s| async move {
            audit(ch)
                .inclusion_proof(s.sign(
                    methods::INCLUSION_PROOF,
                    pb::InclusionProofRequest { index, tree_size },
                ))
                .await
        })
        .await
    }

    /// The consistency proof between the trees of `old_size` and `new_size` entries (0: the
    /// node's head).
    pub async fn consistency_proof(
        &self,
        old_size: u64,
        new_size: u64,
    ) -> Result<pb::ConsistencyProofResponse, ClientError> {
        self.call(Idempotency::Safe, move |ch, s| async move {
            audit(ch)
                .consistency_proof(s.sign(
                    methods::CONSISTENCY_PROOF,
                    pb::ConsistencyProofRequest { old_size, new_size },
                ))
                .await
        })
        .await
    }

    /// Streams the answering node's audit export (engram-verify's file format) as byte chunks.
    /// Opening is retried like any read; a failure mid-stream ends it with that error (start
    /// again: an export is cheap to restart and must not be spliced from two streams).
    pub async fn export(&self) -> Result<BoxStream<'static, Result<Vec<u8>, ClientError>>, ClientError> {
        let (endpoint, stream) = self
            .call_with_endpoint(Idempotency::Safe, move |ch, s| async move {
                audit(ch)
                    .export(s.sign(methods::EXPORT, pb::ExportRequest {}))
                    .await
            })
            .await?;
        Ok(byte_chunks(endpoint, stream, |chunk: pb::ExportChunk| chunk.data))
    }

    /// Streams an online, consistent backup of the answering node's state (engram-core's
    /// backup file format) as byte chunks; needs cluster-admin. Opening is retried like any
    /// read; a failure mid-stream ends it with that error, and the bytes so far are no backup
    /// (start again).
    pub async fn backup(&self) -> Result<BoxStream<'static, Result<Vec<u8>, ClientError>>, ClientError> {
        let (endpoint, stream) = self
            .call_with_endpoint(Idempotency::Safe, move |ch, s| async move {
                cluster(ch)
                    .backup(s.sign(methods::BACKUP, pb::BackupRequest {}))
                    .await
            })
            .await?;
        Ok(byte_chunks(endpoint, stream, |chunk: pb::BackupChunk| chunk.data))
    }

    /// The answering node's job log, newest first: `kind` one kind only (empty: every kind),
    /// at most `limit` jobs (0: 100). The node answers for itself (response's `node_id`).
    pub async fn list_jobs(&self, kind: &str, limit: u32) -> Result<pb::ListJobsResponse, ClientError> {
        let req = pb::ListJobsRequest {
            kind: kind.to_string(),
            limit,
        };
        self.call(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { cluster(ch).list_jobs(s.sign(methods::LIST_JOBS, req)).await }
        })
        .await
    }

    /// The answering node's metrics in the Prometheus text format, as its `/metrics` serves
    /// them. The node answers for itself (response's `node_id`).
    pub async fn metrics(&self) -> Result<pb::MetricsResponse, ClientError> {
        self.call(Idempotency::Safe, move |ch, s| async move {
            cluster(ch)
                .metrics(s.sign(methods::METRICS, pb::MetricsRequest {}))
                .await
        })
        .await
    }

    /// The answering node's whole export, read into memory: for chains small enough to hold
    /// (the demo, the chaos run, tests); stream [`Client::export`] to a file otherwise.
    pub async fn export_bytes(&self) -> Result<Vec<u8>, ClientError> {
        let mut stream = self.export().await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            bytes.extend(chunk?);
        }
        Ok(bytes)
    }

    // ------------------------------------------------------------------ plumbing

    pub(crate) async fn call<T, F, Fut>(&self, idempotency: Idempotency, f: F) -> Result<T, ClientError>
    where
        F: FnMut(Channel, Signer) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        self.call_with_endpoint(idempotency, f)
            .await
            .map(|(_, value)| value)
    }

    /// Runs `f` against the current endpoint, rotating and backing off on transient failures
    /// as the retry policy allows. Returns the answering endpoint's name with the response.
    pub(crate) async fn call_with_endpoint<T, F, Fut>(
        &self,
        idempotency: Idempotency,
        mut f: F,
    ) -> Result<(String, T), ClientError>
    where
        F: FnMut(Channel, Signer) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let inner = &*self.inner;
        let signer = Signer(inner.config.agent.clone());
        let start = Instant::now();
        let mut retry = 0u32;
        loop {
            let index = inner.current.load(Ordering::Relaxed) % inner.nodes.len();
            let node = &inner.nodes[index];
            // Each attempt is signed afresh: a retry must not look like a replay.
            match f(node.channel.clone(), signer.clone()).await {
                Ok(response) => return Ok((node.name.clone(), response.into_inner())),
                Err(status) => {
                    let Some(delay) =
                        inner
                            .config
                            .retry
                            .next_delay(&status, idempotency, retry, start.elapsed())
                    else {
                        return Err(ClientError::rpc(&node.name, &status, retry + 1));
                    };
                    tracing::debug!(endpoint = %node.name, code = ?status.code(), message = status.message(),
                        retry, "transient failure; trying the next endpoint");
                    // Rotate only if no concurrent caller already did, so that N failures seen
                    // at once by N tasks move the client one endpoint, not N.
                    let next = (index + 1) % inner.nodes.len();
                    let _ = inner
                        .current
                        .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
                    tokio::time::sleep(delay).await;
                    retry += 1;
                }
            }
        }
    }
}

/// Signs each request with the client's agent key, if it has one (see `engram_access::request`).
#[derive(Clone)]
pub(crate) struct Signer(Option<Arc<AgentKey>>);

impl Signer {
    pub(crate) fn sign<T: engram_proto::SignedBody>(&self, method: &str, message: T) -> tonic::Request<T> {
        match &self.0 {
            Some(key) => engram_proto::signed_request(key, method, message, now_ns() / 1_000_000, nonce()),
            None => tonic::Request::new(message),
        }
    }
}

/// The client's wall clock, in nanoseconds since the Unix epoch: the time a request is signed
/// at, which the server compares with its own (a replay window). A client, unlike a node's
/// state machine, may read the clock.
#[allow(clippy::disallowed_methods)]
fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// 16 random bytes; should the OS have no randomness, a hash of the time, the process and a
/// counter, which is still unique per request of this process.
fn nonce() -> [u8; 16] {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut nonce = [0u8; 16];
    if getrandom::fill(&mut nonce).is_err() {
        let mut h = blake3::Hasher::new();
        h.update(&now_ns().to_le_bytes());
        h.update(&std::process::id().to_le_bytes());
        h.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        nonce.copy_from_slice(&h.finalize().as_bytes()[..16]);
    }
    nonce
}

/// `n` salts of fresh randomness, or why there is none (never a fallback: a salt a reader
/// could reproduce would make a redacted value guessable).
fn value_salts(n: usize) -> Result<Vec<Vec<u8>>, ClientError> {
    let mut bytes = vec![0u8; n * engram_types::SALT_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| ClientError::Randomness {
        reason: e.to_string(),
    })?;
    Ok(bytes
        .chunks(engram_types::SALT_BYTES)
        .map(<[u8]>::to_vec)
        .collect())
}

pub(crate) fn memory(ch: Channel) -> MemoryClient<Channel> {
    MemoryClient::new(ch).max_decoding_message_size(MAX_RESPONSE_BYTES)
}

/// A streamed file's chunks as bytes, a failure mid-stream named by the endpoint it came from.
fn byte_chunks<T: Send + 'static>(
    endpoint: String,
    stream: tonic::Streaming<T>,
    data: fn(T) -> Vec<u8>,
) -> BoxStream<'static, Result<Vec<u8>, ClientError>> {
    stream
        .map_ok(data)
        .map_err(move |status| ClientError::rpc(&endpoint, &status, 1))
        .boxed()
}

fn cluster(ch: Channel) -> ClusterClient<Channel> {
    ClusterClient::new(ch).max_decoding_message_size(MAX_RESPONSE_BYTES)
}

pub(crate) fn access(ch: Channel) -> AccessClient<Channel> {
    AccessClient::new(ch).max_decoding_message_size(MAX_RESPONSE_BYTES)
}

fn audit(ch: Channel) -> AuditClient<Channel> {
    AuditClient::new(ch).max_decoding_message_size(MAX_RESPONSE_BYTES)
}

pub(crate) fn get_request(
    namespace: &Namespace,
    entity: EntityId,
    opts: GetOptions,
    prove: bool,
) -> pb::GetRequest {
    pb::GetRequest {
        namespace: namespace.to_string(),
        entity: entity.0,
        as_of_tx: opts.as_of_tx,
        as_of_time_ns: opts.as_of_time_ns,
        valid_at_ns: opts.valid_at_ns,
        consistency: opts.consistency.to_pb(),
        prove,
        trusted_size: 0,
        branch: opts.branch.map(String::from).unwrap_or_default(),
        rule: opts.rule as i32,
        verified_only: opts.verified_only,
        include_expired: opts.include_expired,
        complete: false,
    }
}

pub(crate) fn history_request(
    namespace: &Namespace,
    target: HistoryTarget,
    limit: u32,
    consistency: Consistency,
    prove: bool,
) -> pb::HistoryRequest {
    let (target, attribute_filter) = match target {
        HistoryTarget::Entity { entity, attribute } => (
            pb::history_request::Target::Entity(entity.0),
            attribute.map(|a| a.to_string()).unwrap_or_default(),
        ),
        HistoryTarget::Attribute(a) => (
            pb::history_request::Target::Attribute(a.to_string()),
            String::new(),
        ),
    };
    pb::HistoryRequest {
        namespace: namespace.to_string(),
        target: Some(target),
        attribute_filter,
        limit,
        consistency: consistency.to_pb(),
        prove,
        trusted_size: 0,
        branch: String::new(),
        cursor: Vec::new(),
        as_of_tx: None,
        as_of_time_ns: None,
        since_tx: None,
        valid_at_ns: None,
    }
}

/// The request a [`SearchQuery`] makes (without a proof).
pub(crate) fn search_request(query: &SearchQuery) -> pb::SearchRequest {
    pb::SearchRequest {
        namespace: query.namespace.to_string(),
        text: query.text.clone(),
        k: query.k,
        as_of_tx: query.as_of_tx,
        attributes: query.attributes.iter().map(ToString::to_string).collect(),
        agents: query.agents.clone(),
        statuses: if query.verified_only {
            vec![pb::Status::Verified as i32]
        } else {
            Vec::new()
        },
        valid_from_ns: query.valid_between_ns.map(|(from, _)| from),
        valid_to_ns: query.valid_between_ns.map(|(_, to)| to),
        consistency: query.consistency.to_pb(),
        branch: query.branch.as_ref().map(ToString::to_string).unwrap_or_default(),
        prove: false,
        trusted_size: 0,
        vector: query.vector.clone().unwrap_or_default(),
        hops: query.hops,
        kinds: query.kinds.clone(),
        include_expired: query.include_expired,
        as_of_time_ns: query.as_of_time_ns,
    }
}
