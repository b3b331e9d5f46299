//! The offline readers of a stopped node's data directory (`audit verify --data-dir`, `audit
//! export --data-dir`) change nothing in it: no file is added, removed, renamed, grown or
//! rewritten, whether the node was killed with its last writes only in the write-ahead log or
//! stopped cleanly, and every entry the node acknowledged is still verified. A running node's
//! directory is refused with "stop it first".
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use common::{run, text};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::Client;
use serde_json::Value as Json;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

/// One file of a directory tree as an evidence log would record it: its path under the root,
/// its length, its modification time and its whole contents (kept, not hashed: the stores are
/// small, and equal bytes are what a hash would stand for).
#[derive(PartialEq, Eq, Debug)]
struct FileRecord {
    path: PathBuf,
    len: u64,
    modified: SystemTime,
    contents: Vec<u8>,
}

/// Every file under `root`, in path order; the list itself is part of what is compared.
fn record(root: &Path) -> Vec<FileRecord> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<FileRecord>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(FileRecord {
                    path: path.strip_prefix(root).unwrap().to_path_buf(),
                    len: meta.len(),
                    modified: meta.modified().unwrap(),
                    contents: std::fs::read(&path).unwrap(),
                });
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Fails naming what changed between two records of the same tree.
fn assert_unchanged(before: &[FileRecord], after: &[FileRecord], what: &str) {
    if before == after {
        return;
    }
    let names = |r: &[FileRecord]| -> Vec<String> {
        r.iter()
            .map(|f| format!("{} ({} bytes)", f.path.display(), f.len))
            .collect()
    };
    let changed: Vec<String> = before
        .iter()
        .filter(|b| after.iter().any(|a| a.path == b.path && a != *b))
        .map(|f| f.path.display().to_string())
        .collect();
    panic!(
        "{what} changed the data directory\nbefore: {:#?}\nafter: {:#?}\nrewritten: {changed:?}",
        names(before),
        names(after)
    );
}

/// Runs every offline reader on `data_dir`, asserting after each that nothing in it changed,
/// and that the verifier saw the chain up to at least `acked_index`.
fn read_offline_and_compare(data_dir: &Path, work: &Path, acked_index: u64) {
    let before = record(data_dir);
    let dir = data_dir.to_str().unwrap();

    let out = run(&["--json", "audit", "verify", "--data-dir", dir, "--all"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    let doc: Json = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(doc["verdict"], "verified", "{doc}");
    let head = doc["head_index"].as_u64().unwrap();
    assert!(
        head >= acked_index,
        "the verifier's chain ends at {head}, before the acknowledged entry {acked_index}: {doc}"
    );
    assert_eq!(doc["unattested"], Json::Null, "{doc}");
    assert_unchanged(&before, &record(data_dir), "audit verify --data-dir --json");

    let out = run(&["audit", "verify", "--data-dir", dir, "--all"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // The verdict is the first line.
    let first = stdout.lines().next().unwrap_or_default();
    assert!(first.starts_with(&format!("verified: {dir}: ")), "{stdout}");
    assert!(first.ends_with("store scrub clean"), "{stdout}");
    assert_unchanged(&before, &record(data_dir), "audit verify --data-dir");

    let export = work.join(format!(
        "{}.engram-audit",
        data_dir.file_name().unwrap().to_str().unwrap()
    ));
    let out = run(&[
        "audit",
        "export",
        "--data-dir",
        dir,
        "--out",
        export.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_unchanged(&before, &record(data_dir), "audit export --data-dir");
    let out = run(&["--json", "audit", "verify", export.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let doc: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["head_index"].as_u64().unwrap() >= acked_index, "{doc}");
}

/// Writes `count` transactions from `from` through `client`; returns the highest audit index
/// acknowledged.
async fn write(client: &Client, from: i64, count: i64) -> u64 {
    let mut acked = 0;
    for n in from..from + count {
        let receipt = client
            .transact(&common::memory_tx("readonly/test", n))
            .await
            .unwrap();
        acked = acked.max(receipt.audit_index);
    }
    acked
}

/// Sends SIGTERM to node `id` (a clean stop: its shutdown runs) and waits until it exits.
async fn stop_cleanly(cluster: &mut LocalCluster, id: u64) {
    let pid = cluster.node(id).unwrap().pid().unwrap();
    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // `check_running` reaps the node and reports it once it has exited.
    while cluster.check_running().is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {id} did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_readers_leave_a_stopped_nodes_directory_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(1).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let data_dir = cluster.node(1).unwrap().data_dir.clone();

    // A running node's directory is refused, and nothing in it is touched by the attempt.
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    write(&client, 0, 5).await;
    let out = run(&["audit", "verify", "--data-dir", data_dir.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("still running? stop it first"), "{stderr}");
    assert!(stderr.contains("which holds its LOCK"), "{stderr}");
    assert!(
        text(&out.stdout).starts_with("FAILED (unreadable): "),
        "{}",
        text(&out.stdout)
    );

    // Killed: the last writes are only in the write-ahead log (a node flushes its 32 MiB
    // memtable long after these few rows), and the LOCK file is left behind, unlocked.
    let acked = write(&client, 5, 60).await;
    drop(client);
    cluster.kill(1).unwrap();
    let killed = dir.path().join("killed-copy");
    common::copy_dir(&data_dir, &killed);
    let wal_bytes: u64 = record(&killed.join("db"))
        .iter()
        .filter(|f| f.path.extension().is_some_and(|x| x == "log"))
        .map(|f| f.len)
        .sum();
    assert!(wal_bytes > 0, "the killed node left no write-ahead log");
    assert!(killed.join("db").join("LOCK").exists());
    read_offline_and_compare(&killed, dir.path(), acked);

    // Stopped cleanly, after more writes.
    cluster.restart(1).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster
        .wait_for_leader(None, Duration::from_secs(30))
        .await
        .unwrap();
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let acked = write(&client, 65, 40).await;
    drop(client);
    stop_cleanly(&mut cluster, 1).await;
    let stopped = dir.path().join("stopped-copy");
    common::copy_dir(&data_dir, &stopped);
    read_offline_and_compare(&stopped, dir.path(), acked);
    // The node's own directory too, not only a copy.
    read_offline_and_compare(&data_dir, dir.path(), acked);
}
