//! The access log against a real cluster: nodes started with `--access-log team` record every
//! read they serve on `team/...` (who, what, which entity, as of what), nothing else; an
//! auditor lists them with `engram access` and checks every node's whole log with
//! `engram access --verify`; a reader without the `audit` grant cannot see the log. Every node
//! also records the calls it refuses (unknown agent, no grant), whatever it logs.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use engram_access::{AgentKey, Principal};
use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, ClientConfig, Consistency, GetOptions, HistoryTarget, pb};
use engram_types::{Attribute, EntityId, EntityRef, Namespace, Op, Provenance, TxOp, TxRequest, Value};
use serde_json::Value as Json;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

fn client(endpoints: Vec<String>, key: &Arc<AgentKey>) -> Client {
    let config = ClientConfig {
        agent: Some(key.clone()),
        ..ClientConfig::default()
    };
    Client::with_config(endpoints, config).unwrap()
}

fn note(ns: &str) -> TxRequest {
    TxRequest::data(
        Namespace::new(ns).unwrap(),
        vec![TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp("n".into()),
            attribute: Attribute::new(":note/text").unwrap(),
            value: Value::String("the launch moved to Friday".into()),
            valid_from_ns: None,
            valid_to_ns: None,
        }],
        Provenance {
            agent: "root".into(),
            confidence: 1.0,
            ..Default::default()
        },
    )
}

/// A 3-node cluster in `dir` started with `serve_args`, initialised in enforced mode with root
/// (its key file in `keys`) as the administrator: the cluster, root's key file and a client
/// signing as root.
async fn enforced_cluster(dir: &Path, keys: &Path, serve_args: &[String]) -> (LocalCluster, PathBuf, Client) {
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir, &ports, serve_args).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let root_path = keys.join("root.key");
    let root = Arc::new(AgentKey::create(Principal::new("root").unwrap(), &root_path).unwrap());
    cluster
        .init_with(Duration::from_secs(30), Some(("root", root.public().0)))
        .await
        .unwrap();
    let admin = client(cluster.endpoints(), &root);
    (cluster, root_path, admin)
}

/// The events `engram --json ARGS` lists from every node, asked again (the writer appends within
/// a moment of the answer) until there are at least `at_least`.
async fn events_of(key: &Path, endpoints: &[String], args: &[&str], at_least: usize) -> Vec<Json> {
    let mut events = Vec::new();
    for _ in 0..50 {
        let (code, out) = cli(key, endpoints, &[&["--json"], args].concat());
        assert_eq!(code, 0, "{out}");
        let nodes: Json = serde_json::from_str(&out).unwrap();
        events = nodes
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["events"].as_array().unwrap().clone())
            .collect();
        if events.len() >= at_least {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    events
}

/// `engram --agent-key KEY -e each endpoint ARGS`: exit code and stdout.
fn cli(key: &Path, endpoints: &[String], args: &[&str]) -> (i32, String) {
    let out = Command::new(EXE)
        .arg("--agent-key")
        .arg(key)
        .args(endpoints.iter().flat_map(|e| ["-e".to_string(), e.clone()]))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_on_logged_namespaces_are_recorded_signed_and_verifiable() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let logged = ["--access-log".to_string(), "team".to_string()];
    let (mut cluster, root_path, admin) = enforced_cluster(dir.path(), keys.path(), &logged).await;
    let endpoints = cluster.endpoints();
    let bob_path = keys.path().join("bob.key");
    let bob_key = Arc::new(AgentKey::create(Principal::new("bob").unwrap(), &bob_path).unwrap());
    admin.add_agent("bob", bob_key.public().0).await.unwrap();
    admin.grant("bob", "read", "", false).await.unwrap();
    admin.grant("bob", "read-history", "", false).await.unwrap();

    let written = admin.transact(&note("team/a")).await.unwrap();
    let entity = EntityId(*written.temp_ids.get("n").unwrap());
    admin.transact(&note("other/x")).await.unwrap();
    let bob = client(endpoints.clone(), &bob_key);
    let team_a = Namespace::new("team/a").unwrap();
    let seen = bob.get(&team_a, entity, GetOptions::default()).await.unwrap();
    assert_eq!(seen.datoms.len(), 1);
    bob.get(
        &team_a,
        entity,
        GetOptions {
            as_of_tx: Some(written.tx),
            ..GetOptions::default()
        },
    )
    .await
    .unwrap();
    let target = HistoryTarget::Entity {
        entity,
        attribute: None,
    };
    bob.history(&team_a, target, 100, Consistency::Linearizable)
        .await
        .unwrap();
    // Not logged: another namespace.
    let other = Namespace::new("other/x").unwrap();
    bob.get(&other, EntityId(1), GetOptions::default()).await.ok();

    // Each node logs what it served (linearizable reads are served by the leader); the
    // auditor asks every node. The writer appends within a moment of the answer.
    let root_key = root_path.as_path();
    let events = events_of(
        root_key,
        &endpoints,
        &["access", "--ns", "team", "--principal", "bob"],
        3,
    )
    .await;
    let calls: Vec<(&str, &str, Option<u64>, Option<u64>)> = events
        .iter()
        .map(|e| {
            (
                e["call"].as_str().unwrap(),
                e["namespace"].as_str().unwrap(),
                e["entity"].as_u64(),
                e["as_of_tx"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            ("get", "team/a", Some(entity.0), None),
            ("get", "team/a", Some(entity.0), Some(written.tx)),
            ("history", "team/a", Some(entity.0), None),
        ],
        "{events:?}"
    );
    for e in &events {
        assert_eq!(e["principal"], "bob");
        assert!(e["read_at"].as_u64().unwrap() >= written.tx, "{e}");
    }
    // Nothing on the namespace no node logs.
    let (code, out) = cli(root_key, &endpoints, &["--json", "access", "--ns", "other"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("\"call\""), "{out}");

    // Every node's whole log verifies against the key it signs with.
    let (code, out) = cli(root_key, &endpoints, &["access", "--verify"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("access log verified").count(), 3, "{out}");

    // Exported, the logs verify offline; an altered event is named.
    let export = keys.path().join("reads.json");
    let (code, out) = cli(
        root_key,
        &endpoints,
        &["access", "--export", export.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = cli(
        root_key,
        &endpoints,
        &["access", "--verify-file", export.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("access log verified").count(), 3, "{out}");
    // JSON lines: the header, then each node and its events. Rewrite the first event's
    // principal (inside its encoding) from bob to eve.
    let mut lines: Vec<String> = std::fs::read_to_string(&export)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with("{\"event\""))
        .expect("an exported event");
    let forged = lines[first].replacen(&hex::encode(b"bob"), &hex::encode(b"eve"), 1);
    assert_ne!(lines[first], forged, "the first event names bob");
    lines[first] = forged;
    let tampered = keys.path().join("tampered.json");
    std::fs::write(&tampered, lines.join("\n")).unwrap();
    let (code, out) = cli(
        root_key,
        &endpoints,
        &["access", "--verify-file", tampered.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{out}");
    // Named at the event if it carries the batch's signature, else where its link breaks.
    assert!(
        out.contains("ACCESS LOG DOES NOT VERIFY: access event 1, attestation.signature")
            || out.contains("ACCESS LOG DOES NOT VERIFY: access event 2, prev_hash"),
        "{out}"
    );

    // A switch in the policy: every node logs `shared` from the change on, until it is
    // switched off; the changes are audited transactions of root's.
    let shared = Namespace::new("shared/notes").unwrap();
    let shared_note = admin.transact(&note("shared/notes")).await.unwrap();
    let shared_entity = EntityId(*shared_note.temp_ids.get("n").unwrap());
    let (code, out) = cli(root_key, &endpoints, &["access", "--enable", "shared"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("every node now logs the reads under shared"),
        "{out}"
    );
    let (code, out) = cli(root_key, &endpoints, &["access", "--enable", "shared"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("already logged"), "{out}");
    let bob_key_path = bob_path.as_path();
    let (code, out) = cli(bob_key_path, &endpoints, &["access", "--disable", "shared"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("PERMISSION_DENIED"), "{out}");
    bob.get(&shared, shared_entity, GetOptions::default())
        .await
        .unwrap();
    let shared_events = |expect: usize| {
        let endpoints = endpoints.clone();
        async move {
            let mut found = 0;
            for _ in 0..50 {
                let (code, out) = cli(root_key, &endpoints, &["--json", "access", "--ns", "shared"]);
                assert_eq!(code, 0, "{out}");
                found = out.matches("\"call\": \"get\"").count();
                if found >= expect {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            found
        }
    };
    assert_eq!(shared_events(1).await, 1);
    let (code, out) = cli(root_key, &endpoints, &["access", "--disable", "shared"]);
    assert_eq!(code, 0, "{out}");
    bob.get(&shared, shared_entity, GetOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        shared_events(1).await,
        1,
        "a read after the switch was turned off was logged"
    );
    let (code, out) = cli(root_key, &endpoints, &["access", "--disable", "shared"]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("not logged"), "{out}");

    // Bad input: a malformed prefix, a page above the limit.
    let (code, out) = cli(root_key, &endpoints, &["access", "--enable", "a//b"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("INVALID_ARGUMENT") && out.contains("prefix"),
        "{out}"
    );
    let too_many = admin
        .access_events(pb::AccessEventsRequest {
            limit: 10_001,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(too_many.code(), Some(tonic::Code::InvalidArgument), "{too_many}");
    assert!(too_many.to_string().contains("limit"), "{too_many}");

    // The log is for auditors: a reader without the audit grant is refused.
    let denied = bob
        .access_events(pb::AccessEventsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Some(tonic::Code::PermissionDenied), "{denied}");
    cluster.kill_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_are_recorded_signed_and_verifiable_on_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    // No --access-log: these nodes log no reads, only refusals.
    let (mut cluster, root_path, admin) = enforced_cluster(dir.path(), keys.path(), &[]).await;
    let endpoints = cluster.endpoints();
    let eve_key =
        Arc::new(AgentKey::create(Principal::new("eve").unwrap(), &keys.path().join("eve.key")).unwrap());
    admin.add_agent("eve", eve_key.public().0).await.unwrap();
    let written = admin.transact(&note("team/a")).await.unwrap();
    let entity = EntityId(*written.temp_ids.get("n").unwrap());
    let team_a = Namespace::new("team/a").unwrap();
    // A served read is not logged here.
    admin.get(&team_a, entity, GetOptions::default()).await.unwrap();

    // eve holds no grant: her read and her write are refused; mallory is no registered agent.
    let eve = client(endpoints.clone(), &eve_key);
    let read = eve.get(&team_a, entity, GetOptions::default()).await.unwrap_err();
    assert_eq!(read.code(), Some(tonic::Code::PermissionDenied), "{read}");
    let mut eves_note = note("team/a");
    eves_note.provenance.agent = "eve".into();
    let write = eve.transact(&eves_note).await.unwrap_err();
    assert_eq!(write.code(), Some(tonic::Code::PermissionDenied), "{write}");
    let mallory_key = Arc::new(
        AgentKey::create(
            Principal::new("mallory").unwrap(),
            &keys.path().join("mallory.key"),
        )
        .unwrap(),
    );
    let mallory = client(endpoints.clone(), &mallory_key);
    let unknown = mallory
        .get(&team_a, entity, GetOptions::default())
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Some(tonic::Code::Unauthenticated), "{unknown}");

    // The nodes that decided recorded each refusal once (a write a follower relayed was
    // decided by the leader), with the agent claimed, the method, the namespace and the reason.
    let root_key = root_path.as_path();
    let refused = events_of(root_key, &endpoints, &["access", "--refused"], 3).await;
    let mut seen: Vec<(&str, &str, &str, &str)> = refused
        .iter()
        .map(|e| {
            (
                e["principal"].as_str().unwrap(),
                e["call"].as_str().unwrap(),
                e["namespace"].as_str().unwrap(),
                e["refused"]["code"].as_str().unwrap(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("eve", "/engram.v1.Memory/Get", "team/a", "PERMISSION_DENIED"),
            ("eve", "/engram.v1.Memory/Transact", "team/a", "PERMISSION_DENIED"),
            ("mallory", "/engram.v1.Memory/Get", "team/a", "UNAUTHENTICATED"),
        ],
        "{refused:?}"
    );
    for e in &refused {
        let reason = e["refused"]["reason"].as_str().unwrap();
        let who = e["principal"].as_str().unwrap();
        assert!(reason.contains(who), "the reason names the agent: {e}");
        assert_eq!(e["datoms"], 0, "{e}");
    }
    // Without --refused the listing shows them too (nothing else is logged here), and the
    // table names the code and the reason.
    let (code, out) = cli(root_key, &endpoints, &["access"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("logs no reads").count(), 3, "{out}");
    assert!(
        out.contains("UNAUTHENTICATED: unauthenticated: unknown agent mallory"),
        "{out}"
    );
    assert_eq!(out.matches("PERMISSION_DENIED: ").count(), 2, "{out}");
    // The refusals are in each node's signed, linked log: every log verifies.
    let (code, out) = cli(root_key, &endpoints, &["access", "--verify"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("access log verified").count(), 3, "{out}");
    cluster.kill_all();
}

#[test]
fn a_node_refuses_a_malformed_access_log_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(EXE)
        .args([
            "serve",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--access-log",
            "team,a//b",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--access-log \"a//b\": not a namespace prefix (or *)"),
        "{stderr}"
    );
}
