//! Reads over the state. Every function takes a [`Store`] and decodes what it reads with
//! validation: a row that does not decode is reported as corruption with its location, never
//! unwrapped.

use std::collections::BTreeMap;

use engram_audit::{ChainError, ChainFault, SignedEntry};
use engram_storage::{KeyValue, Space, Store, prefix_end};
use engram_types::{Attribute, Datom, EntityId, Namespace, Op, TxId, Value, ValueType};

use crate::engine::{ChainHead, TxLogRow, decode_row};
use crate::{CoreError, keys};

/// The largest number of datoms one read returns; callers page with `as_of`/limits.
pub const MAX_READ_DATOMS: usize = 100_000;

pub fn head(store: &dyn Store) -> Result<ChainHead, CoreError> {
    match store.get(Space::State, keys::META_HEAD)? {
        Some(bytes) => decode_row("chain head", &bytes),
        None => Ok(ChainHead {
            next_entity: 1,
            ..ChainHead::default()
        }),
    }
}

pub fn entity_exists(store: &dyn Store, ns: &Namespace, e: EntityId) -> Result<bool, CoreError> {
    Ok(store
        .get(Space::State, &keys::entity(e))?
        .is_some_and(|owner| owner == ns.as_str().as_bytes()))
}

pub fn attribute_type(
    store: &dyn Store,
    ns: &Namespace,
    attr: &Attribute,
) -> Result<Option<ValueType>, CoreError> {
    match store.get(Space::State, &keys::schema(ns, attr))? {
        None => Ok(None),
        Some(bytes) => match bytes.as_slice() {
            [tag] => ValueType::from_tag(*tag).map(Some).ok_or_else(|| {
                CoreError::corrupt(format!("schema of {attr}"), format!("unknown type tag {tag}"))
            }),
            _ => Err(CoreError::corrupt(
                format!("schema of {attr}"),
                "row is not one byte",
            )),
        },
    }
}

fn decode_datoms(rows: Vec<KeyValue>) -> Result<Vec<Datom>, CoreError> {
    rows.into_iter()
        .map(|(k, v)| Datom::decode(&v).map_err(|e| CoreError::corrupt(format!("datom row {}", hex(&k)), e)))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn scan_prefix(store: &dyn Store, prefix: &[u8], limit: usize) -> Result<Vec<KeyValue>, CoreError> {
    Ok(store.scan(Space::State, prefix, prefix_end(prefix).as_deref(), limit)?)
}

/// Every datom ever recorded about `e` in `ns`, in (attribute, tx) order.
pub fn entity_datoms(store: &dyn Store, ns: &Namespace, e: EntityId) -> Result<Vec<Datom>, CoreError> {
    decode_datoms(scan_prefix(store, &keys::eavt_entity(ns, e), MAX_READ_DATOMS)?)
}

/// Reduces datoms (of one entity, any attributes) to the facts current at `as_of` tx and,
/// if given, valid time `valid_at_ns`: per attribute, the latest assertion not retracted.
/// Attributes are cardinality-one: a newer assertion supersedes an older one.
pub fn current_facts(datoms: &[Datom], as_of: Option<TxId>, valid_at_ns: Option<i64>) -> Vec<Datom> {
    let mut by_attr: BTreeMap<&Attribute, Vec<&Datom>> = BTreeMap::new();
    for d in datoms {
        if as_of.is_some_and(|t| d.tx > t) || valid_at_ns.is_some_and(|at| !d.valid_at(at)) {
            continue;
        }
        by_attr.entry(&d.attribute).or_default().push(d);
    }
    let mut out = Vec::new();
    for (_, mut versions) in by_attr {
        versions.sort_by_key(|d| d.tx);
        let mut current: Option<&Datom> = None;
        for d in versions {
            match d.op {
                Op::Assert => current = Some(d),
                Op::Retract => {
                    if current.is_some_and(|c| c.value == d.value) {
                        current = None;
                    }
                }
            }
        }
        out.extend(current.cloned());
    }
    out
}

/// The current value of one attribute of one entity (latest tx, no valid-time filter).
pub fn current_value(
    store: &dyn Store,
    ns: &Namespace,
    e: EntityId,
    attr: &Attribute,
) -> Result<Option<Value>, CoreError> {
    let datoms = decode_datoms(scan_prefix(
        store,
        &keys::eavt_attr(ns, e, attr),
        MAX_READ_DATOMS,
    )?)?;
    Ok(current_facts(&datoms, None, None)
        .into_iter()
        .next()
        .map(|d| d.value))
}

/// Why a read found nothing to answer with.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("unknown entity {0} in this namespace")]
    UnknownEntity(EntityId),
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// The entity's facts as of a transaction and/or a valid time.
pub fn get(
    store: &dyn Store,
    ns: &Namespace,
    e: EntityId,
    as_of: Option<TxId>,
    valid_at_ns: Option<i64>,
) -> Result<Vec<Datom>, ReadError> {
    if !entity_exists(store, ns, e)? {
        return Err(ReadError::UnknownEntity(e));
    }
    Ok(current_facts(&entity_datoms(store, ns, e)?, as_of, valid_at_ns))
}

/// Every datom of an entity, in tx order (optionally one attribute only).
pub fn entity_history(
    store: &dyn Store,
    ns: &Namespace,
    e: EntityId,
    attr: Option<&Attribute>,
    limit: usize,
) -> Result<Vec<Datom>, ReadError> {
    if !entity_exists(store, ns, e)? {
        return Err(ReadError::UnknownEntity(e));
    }
    let prefix = match attr {
        Some(a) => keys::eavt_attr(ns, e, a),
        None => keys::eavt_entity(ns, e),
    };
    let mut datoms = decode_datoms(scan_prefix(store, &prefix, MAX_READ_DATOMS)?)?;
    datoms.sort_by_key(|d| d.tx);
    datoms.truncate(limit);
    Ok(datoms)
}

/// Resolves index keys (AEVT/AVET) to their datoms through EAVT.
fn resolve(
    store: &dyn Store,
    ns: &Namespace,
    attr: &Attribute,
    index_keys: Vec<KeyValue>,
) -> Result<Vec<Datom>, CoreError> {
    let mut out = Vec::with_capacity(index_keys.len());
    for (k, _) in index_keys {
        let (e, tx, seq) = keys::trailing_entity_tx_seq(&k)
            .ok_or_else(|| CoreError::corrupt(format!("index row {}", hex(&k)), "too short"))?;
        let eavt = keys::eavt(ns, e, attr, tx, seq);
        let row = store.get(Space::State, &eavt)?.ok_or_else(|| {
            CoreError::corrupt(format!("index row {}", hex(&k)), "points at a missing datom")
        })?;
        out.push(
            Datom::decode(&row)
                .map_err(|err| CoreError::corrupt(format!("datom row {}", hex(&eavt)), err))?,
        );
    }
    Ok(out)
}

/// Every datom of an attribute across entities, in tx order.
pub fn attribute_history(
    store: &dyn Store,
    ns: &Namespace,
    attr: &Attribute,
    limit: usize,
) -> Result<Vec<Datom>, CoreError> {
    let rows = scan_prefix(store, &keys::aevt_attr(ns, attr), MAX_READ_DATOMS)?;
    let mut datoms = resolve(store, ns, attr, rows)?;
    datoms.sort_by_key(|d| d.tx);
    datoms.truncate(limit);
    Ok(datoms)
}

/// Entities whose current value of `attr` (as of `as_of`) is `value`, or that have any
/// current value when `value` is `None`. Returns the current datoms, by entity.
pub fn find(
    store: &dyn Store,
    ns: &Namespace,
    attr: &Attribute,
    value: Option<&Value>,
    as_of: Option<TxId>,
    limit: usize,
) -> Result<Vec<Datom>, CoreError> {
    let prefix = match value {
        Some(v) => keys::avet_value(ns, attr, v),
        None => keys::aevt_attr(ns, attr),
    };
    let rows = scan_prefix(store, &prefix, MAX_READ_DATOMS)?;
    let mut entities: Vec<EntityId> = rows
        .iter()
        .filter_map(|(k, _)| keys::trailing_entity_tx_seq(k).map(|(e, _, _)| e))
        .collect();
    entities.sort();
    entities.dedup();
    let mut out = Vec::new();
    for e in entities {
        let versions = decode_datoms(scan_prefix(
            store,
            &keys::eavt_attr(ns, e, attr),
            MAX_READ_DATOMS,
        )?)?;
        if let Some(current) = current_facts(&versions, as_of, None).into_iter().next()
            && value.is_none_or(|v| *v == current.value)
        {
            out.push(current);
            if out.len() >= limit {
                break;
            }
        }
    }
    Ok(out)
}

pub fn tx(store: &dyn Store, tx: TxId) -> Result<Option<TxLogRow>, CoreError> {
    store
        .get(Space::State, &keys::tx_log(tx))?
        .map(|row| decode_row("tx log row", &row))
        .transpose()
}

/// Whether this store's chain ever admitted the key `id`, by genesis or a key change (so
/// attestations by it can be verified against the chain itself).
pub fn signer_admitted(store: &dyn Store, id: engram_audit::KeyId) -> Result<bool, CoreError> {
    Ok(store.get(Space::State, &keys::signer(id))?.is_some())
}

/// What the chain has said about key `id`, if it ever admitted it.
pub fn signer(
    store: &dyn Store,
    id: engram_audit::KeyId,
) -> Result<Option<engram_audit::KeyRecord>, CoreError> {
    match store.get(Space::State, &keys::signer(id))? {
        Some(bytes) => Ok(Some(decode_row("key row", &bytes)?)),
        None => Ok(None),
    }
}

/// Whether the chain trusts key `id` now, for the entry after the head (admitted, neither
/// rotated out nor revoked).
pub fn key_active(store: &dyn Store, id: engram_audit::KeyId) -> Result<bool, CoreError> {
    let next = head(store)?.index + 1;
    Ok(signer(store, id)?.is_some_and(|row| row.active_at(next)))
}

/// The cluster's checkpoint origin, derived from the genesis entry; `None` before genesis.
pub fn origin(store: &dyn Store) -> Result<Option<String>, CoreError> {
    match store.get(Space::State, &keys::audit(1))? {
        Some(bytes) => {
            let genesis = SignedEntry::decode(&bytes).map_err(|e| CoreError::corrupt("audit entry 1", e))?;
            Ok(Some(engram_audit::Checkpoint::origin_for(&genesis.entry.hash())))
        }
        None => Ok(None),
    }
}

/// Audit entries `from..from+limit` (1-based), each re-checked on the way out: it decodes,
/// its index is where it is stored, it links to the entry before it, and its attestation
/// verifies against a key the chain admitted and had not rotated out or revoked by then. The
/// first failure is returned with its exact index.
pub fn audit_entries(
    store: &dyn Store,
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
        let key_id = signed.attestation.key_id;
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
            Some(k) if !k.key.verify(hash.as_bytes(), &signed.attestation.signature) => {
                return fail(ChainFault::BadSignature(key_id));
            }
            Some(k) => {
                if let Err(fault) = k.valid_at(index) {
                    return fail(fault);
                }
            }
        }
        prev_hash = hash;
        out.push(signed);
    }
    Ok(Ok(out))
}

/// A committed transaction as a watch delivers it.
#[derive(Clone, Debug)]
pub struct TxRecord {
    pub receipt: engram_types::TxReceipt,
    /// Its datoms in transaction order.
    pub datoms: Vec<Datom>,
}

/// The committed transactions of `ns` with tx id at least `from`, oldest first, scanning at most
/// `scan_limit` transactions of any namespace. Returns them and the tx id to continue from.
pub fn transactions_from(
    store: &dyn Store,
    ns: &Namespace,
    from: TxId,
    scan_limit: usize,
) -> Result<(Vec<TxRecord>, TxId), CoreError> {
    let rows = store.scan(
        Space::State,
        &keys::tx_log(from),
        prefix_end(&[keys::TX_LOG]).as_deref(),
        scan_limit,
    )?;
    let mut next = from;
    let mut out = Vec::new();
    for (key, value) in rows {
        let tx = keys::u64_after_tag(&key)
            .map(TxId)
            .ok_or_else(|| CoreError::corrupt("tx-log key", "shorter than a tx id"))?;
        next = TxId(tx.0 + 1);
        let row: TxLogRow = decode_row("tx log row", &value)?;
        if &row.namespace != ns {
            continue;
        }
        let prefix = keys::tx_datoms_prefix(tx);
        let mut datoms = Vec::new();
        for (_, eavt) in store.scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), usize::MAX)? {
            let bytes = store
                .get(Space::State, &eavt)?
                .ok_or_else(|| CoreError::corrupt(format!("datom of tx {}", tx.0), "indexed but missing"))?;
            datoms.push(
                Datom::decode(&bytes).map_err(|e| CoreError::corrupt(format!("datom of tx {}", tx.0), e))?,
            );
        }
        out.push(TxRecord {
            receipt: row.receipt,
            datoms,
        });
    }
    Ok((out, next))
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

/// The datoms of one entity (or, with `entity` unset, of the whole namespace) recorded by
/// transactions `from < tx <= to`, in tx order, at most `limit` of them.
pub fn diff(
    store: &dyn Store,
    ns: &Namespace,
    entity: Option<EntityId>,
    from: TxId,
    to: TxId,
    limit: usize,
) -> Result<Diff, ReadError> {
    let mut out = Diff::default();
    match entity {
        Some(e) => {
            if !entity_exists(store, ns, e)? {
                return Err(ReadError::UnknownEntity(e));
            }
            let mut datoms: Vec<Datom> = entity_datoms(store, ns, e)?
                .into_iter()
                .filter(|d| d.tx > from && d.tx <= to)
                .collect();
            datoms.sort_by_key(|d| d.tx);
            for d in datoms {
                if !out.push(d, limit) {
                    break;
                }
            }
        }
        None => {
            let mut next = TxId(from.0.saturating_add(1));
            'scan: while next <= to {
                let (records, after) = transactions_from(store, ns, next, 256)?;
                for record in records {
                    if record.receipt.tx > to {
                        break 'scan;
                    }
                    for d in record.datoms {
                        if !out.push(d, limit) {
                            break 'scan;
                        }
                    }
                }
                if after == next {
                    break;
                }
                next = after;
            }
        }
    }
    Ok(out)
}
