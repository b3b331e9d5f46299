//! A wait on a node whose Raft core has stopped must say so. Before it did, a watch open on
//! such a node looped: each wait returned at once, the loop asked again, and in the simulation
//! every turn left a timer behind until memory ran out.

#![allow(clippy::unwrap_used)] // test set-up: a failed step should stop the test loudly

use std::sync::Arc;
use std::time::Duration;

use engram_audit::{KeyRing, NodeKey};
use engram_core::CheckpointPolicy;
use engram_raft::{NodeInfo, RaftNode, RaftSettings, RaftTiming, Waited};
use engram_storage::MemStore;

async fn node() -> RaftNode {
    let key = Arc::new(NodeKey::from_seed([7; 32]));
    let info = NodeInfo {
        addr: "127.0.0.1:1".into(),
        public_key: key.public().0,
    };
    let settings = RaftSettings {
        timing: RaftTiming::default(),
        clock_skew_ns: 0,
        checkpoints: CheckpointPolicy::default(),
        redact_part_datoms: RaftSettings::REDACT_PART_DATOMS,
    };
    RaftNode::start(
        1,
        info,
        Arc::new(MemStore::new()),
        Arc::new(KeyRing::new(key)),
        &settings,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_wait_on_a_stopped_node_reports_stopped_not_a_timeout() {
    let live = node().await;
    assert_eq!(
        live.wait_applied(1, Duration::from_millis(50)).await,
        Waited::TimedOut,
        "a live node with nothing applied times out"
    );
    assert!(!live.has_stopped());

    let stopped = node().await;
    stopped.shutdown().await;
    assert!(stopped.has_stopped());
    for _ in 0..3 {
        assert_eq!(
            stopped.wait_applied(1, Duration::from_millis(200)).await,
            Waited::Stopped,
            "a caller told `TimedOut` would wait again, forever"
        );
    }
    live.shutdown().await;
}
