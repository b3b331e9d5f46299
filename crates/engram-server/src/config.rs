use std::net::SocketAddr;
use std::path::PathBuf;

/// A cluster member named on the command line: `ID=HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    pub addr: String,
}

impl std::str::FromStr for Peer {
    type Err = String;

    fn from_str(s: &str) -> Result<Peer, String> {
        let (id, addr) = s
            .split_once('=')
            .ok_or_else(|| format!("peer {s:?} must look like ID=HOST:PORT"))?;
        let id = id
            .parse::<u64>()
            .map_err(|_| format!("peer {s:?}: {id:?} is not a node id"))?;
        if id == 0 {
            return Err(format!("peer {s:?}: node ids start at 1"));
        }
        if !addr.contains(':') {
            return Err(format!("peer {s:?}: address {addr:?} needs a port"));
        }
        Ok(Peer {
            id,
            addr: addr.to_string(),
        })
    }
}

/// The PEM files of a node's TLS: its certificate and key (served to clients and presented to
/// peers), and the CA that client and peer certificates must chain to.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// Everything a node needs to run. Built by the `engram serve` command from flags and
/// environment variables.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// This node's id (≥ 1), unique in the cluster and never reused.
    pub node_id: u64,
    /// Address the gRPC server binds.
    pub listen: SocketAddr,
    /// Address other nodes and clients use to reach this node; defaults to `listen`.
    pub advertise_addr: Option<String>,
    /// Holds the RocksDB store and, unless `key_file` is set, the node's signing key.
    pub data_dir: PathBuf,
    /// A 32-byte Ed25519 seed (raw or hex). When unset, the key is `data_dir/node.key`,
    /// generated on first start with mode 0600.
    pub key_file: Option<PathBuf>,
    /// The initial voters (this node may be among them).
    pub peers: Vec<Peer>,
    /// Initialise the cluster from `peers` once all of them answer, if it is not initialised
    /// yet. Safe to leave on across restarts: an initialised node never re-initialises.
    pub bootstrap: bool,
    /// Join an existing cluster: when this node is not a member and a peer reports an
    /// initialised cluster, ask it to add this node (as a learner, promoted to voter once caught
    /// up). With `bootstrap` too, the node bootstraps only if no peer has a cluster yet.
    pub join: bool,
    /// Build the data directory from a backup on the first start (see `restore_dir`).
    pub restore_from: Option<RestoreFrom>,
    /// Serve Prometheus metrics at `/metrics` over plain HTTP on this address.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve gRPC over mutual TLS, and dial other nodes over it.
    pub tls: Option<TlsFiles>,
    /// Also serve the gRPC health service (only) in plaintext here: probes that cannot speak
    /// TLS, such as Kubernetes' gRPC probes, ask it.
    pub health_listen: Option<SocketAddr>,
    /// Largest encoded transaction accepted, in bytes.
    pub max_tx_bytes: usize,
    /// A watch whose reader takes nothing for this long while its buffer is full is ended with
    /// `UNAVAILABLE` and the transaction to reopen at, so a stalled reader holds no task and
    /// no buffer for ever (the client library reopens it).
    pub watch_stall_cutoff_ms: u64,
    /// Raft timing and compaction (heartbeat, elections, append deadline, snapshots).
    pub raft: engram_raft::RaftTiming,
    /// Added to this node's clock when it stamps proposals. Zero in production (there is no
    /// flag for it); the simulation sets it to model nodes whose clocks disagree.
    pub clock_skew_ns: i64,
    /// Sign a checkpoint of the chain after this many entries (0: never by count).
    pub checkpoint_every_entries: u64,
    /// Sign a checkpoint once this much transaction time has passed since the last one (0:
    /// never by time).
    pub checkpoint_every_ms: u64,
    /// Most datoms each part of a redaction this node proposes as leader takes.
    pub redact_part_datoms: u32,
    /// While leading, apply the retention policies this often (0: never): redact what each
    /// keeps no longer (`crate::retention`).
    pub retention_check_ms: u64,
    /// While leading, look for lapsed sessions this often (0: never): end them and forget
    /// what their namespaces held (`crate::retention::drive_sessions`).
    pub session_check_ms: u64,
    /// Save this node's recall index to `data_dir/recall.index` this often when it has taken
    /// in something new (0: never): a restart takes the index from the save and feeds it what
    /// was applied since, instead of rebuilding it from the whole log
    /// (`crate::services::search_index`).
    pub recall_save_ms: u64,
    /// Compare this node's audit chain with every peer's this often (0: never); a mismatch
    /// raises the divergence alarm (`crate::divergence`).
    pub divergence_check_ms: u64,
    /// What [`crate::run_until`] checks of the store before serving; a node whose check fails
    /// does not start.
    pub verify_on_start: engram_core::scrub::StartCheck,
    /// The security mode a bootstrapping node records right after genesis (`Init` requests
    /// carry their own).
    pub security: Security,
    /// Serve open mode to callers beyond loopback (`--insecure-open`): without it, a node
    /// whose cluster is not enforced serves remote callers only what it takes to become
    /// enforced (`services::exposure`). Membership, key and policy changes in open mode are
    /// taken from loopback only either way.
    pub insecure_open: bool,
    /// Namespace prefixes whose reads, watches and exports this node records in its access
    /// log (`*`: all, exports included); empty: none (`crate::access_log`).
    pub access_log: Vec<String>,
}

/// A cluster's security mode as chosen at initialisation, with its first administrator.
#[derive(Clone, Debug, Default)]
pub struct Security {
    pub enforced: bool,
    /// The first administrator (required when enforced): granted every action everywhere.
    pub admin: Option<(engram_access::Principal, engram_audit::PublicKey)>,
    /// With `join`: the agent key file the node signs its own `AddNode` request with, so it
    /// can join an enforced cluster by itself (the agent needs `cluster-admin`). Read at each
    /// attempt, so a file that appears later (a Kubernetes Secret made after the cluster) is
    /// used once it is there.
    pub join_key_file: Option<std::path::PathBuf>,
}

impl Security {
    /// The policy change that records it.
    pub fn op(&self) -> engram_access::PolicyOp {
        engram_access::PolicyOp::Configure {
            mode: if self.enforced {
                engram_access::Mode::Enforced
            } else {
                engram_access::Mode::Open
            },
            admin: self.admin.clone(),
        }
    }
}

/// `message` in a request signed by `key` for `method`, as a client signs it: the node's
/// clock, and a nonce that is unique per request of this process (a hash of the node, the
/// time and a counter; a nonce needs uniqueness, not secrecy).
pub fn signed_request<T: engram_proto::SignedBody>(
    key: &engram_access::AgentKey,
    node_id: u64,
    method: &str,
    message: T,
) -> tonic::Request<T> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now_ns = engram_raft::clock::now_ns();
    let mut seed = blake3::Hasher::new();
    seed.update(&node_id.to_le_bytes());
    seed.update(&now_ns.to_le_bytes());
    seed.update(
        &COUNTER
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_le_bytes(),
    );
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(&seed.finalize().as_bytes()[..16]);
    engram_proto::signed_request(key, method, message, now_ns / 1_000_000, nonce)
}

/// A backup a node's data directory is built from on its first start.
#[derive(Clone, Debug)]
pub struct RestoreFrom {
    /// The backup file (`engram backup --out FILE`).
    pub backup: PathBuf,
    /// The node that restores it; every other node starts as it would without it (and joins).
    pub node_id: u64,
}

impl ServerConfig {
    pub fn new(node_id: u64, listen: SocketAddr, data_dir: PathBuf) -> ServerConfig {
        ServerConfig {
            node_id,
            listen,
            advertise_addr: None,
            data_dir,
            key_file: None,
            peers: Vec::new(),
            bootstrap: false,
            join: false,
            restore_from: None,
            metrics_listen: None,
            tls: None,
            health_listen: None,
            max_tx_bytes: 1 << 20,
            watch_stall_cutoff_ms: 30_000,
            raft: engram_raft::RaftTiming::default(),
            checkpoint_every_entries: 1_000,
            checkpoint_every_ms: 1_000,
            redact_part_datoms: engram_raft::RaftSettings::REDACT_PART_DATOMS,
            clock_skew_ns: 0,
            divergence_check_ms: 5_000,
            retention_check_ms: 60_000,
            session_check_ms: 1_000,
            recall_save_ms: 60_000,
            verify_on_start: engram_core::scrub::StartCheck::Tip,
            security: Security::default(),
            insecure_open: false,
            access_log: Vec::new(),
        }
    }

    pub fn advertise(&self) -> String {
        self.advertise_addr
            .clone()
            .unwrap_or_else(|| self.listen.to_string())
    }
}

/// The node id a StatefulSet pod gets from its name: `<name>-<ordinal>` is node ordinal + 1.
pub fn node_id_from_pod_name(pod: &str) -> Option<u64> {
    let (_, ordinal) = pod.rsplit_once('-')?;
    ordinal.parse::<u64>().ok()?.checked_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_strictly() {
        assert_eq!(
            "2=127.0.0.1:7002".parse::<Peer>().unwrap(),
            Peer {
                id: 2,
                addr: "127.0.0.1:7002".into()
            }
        );
        for bad in ["2", "x=host:1", "0=host:1", "2=host"] {
            assert!(bad.parse::<Peer>().is_err(), "{bad}");
        }
    }

    #[test]
    fn pod_ordinals_become_node_ids() {
        assert_eq!(node_id_from_pod_name("engram-0"), Some(1));
        assert_eq!(node_id_from_pod_name("my-release-engram-12"), Some(13));
        for bad in ["engram", "engram-", "engram-x", "engram-1x"] {
            assert_eq!(node_id_from_pod_name(bad), None, "{bad}");
        }
    }
}
