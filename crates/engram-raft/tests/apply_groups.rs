//! The state machine's apply groups: a call's entries reach the store together, covered by one
//! attestation, and a call longer than `MAX_GROUP_ENTRIES` is cut into bounded groups.

#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use engram_audit::{KeyRing, NodeKey};
use engram_core::CheckpointPolicy;
use engram_raft::{Command, Entry, LogId, MAX_GROUP_ENTRIES, NodeInfo, StateMachine, TypeConfig};
use engram_storage::MemStore;
use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, Status, TxOp, TxRequest, Value};
use openraft::entry::RaftEntry;
use openraft::storage::RaftStateMachine;
use openraft::vote::RaftLeaderIdExt;

fn log_id(index: u64) -> LogId {
    LogId {
        leader_id: openraft::alias::LeaderIdOf::<TypeConfig>::new_committed(1, 1),
        index,
    }
}

fn write(index: u64) -> Entry {
    let request = TxRequest {
        namespace: Namespace::new("team/a").unwrap(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops: vec![TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp("t".into()),
            attribute: Attribute::new(":task/title").unwrap(),
            value: Value::String(format!("task {index}")),
            valid_from_ns: None,
            valid_to_ns: None,
        }],
        preconditions: vec![],
        idempotency_key: None,
        provenance: Provenance {
            agent: "a1".into(),
            confidence: 1.0,
            status: Status::Candidate,
            ..Default::default()
        },
    };
    Entry::new_normal(
        log_id(index),
        Command::Transact {
            request,
            proposed_time_ns: index as i64 * 1_000,
        },
    )
}

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
    let key = Arc::new(NodeKey::from_seed([1; 32]));
    let mut sm = StateMachine::open(
        store.clone(),
        Arc::new(KeyRing::new(key.clone())),
        CheckpointPolicy::default(),
    )
    .unwrap();
    let members = openraft::Membership::new(
        vec![BTreeSet::from([1])],
        BTreeMap::from([(
            1,
            NodeInfo {
                addr: "127.0.0.1:1".into(),
                public_key: key.public().0,
            },
        )]),
    )
    .unwrap();
    // Genesis, then more writes than two groups hold, in one call.
    let writes = 2 * MAX_GROUP_ENTRIES as u64 + 10;
    let mut entries = vec![Entry::new_membership(log_id(1), members)];
    entries.extend((2..=writes + 1).map(write));
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
