//! End-to-end tests against real `engram serve` processes: three nodes on free loopback ports
//! in a temporary directory, initialised through `Cluster.Init`, killed in `Drop`.
//!
//! - `failover_keeps_every_acknowledged_write`: writes under a SIGKILLed leader, an election and
//!   a restart; afterwards every acknowledged write is on every node and the three chains
//!   verify and agree (the invariants of `engram_cli::invariants`).
//! - `bad_requests_are_refused_with_exact_codes_and_change_nothing`: each kind of bad request
//!   gets its exact gRPC code and leaves the store and the chain as they were; plus the CLI
//!   against the same cluster, and `audit verify` against a tampered copy of its chain; a
//!   client-set forwarding marker refused by a follower; numbers the CLI keeps or refuses.
//! - `cli_*`: the binary's own error handling, without a cluster.

#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engram_audit::SignedEntry;
use engram_cli::demo::read_histories;
use engram_cli::invariants::{self, AckedTx, ChainEntry, ExpectedDatom, NodeView};
use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, ClientError, Consistency, GetOptions, pb};
use engram_types::{
    Attribute, EntityId, EntityRef, Hash, Namespace, Op, Precondition, Provenance, TxOp, TxRequest, Value,
};
use futures::StreamExt;
use tokio::time::Instant;
use tonic::Code;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

async fn start_cluster(dir: &Path, extra: &[&str]) -> LocalCluster {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir, &ports, &extra).expect("start nodes");
    cluster
        .wait_all_answer(Duration::from_secs(60))
        .await
        .expect("nodes answer Status");
    cluster
        .init(Duration::from_secs(30))
        .await
        .expect("cluster init and leader");
    cluster
}

fn attr(s: &str) -> Attribute {
    Attribute::new(s).unwrap()
}

fn ns(s: &str) -> Namespace {
    Namespace::new(s).unwrap()
}

fn provenance(agent: &str) -> Provenance {
    Provenance {
        agent: agent.into(),
        session: "test".into(),
        confidence: 0.8,
        ..Default::default()
    }
}

fn assert_op(entity: EntityRef, attribute: &str, value: Value) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity,
        attribute: attr(attribute),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

fn new_memory_tx(namespace: &Namespace, key: String, n: i64) -> TxRequest {
    let m = EntityRef::Temp("m".into());
    TxRequest {
        namespace: namespace.clone(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops: vec![
            assert_op(
                m.clone(),
                ":memory/text",
                Value::String(format!("fact number {n}")),
            ),
            assert_op(m, ":memory/n", Value::I64(n)),
        ],
        preconditions: vec![],
        idempotency_key: Some(key),
        provenance: provenance("writer"),
    }
}

fn acked(label: String, tx: &TxRequest, r: &pb::TransactResponse) -> AckedTx {
    let datoms = tx
        .ops
        .iter()
        .map(|op| ExpectedDatom {
            entity: match &op.entity {
                EntityRef::Id(id) => *id,
                EntityRef::Temp(name) => EntityId(*r.temp_ids.get(name).expect("temp id in receipt")),
                EntityRef::Lookup(..) => unreachable!("this test's transactions use no lookup refs"),
            },
            attribute: op.attribute.clone(),
            value: op.value.clone(),
            op: op.op,
        })
        .collect();
    AckedTx {
        label,
        namespace: tx.namespace.clone(),
        tx: r.tx,
        audit_index: r.audit_index,
        audit_hash: Hash::from_slice(&r.audit_hash).expect("32-byte audit hash"),
        datom_hashes: r
            .datom_hashes
            .iter()
            .map(|h| Hash::from_slice(h).expect("32-byte datom hash"))
            .collect(),
        datoms,
    }
}

async fn wait_until(what: &str, timeout: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads one node on its own: its verified chain, its head, and the histories of `entities`.
async fn node_view(id: u64, endpoint: &str, entities: &BTreeSet<(String, u64)>) -> NodeView {
    let client = Client::connect(vec![endpoint.to_string()]).await.unwrap();
    let mut chain = std::collections::BTreeMap::new();
    let report = client
        .verify_chain(|p| {
            let (index, entry) = ChainEntry::verified(&p);
            chain.insert(index, entry);
        })
        .await
        .unwrap_or_else(|e| panic!("node {id}: chain does not verify: {e}"));
    assert_eq!(report.entries_checked, chain.len() as u64);
    let head = client.head().await.unwrap();
    assert_eq!(
        head.index, report.head_index,
        "node {id}: Audit.Head vs verified chain"
    );
    assert_eq!(
        Hash::from_slice(&head.hash),
        report.head_hash,
        "node {id}: Audit.Head hash vs verified chain"
    );
    let histories = read_histories(&client, entities).await.unwrap();
    NodeView {
        id,
        chain,
        histories,
        head: Hash::from_slice(&head.hash).map(|h| (head.index, h)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_cluster(dir.path(), &[]).await;
    let start_index = cluster.nodes()[0].probe().status().await.unwrap().chain_index;

    // Two writers through all three endpoints, recording every acknowledgement.
    let ledger: Arc<Mutex<Vec<AckedTx>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..2usize {
        let mut endpoints = cluster.endpoints();
        endpoints.rotate_left(w);
        let client = Client::connect(endpoints).await.unwrap();
        let (ledger, stop) = (ledger.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let namespace = ns(&format!("test/writer-{w}"));
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let tx = new_memory_tx(&namespace, format!("w{w}-{n}"), n);
                // The client retries keyed writes through the failover; keep retrying past its
                // budget with the same key, as an agent would.
                let receipt = loop {
                    match client.transact(&tx).await {
                        Ok(r) => break r,
                        Err(e) if e.is_transient() => continue,
                        Err(e) => panic!("writer {w} tx {n} refused: {e}"),
                    }
                };
                ledger
                    .lock()
                    .unwrap()
                    .push(acked(format!("w{w}-{n}"), &tx, &receipt));
            }
        }));
    }
    let acked_count = || ledger.lock().unwrap().len();

    wait_until("20 acknowledged writes", Duration::from_secs(30), async || {
        acked_count() >= 20
    })
    .await;
    // Two rounds: the second kills the leader elected in the first, so the quorum that must
    // carry on includes the node restarted in the first round.
    let mut killed = Vec::new();
    for round in 1..=2 {
        // After a restart the returning node needs a heartbeat to learn the leader: wait until
        // all three agree rather than asking once.
        let leader = cluster
            .wait_for_leader(None, Duration::from_secs(30))
            .await
            .unwrap();
        cluster.kill(leader).unwrap();
        let at_kill = acked_count();
        killed.push((leader, at_kill));
        let new_leader = cluster
            .wait_for_leader(Some(leader), Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_ne!(new_leader, leader);
        wait_until(
            "20 writes acknowledged by the new leader",
            Duration::from_secs(30),
            async || acked_count() >= at_kill + 20,
        )
        .await;

        cluster.restart(leader).unwrap();
        let at_restart = acked_count();
        wait_until(
            "10 writes after the restart",
            Duration::from_secs(30),
            async || acked_count() >= at_restart + 10,
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("writer task");
    }
    let acked: Vec<AckedTx> = ledger.lock().unwrap().clone();
    assert!(acked.len() >= 80, "{} writes", acked.len());

    // Every node applies every acknowledged write, the restarted one included.
    let max_tx = acked.iter().map(|a| a.tx).max().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let statuses = cluster.statuses().await;
        let ok: Vec<_> = statuses.iter().filter_map(|(_, s)| s.as_ref().ok()).collect();
        if ok.len() == 3
            && ok.iter().all(|s| s.applied_index >= max_tx)
            && ok.windows(2).all(|w| w[0].chain_index == w[1].chain_index)
        {
            break;
        }
        assert!(Instant::now() < deadline, "nodes did not converge: {statuses:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let entities: BTreeSet<(String, u64)> = acked
        .iter()
        .flat_map(|a| a.datoms.iter().map(|d| (a.namespace.to_string(), d.entity.0)))
        .collect();
    let mut views = Vec::new();
    for node in cluster.nodes() {
        views.push(node_view(node.id, &node.endpoint(), &entities).await);
    }
    assert_eq!(invariants::acked_writes_durable(&acked, &views), vec![]);
    assert_eq!(invariants::audit_chains_agree(&views), vec![]);
    assert_eq!(
        invariants::exactly_once(&acked, &views[0], start_index, 0),
        vec![]
    );

    // And directly: a write acknowledged while the old leader was dead reads back from the
    // restarted node itself.
    let (first_killed, at_first_kill) = killed[0];
    let during = &acked[at_first_kill];
    let restarted = Client::connect(vec![cluster.node(first_killed).unwrap().endpoint()])
        .await
        .unwrap();
    let got = restarted
        .get(
            &during.namespace,
            during.datoms[0].entity,
            GetOptions {
                consistency: Consistency::Stale,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let text = got
        .datoms
        .iter()
        .find(|d| d.attribute == ":memory/text")
        .expect(":memory/text on the restarted node");
    assert_eq!(
        engram_proto::value("v", text.value.clone()).unwrap(),
        during.datoms[0].value
    );
}

/// What must not change when a request is refused.
#[derive(Debug, PartialEq)]
struct Snapshot {
    head_index: u64,
    head_hash: Vec<u8>,
    datoms: Vec<pb::Datom>,
}

/// `leader` answers Audit.Head: the leader applies a transaction before acknowledging it, so its
/// head already shows anything a refused request wrongly appended (a follower's might lag).
/// The Get is linearizable.
/// Sends `signal` (`STOP`, `CONT`) to a node's process.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A node that stops answering (frozen, as by SIGSTOP or a dead network) holds the calls in
/// flight to it until the client's HTTP/2 pings go unanswered; the client then moves to the
/// next endpoint and a keyed write succeeds there, long before the request timeout. Without
/// the pings the write would wait out the whole timeout (60 s here) first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_a_frozen_node_moves_on_within_the_keepalive() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_cluster(dir.path(), &[]).await;
    let leader = cluster
        .wait_for_leader(None, Duration::from_secs(30))
        .await
        .unwrap();
    let follower = cluster
        .nodes()
        .iter()
        .map(|n| n.id)
        .find(|id| *id != leader)
        .unwrap();
    let mut endpoints = vec![cluster.node(follower).unwrap().endpoint()];
    endpoints.extend(
        cluster
            .nodes()
            .iter()
            .filter(|n| n.id != follower)
            .map(|n| n.endpoint()),
    );
    let request_timeout = Duration::from_secs(60);
    let client = Client::with_config(
        endpoints,
        engram_client::ClientConfig {
            request_timeout,
            keepalive: Some(engram_client::Keepalive::fast()),
            ..engram_client::ClientConfig::default()
        },
    )
    .unwrap();
    let namespace = ns("test/frozen");
    // The first write goes through the follower (forwarded), so its connection is open.
    client
        .transact(&new_memory_tx(&namespace, "k1".into(), 1))
        .await
        .unwrap();

    let pid = cluster.node(follower).unwrap().pid().unwrap();
    signal(pid, "STOP");
    let started = Instant::now();
    let written = client.transact(&new_memory_tx(&namespace, "k2".into(), 2)).await;
    let took = started.elapsed();
    signal(pid, "CONT");
    let receipt = written.unwrap();
    assert!(receipt.tx > 0);
    assert!(
        took < request_timeout / 2,
        "the write waited {took:?} on the frozen node; the pings should have moved it on"
    );
    // It was answered by another node, and the frozen node, thawed, catches up with it.
    let thawed = Client::connect(vec![cluster.node(follower).unwrap().endpoint()])
        .await
        .unwrap();
    wait_until(
        "the thawed node applies the write",
        Duration::from_secs(30),
        async || {
            thawed
                .status()
                .await
                .is_ok_and(|status| status.applied_index >= receipt.tx)
        },
    )
    .await;
}

async fn snapshot(client: &Client, leader: &Client, namespace: &Namespace, entity: EntityId) -> Snapshot {
    let head = leader.head().await.unwrap();
    let mut datoms = client
        .get(namespace, entity, GetOptions::default())
        .await
        .unwrap()
        .datoms;
    datoms.sort_by(|a, b| a.attribute.cmp(&b.attribute));
    Snapshot {
        head_index: head.index,
        head_hash: head.hash,
        datoms,
    }
}

fn run_cli(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new(EXE)
        .args(args)
        .env_remove("ENGRAM_ENDPOINTS")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_with_exact_codes_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start_cluster(dir.path(), &["--max-tx-bytes", "65536"]).await;
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let leader_id = cluster
        .wait_for_leader(None, Duration::from_secs(30))
        .await
        .unwrap();
    let leader = Client::connect(vec![cluster.node(leader_id).unwrap().endpoint()])
        .await
        .unwrap();
    let space = ns("test/bad");

    // A known entity to compare before and after.
    let task = EntityRef::Temp("task".into());
    let seed = TxRequest {
        namespace: space.clone(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops: vec![
            assert_op(
                task.clone(),
                ":task/title",
                Value::String("write the tests".into()),
            ),
            assert_op(
                task.clone(),
                ":task/status",
                Value::Keyword(":status/open".into()),
            ),
            assert_op(task, ":task/n", Value::I64(1)),
        ],
        preconditions: vec![],
        idempotency_key: Some("seed".into()),
        provenance: provenance("tester"),
    };
    let receipt = client.transact(&seed).await.unwrap();
    let id = EntityId(receipt.temp_ids["task"]);
    let before = snapshot(&client, &leader, &space, id).await;
    assert_eq!(before.datoms.len(), 3);
    assert_eq!(before.head_index, receipt.audit_index);

    let good = pb::TransactRequest::from(&TxRequest {
        namespace: space.clone(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops: vec![assert_op(EntityRef::Id(id), ":task/n", Value::I64(2))],
        preconditions: vec![],
        idempotency_key: None,
        provenance: provenance("tester"),
    });
    let with = |f: &dyn Fn(&mut pb::TransactRequest)| {
        let mut r = good.clone();
        f(&mut r);
        r
    };
    let big = "x".repeat(100 * 1024);
    let cases: Vec<(&str, pb::TransactRequest, Code)> = vec![
        (
            "missing provenance",
            with(&|r| r.provenance = None),
            Code::InvalidArgument,
        ),
        (
            "missing value",
            with(&|r| r.ops[0].value = None),
            Code::InvalidArgument,
        ),
        (
            "wrong value type",
            with(&|r| {
                r.ops[0].value = Some(pb::Value {
                    kind: Some(pb::value::Kind::String("two".into())),
                })
            }),
            Code::InvalidArgument,
        ),
        (
            "namespace ../x",
            with(&|r| r.namespace = "../x".into()),
            Code::InvalidArgument,
        ),
        (
            "namespace /abs",
            with(&|r| r.namespace = "/abs".into()),
            Code::InvalidArgument,
        ),
        (
            "above max-tx-bytes",
            with(&|r| {
                r.ops[0].value = Some(pb::Value {
                    kind: Some(pb::value::Kind::String(big.clone())),
                })
            }),
            Code::ResourceExhausted,
        ),
        (
            "precondition conflict",
            with(&|r| {
                r.preconditions = vec![pb::Precondition::from_domain(
                    id,
                    ":task/status",
                    &Value::Keyword(":status/done".into()),
                )]
            }),
            Code::FailedPrecondition,
        ),
        (
            "retract a value that is not current",
            with(&|r| {
                r.ops[0].op = pb::Op::Retract as i32;
                r.ops[0].value = Some((&Value::I64(7)).into());
            }),
            Code::FailedPrecondition,
        ),
        (
            "unknown entity",
            with(&|r| {
                r.ops[0].entity = Some(pb::EntityRef {
                    kind: Some(pb::entity_ref::Kind::Id(999_999)),
                })
            }),
            Code::NotFound,
        ),
        (
            "idempotency key reused for other content",
            with(&|r| r.idempotency_key = "seed".into()),
            Code::FailedPrecondition,
        ),
    ];
    for (what, req, code) in cases {
        let err = client.transact_raw(req).await.expect_err(what);
        assert_eq!(err.code(), Some(code), "{what}: {err}");
        assert!(
            !err.message().unwrap_or("").is_empty(),
            "{what}: the status explains itself"
        );
        assert_eq!(
            snapshot(&client, &leader, &space, id).await,
            before,
            "{what} changed the store or the chain"
        );
    }
    // The refusal of a reused key names the key and the transaction that first used it.
    let err = client
        .transact_raw(with(&|r| r.idempotency_key = "seed".into()))
        .await
        .unwrap_err();
    let message = err.message().unwrap_or("");
    assert!(
        message.contains("\"seed\"") && message.contains(&format!("tx {}", receipt.tx)),
        "{err}"
    );
    // The good request itself goes through: the refusals above were about their defects.
    let ok = client.transact_raw(good.clone()).await.unwrap();
    assert_eq!(ok.audit_index, before.head_index + 1);

    // Unknown entity on a read: NOT_FOUND as well.
    let err = client
        .get(&space, EntityId(999_999), GetOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound), "{err}");

    client_marked_forwarding_is_refused(&cluster, leader_id, &client, &leader, &space, id, &good).await;
    cli_against_the_cluster(&cluster, &space, id).await;
    cli_numbers_are_kept_exactly_or_refused(&cluster).await;
    verify_detects_a_tampered_chain(&cluster.node(leader_id).unwrap().endpoint()).await;
}

trait FromDomain {
    fn from_domain(entity: EntityId, attribute: &str, expected: &Value) -> Self;
}

impl FromDomain for pb::Precondition {
    fn from_domain(entity: EntityId, attribute: &str, expected: &Value) -> pb::Precondition {
        let p = Precondition {
            entity,
            attribute: attr(attribute),
            expected: Some(expected.clone()),
        };
        pb::Precondition {
            entity: p.entity.0,
            attribute: p.attribute.to_string(),
            expected: p.expected.as_ref().map(Into::into),
        }
    }
}

/// A client that sets the forwarding marker itself, on a call to a follower, is refused as
/// INVALID_ARGUMENT (which it does not retry), not told that leadership is moving (which it
/// retries for ever); the same call without the marker is forwarded to the leader and served.
async fn client_marked_forwarding_is_refused(
    cluster: &LocalCluster,
    leader_id: u64,
    client: &Client,
    leader: &Client,
    space: &Namespace,
    id: EntityId,
    good: &pb::TransactRequest,
) {
    let follower = (1..=3).find(|n| *n != leader_id).unwrap();
    let endpoint = cluster.node(follower).unwrap().endpoint();
    let channel = tonic::transport::Channel::from_shared(format!("http://{endpoint}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raw = pb::memory_client::MemoryClient::new(channel);
    fn marked<T>(message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        req.metadata_mut()
            .insert("x-engram-forwarded", "1".parse().unwrap());
        req
    }
    let before = snapshot(client, leader, space, id).await;
    let status = raw.transact(marked(good.clone())).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status
            .message()
            .contains("x-engram-forwarded: is not a node's signed marker"),
        "{}",
        status.message()
    );
    let read = pb::GetRequest {
        namespace: space.to_string(),
        entity: id.0,
        ..Default::default()
    };
    let status = raw.get(marked(read.clone())).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(
        snapshot(client, leader, space, id).await,
        before,
        "a refused marked call changed the store or the chain"
    );
    // Unmarked, the follower forwards both to the leader (marking them itself), which serves
    // them.
    let receipt = raw
        .transact(tonic::Request::new(good.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(receipt.audit_index, before.head_index + 1);
    let got = raw.get(tonic::Request::new(read)).await.unwrap().into_inner();
    assert!(
        got.datoms.iter().any(|d| d.tx == receipt.tx),
        "the forwarded read missed the forwarded write"
    );
}

/// The CLI keeps every number exactly or refuses it: an integer beyond 64 bits is refused
/// (saying to send it as a string) and leaves the chain and the attribute's type as they were;
/// the largest i64 stays an integer; 0.1 is stored as the float nearest it.
async fn cli_numbers_are_kept_exactly_or_refused(cluster: &LocalCluster) {
    let endpoints = cluster.endpoints().join(",");
    let space = "test/numbers";
    let tx = |attribute: &str, value: &str| {
        format!(
            r#"{{"namespace":"{space}","agent":"cli","ops":[{{"entity":"n","attribute":"{attribute}","value":{value}}}]}}"#
        )
    };
    let transact = |text: String| run_cli(&["-e", &endpoints, "--json", "transact", "-"], Some(&text));
    let out = transact(tx(":n/big", r#"{"i64": 9223372036854775807}"#));
    assert!(out.status.success(), "transact: {}", text(&out.stderr));
    let receipt: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entity = receipt["temp_ids"]["n"].as_u64().unwrap();
    let out = transact(tx(":n/tenth", r#"{"f64": 0.1}"#).replace(r#""n""#, &entity.to_string()));
    assert!(out.status.success(), "transact: {}", text(&out.stderr));

    let head = || {
        let out = run_cli(&["-e", &endpoints, "--json", "audit", "head"], None);
        assert!(out.status.success(), "audit head: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let before = head();
    let bignum =
        tx(":n/big", r#"{"i64": 123456789012345678901234567890}"#).replace(r#""n""#, &entity.to_string());
    let out = transact(bignum);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            "number 123456789012345678901234567890 cannot be stored exactly: a JSON integer must fit in 64 bits (i64 or u64); send a larger one as a string"
        ),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(head(), before, "a refused number moved the chain");
    // The attribute is still an integer one.
    let out = transact(tx(":n/big", r#"{"i64": -5}"#));
    assert!(out.status.success(), "transact: {}", text(&out.stderr));

    let out = run_cli(
        &[
            "-e",
            &endpoints,
            "--json",
            "get",
            "--ns",
            space,
            "--entity",
            &entity.to_string(),
        ],
        None,
    );
    assert!(out.status.success(), "get: {}", text(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let value = |attribute: &str| {
        got["datoms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["attribute"] == attribute)
            .map(|d| d["value"].clone())
    };
    assert_eq!(
        value(":n/big"),
        Some(serde_json::json!({"i64": 9223372036854775807i64}))
    );
    assert_eq!(value(":n/tenth"), Some(serde_json::json!({"f64": 0.1})));
}

/// The binary against a live cluster: a transaction from stdin, a read, and a verification.
async fn cli_against_the_cluster(cluster: &LocalCluster, space: &Namespace, id: EntityId) {
    let endpoints = cluster.endpoints().join(",");
    let tx = format!(
        r#"{{"namespace":"{space}","agent":"cli","idempotency_key":"cli-1",
            "ops":[{{"entity":{},"attribute":":task/title","value":{{"string":"from the CLI"}}}}],
            "preconditions":[{{"entity":{},"attribute":":task/status","expected":{{"keyword":":status/open"}}}}]}}"#,
        id.0, id.0
    );
    let out = run_cli(&["--endpoint", &endpoints, "--json", "transact", "-"], Some(&tx));
    assert!(out.status.success(), "transact: {}", text(&out.stderr));
    let receipt: serde_json::Value = serde_json::from_slice(&out.stdout).expect("receipt JSON");
    assert!(receipt["tx"].as_u64().is_some_and(|t| t > 0), "{receipt}");

    let out = run_cli(
        &[
            "-e",
            &endpoints,
            "--json",
            "get",
            "--ns",
            space.as_str(),
            "--entity",
            &id.0.to_string(),
        ],
        None,
    );
    assert!(out.status.success(), "get: {}", text(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let title = got["datoms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["attribute"] == ":task/title")
        .cloned();
    assert_eq!(
        title.map(|d| d["value"].clone()),
        Some(serde_json::json!({"string": "from the CLI"}))
    );

    // A refused write: exit 1 and the server's message.
    let conflict = tx
        .replace("cli-1", "cli-2")
        .replace(":status/open", ":status/done");
    let out = run_cli(&["-e", &endpoints, "transact"], Some(&conflict));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("FAILED_PRECONDITION"),
        "{}",
        text(&out.stderr)
    );

    let out = run_cli(&["-e", &endpoints, "--json", "audit", "verify", "--each"], None);
    assert!(out.status.success(), "audit verify: {}", text(&out.stderr));
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports.as_array().map(Vec::len), Some(3), "{reports}");
    assert!(
        reports.as_array().unwrap().iter().all(|r| r["ok"] == true),
        "{reports}"
    );

    let out = run_cli(&["-e", &endpoints, "cluster", "status"], None);
    assert!(out.status.success(), "cluster status: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().filter(|l| l.contains("Leader")).count(),
        1,
        "{}",
        text(&out.stdout)
    );
}

/// A fake Audit service that serves a copy of a real chain, with one entry altered.
struct TamperedAudit {
    entries: Vec<pb::AuditEntry>,
}

#[tonic::async_trait]
impl pb::audit_server::Audit for TamperedAudit {
    type EntriesStream = futures::stream::BoxStream<'static, Result<pb::AuditEntry, tonic::Status>>;

    async fn entries(
        &self,
        request: tonic::Request<pb::EntriesRequest>,
    ) -> Result<tonic::Response<Self::EntriesStream>, tonic::Status> {
        let from = request.into_inner().from_index.max(1) as usize;
        let items: Vec<_> = self.entries.iter().skip(from - 1).cloned().map(Ok).collect();
        Ok(tonic::Response::new(futures::stream::iter(items).boxed()))
    }

    async fn head(
        &self,
        _: tonic::Request<pb::HeadRequest>,
    ) -> Result<tonic::Response<pb::HeadResponse>, tonic::Status> {
        let last = self.entries.last().cloned().unwrap_or_default();
        Ok(tonic::Response::new(pb::HeadResponse {
            index: last.index,
            hash: last.hash,
            tx: last.tx,
            ..Default::default()
        }))
    }

    // The verifier under test uses only Entries and Head.
    type ExportStream = futures::stream::BoxStream<'static, Result<pb::ExportChunk, tonic::Status>>;

    async fn checkpoint(
        &self,
        _: tonic::Request<pb::CheckpointRequest>,
    ) -> Result<tonic::Response<pb::SignedCheckpoint>, tonic::Status> {
        Err(tonic::Status::unimplemented("not served by this fake"))
    }

    async fn inclusion_proof(
        &self,
        _: tonic::Request<pb::InclusionProofRequest>,
    ) -> Result<tonic::Response<pb::InclusionProofResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not served by this fake"))
    }

    async fn consistency_proof(
        &self,
        _: tonic::Request<pb::ConsistencyProofRequest>,
    ) -> Result<tonic::Response<pb::ConsistencyProofResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not served by this fake"))
    }

    async fn export(
        &self,
        _: tonic::Request<pb::ExportRequest>,
    ) -> Result<tonic::Response<Self::ExportStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("not served by this fake"))
    }
}

/// `engram audit verify` against a chain whose first attestation from entry 3 on (a node signs
/// once per apply group, so not every entry carries one) has altered signature bytes: exit
/// code 2, naming that index and the signature field.
async fn verify_detects_a_tampered_chain(leader: &str) {
    let client = Client::connect(vec![leader.to_string()]).await.unwrap();
    let mut entries: Vec<pb::AuditEntry> = client
        .audit_entries(1, 0)
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert!(entries.len() >= 4, "{} entries", entries.len());
    let at = (2..entries.len())
        .find(|i| {
            SignedEntry::decode(&entries[*i].signed)
                .unwrap()
                .attestation
                .is_some()
        })
        .expect("the served chain ends with an attested entry");
    let tampered = entries[at].index;
    let mut signed = SignedEntry::decode(&entries[at].signed).unwrap();
    signed.attestation.as_mut().unwrap().signature[10] ^= 0x40;
    entries[at].signed = signed.encode();

    let port = free_ports(1).unwrap()[0];
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::audit_server::AuditServer::new(TamperedAudit { entries }))
            .serve(addr),
    );
    let endpoint = addr.to_string();
    let fake = Client::connect(vec![endpoint.clone()]).await.unwrap();
    let err = loop {
        match fake.verify_chain(|_| {}).await {
            Err(ClientError::Rpc {
                code: Code::Unavailable,
                ..
            }) => tokio::time::sleep(Duration::from_millis(50)).await,
            other => break other.expect_err("a tampered chain must not verify"),
        }
    };
    match &err {
        ClientError::Chain { error, .. } => {
            assert_eq!(error.index, tampered, "{err}");
            assert!(
                error.fault.to_string().starts_with("attestation.signature"),
                "{err}"
            );
        }
        other => panic!("expected a chain error, got {other}"),
    }

    let out =
        tokio::task::spawn_blocking(move || run_cli(&["-e", &endpoint, "--json", "audit", "verify"], None))
            .await
            .unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["index"], tampered, "{report}");
    assert!(
        report["fault"]
            .as_str()
            .unwrap()
            .starts_with("attestation.signature"),
        "{report}"
    );
    server.abort();
}

#[test]
fn cli_help_works() {
    let out = run_cli(&["--help"], None);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for command in [
        "serve", "cluster", "transact", "get", "history", "find", "audit", "demo",
    ] {
        assert!(help.contains(command), "{command} missing from --help");
    }
    let out = run_cli(&["transact", "--help"], None);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("TRANSACTION FORMAT"));
}

#[test]
fn cli_transact_with_a_bad_file_exits_non_zero_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tx.json");
    std::fs::write(
        &file,
        r#"{"namespace":"team/a","agent":"a","ops":[{"entity":"t","attribute":":a/b","value":{"i64":"five"}}]}"#,
    )
    .unwrap();
    // No server is needed: the file is refused before anything is sent.
    let out = run_cli(
        &["--endpoint", "127.0.0.1:9", "transact", file.to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("ops[0].value.i64: expected an integer"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = run_cli(
        &[
            "--endpoint",
            "127.0.0.1:9",
            "--json",
            "transact",
            "/nonexistent/tx.json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON error document");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/tx.json"),
        "{err}"
    );
}

#[test]
fn cli_reports_an_unreachable_node_with_exit_code_1() {
    let port = free_ports(1).unwrap()[0];
    let endpoint = format!("127.0.0.1:{port}");
    // A short retry budget: the node stays down, so the budget is all this test would wait.
    let args = [
        "--endpoint",
        &endpoint,
        "--retry-budget-secs",
        "0.5",
        "audit",
        "verify",
    ];
    let out = run_cli(&args, None);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("UNAVAILABLE"), "{}", text(&out.stderr));
}
