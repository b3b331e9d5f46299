//! What the bench binaries need to know of processes: where the `engram` executable is, and
//! how much memory a process holds.

use std::path::PathBuf;

/// The `engram` executable: `given`, or the one built beside the running binary.
pub fn engram_exe(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return Ok(p);
    }
    let me = std::env::current_exe().map_err(|e| format!("locating this executable: {e}"))?;
    let sibling = me.with_file_name("engram");
    if !sibling.exists() {
        return Err(format!(
            "no engram executable at {}: build it (cargo build --release -p engram-cli) or pass --engram-bin",
            sibling.display()
        ));
    }
    Ok(sibling)
}

/// Resident memory of process `pid` (`"self"` for this one), from `/proc/<pid>/statm`; 0
/// where it cannot be read.
pub fn rss_bytes(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map_or(0, |pages| pages * 4096)
}
