//! `engram metrics`: each node's metrics (`Cluster.Metrics`), at a glance (the figures the
//! console's cluster page shows) or as the Prometheus text the node's `/metrics` port serves.

use anyhow::Result;
use engram_client::{Client, ClientError, code_name, pb};
use serde_json::{Value as Json, json};

use crate::cli::MetricsArgs;
use crate::common::{Reported, agent_probe_of, each_node, unanswered_json};
use crate::output::{Table, out, outln, print_json};

/// How a figure of the glance is written.
#[derive(Clone, Copy)]
enum Unit {
    Count,
    Seconds,
    Bytes,
}

/// The figures of [`engram_console::glance::glance`], in the order they are printed.
const FIGURES: &[(&str, &str, Unit)] = &[
    ("requests", "calls", Unit::Count),
    ("requests_failed", "calls failed", Unit::Count),
    ("request_p99_seconds", "call p99", Unit::Seconds),
    ("log_sync_p99_seconds", "log sync p99", Unit::Seconds),
    ("store_bytes", "store", Unit::Bytes),
    ("watches_open", "watches open", Unit::Count),
    ("watch_lag_entries", "watch lag (entries)", Unit::Count),
    ("search_lag_entries", "search lag (entries)", Unit::Count),
    ("storage_corruptions", "storage corruptions", Unit::Count),
    ("jobs_failed", "jobs failed", Unit::Count),
];

/// Asks every endpoint at once (one attempt each, signed as the caller's agent: metrics need
/// read on `engram.system` in enforced mode) and prints what each answered; fails, after
/// printing, when one did not answer.
pub async fn metrics(client: &Client, args: MetricsArgs, json: bool) -> Result<()> {
    let endpoints = client.endpoints();
    let answers = each_node(
        &agent_probe_of(client)?,
        |node| async move { node.metrics().await },
    )
    .await;
    if json {
        let nodes: Vec<Json> = endpoints
            .iter()
            .zip(&answers)
            .map(|(endpoint, answer)| match answer {
                Ok(m) => {
                    let mut doc = json!({
                        "endpoint": endpoint,
                        "node_id": m.node_id,
                        "metrics": engram_console::glance::glance(&m.text),
                    });
                    if args.raw {
                        doc["text"] = json!(m.text);
                    }
                    doc
                }
                Err(e) => unanswered_json(endpoint, e),
            })
            .collect();
        print_json(&json!({ "nodes": nodes }))?;
    } else if args.raw {
        for (endpoint, answer) in endpoints.iter().zip(&answers) {
            // Comment lines: the whole output stays valid exposition text.
            match answer {
                Ok(m) => out!("# node {} ({endpoint})\n{}", m.node_id, m.text)?,
                Err(e) => outln!("# {endpoint}: {}", e.message().unwrap_or("no answer"))?,
            }
        }
    } else {
        out!("{}", glance_table(&endpoints, &answers))?;
        outln!(
            "Totals since each node started; a p99 is the upper bound of the histogram bucket that \
             holds it. `--raw` prints every series."
        )?;
        for (endpoint, answer) in endpoints.iter().zip(&answers) {
            if let Err(e) = answer {
                outln!("{endpoint}: {}", e.message().unwrap_or("no answer"))?;
            }
        }
    }
    unanswered(&endpoints, &answers)
}

/// One column per node, one row per figure.
fn glance_table(endpoints: &[String], answers: &[Result<pb::MetricsResponse, ClientError>]) -> String {
    let header: Vec<String> = std::iter::once(String::new())
        .chain(
            endpoints
                .iter()
                .zip(answers)
                .map(|(endpoint, answer)| match answer {
                    Ok(m) => format!("NODE {}", m.node_id),
                    Err(_) => endpoint.clone(),
                }),
        )
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let glances: Vec<Result<Json, String>> = answers
        .iter()
        .map(|answer| match answer {
            Ok(m) => Ok(engram_console::glance::glance(&m.text)),
            // A short word in the table; the whole message below it.
            Err(e) => Err(e
                .code()
                .map(|c| code_name(c).to_lowercase())
                .unwrap_or_else(|| "unreachable".into())),
        })
        .collect();
    let mut table = Table::new(&header);
    for (key, label, unit) in FIGURES {
        let mut row = vec![label.to_string()];
        for glance in &glances {
            row.push(match glance {
                Ok(g) => figure(&g[*key], *unit),
                Err(word) => word.clone(),
            });
        }
        table.row(row);
    }
    table.render()
}

/// A figure as the table writes it: "-" where the node reports none.
fn figure(value: &Json, unit: Unit) -> String {
    if let Some(text) = value.as_str() {
        return text.to_string();
    }
    let Some(v) = value.as_f64() else {
        return "-".into();
    };
    match unit {
        Unit::Count => format!("{v:.0}"),
        Unit::Seconds if v < 1.0 => format!("{} ms", trimmed(v * 1e3)),
        Unit::Seconds => format!("{} s", trimmed(v)),
        Unit::Bytes => {
            let mut scaled = v;
            let mut unit = "B";
            for next in ["KiB", "MiB", "GiB", "TiB"] {
                if scaled < 1024.0 {
                    break;
                }
                scaled /= 1024.0;
                unit = next;
            }
            format!("{} {unit}", trimmed(scaled))
        }
    }
}

/// At most one decimal, none when it is 0 (bucket bounds are round: 2.5 ms, 10 ms, 1 s).
fn trimmed(v: f64) -> String {
    let text = format!("{v:.1}");
    text.strip_suffix(".0").map(str::to_string).unwrap_or(text)
}

fn unanswered(endpoints: &[String], answers: &[Result<pb::MetricsResponse, ClientError>]) -> Result<()> {
    let failed: Vec<String> = endpoints
        .iter()
        .zip(answers)
        .filter_map(|(_, answer)| answer.as_ref().err().map(ToString::to_string))
        .collect();
    match failed.first() {
        None => Ok(()),
        Some(first) => Err(Reported(format!(
            "{} of {} endpoints did not answer ({first})",
            failed.len(),
            endpoints.len()
        ))
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_written_in_their_units() {
        assert_eq!(figure(&json!(1234.0), Unit::Count), "1234");
        assert_eq!(figure(&json!(0.0025), Unit::Seconds), "2.5 ms");
        assert_eq!(figure(&json!(0.01), Unit::Seconds), "10 ms");
        assert_eq!(figure(&json!(2.5), Unit::Seconds), "2.5 s");
        assert_eq!(figure(&json!(512.0), Unit::Bytes), "512 B");
        assert_eq!(figure(&json!(3.5 * 1024.0 * 1024.0), Unit::Bytes), "3.5 MiB");
        assert_eq!(figure(&Json::Null, Unit::Count), "-", "absent, not 0");
        assert_eq!(
            figure(&json!("over the last bucket"), Unit::Seconds),
            "over the last bucket"
        );
    }

    #[test]
    fn every_figure_printed_is_one_the_glance_gives() {
        let glance = engram_console::glance::glance("");
        let keys: Vec<&String> = glance.as_object().expect("an object").keys().collect();
        for (key, ..) in FIGURES {
            assert!(
                keys.iter().any(|k| k == key),
                "{key} is not in the glance: {keys:?}"
            );
        }
        assert_eq!(keys.len(), FIGURES.len(), "every figure of the glance is printed");
    }

    #[test]
    fn the_table_has_a_column_per_node_and_names_the_one_that_did_not_answer() {
        let endpoints = vec!["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()];
        let answers = vec![
            Ok(pb::MetricsResponse {
                node_id: 7,
                text: "engram_store_bytes{node_id=\"7\",space=\"log\"} 2048\n".into(),
            }),
            Err(ClientError::Rpc {
                endpoint: "127.0.0.1:2".into(),
                code: tonic::Code::Unavailable,
                message: "connection refused".into(),
                attempts: 1,
                transient: true,
            }),
        ];
        let table = glance_table(&endpoints, &answers);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("NODE 7") && lines[0].contains("127.0.0.1:2"),
            "{table}"
        );
        let store = lines
            .iter()
            .find(|l| l.starts_with("store"))
            .expect("a store row");
        assert!(
            store.contains("2 KiB") && store.contains("unavailable"),
            "{table}"
        );
        let calls = lines
            .iter()
            .find(|l| l.starts_with("calls "))
            .expect("a calls row");
        assert!(
            calls.contains(" - "),
            "a figure the node does not report is '-': {table}"
        );
        assert_eq!(lines.len(), 1 + FIGURES.len());
        let err = unanswered(&endpoints, &answers).unwrap_err().to_string();
        assert!(
            err.starts_with("1 of 2 endpoints did not answer (127.0.0.1:2: UNAVAILABLE"),
            "{err}"
        );
    }
}
