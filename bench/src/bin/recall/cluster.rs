//! The corpus and its labelled queries end to end: written to a 3-node cluster with
//! `Memory.Transact`, asked with `Memory.Search`, over gRPC on loopback. What this adds to the
//! in-process figures is the whole read path: the call, the linearizable read index, the
//! index catching up with apply, and the store read of every hit's datom.
//!
//! Documents are written with temporary ids (twenty a transaction, four facts each); the ids
//! the cluster gives out are then used for the citations (a hundred a transaction), so the
//! corpus holds the same facts as in process, under other entity ids.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use engram_bench::engram::BenchCluster;
use engram_bench::process::rss_bytes;
use engram_cli::ui::Ui;
use engram_client::{Client, ClientConfig, Consistency, SearchQuery};
use engram_recall::Query;
use engram_types::{
    Attribute, AttributeDef, EntityId, EntityRef, Namespace, Op, Provenance, Status, TxId, TxOp, TxRequest,
    Value, ValueType,
};
use futures::{StreamExt, TryStreamExt};
use serde_json::json;

use crate::corpus::{self, K, Labelled, Shape, VARIANTS, percentile_ms, share_found};

const DOCUMENTS_PER_TX: u64 = 20;
const CITATIONS_PER_TX: u64 = 100;
/// Transactions in flight while loading.
const LOAD_CONCURRENCY: usize = 16;
/// The first search after the load waits for the leader's index to take in every fact.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

fn attr(name: &str) -> Result<Attribute> {
    Attribute::new(name).map_err(|e| anyhow!("{name}: {e}"))
}

fn provenance() -> Provenance {
    Provenance {
        agent: "recall-bench".to_string(),
        confidence: 0.5,
        status: Status::Candidate,
        ..Provenance::default()
    }
}

fn client(endpoint: &str) -> Result<Client> {
    let config = ClientConfig {
        request_timeout: REQUEST_TIMEOUT,
        ..ClientConfig::default()
    };
    Ok(Client::with_config(vec![endpoint.to_string()], config)?)
}

fn schema(shape: Shape) -> Result<Vec<AttributeDef>> {
    let mut defs = Vec::new();
    for name in [corpus::TITLE, corpus::BODY, corpus::NOTE] {
        let mut d = AttributeDef::new(attr(name)?, ValueType::String);
        d.searchable = true;
        defs.push(d);
    }
    let mut embedding = AttributeDef::new(attr(corpus::EMBEDDING)?, ValueType::Vector);
    embedding.searchable = true;
    embedding.dimension = u32::try_from(shape.dimension)?;
    defs.push(embedding);
    defs.push(AttributeDef::new(attr(corpus::CITES)?, ValueType::Ref));
    Ok(defs)
}

fn assert_op(entity: EntityRef, attribute: Attribute, value: Value) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity,
        attribute,
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

/// Writes the corpus; returns each document's entity id (by document number), the number of
/// facts and of transactions written.
async fn load(client: &Client, ns: &Namespace, shape: Shape, ui: Ui) -> Result<(Vec<EntityId>, u64, u64)> {
    let facts_total = shape.documents * 5;
    let pb = ui.bar(
        facts_total,
        "{spinner:.cyan} {msg} [{bar:40}] {pos}/{len} facts {per_sec:.dim}",
        format!("writing {} documents through the cluster", shape.documents),
    );
    let documents: Vec<(u64, u64)> = (0..shape.documents)
        .step_by(DOCUMENTS_PER_TX as usize)
        .map(|from| (from, (from + DOCUMENTS_PER_TX).min(shape.documents)))
        .collect();
    let transactions = documents.len() as u64;
    let written: Vec<Vec<(u64, EntityId)>> = futures::stream::iter(documents)
        .map(|(from, to)| {
            let pb = pb.clone();
            async move {
                let mut ops = Vec::new();
                for e in from..to {
                    for (a, v) in corpus::facts_of(e, shape.dimension) {
                        ops.push(assert_op(EntityRef::Temp(format!("d{e}")), attr(a)?, v));
                    }
                }
                let facts = ops.len() as u64;
                let resp = client
                    .transact(&TxRequest::data(ns.clone(), ops, provenance()))
                    .await
                    .with_context(|| format!("writing documents {from}..{to}"))?;
                pb.inc(facts);
                (from..to)
                    .map(|e| {
                        resp.temp_ids
                            .get(&format!("d{e}"))
                            .map(|id| (e, EntityId(*id)))
                            .with_context(|| format!("the receipt names no id for document {e}"))
                    })
                    .collect::<Result<Vec<_>>>()
            }
        })
        .buffer_unordered(LOAD_CONCURRENCY)
        .try_collect()
        .await?;
    let mut ids = vec![EntityId(0); shape.documents as usize];
    for (e, id) in written.into_iter().flatten() {
        ids[e as usize] = id;
    }
    // The citation futures run on this task (not spawned), so they borrow the ids.
    let by_doc = &ids;
    let citations: Vec<(u64, u64)> = (0..shape.documents)
        .step_by(CITATIONS_PER_TX as usize)
        .map(|from| (from, (from + CITATIONS_PER_TX).min(shape.documents)))
        .collect();
    let transactions = transactions + citations.len() as u64;
    let cites = attr(corpus::CITES)?;
    futures::stream::iter(citations)
        .map(|(from, to)| {
            let (pb, cites) = (pb.clone(), cites.clone());
            async move {
                let ops: Vec<TxOp> = (from..to)
                    .map(|e| {
                        let target = by_doc[corpus::cites(e, shape.documents) as usize];
                        assert_op(
                            EntityRef::Id(by_doc[e as usize]),
                            cites.clone(),
                            Value::Ref(target),
                        )
                    })
                    .collect();
                let facts = ops.len() as u64;
                client
                    .transact(&TxRequest::data(ns.clone(), ops, provenance()))
                    .await
                    .with_context(|| format!("writing the citations of documents {from}..{to}"))?;
                pb.inc(facts);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(LOAD_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    ui.done(
        &pb,
        format!("wrote {facts_total} facts in {transactions} transactions"),
    );
    Ok((ids, facts_total, transactions))
}

fn search_of(ns: &Namespace, q: &Query) -> SearchQuery {
    SearchQuery {
        vector: q.vector.clone(),
        hops: Some(u32::try_from(q.hops).unwrap_or(u32::MAX)),
        k: K as u32,
        ..SearchQuery::new(ns.clone(), q.text.clone())
    }
}

/// Asks `labelled[c], labelled[c + callers], …` one after another; returns each call's time.
async fn ask_in_turn(
    client: Client,
    ns: Namespace,
    labelled: Arc<Vec<Labelled>>,
    c: usize,
    callers: usize,
) -> Result<Vec<Duration>> {
    let mut times = Vec::new();
    for l in labelled.iter().skip(c).step_by(callers) {
        let q = search_of(&ns, &l.query);
        let t = Instant::now();
        client.search(&q).await.context("a timed search")?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// Starts a cluster with `exe`, writes the corpus, asks the labelled queries; the report has
/// the in-process report's shape (`recall_at_10`, `latency_by_signal_1_caller`, `latency`)
/// plus the load's figures and the nodes' resident memory.
pub async fn run(exe: &Path, shape: Shape, save_ms: Option<u64>, json: bool) -> Result<serde_json::Value> {
    let ui = Ui::new(json);
    let save_args: Vec<String> = save_ms
        .map(|ms| vec!["--recall-save-ms".to_string(), ms.to_string()])
        .unwrap_or_default();
    let mut bench = BenchCluster::start_with(exe, None, 100_000, false, None, &save_args, ui).await?;
    let ns = Namespace::new(corpus::NAMESPACE).map_err(|e| anyhow!("{e}"))?;
    let leader = client(&bench.leader)?;
    leader
        .apply_schema(&ns, &schema(shape)?, &provenance(), Some("recall-bench-schema"))
        .await
        .context("declaring the corpus's attributes")?;
    let started = Instant::now();
    let (ids, facts, transactions) = load(&leader, &ns, shape, ui).await?;
    let load_secs = started.elapsed().as_secs_f64();
    let entity_of = |d: u64| ids[d as usize];
    let labelled = Arc::new(corpus::queries(shape, TxId(0)));

    // The first search waits for the leader's index to take in the whole load: timed apart.
    let pb = ui.spinner("first search (the leader's index takes in the load)");
    let t = Instant::now();
    let first = labelled.first().context("no queries")?;
    leader
        .search(&search_of(&ns, &first.query))
        .await
        .context("the first search")?;
    let catch_up_secs = t.elapsed().as_secs_f64();
    ui.done(&pb, format!("first search answered in {catch_up_secs:.1} s"));

    let pb = ui.spinner(format!(
        "asking {} labelled queries, four ways, one client",
        labelled.len()
    ));
    let mut quality = serde_json::Map::new();
    let mut by_signal = serde_json::Map::new();
    let known: HashSet<EntityId> = ids.iter().copied().collect();
    for (name, variant) in VARIANTS {
        let mut sum = 0.0;
        let mut times = Vec::with_capacity(labelled.len());
        for l in labelled.iter() {
            let q = search_of(&ns, &variant(&l.query));
            let t = Instant::now();
            let resp = leader
                .search(&q)
                .await
                .with_context(|| format!("a {name} search"))?;
            times.push(t.elapsed());
            let entities: Vec<EntityId> = resp
                .hits
                .iter()
                .filter_map(|h| h.datom.as_ref().map(|d| EntityId(d.entity)))
                .collect();
            if let Some(stranger) = entities.iter().find(|e| !known.contains(e)) {
                bail!(
                    "a {name} search found entity {}, which the load never wrote",
                    stranger.0
                );
            }
            sum += share_found(&entities, &l.relevant.map(entity_of));
        }
        times.sort();
        quality.insert(name.to_string(), json!(sum / labelled.len() as f64));
        by_signal.insert(
            name.to_string(),
            json!({ "p50_ms": percentile_ms(&times, 0.5), "p99_ms": percentile_ms(&times, 0.99) }),
        );
    }
    ui.done(&pb, "asked every query four ways");

    let mut latency = serde_json::Map::new();
    for callers in [1usize, 16] {
        let pb = ui.spinner(format!("full queries from {callers} concurrent clients"));
        let mut tasks = Vec::new();
        for c in 0..callers {
            let (client, ns, labelled) = (client(&bench.leader)?, ns.clone(), labelled.clone());
            tasks.push(tokio::spawn(ask_in_turn(client, ns, labelled, c, callers)));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.context("a search task")??);
        }
        all.sort();
        ui.done(
            &pb,
            format!("{callers} clients: p99 {:.1} ms", percentile_ms(&all, 0.99)),
        );
        latency.insert(
            format!("{callers}"),
            json!({ "p50_ms": percentile_ms(&all, 0.5), "p99_ms": percentile_ms(&all, 0.99), "queries": all.len() }),
        );
    }
    let node_rss: Vec<u64> = bench
        .pids()
        .iter()
        .map(|pid| rss_bytes(&pid.to_string()))
        .collect();
    let restarts = restarts(&mut bench, &ns, labelled.first().context("no queries")?, ui).await?;
    Ok(json!({
        "facts": facts,
        "transactions": transactions,
        "load_secs": load_secs,
        "load_facts_per_sec": facts as f64 / load_secs,
        "first_search_secs": catch_up_secs,
        "node_rss_bytes": node_rss,
        "recall_at_10": quality,
        "latency_by_signal_1_caller": by_signal,
        "latency": latency,
        "restart": restarts,
    }))
}

/// A follower killed and started again twice: once with its recall index's save removed (the
/// index is rebuilt from the whole log), once with the save it wrote since (the index is read
/// from it and fed the log applied after it). Each time: the seconds from the start to the
/// first search answered on that node over everything the cluster applied, and its resident
/// memory then.
async fn restarts(
    bench: &mut BenchCluster,
    ns: &Namespace,
    first: &Labelled,
    ui: Ui,
) -> Result<serde_json::Value> {
    let node = bench
        .cluster
        .nodes()
        .iter()
        .find(|n| n.endpoint() != bench.leader)
        .map(|n| n.id)
        .context("no follower")?;
    let save = bench.cluster.node(node)?.data_dir.join("recall.index");
    let head = client(&bench.leader)?.head().await.context("the head")?.index;
    let query = SearchQuery {
        consistency: Consistency::Stale,
        ..search_of(ns, &first.query)
    };
    let mut out = serde_json::Map::new();
    for (name, keep_save) in [("rebuilt_from_log", false), ("from_save", true)] {
        let pb = ui.spinner(format!("node {node} restarted, its index {name}"));
        if keep_save {
            // A save written after the last start (once a minute by default, `--recall-save-ms`).
            let modified = || std::fs::metadata(&save).and_then(|m| m.modified()).ok();
            let before = modified();
            let deadline = Instant::now() + Duration::from_secs(180);
            while modified().is_none() || modified() == before {
                if Instant::now() > deadline {
                    bail!("node {node} wrote no save of its index within 180 s");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        bench.cluster.kill(node)?;
        let save_bytes = std::fs::metadata(&save).map(|m| m.len()).unwrap_or(0);
        if !keep_save && save.exists() {
            std::fs::remove_file(&save).with_context(|| format!("removing {}", save.display()))?;
        }
        let t = Instant::now();
        bench.cluster.restart(node)?;
        let endpoint = bench.cluster.node(node)?.endpoint();
        let secs = loop {
            if t.elapsed() > REQUEST_TIMEOUT {
                bail!("node {node} answered no search over the whole load within {REQUEST_TIMEOUT:?}");
            }
            let answered = match client(&endpoint) {
                Ok(c) => c.search(&query).await.ok(),
                Err(_) => None,
            };
            if answered.is_some_and(|r| r.applied_tx >= head && !r.hits.is_empty()) {
                break t.elapsed().as_secs_f64();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let rss = bench
            .cluster
            .node(node)?
            .pid()
            .map_or(0, |pid| rss_bytes(&pid.to_string()));
        // Which way the node set its index out: the job log's entry of its start says.
        let from_save_tx = loop {
            let jobs = client(&endpoint)?
                .list_jobs("search-rebuild", 1)
                .await
                .context("the restarted node's job log")?;
            match jobs.jobs.first() {
                Some(j) if j.outcome != "running" => {
                    break j.figures.get("from_save_tx").copied().unwrap_or(0);
                }
                _ if t.elapsed() > REQUEST_TIMEOUT => bail!("node {node}'s first feed never ended"),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        if (from_save_tx > 0) != keep_save {
            bail!("node {node} restarted {name}, but its job log says from_save_tx {from_save_tx}");
        }
        ui.done(
            &pb,
            format!("node {node}, index {name}: first search {secs:.1} s after the start"),
        );
        out.insert(
            name.to_string(),
            json!({
                "first_search_secs": secs,
                "node_rss_bytes": rss,
                "save_bytes": if keep_save { save_bytes } else { 0 },
                "from_save_tx": from_save_tx,
            }),
        );
    }
    Ok(serde_json::Value::Object(out))
}
