//! `/metrics` on a real 3-node cluster counts every client call by method and gRPC code, and
//! times it: calls sent to one node, some answered, some refused for bad input or an unknown
//! entity, some relayed to the leader, appear in that node's scrape with their codes, and
//! each method's latency histogram is well formed (cumulative buckets, `+Inf` equal to the
//! count); the log's syncs are timed, each space's size is served, and the search index's lag
//! falls to 0, its rebuild counted as a background job; the alert rules and the dashboard in
//! `deploy/` name only metrics a node serves; and `engram metrics` shows each node's figures,
//! naming a node that does not answer.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::pb;
use tonic::Code;

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "metrics/rpc";

/// The value of the sample named exactly `sample` (name and labels), if the scrape has it.
fn sample(scrape: &str, sample: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_call_is_counted_by_method_and_code_and_timed() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(6).unwrap();
    let (ports, metrics_ports) = ports.split_at(3);
    // Saves of the search index every 200 ms, so the run sees them counted.
    let saves = ["--recall-save-ms", "200"].map(String::from);
    let mut cluster =
        LocalCluster::start_with_metrics(Path::new(EXE), dir.path(), ports, metrics_ports, &saves).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let endpoints = cluster.endpoints();
    let mut node = pb::memory_client::MemoryClient::connect(format!("http://{}", endpoints[0]))
        .await
        .unwrap();

    // Three writes, answered (relayed to the leader if node 1 is not it).
    for n in 0..3 {
        let tx = pb::TransactRequest::from(&common::memory_tx(NS, n));
        node.transact(tx).await.unwrap();
    }
    // Two reads of an entity that does not exist, one find by a malformed attribute.
    for _ in 0..2 {
        let unknown = node
            .get(pb::GetRequest {
                namespace: NS.into(),
                entity: 424_242,
                ..Default::default()
            })
            .await;
        assert_eq!(unknown.unwrap_err().code(), Code::NotFound);
    }
    let bad = node
        .find(pb::FindRequest {
            namespace: NS.into(),
            attribute: "no-colon".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(bad.unwrap_err().code(), Code::InvalidArgument);

    let scrape = common::http_get(metrics_ports[0], "/metrics");
    let requests = |method: &str, code: &str| {
        sample(
            &scrape,
            &format!("engram_rpc_requests_total{{node_id=\"1\",method=\"{method}\",code=\"{code}\"}}"),
        )
    };
    assert_eq!(requests("Memory/Transact", "OK"), Some(3.0), "{scrape}");
    assert_eq!(requests("Memory/Get", "NOT_FOUND"), Some(2.0), "{scrape}");
    assert_eq!(requests("Memory/Find", "INVALID_ARGUMENT"), Some(1.0), "{scrape}");
    assert_eq!(
        requests("Memory/Get", "OK"),
        None,
        "no Get was answered OK: {scrape}"
    );
    // The CLI's cluster set-up called Cluster methods on this node too.
    assert!(scrape.contains("method=\"Cluster/Status\""), "{scrape}");

    for method in ["Memory/Transact", "Memory/Get", "Memory/Find"] {
        let labels = format!("node_id=\"1\",method=\"{method}\"");
        let count = sample(&scrape, &format!("engram_rpc_duration_seconds_count{{{labels}}}")).unwrap();
        let inf = sample(
            &scrape,
            &format!("engram_rpc_duration_seconds_bucket{{{labels},le=\"+Inf\"}}"),
        )
        .unwrap();
        assert_eq!(count, inf, "{method}: +Inf is every call");
        let buckets: Vec<f64> = scrape
            .lines()
            .filter(|l| l.starts_with(&format!("engram_rpc_duration_seconds_bucket{{{labels},")))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(buckets.len(), 15, "{method}: 14 bounds and +Inf");
        assert!(
            buckets.windows(2).all(|w| w[0] <= w[1]),
            "{method}: cumulative {buckets:?}"
        );
        let sum = sample(&scrape, &format!("engram_rpc_duration_seconds_sum{{{labels}}}")).unwrap();
        assert!(
            sum > 0.0 && sum < count * 10.0,
            "{method}: sum {sum} s over {count} calls"
        );
    }

    // The log's syncs are timed on every node (node 1 synced its log for the writes, leader or
    // not); each space's size is served; the search index's lag reaches 0 once its feeder has
    // taken in what the node applied.
    let syncs = sample(&scrape, "engram_log_sync_seconds_count{node_id=\"1\"}").unwrap();
    let inf = sample(
        &scrape,
        "engram_log_sync_seconds_bucket{node_id=\"1\",le=\"+Inf\"}",
    )
    .unwrap();
    let sync_sum = sample(&scrape, "engram_log_sync_seconds_sum{node_id=\"1\"}").unwrap();
    assert!(
        syncs >= 1.0 && syncs == inf,
        "{syncs} syncs, +Inf {inf}: {scrape}"
    );
    assert!(
        sync_sum > 0.0 && sync_sum < syncs * 5.0,
        "{sync_sum} s over {syncs} syncs"
    );
    for space in ["log", "raft", "state", "access"] {
        let bytes = sample(
            &scrape,
            &format!("engram_store_bytes{{node_id=\"1\",space=\"{space}\"}}"),
        );
        assert!(bytes.is_some(), "{space}: {scrape}");
    }
    let state_bytes = sample(&scrape, "engram_store_bytes{node_id=\"1\",space=\"state\"}").unwrap();
    assert!(
        state_bytes > 0.0,
        "the state holds the chain and the writes: {state_bytes}"
    );
    let applied = sample(&scrape, "engram_raft_applied_index{node_id=\"1\"}").unwrap();
    let lag = sample(&scrape, "engram_recall_index_lag_entries{node_id=\"1\"}").unwrap();
    assert!((0.0..=applied).contains(&lag), "lag {lag} of {applied} applied");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let later = common::http_get(metrics_ports[0], "/metrics");
        let lag = sample(&later, "engram_recall_index_lag_entries{node_id=\"1\"}");
        if lag == Some(0.0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the search index still lags {lag:?} entries after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The index, once fed, is saved: counted, with the save's size; no save failed.
    let later = loop {
        let later = common::http_get(metrics_ports[0], "/metrics");
        let saves = sample(&later, "engram_recall_saves_total{node_id=\"1\"}").unwrap();
        let bytes = sample(&later, "engram_recall_save_bytes{node_id=\"1\"}").unwrap();
        if saves >= 1.0 {
            assert!(bytes > 0.0, "a save of {bytes} bytes: {later}");
            break later;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no save of the search index within 30 s: {later}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        sample(&later, "engram_recall_save_failures_total{node_id=\"1\"}"),
        Some(0.0),
        "{later}"
    );
    // That first feed rebuilt the index from the log: a background job, counted done; no job of
    // any kind failed.
    let jobs = |kind: &str, outcome: &str| {
        sample(
            &later,
            &format!("engram_jobs_total{{node_id=\"1\",kind=\"{kind}\",outcome=\"{outcome}\"}}"),
        )
    };
    assert!(
        jobs("search-rebuild", "done").is_some_and(|n| n >= 1.0),
        "{later}"
    );
    for kind in [
        "snapshot-build",
        "snapshot-install",
        "redaction-purge",
        "retention",
        "backup",
    ] {
        assert_eq!(jobs(kind, "failed"), Some(0.0), "{kind}: {later}");
    }

    // The alert rules and the dashboard use only what a node serves: a renamed metric would
    // leave an alert that never fires and a panel that stays empty.
    let served: Vec<&str> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    for file in ["prometheus/engram-alerts.yaml", "grafana/engram-dashboard.json"] {
        let text = std::fs::read_to_string(deploy.join(file)).unwrap();
        let mut named = 0;
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !word.starts_with("engram_") {
                continue;
            }
            named += 1;
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| word.strip_suffix(suffix).filter(|f| served.contains(f)))
                .unwrap_or(word);
            assert!(
                served.contains(&family),
                "{file} names {word}, which no node serves"
            );
        }
        assert!(named > 10, "{file}: {named} metric names found");
    }

    // `engram metrics` reads the same figures over gRPC, a column per node; a node that does
    // not answer is named, the others still printed, and the exit code says so.
    let dead = format!("127.0.0.1:{}", free_ports(1).unwrap()[0]);
    let metrics_cli = |endpoints: &[String], args: &[&str]| {
        let mut command = std::process::Command::new(EXE);
        for endpoint in endpoints {
            command.args(["-e", endpoint]);
        }
        command.arg("metrics").args(args).output().unwrap()
    };
    let out = metrics_cli(&endpoints, &["--json"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let doc = common::json_of(&out);
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{doc}");
    for (n, endpoint) in nodes.iter().zip(&endpoints) {
        assert_eq!(n["endpoint"], endpoint.as_str(), "{doc}");
        assert!(n["metrics"]["requests"].as_f64().unwrap() > 0.0, "{doc}");
        assert!(n["metrics"]["store_bytes"].as_f64().unwrap() > 0.0, "{doc}");
        assert_eq!(n["metrics"]["storage_corruptions"], 0.0, "{doc}");
        assert!(n.get("text").is_none(), "the text only with --raw: {doc}");
    }
    let out = metrics_cli(&endpoints, &["--raw"]);
    let raw = common::text(&out.stdout);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    for id in 1..=3 {
        assert!(raw.contains(&format!("# node {id} (")), "{raw}");
        assert!(
            raw.contains(&format!("engram_rpc_requests_total{{node_id=\"{id}\"")),
            "{raw}"
        );
    }
    let mut with_dead = endpoints.clone();
    with_dead.push(dead.clone());
    let out = metrics_cli(&with_dead, &[]);
    let table = common::text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{table}");
    let header = table.lines().next().unwrap();
    for column in ["NODE 1", "NODE 2", "NODE 3", dead.as_str()] {
        assert!(header.contains(column), "{table}");
    }
    let calls = table.lines().find(|l| l.starts_with("calls ")).unwrap();
    assert!(calls.ends_with("unavailable"), "{table}");
    assert!(
        common::text(&out.stderr).contains("1 of 4 endpoints did not answer"),
        "{}",
        common::text(&out.stderr)
    );
    cluster.kill_all();
}
