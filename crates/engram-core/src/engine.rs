use std::collections::BTreeMap;
use std::sync::Arc;

use engram_access::{PolicyOp, Principal};
use engram_audit::{
    AuditEntry, Author, Checkpoint, EntryKind, GENESIS_PREV_HASH, KeyAction, KeyChangeRequest, KeyId,
    KeyRecord, KeyRing, NodeKey, PublicKey, SignedCheckpoint, SignedEntry, apply_key_change, tx_content_hash,
};
use engram_merkle::{Blake3, MerkleHasher};
use engram_statetree::{Digest, StateTree};
use engram_storage::{CachedStore, Layered, Mutation, Overlay, ReadView, Space, Store, WriteBatch};
use engram_types::{
    Attribute, BranchName, EntityId, Hash, RedactPart, RedactRange, RedactRequest, RedactWhere,
    RetentionRule, Salt, TxId, TxReceipt, TxRequest, Value,
};

use crate::durability::{Write, durability};
use crate::planted::{self, PlantedBug};
use crate::rows::{
    ChainHead, IdempotencyRow, LastCheckpoint, Rejection, TxLogRow, TxOutcome, decode_row, encode_row,
};
use crate::{CoreError, commitment, keys, plan, policy, reads, redact, redact_where};

/// When a node signs a checkpoint of its chain: after every `every_entries` entries, or once
/// `every_ms` of transaction time has passed since the last one, whichever comes first (0
/// turns a trigger off). Both count the log, never a clock, so apply stays a pure function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointPolicy {
    pub every_entries: u64,
    pub every_ms: u64,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy {
            every_entries: 1000,
            every_ms: 1000,
        }
    }
}

/// The state machine. Owns the cached chain head; everything else lives in the store.
pub struct Engine {
    /// The store, as apply reads it: with the schema rows every transaction reads kept in
    /// memory ([`SCHEMA_ROW_PREFIXES`]). Every batch this engine writes or hands out passes
    /// [`CachedStore::written`] first, and a reload clears it; `base.store()` is the store
    /// itself, for writes and for reads that need no cache.
    base: CachedStore,
    keys: Arc<KeyRing>,
    head: ChainHead,
    policy: CheckpointPolicy,
    last_checkpoint: Option<LastCheckpoint>,
    /// The cluster's checkpoint origin, fixed by the genesis entry.
    origin: Option<String>,
    /// Whether a group is open ([`Engine::begin_group`]). Every entry is applied in one: an
    /// entry applied outside a group is a group of its own, written synced.
    grouped: bool,
    /// The open group's writes. Each entry reads through them (it must see what the entries
    /// before it in the group wrote), and [`Engine::end_group`] hands them to the caller as
    /// one batch: apply itself writes nothing to the store (key changes aside, see
    /// [`Engine::apply_key_change`]).
    pending: Overlay,
    /// The group's fresh attestations made inline (key changes), `(audit index, signer, entry
    /// hash, signature)`, checked in one batch by [`Engine::end_group`].
    unchecked: Vec<(u64, PublicKey, Hash, [u8; 64])>,
    /// Inside a group: the last entry sealed without an attestation. [`Engine::end_group`]
    /// attests it, and that one signature covers it and every entry before it.
    group_tail: Option<SignedEntry>,
    /// Only with the planted `HalfBatch` bug: the part of a group's batch not yet written.
    held_back: Option<WriteBatch>,
    /// The cached head moved in the open group and its row is not in `pending` yet. The head
    /// row is written once per group ([`Engine::write_head`]), not once per entry: it holds
    /// the Merkle frontier, and encoding it for every entry of a group only for the last one
    /// to be kept cost about 5% of a node's CPU under a write load.
    head_moved: bool,
    /// The audit entry that revoked this node's current signing key, if the chain revoked it:
    /// the key may attest entries up to that one and none after it, so the engine refuses to
    /// seal later entries instead of storing attestations no verifier accepts.
    signing_revoked_at: Option<u64>,
    /// The policy rows transactions are checked against, read once and kept until a policy
    /// change, a genesis entry or a reload (a snapshot install) clears them.
    grants: policy::PolicyCache,
    /// With [`Engine::keep_committed`]: the transactions the open group committed, with their
    /// datoms, for node-local indexes to take after the group is written
    /// ([`Engine::take_committed`]) instead of reading them back from the store. `None`: not
    /// kept (tools, tests).
    committed: Option<Vec<reads::LoggedTx>>,
    /// Set by [`Engine::salt_datoms_with`]: the seed the entry being applied carries, from which its
    /// datoms' salts come.
    salt_seed: Option<[u8; 32]>,
    /// Whether apply writes the slots' state-commitment rows (`crate::commitment`): the
    /// store's rows cover every slot (it is marked) or it held no datom when opened. An older
    /// store that is neither gets no rows until [`Engine::keep_state_commitment`] rebuilds
    /// them, so no slot ever holds a digest that skips part of its history.
    commits_state: bool,
    /// The store's datoms so far are covered: the mark is written, or the store held none.
    commitment_marked: bool,
    /// With [`Engine::keep_state_commitment`]: the map itself, its root the state root.
    state: Option<StateTree>,
    /// The map as the open group found it, put back if the group is discarded.
    state_at_group_start: Option<StateTree>,
    /// Set by [`Engine::record_state_root`]: the entry being applied carries the leader's ask
    /// that its audit entry record the state root (format 2).
    records_state_root: bool,
    /// Set by [`Engine::redact_whole_values`]: the redaction entry being applied takes values
    /// out of a slot whole (`crate::value_groups`).
    whole_values: bool,
    /// Set by [`Engine::redact_on_branches`]: the redaction entry being applied takes the
    /// entity's datoms on branches too (`crate::redact`).
    on_branches: bool,
}

/// What an idempotency key vouches for: the blake3 hash of the postcard encoding of every
/// field of the request but the key itself (ops, schema, branch op, namespace, branch,
/// preconditions, provenance). Computed at apply from the logged request, so every replica
/// computes the same hash. The destructuring names every field, so a new field cannot be left
/// out of the content by accident.
fn request_content_hash(req: &TxRequest) -> Hash {
    let TxRequest {
        namespace,
        branch,
        ops,
        schema,
        branch_op,
        preconditions,
        idempotency_key: _,
        provenance,
    } = req;
    let mut bytes = b"engram/idempotency-content/v1\0".to_vec();
    bytes.extend_from_slice(&encode_row(&(
        namespace,
        branch,
        ops,
        schema,
        branch_op,
        preconditions,
        provenance,
    )));
    Hash::of(&bytes)
}

/// What sealing an entry produced besides the entry.
struct Sealed {
    signed: SignedEntry,
    hash: Hash,
    signer: PublicKey,
    checkpoint: Option<LastCheckpoint>,
}

/// The key a put or delete writes; `None` for a range delete.
fn mutation_key(m: &Mutation) -> Option<(Space, Vec<u8>)> {
    match m {
        Mutation::Put { space, key, .. } | Mutation::Delete { space, key } => Some((*space, key.clone())),
        Mutation::DeleteRange { .. } => None,
    }
}

impl Engine {
    /// Opens the engine over `store`, loading the chain head (an empty chain on a new store),
    /// with the default checkpoint policy.
    pub fn open(store: Arc<dyn Store>, key: Arc<NodeKey>) -> Result<Engine, CoreError> {
        Engine::open_with(store, Arc::new(KeyRing::new(key)), CheckpointPolicy::default())
    }

    /// Opens the engine with this node's key ring and checkpoint policy. A key staged for a
    /// rotation that the chain has already applied (the node stopped before it switched) is
    /// promoted here.
    pub fn open_with(
        store: Arc<dyn Store>,
        keys: Arc<KeyRing>,
        policy: CheckpointPolicy,
    ) -> Result<Engine, CoreError> {
        let mut engine = Engine {
            head: ChainHead::default(),
            base: CachedStore::new(store, Space::State, SCHEMA_ROW_PREFIXES),
            keys,
            policy,
            last_checkpoint: None,
            origin: None,
            grouped: false,
            head_moved: false,
            pending: Overlay::new(),
            unchecked: Vec::new(),
            group_tail: None,
            held_back: None,
            signing_revoked_at: None,
            grants: policy::PolicyCache::default(),
            committed: None,
            salt_seed: None,
            commits_state: false,
            commitment_marked: false,
            state: None,
            state_at_group_start: None,
            records_state_root: false,
            whole_values: false,
            on_branches: false,
        };
        engine.reload()?;
        engine.settle_keys()?;
        engine.signing_revoked_at = engine.revocation_of_signing_key()?;
        Ok(engine)
    }

    /// The signing key this node attests entries and checkpoints with now.
    pub fn key(&self) -> Arc<NodeKey> {
        self.keys.current()
    }

    /// Switches to a staged key if the chain rotated the current key out in its favour.
    fn settle_keys(&self) -> Result<(), CoreError> {
        let current = self.keys.current().key_id();
        let retired = reads::signer(&self.view(), current)?.is_some_and(|row| row.retired_at.is_some());
        if !retired {
            return Ok(());
        }
        for staged in self.keys.staged() {
            if self.key_active(staged.key_id())? && self.keys.promote(&staged) {
                break;
            }
        }
        Ok(())
    }

    /// The cluster's checkpoint origin, once genesis is applied.
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    pub fn head(&self) -> &ChainHead {
        &self.head
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        self.base.store()
    }

    /// Re-reads the head after the store was replaced underneath (snapshot install).
    pub fn reload(&mut self) -> Result<(), CoreError> {
        self.grants.clear();
        self.base.clear();
        self.head = reads::head(&**self.store())?;
        self.last_checkpoint = match self.store().get(Space::State, keys::META_CHECKPOINT)? {
            Some(bytes) => Some(decode_row("last checkpoint", &bytes)?),
            None => None,
        };
        self.origin = reads::origin(&**self.store())?;
        self.signing_revoked_at = self.revocation_of_signing_key()?;
        self.attest_head()?;
        self.commitment_marked = commitment::marked(&**self.store())?;
        self.commits_state = self.commitment_marked || !holds_datoms(&**self.store())?;
        if self.state.is_some() {
            // Installed state: its rows, rebuilt first if it came from a store without them.
            self.state = None;
            self.keep_state_commitment()?;
        }
        Ok(())
    }

    /// From now on keeps the state commitment's map in memory (its root:
    /// [`Engine::state_root`]). A store written before the state commitment is first brought
    /// up to date: every slot's digest computed from its history ([`commitment::rebuild`], one
    /// read of every datom) and written with the mark, synced. Outside a group.
    pub fn keep_state_commitment(&mut self) -> Result<(), CoreError> {
        assert!(!self.grouped, "keep_state_commitment inside an apply group");
        if !self.commits_state {
            // Written a bounded batch at a time, the mark with the last: a stop in between
            // leaves no mark, and the next start rebuilds again.
            let store = self.store().clone();
            let base = &self.base;
            let write = |batch: WriteBatch| -> Result<(), CoreError> {
                base.written(&batch);
                Ok(store.write(batch, durability(Write::StateCommitmentRebuild))?)
            };
            let mut batch = WriteBatch::new();
            commitment::rebuild_each(&*store, &mut |slot, digest| {
                batch.put(
                    Space::State,
                    commitment::row_key(&slot),
                    commitment::encode_row(&digest),
                );
                if batch.len() >= REBUILD_BATCH_ROWS {
                    write(std::mem::take(&mut batch))?;
                }
                Ok(())
            })?;
            commitment::mark(&mut batch);
            write(batch)?;
            self.commitment_marked = true;
            self.commits_state = true;
        }
        self.state = Some(commitment::load(&**self.store())?);
        Ok(())
    }

    /// The state root after the last entry applied: the root of the map of every slot's digest
    /// (`crate::commitment`). `None` until [`Engine::keep_state_commitment`].
    pub fn state_root(&self) -> Option<Digest> {
        self.state.as_ref().map(StateTree::root)
    }

    /// The map itself, for proofs (`None` until [`Engine::keep_state_commitment`]).
    pub fn state_tree(&self) -> Option<&StateTree> {
        self.state.as_ref()
    }

    /// The map and the chain head as they stand, for proofs of reads while apply moves on (a
    /// clone is a version: O(1), and the next writes copy only the nodes they change).
    pub fn state_version(&self) -> Option<crate::state_proof::StateVersion> {
        self.state.as_ref().map(|tree| crate::state_proof::StateVersion {
            tree: tree.clone(),
            head: self.head.clone(),
        })
    }

    /// Attests the head entry if it has no attestation: the node stopped (or a snapshot was
    /// taken) after a group's entries were written and before the group's attestation was, so
    /// no entry stays uncovered for good. Written buffered: if a crash loses it, the next start
    /// signs again.
    fn attest_head(&mut self) -> Result<(), CoreError> {
        if self.head.index == 0 {
            return Ok(());
        }
        let index = self.head.index;
        let Some(bytes) = self.store().get(Space::State, &keys::audit(index))? else {
            return Err(CoreError::corrupt(
                format!("audit entry {index}"),
                "the chain head names an entry the store does not hold",
            ));
        };
        let stored =
            SignedEntry::decode(&bytes).map_err(|e| CoreError::corrupt(format!("audit entry {index}"), e))?;
        if stored.attestation.is_some() {
            return Ok(());
        }
        // A key revoked before the head may not sign it: the entries stay uncovered (and a
        // verifier says so) until this node runs with a new key.
        if self.signing_revoked_at.is_some_and(|at| index > at) {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        self.attest_into(stored, &mut batch);
        self.write_store(batch, Write::StartAttestation)?;
        Ok(())
    }

    /// Attests `entry` with the current key, checks the signature with the public key (the
    /// pair assertion: what is stored must verify before anyone relies on it), and puts the
    /// attested row and the `Mattested` mark into `batch`.
    fn attest_into(&self, mut entry: SignedEntry, batch: &mut WriteBatch) {
        let key = self.keys.current();
        let signature = entry.attest(&key);
        let index = entry.entry.index;
        if !planted::active(PlantedBug::SkipGroupAttestation) {
            assert!(
                key.verify_own(entry.entry.hash().as_bytes(), &signature),
                "I4 signatures-valid: fresh attestation of audit entry {index} does not verify"
            );
            batch.put(Space::State, keys::audit(index), entry.encode());
            batch.put(
                Space::State,
                keys::META_ATTESTED.to_vec(),
                index.to_be_bytes().to_vec(),
            );
        }
    }

    /// The audit entry that revoked this node's current signing key, as the applied chain says.
    fn revocation_of_signing_key(&self) -> Result<Option<u64>, CoreError> {
        let current = self.keys.current().key_id();
        Ok(reads::signer(&self.view(), current)?.and_then(|row| row.revoked_at))
    }

    /// Writes `batch` to the store now, through the schema-row cache.
    fn write_store(&self, batch: WriteBatch, write: Write) -> Result<(), CoreError> {
        self.base.written(&batch);
        Ok(self.store().write(batch, durability(write))?)
    }

    /// The store as the open group's next entry sees it: with the group's writes so far.
    fn view(&self) -> Layered<'_> {
        self.pending.over(&self.base)
    }

    /// [`policy::PolicyCache::check_tx`] at this entry, through the engine's cache of the policy rows (a
    /// policy change, a genesis entry and a reload clear it, so it answers as the rows do).
    fn check_grants(
        &mut self,
        principal: Option<&Principal>,
        req: &TxRequest,
    ) -> Result<Result<(), Rejection>, CoreError> {
        let view = self.pending.over(&self.base);
        self.grants.check_tx(&view, principal, req)
    }

    /// Opens a group of entries (one Raft apply call). Entries are applied into the group,
    /// not the store, and [`Engine::end_group`] returns the whole group as one batch that the
    /// caller writes buffered: the state machine never syncs. Durability comes from the Raft
    /// log, synced on a majority before an entry commits; the state's writes share the
    /// store's write-ahead log with the Raft log, so the next synced write (a log append, a
    /// vote, a purge) makes them durable too. A crash loses at most the last groups, which Raft
    /// applies again from its log, and apply being a pure function of (state, entry) makes the
    /// second time byte-identical. The log is never purged past what is durable here, because
    /// a purge is itself a synced write, made after the entries it covers were applied.
    pub fn begin_group(&mut self) {
        // An apply that failed inside a group stops the node; a second open is a bug.
        assert!(!self.grouped, "an apply group is already open");
        self.grouped = true;
        self.state_at_group_start = self.state.clone();
        // Planted `HalfBatch`: what the last group held back is written with this one.
        if let Some(rest) = self.held_back.take() {
            self.pending.absorb(rest);
        }
    }

    /// Closes the group and returns its writes as one batch for the caller to write: every
    /// entry's rows, then `closing` (rows the caller writes last, e.g. its applied log id).
    /// A row several entries rewrote (the chain head, the applied log id) is in it once.
    ///
    /// The group's last entry is attested here, once for the whole group: its signature covers
    /// every entry before it through the hash chain (I4 is coverage, see `docs/AUDIT.md`).
    /// The new signature and any made inline in the group (key changes) are verified before
    /// the batch is returned: a bad one stops the node, naming its audit index, before anyone
    /// hears of the group.
    pub fn end_group(&mut self, mut closing: WriteBatch) -> Result<WriteBatch, CoreError> {
        assert!(self.grouped, "end_group without an open apply group");
        self.grouped = false;
        self.state_at_group_start = None;
        if let Some(tail) = self.group_tail.take() {
            assert_eq!(
                tail.entry.index, self.head.index,
                "I4 signatures-valid: the group's unattested tail must be the head"
            );
            self.attest_into(tail, &mut closing);
        }
        let unchecked = std::mem::take(&mut self.unchecked);
        let mut by_signer: BTreeMap<PublicKey, Vec<(u64, Hash, [u8; 64])>> = BTreeMap::new();
        for (index, signer, hash, signature) in unchecked {
            by_signer
                .entry(signer)
                .or_default()
                .push((index, hash, signature));
        }
        for (signer, items) in by_signer {
            let pairs: Vec<(Hash, [u8; 64])> = items.iter().map(|(_, h, s)| (*h, *s)).collect();
            if let Err(i) = engram_audit::verify_all_by(&signer, &pairs) {
                panic!(
                    "I4 signatures-valid: fresh attestation of audit entry {} does not verify",
                    items[i].0
                );
            }
        }
        self.write_head();
        let half_batch = planted::active(PlantedBug::HalfBatch);
        let closing_keys: Vec<(Space, Vec<u8>)> = if half_batch {
            closing.mutations.iter().filter_map(mutation_key).collect()
        } else {
            Vec::new()
        };
        self.pending.absorb(closing);
        let mut batch = std::mem::take(&mut self.pending).into_batch();
        self.base.written(&batch);
        if half_batch && batch.len() >= 2 {
            // The closing rows (the applied log position) go in the first half, the rest is
            // written only with the next group, so a crash in between leaves half a group
            // that the node believes applied.
            batch
                .mutations
                .sort_by_key(|m| mutation_key(m).is_none_or(|k| !closing_keys.contains(&k)));
            let rest = batch.mutations.split_off(batch.len() / 2);
            self.held_back = Some(WriteBatch { mutations: rest });
        }
        Ok(batch)
    }

    /// From now on, keeps each group's committed transactions for [`Engine::take_committed`].
    pub fn keep_committed(&mut self) {
        self.committed.get_or_insert_with(Vec::new);
    }

    /// The transactions committed since the last call, oldest first, each as the tx log holds
    /// it; empty unless [`Engine::keep_committed`] was called. Take them only once their group
    /// is written: until then they are not in the store, and may never be.
    pub fn take_committed(&mut self) -> Vec<reads::LoggedTx> {
        self.committed.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Forgets an open group's writes: its apply failed, and the node stops.
    fn discard_group(&mut self) {
        if let Some(committed) = &mut self.committed {
            committed.clear();
        }
        self.grouped = false;
        self.pending = Overlay::new();
        self.state = self.state_at_group_start.take();
        self.head_moved = false;
        self.group_tail = None;
        self.unchecked.clear();
    }

    /// Runs `apply` in the open group or, outside one, as a group of its own written at once,
    /// synced (no Raft log sync follows it). Tools and tests that apply entries one at a time
    /// go through the same path as the state machine's groups.
    fn in_group<T>(
        &mut self,
        apply: impl FnOnce(&mut Engine) -> Result<T, CoreError>,
    ) -> Result<T, CoreError> {
        if self.grouped {
            return apply(self);
        }
        self.begin_group();
        let out = match apply(self) {
            Ok(out) => out,
            Err(e) => {
                self.discard_group();
                return Err(e);
            }
        };
        let batch = self.end_group(WriteBatch::new())?;
        self.store().write(batch, durability(Write::StandaloneApply))?;
        Ok(out)
    }

    /// Adds a sealed entry's batch to the group and advances the cached head.
    fn commit(&mut self, batch: WriteBatch, head: ChainHead, sealed: &Sealed) {
        self.pending.absorb(batch);
        self.track(sealed);
        if self.origin.is_none() && sealed.signed.entry.index == 1 {
            self.origin = Some(Checkpoint::origin_for(&head.hash));
        }
        self.head = head;
        self.head_moved = true;
        if sealed.signed.entry.index == 1 {
            // Genesis: whether a head row exists says whether the node is in a cluster yet
            // (`policy::settled_mode`), and the entries after it in the group must see it.
            self.write_head();
        }
        if let Some(cp) = sealed.checkpoint {
            self.last_checkpoint = Some(cp);
        }
    }

    /// Puts the cached head's row into the group's writes if the head moved since it was last
    /// put there. Called before the group's writes leave the engine, so the stored head
    /// always matches the last entry stored.
    fn write_head(&mut self) {
        if std::mem::take(&mut self.head_moved) {
            let mut row = WriteBatch::new();
            row.put(Space::State, keys::META_HEAD.to_vec(), encode_row(&self.head));
            self.pending.absorb(row);
        }
    }

    /// Keeps what [`Engine::end_group`] needs of an entry sealed in a group: an inline
    /// attestation to check, or the unattested tail to attest. An attested entry covers every
    /// unattested one before it, so it ends the tail.
    fn track(&mut self, sealed: &Sealed) {
        match &sealed.signed.attestation {
            Some(attestation) => {
                self.unchecked.push((
                    sealed.signed.entry.index,
                    sealed.signer,
                    sealed.hash,
                    attestation.signature,
                ));
                self.group_tail = None;
            }
            None => self.group_tail = Some(sealed.signed.clone()),
        }
    }

    /// Records rows that belong to an entry with no state change of its own (a blank entry).
    pub fn apply_noop(&mut self, extra: WriteBatch) -> Result<(), CoreError> {
        self.in_group(|engine| {
            engine.pending.absorb(extra);
            Ok(())
        })
    }

    /// Records a membership change in the chain. Genesis (the first entry) makes its members'
    /// keys the trust root; later membership entries record who the members are but trust no
    /// key (a key is admitted by a key change, see [`Engine::apply_key_change`]). Membership
    /// entries carry no leader time, so they take the previous transaction time.
    pub fn apply_membership(
        &mut self,
        log_index: u64,
        members: Vec<(u64, PublicKey)>,
        batch: WriteBatch,
    ) -> Result<SignedEntry, CoreError> {
        // Genesis may come with the pending-mode row (see `policy::pending_mode_row`).
        self.grants.clear();
        self.in_group(|engine| engine.membership_in_group(log_index, members, batch))
    }

    fn membership_in_group(
        &mut self,
        log_index: u64,
        members: Vec<(u64, PublicKey)>,
        mut batch: WriteBatch,
    ) -> Result<SignedEntry, CoreError> {
        if self.head.index == 0 {
            for (node_id, key) in &members {
                let row = KeyRecord {
                    key: *key,
                    node_id: *node_id,
                    admitted_at: 1,
                    retired_at: None,
                    revoked_at: None,
                };
                batch.put(Space::State, keys::signer(key.key_id()), encode_row(&row));
            }
        }
        let entry = AuditEntry {
            index: self.head.index + 1,
            tx: TxId(log_index),
            tx_time_ns: self.head.tx_time_ns,
            namespace: String::new(),
            kind: EntryKind::Membership { members },
            prev_hash: self.chain_prev(),
            state_root: None,
        };
        let mut head = self.head.clone();
        let sealed = self.seal(entry, &mut head, &mut batch, false)?;
        self.commit(batch, head, &sealed);
        Ok(sealed.signed)
    }

    /// Applies a key change: admits, rotates or revokes a key if `req` is authorised by a key
    /// active at this point (the rule is engram-audit's [`apply_key_change`], the same one a
    /// verifier applies). A refused change writes nothing but `batch`.
    pub fn apply_key_change(
        &mut self,
        log_index: u64,
        req: &KeyChangeRequest,
        batch: WriteBatch,
    ) -> Result<Result<SignedEntry, Rejection>, CoreError> {
        self.in_group(|engine| engine.key_change_in_group(log_index, req, batch))
    }

    fn key_change_in_group(
        &mut self,
        log_index: u64,
        req: &KeyChangeRequest,
        batch: WriteBatch,
    ) -> Result<Result<SignedEntry, Rejection>, CoreError> {
        let Some(origin) = self.origin.clone() else {
            self.apply_noop(batch)?;
            return Ok(Err(Rejection::KeyChange("the chain has no genesis yet".into())));
        };
        let index = self.head.index + 1;
        let mut wanted = vec![req.authorizer];
        match &req.action {
            KeyAction::Admit { key, .. } => wanted.push(key.key_id()),
            KeyAction::Rotate { old, new, .. } => wanted.extend([*old, new.key_id()]),
            KeyAction::Revoke { key, .. } => wanted.push(*key),
        }
        let mut known = BTreeMap::new();
        for id in wanted {
            if let Some(row) = reads::signer(&self.view(), id)? {
                known.insert(id, row);
            }
        }
        let before = known.clone();
        if let Err(fault) = apply_key_change(
            &mut known,
            index,
            &origin,
            &req.action,
            req.authorizer,
            &req.authorization,
        ) {
            self.apply_noop(batch)?;
            return Ok(Err(Rejection::KeyChange(fault.to_string())));
        }
        let mut batch = batch;
        for (id, record) in &known {
            if before.get(id) != Some(record) {
                batch.put(Space::State, keys::signer(*id), encode_row(record));
            }
        }
        let entry = AuditEntry {
            index,
            tx: TxId(log_index),
            tx_time_ns: self.head.tx_time_ns,
            namespace: String::new(),
            kind: EntryKind::KeyChange {
                action: req.action.clone(),
                authorizer: req.authorizer,
                authorization: req.authorization,
            },
            prev_hash: self.chain_prev(),
            state_root: None,
        };
        let mut head = self.head.clone();
        // Attested inline even in a group: the entry is written synced, and the key it may
        // retire or revoke must sign it (and everything before it) before the switch below.
        let sealed = self.seal(entry, &mut head, &mut batch, true)?;
        if let KeyAction::Revoke { key, .. } = &req.action
            && *key == self.keys.current().key_id()
        {
            self.drop_checkpoints_signed_by_own_key(&mut batch)?;
        }
        // Written synced at once with the group so far: a rotation below switches this
        // node's key (and rewrites its key file), which must never be ahead of the entry that
        // admits the new key, or a crash would have the node apply the earlier entries again
        // with a key not yet admitted. The only write apply makes itself; key changes are rare.
        self.commit(batch, head, &sealed);
        self.write_head();
        let written = std::mem::take(&mut self.pending).into_batch();
        self.write_store(written, Write::KeyChange)?;
        // This node's own rotation: sign with the new key from the next entry on. (Only the
        // node that staged the new key holds it; the other replicas keep their keys.)
        if let KeyAction::Rotate { old, new, .. } = &req.action
            && *old == self.keys.current().key_id()
        {
            self.keys.promote(new);
        }
        // This node's own key revoked: this entry is the last it may attest.
        if let KeyAction::Revoke { key, .. } = &req.action
            && *key == self.keys.current().key_id()
        {
            self.signing_revoked_at = Some(index);
        }
        Ok(Ok(sealed.signed))
    }

    /// Deletes, in `batch`, every checkpoint this node signed with its current key. Called when
    /// the chain revokes that key: a verifier refuses every checkpoint a revoked key ever signed
    /// (a stolen key could sign one for any size), so they are no longer evidence of anything
    /// and would only make this node's own store fail verification. Checkpoints are this node's
    /// evidence, not replicated state, so dropping them changes no replica digest.
    fn drop_checkpoints_signed_by_own_key(&self, batch: &mut WriteBatch) -> Result<(), CoreError> {
        const PAGE: usize = 1024;
        let own = self.keys.current().public();
        let end = [keys::CHECKPOINT + 1];
        let mut start = vec![keys::CHECKPOINT];
        loop {
            let rows = self.view().scan(Space::State, &start, Some(&end), PAGE)?;
            let full = rows.len() == PAGE;
            for (key, value) in &rows {
                let note = SignedCheckpoint::parse_bytes(value)
                    .map_err(|e| CoreError::corrupt(format!("checkpoint row {key:02x?}"), e))?;
                if !note.signers([&own]).is_empty() {
                    batch.delete(Space::State, key.clone());
                }
            }
            match rows.last() {
                Some((last, _)) if full => {
                    start = last.clone();
                    start.push(0);
                }
                _ => return Ok(()),
            }
        }
    }

    /// Whether `key` is trusted by the chain now (admitted, not rotated out or revoked).
    pub fn key_active(&self, key: KeyId) -> Result<bool, CoreError> {
        reads::key_active(&self.view(), key)
    }

    fn chain_prev(&self) -> Hash {
        if self.head.index == 0 {
            GENESIS_PREV_HASH
        } else {
            self.head.hash
        }
    }

    /// Checks `entry` against the head (a corruption-class assertion), signs it if `attest`
    /// (outside a group, and for key changes; in a group the group's last entry is attested
    /// by [`Engine::end_group`]), adds it, its Merkle tree nodes and (when the policy says so)
    /// a signed checkpoint to `batch`, and advances `head`.
    fn seal(
        &self,
        entry: AuditEntry,
        head: &mut ChainHead,
        batch: &mut WriteBatch,
        attest: bool,
    ) -> Result<Sealed, CoreError> {
        assert_eq!(
            entry.index,
            self.head.index + 1,
            "I1 chain-continuity: audit index must be contiguous"
        );
        if !planted::active(PlantedBug::WrongPrevHash) {
            assert_eq!(
                entry.prev_hash,
                self.chain_prev(),
                "I1 chain-continuity: prev_hash must be the head"
            );
        }
        assert!(
            entry.tx_time_ns >= self.head.tx_time_ns,
            "I7 tx-time-monotonic violated at {}",
            entry.index
        );
        assert!(
            entry.tx > self.head.tx || self.head.index == 0,
            "tx ids must increase at {}",
            entry.index
        );
        if let Some(revoked_at) = self.signing_revoked_at.filter(|at| entry.index > *at) {
            return Err(CoreError::SigningKeyRevoked {
                key_id: self.keys.current().key_id().to_string(),
                revoked_at,
                index: entry.index,
            });
        }
        let hash = entry.hash();
        let key = self.keys.current();
        let signed = if attest {
            let mut signed = SignedEntry::unattested(entry);
            // The pair assertion (what is stored must verify with our own key before anyone
            // is told of it) is made by `end_group`, for the group's inline signatures at once.
            signed.attest(&key);
            batch.put(
                Space::State,
                keys::META_ATTESTED.to_vec(),
                signed.entry.index.to_be_bytes().to_vec(),
            );
            signed
        } else {
            SignedEntry::unattested(entry)
        };
        batch.put(Space::State, keys::audit(signed.entry.index), signed.encode());

        // The Merkle tree: every perfect subtree of 2^MERKLE_STORED_LEVEL leaves or more that
        // the new leaf completes is stored, so proofs read O(log n) rows and at most a few
        // entries; the head keeps the frontier, so the root costs O(log n) hashes.
        let mut tree = head.tree()?;
        tree.push_leaf_hash_visiting(Blake3::hash_leaf(hash.as_bytes()), |level, position, node| {
            if level >= keys::MERKLE_STORED_LEVEL {
                batch.put(Space::State, keys::merkle_node(level, position), node.to_vec());
            }
        });
        assert_eq!(
            tree.size(),
            signed.entry.index,
            "Merkle tree size must equal the chain index"
        );
        head.frontier = tree.frontier().iter().map(|d| Hash(*d)).collect();
        head.index = signed.entry.index;
        head.hash = hash;
        head.tx = signed.entry.tx;
        head.tx_time_ns = signed.entry.tx_time_ns;
        // The head row itself is written when the group closes (`Engine::write_head`).

        // A node signs no checkpoint with a key the entry it seals revokes.
        let revokes_own_key = matches!(
            &signed.entry.kind,
            EntryKind::KeyChange { action: KeyAction::Revoke { key: revoked, .. }, .. }
                if *revoked == key.key_id()
        );
        let checkpoint = if !revokes_own_key && self.checkpoint_due(head) {
            let origin = match (&self.origin, head.index) {
                (Some(origin), _) => origin.clone(),
                // Genesis is being sealed: it fixes the origin.
                (None, 1) => Checkpoint::origin_for(&hash),
                (None, _) => {
                    return Err(CoreError::corrupt(
                        "audit entry 1",
                        "the chain has entries but no genesis entry",
                    ));
                }
            };
            let note = Checkpoint {
                origin,
                size: head.index,
                root: Hash(tree.root()),
                tx_time_ns: head.tx_time_ns,
            }
            .sign(&key);
            batch.put(
                Space::State,
                keys::checkpoint(head.index),
                note.to_text().into_bytes(),
            );
            let last = LastCheckpoint {
                size: head.index,
                tx_time_ns: head.tx_time_ns,
            };
            batch.put(Space::State, keys::META_CHECKPOINT.to_vec(), encode_row(&last));
            Some(last)
        } else {
            None
        };
        Ok(Sealed {
            signed,
            hash,
            signer: key.public(),
            checkpoint,
        })
    }

    /// Whether the entry just sealed into `head` completes a checkpoint under the policy. The
    /// first entry (genesis) always gets one, so a chain is pinnable from its start.
    fn checkpoint_due(&self, head: &ChainHead) -> bool {
        let Some(last) = self.last_checkpoint else {
            return true;
        };
        let CheckpointPolicy {
            every_entries,
            every_ms,
        } = self.policy;
        let by_count = every_entries > 0 && head.index.saturating_sub(last.size) >= every_entries;
        let every_ns = i64::try_from(every_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
        let by_time = every_ms > 0 && head.tx_time_ns.saturating_sub(last.tx_time_ns) >= every_ns;
        by_count || by_time
    }

    /// Salts the datoms the entries applied from now on make with `seed`: the random seed the
    /// leader chose for the entry about to be applied and carried in it, so every replica
    /// makes the same salts (`engram_types::salt_of`). The caller clears it (`None`) after that
    /// entry; entries without a seed (written before salts, applied by tools) make unsalted
    /// datoms.
    pub fn salt_datoms_with(&mut self, seed: Option<[u8; 32]>) {
        self.salt_seed = seed;
    }

    /// Whether the transaction entries applied from now on record the state root after them
    /// (audit entry format 2): set for an entry whose log entry asks it (every entry a leader
    /// of a build that keeps the state commitment proposes), cleared after it, so every
    /// replica records it for the same entries.
    pub fn record_state_root(&mut self, record: bool) {
        self.records_state_root = record;
    }

    /// Whether the redaction entries applied from now on take a value out of a slot whole,
    /// with every datom the fold matched with it (`crate::value_groups`): set for an entry
    /// whose log entry asks it (every redaction a leader of a build that groups values
    /// proposes), cleared after it, so entries proposed before apply as they did.
    pub fn redact_whole_values(&mut self, whole: bool) {
        self.whole_values = whole;
    }

    /// Whether the redaction entries applied from now on take what they target on every
    /// branch of the namespace too (`crate::redact::part_targets`,
    /// `crate::redact_where::range_targets`): set for an entry whose log entry asks it (every
    /// redaction a leader of a build that redacts branches proposes), cleared after it, so
    /// entries proposed before apply to main only, as they did.
    pub fn redact_on_branches(&mut self, on_branches: bool) {
        self.on_branches = on_branches;
    }

    /// The state root the entry being sealed records, if it records one.
    fn entry_state_root(&self, index: u64) -> Result<Option<Hash>, CoreError> {
        if !self.records_state_root {
            return Ok(None);
        }
        if !self.commits_state {
            return Err(CoreError::StateCommitmentIncomplete { index });
        }
        // `tx_in_group` loads the map before it moves the slots, when it is not kept.
        Ok(self.state.as_ref().map(|tree| Hash(tree.root())))
    }

    /// Applies one transaction carried by the log entry at `log_index`. `proposed_time_ns` is
    /// the leader's clock reading carried in the entry; the transaction time is that, or the
    /// previous transaction time if the leader's clock is behind (I7). `extra` holds rows the
    /// caller needs written atomically with the transaction (its applied log id).
    pub fn apply_tx(
        &mut self,
        log_index: u64,
        proposed_time_ns: i64,
        req: &TxRequest,
        batch: WriteBatch,
    ) -> Result<TxOutcome, CoreError> {
        self.apply_tx_as(log_index, proposed_time_ns, req, None, batch)
    }

    /// [`Engine::apply_tx`] for a request the gateway authenticated as `principal` (`None`:
    /// unsigned). The policy in force at this entry decides ([`policy::PolicyCache::check_tx`]): a
    /// transaction it refuses is a `Rejection` that writes nothing but `batch`.
    pub fn apply_tx_as(
        &mut self,
        log_index: u64,
        proposed_time_ns: i64,
        req: &TxRequest,
        principal: Option<&Principal>,
        batch: WriteBatch,
    ) -> Result<TxOutcome, CoreError> {
        self.in_group(|engine| {
            if let Err(rejection) = engine.check_grants(principal, req)? {
                engine.apply_noop(batch)?;
                return Ok(Err(rejection));
            }
            engine.tx_in_group(log_index, proposed_time_ns, req, None, &[], batch)
        })
    }

    /// Applies a transaction whose request `author` signed: the signature must hold at this
    /// entry ([`policy::check_author`]), the agent is then checked like any principal, and the
    /// entry records the signature, with the request's canonical bytes kept beside it (`W`
    /// row) for the export.
    pub fn apply_tx_signed(
        &mut self,
        log_index: u64,
        proposed_time_ns: i64,
        req: &TxRequest,
        author: &Author,
        batch: WriteBatch,
    ) -> Result<TxOutcome, CoreError> {
        self.in_group(|engine| {
            let signed = req.signed_bytes();
            let checked = match policy::check_author(&engine.view(), author, &signed)? {
                Ok(principal) => engine.check_grants(Some(&principal), req)?,
                Err(rejection) => Err(rejection),
            };
            if let Err(rejection) = checked {
                engine.apply_noop(batch)?;
                return Ok(Err(rejection));
            }
            engine.tx_in_group(
                log_index,
                proposed_time_ns,
                req,
                Some((author, &signed)),
                &[],
                batch,
            )
        })
    }

    /// [`Engine::apply_tx_signed`] for a request `author` signed in its committed form
    /// (`TxRequest::committed_bytes`: each value's commitment under its salt in `salts`, one
    /// per op, then one per precondition):
    /// the signature must cover that form, each datom takes its op's salt (so its hash commits
    /// to its value as the signature does), and the `W` row keeps the salted form
    /// (`TxRequest::salted_bytes`), from which a verifier rebuilds the signed bytes.
    pub fn apply_tx_committed(
        &mut self,
        log_index: u64,
        proposed_time_ns: i64,
        req: &TxRequest,
        author: &Author,
        salts: &[Salt],
        batch: WriteBatch,
    ) -> Result<TxOutcome, CoreError> {
        self.in_group(|engine| {
            // The leader's gate checked the count; an entry whose salts do not fit its ops
            // writes nothing on any replica.
            let forms = req
                .committed_bytes(salts)
                .and_then(|c| Ok((c, req.salted_bytes(salts)?)));
            let (committed, kept) = match forms {
                Ok(forms) => forms,
                Err(e) => {
                    engine.apply_noop(batch)?;
                    return Ok(Err(Rejection::Unauthenticated(format!(
                        "the signed request's value salts do not fit it: {e}"
                    ))));
                }
            };
            let checked = match policy::check_author(&engine.view(), author, &committed)? {
                Ok(principal) => engine.check_grants(Some(&principal), req)?,
                Err(rejection) => Err(rejection),
            };
            if let Err(rejection) = checked {
                engine.apply_noop(batch)?;
                return Ok(Err(rejection));
            }
            // The ops' salts (the preconditions' follow them) go to the datoms, in op order.
            let op_salts = salts.get(..req.ops.len()).unwrap_or_default();
            engine.tx_in_group(
                log_index,
                proposed_time_ns,
                req,
                Some((author, &kept)),
                op_salts,
                batch,
            )
        })
    }

    /// Applies a change to agents, keys, grants or the mode, made by `actor`: checked against
    /// the policy in force ([`policy::plan_change`]), recorded as one transaction of the system
    /// namespace, and reflected in the policy rows in the same group.
    pub fn apply_policy(
        &mut self,
        log_index: u64,
        proposed_time_ns: i64,
        op: &PolicyOp,
        by: &PolicyActor,
        batch: WriteBatch,
    ) -> Result<TxOutcome, CoreError> {
        // Whatever the outcome, the policy rows may change here: read them afresh after.
        self.grants.clear();
        self.in_group(|engine| {
            // A signed change: its signature must hold at this entry, as a transaction's must.
            let (actor, author) = match by {
                PolicyActor::Unsigned(principal) => (principal.clone(), None),
                PolicyActor::Signed(author) => {
                    let checked = match op.signed_bytes() {
                        None => Err(Rejection::Unauthenticated(
                            "the security mode is recorded by the cluster's initialisation, never by an agent".into(),
                        )),
                        Some(bytes) => policy::check_author(&engine.view(), author, &bytes)?
                            .map(|principal| (principal, bytes)),
                    };
                    match checked {
                        Ok((principal, bytes)) => (Some(principal), Some((author, bytes))),
                        Err(rejection) => {
                            engine.apply_noop(batch)?;
                            return Ok(Err(rejection));
                        }
                    }
                }
            };
            // The change's transaction time, as `tx_in_group` will stamp it: a session's
            // deadline and its lapse are read against it, so the chain alone shows both.
            let tx_time_ns = proposed_time_ns.max(engine.head.tx_time_ns);
            let planned = match policy::plan_change(&engine.view(), op, actor.as_ref(), tx_time_ns)? {
                Ok(planned) => planned,
                Err(rejection) => {
                    engine.apply_noop(batch)?;
                    return Ok(Err(rejection));
                }
            };
            let request = planned.request.clone();
            let signed = author.as_ref().map(|(a, bytes)| (*a, bytes.as_slice()));
            let outcome = engine.tx_in_group(log_index, proposed_time_ns, &request, signed, &[], batch)?;
            if let Ok(receipt) = &outcome {
                let rows = planned.rows(receipt.tx, &receipt.temp_ids)?;
                engine.pending.absorb(rows);
            }
            Ok(outcome)
        })
    }

    /// Applies a redaction asked by `by` (`crate::redact`), whole (`part` `None`: an entry
    /// from before parts) or one part of it: checked against the policy in force (the `redact`
    /// grant in enforced mode), evaluated against the state at this entry, and recorded as one
    /// transaction of the system namespace listing every datom it takes, whose rows are
    /// rewritten to their redacted form in the same group. A refused or empty redaction (or
    /// part) is a `Rejection` that writes nothing but `batch`.
    pub fn apply_redaction(
        &mut self,
        log_index: u64,
        proposed_time_ns: i64,
        req: &RedactRequest,
        part: Option<&RedactPart>,
        by: &PolicyActor,
        batch: WriteBatch,
    ) -> Result<TxOutcome, CoreError> {
        self.in_group(|engine| {
            let signed_bytes = req.signed_bytes();
            let (principal, author) = match by {
                PolicyActor::Unsigned(principal) => (principal.clone(), None),
                PolicyActor::Signed(author) => {
                    match policy::check_author(&engine.view(), author, &signed_bytes)? {
                        Ok(principal) => (Some(principal), Some(author)),
                        Err(rejection) => {
                            engine.apply_noop(batch)?;
                            return Ok(Err(rejection));
                        }
                    }
                }
            };
            let view = engine.pending.over(&engine.base);
            let checked = engine.grants.check_redact(&view, principal.as_ref(), req)?;
            let targets = match (checked, part) {
                (Err(rejection), _) => Err(rejection),
                (Ok(()), None) => redact::targets(&view, req, redact::WHOLE_ENTRY_MAX_DATOMS, false)?,
                (Ok(()), Some(part)) => {
                    let whole = engine.whole_values && !planted::active(PlantedBug::RedactionSplitsAValue);
                    redact::part_targets(&view, req, part, whole, engine.on_branches)?
                }
            };
            let targets = match targets {
                Ok(targets) => targets,
                Err(rejection) => {
                    engine.apply_noop(batch)?;
                    return Ok(Err(rejection));
                }
            };
            let format = match part {
                None => redact::RecordFormat::PerDatom,
                Some(part) => redact::RecordFormat::Packed {
                    part_of: part.first_tx,
                },
            };
            let record = redact::record(req, &targets, format);
            let signed = author.map(|a| (a, signed_bytes.as_slice()));
            let outcome = engine.tx_in_group(log_index, proposed_time_ns, &record, signed, &[], batch)?;
            if let Ok(receipt) = &outcome {
                let rows = redact::rows(&engine.view(), &req.namespace, &targets, receipt.tx)?;
                engine.pending.absorb(rows);
            }
            Ok(outcome)
        })
    }

    /// Applies one range of a redaction by predicate (`crate::redact_where`), asked by
    /// `principal` (checked for the `redact` grant like any redaction) or, with `retention`,
    /// proposed by the leader for a retention policy (checked against the policy in force at
    /// this entry, and for a time rule the entry's time, instead; a versions rule also takes
    /// only what the policy no longer keeps). Evaluated against the state at this entry and
    /// recorded like a part of an entity's redaction. A refused or empty range is a
    /// `Rejection` that writes nothing but `batch`.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_redaction_where(
        &mut self,
        log_index: u64,
        proposed_time_ns: i64,
        req: &RedactWhere,
        range: &RedactRange,
        principal: Option<&Principal>,
        retention: Option<RetentionRule>,
        batch: WriteBatch,
    ) -> Result<TxOutcome, CoreError> {
        self.in_group(|engine| {
            // A time predicate finds its bound from the chain head (`reads::tx_at_time`), and
            // inside a group the head's row is written only when the group ends: put it in the
            // view first, so the bound is the same however the log was cut into groups.
            if !planted::active(PlantedBug::RedactionBoundFromGroupStart) {
                engine.write_head();
            }
            let view = engine.pending.over(&engine.base);
            let checked = match retention {
                Some(RetentionRule::KeepMs(keep_ms)) => {
                    policy::retention_allows(&view, req, keep_ms, proposed_time_ns)?
                }
                Some(RetentionRule::KeepVersions(keep)) => {
                    policy::retention_versions_allow(&view, req, keep)?
                }
                Some(RetentionRule::SessionEnded) => policy::session_allows(&view, req)?,
                None => engine.grants.check_redact_where(&view, principal, req)?,
            };
            let keep_versions = retention.and_then(|r| r.keep_versions());
            let groups = match (engine.whole_values, retention) {
                _ if planted::active(PlantedBug::RedactionSplitsAValue) => redact_where::Groups::Split,
                (false, _) => redact_where::Groups::Split,
                (true, None) => redact_where::Groups::Whole,
                (true, Some(_)) => redact_where::Groups::WholeIfAllMatch,
            };
            let targets = match checked {
                Err(rejection) => Err(rejection),
                Ok(()) => {
                    redact_where::range_targets(&view, req, keep_versions, groups, range, engine.on_branches)?
                }
            };
            let targets = match targets {
                Ok(targets) => targets,
                Err(rejection) => {
                    engine.apply_noop(batch)?;
                    return Ok(Err(rejection));
                }
            };
            let record = redact_where::record(req, &targets, range.first_tx, retention);
            let outcome = engine.tx_in_group(log_index, proposed_time_ns, &record, None, &[], batch)?;
            if let Ok(receipt) = &outcome {
                let rows = redact::rows(&engine.view(), &req.namespace, &targets, receipt.tx)?;
                engine.pending.absorb(rows);
            }
            Ok(outcome)
        })
    }

    /// Moves the digest of every slot the transaction wrote one link (`crate::commitment`):
    /// its `Z` row in the batch, and the map if it is kept. `datoms` and `hashes` are the
    /// transaction's, in seq order.
    fn commit_slots(
        &mut self,
        tx: TxId,
        datoms: &[engram_types::Datom],
        hashes: &[Hash],
        batch: &mut WriteBatch,
    ) -> Result<(), CoreError> {
        if !self.commits_state || datoms.is_empty() {
            return Ok(());
        }
        // In slot order, each slot's hashes in seq order: every replica writes the same way.
        let mut by_slot: BTreeMap<(Option<&BranchName>, EntityId, &Attribute), Vec<Hash>> = BTreeMap::new();
        for (d, h) in datoms.iter().zip(hashes) {
            by_slot
                .entry((d.branch.as_ref(), d.entity, &d.attribute))
                .or_default()
                .push(*h);
        }
        let ns = &datoms[0].namespace;
        for ((branch, e, attr), slot_hashes) in &by_slot {
            let slot = commitment::slot_key(ns, *branch, *e, attr);
            let next = |prev: Option<&[u8; 32]>| {
                if prev.is_some() && planted::active(PlantedBug::StaleSlotCommitment) {
                    return None;
                }
                Some(commitment::step(prev, tx, slot_hashes))
            };
            // With the map in memory, one walk reads the slot's digest and sets the next.
            let digest = match &mut self.state {
                Some(tree) => tree.update(slot, next),
                None => next(commitment::stored(&self.view(), &slot)?.as_ref()),
            };
            if let Some(digest) = digest {
                batch.put(
                    Space::State,
                    commitment::row_key(&slot),
                    commitment::encode_row(&digest),
                );
            }
        }
        if !self.commitment_marked {
            // The first datoms of a store that held none: from here the rows cover every slot.
            commitment::mark(batch);
            self.commitment_marked = true;
        }
        Ok(())
    }

    fn tx_in_group(
        &mut self,
        log_index: u64,
        proposed_time_ns: i64,
        req: &TxRequest,
        author: Option<(&Author, &[u8])>,
        agent_salts: &[Salt],
        mut batch: WriteBatch,
    ) -> Result<TxOutcome, CoreError> {
        let content = req.idempotency_key.as_ref().map(|_| request_content_hash(req));
        if let Some(key) = &req.idempotency_key
            && let Some(row) = self
                .view()
                .get(Space::State, &keys::idempotency(&req.namespace, key))?
        {
            let first = IdempotencyRow::decode(&row)?;
            self.apply_noop(batch)?;
            // An old row has no hash to compare: it keeps answering every retry with its
            // receipt, as it did when it was written.
            return Ok(match first.content {
                Some(hash) if Some(hash) != content => Err(Rejection::key_reused(key, first.receipt.tx)),
                _ => Ok(first.receipt),
            });
        }
        let tx = TxId(log_index);
        let tx_time_ns = proposed_time_ns.max(self.head.tx_time_ns);
        let mut head = self.head.clone();
        let stamp = plan::Stamp {
            tx,
            tx_time_ns,
            salt_seed: self.salt_seed,
            agent_salts,
        };
        let planned = match plan::plan(&self.view(), req, stamp)? {
            Ok(planned) => planned,
            Err(rejection) => {
                self.apply_noop(batch)?;
                return Ok(Err(rejection));
            }
        };
        let plan::Planned {
            datoms,
            temp_ids,
            rows,
            value_indexed,
        } = planned;

        let ns = &req.namespace;
        let mut hashes = Vec::with_capacity(datoms.len());
        // Each datom's key, kept in the tx-log row for the reads by transaction.
        let mut datom_keys = Vec::with_capacity(datoms.len());
        let mut datom_bytes = 0;
        for (seq, datom) in datoms.iter().enumerate() {
            let seq = seq as u32;
            let encoded = datom.encode();
            datom_bytes += encoded.len();
            hashes.push(datom.hash_with_encoding(&encoded));
            let (e, a) = (datom.entity, &datom.attribute);
            match &datom.branch {
                Some(branch) => {
                    // A branch's datoms live in its own table only: main's indexes never see them.
                    let key = keys::branch_eavt(ns, branch, e, a, tx, seq);
                    batch.put(Space::State, key.clone(), encoded);
                    datom_keys.push(key);
                }
                None => {
                    let eavt = keys::eavt(ns, e, a, tx, seq);
                    batch.put(Space::State, eavt.clone(), encoded);
                    datom_keys.push(eavt);
                    batch.put(Space::State, keys::aevt(ns, a, e, tx, seq), Vec::new());
                    if value_indexed.contains(a) {
                        batch.put(
                            Space::State,
                            keys::avet(ns, a, &datom.value, e, tx, seq),
                            Vec::new(),
                        );
                    }
                    if let Value::Ref(target) = datom.value {
                        batch.put(Space::State, keys::vaet(ns, target, a, e, tx, seq), Vec::new());
                    }
                }
            }
        }
        for (key, value) in rows {
            batch.put(Space::State, key, value);
        }
        if self.records_state_root && self.state.is_none() && self.commits_state {
            // Not kept in memory (a tool applying entries): the rows are the map.
            self.state = Some(commitment::load(&self.view())?);
        }
        self.commit_slots(tx, &datoms, &hashes, &mut batch)?;
        if let Some((author, signed)) = author {
            if !planted::active(PlantedBug::SignedRequestNotKept) {
                batch.put(Space::State, keys::signed_request(tx), signed.to_vec());
            }
            // Kept for good, like the datoms: about 40 bytes per signed write.
            batch.put(
                Space::State,
                keys::used_nonce(&author.principal, &author.nonce),
                tx.0.to_be_bytes().to_vec(),
            );
        }
        let datom_count = u32::try_from(datoms.len()).expect("op count is bounded by TxRequest::MAX_OPS");
        let state_root = self.entry_state_root(head.index + 1)?;
        let entry = AuditEntry {
            index: head.index + 1,
            tx,
            tx_time_ns,
            namespace: ns.as_str().to_string(),
            kind: EntryKind::Transaction {
                content_hash: tx_content_hash(&hashes),
                datoms: datom_count,
                author: author.map(|(a, _)| Box::new(a.clone())),
            },
            prev_hash: if planted::active(PlantedBug::WrongPrevHash) && (head.index + 1).is_multiple_of(4) {
                Hash::of(b"planted: wrong prev_hash")
            } else {
                self.chain_prev()
            },
            state_root,
        };
        let sealed = self.seal(entry, &mut head, &mut batch, false)?;
        let receipt = TxReceipt {
            tx,
            tx_time_ns,
            datom_hashes: hashes,
            audit_index: sealed.signed.entry.index,
            audit_hash: head.hash,
            temp_ids,
        };
        batch.put(
            Space::State,
            keys::tx_log(tx),
            TxLogRow {
                namespace: ns.clone(),
                branch: req.branch.clone(),
                receipt: receipt.clone(),
                datom_keys: Some(datom_keys),
            }
            .encode(),
        );
        if let Some(key) = &req.idempotency_key {
            let row = IdempotencyRow {
                receipt: receipt.clone(),
                content,
            };
            if planted::active(PlantedBug::EagerIdempotencyRow) {
                // Synced ahead of the (buffered) entry it belongs to: a crash in between keeps
                // the row without the entry, and the entry applied again looks like a retry.
                let mut eager = WriteBatch::new();
                eager.put(Space::State, keys::idempotency(ns, key), row.encode());
                self.write_store(eager, Write::PlantedEagerRow)?;
            }
            let row_key = keys::idempotency(ns, key);
            batch.put(Space::State, row_key.clone(), row.encode());
            // So that a redaction of one of its values finds the row and drops its content
            // hash, an unsalted hash of the values (`redact::rows`).
            batch.put(Space::State, keys::idempotency_of_tx(tx), row_key);
        }
        self.commit(batch, head, &sealed);
        if let Some(committed) = &mut self.committed {
            committed.push(reads::LoggedTx {
                namespace: ns.clone(),
                branch: req.branch.clone(),
                record: reads::TxRecord {
                    receipt: receipt.clone(),
                    datoms,
                },
                datom_bytes,
            });
        }
        Ok(Ok(receipt))
    }
}

/// Rows a rebuild of the state commitment writes per batch (a handful in unit tests, so their
/// small stores are rebuilt in several batches too).
const REBUILD_BATCH_ROWS: usize = if cfg!(test) { 16 } else { 65_536 };

/// Whether the store holds any datom, on main or on a branch.
fn holds_datoms(store: &dyn ReadView) -> Result<bool, CoreError> {
    for tag in [keys::EAVT, keys::BRANCH_EAVT] {
        let prefix = [tag];
        let end = engram_storage::prefix_end(&prefix);
        if !store.scan(Space::State, &prefix, end.as_deref(), 1)?.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The rows apply reads through [`CachedStore`]: attribute schema rows and namespace schema
/// rows, read by nearly every transaction and written by few.
const SCHEMA_ROW_PREFIXES: &[u8] = &[keys::SCHEMA, keys::NS_SCHEMA];

#[cfg(test)]
mod tests {
    use engram_storage::{Durability, MemStore};
    use engram_types::{
        AttributeDef, Datom, EntityRef, Namespace, Op, Precondition, Provenance, Status, TxOp, ValueType,
    };

    use super::*;
    use crate::{pages, snapshot};

    fn ns() -> Namespace {
        Namespace::new("team/a").unwrap()
    }

    fn attr(a: &str) -> Attribute {
        Attribute::new(a).unwrap()
    }

    fn op(entity: EntityRef, a: &str, value: Value) -> TxOp {
        TxOp {
            op: Op::Assert,
            entity,
            attribute: attr(a),
            value,
            valid_from_ns: None,
            valid_to_ns: None,
        }
    }

    fn tx(ops: Vec<TxOp>) -> TxRequest {
        TxRequest {
            namespace: ns(),
            branch: None,
            schema: Vec::new(),
            branch_op: None,
            ops,
            preconditions: vec![],
            idempotency_key: None,
            provenance: Provenance {
                agent: "a1".into(),
                confidence: 0.9,
                status: Status::Candidate,
                ..Default::default()
            },
        }
    }

    fn engine() -> (Arc<MemStore>, Engine) {
        engine_with_key([9; 32])
    }

    /// A retention policy's ranges: a group goes only whole.
    const WHOLE_IF_ALL: redact_where::Groups = redact_where::Groups::WholeIfAllMatch;

    fn engine_with_key(seed: [u8; 32]) -> (Arc<MemStore>, Engine) {
        let store = Arc::new(MemStore::new());
        let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed(seed))).unwrap();
        // Redactions as a leader of this build proposes them.
        engine.redact_whole_values(true);
        let key = NodeKey::from_seed([9; 32]).public();
        engine
            .apply_membership(1, vec![(1, key)], WriteBatch::new())
            .unwrap();
        (store, engine)
    }

    fn state_bytes(store: &MemStore) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        store
            .for_each(Space::State, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
        out
    }

    fn new_task(engine: &mut Engine, index: u64, title: &str) -> (EntityId, TxReceipt) {
        let receipt = engine
            .apply_tx(
                index,
                1_000 * index as i64,
                &tx(vec![op(
                    EntityRef::Temp("t".into()),
                    ":task/title",
                    Value::String(title.into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        (receipt.temp_ids["t"], receipt)
    }

    #[test]
    fn apply_writes_datoms_indexes_and_a_linked_audit_entry() {
        let (store, mut engine) = engine();
        let (e, receipt) = new_task(&mut engine, 2, "write docs");
        assert_eq!(receipt.audit_index, 2, "genesis is entry 1");
        assert_eq!(receipt.tx, TxId(2));
        let facts = reads::get(&*store, &ns(), e, None, None).unwrap();
        assert_eq!(facts.len(), 1);
        assert_eq!(facts[0].value, Value::String("write docs".into()));
        assert_eq!(facts[0].hash(), receipt.datom_hashes[0]);
        let found = pages::find_main(
            &*store,
            &ns(),
            &attr(":task/title"),
            Some(&Value::String("write docs".into())),
            None,
            10,
        )
        .unwrap();
        assert_eq!(found.len(), 1);
        let entries = reads::audit_entries(&*store, 1, 10).unwrap().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].entry.prev_hash, entries[0].entry.hash());
        assert_eq!(engine.head().hash, receipt.audit_hash);
    }

    /// Writes an entity with a cardinality-one email rewritten often enough to get a
    /// current-claims row, a retraction and a reference, then redacts it.
    fn redacted_entity(engine: &mut Engine) -> (EntityId, EntityId, Vec<Hash>) {
        let (other, _) = new_task(engine, 2, "the manager");
        let first = engine
            .apply_tx(
                3,
                3_000,
                &tx(vec![
                    op(
                        EntityRef::Temp("p".into()),
                        ":person/email",
                        Value::String("ada@example.com".into()),
                    ),
                    op(EntityRef::Temp("p".into()), ":person/manager", Value::Ref(other)),
                ]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        let e = first.temp_ids["p"];
        let mut hashes = first.datom_hashes.clone();
        for i in 0..crate::current::ROW_AFTER_DATOMS as u64 {
            let index = 4 + i;
            let receipt = engine
                .apply_tx(
                    index,
                    1_000 * index as i64,
                    &tx(vec![op(
                        EntityRef::Id(e),
                        ":person/email",
                        Value::String(format!("ada+{i}@example.com")),
                    )]),
                    WriteBatch::new(),
                )
                .unwrap()
                .unwrap();
            hashes.extend(receipt.datom_hashes);
        }
        let mut retract = op(
            EntityRef::Id(e),
            ":person/email",
            Value::String(format!(
                "ada+{}@example.com",
                crate::current::ROW_AFTER_DATOMS - 1
            )),
        );
        retract.op = Op::Retract;
        let receipt = engine
            .apply_tx(20, 20_000, &tx(vec![retract]), WriteBatch::new())
            .unwrap()
            .unwrap();
        hashes.extend(receipt.datom_hashes);
        (e, other, hashes)
    }

    fn redaction(e: EntityId, attribute: Option<&str>) -> RedactRequest {
        RedactRequest {
            namespace: ns(),
            entity: e,
            attribute: attribute.map(attr),
            reason: "erasure request 7".into(),
            provenance: Provenance {
                agent: "dpo".into(),
                confidence: 1.0,
                ..Default::default()
            },
        }
    }

    /// An unsigned whole-entry redaction (an entry from before parts) applied at log index
    /// `index`, the leader's clock at `index` µs.
    fn redact_unsigned(engine: &mut Engine, index: u64, req: &RedactRequest) -> Result<TxOutcome, CoreError> {
        redact_part(engine, index, req, None)
    }

    fn redact_part(
        engine: &mut Engine,
        index: u64,
        req: &RedactRequest,
        part: Option<&RedactPart>,
    ) -> Result<TxOutcome, CoreError> {
        engine.apply_redaction(
            index,
            index as i64 * 1_000,
            req,
            part,
            &PolicyActor::Unsigned(None),
            WriteBatch::new(),
        )
    }

    #[test]
    fn a_redaction_in_parts_takes_its_target_in_key_order_and_spares_what_came_after_its_first_part() {
        let (store, mut engine) = engine();
        // Parts as entries from before whole values cut them: at any datom, three at a time
        // (`an_entity_redaction_part_ends_at_a_slot_boundary` has the parts of this build).
        engine.redact_whole_values(false);
        let (e, _, hashes) = redacted_entity(&mut engine);
        let req = redaction(e, None);
        let mut by_key = reads::entity_datoms(&*store, &ns(), e).unwrap();
        by_key.sort_by(|a, b| (&a.attribute, a.tx).cmp(&(&b.attribute, b.tx)));
        let in_key_order: Vec<Hash> = by_key.iter().map(Datom::hash).collect();
        assert_eq!(in_key_order.len(), hashes.len());
        // The leader's check before a redaction's first part: a target past the bound is
        // refused whole (the bound counts datoms still holding values).
        let too_large = redact::targets(&*store, &req, 3, true).unwrap();
        assert_eq!(
            too_large.map(|t| t.len()),
            Err(Rejection::RedactionTooLarge { datoms: 4, limit: 3 })
        );
        let all = redact::targets(&*store, &req, in_key_order.len(), true)
            .unwrap()
            .unwrap();
        assert_eq!(
            all.iter().map(|t| t.datom.hash()).collect::<Vec<_>>(),
            in_key_order
        );

        let first = RedactPart {
            first_tx: None,
            after_key: None,
            limit: 3,
        };
        let receipt = redact_part(&mut engine, 21, &req, Some(&first)).unwrap().unwrap();
        let first_tx = receipt.tx;
        // A write to the entity between parts: no later part takes it.
        let late = engine
            .apply_tx(
                22,
                22_000,
                &tx(vec![op(
                    EntityRef::Id(e),
                    ":person/email",
                    Value::String("late@x.org".into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        let mut parts = vec![receipt];
        let mut index = 23;
        loop {
            let last = parts.last().unwrap().tx;
            let taken = redact::redacted_by(&*store, last).unwrap();
            assert!(!taken.is_empty() && taken.len() <= 3);
            let after = redact::last_key_of(&ns(), &taken).unwrap();
            if !redact::more_after(&*store, &req, first_tx, &after, true).unwrap() {
                // Nothing left: a part proposed anyway is refused and changes nothing.
                let part = RedactPart {
                    first_tx: Some(first_tx),
                    after_key: Some(after),
                    limit: 3,
                };
                let head = engine.head().clone();
                let past = redact_part(&mut engine, index, &req, Some(&part)).unwrap();
                assert!(matches!(past, Err(Rejection::NothingToRedact(_))), "{past:?}");
                assert_eq!(engine.head().index, head.index, "a refused part records nothing");
                break;
            }
            let part = RedactPart {
                first_tx: Some(first_tx),
                after_key: Some(after),
                limit: 3,
            };
            parts.push(
                redact_part(&mut engine, index, &req, Some(&part))
                    .unwrap()
                    .unwrap(),
            );
            index += 1;
        }
        assert_eq!(parts.len(), in_key_order.len().div_ceil(3));
        // Together the parts list exactly the datoms written before the first, in key order,
        // each stored as redacted by the part that listed it.
        let mut listed = Vec::new();
        for (i, receipt) in parts.iter().enumerate() {
            let system = Namespace::new(engram_access::SYSTEM_NAMESPACE).unwrap();
            let record = reads::entity_datoms(&*store, &system, receipt.temp_ids["redaction"]).unwrap();
            let attributes: Vec<&str> = record.iter().map(|d| d.attribute.as_str()).collect();
            assert!(attributes.contains(&redact::RECORD_DATOMS), "{attributes:?}");
            assert!(
                !attributes.contains(&redact::RECORD_DATOM),
                "packed, not one datom each"
            );
            let part_of = record
                .iter()
                .find(|d| d.attribute.as_str() == redact::RECORD_PART_OF)
                .map(|d| d.value.clone());
            assert_eq!(
                part_of,
                (i > 0).then_some(Value::I64(first_tx.0 as i64)),
                "every part after the first names the first"
            );
            for (r, d) in redact::redacted_by(&*store, receipt.tx).unwrap() {
                assert_eq!(d.value.redacted().map(|m| m.by_tx), Some(receipt.tx));
                listed.push(r.hash);
            }
        }
        assert_eq!(listed, in_key_order);
        let now = reads::entity_datoms(&*store, &ns(), e).unwrap();
        let kept: Vec<&Datom> = now.iter().filter(|d| d.value.redacted().is_none()).collect();
        assert_eq!(kept.len(), 1);
        assert_eq!(
            (kept[0].tx, &kept[0].value),
            (late.tx, &Value::String("late@x.org".into()))
        );
        assert!(!stored_bytes_hold(&store, b"example.com"));
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
        let report = crate::scrub::scrub(&*store, &mut |_, _| {}).unwrap();
        assert!(report.ok(), "{:?}", report.findings);

        // A cursor from outside the target (a faulty leader's) cannot reach another entity:
        // the part starts from the target's own start and finds nothing left before it.
        let stray = RedactPart {
            first_tx: Some(first_tx),
            after_key: Some(keys::eavt_entity(&ns(), EntityId(1))),
            limit: 3,
        };
        let stray = redact::part_targets(&*store, &req, &stray, true, true).unwrap();
        assert!(matches!(stray, Err(Rejection::NothingToRedact(_))), "{stray:?}");
    }

    fn where_request(predicate: engram_types::Predicate) -> RedactWhere {
        RedactWhere {
            namespace: ns(),
            predicate,
            reason: "erasure request 8".into(),
            provenance: Provenance {
                agent: "dpo".into(),
                confidence: 1.0,
                ..Default::default()
            },
        }
    }

    /// Plans and applies `req` range by range as a leader would, each range's entry at the
    /// next log index; answers the ranges' receipts. `budget_rows` small makes the planner
    /// step over rows that match nothing.
    fn redact_where_all(
        engine: &mut Engine,
        store: &MemStore,
        index: &mut u64,
        req: &RedactWhere,
        limit: u32,
        budget_rows: usize,
        retention: Option<RetentionRule>,
    ) -> Vec<TxReceipt> {
        let mut receipts: Vec<TxReceipt> = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let first = receipts.first().map(|r| r.tx);
            let keep_versions = retention.and_then(|r| r.keep_versions());
            let groups = match retention {
                Some(_) => WHOLE_IF_ALL,
                None => redact_where::Groups::Whole,
            };
            match redact_where::plan_range(
                store,
                req,
                keep_versions,
                groups,
                first,
                after.as_deref(),
                limit,
                budget_rows,
                true,
            )
            .unwrap()
            {
                redact_where::Plan::Done => return receipts,
                redact_where::Plan::Skip { after: next } => after = Some(next),
                redact_where::Plan::Range { range, datoms } => {
                    assert!(datoms >= 1 && datoms <= limit as usize);
                    let receipt = engine
                        .apply_redaction_where(
                            *index,
                            *index as i64 * 1_000_000,
                            req,
                            &range,
                            None,
                            retention,
                            WriteBatch::new(),
                        )
                        .unwrap()
                        .unwrap();
                    // The datoms planned, and their groups' other datoms.
                    assert!(redact::listed_in(store, receipt.tx).unwrap().len() >= datoms);
                    *index += 1;
                    after = Some(range.through_key);
                    receipts.push(receipt);
                }
            }
        }
    }

    /// The leader's plan of a predicate's first range (at most 100 datoms, 100 rows read).
    fn first_plan(
        store: &dyn ReadView,
        req: &RedactWhere,
        keep_versions: Option<u32>,
        groups: redact_where::Groups,
    ) -> redact_where::Plan {
        redact_where::plan_range(store, req, keep_versions, groups, None, None, 100, 100, true).unwrap()
    }

    #[test]
    fn a_redaction_by_predicate_takes_what_matches_range_by_range_and_nothing_else() {
        let (store, mut engine) = engine();
        let mut index = 2;
        for i in 0..25 {
            new_task(&mut engine, index, &format!("task {i}"));
            index += 1;
        }
        let mut crawled = Vec::new();
        for i in 0..7 {
            let mut t = tx(vec![
                op(
                    EntityRef::Temp("p".into()),
                    ":person/email",
                    Value::String(format!("p{i}@example.com")),
                ),
                op(
                    EntityRef::Temp("p".into()),
                    ":person/name",
                    Value::String(format!("P{i}")),
                ),
            ]);
            t.provenance.agent = "crawler".into();
            let receipt = engine
                .apply_tx(index, 1_000 * index as i64, &t, WriteBatch::new())
                .unwrap()
                .unwrap();
            crawled.push(receipt.temp_ids["p"]);
            index += 1;
        }
        let by_crawler = where_request(engram_types::Predicate {
            agent: Some("crawler".into()),
            attribute: Some(attr(":person/email")),
            ..Default::default()
        });
        let (listed, count) = redact_where::preview(&*store, &by_crawler, 3).unwrap();
        assert_eq!((listed.len(), count), (3, 7));
        // At most 3 datoms a range, at most 4 rows read a planning step.
        let receipts = redact_where_all(&mut engine, &store, &mut index, &by_crawler, 3, 4, None);
        assert_eq!(receipts.len(), 3, "7 datoms in ranges of 3");
        for e in &crawled {
            for d in reads::entity_datoms(&*store, &ns(), *e).unwrap() {
                let gone = d.value.redacted().is_some();
                assert_eq!(gone, d.attribute.as_str() == ":person/email", "{d:?}");
            }
        }
        assert!(!stored_bytes_hold(&store, b"example.com"));
        assert!(stored_bytes_hold(&store, b"task 24"), "other agents' datoms stay");
        // Asked again: nothing is left, and a range replayed is refused without a record.
        let (_, left) = redact_where::preview(&*store, &by_crawler, 3).unwrap();
        assert_eq!(left, 0);
        let whole = RedactRange {
            first_tx: None,
            from_key: keys::aevt_attr(&ns(), &attr(":person/email")),
            through_key: [keys::aevt_attr(&ns(), &attr(":person/email")), vec![0xff; 40]].concat(),
            limit: 1_000,
        };
        let head = engine.head().index;
        let again = engine
            .apply_redaction_where(index, 0, &by_crawler, &whole, None, None, WriteBatch::new())
            .unwrap();
        assert!(matches!(again, Err(Rejection::NothingToRedact(_))), "{again:?}");
        // A range outside the predicate's index (a faulty leader's) takes nothing.
        let stray = RedactRange {
            from_key: keys::eavt_namespace(&ns()),
            through_key: [keys::eavt_namespace(&ns()), vec![0xff; 8]].concat(),
            ..whole
        };
        let stray = engine
            .apply_redaction_where(index, 0, &by_crawler, &stray, None, None, WriteBatch::new())
            .unwrap();
        assert!(matches!(stray, Err(Rejection::NothingToRedact(_))), "{stray:?}");
        assert_eq!(engine.head().index, head, "refused ranges record nothing");
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
        let report = crate::scrub::scrub(&*store, &mut |_, _| {}).unwrap();
        assert!(report.ok(), "{:?}", report.findings);
    }

    /// Log entries 2 to 7, each a task "old task N" written at N ms.
    fn old_tasks(engine: &mut Engine) {
        for index in 2..8u64 {
            engine
                .apply_tx(
                    index,
                    index as i64 * 1_000_000,
                    &tx(vec![op(
                        EntityRef::Temp("t".into()),
                        ":task/title",
                        Value::String(format!("old task {index}")),
                    )]),
                    WriteBatch::new(),
                )
                .unwrap()
                .unwrap();
        }
    }

    /// Log entry `index`: a retention policy keeping what is written to the namespace 50 ms.
    fn keep_namespace_50_ms(engine: &mut Engine, index: u64) {
        let set = PolicyOp::Retention {
            namespace: ns().to_string(),
            attribute: String::new(),
            keep_ms: 50,
        };
        engine
            .apply_policy(
                index,
                9_000_000,
                &set,
                &PolicyActor::Unsigned(None),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
    }

    /// Apply must not depend on where the log was cut into groups: a time predicate's bound
    /// comes from the chain head, whose row a group writes only at its end. One replica applies
    /// the writes, the policy and the retention range one entry per group, another all in one
    /// group (a follower catching up); both take the same datoms and end in the same state.
    #[test]
    fn a_time_cutoff_takes_the_same_inside_one_apply_group_as_entry_by_entry() {
        let writes = |engine: &mut Engine| {
            old_tasks(engine);
            keep_namespace_50_ms(engine, 8);
        };
        let retention = where_request(engram_types::Predicate {
            written_before_ns: Some(5_000_000),
            ..Default::default()
        });
        let (alone_store, mut alone) = engine();
        writes(&mut alone);
        let range = match redact_where::plan_range(
            &*alone_store,
            &retention,
            None,
            WHOLE_IF_ALL,
            None,
            None,
            100,
            100,
            true,
        )
        .unwrap()
        {
            redact_where::Plan::Range { range, .. } => range,
            other => panic!("{other:?}"),
        };
        let apply = |engine: &mut Engine| {
            engine
                .apply_redaction_where(
                    9,
                    60_000_000,
                    &retention,
                    &range,
                    None,
                    Some(RetentionRule::KeepMs(50)),
                    WriteBatch::new(),
                )
                .unwrap()
        };
        let taken_alone = apply(&mut alone).unwrap();

        let (grouped_store, mut grouped) = engine();
        grouped.begin_group();
        writes(&mut grouped);
        let taken_grouped = apply(&mut grouped).expect("the range takes in a group what it takes alone");
        let batch = grouped.end_group(WriteBatch::new()).unwrap();
        grouped_store.write(batch, Durability::Buffered).unwrap();

        let txs = |store: &MemStore, tx: TxId| {
            let mut txs: Vec<u64> = redact::redacted_by(store, tx)
                .unwrap()
                .iter()
                .map(|(r, _)| r.tx.0)
                .collect();
            txs.sort();
            txs
        };
        assert_eq!(txs(&alone_store, taken_alone.tx), vec![2, 3, 4]);
        assert_eq!(txs(&grouped_store, taken_grouped.tx), vec![2, 3, 4]);
        assert_eq!(
            crate::inspect::state_digest(&*alone_store).unwrap(),
            crate::inspect::state_digest(&*grouped_store).unwrap(),
            "one state, however the entries were grouped"
        );
    }

    #[test]
    fn retention_takes_what_is_older_than_the_policy_keeps_and_only_under_a_policy() {
        let (store, mut engine) = engine();
        old_tasks(&mut engine);
        let mut index = 8;
        // Written before 5 ms: tx 2, 3 and 4.
        let retention = where_request(engram_types::Predicate {
            written_before_ns: Some(5_000_000),
            ..Default::default()
        });
        let range = match first_plan(&*store, &retention, None, WHOLE_IF_ALL) {
            redact_where::Plan::Range { range, datoms } => {
                assert_eq!(datoms, 3);
                range
            }
            other => panic!("{other:?}"),
        };
        let apply = |engine: &mut Engine, index: u64, time_ms: i64, keep_ms: u64| {
            engine
                .apply_redaction_where(
                    index,
                    time_ms * 1_000_000,
                    &retention,
                    &range,
                    None,
                    Some(RetentionRule::KeepMs(keep_ms)),
                    WriteBatch::new(),
                )
                .unwrap()
        };
        // No policy in force: refused.
        let refused = apply(&mut engine, index, 100, 50);
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        keep_namespace_50_ms(&mut engine, index);
        index += 1;
        let listed = policy::retention_policies(&*store).unwrap();
        assert_eq!(
            (listed.len(), listed[0].row.keep_ms, listed[0].attribute.clone()),
            (1, 50, None)
        );
        // The policy keeps 50 ms: at 54 ms, a cutoff of 5 ms is too late; another keep_ms is
        // not the policy's.
        for (time_ms, keep_ms) in [(54, 50), (100, 40)] {
            let refused = apply(&mut engine, index, time_ms, keep_ms);
            assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        }
        let receipt = apply(&mut engine, index, 55, 50).unwrap();
        let taken = redact::redacted_by(&*store, receipt.tx).unwrap();
        let mut txs: Vec<u64> = taken.iter().map(|(r, _)| r.tx.0).collect();
        txs.sort();
        assert_eq!(txs, vec![2, 3, 4], "only what was written before the cutoff");
        assert!(!stored_bytes_hold(&store, b"old task 4"));
        assert!(stored_bytes_hold(&store, b"old task 5"));
        // A predicate saying more than the policy is not the policy's.
        let mut wider = retention.clone();
        wider.predicate.agent = Some("a1".into());
        let refused = engine
            .apply_redaction_where(
                index + 1,
                100_000_000,
                &wider,
                &range,
                None,
                Some(RetentionRule::KeepMs(50)),
                WriteBatch::new(),
            )
            .unwrap();
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        // Ended: nothing more is taken for it.
        let off = PolicyOp::Retention {
            namespace: ns().to_string(),
            attribute: String::new(),
            keep_ms: 0,
        };
        engine
            .apply_policy(
                index + 2,
                101_000_000,
                &off,
                &PolicyActor::Unsigned(None),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        assert!(policy::retention_policies(&*store).unwrap().is_empty());
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
    }

    /// Log entry `index` at `time_ms`: a session change on the namespace, by an unsigned caller.
    fn session(engine: &mut Engine, index: u64, time_ms: i64, op: PolicyOp) -> TxOutcome {
        engine
            .apply_policy(
                index,
                time_ms * 1_000_000,
                &op,
                &PolicyActor::Unsigned(None),
                WriteBatch::new(),
            )
            .unwrap()
    }

    fn session_op(ttl_ms: u64, renew: bool) -> PolicyOp {
        PolicyOp::Session {
            namespace: ns().to_string(),
            ttl_ms,
            renew,
        }
    }

    /// A write at `index` of one task title.
    fn task(engine: &mut Engine, index: u64, title: &str) {
        engine
            .apply_tx(
                index,
                index as i64 * 1_000_000,
                &tx(vec![op(
                    EntityRef::Temp("t".into()),
                    ":task/title",
                    Value::String(title.into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
    }

    #[test]
    fn a_session_forgets_its_namespace_once_it_lapses_or_ends_and_never_before() {
        let (store, mut engine) = engine();
        old_tasks(&mut engine); // tx 2 to 7
        let forget = |before_tx: u64| RedactWhere {
            provenance: Provenance {
                agent: "engram.session".into(),
                confidence: 1.0,
                ..Default::default()
            },
            ..where_request(engram_types::Predicate {
                before_tx: Some(TxId(before_tx)),
                ..Default::default()
            })
        };
        let whole = |req: &RedactWhere| match redact_where::plan_range(
            &*store,
            req,
            None,
            WHOLE_IF_ALL,
            None,
            None,
            100,
            100,
            true,
        )
        .unwrap()
        {
            redact_where::Plan::Range { range, .. } => range,
            other => panic!("{other:?}"),
        };
        let apply = |engine: &mut Engine, index: u64, req: &RedactWhere, range: &RedactRange| {
            engine
                .apply_redaction_where(
                    index,
                    200_000_000,
                    req,
                    range,
                    None,
                    Some(RetentionRule::SessionEnded),
                    WriteBatch::new(),
                )
                .unwrap()
        };
        // No session has ended: nothing may be forgotten for one.
        let range = whole(&forget(8));
        let refused = apply(&mut engine, 8, &forget(8), &range);
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");

        // Opened at 10 ms for 100 ms; a second open is refused, a renewal at 20 ms moves the
        // deadline to 120 ms and keeps when it was opened.
        session(&mut engine, 9, 10, session_op(100, false)).unwrap();
        let refused = session(&mut engine, 10, 15, session_op(100, false));
        assert!(
            matches!(&refused, Err(Rejection::Policy(why)) if why.contains("renew it")),
            "{refused:?}"
        );
        session(&mut engine, 11, 20, session_op(100, true)).unwrap();
        let open = policy::sessions(&*store).unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!(
            (
                open[0].row.since_tx,
                open[0].row.renewed_tx,
                open[0].row.deadline_ns
            ),
            (TxId(9), TxId(11), 120_000_000)
        );
        task(&mut engine, 12, "written in the session");

        // A lapse before the deadline is refused, at it taken.
        let lapse = PolicyOp::SessionLapsed {
            namespace: ns().to_string(),
        };
        let refused = session(&mut engine, 13, 119, lapse.clone());
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        let lapsed = session(&mut engine, 14, 120, lapse.clone()).unwrap();
        assert!(policy::sessions(&*store).unwrap().is_empty());
        let ended = policy::ended_sessions(&*store).unwrap();
        assert_eq!((ended[0].row.ended_tx, ended[0].row.lapsed), (lapsed.tx, true));
        let refused = session(&mut engine, 15, 121, lapse);
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        let refused = session(&mut engine, 16, 121, session_op(100, true));
        assert!(
            matches!(&refused, Err(Rejection::Policy(why)) if why.contains("open a new one")),
            "{refused:?}"
        );
        task(&mut engine, 17, "written after the session");

        // Past the end is not the ended session's; a predicate saying more neither.
        let past = forget(lapsed.tx.0 + 1);
        let refused = apply(&mut engine, 18, &past, &whole(&past));
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        let mut wider = forget(lapsed.tx.0);
        wider.predicate.agent = Some("a1".into());
        let refused = apply(&mut engine, 18, &wider, &whole(&wider));
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        let mut index = 18;
        let receipts = redact_where_all(
            &mut engine,
            &store,
            &mut index,
            &forget(lapsed.tx.0),
            100,
            100,
            Some(RetentionRule::SessionEnded),
        );
        let mut txs: Vec<u64> = receipts
            .iter()
            .flat_map(|r| redact::redacted_by(&*store, r.tx).unwrap())
            .map(|(r, _)| r.tx.0)
            .collect();
        txs.sort();
        assert_eq!(
            txs,
            vec![2, 3, 4, 5, 6, 7, 12],
            "everything written to it before the lapse"
        );
        assert!(!stored_bytes_hold(&store, b"written in the session"));
        assert!(stored_bytes_hold(&store, b"written after the session"));

        // Opened again and ended by its owner: what was written since the lapse goes too.
        session(&mut engine, index, 200, session_op(60_000, false)).unwrap();
        let ended = session(&mut engine, index + 1, 201, session_op(0, false)).unwrap();
        let refused = session(&mut engine, index + 2, 202, session_op(0, false));
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        let last = policy::ended_sessions(&*store).unwrap();
        assert_eq!((last[0].row.ended_tx, last[0].row.lapsed), (ended.tx, false));
        index += 3;
        let receipts = redact_where_all(
            &mut engine,
            &store,
            &mut index,
            &forget(ended.tx.0),
            100,
            100,
            Some(RetentionRule::SessionEnded),
        );
        assert_eq!(receipts.len(), 1);
        assert!(!stored_bytes_hold(&store, b"written after the session"));
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
    }

    #[test]
    fn a_versions_policy_takes_what_older_versions_hold_and_never_a_live_claim() {
        let (store, mut engine) = engine();
        let mut index = 2;
        // A task whose title is rewritten five times (cardinality one): tx 2 to 6.
        let first = engine
            .apply_tx(
                index,
                0,
                &tx(vec![op(
                    EntityRef::Temp("t".into()),
                    ":task/title",
                    Value::String("title v1".into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        let task = first.temp_ids["t"];
        index += 1;
        for v in 2..=5 {
            engine
                .apply_tx(
                    index,
                    0,
                    &tx(vec![op(
                        EntityRef::Id(task),
                        ":task/title",
                        Value::String(format!("title v{v}")),
                    )]),
                    WriteBatch::new(),
                )
                .unwrap()
                .unwrap();
            index += 1;
        }
        // Another agent's note on the task, in another slot: not the policy's attribute.
        let mut other = tx(vec![op(
            EntityRef::Id(task),
            ":task/note",
            Value::String("note kept".into()),
        )]);
        other.provenance.agent = "a2".into();
        engine
            .apply_tx(index, 0, &other, WriteBatch::new())
            .unwrap()
            .unwrap();
        index += 1;
        for v in 2..=4 {
            engine
                .apply_tx(
                    index,
                    0,
                    &tx(vec![op(
                        EntityRef::Id(task),
                        ":task/title",
                        Value::String(format!("title again v{v}")),
                    )]),
                    WriteBatch::new(),
                )
                .unwrap()
                .unwrap();
            index += 1;
        }
        let versions = where_request(engram_types::Predicate {
            attribute: Some(attr(":task/title")),
            ..Default::default()
        });
        // No policy in force: refused.
        let range = match first_plan(&*store, &versions, Some(2), WHOLE_IF_ALL) {
            redact_where::Plan::Range { range, datoms } => {
                // 8 title versions (tx 2-6 and 8-10): all but the last 2 go.
                assert_eq!(datoms, 6);
                range
            }
            other => panic!("{other:?}"),
        };
        let refused = engine
            .apply_redaction_where(
                index,
                0,
                &versions,
                &range,
                None,
                Some(RetentionRule::KeepVersions(2)),
                WriteBatch::new(),
            )
            .unwrap();
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        keep_versions(&mut engine, &mut index, ":task/title", 2);
        let listed = policy::versions_policies(&*store).unwrap();
        assert_eq!(
            (
                listed.len(),
                listed[0].row.keep_versions,
                listed[0].attribute.clone()
            ),
            (1, 2, Some(attr(":task/title")))
        );
        // Another number of versions is not the policy's.
        let refused = engine
            .apply_redaction_where(
                index,
                0,
                &versions,
                &range,
                None,
                Some(RetentionRule::KeepVersions(3)),
                WriteBatch::new(),
            )
            .unwrap();
        assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
        let receipts = redact_where_all(
            &mut engine,
            &store,
            &mut index,
            &versions,
            100,
            100,
            Some(RetentionRule::KeepVersions(2)),
        );
        assert_eq!(receipts.len(), 1);
        let taken = redact::redacted_by(&*store, receipts[0].tx).unwrap();
        assert_eq!(taken.len(), 6, "six of eight versions go");
        for gone in ["title v1", "title v5", "title again v2"] {
            assert!(!stored_bytes_hold(&store, gone.as_bytes()), "{gone}");
        }
        for kept in ["title again v3", "title again v4", "note kept"] {
            assert!(stored_bytes_hold(&store, kept.as_bytes()), "{kept}");
        }
        // Nothing more to take until the slot is written again.
        let again = redact_where_all(
            &mut engine,
            &store,
            &mut index,
            &versions,
            100,
            100,
            Some(RetentionRule::KeepVersions(2)),
        );
        assert!(again.is_empty());
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
    }

    #[test]
    fn a_versions_policy_keeps_every_live_claim_of_a_many_valued_slot() {
        let (store, mut engine) = engine();
        let mut index = 2;
        let mut declare = tx(vec![]);
        let mut tag = AttributeDef::new(attr(":task/tag"), ValueType::String);
        tag.cardinality = engram_types::Cardinality::Many;
        declare.schema = vec![tag];
        engine
            .apply_tx(index, 0, &declare, WriteBatch::new())
            .unwrap()
            .unwrap();
        index += 1;
        let first = engine
            .apply_tx(
                index,
                0,
                &tx(vec![op(
                    EntityRef::Temp("t".into()),
                    ":task/tag",
                    Value::String("tag-live-1".into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        let task = first.temp_ids["t"];
        index += 1;
        // Tags added one a transaction, and one retracted later: its assertion and its
        // retraction are history, the rest are live claims however old.
        let writes = vec![
            vec![op(
                EntityRef::Id(task),
                ":task/tag",
                Value::String("tag-gone".into()),
            )],
            vec![op(
                EntityRef::Id(task),
                ":task/tag",
                Value::String("tag-live-2".into()),
            )],
            vec![TxOp {
                op: Op::Retract,
                ..op(EntityRef::Id(task), ":task/tag", Value::String("tag-gone".into()))
            }],
            vec![op(
                EntityRef::Id(task),
                ":task/tag",
                Value::String("tag-live-3".into()),
            )],
            vec![op(
                EntityRef::Id(task),
                ":task/tag",
                Value::String("tag-live-4".into()),
            )],
        ];
        for ops in writes {
            engine
                .apply_tx(index, 0, &tx(ops), WriteBatch::new())
                .unwrap()
                .unwrap();
            index += 1;
        }
        keep_versions(&mut engine, &mut index, "", 1);
        let whole = where_request(engram_types::Predicate::default());
        let receipts = redact_where_all(
            &mut engine,
            &store,
            &mut index,
            &whole,
            100,
            100,
            Some(RetentionRule::KeepVersions(1)),
        );
        let taken: Vec<Datom> = receipts
            .iter()
            .flat_map(|r| redact::redacted_by(&*store, r.tx).unwrap())
            .map(|(_, d)| d)
            .filter(|d| d.attribute.as_str() == ":task/tag")
            .collect();
        assert_eq!(
            taken.len(),
            2,
            "the retracted tag's assertion and its retraction: {taken:?}"
        );
        assert!(!stored_bytes_hold(&store, b"tag-gone"));
        for live in ["tag-live-1", "tag-live-2", "tag-live-3", "tag-live-4"] {
            assert!(stored_bytes_hold(&store, live.as_bytes()), "{live}");
        }
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
    }

    /// Tags of a many-valued `:task/tag` on one new task: each step one transaction, an
    /// assertion or (with `true`) a retraction. Answers the task and each step's receipt.
    fn tag_steps(engine: &mut Engine, index: &mut u64, steps: &[(&str, bool)]) -> (EntityId, Vec<TxReceipt>) {
        let mut declare = tx(vec![]);
        let mut tag = AttributeDef::new(attr(":task/tag"), ValueType::String);
        tag.cardinality = engram_types::Cardinality::Many;
        declare.schema = vec![tag];
        engine
            .apply_tx(*index, 0, &declare, WriteBatch::new())
            .unwrap()
            .unwrap();
        *index += 1;
        let mut task = None;
        let mut receipts = Vec::new();
        for (value, retract) in steps {
            let entity = task.map_or(EntityRef::Temp("t".into()), EntityRef::Id);
            let mut o = op(entity, ":task/tag", Value::String((*value).into()));
            if *retract {
                o.op = Op::Retract;
            }
            let receipt = engine
                .apply_tx(*index, *index as i64 * 1_000_000, &tx(vec![o]), WriteBatch::new())
                .unwrap()
                .unwrap();
            task = task.or(receipt.temp_ids.get("t").copied());
            receipts.push(receipt);
            *index += 1;
        }
        (task.unwrap(), receipts)
    }

    /// The tags `task` holds as of `as_of` (`None`: now), folded from its stored history as a
    /// read of a slot without a current-claims row is.
    fn tags_as_of(store: &MemStore, task: EntityId, as_of: Option<TxId>) -> Vec<Value> {
        let datoms = reads::slot_datoms_main(store, &ns(), task, &attr(":task/tag")).unwrap();
        let opts = reads::ReadOptions {
            as_of,
            ..Default::default()
        };
        reads::resolve_slot(&datoms, engram_types::Cardinality::Many, &opts)
            .current
            .into_iter()
            .map(|d| d.value)
            .collect()
    }

    #[test]
    fn a_versions_policy_takes_a_retracted_claim_only_with_its_retraction() {
        let (store, mut engine) = engine();
        let mut index = 2;
        let (task, receipts) = tag_steps(
            &mut engine,
            &mut index,
            &[("gone", false), ("b", false), ("c", false), ("gone", true)],
        );
        let retraction_tx = receipts[3].tx;
        keep_versions(&mut engine, &mut index, ":task/tag", 2);
        let versions = where_request(engram_types::Predicate {
            attribute: Some(attr(":task/tag")),
            ..Default::default()
        });
        let keep_2 = Some(RetentionRule::KeepVersions(2));
        // The assertion of "gone" is past the policy (ended, three later versions), its
        // retraction is not (no later version): neither goes, and the leader plans nothing.
        let plan = first_plan(&*store, &versions, Some(2), WHOLE_IF_ALL);
        assert_eq!(plan, redact_where::Plan::Done);
        // Each alone, as entries from before whole values took them: the assertion goes.
        let split = first_plan(&*store, &versions, Some(2), redact_where::Groups::Split);
        assert!(
            matches!(split, redact_where::Plan::Range { datoms: 1, .. }),
            "{split:?}"
        );
        assert!(stored_bytes_hold(&store, b"gone"));

        // Two more versions: the retraction is past the policy too, and the two go together.
        tag_steps_more(&mut engine, &mut index, task, &["d", "e"]);
        let receipts = redact_where_all(&mut engine, &store, &mut index, &versions, 100, 100, keep_2);
        assert_eq!(receipts.len(), 1);
        let taken = redact::redacted_by(&*store, receipts[0].tx).unwrap();
        let ops: Vec<(Op, TxId)> = taken.iter().map(|(_, d)| (d.op, d.tx)).collect();
        assert_eq!(
            ops,
            vec![
                (Op::Assert, receipts_tx(&store, task, 0)),
                (Op::Retract, retraction_tx)
            ]
        );
        assert!(!stored_bytes_hold(&store, b"gone"));
        // The slot has no current-claims row yet (under 8 datoms): reads fold its history, and
        // the ended claim stays ended now and as of every transaction after its retraction.
        assert!(
            store
                .get(Space::State, &keys::current(&ns(), task, &attr(":task/tag")))
                .unwrap()
                .is_none()
        );
        let live = |v: &str| Value::String(v.into());
        assert_eq!(
            tags_as_of(&store, task, None),
            vec![live("b"), live("c"), live("d"), live("e")]
        );
        assert_eq!(
            tags_as_of(&store, task, Some(retraction_tx)),
            vec![live("b"), live("c")]
        );
        let report = crate::scrub::scrub(&*store, &mut |_, _| {}).unwrap();
        assert!(report.ok(), "{:?}", report.findings);
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
    }

    /// More tags asserted on `task`, one transaction each.
    fn tag_steps_more(engine: &mut Engine, index: &mut u64, task: EntityId, values: &[&str]) {
        for value in values {
            engine
                .apply_tx(
                    *index,
                    *index as i64 * 1_000_000,
                    &tx(vec![op(
                        EntityRef::Id(task),
                        ":task/tag",
                        Value::String((*value).into()),
                    )]),
                    WriteBatch::new(),
                )
                .unwrap()
                .unwrap();
            *index += 1;
        }
    }

    /// The transaction of the `n`-th datom of `task`'s tag slot, in key order.
    fn receipts_tx(store: &MemStore, task: EntityId, n: usize) -> TxId {
        reads::slot_datoms_main(store, &ns(), task, &attr(":task/tag")).unwrap()[n].tx
    }

    #[test]
    fn a_redaction_by_agent_takes_the_other_agents_retraction_of_the_value() {
        let (store, mut engine) = engine();
        let write = |engine: &mut Engine, index: u64, o: TxOp, agent: &str| {
            let mut t = tx(vec![o]);
            t.provenance.agent = agent.into();
            engine.apply_tx(index, 0, &t, WriteBatch::new()).unwrap().unwrap()
        };
        let first = write(
            &mut engine,
            2,
            op(
                EntityRef::Temp("p".into()),
                ":person/email",
                Value::String("ada@crawled.example".into()),
            ),
            "crawler",
        );
        let e = first.temp_ids["p"];
        let mut retract = op(
            EntityRef::Id(e),
            ":person/email",
            Value::String("ada@crawled.example".into()),
        );
        retract.op = Op::Retract;
        write(&mut engine, 3, retract, "cleaner");
        write(
            &mut engine,
            4,
            op(
                EntityRef::Id(e),
                ":person/email",
                Value::String("ada@kept.example".into()),
            ),
            "cleaner",
        );
        let by_crawler = where_request(engram_types::Predicate {
            agent: Some("crawler".into()),
            ..Default::default()
        });
        // The dry run lists what the redaction takes: the crawler's datom and the cleaner's
        // retraction of its value.
        let (listed, count) = redact_where::preview(&*store, &by_crawler, 10).unwrap();
        assert_eq!(count, 2);
        let agents: Vec<&str> = listed.iter().map(|t| t.datom.provenance.agent.as_str()).collect();
        assert_eq!(agents, vec!["crawler", "cleaner"]);
        let mut index = 5;
        let receipts = redact_where_all(&mut engine, &store, &mut index, &by_crawler, 100, 100, None);
        let taken: Vec<Op> = receipts
            .iter()
            .flat_map(|r| redact::redacted_by(&*store, r.tx).unwrap())
            .map(|(_, d)| d.op)
            .collect();
        assert_eq!(taken, vec![Op::Assert, Op::Retract]);
        assert!(!stored_bytes_hold(&store, b"ada@crawled.example"));
        assert!(stored_bytes_hold(&store, b"ada@kept.example"));
        let report = crate::scrub::scrub(&*store, &mut |_, _| {}).unwrap();
        assert!(report.ok(), "{:?}", report.findings);
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
    }

    #[test]
    fn an_entity_redaction_part_ends_at_a_slot_boundary() {
        let (store, mut engine) = engine();
        // `:person/email`: ten datoms (an assertion, eight rewrites, one retraction); then
        // `:person/manager`: one.
        let (e, _, _) = redacted_entity(&mut engine);
        let req = redaction(e, None);
        let first = RedactPart {
            first_tx: None,
            after_key: None,
            limit: 3,
        };
        let receipt = redact_part(&mut engine, 21, &req, Some(&first)).unwrap().unwrap();
        let taken = redact::redacted_by(&*store, receipt.tx).unwrap();
        // The part reached the email slot and took all of it, the retraction with the value it
        // ended, not the first three datoms only.
        assert_eq!(taken.len(), 10);
        assert!(taken.iter().all(|(_, d)| d.attribute.as_str() == ":person/email"));
        let after = redact::last_key_of(&ns(), &taken).unwrap();
        let second = RedactPart {
            first_tx: Some(receipt.tx),
            after_key: Some(after),
            limit: 3,
        };
        let receipt = redact_part(&mut engine, 22, &req, Some(&second))
            .unwrap()
            .unwrap();
        let taken = redact::redacted_by(&*store, receipt.tx).unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].1.attribute.as_str(), ":person/manager");
        assert!(!stored_bytes_hold(&store, b"example.com"));
        let report = crate::scrub::scrub(&*store, &mut |_, _| {}).unwrap();
        assert!(report.ok(), "{:?}", report.findings);
        assert_eq!(verify_stored(&store).unwrap(), engine.head().index);
    }

    /// Sets a versions policy keeping `keep` of `attribute` ("": the whole namespace).
    fn keep_versions(engine: &mut Engine, index: &mut u64, attribute: &str, keep: u32) {
        let set = PolicyOp::RetentionVersions {
            namespace: ns().to_string(),
            attribute: attribute.into(),
            keep_versions: keep,
        };
        engine
            .apply_policy(*index, 0, &set, &PolicyActor::Unsigned(None), WriteBatch::new())
            .unwrap()
            .unwrap();
        *index += 1;
    }

    fn stored_bytes_hold(store: &MemStore, needle: &[u8]) -> bool {
        state_bytes(store).iter().any(|(k, v)| {
            k.windows(needle.len()).any(|w| w == needle) || v.windows(needle.len()).any(|w| w == needle)
        })
    }

    #[test]
    fn a_redaction_forgets_values_and_every_proof_still_verifies() {
        let (store, mut engine) = engine();
        let (e, other, hashes) = redacted_entity(&mut engine);
        let slot = keys::current(&ns(), e, &attr(":person/email"));
        assert!(
            store.get(Space::State, &slot).unwrap().is_some(),
            "the slot has a current-claims row"
        );
        let claims_before = reads::get(&*store, &ns(), e, None, None).unwrap();
        assert!(stored_bytes_hold(&store, b"example.com"));
        let root_before = engine.head().tree_root().unwrap();

        let receipt = redact_unsigned(&mut engine, 21, &redaction(e, None))
            .unwrap()
            .unwrap();
        assert_eq!(receipt.tx, TxId(21));
        assert!(
            !stored_bytes_hold(&store, b"example.com"),
            "no state row holds a redacted value any more"
        );
        // Every datom of the entity is listed by the record, with the hash its entry committed to.
        let listed = redact::redacted_by(&*store, receipt.tx).unwrap();
        let listed_hashes: Vec<Hash> = listed.iter().map(|(r, _)| r.hash).collect();
        assert_eq!(listed_hashes, {
            // Key order: attribute, then tx.
            let mut by_key = reads::entity_datoms(&*store, &ns(), e).unwrap();
            by_key.sort_by(|a, b| (&a.attribute, a.tx).cmp(&(&b.attribute, b.tx)));
            by_key.iter().map(|d| d.hash()).collect::<Vec<_>>()
        });
        let mut sorted = listed_hashes.clone();
        sorted.sort();
        let mut written = hashes.clone();
        written.sort();
        assert_eq!(sorted, written, "the record lists exactly the entity's datoms");
        for (r, d) in &listed {
            let marker = d.value.redacted().expect("stored redacted");
            assert_eq!((marker.by_tx, d.hash()), (receipt.tx, r.hash));
        }
        // Reads answer the same claims, each with the marker instead of its value.
        let claims_after = reads::get(&*store, &ns(), e, None, None).unwrap();
        assert_eq!(claims_after.len(), claims_before.len());
        for (before, after) in claims_before.iter().zip(&claims_after) {
            assert_eq!(after.hash(), before.hash());
            assert_eq!(
                after.value.redacted().map(|r| r.value_type),
                Some(before.value.value_type())
            );
        }
        // The value and reference indexes forgot them too.
        let found = pages::find_main(
            &*store,
            &ns(),
            &attr(":person/email"),
            Some(&Value::String("ada@example.com".into())),
            None,
            10,
        )
        .unwrap();
        assert!(found.is_empty());
        assert!(
            store
                .scan(Space::State, &keys::vaet_ref(&ns(), other), None, 10)
                .unwrap()
                .iter()
                .all(|(k, _)| !k.starts_with(&keys::vaet_ref(&ns(), other))),
            "the reference's VAET row is gone"
        );
        // The chain, old roots included, and the store's own checks all hold.
        assert_eq!(verify_stored(&store).unwrap(), receipt.audit_index);
        let tree = engine.head().tree().unwrap();
        assert!(tree.size() > 0 && root_before != engine.head().tree_root().unwrap());
        let report = crate::scrub::scrub(&*store, &mut |_, _| {}).unwrap();
        assert!(report.ok(), "{:?}", report.findings);

        // Nothing is left to take, an unknown entity is not found, and the slot takes new writes.
        let again = redact_unsigned(&mut engine, 22, &redaction(e, None)).unwrap();
        assert!(matches!(again, Err(Rejection::NothingToRedact(_))), "{again:?}");
        let unknown = redact_unsigned(&mut engine, 23, &redaction(EntityId(999_999), None)).unwrap();
        assert_eq!(unknown, Err(Rejection::UnknownEntity(EntityId(999_999))));
        engine
            .apply_tx(
                24,
                24_000,
                &tx(vec![op(
                    EntityRef::Id(e),
                    ":person/email",
                    Value::String("new@x.org".into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        let now = reads::get(&*store, &ns(), e, None, None).unwrap();
        assert!(now.iter().any(|d| d.value == Value::String("new@x.org".into())));
        let report = crate::scrub::scrub(&*store, &mut |_, _| {}).unwrap();
        assert!(report.ok(), "{:?}", report.findings);
    }

    #[test]
    fn a_redaction_is_the_same_on_every_replica_and_tampering_is_found() {
        let run = || {
            let (store, mut engine) = engine();
            let (e, _, _) = redacted_entity(&mut engine);
            redact_unsigned(&mut engine, 21, &redaction(e, Some(":person/email")))
                .unwrap()
                .unwrap();
            (store, e)
        };
        let (a, e) = run();
        let (b, _) = run();
        assert_eq!(state_bytes(&a), state_bytes(&b), "replicas agree byte for byte");
        // Only the email went: the reference keeps its value.
        let facts = reads::get(&*a, &ns(), e, None, None).unwrap();
        assert!(facts.iter().any(|d| matches!(d.value, Value::Ref(_))));
        // A value marked redacted that no record lists is a finding of the scrub.
        let manager = facts
            .iter()
            .find(|d| matches!(d.value, Value::Ref(_)))
            .unwrap()
            .clone();
        let key = reads::datom_key_of_tx(&*a, manager.tx, 1).unwrap().unwrap();
        let mut forged = WriteBatch::new();
        forged.put(Space::State, key, manager.redact(TxId(21), 0).encode());
        a.write(forged, Durability::Sync).unwrap();
        let report = crate::scrub::scrub(&*a, &mut |_, _| {}).unwrap();
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.what.contains("does not list it")),
            "{:?}",
            report.findings
        );
    }

    #[test]
    fn salted_datoms_hash_alike_on_every_replica_and_keep_their_commitment_once_redacted() {
        let run = |seed: [u8; 32]| {
            let (store, mut engine) = engine();
            // Every entry of this run carries a seed, as a leader of this build proposes them.
            engine.salt_datoms_with(Some(seed));
            let (e, _, hashes) = redacted_entity(&mut engine);
            (store, engine, e, hashes)
        };
        let (a, mut engine_a, e, hashes_a) = run([5; 32]);
        let (b, _, _, hashes_b) = run([5; 32]);
        let (_, _, _, hashes_c) = run([6; 32]);
        assert_eq!(
            state_bytes(&a),
            state_bytes(&b),
            "one seed, one state on every replica"
        );
        assert_eq!(hashes_a, hashes_b);
        assert!(
            hashes_a.iter().zip(&hashes_c).all(|(x, y)| x != y),
            "another seed salts every datom differently"
        );
        let datoms = reads::entity_datoms(&*a, &ns(), e).unwrap();
        assert!(datoms.iter().all(|d| d.salt.is_some()));
        let salts: Vec<_> = datoms.iter().filter_map(|d| d.salt).collect();
        assert!(salts.iter().all(|s| stored_bytes_hold(&a, s)));
        // The receipts' hashes are the datoms' (salted) hashes, which the chain verifies.
        let mut read: Vec<Hash> = datoms.iter().map(engram_types::Datom::hash).collect();
        read.sort();
        let mut written = hashes_a.clone();
        written.sort();
        assert_eq!(read, written);
        assert!(verify_stored(&a).is_ok());

        let receipt = redact_unsigned(&mut engine_a, 21, &redaction(e, None))
            .unwrap()
            .unwrap();
        assert!(!stored_bytes_hold(&a, b"example.com"));
        let listed = redact::redacted_by(&*a, receipt.tx).unwrap();
        assert!(!listed.is_empty());
        assert!(
            listed
                .iter()
                .all(|(r, d)| r.salted && d.salted() && d.salt.is_none())
        );
        // Every entry of this run had the same seed, so datom `seq` of each had this salt: the
        // redacted rows hold it no more.
        for (r, _) in &listed {
            let key = reads::datom_key_of_tx(&*a, r.tx, r.seq).unwrap().unwrap();
            let row = a.get(Space::State, &key).unwrap().unwrap();
            let salt = engram_types::salt_of(&[5; 32], r.seq);
            assert!(
                !row.windows(salt.len()).any(|w| w == salt),
                "the salt went with the value"
            );
        }
        assert_eq!(verify_stored(&a).unwrap(), receipt.audit_index);
        let report = crate::scrub::scrub(&*a, &mut |_, _| {}).unwrap();
        assert!(report.ok(), "{:?}", report.findings);

        // A kept field changed after the redaction no longer gives the committed hash: the scrub
        // names the entry whose content hash the redacted datom breaks.
        let (listed_first, victim) = &listed[0];
        let key = reads::datom_key_of_tx(&*a, victim.tx, listed_first.seq)
            .unwrap()
            .unwrap();
        let mut forged = victim.clone();
        forged.provenance.agent = "mallory".into();
        let mut batch = WriteBatch::new();
        batch.put(Space::State, key, forged.encode());
        a.write(batch, Durability::Sync).unwrap();
        let report = crate::scrub::scrub(&*a, &mut |_, _| {}).unwrap();
        assert!(!report.ok(), "a forged kept field went unseen");
    }

    #[test]
    fn a_group_reaches_the_store_as_one_batch_that_the_caller_writes() {
        let (store, mut engine) = engine();
        let (_, first) = new_task(&mut engine, 2, "before the group");
        let durable_before = state_bytes(&store);

        engine.begin_group();
        let (e3, _) = new_task(&mut engine, 3, "in the group");
        let (_, last) = new_task(&mut engine, 4, "also in the group");
        // The group's later entries read its earlier ones; apply wrote nothing to the store.
        assert_eq!(
            reads::get(&engine.view(), &ns(), e3, None, None).unwrap().len(),
            1
        );
        assert!(matches!(
            reads::get(&*store, &ns(), e3, None, None),
            Err(reads::ReadError::UnknownEntity(_))
        ));
        assert_eq!(state_bytes(&store), durable_before, "apply wrote to the store");
        assert_eq!(last.audit_index, first.audit_index + 2);
        let mut closing = WriteBatch::new();
        closing.put(Space::State, b"Mtest/closing".to_vec(), vec![1]);
        let batch = engine.end_group(closing.clone()).unwrap();
        // Rows both entries rewrote are in the batch once.
        let heads = batch
            .mutations
            .iter()
            .filter(|m| mutation_key(m).is_some_and(|(_, k)| k == keys::META_HEAD))
            .count();
        assert_eq!(heads, 1);
        store.write(batch, Durability::Buffered).unwrap();
        let after = state_bytes(&store);
        assert_eq!(reads::head(&*store).unwrap().hash, last.audit_hash);
        // Buffered, as the state machine writes it: a crash loses the whole group, nothing
        // before it.
        store.crash();
        assert_eq!(state_bytes(&store), durable_before);

        // Replayed (as Raft would, from its log), byte for byte; the next synced write of the
        // store (a Raft log append, a vote, a purge) makes the group durable with it.
        let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed([9; 32]))).unwrap();
        engine.begin_group();
        new_task(&mut engine, 3, "in the group");
        let (_, replayed) = new_task(&mut engine, 4, "also in the group");
        assert_eq!(replayed.audit_hash, last.audit_hash, "replay is deterministic");
        let batch = engine.end_group(closing).unwrap();
        store.write(batch, Durability::Buffered).unwrap();
        assert_eq!(state_bytes(&store), after, "re-applied entries differ");
        let mut log_append = WriteBatch::new();
        log_append.put(Space::Log, b"entry".to_vec(), vec![1]);
        store.write(log_append, Durability::Sync).unwrap();
        store.crash();
        assert_eq!(state_bytes(&store), after);
        let entries = reads::audit_entries(&*store, 1, 10).unwrap().unwrap();
        assert_eq!(entries.len(), 4);
    }

    /// Every stored entry of `store`, run through the verifier an auditor uses, coverage
    /// included.
    fn verify_stored(store: &MemStore) -> Result<u64, engram_audit::ChainError> {
        let mut verifier = engram_audit::ChainVerifier::new();
        for stored in crate::inspect::stored_audit_entries(store).unwrap() {
            verifier.push(&stored.entry.unwrap())?;
        }
        verifier.finish()?;
        Ok(verifier.checked())
    }

    fn attested(store: &MemStore) -> Vec<u64> {
        crate::inspect::stored_audit_entries(store)
            .unwrap()
            .into_iter()
            .filter(|s| s.entry.as_ref().unwrap().attestation.is_some())
            .map(|s| s.index)
            .collect()
    }

    #[test]
    fn a_group_is_attested_once_by_its_last_entry() {
        let (store, mut engine) = engine();
        engine.begin_group();
        for index in 2..=4 {
            new_task(&mut engine, index, "grouped");
        }
        let batch = engine.end_group(WriteBatch::new()).unwrap();
        store.write(batch, Durability::Buffered).unwrap();
        // One signature, on the group's last entry, covers the group.
        assert_eq!(attested(&store), vec![1, 4]);
        assert_eq!(reads::attested_index(&*store).unwrap(), 4);
        assert_eq!(verify_stored(&store).unwrap(), 4);
        // Attestations are per node (another key; each entry applied alone, so each is a
        // group of its own): the replica digest does not see them.
        let digest = crate::inspect::state_digest(&*store).unwrap();
        let (other, mut alone) = engine_with_key([7; 32]);
        for index in 2..=4 {
            new_task(&mut alone, index, "grouped");
        }
        assert_eq!(attested(&other), vec![1, 2, 3, 4]);
        assert_eq!(crate::inspect::state_digest(&*other).unwrap(), digest);
    }

    #[test]
    fn a_torn_crash_keeps_whole_groups_and_each_is_covered() {
        let (store, mut engine) = engine();
        for group in [2..=4, 5..=6] {
            engine.begin_group();
            for index in group {
                new_task(&mut engine, index, "grouped");
            }
            let batch = engine.end_group(WriteBatch::new()).unwrap();
            store.write(batch, Durability::Buffered).unwrap();
        }
        // The write-ahead log kept the first group's record and lost the second's.
        store.crash_torn(1);
        assert_eq!(reads::head(&*store).unwrap().index, 4);
        assert_eq!(attested(&store), vec![1, 4]);
        assert_eq!(verify_stored(&store).unwrap(), 4);
    }

    #[test]
    fn a_head_left_unattested_is_attested_when_the_node_opens() {
        // A store written before groups were one batch could keep a group's entries without
        // its attestation (a crash in between): the node attests its head when it opens.
        let (store, mut engine) = engine();
        engine.begin_group();
        for index in 2..=4 {
            new_task(&mut engine, index, "grouped");
        }
        let batch = engine.end_group(WriteBatch::new()).unwrap();
        store.write(batch, Durability::Sync).unwrap();
        let head = reads::audit_entries(&*store, 4, 1).unwrap().unwrap().remove(0);
        let mut torn = WriteBatch::new();
        torn.put(
            Space::State,
            keys::audit(4),
            SignedEntry::unattested(head.entry).encode(),
        );
        torn.put(
            Space::State,
            keys::META_ATTESTED.to_vec(),
            1u64.to_be_bytes().to_vec(),
        );
        store.write(torn, Durability::Sync).unwrap();
        assert_eq!(verify_stored(&store).unwrap_err().index, 2);
        let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed([9; 32]))).unwrap();
        assert_eq!(attested(&store), vec![1, 4]);
        assert_eq!(verify_stored(&store).unwrap(), 4);
        // Raft applies entry 5; the node goes on.
        new_task(&mut engine, 5, "grouped");
        assert_eq!(verify_stored(&store).unwrap(), 5);
    }

    #[test]
    fn rejections_change_nothing() {
        let (store, mut engine) = engine();
        let (e, _) = new_task(&mut engine, 2, "x");
        let before = state_bytes(&store);
        let head = engine.head().clone();

        let mut wrong_type = tx(vec![op(EntityRef::Id(e), ":task/title", Value::I64(5))]);
        let r = engine.apply_tx(3, 3_000, &wrong_type, WriteBatch::new()).unwrap();
        assert!(matches!(
            r,
            Err(Rejection::TypeMismatch {
                expected: ValueType::String,
                found: ValueType::I64,
                ..
            })
        ));

        wrong_type.ops[0] = op(
            EntityRef::Id(EntityId(4242)),
            ":task/title",
            Value::String("y".into()),
        );
        let r = engine.apply_tx(4, 4_000, &wrong_type, WriteBatch::new()).unwrap();
        assert_eq!(r, Err(Rejection::UnknownEntity(EntityId(4242))));

        let mut guarded = tx(vec![op(
            EntityRef::Id(e),
            ":task/title",
            Value::String("z".into()),
        )]);
        guarded.preconditions.push(Precondition {
            entity: e,
            attribute: attr(":task/title"),
            expected: Some(Value::String("not x".into())),
        });
        let r = engine.apply_tx(5, 5_000, &guarded, WriteBatch::new()).unwrap();
        assert!(matches!(r, Err(Rejection::PreconditionFailed { .. })));

        let mut retract = tx(vec![op(
            EntityRef::Id(e),
            ":task/title",
            Value::String("never said".into()),
        )]);
        retract.ops[0].op = Op::Retract;
        let r = engine.apply_tx(6, 6_000, &retract, WriteBatch::new()).unwrap();
        assert!(matches!(r, Err(Rejection::NotCurrent { .. })));

        // Half-valid transaction: the first op is fine, the second is not; nothing applies.
        let half = tx(vec![
            op(
                EntityRef::Temp("n".into()),
                ":task/title",
                Value::String("ok".into()),
            ),
            op(
                EntityRef::Id(EntityId(777)),
                ":task/title",
                Value::String("bad".into()),
            ),
        ]);
        let r = engine.apply_tx(7, 7_000, &half, WriteBatch::new()).unwrap();
        assert!(r.is_err());

        assert_eq!(state_bytes(&store), before, "I8 no-partial-apply");
        assert_eq!(engine.head(), &head);
    }

    #[test]
    fn a_vector_attribute_keeps_its_first_dimension() {
        let (store, mut engine) = engine();
        let (e, _) = new_task(&mut engine, 2, "x");
        let first = tx(vec![op(
            EntityRef::Id(e),
            ":task/embedding",
            Value::Vector(vec![1.0, 0.0, 0.5]),
        )]);
        assert!(
            engine
                .apply_tx(3, 3_000, &first, WriteBatch::new())
                .unwrap()
                .is_ok()
        );
        let before = state_bytes(&store);
        let short = tx(vec![op(
            EntityRef::Id(e),
            ":task/embedding",
            Value::Vector(vec![1.0, 0.0]),
        )]);
        let r = engine.apply_tx(4, 4_000, &short, WriteBatch::new()).unwrap();
        assert_eq!(
            r,
            Err(Rejection::DimensionMismatch {
                attribute: attr(":task/embedding"),
                expected: 3,
                found: 2,
            })
        );
        assert_eq!(
            r.unwrap_err().to_string(),
            "wrong vector dimension for :task/embedding: expected 3 components, got 2"
        );
        assert_eq!(state_bytes(&store), before, "a refused vector changes nothing");
    }

    #[test]
    fn preconditions_that_hold_apply() {
        let (_store, mut engine) = engine();
        let (e, _) = new_task(&mut engine, 2, "x");
        let mut guarded = tx(vec![op(
            EntityRef::Id(e),
            ":task/title",
            Value::String("y".into()),
        )]);
        guarded.preconditions.push(Precondition {
            entity: e,
            attribute: attr(":task/title"),
            expected: Some(Value::String("x".into())),
        });
        assert!(
            engine
                .apply_tx(3, 3_000, &guarded, WriteBatch::new())
                .unwrap()
                .is_ok()
        );
        let mut absent = tx(vec![op(
            EntityRef::Id(e),
            ":task/owner",
            Value::String("me".into()),
        )]);
        absent.preconditions.push(Precondition {
            entity: e,
            attribute: attr(":task/owner"),
            expected: None,
        });
        assert!(
            engine
                .apply_tx(4, 4_000, &absent, WriteBatch::new())
                .unwrap()
                .is_ok()
        );
        assert!(
            engine
                .apply_tx(5, 5_000, &absent, WriteBatch::new())
                .unwrap()
                .is_err(),
            "owner is now set"
        );
    }

    #[test]
    fn idempotent_retry_returns_the_first_receipt() {
        let (store, mut engine) = engine();
        let mut req = tx(vec![op(
            EntityRef::Temp("t".into()),
            ":task/title",
            Value::String("once".into()),
        )]);
        req.idempotency_key = Some("key-1".into());
        let first = engine
            .apply_tx(2, 2_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap();
        let chain = engine.head().clone();
        let second = engine
            .apply_tx(3, 3_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap();
        assert_eq!(first, second);
        assert_eq!(engine.head(), &chain, "no second audit entry");
        let found = pages::find_main(&*store, &ns(), &attr(":task/title"), None, None, 10).unwrap();
        assert_eq!(found.len(), 1);
    }

    #[test]
    fn idempotency_key_reused_for_other_content_is_refused() {
        let (store, mut engine) = engine();
        let mut req = tx(vec![op(
            EntityRef::Temp("t".into()),
            ":task/title",
            Value::String("once".into()),
        )]);
        req.idempotency_key = Some("key-1".into());
        let first = engine
            .apply_tx(2, 2_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap();
        let chain = engine.head().clone();
        let state = state_bytes(&store);

        let mut other_value = req.clone();
        other_value.ops[0].value = Value::String("twice".into());
        let mut other_agent = req.clone();
        other_agent.provenance.agent = "a2".into();
        let mut other_guard = req.clone();
        other_guard.preconditions.push(Precondition {
            entity: first.temp_ids["t"],
            attribute: attr(":task/title"),
            expected: None,
        });
        for (i, other) in [other_value, other_agent, other_guard].into_iter().enumerate() {
            let refused = engine
                .apply_tx(3 + i as u64, 3_000, &other, WriteBatch::new())
                .unwrap()
                .unwrap_err();
            assert_eq!(
                refused,
                Rejection::IdempotencyKeyReused {
                    key: "key-1".into(),
                    first_tx: first.tx,
                },
                "case {i}"
            );
            let message = refused.to_string();
            assert!(
                message.contains("\"key-1\"") && message.contains("tx 2"),
                "{message}"
            );
            assert_eq!(engine.head(), &chain, "case {i}: no audit entry");
            assert_eq!(state_bytes(&store), state, "case {i}: nothing written");
        }
        // The same content is still a retry.
        let again = engine
            .apply_tx(9, 9_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap();
        assert_eq!(again, first);
        let found = pages::find_main(&*store, &ns(), &attr(":task/title"), None, None, 10).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].value, Value::String("once".into()));
    }

    #[test]
    fn a_reused_long_idempotency_key_is_named_by_its_prefix() {
        let (_store, mut engine) = engine();
        let key = format!("{}{}", "k".repeat(Rejection::KEY_SHOWN_CHARS), "-tail");
        let mut req = tx(vec![op(
            EntityRef::Temp("t".into()),
            ":task/title",
            Value::String("a".into()),
        )]);
        req.idempotency_key = Some(key);
        engine
            .apply_tx(2, 2_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap();
        req.ops[0].value = Value::String("b".into());
        let refused = engine
            .apply_tx(3, 3_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap_err();
        let shown = format!("{}…", "k".repeat(Rejection::KEY_SHOWN_CHARS));
        assert_eq!(
            refused,
            Rejection::IdempotencyKeyReused {
                key: shown,
                first_tx: TxId(2),
            }
        );
    }

    #[test]
    fn idempotency_rows_written_before_content_hashes_still_answer() {
        let (store, mut engine) = engine();
        let mut req = tx(vec![op(
            EntityRef::Temp("t".into()),
            ":task/title",
            Value::String("once".into()),
        )]);
        req.idempotency_key = Some("old".into());
        let first = engine
            .apply_tx(2, 2_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap();
        // Rewrite the row the way it was stored before: the receipt alone.
        let key = keys::idempotency(&ns(), "old");
        let mut legacy = WriteBatch::new();
        legacy.put(Space::State, key.clone(), encode_row(&first));
        store.write(legacy, Durability::Sync).unwrap();
        assert_eq!(
            IdempotencyRow::decode(&encode_row(&first)).unwrap(),
            IdempotencyRow {
                receipt: first.clone(),
                content: None,
            }
        );
        // With no hash to compare, a retry gets the receipt, as before.
        req.ops[0].value = Value::String("changed".into());
        let again = engine
            .apply_tx(3, 3_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap();
        assert_eq!(again, first);
        // A row with anything but 0 or 32 bytes after the receipt is corruption.
        let mut bad = encode_row(&first);
        bad.extend_from_slice(&[1, 2, 3]);
        assert!(matches!(
            IdempotencyRow::decode(&bad),
            Err(CoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn an_instant_finds_the_last_transaction_at_or_before_it() {
        let (store, mut engine) = engine();
        assert_eq!(
            reads::head(&*store).unwrap().tx_time_ns,
            0,
            "the genesis entry's time"
        );
        assert_eq!(
            reads::tx_at_time(&*store, 5).unwrap(),
            Some((TxId(1), 0)),
            "no transaction yet: any instant reads the (empty) head"
        );
        // Transactions 2..=9 at times 2,000..=9,000; then 10 and 11 share 9,000 (a leader whose
        // clock is behind is clamped to the time before).
        for index in 2..=9 {
            new_task(&mut engine, index, "t");
        }
        for index in [10, 11] {
            let r = engine
                .apply_tx(
                    index,
                    5,
                    &tx(vec![op(
                        EntityRef::Temp("t".into()),
                        ":task/title",
                        Value::String("late".into()),
                    )]),
                    WriteBatch::new(),
                )
                .unwrap()
                .unwrap();
            assert_eq!(r.tx_time_ns, 9_000);
        }
        let at = |ns| reads::tx_at_time(&*store, ns).unwrap();
        assert_eq!(at(-1), None, "before the first entry");
        // The genesis entry carries no time of its own (0): an instant before the first
        // transaction's time is before the memory held anything.
        assert_eq!(at(0), None);
        assert_eq!(at(1_999), None);
        // Exactly at a boundary, and just before the next one.
        for index in 2..=8u64 {
            let t = 1_000 * index as i64;
            assert_eq!(at(t), Some((TxId(index), t)), "at {t}");
            assert_eq!(at(t + 999), Some((TxId(index), t)), "at {}", t + 999);
        }
        // Of the entries sharing a time, the last; past the head, the head.
        assert_eq!(at(9_000), Some((TxId(11), 9_000)));
        assert_eq!(at(i64::MAX), Some((TxId(11), 9_000)));
    }

    #[test]
    fn tx_time_never_goes_backwards_and_as_of_reads_are_stable() {
        let (store, mut engine) = engine();
        let (e, first) = new_task(&mut engine, 2, "v1");
        // A new leader whose clock is behind proposes an earlier time.
        let r = engine
            .apply_tx(
                3,
                10,
                &tx(vec![op(
                    EntityRef::Id(e),
                    ":task/title",
                    Value::String("v2".into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            r.tx_time_ns, first.tx_time_ns,
            "I7: clamped to the previous tx time"
        );
        let old = reads::get(&*store, &ns(), e, Some(TxId(2)), None).unwrap();
        assert_eq!(
            old[0].value,
            Value::String("v1".into()),
            "I5: as-of read unchanged by later writes"
        );
        let now = reads::get(&*store, &ns(), e, None, None).unwrap();
        assert_eq!(now[0].value, Value::String("v2".into()));
        let history = pages::entity_history(&*store, &ns(), e, None, 10).unwrap();
        assert_eq!(history.len(), 2);
    }

    #[test]
    fn valid_time_is_an_independent_axis() {
        let (store, mut engine) = engine();
        let mut req = tx(vec![op(
            EntityRef::Temp("p".into()),
            ":person/city",
            Value::String("Oslo".into()),
        )]);
        req.ops[0].valid_from_ns = Some(100);
        req.ops[0].valid_to_ns = Some(200);
        let e = engine
            .apply_tx(2, 5_000, &req, WriteBatch::new())
            .unwrap()
            .unwrap()
            .temp_ids["p"];
        assert_eq!(reads::get(&*store, &ns(), e, None, Some(150)).unwrap().len(), 1);
        assert!(reads::get(&*store, &ns(), e, None, Some(250)).unwrap().is_empty());
    }

    #[test]
    fn namespaces_do_not_see_each_other() {
        let (store, mut engine) = engine();
        let (e, _) = new_task(&mut engine, 2, "secret");
        let other = Namespace::new("team/b").unwrap();
        assert!(matches!(
            reads::get(&*store, &other, e, None, None),
            Err(reads::ReadError::UnknownEntity(_))
        ));
        let mut cross = tx(vec![op(
            EntityRef::Id(e),
            ":task/title",
            Value::String("steal".into()),
        )]);
        cross.namespace = other;
        assert_eq!(
            engine.apply_tx(3, 3_000, &cross, WriteBatch::new()).unwrap(),
            Err(Rejection::UnknownEntity(e))
        );
    }

    /// Writes `count` new entities into `namespace` in one transaction; their ids in order.
    fn new_entities(engine: &mut Engine, index: u64, namespace: &str, count: usize) -> Vec<EntityId> {
        let mut req = tx((0..count)
            .map(|i| {
                op(
                    EntityRef::Temp(format!("t{i}")),
                    ":task/title",
                    Value::String(format!("task {i}")),
                )
            })
            .collect());
        req.namespace = Namespace::new(namespace).unwrap();
        let receipt = engine
            .apply_tx(index, 1_000 * index as i64, &req, WriteBatch::new())
            .unwrap()
            .unwrap();
        (0..count).map(|i| receipt.temp_ids[&format!("t{i}")]).collect()
    }

    /// Every `Z` row the store holds, as (slot, digest).
    fn commitment_rows(store: &MemStore) -> BTreeMap<engram_statetree::Key, Digest> {
        state_bytes(store)
            .into_iter()
            .filter(|(k, _)| k.first() == Some(&keys::SLOT_COMMITMENT))
            .map(|(k, v)| commitment::decode_row(&k, &v).unwrap())
            .collect()
    }

    /// A mixed history: declared cardinality one and many, three agents asserting and
    /// retracting, a cardinality widened midway, a branch written and merged, a redaction.
    /// Applies from `index` (the schema is declared on the first call); returns the next free
    /// index.
    fn mixed_history(engine: &mut Engine, mut index: u64, rounds: u64, first: bool) -> u64 {
        let mut next = |engine: &mut Engine, req: &TxRequest| {
            let outcome = engine
                .apply_tx(index, index as i64 * 1_000, req, WriteBatch::new())
                .unwrap();
            index += 1;
            outcome
        };
        let mut schema = tx(vec![]);
        let mut many = AttributeDef::new(attr(":s/many"), ValueType::I64);
        many.cardinality = engram_types::Cardinality::Many;
        let mut num = AttributeDef::new(attr(":s/num"), ValueType::I64);
        num.indexed = true;
        schema.schema = vec![AttributeDef::new(attr(":s/one"), ValueType::String), many, num];
        if first {
            next(engine, &schema).unwrap();
        }
        let made = next(
            engine,
            &tx((0..6)
                .map(|i| op(EntityRef::Temp(format!("e{i}")), ":s/num", Value::I64(i)))
                .collect()),
        )
        .unwrap();
        let entities: Vec<EntityId> = (0..6).map(|i| made.temp_ids[&format!("e{i}")]).collect();
        let mut rng = 17u64;
        let mut draw = |n: u64| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        for round in 0..rounds {
            if first && round == rounds / 2 {
                // Widen :s/one to many: its slots' rows were folded under one.
                let mut widen = tx(vec![]);
                let mut one = AttributeDef::new(attr(":s/one"), ValueType::String);
                one.cardinality = engram_types::Cardinality::Many;
                widen.schema = vec![one];
                next(engine, &widen).unwrap();
            }
            let e = EntityRef::Id(entities[draw(6) as usize]);
            let (a, value) = match draw(3) {
                0 => (":s/one", Value::String(format!("v{}", draw(4)))),
                1 => (":s/many", Value::I64(draw(4) as i64)),
                _ => (":s/num", Value::I64(draw(4) as i64)),
            };
            let mut req = tx(vec![TxOp {
                op: if draw(4) == 0 { Op::Retract } else { Op::Assert },
                ..op(e, a, value)
            }]);
            req.provenance.agent = ["a1", "a2", "a3"][draw(3) as usize].into();
            // Refused retractions (of values not held) write nothing, which is fine.
            let _ = next(engine, &req);
        }
        let branch = BranchName::new(format!("plan-{rounds}")).unwrap();
        let mut create = tx(vec![]);
        create.branch_op = Some(engram_types::BranchOp::Create {
            name: branch.clone(),
            from: None,
        });
        next(engine, &create).unwrap();
        let mut on_branch = tx(vec![
            op(EntityRef::Id(entities[0]), ":s/num", Value::I64(40)),
            op(EntityRef::Temp("n".into()), ":s/num", Value::I64(41)),
        ]);
        on_branch.branch = Some(branch.clone());
        next(engine, &on_branch).unwrap();
        let mut merge = tx(vec![]);
        merge.branch_op = Some(engram_types::BranchOp::Merge { name: branch });
        next(engine, &merge).unwrap();
        redact_unsigned(engine, index, &redaction(entities[1], None))
            .unwrap()
            .unwrap();
        index + 1
    }

    #[test]
    fn the_state_commitment_rows_equal_a_rebuild_from_history() {
        // Apply writes each slot's digest one transaction at a time; the rebuild folds every
        // slot's history from scratch. They must agree on every slot, or a restarted or
        // upgraded replica would hold another state root than one that applied the log.
        let (store, mut engine) = engine();
        let next = mixed_history(&mut engine, 2, 300, true);
        let rows = commitment_rows(&store);
        let rebuilt = commitment::rebuild(&*store).unwrap();
        assert!(rows.len() > 20, "{} slots", rows.len());
        assert_eq!(rows, rebuilt);
        assert!(commitment::marked(&*store).unwrap());

        // Kept in memory from here: the map's root is the rows' root, and stays so.
        engine.keep_state_commitment().unwrap();
        let root = engine.state_root().unwrap();
        assert_eq!(root, engram_statetree::StateTree::from_pairs(rebuilt).root());
        mixed_history(&mut engine, next, 50, false);
        let rows = commitment_rows(&store);
        assert_eq!(rows, commitment::rebuild(&*store).unwrap());
        assert_eq!(
            engine.state_root().unwrap(),
            engram_statetree::StateTree::from_pairs(rows).root()
        );
        assert_ne!(engine.state_root().unwrap(), root);

        // Entries whose log entry asks for it record the root after them (format 2).
        let before = engine.head().index;
        engine.record_state_root(true);
        let receipt = engine
            .apply_tx(
                900,
                900_000,
                &tx(vec![op(EntityRef::Temp("r".into()), ":s/num", Value::I64(1))]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        engine.record_state_root(false);
        let entry = reads::audit_entries(&*store, receipt.audit_index, 1)
            .unwrap()
            .unwrap()
            .remove(0);
        assert_eq!(entry.entry.state_root, engine.state_root().map(Hash));
        assert_eq!(entry.entry.encode()[0], engram_audit::AUDIT_FORMAT_STATE_ROOT);
        assert_eq!(receipt.audit_index, before + 1);
        let plain = engine
            .apply_tx(
                901,
                901_000,
                &tx(vec![op(EntityRef::Temp("r".into()), ":s/num", Value::I64(2))]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        let entry = reads::audit_entries(&*store, plain.audit_index, 1)
            .unwrap()
            .unwrap()
            .remove(0);
        assert_eq!(entry.entry.state_root, None);
    }

    #[test]
    fn a_store_from_before_the_state_commitment_is_rebuilt_once_and_then_kept() {
        let (store, mut engine) = engine();
        let next = mixed_history(&mut engine, 2, 120, true);
        let want = commitment_rows(&store);
        // The store as a build without the commitment left it: no `Z` rows, no mark.
        let mut older = WriteBatch::new();
        for slot in want.keys() {
            older.delete(Space::State, commitment::row_key(slot));
        }
        older.delete(Space::State, keys::META_STATE_COMMITMENT.to_vec());
        store.write(older, Durability::Sync).unwrap();
        let key = Arc::new(NodeKey::from_seed([9; 32]));
        let mut reopened = Engine::open(store.clone(), key.clone()).unwrap();
        // Without the rebuild, apply writes no row: a digest must never skip history.
        let write = |engine: &mut Engine, index: u64| {
            engine
                .apply_tx(
                    index,
                    index as i64 * 1_000,
                    &tx(vec![op(EntityRef::Temp("t".into()), ":s/num", Value::I64(7))]),
                    WriteBatch::new(),
                )
                .unwrap()
                .unwrap();
        };
        write(&mut reopened, next);
        assert!(commitment_rows(&store).is_empty());
        assert!(!commitment::marked(&*store).unwrap());
        reopened.keep_state_commitment().unwrap();
        let rebuilt = commitment_rows(&store);
        assert_eq!(rebuilt.len(), want.len() + 1, "every slot, the new task's too");
        assert!(
            want.iter()
                .all(|(slot, digest)| rebuilt.get(slot) == Some(digest))
        );
        write(&mut reopened, next + 1);
        assert_eq!(commitment_rows(&store), commitment::rebuild(&*store).unwrap());
        let root = reopened.state_root().unwrap();
        // A reopened engine that keeps the map finds the same root without rebuilding.
        let mut again = Engine::open(store.clone(), key).unwrap();
        again.keep_state_commitment().unwrap();
        assert_eq!(again.state_root(), Some(root));
    }

    #[test]
    fn entity_ids_say_nothing_of_other_namespaces() {
        let (_, mut empty) = engine();
        let alone = new_entities(&mut empty, 2, "team/b", 2);

        let (_, mut busy) = engine();
        let mut made = new_entities(&mut busy, 2, "team/a", 40);
        made.extend(new_entities(&mut busy, 3, "team/a", 7));
        // Entities made on a branch of team/a draw from team/a too.
        let branch = BranchName::new("plan-a").unwrap();
        let mut create = tx(vec![]);
        create.namespace = Namespace::new("team/a").unwrap();
        create.branch_op = Some(engram_types::BranchOp::Create {
            name: branch.clone(),
            from: None,
        });
        busy.apply_tx(4, 4_000, &create, WriteBatch::new())
            .unwrap()
            .unwrap();
        let mut on_branch = tx(vec![op(
            EntityRef::Temp("b".into()),
            ":task/title",
            Value::String("draft".into()),
        )]);
        on_branch.namespace = Namespace::new("team/a").unwrap();
        on_branch.branch = Some(branch);
        let receipt = busy
            .apply_tx(5, 5_000, &on_branch, WriteBatch::new())
            .unwrap()
            .unwrap();
        made.push(receipt.temp_ids["b"]);

        let after = new_entities(&mut busy, 6, "team/b", 2);
        assert_eq!(after, alone, "team/b's ids do not depend on what team/a wrote");
        // Ids stay unique across namespaces (and below 2^53).
        let mut all: Vec<EntityId> = made.iter().chain(&after).copied().collect();
        assert!(all.iter().all(|e| (1..=keys::MAX_DRAWN_ENTITY_ID).contains(&e.0)));
        all.sort();
        all.dedup();
        assert_eq!(all.len(), made.len() + after.len());
    }

    #[test]
    fn a_drawn_entity_id_already_held_is_skipped() {
        let (store, mut engine) = engine();
        let ns = ns();
        // An entity of another namespace holds team/a's first draw (as an id from the old
        // cluster-wide counter could).
        let mut held = WriteBatch::new();
        held.put(
            Space::State,
            keys::entity(keys::entity_id(&ns, 1)),
            keys::entity_owner(&Namespace::new("team/z").unwrap(), None),
        );
        store.write(held, Durability::Sync).unwrap();
        let ids = new_entities(&mut engine, 2, "team/a", 2);
        assert_eq!(ids, vec![keys::entity_id(&ns, 2), keys::entity_id(&ns, 3)]);
        let next = new_entities(&mut engine, 3, "team/a", 1);
        assert_eq!(
            next,
            vec![keys::entity_id(&ns, 4)],
            "the counter row kept the draws"
        );
    }

    #[test]
    fn snapshots_round_trip_and_refuse_tampering() {
        let (store, mut engine) = engine();
        for i in 2..20 {
            new_task(&mut engine, i, &format!("t{i}"));
        }
        let bytes = snapshot::export(&*store).unwrap();
        let target = MemStore::new();
        let head = snapshot::install(&target, &bytes, WriteBatch::new()).unwrap();
        assert_eq!(&head, engine.head());
        assert_eq!(state_bytes(&target), state_bytes(&store));

        let mut flipped = bytes.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 1;
        assert!(matches!(
            snapshot::install(&MemStore::new(), &flipped, WriteBatch::new()),
            Err(snapshot::SnapshotError::Checksum)
        ));

        // A forged snapshot with a valid checksum but an altered audit entry is refused too.
        let mut records = snapshot::parse(&bytes).unwrap();
        let audit_row = records.iter_mut().find(|(k, _)| k == &keys::audit(5)).unwrap();
        let mut signed = SignedEntry::decode(&audit_row.1).unwrap();
        signed.entry.tx_time_ns += 1;
        audit_row.1 = signed.encode();
        let forged_store = MemStore::new();
        let mut b = WriteBatch::new();
        for (k, v) in records {
            b.put(Space::State, k, v);
        }
        forged_store.write(b, Durability::Sync).unwrap();
        let forged = snapshot::export(&forged_store).unwrap();
        let err = snapshot::install(&MemStore::new(), &forged, WriteBatch::new()).unwrap_err();
        assert!(err.to_string().contains("audit entry 5"), "{err}");
    }

    #[test]
    fn reads_report_tampered_audit_entries_by_index() {
        let (store, mut engine) = engine();
        for i in 2..8 {
            new_task(&mut engine, i, "t");
        }
        let key = keys::audit(4);
        let mut row = store.get(Space::State, &key).unwrap().unwrap();
        let n = row.len();
        row[n - 80] ^= 0xff; // inside the prev-hash of entry 4 (before key id and signature)
        let mut b = WriteBatch::new();
        b.put(Space::State, key, row);
        store.write(b, Durability::Sync).unwrap();
        let err = reads::audit_entries(&*store, 1, 100).unwrap().unwrap_err();
        assert_eq!(err.index, 4);
    }
}

/// Who makes a policy change: a principal known otherwise (or nobody, for the cluster's own
/// initialisation), or an agent whose signed request the entry will record.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyActor {
    Unsigned(Option<Principal>),
    Signed(Author),
}
