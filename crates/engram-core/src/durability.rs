//! Every kind of write a node makes to its store, and the durability each one gets: the one
//! table that decides which writes are synced. A call site names its [`Write`] and asks
//! [`durability`]; no other code picks `Durability::Sync` or `Buffered` for the node's own
//! data. The planted bugs that weaken durability switch it here, so the simulation's
//! durability checkers test exactly the table the node runs with.
//!
//! The rule behind the table: a write is synced when something is acknowledged on the
//! strength of it (a vote granted, a log append reported flushed, a snapshot recorded, a
//! stand-alone apply returned) or when a crash between it and a later write would leave a
//! state the restart cannot tell from a good one (an install under way, a key change). All
//! other writes are buffered: they share the store's write-ahead log with the Raft log, so
//! the next synced write makes them durable too, and until then the Raft log can rebuild
//! them (an apply group is replayed from the log after a crash).

use engram_storage::Durability;

use crate::planted::{self, PlantedBug};

/// A kind of store write, named for what it records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// Raft log entries appended. Written buffered, so replication can ship them at once; the
    /// log's flusher syncs before openraft hears they are flushed. `Sync` here means that
    /// report waits for the sync; `Buffered` that it is made at once.
    LogAppend,
    /// Raft log entries removed after a conflicting leader's append (acknowledged to it).
    LogTruncate,
    /// Raft log entries removed below a snapshot, with the purged position.
    LogPurge,
    /// The Raft vote this node granted or holds.
    Vote,
    /// openraft's committed index, a hint for a faster restart that can be learned again.
    CommittedHint,
    /// One apply group's rows (the state machine): durable with the next log sync, rebuilt
    /// from the log after a crash.
    ApplyGroup,
    /// A transaction applied outside an apply group (tools, tests): acknowledged on return.
    StandaloneApply,
    /// A key-change entry and the group before it, written before the node switches keys.
    KeyChange,
    /// This node's attestation of its chain head on start.
    StartAttestation,
    /// A snapshot's chunk, and the cleanup of chunks no snapshot refers to.
    SnapshotChunk,
    /// The row naming the current snapshot (openraft is told it exists once this returns).
    SnapshotCurrent,
    /// The row recording that an install is about to replace the state.
    InstallBegin,
    /// A batch of an install's rows before the last.
    InstallBatch,
    /// An install's last batch: the install is complete once it returns.
    InstallEnd,
    /// A one-time rewrite of an older build's snapshot rows.
    LegacyMigration,
    /// Events appended to the node's signed access log.
    AccessLog,
    /// A background job's start or end in the node's job log (`crate::jobs`): operators'
    /// records, nothing acknowledged on them; a crash may lose the last few.
    JobLog,
    /// The node-local record that a redaction's values are purged from this node's files. If a
    /// crash loses it, the purge runs again.
    RedactionPurged,
    /// The planted eager-idempotency bug's own write, synced ahead of its entry.
    PlantedEagerRow,
    /// The store's format row, written before anything else on a store without one.
    StoreFormat,
    /// The state commitment's rows of a store written before them, computed from its history
    /// once, at start, before anything is applied (`crate::commitment::rebuild`).
    StateCommitmentRebuild,
}

/// The durability `write` gets on this node.
pub fn durability(write: Write) -> Durability {
    use Durability::{Buffered, Sync};
    let acknowledged = |d: Durability| {
        // The planted skip-sync bug acknowledges these without syncing them.
        if planted::active(PlantedBug::SkipSyncBeforeAck) {
            Buffered
        } else {
            d
        }
    };
    match write {
        Write::LogAppend
        | Write::LogTruncate
        | Write::LogPurge
        | Write::Vote
        | Write::StandaloneApply
        | Write::SnapshotCurrent
        | Write::InstallEnd => acknowledged(Sync),
        Write::KeyChange
        | Write::InstallBegin
        | Write::LegacyMigration
        | Write::AccessLog
        | Write::PlantedEagerRow
        | Write::StoreFormat
        | Write::StateCommitmentRebuild => Sync,
        Write::CommittedHint
        | Write::ApplyGroup
        | Write::StartAttestation
        | Write::SnapshotChunk
        | Write::InstallBatch
        | Write::RedactionPurged
        | Write::JobLog => Buffered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_writes_that_the_log_rebuilds_are_never_synced() {
        // The state machine never fsyncs (docs/ARCHITECTURE.md, "Group apply"): syncing an
        // apply group would put an fsync per group on every replica's critical path.
        assert_eq!(durability(Write::ApplyGroup), Durability::Buffered);
        assert_eq!(durability(Write::InstallBatch), Durability::Buffered);
    }

    #[test]
    fn what_a_peer_or_client_is_told_is_synced() {
        for w in [
            Write::LogAppend,
            Write::LogTruncate,
            Write::LogPurge,
            Write::Vote,
            Write::SnapshotCurrent,
        ] {
            assert_eq!(durability(w), Durability::Sync, "{w:?}");
        }
    }
}
