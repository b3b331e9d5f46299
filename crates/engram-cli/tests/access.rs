//! Agents as principals against a real 3-node cluster initialised in enforced mode: the CLI
//! makes the administrator's key, initialises the cluster, registers two agents with different
//! grants; then every bad input of the access table gets its exact gRPC code (unsigned,
//! unknown agent, signature over other bytes, stale time, replayed nonce, revoked or rotated
//! key, no grant, agent field not the signer, a grant that would lock every admin out), the
//! chain head does not move for any of them, and grants are readable as of a transaction.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use engram_access::AgentKey;
use engram_access::request::RequestAuth;
use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, ClientConfig, ClientError, GetOptions, RetryPolicy, pb};
use engram_proto::methods;
use engram_types::{
    Attribute, EntityId, EntityRef, Namespace, Op, Provenance, Status, TxOp, TxRequest, Value,
};
use prost::Message;
use serde_json::Value as Json;
use tonic::Code;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

struct Cli<'a> {
    endpoint: String,
    dir: &'a Path,
}

impl Cli<'_> {
    /// Runs `engram` as the agent whose key file is `key` (none: unsigned).
    fn run(&self, key: Option<&str>, args: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::new(EXE);
        cmd.args(["-e", &self.endpoint, "--retry-budget-secs", "5"]);
        if let Some(key) = key {
            cmd.arg("--agent-key").arg(self.dir.join(key));
        }
        let out = cmd.args(args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, key: Option<&str>, args: &[&str]) -> Json {
        let (code, stdout, stderr) = self.run(key, &[&["--json"], args].concat());
        assert_eq!(code, 0, "{args:?}: {stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
    }

    fn fails(&self, key: Option<&str>, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.run(key, args);
        assert_ne!(code, 0, "{args:?} should fail: {stdout}");
        stderr
    }
}

fn client(endpoints: Vec<String>, key: Option<Arc<AgentKey>>) -> Client {
    let config = ClientConfig {
        retry: RetryPolicy::never(),
        agent: key,
        ..ClientConfig::default()
    };
    Client::with_config(endpoints, config).unwrap()
}

fn note(ns: &str, agent: &str, op: Op, status: Status) -> TxRequest {
    let entity = match op {
        Op::Assert => EntityRef::Temp("n".into()),
        Op::Retract => EntityRef::Id(EntityId(1)),
    };
    TxRequest::data(
        Namespace::new(ns).unwrap(),
        vec![TxOp {
            op,
            entity,
            attribute: Attribute::new(":note/text").unwrap(),
            value: Value::String("hello".into()),
            valid_from_ns: None,
            valid_to_ns: None,
        }],
        Provenance {
            agent: agent.into(),
            confidence: 1.0,
            status,
            ..Default::default()
        },
    )
}

fn code_of<T: std::fmt::Debug>(result: Result<T, ClientError>) -> (Code, String) {
    match result {
        Err(ClientError::Rpc { code, message, .. }) => (code, message),
        other => panic!("expected a gRPC error, got {other:?}"),
    }
}

/// A Get request signed by `key` with the given time and nonce, over `signed_body` (which
/// may differ from the body sent).
fn raw_get(
    key: &AgentKey,
    sent: pb::GetRequest,
    signed_body: &pb::GetRequest,
    time_ms: i64,
    nonce: [u8; 16],
) -> tonic::Request<pb::GetRequest> {
    let auth = RequestAuth::sign(key, methods::GET, &signed_body.encode_to_vec(), time_ms, nonce);
    let mut req = tonic::Request::new(sent);
    for (name, value) in auth.headers() {
        req.metadata_mut().insert(name, value.parse().unwrap());
    }
    req
}

#[allow(clippy::disallowed_methods)] // a client signs with its own clock
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_grants_and_every_refusal_in_enforced_mode() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let endpoints = cluster.endpoints();
    let keys = tempfile::tempdir().unwrap();
    // Node 2 answers the CLI: a follower most of the time, so calls are forwarded signed.
    let cli = Cli {
        endpoint: endpoints[1].clone(),
        dir: keys.path(),
    };

    // 1. The administrator's key, then the cluster in enforced mode (bad init input first).
    let made = cli.ok(
        None,
        &[
            "agent",
            "keygen",
            "root",
            "--out",
            keys.path().join("root.key").to_str().unwrap(),
        ],
    );
    assert_eq!(made["public_key"].as_str().unwrap().len(), 64);
    let members: Vec<String> = cluster
        .members()
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect();
    let mut init = vec!["cluster", "init"];
    for m in &members {
        init.extend(["--member", m.as_str()]);
    }
    let err = cli.fails(None, &[&init[..], &["--security", "enforced"]].concat());
    assert!(err.contains("--admin-key"), "{err}");
    let root_key = keys.path().join("root.key");
    cli.ok(
        None,
        &[
            &init[..],
            &[
                "--security",
                "enforced",
                "--admin-key",
                root_key.to_str().unwrap(),
            ],
        ]
        .concat(),
    );

    let anonymous = client(endpoints.clone(), None);
    let root = Arc::new(AgentKey::load(&root_key).unwrap());
    let admin = client(endpoints.clone(), Some(root.clone()));
    let head = || async { admin.head().await.unwrap().index };

    // 2. Agents and grants, through the CLI as root.
    for name in ["alice", "bob"] {
        let out = keys.path().join(format!("{name}.key"));
        let created = cli.ok(
            Some("root.key"),
            &["agent", "create", name, "--out", out.to_str().unwrap()],
        );
        assert!(created["tx"].as_u64().unwrap() > 0);
    }
    cli.ok(
        Some("root.key"),
        &["grant", "alice", "--action", "read,write", "--ns", "team/a"],
    );
    let bob_grant = cli.ok(
        Some("root.key"),
        &["grant", "bob", "--action", "read", "--ns", "team"],
    );
    let listed = cli.ok(Some("root.key"), &["agent", "list"]);
    let names: Vec<&str> = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alice", "bob", "root"]);
    let who = cli.ok(Some("alice.key"), &["whoami"]);
    assert_eq!(
        (who["principal"].as_str(), who["security"].as_str()),
        (Some("alice"), Some("enforced"))
    );
    assert_eq!(who["grants"].as_array().unwrap().len(), 2);

    let alice_key = Arc::new(AgentKey::load(&keys.path().join("alice.key")).unwrap());
    let bob_key = Arc::new(AgentKey::load(&keys.path().join("bob.key")).unwrap());
    let alice = client(endpoints.clone(), Some(alice_key.clone()));
    let bob = client(endpoints.clone(), Some(bob_key.clone()));

    // 3. What is granted works, through any node.
    let written = alice
        .transact(&note("team/a", "alice", Op::Assert, Status::Candidate))
        .await
        .unwrap();
    let entity = EntityId(*written.temp_ids.get("n").unwrap());
    let ns_a = Namespace::new("team/a").unwrap();
    let seen = bob.get(&ns_a, entity, GetOptions::default()).await.unwrap();
    assert_eq!(seen.datoms[0].provenance.as_ref().unwrap().agent, "alice");

    // 3b. Proven reads without `audit`: bob pins the node keys the cluster lists and reads
    // with a proof; verifying the whole chain first would need `audit`.
    let members = admin.status().await.unwrap().members;
    let node_keys: Vec<engram_client::PublicKey> = members
        .iter()
        .map(|m| engram_client::PublicKey(m.public_key.as_slice().try_into().unwrap()))
        .collect();
    assert_eq!(node_keys.len(), 3);
    assert_eq!(code_of(bob.trust_chain().await).0, Code::PermissionDenied);
    let mut log = bob.trust_keys(&node_keys).await.unwrap();
    let proven = bob
        .get_verified(&mut log, &ns_a, entity, GetOptions::default())
        .await
        .unwrap();
    assert_eq!(proven.datoms[0].provenance.as_ref().unwrap().agent, "alice");
    // A key the cluster does not hold signed none of its checkpoints.
    let stranger_key = engram_audit::NodeKey::from_seed([5; 32]).public();
    match bob.trust_keys(&[stranger_key]).await {
        Err(ClientError::Proof { reason, .. }) => {
            assert!(reason.contains("none of the trusted keys"), "{reason}")
        }
        other => panic!("a checkpoint trusted under a foreign key: {other:?}"),
    }

    // 4. The bad-input table: each refusal has its code, and the chain does not move.
    let before = head().await;
    let (code, msg) = code_of(
        anonymous
            .transact(&note("team/a", "alice", Op::Assert, Status::Candidate))
            .await,
    );
    assert_eq!(code, Code::Unauthenticated, "{msg}");
    assert_eq!(
        code_of(anonymous.get(&ns_a, entity, GetOptions::default()).await).0,
        Code::Unauthenticated
    );
    assert_eq!(code_of(anonymous.head().await).0, Code::Unauthenticated);
    // A backup holds every namespace: cluster-admin only, refused before anything is read.
    let (code, msg) = code_of(alice.backup().await.map(|_| ()));
    assert_eq!(code, Code::PermissionDenied, "{msg}");
    assert!(msg.contains("alice") && msg.contains("cluster-admin"), "{msg}");
    assert_eq!(
        code_of(anonymous.backup().await.map(|_| ())).0,
        Code::Unauthenticated
    );
    let (code, msg) = code_of(
        alice
            .transact(&note("team/b", "alice", Op::Assert, Status::Candidate))
            .await,
    );
    assert_eq!(code, Code::PermissionDenied);
    assert!(
        msg.contains("alice") && msg.contains("write") && msg.contains("team/b"),
        "the denial names principal, action and namespace: {msg}"
    );
    let (code, msg) = code_of(
        alice
            .transact(&note("team/a", "alice", Op::Retract, Status::Candidate))
            .await,
    );
    assert_eq!(code, Code::PermissionDenied, "{msg}");
    assert!(msg.contains("retract"), "{msg}");
    let (code, msg) = code_of(
        alice
            .transact(&note("team/a", "alice", Op::Assert, Status::Verified))
            .await,
    );
    assert_eq!(code, Code::PermissionDenied, "{msg}");
    assert!(msg.contains("promote"), "{msg}");
    let (code, msg) = code_of(
        alice
            .transact(&note("team/a", "mallory", Op::Assert, Status::Candidate))
            .await,
    );
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(msg.contains("mallory") && msg.contains("alice"), "{msg}");
    assert_eq!(
        code_of(
            bob.transact(&note("team/a", "bob", Op::Assert, Status::Candidate))
                .await
        )
        .0,
        Code::PermissionDenied
    );
    assert_eq!(
        code_of(bob.grant("bob", "write", "team/a", false).await).0,
        Code::PermissionDenied
    );
    let history = bob
        .history(
            &ns_a,
            engram_client::HistoryTarget::Entity {
                entity,
                attribute: None,
            },
            0,
            engram_client::Consistency::Linearizable,
        )
        .await;
    assert_eq!(
        code_of(history).0,
        Code::PermissionDenied,
        "read does not give read-history"
    );
    // A key nobody registered, under a registered name.
    let impostor = client(
        endpoints.clone(),
        Some(Arc::new(AgentKey::from_seed(
            engram_access::Principal::new("alice").unwrap(),
            [9; 32],
        ))),
    );
    assert_eq!(
        code_of(
            impostor
                .transact(&note("team/a", "alice", Op::Assert, Status::Candidate))
                .await
        )
        .0,
        Code::Unauthenticated
    );
    let stranger = client(
        endpoints.clone(),
        Some(Arc::new(AgentKey::from_seed(
            engram_access::Principal::new("zed").unwrap(),
            [8; 32],
        ))),
    );
    let (code, msg) = code_of(stranger.who_am_i().await);
    assert_eq!(code, Code::Unauthenticated);
    assert!(msg.contains("unknown agent zed"), "{msg}");
    // Raw requests: a signature over other bytes, a stale time, a replayed nonce.
    let mut raw = pb::memory_client::MemoryClient::connect(format!("http://{}", endpoints[0]))
        .await
        .unwrap();
    let get = |e: u64| pb::GetRequest {
        namespace: "team/a".into(),
        entity: e,
        consistency: pb::ReadConsistency::Stale as i32,
        ..Default::default()
    };
    let other = raw
        .get(raw_get(
            &bob_key,
            get(entity.0),
            &get(entity.0 + 1),
            now_ms(),
            [1; 16],
        ))
        .await;
    assert_eq!(other.unwrap_err().code(), Code::Unauthenticated);
    let stale = raw
        .get(raw_get(
            &bob_key,
            get(entity.0),
            &get(entity.0),
            now_ms() - 600_000,
            [2; 16],
        ))
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Code::Unauthenticated);
    assert!(stale.message().contains("window"), "{}", stale.message());
    let nonce = [3; 16];
    let t = now_ms();
    raw.get(raw_get(&bob_key, get(entity.0), &get(entity.0), t, nonce))
        .await
        .unwrap();
    let replay = raw
        .get(raw_get(&bob_key, get(entity.0), &get(entity.0), t, nonce))
        .await
        .unwrap_err();
    assert_eq!(replay.code(), Code::Unauthenticated);
    assert!(replay.message().contains("replay"), "{}", replay.message());
    // Nobody writes the system namespace directly.
    let (code, _) = code_of(
        admin
            .transact(&note("engram.system", "root", Op::Assert, Status::Candidate))
            .await,
    );
    assert_eq!(code, Code::InvalidArgument);
    // The last administrator cannot lock everyone out.
    let err = cli.fails(Some("root.key"), &["revoke", "root", "--action", "grant"]);
    assert!(
        err.contains("FAILED_PRECONDITION") || err.contains("no active agent"),
        "{err}"
    );
    let err = cli.fails(Some("root.key"), &["agent", "revoke", "root"]);
    assert!(err.contains("no active agent"), "{err}");
    assert_eq!(head().await, before, "a refused request moved the chain");

    // 5. Rotation: the old key is refused from the change on, the new one works.
    let rotated = keys.path().join("alice-2.key");
    cli.ok(
        Some("alice.key"),
        &["agent", "rotate", "alice", "--out", rotated.to_str().unwrap()],
    );
    assert_eq!(
        code_of(
            alice
                .transact(&note("team/a", "alice", Op::Assert, Status::Candidate))
                .await
        )
        .0,
        Code::Unauthenticated
    );
    let alice2 = client(
        endpoints.clone(),
        Some(Arc::new(AgentKey::load(&rotated).unwrap())),
    );
    alice2
        .transact(&note("team/a", "alice", Op::Assert, Status::Candidate))
        .await
        .unwrap();

    // 6. Revocation: bob's grant, then bob. The grant stays readable as of before it ended.
    let grant_tx = bob_grant[0]["tx"].as_u64().unwrap();
    cli.ok(
        Some("root.key"),
        &["revoke", "bob", "--action", "read", "--ns", "team"],
    );
    assert_eq!(
        code_of(bob.get(&ns_a, entity, GetOptions::default()).await).0,
        Code::PermissionDenied
    );
    let grants = admin.list_grants("bob").await.unwrap();
    assert!(grants.grants.is_empty());
    let system = Namespace::new("engram.system").unwrap();
    let found = admin
        .find(&engram_client::FindQuery {
            namespace: system.clone(),
            attribute: Attribute::new(":engram.grant/principal").unwrap(),
            value: Some(Value::String("bob".into())),
            as_of_tx: Some(grant_tx),
            as_of_time_ns: None,
            limit: 0,
            consistency: engram_client::Consistency::Linearizable,
            branch: None,
            include_expired: false,
            since_tx: None,
            valid_at_ns: None,
        })
        .await
        .unwrap();
    let grant_entity = EntityId(found.datoms[0].entity);
    let status = |tx: Option<u64>| {
        let admin = admin.clone();
        let system = system.clone();
        async move {
            let opts = GetOptions {
                as_of_tx: tx,
                ..GetOptions::default()
            };
            let got = admin.get(&system, grant_entity, opts).await.unwrap();
            got.datoms
                .iter()
                .find(|d| d.attribute == ":engram.grant/status")
                .and_then(|d| d.value.clone())
                .and_then(|v| v.kind)
        }
    };
    let active = Some(pb::value::Kind::String("active".into()));
    let ended = Some(pb::value::Kind::String("revoked".into()));
    assert_eq!(status(Some(grant_tx)).await, active);
    assert_eq!(status(None).await, ended);
    cli.ok(Some("root.key"), &["agent", "revoke", "bob"]);
    let (code, msg) = code_of(bob.who_am_i().await);
    assert_eq!(code, Code::Unauthenticated);
    assert!(msg.contains("revoked"), "{msg}");

    // 7. Roles: grants to role:ops reach alice (on her rotated key) only while she holds the role.
    cli.ok(
        Some("root.key"),
        &["grant", "role:ops", "--action", "write", "--ns", "infra"],
    );
    let infra = note("infra/dns", "alice", Op::Assert, Status::Candidate);
    let (code, _) = code_of(alice2.transact(&infra).await);
    assert_eq!(code, Code::PermissionDenied);
    let err = cli.fails(Some("alice-2.key"), &["agent", "assign-role", "alice", "ops"]);
    assert!(err.contains("PERMISSION_DENIED"), "{err}");
    cli.ok(Some("root.key"), &["agent", "assign-role", "alice", "ops"]);
    let listed = cli.ok(Some("root.key"), &["agent", "list"]);
    let alice_row = listed["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "alice")
        .unwrap()
        .clone();
    assert_eq!(alice_row["roles"], serde_json::json!(["role:ops"]));
    alice2.transact(&infra).await.unwrap();
    let err = cli.fails(Some("root.key"), &["agent", "assign-role", "alice", "ops"]);
    assert!(err.contains("already has role:ops"), "{err}");
    cli.ok(Some("root.key"), &["agent", "unassign-role", "alice", "ops"]);
    let (code, msg) = code_of(alice2.transact(&infra).await);
    assert_eq!(code, Code::PermissionDenied, "{msg}");

    // 8. The chains agree and verify.
    let out = Command::new(EXE)
        .args(["--agent-key", root_key.to_str().unwrap()])
        .args(endpoints.iter().flat_map(|e| ["-e".to_string(), e.clone()]))
        .args(["audit", "verify", "--each"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // 9. An export proves which agent wrote each transaction, and a tampered agent signature
    //    is named at its entry.
    let export = keys.path().join("chain.export");
    let root_cli = |args: &[&str]| {
        Command::new(EXE)
            .args([
                "--agent-key",
                root_key.to_str().unwrap(),
                "-e",
                endpoints[0].as_str(),
            ])
            .args(args)
            .output()
            .unwrap()
    };
    let out = root_cli(&["audit", "export", "--out", export.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = root_cli(&["--json", "audit", "verify", export.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let report: Json = serde_json::from_slice(&out.stdout).unwrap();
    let alice_writes = report["signed_by_agent"]["alice"].as_u64().unwrap();
    assert!(alice_writes >= 2, "{report}");
    let (tampered, index) = tamper_first_agent_signature(&std::fs::read(&export).unwrap());
    let tampered_path = keys.path().join("tampered.export");
    std::fs::write(&tampered_path, tampered).unwrap();
    let out = root_cli(&["audit", "verify", "--all", tampered_path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    // What an auditor sees (shown with --nocapture).
    println!(
        "engram audit verify --all tampered.export  (exit {:?})\n{text}",
        out.status.code()
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "audit entry {index}, author.signature: request signature does not verify for agent alice"
        )),
        "{text}"
    );
    cluster.kill_all();
}

/// The export with one bit of the first agent signature flipped in its entry, and that
/// entry's index.
fn tamper_first_agent_signature(bytes: &[u8]) -> (Vec<u8>, u64) {
    use engram_audit::{EntryKind, SignedEntry};
    use engram_verify::format::{ExportReader, ExportWriter, Next, Record};
    let mut reader = ExportReader::open(bytes).unwrap();
    let mut out = ExportWriter::new(Vec::new()).unwrap();
    let mut at = None;
    while let Ok(Next::Record { record, .. }) = reader.next_record() {
        let record = match record {
            Record::Entry(entry) if at.is_none() => {
                let mut signed = SignedEntry::decode(&entry).unwrap();
                match &mut signed.entry.kind {
                    EntryKind::Transaction {
                        author: Some(author), ..
                    } if author.principal == "alice" => {
                        author.signature[10] ^= 1;
                        at = Some(signed.entry.index);
                        Record::Entry(signed.encode())
                    }
                    _ => Record::Entry(entry),
                }
            }
            other => other,
        };
        out.write(&record).unwrap();
    }
    (out.into_inner().unwrap(), at.expect("an entry signed by alice"))
}

/// Nodes started with `--security enforced --admin NAME=KEY` (no `--bootstrap`) accept only the
/// `Init` that names that mode and that administrator: a client that reaches them first
/// cannot make itself the cluster's administrator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_must_match_the_mode_and_administrator_the_nodes_expect() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    // Key files need no cluster; the endpoint is only parsed.
    let cli = Cli {
        endpoint: "127.0.0.1:1".into(),
        dir: keys.path(),
    };
    let mut public = std::collections::BTreeMap::new();
    for name in ["root", "intruder"] {
        let out = keys.path().join(format!("{name}.key"));
        let made = cli.ok(None, &["agent", "keygen", name, "--out", out.to_str().unwrap()]);
        public.insert(name, made["public_key"].as_str().unwrap().to_string());
    }
    let expect = format!("root={}", public["root"]);
    let args = ["--security", "enforced", "--admin", &expect].map(String::from);
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &args).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let cli = Cli {
        endpoint: cluster.endpoints()[0].clone(),
        dir: keys.path(),
    };
    let mut init = vec!["cluster".to_string(), "init".to_string()];
    for (id, addr) in cluster.members() {
        init.extend(["--member".to_string(), format!("{id}={addr}")]);
    }
    let init: Vec<&str> = init.iter().map(String::as_str).collect();
    let intruder = keys.path().join("intruder.key");
    for attempt in [
        vec![
            "--security",
            "enforced",
            "--admin-key",
            intruder.to_str().unwrap(),
        ],
        vec!["--security", "open"],
    ] {
        let err = cli.fails(None, &[&init[..], &attempt[..]].concat());
        assert!(err.contains("FAILED_PRECONDITION"), "{err}");
        assert!(
            err.contains("started with --security enforced --admin root="),
            "{err}"
        );
    }
    // Nothing was initialised by the refused attempts; the expected Init goes through.
    let root = keys.path().join("root.key");
    cli.ok(
        None,
        &[
            &init[..],
            &["--security", "enforced", "--admin-key", root.to_str().unwrap()],
        ]
        .concat(),
    );
    let who = cli.ok(Some("root.key"), &["whoami"]);
    assert_eq!(
        (who["principal"].as_str(), who["security"].as_str()),
        (Some("root"), Some("enforced"))
    );
    cluster.kill_all();
}
