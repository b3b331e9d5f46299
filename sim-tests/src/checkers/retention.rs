//! **I12 retention** (with redactions on): what a retention policy keeps holds its value on
//! every member replica, whatever the leader's retention job took around it (`keeper.rs`
//! writes the slots and sets the policies):
//!
//! - of `:keep/owner` and `:keep/tag`, every datom of the last [`KEEP_VERSIONS`] transactions
//!   that wrote the slot;
//! - every live claim: each agent's latest `:keep/owner` assertion (`keeper-a`'s, from the
//!   start, outlives every later version), and every `:keep/tag` value no round retracted;
//! - a retracted tag's assertion and its retraction are taken together, by one redaction, or
//!   neither is (a value goes out of a slot whole: `engram_core::value_groups`);
//! - of `:keep/note`, every datom younger than [`NOTE_KEEP_MS`] when a redaction took it.
//!
//! That a replica took no more and no less than another is replica agreement's (the redacted
//! rows are state); that nothing is missing without a record is the audit verifier's.

use std::collections::{BTreeMap, BTreeSet};

use engram_storage::Store;
use engram_types::{Datom, Namespace, Op, TxId, Value};

use super::Violation;
use crate::keeper::{FIRST_OWNER, KEEP_VERSIONS, KeeperLog, NAMESPACE, NOTE, NOTE_KEEP_MS, OWNER, TAG};

pub const NAME: &str = "I12 retention";

/// The violations, and the most datoms of the keeper's entity a member holds redacted.
pub fn check(members: &[(u64, &dyn Store)], log: &KeeperLog) -> (Vec<Violation>, usize) {
    let mut out: Vec<Violation> = log
        .refused
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|r| Violation::new(NAME, format!("the keeper's write was refused: {r}")))
        .collect();
    let Some(entity) = *log.entity.lock().unwrap_or_else(|e| e.into_inner()) else {
        return (out, 0);
    };
    let rounds = log.rounds.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let ns = Namespace::new(NAMESPACE).expect("a valid namespace");
    let mut taken = 0;
    for (node, store) in members {
        let datoms = match super::entity_datoms(NAME, *node, *store, &ns, entity) {
            Ok(d) => d,
            Err(v) => {
                out.push(v);
                continue;
            }
        };
        let redacted = datoms.iter().filter(|d| d.value.redacted().is_some()).count();
        taken = taken.max(redacted);
        let mut slots: BTreeMap<&str, Vec<&Datom>> = BTreeMap::new();
        for d in &datoms {
            slots.entry(d.attribute.as_str()).or_default().push(d);
        }
        let empty = Vec::new();
        let mut fail = |what: String| {
            out.push(Violation::new(
                NAME,
                format!("node {node}: entity {entity}: {what}"),
            ))
        };
        for attr in [OWNER, TAG] {
            let slot = slots.get(attr).unwrap_or(&empty);
            let txs: BTreeSet<TxId> = slot.iter().map(|d| d.tx).collect();
            let kept: BTreeSet<TxId> = txs.iter().rev().take(KEEP_VERSIONS as usize).copied().collect();
            for d in slot.iter().filter(|d| kept.contains(&d.tx)) {
                if let Some(r) = d.value.redacted() {
                    fail(format!(
                        "{attr} of tx {}, one of the slot's last {KEEP_VERSIONS} versions, was taken by tx {}",
                        d.tx.0, r.by_tx.0
                    ));
                }
            }
        }
        // Each agent's latest owner claim is live: nothing retracts an owner.
        let mut latest: BTreeMap<&str, &Datom> = BTreeMap::new();
        for d in slots.get(OWNER).unwrap_or(&empty) {
            if d.op == Op::Assert
                && latest
                    .get(d.provenance.agent.as_str())
                    .is_none_or(|l| l.tx < d.tx)
            {
                latest.insert(d.provenance.agent.as_str(), d);
            }
        }
        if !latest.contains_key(FIRST_OWNER) {
            fail(format!("no {OWNER} claim of {FIRST_OWNER}"));
        }
        for (agent, d) in latest {
            if let Some(r) = d.value.redacted() {
                fail(format!(
                    "{OWNER}: {agent}'s live claim (tx {}) was taken by tx {}",
                    d.tx.0, r.by_tx.0
                ));
            }
        }
        // Every acknowledged round's tag is a live claim, unless a later round retracted it.
        // The round in flight when the run stopped may have been applied unacknowledged: a tag
        // it retracts may be either.
        let tx_of: BTreeMap<u64, u64> = rounds.iter().copied().collect();
        let in_flight = rounds.last().map_or(1, |(round, _)| round + 1);
        let tags = slots.get(TAG).unwrap_or(&empty);
        let tag_datom = |tx: u64, op: Op| tags.iter().find(|d| d.tx == TxId(tx) && d.op == op);
        for (round, tx) in &rounds {
            let retracting =
                (round + 1..=round + 2).find(|r| crate::keeper::retracted_in(*r) == Some(*round));
            if let Some(by) = retracting {
                match (
                    tag_datom(*tx, Op::Assert),
                    tx_of.get(&by).and_then(|t| tag_datom(*t, Op::Retract)),
                ) {
                    (Some(a), Some(r)) => {
                        let taken_by = |d: &Datom| d.value.redacted().map(|m| m.by_tx);
                        if taken_by(a) != taken_by(r) {
                            fail(format!(
                                "{TAG}: round {round}'s assertion (tx {tx}, taken by {:?}) and its retraction (tx {}, taken by {:?}) were not taken together",
                                taken_by(a).map(|t| t.0),
                                r.tx.0,
                                taken_by(r).map(|t| t.0)
                            ));
                        }
                        continue;
                    }
                    (None, _) => {
                        fail(format!("{TAG}: round {round}'s assertion (tx {tx}) is missing"));
                        continue;
                    }
                    (Some(_), None) if tx_of.contains_key(&by) => {
                        fail(format!(
                            "{TAG}: round {by} acknowledged, but no retraction of round {round}'s tag"
                        ));
                        continue;
                    }
                    (Some(_), None) if by == in_flight => continue,
                    // Not retracted yet: a live claim, checked below.
                    (Some(_), None) => {}
                }
            }
            let assertion = tag_datom(*tx, Op::Assert);
            match assertion {
                None => fail(format!("{TAG}: round {round}'s assertion (tx {tx}) is missing")),
                Some(d) => match &d.value {
                    Value::Redacted(r) => fail(format!(
                        "{TAG}: round {round}'s value, never retracted (tx {tx}), was taken by tx {}",
                        r.by_tx.0
                    )),
                    v if *v != Value::String(crate::keeper::tag_of(*round)) => {
                        fail(format!("{TAG}: round {round}'s assertion (tx {tx}) holds {v}"))
                    }
                    _ => {}
                },
            }
        }
        for d in slots.get(NOTE).unwrap_or(&empty) {
            let Some(r) = d.value.redacted() else { continue };
            let time = |tx: TxId| {
                engram_core::reads::tx(*store, tx)
                    .ok()
                    .flatten()
                    .map(|row| row.receipt.tx_time_ns)
            };
            match (time(d.tx), time(r.by_tx)) {
                (Some(written), Some(taken))
                    if taken.saturating_sub(written) >= (NOTE_KEEP_MS * 1_000_000) as i64 => {}
                (Some(written), Some(taken)) => fail(format!(
                    "{NOTE} of tx {} was taken by tx {} {} ms after it was written, under a policy keeping it {NOTE_KEEP_MS} ms",
                    d.tx.0,
                    r.by_tx.0,
                    (taken - written) / 1_000_000
                )),
                _ => fail(format!(
                    "{NOTE} of tx {}, taken by tx {}: a transaction's time cannot be read",
                    d.tx.0, r.by_tx.0
                )),
            }
        }
    }
    (out, taken)
}
