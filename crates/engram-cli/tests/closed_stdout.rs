//! `engram … | head`: when the reader of stdout goes away, a command ends quietly with its
//! usual exit code (0, or 2 for a chain that does not verify), never with a panic. Stdout is
//! handed to the process with its reading end already closed, so every write fails with EPIPE
//! from the first one on: no timing is involved.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use engram_client::pb;
use engram_server::{ServerConfig, run_until};

const EXE: &str = env!("CARGO_BIN_EXE_engram");

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run(args: &[&str]) -> Output {
    Command::new(EXE)
        .args(args)
        .env_remove("ENGRAM_ENDPOINTS")
        .output()
        .unwrap()
}

/// Runs `engram args` with a stdout whose reader is gone.
fn run_with_closed_stdout(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(EXE)
        .args(args)
        .env_remove("ENGRAM_ENDPOINTS")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn assert_quiet_end(args: &[&str], code: i32) -> String {
    let out = run_with_closed_stdout(args);
    let stderr = text(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "{args:?}: {stderr}"
    );
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    stderr
}

/// A one-node cluster in this process, initialised; returns its address.
async fn start_node(dir: &std::path::Path) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let config = ServerConfig::new(1, addr, dir.to_path_buf());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        run_until(config, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    let mut cluster = None;
    for _ in 0..100 {
        if let Ok(ch) = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            cluster = Some(pb::cluster_client::ClusterClient::new(ch));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut cluster = cluster.expect("the node answers");
    cluster
        .init(pb::InitRequest {
            members: vec![],
            ..Default::default()
        })
        .await
        .unwrap();
    for _ in 0..200 {
        let status = cluster.status(pb::StatusRequest {}).await.unwrap().into_inner();
        if status.leader_id.is_some() && status.chain_index >= 1 {
            return (addr, stop);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader and no genesis entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_commands_quietly() {
    let work = tempfile::tempdir().unwrap();
    let (addr, stop) = start_node(&work.path().join("node")).await;
    let endpoint = addr.to_string();
    let export = work.path().join("chain.engram-audit");
    let exported = run(&[
        "-e",
        &endpoint,
        "audit",
        "export",
        "--out",
        export.to_str().unwrap(),
    ]);
    assert_eq!(exported.status.code(), Some(0), "{}", text(&exported.stderr));
    let export = export.to_str().unwrap();

    // The report of a chain that verifies: several lines, the first write already fails.
    let stderr = assert_quiet_end(&["audit", "verify", export], 0);
    assert_eq!(stderr, "", "a closed stdout is not an error worth a message");
    assert_quiet_end(&["--json", "audit", "verify", export], 0);
    // Client commands print through the same path.
    assert_quiet_end(&["-e", &endpoint, "cluster", "status"], 0);
    assert_quiet_end(&["-e", &endpoint, "audit", "head"], 0);

    // A chain that does not verify keeps its exit code 2 even when its report was cut short.
    let broken = work.path().join("broken.engram-audit");
    let mut bytes = engram_verify::format::MAGIC.to_vec();
    bytes.extend_from_slice(&engram_verify::format::EXPORT_FORMAT_VERSION.to_be_bytes());
    std::fs::write(&broken, bytes).unwrap();
    let stderr = assert_quiet_end(&["audit", "verify", broken.to_str().unwrap()], 2);
    assert!(stderr.contains("no header record"), "{stderr}");

    let _ = stop.send(());
}
