//! The state machine's apply groups: a call's entries reach the store together, covered by one
//! attestation, and a call longer than `MAX_GROUP_ENTRIES` is cut into bounded groups.

#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

mod common;

use std::sync::Arc;

use engram_raft::MAX_GROUP_ENTRIES;
use engram_storage::MemStore;
use openraft::storage::RaftStateMachine;

/// The audit indexes this node attested.
fn attested(store: &MemStore) -> Vec<u64> {
    engram_core::inspect::stored_audit_entries(store)
        .unwrap()
        .into_iter()
        .filter(|s| s.entry.as_ref().unwrap().attestation.is_some())
        .map(|s| s.index)
        .collect()
}

#[tokio::test]
async fn a_long_apply_call_is_cut_into_bounded_groups_each_attested_once() {
    let store = Arc::new(MemStore::new());
    let mut sm = common::open(store.clone(), 1);
    // Genesis, then more writes than two groups hold, in one call.
    let writes = 2 * MAX_GROUP_ENTRIES as u64 + 10;
    let entries = common::genesis_and_writes(1, writes + 1);
    let stream = futures::stream::iter(entries.into_iter().map(|e| Ok((e, None))));
    sm.apply(stream).await.unwrap();

    // Each group's last entry carries this node's attestation, and nothing else does: the
    // audit index of an entry is its log index here (every entry is in the chain).
    let groups = MAX_GROUP_ENTRIES as u64;
    assert_eq!(attested(&store), vec![groups, 2 * groups, writes + 1]);
    let mut verifier = engram_audit::ChainVerifier::new();
    for stored in engram_core::inspect::stored_audit_entries(&*store).unwrap() {
        verifier.push(&stored.entry.unwrap()).unwrap();
    }
    verifier.finish().unwrap();
    assert_eq!(verifier.checked(), writes + 1);
    assert_eq!(engram_raft::applied_index(&*store).unwrap(), writes + 1);
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied.map(|id| id.index), Some(writes + 1));
}
