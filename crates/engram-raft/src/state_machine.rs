use std::io;
use std::sync::Arc;

use engram_audit::{KeyRing, PublicKey};
use engram_core::{CheckpointPolicy, Engine, snapshot};
use engram_storage::{Durability, Space, Store, WriteBatch};
use futures::{Stream, TryStreamExt};
use openraft::entry::RaftEntry;
use openraft::storage::{ApplyResponder, EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use tracing::{info, warn};

use crate::codec::{decode, encode};
use crate::{Command, CommandResponse, LogId, Membership, Snapshot, SnapshotData, SnapshotMeta, TypeConfig};

/// The most entries one apply group holds (see the loop of `StateMachine::apply`).
pub const MAX_GROUP_ENTRIES: usize = 1024;

/// State-space rows owned by this layer (the `M` table belongs to metadata).
const APPLIED: &[u8] = b"Mraft/applied";
const MEMBERSHIP: &[u8] = b"Mraft/membership";
/// Raft-space rows holding the latest built or installed snapshot.
const SNAPSHOT_META: &[u8] = b"snapshot/meta";
const SNAPSHOT_DATA: &[u8] = b"snapshot/data";

fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// The replicated state machine: [`Engine`] plus the Raft bookkeeping written with it.
pub struct StateMachine {
    engine: Engine,
    store: Arc<dyn Store>,
    applied: Option<LogId>,
    membership: Membership,
}

/// Reads the applied log id and membership rows from a store.
fn load_applied(store: &dyn Store) -> io::Result<(Option<LogId>, Membership)> {
    let applied = match store.get(Space::State, APPLIED).map_err(io_err)? {
        Some(b) => decode("applied log id", &b)?,
        None => None,
    };
    let membership = match store.get(Space::State, MEMBERSHIP).map_err(io_err)? {
        Some(b) => decode("applied membership", &b)?,
        None => Membership::default(),
    };
    Ok((applied, membership))
}

/// The log index the state in `store` has applied (0: nothing), for checkers that compare
/// replicas at the same position.
pub fn applied_index(store: &dyn Store) -> io::Result<u64> {
    Ok(load_applied(store)?.0.map_or(0, |id| id.index()))
}

/// The applied log id row, written with every entry's state change.
fn applied_row(applied: &Option<LogId>) -> io::Result<WriteBatch> {
    let mut batch = WriteBatch::new();
    batch.put(Space::State, APPLIED.to_vec(), encode(applied)?);
    Ok(batch)
}

/// The applied log id and membership rows; membership changes only with membership entries
/// and snapshots, so only those write it.
fn applied_and_membership_rows(applied: &Option<LogId>, membership: &Membership) -> io::Result<WriteBatch> {
    let mut batch = applied_row(applied)?;
    batch.put(Space::State, MEMBERSHIP.to_vec(), encode(membership)?);
    Ok(batch)
}

impl StateMachine {
    pub fn open(
        store: Arc<dyn Store>,
        keys: Arc<KeyRing>,
        policy: CheckpointPolicy,
    ) -> io::Result<StateMachine> {
        let engine = Engine::open_with(store.clone(), keys, policy).map_err(io_err)?;
        let (applied, membership) = load_applied(&*store)?;
        Ok(StateMachine {
            engine,
            store,
            applied,
            membership,
        })
    }

    fn apply_one(&mut self, entry: crate::Entry) -> io::Result<CommandResponse> {
        let log_id = entry.log_id();
        let index = log_id.index();
        if let Some(applied) = &self.applied {
            // Raft hands each committed entry to apply exactly once and in order.
            assert!(
                index > applied.index(),
                "apply out of order: {index} after {}",
                applied.index()
            );
        }
        self.applied = Some(log_id);
        let mut response = CommandResponse::default();
        match entry.payload {
            EntryPayload::Blank => {
                let extra = applied_row(&self.applied)?;
                self.engine.apply_noop(extra).map_err(io_err)?;
            }
            EntryPayload::Normal(Command::Transact {
                request,
                proposed_time_ns,
            }) => {
                let extra = applied_row(&self.applied)?;
                let outcome = self
                    .engine
                    .apply_tx(index, proposed_time_ns, &request, extra)
                    .map_err(io_err)?;
                response.outcome = Some(outcome);
            }
            EntryPayload::Normal(Command::KeyChange { request }) => {
                let extra = applied_row(&self.applied)?;
                let outcome = self
                    .engine
                    .apply_key_change(index, &request, extra)
                    .map_err(io_err)?;
                match &outcome {
                    Ok(signed) => info!(
                        log_index = index,
                        audit_index = signed.entry.index,
                        action = ?request.action,
                        "key change recorded in the audit chain"
                    ),
                    Err(rejection) => warn!(log_index = index, %rejection, "key change refused"),
                }
                response.key_change = Some(outcome.map(|signed| signed.entry.index));
            }
            EntryPayload::Membership(membership) => {
                let members: Vec<(u64, PublicKey)> = membership
                    .nodes()
                    .map(|(id, node)| (*id, PublicKey(node.public_key)))
                    .collect();
                self.membership = Membership::new(Some(log_id), membership);
                let extra = applied_and_membership_rows(&self.applied, &self.membership)?;
                let signed = self
                    .engine
                    .apply_membership(index, members, extra)
                    .map_err(io_err)?;
                info!(
                    log_index = index,
                    audit_index = signed.entry.index,
                    "membership recorded in the audit chain"
                );
            }
        }
        Ok(response)
    }

    /// Ends the open group, writes it, and only then answers its entries' proposers.
    fn close_group(
        &mut self,
        answered: &mut Vec<(ApplyResponder<TypeConfig>, CommandResponse)>,
    ) -> io::Result<()> {
        let group = self
            .engine
            .end_group(applied_row(&self.applied)?)
            .map_err(io_err)?;
        // Buffered: the Raft log holds these entries synced on a majority already.
        self.store.write(group, Durability::Buffered).map_err(io_err)?;
        for (responder, response) in answered.drain(..) {
            responder.send(response);
        }
        Ok(())
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, Membership)> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + OptionalSend,
    {
        // One group per call: the entries are applied into the group, which is written here
        // as one buffered batch (the entries are durable in the Raft log on a majority
        // already; see `Engine::begin_group`), with one attestation on the group's last entry
        // covering the group (`Engine::end_group`); no client hears of any entry before its
        // group is written. A call of more than `MAX_GROUP_ENTRIES` entries (a node catching
        // up after a restart or a partition) is cut into several groups, so the writes a group
        // holds in memory stay bounded.
        let mut answered = Vec::new();
        let mut in_group = 0;
        self.engine.begin_group();
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = self.apply_one(entry)?;
            if let Some(responder) = responder {
                answered.push((responder, response));
            }
            in_group += 1;
            if in_group == MAX_GROUP_ENTRIES {
                self.close_group(&mut answered)?;
                self.engine.begin_group();
                in_group = 0;
            }
        }
        self.close_group(&mut answered)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            store: self.store.clone(),
        }
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, data: SnapshotData) -> io::Result<()> {
        let applied = meta.last_log_id;
        let membership = meta.last_membership.clone();
        let extra = applied_and_membership_rows(&applied, &membership)?;
        // Verifies the checksum and the whole audit chain inside before replacing anything.
        let head = snapshot::install(&*self.store, &data, extra).map_err(|e| {
            warn!(error = %e, "refused a snapshot");
            io_err(e)
        })?;
        self.engine.reload().map_err(io_err)?;
        self.applied = applied;
        self.membership = membership;
        save_current(&*self.store, meta, &data)?;
        info!(
            chain_index = head.index,
            "installed a snapshot; its audit chain verified"
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        load_current(&*self.store)
    }
}

fn save_current(store: &dyn Store, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
    let mut batch = WriteBatch::new();
    batch.put(Space::Raft, SNAPSHOT_META.to_vec(), encode(meta)?);
    batch.put(Space::Raft, SNAPSHOT_DATA.to_vec(), data.to_vec());
    store
        .write(batch, engram_core::planted::ack_durability())
        .map_err(io_err)
}

fn load_current(store: &dyn Store) -> io::Result<Option<Snapshot>> {
    let Some(meta) = store.get(Space::Raft, SNAPSHOT_META).map_err(io_err)? else {
        return Ok(None);
    };
    let meta: SnapshotMeta = decode("snapshot meta", &meta)?;
    let Some(data) = store.get(Space::Raft, SNAPSHOT_DATA).map_err(io_err)? else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "snapshot meta without its data",
        ));
    };
    Ok(Some(Snapshot { meta, snapshot: data }))
}

/// Builds a snapshot from one consistent view of the state space.
pub struct SnapshotBuilder {
    store: Arc<dyn Store>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        // The applied position is captured in the same pass as the data, so meta and data
        // agree even though apply keeps running while this builds.
        let (data, rows) =
            snapshot::export_capturing(&*self.store, &[APPLIED, MEMBERSHIP]).map_err(io_err)?;
        let applied = match &rows[0] {
            Some(v) => decode("applied log id", v)?,
            None => None,
        };
        let membership = match &rows[1] {
            Some(v) => decode("applied membership", v)?,
            None => Membership::default(),
        };
        let meta = SnapshotMeta {
            last_log_id: applied,
            last_membership: membership,
        };
        save_current(&*self.store, &meta, &data)?;
        info!(bytes = data.len(), last_log_index = ?meta.last_log_id.as_ref().map(|l| l.index()), "built a snapshot");
        Ok(Snapshot { meta, snapshot: data })
    }
}
