//! `Memory.Watch` against a real 3-node cluster: every committed transaction of the watched
//! namespace exactly once and in order, across a node being killed under the watcher, nothing
//! from another namespace, filters applied, bad input refused.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, WatchFilter, pb};
use engram_types::{Attribute, Namespace, TxRequest};
use futures::StreamExt;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

fn tx(ns: &str, n: i64) -> TxRequest {
    common::memory_tx(ns, n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_sees_every_transaction_once_in_order_across_a_node_failure_and_diffs_agree() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let ns = Namespace::new("watch/a").unwrap();

    // The watcher talks to node 1 first; node 1 is killed half way through.
    let mut watch = client.watch(WatchFilter {
        namespace: ns.clone(),
        from_tx: 0,
        attribute: None,
        entity: None,
        branch: None,
    });
    let mut expected = Vec::new();
    for n in 0..20 {
        if n == 10 {
            cluster.kill(1).unwrap();
        }
        expected.push(client.transact(&tx("watch/a", n)).await.unwrap().tx);
        if n % 3 == 0 {
            client.transact(&tx("watch/b", n)).await.unwrap();
        }
    }
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        let event = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .expect("the watch keeps delivering")
            .expect("the watch does not end")
            .expect("the watch resumes instead of failing");
        assert!(
            event.datoms.iter().all(|d| d.namespace == "watch/a"),
            "only the watched namespace: {event:?}"
        );
        assert_eq!(event.datoms.len(), 2);
        seen.push(event.tx);
    }
    assert_eq!(
        seen, expected,
        "every transaction of the namespace, once, in commit order"
    );
    let unique: BTreeSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no duplicates across the resume");

    // Resuming from a token, with filters: only :memory/n datoms of the transactions after it.
    let from = expected[5];
    let mut filtered = client.watch(WatchFilter {
        namespace: ns.clone(),
        from_tx: from + 1,
        attribute: Some(Attribute::new(":memory/n").unwrap()),
        entity: None,
        branch: None,
    });
    let mut got = Vec::new();
    while got.len() < expected.len() - 6 {
        let event = tokio::time::timeout(Duration::from_secs(10), filtered.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(event.datoms.len(), 1);
        assert_eq!(event.datoms[0].attribute, ":memory/n");
        got.push(event.tx);
    }
    assert_eq!(got, expected[6..].to_vec());

    // Diff over the same history: transactions 5..=9 of the namespace (after expected[4]).
    let diff = client
        .diff(
            &ns,
            None,
            expected[4],
            expected[9],
            0,
            engram_client::Consistency::Linearizable,
        )
        .await
        .unwrap();
    let diff_txs: BTreeSet<u64> = diff.asserted.iter().map(|d| d.tx).collect();
    assert_eq!(diff_txs, expected[5..10].iter().copied().collect::<BTreeSet<_>>());
    assert_eq!(diff.asserted.len(), 10, "two datoms each");
    assert!(diff.retracted.is_empty() && !diff.truncated);
    assert!(diff.asserted.iter().all(|d| d.namespace == "watch/a"));
    let backwards = client
        .diff(&ns, None, 10, 5, 0, engram_client::Consistency::Linearizable)
        .await
        .unwrap_err();
    assert_eq!(
        backwards.code(),
        Some(tonic::Code::InvalidArgument),
        "{backwards}"
    );
    let out = std::process::Command::new(EXE)
        .args([
            "-e",
            &cluster.node(2).unwrap().endpoint(),
            "--json",
            "diff",
            "--ns",
            "watch/a",
            "--from-tx",
            &expected[18].to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["asserted"].as_array().unwrap().len(),
        2,
        "since the 19th: only the 20th"
    );

    // Bad input is refused at once, with the field named.
    let raw =
        pb::memory_client::MemoryClient::connect(format!("http://{}", cluster.node(2).unwrap().endpoint()))
            .await
            .unwrap()
            .watch(pb::WatchRequest {
                namespace: "../etc".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
    assert_eq!(raw.code(), tonic::Code::InvalidArgument, "{raw:?}");
    assert!(raw.message().contains("namespace"), "{raw:?}");

    // The CLI: the first three transactions as JSON lines.
    let out = std::process::Command::new(EXE)
        .args([
            "-e",
            &cluster.node(2).unwrap().endpoint(),
            "--json",
            "watch",
            "--ns",
            "watch/a",
            "--limit",
            "3",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let txs: Vec<u64> = lines.iter().map(|l| l["tx"].as_u64().unwrap()).collect();
    assert_eq!(txs, expected[..3].to_vec());
    cluster.kill_all();
}
