//! The pace of the node's background jobs (retention, sessions, divergence checks): one wait
//! between rounds that ends early when the node stops.

use std::time::Duration;

/// Waits `every`, or until `stopped` turns true; whether the job goes on (false: the node
/// stops).
pub async fn tick(every: Duration, stopped: &mut tokio::sync::watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(every) => {}
        _ = stopped.changed() => return false,
    }
    !*stopped.borrow()
}
