//! Redaction: forgetting datoms' values while the audit chain keeps verifying
//! (`docs/FORGETTING.md`).
//!
//! A [`RedactRequest`] names an entity (and optionally one attribute) on main. It is applied
//! in **parts** ([`RedactPart`]), each its own log entry, so writes commit between them: a part
//! is evaluated against the state at its entry ([`part_targets`]), so every replica takes the
//! same datoms: the next datoms of the target in key order whose value is still there,
//! assertions and retractions alike, written before the first part. The engine applies each
//! part as one transaction of the system namespace, the **record**: it names the target and
//! the reason (and, after the first part, the first part's transaction), and lists each datom
//! it redacted as `tx (u64) ‖ seq (u32) ‖ datom hash (32 bytes) ‖ salted (u8)`, packed into one
//! `:engram.redaction/datoms` value per part (a whole-entry redaction of the first format,
//! [`targets`], lists one `:engram.redaction/datom` per datom), so the chain itself says what
//! went, when and why, and who asked (the record's provenance, and for a signed request the
//! agent's signature, on the first part: its nonce is spent there, so the later parts are
//! proposed as the agent it authenticated, and name the first). In the same batch each
//! redacted datom's row is rewritten
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
//! (`engram_raft`'s `purge`, after this is applied), and the choice of each part's bounds (the
//! leader's, in `engram_raft`). Redaction by namespace or predicate is `crate::redact_where`.
//!
//! Branches: an entry the leader marked as reaching branches (every redaction a leader of this
//! build proposes) takes the entity's datoms on every branch of the namespace too, open, merged
//! or abandoned ([`part_targets`]); entries from before apply to main only, as they did.
//!
//! Must not depend on: the engine (it applies what this plans), the server or the network.

use engram_access::SYSTEM_NAMESPACE;
use engram_storage::{ReadView, Space, WriteBatch, prefix_end};
pub use engram_types::redact::{
    RECORD_ATTRIBUTE, RECORD_DATOM, RECORD_DATOMS, RECORD_ENTITY, RECORD_NAMESPACE, RECORD_PART_OF,
    RECORD_REASON, RedactedRef,
};
use engram_types::{
    Attribute, BranchName, Datom, EntityId, EntityRef, Hash, Namespace, Op, RedactPart, RedactRequest, TxId,
    TxOp, TxRequest, Value,
};

use crate::current::CurrentRow;
use crate::rows::IdempotencyRow;
use crate::{CoreError, Rejection, keys};

pub use crate::value_groups::Target;
pub(crate) use crate::value_groups::unredacted;

/// Most datoms a whole-entry redaction of the first format (`Command::Redact` entries, before
/// parts) took: a larger target was refused. Replays of those entries keep this bound.
pub const WHOLE_ENTRY_MAX_DATOMS: usize = 1_000;

/// What a redaction takes, in key order (attribute, then transaction, then seq): every datom of
/// the target whose value is still there. A target of more than `max` such datoms is refused.
/// With `branches` (entries proposed since redactions reach branches, [`Scopes`]), the target
/// is main's datoms of the entity and then each branch's, in key order. A whole-entry
/// redaction applies this with [`WHOLE_ENTRY_MAX_DATOMS`] (main only); the leader checks a
/// request with [`RedactRequest::MAX_DATOMS`] before it proposes its parts, and a dry run lists
/// it.
pub fn targets(
    view: &dyn ReadView,
    req: &RedactRequest,
    max: usize,
    branches: bool,
) -> Result<Result<Vec<Target>, Rejection>, CoreError> {
    // Each scan stops one past what a redaction may take, counting every datom of the target,
    // redacted or not: a target that large is refused whatever is left of it.
    let cap = crate::reads::MAX_READ_DATOMS;
    let mut rows_seen = 0usize;
    let mut out = Vec::new();
    for prefix in Scopes::of(view, req, branches)?.prefixes {
        let rows = view.scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), cap)?;
        rows_seen = rows_seen.saturating_add(rows.len());
        if rows.len() == cap {
            // More rows than one scan reads: the target is past what one redaction may take.
            return Ok(Err(Rejection::RedactionTooLarge {
                datoms: cap as u64,
                limit: max as u64,
            }));
        }
        for (key, value) in rows {
            if let Some(target) = unredacted(key, &value)? {
                out.push(target);
            }
            if out.len() > max {
                return Ok(Err(Rejection::RedactionTooLarge {
                    datoms: out.len() as u64,
                    limit: max as u64,
                }));
            }
        }
    }
    if rows_seen == 0 {
        return Ok(Err(no_such_target(req)));
    }
    if out.is_empty() {
        return Ok(Err(all_redacted(req)));
    }
    Ok(Ok(out))
}

/// What `part` of a redaction takes: the first [`RedactPart::applied_limit`] datoms of the
/// target after `part.after_key`, in key order, whose value is still there and, after the first
/// part, that were written before it. Reads at most the rows it passes over plus one page.
/// With `whole_values` (entries proposed since values go out of a slot whole), also the rest
/// of the last slot it reached, so no part ends inside a slot, and every datom of its datoms'
/// groups (`crate::value_groups`), in key order. With `branches` (entries proposed since
/// redactions reach branches), the target goes on past main's rows into each branch's rows of
/// the entity ([`Scopes`]), and a main slot the part takes brings that slot's datoms on every
/// branch with it (listed first), so a branch's reads, which fold main's datoms as of the fork
/// with the branch's, see both sides of a value redacted by the same entry.
pub fn part_targets(
    view: &dyn ReadView,
    req: &RedactRequest,
    part: &RedactPart,
    whole_values: bool,
    branches: bool,
) -> Result<Result<Vec<Target>, Rejection>, CoreError> {
    let branches = branches && !crate::planted::active(crate::planted::PlantedBug::RedactionSkipsBranches);
    let scopes = Scopes::of(view, req, branches)?;
    let limit = part.applied_limit();
    // The key's successor: every key after it that a scope holds. A cursor outside the
    // target (a faulty leader's) starts from the target's start: a part only ever takes the
    // target's datoms.
    let mut from: Option<Vec<u8>> = match &part.after_key {
        Some(after) if scopes.prefixes.iter().any(|p| after.starts_with(p)) => {
            Some([after.as_slice(), &[0]].concat())
        }
        _ => None,
    };
    let written_before = |t: &Target| part.first_tx.is_none_or(|first| t.datom.tx < first);
    // What the scan took on main and on branches, each in key order.
    let (mut main, mut on_branches) = (Vec::new(), Vec::new());
    let mut seen_any = false;
    'scopes: for (i, prefix) in scopes.prefixes.iter().enumerate() {
        let end = prefix_end(prefix);
        let mut at = match &from {
            Some(f) if end.as_ref().is_some_and(|e| f >= e) => continue,
            Some(f) if f > prefix => f.clone(),
            _ => prefix.clone(),
        };
        loop {
            let rows = view.scan(Space::State, &at, end.as_deref(), limit + 1)?;
            let last_page = rows.len() <= limit;
            seen_any |= !rows.is_empty();
            for (key, value) in rows {
                at = [key.as_slice(), &[0]].concat();
                let Some(target) = unredacted(key, &value)? else {
                    continue;
                };
                if !written_before(&target) {
                    continue;
                }
                match i {
                    0 => main.push(target),
                    _ => on_branches.push(target),
                }
                if main.len() + on_branches.len() == limit {
                    break 'scopes;
                }
            }
            if last_page {
                break;
            }
        }
        from = Some(at);
    }
    if main.is_empty() && on_branches.is_empty() {
        return Ok(Err(match (part.first_tx, seen_any || part.after_key.is_some()) {
            (None, false) => no_such_target(req),
            (None, true) => all_redacted(req),
            (Some(first), _) => Rejection::NothingToRedact(format!(
                "nothing is left to redact after the part before (redaction of tx {})",
                first.0
            )),
        }));
    }
    if !whole_values {
        main.extend(on_branches);
        return Ok(Ok(main));
    }
    if !main.is_empty() {
        main = match whole_slots(view, &req.namespace, part.first_tx, main)? {
            Ok(main) => main,
            Err(refusal) => return Ok(Err(refusal)),
        };
    }
    if let Some(last) = on_branches.last()
        && let Some(name) = &last.datom.branch
    {
        let d = &last.datom;
        let slot = keys::branch_eavt_attr(&req.namespace, name, d.entity, &d.attribute);
        let rest = branch_rows(view, &slot, Some(&last.key), &written_before)?;
        on_branches.extend(rest);
    }
    // A main slot's datoms on every branch, taken with it (not already taken by the scan).
    let mut out = Vec::new();
    if branches {
        let mut slots: Vec<(EntityId, &Attribute)> = main
            .iter()
            .map(|t| (t.datom.entity, &t.datom.attribute))
            .collect();
        slots.sort();
        slots.dedup();
        for (entity, attribute) in slots {
            for name in &scopes.branches {
                let slot = keys::branch_eavt_attr(&req.namespace, name, entity, attribute);
                for t in branch_rows(view, &slot, None, &written_before)? {
                    if !on_branches.iter().any(|b| b.key == t.key) {
                        out.push(t);
                    }
                }
            }
        }
    }
    // Listed last: what the scan took, so the last datom listed is where the next part starts.
    out.extend(main);
    out.extend(on_branches);
    Ok(Ok(out))
}

/// The datoms of the branch slot `slot` (a prefix) after `after` whose values are still there
/// and that `keep` keeps, in key order.
fn branch_rows(
    view: &dyn ReadView,
    slot: &[u8],
    after: Option<&[u8]>,
    keep: &dyn Fn(&Target) -> bool,
) -> Result<Vec<Target>, CoreError> {
    let from = match after {
        Some(after) => [after, &[0]].concat(),
        None => slot.to_vec(),
    };
    let mut out = Vec::new();
    for (key, value) in view.scan(Space::State, &from, prefix_end(slot).as_deref(), usize::MAX)? {
        if let Some(target) = unredacted(key, &value)?
            && keep(&target)
        {
            out.push(target);
        }
    }
    Ok(out)
}

/// Where a redaction of an entity looks for its datoms: main's rows of the entity (or of the
/// one attribute) and, for an entry that reaches branches, each branch's rows of it, as key
/// prefixes in key order (main's table sorts before the branches').
struct Scopes {
    prefixes: Vec<Vec<u8>>,
    /// The namespace's branches, whatever their state (a merged or abandoned branch's datoms
    /// are kept and read like an open one's).
    branches: Vec<BranchName>,
}

impl Scopes {
    fn of(view: &dyn ReadView, req: &RedactRequest, branches: bool) -> Result<Scopes, CoreError> {
        let mut prefixes = vec![target_prefix(req)];
        let names: Vec<BranchName> = match branches {
            true => crate::branch::list(view, &req.namespace)?
                .into_iter()
                .map(|row| row.name)
                .collect(),
            false => Vec::new(),
        };
        let mut on_branches: Vec<Vec<u8>> = names
            .iter()
            .map(|name| match &req.attribute {
                None => keys::branch_eavt_entity(&req.namespace, name, req.entity),
                Some(a) => keys::branch_eavt_attr(&req.namespace, name, req.entity, a),
            })
            .collect();
        on_branches.sort();
        prefixes.extend(on_branches);
        Ok(Scopes {
            prefixes,
            branches: names,
        })
    }
}

/// `out` (a part's datoms, in key order) with the rest of its last slot written before
/// `first_tx`, and then every datom of their groups.
fn whole_slots(
    view: &dyn ReadView,
    ns: &Namespace,
    first_tx: Option<TxId>,
    mut out: Vec<Target>,
) -> Result<Result<Vec<Target>, Rejection>, CoreError> {
    let mut grouper = crate::value_groups::Grouper::new(ns);
    let Some(last) = out.last().cloned() else {
        return Ok(Ok(out));
    };
    let slot = match grouper.slot_or_refusal(view, &last.datom)? {
        Ok(slot) => slot,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let rest: Vec<Target> = slot
        .members
        .iter()
        .filter(|m| m.key > last.key && first_tx.is_none_or(|first| m.datom.tx < first))
        .cloned()
        .collect();
    out.extend(rest);
    grouper.close(view, out)
}

/// Whether anything is left for a part after `part` (the same bounds, starting after
/// `after_key`): read by the leader after each part, to decide whether to propose another.
pub fn more_after(
    view: &dyn ReadView,
    req: &RedactRequest,
    first_tx: TxId,
    after_key: &[u8],
    branches: bool,
) -> Result<bool, CoreError> {
    let next = RedactPart {
        first_tx: Some(first_tx),
        after_key: Some(after_key.to_vec()),
        limit: 1,
    };
    Ok(part_targets(view, req, &next, false, branches)?.is_ok())
}

/// The state key of the last datom a part lists (a part lists what its scan took last, in key
/// order): the next part's `after_key`. `None` when the record lists nothing.
pub fn last_key_of(ns: &Namespace, redacted: &[(RedactedRef, Datom)]) -> Option<Vec<u8>> {
    redacted.last().map(|(r, d)| match &d.branch {
        None => keys::eavt(ns, d.entity, &d.attribute, r.tx, r.seq),
        Some(b) => keys::branch_eavt(ns, b, d.entity, &d.attribute, r.tx, r.seq),
    })
}

fn target_prefix(req: &RedactRequest) -> Vec<u8> {
    match &req.attribute {
        None => keys::eavt_entity(&req.namespace, req.entity),
        Some(a) => keys::eavt_attr(&req.namespace, req.entity, a),
    }
}

fn no_such_target(req: &RedactRequest) -> Rejection {
    match &req.attribute {
        None => Rejection::UnknownEntity(req.entity),
        Some(a) => Rejection::NothingToRedact(format!("entity {} has no datom of {a}", req.entity)),
    }
}

fn all_redacted(req: &RedactRequest) -> Rejection {
    Rejection::NothingToRedact(match &req.attribute {
        None => format!("every datom of entity {} is already redacted", req.entity),
        Some(a) => format!("every datom of entity {} {a} is already redacted", req.entity),
    })
}

/// How a record lists the datoms it redacted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    /// One `:engram.redaction/datom` per datom: whole-entry redactions, before parts.
    PerDatom,
    /// `:engram.redaction/datoms` values packing the part's datoms; a later part names the
    /// first part's transaction.
    Packed { part_of: Option<TxId> },
}

/// The record transaction of a redaction (or of one part of it) taking `targets`.
pub fn record(req: &RedactRequest, targets: &[Target], format: RecordFormat) -> TxRequest {
    let assert = record_op;
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
    match format {
        RecordFormat::PerDatom => {
            for t in listed {
                ops.push(assert(RECORD_DATOM, Value::Bytes(t.listed().encode())));
            }
        }
        RecordFormat::Packed { part_of } => {
            if let Some(first) = part_of {
                // Transaction ids are log indexes, far below 2^63.
                ops.push(assert(RECORD_PART_OF, Value::I64(first.0 as i64)));
            }
            let refs: Vec<RedactedRef> = listed.iter().map(Target::listed).collect();
            for packed in RedactedRef::pack(&refs) {
                ops.push(assert(RECORD_DATOMS, Value::Bytes(packed)));
            }
        }
    }
    record_tx(ops, &req.provenance)
}

/// One datom of a redaction's record (every record is one entity, `redaction`).
pub(crate) fn record_op(attribute: &str, value: Value) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity: EntityRef::Temp("redaction".into()),
        attribute: Attribute::new(attribute).expect("the record's attribute names are valid"),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

/// A record of `ops`, a transaction of the system namespace made by whoever asked.
pub(crate) fn record_tx(ops: Vec<TxOp>, provenance: &engram_types::Provenance) -> TxRequest {
    TxRequest::data(
        Namespace::new(SYSTEM_NAMESPACE).expect("the system namespace name is valid"),
        ops,
        provenance.clone(),
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
        redacted.push((d.hash(), gone));
        if d.branch.is_some() {
            // A branch's datoms have no value-keyed rows and no current-claims rows.
            continue;
        }
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
        // The transaction's idempotency row keeps a hash of its request's content, values
        // included and unsalted: whoever reads the store could test a guess of a value against
        // it. The row keeps its receipt (a retry is still answered with it, as rows written
        // before content hashes are) and loses the hash.
        if let Some(row_key) = view.get(Space::State, &keys::idempotency_of_tx(tx))?
            && let Some(row) = view.get(Space::State, &row_key)?
        {
            let mut row = IdempotencyRow::decode(&row)?;
            if row.content.take().is_some() {
                batch.put(Space::State, row_key, row.encode());
            }
        }
    }
    let mut slots: Vec<(&Attribute, engram_types::EntityId)> = targets
        .iter()
        .filter(|t| t.datom.branch.is_none())
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
