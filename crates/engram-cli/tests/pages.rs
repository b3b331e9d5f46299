//! History and Find in pages on a real 3-node cluster: a cursor from one node continues the
//! answer on any other, every datom comes once, pages read as of the first while writes go on,
//! and a damaged cursor or one of another query is refused with `INVALID_ARGUMENT` naming the
//! cursor. (More than 100,000 datoms through every surface: crates/engram-py/tests/test_pages.py.)
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, FindQuery, HistoryQuery, HistoryTarget, pb};
use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, TxOp, TxRequest, Value};
use tonic::Code;

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "pages/cluster";

/// Writes `n` new entities holding `:cap/n` = 7 in one transaction; returns their ids in the
/// order written.
async fn tagged(client: &Client, n: usize) -> Vec<u64> {
    let ops = (0..n)
        .map(|i| TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp(format!("e{i}")),
            attribute: Attribute::new(":cap/n").unwrap(),
            value: Value::I64(7),
            valid_from_ns: None,
            valid_to_ns: None,
        })
        .collect();
    let agent = Provenance {
        agent: "pager".into(),
        confidence: 1.0,
        ..Default::default()
    };
    let tx = TxRequest::data(Namespace::new(NS).unwrap(), ops, agent);
    let receipt = client.transact(&tx).await.unwrap();
    (0..n).map(|i| receipt.temp_ids[&format!("e{i}")]).collect()
}

fn find(cursor: Vec<u8>, attribute: &str, limit: u32) -> pb::FindRequest {
    pb::FindRequest {
        namespace: NS.into(),
        attribute: attribute.into(),
        limit,
        cursor,
        ..Default::default()
    }
}

fn history(cursor: Vec<u8>, limit: u32) -> pb::HistoryRequest {
    pb::HistoryRequest {
        namespace: NS.into(),
        target: Some(pb::history_request::Target::Attribute(":cap/n".into())),
        limit,
        cursor,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_continues_on_any_node_and_a_foreign_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let mut written = Vec::new();
    for _ in 0..3 {
        written.extend(tagged(&client, 10).await);
    }
    let mut nodes = Vec::new();
    for endpoint in cluster.endpoints() {
        nodes.push(
            pb::memory_client::MemoryClient::connect(format!("http://{endpoint}"))
                .await
                .unwrap(),
        );
    }

    // Find, 7 entities a page, each page from the next node; a write after the first page.
    let mut found = Vec::new();
    let mut cursor = Vec::new();
    let mut as_of = None;
    let mut late = Vec::new();
    for page in 0.. {
        let answer = nodes[page % 3]
            .find(find(cursor, ":cap/n", 7))
            .await
            .unwrap()
            .into_inner();
        assert!(answer.datoms.len() <= 7);
        assert_eq!(
            *as_of.get_or_insert(answer.as_of_tx),
            answer.as_of_tx,
            "one as-of point"
        );
        found.extend(answer.datoms.iter().map(|d| d.entity));
        if page == 0 {
            late = tagged(&client, 2).await;
        }
        cursor = answer.next_cursor;
        if cursor.is_empty() {
            break;
        }
    }
    let mut by_entity = written.clone();
    by_entity.sort_unstable();
    assert_eq!(
        found, by_entity,
        "every entity once, in entity order, none written after page 1"
    );

    // History, 4 datoms a page, across the nodes.
    let mut seen = Vec::new();
    let mut cursor = Vec::new();
    for page in 0.. {
        let answer = nodes[(page + 1) % 3]
            .history(history(cursor, 4))
            .await
            .unwrap()
            .into_inner();
        seen.extend(answer.datoms.iter().map(|d| d.entity));
        cursor = answer.next_cursor;
        if cursor.is_empty() {
            break;
        }
    }
    assert_eq!(seen, [written.clone(), late.clone()].concat());

    // The Rust client follows the cursors itself, and stops at a limit with a cursor to the rest.
    let mut query = HistoryQuery::new(
        Namespace::new(NS).unwrap(),
        HistoryTarget::Attribute(Attribute::new(":cap/n").unwrap()),
    );
    let all = client.history_all(&query, &[], |_| ()).await.unwrap();
    assert_eq!(all.datoms.len(), 32);
    assert!(all.next_cursor.is_empty());
    query.limit = 5;
    let page = client.history_page(&query, &[]).await.unwrap();
    assert_eq!(page.datoms.len(), 5);
    let rest = client.history_page(&query, &page.next_cursor).await.unwrap();
    assert_eq!(rest.datoms[0].entity, written[5]);
    let find_query = FindQuery {
        namespace: Namespace::new(NS).unwrap(),
        attribute: Attribute::new(":cap/n").unwrap(),
        value: Some(Value::I64(7)),
        as_of_tx: None,
        as_of_time_ns: None,
        limit: 31,
        consistency: engram_client::Consistency::Linearizable,
        branch: None,
        include_expired: false,
        since_tx: None,
        valid_at_ns: None,
    };
    let cut = client.find(&find_query).await.unwrap();
    assert_eq!(cut.datoms.len(), 31);
    assert!(!cut.next_cursor.is_empty(), "a limit that cut the answer says so");

    // Refused cursors: each INVALID_ARGUMENT naming the cursor, nothing read.
    let first = nodes[0]
        .find(find(Vec::new(), ":cap/n", 3))
        .await
        .unwrap()
        .into_inner();
    let of_history = nodes[0]
        .history(history(Vec::new(), 3))
        .await
        .unwrap()
        .into_inner();
    let mut damaged = first.next_cursor.clone();
    damaged[5] ^= 0x40;
    let refusals = [
        (find(damaged, ":cap/n", 3), "not a cursor this server issued"),
        (
            find(b"not a cursor".to_vec(), ":cap/n", 3),
            "not a cursor this server issued",
        ),
        (
            find(first.next_cursor.clone(), ":cap/other", 3),
            "issued for another query",
        ),
        (
            find(of_history.next_cursor.clone(), ":cap/n", 3),
            "issued for a history read",
        ),
        (
            pb::FindRequest {
                as_of_tx: Some(first.as_of_tx - 1),
                ..find(first.next_cursor.clone(), ":cap/n", 3)
            },
            "issued for another query",
        ),
    ];
    for (request, says) in refusals {
        let status = nodes[1].find(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("cursor:") && status.message().contains(says),
            "{says}: {}",
            status.message()
        );
    }
}
