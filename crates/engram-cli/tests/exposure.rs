//! Open mode serves loopback only. Nodes listen on 0.0.0.0 and are called through this host's
//! own non-loopback address (the one a UDP socket would route through), so the server sees a
//! remote peer:
//!
//! - a node that would record open mode beyond loopback without `--insecure-open` refuses to
//!   start (`--bootstrap` without `--security enforced`, or a chain that records open mode);
//! - an uninitialised node without the flag serves a remote caller only `Status` and an `Init`
//!   asking for enforced mode (data calls get UNAVAILABLE, which clients retry, since a cluster
//!   bootstrapped as enforced is one moment from serving them; the message says how to
//!   enforce), then the enforced cluster's own checks apply;
//! - with `--insecure-open`, data calls from a remote caller work as before, but membership,
//!   key and policy calls are PERMISSION_DENIED, naming how to enable enforced mode, and the
//!   chain does not move; from loopback they are served; `/metrics` says
//!   `engram_insecure_open 1`.
//!
//! A host whose only interface is loopback cannot make a remote peer: the tests that need one
//! say so and check only what needs none (the pure decision is unit-tested in
//! `engram-server`'s `services::exposure`).
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::net::{IpAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engram_access::{AgentKey, Principal};
use engram_cli::local_cluster::free_ports;
use engram_client::{Client, ClientConfig, pb};
use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, TxOp, TxRequest, Value};
use tonic::Code;
use tonic::transport::Channel;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

/// This host's address on the interface a datagram to a documentation-only address would leave
/// by (no packet is sent: connecting a UDP socket only picks the route), if it is not loopback.
fn non_loopback_address() -> Option<IpAddr> {
    let socket = UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

struct Node(std::process::Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `engram serve --id 1 --listen 0.0.0.0:PORT` on `data`, logging to `log`, with `args`.
fn serve(data: &Path, port: u16, log: &Path, args: &[&str]) -> Node {
    let child = Command::new(EXE)
        .args(["serve", "--id", "1", "--listen", &format!("0.0.0.0:{port}")])
        .args(["--advertise", &format!("127.0.0.1:{port}")])
        .args(["--data-dir", data.to_str().unwrap()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Node(child)
}

/// Waits until `node` exits by itself (a refused start), returning what it logged.
fn refused_start(mut node: Node, log: &Path) -> String {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(status) = node.0.try_wait().unwrap() {
            assert!(!status.success(), "the node exited cleanly");
            return std::fs::read_to_string(log).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "the node did not refuse to start: {}",
        std::fs::read_to_string(log).unwrap()
    );
}

async fn channel(host: &str, port: u16) -> Channel {
    let start = Instant::now();
    loop {
        match Channel::from_shared(format!("http://{host}:{port}"))
            .unwrap()
            .connect()
            .await
        {
            Ok(ch) => return ch,
            Err(e) if start.elapsed() > Duration::from_secs(30) => panic!("{host}:{port}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn expect_code<T: std::fmt::Debug>(what: &str, answer: Result<T, tonic::Status>, code: Code) -> String {
    match answer {
        Err(status) if status.code() == code => status.message().to_string(),
        other => panic!("{what}: expected {code:?}, got {other:?}"),
    }
}

/// A one-datom transaction by `agent`.
fn note(agent: &str, n: i64) -> TxRequest {
    TxRequest::data(
        Namespace::new("team/notes").unwrap(),
        vec![TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp("n".into()),
            attribute: Attribute::new(":note/n").unwrap(),
            value: Value::I64(n),
            valid_from_ns: None,
            valid_to_ns: None,
        }],
        Provenance {
            agent: agent.into(),
            confidence: 1.0,
            ..Provenance::default()
        },
    )
}

/// (chain index, chain head) as node 1 reports it over loopback.
async fn chain(port: u16) -> (u64, Vec<u8>) {
    let mut c = pb::cluster_client::ClusterClient::new(channel("127.0.0.1", port).await);
    let s = c.status(pb::StatusRequest {}).await.unwrap().into_inner();
    (s.chain_index, s.chain_head)
}

/// `client.transact(tx)`, retried while the cluster is still recording its security mode.
async fn transact(client: &Client, tx: &TxRequest) {
    let start = Instant::now();
    loop {
        match client.transact(tx).await {
            Ok(_) => return,
            Err(e) if e.code() == Some(Code::Unavailable) && start.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("transact: {e}"),
        }
    }
}

async fn wait_leader(port: u16) {
    let start = Instant::now();
    let mut c = pb::cluster_client::ClusterClient::new(channel("127.0.0.1", port).await);
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(s) = c.status(pb::StatusRequest {}).await
            && s.get_ref().leader_id.is_some()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no leader within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninitialised_node_beyond_loopback_serves_only_the_way_to_enforced_mode() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_ports(1).unwrap()[0];

    // Would record open mode itself: refused at start, saying how to enforce or opt in.
    let log = dir.path().join("bootstrap-open.log");
    let why = refused_start(
        serve(&dir.path().join("refused"), port, &log, &["--bootstrap"]),
        &log,
    );
    assert!(why.contains("--insecure-open"), "{why}");
    assert!(why.contains("--security enforced"), "{why}");

    let Some(ip) = non_loopback_address() else {
        println!(
            "SKIPPED (per-request checks): this host has no non-loopback address, so no caller here is remote"
        );
        return;
    };
    let remote = ip.to_string();
    println!("calling the node through {remote}, a non-loopback address of this host");
    let log = dir.path().join("node.log");
    let _node = serve(&dir.path().join("node"), port, &log, &[]);
    let remote_ch = channel(&remote, port).await;
    let mut memory = pb::memory_client::MemoryClient::new(remote_ch.clone());
    let mut cluster = pb::cluster_client::ClusterClient::new(remote_ch.clone());

    // Data calls from beyond loopback: refused, saying how to enforce or opt in.
    let message = expect_code(
        "a remote Get on an uninitialised node",
        memory.get(pb::GetRequest::default()).await,
        Code::Unavailable,
    );
    assert!(message.contains("not initialised"), "{message}");
    assert!(
        message.contains("engram cluster init --security enforced --admin-key"),
        "{message}"
    );
    assert!(message.contains("--insecure-open"), "{message}");
    assert!(message.contains(&remote), "{message}");
    // Peers need Status to initialise and join.
    let status = cluster.status(pb::StatusRequest {}).await.unwrap().into_inner();
    assert!(!status.initialized);

    // Open mode is not recorded beyond loopback without the flag, whoever asks.
    let open = pb::InitRequest {
        security: "open".into(),
        ..Default::default()
    };
    let message = expect_code(
        "a remote open Init",
        cluster.init(open.clone()).await,
        Code::FailedPrecondition,
    );
    assert!(message.contains("--security enforced"), "{message}");
    let mut local = pb::cluster_client::ClusterClient::new(channel("127.0.0.1", port).await);
    expect_code(
        "a loopback open Init",
        local.init(open).await,
        Code::FailedPrecondition,
    );

    // An Init asking for enforced mode is taken from beyond loopback.
    let admin = AgentKey::from_seed(Principal::new("root").unwrap(), [7; 32]);
    cluster
        .init(pb::InitRequest {
            security: "enforced".into(),
            admin: "root".into(),
            admin_public_key: admin.public().0.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    wait_leader(port).await;

    // Enforced: the cluster's own checks apply to remote callers, and signed calls are served.
    expect_code(
        "an unsigned remote AddNode in enforced mode",
        cluster
            .add_node(pb::AddNodeRequest {
                id: 9,
                addr: "127.0.0.1:1".into(),
                learner_only: true,
            })
            .await,
        Code::Unauthenticated,
    );
    let signed = Client::with_config(
        vec![format!("{remote}:{port}")],
        ClientConfig {
            agent: Some(std::sync::Arc::new(admin)),
            ..ClientConfig::default()
        },
    )
    .unwrap();
    transact(&signed, &note("root", 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_open_serves_data_beyond_loopback_but_never_membership_or_keys() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(2).unwrap();
    let (port, metrics_port) = (ports[0], ports[1]);
    let data = dir.path().join("node");
    let log = dir.path().join("node.log");
    let metrics = format!("127.0.0.1:{metrics_port}");
    let node = serve(
        &data,
        port,
        &log,
        &["--bootstrap", "--insecure-open", "--metrics-listen", &metrics],
    );
    wait_leader(port).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("WARN") && text.contains("--insecure-open"),
        "{text}"
    );
    let scrape = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(
        scrape.contains("engram_insecure_open{node_id=\"1\"} 1"),
        "{scrape}"
    );

    if let Some(ip) = non_loopback_address() {
        let remote = ip.to_string();
        println!("calling the node through {remote}, a non-loopback address of this host");
        // Data calls from beyond loopback work as before.
        let client = Client::with_config(vec![format!("{remote}:{port}")], ClientConfig::default()).unwrap();
        transact(&client, &note("anyone", 1)).await;

        let before = chain(port).await;
        let ch = channel(&remote, port).await;
        let mut cluster = pb::cluster_client::ClusterClient::new(ch.clone());
        let mut access = pb::access_client::AccessClient::new(ch);
        let refusals = [
            (
                "AddNode",
                cluster
                    .add_node(pb::AddNodeRequest {
                        id: 9,
                        addr: "127.0.0.1:1".into(),
                        learner_only: true,
                    })
                    .await
                    .map(|_| ()),
            ),
            (
                "RemoveNode",
                cluster
                    .remove_node(pb::RemoveNodeRequest { id: 1 })
                    .await
                    .map(|_| ()),
            ),
            (
                "RotateKey",
                cluster
                    .rotate_key(pb::RotateKeyRequest { node_id: 1 })
                    .await
                    .map(|_| ()),
            ),
            (
                "RevokeKey",
                cluster
                    .revoke_key(pb::RevokeKeyRequest {
                        node_id: 1,
                        key_id: Vec::new(),
                    })
                    .await
                    .map(|_| ()),
            ),
            (
                "AddAgent",
                access
                    .add_agent(pb::AddAgentRequest {
                        name: "mallory".into(),
                        public_key: vec![1; 32],
                    })
                    .await
                    .map(|_| ()),
            ),
        ];
        for (call, answer) in refusals {
            let message = expect_code(call, answer, Code::PermissionDenied);
            assert!(message.contains("open mode"), "{call}: {message}");
            assert!(message.contains("loopback"), "{call}: {message}");
            assert!(
                message.contains("engram cluster init --security enforced --admin-key"),
                "{call}: {message}"
            );
        }
        assert_eq!(chain(port).await, before, "a refused call changed the chain");
    } else {
        println!(
            "SKIPPED (remote calls): this host has no non-loopback address, so no caller here is remote"
        );
    }

    // From loopback, a key change is served.
    let before = chain(port).await;
    let mut local = pb::cluster_client::ClusterClient::new(channel("127.0.0.1", port).await);
    local
        .rotate_key(pb::RotateKeyRequest { node_id: 1 })
        .await
        .unwrap();
    assert!(chain(port).await.0 > before.0, "the rotation is in the chain");

    // Restarted without the flag, a node whose chain records open mode refuses to start.
    drop(node);
    let log = dir.path().join("restart.log");
    let why = refused_start(serve(&data, port, &log, &[]), &log);
    assert!(why.contains("its chain records open mode"), "{why}");
    assert!(why.contains("--insecure-open"), "{why}");
}
