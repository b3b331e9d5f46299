//! A backup written by an earlier build still verifies, restores, and the node restored from
//! it serves and extends its chain: an operator may restore a backup taken years before, with
//! whatever build is current then.
//!
//! `fixtures/backup-eb760e5.backup` was written by the build at commit eb760e5 (backup format 1,
//! store format 1) with `fixtures/make-backup-fixture.sh`: a one-node cluster's genesis and 20
//! transactions in `fixture/a` (an entity with `:note/n` = N and `:note/text` "fixture note N"
//! each). `backup-eb760e5.node.key` is that node's key, made for the fixture. The head below was
//! read from the live node (`engram audit head`) when the backup was taken, not from the file.
#![allow(clippy::unwrap_used)] // test set-up: a failed step should stop the test loudly

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{fixture, json_of, run, text};
use engram_cli::local_cluster::free_ports;

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const HEAD_INDEX: u64 = 22;
const HEAD_HASH: &str = "404fdb9441896bddf95b5657519216e3235d7b26456181ba0782126fc0b33d01";

#[test]
fn a_backup_written_by_an_earlier_build_verifies_restores_and_serves() {
    let backup = fixture("backup-eb760e5.backup");
    let out = run(&["--json", "audit", "verify", "--backup", &backup]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let verdict = json_of(&out);
    assert_eq!(verdict["verdict"], "verified", "{verdict}");
    assert_eq!(
        verdict["backup"]["chain_index"].as_u64(),
        Some(HEAD_INDEX),
        "{verdict}"
    );

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node1");
    let port = free_ports(1).unwrap()[0];
    let addr = format!("127.0.0.1:{port}");
    let key = fixture("backup-eb760e5.node.key");
    let out = run(&[
        "--json",
        "restore",
        "--backup",
        &backup,
        "--data-dir",
        data.to_str().unwrap(),
        "--addr",
        &addr,
        "--key-file",
        &key,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(json_of(&out)["node_id"].as_u64(), Some(1));

    let mut node = Command::new(EXE)
        .args([
            "serve",
            "--id",
            "1",
            "--listen",
            &addr,
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("node1.log")).unwrap())
        .spawn()
        .unwrap();
    let cli = |args: &[&str]| run(&[&["-e", addr.as_str()], args].concat());
    let started = Instant::now();
    while !cli(&["health"]).status.success() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the restored node did not become ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The earlier build's entries, unchanged, and its data.
    let entry = json_of(&cli(&[
        "--json", "audit", "entries", "--from", "22", "--limit", "1",
    ]));
    assert!(entry.to_string().contains(HEAD_HASH), "{entry}");
    let found = cli(&["--json", "find", "--ns", "fixture/a", "--attribute", ":note/n"]);
    assert!(found.status.success(), "{}", text(&found.stderr));
    let found = text(&found.stdout);
    for n in 1..=20 {
        assert!(
            found.contains(&format!("\"i64\": {n}")),
            "note {n} missing: {found}"
        );
    }
    // It takes a write, and its whole chain verifies.
    let write = Command::new(EXE)
        .args(["-e", &addr, "transact", "-"])
        .env_remove("ENGRAM_ENDPOINTS")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = write.stdin.as_ref().unwrap();
        stdin
            .write_all(br#"{"namespace":"fixture/a","agent":"later","confidence":1,"ops":[{"op":"assert","entity":"n","attribute":":note/n","value":{"i64":21}}]}"#)
            .unwrap();
    }
    let written = write.wait_with_output().unwrap();
    assert!(written.status.success(), "{}", text(&written.stdout));
    let verified = cli(&["audit", "verify"]);
    assert!(
        verified.status.success(),
        "{}{}",
        text(&verified.stdout),
        text(&verified.stderr)
    );
    let _ = node.kill();
    let _ = node.wait();
}
