//! **I12 sessions** (with redactions on): a session's namespace is forgotten only after the
//! session ended, never while it lives (`keeper.rs` opens, renews, ends and abandons a session
//! on its own namespace and writes a note there every round). On every member replica, from
//! what its chain records in the system namespace:
//!
//! - every deadline a session records (`:engram.session/deadline`) is its change's transaction
//!   time plus the ttl the same change records;
//! - every lapse (`:engram.session/status` "lapsed") comes at or after the deadline the session
//!   last recorded before it;
//! - every note that reads forgotten was written before some end (lapse or end) of a session
//!   on the namespace;
//! - once the keeper saw the last end forgotten, every acknowledged note is forgotten.

use std::collections::BTreeMap;

use engram_access::SYSTEM_NAMESPACE;
use engram_storage::Store;
use engram_types::{Attribute, Datom, EntityId, Namespace, Op, TxId, Value};

use super::Violation;
use crate::keeper::{KeeperLog, SESSION_NAMESPACE};

pub const NAME: &str = "I12 sessions";

/// What one replica's chain records of the sessions on the keeper's namespace.
#[derive(Default)]
struct Record {
    /// (tx, deadline) of each open or renewal, in tx order, per session entity.
    deadlines: BTreeMap<u64, Vec<(TxId, i64)>>,
    /// (tx, ttl ms) of each open or renewal.
    ttls: BTreeMap<TxId, i64>,
    /// (session entity, tx, lapsed) of each end.
    ends: Vec<(u64, TxId, bool)>,
}

/// What the checker found: its violations, and (the most on any member) the notes forgotten
/// and the lapses recorded, so a sweep can tell that sessions were exercised.
#[derive(Default)]
pub struct Checked {
    pub violations: Vec<Violation>,
    pub forgotten: usize,
    pub lapses: usize,
}

pub fn check(members: &[(u64, &dyn Store)], log: &KeeperLog) -> Checked {
    let notes = log
        .session_notes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut checked = Checked::default();
    if notes.is_empty() {
        return checked;
    }
    let forgotten_all = log.session_forgotten.load(std::sync::atomic::Ordering::Relaxed);
    let ns = Namespace::new(SESSION_NAMESPACE).expect("a valid namespace");
    let mut out = Vec::new();
    for (node, store) in members {
        let mut forgotten = 0;
        let mut fail = |what: String| out.push(Violation::new(NAME, format!("node {node}: {what}")));
        let record = match read_record(*store) {
            Ok(r) => r,
            Err(e) => {
                fail(format!("reading the session records: {e}"));
                continue;
            }
        };
        let tx_time = |tx: TxId| -> Option<i64> {
            engram_core::reads::tx(*store, tx)
                .ok()
                .flatten()
                .map(|row| row.receipt.tx_time_ns)
        };
        for (entity, deadlines) in &record.deadlines {
            for (tx, deadline) in deadlines {
                let expected = record
                    .ttls
                    .get(tx)
                    .zip(tx_time(*tx))
                    .map(|(ttl, t)| t.saturating_add(ttl.saturating_mul(1_000_000)));
                if expected != Some(*deadline) {
                    fail(format!(
                        "session {entity}: tx {} records deadline {deadline} ns, not its time plus its ttl ({expected:?})",
                        tx.0
                    ));
                }
            }
        }
        checked.lapses = checked
            .lapses
            .max(record.ends.iter().filter(|(_, _, lapsed)| *lapsed).count());
        for (entity, tx, lapsed) in &record.ends {
            if !lapsed {
                continue;
            }
            let last = record
                .deadlines
                .get(entity)
                .and_then(|d| d.iter().rev().find(|(at, _)| at < tx));
            match (last, tx_time(*tx)) {
                (Some((_, deadline)), Some(at)) if at >= *deadline => {}
                (last, at) => fail(format!(
                    "session {entity} lapsed at tx {} (time {at:?}) before its deadline ({last:?})",
                    tx.0
                )),
            }
        }
        for (round, note_tx, entity) in &notes {
            let datoms = match super::entity_datoms(NAME, *node, *store, &ns, *entity) {
                Ok(d) => d,
                Err(v) => {
                    out.push(v);
                    continue;
                }
            };
            let mut fail = |what: String| out.push(Violation::new(NAME, format!("node {node}: {what}")));
            let Some(note) = datoms.iter().find(|d| d.tx.0 == *note_tx) else {
                fail(format!("the note of round {round} (tx {note_tx}) is missing"));
                continue;
            };
            let redacted = note.value.redacted().is_some();
            forgotten += usize::from(redacted);
            let ended_after = record.ends.iter().any(|(_, end, _)| end.0 > *note_tx);
            if redacted && !ended_after {
                fail(format!(
                    "the note of round {round} (tx {note_tx}) is forgotten, and no session on {SESSION_NAMESPACE} ended after it"
                ));
            }
            if forgotten_all && !redacted {
                fail(format!(
                    "the note of round {round} (tx {note_tx}) is kept after the last session ended and was forgotten"
                ));
            }
        }
        checked.forgotten = checked.forgotten.max(forgotten);
    }
    checked.violations = out;
    checked
}

fn read_record(store: &dyn Store) -> Result<Record, String> {
    let system = Namespace::new(SYSTEM_NAMESPACE).map_err(|e| e.to_string())?;
    let names = Attribute::new(":engram.session/namespace").map_err(|e| e.to_string())?;
    let page = engram_core::lists::entities(store, &system, Some(&names), None, &[], 100_000)
        .map_err(|e| e.to_string())?;
    let mut record = Record::default();
    for entity in page.entities {
        let datoms: Vec<Datom> = engram_core::reads::entity_datoms(store, &system, EntityId(entity.0))
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|d| d.op == Op::Assert)
            .collect();
        let ours = datoms.iter().any(|d| {
            d.attribute.as_str() == ":engram.session/namespace"
                && d.value == Value::String(SESSION_NAMESPACE.into())
        });
        if !ours {
            continue;
        }
        for d in &datoms {
            match (d.attribute.as_str(), &d.value) {
                (":engram.session/deadline", Value::Instant(at)) => {
                    record.deadlines.entry(entity.0).or_default().push((d.tx, *at))
                }
                (":engram.session/ttl-ms", Value::I64(ttl)) => {
                    record.ttls.insert(d.tx, *ttl);
                }
                (":engram.session/status", Value::String(s)) if s == "lapsed" || s == "ended" => {
                    record.ends.push((entity.0, d.tx, s == "lapsed"))
                }
                _ => {}
            }
        }
    }
    for d in record.deadlines.values_mut() {
        d.sort();
    }
    Ok(record)
}
