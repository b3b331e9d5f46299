//! The simulated cluster: a pool of real Engram nodes on madsim, each over an in-memory store
//! that the harness owns, so a crash can be modelled exactly (unsynced writes are lost) and
//! the checkers can read every replica's state after the fact.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engram_audit::NodeKey;
use engram_proto::pb;
use engram_server::ServerConfig;
use engram_storage::{MemStore, Store};
use madsim::runtime::{Handle, NodeHandle};
use madsim::task::NodeId;

/// The port every node serves on.
pub const PORT: u16 = 5000;
/// Per-request deadline of the harness's own control calls.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(3);

/// Raft timing and compaction for every node of a seed: the server's own settings type.
pub type NodeSettings = engram_raft::RaftTiming;

/// One pool member.
pub struct SimNode {
    pub id: u64,
    pub addr: String,
    pub store: Arc<MemStore>,
    pub key: Arc<NodeKey>,
    pub handle: NodeHandle,
    /// Read by the node's boot closure, so a restart picks up a new skew.
    pub clock_skew_ns: Arc<Mutex<i64>>,
    pub alive: bool,
    /// How many times the node crashed: only a crash may roll its applied state back.
    pub crashes: u64,
}

impl SimNode {
    pub fn madsim_id(&self) -> NodeId {
        self.handle.id()
    }
}

pub fn node_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, u8::try_from(id).unwrap_or(u8::MAX)))
}

pub fn node_addr(id: u64) -> String {
    format!("{}:{PORT}", node_ip(id))
}

/// The pool of nodes and a control host for the harness's own RPCs.
pub struct Cluster {
    pub handle: Handle,
    pub nodes: BTreeMap<u64, SimNode>,
    control: NodeHandle,
}

impl Cluster {
    /// Boots nodes `1..=pool` (none initialised yet). `skews[i]` is node `i+1`'s clock skew;
    /// `key_seeds` make every seed's keys reproducible. `retention_check_ms`: how often the
    /// leader runs retention policies (`None`: the server's default, a minute).
    pub fn boot(
        handle: Handle,
        pool: u64,
        settings: &NodeSettings,
        skews: &[i64],
        seed: u64,
        retention_check_ms: Option<u64>,
    ) -> Cluster {
        let mut nodes = BTreeMap::new();
        for id in 1..=pool {
            let store = Arc::new(MemStore::new());
            let mut key_seed = [0u8; 32];
            key_seed[..8].copy_from_slice(&seed.to_le_bytes());
            key_seed[8..16].copy_from_slice(&id.to_le_bytes());
            let key = Arc::new(NodeKey::from_seed(key_seed));
            let skew = Arc::new(Mutex::new(skews.get(id as usize - 1).copied().unwrap_or(0)));
            let node_handle = handle
                .create_node()
                .name(format!("node-{id}"))
                .ip(node_ip(id))
                .init({
                    let store = store.clone();
                    let key = key.clone();
                    let skew = skew.clone();
                    let settings = *settings;
                    move || {
                        let mut config =
                            node_config(id, &settings, *skew.lock().unwrap_or_else(|e| e.into_inner()));
                        // Without redactions (`retention_check_ms` unset) no session job runs
                        // either: its timer would move every seed's schedule, which the
                        // seed-pinned planted tests rely on.
                        config.session_check_ms = retention_check_ms.unwrap_or(0);
                        if let Some(ms) = retention_check_ms {
                            config.retention_check_ms = ms;
                        }
                        let store: Arc<dyn Store> = store.clone();
                        let key = NodeKey::from_seed(key.seed());
                        async move {
                            if let Err(e) =
                                engram_server::serve(config, store, key, std::future::pending()).await
                            {
                                panic!("node {id} failed: {e}");
                            }
                        }
                    }
                })
                .build();
            nodes.insert(
                id,
                SimNode {
                    id,
                    addr: node_addr(id),
                    store,
                    key,
                    handle: node_handle,
                    clock_skew_ns: skew,
                    alive: true,
                    crashes: 0,
                },
            );
        }
        let control = handle
            .create_node()
            .name("control")
            .ip(IpAddr::V4(Ipv4Addr::new(10, 0, 9, 1)))
            .build();
        Cluster {
            handle,
            nodes,
            control,
        }
    }

    pub fn node(&self, id: u64) -> &SimNode {
        &self.nodes[&id]
    }

    pub fn alive_ids(&self) -> Vec<u64> {
        self.nodes.values().filter(|n| n.alive).map(|n| n.id).collect()
    }

    /// Kills the node's process and throws away what it never synced. `torn_keep` lets the
    /// oldest `n` unsynced batches reach the disk whole (a WAL tail cut at a record boundary).
    pub fn crash(&mut self, id: u64, torn_keep: Option<usize>) {
        let node = self.nodes.get_mut(&id).expect("crash of a pool node");
        if !node.alive {
            return;
        }
        self.handle.kill(node.madsim_id());
        match torn_keep {
            Some(keep) => node.store.crash_torn(keep),
            None => node.store.crash(),
        }
        node.alive = false;
        node.crashes += 1;
    }

    /// Boots a crashed node again on what its store kept.
    pub fn restart(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).expect("restart of a pool node");
        if node.alive {
            return;
        }
        self.handle.restart(node.madsim_id());
        node.alive = true;
    }

    /// Runs `f` on the control host (RPCs need a simulated host to leave from).
    pub async fn control<F, T>(&self, f: F) -> T
    where
        F: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        match self.control.spawn(f).await {
            Ok(v) => v,
            Err(e) => panic!("control task failed: {e}"),
        }
    }

    /// `Cluster.Init` on the first of `voters`.
    pub async fn init(&self, voters: &[u64]) -> Result<(), tonic::Status> {
        let members: Vec<pb::Member> = voters
            .iter()
            .map(|id| pb::Member {
                id: *id,
                addr: node_addr(*id),
                public_key: self.node(*id).key.public().0.to_vec(),
                voter: true,
            })
            .collect();
        let target = node_addr(voters[0]);
        self.control(async move {
            let mut client = pb::cluster_client::ClusterClient::new(channel(&target));
            let mut req = tonic::Request::new(pb::InitRequest {
                members,
                ..Default::default()
            });
            req.set_timeout(CONTROL_TIMEOUT);
            client.init(req).await.map(|_| ())
        })
        .await
    }

    pub async fn status(&self, id: u64) -> Result<pb::StatusResponse, tonic::Status> {
        let target = node_addr(id);
        self.control(async move {
            let mut client = pb::cluster_client::ClusterClient::new(channel(&target));
            let mut req = tonic::Request::new(pb::StatusRequest {});
            req.set_timeout(CONTROL_TIMEOUT);
            client.status(req).await.map(|r| r.into_inner())
        })
        .await
    }

    /// Starts `f` on the control host without waiting for it.
    pub fn spawn_control<F, T>(&self, f: F) -> madsim::task::JoinHandle<T>
    where
        F: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.control.spawn(f)
    }

    /// `Cluster.AddNode` through `via` (forwarded to the leader), to run on the control host.
    pub fn add_node_call(
        &self,
        via: u64,
        id: u64,
        learner_only: bool,
    ) -> impl std::future::Future<Output = Result<(), tonic::Status>> + Send + 'static {
        let target = node_addr(via);
        let addr = node_addr(id);
        async move {
            let mut client = pb::cluster_client::ClusterClient::new(channel(&target));
            let mut req = tonic::Request::new(pb::AddNodeRequest {
                id,
                addr,
                learner_only,
            });
            // Adding waits for the learner to catch up, which can take a snapshot transfer.
            req.set_timeout(Duration::from_secs(10));
            client.add_node(req).await.map(|_| ())
        }
    }

    /// `Cluster.RemoveNode` through `via`, to run on the control host.
    pub fn remove_node_call(
        &self,
        via: u64,
        id: u64,
    ) -> impl std::future::Future<Output = Result<(), tonic::Status>> + Send + 'static {
        let target = node_addr(via);
        async move {
            let mut client = pb::cluster_client::ClusterClient::new(channel(&target));
            let mut req = tonic::Request::new(pb::RemoveNodeRequest { id });
            req.set_timeout(Duration::from_secs(10));
            client.remove_node(req).await.map(|_| ())
        }
    }

    /// The leader's status, if some alive node is the leader and answers.
    pub async fn leader_status(&self) -> Option<pb::StatusResponse> {
        for id in self.alive_ids() {
            if let Ok(s) = self.status(id).await
                && s.role == "Leader"
            {
                return Some(s);
            }
        }
        None
    }

    /// The voters and learners as the leader reports them.
    pub async fn membership(&self) -> Option<(Vec<u64>, Vec<u64>)> {
        let status = self.leader_status().await?;
        let voters = status.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
        let learners = status.members.iter().filter(|m| !m.voter).map(|m| m.id).collect();
        Some((voters, learners))
    }
}

fn node_config(id: u64, settings: &NodeSettings, clock_skew_ns: i64) -> ServerConfig {
    let listen = SocketAddr::new(node_ip(id), PORT);
    let mut config = ServerConfig::new(id, listen, format!("/sim/node-{id}").into());
    config.raft = *settings;
    config.clock_skew_ns = clock_skew_ns;
    // One datom per part: the speculator's two-secret plans (one secret per slot, and a part
    // ends at a slot's end) are redacted in two parts, so
    // every redaction crosses a part boundary (and its leader may change between them).
    config.redact_part_datoms = 1;
    // Simulated hosts have addresses beyond loopback, and the simulation's network carries
    // only its own clients: open mode is served to them as it would be to loopback.
    config.insecure_open = true;
    // No recall saves: the simulated nodes' stores are in memory, and the save's timer would
    // move every seed's schedule.
    config.recall_save_ms = 0;
    config
}

/// A lazily connecting channel to `addr` (call from inside a simulated host).
pub fn channel(addr: &str) -> tonic::transport::Channel {
    match tonic::transport::Endpoint::from_shared(format!("http://{addr}")) {
        Ok(ep) => ep.connect_timeout(Duration::from_secs(1)).connect_lazy(),
        Err(e) => panic!("bad simulated address {addr}: {e}"),
    }
}
