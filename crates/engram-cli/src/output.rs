//! Human output: aligned tables and readable times. Machine output is `--json`, built by each
//! command with `serde_json`.
//!
//! Everything written to stdout goes through [`out!`](crate::output::out) and
//! [`outln!`](crate::output::outln), never `print!`: the reader may close the pipe early
//! (`engram audit verify FILE | head -1`), and `print!` panics on that. These return
//! [`StdoutClosed`] instead, which ends the command quietly with exit 0.

use std::fmt;
use std::io::{ErrorKind, Write};

use engram_proto::pb;

use crate::txjson;

/// Stdout's reader went away (a closed pipe): not a failure of the command, which stops
/// writing and exits 0 without a message.
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// Whether `err` is, or was caused by, [`StdoutClosed`].
pub fn is_stdout_closed(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.is::<StdoutClosed>())
}

/// Writes `args` to stdout; a closed pipe is [`StdoutClosed`], not a panic.
pub fn write_stdout(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    match std::io::stdout().lock().write_fmt(args) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// `print!` to stdout that returns an error (see [`write_stdout`]) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` to stdout that returns an error (see [`write_stdout`]) instead of panicking.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

/// A table printed with columns padded to their widest cell.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate().take(cols) {
                if i + 1 == cols {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Shortens `s` to at most `max` characters, marking the cut.
pub fn ellipsize(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `1 datom`, `2 datoms`.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The first 16 hex digits of a hash: enough to tell entries apart by eye.
pub fn short_hash(bytes: &[u8]) -> String {
    let full = hex::encode(bytes);
    if full.is_empty() {
        "-".into()
    } else {
        full.chars().take(16).collect()
    }
}

/// Nanoseconds since the Unix epoch as UTC `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_time_ns(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let millis = ns.rem_euclid(1_000_000_000) / 1_000_000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day); H. Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Datoms as a table: one row per datom.
pub fn datom_table(datoms: &[pb::Datom]) -> String {
    if datoms.is_empty() {
        return "  (none)\n".to_string();
    }
    let mut t = Table::new(&[
        "ENTITY",
        "ATTRIBUTE",
        "VALUE",
        "OP",
        "TX",
        "VALID FROM",
        "AGENT",
        "CONF",
        "STATUS",
        "HASH",
    ]);
    for d in datoms {
        let prov = d.provenance.clone().unwrap_or_default();
        t.row(vec![
            d.entity.to_string(),
            d.attribute.clone(),
            if d.redacted_by_tx != 0 {
                format!("[forgotten by tx {}]", d.redacted_by_tx)
            } else if d.redacted.is_empty() {
                ellipsize(&txjson::pb_value_to_text(d.value.as_ref()), 60)
            } else {
                "[redacted]".to_string()
            },
            txjson::datom_op_name(d).into(),
            d.tx.to_string(),
            match d.valid_to_ns {
                Some(to) => format!("{}..{}", format_time_ns(d.valid_from_ns), format_time_ns(to)),
                None => format_time_ns(d.valid_from_ns),
            },
            ellipsize(&prov.agent, 24),
            format!("{:.2}", prov.confidence),
            txjson::datom_status_name(d).into(),
            short_hash(&d.hash),
        ]);
    }
    t.render()
}

/// Prints a JSON document, pretty, on stdout.
pub fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    // Serialising a `serde_json::Value` cannot fail; fall back to its Display just in case.
    outln!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_render_in_utc() {
        assert_eq!(format_time_ns(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_time_ns(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            format_time_ns(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(format_time_ns(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn tables_align_and_cells_are_shortened() {
        let mut t = Table::new(&["A", "LONGER"]);
        t.row(vec!["wide cell".into(), "x".into()]);
        assert_eq!(t.render(), "A          LONGER\nwide cell  x\n");
        assert_eq!(ellipsize("abcdef", 4), "abc…");
        assert_eq!(ellipsize("abc", 4), "abc");
        assert_eq!(short_hash(&[0xab; 32]), "abababababababab");
    }
}
