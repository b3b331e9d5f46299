//! CPU time and resident memory of processes, read from `/proc/<pid>/stat` and `statm`.

use std::fs;

/// `/proc` reports CPU time in clock ticks of `USER_HZ`, which Linux fixes at 100 per second in
/// its user-space ABI on every mainstream architecture (`getconf CLK_TCK`).
const TICKS_PER_S: f64 = 100.0;

/// User + system CPU seconds that process `pid` has used so far (`None` if it is gone or
/// `/proc` is unavailable).
pub fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces; fields are counted
    // after its closing parenthesis, where field 3 (the state) comes first.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_S)
}

/// Resident memory of process `pid` in bytes (`None` if it is gone or `/proc` is unavailable).
fn resident_bytes_of(pid: u32) -> Option<u64> {
    let statm = fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    // Field 2 is the resident set in pages; the bench runs on Linux with 4 KiB pages (x86-64,
    // and arm64 as Debian builds it).
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Resident memory of a set of processes together, in bytes (what is still readable).
pub fn resident_bytes(pids: &[u32]) -> u64 {
    pids.iter().filter_map(|p| resident_bytes_of(*p)).sum()
}

/// CPU used by a set of processes between [`CpuMeter::start`] and [`CpuMeter::seconds`].
#[derive(Clone, Debug)]
pub struct CpuMeter {
    pids: Vec<u32>,
    start_s: f64,
}

impl CpuMeter {
    pub fn start(pids: &[u32]) -> CpuMeter {
        CpuMeter {
            pids: pids.to_vec(),
            start_s: total(pids),
        }
    }

    /// CPU seconds the processes used since `start`. A process that exited in between makes
    /// the figure low, not wrong in sign: it counts what is still readable.
    pub fn seconds(&self) -> f64 {
        (total(&self.pids) - self.start_s).max(0.0)
    }
}

fn total(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| cpu_seconds_of(*p)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_cpu_while_it_spins() {
        let me = std::process::id();
        let meter = CpuMeter::start(&[me]);
        let before = cpu_seconds_of(me).expect("own /proc/self/stat is readable");
        // Spin for 200 ms of wall time; at least a tick of CPU must show.
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        assert!(cpu_seconds_of(me).expect("readable") > before);
        assert!(meter.seconds() >= 0.01, "{} s", meter.seconds());
    }

    #[test]
    fn a_missing_process_reads_as_none() {
        assert_eq!(cpu_seconds_of(u32::MAX), None);
    }
}
