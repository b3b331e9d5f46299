//! Lists on a real 3-node cluster: the namespaces, the entities of a namespace and the facts
//! that refer to an entity, through the Rust client and the CLI, a page at a time across nodes
//! with each item once; `since` on History and Find; and bad input (a cursor of another list,
//! an invalid attribute, an instant before genesis) refused with a precise code; and a join
//! query through the CLI, a page at a time across nodes, with its plan and its refusals.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::path::Path;
use std::time::Duration;

use common::run_cli;
use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, EntitiesQuery, ReferrersQuery, pb};
use engram_types::{
    Attribute, AttributeDef, EntityId, EntityRef, Namespace, Op, Provenance, TxOp, TxRequest, Value,
    ValueType,
};
use tonic::Code;

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "lists/a";

fn op(entity: EntityRef, attribute: &str, value: Value) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity,
        attribute: Attribute::new(attribute).unwrap(),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

fn request(ns: &str, ops: Vec<TxOp>) -> TxRequest {
    let agent = Provenance {
        agent: "lister".into(),
        confidence: 1.0,
        ..Default::default()
    };
    TxRequest::data(Namespace::new(ns).unwrap(), ops, agent)
}

/// Runs the CLI against `endpoint` and returns its JSON, failing loudly if it did not succeed.
fn cli_json(endpoint: &str, args: &[&str]) -> serde_json::Value {
    let out = run_cli(EXE, endpoint, args, None);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_entities_and_referrers_are_listed_in_pages_across_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3).unwrap();
    let mut cluster = LocalCluster::start(Path::new(EXE), dir.path(), &ports, &[]).unwrap();
    cluster.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    cluster.init(Duration::from_secs(30)).await.unwrap();
    let client = Client::connect(cluster.endpoints()).await.unwrap();
    let endpoints = cluster.endpoints();

    // A schema with a reference, two people and seven tasks owned by ann; one moves to bob.
    let schema = [
        AttributeDef::new(Attribute::new(":task/owner").unwrap(), ValueType::Ref),
        AttributeDef::new(Attribute::new(":person/name").unwrap(), ValueType::String),
    ];
    let admin = Provenance {
        agent: "lister".into(),
        ..Default::default()
    };
    client
        .apply_schema(&Namespace::new(NS).unwrap(), &schema, &admin, None)
        .await
        .unwrap();
    let people = client
        .transact(&request(
            NS,
            vec![
                op(
                    EntityRef::Temp("ann".into()),
                    ":person/name",
                    Value::String("ann".into()),
                ),
                op(
                    EntityRef::Temp("bob".into()),
                    ":person/name",
                    Value::String("bob".into()),
                ),
            ],
        ))
        .await
        .unwrap();
    let (ann, bob) = (people.temp_ids["ann"], people.temp_ids["bob"]);
    let tasks = client
        .transact(&request(
            NS,
            (0..7)
                .map(|i| {
                    op(
                        EntityRef::Temp(format!("t{i}")),
                        ":task/owner",
                        Value::Ref(EntityId(ann)),
                    )
                })
                .collect(),
        ))
        .await
        .unwrap();
    let tasks_tx = tasks.tx;
    let task_ids: Vec<u64> = (0..7).map(|i| tasks.temp_ids[&format!("t{i}")]).collect();
    let moved = client
        .transact(&request(
            NS,
            vec![op(
                EntityRef::Id(EntityId(task_ids[6])),
                ":task/owner",
                Value::Ref(EntityId(bob)),
            )],
        ))
        .await
        .unwrap();
    for ns in ["lists/b", "other"] {
        client
            .transact(&request(
                ns,
                vec![op(EntityRef::Temp("x".into()), ":n/x", Value::I64(1))],
            ))
            .await
            .unwrap();
    }

    // Namespaces: the Rust client follows the pages; the CLI a page at a time across nodes.
    let all = client
        .list_namespaces(0, &[], engram_client::Consistency::Linearizable)
        .await
        .unwrap();
    // The policy's own namespace is one more, readable by anyone in open mode.
    assert_eq!(all.namespaces, ["engram.system", "lists/a", "lists/b", "other"]);
    let mut listed = Vec::new();
    let mut cursor = String::new();
    for page in 0.. {
        let mut args = vec!["namespaces", "--json", "--limit", "1"];
        if !cursor.is_empty() {
            args.extend(["--cursor", cursor.as_str()]);
        }
        let doc = cli_json(&endpoints[page % 3], &args);
        listed.extend(
            doc["namespaces"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap().to_string()),
        );
        match doc["next_cursor"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
    }
    assert_eq!(listed, all.namespaces);

    // Entities: every one once, in id order, three a page across nodes; as of the people's
    // transaction only them and the schema. Schema is data: each declared attribute is an
    // entity of the namespace too (its :db/ident).
    let idents = client
        .list_entities(
            &EntitiesQuery {
                attribute: Some(Attribute::new(":db/ident").unwrap()),
                ..EntitiesQuery::new(Namespace::new(NS).unwrap())
            },
            &[],
            |_| (),
        )
        .await
        .unwrap()
        .entities;
    assert_eq!(idents.len(), 2, "one entity per declared attribute");
    let mut everyone: Vec<u64> = [vec![ann, bob], task_ids.clone(), idents.clone()].concat();
    everyone.sort_unstable();
    let mut listed: Vec<u64> = Vec::new();
    let mut cursor = String::new();
    for page in 0.. {
        let mut args = vec!["entities", "--ns", NS, "--json", "--limit", "3"];
        if !cursor.is_empty() {
            args.extend(["--cursor", cursor.as_str()]);
        }
        let doc = cli_json(&endpoints[(page + 1) % 3], &args);
        let entities = doc["entities"].as_array().unwrap();
        assert!(entities.len() <= 3);
        listed.extend(entities.iter().map(|e| e.as_u64().unwrap()));
        match doc["next_cursor"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
    }
    assert_eq!(listed, everyone);
    let owners = client
        .list_entities(
            &EntitiesQuery {
                attribute: Some(Attribute::new(":task/owner").unwrap()),
                ..EntitiesQuery::new(Namespace::new(NS).unwrap())
            },
            &[],
            |_| (),
        )
        .await
        .unwrap();
    let mut sorted_tasks = task_ids.clone();
    sorted_tasks.sort_unstable();
    assert_eq!(owners.entities, sorted_tasks);
    let then = client
        .list_entities(
            &EntitiesQuery {
                as_of_tx: Some(people.tx),
                ..EntitiesQuery::new(Namespace::new(NS).unwrap())
            },
            &[],
            |_| (),
        )
        .await
        .unwrap();
    let mut then_existing = [vec![ann, bob], idents.clone()].concat();
    then_existing.sort_unstable();
    assert_eq!(then.entities, then_existing);

    // Referrers: ann owns six tasks now, seven as of the tasks' transaction; bob one.
    let referrers = |target: u64, as_of_tx: Option<u64>, limit: u32| {
        let client = client.clone();
        async move {
            let query = ReferrersQuery {
                as_of_tx,
                limit,
                ..ReferrersQuery::new(Namespace::new(NS).unwrap(), EntityId(target))
            };
            let answer = client.referrers(&query, &[]).await.unwrap();
            assert!(
                answer.datoms.iter().all(|d| d.attribute == ":task/owner"
                    && d.value == Some(pb::Value::from(&Value::Ref(EntityId(target))))),
                "each a current claim referring to the target"
            );
            answer.datoms.iter().map(|d| d.entity).collect::<Vec<u64>>()
        }
    };
    assert_eq!(
        referrers(ann, None, 0).await,
        sorted_tasks[..]
            .iter()
            .copied()
            .filter(|t| *t != task_ids[6])
            .collect::<Vec<_>>()
    );
    assert_eq!(
        referrers(ann, Some(tasks_tx), 2).await.len(),
        2,
        "a limit stops the reading"
    );
    assert_eq!(referrers(ann, Some(tasks_tx), 0).await, sorted_tasks);
    assert_eq!(referrers(bob, None, 0).await, [task_ids[6]]);
    let doc = cli_json(
        &endpoints[2],
        &["referrers", "--ns", NS, "--entity", &bob.to_string(), "--json"],
    );
    let datoms = doc["datoms"].as_array().unwrap();
    assert_eq!(datoms.len(), 1, "{doc}");
    assert_eq!(datoms[0]["entity"].as_u64(), Some(task_ids[6]));

    // since: History and Find of the owner attribute after the tasks' transaction: the move.
    let doc = cli_json(
        &endpoints[0],
        &[
            "history",
            "--ns",
            NS,
            "--attribute",
            ":task/owner",
            "--since-tx",
            &tasks_tx.to_string(),
            "--json",
        ],
    );
    let since: Vec<u64> = doc["datoms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["entity"].as_u64().unwrap())
        .collect();
    assert_eq!(since, [task_ids[6]]);
    assert_eq!(doc["datoms"][0]["tx"].as_u64(), Some(moved.tx));
    let doc = cli_json(
        &endpoints[1],
        &[
            "find",
            "--ns",
            NS,
            "--attribute",
            ":task/owner",
            "--since-tx",
            &tasks_tx.to_string(),
            "--json",
        ],
    );
    let found: Vec<u64> = doc["datoms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["entity"].as_u64().unwrap())
        .collect();
    assert_eq!(found, [task_ids[6]]);

    // A join: the tasks whose owner is named ann, two rows a page through the CLI across
    // nodes, every page as of the first's transaction; as of the tasks' transaction all seven.
    let ann_tasks =
        r#"{"find": ["?t"], "where": [["?t", ":task/owner", "?p"], ["?p", ":person/name", "ann"]]}"#;
    let query_pages = |as_of: Option<String>| {
        let mut rows: Vec<u64> = Vec::new();
        let mut cursor = String::new();
        let mut as_of_txs = Vec::new();
        for page in 0.. {
            let mut args = vec!["query", "--ns", NS, ann_tasks, "--json", "--limit", "2"];
            if let Some(tx) = &as_of {
                args.extend(["--as-of-tx", tx.as_str()]);
            }
            if !cursor.is_empty() {
                args.extend(["--cursor", cursor.as_str()]);
            }
            let doc = cli_json(&endpoints[page % 3], &args);
            assert_eq!(doc["columns"], serde_json::json!(["?t"]));
            let page_rows = doc["rows"].as_array().unwrap();
            assert!(page_rows.len() <= 2);
            rows.extend(page_rows.iter().map(|r| r["?t"]["ref"].as_u64().unwrap()));
            as_of_txs.push(doc["as_of_tx"].as_u64().unwrap());
            match doc["next_cursor"].as_str() {
                Some(next) => cursor = next.to_string(),
                None => break,
            }
        }
        as_of_txs.dedup();
        assert_eq!(as_of_txs.len(), 1, "every page as of one transaction");
        rows
    };
    let anns: Vec<u64> = sorted_tasks
        .iter()
        .copied()
        .filter(|t| *t != task_ids[6])
        .collect();
    assert_eq!(query_pages(None), anns);
    assert_eq!(query_pages(Some(tasks_tx.to_string())), sorted_tasks);
    let out = run_cli(
        EXE,
        &endpoints[1],
        &["query", "--ns", NS, ann_tasks, "--explain"],
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("(6 rows, as of tx"), "{}", out.stdout);
    assert!(
        out.stdout.contains("attribute scan, filtered") && out.stdout.contains("reference index"),
        "the plan: the name looked up, then the tasks referring to ann: {}",
        out.stdout
    );
    // A filter: ann's tasks but one.
    let but_one = format!(
        r#"{{"find": ["?t"], "where": [["?t", ":task/owner", "?p"], ["?p", ":person/name", "ann"], ["!=", "?t", {{"ref": {}}}]]}}"#,
        anns[0]
    );
    let doc = cli_json(
        &endpoints[2],
        &["query", "--ns", NS, &but_one, "--json", "--explain"],
    );
    let rows: Vec<u64> = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["?t"]["ref"].as_u64().unwrap())
        .collect();
    assert_eq!(rows, anns[1..]);
    assert_eq!(doc["plan"][1]["filters"], serde_json::json!([0]), "{doc}");
    for (query, code, says) in [
        (
            r#"{"find": ["?x"], "where": [["?t", ":task/owner", "?p"]]}"#,
            1,
            "find[0]: ?x is bound by no clause",
        ),
        (
            r#"{"find": ["?t"], "where": [["?t", ":task/ownr", "?p"]]}"#,
            1,
            "clauses[0].attribute",
        ),
        (
            r#"{"find": ["?t"], "where": [["?t", ":task/owner"]]}"#,
            1,
            "where[0]",
        ),
    ] {
        let out = run_cli(EXE, &endpoints[0], &["query", "--ns", NS, query], None);
        assert_eq!(out.code, code, "{query}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{query}: {}", out.stderr);
    }
    let mut node = pb::memory_client::MemoryClient::connect(format!("http://{}", endpoints[2]))
        .await
        .unwrap();
    let costly = node
        .query(pb::QueryRequest {
            namespace: NS.into(),
            find: vec!["?t".into()],
            clauses: engram_proto::clauses_to_pb(&engram_cli::queryjson::parse_query(ann_tasks).unwrap()),
            max_rows_read: 3,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(costly.code(), Code::ResourceExhausted, "{costly:?}");
    assert!(costly.message().contains("max_rows_read"), "{}", costly.message());

    // Bad input: a cursor of another list, an invalid attribute, an instant before genesis.
    let namespaces_cursor = client
        .list_namespaces(1, &[], engram_client::Consistency::Linearizable)
        .await
        .unwrap()
        .next_cursor;
    let mut node = pb::memory_client::MemoryClient::connect(format!("http://{}", endpoints[0]))
        .await
        .unwrap();
    let refused = node
        .list_entities(pb::ListEntitiesRequest {
            namespace: NS.into(),
            cursor: namespaces_cursor.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("cursor"), "{}", refused.message());
    let out = run_cli(
        EXE,
        &endpoints[0],
        &[
            "referrers",
            "--ns",
            NS,
            "--entity",
            &ann.to_string(),
            "--cursor",
            &hex::encode(&namespaces_cursor),
        ],
        None,
    );
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("cursor"), "{}", out.stderr);
    let refused = node
        .referrers(pb::ReferrersRequest {
            namespace: NS.into(),
            entity: ann,
            attribute: "no-colon".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("attribute"), "{}", refused.message());
    let refused = node
        .list_entities(pb::ListEntitiesRequest {
            namespace: NS.into(),
            as_of_time_ns: Some(1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::OutOfRange, "{refused:?}");
    assert!(
        refused.message().contains("as_of_time_ns"),
        "{}",
        refused.message()
    );
    policy_lists_come_in_pages(&client, endpoints[1].as_str()).await;
    drop(cluster);
}

/// The lists a caller takes whole (agents, grants, retention policies, sessions, branches): a
/// page at a time over the wire, each item once and in order, and whole through the client.
async fn policy_lists_come_in_pages(client: &Client, endpoint: &str) {
    let ns = Namespace::new("lists/b").unwrap();
    let who = Provenance {
        agent: "lister".into(),
        ..Default::default()
    };
    client
        .transact(&request(
            "lists/b",
            vec![op(EntityRef::Temp("x".into()), ":x/y", Value::I64(1))],
        ))
        .await
        .unwrap();
    for i in 0..5u8 {
        let name = format!("pager-{i}");
        let key = engram_audit::NodeKey::from_seed([i + 40; 32]).public().0;
        client.add_agent(&name, key).await.unwrap();
        client.grant(&name, "read", "lists", false).await.unwrap();
        client
            .set_retention(&format!("lists/r{i}"), "", 86_400_000)
            .await
            .unwrap();
        client
            .open_session(&format!("lists/s{i}"), 3_600_000)
            .await
            .unwrap();
        let branch = engram_types::BranchName::new(format!("draft-{i}")).unwrap();
        client.create_branch(&ns, &branch, None, &who).await.unwrap();
    }
    let mut access = pb::access_client::AccessClient::connect(format!("http://{endpoint}"))
        .await
        .unwrap();
    let memory = pb::memory_client::MemoryClient::connect(format!("http://{endpoint}"))
        .await
        .unwrap();
    // Each list read a page of two (of one, for grants) at a time, following cursors.
    let (agents, pages) = every_page(|cursor| {
        let mut access = access.clone();
        async move {
            let page = access
                .list_agents(pb::ListAgentsRequest { limit: 2, cursor })
                .await
                .unwrap()
                .into_inner();
            assert!(page.agents.len() <= 2);
            (
                page.agents.into_iter().map(|a| a.name).collect(),
                page.next_cursor,
            )
        }
    })
    .await;
    let whole: Vec<String> = client
        .list_agents()
        .await
        .unwrap()
        .agents
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(agents, whole, "each agent once, in name order");
    assert!(pages >= 3, "{pages} pages of two for {} agents", agents.len());
    assert!(agents.windows(2).all(|w| w[0] < w[1]), "{agents:?}");
    assert!((0..5).all(|i| agents.contains(&format!("pager-{i}"))));

    let (grants, _) = every_page(|cursor| {
        let mut access = access.clone();
        async move {
            let page = access
                .list_grants(pb::ListGrantsRequest {
                    principal: "pager-3".into(),
                    limit: 1,
                    cursor,
                })
                .await
                .unwrap()
                .into_inner();
            let grants = page.grants.into_iter().map(|g| (g.principal, g.action, g.prefix));
            (grants.collect(), page.next_cursor)
        }
    })
    .await;
    assert_eq!(
        grants,
        [("pager-3".to_string(), "read".to_string(), "lists".to_string())]
    );
    let all_grants = client.list_grants("").await.unwrap().grants;
    assert!(all_grants.len() >= 5, "{all_grants:?}");

    let (retention, _) = every_page(|cursor| {
        let mut access = access.clone();
        async move {
            let page = access
                .list_retention(pb::ListRetentionRequest { limit: 2, cursor })
                .await
                .unwrap()
                .into_inner();
            (
                page.policies.into_iter().map(|p| p.namespace).collect(),
                page.next_cursor,
            )
        }
    })
    .await;
    let whole: Vec<String> = client
        .list_retention()
        .await
        .unwrap()
        .policies
        .into_iter()
        .map(|p| p.namespace)
        .collect();
    assert_eq!(retention, whole);
    assert_eq!(
        retention,
        (0..5).map(|i| format!("lists/r{i}")).collect::<Vec<_>>()
    );

    let (sessions, _) = every_page(|cursor| {
        let mut access = access.clone();
        async move {
            let page = access
                .list_sessions(pb::ListSessionsRequest { limit: 2, cursor })
                .await
                .unwrap()
                .into_inner();
            (
                page.sessions.into_iter().map(|s| s.namespace).collect(),
                page.next_cursor,
            )
        }
    })
    .await;
    assert_eq!(
        sessions,
        (0..5).map(|i| format!("lists/s{i}")).collect::<Vec<_>>()
    );
    assert_eq!(client.list_sessions().await.unwrap().sessions.len(), 5);

    let (branches, _) = every_page(|cursor| {
        let (mut memory, ns) = (memory.clone(), ns.to_string());
        async move {
            let page = memory
                .list_branches(pb::ListBranchesRequest {
                    namespace: ns,
                    limit: 2,
                    cursor,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            (
                page.branches.into_iter().map(|b| b.name).collect(),
                page.next_cursor,
            )
        }
    })
    .await;
    assert_eq!(branches, (0..5).map(|i| format!("draft-{i}")).collect::<Vec<_>>());
    let through_client = client
        .branches(&ns, engram_client::Consistency::Linearizable)
        .await
        .unwrap();
    assert_eq!(through_client.branches.len(), 5);

    // A cursor is bound to its list and to what the request names: another list's, or one of
    // another principal's grants, is refused.
    let agents_cursor = access
        .list_agents(pb::ListAgentsRequest {
            limit: 1,
            cursor: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .next_cursor;
    let refused = access
        .list_retention(pb::ListRetentionRequest {
            limit: 1,
            cursor: agents_cursor,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("agents"), "{}", refused.message());
    let grants_cursor = access
        .list_grants(pb::ListGrantsRequest {
            principal: String::new(),
            limit: 1,
            cursor: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .next_cursor;
    let refused = access
        .list_grants(pb::ListGrantsRequest {
            principal: "pager-1".into(),
            limit: 1,
            cursor: grants_cursor,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
}

/// Every page of a list, `ask(cursor)` reading one as (its items, its next cursor): the items in
/// the order read, and the number of pages.
async fn every_page<T, F, Fut>(mut ask: F) -> (Vec<T>, usize)
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = (Vec<T>, Vec<u8>)>,
{
    let (mut items, mut pages, mut cursor) = (Vec::new(), 0, Vec::new());
    loop {
        let (page, next) = ask(cursor).await;
        items.extend(page);
        pages += 1;
        if next.is_empty() {
            return (items, pages);
        }
        cursor = next;
    }
}
