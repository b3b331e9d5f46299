//! Self-forming clusters as a container orchestrator runs them: every node started with the
//! same `--bootstrap --join --peer <initial voters>`, a fourth node joining by itself, readiness
//! through the gRPC health service, `cluster shrink` removing the extra node only when that is
//! safe, and a restart that rejoins without re-initialising.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::Client;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

fn engram(endpoint: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(EXE)
        .args(["-e", endpoint])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `cond` every 200 ms until it holds or `limit` passes.
async fn eventually(what: &str, limit: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what}: not within {limit:?}");
}

async fn member_ids(client: &Client) -> Vec<(u64, bool)> {
    match client.status().await {
        Ok(s) if s.leader_id.is_some() => s.members.iter().map(|m| (m.id, m.voter)).collect(),
        _ => Vec::new(),
    }
}

/// Waits until nodes 1..=`voters` are the members, all voters.
async fn voters_become(client: &Client, voters: u64, what: &str) {
    let expected: Vec<(u64, bool)> = (1..=voters).map(|id| (id, true)).collect();
    eventually(what, Duration::from_secs(60), async || {
        let mut m = member_ids(client).await;
        m.sort();
        m == expected
    })
    .await;
}

/// Starts node 4 on `port`, logging to DIR/node4.log, with `args` after its own flags.
fn spawn_node4(dir: &Path, port: u16, args: &[String]) -> KillOnDrop {
    let child = Command::new(EXE)
        .args(["serve", "--id", "4", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--data-dir", dir.join("node4").to_str().unwrap()])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("node4.log")).unwrap())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_form_join_report_readiness_and_shrink_safely() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(4).unwrap();
    let peers = (0..3)
        .map(|i| format!("{}=127.0.0.1:{}", i + 1, ports[i]))
        .collect::<Vec<_>>()
        .join(",");
    let args = ["--bootstrap", "--join", "--peer", &peers].map(String::from);
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports[..3], &args).unwrap();
    // Node 4 is not among the initial voters; it also serves metrics.
    let metrics_port = free_ports(1).unwrap()[0];
    let metrics = [
        "--metrics-listen".to_string(),
        format!("127.0.0.1:{metrics_port}"),
    ];
    let _node4 = spawn_node4(dir.path(), ports[3], &[&metrics[..], &args[..]].concat());
    let client = Client::connect(cluster.endpoints()[..3].to_vec()).await.unwrap();
    voters_become(
        &client,
        4,
        "three voters bootstrap and the fourth joins as a voter",
    )
    .await;

    let four = format!("127.0.0.1:{}", ports[3]);
    eventually("node 4 is ready", Duration::from_secs(30), async || {
        engram(&four, &["health", "--service", "engram.ready"]).0 == 0
    })
    .await;
    let (code, out, _) = engram(&four, &["health", "--service", "engram.live"]);
    assert_eq!(
        (code, out.trim_end()),
        (0, format!("{four} engram.live: SERVING").as_str())
    );
    let (code, _, err) = engram("127.0.0.1:1", &["health", "--timeout-ms", "500"]);
    assert_eq!(code, 1, "an unreachable node is not healthy: {err}");
    let metrics = common::http_get(metrics_port, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200 OK"), "{metrics}");
    for line in [
        "engram_up{node_id=\"4\"} 1",
        "engram_ready{node_id=\"4\"} 1",
        "engram_raft_members{node_id=\"4\"} 4",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    assert!(common::http_get(metrics_port, "/other").starts_with("HTTP/1.1 404"));

    // Shrinking to more nodes than there are is a no-op (a scale-up runs the same hook);
    // shrinking past a node that does not answer is refused and removes nothing.
    let one = cluster.node(1).unwrap().endpoint();
    let (code, out, err) = engram(&one, &["cluster", "shrink", "--to", "5"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing to remove"), "{out}");
    cluster.kill(3).unwrap();
    let (code, out, err) = engram(
        &one,
        &["--retry-budget-secs", "1", "cluster", "shrink", "--to", "3"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("node 3 does not answer"), "{err}");
    assert_eq!(member_ids(&client).await.len(), 4);
    cluster.restart(3).unwrap();
    eventually(
        "node 3 is back and caught up",
        Duration::from_secs(30),
        async || engram(&cluster.node(3).unwrap().endpoint(), &["health"]).0 == 0,
    )
    .await;

    // Now it is safe: node 4 goes, and a second run has nothing to do.
    let (code, out, err) = engram(&one, &["cluster", "shrink", "--to", "3"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("node 4 removed"), "{out}");
    let (code, out, _) = engram(&one, &["cluster", "shrink", "--to", "3"]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing to remove"), "{out}");
    let mut m = member_ids(&client).await;
    m.sort();
    assert_eq!(m, [(1, true), (2, true), (3, true)]);

    // A restarted node rejoins the chain it has; nothing re-initialises.
    let head = client.head().await.unwrap().index;
    cluster.kill(1).unwrap();
    cluster.restart(1).unwrap();
    eventually("node 1 is ready again", Duration::from_secs(30), async || {
        engram(&one, &["health"]).0 == 0
    })
    .await;
    assert!(client.head().await.unwrap().index >= head, "the chain only grows");
    let (code, _, err) = engram(&one, &["audit", "verify"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = engram(&one, &["--json", "cluster", "status"]);
    assert_eq!(code, 0);
    assert!(!out.contains("\"initialized\": false"), "{out}");
    cluster.kill_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_an_enforced_cluster_only_with_a_signed_request() {
    let dir = tempfile::tempdir().unwrap();
    let admin_key = dir.path().join("admin.key");
    let (code, out, err) = engram(
        "127.0.0.1:1",
        &[
            "--json",
            "agent",
            "keygen",
            "admin",
            "--out",
            admin_key.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let public: serde_json::Value = serde_json::from_str(&out).unwrap();
    let admin = format!("admin={}", public["public_key"].as_str().unwrap());
    let ports = free_ports(4).unwrap();
    let peers = (0..3)
        .map(|i| format!("{}=127.0.0.1:{}", i + 1, ports[i]))
        .collect::<Vec<_>>()
        .join(",");
    let args = [
        "--bootstrap",
        "--join",
        "--peer",
        &peers,
        "--security",
        "enforced",
        "--admin",
        &admin,
    ]
    .map(String::from);
    let _cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports[..3], &args).unwrap();
    // Node 4's key file does not exist yet: it asks unsigned, and is refused.
    let join_key = dir.path().join("operator.key");
    let join = [
        "--join-agent-key".to_string(),
        join_key.to_str().unwrap().to_string(),
    ];
    let _node4 = spawn_node4(dir.path(), ports[3], &[&join[..], &args[..]].concat());
    let config = engram_client::ClientConfig {
        agent: Some(std::sync::Arc::new(
            engram_access::AgentKey::load(&admin_key).unwrap(),
        )),
        ..engram_client::ClientConfig::default()
    };
    let client = Client::with_config(
        (0..3).map(|i| format!("127.0.0.1:{}", ports[i])).collect(),
        config,
    )
    .unwrap();
    voters_become(&client, 3, "the three voters form the enforced cluster").await;
    eventually(
        "node 4 is refused while unsigned",
        Duration::from_secs(30),
        async || {
            let log = std::fs::read_to_string(dir.path().join("node4.log")).unwrap_or_default();
            log.contains("asking unsigned")
                && log.contains("not added yet")
                && log.contains("Unauthenticated")
        },
    )
    .await;
    let mut m = member_ids(&client).await;
    m.sort();
    assert_eq!(
        m,
        [(1, true), (2, true), (3, true)],
        "an unsigned join must not be admitted"
    );

    // The key appears (as a Secret would): the next attempt is signed and admitted.
    std::fs::copy(&admin_key, &join_key).unwrap();
    voters_become(&client, 4, "node 4 joins once its key is there").await;
}
