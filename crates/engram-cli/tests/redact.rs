//! Forgetting through the CLI against real clusters (`engram redact`): the values go from every
//! replica's reads and searches while every chain, export and proof keeps verifying, the
//! redaction is itself in the chain with its reason, and bad input is refused with nothing
//! changed. In enforced mode a redaction needs the `redact` grant, and a transaction an agent
//! signed still verifies (its signature over the request's hash) once its request is gone; the
//! client signs a write's committed form, so that hash covers each value only through a salted
//! commitment.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use serde_json::{Value as Json, json};

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "crm/eu";
const SECRET: &str = "ada.lovelace@secret.example";

/// The CLI against one node, as the agent whose key file is `key` (none: unsigned).
struct Cli {
    endpoint: String,
}

impl Cli {
    fn run(&self, key: Option<&Path>, args: &[&str], stdin: Option<&str>) -> common::Out {
        match key {
            None => common::run_cli(EXE, &self.endpoint, args, stdin),
            Some(key) => {
                let key = key.to_str().unwrap();
                common::run_cli(
                    EXE,
                    &self.endpoint,
                    &[&["--agent-key", key], args].concat(),
                    stdin,
                )
            }
        }
    }

    fn ok(&self, key: Option<&Path>, args: &[&str], stdin: Option<&str>) -> Json {
        let out = self.run(key, &[&["--json"], args].concat(), stdin);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.stdout))
    }

    fn fails(&self, key: Option<&Path>, args: &[&str]) -> String {
        let out = self.run(key, args, None);
        assert_ne!(out.code, 0, "{args:?} should fail: {}", out.stdout);
        out.stderr
    }

    fn head(&self) -> u64 {
        self.ok(None, &["audit", "head"], None)["index"].as_u64().unwrap()
    }
}

fn person(agent: &str) -> String {
    json!({
        "namespace": NS, "agent": agent,
        "ops": [
            {"entity": "p", "attribute": ":person/email", "value": {"string": SECRET}},
            {"entity": "p", "attribute": ":person/name", "value": {"string": "Ada"}},
        ]
    })
    .to_string()
}

/// Exports the chain through `cli` and verifies the export offline; returns the report.
fn export_and_verify(cli: &Cli, dir: &Path) -> Json {
    let export = dir.join("chain.export");
    let out = cli.run(
        None,
        &["audit", "export", "--out", export.to_str().unwrap()],
        None,
    );
    assert_eq!(out.code, 0, "export: {}", out.stderr);
    let bytes = std::fs::read(&export).unwrap();
    assert!(
        !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "the export holds no redacted value"
    );
    let out = Command::new(EXE)
        .args(["--json", "audit", "verify", export.to_str().unwrap()])
        .output()
        .unwrap();
    let report: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report}");
    report
}

/// The files under `dir` (recursively) whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                found.push(path);
            }
        }
    }
    found
}

/// Redacts `entity`'s `:person/email` through `cli`, with `reason`; the JSON answer.
fn redact_email(cli: &Cli, entity: &str, reason: &str) -> Json {
    cli.ok(
        None,
        &[
            "redact",
            "--ns",
            NS,
            "--entity",
            entity,
            "--attribute",
            ":person/email",
            "--reason",
            reason,
        ],
        None,
    )
}

/// A started and initialised 3-node cluster under `dir`, and the CLI against node `answering`.
async fn three_nodes(dir: &Path, answering: u64) -> (LocalCluster, Cli) {
    three_nodes_with(dir, answering, &[]).await
}

/// [`three_nodes`] with node 2 answering and the leader running retention and sessions every
/// 300 ms.
async fn three_nodes_running_retention(dir: &Path) -> (LocalCluster, Cli) {
    let extra = ["--retention-check-ms".to_string(), "300".to_string()];
    three_nodes_with(dir, 2, &extra).await
}

async fn three_nodes_with(dir: &Path, answering: u64, extra: &[String]) -> (LocalCluster, Cli) {
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir, &ports, extra).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let cli = Cli {
        endpoint: cluster.node(answering).unwrap().endpoint(),
    };
    (cluster, cli)
}

fn verify_each(cluster: &LocalCluster) {
    let out = common::verify_each(EXE, &cluster.endpoints());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_through_the_cli_keeps_every_chain_and_export_verifying() {
    let dir = tempfile::tempdir().unwrap();
    // Node 2 answers: a follower most of the time, so the redaction is forwarded.
    let (cluster, cli) = three_nodes(dir.path(), 2).await;
    let written = cli.ok(None, &["transact"], Some(&person("crm-agent")));
    let entity = written["temp_ids"]["p"].as_u64().unwrap().to_string();
    let e = entity.as_str();
    let hits = cli.ok(None, &["search", "--ns", NS, "lovelace"], None);
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1, "{hits}");

    // Bad input first: each refused, nothing written.
    let head = cli.head();
    let err = cli.fails(None, &["redact", "--ns", NS, "--entity", e, "--reason", " "]);
    assert!(err.contains("reason"), "{err}");
    let err = cli.fails(
        None,
        &["redact", "--ns", NS, "--entity", "999999", "--reason", "x"],
    );
    assert!(
        err.contains("NotFound") || err.contains("not found") || err.contains("999999"),
        "{err}"
    );
    let err = cli.fails(
        None,
        &[
            "redact",
            "--ns",
            NS,
            "--entity",
            e,
            "--attribute",
            ":person/age",
            "--reason",
            "x",
        ],
    );
    assert!(err.contains("nothing to redact"), "{err}");
    let err = cli.fails(
        None,
        &[
            "redact",
            "--ns",
            "engram.system",
            "--entity",
            "1",
            "--reason",
            "x",
        ],
    );
    assert!(err.contains("engram.system"), "{err}");
    // A dry run lists what would go and changes nothing either.
    let dry = cli.ok(
        None,
        &[
            "redact",
            "--ns",
            NS,
            "--entity",
            e,
            "--attribute",
            ":person/email",
            "--reason",
            "erasure 7",
            "--dry-run",
        ],
        None,
    );
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["datoms"].as_array().unwrap().len(), 1, "{dry}");
    // Written by a leader of this build: salted, so its kept commitment cannot be guessed.
    assert_eq!(dry["datoms"][0]["guessable"], false, "{dry}");
    assert_eq!(cli.head(), head, "refusals and a dry run write nothing");

    // The redaction: one datom, recorded in the chain with its reason.
    let mut done = redact_email(&cli, e, "erasure 7");
    let by_tx = done["tx"].as_u64().unwrap();
    assert_eq!(done["part_txs"], json!([by_tx]), "one datom, one part");
    for d in done["datoms"].as_array_mut().unwrap() {
        assert_eq!(d["redacted_by_tx"], by_tx, "{d}");
        d["redacted_by_tx"] = json!(0);
    }
    assert_eq!(
        done["datoms"], dry["datoms"],
        "the dry run listed exactly what went"
    );
    assert_eq!(cli.head(), head + 1);
    let changed = cli.ok(
        None,
        &[
            "diff",
            "--ns",
            "engram.system",
            "--from-tx",
            &(by_tx - 1).to_string(),
            "--to-tx",
            &by_tx.to_string(),
        ],
        None,
    );
    let text = changed.to_string();
    assert!(
        text.contains("erasure 7") && text.contains(":engram.redaction/datoms"),
        "{text}"
    );

    // Every node answers without the value, with the marker, the name untouched.
    for node in 1..=3 {
        let on = Cli {
            endpoint: cluster.node(node).unwrap().endpoint(),
        };
        let got = on.ok(None, &["get", "--ns", NS, "--entity", e, "--stale"], None);
        let datoms = got["datoms"].as_array().unwrap();
        let email = datoms.iter().find(|d| d["attribute"] == ":person/email").unwrap();
        assert_eq!(email["value"], Json::Null, "node {node}: {got}");
        assert_eq!(email["redacted_by_tx"], by_tx, "node {node}: {got}");
        let name = datoms.iter().find(|d| d["attribute"] == ":person/name").unwrap();
        assert_eq!(name["value"]["string"], "Ada");
        assert!(!got.to_string().contains(SECRET));
    }
    let history = cli.ok(None, &["history", "--ns", NS, "--entity", e], None);
    assert!(!history.to_string().contains(SECRET), "{history}");
    let hits = cli.ok(None, &["search", "--ns", NS, "lovelace"], None);
    assert!(
        hits["hits"].as_array().unwrap().is_empty(),
        "a search does not find a forgotten value: {hits}"
    );
    let table = cli.run(None, &["get", "--ns", NS, "--entity", e], None);
    assert!(table.stdout.contains("forgotten"), "{}", table.stdout);

    // Twice is refused; the chains, the export and a proven read all verify.
    let err = cli.fails(
        None,
        &[
            "redact",
            "--ns",
            NS,
            "--entity",
            e,
            "--attribute",
            ":person/email",
            "--reason",
            "again",
        ],
    );
    assert!(err.contains("already redacted"), "{err}");
    verify_each(&cluster);
    let report = export_and_verify(&cli, dir.path());
    let redacted = report["redacted"].as_array().unwrap();
    assert_eq!(redacted.len(), 1, "{report}");
    assert_eq!(redacted[0]["by_entry"], done["audit_index"]);
    assert_eq!(redacted[0]["guessable"], false, "a salted datom: {report}");
    let proven = cli.run(None, &["get", "--ns", NS, "--entity", e, "--verify"], None);
    assert_eq!(proven.code, 0, "{} {}", proven.stdout, proven.stderr);
}

/// A redaction larger than a part is applied as parts of at most 100 datoms, each its own
/// transaction and audit entry: the answer lists every datom, in key order, with the part that
/// took it; every node reads them all without their values; every chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redaction_larger_than_a_part_is_applied_in_parts_and_every_chain_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, cli) = three_nodes(dir.path(), 2).await;
    let ops: Vec<Json> = (0..250)
        .map(|i| {
            json!({
                "entity": "notes",
                "attribute": format!(":note/line-{i:03}"),
                "value": {"string": format!("{SECRET} line {i}")},
            })
        })
        .collect();
    let write = json!({"namespace": NS, "agent": "crm-agent", "ops": ops}).to_string();
    let written = cli.ok(None, &["transact"], Some(&write));
    let entity = written["temp_ids"]["notes"].as_u64().unwrap().to_string();
    // The chain's head after the write, from its receipt (nothing else writes meanwhile): the
    // answering node is a follower, whose own head may not have reached it yet.
    let head = written["audit_index"].as_u64().unwrap();

    let args = ["redact", "--ns", NS, "--entity", &entity, "--reason", "erasure 8"];
    let done = cli.ok(None, &args, None);
    let parts: Vec<u64> = done["part_txs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    assert_eq!(parts.len(), 3, "{done}");
    assert!(parts.windows(2).all(|w| w[0] < w[1]), "{parts:?}");
    assert_eq!(done["tx"], parts[2], "the answer's tx is the last part's");
    assert_eq!(
        done["audit_index"].as_u64(),
        Some(head + 3),
        "one audit entry per part"
    );
    let datoms = done["datoms"].as_array().unwrap();
    assert_eq!(datoms.len(), 250);
    for (i, d) in datoms.iter().enumerate() {
        assert_eq!(d["attribute"], format!(":note/line-{i:03}"), "key order");
        assert_eq!(d["redacted_by_tx"], parts[i / 100], "{d}");
    }
    for node in 1..=3 {
        let on = Cli {
            endpoint: cluster.node(node).unwrap().endpoint(),
        };
        let got = on.ok(None, &["get", "--ns", NS, "--entity", &entity, "--stale"], None);
        let text = got.to_string();
        assert!(!text.contains(SECRET), "node {node}: {text}");
        assert_eq!(text.matches("redacted_by_tx").count(), 250, "node {node}: {text}");
    }
    verify_each(&cluster);
    // Nothing is left: asking again is refused, and writes nothing.
    let head = cli.head();
    let err = cli.fails(None, &args);
    assert!(err.contains("already redacted"), "{err}");
    assert_eq!(cli.head(), head);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redacted_value_is_purged_from_every_file_of_every_node() {
    purged_from_every_file(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_during_a_redaction_purges_it_after_catching_up_by_snapshot() {
    purged_from_every_file(Some(3)).await;
}

/// `engram redact status TX --wait` against `endpoints`, until each has purged.
fn wait_purged(endpoints: &[String], tx: u64) -> Json {
    let tx = tx.to_string();
    let out = common::run_cli(
        EXE,
        &endpoints.join(","),
        &[
            "--json",
            "redact",
            "status",
            &tx,
            "--wait",
            "--timeout-secs",
            "120",
        ],
        None,
    );
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    let report: Json = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["purged"], true, "{report}");
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), endpoints.len(), "{report}");
    assert!(nodes.iter().all(|n| n["stage"] == "purged"), "{report}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_saves_off_each_node_rebuilds_its_search_index_once_a_redaction_is_purged() {
    let dir = tempfile::tempdir().unwrap();
    let off = ["--recall-save-ms", "0"].map(String::from);
    let (cluster, cli) = three_nodes_with(dir.path(), 1, &off).await;
    let written = cli.ok(None, &["transact"], Some(&person("crm-agent")));
    let e = written["temp_ids"]["p"].as_u64().unwrap().to_string();
    // Every node's index has taken the write in (a search feeds it first).
    for endpoint in cluster.endpoints() {
        let found = common::run_cli(
            EXE,
            &endpoint,
            &["--json", "search", "--ns", NS, "--stale", "Ada"],
            None,
        );
        assert_eq!(found.code, 0, "{}", found.stderr);
    }
    let done = redact_email(&cli, &e, "gdpr");
    let tx = done["tx"].as_u64().unwrap();
    wait_purged(&cluster.endpoints(), tx);
    // Each node rebuilt its index from its store after the purge, with no save to replace.
    for endpoint in cluster.endpoints() {
        let mut rebuilt = Json::Null;
        for _ in 0..200 {
            let out = common::run_cli(
                EXE,
                &endpoint,
                &["--json", "jobs", "--kind", "search-rebuild"],
                None,
            );
            assert_eq!(out.code, 0, "{}", out.stderr);
            let answer: Json = serde_json::from_str(&out.stdout).unwrap();
            let jobs = answer["nodes"][0]["jobs"].as_array().unwrap().clone();
            if let Some(job) = jobs.into_iter().find(|j| {
                j["subject"].as_str().unwrap().starts_with("after the redaction") && j["outcome"] == "done"
            }) {
                rebuilt = job;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            rebuilt.is_object(),
            "{endpoint} never rebuilt its index after the purge"
        );
    }
    // No node saved its index.
    for n in 1..=3 {
        assert!(!cluster.node(n).unwrap().data_dir.join("recall.index").exists());
    }
    // The redacted value is found by no search, on any node; the name that stayed still is.
    for endpoint in cluster.endpoints() {
        let hits = |words: &str| {
            let out = common::run_cli(
                EXE,
                &endpoint,
                &["--json", "search", "--ns", NS, "--stale", words],
                None,
            );
            assert_eq!(out.code, 0, "{}", out.stderr);
            let doc: Json = serde_json::from_str(&out.stdout).unwrap();
            doc["hits"].as_array().unwrap().clone()
        };
        assert!(hits("lovelace secret").is_empty(), "{endpoint}");
        assert_eq!(hits("Ada").len(), 1, "{endpoint}");
    }
}

/// Writes a unique marker, redacts it (with node `down` killed first, if any, and started
/// again once the others purged), waits for `engram redact status` to say every node purged
/// it, and reads every file of every node's data directory: the marker's bytes are nowhere.
async fn purged_from_every_file(down: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    // Each node saves its recall index often: the save holds the value's words until the
    // redaction.
    let saves = ["--recall-save-ms", "100"].map(String::from);
    let (mut cluster, cli) = three_nodes_with(dir.path(), 1, &saves).await;
    // A marker no other byte sequence of the store can hold by chance, written once: LZ4 keeps
    // a string seen once in a block as it is, so a compressed table holding it still shows it.
    // (The temporary directory's name is random.)
    let marker = format!(
        "purge-marker-{:x}-{}",
        std::process::id(),
        dir.path().file_name().unwrap().to_string_lossy()
    );
    let written = cli.ok(
        None,
        &["transact"],
        Some(
            &json!({
                "namespace": NS, "agent": "crm-agent",
                "ops": [
                    {"entity": "p", "attribute": ":person/email", "value": {"string": marker}},
                    {"entity": "p", "attribute": ":person/name", "value": {"string": "Grace"}},
                ]
            })
            .to_string(),
        ),
    );
    let e = written["temp_ids"]["p"].as_u64().unwrap().to_string();
    // The value on a branch too: the redaction reaches it there, and the purge with it.
    cli.ok(
        None,
        &["branch", "create", "--ns", NS, "draft", "--agent", "crm-agent"],
        None,
    );
    let on_branch = json!({
        "namespace": NS, "branch": "draft", "agent": "crm-agent",
        "ops": [{"entity": written["temp_ids"]["p"], "attribute": ":person/email",
                 "value": {"string": format!("{marker} on a branch")}}]
    });
    cli.ok(None, &["transact"], Some(&on_branch.to_string()));
    // More writes after it, so the log holds entries past the redaction's neighbours.
    let other = |i: usize| {
        json!({
            "namespace": NS, "agent": format!("agent-{i}"),
            "ops": [{"entity": "q", "attribute": ":person/name", "value": {"string": format!("n{i}")}}]
        })
        .to_string()
    };
    for i in 0..20 {
        cli.ok(None, &["transact"], Some(&other(i)));
    }
    // The scan sees the value where it is: every node's write-ahead log holds it now, and
    // so does every node's saved recall index once it is saved.
    for node in cluster.nodes() {
        assert!(
            !files_holding(&node.data_dir, marker.as_bytes()).is_empty(),
            "node {}: the scan does not find the value before the redaction",
            node.id
        );
        let save = node.data_dir.join("recall.index");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !files_holding(&node.data_dir, marker.as_bytes()).contains(&save) {
            assert!(
                std::time::Instant::now() < deadline,
                "node {}: no save of the recall index holds the value",
                node.id
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut log_skip = 0;
    if let Some(id) = down {
        cluster.kill(id).unwrap();
    }
    let done = redact_email(&cli, &e, "erasure request 19");
    let redaction = done["tx"].as_u64().unwrap();
    let mut branches: Vec<String> = done["datoms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["branch"].to_string())
        .collect();
    branches.sort();
    assert_eq!(
        branches,
        ["\"draft\"", "null"],
        "main's value and the branch's: {done}"
    );
    let up: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| Some(n.id) != down)
        .map(|n| n.endpoint())
        .collect();
    // Each node purges on its own, in the background; `engram redact status` says when.
    wait_purged(&up, redaction);
    if let Some(id) = down {
        // The stopped node's files still hold the value; its state is behind the others'
        // purged logs, so it catches up by a snapshot made after the redaction.
        assert!(!files_holding(&cluster.node(id).unwrap().data_dir, marker.as_bytes()).is_empty());
        let tx = redaction.to_string();
        let out = common::run_cli(
            EXE,
            &cluster.endpoints().join(","),
            &["--json", "redact", "status", &tx],
            None,
        );
        assert_ne!(
            out.code, 0,
            "a node that does not answer is an error: {}",
            out.stdout
        );
        let report: Json = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(report["purged"], false, "{report}");
        let log_before = std::fs::read(&cluster.node(id).unwrap().log_path).unwrap().len();
        cluster.restart(id).unwrap();
        cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
        log_skip = log_before;
    }
    let report = wait_purged(&cluster.endpoints(), redaction);
    if let Some(id) = down {
        let log = std::fs::read(&cluster.node(id).unwrap().log_path).unwrap();
        let since_restart = String::from_utf8_lossy(&log[log_skip.min(log.len())..]);
        assert!(
            since_restart.contains("installed a snapshot"),
            "node {id} caught up without a snapshot: {report}"
        );
    }
    for node in cluster.nodes() {
        let left = files_holding(&node.data_dir, marker.as_bytes());
        assert!(
            left.is_empty(),
            "node {}: the redacted value is still in {left:?}",
            node.id
        );
    }
    // Each node removed its save when the redaction applied (or, for the node that was down,
    // when its snapshot brought the redaction), not only when a new save replaced it.
    for node in cluster.nodes() {
        let log = String::from_utf8_lossy(&std::fs::read(&node.log_path).unwrap()).into_owned();
        assert!(
            log.contains("its save is removed (a redaction was applied")
                || log.contains("was applied after it was saved; removed"),
            "node {}: no removal of the recall index's save in its log",
            node.id
        );
    }
    // After its purge each node rebuilds its index from the store and saves it again: the new
    // save does not hold the value.
    for node in cluster.nodes() {
        let save = node.data_dir.join("recall.index");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !save.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "node {}: the index is not saved again after the purge",
                node.id
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let bytes = std::fs::read(&save).unwrap();
        assert!(
            !bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
            "node {}: the save made after the purge holds the redacted value",
            node.id
        );
    }
    // The other values stay, and so does everything that proves them.
    let got = cli.ok(None, &["get", "--ns", NS, "--entity", &e], None);
    let name = got["datoms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["attribute"] == ":person/name")
        .unwrap()
        .clone();
    assert_eq!(name["value"]["string"], "Grace");
    let on_draft = cli.ok(
        None,
        &["get", "--ns", NS, "--entity", &e, "--branch", "draft"],
        None,
    );
    let email = on_draft["datoms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["attribute"] == ":person/email")
        .unwrap()
        .clone();
    assert_eq!(email["redacted_by_tx"], redaction, "{on_draft}");
    verify_each(&cluster);
    // A write after the purge is served as usual.
    cli.ok(None, &["transact"], Some(&other(99)));
    cluster.check_running().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_enforced_mode_a_redaction_needs_its_grant_and_signed_writes_still_verify() {
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let ports = free_ports(1).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let cli = Cli {
        endpoint: cluster.node(1).unwrap().endpoint(),
    };
    let root = keys.path().join("root.key");
    let alice = keys.path().join("alice.key");
    cli.ok(
        None,
        &["agent", "keygen", "root", "--out", root.to_str().unwrap()],
        None,
    );
    let member = format!("1={}", cluster.members()[0].1);
    cli.ok(
        None,
        &[
            "cluster",
            "init",
            "--member",
            &member,
            "--security",
            "enforced",
            "--admin-key",
            root.to_str().unwrap(),
        ],
        None,
    );
    cli.ok(
        Some(&root),
        &["agent", "create", "alice", "--out", alice.to_str().unwrap()],
        None,
    );
    cli.ok(
        Some(&root),
        &["grant", "alice", "--action", "read,write", "--ns", NS],
        None,
    );
    let written = cli.ok(Some(&alice), &["transact"], Some(&person("alice")));
    let e = written["temp_ids"]["p"].as_u64().unwrap().to_string();
    // The client signed the write's committed form (each value through its salted
    // commitment): the node keeps the request salted, and the export holds no other form of it.
    let early = dir.path().join("early.export");
    let out = cli.run(
        Some(&root),
        &["audit", "export", "--out", early.to_str().unwrap()],
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    // (The policy changes before it are kept as they were signed.)
    let writes: Vec<_> = kept_requests(&std::fs::read(&early).unwrap())
        .into_iter()
        .filter_map(|b| engram_types::TxRequest::decode_kept(&b).ok())
        .collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0].salts.len(), 2);
    assert_eq!(writes[0].salts.len(), writes[0].request.ops.len());
    assert!(
        writes[0]
            .request
            .ops
            .iter()
            .any(|op| op.value == engram_types::Value::String(SECRET.into()))
    );

    // Without the grant, refused by name; unsigned, refused too; nothing written.
    let head = cli.head_signed(&root);
    let err = cli.fails(
        Some(&alice),
        &["redact", "--ns", NS, "--entity", &e, "--reason", "gdpr"],
    );
    assert!(err.contains("may not redact"), "{err}");
    let err = cli.fails(None, &["redact", "--ns", NS, "--entity", &e, "--reason", "gdpr"]);
    assert!(
        err.to_lowercase().contains("unauthenticated") || err.contains("sign"),
        "{err}"
    );
    assert_eq!(cli.head_signed(&root), head);

    // With it, the whole entity goes; the signed write's entry still verifies offline.
    cli.ok(
        Some(&root),
        &["grant", "alice", "--action", "redact", "--ns", NS],
        None,
    );
    let done = cli.ok(
        Some(&alice),
        &["redact", "--ns", NS, "--entity", &e, "--reason", "gdpr"],
        None,
    );
    assert_eq!(done["datoms"].as_array().unwrap().len(), 2, "{done}");
    let got = cli.ok(Some(&alice), &["get", "--ns", NS, "--entity", &e], None);
    assert!(
        !got.to_string().contains(SECRET) && !got.to_string().contains("\"Ada\""),
        "{got}"
    );
    // A signed redaction larger than a part: its signature (and nonce) is checked and recorded
    // by the first part; the later parts go as the agent it authenticated, grant checked.
    let ops: Vec<Json> = (0..150)
        .map(|i| json!({"entity": "n", "attribute": format!(":note/l{i:03}"), "value": {"string": format!("{SECRET} {i}")}}))
        .collect();
    let notes = json!({"namespace": NS, "agent": "alice", "ops": ops}).to_string();
    let written = cli.ok(Some(&alice), &["transact"], Some(&notes));
    let n = written["temp_ids"]["n"].as_u64().unwrap().to_string();
    let done = cli.ok(
        Some(&alice),
        &["redact", "--ns", NS, "--entity", &n, "--reason", "gdpr, notes"],
        None,
    );
    assert_eq!(done["part_txs"].as_array().unwrap().len(), 2, "{done}");
    assert_eq!(done["datoms"].as_array().unwrap().len(), 150);
    let export = dir.path().join("chain.export");
    let out = cli.run(
        Some(&root),
        &["audit", "export", "--out", export.to_str().unwrap()],
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let bytes = std::fs::read(&export).unwrap();
    assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()));
    let out = Command::new(EXE)
        .args(["--json", "audit", "verify", export.to_str().unwrap()])
        .output()
        .unwrap();
    let report: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["redacted"].as_array().unwrap().len(), 152, "{report}");
    assert!(
        report["signed_by_agent"]["alice"].as_u64().unwrap() >= 2,
        "{report}"
    );
}

/// The signed requests an export keeps, in chain order.
fn kept_requests(export: &[u8]) -> Vec<Vec<u8>> {
    use engram_verify::format::{ExportReader, Next, Record};
    let mut reader = ExportReader::open(export).unwrap();
    let mut kept = Vec::new();
    while let Ok(Next::Record { record, .. }) = reader.next_record() {
        if let Record::Request { bytes, .. } = record {
            kept.push(bytes);
        }
    }
    kept
}

impl Cli {
    fn head_signed(&self, key: &Path) -> u64 {
        self.ok(Some(key), &["audit", "head"], None)["index"]
            .as_u64()
            .unwrap()
    }
}

/// The transaction that redacted the one datom of a `get --json` answer, if it is redacted.
fn redacted_by(got: &Json) -> Option<u64> {
    got["datoms"][0]["redacted_by_tx"].as_u64()
}

/// Writes `:person/email` `email` for a new entity as `agent`; the entity's id.
fn write_email(cli: &Cli, ns: &str, agent: &str, email: &str) -> String {
    let write = json!({
        "namespace": ns, "agent": agent,
        "ops": [{"entity": "p", "attribute": ":person/email", "value": {"string": email}}],
    })
    .to_string();
    cli.ok(None, &["transact"], Some(&write))["temp_ids"]["p"]
        .as_u64()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redaction_by_predicate_and_a_retention_policy_forget_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    // Node 2: mostly a follower, so the redaction and the policy change are forwarded.
    let (cluster, cli) = three_nodes_running_retention(dir.path()).await;
    let crawled: Vec<String> = (0..3)
        .map(|i| write_email(&cli, NS, "crawler", &format!("{i}.{SECRET}")))
        .collect();
    let kept = write_email(&cli, NS, "crm-agent", "kept@example.org");
    // Another agent retracts one crawled value: the retraction holds the value too, and a
    // redaction takes a value out of its slot whole, so it goes with the crawler's datoms.
    let retract = json!({
        "namespace": NS, "agent": "crm-agent",
        "ops": [{"op": "retract", "entity": crawled[0].parse::<u64>().unwrap(), "attribute": ":person/email",
                 "value": {"string": format!("0.{SECRET}")}}],
    })
    .to_string();
    cli.ok(None, &["transact"], Some(&retract));
    let by_crawler = [
        "redact",
        "--ns",
        NS,
        "--written-by",
        "crawler",
        "--attribute",
        ":person/email",
        "--reason",
        "crawled without consent",
    ];

    // Bad input: refused, nothing written.
    let head = cli.head();
    let err = cli.fails(None, &["redact", "--ns", NS, "--reason", "x"]);
    assert!(err.contains("--all"), "no target: {err}");
    let err = cli.fails(
        None,
        &[
            "redact",
            "--ns",
            NS,
            "--entity",
            &kept,
            "--written-by",
            "x",
            "--reason",
            "x",
        ],
    );
    assert!(err.contains("cannot be used with"), "{err}");
    let err = cli.fails(
        None,
        &["redact", "--ns", NS, "--written-by", "nobody", "--reason", "x"],
    );
    assert!(err.contains("matches the predicate"), "nothing matches: {err}");
    let err = cli.fails(
        None,
        &["redact", "--ns", NS, "--value", "{not json", "--reason", "x"],
    );
    assert!(err.contains("--value"), "{err}");
    assert_eq!(cli.head(), head);

    let preview = cli.ok(None, &[&by_crawler[..], &["--dry-run"]].concat(), None);
    assert_eq!(preview["dry_run"], true);
    assert_eq!(
        preview["datoms_redacted"], 4,
        "the crawler's 3 and the retraction: {preview}"
    );
    assert_eq!(cli.head(), head, "a dry run changes nothing");
    let done = cli.ok(None, &by_crawler, None);
    assert_eq!(done["datoms_redacted"], 4, "{done}");
    assert_eq!(done["datoms"].as_array().unwrap().len(), 4);
    for node in 1..=3 {
        let on = Cli {
            endpoint: cluster.node(node).unwrap().endpoint(),
        };
        for e in &crawled[1..] {
            let got = on.ok(None, &["get", "--ns", NS, "--entity", e, "--stale"], None);
            assert!(redacted_by(&got).is_some(), "node {node}: {got}");
            assert!(!got.to_string().contains(SECRET), "node {node}: {got}");
        }
        // The retracted one: no current value, and its history holds the value nowhere.
        let history = on.ok(
            None,
            &["history", "--ns", NS, "--entity", &crawled[0], "--stale"],
            None,
        );
        let ops: Vec<(&str, bool)> = history["datoms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["op"].as_str().unwrap_or(""),
                    d["redacted_by_tx"].as_u64().is_some(),
                )
            })
            .collect();
        assert_eq!(ops.len(), 2, "node {node}: {history}");
        assert!(ops.iter().all(|(_, gone)| *gone), "node {node}: {history}");
        assert!(!history.to_string().contains(SECRET), "node {node}: {history}");
        let got = on
            .ok(None, &["get", "--ns", NS, "--entity", &kept, "--stale"], None)
            .to_string();
        assert!(
            got.contains("kept@example.org"),
            "node {node}: another agent's datom stays: {got}"
        );
    }

    // Retention: a namespace kept one second is emptied by the leader, and stays verifiable.
    let chat = "chat/scratch";
    let message = write_email(&cli, chat, "chat-agent", &format!("tmp.{SECRET}"));
    let set = cli.ok(None, &["retention", "set", "--ns", chat, "--keep", "1s"], None);
    assert_eq!(set["keep_ms"], 1_000, "{set}");
    let listed = cli.ok(None, &["retention", "list"], None);
    assert_eq!(listed["policies"][0]["namespace"], chat, "{listed}");
    let err = cli.fails(
        None,
        &["retention", "set", "--ns", "engram.system", "--keep", "1d"],
    );
    assert!(err.contains("system namespace"), "{err}");
    let err = cli.fails(None, &["retention", "set", "--ns", chat, "--keep", "5y"]);
    assert!(err.contains("unit"), "{err}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let got = cli.ok(None, &["get", "--ns", chat, "--entity", &message], None);
        if let Some(by) = redacted_by(&got) {
            assert!(!got.to_string().contains(SECRET), "{got}");
            assert!(by > set["tx"].as_u64().unwrap(), "taken after the policy: {got}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "retention never took {message}: {got}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let off = cli.ok(None, &["retention", "off", "--ns", chat], None);
    assert_eq!(off["keep_ms"], 0);
    let listed = cli.ok(None, &["retention", "list"], None);
    assert!(listed["policies"].as_array().unwrap().is_empty(), "{listed}");

    // A versions policy: a plan rewritten four times keeps its last two versions; the two
    // before go, on every node, and the current text stays readable.
    let plans = "plans/draft";
    let plan = write_email(&cli, plans, "planner", &format!("v1.{SECRET}"));
    let entity: u64 = plan.parse().unwrap();
    for v in 2..=4 {
        let rewrite = json!({
            "namespace": plans, "agent": "planner",
            "ops": [{"entity": entity, "attribute": ":person/email", "value": {"string": format!("v{v}.plan")}}],
        })
        .to_string();
        cli.ok(None, &["transact"], Some(&rewrite));
    }
    let err = cli.fails(None, &["retention", "set", "--ns", plans, "--keep-versions", "0"]);
    assert!(err.contains("--keep-versions"), "{err}");
    let err = cli.fails(
        None,
        &[
            "retention",
            "set",
            "--ns",
            plans,
            "--keep",
            "1d",
            "--keep-versions",
            "2",
        ],
    );
    assert!(err.contains("cannot be used with"), "{err}");
    let set = cli.ok(
        None,
        &[
            "retention",
            "set",
            "--ns",
            plans,
            "--attribute",
            ":person/email",
            "--keep-versions",
            "2",
        ],
        None,
    );
    assert_eq!(
        (set["keep_versions"].as_u64(), set["keep_ms"].as_u64()),
        (Some(2), Some(0)),
        "{set}"
    );
    let listed = cli.ok(None, &["retention", "list"], None);
    assert_eq!(listed["policies"][0]["keep_versions"], 2, "{listed}");
    let table = cli.run(None, &["retention", "list"], None);
    assert!(table.stdout.contains("2 versions"), "{}", table.stdout);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let history = cli.ok(None, &["history", "--ns", plans, "--entity", &plan], None);
        let gone = history["datoms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["redacted_by_tx"].as_u64().is_some())
            .count();
        if gone == 2 {
            let text = history.to_string();
            assert!(!text.contains(SECRET) && !text.contains("v2.plan"), "{history}");
            assert!(text.contains("v3.plan") && text.contains("v4.plan"), "{history}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the versions policy took {gone} of 2 versions: {history}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for node in 1..=3 {
        let on = Cli {
            endpoint: cluster.node(node).unwrap().endpoint(),
        };
        let got = on.ok(None, &["get", "--ns", plans, "--entity", &plan, "--stale"], None);
        assert!(got.to_string().contains("v4.plan"), "node {node}: {got}");
    }
    let off = cli.ok(
        None,
        &[
            "retention",
            "off",
            "--ns",
            plans,
            "--attribute",
            ":person/email",
            "--versions",
        ],
        None,
    );
    assert_eq!(off["keep_versions"], 0, "{off}");
    let err = cli.fails(
        None,
        &[
            "retention",
            "off",
            "--ns",
            plans,
            "--attribute",
            ":person/email",
            "--versions",
        ],
    );
    assert!(err.contains("no versions policy"), "{err}");
    verify_each(&cluster);
    let report = export_and_verify(&cli, dir.path());
    assert!(report.to_string().contains("redacted"), "{report}");
}

/// Waits until `entity`'s one datom in `ns` is redacted on every node; the redacting tx.
async fn wait_redacted_everywhere(cluster: &LocalCluster, ns: &str, entity: &str) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut by = Vec::new();
    for node in 1..=3 {
        let on = Cli {
            endpoint: cluster.node(node).unwrap().endpoint(),
        };
        loop {
            let got = on.ok(None, &["get", "--ns", ns, "--entity", entity, "--stale"], None);
            if let Some(tx) = redacted_by(&got) {
                assert!(!got.to_string().contains(SECRET), "node {node}: {got}");
                by.push(tx);
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "node {node} never forgot {ns} {entity}: {got}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert!(
        by.windows(2).all(|w| w[0] == w[1]),
        "one redaction on every node: {by:?}"
    );
    by[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_makes_a_namespace_volatile_until_it_lapses_or_ends() {
    let dir = tempfile::tempdir().unwrap();
    // Node 2: mostly a follower, so the session changes are forwarded.
    let (cluster, cli) = three_nodes_running_retention(dir.path()).await;
    let run = "scratch/run-1";
    let before = write_email(&cli, run, "planner", &format!("before.{SECRET}"));

    // Bad input: refused, nothing written.
    let head = cli.head();
    let err = cli.fails(None, &["session", "open", "--ns", "engram.system", "--ttl", "1m"]);
    assert!(err.contains("system namespace"), "{err}");
    let err = cli.fails(None, &["session", "open", "--ns", run, "--ttl", "5y"]);
    assert!(err.contains("unit"), "{err}");
    let err = cli.fails(None, &["session", "end", "--ns", run]);
    assert!(err.contains("no session open"), "{err}");
    let err = cli.fails(None, &["session", "renew", "--ns", run, "--ttl", "1m"]);
    assert!(err.contains("open a new one"), "{err}");
    assert_eq!(cli.head(), head);

    // Open for 3 s; a second open is refused; renewed; listed.
    let opened = cli.ok(None, &["session", "open", "--ns", run, "--ttl", "3s"], None);
    assert_eq!(opened["ttl_ms"], 3_000, "{opened}");
    let err = cli.fails(None, &["session", "open", "--ns", run, "--ttl", "3s"]);
    assert!(err.contains("renew it"), "{err}");
    let renewed = cli.ok(None, &["session", "renew", "--ns", run, "--ttl", "3s"], None);
    let listed = cli.ok(None, &["session", "list"], None);
    assert_eq!(listed["sessions"][0]["namespace"], run, "{listed}");
    assert_eq!(listed["sessions"][0]["since_tx"], opened["tx"], "{listed}");
    assert_eq!(listed["sessions"][0]["renewed_tx"], renewed["tx"], "{listed}");
    let during = write_email(&cli, run, "planner", &format!("during.{SECRET}"));

    // It lapses: what was written before and during it goes from every node.
    let by = wait_redacted_everywhere(&cluster, run, &during).await;
    assert!(by > renewed["tx"].as_u64().unwrap(), "forgotten after the lapse");
    wait_redacted_everywhere(&cluster, run, &before).await;
    let listed = cli.ok(None, &["session", "list"], None);
    assert!(listed["sessions"].as_array().unwrap().is_empty(), "{listed}");
    assert_eq!(listed["ended"][0]["namespace"], run, "{listed}");
    assert_eq!(listed["ended"][0]["lapsed"], true, "{listed}");
    let err = cli.fails(None, &["session", "renew", "--ns", run, "--ttl", "1m"]);
    assert!(
        err.contains("open a new one"),
        "a lapsed session is not renewed: {err}"
    );
    // What is written after the lapse is kept: the forgetting took only what came before.
    let after = write_email(&cli, run, "planner", "after@example.org");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = cli.ok(None, &["get", "--ns", run, "--entity", &after], None);
    assert!(got.to_string().contains("after@example.org"), "{got}");

    // Ended by its owner before its deadline: forgotten at once.
    let run2 = "scratch/run-2";
    cli.ok(None, &["session", "open", "--ns", run2, "--ttl", "1h"], None);
    let note = write_email(&cli, run2, "planner", &format!("note.{SECRET}"));
    let ended = cli.ok(None, &["session", "end", "--ns", run2], None);
    assert_eq!(ended["ttl_ms"], 0, "{ended}");
    wait_redacted_everywhere(&cluster, run2, &note).await;
    let listed = cli.ok(None, &["session", "list"], None);
    let ended_run2 = listed["ended"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["namespace"] == run2)
        .cloned()
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(ended_run2["lapsed"], false, "{listed}");
    assert_eq!(ended_run2["ended_tx"], ended["tx"], "{listed}");

    // The table names both; every chain still verifies.
    let table = cli.run(None, &["session", "list"], None);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(
        table.stdout.contains("lapsed") && table.stdout.contains("ended"),
        "{}",
        table.stdout
    );
    verify_each(&cluster);
}
