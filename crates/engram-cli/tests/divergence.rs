//! Replicas that diverge are caught while they run. A cluster writes, stops, and is copied
//! twice; each copy runs on and writes transactions of its own, so the two copies share a prefix
//! and differ from the next entry on. Nodes 1 and 2 of one copy are then started with node 3
//! of the other: node 3 — whose chain verifies on its own — must raise the divergence alarm
//! naming exactly the first entry that differs, report not ready and refuse writes, while the
//! majority keeps taking them; `audit verify --each` must name the same entry.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, ClientConfig, ClientError, RetryPolicy};
use tonic::Code;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

/// Starts a cluster over `dir` (node directories `node1..3`), waits for a leader, writes
/// `count` transactions in namespace `ns`, returns the chain head index, and stops it.
async fn run_and_write(dir: &Path, ports: &[u16], ns: &str, count: i64, init: bool) -> u64 {
    let mut cluster = LocalCluster::start(Path::new(EXE), dir, ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(30)).await.unwrap();
    if init {
        cluster.init(Duration::from_secs(30)).await.unwrap();
    } else {
        cluster
            .wait_for_leader(None, Duration::from_secs(30))
            .await
            .unwrap();
    }
    let client = Client::with_config(cluster.endpoints(), ClientConfig::default()).unwrap();
    for n in 0..count {
        client.transact(&common::memory_tx(ns, n)).await.unwrap();
    }
    // Every node has applied everything before the cluster stops, so the copies agree on the
    // whole prefix.
    let head = client.head().await.unwrap().index;
    for endpoint in cluster.endpoints() {
        let node = Client::with_config(vec![endpoint], ClientConfig::default()).unwrap();
        let start = Instant::now();
        while node.status().await.unwrap().applied_index < head && start.elapsed() < Duration::from_secs(20) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    cluster.kill_all();
    head
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_divergent_replica_raises_the_alarm_at_the_first_divergent_entry() {
    let work = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let base = work.path().join("base");
    let shared_head = run_and_write(&base, &ports, "div/base", 4, true).await;
    let (x, y) = (work.path().join("x"), work.path().join("y"));
    common::copy_dir(&base, &x);
    common::copy_dir(&base, &y);
    run_and_write(&x, &ports, "div/x", 3, false).await;
    run_and_write(&y, &ports, "div/y", 3, false).await;

    // Nodes 1 and 2 from copy x, node 3 from copy y; node 3 checks often.
    let mixed = work.path().join("mixed");
    common::copy_dir(&x.join("node1"), &mixed.join("node1"));
    common::copy_dir(&x.join("node2"), &mixed.join("node2"));
    common::copy_dir(&y.join("node3"), &mixed.join("node3"));
    let args = ["--divergence-check-ms", "300"].map(String::from);
    let mut cluster = LocalCluster::start(Path::new(EXE), &mixed, &ports, &args).unwrap();
    cluster.wait_all_answer(Duration::from_secs(30)).await.unwrap();
    let endpoints = cluster.endpoints();
    let only = |i: usize| {
        Client::with_config(
            vec![endpoints[i].clone()],
            ClientConfig {
                retry: RetryPolicy::never(),
                ..ClientConfig::default()
            },
        )
        .unwrap()
    };
    let first_divergent = shared_head + 1;

    // Node 3 refuses writes, naming the first divergent entry.
    let node3 = only(2);
    let start = Instant::now();
    let refusal = loop {
        match node3.transact(&common::memory_tx("div/late", 0)).await {
            Err(ClientError::Rpc {
                code: Code::FailedPrecondition,
                message,
                ..
            }) => break message,
            other => {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "node 3 never raised the alarm; last answer {other:?}\n{}",
                    cluster.node(3).unwrap().log_tail(30)
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(
        refusal.contains(&format!("at entry {first_divergent}")),
        "{refusal} (expected entry {first_divergent})"
    );
    // Health is re-evaluated every 500 ms.
    let start = Instant::now();
    let health = loop {
        let out = Command::new(EXE)
            .args(["-e", &endpoints[2], "health", "--service", "engram.ready"])
            .output()
            .unwrap();
        if !out.status.success() || start.elapsed() > Duration::from_secs(10) {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!health.status.success(), "node 3 still reports ready");
    assert!(String::from_utf8_lossy(&health.stdout).contains("NOT_SERVING"));
    assert!(cluster.node(3).unwrap().log_tail(200).contains("DIVERGENCE"));

    // The majority keeps taking writes.
    let majority = Client::with_config(endpoints[..2].to_vec(), ClientConfig::default()).unwrap();
    majority
        .transact(&common::memory_tx("div/after", 1))
        .await
        .unwrap();

    // The offline-style comparison names the same entry.
    let out = common::verify_each(EXE, &endpoints);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("chains diverge at entry {first_divergent}")),
        "{stdout}"
    );
}
