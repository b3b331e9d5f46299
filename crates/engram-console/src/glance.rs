//! A node's metrics at a glance: the few figures an operator looks at first, taken from the
//! Prometheus text a node answers `Cluster.Metrics` with. Counters and histograms are totals
//! since the node started (one reading has no rate); a quantile is read from the cumulative
//! buckets the way Prometheus' `histogram_quantile` reads them (the upper bound of the first
//! bucket holding the rank), so it names the bucket, not an interpolated value.

use serde_json::{Value as Json, json};

/// One sample line: its metric name, labels and value.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of `text`; comment lines and lines that do not parse are passed over (the
/// figures below then read as absent, never as a wrong number).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(sample)
        .collect()
}

fn sample(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match series.split_once('{') {
        None => (series, Vec::new()),
        Some((name, rest)) => (name, labels(rest.strip_suffix('}')?)?),
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `k="v",k="v"` (values escaped as the format escapes them: `\"`, `\\`, `\n`).
fn labels(mut rest: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        out.push((key.to_string(), value));
        rest = after[end + 1..].strip_prefix(',').unwrap_or(&after[end + 1..]);
    }
    Some(out)
}

/// The sum of every sample named `name` that `keep` lets through; `None` when there is none.
fn sum(samples: &[Sample], name: &str, keep: impl Fn(&Sample) -> bool) -> Option<f64> {
    let mut found = false;
    let total = samples
        .iter()
        .filter(|s| s.name == name && keep(s))
        .inspect(|_| found = true)
        .map(|s| s.value)
        .sum();
    found.then_some(total)
}

/// The `q` quantile of histogram `family`, every label set added together: the upper bound of
/// the first bucket whose cumulative count reaches `q` of the total. `None` without samples;
/// `Some(INFINITY)` when the rank falls past the last finite bound.
fn quantile(samples: &[Sample], family: &str, q: f64) -> Option<f64> {
    let bucket = format!("{family}_bucket");
    let mut bounds: Vec<(f64, f64)> = Vec::new();
    for s in samples.iter().filter(|s| s.name == bucket) {
        let le = match s.label("le")? {
            "+Inf" => f64::INFINITY,
            v => v.parse().ok()?,
        };
        match bounds.iter_mut().find(|(b, _)| *b == le) {
            Some((_, n)) => *n += s.value,
            None => bounds.push((le, s.value)),
        }
    }
    bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = bounds.last()?.1;
    if total <= 0.0 {
        return None;
    }
    bounds.iter().find(|(_, n)| *n >= q * total).map(|(le, _)| *le)
}

/// What the console's cluster page and `engram metrics` show of one node's metrics.
pub fn glance(text: &str) -> Json {
    let s = samples(text);
    let any = |_: &Sample| true;
    let seconds = |v: Option<f64>| match v {
        Some(v) if v.is_infinite() => json!("over the last bucket"),
        Some(v) => json!(v),
        None => Json::Null,
    };
    json!({
        "requests": sum(&s, "engram_rpc_requests_total", any),
        "requests_failed": sum(&s, "engram_rpc_requests_total", |x| x.label("code") != Some("OK")),
        "request_p99_seconds": seconds(quantile(&s, "engram_rpc_duration_seconds", 0.99)),
        "log_sync_p99_seconds": seconds(quantile(&s, "engram_log_sync_seconds", 0.99)),
        "store_bytes": sum(&s, "engram_store_bytes", any),
        "watches_open": sum(&s, "engram_watches_open", any),
        "watch_lag_entries": sum(&s, "engram_watch_lag_entries", any),
        "search_lag_entries": sum(&s, "engram_recall_index_lag_entries", any),
        "storage_corruptions": sum(&s, "engram_storage_corruption_total", any),
        "jobs_failed": sum(&s, "engram_jobs_total", |x| x.label("outcome") == Some("failed")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP engram_rpc_requests_total Client calls.
# TYPE engram_rpc_requests_total counter
engram_rpc_requests_total{node_id="1",method="Get",code="OK"} 90
engram_rpc_requests_total{node_id="1",method="Get",code="NOT_FOUND"} 6
engram_rpc_requests_total{node_id="1",method="Transact",code="OK"} 4
engram_rpc_duration_seconds_bucket{node_id="1",method="Get",le="0.001"} 50
engram_rpc_duration_seconds_bucket{node_id="1",method="Get",le="0.01"} 95
engram_rpc_duration_seconds_bucket{node_id="1",method="Get",le="+Inf"} 96
engram_rpc_duration_seconds_bucket{node_id="1",method="Transact",le="0.001"} 0
engram_rpc_duration_seconds_bucket{node_id="1",method="Transact",le="0.01"} 1
engram_rpc_duration_seconds_bucket{node_id="1",method="Transact",le="+Inf"} 4
engram_store_bytes{node_id="1",space="log"} 1000
engram_store_bytes{node_id="1",space="state"} 24
engram_watch_lag_entries{node_id="1"} 0
engram_jobs_total{node_id="1",kind="backup",outcome="done"} 2
engram_jobs_total{node_id="1",kind="retention",outcome="failed"} 1
odd{node_id="1",broken="no closing quote} 5
"#;

    #[test]
    fn figures_are_added_over_labels_and_a_quantile_names_its_bucket() {
        let g = glance(TEXT);
        assert_eq!(g["requests"], json!(100.0));
        assert_eq!(g["requests_failed"], json!(6.0));
        // 100 calls: 50 within 1 ms, 96 within 10 ms; the 99th is past the last finite bound.
        assert_eq!(g["request_p99_seconds"], json!("over the last bucket"));
        assert_eq!(g["store_bytes"], json!(1024.0));
        assert_eq!(g["watch_lag_entries"], json!(0.0));
        assert_eq!(g["jobs_failed"], json!(1.0));
        assert_eq!(g["watches_open"], Json::Null, "absent, not 0");
        assert_eq!(g["log_sync_p99_seconds"], Json::Null);
    }

    #[test]
    fn a_quantile_within_the_buckets_is_the_bucket_bound() {
        let s = samples(TEXT);
        assert_eq!(quantile(&s, "engram_rpc_duration_seconds", 0.5), Some(0.001));
        assert_eq!(quantile(&s, "engram_rpc_duration_seconds", 0.9), Some(0.01));
    }

    #[test]
    fn labels_are_read_with_their_escapes() {
        let s = sample(r#"m{a="x\"y",b="1\\2"} 3"#).unwrap();
        assert_eq!(s.label("a"), Some("x\"y"));
        assert_eq!(s.label("b"), Some("1\\2"));
        assert_eq!(s.value, 3.0);
        assert_eq!(sample(r#"m{a="open} 3"#), None, "an unclosed value is no sample");
        assert_eq!(sample("m 2").map(|s| s.value), Some(2.0));
    }
}
