//! Lists, answered in pages like [`crate::pages`]: the namespaces a store holds, the entities
//! of a namespace (or of one of its attributes), and the current claims that refer to an
//! entity (reverse refs, read from the VAET rows).
//!
//! - **Namespaces** are listed in name order: every namespace that holds a datom on main, a
//!   schema row or a branch. The list is of the store as it is (namespaces are never removed,
//!   so a page read later only finds more after the cursor); the caller's `readable` filter
//!   leaves out those it may not read. A page skips from one namespace to the next with one
//!   seek per table, whatever each holds.
//! - **Entities** are listed in entity-id order: those with at least one datom on main (of
//!   `attribute`, if given) written up to the answer's as-of transaction, assertions and
//!   retractions alike (an entity whose facts were all retracted still exists; [`crate::pages::find`]
//!   answers which entities hold a value now). A page costs one seek per entity listed.
//! - **Referrers** of an entity are the current claims (as of a transaction and, if given, a
//!   valid instant) whose value is a reference to it, in (attribute, entity) order; the caller's
//!   `shows` filter leaves out attributes it may not see, so a hidden attribute never says that
//!   it refers. A page reads its own index rows and slots, and ends between (attribute, entity)
//!   pairs.
//! - **Lists read whole by key** ([`keyed_page`]): the access policy's agents, grants,
//!   retention policies and sessions, a namespace's branches. The caller reads the list (small,
//!   held in one set of rows) and gives each item its sort key; a page is the items after the
//!   cursor's key. The policy keeps no history, so the pages are of the list as it is when each
//!   is read: an item there from the first page to the last is listed exactly once, one added
//!   or removed meanwhile may or may not be.
//!
//! Must not depend on: Raft, gRPC, RocksDB, an async runtime or a clock.

use std::collections::BTreeMap;

use engram_storage::{ReadView, Space, prefix_end};
use engram_types::{Attribute, Cardinality, Datom, EntityId, Namespace, TxId, Value};

use crate::cursor::{Cursor, CursorKind, QueryKey};
use crate::pages::{Page, answer_as_of, trailing_tx_seq};
use crate::reads::{self, ReadError, ReadOptions};
use crate::rows::hex;
use crate::{CoreError, keys, schema};

/// Index rows read per scan while a referrers page is gathered.
const SCAN_CHUNK: usize = 1024;

/// A page of namespace names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamespacePage {
    pub namespaces: Vec<Namespace>,
    pub next: Option<Cursor>,
}

/// A page of entity ids.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EntityPage {
    pub entities: Vec<EntityId>,
    /// The transaction the whole answer is read as of.
    pub as_of: TxId,
    pub next: Option<Cursor>,
}

/// The most items one page of a list read whole holds (a request's limit of 0 asks for this
/// many).
pub const MAX_KEYED_PAGE: usize = 10_000;

/// The page size a list request's `limit` asks for: 0 is the largest.
pub fn keyed_page_size(limit: u32) -> usize {
    if limit == 0 {
        MAX_KEYED_PAGE
    } else {
        (limit as usize).min(MAX_KEYED_PAGE)
    }
}

/// A page of `items` (each with its sort key, unique within the list) in key order, after
/// `cursor` (empty: the first page), at most `limit`; `query` names what the request asks
/// beyond the page (a principal, a namespace), which a cursor is bound to. Returns the page and
/// the cursor of the next one when more follow.
pub fn keyed_page<T>(
    kind: CursorKind,
    query: &[&[u8]],
    mut items: Vec<(Vec<u8>, T)>,
    cursor: &[u8],
    limit: usize,
) -> Result<(Vec<T>, Option<Cursor>), ReadError> {
    let query = QueryKey::of(kind, query);
    let after = Cursor::continuing(cursor, kind, query)?.map(|c| c.after_key);
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let mut rest = items
        .into_iter()
        .filter(|(key, _)| after.as_ref().is_none_or(|after| key > after))
        .peekable();
    let mut page = Vec::with_capacity(limit.min(MAX_KEYED_PAGE));
    let mut last = None;
    while page.len() < limit.max(1) {
        let Some((key, item)) = rest.next() else {
            break;
        };
        page.push(item);
        last = Some(key);
    }
    let next = match (rest.peek(), last) {
        (Some(_), Some(key)) => Some(Cursor {
            after_key: key,
            ..Cursor::at(kind, query, TxId(0), (0, 0))
        }),
        _ => None,
    };
    Ok((page, next))
}

/// A list item's sort key from its parts, each ended by a 0 byte (parts hold no 0 byte: names,
/// namespaces, attributes), so a part that is a prefix of another sorts first.
pub fn list_key(parts: &[&str]) -> Vec<u8> {
    let mut key = Vec::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for part in parts {
        key.extend_from_slice(part.as_bytes());
        key.push(0);
    }
    key
}

/// The tables whose rows start with a namespace and its 0 terminator, and that say a namespace
/// exists: main's datoms, schema rows, branch rows.
const NAMESPACE_TABLES: [u8; 3] = [keys::EAVT, keys::SCHEMA, keys::BRANCH];

/// A page of the namespaces `readable` admits, in name order, after `cursor`.
pub fn namespaces(
    store: &dyn ReadView,
    readable: &dyn Fn(&Namespace) -> bool,
    cursor: &[u8],
    limit: usize,
) -> Result<NamespacePage, ReadError> {
    let query = QueryKey::of(CursorKind::Namespaces, &[]);
    let cursor = Cursor::continuing(cursor, CursorKind::Namespaces, query)?;
    let mut after: Option<Vec<u8>> = cursor.map(|c| c.after_key);
    let mut page = NamespacePage::default();
    loop {
        // The smallest name after `after` that any table holds.
        let mut next: Option<Vec<u8>> = None;
        for table in NAMESPACE_TABLES {
            if let Some(name) = first_namespace(store, table, after.as_deref())?
                && next.as_ref().is_none_or(|n| name < *n)
            {
                next = Some(name);
            }
        }
        let Some(name) = next else {
            return Ok(page);
        };
        let ns = std::str::from_utf8(&name)
            .ok()
            .and_then(|n| Namespace::new(n).ok())
            .ok_or_else(|| {
                CoreError::corrupt(format!("namespace {}", hex(&name)), "not a valid namespace name")
            })?;
        if readable(&ns) {
            if page.namespaces.len() == limit {
                // One more exists: the page ends at the last one kept.
                let last = page.namespaces.last().map(|n| n.as_str().as_bytes().to_vec());
                page.next = last.map(|key| Cursor {
                    after_key: key,
                    ..Cursor::at(CursorKind::Namespaces, query, TxId(0), (0, 0))
                });
                return Ok(page);
            }
            page.namespaces.push(ns);
        }
        after = Some(name);
    }
}

/// The first namespace name in `table` after `after` (from the start when `None`).
fn first_namespace(
    store: &dyn ReadView,
    table: u8,
    after: Option<&[u8]>,
) -> Result<Option<Vec<u8>>, ReadError> {
    let from = match after {
        None => vec![table],
        Some(name) => {
            // Past every key of `name`: its terminator 0, raised to 1.
            let mut from = vec![table];
            from.extend_from_slice(name);
            from.push(1);
            from
        }
    };
    let end = [table + 1];
    let Some((key, _)) = store.scan(Space::State, &from, Some(&end), 1)?.into_iter().next() else {
        return Ok(None);
    };
    let name = key
        .get(1..)
        .and_then(|rest| rest.iter().position(|&b| b == 0).map(|n| rest[..n].to_vec()))
        .ok_or_else(|| CoreError::corrupt(format!("row {}", hex(&key)), "no namespace terminator"))?;
    Ok(Some(name))
}

/// A page of the entities of `ns` on main with a datom (of `attribute`, if given) up to the
/// answer's as-of transaction (`as_of`, or the head when the first page is read), in id order.
pub fn entities(
    store: &dyn ReadView,
    ns: &Namespace,
    attribute: Option<&Attribute>,
    as_of: Option<TxId>,
    cursor: &[u8],
    limit: usize,
) -> Result<EntityPage, ReadError> {
    let as_of_part = as_of.map_or(0, |t| t.0).to_be_bytes();
    let query = QueryKey::of(
        CursorKind::Entities,
        &[
            ns.as_str().as_bytes(),
            attribute.map_or("", |a| a.as_str()).as_bytes(),
            &as_of_part,
        ],
    );
    let cursor = Cursor::continuing(cursor, CursorKind::Entities, query)?;
    let as_of = answer_as_of(store, cursor.as_ref(), as_of)?;
    // EAVT (ns, entity, attr, tx, seq) or AEVT (ns, attr, entity, tx, seq): either way the
    // entity follows the prefix, and the key ends with (tx, seq).
    let prefix = match attribute {
        Some(a) => keys::aevt_attr(ns, a),
        None => keys::eavt_namespace(ns),
    };
    let end = prefix_end(&prefix);
    let mut page = EntityPage {
        as_of,
        ..EntityPage::default()
    };
    let mut next_entity = match cursor.map(|c| c.after.0) {
        None => Some(0),
        Some(last) => last.checked_add(1),
    };
    while let Some(from_entity) = next_entity {
        let mut from = prefix.clone();
        from.extend_from_slice(&from_entity.to_be_bytes());
        let Some((key, _)) = store
            .scan(Space::State, &from, end.as_deref(), 1)?
            .into_iter()
            .next()
        else {
            break;
        };
        let e = entity_after(&key, prefix.len())?;
        // The entity's first row is usually early enough; only otherwise are its others read.
        let (tx, _) = trailing_tx_seq(&key)?;
        if tx <= as_of || written_by(store, &prefix, e, as_of)? {
            if page.entities.len() == limit {
                page.next = page
                    .entities
                    .last()
                    .map(|last| Cursor::at(CursorKind::Entities, query, as_of, (last.0, 0)));
                return Ok(page);
            }
            page.entities.push(e);
        }
        next_entity = e.0.checked_add(1);
    }
    Ok(page)
}

/// The entity id that follows `prefix_len` bytes of an EAVT or AEVT key.
fn entity_after(key: &[u8], prefix_len: usize) -> Result<EntityId, ReadError> {
    key.get(prefix_len..prefix_len + 8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(|b| EntityId(u64::from_be_bytes(b)))
        .ok_or_else(|| CoreError::corrupt(format!("row {}", hex(key)), "too short for an entity id").into())
}

/// Whether `e`'s rows under `prefix` hold one written at or before `as_of`.
fn written_by(store: &dyn ReadView, prefix: &[u8], e: EntityId, as_of: TxId) -> Result<bool, ReadError> {
    let mut own = prefix.to_vec();
    own.extend_from_slice(&e.0.to_be_bytes());
    let end = prefix_end(&own);
    let mut from = own.clone();
    loop {
        let rows = store.scan(Space::State, &from, end.as_deref(), SCAN_CHUNK)?;
        for (key, _) in &rows {
            if trailing_tx_seq(key)?.0 <= as_of {
                return Ok(true);
            }
        }
        match rows.last() {
            Some((key, _)) if rows.len() == SCAN_CHUNK => {
                from = key.clone();
                from.push(0);
            }
            _ => return Ok(false),
        }
    }
}

/// A page of the current claims of `ns` on main whose value refers to `target` (of
/// `attribute`, if given; of attributes `shows` admits), as of `opts.as_of` (or the head when
/// the first page is read) and valid at `opts.valid_at_ns` if given, in (attribute, entity)
/// order. The rule and `verified_only` of `opts` pick the claims as a Get would.
#[allow(clippy::too_many_arguments)] // where (store, namespace), what (target, attribute, filter, options), which page (two)
pub fn referrers(
    store: &dyn ReadView,
    ns: &Namespace,
    target: EntityId,
    attribute: Option<&Attribute>,
    shows: &dyn Fn(&Attribute) -> bool,
    opts: &ReadOptions,
    cursor: &[u8],
    limit: usize,
) -> Result<Page, ReadError> {
    let as_of_part = opts.as_of.map_or(0, |t| t.0).to_be_bytes();
    let valid = opts.valid_at_ns.map(i64::to_be_bytes);
    let rule = [opts.rule as u8, u8::from(opts.verified_only)];
    let target_part = target.0.to_be_bytes();
    let mut parts: Vec<&[u8]> = vec![
        ns.as_str().as_bytes(),
        &target_part,
        attribute.map_or("", |a| a.as_str()).as_bytes(),
        &as_of_part,
        &rule,
    ];
    if let Some(valid) = &valid {
        parts.extend([&b"valid-at"[..], valid]);
    }
    let query = QueryKey::of(CursorKind::Referrers, &parts);
    let cursor = Cursor::continuing(cursor, CursorKind::Referrers, query)?;
    let as_of = answer_as_of(store, cursor.as_ref(), opts.as_of)?;
    let read = ReadOptions {
        as_of: Some(as_of),
        ..*opts
    };
    let base = keys::vaet_ref(ns, target);
    let prefix = match attribute {
        Some(a) => {
            let mut p = base.clone();
            p.extend_from_slice(a.as_str().as_bytes());
            p.push(0);
            p
        }
        None => base.clone(),
    };
    // The cursor's key is the (attribute 0 entity) of the last pair a page took: the next page
    // starts past every row of that pair. (The key only ever extends this target's prefix, so
    // a forged one can point nowhere else.)
    let mut from = match cursor {
        None => prefix.clone(),
        Some(c) => {
            let mut pair = base.clone();
            pair.extend_from_slice(&c.after_key);
            match prefix_end(&pair) {
                Some(end) if end > prefix => end,
                _ => prefix.clone(),
            }
        }
    };
    let end = prefix_end(&prefix);
    let referred = Value::Ref(target);
    let mut cardinalities: BTreeMap<Attribute, Cardinality> = BTreeMap::new();
    let mut pairs = Pairs::default();
    let mut datoms: Vec<Datom> = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    let mut more = false;
    'scan: loop {
        let rows = store.scan(Space::State, &from, end.as_deref(), SCAN_CHUNK)?;
        for (key, _) in &rows {
            let Some(PairRow {
                pair,
                attr,
                entity: e,
                tx,
            }) = pairs.take(key, base.len())?
            else {
                continue;
            };
            // A pair's rows are in tx order: one whose first row is past the bound has no
            // other before it.
            if tx > as_of || !shows(&attr) {
                continue;
            }
            let cardinality = match cardinalities.get(&attr) {
                Some(c) => *c,
                None => {
                    let c = schema::cardinality_at(store, ns, &attr, Some(as_of))?;
                    cardinalities.insert(attr.clone(), c);
                    c
                }
            };
            let slot = reads::slot_datoms_main(store, ns, e, &attr)?;
            let found: Vec<Datom> = reads::resolve_slot(&slot, cardinality, &read)
                .current
                .into_iter()
                .filter(|d| d.value == referred)
                .collect();
            if found.is_empty() {
                continue;
            }
            // Past a full page, the next pair found says that the answer goes on.
            if !datoms.is_empty() && datoms.len() + found.len() > limit {
                more = true;
                break 'scan;
            }
            datoms.extend(found);
            last = Some(pair);
        }
        match rows.last() {
            Some((key, _)) if rows.len() == SCAN_CHUNK => {
                from = key.clone();
                from.push(0);
            }
            _ => break,
        }
    }
    let next = match (more, last) {
        (true, Some(key)) => Some(Cursor {
            after_key: key,
            ..Cursor::at(CursorKind::Referrers, query, as_of, (0, 0))
        }),
        _ => None,
    };
    Ok(Page { datoms, as_of, next })
}

/// Groups a target's VAET rows, read in key order, into (attribute, entity) pairs: each pair
/// is offered once, at its first row (the earliest transaction, as rows of a pair are in tx
/// order); a pair skipped at its first row is skipped for all of them.
#[derive(Default)]
struct Pairs {
    /// The (attribute 0 entity) of the pair the last row belonged to.
    current: Vec<u8>,
    /// Whether the current pair was taken (its later rows are passed over).
    seen: bool,
}

impl Pairs {
    /// The first row of a pair (its key after `base_len` bytes of prefix); `None` for a later
    /// row of the same pair.
    fn take(&mut self, key: &[u8], base_len: usize) -> Result<Option<PairRow>, ReadError> {
        let corrupt = || CoreError::corrupt(format!("reference index row {}", hex(key)), "malformed");
        let rest = key.get(base_len..).ok_or_else(corrupt)?;
        // attr 0 entity(8) tx(8) seq(4)
        if rest.len() < 1 + 20 {
            return Err(corrupt().into());
        }
        let pair = &rest[..rest.len() - 12];
        if self.seen && pair == self.current.as_slice() {
            return Ok(None);
        }
        self.current = pair.to_vec();
        self.seen = true;
        let attr_bytes = &pair[..pair.len() - 9];
        if pair[pair.len() - 9] != 0 {
            return Err(corrupt().into());
        }
        let attr = std::str::from_utf8(attr_bytes)
            .ok()
            .and_then(|a| Attribute::new(a).ok())
            .ok_or_else(corrupt)?;
        let (entity, tx, _) = keys::trailing_entity_tx_seq(key).ok_or_else(corrupt)?;
        Ok(Some(PairRow {
            pair: pair.to_vec(),
            attr,
            entity,
            tx,
        }))
    }
}

/// The first VAET row of an (attribute, entity) pair, read.
struct PairRow {
    /// The key's (attribute 0 entity): where a cursor after this pair points.
    pair: Vec<u8>,
    attr: Attribute,
    entity: EntityId,
    /// The transaction of the pair's earliest row.
    tx: TxId,
}
