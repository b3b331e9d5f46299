//! An Engram node: the gRPC services over a Raft node.
//!
//! [`run`] opens the RocksDB store in the data directory, loads (or creates) the node's
//! signing key, and calls [`serve`], which starts Raft and serves on one port: `engram.v1.Memory`, `Audit`, `Cluster`,
//! the internal `engram.v1.Raft`, `grpc.health.v1` (SERVING once the node knows a leader and
//! has applied what it committed) and server reflection, so `grpcurl` needs no proto files.
//! Writes and linearizable reads that reach a follower are forwarded to the leader; errors
//! become gRPC statuses in one place ([`error`]).
//!
//! Under `--cfg madsim` (the simulation) only [`serve`] exists: the simulation passes its
//! in-memory store and key, and health, reflection and OTLP are left out (they are real-tonic
//! services; madsim's transport carries madsim-tonic services only).
//!
//! Must not depend on: `rocksdb` directly (only through `engram-storage-rocks`), or the CLI.

mod access_log;
mod config;
mod divergence;
pub mod error;
#[cfg(not(madsim))]
pub mod metrics;
#[cfg(not(madsim))]
pub mod node_key;
mod pacing;
#[cfg(not(madsim))]
pub mod restore_dir;
mod retention;
mod services;
#[cfg(not(madsim))]
mod startup;
#[cfg(not(madsim))]
pub mod telemetry;

use std::sync::Arc;
use std::time::Duration;

pub use config::{Peer, RestoreFrom, Security, ServerConfig, TlsFiles, node_id_from_pod_name};
use engram_audit::{KeyRing, NodeKey};
use engram_proto::pb;
use engram_raft::{NodeInfo, RaftNode, RaftSettings};
use engram_storage::Store;
use services::Shared;
use services::access::AccessService;
use services::audit::AuditService;
use services::cluster::ClusterService;
/// What a follower signs to vouch for a caller its TLS authenticated (see `services::gate`).
pub use services::gate::vouch_message;
use services::memory::MemoryService;
/// Transactions a node keeps in memory for its watchers (see `services::watch_hub`).
pub use services::watch_hub::RING_TXS as WATCH_TAIL_TXS;
use tonic::transport::Server;
use tracing::{info, warn};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Startup(String),
    #[error("gRPC server failed: {0}")]
    Serve(String),
}

/// Runs the node until SIGINT or SIGTERM, then shuts down gracefully.
#[cfg(not(madsim))]
pub async fn run(config: ServerConfig) -> Result<(), ServerError> {
    run_until(config, shutdown_signal()).await
}

/// Runs the node until `shutdown` completes: RocksDB in the data directory and the key file.
#[cfg(not(madsim))]
pub async fn run_until(
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    check_id(&config)?;
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        ServerError::Startup(format!(
            "cannot create data dir {}: {e}",
            config.data_dir.display()
        ))
    })?;
    if let Some(from) = &config.restore_from {
        restore_dir::on_start(&config, from).await?;
    }
    let keys = match &config.key_file {
        Some(path) => KeyRing::new(Arc::new(node_key::load(path)?)),
        None => {
            // A key in the data directory can be rotated: keys staged for a rotation live beside
            // it, and every change to the ring is written back.
            let path = config.data_dir.join("node.key");
            let ring = KeyRing::new(Arc::new(node_key::load_or_generate(&path)?));
            for staged in node_key::load_staged(&path)? {
                ring.stage(staged);
            }
            ring.set_listener(Box::new(move |current, staged| {
                if let Err(e) = node_key::persist(&path, current, staged) {
                    // The chain is the record of which key is current; on restart the node
                    // settles on it from the staged keys, so a failed write is recoverable.
                    tracing::error!(error = %e, "could not persist the node's key ring");
                }
            }));
            ring
        }
    };
    let store: Arc<dyn Store> = Arc::new(
        engram_storage_rocks::RocksStore::open(&config.data_dir.join("db"))
            .map_err(|e| ServerError::Startup(format!("cannot open the store: {e}")))?,
    );
    // Before anything reads or writes a row: a store in a format this build does not know is
    // refused as it is (`engram_core::store_format`).
    match engram_core::store_format::open(&*store) {
        Ok(engram_core::store_format::Opened::Stamped) => info!(
            format = engram_core::store_format::STORE_FORMAT,
            "the store carried no format: stamped with this build's"
        ),
        Ok(engram_core::store_format::Opened::Current) => {}
        Err(e) => {
            return Err(ServerError::Startup(format!(
                "cannot open the store in {}: {e}",
                config.data_dir.display()
            )));
        }
    }
    startup::verify_store(&*store, config.verify_on_start, &keys)?;
    serve_keys(config, store, Arc::new(keys), shutdown).await
}

fn check_id(config: &ServerConfig) -> Result<(), ServerError> {
    if config.node_id == 0 {
        return Err(ServerError::Startup("--id must be at least 1".into()));
    }
    Ok(())
}

/// Serves a node over an opened `store` with its signing `key` until `shutdown` completes.
/// [`run_until`] calls this with RocksDB; the simulation calls it with its in-memory store,
/// which outlives the node so that a crash can be modelled.
pub async fn serve(
    config: ServerConfig,
    store: Arc<dyn Store>,
    key: NodeKey,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    serve_keys(config, store, Arc::new(KeyRing::new(Arc::new(key))), shutdown).await
}

/// [`serve`] with a key ring, whose staged keys a rotation can switch to.
pub async fn serve_keys(
    config: ServerConfig,
    store: Arc<dyn Store>,
    keys: Arc<KeyRing>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    check_id(&config)?;
    let key = keys.current();
    let info = NodeInfo {
        addr: config.advertise(),
        public_key: key.public().0,
    };
    info!(node_id = config.node_id, addr = %info.addr, key_id = %key.key_id(), "starting engram node");
    let settings = RaftSettings {
        timing: config.raft,
        clock_skew_ns: config.clock_skew_ns,
        checkpoints: engram_core::CheckpointPolicy {
            every_entries: config.checkpoint_every_entries,
            every_ms: config.checkpoint_every_ms,
        },
        redact_part_datoms: config.redact_part_datoms,
    };
    // Known before any request: a node that would serve open mode beyond loopback without
    // being told to refuses to start, rather than serve no one but its own host.
    let recorded = engram_core::policy::settled_mode(&*store)
        .map_err(|e| ServerError::Startup(format!("cannot read the security mode: {e}")))?;
    let bootstraps_open = config.bootstrap && !config.security.enforced;
    if let Some(why) =
        services::exposure::refuse_at_start(config.listen, config.insecure_open, bootstraps_open, recorded)
    {
        return Err(ServerError::Startup(why));
    }
    if config.insecure_open {
        warn!(
            listen = %config.listen,
            "--insecure-open: if this cluster is in open mode, anyone who reaches {} may read and write everything (membership, key and policy changes still need a loopback caller); initialise clusters with --security enforced instead",
            config.listen
        );
    }
    // Before anything can dial a peer: `server_tls` also sets the identity this process dials
    // peers with, and a channel opened before that (Raft, bootstrap) would stay plaintext
    // against a TLS peer for good.
    #[cfg(not(madsim))]
    let tls = match &config.tls {
        Some(files) => Some(server_tls(files)?),
        None => None,
    };
    // Bound before Raft starts, so a port another process holds is a start-up error that
    // names it, not a server that stops with "transport error" once Raft is running.
    #[cfg(not(madsim))]
    let incoming = tonic::transport::server::TcpIncoming::bind(config.listen)
        .map_err(|e| ServerError::Startup(format!("cannot listen on {}: {e}", config.listen)))?
        .with_nodelay(Some(true));
    let node = RaftNode::start(config.node_id, info, store, keys, &settings)
        .await
        .map_err(|e| ServerError::Startup(e.to_string()))?;
    let access =
        access_log::AccessRecorder::start(config.access_log.clone(), node.store.clone(), node.keys.clone())
            .map_err(ServerError::Startup)?;
    let shared = Shared::new(node.clone(), config.clone(), access);
    // Told when the server stops, so the divergence watch ends with it (even if Raft died).
    let (stopped_tx, stopped_rx) = tokio::sync::watch::channel(false);
    tokio::task::spawn(services::search_index::keep_current(
        shared.clone(),
        stopped_rx.clone(),
    ));
    tokio::task::spawn(services::watch_hub::follow(
        shared.watch_hub.clone(),
        node.clone(),
        stopped_rx.clone(),
    ));
    // Also with saves off: it rebuilds the index from the store once a redaction is purged,
    // so the index in memory does not keep a forgotten value's words until the next start.
    // (Not in the simulation with saves off: its timer would move every seed's schedule, and
    // the simulation's checkers read the nodes' rows, not their indexes in memory.)
    if config.recall_save_ms > 0 || !cfg!(madsim) {
        tokio::task::spawn(services::search_index::keep_saved(
            shared.clone(),
            Duration::from_millis(config.recall_save_ms),
            stopped_rx.clone(),
        ));
    }
    if config.divergence_check_ms > 0 {
        tokio::task::spawn(divergence::watch(
            shared.clone(),
            Duration::from_millis(config.divergence_check_ms),
            stopped_rx.clone(),
        ));
    }
    if config.retention_check_ms > 0 {
        tokio::task::spawn(retention::drive(
            shared.clone(),
            Duration::from_millis(config.retention_check_ms),
            stopped_rx.clone(),
        ));
    }
    if config.session_check_ms > 0 {
        tokio::task::spawn(retention::drive_sessions(
            shared.clone(),
            Duration::from_millis(config.session_check_ms),
            stopped_rx.clone(),
        ));
    }
    tokio::task::spawn(announce_security(
        node.clone(),
        config.listen,
        config.insecure_open,
    ));
    if config.join {
        tokio::task::spawn(join(shared.clone()));
    } else if config.bootstrap {
        tokio::task::spawn(bootstrap(shared.clone()));
    }
    #[cfg(not(madsim))]
    if let Some(addr) = config.metrics_listen {
        let node = node.clone();
        let watches = shared.watch_hub.clone();
        let insecure_open = config.insecure_open;
        tokio::task::spawn(async move {
            if let Err(e) = metrics::serve(addr, node, watches, insecure_open).await {
                warn!(%addr, error = %e, "metrics: cannot serve");
            }
        });
    }
    // The transport refuses bodies above this with OUT_OF_RANGE before they are decoded; below
    // it, the Memory service refuses transactions above --max-tx-bytes with RESOURCE_EXHAUSTED.
    let request_limit = config.max_tx_bytes.saturating_mul(2).max(64 << 20);

    // Mutable in both builds: TLS configures it here; madsim's builder adds services by `&mut`.
    #[allow(unused_mut)]
    let mut builder = Server::builder().tcp_nodelay(true);
    #[cfg(not(madsim))]
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| ServerError::Startup(format!("TLS: {e}")))?;
    }
    let router = builder
        .add_service(client_facing(
            pb::memory_server::MemoryServer::new(MemoryService::new(shared.clone()))
                .max_decoding_message_size(request_limit)
                .max_encoding_message_size(64 << 20),
            &shared,
        ))
        .add_service(client_facing(
            pb::audit_server::AuditServer::new(AuditService::new(shared.clone())),
            &shared,
        ))
        .add_service(client_facing(
            pb::access_server::AccessServer::new(AccessService::new(shared.clone())),
            &shared,
        ))
        .add_service(client_facing(
            pb::cluster_server::ClusterServer::new(ClusterService::new(shared.clone())),
            &shared,
        ))
        .add_service(node.raft_service().into_server());
    // Health and reflection are real-tonic services; madsim's transport cannot carry them, and
    // the simulation does not need them (the real-TCP tests cover both).
    #[cfg(not(madsim))]
    let router = {
        let (health, health_service) = tonic_health::server::health_reporter();
        tokio::task::spawn(report_health(node.clone(), health));
        // Both reflection versions: grpcurl before 1.9 and many other tools only speak v1alpha.
        let reflection_builder = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(engram_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection = reflection_builder()
            .build_v1()
            .map_err(|e| ServerError::Startup(format!("reflection: {e}")))?;
        let reflection_alpha = reflection_builder()
            .build_v1alpha()
            .map_err(|e| ServerError::Startup(format!("reflection: {e}")))?;
        if let Some(addr) = config.health_listen {
            // Plaintext, health only: for probes that cannot speak TLS.
            let health_only = health_service.clone();
            tokio::task::spawn(async move {
                let served = Server::builder().add_service(health_only).serve(addr).await;
                if let Err(e) = served {
                    warn!(%addr, error = %e, "health listener stopped");
                }
            });
        }
        router
            .add_service(health_service)
            .add_service(reflection)
            .add_service(reflection_alpha)
    };
    #[cfg(not(madsim))]
    let served = router.serve_with_incoming_shutdown(incoming, shutdown).await;
    #[cfg(madsim)]
    let served = router.serve_with_shutdown(config.listen, shutdown).await;
    let _ = stopped_tx.send(true);
    node.shutdown().await;
    info!(node_id = config.node_id, "node stopped");
    served.map_err(|e| ServerError::Serve(with_sources(&e)))
}

/// A client service behind what every client call passes first: its count and timing for
/// `/metrics` (`services::rpc_metrics`), the interceptor that reads whom the caller's TLS client
/// certificate names (and never takes that from the client: see
/// `services::gate::certificate_principal`), then the check of who may reach a node whose
/// cluster is not enforced (`services::exposure`).
#[cfg(not(madsim))]
fn client_facing<S>(
    service: S,
    shared: &Arc<Shared>,
) -> services::rpc_metrics::Measured<
    tonic::service::interceptor::InterceptedService<
        services::exposure::Exposure<S>,
        services::gate::CertInterceptor,
    >,
> {
    services::rpc_metrics::Measured::new(tonic::service::interceptor::InterceptedService::new(
        services::exposure::Exposure::new(service, shared.clone()),
        services::gate::certificate_principal,
    ))
}

/// The simulation runs without TLS, so no certificate names anyone, and its network carries
/// only the simulation's own clients.
#[cfg(madsim)]
fn client_facing<S>(service: S, _shared: &Arc<Shared>) -> S {
    service
}

/// An error and its causes, outermost first: the transport's own message is only
/// "transport error", and what went wrong is in its sources.
fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// The server side of mutual TLS, and (once per process) the same identity for dialing peers.
#[cfg(not(madsim))]
fn server_tls(files: &TlsFiles) -> Result<tonic::transport::ServerTlsConfig, ServerError> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).map_err(|e| ServerError::Startup(format!("TLS {what} {}: {e}", path.display())))
    };
    let cert = read(&files.cert, "certificate")?;
    let key = read(&files.key, "key")?;
    let ca = read(&files.client_ca, "client CA")?;
    engram_raft::network::set_peer_tls(&ca, &cert, &key);
    Ok(ServerTlsConfig::new()
        .identity(Identity::from_pem(cert, key))
        .client_ca_root(Certificate::from_pem(ca)))
}

#[cfg(not(madsim))]
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the node");
            let _ = ctrl_c.await;
            return;
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
    info!("shutdown signal received");
}

/// How far (in log entries) a node's applied state may trail the cluster's commit index and
/// still count as ready: a busy follower is always a few entries behind.
pub const READY_LAG_ENTRIES: u64 = 64;

/// Whether the node should take traffic: it is a member, knows the leader, has applied the
/// cluster's committed entries (within [`READY_LAG_ENTRIES`]) and its local chain tip verifies
/// (decodes, links to the entry before it, and is signed by a key the chain trusts), and no
/// divergence alarm is raised, the Raft core has not stopped (e.g. on an apply failure) and no
/// request has met storage corruption ([`error::storage_intact`]).
pub fn ready(node: &RaftNode) -> Result<(), String> {
    if let Some(alarm) = node.alarm() {
        return Err(format!("divergence alarm: {alarm}"));
    }
    if let Some(why) = node.stopped() {
        return Err(format!("Raft stopped: {why}"));
    }
    let status = node.status();
    if !status.members.iter().any(|(id, _, _)| *id == node.node_id) {
        return Err("not a member of the cluster".into());
    }
    let Some(leader) = status.leader_id else {
        return Err("no known leader".into());
    };
    let behind = status
        .cluster_committed_index
        .saturating_sub(status.applied_index);
    if behind > READY_LAG_ENTRIES {
        return Err(format!("{behind} committed entries behind leader {leader}"));
    }
    error::storage_intact()?;
    // The tip this node vouches for: its last attested entry, whose signature is checked.
    // A node installing a snapshot is not ready: its state is part old, part new.
    node.read_state(|store| {
        let tip = engram_core::reads::attested_index(store).map_err(|e| e.to_string())?;
        if tip > 0 {
            match engram_core::reads::audit_entries(store, tip, 1) {
                Ok(Ok(entries)) if entries.len() == 1 => {}
                Ok(Ok(_)) => return Err(format!("chain tip {tip} is missing")),
                Ok(Err(e)) => return Err(format!("chain tip does not verify: {e}")),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?
}

/// Health: `engram.live` is SERVING while the server answers (liveness); `engram.ready` (and,
/// as before, the default service and `engram.v1.Memory`) while [`ready`] holds.
#[cfg(not(madsim))]
async fn report_health(node: RaftNode, reporter: tonic_health::server::HealthReporter) {
    use tonic_health::ServingStatus::{NotServing, Serving};
    reporter.set_service_status("engram.live", Serving).await;
    let mut last: Option<String> = None;
    loop {
        // Read before the verdict, so the last status set before returning reflects the stop.
        let shut_down = node.status().role == "Shutdown";
        let verdict = ready(&node);
        let state = if verdict.is_ok() { Serving } else { NotServing };
        let reason = verdict.err();
        if reason != last {
            match &reason {
                Some(why) => info!(reason = %why, "not ready"),
                None => info!("ready"),
            }
            last = reason;
        }
        for service in ["", "engram.ready", "engram.v1.Memory"] {
            reporter.set_service_status(service, state).await;
        }
        if shut_down {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// With `--join`: until this node is a voter, ask the peers whether a cluster exists; if one
/// does, ask it to add this node (the leader admits its key, adds it as a learner and promotes
/// it once caught up). A node left a learner keeps asking: its promotion may have been refused
/// because another node's membership change was in flight (two nodes joining at once). If no
/// peer has a cluster and `--bootstrap` is set too, bootstrap as usual. Idempotent across
/// restarts: a voter does nothing.
async fn join(shared: Arc<Shared>) {
    let me = shared.node.node_id;
    let mut announced = false;
    loop {
        if shared
            .node
            .status()
            .members
            .iter()
            .any(|(id, _, voter)| *id == me && *voter)
        {
            info!("join: this node is a voter");
            return;
        }
        let mut cluster_exists = false;
        for peer in shared.config.peers.iter().filter(|p| p.id != me) {
            let Ok(mut client) = shared.cluster_client(&peer.addr) else {
                continue;
            };
            let Ok(status) = client.status(pb::StatusRequest {}).await.map(|r| r.into_inner()) else {
                continue;
            };
            if !status.initialized {
                continue;
            }
            cluster_exists = true;
            if status.members.iter().any(|m| m.id == me && m.voter) {
                // A voter already; replication will reach this node.
                break;
            }
            let request = pb::AddNodeRequest {
                id: me,
                addr: shared.config.advertise(),
                learner_only: false,
            };
            // An enforced cluster admits a node only on a request signed by an agent with
            // cluster-admin.
            let key = shared.config.security.join_key_file.as_deref().and_then(|path| {
                engram_access::AgentKey::load(path)
                    .map_err(|e| info!(error = %e, "join: no usable agent key yet; asking unsigned"))
                    .ok()
            });
            let request = match &key {
                Some(key) => config::signed_request(key, me, engram_proto::methods::ADD_NODE, request),
                None => tonic::Request::new(request),
            };
            match client.add_node(request).await {
                Ok(_) => {
                    info!(via = peer.id, "join: added to the cluster");
                    break;
                }
                Err(e) => {
                    info!(via = peer.id, code = ?e.code(), error = %e.message(), "join: not added yet; retrying")
                }
            }
        }
        if !cluster_exists && shared.config.bootstrap && !announced {
            let listed = shared.config.peers.iter().any(|p| p.id == me);
            if listed {
                announced = true;
                info!("join: no peer has a cluster yet; bootstrapping from --peer");
                tokio::task::spawn(bootstrap(shared.clone()));
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// With `--bootstrap`: the lowest-id member initialises the cluster once every listed peer
/// answers, unless the cluster is already initialised. Others wait to be contacted.
/// Says once, at start (or once the cluster records it), which security mode the node
/// serves in: a warning in open mode, where anyone who reaches a node may do anything.
async fn announce_security(node: RaftNode, listen: std::net::SocketAddr, insecure_open: bool) {
    loop {
        match node.read_state(|store| engram_core::policy::settled_mode(store)) {
            Ok(Ok(Some(engram_access::Mode::Open))) => {
                if !services::exposure::exposed(listen) {
                    warn!(
                        "security mode is open: any client on this host may read and write everything; initialise clusters with --security enforced to require signed requests and grants"
                    );
                } else if insecure_open {
                    warn!(
                        %listen,
                        "security mode is open and --insecure-open is set: ANY client that reaches this node may read and write everything; initialise clusters with --security enforced to require signed requests and grants"
                    );
                } else {
                    // The cluster was initialised open through another node: this one keeps
                    // serving loopback only, so its peers' forwarded calls are refused too.
                    warn!(
                        %listen,
                        "security mode is open but this node runs without --insecure-open: it serves loopback callers only, and refuses its peers' forwarded calls; restart it with --insecure-open, or run an enforced cluster"
                    );
                }
                return;
            }
            Ok(Ok(Some(engram_access::Mode::Enforced))) => {
                info!(
                    "security mode is enforced: requests must be signed by registered agent keys and allowed by grants"
                );
                return;
            }
            // Not recorded yet (or the state is being replaced): look again shortly.
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
        if node.has_stopped() {
            return;
        }
    }
}

async fn bootstrap(shared: Arc<Shared>) {
    let me = shared.node.node_id;
    let mut list: Vec<(u64, String)> = shared
        .config
        .peers
        .iter()
        .map(|p| (p.id, p.addr.clone()))
        .collect();
    if !list.iter().any(|(id, _)| *id == me) {
        if shared.config.join {
            // A joining node not among the initial voters never founds a cluster.
            return;
        }
        list.push((me, shared.config.advertise()));
    }
    list.sort();
    if list.first().map(|(id, _)| *id) != Some(me) {
        info!(
            "bootstrap: waiting for node {} to initialise the cluster",
            list[0].0
        );
        return;
    }
    loop {
        match shared.node.is_initialized().await {
            Ok(true) => {
                info!("bootstrap: cluster already initialised");
                // A restart between genesis and the security mode's entry finishes the job.
                if let Err(e) = services::cluster::configure(&shared, shared.config.security.op()).await {
                    warn!(error = %e, "bootstrap: could not record the security mode");
                }
                return;
            }
            Ok(false) => {}
            Err(e) => {
                warn!(error = %e, "bootstrap: node failed");
                return;
            }
        }
        if shared.config.join && services::cluster::any_peer_initialized(&shared).await {
            info!("bootstrap: a peer already has a cluster; joining it instead");
            return;
        }
        match services::cluster::initialize(&shared, list.clone(), shared.config.security.op()).await {
            Ok(()) => {
                info!(members = list.len(), "bootstrap: cluster initialised");
                return;
            }
            Err(e) => info!(error = %e, "bootstrap: not yet; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
