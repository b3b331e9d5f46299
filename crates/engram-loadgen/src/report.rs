//! Rounds pooled into rows, and the side-by-side table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::matrix::{Measurement, ReadKind, Workload};

/// One point of one system, its rounds pooled: the median round for the rates and
/// percentiles (robust to one disturbed round), the worst for the maximum, the sum of errors.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub label: String,
    pub clients: usize,
    pub system: String,
    pub rounds: usize,
    pub throughput_per_s: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub server_cpu_us_per_op: f64,
    pub errors: u64,
}

/// The label of a workload in tables and plots.
pub fn label(m: &Measurement) -> String {
    let base = match m.workload {
        Workload::Write { datoms, value_bytes } => format!("write {datoms}x{value_bytes}B"),
        Workload::Read { read } => match read {
            ReadKind::Linearizable => "read linearizable".into(),
            ReadKind::Stale => "read stale".into(),
            ReadKind::AsOf => "read as-of".into(),
            ReadKind::History => "history".into(),
            ReadKind::Proven => "read proven".into(),
            ReadKind::Complete => "read proven complete".into(),
        },
    };
    match m.at_values {
        Some(v) => format!("{base} @{}", short_count(v)),
        None => base,
    }
}

fn short_count(v: u64) -> String {
    if v >= 1_000_000 && v.is_multiple_of(1_000_000) {
        format!("{}M", v / 1_000_000)
    } else if v >= 1_000 && v.is_multiple_of(1_000) {
        format!("{}k", v / 1_000)
    } else {
        v.to_string()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Pools the rounds of each (workload, clients, system), in the order the points first ran.
pub fn rows(measurements: &[Measurement]) -> Vec<Row> {
    let mut order: Vec<(String, usize, String)> = Vec::new();
    let mut groups: BTreeMap<(String, usize, String), Vec<&Measurement>> = BTreeMap::new();
    for m in measurements {
        let key = (label(m), m.clients, m.system.clone());
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(m);
    }
    order
        .into_iter()
        .filter_map(|key| {
            let ms = groups.get(&key)?;
            let pick = |f: fn(&Measurement) -> f64| median(ms.iter().map(|m| f(m)).collect());
            Some(Row {
                label: key.0.clone(),
                clients: key.1,
                system: key.2.clone(),
                rounds: ms.len(),
                throughput_per_s: pick(|m| m.throughput_per_s),
                p50_us: pick(|m| m.latency.p50_us),
                p95_us: pick(|m| m.latency.p95_us),
                p99_us: pick(|m| m.latency.p99_us),
                max_us: ms.iter().map(|m| m.latency.max_us).fold(0.0, f64::max),
                server_cpu_us_per_op: pick(|m| m.server_cpu_us_per_op),
                errors: ms.iter().map(|m| m.errors).sum(),
            })
        })
        .collect()
}

/// The side-by-side table: one line per (workload, clients), each system's figures, and with
/// two or more systems the first one's throughput and p50 as ratios to the second's.
pub fn table(rows: &[Row]) -> String {
    let mut systems: Vec<String> = Vec::new();
    let mut points: Vec<(String, usize)> = Vec::new();
    let mut by: BTreeMap<(String, usize, String), &Row> = BTreeMap::new();
    for r in rows {
        if !systems.contains(&r.system) {
            systems.push(r.system.clone());
        }
        let p = (r.label.clone(), r.clients);
        if !points.contains(&p) {
            points.push(p);
        }
        by.insert((r.label.clone(), r.clients, r.system.clone()), r);
    }
    let mut out = String::new();
    let _ = write!(out, "{:<26} {:>7}", "workload", "clients");
    for s in &systems {
        let _ = write!(
            out,
            " | {:>10} {:>9} {:>9} {:>9} {:>8}",
            format!("{s} ops/s"),
            "p50 ms",
            "p99 ms",
            "max ms",
            "CPU µs"
        );
    }
    if systems.len() >= 2 {
        let _ = write!(out, " | {:>9} {:>9}", "ops ratio", "p50 ratio");
    }
    out.push('\n');
    for (label, clients) in &points {
        let _ = write!(out, "{label:<26} {clients:>7}");
        let mut cells = Vec::new();
        for s in &systems {
            match by.get(&(label.clone(), *clients, s.clone())) {
                Some(r) => {
                    let errs = if r.errors > 0 {
                        format!(" ({} errors)", r.errors)
                    } else {
                        String::new()
                    };
                    let _ = write!(
                        out,
                        " | {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>8.0}{errs}",
                        r.throughput_per_s,
                        r.p50_us / 1000.0,
                        r.p99_us / 1000.0,
                        r.max_us / 1000.0,
                        r.server_cpu_us_per_op
                    );
                    cells.push(Some(*r));
                }
                None => {
                    let _ = write!(out, " | {:>10} {:>9} {:>9} {:>9} {:>8}", "-", "-", "-", "-", "-");
                    cells.push(None);
                }
            }
        }
        if systems.len() >= 2 {
            match (cells[0], cells[1]) {
                (Some(a), Some(b)) if b.throughput_per_s > 0.0 && a.p50_us > 0.0 => {
                    // Both ratios read "higher is better for the first system".
                    let _ = write!(
                        out,
                        " | {:>8.2}x {:>8.2}x",
                        a.throughput_per_s / b.throughput_per_s,
                        b.p50_us / a.p50_us
                    );
                }
                _ => {
                    let _ = write!(out, " | {:>9} {:>9}", "-", "-");
                }
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Latency;

    fn m(system: &str, round: usize, tput: f64, p50: f64) -> Measurement {
        Measurement {
            system: system.into(),
            workload: Workload::Write {
                datoms: 1,
                value_bytes: 100,
            },
            clients: 16,
            round,
            at_values: None,
            ops: tput as u64,
            errors: 0,
            first_error: None,
            window_s: 1.0,
            throughput_per_s: tput,
            latency: Latency {
                p50_us: p50,
                max_us: p50 * 2.0,
                ..Latency::default()
            },
            server_cpu_us_per_op: 10.0,
            client_cpu_us_per_op: 1.0,
        }
    }

    #[test]
    fn rounds_pool_to_their_median_and_ratios_favour_the_first_system() {
        let ms = vec![
            m("a", 0, 100.0, 1000.0),
            m("b", 0, 50.0, 2000.0),
            m("a", 1, 300.0, 3000.0),
            m("b", 1, 50.0, 2000.0),
            m("a", 2, 200.0, 2000.0),
            m("b", 2, 50.0, 2000.0),
        ];
        let rows = rows(&ms);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].system.as_str(), rows[0].rounds), ("a", 3));
        assert_eq!(rows[0].throughput_per_s, 200.0);
        assert_eq!(rows[0].p50_us, 2000.0);
        assert_eq!(rows[0].max_us, 6000.0);
        let t = table(&rows);
        assert!(t.contains("write 1x100B"), "{t}");
        // 200 / 50 = 4x the throughput; p50 2 ms vs 2 ms = 1x.
        assert!(t.contains("4.00x") && t.contains("1.00x"), "{t}");
    }

    #[test]
    fn store_sizes_are_part_of_the_label() {
        let mut x = m("a", 0, 1.0, 1.0);
        x.workload = Workload::Read { read: ReadKind::AsOf };
        x.at_values = Some(10_000_000);
        assert_eq!(label(&x), "read as-of @10M");
    }
}
