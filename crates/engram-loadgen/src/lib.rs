//! `engram-loadgen`: closed-loop load generation for Engram and the systems it is compared with.
//!
//! A run starts `clients` concurrent clients; each sends one request, waits for the answer and
//! sends the next (closed loop), so the offered load is whatever the system sustains. Only the
//! requests that start after the warm-up and finish inside the measured window count. A run
//! reports throughput, the latency distribution (p50/p95/p99/max and a CDF for plots) and the
//! CPU the servers spent per operation, read from `/proc`.
//!
//! The systems are plugged in through [`System`], so Engram and its peers pay the same
//! client-side costs in the same driver.
//!
//! Must not depend on: any Engram crate, a particular system's client, the server, storage.

mod cpu;
mod driver;
mod latency;
mod machine;
mod matrix;
mod report;
mod suite;

pub use cpu::{CpuMeter, cpu_seconds_of};
pub use driver::{Outcome, Plan, closed_loop};
pub use latency::{Latency, LatencyRecorder};
pub use machine::Machine;
pub use matrix::{
    Fanout, Measurement, ReadKind, System, WatchLayout, Workload, measure, rewrite_in_turn, value_of,
    watch_fanout,
};
pub use report::{Row, label, rows, table};
pub use suite::{Progress, SuiteReport, SuiteSpec, run_suite};

use futures::future::BoxFuture;

/// What one request of a workload returns: `Err` carries the system's message.
pub type OpFuture = BoxFuture<'static, Result<(), String>>;
