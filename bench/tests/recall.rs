//! `recall` end to end: a small corpus measured in process and through a 3-node cluster in one
//! run, read back from its JSON report. Needs the `engram` binary built beside `recall`
//! (`cargo test --workspace` builds both).
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::process::Command;

use common::json_report;
use serde_json::Value;

const SIGNALS: [&str; 4] = ["text", "vector", "text+vector", "text+vector+graph"];

fn recall_of(report: &Value, signal: &str) -> f64 {
    report["recall_at_10"][signal]
        .as_f64()
        .unwrap_or_else(|| panic!("no recall@10 for {signal} in {report}"))
}

#[test]
fn the_cluster_finds_what_the_index_in_process_finds() {
    let recall = env!("CARGO_BIN_EXE_recall");
    let engram = std::path::Path::new(recall).with_file_name("engram");
    assert!(
        engram.exists(),
        "build the engram binary first: {}",
        engram.display()
    );
    let doc = json_report(
        Command::new(recall)
            .args(["--entities", "1000", "--queries", "60", "--cluster", "--json"])
            .args(["--recall-save-ms", "200"])
            .args(["--engram-bin", engram.to_str().unwrap()]),
    );
    let (local, cluster) = (&doc["in_process"], &doc["cluster"]);
    // A follower restarted with its save removed, then with the save it wrote since: both
    // answer a search over the whole load; the second read a save of the index.
    for way in ["rebuilt_from_log", "from_save"] {
        let r = &cluster["restart"][way];
        assert!(r["first_search_secs"].as_f64().unwrap() > 0.0, "{way}: {r}");
    }
    assert!(
        cluster["restart"]["from_save"]["save_bytes"].as_u64().unwrap() > 10_000,
        "{}",
        cluster["restart"]
    );
    assert_eq!(local["facts"], 5_000);
    assert_eq!(cluster["facts"], 5_000);
    // 50 transactions of twenty documents, 10 of a hundred citations.
    assert_eq!(cluster["transactions"], 60);
    for signal in SIGNALS {
        let (l, c) = (recall_of(local, signal), recall_of(cluster, signal));
        // The same facts under other ids and transaction times: recency may reorder close
        // hits, so the two agree closely, not exactly.
        assert!(
            (l - c).abs() <= 0.1,
            "{signal}: recall@10 {c:.3} through the cluster against {l:.3} in process"
        );
    }
    // The labels are only reachable by fusing: the graph finds the cited half of every set.
    for report in [local, cluster] {
        let full = recall_of(report, "text+vector+graph");
        for single in ["text", "vector"] {
            assert!(
                full > recall_of(report, single),
                "full {full:.3} ≤ {single} in {report}"
            );
        }
    }
    for callers in ["1", "16"] {
        let l = &cluster["latency"][callers];
        assert_eq!(l["queries"], 60, "{callers} clients asked every query once: {l}");
        assert!(l["p99_ms"].as_f64().unwrap() >= l["p50_ms"].as_f64().unwrap());
    }
    let rss = cluster["node_rss_bytes"].as_array().unwrap();
    assert_eq!(rss.len(), 3);
    assert!(rss.iter().all(|b| b.as_u64().unwrap() > 0), "{rss:?}");
}
