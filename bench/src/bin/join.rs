//! `join`: a 3-clause join query over about a million datoms on a real 3-node cluster
//! (`engram serve` processes on loopback), at 1 and 16 clients, for docs/benchmarks.md,
//! "Joins".
//!
//! Loads `--agents` agents (a team of ten each: `:agent/team`, `:agent/name`) and `--tasks`
//! tasks of four datoms (`:task/owner`, a reference to an agent; `:task/status`, open or done
//! by turns; `:task/title`; `:task/priority`): with the defaults 2,000 + 1,000,000 datoms.
//! Then each client asks, over and over for `--seconds`, for the open tasks of one team (the
//! teams in turn) with their titles:
//!
//! ```text
//! find ?task ?title where [?a :agent/team "team-N"] [?task :task/owner ?a]
//!                         [?task :task/status :status/open] [?task :task/title ?title]
//! ```
//!
//! (three clauses that join, and one that reads the answer's titles). Reported per client
//! count: queries per second, p50 and p99 latency, rows per answer and rows read per answer,
//! and the plan the server ran. Every answer's row count is checked against what the load
//! wrote, so a wrong answer fails the bench (exit 1) rather than a fast one.
//!
//! Usage: `join [--engram-bin PATH] [--agents N] [--tasks N] [--seconds N] [--clients LIST]
//! [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use engram_bench::args::positive;
use engram_bench::engram::BenchCluster;
use engram_bench::process::engram_exe;
use engram_cli::ui::Ui;
use engram_client::{Client, ClientConfig, Join};
use engram_types::query::{Clause, EntityTerm, Query, ValueTerm, Variable};
use engram_types::{
    Attribute, EntityId, EntityRef, Namespace, Op, Provenance, Status, TxOp, TxRequest, Value,
};
use serde_json::json;

const USAGE: &str =
    "usage: join [--engram-bin PATH] [--agents N] [--tasks N] [--seconds N] [--clients LIST] [--json]";
/// Agents per team.
const TEAM: u64 = 10;
/// Tasks per loading transaction (four datoms each).
const TASKS_PER_TX: u64 = 2_000;

struct Args {
    engram_bin: Option<PathBuf>,
    agents: u64,
    tasks: u64,
    seconds: u64,
    clients: Vec<u64>,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        engram_bin: None,
        agents: 1_000,
        tasks: 250_000,
        seconds: 10,
        clients: vec![1, 16],
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut number = |name: &str| positive(&mut it, name, USAGE);
        match a.as_str() {
            "--engram-bin" => {
                args.engram_bin = Some(PathBuf::from(it.next().ok_or_else(|| USAGE.to_string())?))
            }
            "--agents" => args.agents = number("--agents")?,
            "--tasks" => args.tasks = number("--tasks")?,
            "--seconds" => args.seconds = number("--seconds")?,
            "--clients" => {
                let list = it.next().ok_or_else(|| USAGE.to_string())?;
                args.clients = list
                    .split(',')
                    .map(|c| c.trim().parse::<u64>().ok().filter(|n| *n > 0))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format!("--clients: {list:?} is not a list of positive numbers"))?;
            }
            "--json" => args.json = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if args.agents < TEAM {
        return Err(format!("--agents: at least {TEAM} (one team)"));
    }
    Ok(args)
}

fn provenance() -> Provenance {
    Provenance {
        agent: "join-bench".to_string(),
        confidence: 1.0,
        status: Status::Verified,
        ..Provenance::default()
    }
}

fn attr(name: &str) -> Result<Attribute> {
    Attribute::new(name).map_err(|e| anyhow!("{name}: {e}"))
}

fn assert_op(entity: EntityRef, attribute: &Attribute, value: Value) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity,
        attribute: attribute.clone(),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

/// Writes the agents and the tasks; task `i` is owned by agent `i % agents` and open when `i`
/// is even. Returns the agents' ids.
async fn load(client: &Client, ns: &Namespace, args: &Args, ui: &Ui) -> Result<Vec<EntityId>> {
    let (team, name) = (attr(":agent/team")?, attr(":agent/name")?);
    let mut agents = Vec::new();
    for chunk in (0..args.agents).collect::<Vec<_>>().chunks(2_000) {
        let ops = chunk
            .iter()
            .flat_map(|a| {
                let e = EntityRef::Temp(format!("a{a}"));
                [
                    assert_op(e.clone(), &team, Value::String(format!("team-{}", a / TEAM))),
                    assert_op(e, &name, Value::String(format!("agent {a}"))),
                ]
            })
            .collect();
        let receipt = client
            .transact(&TxRequest::data(ns.clone(), ops, provenance()))
            .await
            .context("loading agents")?;
        for a in chunk {
            let id = receipt
                .temp_ids
                .get(&format!("a{a}"))
                .ok_or_else(|| anyhow!("the receipt names no id for agent {a}"))?;
            agents.push(EntityId(*id));
        }
    }
    let (owner, status, title, priority) = (
        attr(":task/owner")?,
        attr(":task/status")?,
        attr(":task/title")?,
        attr(":task/priority")?,
    );
    let pb = ui.bar(
        args.tasks,
        "{msg} [{bar:30}] {pos}/{len} ({per_sec})",
        "loading tasks",
    );
    let mut next = 0;
    while next < args.tasks {
        let end = (next + TASKS_PER_TX).min(args.tasks);
        let ops = (next..end)
            .flat_map(|i| {
                let e = EntityRef::Temp(format!("t{i}"));
                let open = if i % 2 == 0 {
                    ":status/open"
                } else {
                    ":status/done"
                };
                [
                    assert_op(e.clone(), &owner, Value::Ref(agents[(i % args.agents) as usize])),
                    assert_op(e.clone(), &status, Value::Keyword(open.into())),
                    assert_op(e.clone(), &title, Value::String(format!("task {i}"))),
                    assert_op(e, &priority, Value::I64((i % 5) as i64)),
                ]
            })
            .collect();
        client
            .transact(&TxRequest::data(ns.clone(), ops, provenance()))
            .await
            .context("loading tasks")?;
        pb.inc(end - next);
        next = end;
    }
    ui.done(&pb, "loaded");
    Ok(agents)
}

/// The open tasks of `team`, with their titles.
fn open_tasks_of(team: u64) -> Result<Query> {
    let var = |v: &str| Variable::new(v).map_err(|e| anyhow!("{v}: {e}"));
    let clause = |e: EntityTerm, a: &str, v: ValueTerm| -> Result<Clause> {
        Ok(Clause {
            entity: e,
            attribute: attr(a)?,
            value: v,
        })
    };
    Query::new(
        vec![var("?task")?, var("?title")?],
        vec![
            clause(
                EntityTerm::Var(var("?a")?),
                ":agent/team",
                ValueTerm::Value(Value::String(format!("team-{team}"))),
            )?,
            clause(
                EntityTerm::Var(var("?task")?),
                ":task/owner",
                ValueTerm::Var(var("?a")?),
            )?,
            clause(
                EntityTerm::Var(var("?task")?),
                ":task/status",
                ValueTerm::Value(Value::Keyword(":status/open".into())),
            )?,
            clause(
                EntityTerm::Var(var("?task")?),
                ":task/title",
                ValueTerm::Var(var("?title")?),
            )?,
        ],
    )
    .map_err(|e| anyhow!("{e}"))
}

/// The open tasks the load gave `team`.
fn expected_rows(args: &Args, team: u64) -> u64 {
    let members = (team * TEAM)..((team + 1) * TEAM).min(args.agents);
    (0..args.tasks)
        .filter(|i| i % 2 == 0 && members.contains(&(i % args.agents)))
        .count() as u64
}

struct Sample {
    latency: Duration,
    rows: u64,
    rows_read: u64,
}

async fn client_loop(
    client: Client,
    ns: Namespace,
    args_teams: u64,
    first: u64,
    until: Instant,
    expected: Vec<u64>,
) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    let mut team = first % args_teams;
    while Instant::now() < until {
        let join = Join::new(ns.clone(), open_tasks_of(team)?);
        let started = Instant::now();
        let answer = client.query(&join).await.context("a join")?;
        let latency = started.elapsed();
        let rows = answer.rows.len() as u64;
        if rows != expected[team as usize] {
            bail!(
                "team-{team}: {rows} rows, the load wrote {} open tasks for it",
                expected[team as usize]
            );
        }
        out.push(Sample {
            latency,
            rows,
            rows_read: answer.rows_read,
        });
        team = (team + 1) % args_teams;
    }
    Ok(out)
}

async fn run(args: &Args) -> Result<serde_json::Value> {
    let ui = Ui::new(args.json);
    let exe = engram_exe(args.engram_bin.clone()).map_err(|e| anyhow!(e))?;
    let bench = BenchCluster::start(&exe, None, 100_000, false, None, ui).await?;
    let config = ClientConfig {
        request_timeout: Duration::from_secs(120),
        ..ClientConfig::default()
    };
    let client = Client::with_config(vec![bench.leader.clone()], config.clone())?;
    let ns = Namespace::new("bench/join").map_err(|e| anyhow!("{e}"))?;
    let started = Instant::now();
    load(&client, &ns, args, &ui).await?;
    let load_secs = started.elapsed().as_secs_f64();
    let teams = args.agents.div_ceil(TEAM);
    let expected: Vec<u64> = (0..teams).map(|t| expected_rows(args, t)).collect();
    let mut explain = Join::new(ns.clone(), open_tasks_of(0)?);
    explain.explain = true;
    let plan = client.query(&explain).await.context("the plan")?.plan;
    let mut points = Vec::new();
    for &clients in &args.clients {
        let pb = ui.spinner(format!("{clients} clients, {} s", args.seconds));
        let until = Instant::now() + Duration::from_secs(args.seconds);
        let mut tasks = Vec::new();
        for c in 0..clients {
            let client = Client::with_config(vec![bench.leader.clone()], config.clone())?;
            tasks.push(tokio::spawn(client_loop(
                client,
                ns.clone(),
                teams,
                c * 7,
                until,
                expected.clone(),
            )));
        }
        let mut samples = Vec::new();
        for t in tasks {
            samples.extend(t.await.context("a client task")??);
        }
        ui.done(&pb, "done");
        let mut ms: Vec<f64> = samples.iter().map(|s| s.latency.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let at = |p: f64| {
            ms.get((((ms.len().max(1) - 1) as f64) * p).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        let n = samples.len().max(1) as f64;
        points.push(json!({
            "clients": clients,
            "queries": samples.len(),
            "queries_per_sec": samples.len() as f64 / args.seconds as f64,
            "p50_ms": at(0.5),
            "p99_ms": at(0.99),
            "rows_per_answer": samples.iter().map(|s| s.rows).sum::<u64>() as f64 / n,
            "rows_read_per_answer": samples.iter().map(|s| s.rows_read).sum::<u64>() as f64 / n,
        }));
    }
    Ok(json!({
        "datoms": args.agents * 2 + args.tasks * 4,
        "agents": args.agents,
        "tasks": args.tasks,
        "load_secs": load_secs,
        "plan": plan.iter().map(|s| json!({
            "clause": s.clause, "access": s.access, "rows_read": s.rows_read, "rows_out": s.rows_out,
        })).collect::<Vec<_>>(),
        "points": points,
    }))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args).await {
        Ok(report) if args.json => {
            println!("{report:#}");
            ExitCode::SUCCESS
        }
        Ok(report) => {
            println!(
                "join over {} datoms (loaded in {:.1} s); plan: {}",
                report["datoms"],
                report["load_secs"].as_f64().unwrap_or(0.0),
                report["plan"]
            );
            println!("clients  queries/s     p50 ms     p99 ms   rows/answer   rows read/answer");
            for p in report["points"].as_array().into_iter().flatten() {
                println!(
                    "{:>7}  {:>9.1}  {:>9.2}  {:>9.2}  {:>12.0}  {:>17.0}",
                    p["clients"],
                    p["queries_per_sec"].as_f64().unwrap_or(0.0),
                    p["p50_ms"].as_f64().unwrap_or(0.0),
                    p["p99_ms"].as_f64().unwrap_or(0.0),
                    p["rows_per_answer"].as_f64().unwrap_or(0.0),
                    p["rows_read_per_answer"].as_f64().unwrap_or(0.0),
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("join: {e:#}");
            ExitCode::FAILURE
        }
    }
}
