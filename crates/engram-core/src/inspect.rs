//! Whole-replica inspection for invariant checkers (the simulation suite, offline tools): the
//! audit rows exactly as stored (nothing re-verified, so a checker sees what is really there),
//! every transaction's datoms with a check that their index rows exist, and a digest of the
//! replicated state.

use std::collections::BTreeMap;

use engram_audit::SignedEntry;
use engram_storage::{Space, Store, prefix_end};
use engram_types::{Datom, Hash, TxId, Value};

use crate::{CoreError, keys};

/// One stored audit row: the index its key names, and what its value decodes to.
#[derive(Clone, Debug)]
pub struct StoredEntry {
    pub index: u64,
    pub entry: Result<SignedEntry, String>,
}

/// Every audit row in key order, decoded but not checked.
pub fn stored_audit_entries(store: &dyn Store) -> Result<Vec<StoredEntry>, CoreError> {
    stored_audit_entries_from(store, 0)
}

/// The audit rows from index `from` on, decoded but not checked.
pub fn stored_audit_entries_from(store: &dyn Store, from: u64) -> Result<Vec<StoredEntry>, CoreError> {
    let rows = store.scan(
        Space::State,
        &keys::audit(from),
        prefix_end(&[keys::AUDIT]).as_deref(),
        usize::MAX,
    )?;
    Ok(rows
        .into_iter()
        .map(|(k, v)| {
            let index = keys::u64_after_tag(&k).unwrap_or(0);
            StoredEntry {
                index,
                entry: SignedEntry::decode(&v).map_err(|e| e.to_string()),
            }
        })
        .collect())
}

/// A transaction's datoms as the EAVT table holds them.
#[derive(Clone, Debug, Default)]
pub struct TxDatoms {
    /// `(seq, datom)` in seq order.
    pub datoms: Vec<(u32, Datom)>,
    /// Index rows (AEVT, AVET, VAET) that should exist for these datoms and do not.
    pub missing_index_rows: Vec<String>,
    /// EAVT rows whose value does not decode.
    pub corrupt: Vec<String>,
}

/// Every datom in the store (main's EAVT table and every branch's table) grouped by
/// transaction, with main's index rows checked.
pub fn datoms_by_tx(store: &dyn Store) -> Result<BTreeMap<TxId, TxDatoms>, CoreError> {
    let mut rows = Vec::new();
    for table in [keys::EAVT, keys::BRANCH_EAVT] {
        rows.extend(store.scan(
            Space::State,
            &[table],
            prefix_end(&[table]).as_deref(),
            usize::MAX,
        )?);
    }
    let mut out: BTreeMap<TxId, TxDatoms> = BTreeMap::new();
    for (k, v) in rows {
        // The key ends with tx (8 bytes) and seq (4 bytes), both big-endian.
        let Some(tail) = k.len().checked_sub(12).map(|at| &k[at..]) else {
            continue;
        };
        let tx = TxId(u64::from_be_bytes(tail[..8].try_into().unwrap_or_default()));
        let seq = u32::from_be_bytes(tail[8..].try_into().unwrap_or_default());
        let slot = out.entry(tx).or_default();
        let datom = match Datom::decode(&v) {
            Ok(d) => d,
            Err(e) => {
                slot.corrupt
                    .push(format!("EAVT row of tx {} seq {seq}: {e}", tx.0));
                continue;
            }
        };
        let (ns, e, a) = (&datom.namespace, datom.entity, &datom.attribute);
        if datom.branch.is_some() {
            // A branch's datoms are kept in its own table only.
            slot.datoms.push((seq, datom));
            continue;
        }
        let mut wanted = vec![("AEVT", keys::aevt(ns, a, e, tx, seq))];
        // A redacted datom's value-keyed rows went with its value.
        if datom.value.redacted().is_none()
            && crate::schema::def_at(store, ns, a, Some(tx))?.is_some_and(|d| d.has_value_index())
        {
            wanted.push(("AVET", keys::avet(ns, a, &datom.value, e, tx, seq)));
        }
        if let Value::Ref(target) = datom.value {
            wanted.push(("VAET", keys::vaet(ns, target, a, e, tx, seq)));
        }
        for (table, key) in wanted {
            if store.get(Space::State, &key)?.is_none() {
                slot.missing_index_rows
                    .push(format!("{table} row of tx {} seq {seq} (entity {})", tx.0, e.0));
            }
        }
        slot.datoms.push((seq, datom));
    }
    for slot in out.values_mut() {
        slot.datoms.sort_by_key(|(seq, _)| *seq);
    }
    Ok(out)
}

/// A digest of the replicated state: every state row, except that an audit row counts as its
/// entry's hash and this node's checkpoints and attestation mark are left out. Attestations and checkpoints are
/// left out on purpose: each replica signs with its own key, so they differ between replicas
/// by design.
pub fn state_digest(store: &dyn Store) -> Result<Hash, CoreError> {
    let mut hasher = blake3::Hasher::new();
    let mut failed = None;
    store.for_each(Space::State, &mut |k, v| {
        // Checkpoints are signed by each node with its own key, on its own policy.
        if k.first() == Some(&keys::CHECKPOINT) || k == keys::META_CHECKPOINT || k == keys::META_ATTESTED {
            return Ok(());
        }
        hasher.update(&(k.len() as u64).to_le_bytes());
        hasher.update(k);
        if k.first() == Some(&keys::AUDIT) {
            match SignedEntry::decode(v) {
                Ok(s) => {
                    hasher.update(s.entry.hash().as_bytes());
                }
                Err(e) => failed = Some(CoreError::corrupt("audit row", e)),
            }
        } else {
            hasher.update(&(v.len() as u64).to_le_bytes());
            hasher.update(v);
        }
        Ok(())
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(Hash(*hasher.finalize().as_bytes()))
}
