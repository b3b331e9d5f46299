//! `engram serve --log-format json`: every line a node writes to stderr is one JSON object with
//! its time, level and message at the top level, for log collectors; an unknown format is
//! refused before anything starts.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use engram_cli::local_cluster::free_ports;
use serde_json::Value as Json;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

fn serve(data_dir: &std::path::Path, format: &str) -> Command {
    let port = free_ports(1).unwrap()[0];
    let mut cmd = Command::new(EXE);
    cmd.args([
        "serve",
        "--id",
        "1",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--log-format",
        format,
    ])
    .env_remove("ENGRAM_LOG_FORMAT")
    .env("RUST_LOG", "info")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_node_started_with_json_logs_writes_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = serve(&dir.path().join("node"), "json").spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // A starting node logs its store, its listener and its Raft start: wait for a few lines.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!seen.is_empty(), "the node wrote no log line within 60 s");
    for line in &seen {
        let object: Json = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let object = object
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {line}"));
        for field in ["timestamp", "level", "message"] {
            assert!(object.contains_key(field), "no {field:?} in {line}");
        }
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&object["level"].as_str().unwrap_or("")),
            "{line}"
        );
        assert!(!line.contains('\u{1b}'), "colour codes in a JSON line: {line}");
    }
}

#[test]
fn an_unknown_log_format_is_refused_before_the_node_starts() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("node");
    let out = serve(&data_dir, "xml").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A usage error exits 1 (2 means "the audit chain does not verify").
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--log-format") && stderr.contains("expected text or json"),
        "{stderr}"
    );
    assert!(!data_dir.exists(), "a refused start created the data directory");
}
