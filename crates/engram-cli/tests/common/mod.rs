//! Helpers shared by the integration tests that drive a real cluster.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, TxOp, TxRequest, Value};

/// A transaction creating one memory entity in `ns` with `:memory/text` and `:memory/n = n`,
/// with an idempotency key unique to (`ns`, `n`), so retries across failovers apply it once.
#[allow(dead_code)] // each test binary compiles this module; not all of them write memories
pub fn memory_tx(ns: &str, n: i64) -> TxRequest {
    let op = |attribute: &str, value: Value| TxOp {
        op: Op::Assert,
        entity: EntityRef::Temp("m".into()),
        attribute: Attribute::new(attribute).unwrap(),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    };
    TxRequest {
        namespace: Namespace::new(ns).unwrap(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops: vec![
            op(":memory/text", Value::String(format!("{ns} {n}"))),
            op(":memory/n", Value::I64(n)),
        ],
        preconditions: vec![],
        idempotency_key: Some(format!("{ns}-{n}")),
        provenance: Provenance {
            agent: "integration-test".into(),
            confidence: 1.0,
            ..Default::default()
        },
    }
}

/// Runs `engram -e E1 -e E2 ... audit verify --each` with the binary at `exe`.
#[allow(dead_code)] // each test binary compiles this module; not all of them verify chains
pub fn verify_each(exe: &str, endpoints: &[String]) -> std::process::Output {
    let mut cmd = std::process::Command::new(exe);
    for e in endpoints {
        cmd.args(["-e", e]);
    }
    cmd.args(["audit", "verify", "--each"]).output().unwrap()
}

/// Copies a directory tree (a stopped node's store) so a test can alter the copy.
#[allow(dead_code)] // each test binary compiles this module; not all of them copy stores
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// What one run of the CLI gave.
#[allow(dead_code)] // each test binary compiles this module; not all of them run the CLI
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the binary at `exe` as `engram -e ENDPOINT ARGS...`, with `stdin` on its standard input.
#[allow(dead_code)] // each test binary compiles this module; not all of them run the CLI
pub fn run_cli(exe: &str, endpoint: &str, args: &[&str], stdin: Option<&str>) -> Out {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = std::process::Command::new(exe)
        .args(["-e", endpoint])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the `engram` binary under test with `args`, with no endpoints from the environment.
#[allow(dead_code)] // each test binary compiles this module; not all of them run the binary
pub fn run(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(args)
        .env_remove("ENGRAM_ENDPOINTS")
        .output()
        .expect("run engram")
}

/// Output bytes as text, for assertions and failure messages.
#[allow(dead_code)] // each test binary compiles this module; not all of them read output
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The JSON a command printed, or a panic showing what it printed instead.
#[allow(dead_code)] // each test binary compiles this module; not all of them read JSON
pub fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {} stderr {}", text(&out.stdout), text(&out.stderr)))
}

/// The whole HTTP/1.1 answer (status line, headers, body) of a node's metrics listener on
/// `port` to a GET of `path`.
#[allow(dead_code)] // each test binary compiles this module; not all of them read metrics
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The path of `tests/fixtures/NAME`.
#[allow(dead_code)] // each test binary compiles this module; few read fixtures
pub fn fixture(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}
