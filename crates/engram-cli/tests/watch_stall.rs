//! A watcher whose reader stalls is cut off, not kept for ever, and loses nothing: on a real
//! 3-node cluster started with a short `--watch-stall-cutoff-ms`, a raw watch that reads
//! nothing while hundreds of transactions commit ends, after the events buffered for it, with
//! `UNAVAILABLE` naming the first transaction it did not get (`resume-from-tx`); the client
//! library's watch, stalled the same way, reopens there by itself and delivers every
//! transaction exactly once, in order. Meanwhile the node's `/metrics` reports the stalled
//! watches behind, and the library's watch at the head once it has read everything.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, ClientConfig, WatchFilter, pb};
use engram_types::{Namespace, TxRequest, Value};
use futures::StreamExt;
use tonic::Code;

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "stall/watch";
/// Enough 16 KiB transactions (6.4 MB) to fill a stalled watch's HTTP/2 windows (the client's
/// 2 MB per stream, 5 MB per connection) and its buffer.
const TXS: usize = 400;
const VALUE_BYTES: usize = 16 * 1024;
const CUTOFF_MS: u64 = 1_000;

/// Transaction `n`: one memory whose text is 16 KiB, keyed so a retry applies it once.
fn tx(n: usize) -> TxRequest {
    let mut tx = common::memory_tx(NS, n as i64);
    tx.ops[0].value = Value::String(format!("{n:04} {}", "x".repeat(VALUE_BYTES)));
    tx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_watcher_is_cut_off_where_it_can_resume_and_the_library_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(6).unwrap();
    let (ports, metrics_ports) = ports.split_at(3);
    let args = vec!["--watch-stall-cutoff-ms".to_string(), CUTOFF_MS.to_string()];
    let mut cluster =
        LocalCluster::start_with_metrics(Path::new(EXE), dir.path(), ports, metrics_ports, &args).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let endpoints = cluster.endpoints();
    let writer = Client::connect(endpoints.clone()).await.unwrap();
    // The namespace exists before the watches open, so both start at its first transaction.
    let first = writer.transact(&tx(0)).await.unwrap().tx;

    // A raw watch and a library watch, both on node 1, neither read while the writes commit.
    let mut raw = pb::memory_client::MemoryClient::connect(format!("http://{}", endpoints[0]))
        .await
        .unwrap()
        .watch(pb::WatchRequest {
            namespace: NS.into(),
            from_tx: first,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let library = Client::with_config(
        vec![endpoints[0].clone()],
        ClientConfig {
            request_timeout: Duration::from_secs(3600),
            ..ClientConfig::default()
        },
    )
    .unwrap();
    let mut resumed = library.watch(WatchFilter {
        namespace: Namespace::new(NS).unwrap(),
        from_tx: first,
        attribute: None,
        entity: None,
        branch: None,
    });
    // Opened (the library opens its call on the first poll): the first event is there.
    let event = resumed.next().await.unwrap().unwrap();
    assert_eq!(event.tx, first);

    let mut txs = vec![first];
    // Node 1 reports its stalled watches behind while the writes go on: neither takes more than
    // its buffer and its HTTP/2 windows hold (about 200 of the 400), and each is counted until
    // its cut-off, a second after it stalls. The most it reported is kept.
    let mut most_behind = 0;
    for n in 1..TXS {
        txs.push(writer.transact(&tx(n)).await.unwrap().tx);
        if n % 10 == 0 {
            most_behind = most_behind.max(metric(metrics_ports[0], "engram_watch_lag_entries"));
        }
    }
    assert!(
        most_behind >= 20,
        "the stalled watches were at most {most_behind} entries behind"
    );
    tokio::time::sleep(Duration::from_millis(CUTOFF_MS * 3)).await;

    // The raw watch: what was buffered, in order, then the cut-off naming where to go on.
    let mut got = Vec::new();
    let status = loop {
        let next = tokio::time::timeout(Duration::from_secs(30), raw.next()).await;
        match next {
            Ok(Some(Ok(event))) => got.push(event.tx),
            Ok(Some(Err(status))) => break status,
            Ok(None) => panic!("the raw watch ended without a status after {} events", got.len()),
            Err(_) => panic!(
                "the raw watch was not cut off: it delivered {} events and waits",
                got.len()
            ),
        }
    };
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("reopen it from tx"),
        "{}",
        status.message()
    );
    let resume: u64 = status
        .metadata()
        .get("resume-from-tx")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no resume-from-tx in {:?}", status.metadata()));
    assert!(
        !got.is_empty() && got.len() < TXS,
        "a stalled watch is cut off after its buffer, not before and not never: {} of {TXS}",
        got.len()
    );
    assert_eq!(
        got[..],
        txs[..got.len()],
        "what it got is the first transactions, in order"
    );
    assert_eq!(
        resume,
        txs[got.len()],
        "it resumes at the first transaction it did not get"
    );

    // The library watch, read now: every transaction once, in order, across its reopening.
    let mut delivered = vec![first];
    while delivered.len() < TXS {
        let event = tokio::time::timeout(Duration::from_secs(60), resumed.next())
            .await
            .expect("the library watch goes on after the cut-off")
            .unwrap()
            .unwrap();
        delivered.push(event.tx);
    }
    assert_eq!(delivered, txs);

    // The node counted the cut-offs (both watches were stalled on node 1).
    let cut = metric(metrics_ports[0], "engram_watches_cut_off_total");
    assert!(cut >= 2, "{cut}");
    // The library's watch, read through the last write, is at the head again (its task moves
    // its position once the events are in its buffer: a moment after they are read here).
    let mut lag = u64::MAX;
    for _ in 0..100 {
        lag = metric(metrics_ports[0], "engram_watch_lag_entries");
        if lag == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lag, 0, "a watch that has everything is not behind");
    assert_eq!(metric(metrics_ports[0], "engram_watches_open"), 1);
}

/// The value of single-sample metric `name` on the node serving metrics at `port`.
fn metric(port: u16, name: &str) -> u64 {
    let metrics = common::http_get(port, "/metrics");
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}
