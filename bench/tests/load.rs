//! `load` end to end: a short run of every phase against its own 3-node cluster, read back
//! from the JSON report, and the refusals of arguments it cannot run with. Needs the `engram`
//! binary built beside `load` (`cargo test --workspace` builds both).
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::process::Command;

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_load");

fn load(args: &[&str]) -> (i32, String, String) {
    let engram = std::path::Path::new(EXE).with_file_name("engram");
    assert!(
        engram.exists(),
        "build the engram binary first: {}",
        engram.display()
    );
    let out = Command::new(EXE)
        .args(["--engram-bin", engram.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_short_bench_measures_every_phase_without_a_failed_request() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("report.json");
    let (code, stdout, stderr) = load(&[
        "--clients",
        "1,4",
        "--datoms",
        "1,3",
        "--value-bytes",
        "32",
        "--keys",
        "40",
        "--history-values",
        "400",
        "--history-clients",
        "2",
        "--subscribers",
        "3",
        "--markers",
        "5",
        "--seconds",
        "1",
        "--warmup-secs",
        "0",
        "--rounds",
        "1",
        "--data-dir",
        dir.path().join("nodes").to_str().unwrap(),
        "--out",
        out_file.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    // --out holds the same document.
    let written: Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    assert_eq!(written["rows"], doc["rows"]);

    let rows = doc["rows"].as_array().unwrap();
    let labels: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["label"].as_str().unwrap().to_string(),
                r["clients"].as_u64().unwrap(),
            )
        })
        .collect();
    for expected in [
        ("write 1x32B", 1),
        ("write 1x32B", 4),
        ("write 3x32B", 4),
        ("read linearizable", 4),
        ("read stale", 1),
        ("read as-of @400", 2),
        ("history @400", 2),
    ] {
        assert!(
            labels.iter().any(|(l, c)| l == expected.0 && *c == expected.1),
            "no row for {expected:?} in {labels:?}"
        );
    }
    for r in rows {
        assert_eq!(r["system"], "engram");
        assert_eq!(r["errors"], 0, "{r}");
        assert!(r["throughput_per_s"].as_f64().unwrap() > 0.0, "{r}");
        let (p50, p99, max) = (
            r["p50_us"].as_f64().unwrap(),
            r["p99_us"].as_f64().unwrap(),
            r["max_us"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{r}");
        // The servers were measured: three processes doing real work per request.
        assert!(r["server_cpu_us_per_op"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Every marker reached every subscriber, on connections of their own and multiplexed.
    let fanouts = doc["report"]["fanouts"].as_array().unwrap();
    let layouts: Vec<&str> = fanouts.iter().map(|f| f["layout"].as_str().unwrap()).collect();
    assert_eq!(layouts, ["own", "shared"]);
    for f in fanouts {
        assert_eq!(f["expected"], 15, "{f}");
        assert_eq!(f["delivered"], 15, "{f}");
        assert_eq!(f["write_latency"]["samples"], 5, "{f}");
    }
    // The preload wrote at least what the history phase asked for.
    let preloads = doc["report"]["preloads"].as_array().unwrap();
    assert!(preloads.iter().any(|p| p[1] == 400), "{preloads:?}");
    assert!(doc["machine"]["cores"].as_u64().unwrap() >= 1);
}

#[test]
fn arguments_it_cannot_run_with_are_refused_before_anything_starts() {
    for (args, needle) in [
        (vec!["--clients", "0"], "client counts"),
        (vec!["--datoms", "20000"], "--datoms"),
        (vec!["--keys", "0"], "--keys"),
        (vec!["--phases", "everything"], "invalid value"),
        (vec!["--seconds", "0"], "--seconds"),
        (vec!["--attach"], "--attach needs --endpoint"),
        (vec!["--endpoint", "127.0.0.1:1"], "with --attach"),
    ] {
        let (code, stdout, stderr) = load(&args);
        assert_ne!(code, 0, "{args:?} was accepted: {stdout}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
