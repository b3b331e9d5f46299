//! `engram jobs` on a real 3-node cluster: each node records the background work it ran — the
//! snapshots it built, its divergence checks, its search index's first feed, a backup it
//! served — with start, end, outcome and figures, newest first, and answers for itself; a job
//! kind that does not exist is refused with the kinds it could be.
#![allow(clippy::unwrap_used)] // test set-up: a failed step should stop the test loudly

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{json_of, memory_tx, run, text};
use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, ClientConfig};

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "ops/jobs";

/// `engram -e ENDPOINTS jobs ARGS --json`, as JSON, or a panic with what it printed.
fn jobs(endpoints: &[String], args: &[&str]) -> serde_json::Value {
    let mut cmd: Vec<&str> = Vec::new();
    for e in endpoints {
        cmd.extend(["-e", e]);
    }
    cmd.push("jobs");
    cmd.extend(args);
    cmd.push("--json");
    let out = run(&cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    json_of(&out)
}

/// The jobs of `kind` the node at position `i` of the answer listed.
fn of_kind<'a>(answer: &'a serde_json::Value, i: usize, kind: &str) -> Vec<&'a serde_json::Value> {
    answer["nodes"][i]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["kind"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_lists_the_background_work_it_ran() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let extra: Vec<String> = ["--snapshot-every-entries", "10", "--divergence-check-ms", "300"]
        .map(String::from)
        .to_vec();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &extra).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let endpoints = cluster.endpoints();
    let client = Client::with_config(endpoints.clone(), ClientConfig::default()).unwrap();
    for n in 0..25 {
        client.transact(&memory_tx(NS, n)).await.unwrap();
    }

    // Every node builds its own snapshots and checks its chain against its peers'.
    let deadline = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        let answer = jobs(&endpoints, &[]);
        let ready = (0..3).all(|i| {
            of_kind(&answer, i, "snapshot-build")
                .iter()
                .any(|j| j["outcome"] == "done")
                && of_kind(&answer, i, "divergence-check")
                    .iter()
                    .any(|j| j["outcome"] == "done" && j["figures"]["agreeing"] == 2)
        });
        if ready {
            break answer;
        }
        assert!(Instant::now() < deadline, "jobs never listed: {answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for i in 0..3 {
        let node = &answer["nodes"][i];
        assert_eq!(
            node["node_id"],
            (i + 1) as u64,
            "each node answers for itself: {node}"
        );
        let listed = node["jobs"].as_array().unwrap();
        let seqs: Vec<u64> = listed.iter().map(|j| j["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] > w[1]), "newest first: {seqs:?}");
        let build = of_kind(&answer, i, "snapshot-build")
            .into_iter()
            .find(|j| j["outcome"] == "done")
            .unwrap();
        assert!(build["figures"]["bytes"].as_u64().unwrap() > 0, "{build}");
        assert!(
            build["figures"]["last_log_index"].as_u64().unwrap() >= 10,
            "{build}"
        );
        assert!(
            build["ended_ns"].as_i64().unwrap() >= build["started_ns"].as_i64().unwrap(),
            "{build}"
        );
        let check = &of_kind(&answer, i, "divergence-check")[0];
        assert_eq!(check["figures"]["members"], 3, "{check}");
        assert_eq!(check["figures"]["differing"], 0, "{check}");
        let rebuild = of_kind(&answer, i, "search-rebuild");
        assert!(
            rebuild.iter().any(|j| j["outcome"] == "done"),
            "the search index's first feed is recorded: {node}"
        );
    }

    // One kind only, and a limit: once node 1 has run several checks, the newest one.
    let checks = loop {
        let only = jobs(&endpoints[..1], &["--kind", "divergence-check"]);
        let listed = only["nodes"][0]["jobs"].as_array().unwrap().clone();
        assert!(listed.iter().all(|j| j["kind"] == "divergence-check"), "{only}");
        if listed.len() >= 2 {
            break listed;
        }
        assert!(Instant::now() < deadline, "one divergence check only: {only}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let newest_seen = checks[0]["seq"].as_u64().unwrap();
    let one = jobs(&endpoints[..1], &["--kind", "divergence-check", "--limit", "1"]);
    let listed = one["nodes"][0]["jobs"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{one}");
    assert!(
        listed[0]["seq"].as_u64().unwrap() >= newest_seen,
        "the newest: {one}"
    );

    // A backup node 1 served is in node 1's log, with the bytes it sent.
    let file = dir.path().join("n1.backup");
    let out = run(&["-e", &endpoints[0], "backup", "--out", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let answer = jobs(&endpoints[..1], &["--kind", "backup"]);
    let backup = &of_kind(&answer, 0, "backup")[0];
    assert_eq!(backup["outcome"], "done", "{backup}");
    assert_eq!(
        backup["figures"]["bytes"].as_u64().unwrap(),
        std::fs::metadata(&file).unwrap().len(),
        "{backup}"
    );

    // The table form names the node and its jobs.
    let out = run(&["-e", &endpoints[1], "jobs", "--kind", "snapshot-build"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("node 2 ("), "{table}");
    assert!(
        table.contains("snapshot-build") && table.contains("bytes="),
        "{table}"
    );

    // A kind that does not exist: refused, naming the kinds.
    let out = run(&["-e", &endpoints[0], "jobs", "--kind", "compaction"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("no job kind \"compaction\"") && err.contains("snapshot-build"),
        "{err}"
    );
}
