//! Mutual TLS between clients and nodes and between nodes: a 3-node cluster started with
//! certificates forms itself and serves a client that presents one; a plaintext client, a
//! client without a certificate and a client trusting another CA are all refused; probes get
//! the health service in plaintext on its own port.
//!
//! Client certificates as principals: in an enforced cluster, a certificate that names a
//! registered agent (by common name, or by a `URI:engram:agent:` name) authenticates its calls
//! through any node, with that agent's grants; a certificate naming no agent, a revoked agent,
//! a header claiming another name and a forged follower vouch are all refused, and the chain
//! does not move.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_cli::pki;

const EXE: &str = env!("CARGO_BIN_EXE_engram");

/// A CA and a certificate it signs (for 127.0.0.1, usable by servers and clients) in `dir`,
/// as `<name>-ca.pem` and `<name>.pem`/`<name>.key`.
fn pki(dir: &Path, name: &str) {
    pki::make_ca(dir, name).unwrap();
    pki::issue(dir, name, name, "/CN=engram", pki::NODE_EXTENSIONS).unwrap();
}

/// A client certificate for `subject` (with `san` as its subject-alternative names, if any),
/// signed by the CA `pki(dir, ca)` made, as `<name>.pem`/`<name>.key`.
fn client_cert(dir: &Path, ca: &str, name: &str, subject: &str, san: Option<&str>) {
    pki::issue(dir, ca, name, subject, &pki::client_extensions(san)).unwrap();
}

fn engram(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(EXE).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_only_clients_with_a_certificate_from_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki_dir = dir.path();
    pki(pki_dir, "node");
    pki(pki_dir, "other");
    let path = |f: &str| pki_dir.join(f).to_str().unwrap().to_string();
    let ports = free_ports(4).unwrap();
    let peers = (0..3)
        .map(|i| format!("{}=127.0.0.1:{}", i + 1, ports[i]))
        .collect::<Vec<_>>()
        .join(",");
    let health = format!("127.0.0.1:{}", ports[3]);
    let args = vec![
        "--bootstrap".to_string(),
        "--peer".into(),
        peers,
        "--tls-cert".into(),
        path("node.pem"),
        "--tls-key".into(),
        path("node.key"),
        "--tls-client-ca".into(),
        path("node-ca.pem"),
    ];
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports[..3], &args).unwrap();
    let endpoints = format!(
        "127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
        ports[0], ports[1], ports[2]
    );
    let tls = [
        "--tls-ca",
        &path("node-ca.pem"),
        "--tls-cert",
        &path("node.pem"),
        "--tls-key",
        &path("node.key"),
    ];

    let start = Instant::now();
    loop {
        let (code, out, _) = engram(
            &[
                &["-e", &endpoints, "--retry-budget-secs", "1"][..],
                &tls,
                &["cluster", "status"],
            ]
            .concat(),
        );
        if code == 0 && out.lines().filter(|l| l.contains("1,2,3")).count() == 3 {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let logs: Vec<String> = cluster
                .nodes()
                .iter()
                .enumerate()
                .map(|(i, n)| format!("--- node {} log ---\n{}", i + 1, n.log_tail(40)))
                .collect();
            panic!("the TLS cluster did not form: {out}\n{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let tx =
        r#"{"namespace":"tls/a","agent":"a","ops":[{"entity":"t","attribute":":t/n","value":{"i64":1}}]}"#;
    let file = dir.path().join("tx.json");
    std::fs::write(&file, tx).unwrap();
    let (code, _, err) = engram(
        &[
            &["-e", &endpoints][..],
            &tls,
            &["transact", file.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = engram(&[&["-e", &endpoints][..], &tls, &["audit", "verify"]].concat());
    assert_eq!(code, 0, "{err}");
    // The health check connects as the other commands do, over TLS with --tls-*. (Liveness:
    // readiness would depend on how far the node has caught up.)
    let first = format!("127.0.0.1:{}", ports[0]);
    let (code, out, err) = engram(
        &[
            &["-e", &first][..],
            &tls,
            &["health", "--service", "engram.live", "--timeout-ms", "5000"],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("engram.live: SERVING"), "{out}");

    // Refused: plaintext, no client certificate, a server CA the client does not trust.
    let one = format!("127.0.0.1:{}", ports[0]);
    let quick = ["-e", one.as_str(), "--retry-budget-secs", "0.5"];
    let (code, _, _) = engram(&[&quick[..], &["cluster", "status"]].concat());
    assert_ne!(code, 0, "a plaintext client must be refused");
    let (code, _, _) = engram(
        &[
            &quick[..],
            &["--tls-ca", &path("node-ca.pem"), "cluster", "status"],
        ]
        .concat(),
    );
    assert_ne!(code, 0, "a client without a certificate must be refused");
    let wrong = [
        "--tls-ca",
        &path("other-ca.pem"),
        "--tls-cert",
        &path("other.pem"),
        "--tls-key",
        &path("other.key"),
    ];
    let (code, _, _) = engram(&[&quick[..], &wrong, &["cluster", "status"]].concat());
    assert_ne!(code, 0, "a client of another CA must be refused");

    // Probes: a TLS node also serving plaintext health on its own port.
    let solo_port = free_ports(1).unwrap()[0];
    let solo = Command::new(EXE)
        .args([
            "serve",
            "--id",
            "1",
            "--bootstrap",
            "--listen",
            &format!("127.0.0.1:{solo_port}"),
        ])
        .args([
            "--data-dir",
            dir.path().join("solo").to_str().unwrap(),
            "--health-listen",
            &health,
        ])
        .args([
            "--tls-cert",
            &path("node.pem"),
            "--tls-key",
            &path("node.key"),
            "--tls-client-ca",
            &path("node-ca.pem"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _solo = Kill(solo);
    let start = Instant::now();
    loop {
        let (code, out, err) = engram(&["-e", &health, "health", "--service", "engram.live"]);
        if code == 0 {
            assert!(out.contains("SERVING"), "{out}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no plaintext health: {err}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, _, _) = engram(&[
        "-e",
        &format!("127.0.0.1:{solo_port}"),
        "health",
        "--timeout-ms",
        "1000",
    ]);
    assert_ne!(code, 0, "the TLS port does not answer plaintext probes");
    cluster.kill_all();
}

/// The TLS arguments of a CLI call presenting `<name>.pem` from `dir`.
fn tls_as(dir: &Path, name: &str) -> Vec<String> {
    let path = |f: String| dir.join(f).to_str().unwrap().to_string();
    vec![
        "--tls-ca".into(),
        path("node-ca.pem".into()),
        "--tls-cert".into(),
        path(format!("{name}.pem")),
        "--tls-key".into(),
        path(format!("{name}.key")),
    ]
}

/// `engram -e ENDPOINT --json <tls as cert> [--agent-key KEY] ARGS`.
fn engram_as(
    endpoint: &str,
    dir: &Path,
    cert: &str,
    key: Option<&str>,
    args: &[&str],
) -> (i32, String, String) {
    let mut all: Vec<String> = vec![
        "-e".into(),
        endpoint.into(),
        "--retry-budget-secs".into(),
        "5".into(),
    ];
    all.extend(tls_as(dir, cert));
    if let Some(key) = key {
        all.push("--agent-key".into());
        all.push(dir.join(key).to_str().unwrap().to_string());
    }
    all.push("--json".into());
    all.extend(args.iter().map(|a| a.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    engram(&refs)
}

/// A raw Memory client over mutual TLS presenting `<cert>.pem`, to send headers the CLI never
/// sends.
async fn raw_memory(
    dir: &Path,
    endpoint: &str,
    cert: &str,
) -> engram_client::pb::memory_client::MemoryClient<tonic::transport::Channel> {
    use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
    let read = |f: String| std::fs::read(dir.join(f)).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read("node-ca.pem".into())))
        .identity(Identity::from_pem(
            read(format!("{cert}.pem")),
            read(format!("{cert}.key")),
        ))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{endpoint}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    engram_client::pb::memory_client::MemoryClient::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_name_agents_in_an_enforced_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pki(d, "node");
    client_cert(d, "node", "alice", "/O=Team A/CN=alice", None);
    // A certificate whose subject is a host name, naming its agent by URI.
    client_cert(
        d,
        "node",
        "bob-host",
        "/CN=worker-7.example",
        Some("DNS:worker-7.example,URI:engram:agent:bob"),
    );
    client_cert(d, "node", "mallory", "/CN=mallory", None);
    let ports = free_ports(3).unwrap();
    let path = |f: &str| d.join(f).to_str().unwrap().to_string();
    let args = vec![
        "--tls-cert".to_string(),
        path("node.pem"),
        "--tls-key".into(),
        path("node.key"),
        "--tls-client-ca".into(),
        path("node-ca.pem"),
    ];
    let mut cluster = LocalCluster::start(Path::new(EXE), d, &ports, &args).unwrap();
    let endpoints = cluster.endpoints();
    let start = Instant::now();
    for e in &endpoints {
        loop {
            let (code, _, err) = engram_as(e, d, "node", None, &["cluster", "status"]);
            if code == 0 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{e} does not answer: {err}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    // An enforced cluster with root as its administrator (root signs; its certificate is the
    // nodes' own, which names no agent).
    let (code, _, err) = engram(&["agent", "keygen", "root", "--out", &path("root.key")]);
    assert_eq!(code, 0, "{err}");
    let mut init = vec!["cluster".to_string(), "init".into()];
    for (id, addr) in cluster.members() {
        init.push("--member".into());
        init.push(format!("{id}={addr}"));
    }
    init.extend([
        "--security".into(),
        "enforced".into(),
        "--admin-key".into(),
        path("root.key"),
    ]);
    let init: Vec<&str> = init.iter().map(String::as_str).collect();
    let (code, _, err) = engram_as(&endpoints[0], d, "node", None, &init);
    assert_eq!(code, 0, "{err}");
    let root = |args: &[&str]| {
        let (code, out, err) = engram_as(&endpoints[1], d, "node", Some("root.key"), args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    for name in ["alice", "bob"] {
        root(&[
            "agent",
            "create",
            name,
            "--out",
            &path(&format!("{name}.agent.key")),
        ]);
    }
    root(&["grant", "alice", "--action", "read,write", "--ns", "team/a"]);
    root(&["grant", "bob", "--action", "read", "--ns", "team"]);
    let head = || {
        let out = root(&["audit", "head"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["index"]
            .as_u64()
            .unwrap()
    };

    // Alice's certificate alone (no agent key) authenticates her through every node: the
    // followers vouch for her to the leader.
    for e in &endpoints {
        let (code, out, err) = engram_as(e, d, "alice", None, &["whoami"]);
        assert_eq!(code, 0, "{err}");
        let who: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(who["principal"], "alice", "through {e}: {out}");
        assert_eq!(who["security"], "enforced");
    }
    let tx = |ns: &str, agent: &str| {
        let file = d.join(format!("tx-{ns}-{agent}.json").replace('/', "_"));
        std::fs::write(
            &file,
            format!(r#"{{"namespace":"{ns}","agent":"{agent}","ops":[{{"entity":"t","attribute":":t/n","value":{{"i64":1}}}}]}}"#),
        )
        .unwrap();
        file.to_str().unwrap().to_string()
    };
    // A write that must be refused: its stderr.
    let refused = |endpoint: &str, cert: &str, ns: &str, agent: &str| {
        let (code, _, err) = engram_as(endpoint, d, cert, None, &["transact", &tx(ns, agent)]);
        assert_ne!(code, 0, "{cert} writing {ns} as {agent} must be refused");
        err
    };
    let mut written = Vec::new();
    for e in &endpoints {
        let (code, out, err) = engram_as(e, d, "alice", None, &["transact", &tx("team/a", "alice")]);
        assert_eq!(code, 0, "alice writes team/a through {e}: {err}");
        let receipt: serde_json::Value = serde_json::from_str(&out).unwrap();
        written.push(receipt["tx"].as_u64().unwrap());
    }
    assert!(
        written.windows(2).all(|w| w[0] < w[1]),
        "three new transactions: {written:?}"
    );

    // Bob, named by the URI of a certificate whose subject is a host, may read but not write.
    let (code, out, err) = engram_as(&endpoints[2], d, "bob-host", None, &["whoami"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"bob\""), "{out}");
    let before = head();
    let err = refused(&endpoints[2], "bob-host", "team/a", "bob");
    assert!(
        err.contains("PERMISSION_DENIED") || err.contains("permission"),
        "{err}"
    );
    assert!(
        err.contains("bob") && err.contains("write") && err.contains("team/a"),
        "{err}"
    );
    // Alice outside her grant, and alice writing as another agent.
    let err = refused(&endpoints[0], "alice", "team/b", "alice");
    assert!(err.contains("alice") && err.contains("team/b"), "{err}");
    let err = refused(&endpoints[0], "alice", "team/a", "bob");
    assert!(
        err.contains("INVALID_ARGUMENT") || err.contains("invalid"),
        "{err}"
    );

    // A certificate naming no registered agent is not a principal.
    let err = refused(&endpoints[1], "mallory", "team/a", "mallory");
    assert!(err.contains("mallory, which is not a registered agent"), "{err}");

    // Headers only the transport and the nodes may set, sent by mallory herself.
    // Followers relay the first call (vouching for mallory, the name the transport gave); the
    // second claims to be forwarded already, with a marker no node signed, and every node
    // refuses it before it looks at the vouch.
    for e in &endpoints {
        let mut raw = raw_memory(d, e, "mallory").await;
        let read = engram_client::pb::GetRequest {
            namespace: "team/a".into(),
            entity: 1,
            ..Default::default()
        };
        // Claiming a certificate name: dropped by the interceptor, mallory's own name stands.
        let mut req = tonic::Request::new(read.clone());
        req.metadata_mut()
            .insert("x-engram-cert-principal", "alice".parse().unwrap());
        let status = raw.get(req).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
        assert!(status.message().contains("mallory"), "{}", status.message());
        // A vouch from "node 1" signed by a key no chain trusts.
        let fake = engram_audit::NodeKey::from_seed([7; 32]);
        #[allow(clippy::disallowed_methods)] // the forger's clock
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let message = engram_server::vouch_message(1, now_ms, "alice");
        let vouch = format!(
            "1.{now_ms}.{}.{}",
            hex::encode(fake.public().0),
            hex::encode(fake.sign(&message))
        );
        let mut req = tonic::Request::new(read.clone());
        req.metadata_mut()
            .insert("x-engram-forwarded", "1".parse().unwrap());
        req.metadata_mut()
            .insert("x-engram-vouch", vouch.parse().unwrap());
        req.metadata_mut()
            .insert("x-engram-vouched-principal", "alice".parse().unwrap());
        let status = raw.get(req).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("x-engram-forwarded"),
            "{}",
            status.message()
        );
    }
    assert_eq!(head(), before, "no refused call moved the chain");

    // Revoking alice revokes her certificate too.
    root(&["agent", "revoke", "alice"]);
    let err = refused(&endpoints[0], "alice", "team/a", "alice");
    assert!(err.contains("revoked"), "{err}");
    cluster.kill_all();
}
