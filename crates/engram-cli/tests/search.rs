//! `Memory.Search` against a real 3-node cluster, through the CLI: facts found by their words
//! through any node, a retracted fact gone now and found as of before its retraction, a
//! contradiction flagged, filters, every node's own index giving the same answer, and bad
//! queries refused by field with the chain unchanged.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::time::Duration;

use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::Client;
use serde_json::{Value as Json, json};

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "team/search";

/// Runs the CLI against `endpoint`; returns (exit code, stdout, stderr).
fn run(endpoint: &str, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let out = common::run_cli(EXE, endpoint, args, stdin);
    (out.code, out.stdout, out.stderr)
}

fn ok(endpoint: &str, args: &[&str], stdin: Option<&str>) -> Json {
    let (code, stdout, stderr) = run(endpoint, &[&["--json"], args].concat(), stdin);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Asserts `text` on `entity` (a new one when `entity` is a name) as `agent`; returns the
/// transaction's receipt.
fn note(endpoint: &str, agent: &str, entity: Json, attribute: &str, text: &str) -> Json {
    let tx = json!({
        "namespace": NS, "agent": agent,
        "ops": [{"entity": entity, "attribute": attribute, "value": {"string": text}}]
    });
    ok(endpoint, &["transact"], Some(&tx.to_string()))
}

/// (entity, value, agent) of each hit, in rank order.
fn hits(doc: &Json) -> Vec<(u64, String, String)> {
    doc["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let d = &h["datom"];
            (
                d["entity"].as_u64().unwrap(),
                d["value"]["string"].as_str().unwrap_or_default().to_string(),
                d["provenance"]["agent"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_facts_by_their_words_as_of_any_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let endpoints = cluster.endpoints();
    let e = |i: usize| endpoints[i].as_str();

    // 1. Notes written through different nodes.
    let a = note(
        e(0),
        "planner",
        json!("n"),
        ":note/text",
        "rotate the deploy key before friday",
    );
    let key_note = a["temp_ids"]["n"].as_u64().unwrap();
    let b = note(
        e(1),
        "ops",
        json!("n"),
        ":note/text",
        "deploy failed on the eu cluster; deploy again",
    );
    let failed_note = b["temp_ids"]["n"].as_u64().unwrap();
    note(e(2), "planner", json!("n"), ":note/text", "lunch menu for friday");
    let task = note(
        e(0),
        "planner",
        json!("t"),
        ":task/title",
        "migrate the search index",
    );
    let task_id = task["temp_ids"]["t"].as_u64().unwrap();

    // 2. Found by words, through a follower, best first; each hit names its signals.
    let found = ok(e(1), &["search", "--ns", NS, "deploy"], None);
    assert_eq!(
        hits(&found),
        [
            (
                failed_note,
                "deploy failed on the eu cluster; deploy again".into(),
                "ops".into()
            ),
            (
                key_note,
                "rotate the deploy key before friday".into(),
                "planner".into()
            ),
        ],
        "the note saying 'deploy' twice ranks first"
    );
    let first = &found["hits"][0];
    let signals: Vec<&str> = first["signals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["signal"].as_str().unwrap())
        .collect();
    assert_eq!(signals, ["text", "recency", "prior"]);
    assert_eq!(first["signals"][0]["rank"], 1);
    assert!(first["score"].as_f64().unwrap() > found["hits"][1]["score"].as_f64().unwrap());
    let before_retraction = found["as_of_tx"].as_u64().unwrap();

    // Filters: by agent, by attribute; several words.
    let by_agent = ok(
        e(2),
        &["search", "--ns", NS, "deploy", "friday", "--agent", "planner"],
        None,
    );
    let entities: Vec<u64> = hits(&by_agent).iter().map(|h| h.0).collect();
    assert_eq!(
        entities.len(),
        2,
        "the planner's key note and lunch note: {by_agent}"
    );
    assert!(!entities.contains(&failed_note));
    let by_attr = ok(
        e(0),
        &[
            "search",
            "--ns",
            NS,
            "search",
            "index",
            "--attribute",
            ":task/title",
        ],
        None,
    );
    assert_eq!(hits(&by_attr).iter().map(|h| h.0).collect::<Vec<_>>(), [task_id]);
    assert!(hits(&ok(e(0), &["search", "--ns", "team/other", "deploy"], None)).is_empty());

    // 3. A retracted fact is not found now, and is as of before its retraction.
    let retract = json!({
        "namespace": NS, "agent": "ops",
        "ops": [{"op": "retract", "entity": failed_note, "attribute": ":note/text",
                 "value": {"string": "deploy failed on the eu cluster; deploy again"}}]
    });
    ok(e(2), &["transact"], Some(&retract.to_string()));
    let now = ok(e(0), &["search", "--ns", NS, "deploy"], None);
    assert_eq!(hits(&now).iter().map(|h| h.0).collect::<Vec<_>>(), [key_note]);
    let then = ok(
        e(1),
        &[
            "search",
            "--ns",
            NS,
            "deploy",
            "--as-of-tx",
            &before_retraction.to_string(),
        ],
        None,
    );
    assert_eq!(
        hits(&then),
        hits(&found),
        "as of before the retraction: the same answer as then"
    );

    // 4. Two agents disagree on a title: both claims are hits, flagged as conflicting.
    note(
        e(1),
        "critic",
        json!(task_id),
        ":task/title",
        "migrate the search cluster",
    );
    let both = ok(e(2), &["search", "--ns", NS, "migrate"], None);
    let titles = hits(&both);
    assert_eq!(titles.len(), 2, "{both}");
    assert!(
        both["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["conflicting"] == true)
    );
    // The planner replaces its own title: its old claim stops holding, the critic's stands.
    note(
        e(0),
        "planner",
        json!(task_id),
        ":task/title",
        "migrate the recall index",
    );
    let replaced = ok(e(0), &["search", "--ns", NS, "migrate"], None);
    let mut values: Vec<String> = hits(&replaced).into_iter().map(|h| h.1).collect();
    values.sort();
    assert_eq!(values, ["migrate the recall index", "migrate the search cluster"]);

    // Proven: each hit's datom against a Merkle proof and a signed checkpoint.
    let proven = ok(e(1), &["search", "--ns", NS, "migrate", "--verify"], None);
    assert_eq!(hits(&proven), hits(&replaced));
    assert_eq!(proven["verified"]["datoms"], 2);
    assert!(proven["verified"]["checkpoint_size"].as_u64().unwrap() > 0);

    // Vectors and refs: found by meaning (shown by the entity's text), and one ref away.
    let doc = json!({
        "namespace": NS, "agent": "planner",
        "ops": [
            {"entity": "d", "attribute": ":doc/text", "value": {"string": "quarterly budget review"}},
            {"entity": "d", "attribute": ":doc/embedding", "value": {"vector": [0.0, 1.0, 0.0]}},
            {"entity": "d", "attribute": ":doc/about", "value": {"ref": task_id}}
        ]
    });
    let d = ok(e(0), &["transact"], Some(&doc.to_string()))["temp_ids"]["d"]
        .as_u64()
        .unwrap();
    let near = ok(
        e(1),
        &["search", "--ns", NS, "--vector", "[0.1, 2.0, 0.0]", "--hops", "0"],
        None,
    );
    assert_eq!(hits(&near)[0].0, d, "{near}");
    assert_eq!(near["hits"][0]["signals"][0]["signal"], "vector");
    let around = ok(e(2), &["search", "--ns", NS, "budget"], None);
    let entities: Vec<u64> = hits(&around).iter().map(|h| h.0).collect();
    assert_eq!(
        entities,
        [d, task_id],
        "the doc, then the task it is about, shown by one of its titles: {around}"
    );
    assert_eq!(around["hits"][1]["signals"][0]["signal"], "graph");

    // Kinds of memory: only the doc says it is a preference, so only it is kept, through
    // any node, by short name or keyword.
    let kind = json!({
        "namespace": NS, "agent": "planner",
        "ops": [{"entity": d, "attribute": ":memory/kind", "value": {"keyword": ":memory.kind/preference"}}]
    });
    ok(e(0), &["transact"], Some(&kind.to_string()));
    for (node, name) in [(1, "preference"), (2, ":memory.kind/preference")] {
        let kept = ok(e(node), &["search", "--ns", NS, "budget", "--kind", name], None);
        let entities: Vec<u64> = hits(&kept).iter().map(|h| h.0).collect();
        assert_eq!(entities, [d], "{kept}");
    }
    let none = ok(e(1), &["search", "--ns", NS, "budget", "--kind", "blocker"], None);
    assert!(hits(&none).is_empty(), "{none}");

    // 5. Every node's own index gives the leader's answer once it has applied as much.
    let head = client.head().await.unwrap().index;
    let leader_view = ok(
        e(0),
        &["search", "--ns", NS, "friday", "deploy", "migrate", "--k", "20"],
        None,
    );
    for i in 0..3 {
        let mut local = Json::Null;
        for _ in 0..100 {
            local = ok(
                e(i),
                &[
                    "search", "--ns", NS, "friday", "deploy", "migrate", "--k", "20", "--stale",
                ],
                None,
            );
            if local["applied_tx"].as_u64().unwrap() >= head {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            local["hits"],
            leader_view["hits"],
            "node {} answers as the leader does",
            i + 1
        );
    }

    // 6. Bad queries: refused naming the field, and nothing changes.
    for (args, field) in [
        (vec!["search", "--ns", NS, "?!"], "text: has no words"),
        (
            vec!["search", "--ns", NS, "deploy", "--k", "101"],
            "k: must be at most 100",
        ),
        (
            vec!["search", "--ns", NS, "deploy", "--attribute", "no-colon"],
            "--attribute",
        ),
        (vec!["search", "--ns", "Bad Namespace!", "deploy"], "--ns"),
        (
            vec!["search", "--ns", NS, "--vector", "[1, \"a\"]"],
            "expected a number",
        ),
        (
            vec!["search", "--ns", NS, "--vector", "[1, 0]"],
            "vector: has 2 components; of the searchable vector attributes of team/search, :doc/embedding has 3",
        ),
        (
            vec!["search", "--ns", NS, "deploy", "--hops", "4"],
            "hops: must be at most 3",
        ),
        (
            vec!["search", "--ns", NS, "deploy", "--attribute", ":nope/x"],
            "attributes[0]: :nope/x is not a searchable attribute",
        ),
        (
            vec!["search", "--ns", NS, "deploy", "--kind", "two words"],
            "kinds[0]:",
        ),
    ] {
        let (code, _, stderr) = run(e(1), &args, None);
        assert_ne!(code, 0, "{args:?} should fail");
        assert!(stderr.contains(field), "{args:?}: {stderr}");
    }
    assert_eq!(
        client.head().await.unwrap().index,
        head,
        "bad queries changed nothing"
    );
    cluster.kill_all();
}

/// `:memory/expires` on a real cluster: a memory whose instant has passed drops out of search,
/// find and get of the current state on every node, is still there with `--include-expired`
/// and in every read as of a transaction, and one that has not expired yet stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_memories_drop_out_of_reads_of_now_and_stay_in_reads_as_of_a_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let endpoints = cluster.endpoints();
    let e = |i: usize| endpoints[i].as_str();
    const NS_EXP: &str = "team/expiry";

    let tx = json!({
        "namespace": NS_EXP, "agent": "planner",
        "ops": [
            {"entity": "old", "attribute": ":note/text", "value": {"string": "deploy window friday"}},
            {"entity": "new", "attribute": ":note/text", "value": {"string": "deploy freeze monday"}},
        ]
    });
    let written = ok(e(0), &["transact"], Some(&tx.to_string()));
    let (old, new) = (
        written["temp_ids"]["old"].as_u64().unwrap(),
        written["temp_ids"]["new"].as_u64().unwrap(),
    );
    let before_expiry = written["tx"].as_u64().unwrap();
    // One expiry an hour ago, one a day ahead.
    let now_ns = engram_raft::clock::now_ns();
    let hour_ns: i64 = 3_600_000_000_000;
    let passed = now_ns - hour_ns;
    let tx = json!({
        "namespace": NS_EXP, "agent": "planner",
        "ops": [
            {"entity": old, "attribute": ":memory/expires", "value": {"instant_ns": passed}},
            {"entity": new, "attribute": ":memory/expires", "value": {"instant_ns": now_ns + 24 * hour_ns}},
        ]
    });
    let expiry_tx = ok(e(1), &["transact"], Some(&tx.to_string()))["tx"]
        .as_u64()
        .unwrap();
    let entities = |doc: &Json| -> Vec<u64> {
        let mut ids: Vec<u64> = hits(doc).into_iter().map(|(id, _, _)| id).collect();
        ids.sort_unstable();
        ids
    };
    let mut both = vec![old, new];
    both.sort_unstable();

    for i in 0..3 {
        // Search, as of now: the expired memory is gone on every node.
        let now = ok(e(i), &["search", "--ns", NS_EXP, "deploy"], None);
        assert_eq!(entities(&now), [new], "node {i}: search as of now");
        let all = ok(
            e(i),
            &["search", "--ns", NS_EXP, "deploy", "--include-expired"],
            None,
        );
        assert_eq!(entities(&all), both, "node {i}: --include-expired");
        for as_of in [before_expiry, expiry_tx] {
            let then = ok(
                e(i),
                &[
                    "search",
                    "--ns",
                    NS_EXP,
                    "deploy",
                    "--as-of-tx",
                    &as_of.to_string(),
                ],
                None,
            );
            assert_eq!(
                entities(&then),
                both,
                "node {i}: a search as of tx {as_of} is the record"
            );
        }

        // Find, as of now and otherwise.
        let found = |extra: &[&str]| -> Vec<u64> {
            let doc = ok(
                e(i),
                &[&["find", "--ns", NS_EXP, "--attribute", ":note/text"], extra].concat(),
                None,
            );
            let mut ids: Vec<u64> = doc["datoms"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["entity"].as_u64().unwrap())
                .collect();
            ids.sort_unstable();
            ids
        };
        assert_eq!(found(&[]), [new], "node {i}: find as of now");
        assert_eq!(found(&["--include-expired"]), both, "node {i}");
        assert_eq!(found(&["--as-of-tx", &expiry_tx.to_string()]), both, "node {i}");
    }

    // Get, as of now: no facts, and when it expired; the text with --include-expired.
    let got = ok(e(2), &["get", "--ns", NS_EXP, "--entity", &old.to_string()], None);
    assert_eq!(got["datoms"], json!([]), "{got}");
    assert_eq!(got["expired_at_ns"], json!(passed), "{got}");
    let (code, stdout, _) = run(e(2), &["get", "--ns", NS_EXP, "--entity", &old.to_string()], None);
    assert_eq!(code, 0);
    assert!(stdout.contains("expired at"), "{stdout}");
    for extra in [
        vec!["--include-expired"],
        vec!["--as-of-tx", &expiry_tx.to_string()],
    ] {
        let got = ok(
            e(2),
            &[&["get", "--ns", NS_EXP, "--entity", &old.to_string()], &extra[..]].concat(),
            None,
        );
        let texts: Vec<&str> = got["datoms"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|d| d["value"]["string"].as_str())
            .collect();
        assert_eq!(texts, ["deploy window friday"], "{extra:?}: {got}");
        assert!(got.get("expired_at_ns").is_none(), "{extra:?}: {got}");
    }
    let live = ok(e(2), &["get", "--ns", NS_EXP, "--entity", &new.to_string()], None);
    assert_eq!(
        live["datoms"].as_array().unwrap().len(),
        2,
        "text and expiry: {live}"
    );

    // Moving the expiry ahead brings the memory back.
    let tx = json!({
        "namespace": NS_EXP, "agent": "planner",
        "ops": [{"entity": old, "attribute": ":memory/expires", "value": {"instant_ns": now_ns + hour_ns}}]
    });
    ok(e(0), &["transact"], Some(&tx.to_string()));
    let now = ok(e(0), &["search", "--ns", NS_EXP, "deploy"], None);
    assert_eq!(entities(&now), both, "the later expiry has not passed");
    cluster.kill_all();
}

/// The newest `search-rebuild` job node `endpoint` lists (the index set out after a start, or
/// rebuilt after a redaction).
async fn newest_rebuild(endpoint: &str) -> Json {
    let mut job = Json::Null;
    for _ in 0..200 {
        let answer = ok(
            endpoint,
            &["jobs", "--kind", "search-rebuild", "--limit", "1"],
            None,
        );
        job = answer["nodes"][0]["jobs"][0].clone();
        if job["outcome"] != "running" {
            return job;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the index's first feed never ended: {job}");
}

/// A stale search on `endpoint` once its node has applied through `head`.
async fn search_at_head(endpoint: &str, words: &[&str], head: u64) -> Json {
    let args: Vec<&str> = [&["search", "--ns", NS, "--k", "100", "--stale"], words].concat();
    for _ in 0..200 {
        let found = ok(endpoint, &args, None);
        if found["applied_tx"].as_u64().unwrap() >= head {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{endpoint} never applied through {head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_takes_its_index_from_its_save_and_rebuilds_when_the_save_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let extra = ["--recall-save-ms", "200"].map(String::from).to_vec();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &extra).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let endpoints = cluster.endpoints();
    let e = |i: usize| endpoints[i].as_str();
    for i in 0..30 {
        note(
            e(0),
            "planner",
            json!("n"),
            ":note/text",
            &format!("alpha note {i}"),
        );
    }
    // Node 3 has taken the notes in and saved its index (whatever a save misses, the log
    // feeds after it).
    let head = client.head().await.unwrap().index;
    search_at_head(e(2), &["alpha"], head).await;
    let save = cluster.node(3).unwrap().data_dir.join("recall.index");
    for _ in 0..200 {
        if save.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(save.exists(), "node 3 never saved its index");

    // Stopped, written past, started again: the index comes from the save and takes in the
    // notes written while the node was down from the log.
    cluster.kill(3).unwrap();
    for i in 0..5 {
        note(
            e(0),
            "planner",
            json!("n"),
            ":note/text",
            &format!("beta note {i}"),
        );
    }
    cluster.restart(3).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let head = client.head().await.unwrap().index;
    let found = search_at_head(e(2), &["alpha"], head).await;
    assert_eq!(hits(&found).len(), 30, "{found}");
    let found = search_at_head(e(2), &["beta"], head).await;
    assert_eq!(hits(&found).len(), 5, "{found}");
    let leader_view = ok(e(0), &["search", "--ns", NS, "--k", "100", "note"], None);
    assert_eq!(
        search_at_head(e(2), &["note"], head).await["hits"],
        leader_view["hits"],
        "the index from the save answers as the leader's does"
    );
    let rebuild = newest_rebuild(e(2)).await;
    assert_eq!(rebuild["outcome"], "done", "{rebuild}");
    let from_save = rebuild["figures"]["from_save_tx"].as_u64().unwrap();
    assert!(
        from_save > 1 && from_save <= head,
        "set out from the save: {rebuild}"
    );

    // A damaged save is not taken: the index is rebuilt from the log, and answers the same.
    cluster.kill(3).unwrap();
    let mut bytes = std::fs::read(&save).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x5a;
    std::fs::write(&save, &bytes).unwrap();
    let log_before = std::fs::read(&cluster.node(3).unwrap().log_path).unwrap().len();
    cluster.restart(3).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let found = search_at_head(e(2), &["note"], head).await;
    assert_eq!(found["hits"], leader_view["hits"], "{found}");
    let rebuild = newest_rebuild(e(2)).await;
    assert_eq!(
        rebuild["figures"]["from_save_tx"], 0,
        "rebuilt from the log: {rebuild}"
    );
    let log = std::fs::read(&cluster.node(3).unwrap().log_path).unwrap();
    let since = String::from_utf8_lossy(&log[log_before.min(log.len())..]);
    assert!(
        since.contains("its save is not taken") && since.contains("does not match its hash"),
        "the log says why the save was not taken"
    );
    cluster.check_running().unwrap();
}

/// A one-node cluster saving its search index every 200 ms, with `notes` notes written.
async fn one_node_with_notes(dir: &Path, notes: usize) -> LocalCluster {
    let ports = free_ports(1).unwrap();
    let extra = ["--recall-save-ms", "200"].map(String::from).to_vec();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir, &ports, &extra).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    write_notes(&cluster, 0..notes).await;
    cluster
}

/// Writes notes `range` ("gamma note i") through node 1 and waits until its index is saved
/// with every one of them: until the save on disk takes in the last note's transaction. (Its
/// modification time is not enough: a save taken between the last write and the first look
/// holds every note and is the last one, since nothing new is fed after it.)
async fn write_notes(cluster: &LocalCluster, range: std::ops::Range<usize>) {
    let endpoint = cluster.node(1).unwrap().endpoint();
    let mut last_tx = 0;
    for i in range {
        let receipt = note(
            &endpoint,
            "planner",
            json!("n"),
            ":note/text",
            &format!("gamma note {i}"),
        );
        last_tx = receipt["tx"].as_u64().unwrap();
    }
    gamma_at_head(&endpoint).await;
    let save = cluster.node(1).unwrap().data_dir.join("recall.index");
    let saved_next = || {
        let bytes = std::fs::read(&save).ok()?;
        engram_recall::load(&bytes).ok().map(|(_, _, at)| at.next.0)
    };
    for _ in 0..200 {
        if saved_next().is_some_and(|next| next > last_tx) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no save holds transaction {last_tx}: the save takes {:?} next",
        saved_next()
    );
}

/// Waits until the node at `endpoint` searches "gamma" over everything it reports applied.
async fn gamma_at_head(endpoint: &str) {
    let client = Client::connect(vec![endpoint.to_string()]).await.unwrap();
    let head = client.head().await.unwrap().index;
    search_at_head(endpoint, &["gamma"], head).await;
}

/// Node 1 of `cluster` killed, `save` put in its data directory as its save, and started again:
/// what its log said after the start.
async fn restart_with_save(cluster: &mut LocalCluster, save: &[u8]) -> String {
    cluster.kill(1).unwrap();
    let node = cluster.node(1).unwrap();
    std::fs::write(node.data_dir.join("recall.index"), save).unwrap();
    let log_before = std::fs::read(&node.log_path).unwrap().len();
    cluster.restart(1).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let endpoint = cluster.node(1).unwrap().endpoint();
    gamma_at_head(&endpoint).await;
    let log = std::fs::read(&cluster.node(1).unwrap().log_path).unwrap();
    String::from_utf8_lossy(&log[log_before.min(log.len())..]).into_owned()
}

/// Node 1 of `cluster` restarted with `save` as its save: it says it does not take it and
/// `why`, rebuilds its index from the log, and finds its own `notes` notes.
async fn refused_on_restart(cluster: &mut LocalCluster, save: &[u8], why: &str, notes: usize) {
    let said = restart_with_save(cluster, save).await;
    assert!(
        said.contains("its save is not taken") && said.contains(why),
        "the log says why ({why}): {said}"
    );
    let endpoint = cluster.node(1).unwrap().endpoint();
    let rebuild = newest_rebuild(&endpoint).await;
    assert_eq!(rebuild["figures"]["from_save_tx"], 0, "{rebuild}");
    let found = ok(
        &endpoint,
        &["search", "--ns", NS, "--k", "100", "--stale", "gamma"],
        None,
    );
    assert_eq!(hits(&found).len(), notes, "only this store's notes: {found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_of_another_store_is_not_taken() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = one_node_with_notes(dir_a.path(), 20).await;
    let foreign = std::fs::read(a.node(1).unwrap().data_dir.join("recall.index")).unwrap();
    a.kill_all();
    let mut b = one_node_with_notes(dir_b.path(), 5).await;

    // The other store's save holds transactions this store has not applied.
    refused_on_restart(&mut b, &foreign, "which this store has not applied", 5).await;
    // Once this store is past it, the save's newest transaction is here, under another hash.
    write_notes(&b, 5..30).await;
    refused_on_restart(&mut b, &foreign, "another audit hash", 30).await;
    b.check_running().unwrap();
}
