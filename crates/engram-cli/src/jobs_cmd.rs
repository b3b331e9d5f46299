//! `engram jobs`: each node's job log (`Cluster.ListJobs`), the background work it ran.

use anyhow::{Context, Result, anyhow};
use engram_client::Client;
use engram_proto::pb;
use serde_json::{Value as Json, json};

use crate::cli::JobsArgs;
use crate::output::{Table, format_time_ns, outln, print_json};

/// Lists the jobs of every endpoint, each node's newest first.
pub async fn jobs(client: &Client, endpoints: &[String], args: JobsArgs, json: bool) -> Result<()> {
    let kind = args.kind.unwrap_or_default();
    let mut docs = Vec::new();
    for (i, endpoint) in endpoints.iter().enumerate() {
        let node = client
            .node(i)
            .ok_or_else(|| anyhow!("no client for endpoint {endpoint}"))?;
        let resp = node
            .list_jobs(&kind, args.limit)
            .await
            .with_context(|| format!("reading the job log of {endpoint}"))?;
        if json {
            docs.push(json!({
                "endpoint": endpoint,
                "node_id": resp.node_id,
                "jobs": resp.jobs.iter().map(job_json).collect::<Vec<_>>(),
            }));
            continue;
        }
        outln!("node {} ({endpoint}): {} jobs", resp.node_id, resp.jobs.len())?;
        if resp.jobs.is_empty() {
            continue;
        }
        let mut table = Table::new(&["SEQ", "KIND", "OUTCOME", "STARTED", "TOOK", "SUBJECT", "FIGURES"]);
        for job in &resp.jobs {
            table.row(vec![
                job.seq.to_string(),
                job.kind.clone(),
                match job.error.as_str() {
                    "" => job.outcome.clone(),
                    why => format!("{}: {why}", job.outcome),
                },
                format_time_ns(job.started_ns),
                took(job),
                job.subject.clone(),
                figures(job),
            ]);
        }
        outln!("{}", table.render().trim_end())?;
    }
    if json {
        return print_json(&json!({ "nodes": docs }));
    }
    Ok(())
}

fn job_json(job: &pb::JobInfo) -> Json {
    json!({
        "seq": job.seq,
        "kind": job.kind,
        "subject": job.subject,
        "started_ns": job.started_ns,
        "ended_ns": (job.ended_ns != 0).then_some(job.ended_ns),
        "outcome": job.outcome,
        "error": (!job.error.is_empty()).then_some(&job.error),
        "figures": job.figures,
    })
}

/// How long a finished job took; "-" for one that has no end.
fn took(job: &pb::JobInfo) -> String {
    if job.ended_ns == 0 {
        return "-".into();
    }
    let ms = (job.ended_ns - job.started_ns).max(0) as f64 / 1e6;
    if ms < 1_000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1_000.0)
    }
}

fn figures(job: &pb::JobInfo) -> String {
    let mut pairs: Vec<(&String, &u64)> = job.figures.iter().collect();
    pairs.sort();
    pairs
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
