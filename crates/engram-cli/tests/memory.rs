//! Agent-memory semantics through the CLI and gRPC against a real 3-node cluster: the README's
//! worked example (schema preset, a preference, a contradiction, a verification, a read of
//! what held yesterday, by valid time, by transaction and by wall-clock instant), branches end
//! to end, and bad input — unknown attribute, type
//! mismatch, unsafe migration, merge conflict, invalid namespace, unknown branch — each with
//! its exact error and no change to the chain.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::Client;
use serde_json::{Value as Json, json};

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "demo/alice";
const DAY_NS: i64 = 86_400_000_000_000;

struct Cli {
    endpoint: String,
}

use common::Out;

impl Out {
    fn json(&self) -> Json {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

impl Cli {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Out {
        common::run_cli(EXE, &self.endpoint, args, stdin)
    }

    fn ok(&self, args: &[&str], stdin: Option<&str>) -> Json {
        let out = self.run(&[&["--json"], args].concat(), stdin);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        out.json()
    }

    /// Runs a command that must fail, and returns its error message.
    fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        assert_ne!(out.code, 0, "{args:?} should fail: {}", out.stdout);
        out.stderr
    }
}

fn preference(agent: &str, confidence: f64, status: &str, value: &str, valid_from_ns: i64) -> String {
    json!({
        "namespace": NS, "agent": agent, "confidence": confidence, "status": status,
        "ops": [
            {"entity": "pref", "attribute": ":memory/key", "value": {"string": "alice/editor-theme"}},
            {"entity": "pref", "attribute": ":memory/kind", "value": {"keyword": ":memory.kind/preference"}},
            {"entity": "pref", "attribute": ":preference/value", "value": {"string": value},
             "valid_from_ns": valid_from_ns}
        ]
    })
    .to_string()
}

fn values(doc: &Json, key: &str, attribute: &str) -> Vec<(String, String)> {
    doc[key]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["attribute"] == attribute)
        .map(|d| {
            (
                d["value"]["string"].as_str().unwrap_or_default().to_string(),
                d["provenance"]["agent"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pair(v: &str, agent: &str) -> (String, String) {
    (v.to_string(), agent.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_memory_through_the_cli_and_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let cli = Cli {
        endpoint: cluster.node(2).unwrap().endpoint(),
    };
    let head = || async { client.head().await.unwrap().index };

    // 1. The preset, twice: the second time is a no-op.
    let applied = cli.ok(&["schema", "apply", "--ns", NS, "--preset", "agent-memory"], None);
    assert!(applied["tx"].as_u64().unwrap() > 0);
    let again = cli.ok(&["schema", "apply", "--ns", NS, "--preset", "agent-memory"], None);
    assert_eq!(again["changed"], 0);
    let shown = cli.ok(&["schema", "show", "--ns", NS], None);
    assert_eq!(
        (shown["version"].as_u64(), shown["strict"].as_bool()),
        (Some(1), Some(true))
    );
    assert!(
        shown["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["ident"] == ":memory/key" && a["unique"] == "identity")
    );

    // 2. The worked example. The planner records a preference that has held for two days.
    let now_ns = client.head().await.unwrap().tx_time_ns;
    let first = cli.ok(
        &["transact"],
        Some(&preference(
            "planner",
            0.7,
            "candidate",
            "dark",
            now_ns - 2 * DAY_NS,
        )),
    );
    let entity = first["temp_ids"]["pref"].as_u64().unwrap().to_string();
    // A second agent contradicts it, addressing the memory by its key (upsert), from today.
    let second = cli.ok(
        &["transact"],
        Some(&preference("critic", 0.6, "candidate", "light", now_ns)),
    );
    assert_eq!(
        second["temp_ids"]["pref"].as_u64().unwrap().to_string(),
        entity,
        "upsert by :memory/key"
    );
    let latest = cli.ok(&["get", "--ns", NS, "--entity", &entity], None);
    assert_eq!(
        values(&latest, "datoms", ":preference/value"),
        vec![pair("light", "critic")]
    );
    assert_eq!(
        values(&latest, "conflicts", ":preference/value"),
        vec![pair("dark", "planner")]
    );
    // The planner verifies its claim.
    cli.ok(
        &["transact"],
        Some(&preference(
            "planner",
            0.95,
            "verified",
            "dark",
            now_ns - 2 * DAY_NS,
        )),
    );
    let best = cli.ok(
        &["get", "--ns", NS, "--entity", &entity, "--rule", "verified"],
        None,
    );
    assert_eq!(
        values(&best, "datoms", ":preference/value"),
        vec![pair("dark", "planner")]
    );
    assert_eq!(
        values(&best, "conflicts", ":preference/value"),
        vec![pair("light", "critic")]
    );
    let verified = cli.ok(&["get", "--ns", NS, "--entity", &entity, "--verified-only"], None);
    assert_eq!(
        values(&verified, "datoms", ":preference/value"),
        vec![pair("dark", "planner")]
    );
    assert!(verified["conflicts"].as_array().unwrap().is_empty());
    // A third agent asks what held yesterday: only the planner's claim was valid then.
    let yesterday = (now_ns - DAY_NS).to_string();
    let then = cli.ok(
        &[
            "get",
            "--ns",
            NS,
            "--entity",
            &entity,
            "--valid-at-ns",
            &yesterday,
        ],
        None,
    );
    assert_eq!(
        values(&then, "datoms", ":preference/value"),
        vec![pair("dark", "planner")]
    );
    assert!(then["conflicts"].as_array().unwrap().is_empty());
    // And what the memory said before the contradiction, on the transaction-time axis.
    let before = first["tx"].as_u64().unwrap().to_string();
    let as_of = cli.ok(
        &["get", "--ns", NS, "--entity", &entity, "--as-of-tx", &before],
        None,
    );
    assert_eq!(
        values(&as_of, "datoms", ":preference/value"),
        vec![pair("dark", "planner")]
    );
    // The same question by wall-clock instant (transaction time): at the first claim's
    // instant and just before the contradiction's, the planner's claim alone; from the
    // contradiction's instant on, the critic's.
    let first_at = first["tx_time_ns"].as_i64().unwrap();
    let second_at = second["tx_time_ns"].as_i64().unwrap();
    assert!(second_at > first_at, "{first} {second}");
    let get_as_of = ["get", "--ns", NS, "--entity", &entity, "--as-of-time-ns"];
    let at = |ns: i64| cli.ok(&[&get_as_of[..], &[&ns.to_string()]].concat(), None);
    for t in [first_at, second_at - 1] {
        let then = at(t);
        assert_eq!(
            values(&then, "datoms", ":preference/value"),
            vec![pair("dark", "planner")],
            "as of {t}"
        );
        assert_eq!(then["as_of_tx"], first["tx"], "as of {t}");
    }
    let then = at(second_at);
    assert_eq!(
        values(&then, "datoms", ":preference/value"),
        vec![pair("light", "critic")]
    );
    assert_eq!(then["as_of_tx"], second["tx"]);
    let found = cli.ok(
        &[
            "find",
            "--ns",
            NS,
            "--attribute",
            ":preference/value",
            "--as-of-time-ns",
            &(second_at - 1).to_string(),
        ],
        None,
    );
    assert_eq!(found["as_of_tx"], first["tx"]);
    assert_eq!(
        values(&found, "datoms", ":preference/value"),
        vec![pair("dark", "planner")]
    );
    // Before the first transaction, after the node's clock, or with --as-of-tx too: refused,
    // naming the argument.
    // 1 ns after the epoch: after the genesis entry (which carries no time of its own), before
    // the first transaction.
    let before = "1".to_string();
    let e = cli.fails(&[&get_as_of[..], &[&before]].concat(), None);
    assert!(
        e.contains("OUT_OF_RANGE")
            && e.contains("as_of_time_ns")
            && e.contains("before the first transaction"),
        "{e}"
    );
    let future = (second_at + 3_600 * 1_000_000_000).to_string();
    let e = cli.fails(&[&get_as_of[..], &[&future]].concat(), None);
    assert!(
        e.contains("OUT_OF_RANGE") && e.contains("after this node's clock"),
        "{e}"
    );
    let e = cli.fails(&[&get_as_of[..], &[&before, "--as-of-tx", "3"]].concat(), None);
    assert!(e.contains("--as-of-time-ns") && e.contains("--as-of-tx"), "{e}");
    let history_of = |bound: &[&str]| {
        let args = [
            "history",
            "--ns",
            NS,
            "--entity",
            &entity,
            "--attribute",
            ":preference/value",
        ];
        cli.ok(&[&args[..], bound].concat(), None)
    };
    let history = history_of(&[]);
    assert_eq!(
        history["datoms"].as_array().unwrap().len(),
        3,
        "every claim is kept"
    );
    // The history as it stood: up to the contradiction, by transaction and by instant.
    for bound in [
        [
            "--as-of-tx".to_string(),
            second["tx"].as_u64().unwrap().to_string(),
        ],
        ["--as-of-time-ns".to_string(), (second_at + 1).to_string()],
    ] {
        let then = history_of(&[&bound[0], &bound[1]]);
        assert_eq!(
            values(&then, "datoms", ":preference/value"),
            vec![pair("dark", "planner"), pair("light", "critic")],
            "{bound:?}"
        );
        assert_eq!(then["as_of_tx"], second["tx"], "{bound:?}");
    }

    // 3. Branches: speculate, diff, merge; a second branch conflicts and is abandoned.
    for name in ["try-solarized", "try-light"] {
        cli.ok(
            &["branch", "create", "--ns", NS, name, "--agent", "planner"],
            None,
        );
    }
    let on_branch = |branch: &str, value: &str| {
        json!({"namespace": NS, "branch": branch, "agent": "planner", "ops": [
            {"entity": {"lookup": [":memory/key", {"string": "alice/editor-theme"}]},
             "attribute": ":preference/value", "value": {"string": value}}]})
        .to_string()
    };
    cli.ok(&["transact"], Some(&on_branch("try-solarized", "solarized")));
    cli.ok(&["transact"], Some(&on_branch("try-light", "light")));
    let main_view = cli.ok(&["get", "--ns", NS, "--entity", &entity], None);
    assert_eq!(
        values(&main_view, "datoms", ":preference/value"),
        vec![pair("dark", "planner")]
    );
    let branch_view = cli.ok(
        &[
            "get",
            "--ns",
            NS,
            "--entity",
            &entity,
            "--branch",
            "try-solarized",
        ],
        None,
    );
    assert_eq!(
        values(&branch_view, "datoms", ":preference/value")[0].0,
        "solarized"
    );
    let diff = cli.ok(&["branch", "diff", "--ns", NS, "try-solarized"], None);
    assert_eq!(diff["asserted"].as_array().unwrap().len(), 1);
    assert!(diff["main_changed"].as_array().unwrap().is_empty());
    cli.ok(
        &[
            "branch",
            "merge",
            "--ns",
            NS,
            "try-solarized",
            "--agent",
            "planner",
        ],
        None,
    );
    let merged = cli.ok(&["get", "--ns", NS, "--entity", &entity], None);
    assert_eq!(values(&merged, "datoms", ":preference/value")[0].0, "solarized");

    // Bad input: each refused with its exact error, the chain unchanged.
    let before = head().await;
    let conflict = cli.fails(&["branch", "merge", "--ns", NS, "try-light"], None);
    assert!(
        conflict.contains(&format!(
            "merge of branch try-light conflicts with main at entity {entity} :preference/value"
        )) && conflict.contains("nothing was applied"),
        "{conflict}"
    );
    let unknown_attr = cli.fails(
        &["transact"],
        Some(
            &json!({"namespace": NS, "agent": "x", "ops": [
            {"entity": "n", "attribute": ":memory/colour", "value": {"string": "red"}}]})
            .to_string(),
        ),
    );
    assert!(
        unknown_attr.contains("unknown attribute :memory/colour")
            && unknown_attr.contains("INVALID_ARGUMENT"),
        "{unknown_attr}"
    );
    let mismatch = cli.fails(
        &["transact"],
        Some(
            &json!({"namespace": NS, "agent": "x", "ops": [
            {"entity": "n", "attribute": ":blocker/resolved", "value": {"string": "yes"}}]})
            .to_string(),
        ),
    );
    assert!(
        mismatch.contains("wrong value type for :blocker/resolved: expected bool, got string"),
        "{mismatch}"
    );
    let schema_file = dir.path().join("narrow.json");
    std::fs::write(
        &schema_file,
        r#"[{"ident": ":procedure/step", "type": "i64", "cardinality": "many"}]"#,
    )
    .unwrap();
    let unsafe_migration = cli.fails(
        &[
            "schema",
            "apply",
            "--ns",
            NS,
            "--file",
            schema_file.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        unsafe_migration.contains("unsafe migration of :procedure/step: its value type is string"),
        "{unsafe_migration}"
    );
    let bad_ns = cli.fails(&["get", "--ns", "../etc", "--entity", "1"], None);
    assert!(bad_ns.contains("--ns: invalid namespace \"../etc\""), "{bad_ns}");
    let no_branch = cli.fails(
        &["get", "--ns", NS, "--entity", &entity, "--branch", "nope"],
        None,
    );
    assert!(no_branch.contains("branch nope does not exist"), "{no_branch}");
    let no_branch_write = cli.fails(&["transact"], Some(&on_branch("nope", "x")));
    assert!(
        no_branch_write.contains("branch nope does not exist"),
        "{no_branch_write}"
    );
    assert_eq!(head().await, before, "refused requests left the chain as it was");

    // Abandon the conflicting branch: closed for writes, still readable, listed.
    cli.ok(&["branch", "abandon", "--ns", NS, "try-light"], None);
    let closed = cli.fails(&["transact"], Some(&on_branch("try-light", "again")));
    assert!(closed.contains("branch try-light is abandoned"), "{closed}");
    let list = cli.ok(&["branch", "list", "--ns", NS], None);
    let states: Vec<(String, String)> = list["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().into(),
                b["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![pair("try-light", "abandoned"), pair("try-solarized", "merged")]
    );

    // Raw gRPC: an invalid branch name and an invalid declaration are INVALID_ARGUMENT naming
    // the field; a watch on a branch that does not exist is NOT_FOUND.
    let endpoint = format!("http://{}", cli.endpoint);
    let mut raw = engram_client::pb::memory_client::MemoryClient::connect(endpoint)
        .await
        .unwrap();
    let status = raw
        .create_branch(engram_client::pb::CreateBranchRequest {
            namespace: NS.into(),
            name: "../main".into(),
            from_tx: None,
            provenance: Some(engram_client::pb::Provenance {
                agent: "x".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("name"), "{status:?}");
    let status = raw
        .watch(engram_client::pb::WatchRequest {
            namespace: NS.into(),
            branch: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert_eq!(head().await, before + 1, "only the abandon was recorded");
    cluster.kill_all();
}
