//! `versus` end to end: a short side-by-side run of Engram and etcd (3 processes each), read
//! back from its JSON report. Needs `etcd` on PATH (`.ci/setup.sh` installs Debian's
//! etcd-server) and the `engram` binary built beside `versus` (`cargo test --workspace` builds
//! both).
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::process::Command;

use common::json_report;

#[test]
fn both_systems_are_measured_at_every_point_and_compared() {
    let versus = env!("CARGO_BIN_EXE_versus");
    let engram = std::path::Path::new(versus).with_file_name("engram");
    assert!(
        engram.exists(),
        "build the engram binary first: {}",
        engram.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let doc = json_report(
        Command::new(versus)
            .args(["--engram-bin", engram.to_str().unwrap()])
            .args([
                "--clients",
                "1,4",
                "--seconds",
                "1",
                "--warmup-secs",
                "0",
                "--rounds",
                "2",
            ])
            .args([
                "--keys",
                "30",
                "--history-values",
                "300",
                "--history-clients",
                "2",
            ])
            .args(["--subscribers", "2", "--markers", "4"])
            .args(["--data-dir", dir.path().to_str().unwrap(), "--json"]),
    );
    let ms = doc["report"]["measurements"].as_array().unwrap();
    // Interleaved: every point ran twice per system, the systems taking turns.
    let order: Vec<(&str, u64)> = ms
        .iter()
        .filter(|m| m["workload"]["kind"] == "write" && m["clients"] == 4)
        .map(|m| (m["system"].as_str().unwrap(), m["round"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        order,
        vec![("engram", 0), ("etcd", 0), ("engram", 1), ("etcd", 1)]
    );
    for system in ["engram", "etcd"] {
        for label in [
            "write 1x100B",
            "read linearizable",
            "read stale",
            "read as-of @300",
        ] {
            let row = doc["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["system"] == system && r["label"] == label)
                .unwrap_or_else(|| panic!("no {label} row for {system}"));
            assert_eq!(row["errors"], 0, "{row}");
            assert!(row["throughput_per_s"].as_f64().unwrap() > 0.0, "{row}");
            assert!(row["server_cpu_us_per_op"].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    // etcd has no history call: the report says so instead of inventing a figure.
    let skipped = doc["report"]["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s.as_str().unwrap().contains("etcd has no History")),
        "{skipped:?}"
    );
    // Two systems, two rounds, two connection layouts.
    let fanouts = doc["report"]["fanouts"].as_array().unwrap();
    assert_eq!(fanouts.len(), 8);
    for f in fanouts {
        assert_eq!(f["delivered"], f["expected"], "{f}");
    }
    // The leader's write-stage breakdown: every stage saw the run's writes (the preloads and
    // the timed writes; the leader answered all of them), and the mean offsets from arrival
    // grow along the path.
    let stages = doc["write_stages"].as_array().unwrap();
    let names: Vec<&str> = stages.iter().map(|s| s["stage"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "proposed",
            "leader_log_durable",
            "follower_durable",
            "committed",
            "applied",
            "answered"
        ]
    );
    let answered = stages[5]["writes"].as_u64().unwrap();
    let timed: u64 = ms
        .iter()
        .filter(|m| m["system"] == "engram" && m["workload"]["kind"] == "write")
        .map(|m| m["ops"].as_u64().unwrap())
        .sum();
    assert!(
        answered >= timed && timed > 0,
        "{answered} answered, {timed} timed writes"
    );
    for s in stages {
        // A stage may miss a write now and then (a mark pushed out by a burst), not often.
        assert!(s["writes"].as_u64().unwrap() * 10 >= answered * 9, "{s}");
    }
    let means: Vec<f64> = stages.iter().map(|s| s["mean_ms"].as_f64().unwrap()).collect();
    for (earlier, later) in [(0, 1), (0, 2), (2, 3), (3, 4), (4, 5)] {
        assert!(means[earlier] <= means[later], "{names:?} {means:?}");
    }
}

#[test]
fn a_missing_etcd_is_named_with_how_to_install_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_versus"))
        .args(["--etcd-bin", "no-such-etcd-binary", "--engram-bin", "/bin/true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-etcd-binary is not on PATH") && stderr.contains("etcd-server"),
        "{stderr}"
    );
}
