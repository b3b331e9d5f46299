//! Helpers shared by the state-machine tests: log ids, one-datom writes, a one-member
//! membership, and a state machine over a memory store.

#![allow(dead_code)] // each test file uses a different part
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use engram_audit::{KeyRing, NodeKey};
use engram_core::CheckpointPolicy;
use engram_raft::{Command, Entry, LogId, NodeInfo, StateMachine, TypeConfig};
use engram_storage::Store;
use engram_types::{Attribute, EntityRef, Namespace, Op, Provenance, Status, TxOp, TxRequest, Value};
use openraft::entry::RaftEntry;
use openraft::vote::RaftLeaderIdExt;

pub fn log_id(index: u64) -> LogId {
    LogId {
        leader_id: openraft::alias::LeaderIdOf::<TypeConfig>::new_committed(1, 1),
        index,
    }
}

pub fn write(index: u64) -> Entry {
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

/// A membership of node 1 alone, with `key` as its signing key.
pub fn single_member(key: &NodeKey) -> openraft::Membership<u64, NodeInfo> {
    openraft::Membership::new(
        vec![BTreeSet::from([1])],
        BTreeMap::from([(
            1,
            NodeInfo {
                addr: "127.0.0.1:1".into(),
                public_key: key.public().0,
            },
        )]),
    )
    .unwrap()
}

/// A state machine over `store` signing with the key of `seed`.
pub fn open(store: Arc<dyn Store>, seed: u8) -> StateMachine {
    let key = Arc::new(NodeKey::from_seed([seed; 32]));
    StateMachine::open(store, Arc::new(KeyRing::new(key)), CheckpointPolicy::default()).unwrap()
}

/// Genesis (node 1 with the key of `seed`), the open security mode at log index 2 (as `cluster
/// init` records it), and then writes at log indexes `3..=last`. Every entry is in the chain,
/// at an audit index equal to its log index.
pub fn genesis_and_writes(seed: u8, last: u64) -> Vec<Entry> {
    let key = NodeKey::from_seed([seed; 32]);
    let mut entries = vec![
        Entry::new_membership(log_id(1), single_member(&key)),
        Entry::new_normal(
            log_id(2),
            Command::Policy {
                op: engram_access::PolicyOp::Configure {
                    mode: engram_access::Mode::Open,
                    admin: None,
                },
                principal: None,
                proposed_time_ns: 2_000,
            },
        ),
    ];
    entries.extend((3..=last).map(write));
    entries
}
