//! Redaction: forgetting datoms' values while the audit chain keeps verifying
//! (`docs/FORGETTING.md`).
//!
//! A [`RedactRequest`] names an entity (and optionally one attribute) on main. [`plan`]
//! evaluates it against the state at its log entry, so every replica takes the same datoms:
//! every datom of the target whose value is still there, assertions and retractions alike. The
//! engine applies the plan as one transaction of the system namespace, the **record**: it
//! names the target and the reason, and lists each redacted datom as
//! `:engram.redaction/datom` = `tx (u64) ‖ seq (u32) ‖ datom hash (32 bytes)`, so the chain
//! itself says what went, when and why, and who asked (the record's provenance, and its
//! signature for a signed request). In the same batch each redacted datom's row is rewritten
//! to its redacted form ([`engram_types::Redacted`]: every field but the value, and the hash
//! its transaction committed to), its value-keyed index rows (AVET, VAET) go, and the slot's
//! current-claims row, if it has one, holds the redacted claims instead. A transaction an
//! agent signed keeps the request it signed (its canonical bytes, values included) beside its
//! entry: that row becomes a marker naming the redaction, while the entry keeps the request's
//! hash and the signature over it, so the signature still verifies; what the request said
//! (and so the check of its datoms against it) goes with the values.
//!
//! So every entry, inclusion and consistency proof and checkpoint made before still verifies:
//! an entry commits to its datoms' hashes, and those are kept. What is left of a value is its
//! type and an ordinal telling equal values of one redaction apart from different ones. A
//! salted datom keeps its value commitment (`blake3(salt ‖ value)`, the salt gone with the
//! value), so nobody can test a guess of the value against it; a datom written before salts
//! keeps the hash of its unsalted encoding, which a guess of a low-entropy value can be tested
//! against (the verifier says "hash kept, guessable").
//!
//! Not here: the purge of the values' bytes from each node's Raft log, snapshots and files
//! (`engram_raft`'s `purge`, after this is applied). Not yet built (the design's later steps):
//! redaction by namespace or predicate, datoms on branches, and large targets in parts.
//!
//! Must not depend on: the engine (it applies what this plans), the server or the network.

use engram_access::SYSTEM_NAMESPACE;
use engram_storage::{ReadView, Space, WriteBatch, prefix_end};
pub use engram_types::redact::{
    RECORD_ATTRIBUTE, RECORD_DATOM, RECORD_ENTITY, RECORD_NAMESPACE, RECORD_REASON, RedactedRef,
};
use engram_types::{
    Attribute, Datom, EntityRef, Hash, Namespace, Op, RedactRequest, TxId, TxOp, TxRequest, Value,
};

use crate::current::CurrentRow;
use crate::{CoreError, Rejection, keys};

/// One datom the redaction takes: its row key and the datom as stored.
#[derive(Clone, Debug)]
pub struct Target {
    pub key: Vec<u8>,
    pub seq: u32,
    pub datom: Datom,
}

impl Target {
    pub fn listed(&self) -> RedactedRef {
        RedactedRef {
            tx: self.datom.tx,
            seq: self.seq,
            hash: self.datom.hash(),
            salted: self.datom.salt.is_some(),
        }
    }
}

/// What a redaction takes, in key order (attribute, then transaction, then seq).
pub fn targets(
    view: &dyn ReadView,
    req: &RedactRequest,
) -> Result<Result<Vec<Target>, Rejection>, CoreError> {
    let prefix = match &req.attribute {
        None => keys::eavt_entity(&req.namespace, req.entity),
        Some(a) => keys::eavt_attr(&req.namespace, req.entity, a),
    };
    // The scan stops one past what a redaction may take, counting every datom of the target,
    // redacted or not: a target that large is refused whatever is left of it.
    let cap = crate::reads::MAX_READ_DATOMS;
    let rows = view.scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), cap)?;
    if rows.len() == cap {
        // More rows than one scan reads: the target is past what one redaction may take.
        return Ok(Err(Rejection::RedactionTooLarge {
            datoms: cap as u64,
            limit: RedactRequest::MAX_DATOMS as u64,
        }));
    }
    if rows.is_empty() {
        return Ok(Err(match &req.attribute {
            None => Rejection::UnknownEntity(req.entity),
            Some(a) => Rejection::NothingToRedact(format!("entity {} has no datom of {a}", req.entity)),
        }));
    }
    let mut out = Vec::new();
    for (key, value) in rows {
        let datom = Datom::decode(&value)
            .map_err(|e| CoreError::corrupt(format!("datom row {}", crate::rows::hex(&key)), e))?;
        if datom.value.redacted().is_some() {
            continue;
        }
        let (_, seq) = keys::trailing_tx_seq(&key).ok_or_else(|| {
            CoreError::corrupt(format!("datom key {}", crate::rows::hex(&key)), "no tx and seq")
        })?;
        out.push(Target { key, seq, datom });
        if out.len() > RedactRequest::MAX_DATOMS {
            break;
        }
    }
    if out.len() > RedactRequest::MAX_DATOMS {
        return Ok(Err(Rejection::RedactionTooLarge {
            datoms: out.len() as u64,
            limit: RedactRequest::MAX_DATOMS as u64,
        }));
    }
    if out.is_empty() {
        let what = match &req.attribute {
            None => format!("every datom of entity {} is already redacted", req.entity),
            Some(a) => format!("every datom of entity {} {a} is already redacted", req.entity),
        };
        return Ok(Err(Rejection::NothingToRedact(what)));
    }
    Ok(Ok(out))
}

/// The record transaction of a redaction taking `targets`.
pub fn record(req: &RedactRequest, targets: &[Target]) -> TxRequest {
    let entity = EntityRef::Temp("redaction".into());
    let assert = |attribute: &str, value: Value| TxOp {
        op: Op::Assert,
        entity: entity.clone(),
        attribute: Attribute::new(attribute).expect("the record's attribute names are valid"),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    };
    let mut ops = vec![
        assert(RECORD_NAMESPACE, Value::String(req.namespace.to_string())),
        // Entity ids are below 2^53 (`keys::MAX_DRAWN_ENTITY_ID`): an i64 holds them.
        assert(RECORD_ENTITY, Value::I64(req.entity.0 as i64)),
    ];
    if let Some(a) = &req.attribute {
        ops.push(assert(RECORD_ATTRIBUTE, Value::Keyword(a.to_string())));
    }
    ops.push(assert(RECORD_REASON, Value::String(req.reason.clone())));
    let listed = match crate::planted::active(crate::planted::PlantedBug::RedactionListsTooFew) {
        true => &targets[..targets.len().saturating_sub(1)],
        false => targets,
    };
    for t in listed {
        ops.push(assert(RECORD_DATOM, Value::Bytes(t.listed().encode())));
    }
    TxRequest::data(
        Namespace::new(SYSTEM_NAMESPACE).expect("the system namespace name is valid"),
        ops,
        req.provenance.clone(),
    )
}

/// The rows that make `targets` redacted by transaction `by_tx`: each datom's row in its
/// redacted form, its value-keyed index rows deleted, and the current-claims rows of the
/// slots it touches holding the redacted claims.
pub fn rows(
    view: &dyn ReadView,
    ns: &Namespace,
    targets: &[Target],
    by_tx: TxId,
) -> Result<WriteBatch, CoreError> {
    let mut batch = WriteBatch::new();
    batch.put(
        Space::State,
        keys::META_LAST_REDACTION.to_vec(),
        by_tx.0.to_be_bytes().to_vec(),
    );
    // Equal values share an ordinal, in the order the targets come: a pure function of them.
    let mut seen: Vec<&Value> = Vec::new();
    let mut redacted: Vec<(Hash, Datom)> = Vec::with_capacity(targets.len());
    for t in targets {
        let ordinal = match seen.iter().position(|v| **v == t.datom.value) {
            Some(i) => i,
            None => {
                seen.push(&t.datom.value);
                seen.len() - 1
            }
        };
        let d = &t.datom;
        let gone = d.redact(by_tx, u32::try_from(ordinal).unwrap_or(u32::MAX));
        batch.put(Space::State, t.key.clone(), gone.encode());
        // Deleting a row that was never written (an attribute not value-indexed) is harmless.
        batch.delete(
            Space::State,
            keys::avet(ns, &d.attribute, &d.value, d.entity, d.tx, t.seq),
        );
        if let Value::Ref(target) = d.value {
            batch.delete(
                Space::State,
                keys::vaet(ns, target, &d.attribute, d.entity, d.tx, t.seq),
            );
        }
        redacted.push((d.hash(), gone));
    }
    // A signed request holds its values: it is replaced by a marker (its hash and signature
    // stay in the entry). Several targets may share a transaction.
    let mut txs: Vec<TxId> = targets.iter().map(|t| t.datom.tx).collect();
    txs.sort();
    txs.dedup();
    for tx in txs {
        let key = keys::signed_request(tx);
        if let Some(bytes) = view.get(Space::State, &key)?
            && engram_types::redact::parse_redacted_request(&bytes).is_none()
        {
            batch.put(Space::State, key, engram_types::redact::redacted_request(by_tx));
        }
    }
    let mut slots: Vec<(&Attribute, engram_types::EntityId)> = targets
        .iter()
        .map(|t| (&t.datom.attribute, t.datom.entity))
        .collect();
    slots.sort();
    slots.dedup();
    for (attribute, entity) in slots {
        let key = keys::current(ns, entity, attribute);
        let Some(bytes) = view.get(Space::State, &key)? else {
            continue;
        };
        let mut row = CurrentRow::decode(&bytes)?;
        for claim in &mut row.claims {
            // Hashed once per claim, not once per comparison.
            let hash = claim.hash();
            if let Some((_, gone)) = redacted.iter().find(|(h, _)| *h == hash) {
                *claim = gone.clone();
            }
        }
        batch.put(Space::State, key, row.encode());
    }
    Ok(batch)
}

/// What the record transaction `record` lists (empty if it is not a redaction's record).
pub fn listed_in(view: &dyn ReadView, record: TxId) -> Result<Vec<RedactedRef>, CoreError> {
    let Some(row) = crate::reads::tx(view, record)? else {
        return Ok(Vec::new());
    };
    let mut datoms = Vec::new();
    for key in crate::reads::datom_keys_of_tx(view, record, row.datom_keys)? {
        datoms.push(stored_datom(view, &key)?);
    }
    Ok(RedactedRef::listed_by(&datoms))
}

/// The datoms the record transaction `record` redacted, each as listed and as stored now (in
/// its redacted form), in the record's order. Empty if `record` is not a redaction's record.
pub fn redacted_by(view: &dyn ReadView, record: TxId) -> Result<Vec<(RedactedRef, Datom)>, CoreError> {
    let mut out = Vec::new();
    // A record lists its datoms in key order, so the datoms of one transaction mostly come
    // together, and one transaction's row holds the keys of all its datoms: each row is read
    // and decoded once per run of its datoms, not once per datom (per datom, a redaction of an
    // entity written by one 1,000-datom transaction decoded that row 1,000 times).
    let mut row: Option<(TxId, Option<Vec<Vec<u8>>>)> = None;
    for r in listed_in(view, record)? {
        if row.as_ref().map(|(tx, _)| *tx) != Some(r.tx) {
            let keys = crate::reads::tx(view, r.tx)?.and_then(|row| row.datom_keys);
            row = Some((r.tx, keys));
        }
        let kept = row.as_ref().and_then(|(_, keys)| keys.as_ref());
        let key = match kept {
            Some(keys) => usize::try_from(r.seq).ok().and_then(|seq| keys.get(seq).cloned()),
            // A row from before rows kept their datoms' keys: its `X` rows name them.
            None => crate::reads::datom_key_of_tx(view, r.tx, r.seq)?,
        };
        let key = key.ok_or_else(|| {
            CoreError::corrupt(
                format!("redaction record tx {}", record.0),
                format!("lists tx {} datom {}, which has no stored key", r.tx.0, r.seq),
            )
        })?;
        out.push((r, stored_datom(view, &key)?));
    }
    Ok(out)
}

/// The transaction of the last redaction recorded in `view`'s state (0: none).
pub fn last_redaction(view: &dyn ReadView) -> Result<u64, CoreError> {
    match view.get(Space::State, keys::META_LAST_REDACTION)? {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_be_bytes)
            .map_err(|_| {
                CoreError::corrupt("last redaction row", format!("{} bytes, expected 8", bytes.len()))
            }),
    }
}

fn stored_datom(view: &dyn ReadView, key: &[u8]) -> Result<Datom, CoreError> {
    let what = || format!("datom row {}", crate::rows::hex(key));
    let bytes = view
        .get(Space::State, key)?
        .ok_or_else(|| CoreError::corrupt(what(), "missing"))?;
    Datom::decode(&bytes).map_err(|e| CoreError::corrupt(what(), e))
}
