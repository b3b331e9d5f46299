//! Three nodes in one process, each with its own RocksDB store and port: the write path, the
//! read paths, forwarding from followers and replica agreement of the audit chain.

#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use engram_proto::pb;
use engram_server::{ServerConfig, run_until};
use tokio::sync::oneshot;
use tonic::Code;
use tonic::transport::Channel;

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

struct Cluster {
    addrs: Vec<SocketAddr>,
    stops: Vec<oneshot::Sender<()>>,
    dirs: Vec<tempfile::TempDir>,
}

async fn channel(addr: SocketAddr) -> Channel {
    for _ in 0..100 {
        if let Ok(ch) = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            return ch;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("node at {addr} never came up");
}

fn spawn_node(id: u64, max_tx_bytes: usize) -> (SocketAddr, oneshot::Sender<()>, tempfile::TempDir) {
    let addr = free_addr();
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(id, addr, dir.path().to_path_buf());
    config.max_tx_bytes = max_tx_bytes;
    // Small, so the test crosses several snapshots and log purges.
    config.raft.snapshot_every_entries = 50;
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        run_until(config, async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    (addr, tx, dir)
}

async fn start(n: u64, max_tx_bytes: usize) -> Cluster {
    let mut addrs = Vec::new();
    let mut stops = Vec::new();
    let mut dirs = Vec::new();
    for id in 1..=n {
        let (addr, stop, dir) = spawn_node(id, max_tx_bytes);
        addrs.push(addr);
        stops.push(stop);
        dirs.push(dir);
    }
    let mut cluster = pb::cluster_client::ClusterClient::new(channel(addrs[0]).await);
    for a in &addrs[1..] {
        channel(*a).await;
    }
    let members = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| pb::Member {
            id: i as u64 + 1,
            addr: a.to_string(),
            ..Default::default()
        })
        .collect();
    let listed = cluster
        .init(pb::InitRequest {
            members,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .members;
    assert_eq!(
        listed.len() as u64,
        n,
        "Init answers with the new membership: {listed:?}"
    );
    // Wait for a leader everywhere.
    for a in &addrs {
        let mut c = pb::cluster_client::ClusterClient::new(channel(*a).await);
        let mut ok = false;
        for _ in 0..200 {
            if c.status(pb::StatusRequest {})
                .await
                .unwrap()
                .into_inner()
                .leader_id
                .is_some()
            {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(ok, "no leader seen by {a}");
    }
    Cluster { addrs, stops, dirs }
}

/// The services a node lists through one version of gRPC server reflection.
macro_rules! reflected_services {
    ($version:ident, $addr:expr) => {{
        use tonic_reflection::pb::$version::ServerReflectionRequest;
        use tonic_reflection::pb::$version::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$version::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$version::server_reflection_response::MessageResponse;
        let mut client = ServerReflectionClient::new(channel($addr).await);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut replies = client
            .server_reflection_info(futures::stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        match replies.message().await.unwrap().and_then(|r| r.message_response) {
            Some(MessageResponse::ListServicesResponse(list)) => {
                list.service.into_iter().map(|s| s.name).collect::<Vec<_>>()
            }
            other => panic!("unexpected reflection answer: {other:?}"),
        }
    }};
}

/// Sends raw bytes as a request body, to test what the server does with malformed protobuf.
#[derive(Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, buf: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(buf, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let out = bytes::Buf::chunk(buf).to_vec();
        bytes::Buf::advance(buf, out.len());
        Ok(Some(out))
    }
}

/// Streams a node's whole chain and verifies every link and signature; returns its length.
async fn verified_chain_len(addr: SocketAddr) -> u64 {
    let mut audit = pb::audit_client::AuditClient::new(channel(addr).await);
    let mut stream = audit
        .entries(pb::EntriesRequest {
            from_index: 1,
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut verifier = engram_audit::ChainVerifier::new();
    while let Some(e) = stream.message().await.unwrap() {
        verifier
            .push(&engram_audit::SignedEntry::decode(&e.signed).unwrap())
            .unwrap();
    }
    verifier.finish().unwrap();
    verifier.checked()
}

fn prov() -> Option<pb::Provenance> {
    Some(pb::Provenance {
        agent: "tester".into(),
        confidence: 1.0,
        ..Default::default()
    })
}

fn assert_op(entity: pb::entity_ref::Kind, attr: &str, value: pb::value::Kind) -> pb::TxOp {
    pb::TxOp {
        op: pb::Op::Assert as i32,
        entity: Some(pb::EntityRef { kind: Some(entity) }),
        attribute: attr.into(),
        value: Some(pb::Value { kind: Some(value) }),
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_replicate_and_chains_agree() {
    let _logs = engram_server::telemetry::init(None, Default::default());
    let cluster = start(3, 64 << 10).await;
    // Write through every node, followers forward to the leader.
    let mut entities = Vec::new();
    for (i, addr) in cluster.addrs.iter().enumerate() {
        let mut memory = pb::memory_client::MemoryClient::new(channel(*addr).await);
        for k in 0..30 {
            let resp = memory
                .transact(pb::TransactRequest {
                    branch: String::new(),
                    value_salts: Vec::new(),
                    namespace: "team/a".into(),
                    ops: vec![
                        assert_op(
                            pb::entity_ref::Kind::Temp("t".into()),
                            ":task/title",
                            pb::value::Kind::String(format!("task {i}-{k}")),
                        ),
                        assert_op(
                            pb::entity_ref::Kind::Temp("t".into()),
                            ":task/rank",
                            pb::value::Kind::I64(k),
                        ),
                    ],
                    preconditions: vec![],
                    idempotency_key: format!("k-{i}-{k}"),
                    provenance: prov(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(resp.datom_hashes.len(), 2);
            entities.push((resp.temp_ids["t"], resp.tx, format!("task {i}-{k}")));
        }
    }
    // Linearizable reads from any node see every acknowledged write.
    for addr in &cluster.addrs {
        let mut memory = pb::memory_client::MemoryClient::new(channel(*addr).await);
        for (entity, _, title) in &entities {
            let got = memory
                .get(pb::GetRequest {
                    namespace: "team/a".into(),
                    entity: *entity,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            let titles: Vec<_> = got
                .datoms
                .iter()
                .filter(|d| d.attribute == ":task/title")
                .map(|d| d.value.clone().unwrap().kind.unwrap())
                .collect();
            assert_eq!(titles, vec![pb::value::Kind::String(title.clone())]);
        }
    }
    // A retry with the same idempotency key and the same content returns the original receipt.
    let mut memory = pb::memory_client::MemoryClient::new(channel(cluster.addrs[1]).await);
    let first_request = |title: &str| pb::TransactRequest {
        branch: String::new(),
        value_salts: Vec::new(),
        namespace: "team/a".into(),
        ops: vec![
            assert_op(
                pb::entity_ref::Kind::Temp("t".into()),
                ":task/title",
                pb::value::Kind::String(title.into()),
            ),
            assert_op(
                pb::entity_ref::Kind::Temp("t".into()),
                ":task/rank",
                pb::value::Kind::I64(0),
            ),
        ],
        preconditions: vec![],
        idempotency_key: "k-0-0".into(),
        provenance: prov(),
    };
    let again = memory
        .transact(first_request("task 0-0"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.tx, entities[0].1);
    assert_eq!(again.temp_ids["t"], entities[0].0);

    // Every replica converges on the same chain head.
    let mut heads = Vec::new();
    for addr in &cluster.addrs {
        let mut audit = pb::audit_client::AuditClient::new(channel(*addr).await);
        let mut head = None;
        for _ in 0..100 {
            let h = audit.head(pb::HeadRequest {}).await.unwrap().into_inner();
            if h.index >= 91 {
                head = Some((h.index, h.hash));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        heads.push(head.expect("replica caught up"));
    }
    assert!(heads.windows(2).all(|w| w[0] == w[1]), "heads differ: {heads:?}");

    // The chain streams and verifies end to end on a follower.
    assert_eq!(verified_chain_len(cluster.addrs[2]).await, heads[0].0);

    // Reflection answers in both versions, so grpcurl old and new needs no proto files.
    for services in [
        reflected_services!(v1, cluster.addrs[0]),
        reflected_services!(v1alpha, cluster.addrs[0]),
    ] {
        for expected in [
            "engram.v1.Memory",
            "engram.v1.Audit",
            "engram.v1.Cluster",
            "grpc.health.v1.Health",
        ] {
            assert!(
                services.iter().any(|s| s == expected),
                "{expected} missing from {services:?}"
            );
        }
    }

    // Bad input: precise codes, and nothing changes.
    let mut audit_leader = pb::audit_client::AuditClient::new(channel(cluster.addrs[0]).await);
    let head_before = audit_leader.head(pb::HeadRequest {}).await.unwrap().into_inner();
    let mut raw = tonic::client::Grpc::new(channel(cluster.addrs[0]).await);
    raw.ready().await.unwrap();
    let malformed = raw
        .unary(
            tonic::Request::new(vec![0xff, 0xff, 0xff]),
            tonic::codegen::http::uri::PathAndQuery::from_static("/engram.v1.Memory/Transact"),
            RawCodec,
        )
        .await
        .unwrap_err();
    assert_eq!(malformed.code(), Code::InvalidArgument, "{malformed:?}");
    let bad_ns = memory
        .transact(pb::TransactRequest {
            branch: String::new(),
            value_salts: Vec::new(),
            namespace: "../x".into(),
            provenance: prov(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_ns.code(), Code::InvalidArgument);
    let unknown = memory
        .get(pb::GetRequest {
            namespace: "team/a".into(),
            entity: 999_999,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);
    // The same idempotency key with other content is refused, not answered with the first
    // receipt: that would acknowledge a write that never happened.
    let reused = memory.transact(first_request("not task 0-0")).await.unwrap_err();
    assert_eq!(reused.code(), Code::FailedPrecondition, "{reused:?}");
    let first_tx = entities[0].1;
    assert!(
        reused.message().contains("\"k-0-0\"") && reused.message().contains(&format!("tx {first_tx}")),
        "{reused:?}"
    );
    let head_after = audit_leader.head(pb::HeadRequest {}).await.unwrap().into_inner();
    assert_eq!(head_before, head_after, "bad input must not touch the chain");

    // A node added after the log was purged catches up by snapshot; its chain verifies end
    // to end and matches the others (the membership change itself adds one entry).
    let (addr4, stop4, _dir4) = spawn_node(4, 64 << 10);
    channel(addr4).await;
    let mut cluster_api = pb::cluster_client::ClusterClient::new(channel(cluster.addrs[1]).await);
    let members = cluster_api
        .add_node(pb::AddNodeRequest {
            id: 4,
            addr: addr4.to_string(),
            learner_only: false,
        })
        .await
        .unwrap()
        .into_inner()
        .members;
    assert!(members.iter().any(|m| m.id == 4 && m.voter), "{members:?}");
    let mut leader_audit = pb::audit_client::AuditClient::new(channel(cluster.addrs[0]).await);
    let target = leader_audit.head(pb::HeadRequest {}).await.unwrap().into_inner();
    let mut audit4 = pb::audit_client::AuditClient::new(channel(addr4).await);
    let mut caught_up = false;
    for _ in 0..200 {
        let h = match audit4.head(pb::HeadRequest {}).await {
            Ok(h) => h.into_inner(),
            // While it installs the leader's snapshot, a node refuses reads of its state.
            Err(status) if status.code() == tonic::Code::Unavailable => {
                assert!(status.message().contains("installing a snapshot"), "{status:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(status) => panic!("head of node 4: {status:?}"),
        };
        if h.index >= target.index {
            assert_eq!(h.hash, target.hash);
            caught_up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(caught_up, "node 4 never caught up");
    assert!(verified_chain_len(addr4).await >= target.index);
    let status4 = pb::cluster_client::ClusterClient::new(channel(addr4).await)
        .status(pb::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(status4.initialized);

    let _ = stop4.send(());
    for s in cluster.stops {
        let _ = s.send(());
    }
    drop(cluster.dirs);
}

/// Asserts that `answer` refuses oversize caller input with INVALID_ARGUMENT and a short
/// message that names `what` and the input's length instead of quoting all of it.
fn assert_short_refusal<T: std::fmt::Debug>(
    answer: Result<T, tonic::Status>,
    what: &str,
    input_bytes: usize,
) {
    let status = answer.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{what}: {}", status.code());
    let message = status.message();
    assert!(message.len() < 300, "{what}: a {}-byte message", message.len());
    assert!(message.contains(what), "{what}: {message}");
    assert!(
        message.contains(&format!("…({input_bytes} bytes)")),
        "{what}: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversize_input_is_refused_with_a_short_message() {
    let cluster = start(1, 1 << 20).await;
    let mut memory = pb::memory_client::MemoryClient::new(channel(cluster.addrs[0]).await);
    let mut audit = pb::audit_client::AuditClient::new(channel(cluster.addrs[0]).await);
    let head_before = audit.head(pb::HeadRequest {}).await.unwrap().into_inner();
    for len in [10_000, 1 << 20] {
        let long = "n".repeat(len);
        let answer = memory
            .get(pb::GetRequest {
                namespace: long.clone(),
                entity: 1,
                ..Default::default()
            })
            .await;
        assert_short_refusal(answer, "invalid namespace", len);
        let answer = memory
            .transact(pb::TransactRequest {
                namespace: long.clone(),
                ops: vec![assert_op(
                    pb::entity_ref::Kind::Temp("t".into()),
                    ":task/title",
                    pb::value::Kind::String("x".into()),
                )],
                provenance: prov(),
                ..Default::default()
            })
            .await;
        assert_short_refusal(answer, "invalid namespace", len);
        let answer = memory
            .history(pb::HistoryRequest {
                namespace: long.clone(),
                target: Some(pb::history_request::Target::Entity(1)),
                ..Default::default()
            })
            .await;
        assert_short_refusal(answer, "invalid namespace", len);
        let answer = memory
            .diff(pb::DiffRequest {
                namespace: long.clone(),
                ..Default::default()
            })
            .await;
        assert_short_refusal(answer, "invalid namespace", len);
        let answer = memory
            .watch(pb::WatchRequest {
                namespace: long.clone(),
                ..Default::default()
            })
            .await;
        assert_short_refusal(answer, "invalid namespace", len);
        // The other named fields of reads: attribute and branch.
        let answer = memory
            .find(pb::FindRequest {
                namespace: "team/a".into(),
                attribute: format!(":a/{long}"),
                ..Default::default()
            })
            .await;
        assert_short_refusal(answer, "invalid attribute", len + 3);
        let answer = memory
            .history(pb::HistoryRequest {
                namespace: "team/a".into(),
                target: Some(pb::history_request::Target::Attribute(format!(":a/{long}"))),
                ..Default::default()
            })
            .await;
        assert_short_refusal(answer, "invalid attribute", len + 3);
        let answer = memory
            .get(pb::GetRequest {
                namespace: "team/a".into(),
                branch: long.clone(),
                entity: 1,
                ..Default::default()
            })
            .await;
        assert_short_refusal(answer, "invalid branch name", len);
    }
    let head_after = audit.head(pb::HeadRequest {}).await.unwrap().into_inner();
    assert_eq!(head_before, head_after, "refused input must not touch the chain");
    for s in cluster.stops {
        let _ = s.send(());
    }
    drop(cluster.dirs);
}

/// Collects `want` events from a watch stream, or fails after a deadline with what it got.
async fn watched_txs(stream: &mut tonic::Streaming<pb::TxEvent>, want: usize) -> Vec<(u64, String)> {
    let mut got = Vec::new();
    while got.len() < want {
        let event = tokio::time::timeout(Duration::from_secs(60), stream.message())
            .await
            .unwrap_or_else(|_| panic!("watch stalled after {} of {want} events", got.len()))
            .unwrap()
            .unwrap();
        let title = match event.datoms[0].value.as_ref().and_then(|v| v.kind.clone()) {
            Some(pb::value::Kind::String(s)) => s,
            other => panic!("unexpected value {other:?}"),
        };
        got.push((event.tx, title));
    }
    got
}

/// A node's watchers share one in-memory tail of the newest transactions. A watcher that
/// follows live, one that starts far behind the tail (reading the store, then crossing into
/// the tail), and one that starts mid-way on another namespace each see exactly their
/// namespace's transactions, in order, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watchers_behind_and_inside_the_shared_tail_see_each_transaction_once() {
    let cluster = start(1, 1 << 20).await;
    let ch = channel(cluster.addrs[0]).await;
    let mut memory = pb::memory_client::MemoryClient::new(ch.clone());
    let watch = |ns: &str, from_tx: u64| pb::WatchRequest {
        namespace: ns.into(),
        from_tx,
        ..Default::default()
    };
    let mut live = memory.watch(watch("tail/a", 0)).await.unwrap().into_inner();

    // More transactions than the tail holds, alternating between two namespaces.
    let total = engram_server::WATCH_TAIL_TXS + 300;
    let writers = 16;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let mut memory = pb::memory_client::MemoryClient::new(ch.clone());
        tasks.push(tokio::spawn(async move {
            let mut written = Vec::new();
            for k in (w..total).step_by(writers) {
                let ns = if k % 2 == 0 { "tail/a" } else { "tail/b" };
                let title = format!("t{k}");
                let resp = memory
                    .transact(pb::TransactRequest {
                        namespace: ns.into(),
                        ops: vec![assert_op(
                            pb::entity_ref::Kind::Temp("t".into()),
                            ":task/title",
                            pb::value::Kind::String(title.clone()),
                        )],
                        provenance: prov(),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                written.push((ns, resp.tx, title));
            }
            written
        }));
    }
    let mut written = Vec::new();
    for t in tasks {
        written.extend(t.await.unwrap());
    }
    let expected = |ns: &str, from_tx: u64| {
        let mut txs: Vec<(u64, String)> = written
            .iter()
            .filter(|(n, tx, _)| *n == ns && *tx >= from_tx)
            .map(|(_, tx, title)| (*tx, title.clone()))
            .collect();
        txs.sort();
        txs
    };
    let mid = written.iter().map(|(_, tx, _)| *tx).max().unwrap() / 2;
    let want_a = expected("tail/a", 0);
    let want_b = expected("tail/b", mid);
    assert!(want_a.len() > engram_server::WATCH_TAIL_TXS / 2);

    let mut behind = memory.watch(watch("tail/a", 0)).await.unwrap().into_inner();
    let mut other = memory.watch(watch("tail/b", mid)).await.unwrap().into_inner();
    assert_eq!(watched_txs(&mut live, want_a.len()).await, want_a);
    assert_eq!(watched_txs(&mut behind, want_a.len()).await, want_a);
    assert_eq!(watched_txs(&mut other, want_b.len()).await, want_b);

    // All three now follow the tail: one more write reaches the two on its namespace.
    let last = memory
        .transact(pb::TransactRequest {
            namespace: "tail/a".into(),
            ops: vec![assert_op(
                pb::entity_ref::Kind::Temp("t".into()),
                ":task/title",
                pb::value::Kind::String("last".into()),
            )],
            provenance: prov(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for stream in [&mut live, &mut behind] {
        assert_eq!(watched_txs(stream, 1).await, vec![(last.tx, "last".to_string())]);
    }
    let quiet = tokio::time::timeout(Duration::from_millis(300), other.message()).await;
    assert!(quiet.is_err(), "a watcher of tail/b saw {quiet:?}");
    for s in cluster.stops {
        let _ = s.send(());
    }
    drop(cluster.dirs);
}
