//! How a slot's history becomes what a read answers: the live claims after its datoms, the
//! value a resolution rule picks among agents that disagree, and when an entity expires. Here
//! so that the node's reads and a client checking a proven answer against the histories it
//! was sent (`docs/AUDIT.md`, "Proven reads of the current state") compute them alike.

use crate::{Cardinality, Datom, MEMORY_EXPIRES, Op, Status, TxId, Value};

/// How a read picks the current value of a cardinality-one attribute when agents disagree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Resolution {
    /// The newest claim.
    #[default]
    Latest,
    /// The best verified claim: verified before candidate, then higher confidence, then newer.
    Verified,
}

/// What a read of one slot filters and how it resolves.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SlotRead {
    /// Only transactions up to this one (inclusive).
    pub as_of: Option<TxId>,
    /// Only facts whose valid-time interval contains this instant.
    pub valid_at_ns: Option<i64>,
    pub rule: Resolution,
    /// Ignore candidate claims entirely.
    pub verified_only: bool,
}

/// One slot's answer: what it holds, and the claims the winner won against.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// Cardinality one: the winning claim. Many: one datom per value held.
    pub current: Vec<Datom>,
    /// Cardinality one: the other agents' claims whose values differ from the winner's.
    pub conflicts: Vec<Datom>,
}

/// An entity's current facts, and the claims they won against.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    /// Cardinality one: the winning claim per attribute. Many: one datom per value held.
    pub current: Vec<Datom>,
    /// Cardinality one: the other agents' claims whose values differ from the winner's.
    pub conflicts: Vec<Datom>,
    /// Set when the read left the entity out because it had expired (see [`entity_facts`]):
    /// when it expired. `current` and `conflicts` are empty.
    pub expired_at_ns: Option<i64>,
}

/// An entity's facts from its slots' datoms (each slot with its cardinality), resolved under
/// `read`. With `expired_at_ns` (an instant, ns since the Unix epoch), an entity whose
/// [`expiry`] is at or before it is left out: no facts, and when it expired.
pub fn entity_facts<'a>(
    slots: impl IntoIterator<Item = (&'a [Datom], Cardinality)>,
    read: &SlotRead,
    expired_at_ns: Option<i64>,
) -> Facts {
    let mut facts = Facts::default();
    for (datoms, cardinality) in slots {
        let resolved = resolve_slot(datoms, cardinality, read);
        facts.current.extend(resolved.current);
        facts.conflicts.extend(resolved.conflicts);
    }
    if let Some(now_ns) = expired_at_ns
        && let Some(at_ns) = expiry(facts.current.iter().chain(&facts.conflicts)).filter(|at| *at <= now_ns)
    {
        return Facts {
            expired_at_ns: Some(at_ns),
            ..Facts::default()
        };
    }
    facts
}

/// When an entity expires, from its holding claims (`current` and `conflicts` of a read): the
/// latest of their `:memory/expires` instants, `None` if none has one. Every agent's claim
/// counts, not only the one a resolution rule picks: a memory stays while any agent says it is
/// still worth recalling (the recall index's expiry filter follows the same rule).
pub fn expiry<'a>(claims: impl IntoIterator<Item = &'a Datom>) -> Option<i64> {
    claims
        .into_iter()
        .filter(|d| d.attribute.as_str() == MEMORY_EXPIRES)
        .filter_map(|d| match d.value {
            Value::Instant(at_ns) => Some(at_ns),
            _ => None,
        })
        .max()
}

/// The live claims of one slot after its datoms in tx order.
///
/// Cardinality one: each agent holds at most one claim, its latest assertion; a retraction of
/// a value ends every claim of that value (whoever made it). Agents that disagree keep their
/// claims side by side: nothing one agent asserts removes another's. Cardinality many: every
/// assertion of a value since that value was last retracted.
pub fn claims(datoms: &[Datom], cardinality: Cardinality) -> Vec<&Datom> {
    let mut ordered: Vec<&Datom> = datoms.iter().collect();
    ordered.sort_by_key(|d| d.tx);
    let mut live: Vec<&Datom> = Vec::new();
    for d in ordered {
        match d.op {
            Op::Assert => {
                if cardinality == Cardinality::One {
                    live.retain(|c| c.provenance.agent != d.provenance.agent);
                }
                live.push(d);
            }
            Op::Retract => live.retain(|c| c.value != d.value),
        }
    }
    live
}

/// The distinct values a slot holds (the latest claim of each), in the order they were last
/// claimed.
pub fn holding(datoms: &[Datom], cardinality: Cardinality) -> Vec<&Datom> {
    let mut out: Vec<&Datom> = Vec::new();
    for c in claims(datoms, cardinality) {
        out.retain(|d| d.value != c.value);
        out.push(c);
    }
    out
}

/// Whether `a` ranks above `b` under `rule` (both are live claims).
fn ranks_above(rule: Resolution, a: &Datom, b: &Datom) -> bool {
    match rule {
        Resolution::Latest => a.tx > b.tx,
        Resolution::Verified => {
            let key = |d: &Datom| (d.provenance.status == Status::Verified, d.provenance.confidence);
            let (ka, kb) = (key(a), key(b));
            match ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1)) {
                std::cmp::Ordering::Equal => a.tx > b.tx,
                order => order.is_gt(),
            }
        }
    }
}

/// Resolves one slot's datoms under `read` (its `as_of` and `valid_at_ns` filter first).
pub fn resolve_slot(datoms: &[Datom], cardinality: Cardinality, read: &SlotRead) -> Resolved {
    let seen: Vec<Datom> = datoms
        .iter()
        .filter(|d| read.as_of.is_none_or(|t| d.tx <= t) && read.valid_at_ns.is_none_or(|at| d.valid_at(at)))
        .cloned()
        .collect();
    let live: Vec<&Datom> = claims(&seen, cardinality)
        .into_iter()
        .filter(|d| !read.verified_only || d.provenance.status == Status::Verified)
        .collect();
    let mut out = Resolved::default();
    match cardinality {
        Cardinality::One => {
            let Some(winner) = live
                .iter()
                .copied()
                .reduce(|best, d| if ranks_above(read.rule, d, best) { d } else { best })
            else {
                return out;
            };
            out.conflicts = live
                .iter()
                .filter(|d| d.value != winner.value)
                .map(|d| (*d).clone())
                .collect();
            out.current.push(winner.clone());
        }
        Cardinality::Many => {
            let mut best: Vec<&Datom> = Vec::new();
            for d in live {
                match best.iter_mut().find(|b| b.value == d.value) {
                    Some(b) => {
                        if ranks_above(read.rule, d, b) {
                            *b = d;
                        }
                    }
                    None => best.push(d),
                }
            }
            out.current = best.into_iter().cloned().collect();
        }
    }
    out
}
