//! Reads over the state. Every function takes a [`ReadView`] (a store, or a store with an
//! apply group's writes over it) and decodes what it reads with validation: a row that does
//! not decode is reported as corruption with its location, never unwrapped.

use std::collections::BTreeMap;

use engram_audit::{ChainError, ChainFault, SignedEntry};
use engram_storage::{KeyValue, ReadView, Space, prefix_end};
use engram_types::{Attribute, BranchName, Cardinality, Datom, EntityId, Namespace, Op, TxId, Value};

use crate::branch::{self, BranchRow};
use crate::cursor::CursorError;
use crate::rows::{ChainHead, TxLogRow, decode_row, hex};
use crate::{CoreError, keys, schema};

pub use engram_types::MEMORY_EXPIRES;
pub use engram_types::resolve::{Facts, Resolution, claims, expiry, holding};

/// The most rows an internal read of one entity or slot takes (History and Find page instead;
/// see [`crate::pages`]).
pub const MAX_READ_DATOMS: usize = 100_000;

pub fn head(store: &dyn ReadView) -> Result<ChainHead, CoreError> {
    match store.get(Space::State, keys::META_HEAD)? {
        Some(bytes) => decode_row("chain head", &bytes),
        None => Ok(ChainHead {
            next_entity: 1,
            ..ChainHead::default()
        }),
    }
}

/// The index of the last entry this node attested: the end of the chain it vouches for. The
/// entries after it (an apply group in progress, or a group the node stopped before signing,
/// which it signs when it starts) are not served until an attestation covers them. A store
/// written before attestations were grouped has no mark and every entry attested.
pub fn attested_index(store: &dyn ReadView) -> Result<u64, CoreError> {
    if let Some(bytes) = store.get(Space::State, keys::META_ATTESTED)? {
        let raw = <[u8; 8]>::try_from(bytes.as_slice())
            .map_err(|_| CoreError::corrupt("attested mark", format!("{} bytes, expected 8", bytes.len())))?;
        return Ok(u64::from_be_bytes(raw));
    }
    let head = head(store)?;
    if head.index == 0 {
        return Ok(0);
    }
    match store.get(Space::State, &keys::audit(head.index))? {
        Some(bytes) => match SignedEntry::decode(&bytes) {
            Ok(signed) if signed.attestation.is_none() => Ok(0),
            _ => Ok(head.index),
        },
        None => Ok(head.index),
    }
}

/// Whether `e` is an entity of main in `ns` (made there, or made on a branch that merged).
pub fn entity_exists(store: &dyn ReadView, ns: &Namespace, e: EntityId) -> Result<bool, CoreError> {
    Ok(store
        .get(Space::State, &keys::entity(e))?
        .is_some_and(|owner| owner == keys::entity_owner(ns, None)))
}

/// Where a read or a write looks: main, or a branch (main as of the fork plus the branch).
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub ns: &'a Namespace,
    pub branch: Option<(&'a BranchName, TxId)>,
}

impl<'a> View<'a> {
    pub fn main(ns: &'a Namespace) -> View<'a> {
        View { ns, branch: None }
    }

    /// The view of `branch` (main when `None`); a branch that does not exist is an error.
    pub fn of(
        store: &dyn ReadView,
        ns: &'a Namespace,
        branch: Option<&'a BranchName>,
    ) -> Result<(View<'a>, Option<BranchRow>), ReadError> {
        match branch {
            None => Ok((View::main(ns), None)),
            Some(name) => {
                let row =
                    branch::row(store, ns, name)?.ok_or_else(|| ReadError::UnknownBranch(name.clone()))?;
                Ok((
                    View {
                        ns,
                        branch: Some((name, row.fork)),
                    },
                    Some(row),
                ))
            }
        }
    }

    /// Whether `e` can be read and written here: a main entity (on a branch: one that had
    /// facts by the fork point), or an entity made on this branch.
    pub fn entity_visible(&self, store: &dyn ReadView, e: EntityId) -> Result<bool, CoreError> {
        let Some(owner) = store.get(Space::State, &keys::entity(e))? else {
            return Ok(false);
        };
        match self.branch {
            None => Ok(owner == keys::entity_owner(self.ns, None)),
            Some((name, fork)) => {
                if owner == keys::entity_owner(self.ns, Some(name)) {
                    return Ok(true);
                }
                if owner != keys::entity_owner(self.ns, None) {
                    return Ok(false);
                }
                // Made on main: visible if it had a fact by the fork (or this branch wrote to
                // it after a merge made it main).
                let main = entity_datoms(store, self.ns, e)?;
                Ok(main.iter().any(|d| d.tx <= fork)
                    || !scan_prefix(store, &keys::branch_eavt_entity(self.ns, name, e), 1)?.is_empty())
            }
        }
    }

    /// Every datom of `e` seen here, main's first, each part in (attribute, tx) order.
    pub fn entity_datoms(&self, store: &dyn ReadView, e: EntityId) -> Result<Vec<Datom>, CoreError> {
        let mut out = entity_datoms(store, self.ns, e)?;
        if let Some((name, fork)) = self.branch {
            out.retain(|d| d.tx <= fork);
            out.extend(decode_datoms(scan_prefix(
                store,
                &keys::branch_eavt_entity(self.ns, name, e),
                MAX_READ_DATOMS,
            )?)?);
        }
        Ok(out)
    }

    /// Every datom of one slot (entity, attribute) seen here, in tx order.
    pub fn slot_datoms(
        &self,
        store: &dyn ReadView,
        e: EntityId,
        attr: &Attribute,
    ) -> Result<Vec<Datom>, CoreError> {
        let mut out = slot_datoms_main(store, self.ns, e, attr)?;
        if let Some((name, fork)) = self.branch {
            out.retain(|d| d.tx <= fork);
            out.extend(decode_datoms(scan_prefix(
                store,
                &keys::branch_eavt_attr(self.ns, name, e, attr),
                MAX_READ_DATOMS,
            )?)?);
        }
        Ok(out)
    }

    /// The index prefix whose rows name, in entity order, the entities of main that may hold
    /// `value` for `attr`: the value index (AVET, by the value's digest) when the attribute has
    /// one and a value is asked for, else the attribute's rows (AEVT).
    pub fn candidate_prefix(
        &self,
        store: &dyn ReadView,
        attr: &Attribute,
        value: Option<&Value>,
    ) -> Result<Vec<u8>, CoreError> {
        let indexed = schema::def_at(store, self.ns, attr, None)?.is_some_and(|d| d.has_value_index());
        Ok(match value {
            Some(v) if indexed => keys::avet_value(self.ns, attr, v),
            _ => keys::aevt_attr(self.ns, attr),
        })
    }

    /// The entities that may hold `value` for `attr` here (a superset: callers check each
    /// one's current values). Uses the value index when the attribute has one.
    pub fn value_candidates(
        &self,
        store: &dyn ReadView,
        attr: &Attribute,
        value: Option<&Value>,
    ) -> Result<Vec<EntityId>, CoreError> {
        let prefix = self.candidate_prefix(store, attr, value)?;
        let mut entities: Vec<EntityId> = scan_prefix(store, &prefix, MAX_READ_DATOMS)?
            .iter()
            .filter_map(|(k, _)| keys::trailing_entity_tx_seq(k).map(|(e, _, _)| e))
            .collect();
        if let Some((name, _)) = self.branch {
            for d in branch::datoms(store, self.ns, name)? {
                if &d.attribute == attr && value.is_none_or(|v| *v == d.value) {
                    entities.push(d.entity);
                }
            }
        }
        entities.sort();
        entities.dedup();
        Ok(entities)
    }
}

/// Every datom of one slot on main, in tx order.
pub fn slot_datoms_main(
    store: &dyn ReadView,
    ns: &Namespace,
    e: EntityId,
    attr: &Attribute,
) -> Result<Vec<Datom>, CoreError> {
    decode_datoms(scan_prefix(
        store,
        &keys::eavt_attr(ns, e, attr),
        MAX_READ_DATOMS,
    )?)
}

fn decode_datoms(rows: Vec<KeyValue>) -> Result<Vec<Datom>, CoreError> {
    rows.into_iter()
        .map(|(k, v)| Datom::decode(&v).map_err(|e| CoreError::corrupt(format!("datom row {}", hex(&k)), e)))
        .collect()
}

fn scan_prefix(store: &dyn ReadView, prefix: &[u8], limit: usize) -> Result<Vec<KeyValue>, CoreError> {
    Ok(store.scan(Space::State, prefix, prefix_end(prefix).as_deref(), limit)?)
}

/// Every datom ever recorded about `e` in `ns`, in (attribute, tx) order.
pub fn entity_datoms(store: &dyn ReadView, ns: &Namespace, e: EntityId) -> Result<Vec<Datom>, CoreError> {
    decode_datoms(scan_prefix(store, &keys::eavt_entity(ns, e), MAX_READ_DATOMS)?)
}

/// What a read asks for besides the entity.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReadOptions {
    /// Only transactions up to this one (inclusive).
    pub as_of: Option<TxId>,
    /// Only facts whose valid-time interval contains this instant.
    pub valid_at_ns: Option<i64>,
    pub rule: Resolution,
    /// Ignore candidate claims entirely.
    pub verified_only: bool,
    /// Leave out an entity that had expired by this instant (nanoseconds since the Unix
    /// epoch): it holds `:memory/expires` values under this read, and every one of them is at
    /// or before the instant (see [`expiry`]). `None`: expiry is not applied.
    pub expired_at_ns: Option<i64>,
    /// Find only: only current datoms written after this transaction count (Datomic's
    /// `since`). The other reads take no such bound.
    pub since: Option<TxId>,
}

impl ReadOptions {
    /// What of these options a slot's resolution takes.
    pub fn slot_read(&self) -> engram_types::resolve::SlotRead {
        engram_types::resolve::SlotRead {
            as_of: self.as_of,
            valid_at_ns: self.valid_at_ns,
            rule: self.rule,
            verified_only: self.verified_only,
        }
    }
}

/// Resolves one slot's datoms under `opts` (its `as_of` and `valid_at_ns` filter first).
pub fn resolve_slot(datoms: &[Datom], cardinality: Cardinality, opts: &ReadOptions) -> Facts {
    let resolved = engram_types::resolve::resolve_slot(datoms, cardinality, &opts.slot_read());
    Facts {
        current: resolved.current,
        conflicts: resolved.conflicts,
        expired_at_ns: None,
    }
}

/// Reduces datoms (of one entity, any attributes) to the facts current at `as_of` tx and,
/// if given, valid time `valid_at_ns`, treating every attribute as cardinality one under the
/// latest-claim rule.
pub fn current_facts(datoms: &[Datom], as_of: Option<TxId>, valid_at_ns: Option<i64>) -> Vec<Datom> {
    let opts = ReadOptions {
        as_of,
        valid_at_ns,
        ..ReadOptions::default()
    };
    let mut by_attr: BTreeMap<&Attribute, Vec<Datom>> = BTreeMap::new();
    for d in datoms {
        by_attr.entry(&d.attribute).or_default().push(d.clone());
    }
    by_attr
        .values()
        .flat_map(|slot| resolve_slot(slot, Cardinality::One, &opts).current)
        .collect()
}

/// The current value of one attribute of one entity on main (the latest claim; for a
/// cardinality-many attribute, the latest value added).
pub fn current_value(
    store: &dyn ReadView,
    ns: &Namespace,
    e: EntityId,
    attr: &Attribute,
) -> Result<Option<Value>, CoreError> {
    let datoms = slot_datoms_main(store, ns, e, attr)?;
    let cardinality = schema::cardinality_at(store, ns, attr, None)?;
    Ok(resolve_slot(&datoms, cardinality, &ReadOptions::default())
        .current
        .pop()
        .map(|d| d.value))
}

/// Why a read found nothing to answer with.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("unknown entity {0} in this namespace")]
    UnknownEntity(EntityId),
    #[error("branch {0} does not exist in this namespace")]
    UnknownBranch(BranchName),
    /// A join names an attribute the namespace neither declares nor holds a datom of.
    #[error("{field}: attribute {attribute} is neither declared nor written in this namespace")]
    UnknownAttribute { field: String, attribute: Attribute },
    /// A join would read or hold more than its limits allow; the message names the clause.
    #[error("query: {0}")]
    TooCostly(String),
    /// An aggregate met values it cannot fold (a sum of strings); the message names it.
    #[error("{0}")]
    Aggregate(String),
    #[error(transparent)]
    Cursor(#[from] CursorError),
    #[error(transparent)]
    Core(#[from] CoreError),
}

impl From<engram_storage::StorageError> for ReadError {
    fn from(e: engram_storage::StorageError) -> Self {
        ReadError::Core(e.into())
    }
}

/// The entity's facts on main as of a transaction and/or a valid time, latest claim winning.
pub fn get(
    store: &dyn ReadView,
    ns: &Namespace,
    e: EntityId,
    as_of: Option<TxId>,
    valid_at_ns: Option<i64>,
) -> Result<Vec<Datom>, ReadError> {
    let opts = ReadOptions {
        as_of,
        valid_at_ns,
        ..ReadOptions::default()
    };
    Ok(get_facts(store, ns, None, e, &opts)?.current)
}

/// The entity's facts on main or a branch under `opts`: per attribute, the current value(s)
/// by the schema in force at `opts.as_of`, and the claims that disagree.
pub fn get_facts(
    store: &dyn ReadView,
    ns: &Namespace,
    branch: Option<&BranchName>,
    e: EntityId,
    opts: &ReadOptions,
) -> Result<Facts, ReadError> {
    let (view, _) = View::of(store, ns, branch)?;
    if !view.entity_visible(store, e)? {
        return Err(ReadError::UnknownEntity(e));
    }
    let mut by_attr: BTreeMap<Attribute, Vec<Datom>> = BTreeMap::new();
    for d in view.entity_datoms(store, e)? {
        by_attr.entry(d.attribute.clone()).or_default().push(d);
    }
    let mut slots = Vec::with_capacity(by_attr.len());
    for (attr, slot) in &by_attr {
        slots.push((
            slot.as_slice(),
            schema::cardinality_at(store, ns, attr, opts.as_of)?,
        ));
    }
    Ok(engram_types::resolve::entity_facts(
        slots,
        &opts.slot_read(),
        opts.expired_at_ns,
    ))
}

pub fn tx(store: &dyn ReadView, tx: TxId) -> Result<Option<TxLogRow>, CoreError> {
    store
        .get(Space::State, &keys::tx_log(tx))?
        .map(|row| TxLogRow::decode(&row))
        .transpose()
}

/// The stored keys of transaction `tx`'s datoms, in transaction order, given its tx-log row's
/// `datom_keys`: those, or for a row written before the row kept them, the keys its `X` rows
/// name.
pub fn datom_keys_of_tx(
    store: &dyn ReadView,
    tx: TxId,
    datom_keys: Option<Vec<Vec<u8>>>,
) -> Result<Vec<Vec<u8>>, CoreError> {
    if let Some(datom_keys) = datom_keys {
        return Ok(datom_keys);
    }
    let prefix = keys::tx_datoms_prefix(tx);
    Ok(store
        .scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), usize::MAX)?
        .into_iter()
        .map(|(_, key)| key)
        .collect())
}

/// The stored key of datom `seq` of transaction `tx`, if there is one.
pub fn datom_key_of_tx(store: &dyn ReadView, tx: TxId, seq: u32) -> Result<Option<Vec<u8>>, CoreError> {
    let Some(row) = self::tx(store, tx)? else {
        return Ok(None);
    };
    match row.datom_keys {
        Some(datom_keys) => Ok(usize::try_from(seq)
            .ok()
            .and_then(|seq| datom_keys.into_iter().nth(seq))),
        None => Ok(store.get(Space::State, &keys::tx_datom(tx, seq))?),
    }
}

/// Whether this store's chain ever admitted the key `id`, by genesis or a key change (so
/// attestations by it can be verified against the chain itself).
pub fn signer_admitted(store: &dyn ReadView, id: engram_audit::KeyId) -> Result<bool, CoreError> {
    Ok(store.get(Space::State, &keys::signer(id))?.is_some())
}

/// What the chain has said about key `id`, if it ever admitted it.
pub fn signer(
    store: &dyn ReadView,
    id: engram_audit::KeyId,
) -> Result<Option<engram_audit::KeyRecord>, CoreError> {
    match store.get(Space::State, &keys::signer(id))? {
        Some(bytes) => Ok(Some(decode_row("key row", &bytes)?)),
        None => Ok(None),
    }
}

/// The key the chain trusts now for node `node_id` (admitted to it, neither rotated out nor
/// revoked), if any: after a rotation this is the new key, not the one the membership recorded
/// when the node joined.
pub fn active_key_of(
    store: &dyn ReadView,
    node_id: u64,
) -> Result<Option<engram_audit::KeyRecord>, CoreError> {
    Ok(active_keys(store)?.into_iter().find(|row| row.node_id == node_id))
}

/// Every key the chain trusts now, for the entry after the head (admitted, neither rotated
/// out nor revoked), in key id order.
pub fn active_keys(store: &dyn ReadView) -> Result<Vec<engram_audit::KeyRecord>, CoreError> {
    let next = head(store)?.index + 1;
    let rows = store.scan(
        Space::State,
        &[keys::SIGNER],
        prefix_end(&[keys::SIGNER]).as_deref(),
        usize::MAX,
    )?;
    let mut out = Vec::new();
    for (_, bytes) in rows {
        let row: engram_audit::KeyRecord = decode_row("key row", &bytes)?;
        if row.active_at(next) {
            out.push(row);
        }
    }
    Ok(out)
}

/// Whether the chain trusts key `id` now, for the entry after the head (admitted, neither
/// rotated out nor revoked).
pub fn key_active(store: &dyn ReadView, id: engram_audit::KeyId) -> Result<bool, CoreError> {
    Ok(active_signer(store, id)?.is_some())
}

/// What the chain says of key `id` if it trusts the key now, for the entry after the head
/// (admitted, neither rotated out nor revoked): one point read.
pub fn active_signer(
    store: &dyn ReadView,
    id: engram_audit::KeyId,
) -> Result<Option<engram_audit::KeyRecord>, CoreError> {
    let next = head(store)?.index + 1;
    Ok(signer(store, id)?.filter(|row| row.active_at(next)))
}

/// The cluster's checkpoint origin, derived from the genesis entry; `None` before genesis.
pub fn origin(store: &dyn ReadView) -> Result<Option<String>, CoreError> {
    match store.get(Space::State, &keys::audit(1))? {
        Some(bytes) => {
            let genesis = SignedEntry::decode(&bytes).map_err(|e| CoreError::corrupt("audit entry 1", e))?;
            Ok(Some(engram_audit::Checkpoint::origin_for(&genesis.entry.hash())))
        }
        None => Ok(None),
    }
}

/// Audit entries `from..from+limit` (1-based), each re-checked on the way out: it decodes,
/// its index is where it is stored, it links to the entry before it, and its attestation, if
/// it has one, verifies against a key the chain admitted and had not rotated out or revoked by
/// then. The first failure is returned with its exact index. Callers that serve the chain stop
/// at [`attested_index`], so what they serve ends with an attestation that covers it.
pub fn audit_entries(
    store: &dyn ReadView,
    from: u64,
    limit: usize,
) -> Result<Result<Vec<SignedEntry>, ChainError>, CoreError> {
    let from = from.max(1);
    let mut prev_hash = if from == 1 {
        engram_audit::GENESIS_PREV_HASH
    } else {
        match store.get(Space::State, &keys::audit(from - 1))? {
            Some(bytes) => match SignedEntry::decode(&bytes) {
                Ok(e) => e.entry.hash(),
                Err(err) => {
                    return Ok(Err(ChainError {
                        index: from - 1,
                        fault: ChainFault::Decode(err.to_string()),
                    }));
                }
            },
            None => return Ok(Ok(Vec::new())),
        }
    };
    let rows = store.scan(
        Space::State,
        &keys::audit(from),
        prefix_end(&[keys::AUDIT]).as_deref(),
        limit,
    )?;
    let mut out = Vec::with_capacity(rows.len());
    let mut signers: BTreeMap<[u8; 8], Option<engram_audit::KeyRecord>> = BTreeMap::new();
    for (i, (_, bytes)) in rows.into_iter().enumerate() {
        let index = from + i as u64;
        let fail = |fault| Ok(Err(ChainError { index, fault }));
        let signed = match SignedEntry::decode(&bytes) {
            Ok(s) => s,
            Err(err) => return fail(ChainFault::Decode(err.to_string())),
        };
        if signed.entry.index != index {
            return fail(ChainFault::Index {
                expected: index,
                found: signed.entry.index,
            });
        }
        if signed.entry.prev_hash != prev_hash {
            return fail(ChainFault::PrevHash {
                expected: prev_hash,
                found: signed.entry.prev_hash,
            });
        }
        let hash = signed.entry.hash();
        if let Some(attestation) = &signed.attestation {
            let key_id = attestation.key_id;
            let key = match signers.get(&key_id.0) {
                Some(k) => k.clone(),
                None => {
                    let k = signer(store, key_id)?;
                    signers.insert(key_id.0, k.clone());
                    k
                }
            };
            match key {
                None => return fail(ChainFault::UnknownSigner(key_id)),
                Some(k) if !k.key.verify(hash.as_bytes(), &attestation.signature) => {
                    return fail(ChainFault::BadSignature(key_id));
                }
                Some(k) => {
                    if let Err(fault) = k.valid_at(index) {
                        return fail(fault);
                    }
                }
            }
        }
        prev_hash = hash;
        out.push(signed);
    }
    Ok(Ok(out))
}

/// The chain's last entry whose transaction time is at or before `at_ns`, as (its transaction,
/// its time): what the memory held at that instant. Transaction times never go back along the
/// chain (I7: the leader's time is clamped to the entry before), so a binary search over the
/// audit entries finds it in about log2(entries) point reads; of entries sharing one time, the
/// last. `None`: `at_ns` is before the first transaction: before the first entry with a time
/// of its own (the genesis membership entries carry 0, as a membership entry repeats the time
/// of the entry before it). An instant at or after the newest entry's time answers the newest
/// entry (a transaction still in flight may yet take a time at or before it: a read at a recent
/// instant is a read of the current state).
pub fn tx_at_time(store: &dyn ReadView, at_ns: i64) -> Result<Option<(TxId, i64)>, CoreError> {
    let head = head(store)?;
    if head.index == 0 {
        return Ok(None);
    }
    if head.tx_time_ns <= at_ns {
        return Ok(Some((head.tx, head.tx_time_ns)));
    }
    let entry_at = |index: u64| -> Result<engram_audit::AuditEntry, CoreError> {
        let bytes = store.get(Space::State, &keys::audit(index))?.ok_or_else(|| {
            CoreError::corrupt(
                "audit entry",
                format!("entry {index} is missing below the chain head"),
            )
        })?;
        SignedEntry::decode(&bytes)
            .map(|s| s.entry)
            .map_err(|e| CoreError::corrupt(format!("audit entry {index}"), e))
    };
    // The answer lies in [lo, hi): entry lo's time is at or before `at_ns` (once found), entry
    // hi's (the head's, to start with) is after it.
    let first = entry_at(1)?;
    if first.tx_time_ns > at_ns {
        return Ok(None);
    }
    let (mut lo, mut hi, mut found) = (1, head.index, first);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let entry = entry_at(mid)?;
        if entry.tx_time_ns <= at_ns {
            (lo, found) = (mid, entry);
        } else {
            hi = mid;
        }
    }
    // The head's time is after `at_ns`, so a later entry has a time of its own: if the last
    // entry at or before `at_ns` has none (0), `at_ns` is before the first transaction.
    if found.tx_time_ns <= 0 {
        return Ok(None);
    }
    Ok(Some((found.tx, found.tx_time_ns)))
}

/// A committed transaction as a watch delivers it.
#[derive(Clone, Debug)]
pub struct TxRecord {
    pub receipt: engram_types::TxReceipt,
    /// Its datoms in transaction order.
    pub datoms: Vec<Datom>,
}

/// The committed transactions of `ns` on `branch` (`None`: main) with tx id at least `from`,
/// oldest first, scanning at most `scan_limit` transactions of any namespace. Returns them and
/// the tx id to continue from.
pub fn transactions_from(
    store: &dyn ReadView,
    ns: &Namespace,
    branch: Option<&BranchName>,
    from: TxId,
    scan_limit: usize,
) -> Result<(Vec<TxRecord>, TxId), CoreError> {
    let (logged, next) = transactions_page(store, ns, branch, from, scan_limit, usize::MAX)?;
    Ok((logged.into_iter().map(|t| t.record).collect(), next))
}

/// As [`transactions_from`], also stopping after the transaction that brings the datoms read
/// to `byte_budget`, and keeping each transaction's stored size: a page a node's watchers at
/// the same position can share.
pub fn transactions_page(
    store: &dyn ReadView,
    ns: &Namespace,
    branch: Option<&BranchName>,
    from: TxId,
    scan_limit: usize,
    byte_budget: usize,
) -> Result<(Vec<LoggedTx>, TxId), CoreError> {
    let (logged, next, _) = scan_tx_log(store, from, None, scan_limit, byte_budget, |n, b| {
        n == ns && b == branch
    })?;
    Ok((logged, next))
}

/// Whether `ns` has any schema row. A namespace without one has no transaction with a datom:
/// every datom's attribute is declared in its namespace's schema, explicitly or implicitly by
/// the write that first uses it (`plan`). A watch from an early position on such a namespace
/// can start at the applied index instead of scanning the whole tx log.
pub fn has_schema(store: &dyn ReadView, ns: &Namespace) -> Result<bool, CoreError> {
    let prefix = keys::schema_prefix(ns);
    Ok(!store
        .scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), 1)?
        .is_empty())
}

/// A committed transaction of any namespace, with where it wrote.
#[derive(Clone, Debug)]
pub struct LoggedTx {
    pub namespace: Namespace,
    /// `None`: main.
    pub branch: Option<BranchName>,
    pub record: TxRecord,
    /// The stored size of its datoms, for callers that bound what they hold in memory.
    pub datom_bytes: usize,
}

/// Every committed transaction, of every namespace and branch, with tx id from `from` through
/// `through`, oldest first, stopping after the transaction that brings the datoms read to
/// `byte_budget`. Returns them and the tx id to continue from (`through + 1` once all are
/// read). What a node's watchers share; each filters it for itself.
pub fn tx_log_range(
    store: &dyn ReadView,
    from: TxId,
    through: TxId,
    byte_budget: usize,
) -> Result<(Vec<LoggedTx>, TxId), CoreError> {
    if through < from {
        return Ok((Vec::new(), from));
    }
    let (txs, next, cut) = scan_tx_log(store, from, Some(through), usize::MAX, byte_budget, |_, _| true)?;
    Ok((
        txs,
        if cut {
            next
        } else {
            TxId(through.0.saturating_add(1))
        },
    ))
}

/// The tx-log rows from `from` (through `through`, if given; at most `scan_limit` rows), with
/// the datoms of those `keep` accepts, stopping early once the datoms read reach
/// `byte_budget`. Returns them, the tx id after the last row scanned, and whether the budget
/// cut the scan short.
fn scan_tx_log(
    store: &dyn ReadView,
    from: TxId,
    through: Option<TxId>,
    scan_limit: usize,
    byte_budget: usize,
    keep: impl Fn(&Namespace, Option<&BranchName>) -> bool,
) -> Result<(Vec<LoggedTx>, TxId, bool), CoreError> {
    let end = match through {
        Some(t) => Some(keys::tx_log(TxId(t.0.saturating_add(1)))),
        None => prefix_end(&[keys::TX_LOG]),
    };
    let rows = store.scan(Space::State, &keys::tx_log(from), end.as_deref(), scan_limit)?;
    let mut next = from;
    let mut out = Vec::new();
    let mut read_bytes = 0usize;
    for (key, value) in rows {
        if read_bytes >= byte_budget {
            return Ok((out, next, true));
        }
        let tx = keys::u64_after_tag(&key)
            .map(TxId)
            .ok_or_else(|| CoreError::corrupt("tx-log key", "shorter than a tx id"))?;
        next = TxId(tx.0 + 1);
        let row = TxLogRow::decode(&value)?;
        if !keep(&row.namespace, row.branch.as_ref()) {
            continue;
        }
        let mut datoms = Vec::new();
        let mut datom_bytes = 0;
        for eavt in datom_keys_of_tx(store, tx, row.datom_keys)? {
            let bytes = store
                .get(Space::State, &eavt)?
                .ok_or_else(|| CoreError::corrupt(format!("datom of tx {}", tx.0), "indexed but missing"))?;
            datom_bytes += bytes.len();
            datoms.push(
                Datom::decode(&bytes).map_err(|e| CoreError::corrupt(format!("datom of tx {}", tx.0), e))?,
            );
        }
        read_bytes = read_bytes.saturating_add(datom_bytes);
        out.push(LoggedTx {
            namespace: row.namespace,
            branch: row.branch,
            record: TxRecord {
                receipt: row.receipt,
                datoms,
            },
            datom_bytes,
        });
    }
    Ok((out, next, false))
}

/// What changed in a tx range: the datoms recorded by transactions `from < tx <= to`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diff {
    pub asserted: Vec<Datom>,
    pub retracted: Vec<Datom>,
    /// Whether `limit` cut the answer short.
    pub truncated: bool,
}

impl Diff {
    fn push(&mut self, d: Datom, limit: usize) -> bool {
        if self.asserted.len() + self.retracted.len() >= limit {
            self.truncated = true;
            return false;
        }
        match d.op {
            Op::Assert => self.asserted.push(d),
            Op::Retract => self.retracted.push(d),
        }
        true
    }
}

/// A branch against main: what the branch wrote (what a merge would apply), and what main
/// recorded since the fork on the slots the branch wrote (what a merge would conflict with).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BranchDiff {
    pub branch: Diff,
    /// Main's datoms after the fork on (entity, attribute) pairs the branch also wrote.
    pub main_changed: Vec<Datom>,
    pub row: Option<BranchRow>,
}

/// Diffs `branch` against main, for one entity or every entity the branch wrote.
pub fn branch_diff(
    store: &dyn ReadView,
    ns: &Namespace,
    name: &BranchName,
    entity: Option<EntityId>,
    limit: usize,
) -> Result<BranchDiff, ReadError> {
    let (view, row) = View::of(store, ns, Some(name))?;
    let fork = row.as_ref().map_or(TxId(0), |r| r.fork);
    if let Some(e) = entity
        && !view.entity_visible(store, e)?
    {
        return Err(ReadError::UnknownEntity(e));
    }
    let mut out = BranchDiff {
        row,
        ..BranchDiff::default()
    };
    let mut slots: Vec<(EntityId, Attribute)> = Vec::new();
    for d in branch::datoms(store, ns, name)? {
        if entity.is_some_and(|e| e != d.entity) {
            continue;
        }
        let slot = (d.entity, d.attribute.clone());
        if !slots.contains(&slot) {
            slots.push(slot);
        }
        if !out.branch.push(d, limit) {
            break;
        }
    }
    for (e, attr) in slots {
        out.main_changed.extend(
            slot_datoms_main(store, ns, e, &attr)?
                .into_iter()
                .filter(|d| d.tx > fork),
        );
    }
    out.main_changed.sort_by_key(|d| d.tx);
    Ok(out)
}
