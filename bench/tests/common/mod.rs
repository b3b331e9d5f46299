//! What the bench's end-to-end tests share: running a bench binary for its JSON report.

use std::process::Command;

use serde_json::Value;

/// Runs `cmd`, requires it to succeed (else fails with its output) and parses its stdout as
/// one JSON document.
pub fn json_report(cmd: &mut Command) -> Value {
    let out = cmd.output().expect("the bench binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).expect("the report is JSON")
}
