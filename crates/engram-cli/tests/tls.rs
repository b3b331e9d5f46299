//! Mutual TLS between clients and nodes and between nodes: a 3-node cluster started with
//! certificates forms itself and serves a client that presents one; a plaintext client, a
//! client without a certificate and a client trusting another CA are all refused; probes get
//! the health service in plaintext on its own port.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use engram_cli::local_cluster::{LocalCluster, free_ports};

const EXE: &str = env!("CARGO_BIN_EXE_engram");

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a certificate it signs (for 127.0.0.1, usable by servers and clients) in `dir`,
/// as `<name>-ca.pem` and `<name>.pem`/`<name>.key`.
fn pki(dir: &Path, name: &str) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca_key = format!("{name}-ca.key");
    let ca = format!("{name}-ca.pem");
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                &ca_key,
                "-out",
                &ca,
                "-days",
                "2",
                "-subj",
                "/CN=test-ca",
            ],
        ]
        .concat(),
    );
    let key = format!("{name}.key");
    let csr = format!("{name}.csr");
    openssl(
        dir,
        &[
            &["req"][..],
            &ec,
            &["-keyout", &key, "-out", &csr, "-subj", "/CN=engram"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    let pem = format!("{name}.pem");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
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
