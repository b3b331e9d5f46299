//! Known bugs that the simulation suite plants to prove its checkers can fail.
//!
//! With the `planted-bugs` feature (test builds only), a test switches one bug on for its own
//! thread — madsim runs a whole simulated cluster on the thread that calls `block_on` — and
//! the code paths below misbehave in the named way. Without the feature, [`active`] is a
//! constant `false` and the compiler removes every planted branch.

/// A bug the suite must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// The leader answers a write before the entry is committed (it predicts the receipt).
    AckBeforeCommit,
    /// Log appends and applies are acknowledged without being synced to disk.
    SkipSyncBeforeAck,
    /// Every fourth audit entry links to a wrong `prev_hash` (and the in-apply assertion that
    /// would catch it is skipped).
    WrongPrevHash,
    /// An apply group's batch is split: the first half (with the applied log position) is
    /// written, the rest only with the next group, so a crash between them leaves half a group
    /// (and half of a transaction in it) that the node believes applied.
    HalfBatch,
    /// The Raft service accepts requests without checking who sent them, so a host that is not
    /// a member can forge appends and votes.
    AcceptUnauthenticatedPeer,
    /// A transaction's idempotency row is synced on its own, ahead of the buffered entry it
    /// belongs to. The state machine does not sync its writes (they become durable with the
    /// next Raft log sync), so a crash in between keeps the row without the entry, and when
    /// Raft applies the entry again it looks like a retry: the index gets another entry.
    EagerIdempotencyRow,
    /// A restarted leader serves linearizable reads at openraft's read index without first
    /// applying the log it restarted with: its state machine lost its unsynced tail in the
    /// crash, so a read can miss a write the node acknowledged before it.
    ReadBeforeRestartCatchUp,
    /// A node never stores the attestation that covers an apply group (the group's last
    /// entry, or the head at start): its entries are in the chain with no signature of that
    /// node at or after them.
    SkipGroupAttestation,
    /// A write to a slot whose current-claims row is in the store leaves that row as it was,
    /// so the next write to the slot checks a stale view of what it holds.
    StaleCurrentRow,
    /// A snapshot install replaces the state without first recording (synced) that it is under
    /// way, so a crash between its batches leaves part of the old state and part of the new,
    /// and the restarted node does not know to finish it.
    UnrecordedInstall,
    /// Transactions are never checked against grants, at the gate or at apply: in enforced
    /// mode an agent writes where no grant allows it.
    SkipGrantCheck,
    /// Taking a role from an agent records the change but leaves the agent's role row: it
    /// keeps the role's grants after they were taken away.
    StaleRoleAssignment,
    /// A transaction an agent signed records the signature in its entry, but the request it
    /// signed is not kept beside it: nothing can show what the agent signed.
    SignedRequestNotKept,
    /// A node's search index is not rebuilt from its store when the node starts: it is fed
    /// only what the node applies after the restart, so it misses every earlier transaction.
    SearchIndexNotRebuilt,
    /// A node's search index, finding that what apply handed it starts past its position (a
    /// snapshot was installed, or groups were dropped while it lagged), feeds it without
    /// reading the gap from the store, so it misses the transactions in between.
    SearchGapNotRead,
    /// A node's watch hub, finding that what apply handed it starts past its ring (a snapshot
    /// was installed, or groups were dropped while it lagged), appends it to the ring as if
    /// nothing were missing, so watchers at the head skip the transactions in between.
    WatchGapNotRead,
    /// A redaction's record leaves out the last datom it takes: that datom's value is gone
    /// with nothing in the chain saying a redaction took it.
    RedactionListsTooFew,
    /// A node's purge after a redaction builds one snapshot past it instead of two: the
    /// snapshot that one replaces, made before the redaction and holding its values, stays
    /// (kept, as a replaced snapshot is, in case a peer still reads it) although the node
    /// reports the redaction purged.
    PurgeKeepsOldSnapshot,
    /// The leader acknowledges a redaction after its first part and proposes no other: the
    /// datoms the later parts would have taken keep their values.
    RedactionStopsAfterFirstPart,
    /// The leader plans a redaction by predicate's range one matching row past what the
    /// range may take: apply takes no more than its limit, and the next range starts after
    /// the row left out, which keeps its value.
    RedactionRangeOverrunsItsLimit,
    /// A write to a slot that already has a state-commitment digest leaves the digest (its `Z`
    /// row and the map) as it was: every replica agrees on the same wrong state root, so only
    /// a recomputation from the history can see it.
    StaleSlotCommitment,
    /// A versions retention policy takes a datom once enough later transactions wrote its
    /// slot, without asking whether it is still a live claim: another agent's claim under
    /// cardinality one, or a value of a many-valued slot nobody retracted, loses its value.
    RetentionTakesLiveClaims,
    /// A redaction by predicate finds its time bound from the chain head as the store holds it
    /// when its apply group began, not after the group's earlier entries: a replica that
    /// applies a long stretch of the log in one group (catching up) takes less than one that
    /// applied it entry by entry.
    RedactionBoundFromGroupStart,
    /// A redaction takes each matching datom alone, not its value out of the slot whole
    /// (`crate::value_groups`): a retention policy takes a tag's assertion a round before the
    /// retraction that ended it, and the fold of the slot's history no longer sees the claim
    /// end.
    RedactionSplitsAValue,
    /// A session's row keeps the time it was opened or renewed as its deadline, without its
    /// ttl (the record says the right deadline): the leader finds it lapsed at its next look
    /// and ends it while it still lives.
    SessionDeadlineWithoutTtl,
    /// A redaction of an entity takes its datoms on main only, as entries from before
    /// redactions reached branches did: a value written on a branch keeps it.
    RedactionSkipsBranches,
    /// A transaction an agent signed in its committed form takes its datoms' salts from the
    /// entry's seed instead of the agent's: each datom's hash then commits to its value under
    /// another salt than the one the signature covers, so the signature no longer binds it.
    CommittedDatomsSaltedBySeed,
}

impl PlantedBug {
    pub const ALL: [PlantedBug; 27] = [
        PlantedBug::AckBeforeCommit,
        PlantedBug::SkipSyncBeforeAck,
        PlantedBug::WrongPrevHash,
        PlantedBug::HalfBatch,
        PlantedBug::AcceptUnauthenticatedPeer,
        PlantedBug::EagerIdempotencyRow,
        PlantedBug::ReadBeforeRestartCatchUp,
        PlantedBug::SkipGroupAttestation,
        PlantedBug::StaleCurrentRow,
        PlantedBug::UnrecordedInstall,
        PlantedBug::SkipGrantCheck,
        PlantedBug::StaleRoleAssignment,
        PlantedBug::SignedRequestNotKept,
        PlantedBug::SearchIndexNotRebuilt,
        PlantedBug::SearchGapNotRead,
        PlantedBug::WatchGapNotRead,
        PlantedBug::RedactionListsTooFew,
        PlantedBug::PurgeKeepsOldSnapshot,
        PlantedBug::RedactionStopsAfterFirstPart,
        PlantedBug::RedactionRangeOverrunsItsLimit,
        PlantedBug::StaleSlotCommitment,
        PlantedBug::RetentionTakesLiveClaims,
        PlantedBug::RedactionBoundFromGroupStart,
        PlantedBug::RedactionSplitsAValue,
        PlantedBug::SessionDeadlineWithoutTtl,
        PlantedBug::RedactionSkipsBranches,
        PlantedBug::CommittedDatomsSaltedBySeed,
    ];
}

#[cfg(feature = "planted-bugs")]
mod switch {
    use std::cell::Cell;

    use super::PlantedBug;

    thread_local! {
        static ACTIVE: Cell<Option<PlantedBug>> = const { Cell::new(None) };
    }

    /// Switches `bug` on (or all bugs off) for the calling thread.
    pub fn set(bug: Option<PlantedBug>) {
        ACTIVE.with(|a| a.set(bug));
    }

    pub fn active(bug: PlantedBug) -> bool {
        ACTIVE.with(|a| a.get()) == Some(bug)
    }
}

#[cfg(feature = "planted-bugs")]
pub use switch::set;

/// Whether `bug` is switched on for this thread.
#[inline]
pub fn active(bug: PlantedBug) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        switch::active(bug)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = bug;
        false
    }
}
