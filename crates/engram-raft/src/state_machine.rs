use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use engram_audit::{KeyRing, PublicKey};
use engram_core::durability::{Write, durability};
use engram_core::snapshot::{self, Installer};
use engram_core::state_proof::StateVersion;
use engram_core::{CheckpointPolicy, Engine};
use engram_storage::{Space, Store, WriteBatch};
use engram_types::RetentionRule;
use futures::{Stream, TryStreamExt};
use openraft::entry::RaftEntry;
use openraft::storage::{ApplyResponder, EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use tracing::{info, warn};

use crate::codec::{decode, encode};
use crate::committed::{CommittedFeed, CommittedGroup};
use crate::snapshots::{INSTALL_BATCH_BYTES, Snapshots, StoredSnapshot};
use crate::{Command, CommandResponse, LogId, Membership, Snapshot, SnapshotData, SnapshotMeta, TypeConfig};

/// The most entries one apply group holds (see the loop of `StateMachine::apply`).
pub const MAX_GROUP_ENTRIES: usize = 1024;

/// State-space rows owned by this layer (the `M` table belongs to metadata).
pub(crate) const APPLIED: &[u8] = b"Mraft/applied";
const MEMBERSHIP: &[u8] = b"Mraft/membership";

fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// The replicated state machine: [`Engine`] plus the Raft bookkeeping written with it.
pub struct StateMachine {
    engine: Engine,
    store: Arc<dyn Store>,
    applied: Option<LogId>,
    membership: Membership,
    snapshots: Arc<Snapshots>,
    /// The applied index, published once its state is written (readable). Watchers wait on
    /// this instead of openraft's metrics, which change on every heartbeat and replication
    /// ack and are a large struct to clone: a thousand watchers woken and cloning it on each
    /// change was most of a node's CPU during a watch fan-out.
    published: tokio::sync::watch::Sender<u64>,
    /// Counts the writes that changed the policy rows (a group holding a policy change or
    /// genesis, a snapshot install), bumped after the write: a reader that caches policy rows
    /// drops them when it sees the count move.
    policy_epoch: Arc<AtomicU64>,
    /// The open group holds a policy change or genesis.
    policy_touched: bool,
    /// Where each written group's committed transactions go for the node's recall index.
    committed: Arc<CommittedFeed>,
    /// The same groups, for the node's watchers.
    watched: Arc<CommittedFeed>,
    /// The first log index of the open group.
    group_from: u64,
    /// The log index (= transaction) of the last redaction in the written state
    /// (`crate::purge`), whether applied here or installed with a snapshot.
    redacted: tokio::sync::watch::Sender<u64>,
    /// The open group's last redaction, if it applied one.
    group_redacted: Option<u64>,
    /// The state map as of the last written state, for proven reads.
    versions: Arc<StateVersions>,
}

/// The state commitment's map as of the last state apply wrote (or a start or an install
/// loaded), with its chain head: what a proof of a read of the current state is made from
/// (`engram_core::state_proof`). Replaced after every written group, before the applied index
/// moves, so a reader that finds an index applied finds this at that index or later. Holding
/// a version costs apply a copy of each map node it then changes (the nodes are shared), so
/// only the latest is kept.
#[derive(Default)]
pub struct StateVersions {
    latest: std::sync::Mutex<Option<Arc<StateVersion>>>,
}

impl StateVersions {
    /// The latest version (`None` before the map is kept).
    pub fn latest(&self) -> Option<Arc<StateVersion>> {
        self.lock().clone()
    }

    fn publish(&self, version: Option<StateVersion>) {
        *self.lock() = version.map(Arc::new);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<StateVersion>>> {
        // What it guards is replaced whole: a panic elsewhere cannot leave it half-written.
        self.latest
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
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
        let (snapshots, interrupted) = Snapshots::open(store.clone())?;
        if let Some((meta, data)) = interrupted {
            // A crash cut an install short: the state is part old, part new. The snapshot was
            // checked before the install began; write it again from the start.
            warn!(snapshot = ?data, "finishing a snapshot install a crash interrupted");
            install_recorded_snapshot(&*store, &snapshots, &meta, &data, WriteBatch::new())?;
        }
        let mut engine = Engine::open_with(store.clone(), keys, policy).map_err(io_err)?;
        engine.keep_committed();
        // The state commitment's map, in memory from here (a store from before it is brought
        // up to date first: once, reading every datom).
        engine.keep_state_commitment().map_err(io_err)?;
        let (applied, membership) = load_applied(&*store)?;
        let (published, _) = tokio::sync::watch::channel(applied.map_or(0, |id| id.index()));
        let last_redaction = engram_core::redact::last_redaction(&*store).map_err(io_err)?;
        let (redacted, _) = tokio::sync::watch::channel(last_redaction);
        let versions = Arc::new(StateVersions::default());
        versions.publish(engine.state_version());
        Ok(StateMachine {
            engine,
            store,
            applied,
            membership,
            snapshots: Arc::new(snapshots),
            published,
            policy_epoch: Arc::new(AtomicU64::new(0)),
            policy_touched: false,
            committed: Arc::default(),
            watched: Arc::default(),
            group_from: applied.map_or(0, |id| id.index()) + 1,
            redacted,
            group_redacted: None,
            versions,
        })
    }

    /// The policy-change counter (see the field); shared with the node's gate.
    pub fn policy_epoch(&self) -> Arc<AtomicU64> {
        self.policy_epoch.clone()
    }

    /// Follows the log index of the last redaction applied, once its group is written.
    pub fn redactions_applied_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.redacted.subscribe()
    }

    /// Follows the applied index: it moves only after the state it names is written.
    pub fn applied_index_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.published.subscribe()
    }

    fn publish_applied(&self) {
        self.published
            .send_replace(self.applied.as_ref().map_or(0, |id| id.index()));
    }

    /// The committed transactions of each written group (see [`crate::committed`]).
    pub fn committed_feed(&self) -> Arc<CommittedFeed> {
        self.committed.clone()
    }

    /// The state map as of the last written state (see [`StateVersions`]).
    pub fn state_versions(&self) -> Arc<StateVersions> {
        self.versions.clone()
    }

    /// The same groups as [`Self::committed_feed`], in a feed of the watchers' own.
    pub fn watch_feed(&self) -> Arc<CommittedFeed> {
        self.watched.clone()
    }

    /// The node's snapshot rows, shared with the Raft service that receives snapshots.
    pub fn snapshots(&self) -> Arc<Snapshots> {
        self.snapshots.clone()
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
            EntryPayload::Normal(command) => self.apply_command(index, command, &mut response)?,
            EntryPayload::Membership(membership) => {
                let members: Vec<(u64, PublicKey)> = membership
                    .nodes()
                    .map(|(id, node)| (*id, PublicKey(node.public_key)))
                    .collect();
                self.membership = Membership::new(Some(log_id), membership);
                let mut extra = applied_and_membership_rows(&self.applied, &self.membership)?;
                if self.engine.head().index == 0 {
                    self.policy_touched = true;
                    // Genesis: no transaction is accepted until the security mode chosen at
                    // `cluster init` is recorded, so no write slips in before it.
                    engram_core::policy::pending_mode_row(&mut extra);
                }
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

    /// Applies a command entry at `index` into the open group, filling `response`.
    fn apply_command(
        &mut self,
        index: u64,
        command: Command,
        response: &mut CommandResponse,
    ) -> io::Result<()> {
        match command {
            Command::Salted { salt_seed, command } => {
                self.engine.salt_datoms_with(Some(salt_seed));
                let applied = self.apply_command(index, *command, response);
                self.engine.salt_datoms_with(None);
                applied?;
            }
            Command::StateRooted { command } => {
                self.engine.record_state_root(true);
                let applied = self.apply_command(index, *command, response);
                self.engine.record_state_root(false);
                applied?;
            }
            Command::WholeValues { command } => {
                self.engine.redact_whole_values(true);
                let applied = self.apply_command(index, *command, response);
                self.engine.redact_whole_values(false);
                applied?;
            }
            Command::OnBranches { command } => {
                self.engine.redact_on_branches(true);
                let applied = self.apply_command(index, *command, response);
                self.engine.redact_on_branches(false);
                applied?;
            }
            Command::Transact {
                request,
                proposed_time_ns,
            } => {
                // An entry from before principals: an unsigned transaction.
                response.outcome = Some(self.transact(index, proposed_time_ns, &request, None)?);
            }
            Command::TransactAs {
                request,
                principal,
                proposed_time_ns,
            } => {
                response.outcome =
                    Some(self.transact(index, proposed_time_ns, &request, principal.as_ref())?);
            }
            Command::TransactSigned {
                request,
                author,
                proposed_time_ns,
            } => {
                let extra = applied_row(&self.applied)?;
                response.outcome = Some(
                    self.engine
                        .apply_tx_signed(index, proposed_time_ns, &request, &author, extra)
                        .map_err(io_err)?,
                );
            }
            Command::TransactCommitted {
                request,
                author,
                value_salts,
                proposed_time_ns,
            } => {
                let extra = applied_row(&self.applied)?;
                response.outcome = Some(
                    self.engine
                        .apply_tx_committed(index, proposed_time_ns, &request, &author, &value_salts, extra)
                        .map_err(io_err)?,
                );
            }
            Command::Policy {
                op,
                principal,
                proposed_time_ns,
            } => {
                let by = engram_core::PolicyActor::Unsigned(principal);
                response.outcome = Some(self.policy(index, proposed_time_ns, &op, &by)?);
            }
            Command::PolicySigned {
                op,
                author,
                proposed_time_ns,
            } => {
                let by = engram_core::PolicyActor::Signed(author);
                response.outcome = Some(self.policy(index, proposed_time_ns, &op, &by)?);
            }
            Command::Redact {
                request,
                principal,
                author,
                proposed_time_ns,
            } => {
                // An entry from before parts: the whole redaction in one.
                let outcome = self.redact(index, proposed_time_ns, &request, None, principal, author)?;
                response.outcome = Some(outcome);
            }
            Command::RedactPart {
                request,
                principal,
                author,
                part,
                proposed_time_ns,
            } => {
                let outcome =
                    self.redact(index, proposed_time_ns, &request, Some(&part), principal, author)?;
                response.outcome = Some(outcome);
            }
            Command::RedactWhere {
                request,
                principal,
                range,
                retention_keep_ms,
                proposed_time_ns,
            } => {
                let outcome = self.redact_where(
                    index,
                    proposed_time_ns,
                    &request,
                    &range,
                    principal.as_ref(),
                    retention_keep_ms.map(RetentionRule::KeepMs),
                )?;
                response.outcome = Some(outcome);
            }
            Command::RedactVersions {
                request,
                range,
                keep_versions,
                proposed_time_ns,
            } => {
                let outcome = self.redact_where(
                    index,
                    proposed_time_ns,
                    &request,
                    &range,
                    None,
                    Some(RetentionRule::KeepVersions(keep_versions)),
                )?;
                response.outcome = Some(outcome);
            }
            Command::RedactSession {
                request,
                range,
                proposed_time_ns,
            } => {
                let outcome = self.redact_where(
                    index,
                    proposed_time_ns,
                    &request,
                    &range,
                    None,
                    Some(RetentionRule::SessionEnded),
                )?;
                response.outcome = Some(outcome);
            }
            Command::KeyChange { request } => {
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
        }
        Ok(())
    }

    /// Applies a redaction entry (whole, or one `part`) into the open group.
    fn redact(
        &mut self,
        index: u64,
        proposed_time_ns: i64,
        request: &engram_types::RedactRequest,
        part: Option<&engram_types::RedactPart>,
        principal: Option<engram_access::Principal>,
        author: Option<engram_audit::Author>,
    ) -> io::Result<engram_core::TxOutcome> {
        let by = match author {
            Some(author) => engram_core::PolicyActor::Signed(author),
            None => engram_core::PolicyActor::Unsigned(principal),
        };
        let extra = applied_row(&self.applied)?;
        let outcome = self
            .engine
            .apply_redaction(index, proposed_time_ns, request, part, &by, extra)
            .map_err(io_err)?;
        match &outcome {
            Ok(receipt) => {
                self.group_redacted = Some(index);
                info!(
                    log_index = index,
                    tx = receipt.tx.0,
                    namespace = %request.namespace,
                    entity = request.entity.0,
                    part_of = part.and_then(|p| p.first_tx).map(|tx| tx.0),
                    "redaction recorded"
                )
            }
            Err(rejection) => warn!(log_index = index, %rejection, "redaction refused"),
        }
        Ok(outcome)
    }

    /// Applies one range of a redaction by predicate into the open group.
    fn redact_where(
        &mut self,
        index: u64,
        proposed_time_ns: i64,
        request: &engram_types::RedactWhere,
        range: &engram_types::RedactRange,
        principal: Option<&engram_access::Principal>,
        retention: Option<RetentionRule>,
    ) -> io::Result<engram_core::TxOutcome> {
        let extra = applied_row(&self.applied)?;
        let outcome = self
            .engine
            .apply_redaction_where(
                index,
                proposed_time_ns,
                request,
                range,
                principal,
                retention,
                extra,
            )
            .map_err(io_err)?;
        match &outcome {
            Ok(receipt) => {
                self.group_redacted = Some(index);
                info!(
                    log_index = index,
                    tx = receipt.tx.0,
                    namespace = %request.namespace,
                    part_of = range.first_tx.map(|tx| tx.0),
                    retention = retention.map(|r| r.describe()),
                    "redaction by predicate recorded"
                )
            }
            Err(rejection) => warn!(log_index = index, %rejection, "redaction by predicate refused"),
        }
        Ok(outcome)
    }

    /// Applies a transaction entry made by `principal` into the open group.
    fn transact(
        &mut self,
        index: u64,
        proposed_time_ns: i64,
        request: &engram_types::TxRequest,
        principal: Option<&engram_access::Principal>,
    ) -> io::Result<engram_core::TxOutcome> {
        let extra = applied_row(&self.applied)?;
        self.engine
            .apply_tx_as(index, proposed_time_ns, request, principal, extra)
            .map_err(io_err)
    }

    fn policy(
        &mut self,
        index: u64,
        proposed_time_ns: i64,
        op: &engram_access::PolicyOp,
        by: &engram_core::PolicyActor,
    ) -> io::Result<engram_core::TxOutcome> {
        self.policy_touched = true;
        let extra = applied_row(&self.applied)?;
        let outcome = self
            .engine
            .apply_policy(index, proposed_time_ns, op, by, extra)
            .map_err(io_err)?;
        match &outcome {
            Ok(receipt) => info!(
                log_index = index,
                tx = receipt.tx.0,
                change = op.kind(),
                "policy change recorded"
            ),
            Err(rejection) => warn!(log_index = index, %rejection, "policy change refused"),
        }
        Ok(outcome)
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
        let redacted = self.group_redacted.take();
        // Buffered: the Raft log holds these entries synced on a majority already.
        self.store
            .write(group, durability(Write::ApplyGroup))
            .map_err(io_err)?;
        if let Some(index) = redacted {
            self.redacted.send_replace(index);
        }
        if std::mem::take(&mut self.policy_touched) {
            self.policy_epoch.fetch_add(1, Ordering::Release);
        }
        // Handed over before the applied index moves, so whatever a reader finds applied is
        // either waiting here or was taken.
        let through = self.applied.as_ref().map_or(0, |id| id.index());
        let txs = self.engine.take_committed();
        if through >= self.group_from {
            let group = CommittedGroup {
                from: self.group_from,
                through,
                txs: txs.into_iter().map(Arc::new).collect(),
            };
            self.watched.push(group.clone());
            self.committed.push(group);
            self.group_from = through + 1;
        }
        self.versions.publish(self.engine.state_version());
        self.publish_applied();
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
            snapshots: self.snapshots.clone(),
        }
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, data: SnapshotData) -> io::Result<()> {
        let snapshots = self.snapshots.clone();
        let _busy = snapshots.busy.lock().await;
        let job = snapshots.jobs.start(
            crate::jobs::JobKind::SnapshotInstall,
            format!(
                "through log index {}",
                meta.last_log_id.as_ref().map_or(0, |l| l.index())
            ),
        );
        // One pass over the chunks checks the checksum and the whole audit chain before
        // anything is replaced; a refused snapshot leaves the state as it was.
        let head = match snapshot::check(&data) {
            Ok(head) => head,
            Err(e) => {
                warn!(error = %e, "refused a snapshot");
                snapshots.discard_unless_current(data.data.id);
                job.failed(format!("refused: {e}"), [("bytes", data.data.bytes)]);
                return Err(io_err(e));
            }
        };
        // From here until the install is written and the engine reloaded, reads of this node's
        // state are refused (`RaftNode::read_state`).
        let replacing = snapshots.replacing();
        // From the install record on, the chunks are the install's: a node that stops inside
        // it (a crash, an error) finishes it from them when it opens.
        data.mark_recorded();
        snapshots.begin_install(meta, &data.data)?;
        info!(snapshot = ?data, "installing a snapshot");
        let extra = install_rows(&snapshots, meta, &data)?;
        let mut installer =
            Installer::new(&*self.store, data.data.bytes, INSTALL_BATCH_BYTES).map_err(io_err)?;
        for seq in 0..data.data.chunks {
            installer.push(&data.read_chunk(seq)?).map_err(io_err)?;
            // Simulated time passes inside an install, as real time does, so the simulation's
            // crashes can land between its batches.
            #[cfg(madsim)]
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        installer.finish(extra).map_err(io_err)?;
        self.engine.reload().map_err(io_err)?;
        self.policy_epoch.fetch_add(1, Ordering::Release);
        self.applied = meta.last_log_id;
        self.group_from = self.applied.as_ref().map_or(0, |id| id.index()) + 1;
        self.membership = meta.last_membership.clone();
        self.versions.publish(self.engine.state_version());
        drop(replacing);
        self.publish_applied();
        // The replaced state's values, redacted ones included, are still in this node's files:
        // a snapshot made after a redaction this node never applied is purged like one it did.
        let last_redaction = engram_core::redact::last_redaction(&*self.store).map_err(io_err)?;
        self.redacted.send_if_modified(|seen| {
            let newer = last_redaction > *seen;
            *seen = (*seen).max(last_redaction);
            newer
        });
        info!(
            chain_index = head.index,
            bytes = data.data.bytes,
            "installed a snapshot; its audit chain verified"
        );
        job.done([
            ("bytes", data.data.bytes),
            ("chunks", u64::from(data.data.chunks)),
            ("chain_index", head.index),
        ]);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        Ok(self
            .snapshots
            .current()?
            .map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}

/// Writes a snapshot whose install is recorded (`Snapshots::begin_install`) over the state,
/// from its first chunk, with `more` rows in the last batch; nothing else may read or write the
/// state meanwhile (a node opening, a restore).
pub(crate) fn install_recorded_snapshot(
    store: &dyn Store,
    snapshots: &Snapshots,
    meta: &SnapshotMeta,
    data: &StoredSnapshot,
    mut more: WriteBatch,
) -> io::Result<()> {
    let mut extra = install_rows(snapshots, meta, data)?;
    extra.mutations.append(&mut more.mutations);
    let mut installer = Installer::new(store, data.data.bytes, INSTALL_BATCH_BYTES).map_err(io_err)?;
    for seq in 0..data.data.chunks {
        installer.push(&data.read_chunk(seq)?).map_err(io_err)?;
    }
    installer.finish(extra).map_err(io_err)?;
    Ok(())
}

/// The rows an install's last batch writes besides the snapshot's own: the applied position
/// and membership, and the snapshot as the current one.
fn install_rows(snapshots: &Snapshots, meta: &SnapshotMeta, data: &StoredSnapshot) -> io::Result<WriteBatch> {
    let mut rows = applied_and_membership_rows(&meta.last_log_id, &meta.last_membership)?;
    rows.mutations
        .append(&mut snapshots.end_install_rows(meta, &data.data)?.mutations);
    Ok(rows)
}

/// Builds a snapshot from one consistent view of the state space.
pub struct SnapshotBuilder {
    snapshots: Arc<Snapshots>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        // The applied position is captured in the same pass as the data, so meta and data
        // agree even though apply keeps running while this builds.
        let _busy = self.snapshots.busy.lock().await;
        let job = self.snapshots.jobs.start(crate::jobs::JobKind::SnapshotBuild, "");
        let (data, rows) = self.snapshots.build(&[APPLIED, MEMBERSHIP])?;
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
        self.snapshots.set_current(&meta, &data.data)?;
        info!(bytes = data.data.bytes, last_log_index = ?meta.last_log_id.as_ref().map(|l| l.index()), "built a snapshot");
        job.done([
            ("bytes", data.data.bytes),
            ("chunks", u64::from(data.data.chunks)),
            (
                "last_log_index",
                meta.last_log_id.as_ref().map_or(0, |l| l.index()),
            ),
        ]);
        Ok(Snapshot { meta, snapshot: data })
    }
}
