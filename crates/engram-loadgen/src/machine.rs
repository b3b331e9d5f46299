//! What machine a report was measured on.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    /// The 1-minute load average when the report was made: anything else running lowers
    /// every figure.
    pub load_average_1m: f64,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let load_average_1m = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0.0);
        Machine {
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            cpu_model,
            memory_gib: memory_kib / (1024.0 * 1024.0),
            kernel,
            load_average_1m,
        }
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "machine: {} cores, {}, {:.1} GiB, Linux {}, load average {:.2}",
            self.cores, self.cpu_model, self.memory_gib, self.kernel, self.load_average_1m
        )
    }
}
