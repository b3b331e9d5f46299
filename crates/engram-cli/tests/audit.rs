//! The verifiable audit against a real 3-node cluster of `engram serve` processes: signed
//! checkpoints, verified reads (and a client that refuses a rewound or forked history), key
//! revocation, `audit export` and the offline `audit verify` with its exit codes, including a
//! datom edited directly in a stopped node's RocksDB; reads proven complete against the state
//! root, and the omissions a tampering node or proxy could make, each refused.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use common::{json_of, run, text};

use std::path::Path;
use std::time::Duration;

use engram_audit::{Checkpoint, NodeKey, SignedCheckpoint};
use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{
    Client, ClientError, Currency, GetOptions, ProofFailure, SearchQuery, TrustedLog, pb, verify_state_proof,
};
use engram_storage::{Durability, ReadView, Space, Store, WriteBatch};
use engram_types::resolve::SlotRead;
use engram_types::{
    Attribute, EntityId, EntityRef, Hash, Namespace, Op, Provenance, TxId, TxOp, TxRequest, Value,
};
use futures::StreamExt;
use serde_json::Value as Json;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

fn tx(n: i64) -> TxRequest {
    common::memory_tx("audit/test", n)
}

fn node_key(data_dir: &Path) -> NodeKey {
    let text = std::fs::read_to_string(data_dir.join("node.key")).unwrap();
    let seed: [u8; 32] = hex::decode(text.trim()).unwrap().try_into().unwrap();
    NodeKey::from_seed(seed)
}

async fn start(dir: &Path) -> LocalCluster {
    let ports = free_ports(3).unwrap();
    let extra = vec!["--checkpoint-every-entries".to_string(), "5".to_string()];
    let mut cluster = LocalCluster::start(Path::new(EXE), dir, &ports, &extra).expect("start nodes");
    cluster
        .wait_all_answer(Duration::from_secs(60))
        .await
        .expect("nodes answer");
    cluster.init(Duration::from_secs(30)).await.expect("init");
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_proofs_export_and_offline_verify() {
    let dir = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path()).await;
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let mut receipts = Vec::new();
    for n in 0..12 {
        receipts.push(client.transact(&tx(n)).await.unwrap());
    }
    let leader = cluster
        .wait_for_leader(None, Duration::from_secs(10))
        .await
        .unwrap();
    let leader_ep = cluster.node(leader).unwrap().endpoint();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let other = (1..=3).find(|id| *id != leader && *id != follower).unwrap();

    // --- Verified reads ----------------------------------------------------------------
    let mut trust = client.trust_chain().await.expect("trust from a verified chain");
    let first = trust.size();
    let entity = EntityId(receipts[3].temp_ids["m"]);
    let ns = Namespace::new("audit/test").unwrap();
    let resp = client
        .get_verified(&mut trust, &ns, entity, GetOptions::default())
        .await
        .expect("a proven read");
    assert_eq!(resp.datoms.len(), 2);
    client.transact(&tx(100)).await.unwrap();
    client
        .get_verified(&mut trust, &ns, entity, GetOptions::default())
        .await
        .expect("a proven read after the log grew: consistency proof from the trusted size");
    assert!(
        trust.size() > first,
        "trust moved forward: {} -> {}",
        first,
        trust.size()
    );

    // A client that trusts a longer history than the server has refuses it as rewound, and
    // one that trusts a different tree of the same size refuses it as forked.
    let key = node_key(&cluster.node(leader).unwrap().data_dir);
    let origin = trust.checkpoint().checkpoint.origin.clone();
    let forged = |size: u64, root: Hash| {
        TrustedLog::new(
            Checkpoint {
                origin: origin.clone(),
                size,
                root,
                tx_time_ns: 0,
            }
            .sign(&key),
            trust.keys().to_vec(),
        )
        .unwrap()
    };
    let mut ahead = forged(trust.size() + 1000, trust.checkpoint().checkpoint.root);
    let err = client
        .get_verified(&mut ahead, &ns, entity, GetOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Rewound { .. }), "{err}");
    assert!(err.is_tampering());
    let mut fork = forged(trust.size(), Hash::of(b"another history"));
    let err = client
        .get_verified(&mut fork, &ns, entity, GetOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Forked { .. }), "{err}");
    let get = run(&[
        "-e",
        &leader_ep,
        "--json",
        "get",
        "--ns",
        "audit/test",
        "--entity",
        &entity.0.to_string(),
        "--verify",
    ]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    assert!(json_of(&get)["verified"]["checkpoint_size"].as_u64().is_some());

    // --- Checkpoints, revocation, export, verify ---------------------------------------
    let pin = work.path().join("pin.txt");
    let out = run(&[
        "-e",
        &leader_ep,
        "audit",
        "checkpoint",
        "--at-head",
        "--out",
        pin.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let pinned = SignedCheckpoint::parse_bytes(&std::fs::read(&pin).unwrap()).unwrap();
    assert!(pinned.checkpoint.size >= 14);

    // Rotate the follower's key (through the follower itself), then revoke the other one's.
    let follower_ep = cluster.node(follower).unwrap().endpoint();
    let old_key = node_key(&cluster.node(follower).unwrap().data_dir);
    let wrong = run(&[
        "-e",
        &leader_ep,
        "cluster",
        "rotate-key",
        "--id",
        &follower.to_string(),
    ]);
    assert_eq!(
        wrong.status.code(),
        Some(1),
        "only the node itself can rotate its key"
    );
    let rotate = run(&[
        "-e",
        &follower_ep,
        "--json",
        "cluster",
        "rotate-key",
        "--id",
        &follower.to_string(),
    ]);
    assert_eq!(rotate.status.code(), Some(0), "{}", text(&rotate.stderr));
    let rotated_at = json_of(&rotate)["audit_index"].as_u64().unwrap();
    let new_key = node_key(&cluster.node(follower).unwrap().data_dir);
    assert_ne!(
        new_key.key_id(),
        old_key.key_id(),
        "the new key is persisted in node.key"
    );
    client.transact(&tx(200)).await.unwrap();

    let revoke = run(&[
        "-e",
        &leader_ep,
        "--json",
        "cluster",
        "revoke-key",
        "--id",
        &other.to_string(),
    ]);
    assert_eq!(revoke.status.code(), Some(0), "{}", text(&revoke.stderr));
    let revoked_at = json_of(&revoke)["audit_index"].as_u64().unwrap();

    let export = work.path().join("chain.engram-audit");
    let out = run(&[
        "-e",
        &leader_ep,
        "audit",
        "export",
        "--out",
        export.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(&[
        "--json",
        "audit",
        "verify",
        export.to_str().unwrap(),
        "--pin",
        pin.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = json_of(&out);
    assert_eq!(report["ok"], true);
    assert!(report["entries"].as_u64().unwrap() >= revoked_at);
    assert!(report["checkpoints"].as_u64().unwrap() >= 3, "{report}");
    let revoked: Vec<&Json> = report["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["revoked_at"] == revoked_at)
        .collect();
    assert_eq!(revoked.len(), 1, "the key history shows the revocation: {report}");
    let rotated: Vec<&Json> = report["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["retired_at"] == rotated_at || k["admitted_at"] == rotated_at)
        .collect();
    assert_eq!(
        rotated.len(),
        2,
        "old key rotated out, new key admitted at {rotated_at}: {report}"
    );

    // One flipped byte inside an attestation's signature (the first from entry 5 on: a node
    // signs once per apply group): exit 2, naming that entry.
    let mut bytes = std::fs::read(&export).unwrap();
    let (signed_index, at) = find_entry_signature(&bytes, 5);
    bytes[at] ^= 0x01;
    let flipped = work.path().join("flipped.engram-audit");
    std::fs::write(&flipped, &bytes).unwrap();
    let out = run(&["--json", "audit", "verify", flipped.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let failure = &json_of(&out)["failures"][0];
    assert_eq!(
        (failure["index"].as_u64(), failure["field"].as_str()),
        (Some(signed_index), Some("attestation.signature")),
        "{failure}"
    );

    // Unreadable inputs: exit 3 with a clear message.
    let mut future = std::fs::read(&export).unwrap();
    future[20..22].copy_from_slice(&9u16.to_be_bytes());
    let future_path = work.path().join("future.engram-audit");
    std::fs::write(&future_path, &future).unwrap();
    let out = run(&["audit", "verify", future_path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("version 9 is newer"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["audit", "verify", work.path().join("missing").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    // A running node's store is in use.
    let busy = cluster.node(leader).unwrap().data_dir.clone();
    let out = run(&["audit", "verify", "--data-dir", busy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("still running"),
        "{}",
        text(&out.stderr)
    );

    // --- A stopped node's RocksDB, edited behind Engram's back ---------------------------
    let probe = Client::connect(vec![cluster.node(follower).unwrap().endpoint()])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while probe.status().await.map_or(0, |s| s.chain_index) < revoked_at {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {follower} did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let chain = probe
        .verify_chain(|_| {})
        .await
        .expect("the rotated node's own chain verifies");
    assert!(chain.entries_checked > rotated_at);
    // The rotation entry is the old key's last attestation, the next attestation (a node
    // signs once per apply group) the new key's first.
    let attested: Vec<_> = probe
        .audit_entries(rotated_at, 0)
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .map(|e| hex::encode(e.unwrap().signer_key_id))
        .filter(|signer| !signer.is_empty())
        .take(2)
        .collect();
    assert_eq!(
        attested,
        vec![old_key.key_id().to_string(), new_key.key_id().to_string()],
        "the rotation entry is the old key's last, the next attestation the new key's first"
    );
    cluster.kill(follower).unwrap();
    let data_dir = cluster.node(follower).unwrap().data_dir.clone();
    let out = run(&[
        "--json",
        "audit",
        "verify",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--pin",
        pin.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let victim = &receipts[6];
    {
        let store = engram_storage_rocks::RocksStore::open(&data_dir.join("db")).unwrap();
        let eavt = engram_core::reads::datom_key_of_tx(&store, TxId(victim.tx), 0)
            .unwrap()
            .expect("the transaction's first datom");
        let raw = store.get(Space::State, &eavt).unwrap().unwrap();
        let mut datom = engram_types::Datom::decode(&raw).unwrap();
        datom.value = Value::String("what we wish we had said".into());
        let mut batch = WriteBatch::new();
        batch.put(Space::State, eavt, datom.encode());
        store.write(batch, Durability::Sync).unwrap();
    }
    let out = run(&[
        "--json",
        "audit",
        "verify",
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let failure = &json_of(&out)["failures"][0];
    assert_eq!(
        (failure["index"].as_u64(), failure["field"].as_str()),
        (Some(victim.audit_index), Some("datoms")),
        "{failure}"
    );
    let human = run(&["audit", "verify", "--data-dir", data_dir.to_str().unwrap()]);
    assert_eq!(human.status.code(), Some(2));
    assert!(
        text(&human.stdout).contains(&format!("audit entry {}, datoms", victim.audit_index)),
        "{}",
        text(&human.stdout)
    );
    cluster.kill_all();
}

/// The byte offset of a byte inside the signature of entry `index` in an export: the entry
/// record's payload ends with the 64-byte signature.
/// The index of the first attested entry at or after `from` in an export, and the offset of a
/// byte inside its signature.
fn find_entry_signature(bytes: &[u8], from: u64) -> (u64, usize) {
    let mut reader = engram_verify::ExportReader::open(bytes).unwrap();
    let mut seen = 0;
    loop {
        match reader.next_record() {
            Ok(engram_verify::format::Next::Record { offset, record }) => {
                if let engram_verify::Record::Entry(payload) = record {
                    seen += 1;
                    let attested = engram_audit::SignedEntry::decode(&payload)
                        .unwrap()
                        .attestation
                        .is_some();
                    if seen >= from && attested {
                        return (seen, offset as usize + 5 + payload.len() - 10);
                    }
                }
            }
            _ => panic!("no attested entry from {from} on"),
        }
    }
}

/// `cluster revoke-key --id N` after N rotated revokes N's current key (not the one it joined
/// with), and N, which may attest nothing after the revoking entry, stops applying there: it
/// turns NOT_SERVING and its own store still verifies offline, while the others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_rotated_node_revokes_its_current_key_and_the_node_stops_signing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path()).await;
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    for n in 0..4 {
        client.transact(&tx(n)).await.unwrap();
    }
    let leader = cluster
        .wait_for_leader(None, Duration::from_secs(10))
        .await
        .unwrap();
    let leader_ep = cluster.node(leader).unwrap().endpoint();
    let target = (1..=3).find(|id| *id != leader).unwrap();
    let target_ep = cluster.node(target).unwrap().endpoint();
    let joined_key = node_key(&cluster.node(target).unwrap().data_dir);

    let rotate = run(&[
        "-e",
        &target_ep,
        "--json",
        "cluster",
        "rotate-key",
        "--id",
        &target.to_string(),
    ]);
    assert_eq!(rotate.status.code(), Some(0), "{}", text(&rotate.stderr));
    let rotated_at = json_of(&rotate)["audit_index"].as_u64().unwrap();
    let current_key = node_key(&cluster.node(target).unwrap().data_dir);
    assert_ne!(current_key.key_id(), joined_key.key_id());

    let revoke = run(&[
        "-e",
        &leader_ep,
        "--json",
        "cluster",
        "revoke-key",
        "--id",
        &target.to_string(),
    ]);
    assert_eq!(revoke.status.code(), Some(0), "{}", text(&revoke.stderr));
    let revoked_at = json_of(&revoke)["audit_index"].as_u64().unwrap();
    assert!(revoked_at > rotated_at);

    // The survivors keep taking writes past the revocation.
    let survivors: Vec<String> = (1..=3)
        .filter(|id| *id != target)
        .map(|id| cluster.node(id).unwrap().endpoint())
        .collect();
    let majority = Client::connect(survivors).await.unwrap();
    for n in 10..14 {
        majority.transact(&tx(n)).await.unwrap();
    }

    // Revoking a second voter's key would leave one of three voters able to attest: refused
    // before anything is proposed, the chain unmoved.
    let second = (1..=3).find(|id| *id != target && *id != leader).unwrap();
    let head_before = json_of(&run(&["-e", &leader_ep, "--json", "audit", "head"]));
    let refused = run(&[
        "-e",
        &leader_ep,
        "cluster",
        "revoke-key",
        "--id",
        &second.to_string(),
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stdout));
    let message = text(&refused.stderr);
    assert!(message.contains("FAILED_PRECONDITION"), "{message}");
    assert!(
        message.contains("would leave 1 of 3 voters able to attest")
            && message.contains(&format!("remove node {second} first")),
        "{message}"
    );
    let head_after = json_of(&run(&["-e", &leader_ep, "--json", "audit", "head"]));
    assert_eq!(
        head_before["index"], head_after["index"],
        "a refused revocation moved the chain"
    );

    // The chain's key history: the current key revoked at the revoking entry, the key it
    // joined with rotated out earlier and never revoked.
    let export = dir.path().join("chain.engram-audit");
    let out = run(&[
        "-e",
        &leader_ep,
        "audit",
        "export",
        "--out",
        export.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(&["--json", "audit", "verify", export.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = json_of(&out);
    let key_row = |id: String| {
        report["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key_id"].as_str() == Some(id.as_str()))
            .cloned()
            .unwrap_or_else(|| panic!("key {id} is not in the history: {report}"))
    };
    let current = key_row(current_key.key_id().to_string());
    assert_eq!(current["revoked_at"].as_u64(), Some(revoked_at), "{current}");
    let joined = key_row(joined_key.key_id().to_string());
    assert_eq!(joined["retired_at"].as_u64(), Some(rotated_at), "{joined}");
    assert!(joined["revoked_at"].is_null(), "{joined}");

    // The revoked node stops at the revoking entry and says why.
    let start = tokio::time::Instant::now();
    loop {
        let out = run(&["-e", &target_ep, "health", "--service", "engram.ready"]);
        if !out.status.success() {
            assert!(text(&out.stdout).contains("NOT_SERVING"), "{}", text(&out.stdout));
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the revoked node still reports ready\n{}",
            cluster.node(target).unwrap().log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = cluster.node(target).unwrap().log_tail(400);
    assert!(
        log.contains(&format!("revoked by audit entry {revoked_at}")),
        "{log}"
    );

    // Its store ends at the revoking entry and verifies on its own.
    cluster.kill(target).unwrap();
    let data_dir = cluster.node(target).unwrap().data_dir.clone();
    let out = run(&[
        "--json",
        "audit",
        "verify",
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(json_of(&out)["entries"].as_u64(), Some(revoked_at));
    cluster.kill_all();
}

/// A node stopped after writing a group's entries and before attesting them: `audit verify
/// --data-dir` verifies the chain up to its last attested entry and reports the tail as
/// unattested (not as tampering); the node attests the tail when it starts, after which the
/// whole chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unattested_tail_is_reported_offline_and_attested_when_the_node_starts() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path()).await;
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let mut last = 0;
    for n in 0..6 {
        last = client.transact(&tx(n)).await.unwrap().audit_index;
    }
    let leader = cluster
        .wait_for_leader(None, Duration::from_secs(10))
        .await
        .unwrap();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let probe = Client::connect(vec![cluster.node(follower).unwrap().endpoint()])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while probe.status().await.map_or(0, |s| s.chain_index) < last {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {follower} did not catch up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.kill(follower).unwrap();
    let data_dir = cluster.node(follower).unwrap().data_dir.clone();

    // Make the store what a crash between a group's entries and its attestation leaves: the
    // head entry without its attestation, the mark at the attested entry before it.
    let (head, attested_before) = {
        let store = engram_storage_rocks::RocksStore::open(&data_dir.join("db")).unwrap();
        let head = engram_core::reads::head(&store).unwrap().index;
        let entry = |index: u64| {
            let bytes = store
                .get(Space::State, &engram_core::keys::audit(index))
                .unwrap()
                .unwrap();
            engram_audit::SignedEntry::decode(&bytes).unwrap()
        };
        let tip = entry(head);
        assert!(tip.attestation.is_some(), "a stopped node's head is attested");
        let before = (1..head)
            .rev()
            .find(|i| entry(*i).attestation.is_some())
            .expect("genesis is attested");
        let mut batch = WriteBatch::new();
        batch.put(
            Space::State,
            engram_core::keys::audit(head),
            engram_audit::SignedEntry::unattested(tip.entry).encode(),
        );
        batch.put(
            Space::State,
            engram_core::keys::META_ATTESTED.to_vec(),
            before.to_be_bytes().to_vec(),
        );
        store.write(batch, Durability::Sync).unwrap();
        (head, before)
    };
    let verify = || {
        run(&[
            "--json",
            "audit",
            "verify",
            "--data-dir",
            data_dir.to_str().unwrap(),
        ])
    };
    let out = verify();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = json_of(&out);
    assert_eq!(report["entries"], attested_before, "{report}");
    assert_eq!(report["unattested"]["from"], attested_before + 1, "{report}");
    assert_eq!(report["unattested"]["to"], head, "{report}");
    let human = run(&["audit", "verify", "--data-dir", data_dir.to_str().unwrap()]);
    assert!(
        text(&human.stdout).contains(&format!("unattested   entries {}..={head}", attested_before + 1)),
        "{}",
        text(&human.stdout)
    );

    // Started, the node attests its head; stopped again, the whole chain verifies.
    cluster.restart(follower).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let served = probe.verify_chain(|_| {}).await.map(|r| r.entries_checked);
        if served.as_ref().is_ok_and(|n| *n >= head) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {follower} did not serve its whole chain after restart: {served:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.kill(follower).unwrap();
    {
        // The head itself was signed at start (a later group would have attested only its own
        // last entry).
        let store = engram_storage_rocks::RocksStore::open(&data_dir.join("db")).unwrap();
        let bytes = store
            .get(Space::State, &engram_core::keys::audit(head))
            .unwrap()
            .unwrap();
        let signed = engram_audit::SignedEntry::decode(&bytes).unwrap();
        assert!(
            signed.attestation.is_some(),
            "entry {head} was not attested at start"
        );
    }
    let out = verify();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = json_of(&out);
    assert!(report["entries"].as_u64().unwrap() >= head, "{report}");
    assert_eq!(report["unattested"], Json::Null, "{report}");
    cluster.kill_all();
}

fn task_tx(ns: &Namespace, agent: &str, ops: Vec<(Op, EntityRef, &str, &str)>) -> TxRequest {
    TxRequest {
        namespace: ns.clone(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops: ops
            .into_iter()
            .map(|(op, entity, attribute, value)| TxOp {
                op,
                entity,
                attribute: Attribute::new(attribute).unwrap(),
                value: Value::String(value.into()),
                valid_from_ns: None,
                valid_to_ns: None,
            })
            .collect(),
        preconditions: vec![],
        idempotency_key: None,
        provenance: Provenance {
            agent: agent.into(),
            confidence: 1.0,
            ..Default::default()
        },
    }
}

fn string_of(d: &pb::Datom) -> &str {
    match d.value.as_ref().and_then(|v| v.kind.as_ref()) {
        Some(pb::value::Kind::String(s)) => s,
        other => panic!("not a string value: {other:?}"),
    }
}

/// `Get` proven complete (issue: reads that prove completeness): the answer names every
/// attribute of the entity with its whole history against the state root a checkpoint covers,
/// an unknown entity's absence is proven, and what a tampering node or proxy leaves out of a
/// real answer — a retraction, another agent's newer claim, an attribute, the whole entity, a
/// current datom — is refused by the client, as is an answer older than what it trusts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_reads_prove_every_attribute_and_refuse_what_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path()).await;
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let ns = Namespace::new("audit/complete").unwrap();
    let m = EntityRef::Temp("m".into());
    let first = client
        .transact(&task_tx(
            &ns,
            "planner",
            vec![
                (Op::Assert, m.clone(), ":task/title", "write the report"),
                (Op::Assert, m.clone(), ":task/owner", "alice"),
                (Op::Assert, m, ":task/status", "open"),
            ],
        ))
        .await
        .unwrap();
    let e = EntityId(first.temp_ids["m"]);
    let id = EntityRef::Id(e);
    client
        .transact(&task_tx(
            &ns,
            "planner",
            vec![(Op::Retract, id.clone(), ":task/owner", "alice")],
        ))
        .await
        .unwrap();
    client
        .transact(&task_tx(
            &ns,
            "worker",
            vec![(Op::Assert, id.clone(), ":task/status", "done")],
        ))
        .await
        .unwrap();

    let mut trust = client.trust_chain().await.unwrap();
    let proven = client
        .get_complete(&mut trust, &ns, e, GetOptions::default())
        .await
        .expect("an honest answer is proven complete");
    assert_eq!((proven.slots, proven.history_datoms), (3, 5));
    assert!(proven.unfolded.is_empty(), "{:?}", proven.unfolded);
    let mut current: Vec<(&str, &str)> = proven
        .response
        .datoms
        .iter()
        .map(|d| (d.attribute.as_str(), string_of(d)))
        .collect();
    current.sort_unstable();
    assert_eq!(
        current,
        vec![(":task/status", "done"), (":task/title", "write the report")]
    );
    let conflicts: Vec<&str> = proven.response.conflicts.iter().map(string_of).collect();
    assert_eq!(
        conflicts,
        vec!["open"],
        "the planner's claim stands beside the worker's"
    );

    let absent = client
        .get_complete(&mut trust, &ns, EntityId(e.0 + 1_000), GetOptions::default())
        .await
        .expect("an unknown entity's absence is proven");
    assert_eq!((absent.slots, absent.history_datoms), (0, 0));
    assert!(absent.response.datoms.is_empty());

    // The same answer as the wire carries it, altered the ways a tampering node or proxy would.
    let leader = cluster
        .wait_for_leader(None, Duration::from_secs(10))
        .await
        .unwrap();
    let endpoint = format!("http://{}", cluster.node(leader).unwrap().endpoint());
    let mut raw = pb::memory_client::MemoryClient::connect(endpoint).await.unwrap();
    let request = pb::GetRequest {
        namespace: ns.to_string(),
        entity: e.0,
        prove: true,
        complete: true,
        trusted_size: trust.size(),
        ..Default::default()
    };
    let honest = raw.get(request.clone()).await.unwrap().into_inner();
    let read = SlotRead::default();
    verify_state_proof(&trust, &ns, e, &read, &honest).expect("the honest wire answer verifies");

    type Tamper = fn(&mut pb::GetResponse);
    fn history<'a>(r: &'a mut pb::GetResponse, attribute: &str) -> &'a mut pb::SlotHistory {
        let proof = r.state_proof.as_mut().unwrap();
        proof
            .histories
            .iter_mut()
            .find(|h| h.attribute == attribute)
            .unwrap()
    }
    let cases: [(&str, Tamper, &str); 6] = [
        (
            "a retraction left out, its value answered as current",
            |r| {
                let owner = history(r, ":task/owner");
                owner.datoms.retain(|d| d.op != pb::Op::Retract as i32);
                let alice = owner.datoms[0].clone();
                r.datoms.push(alice);
            },
            "does not chain",
        ),
        (
            "another agent's newer claim left out",
            |r| {
                history(r, ":task/status")
                    .datoms
                    .retain(|d| string_of(d) != "done");
                r.datoms.retain(|d| d.attribute != ":task/status");
                r.datoms.append(&mut r.conflicts);
            },
            "does not chain",
        ),
        (
            "an attribute left out",
            |r| {
                r.state_proof
                    .as_mut()
                    .unwrap()
                    .histories
                    .retain(|h| h.attribute != ":task/status");
                r.datoms.retain(|d| d.attribute != ":task/status");
                r.conflicts.clear();
            },
            "holds 3 slots of entity",
        ),
        (
            "the whole entity left out",
            |r| {
                r.state_proof.as_mut().unwrap().histories.clear();
                r.datoms.clear();
                r.conflicts.clear();
            },
            "holds 3 slots of entity",
        ),
        (
            "a current datom left out of the answer, the proof intact",
            |r| {
                r.datoms.retain(|d| d.attribute != ":task/title");
            },
            "1 left out",
        ),
        (
            "a superseded claim answered as current, the proof intact",
            |r| {
                r.datoms.retain(|d| d.attribute != ":task/status");
                r.datoms.append(&mut r.conflicts);
            },
            "not current",
        ),
    ];
    for (what, tamper, expected) in cases {
        let mut answer = honest.clone();
        tamper(&mut answer);
        match verify_state_proof(&trust, &ns, e, &read, &answer) {
            Err(ProofFailure::Invalid(reason)) => {
                assert!(reason.contains(expected), "{what}: refused, but with {reason:?}");
            }
            Err(other) => panic!("{what}: refused as {other:?}"),
            Ok(_) => panic!("{what}: accepted"),
        }
    }

    // An answer older than the log the client trusts is refused as rewound: a replayed one.
    client
        .transact(&task_tx(
            &ns,
            "reviewer",
            vec![(Op::Assert, id, ":task/status", "reopened")],
        ))
        .await
        .unwrap();
    let newer = client
        .get_complete(&mut trust, &ns, e, GetOptions::default())
        .await
        .unwrap();
    assert_eq!(newer.history_datoms, 6);
    match verify_state_proof(&trust, &ns, e, &read, &honest) {
        Err(ProofFailure::Rewound { .. }) => {}
        other => panic!("a replayed older answer: {other:?}"),
    }

    // As of the first transaction: the same whole histories, folded as of it by the client.
    // Then the owner was alice and the status open, with no other claim.
    let then = client
        .get_complete(
            &mut trust,
            &ns,
            e,
            GetOptions {
                as_of_tx: Some(first.tx),
                ..GetOptions::default()
            },
        )
        .await
        .expect("an honest answer as of an earlier transaction is proven complete");
    assert_eq!(then.as_of_tx, Some(first.tx));
    assert_eq!(then.history_datoms, 6, "the whole history proves the state then");
    let mut held: Vec<(&str, &str)> = then
        .response
        .datoms
        .iter()
        .map(|d| (d.attribute.as_str(), string_of(d)))
        .collect();
    held.sort_unstable();
    assert_eq!(
        held,
        vec![
            (":task/owner", "alice"),
            (":task/status", "open"),
            (":task/title", "write the report")
        ]
    );
    assert!(then.response.conflicts.is_empty());
    // A node that answers as of then with the state of now, or with a datom of then left out,
    // is caught: the client folds the proven histories as of the transaction it asked for.
    let as_of_request = pb::GetRequest {
        as_of_tx: Some(first.tx),
        trusted_size: trust.size(),
        ..request.clone()
    };
    let read_then = SlotRead {
        as_of: Some(engram_types::TxId(first.tx)),
        ..SlotRead::default()
    };
    let honest_then = raw.get(as_of_request.clone()).await.unwrap().into_inner();
    verify_state_proof(&trust, &ns, e, &read_then, &honest_then).expect("the honest answer then verifies");
    let now = raw.get(pb::GetRequest {
        trusted_size: trust.size(),
        ..request.clone()
    });
    let mut now = now.await.unwrap().into_inner();
    now.as_of_tx = first.tx;
    let mut dropped = honest_then.clone();
    dropped.datoms.retain(|d| d.attribute != ":task/owner");
    for (what, answer, expected) in [
        ("the state of now answered as of then", now, "not current"),
        ("alice's ownership then left out", dropped, "1 left out"),
    ] {
        match verify_state_proof(&trust, &ns, e, &read_then, &answer) {
            Err(ProofFailure::Invalid(reason)) => {
                assert!(reason.contains(expected), "{what}: refused, but with {reason:?}")
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    // An answer that says it is of another transaction than the one asked is refused too.
    let mut relabelled = honest_then.clone();
    relabelled.as_of_tx = first.tx + 1;
    assert!(verify_state_proof(&trust, &ns, e, &read_then, &relabelled).is_err());

    // Bad input: an instant (the proof does not bind its transaction), a transaction past the
    // head, a branch.
    let now_ns = engram_raft::clock::now_ns();
    let err = raw
        .get(pb::GetRequest {
            as_of_time_ns: Some(now_ns - 1),
            ..request.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(err.message().contains("as_of_tx"), "{err}");
    let err = raw
        .get(pb::GetRequest {
            as_of_tx: Some(first.tx + 1_000_000),
            ..request.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err}");
    let err = raw
        .get(pb::GetRequest {
            branch: "draft".into(),
            ..request
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");

    // The CLI: the same proof, checked, with what it covered in --json.
    let get = run(&[
        "-e",
        &cluster.node(leader).unwrap().endpoint(),
        "--json",
        "get",
        "--ns",
        ns.as_str(),
        "--entity",
        &e.0.to_string(),
        "--complete",
    ]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    let doc = json_of(&get);
    assert_eq!(doc["complete"]["slots"], 3, "{doc}");
    assert_eq!(doc["complete"]["history_datoms"], 6, "{doc}");
    assert_eq!(doc["datoms"].as_array().unwrap().len(), 2, "{doc}");
    let endpoint = cluster.node(leader).unwrap().endpoint();
    let first_tx = first.tx.to_string();
    let entity = e.0.to_string();
    let get = run(&[
        "-e",
        &endpoint,
        "--json",
        "get",
        "--ns",
        ns.as_str(),
        "--entity",
        &entity,
        "--complete",
        "--as-of-tx",
        &first_tx,
    ]);
    assert_eq!(get.status.code(), Some(0), "{}", text(&get.stderr));
    let doc = json_of(&get);
    assert_eq!(doc["complete"]["as_of_tx"], first.tx, "{doc}");
    assert_eq!(
        doc["datoms"].as_array().unwrap().len(),
        3,
        "owner, status and title then: {doc}"
    );

    // A slot's history proven whole: the owner's assertion and its retraction; an attribute the
    // entity never had, proven empty.
    let owner = Attribute::new(":task/owner").unwrap();
    let history = client
        .history_complete(&mut trust, &ns, e, Some(&owner), None)
        .await
        .unwrap();
    let ops: Vec<i32> = history.datoms.iter().map(|d| d.op).collect();
    assert_eq!(ops, vec![pb::Op::Assert as i32, pb::Op::Retract as i32]);
    assert_eq!(history.slots, 1);
    let owner_then = client
        .history_complete(
            &mut trust,
            &ns,
            e,
            Some(&owner),
            Some(engram_types::TxId(first.tx)),
        )
        .await
        .unwrap();
    assert_eq!(
        owner_then.datoms.len(),
        1,
        "up to the first transaction: the assertion alone"
    );
    assert_eq!(owner_then.as_of_tx, Some(first.tx));
    let never = Attribute::new(":task/never").unwrap();
    let none = client
        .history_complete(&mut trust, &ns, e, Some(&never), None)
        .await
        .unwrap();
    assert_eq!((none.slots, none.datoms.len()), (0, 0));
    let out = run(&[
        "-e",
        &cluster.node(leader).unwrap().endpoint(),
        "--json",
        "history",
        "--ns",
        ns.as_str(),
        "--entity",
        &e.0.to_string(),
        "--complete",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc = json_of(&out);
    assert_eq!(doc["complete"]["slots"], 3, "{doc}");
    let txs: Vec<u64> = doc["datoms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["tx"].as_u64().unwrap())
        .collect();
    assert_eq!(txs.len(), 6, "{doc}");
    assert!(
        txs.windows(2).all(|w| w[0] <= w[1]),
        "in transaction order: {txs:?}"
    );

    // Search hits proven current or superseded: the title is held; the owner found as of the
    // first transaction was retracted since, and nothing replaced it.
    let (found, states) = client
        .search_current(&mut trust, &SearchQuery::new(ns.clone(), "report"))
        .await
        .unwrap();
    assert_eq!(found.hits.len(), 1, "{found:?}");
    assert_eq!(states, vec![Currency::Current]);
    let mut then = SearchQuery::new(ns.clone(), "alice");
    then.as_of_tx = Some(first.tx);
    let (found, states) = client.search_current(&mut trust, &then).await.unwrap();
    assert_eq!(found.hits.len(), 1, "{found:?}");
    assert_eq!(states, vec![Currency::Superseded { by: vec![] }]);
}
