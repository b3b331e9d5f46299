//! A cluster of real `engram serve` child processes on loopback ports, for `engram demo` and
//! the integration tests.
//!
//! Each node gets its own data directory (`DIR/nodeN`) and log file (`DIR/nodeN.log`, stdout
//! and stderr, appended across restarts). Children are killed with SIGKILL and reaped when the
//! [`LocalCluster`] is dropped, which covers normal exit, early returns, errors, panics and a
//! cancelled future (Ctrl-C).

use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use engram_client::{Client, ClientConfig, ClientTls, Keepalive, RetryPolicy, pb};
use tokio::time::Instant;

/// One node of a [`LocalCluster`].
#[derive(Debug)]
pub struct LocalNode {
    pub id: u64,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    /// Where the node serves `/metrics`, if it was started with it.
    pub metrics_addr: Option<SocketAddr>,
    child: Option<Child>,
    /// One quick attempt per call, so a dead node is reported as such at once.
    probe: Client,
}

impl LocalNode {
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// A client that makes one quick attempt per call to this node only.
    pub fn probe(&self) -> &Client {
        &self.probe
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id of the running node, for CPU accounting.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last `lines` lines of the node's log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Child processes running `engram serve`.
pub struct LocalCluster {
    exe: PathBuf,
    extra_args: Vec<String>,
    nodes: Vec<LocalNode>,
    /// How this process's own clients (probes, `init`) reach nodes that serve TLS.
    tls: Option<Arc<ClientTls>>,
}

/// Ports free right now for nodes to bind, distinct from each other and from every port this
/// process picked before.
///
/// They are drawn at random from below the kernel's ephemeral range (on Linux,
/// `ip_local_port_range`), each checked by binding it. A port taken with `bind(0)` would come
/// from that range, which is also where the kernel picks the source port of every outgoing
/// connection: between the pick and the node's own bind, a connection between other nodes on
/// the machine (another test's cluster, say) could take it, and the node would fail to start.
/// Where the range cannot be read, or leaves no room below it, the OS picks as before.
pub fn free_ports(count: usize) -> Result<Vec<u16>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let Some(low) = ephemeral_low().filter(|low| *low >= PICK_FROM + 1_000) else {
        return os_ports(count);
    };
    let mut picked = PICKED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut ports = Vec::with_capacity(count);
    let span = u32::from(low - PICK_FROM);
    for _ in 0..count.saturating_mul(64).max(256) {
        if ports.len() == count {
            break;
        }
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes).map_err(|e| anyhow!("picking free ports: {e}"))?;
        let offset = u16::try_from(u32::from_le_bytes(bytes) % span).unwrap_or(0);
        let port = PICK_FROM + offset;
        if picked.contains(&port) || ports.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
        }
    }
    if ports.len() < count {
        bail!(
            "picking free ports: found {} of {count} below port {low}",
            ports.len()
        );
    }
    picked.extend(ports.iter().copied());
    Ok(ports)
}

/// The lowest port [`free_ports`] hands out: above the ports services usually own.
const PICK_FROM: u16 = 10_000;

/// Every port [`free_ports`] handed out in this process, so two clusters of one test binary
/// never share one.
static PICKED: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The first port of the kernel's ephemeral range, where it can be read.
fn ephemeral_low() -> Option<u16> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Ports the OS reports free right now: bound together (so they are distinct), then released.
fn os_ports(count: usize) -> Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .context("picking free ports")?;
    listeners.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

fn probe_client(addr: SocketAddr, tls: Option<Arc<ClientTls>>) -> Result<Client> {
    let config = ClientConfig {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        keepalive: Some(Keepalive::default()),
        retry: RetryPolicy::never(),
        tls,
        agent: None,
        trust_keys: Vec::new(),
    };
    Ok(Client::with_config(vec![addr.to_string()], config)?)
}

impl LocalCluster {
    /// Starts one node per port, with ids 1, 2, ... running `exe serve ... extra_args`. Does
    /// not wait for them to answer or initialise them.
    pub fn start(exe: &Path, dir: &Path, ports: &[u16], extra_args: &[String]) -> Result<LocalCluster> {
        LocalCluster::start_with_metrics(exe, dir, ports, &[], extra_args)
    }

    /// [`LocalCluster::start`], node `i` also serving `/metrics` on `metrics_ports[i]` (if
    /// there is one).
    pub fn start_with_metrics(
        exe: &Path,
        dir: &Path,
        ports: &[u16],
        metrics_ports: &[u16],
        extra_args: &[String],
    ) -> Result<LocalCluster> {
        LocalCluster::start_with_tls(exe, dir, ports, metrics_ports, extra_args, None)
    }

    /// [`LocalCluster::start_with_metrics`] for nodes that serve TLS (`extra_args` name their
    /// certificates): this process's own clients connect with `tls`.
    pub fn start_with_tls(
        exe: &Path,
        dir: &Path,
        ports: &[u16],
        metrics_ports: &[u16],
        extra_args: &[String],
        tls: Option<Arc<ClientTls>>,
    ) -> Result<LocalCluster> {
        let mut cluster = LocalCluster {
            exe: exe.to_path_buf(),
            extra_args: extra_args.to_vec(),
            nodes: Vec::new(),
            tls: tls.clone(),
        };
        for (i, &port) in ports.iter().enumerate() {
            let id = i as u64 + 1;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let data_dir = dir.join(format!("node{id}"));
            std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
            cluster.nodes.push(LocalNode {
                id,
                addr,
                data_dir,
                log_path: dir.join(format!("node{id}.log")),
                metrics_addr: metrics_ports
                    .get(i)
                    .map(|p| SocketAddr::from(([127, 0, 0, 1], *p))),
                child: None,
                probe: probe_client(addr, tls.clone())?,
            });
        }
        for id in 1..=ports.len() as u64 {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    pub fn nodes(&self) -> &[LocalNode] {
        &self.nodes
    }

    pub fn node(&self, id: u64) -> Result<&LocalNode> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| anyhow!("no node {id}"))
    }

    fn node_mut(&mut self, id: u64) -> Result<&mut LocalNode> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .ok_or_else(|| anyhow!("no node {id}"))
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(LocalNode::endpoint).collect()
    }

    /// `(id, host:port)` of every node, as `Cluster.Init` wants them.
    pub fn members(&self) -> Vec<(u64, String)> {
        self.nodes.iter().map(|n| (n.id, n.endpoint())).collect()
    }

    fn spawn(&mut self, id: u64) -> Result<()> {
        let exe = self.exe.clone();
        let extra = self.extra_args.clone();
        let node = self.node_mut(id)?;
        if node.child.is_some() {
            bail!("node {id} is already running");
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log_path)
            .with_context(|| format!("opening {}", node.log_path.display()))?;
        let log_err = log.try_clone().context("duplicating the log file handle")?;
        let mut cmd = Command::new(&exe);
        cmd.arg("serve")
            .arg("--id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(node.addr.to_string())
            .arg("--data-dir")
            .arg(&node.data_dir)
            .args(
                node.metrics_addr
                    .iter()
                    .flat_map(|m| ["--metrics-listen".to_string(), m.to_string()]),
            )
            .args(&extra)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        // The flags above say everything; settings meant for the user's own nodes (e.g. a
        // bootstrap peer list) must not leak into these.
        for var in [
            "ENGRAM_NODE_ID",
            "ENGRAM_LISTEN",
            "ENGRAM_DATA_DIR",
            "ENGRAM_ADVERTISE_ADDR",
            "ENGRAM_PEERS",
            "ENGRAM_BOOTSTRAP",
            "ENGRAM_JOIN",
            "ENGRAM_POD_NAME",
            "ENGRAM_METRICS_LISTEN",
            "ENGRAM_TLS_CA",
            "ENGRAM_TLS_CERT",
            "ENGRAM_TLS_KEY",
            "ENGRAM_TLS_CLIENT_CA",
            "ENGRAM_HEALTH_LISTEN",
            "ENGRAM_KEY_FILE",
            "ENGRAM_MAX_TX_BYTES",
            "ENGRAM_WATCH_STALL_CUTOFF_MS",
            "ENGRAM_HEARTBEAT_INTERVAL_MS",
            "ENGRAM_ELECTION_TIMEOUT_MIN_MS",
            "ENGRAM_ELECTION_TIMEOUT_MAX_MS",
            "ENGRAM_SNAPSHOT_EVERY_ENTRIES",
            "ENGRAM_VERIFY_ON_START",
        ] {
            cmd.env_remove(var);
        }
        // The logs go to files, where terminal colour codes are noise.
        cmd.env("NO_COLOR", "1");
        let child = cmd
            .spawn()
            .with_context(|| format!("starting node {id} ({})", exe.display()))?;
        node.child = Some(child);
        Ok(())
    }

    /// SIGKILLs node `id` and reaps it: no shutdown hook runs, like a power cut of the process.
    pub fn kill(&mut self, id: u64) -> Result<()> {
        let node = self.node_mut(id)?;
        let mut child = node
            .child
            .take()
            .ok_or_else(|| anyhow!("node {id} is not running"))?;
        // `Child::kill` is SIGKILL on Unix.
        child.kill().with_context(|| format!("killing node {id}"))?;
        child.wait().with_context(|| format!("reaping node {id}"))?;
        Ok(())
    }

    /// Starts node `id` again with the same id, address and data directory.
    pub fn restart(&mut self, id: u64) -> Result<()> {
        self.spawn(id)
    }

    /// Fails if a node that should be running has exited, quoting its log.
    pub fn check_running(&mut self) -> Result<()> {
        for node in &mut self.nodes {
            if let Some(child) = &mut node.child
                && let Some(status) = child.try_wait().context("polling a node")?
            {
                node.child = None;
                bail!(
                    "node {} exited ({status}); last lines of {}:\n{}",
                    node.id,
                    node.log_path.display(),
                    node.log_tail(15)
                );
            }
        }
        Ok(())
    }

    /// Waits until every running node answers `Cluster.Status`.
    pub async fn wait_all_answer(&mut self, timeout: Duration) -> Result<Vec<pb::StatusResponse>> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running()?;
            let statuses = self.statuses().await;
            if statuses.iter().all(|(_, s)| s.is_ok()) {
                return Ok(statuses.into_iter().filter_map(|(_, s)| s.ok()).collect());
            }
            if Instant::now() >= deadline {
                let silent: Vec<String> = statuses
                    .iter()
                    .filter(|(_, s)| s.is_err())
                    .map(|(id, _)| format!("node {id}"))
                    .collect();
                bail!("{} did not answer within {timeout:?}", silent.join(", "));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `Cluster.Status` of every running node, asked concurrently.
    pub async fn statuses(&self) -> Vec<(u64, Result<pb::StatusResponse, engram_client::ClientError>)> {
        let calls = self
            .nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| async move { (n.id, n.probe.status().await) });
        futures::future::join_all(calls).await
    }

    /// Initialises the cluster through node 1 with every node as a voter, then waits until all
    /// running nodes agree on a leader that reports itself leader. Returns the leader's id.
    pub async fn init(&mut self, timeout: Duration) -> Result<u64> {
        self.init_with(timeout, None).await
    }

    /// [`LocalCluster::init`] in enforced mode when `admin` names the first administrator.
    pub async fn init_with(&mut self, timeout: Duration, admin: Option<(&str, [u8; 32])>) -> Result<u64> {
        let members = self.members();
        let first = self
            .nodes
            .first()
            .ok_or_else(|| anyhow!("an empty cluster cannot be initialised"))?;
        let init_client = Client::with_config(
            vec![first.endpoint()],
            ClientConfig {
                request_timeout: timeout,
                retry: RetryPolicy::never(),
                tls: self.tls.clone(),
                ..ClientConfig::default()
            },
        )?;
        init_client
            .init_with(&members, admin)
            .await
            .context("Cluster.Init on node 1")?;
        self.wait_for_leader(None, timeout).await
    }

    /// Waits until every running node names the same leader, other than `not`, and that leader
    /// reports the role Leader itself.
    pub async fn wait_for_leader(&mut self, not: Option<u64>, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running()?;
            let statuses = self.statuses().await;
            if let Some(leader) = agreed_leader(&statuses)
                && Some(leader) != not
            {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                let views: Vec<String> = statuses
                    .iter()
                    .map(|(id, s)| match s {
                        Ok(s) => format!("node {id}: {} leader {:?} term {}", s.role, s.leader_id, s.term),
                        Err(e) => format!("node {id}: {e}"),
                    })
                    .collect();
                bail!("no leader within {timeout:?} ({})", views.join("; "));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Kills every running node and reaps it.
    pub fn kill_all(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // Errors here mean the child is already gone; nothing is left to clean up.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// The leader every answering node names, if they all name the same one and it answered with
/// the role Leader.
pub fn agreed_leader(
    statuses: &[(u64, Result<pb::StatusResponse, engram_client::ClientError>)],
) -> Option<u64> {
    let mut leader = None;
    for (_, s) in statuses {
        let s = s.as_ref().ok()?;
        let l = s.leader_id?;
        if leader.is_some_and(|x| x != l) {
            return None;
        }
        leader = Some(l);
    }
    let leader = leader?;
    let says_leader = statuses
        .iter()
        .any(|(id, s)| *id == leader && s.as_ref().is_ok_and(|s| s.role.eq_ignore_ascii_case("leader")));
    says_leader.then_some(leader)
}
