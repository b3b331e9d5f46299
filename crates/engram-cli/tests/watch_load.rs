//! `Memory.Watch` under load on a real 3-node cluster, no timing targets (those live in
//! `bench/`): a thousand watchers each get every marker exactly once and in order after a bulk
//! load, on connections of their own and multiplexed; a hundred watchers reading a large store
//! from its first transaction starve nothing: no election, no write refused, every watcher
//! complete.
//!
//! `ENGRAM_BIN` runs the nodes from another build (a release binary, for the full-size store:
//! `ENGRAM_WATCH_LOAD_DATOMS=1000000`).
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, ClientConfig, RetryPolicy, WatchFilter, pb};
use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, TxOp, TxRequest, Value};
use futures::StreamExt;
use futures::stream::BoxStream;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

/// The tests here run one at a time: two loaded clusters on one small machine would starve
/// each other's processes of CPU, and an election from that says nothing about the watch.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn exe() -> PathBuf {
    std::env::var_os("ENGRAM_BIN").map_or_else(|| PathBuf::from(EXE), PathBuf::from)
}

/// A transaction in `ns` of `entities` new entities with `:load/n`, and one with
/// `:load/batch = batch` (what the filtered watchers follow).
fn batch_tx(ns: &str, batch: i64, entities: usize) -> TxRequest {
    let op = |temp: String, attribute: &str, value: Value| TxOp {
        op: Op::Assert,
        entity: EntityRef::Temp(temp),
        attribute: Attribute::new(attribute).unwrap(),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    };
    let mut ops: Vec<TxOp> = (0..entities)
        .map(|i| {
            op(
                format!("e{i}"),
                ":load/n",
                Value::I64(batch * 1_000_000 + i as i64),
            )
        })
        .collect();
    ops.push(op("batch".into(), ":load/batch", Value::I64(batch)));
    TxRequest {
        namespace: Namespace::new(ns).unwrap(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops,
        preconditions: vec![],
        idempotency_key: Some(format!("{ns}-{batch}")),
        provenance: Provenance {
            agent: "integration-test".into(),
            confidence: 1.0,
            ..Default::default()
        },
    }
}

/// A client of its own (its own connection) for `endpoint`, without a per-call deadline.
fn watch_client(endpoint: &str) -> Client {
    let config = ClientConfig {
        request_timeout: Duration::from_secs(3600),
        ..ClientConfig::default()
    };
    Client::with_config(vec![endpoint.to_string()], config).unwrap()
}

fn watch_of(
    client: &Client,
    ns: &str,
    from_tx: u64,
    attribute: Option<&str>,
) -> BoxStream<'static, pb::TxEvent> {
    client
        .watch(WatchFilter {
            namespace: Namespace::new(ns).unwrap(),
            from_tx,
            attribute: attribute.map(|a| Attribute::new(a).unwrap()),
            entity: None,
            branch: None,
        })
        .map(|event| event.expect("the watch delivers instead of failing"))
        .boxed()
}

/// The `:load/batch` value of an event's datom, if it has one.
fn batch_of(event: &pb::TxEvent) -> Option<i64> {
    event
        .datoms
        .iter()
        .find_map(|d| match d.value.as_ref().and_then(|v| v.kind.as_ref()) {
            Some(pb::value::Kind::I64(n)) if d.attribute == ":load/batch" => Some(*n),
            _ => None,
        })
}

/// Term and leader of every node.
async fn terms(cluster: &LocalCluster) -> Vec<(u64, u64, Option<u64>)> {
    let mut out: Vec<_> = cluster
        .statuses()
        .await
        .into_iter()
        .map(|(id, s)| {
            let s = s.unwrap();
            (id, s.term, s.leader_id)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watchers_each_get_every_marker_once_in_order_after_a_bulk_load() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(&exe(), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let writer = Client::connect(cluster.endpoints()).await.unwrap();

    // A bulk load to another namespace with no watch open: watchers that opened after one
    // used to wait seconds, or get nothing, while each scanned it.
    let loaded = Arc::new(AtomicUsize::new(0));
    let loaders: Vec<_> = (0..8)
        .map(|w| {
            let writer = writer.clone();
            let loaded = loaded.clone();
            tokio::spawn(async move {
                for b in 0..250 {
                    writer
                        .transact(&batch_tx("load/other", w * 1000 + b, 4))
                        .await
                        .unwrap();
                    loaded.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for l in loaders {
        l.await.unwrap();
    }
    assert_eq!(loaded.load(Ordering::Relaxed), 2000);

    // 1,000 watchers of a namespace no one has written yet, from the start: 500 on a
    // connection each, 500 over 5 shared connections; spread over the three nodes.
    const WATCHERS: usize = 1000;
    const MARKERS: i64 = 20;
    let endpoints = cluster.endpoints();
    let shared: Vec<Client> = (0..5)
        .map(|i| watch_client(&endpoints[i % endpoints.len()]))
        .collect();
    let mut tasks = Vec::with_capacity(WATCHERS);
    for w in 0..WATCHERS {
        let client = if w % 2 == 0 {
            watch_client(&endpoints[w % endpoints.len()])
        } else {
            shared[w % shared.len()].clone()
        };
        let mut stream = watch_of(&client, "fan/out", 0, None);
        tasks.push(tokio::spawn(async move {
            let _client = client;
            let mut seen = Vec::new();
            while seen.len() < MARKERS as usize {
                let event = tokio::time::timeout(Duration::from_secs(120), stream.next())
                    .await
                    .unwrap_or_else(|_| panic!("watcher {w} waited 120 s after {} markers", seen.len()))
                    .expect("the watch does not end");
                seen.push((event.tx, batch_of(&event).expect("a marker")));
            }
            seen
        }));
    }
    let mut sent = Vec::new();
    for m in 0..MARKERS {
        sent.push((writer.transact(&batch_tx("fan/out", m, 0)).await.unwrap().tx, m));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (w, task) in tasks.into_iter().enumerate() {
        let seen = task.await.unwrap();
        assert_eq!(seen, sent, "watcher {w}: every marker once, in commit order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_watchers_from_the_first_transaction_of_a_large_store_starve_nothing() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let datoms: usize = std::env::var("ENGRAM_WATCH_LOAD_DATOMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    const PER_TX: usize = 1000;
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(&exe(), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let leader = cluster.init(Duration::from_secs(30)).await.unwrap();
    let loader = Client::connect(cluster.endpoints()).await.unwrap();

    let batches = datoms.div_ceil(PER_TX) as i64;
    let next = Arc::new(AtomicUsize::new(0));
    let loaders: Vec<_> = (0..4)
        .map(|_| {
            let loader = loader.clone();
            let next = next.clone();
            tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let b = next.fetch_add(1, Ordering::Relaxed) as i64;
                    if b >= batches {
                        return done;
                    }
                    done.push((
                        loader
                            .transact(&batch_tx("big/main", b, PER_TX))
                            .await
                            .unwrap()
                            .tx,
                        b,
                    ));
                }
            })
        })
        .collect();
    let mut expected = Vec::new();
    for l in loaders {
        expected.extend(l.await.unwrap());
    }
    expected.sort();
    let before = terms(&cluster).await;

    // A writer straight to the leader with no retries: any refusal fails the test.
    let leader_endpoint = cluster.node(leader).unwrap().endpoint();
    let writer = Client::with_config(
        vec![leader_endpoint],
        ClientConfig {
            retry: RetryPolicy::never(),
            ..ClientConfig::default()
        },
    )
    .unwrap();

    const WATCHERS: usize = 100;
    let complete = Arc::new(AtomicUsize::new(0));
    let endpoints = cluster.endpoints();
    let mut tasks = Vec::with_capacity(WATCHERS);
    for w in 0..WATCHERS {
        let client = watch_client(&endpoints[w % endpoints.len()]);
        let mut stream = watch_of(&client, "big/main", 1, Some(":load/batch"));
        let complete = complete.clone();
        let load_txs = expected.len();
        tasks.push(tokio::spawn(async move {
            let _client = client;
            let mut seen = Vec::new();
            loop {
                let event = tokio::time::timeout(Duration::from_secs(300), stream.next())
                    .await
                    .unwrap_or_else(|_| panic!("watcher {w} waited 300 s after {} events", seen.len()))
                    .expect("the watch does not end");
                assert_eq!(event.datoms.len(), 1, "the filter passes only :load/batch");
                seen.push((event.tx, batch_of(&event).unwrap()));
                if seen.len() == load_txs {
                    complete.fetch_add(1, Ordering::Relaxed);
                }
                // Done once it has the load and the writer's last transaction (a negative
                // batch number).
                if seen.last().is_some_and(|(_, b)| *b == -1) {
                    return seen;
                }
            }
        }));
    }

    // The writer writes every 50 ms while the watchers read the store, and a little longer.
    let mut written = Vec::new();
    let mut n = 0i64;
    while complete.load(Ordering::Relaxed) < WATCHERS || n < 20 {
        n += 1;
        let receipt = writer
            .transact(&batch_tx("big/main", batches + n, 1))
            .await
            .unwrap_or_else(|e| panic!("write {n} refused while watchers read: {e}"));
        written.push((receipt.tx, batches + n));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            n < 20 * 60 * 10,
            "the watchers did not finish reading the store in 10 minutes"
        );
    }
    let last = writer.transact(&batch_tx("big/main", -1, 0)).await.unwrap();
    written.push((last.tx, -1));
    expected.extend(written);
    for (w, task) in tasks.into_iter().enumerate() {
        let seen = task.await.unwrap();
        assert_eq!(seen.len(), expected.len(), "watcher {w}: every transaction once");
        assert_eq!(seen, expected, "watcher {w}: in commit order");
    }
    assert_eq!(
        terms(&cluster).await,
        before,
        "no election while a hundred watchers read the store"
    );
}
