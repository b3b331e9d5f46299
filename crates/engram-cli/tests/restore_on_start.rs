//! `engram serve --restore-from FILE`, the way a StatefulSet runs it (every pod the same
//! settings: --bootstrap, --join, the peers, the backup): the restoring node builds its data
//! directory from the backup on its first start (a volume's mount point holding `lost+found`),
//! the other node joins it, a restart starts from the store, and a node whose volume was lost
//! is refused a second restore beside the running cluster.
//!
//! The backup is `fixtures/backup-eb760e5.backup` (a one-node cluster's genesis and 20
//! transactions in `fixture/a`, node 1's key beside it; see `earlier_backup.rs`).
#![allow(clippy::unwrap_used)] // test set-up: a failed step should stop the test loudly

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{fixture, json_of, run, text};
use engram_cli::local_cluster::free_ports;

const EXE: &str = env!("CARGO_BIN_EXE_engram");
/// The fixture chain's head (`earlier_backup.rs`).
const HEAD_INDEX: u64 = 22;

struct Node {
    child: Child,
    log: PathBuf,
}

impl Node {
    /// Waits for the process to exit (it should, refusing to start) and returns its log.
    fn exits_with_log(mut self) -> (std::process::ExitStatus, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, std::fs::read_to_string(&self.log).unwrap_or_default());
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the node kept running: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One pod of the set: node `id` on `addrs[id - 1]`, signing with `key`, every node's settings
/// alike but for the id.
fn pod(id: u64, addrs: &[String], data: &Path, key: &Path, log: PathBuf) -> Node {
    let peers: Vec<String> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect();
    let child = Command::new(EXE)
        .args([
            "serve",
            "--id",
            &id.to_string(),
            "--listen",
            &addrs[id as usize - 1],
        ])
        .arg("--data-dir")
        .arg(data)
        .arg("--key-file")
        .arg(key)
        .args(["--bootstrap", "--join", "--peer", &peers.join(",")])
        .args(["--restore-from", &fixture("backup-eb760e5.backup")])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Node { child, log }
}

fn status_of(addr: &str) -> Option<serde_json::Value> {
    let out = run(&["--json", "-e", addr, "cluster", "status"]);
    out.status.success().then(|| json_of(&out))
}

/// Waits until `addr` reports `voters` voters and chain index at least `index`.
fn wait_for(addr: &str, voters: usize, index: u64, logs: &[&Node]) {
    let started = Instant::now();
    loop {
        let status = status_of(addr);
        let seen = status.as_ref().map(|s| {
            let node = s.as_array().and_then(|n| n.first()).cloned().unwrap_or_default();
            let members = node["members"].as_array().cloned().unwrap_or_default();
            let count = members.iter().filter(|m| m["voter"] == true).count();
            (count, node["chain_index"].as_u64().unwrap_or(0))
        });
        if let Some((count, at)) = seen
            && count == voters
            && at >= index
        {
            return;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let logs: String = logs
                .iter()
                .map(|n| {
                    format!(
                        "--- {}\n{}\n",
                        n.log.display(),
                        std::fs::read_to_string(&n.log).unwrap_or_default()
                    )
                })
                .collect();
            panic!("{addr} did not reach {voters} voters at index {index}: {status:?}\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_pod_restores_its_volume_on_first_start_the_others_join_and_a_second_restore_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(2).unwrap();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let data = |id: u64| dir.path().join(format!("node{id}"));
    let log = |id: u64, n: u32| dir.path().join(format!("node{id}.{n}.log"));
    // Node 1's volume, freshly formatted: it holds lost+found.
    std::fs::create_dir_all(data(1).join("lost+found")).unwrap();
    let key1 = PathBuf::from(fixture("backup-eb760e5.node.key"));
    let key2 = dir.path().join("node2.key");
    std::fs::write(
        &key2,
        [9u8; 32].iter().map(|b| format!("{b:02x}")).collect::<String>(),
    )
    .unwrap();

    let node1 = pod(1, &addrs, &data(1), &key1, log(1, 1));
    let node2 = pod(2, &addrs, &data(2), &key2, log(2, 1));
    // Node 1 is the backup's cluster, and node 2 joins it (its restore setting ignored).
    wait_for(&addrs[0], 2, HEAD_INDEX, &[&node1, &node2]);
    let held: Vec<String> = std::fs::read_dir(data(1))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        held.contains(&"lost+found".to_string()) && !held.contains(&".restoring".to_string()),
        "{held:?}"
    );
    let said = std::fs::read_to_string(&node2.log).unwrap();
    assert!(said.contains("another node restores from the backup"), "{said}");
    // The backup's data is there, on both nodes.
    for addr in &addrs {
        let found = run(&[
            "--json",
            "-e",
            addr,
            "find",
            "--ns",
            "fixture/a",
            "--attribute",
            ":note/n",
        ]);
        assert!(found.status.success(), "{}", text(&found.stderr));
        assert!(
            text(&found.stdout).contains("\"i64\": 20"),
            "{}",
            text(&found.stdout)
        );
    }

    // A restart of node 1 starts from its store: no second restore.
    drop(node1);
    let node1 = pod(1, &addrs, &data(1), &key1, log(1, 2));
    wait_for(&addrs[0], 2, HEAD_INDEX, &[&node1, &node2]);
    let said = std::fs::read_to_string(&node1.log).unwrap();
    assert!(said.contains("holds a store already"), "{said}");

    // Node 1's volume is lost while node 2 runs: restoring beside it would fork the chain, so
    // the node refuses to start, and leaves the new volume as it found it.
    drop(node1);
    std::fs::remove_dir_all(data(1)).unwrap();
    std::fs::create_dir_all(data(1).join("lost+found")).unwrap();
    let refused = pod(1, &addrs, &data(1), &key1, log(1, 3));
    let (status, said) = refused.exits_with_log();
    assert!(!status.success(), "{said}");
    assert!(
        said.contains("peer 2 at") && said.contains("would fork its chain"),
        "{said}"
    );
    let held: Vec<String> = std::fs::read_dir(data(1))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(held, ["lost+found"]);
    drop(node2);
}
