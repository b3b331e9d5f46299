//! Only members speak Raft. A client of a running 3-process cluster sends it what a hostile
//! client would: heartbeats from a made-up leader at ever higher terms (unsigned, signed by a
//! key of its own while claiming a member's id, and under a non-member id), vote requests
//! claiming a longer log, and snapshot streams without a header or with a forged one — while
//! an agent writes. Every forged request must be refused as UNAUTHENTICATED (or, for a stream
//! without a header, INVALID_ARGUMENT) before Raft sees it; the term and the leader must not
//! move to the forger's; every acknowledged write must be on every node; and the chains must
//! verify and agree. Every refusal is counted per reason in `/metrics`, while the node's log
//! gets at most a line per reason every 10 s, even under a flood.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::time::Duration;

use engram_audit::{KeyRing, NodeKey};
use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, ClientConfig, Consistency, GetOptions, pb};
use engram_raft::peer_auth::{self, RpcKind};
use engram_raft::{Entry, LogId, TypeConfig, Vote};
use openraft::entry::RaftEntry;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::vote::RaftLeaderId;
use tonic::Code;
use tonic::transport::Channel;

const EXE: &str = env!("CARGO_BIN_EXE_engram");
/// Terms the forger claims start here, far above anything the cluster reaches by itself.
const FORGED_TERM: u64 = 10_000;

fn forged_append(term: u64, claimed: u64) -> Vec<u8> {
    let vote = Vote::new_committed(term, claimed);
    let leader = vote.leader_id().to_committed();
    let entries: Vec<Entry> = (0..2)
        .map(|index| {
            Entry::new_blank(LogId {
                leader_id: leader,
                index,
            })
        })
        .collect();
    let rpc = AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: None,
        leader_commit: entries.last().map(|e| e.log_id),
        entries,
    };
    engram_raft::codec::encode(&rpc).unwrap()
}

fn forged_vote(term: u64, candidate: u64) -> Vec<u8> {
    let vote = Vote::new(term, candidate);
    let last = LogId {
        leader_id: vote.leader_id().to_committed(),
        index: 1_000_000,
    };
    engram_raft::codec::encode(&VoteRequest::<TypeConfig>::new(vote, Some(last))).unwrap()
}

async fn raft_client(endpoint: &str) -> pb::raft_client::RaftClient<Channel> {
    let ch = Channel::from_shared(format!("http://{endpoint}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    pb::raft_client::RaftClient::new(ch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_raft_requests_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(6).unwrap();
    let (ports, metrics_ports) = ports.split_at(3);
    let mut cluster =
        LocalCluster::start_with_metrics(Path::new(EXE), dir.path(), ports, metrics_ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(30)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let endpoints = cluster.endpoints();
    let client = Client::with_config(endpoints.clone(), ClientConfig::default()).unwrap();

    // An agent writes while the forger works.
    let writer = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0..40 {
                let receipt = client.transact(&common::memory_tx("forge/a", n)).await.unwrap();
                acked.push(receipt);
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            acked
        })
    };

    let outsider = KeyRing::new(std::sync::Arc::new(NodeKey::from_seed([0xAB; 32])));
    let forging = std::time::Instant::now();
    let mut answers = Vec::new();
    for round in 0..30u64 {
        let term = FORGED_TERM + round;
        for (i, endpoint) in endpoints.iter().enumerate() {
            let target = i as u64 + 1;
            let claimed = target % 3 + 1;
            let mut raft = raft_client(endpoint).await;
            let append = forged_append(term, claimed);
            // 1. The black-box attack: no authentication at all.
            let unsigned = raft
                .append_entries(pb::RaftMessage {
                    accepts_mac: false,
                    payload: append.clone(),
                    auth: None,
                })
                .await;
            // 2. Signed, but by a key no member holds, claiming to be a member.
            let impostor = raft
                .append_entries(pb::RaftMessage {
                    accepts_mac: false,
                    auth: Some(peer_auth::sign(
                        &outsider,
                        RpcKind::AppendEntries,
                        claimed,
                        target,
                        &append,
                    )),
                    payload: append.clone(),
                })
                .await;
            // 3. A vote request from a node id that is not a member.
            let vote = forged_vote(term, 99);
            let candidate = raft
                .vote(pb::RaftMessage {
                    accepts_mac: false,
                    auth: Some(peer_auth::sign(&outsider, RpcKind::Vote, 99, target, &vote)),
                    payload: vote,
                })
                .await;
            // 4. The same from an outsider as a pre-vote, which changes no state but must
            // not answer an unauthenticated prober about the cluster either.
            let vote = forged_vote(term, 99);
            let probe = raft
                .pre_vote(pb::RaftMessage {
                    accepts_mac: false,
                    auth: Some(peer_auth::sign(&outsider, RpcKind::PreVote, 99, target, &vote)),
                    payload: vote,
                })
                .await;
            answers.extend([
                ("unsigned append", unsigned),
                ("impostor append", impostor),
                ("outsider vote", candidate),
                ("outsider pre-vote", probe),
            ]);
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for (what, answer) in &answers {
        match answer {
            Err(s) if s.code() == Code::Unauthenticated => {}
            other => panic!("{what}: expected UNAUTHENTICATED, got {other:?}"),
        }
    }
    let unsigned = answers.iter().find(|(w, _)| *w == "unsigned append").unwrap();
    assert!(
        unsigned
            .1
            .as_ref()
            .unwrap_err()
            .message()
            .contains("without peer authentication")
    );
    let impostor = answers.iter().find(|(w, _)| *w == "impostor append").unwrap();
    assert!(
        impostor
            .1
            .as_ref()
            .unwrap_err()
            .message()
            .contains("no signature is by a key this node binds"),
        "{impostor:?}"
    );

    let acked = writer.await.unwrap();
    assert_eq!(acked.len(), 40);

    let head_before = client.head().await.unwrap();
    // Snapshot streams: without a header, refused before anything is buffered; with a header
    // that no member signed, refused as unauthenticated.
    let mut raft = raft_client(&endpoints[0]).await;
    let headerless = (0..8).map(|_| pb::SnapshotChunk {
        header: Vec::new(),
        data: vec![0u8; 1 << 20],
        auth: None,
    });
    let err = raft
        .install_snapshot(futures::stream::iter(headerless))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message().contains("must start with its header chunk"),
        "{err:?}"
    );
    let forged_header = pb::SnapshotChunk {
        header: vec![1, 2, 3],
        data: Vec::new(),
        auth: Some(peer_auth::sign(
            &outsider,
            RpcKind::InstallSnapshot,
            2,
            1,
            &[1, 2, 3],
        )),
    };
    let err = raft
        .install_snapshot(futures::stream::iter(vec![forged_header]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");

    assert_eq!(
        client.head().await.unwrap(),
        head_before,
        "a refused snapshot changed the chain"
    );

    // A flood of unsigned appends at node 1, as fast as one connection sends them: every one
    // is refused and counted, and the node's log gets a bounded sample, not a line each.
    const FLOOD: u64 = 3_000;
    let append = forged_append(FORGED_TERM, 2);
    for _ in 0..FLOOD {
        let refused = raft
            .append_entries(pb::RaftMessage {
                accepts_mac: false,
                payload: append.clone(),
                auth: None,
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated);
    }
    let forged_for = forging.elapsed();
    let mut tags_seen = 0;
    for (i, node) in cluster.nodes().iter().enumerate() {
        let body = common::http_get(node.metrics_addr.unwrap().port(), "/metrics");
        // The value of this node's series `metric{node_id, label=value}`.
        let series = |metric: &str, label: &str, value: &str| -> u64 {
            let series = format!("{metric}{{node_id=\"{}\",{label}=\"{value}\"}} ", node.id);
            body.lines()
                .find_map(|l| l.strip_prefix(&series))
                .unwrap_or_else(|| panic!("no {series} in {body}"))
                .parse()
                .unwrap()
        };
        let count = |reason: &str| series("engram_peer_refusals_total", "reason", reason);
        // Per round: one unsigned append; an impostor's append, an outsider's vote and pre-vote,
        // all signed by a key no member holds. Node 1 also met the flood and a forged snapshot
        // header.
        let (missing, untrusted) = if i == 0 { (30 + FLOOD, 91) } else { (30, 90) };
        assert_eq!(count("missing"), missing, "node {}", node.id);
        assert_eq!(count("untrusted"), untrusted, "node {}", node.id);
        assert_eq!(count("bad_signature"), 0, "node {}", node.id);
        // The members' own requests: the first to each node signed, then tagged once it said
        // it accepts tags; none refused.
        assert_eq!(count("bad_tag"), 0, "node {}", node.id);
        assert_eq!(count("stale_target"), 0, "node {}", node.id);
        let accepted = |proof: &str| series("engram_peer_requests_accepted_total", "proof", proof);
        let (signed, tagged) = (accepted("signature"), accepted("tag"));
        if signed + tagged > 10 {
            assert!(
                tagged > signed,
                "node {}: {signed} signed and {tagged} tagged requests accepted",
                node.id
            );
        }
        tags_seen += tagged;
        let total = format!(
            "engram_raft_peer_requests_refused_total{{node_id=\"{}\"}} {}",
            node.id,
            missing + untrusted
        );
        assert!(body.contains(&total), "{total} not in {body}");
        // At most one line per reason per 10 s window.
        let log = std::fs::read_to_string(&node.log_path).unwrap();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("refused a raft request"))
            .collect();
        let windows = forged_for.as_secs() / 10 + 2;
        assert!(
            !lines.is_empty() && lines.len() as u64 <= 2 * windows,
            "node {}: {} lines about refusals in {forged_for:?}:\n{}",
            node.id,
            lines.len(),
            lines.join("\n")
        );
        assert!(lines.iter().all(|l| l.contains("WARN")), "{lines:?}");
    }
    assert!(tags_seen > 0, "no node accepted a tagged request from its peers");
    // Past the window, the next refusal logs again, saying how many it did not log: the
    // lines about unsigned requests and the counts they give add up to every one refused.
    tokio::time::sleep(engram_raft::refusals::LOG_EVERY).await;
    raft.append_entries(pb::RaftMessage {
        accepts_mac: false,
        payload: append.clone(),
        auth: None,
    })
    .await
    .unwrap_err();
    let node1 = &cluster.nodes()[0];
    let mut logged = (0, 0);
    for _ in 0..50 {
        let log = std::fs::read_to_string(&node1.log_path).unwrap();
        let missing: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("refused a raft request") && l.contains("without peer authentication"))
            .collect();
        let suppressed: u64 = missing
            .iter()
            .filter_map(|l| l.split("suppressed_since_last=").nth(1))
            .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .map(|n| n.parse::<u64>().unwrap())
            .sum();
        logged = (missing.len() as u64, suppressed);
        if logged.0 + logged.1 == 30 + FLOOD + 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        logged.0 + logged.1,
        30 + FLOOD + 1,
        "(lines, suppressed) {logged:?}"
    );
    assert!(logged.1 >= FLOOD, "(lines, suppressed) {logged:?}");

    // Nobody adopted the forger's terms or leaders.
    for (id, status) in cluster.statuses().await {
        let status = status.unwrap();
        assert!(
            status.term < FORGED_TERM,
            "node {id} moved to a forged term: {}",
            status.term
        );
        assert!(
            matches!(status.leader_id, Some(l) if (1..=3).contains(&l)),
            "node {id} follows {:?}",
            status.leader_id
        );
    }
    // Every acknowledged write is on every node (stale reads ask each node itself).
    let last_tx = acked.iter().map(|r| r.tx).max().unwrap();
    for endpoint in &endpoints {
        let node = Client::with_config(vec![endpoint.clone()], ClientConfig::default()).unwrap();
        for _ in 0..100 {
            if node.status().await.unwrap().applied_index >= last_tx {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for receipt in &acked {
            let entity = engram_types::EntityId(*receipt.temp_ids.get("m").unwrap());
            let view = node
                .get(
                    &engram_types::Namespace::new("forge/a").unwrap(),
                    entity,
                    GetOptions {
                        consistency: Consistency::Stale,
                        ..GetOptions::default()
                    },
                )
                .await
                .unwrap();
            assert_eq!(view.datoms.len(), 2, "{endpoint}: tx {} lost", receipt.tx);
        }
    }
    // The chains verify and agree.
    let out = common::verify_each(EXE, &endpoints);
    assert!(
        out.status.success(),
        "audit verify --each: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A node outside any cluster trusts its first contact. If that is a hostile client, the node
/// refuses the real cluster afterwards — it must be wiped to be useful — but it cannot carry the
/// forger's term or log into the cluster that tries to add it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_poisoned_before_it_joins_refuses_the_cluster_instead_of_disturbing_it() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(30)).await.unwrap();
    let endpoints = cluster.endpoints();

    // The forger reaches fresh node 3 first, with a validly signed append at a huge term.
    let outsider = KeyRing::new(std::sync::Arc::new(NodeKey::from_seed([0xCD; 32])));
    let append = forged_append(FORGED_TERM, 99);
    let mut raft = raft_client(&endpoints[2]).await;
    raft.append_entries(pb::RaftMessage {
        accepts_mac: false,
        auth: Some(peer_auth::sign(&outsider, RpcKind::AppendEntries, 99, 3, &append)),
        payload: append,
    })
    .await
    .unwrap();

    // The real cluster forms anyway (nodes 1 and 2 are a majority) and takes writes. (`init`
    // also waits for every node to follow the leader, which node 3 never will.)
    let _ = cluster.init(Duration::from_secs(3)).await;
    let client = Client::with_config(endpoints[..2].to_vec(), ClientConfig::default()).unwrap();
    for n in 0..5 {
        client.transact(&common::memory_tx("poison/a", n)).await.unwrap();
    }
    // Node 3 refuses the real leader, so the forger's term never reaches the cluster.
    let status = client.status().await.unwrap();
    assert!(
        status.term < FORGED_TERM,
        "the cluster took the forged term {}",
        status.term
    );
    assert!(matches!(status.leader_id, Some(1 | 2)), "{status:?}");
    let node3 = Client::with_config(vec![endpoints[2].clone()], ClientConfig::default()).unwrap();
    // It holds none of the real cluster's chain (its genesis entry would be entry 1).
    assert_eq!(
        node3.head().await.unwrap().index,
        0,
        "node 3 followed the real cluster"
    );
}
