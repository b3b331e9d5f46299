//! openraft's own storage test suite, run against Engram's log store and state machine over
//! the in-memory crash-modelling store (the RocksDB store passes the same `Store` conformance
//! suite, so it shares these results).
//!
//! Every check of the suite runs except `transfer_snapshot`: it builds memberships whose nodes
//! have no public keys, so the snapshot's audit chain is attested by a key the chain never
//! admits, and Engram rightly refuses to install it. Snapshot transfer between nodes with real
//! keys is covered by the server's in-process cluster test.

#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::sync::Arc;

use engram_audit::NodeKey;
use engram_raft::{LogStore, StateMachine, TypeConfig};
use engram_storage::{MemStore, Store};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{ErrorSubject, ErrorVerb, StorageError};

struct MemBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine> for MemBuilder {
    async fn build(&self) -> Result<((), LogStore, StateMachine), StorageError<TypeConfig>> {
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let sm = StateMachine::open(
            store.clone(),
            Arc::new(engram_audit::KeyRing::new(Arc::new(NodeKey::from_seed([1; 32])))),
            engram_core::CheckpointPolicy::default(),
        )
        .map_err(|e| StorageError::from_io_error(ErrorSubject::StateMachine, ErrorVerb::Read, e))?;
        Ok(((), LogStore::new(store, Default::default()), sm))
    }
}

type S = Suite<TypeConfig, LogStore, StateMachine, MemBuilder, ()>;

macro_rules! suite_tests {
    ($($name:ident,)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                let ((), log, sm) = MemBuilder.build().await.unwrap();
                S::$name(log, sm).await.unwrap();
            }
        )*
    };
}

suite_tests! {
        last_membership_in_log_initial,
        last_membership_in_log,
        last_membership_in_log_multi_step,
        get_membership_initial,
        get_membership_from_log_and_empty_sm,
        get_membership_from_empty_log_and_sm,
        get_membership_from_log_le_sm_last_applied,
        get_membership_from_log_gt_sm_last_applied_1,
        get_membership_from_log_gt_sm_last_applied_2,
        get_initial_state_without_init,
        get_initial_state_membership_from_empty_log_and_sm,
        get_initial_state_membership_from_sm_inlog_is_smaller,
        get_initial_state_membership_from_log_insm_is_smaller,
        get_initial_state_with_state,
        get_initial_state_last_log_gt_sm,
        get_initial_state_last_log_lt_sm,
        get_initial_state_inverted_log_order,
        get_initial_state_conflict_at_same_index,
        get_initial_state_log_ids,
        get_initial_state_re_apply_committed,
        save_vote,
        get_log_entries,
        limited_get_log_entries,
        leader_bounded_stream,
        entries_stream,
        try_get_log_entry,
        log_reader_reads_new_entries,
        initial_logs,
        get_log_state,
        get_log_id,
        last_id_in_log,
        last_applied_state,
        purge_logs_upto_0,
        purge_logs_upto_5,
        purge_logs_upto_20,
        delete_logs_after_11,
        delete_logs_after_5,
        delete_logs_after_0,
        delete_logs_after_none,
        append_to_log,
        snapshot_meta,
        snapshot_meta_optional,
        apply_single,
        apply_multiple,
}

#[tokio::test]
async fn a_snapshot_whose_signer_the_chain_never_admits_is_refused() {
    let err = S::transfer_snapshot(&MemBuilder).await.unwrap_err();
    assert!(
        err.to_string().contains("is not a key recorded in the chain"),
        "{err}"
    );
}
