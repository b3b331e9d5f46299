//! History, Find and Diff, answered in pages.
//!
//! A page holds at most `limit` datoms ([`MAX_PAGE`] at most) and, when the answer goes on, a
//! [`Cursor`] to the rest: no answer is cut short without saying so. Every page of one answer
//! is read as of the transaction the first page was (the store's head then, or the as-of the
//! request named), so writes made while a caller pages neither appear part-way nor shift the
//! pages; a node that has not applied that far refuses the cursor as retryable.
//!
//! - **History** is in (tx, seq) order: the order transactions committed and, within one, the
//!   order of its datoms. The indexes hold an attribute's or an entity's rows in entity or
//!   attribute order, so a page reads every row of its target once (keys only, in chunks) and
//!   keeps the `limit + 1` earliest after the cursor in a bounded heap: memory is the page's,
//!   time grows with the target's size. A (tx, seq)-ordered index per attribute would make a
//!   page cost only its own rows, at one more row per datom on every write: not built.
//! - **Find** is in entity order: the candidates' index rows are read from the cursor's entity
//!   on, so a page costs its own entities (plus, to say exactly whether more follow, the
//!   entities up to the next one found). A page ends between entities, so an entity's values
//!   are never split; it exceeds `limit` only when one entity alone holds more.
//! - **Diff** of main is in (tx, seq) order between two transactions: an entity's rows as
//!   History reads them, a namespace's from the transaction log from the cursor's transaction
//!   on. A page may end inside a transaction; the next goes on from the datom after.
//!
//! Must not depend on: Raft, gRPC, RocksDB, an async runtime or a clock.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use engram_storage::{ReadView, Space, prefix_end};
use engram_types::{Attribute, BranchName, Datom, EntityId, Namespace, TxId, Value};

use crate::cursor::{Cursor, CursorError, CursorKind, QueryKey};
use crate::reads::{self, ReadError, ReadOptions, View};
use crate::rows::hex;
use crate::{CoreError, keys, schema};

/// The most datoms one page holds (a request's limit of 0 asks for this many).
pub const MAX_PAGE: usize = 100_000;

/// Rows read from the store per call while a page is gathered.
const SCAN_CHUNK: usize = 4096;

/// One page of an answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    pub datoms: Vec<Datom>,
    /// The transaction the whole answer is read as of.
    pub as_of: TxId,
    /// Where the next page begins; `None`: this page ends the answer.
    pub next: Option<Cursor>,
}

/// What a History reads.
#[derive(Clone, Copy, Debug)]
pub enum HistoryOf<'a> {
    /// Every datom of an entity, or of one of its attributes.
    Entity {
        entity: EntityId,
        attribute: Option<&'a Attribute>,
    },
    /// Every datom of an attribute across entities.
    Attribute(&'a Attribute),
}

/// The page size a request's `limit` asks for: 0 is the largest.
pub fn page_size(limit: u32) -> usize {
    if limit == 0 {
        MAX_PAGE
    } else {
        (limit as usize).min(MAX_PAGE)
    }
}

/// Which datoms a History reads: those transactions after `since` (`None`: from the first) up
/// to `as_of` (`None`: the head when the answer's first page is read) wrote, and (if set) only
/// those valid at `valid_at_ns`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bounds {
    pub since: Option<TxId>,
    pub as_of: Option<TxId>,
    pub valid_at_ns: Option<i64>,
}

impl Bounds {
    /// Up to `as_of`, from the first transaction.
    pub fn as_of(as_of: Option<TxId>) -> Bounds {
        Bounds {
            as_of,
            ..Bounds::default()
        }
    }
}

/// A page of the datoms of `of` on main or `branch`, in (tx, seq) order, after `cursor` (the
/// raw bytes a previous page returned; empty: the first page), within `bounds`.
pub fn history(
    store: &dyn ReadView,
    ns: &Namespace,
    branch: Option<&BranchName>,
    of: HistoryOf<'_>,
    bounds: Bounds,
    cursor: &[u8],
    limit: usize,
) -> Result<Page, ReadError> {
    let query = history_key(ns, branch, of, bounds);
    let cursor = Cursor::continuing(cursor, CursorKind::History, query)?;
    let (view, _) = View::of(store, ns, branch)?;
    let as_of = answer_as_of(store, cursor.as_ref(), bounds.as_of)?;
    let after = cursor.map(|c| (TxId(c.after.0), c.after.1));
    let window = Window {
        since: bounds.since.unwrap_or(TxId(0)),
        as_of,
        valid_at_ns: bounds.valid_at_ns,
    };
    let (datoms, last) = earliest_of(store, &view, of, window, after, limit)?;
    let next = last.map(|(tx, seq)| Cursor::at(CursorKind::History, query, as_of, (tx.0, seq)));
    Ok(Page { datoms, as_of, next })
}

/// A page of what changed on main after transaction `from` up to `to` (inclusive; `None`: the
/// store's head when the answer's first page is read), for one entity or the whole namespace,
/// in (tx, seq) order; with `valid_at_ns`, only the datoms valid at that instant.
#[allow(clippy::too_many_arguments)] // where (store, namespace), what (four), which page (two)
pub fn diff(
    store: &dyn ReadView,
    ns: &Namespace,
    entity: Option<EntityId>,
    from: TxId,
    to: Option<TxId>,
    valid_at_ns: Option<i64>,
    cursor: &[u8],
    limit: usize,
) -> Result<Page, ReadError> {
    let entity_part = entity.map_or([0u8; 9], |e| {
        let mut tagged = [1u8; 9];
        tagged[1..].copy_from_slice(&e.0.to_be_bytes());
        tagged
    });
    let (from_part, to_part) = (from.0.to_be_bytes(), to.map_or(0, |t| t.0).to_be_bytes());
    let valid = valid_at_ns.map(i64::to_be_bytes);
    let mut parts: Vec<&[u8]> = vec![ns.as_str().as_bytes(), &entity_part, &from_part, &to_part];
    // Part of the query only when set, so cursors issued before it existed still continue.
    if let Some(valid) = &valid {
        parts.extend([&b"valid-at"[..], valid]);
    }
    let query = QueryKey::of(CursorKind::Diff, &parts);
    let cursor = Cursor::continuing(cursor, CursorKind::Diff, query)?;
    let as_of = answer_as_of(store, cursor.as_ref(), to)?;
    let after = cursor.map(|c| (TxId(c.after.0), c.after.1));
    let window = Window {
        since: from,
        as_of,
        valid_at_ns,
    };
    let (datoms, last) = match entity {
        Some(entity) => {
            let of = HistoryOf::Entity {
                entity,
                attribute: None,
            };
            earliest_of(store, &View::main(ns), of, window, after, limit)?
        }
        None => namespace_changes(store, ns, window, after, limit)?,
    };
    let next = last.map(|(tx, seq)| Cursor::at(CursorKind::Diff, query, as_of, (tx.0, seq)));
    Ok(Page { datoms, as_of, next })
}

/// Which datoms a page gathers: `since < tx <= as_of`, valid at `valid_at_ns` if set.
#[derive(Clone, Copy)]
struct Window {
    since: TxId,
    as_of: TxId,
    valid_at_ns: Option<i64>,
}

/// The first `limit` datoms of `of` seen in `view` within `window`, after `after`, in (tx, seq)
/// order, and the position of the last when more follow.
fn earliest_of(
    store: &dyn ReadView,
    view: &View<'_>,
    of: HistoryOf<'_>,
    window: Window,
    after: Option<(TxId, u32)>,
    limit: usize,
) -> Result<Gathered, ReadError> {
    let ns = view.ns;
    let Window {
        since,
        as_of,
        valid_at_ns,
    } = window;
    // On a branch, main's rows count up to the fork only.
    let main_as_of = match view.branch {
        Some((_, fork)) => fork.min(as_of),
        None => as_of,
    };
    let mut earliest = Earliest::new(limit, after);
    // `row` is asked for only for a row the page would take, and may still turn it down (`None`:
    // not valid at the instant asked).
    let mut offer = |tx: TxId,
                     seq: u32,
                     through: TxId,
                     row: &dyn Fn() -> Result<Option<Row>, ReadError>|
     -> Result<(), ReadError> {
        if tx > since
            && tx <= through
            && earliest.wants(tx, seq)
            && let Some(row) = row()?
        {
            earliest.push(tx, seq, row);
        }
        Ok(())
    };
    // A datom's bytes as a row, if valid at the instant asked (decoded only when one is).
    let encoded = |key: &[u8], bytes: &[u8]| -> Result<Option<Row>, ReadError> {
        match valid_at_ns {
            Some(at) if !decode(key, bytes)?.valid_at(at) => Ok(None),
            _ => Ok(Some(Row::Encoded(bytes.to_vec()))),
        }
    };
    match of {
        HistoryOf::Entity { entity, attribute } => {
            if !view.entity_visible(store, entity)? {
                return Err(ReadError::UnknownEntity(entity));
            }
            let main = match attribute {
                Some(a) => keys::eavt_attr(ns, entity, a),
                None => keys::eavt_entity(ns, entity),
            };
            each_row(store, &main, |key, value| {
                let (tx, seq) = trailing_tx_seq(key)?;
                offer(tx, seq, main_as_of, &|| encoded(key, value))
            })?;
            if let Some((name, _)) = view.branch {
                let own = match attribute {
                    Some(a) => keys::branch_eavt_attr(ns, name, entity, a),
                    None => keys::branch_eavt_entity(ns, name, entity),
                };
                each_row(store, &own, |key, value| {
                    let (tx, seq) = trailing_tx_seq(key)?;
                    offer(tx, seq, as_of, &|| encoded(key, value))
                })?;
            }
        }
        HistoryOf::Attribute(attr) => {
            each_row(store, &keys::aevt_attr(ns, attr), |key, _| {
                let (e, tx, seq) = keys::trailing_entity_tx_seq(key)
                    .ok_or_else(|| CoreError::corrupt(format!("index row {}", hex(key)), "too short"))?;
                offer(tx, seq, main_as_of, &|| match valid_at_ns {
                    // The index row holds no valid time: the datom is read to check it.
                    Some(_) => {
                        let key = keys::eavt(ns, e, attr, tx, seq);
                        encoded(&key, &datom_bytes(store, &key)?)
                    }
                    None => Ok(Some(Row::Indexed(e))),
                })
            })?;
            if let Some((name, _)) = view.branch {
                each_row(store, &keys::branch_eavt_prefix(ns, name), |key, value| {
                    let (tx, seq) = trailing_tx_seq(key)?;
                    if decode(key, value)?.attribute == *attr {
                        offer(tx, seq, as_of, &|| encoded(key, value))?;
                    }
                    Ok(())
                })?;
            }
        }
    }
    let (rows, more) = earliest.finish();
    let last = rows.last().filter(|_| more).map(|row| (row.tx, row.seq));
    let mut datoms = Vec::with_capacity(rows.len());
    for row in rows {
        datoms.push(match row.row {
            Row::Encoded(bytes) => decode(&keys::tx_datom(row.tx, row.seq), &bytes)?,
            Row::Indexed(e) => {
                let HistoryOf::Attribute(attr) = of else {
                    return Err(CoreError::corrupt("history", "an index row in an entity's history").into());
                };
                let key = keys::eavt(ns, e, attr, row.tx, row.seq);
                decode(&key, &datom_bytes(store, &key)?)?
            }
        });
    }
    Ok((datoms, last))
}

/// The first `limit` datoms main's transactions of `ns` recorded within `window`, after
/// `after`, in (tx, seq) order (a datom's seq is its place in its transaction), read
/// from the transaction log; and the position of the last when more follow.
fn namespace_changes(
    store: &dyn ReadView,
    ns: &Namespace,
    window: Window,
    after: Option<(TxId, u32)>,
    limit: usize,
) -> Result<Gathered, ReadError> {
    let Window {
        since,
        as_of,
        valid_at_ns,
    } = window;
    let mut out: Vec<Datom> = Vec::new();
    let mut last = None;
    let mut next = after.map_or(TxId(since.0.saturating_add(1)), |(tx, _)| tx);
    while next <= as_of {
        let (records, continue_at) = reads::transactions_from(store, ns, None, next, 256)?;
        for record in records {
            let tx = record.receipt.tx;
            if tx > as_of {
                return Ok((out, None));
            }
            for (seq, d) in record.datoms.into_iter().enumerate() {
                let seq =
                    u32::try_from(seq).map_err(|_| CoreError::corrupt("transaction", "over 2^32 datoms"))?;
                if after.is_some_and(|after| (tx, seq) <= after)
                    || valid_at_ns.is_some_and(|at| !d.valid_at(at))
                {
                    continue;
                }
                if out.len() == limit {
                    // One more datom exists: the page ends at the last one kept.
                    return Ok((out, last));
                }
                out.push(d);
                last = Some((tx, seq));
            }
        }
        if continue_at == next {
            break;
        }
        next = continue_at;
    }
    Ok((out, None))
}

/// A page of the entities whose current value of `attr` (as of `opts.as_of`, or of the answer's
/// first page, and at valid time `opts.valid_at_ns` if given) is `value`, or that hold any
/// value when `value` is `None`, in entity order: their current datoms. With `since`, only
/// current datoms written after that transaction count. Entities expired by
/// `opts.expired_at_ns` are left out (the rule and `verified_only` do not apply: the latest
/// claim wins).
#[allow(clippy::too_many_arguments)] // where (store, namespace, branch), what (three), which page (two)
pub fn find(
    store: &dyn ReadView,
    ns: &Namespace,
    branch: Option<&BranchName>,
    attr: &Attribute,
    value: Option<&Value>,
    opts: &ReadOptions,
    cursor: &[u8],
    limit: usize,
) -> Result<Page, ReadError> {
    let query = find_key(ns, branch, attr, value, opts);
    let since = opts.since;
    let cursor = Cursor::continuing(cursor, CursorKind::Find, query)?;
    let (view, _) = View::of(store, ns, branch)?;
    let as_of = answer_as_of(store, cursor.as_ref(), opts.as_of)?;
    let cardinality = schema::cardinality_at(store, ns, attr, Some(as_of))?;
    let latest = ReadOptions {
        as_of: Some(as_of),
        valid_at_ns: opts.valid_at_ns,
        ..ReadOptions::default()
    };
    // Expiry costs one more slot read per entity found: only where some entity has one.
    let expires = match opts.expired_at_ns {
        Some(now_ns) => {
            let expires = Attribute::new(reads::MEMORY_EXPIRES)
                .map_err(|e| CoreError::corrupt("find", e.to_string()))?;
            let prefix = keys::aevt_attr(ns, &expires);
            let written = branch.is_some()
                || !store
                    .scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), 1)?
                    .is_empty();
            if written {
                let cardinality = schema::cardinality_at(store, ns, &expires, Some(as_of))?;
                Some((expires, cardinality, now_ns))
            } else {
                None
            }
        }
        None => None,
    };
    let current = |e: EntityId| -> Result<Vec<Datom>, ReadError> {
        let slot = view.slot_datoms(store, e, attr)?;
        let found: Vec<Datom> = reads::resolve_slot(&slot, cardinality, &latest)
            .current
            .into_iter()
            .filter(|d| value.is_none_or(|v| *v == d.value) && since.is_none_or(|s| d.tx > s))
            .collect();
        if let Some((expires, cardinality, now_ns)) = &expires
            && !found.is_empty()
        {
            let held = reads::resolve_slot(&view.slot_datoms(store, e, expires)?, *cardinality, &latest);
            if reads::expiry(held.current.iter().chain(&held.conflicts)).is_some_and(|at| at <= *now_ns) {
                return Ok(Vec::new());
            }
        }
        Ok(found)
    };
    let after = cursor.map(|c| EntityId(c.after.0));
    let mut candidates = Candidates::new(store, &view, attr, value, after)?;
    let mut datoms: Vec<Datom> = Vec::new();
    let mut last: Option<EntityId> = None;
    let mut more = false;
    while let Some(e) = candidates.next()? {
        let found = current(e)?;
        if found.is_empty() {
            continue;
        }
        if !datoms.is_empty() && datoms.len() + found.len() > limit {
            // `e` would overflow the page: it begins the next one.
            more = true;
            break;
        }
        datoms.extend(found);
        last = Some(e);
        if datoms.len() >= limit {
            // Say exactly whether the answer goes on: find the next entity that belongs in it.
            while let Some(e) = candidates.next()? {
                if !current(e)?.is_empty() {
                    more = true;
                    break;
                }
            }
            break;
        }
    }
    let next = match (more, last) {
        (true, Some(last)) => Some(Cursor::at(CursorKind::Find, query, as_of, (last.0, 0))),
        _ => None,
    };
    Ok(Page { datoms, as_of, next })
}

/// Every datom of an entity on main (optionally one attribute), in (tx, seq) order: the first
/// `limit` of them.
pub fn entity_history(
    store: &dyn ReadView,
    ns: &Namespace,
    e: EntityId,
    attribute: Option<&Attribute>,
    limit: usize,
) -> Result<Vec<Datom>, ReadError> {
    let of = HistoryOf::Entity { entity: e, attribute };
    Ok(history(store, ns, None, of, Bounds::default(), &[], limit)?.datoms)
}

/// Every datom of an attribute on main across entities, in (tx, seq) order: the first `limit`.
pub fn attribute_history(
    store: &dyn ReadView,
    ns: &Namespace,
    attr: &Attribute,
    limit: usize,
) -> Result<Vec<Datom>, ReadError> {
    Ok(history(
        store,
        ns,
        None,
        HistoryOf::Attribute(attr),
        Bounds::default(),
        &[],
        limit,
    )?
    .datoms)
}

/// The first `limit` datoms [`find`] answers on main as of `as_of`, expiry not applied.
pub fn find_main(
    store: &dyn ReadView,
    ns: &Namespace,
    attr: &Attribute,
    value: Option<&Value>,
    as_of: Option<TxId>,
    limit: usize,
) -> Result<Vec<Datom>, ReadError> {
    let opts = ReadOptions {
        as_of,
        ..ReadOptions::default()
    };
    Ok(find(store, ns, None, attr, value, &opts, &[], limit)?.datoms)
}

/// The first `limit` datoms [`diff`] answers, split into assertions and retractions.
pub fn diff_main(
    store: &dyn ReadView,
    ns: &Namespace,
    entity: Option<EntityId>,
    from: TxId,
    to: TxId,
    limit: usize,
) -> Result<reads::Diff, ReadError> {
    let page = diff(store, ns, entity, from, Some(to), None, &[], limit)?;
    let truncated = page.next.is_some();
    let (asserted, retracted) = page
        .datoms
        .into_iter()
        .partition(|d| d.op == engram_types::Op::Assert);
    Ok(reads::Diff {
        asserted,
        retracted,
        truncated,
    })
}

/// The transaction an answer is read as of: the cursor's; else the store's head (the last
/// transaction applied), or the transaction the request names if that is earlier. (The request's
/// own as-of is part of the query a cursor continues, so every page asks the same.)
pub(crate) fn answer_as_of(
    store: &dyn ReadView,
    cursor: Option<&Cursor>,
    asked: Option<TxId>,
) -> Result<TxId, ReadError> {
    let head = reads::head(store)?.tx;
    match cursor {
        Some(c) if c.as_of > head => Err(CursorError::Ahead {
            as_of: c.as_of.0,
            applied: head.0,
        }
        .into()),
        Some(c) => Ok(c.as_of),
        None => Ok(asked.map_or(head, |asked| asked.min(head))),
    }
}

fn history_key(ns: &Namespace, branch: Option<&BranchName>, of: HistoryOf<'_>, bounds: Bounds) -> QueryKey {
    let branch = branch.map_or("", |b| b.as_str());
    let entity_bytes;
    let mut parts: Vec<&[u8]> = vec![ns.as_str().as_bytes(), branch.as_bytes()];
    match of {
        HistoryOf::Entity { entity, attribute } => {
            entity_bytes = entity.0.to_be_bytes();
            parts.extend([
                &b"entity"[..],
                &entity_bytes,
                attribute.map_or("", |a| a.as_str()).as_bytes(),
            ]);
        }
        HistoryOf::Attribute(attr) => parts.extend([&b"attribute"[..], attr.as_str().as_bytes()]),
    }
    // A requested bound is part of the query (a cursor of the unbounded history does not
    // continue a bounded one); without one the key is what it was before bounds existed, so
    // cursors handed out then still continue.
    let bound = bounds.as_of.map(|t| t.0.to_be_bytes());
    if let Some(bound) = &bound {
        parts.extend([&b"as-of"[..], bound]);
    }
    let since = bounds.since.map(|t| t.0.to_be_bytes());
    if let Some(since) = &since {
        parts.extend([&b"since"[..], since]);
    }
    let valid = bounds.valid_at_ns.map(i64::to_be_bytes);
    if let Some(valid) = &valid {
        parts.extend([&b"valid-at"[..], valid]);
    }
    QueryKey::of(CursorKind::History, &parts)
}

fn find_key(
    ns: &Namespace,
    branch: Option<&BranchName>,
    attr: &Attribute,
    value: Option<&Value>,
    opts: &ReadOptions,
) -> QueryKey {
    let value = value.map(keys::value_digest);
    let as_of = opts.as_of.map_or(0, |t| t.0).to_be_bytes();
    let judged = [u8::from(opts.expired_at_ns.is_some())];
    let mut parts: Vec<&[u8]> = vec![
        ns.as_str().as_bytes(),
        branch.map_or("", |b| b.as_str()).as_bytes(),
        attr.as_str().as_bytes(),
        value.as_ref().map_or(&[][..], |d| &d[..]),
        &as_of,
        // Whether expiry is judged (a read of now without include_expired), not when: each
        // page judges it by its own clock.
        &judged,
    ];
    // Bounds added later are parts only when set, so cursors handed out before still continue.
    let since = opts.since.map(|t| t.0.to_be_bytes());
    if let Some(since) = &since {
        parts.extend([&b"since"[..], since]);
    }
    let valid = opts.valid_at_ns.map(i64::to_be_bytes);
    if let Some(valid) = &valid {
        parts.extend([&b"valid-at"[..], valid]);
    }
    QueryKey::of(CursorKind::Find, &parts)
}

/// A page's datoms in (tx, seq) order, and the position of the last when more follow.
type Gathered = (Vec<Datom>, Option<(TxId, u32)>);

/// Calls `each` with every row under `prefix`, in key order, reading `SCAN_CHUNK` rows at a
/// time.
fn each_row(
    store: &dyn ReadView,
    prefix: &[u8],
    mut each: impl FnMut(&[u8], &[u8]) -> Result<(), ReadError>,
) -> Result<(), ReadError> {
    let end = prefix_end(prefix);
    let mut from = prefix.to_vec();
    loop {
        let rows = store.scan(Space::State, &from, end.as_deref(), SCAN_CHUNK)?;
        for (key, value) in &rows {
            each(key, value)?;
        }
        match rows.last() {
            Some((key, _)) if rows.len() == SCAN_CHUNK => {
                // The smallest key after `key`.
                from = key.clone();
                from.push(0);
            }
            _ => return Ok(()),
        }
    }
}

/// The datom an attribute's index row points at.
fn datom_bytes(store: &dyn ReadView, key: &[u8]) -> Result<Vec<u8>, ReadError> {
    Ok(store
        .get(Space::State, key)?
        .ok_or_else(|| CoreError::corrupt(format!("index row {}", hex(key)), "points at a missing datom"))?)
}

/// The trailing (tx, seq) of a datom or index row; a shorter key is corruption.
pub(crate) fn trailing_tx_seq(key: &[u8]) -> Result<(TxId, u32), ReadError> {
    Ok(keys::trailing_tx_seq(key)
        .ok_or_else(|| CoreError::corrupt(format!("row {}", hex(key)), "shorter than tx and seq"))?)
}

fn decode(key: &[u8], bytes: &[u8]) -> Result<Datom, ReadError> {
    Ok(Datom::decode(bytes).map_err(|e| CoreError::corrupt(format!("datom row {}", hex(key)), e))?)
}

/// The entities that may hold the value (a superset: [`find`] checks each one), in entity
/// order after a cursor's entity, read from the value index when the attribute has one (else
/// the attribute's rows) a chunk at a time, merged with the branch's own entities.
pub(crate) struct Candidates<'a> {
    store: &'a dyn ReadView,
    prefix: Vec<u8>,
    /// The key the next chunk starts at; `None` once the index is exhausted.
    from: Option<Vec<u8>>,
    indexed: Vec<EntityId>,
    /// The branch's entities holding the attribute (and value), sorted, after the cursor.
    own: Vec<EntityId>,
    last: Option<EntityId>,
}

impl<'a> Candidates<'a> {
    pub(crate) fn new(
        store: &'a dyn ReadView,
        view: &View<'_>,
        attr: &Attribute,
        value: Option<&Value>,
        after: Option<EntityId>,
    ) -> Result<Candidates<'a>, ReadError> {
        let prefix = view.candidate_prefix(store, attr, value)?;
        let from = match after {
            None => Some(prefix.clone()),
            Some(EntityId(u64::MAX)) => None,
            Some(EntityId(e)) => {
                let mut from = prefix.clone();
                from.extend_from_slice(&(e + 1).to_be_bytes());
                Some(from)
            }
        };
        let mut own = Vec::new();
        if let Some((name, _)) = view.branch {
            each_row(store, &keys::branch_eavt_prefix(view.ns, name), |key, bytes| {
                let d = decode(key, bytes)?;
                if &d.attribute == attr
                    && value.is_none_or(|v| *v == d.value)
                    && after.is_none_or(|a| d.entity > a)
                {
                    own.push(d.entity);
                }
                Ok(())
            })?;
            own.sort_unstable_by(|a, b| b.cmp(a));
            own.dedup();
        }
        Ok(Candidates {
            store,
            prefix,
            from,
            indexed: Vec::new(),
            own,
            last: None,
        })
    }

    /// The next candidate entity, each once, in entity order.
    pub(crate) fn next(&mut self) -> Result<Option<EntityId>, ReadError> {
        loop {
            if self.indexed.is_empty() {
                self.fill()?;
            }
            // `indexed` and `own` are kept largest first, so their ends are the next ones.
            let next = match (self.indexed.last(), self.own.last()) {
                (None, None) => return Ok(None),
                (Some(i), Some(o)) if o < i => self.own.pop(),
                (Some(_), _) => self.indexed.pop(),
                (None, Some(_)) => self.own.pop(),
            };
            if next.is_some() && next != self.last {
                self.last = next;
                return Ok(next);
            }
        }
    }

    /// Reads the next chunk of index rows into `indexed` (largest first; called when empty).
    fn fill(&mut self) -> Result<(), ReadError> {
        let Some(from) = self.from.take() else {
            return Ok(());
        };
        let end = prefix_end(&self.prefix);
        let rows = self.store.scan(Space::State, &from, end.as_deref(), SCAN_CHUNK)?;
        for (key, _) in &rows {
            let (e, _, _) = keys::trailing_entity_tx_seq(key)
                .ok_or_else(|| CoreError::corrupt(format!("index row {}", hex(key)), "too short"))?;
            if self.indexed.last() != Some(&e) {
                self.indexed.push(e);
            }
        }
        self.indexed.reverse();
        if let Some((key, _)) = rows.last()
            && rows.len() == SCAN_CHUNK
        {
            let mut from = key.clone();
            from.push(0);
            self.from = Some(from);
        }
        Ok(())
    }
}

/// A row a History page may hold: its datom's bytes, or (for an attribute's history) the
/// entity whose EAVT row holds it.
enum Row {
    Encoded(Vec<u8>),
    Indexed(EntityId),
}

struct Candidate {
    tx: TxId,
    seq: u32,
    row: Row,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        (self.tx, self.seq) == (other.tx, other.seq)
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.tx, self.seq).cmp(&(other.tx, other.seq))
    }
}

/// The `limit + 1` earliest rows by (tx, seq) after a position, whatever order they are offered
/// in: the extra one says whether the answer goes on.
struct Earliest {
    keep: usize,
    after: Option<(TxId, u32)>,
    /// A max-heap: its top is the latest row kept, the first to go.
    heap: BinaryHeap<Candidate>,
}

impl Earliest {
    fn new(limit: usize, after: Option<(TxId, u32)>) -> Earliest {
        Earliest {
            keep: limit.saturating_add(1),
            after,
            heap: BinaryHeap::new(),
        }
    }

    /// Whether a row at (tx, seq) would be kept: after the position and, once the heap is full,
    /// earlier than its latest.
    fn wants(&self, tx: TxId, seq: u32) -> bool {
        if self.after.is_some_and(|after| (tx, seq) <= after) {
            return false;
        }
        !(self.heap.len() >= self.keep && self.heap.peek().is_some_and(|top| (tx, seq) >= (top.tx, top.seq)))
    }

    /// Keeps a row [`Earliest::wants`].
    fn push(&mut self, tx: TxId, seq: u32, row: Row) {
        self.heap.push(Candidate { tx, seq, row });
        if self.heap.len() > self.keep {
            self.heap.pop();
        }
    }

    /// The kept rows, earliest first, without the extra one, and whether there was one.
    fn finish(self) -> (Vec<Candidate>, bool) {
        let mut rows = self.heap.into_sorted_vec();
        let more = rows.len() == self.keep;
        if more {
            rows.pop();
        }
        (rows, more)
    }
}
