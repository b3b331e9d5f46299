//! Damaged table files of a stopped node: `engram audit verify --data-dir` reads every row of
//! every space with checksums verified and reports every flipped byte, wherever in the file it
//! lands, as unreadable (exit 3) naming the space and the file, never as verified.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use common::{run, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, Consistency, HistoryTarget};
use engram_storage::{Durability, ReadView, Space, Store, WriteBatch};
use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, TxOp, TxRequest, Value};
use serde_json::Value as Json;
use tonic::Code;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

/// A transaction whose text is long and varied, so the state's table spans many data blocks
/// even compressed.
fn tx(n: i64) -> TxRequest {
    let op = |attribute: &str, value: Value| TxOp {
        op: Op::Assert,
        entity: EntityRef::Temp("m".into()),
        attribute: Attribute::new(attribute).unwrap(),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    };
    let body: String = (0..40)
        .map(|i| {
            format!(
                "{:x}",
                (n * 7919 + i * 104_729).wrapping_mul(2_654_435_761) % 1_000_003
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    TxRequest {
        namespace: Namespace::new("scrub/test").unwrap(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops: vec![
            op(":memory/text", Value::String(body)),
            op(":memory/n", Value::I64(n)),
        ],
        preconditions: vec![],
        idempotency_key: Some(format!("scrub-{n}")),
        provenance: Provenance {
            agent: "integration-test".into(),
            confidence: 1.0,
            ..Default::default()
        },
    }
}

/// The table files of a store, largest first.
fn tables(data_dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out: Vec<_> = std::fs::read_dir(data_dir.join("db"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .map(|p| {
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .collect();
    out.sort_by_key(|(_, len)| std::cmp::Reverse(*len));
    out
}

/// A one-node cluster (serving `/metrics` on `metrics_port`, with `extra` flags) with 120
/// transactions, stopped, its write-ahead log turned into table files. Returns the temporary
/// directory, the stopped cluster (to restart) and the node's data directory.
async fn stopped_node(metrics_port: u16, extra: &[&str]) -> (tempfile::TempDir, LocalCluster, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(1).unwrap();
    let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    extra.extend([
        "--metrics-listen".to_string(),
        format!("127.0.0.1:{metrics_port}"),
    ]);
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &extra).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    for n in 0..120 {
        client.transact(&tx(n)).await.unwrap();
    }
    cluster.kill(1).unwrap();
    let data_dir = cluster.node(1).unwrap().data_dir.clone();
    // The node died with its rows in the write-ahead log. `audit verify` reads them there
    // without writing; the flips below need table files, which the next open for writing
    // makes from the log, as the node's restart would.
    drop(engram_storage_rocks::RocksStore::open(&data_dir.join("db")).unwrap());
    let out = run(&["audit", "verify", "--data-dir", data_dir.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "an intact store verifies: {} {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("store scrub  clean"), "{stdout}");
    // The verdict comes first.
    assert!(
        stdout.starts_with(&format!("verified: {}: ", data_dir.display())),
        "{stdout}"
    );
    (dir, cluster, data_dir)
}

/// Flips one byte of `table`.
fn flip(table: &Path, offset: u64) {
    let mut bytes = std::fs::read(table).unwrap();
    bytes[offset as usize] ^= 0x20;
    std::fs::write(table, bytes).unwrap();
}

fn metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    body
}

/// `engram health --service engram.ready` against `endpoint`.
fn ready(endpoint: &str) -> Output {
    run(&["--endpoint", endpoint, "health", "--service", "engram.ready"])
}

/// Polls `ready` until it says `want` (the health service re-evaluates every 500 ms).
async fn wait_ready(cluster: &LocalCluster, want: bool) {
    let node = cluster.node(1).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = ready(&node.endpoint());
        if out.status.success() == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "engram.ready never became {want}: {} {}\n{}",
            text(&out.stdout),
            text(&out.stderr),
            node.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_of_a_table_file_is_reported() {
    let (dir, _cluster, pristine) = stopped_node(free_ports(1).unwrap()[0], &[]).await;
    let largest = tables(&pristine);
    assert!(!largest.is_empty(), "no table files in {}", pristine.display());
    let (table, len) = largest[0].clone();
    assert!(
        len > 16 << 10,
        "the largest table is {len} bytes: too small to spread flips over"
    );
    let name = table.file_name().unwrap().to_str().unwrap().to_string();

    // Ten offsets spread over the file (the first inside the first data block, the last inside
    // the footer), and ten over its last 4 KiB, where a table keeps its filter, index and
    // properties blocks and its footer. An exploratory run flipped every 11th byte of the last
    // 14 KB of such a table and every one was reported: a table file has no byte RocksDB
    // leaves unchecked (each block carries a checksum over its contents and trailer, the
    // footer its own), provided the filter and properties blocks are checked too, which no
    // read path does and `Store::verify_checksums` does.
    let spread = (0..10).map(|i| 7 + (len - 20) * i / 9);
    let tail = (0..10).map(|i| len - 4096 + 4080 * i / 9);
    let mut messages = Vec::new();
    for offset in spread.chain(tail) {
        let copy = dir.path().join(format!("flip-{offset}"));
        common::copy_dir(&pristine, &copy);
        flip(&copy.join("db").join(&name), offset);

        let out = run(&["--json", "audit", "verify", "--data-dir", copy.to_str().unwrap()]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(
            out.status.code(),
            Some(3),
            "flip at {offset} of {len} in {name}: expected unreadable\nstdout {stdout}\nstderr {stderr}"
        );
        // The one-line summary names the space (or the store, when it no longer opens) and
        // the damaged file.
        assert!(stderr.contains("unreadable"), "flip at {offset}: {stderr}");
        assert!(
            stderr.contains(&name),
            "flip at {offset}: the file is not named: {stderr}"
        );
        let doc: Json = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        // Whether the store opened or not, the document carries the verdict.
        assert_eq!(doc["verdict"], "unreadable", "flip at {offset}: {doc}");
        assert_eq!(doc["ok"], false, "flip at {offset}: {doc}");
        match doc.get("scrub") {
            // The store opened: the JSON carries the same finding.
            Some(scrub) => {
                let first = scrub["findings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|f| f["kind"] == "unreadable")
                    .unwrap_or_else(|| panic!("flip at {offset}: no unreadable finding: {doc}"));
                assert_eq!(first["space"], "state", "flip at {offset}: {first}");
                assert!(
                    first["file"].as_str().unwrap().ends_with(&name),
                    "flip at {offset}: {first}"
                );
                assert!(first["key"].is_string(), "flip at {offset}: {first}");
            }
            // It did not open (footer, index or filter damage), or it opened and the chain
            // head, the first row read, sits in the damaged block: the error document says
            // which, naming the file.
            None => {
                let message = doc["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains("does not open") || message.contains("the chain head does not read"),
                    "flip at {offset}: {doc}"
                );
                assert!(message.contains(&name), "flip at {offset}: {doc}");
            }
        }
        messages.push(stderr);
    }
    // The tail flips reached the blocks only a whole-file check reads.
    assert!(
        messages.iter().any(|m| m.contains("block_type = Filter")),
        "no flip landed in the filter block: {messages:#?}"
    );

    // The text report of a damaged store opens with its verdict, naming the file; the exit
    // code is unchanged.
    let copy = dir.path().join("flip-text");
    common::copy_dir(&pristine, &copy);
    flip(&copy.join("db").join(&name), 7);
    let out = run(&["audit", "verify", "--data-dir", copy.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "FAILED (unreadable): {}: store scrub found damage in {name}: ",
            copy.display()
        )),
        "{stdout}"
    );
}

/// Leaves the names in `table`'s properties block unsorted, as one flipped byte did on a real
/// store: the block's first entry holds the first name ("rocksdb.…") whole, after three one-byte
/// varints (shared length 0, name length, value length); the second entry's first own byte is
/// where its name departs from the first, and '!' there sorts it before the first. RocksDB then
/// fails to load the table at open and reports the MANIFEST it was replaying, not the table.
fn unsort_properties(table: &Path) {
    let mut bytes = std::fs::read(table).unwrap();
    let first = bytes.windows(8).position(|w| w == b"rocksdb.").unwrap();
    let entry = first - 3;
    assert_eq!(bytes[entry], 0, "not the start of the properties block");
    let second = first + usize::from(bytes[entry + 1]) + usize::from(bytes[entry + 2]);
    bytes[second + 3] = b'!';
    std::fs::write(table, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_fails_to_load_at_open_is_named_by_verify_and_serve() {
    let (dir, _cluster, pristine) = stopped_node(free_ports(1).unwrap()[0], &[]).await;
    let damaged = dir.path().join("unsorted-properties");
    common::copy_dir(&pristine, &damaged);
    let (table, _) = tables(&damaged)[0].clone();
    let name = table.file_name().unwrap().to_str().unwrap().to_string();
    unsort_properties(&table);

    let out = run(&["audit", "verify", "--data-dir", damaged.to_str().unwrap()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("FAILED (unreadable): ") && first.contains(&format!("table file {name}: ")),
        "the verdict line does not name {name}: {stdout}"
    );
    assert!(
        stderr.contains(&format!("(file {})", table.display())),
        "{stderr}"
    );

    let stderr = refused_start(&damaged, &[]);
    assert!(
        stderr.contains("cannot open the store: storage corruption in ")
            && stderr.contains(&format!("table file {name}: properties unsorted")),
        "serve does not name {name}: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_node_reports_a_damaged_block_as_data_loss_and_stops_being_ready() {
    let metrics_port = free_ports(1).unwrap()[0];
    // The start-up check is off: the damage below is in rows the tip's own datoms index, which
    // the default check (tip) reads and refuses to start on. Here the node must start and meet
    // the damage while serving.
    let (_dir, mut cluster, data_dir) = stopped_node(metrics_port, &["--verify-on-start", "none"]).await;
    // The first data block of the state's table holds its smallest keys: the AEVT rows of
    // `:memory/n`, which an attribute history reads first. Starting the node reads none of
    // them.
    let (table, _) = tables(&data_dir)[0].clone();
    flip(&table, 7);
    cluster.restart(1).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster
        .wait_for_leader(None, Duration::from_secs(30))
        .await
        .unwrap();
    let endpoint = cluster.node(1).unwrap().endpoint();
    wait_ready(&cluster, true).await;
    assert!(metrics(metrics_port).contains("engram_storage_corruption_total{node_id=\"1\"} 0"));

    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let err = client
        .history(
            &Namespace::new("scrub/test").unwrap(),
            HistoryTarget::Attribute(Attribute::new(":memory/n").unwrap()),
            1000,
            Consistency::Stale,
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::DataLoss), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("storage corruption in state at key"),
        "{message}"
    );
    assert!(message.contains("block checksum mismatch"), "{message}");
    let grpc_message = match &err {
        engram_client::ClientError::Rpc { message, .. } => message.clone(),
        other => panic!("not an RPC error: {other}"),
    };
    assert!(
        !grpc_message.contains('/'),
        "a path reached the client: {grpc_message}"
    );

    // Counted, and the node takes itself out of rotation.
    let body = metrics(metrics_port);
    assert!(
        body.contains("engram_storage_corruption_total{node_id=\"1\"} 1"),
        "{body}"
    );
    wait_ready(&cluster, false).await;
    assert!(
        run(&["--endpoint", &endpoint, "health", "--service", "engram.live"])
            .status
            .success()
    );
}

/// Starts `engram serve` on `data_dir` with `extra` flags and expects it to refuse: returns
/// its stderr. A node that starts instead is killed and the test fails.
fn refused_start(data_dir: &Path, extra: &[&str]) -> String {
    let port = free_ports(1).unwrap()[0];
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec![
        "serve",
        "--id",
        "1",
        "--listen",
        &listen,
        "--data-dir",
        data_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut child = Command::new(EXE)
        .args(&args)
        .env_remove("ENGRAM_VERIFY_ON_START")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("engram serve {extra:?} started on a damaged store instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_store_fails_its_start_check_refuses_to_start() {
    let (dir, _cluster, pristine) = stopped_node(free_ports(1).unwrap()[0], &[]).await;

    // The tip entry altered behind the node's back (its attestation no longer verifies): the
    // default check (tip) refuses, naming the entry.
    let altered = dir.path().join("altered-tip");
    common::copy_dir(&pristine, &altered);
    let tip = {
        let store = engram_storage_rocks::RocksStore::open(&altered.join("db")).unwrap();
        let head = engram_core::reads::head(&store).unwrap();
        let key = engram_core::keys::audit(head.index);
        let bytes = store.get(Space::State, &key).unwrap().unwrap();
        let mut signed = engram_audit::SignedEntry::decode(&bytes).unwrap();
        signed.entry.tx_time_ns += 1;
        let mut batch = WriteBatch::new();
        batch.put(Space::State, key, signed.encode());
        store.write(batch, Durability::Sync).unwrap();
        head.index
    };
    let stderr = refused_start(&altered, &[]);
    assert!(
        stderr.contains(&format!(
            "the store fails its start-up check (--verify-on-start tip): audit entry {tip}: its attestation by"
        )),
        "{stderr}"
    );
    // `none` skips the check (the node would start; not run here).

    // A damaged block away from the tip: the tip check does not read it (the serving test
    // starts a node on exactly this damage), the full check does and refuses.
    let damaged = dir.path().join("damaged-block");
    common::copy_dir(&pristine, &damaged);
    let (table, _) = tables(&damaged)[0].clone();
    flip(&table, 7);
    let stderr = refused_start(&damaged, &["--verify-on-start", "full"]);
    assert!(
        stderr.contains("the store fails its start-up check (--verify-on-start full): unreadable: state key (start): block checksum mismatch"),
        "{stderr}"
    );
    assert!(
        stderr.contains(table.file_name().unwrap().to_str().unwrap()),
        "{stderr}"
    );
}
