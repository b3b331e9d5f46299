//! Feeding the recall indexes from committed transactions: which facts start holding, and
//! which stop.
//!
//! A slot (entity, attribute) holds what Engram's current-claims rule says it holds: under
//! cardinality one, each agent's latest assertion not retracted since; under cardinality many,
//! the latest assertion of each value not retracted since; a retraction ends every claim of
//! its value, whoever made it. The feeder keeps each slot's live indexed claims and tells the
//! index when one ends, so an as-of search finds exactly the claims that held then. Every datom
//! is checked against them, of whatever type (a number can replace a text), but only claims
//! that went into an index are kept. Texts and vectors are indexed when
//! their attribute is searchable at their transaction; refs always (they are the graph), and
//! `:memory/kind` values always (they are the kind filter), and `:memory/expires` instants (they
//! are the expiry filter). Claims of several agents in one slot all
//! hold: they are a contradiction, and each is its own hit.
//!
//! One limit, written down rather than hidden: the schema used is the one in force when a
//! datom is fed. A schema change of an attribute's cardinality refolds a slot's history in the
//! store, and one that makes an attribute searchable would find its older values in a fresh
//! rebuild from the datoms; here both apply from the change on, on every node alike.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use engram_types::{Attribute, Cardinality, Datom, EntityId, Op, TxId, Value};

use crate::expiry::MEMORY_EXPIRES;
use crate::index::RecallIndex;
use crate::kind::MEMORY_KIND;
use crate::types::{FactMeta, FactRef, RecallError, Scope};

/// What the feeder needs to know of an attribute at a transaction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Indexing {
    pub cardinality: Cardinality,
    /// Whether its string or vector values are indexed for recall.
    pub searchable: bool,
}

/// The live indexed claims, per scope and entity, of each attribute that has any. Only claims
/// that went into an index are kept: the others have nothing to end, and keeping them would
/// hold a copy of every current value in memory whether or not anything is searchable.
#[derive(Default, Serialize, Deserialize)]
pub struct Feeder {
    slots: HashMap<Scope, HashMap<EntityId, Vec<Slot>>>,
}

/// One (entity, attribute) slot's live indexed claims; never empty while kept.
#[derive(Serialize, Deserialize)]
struct Slot {
    attribute: Attribute,
    claims: Vec<Claim>,
}

#[derive(Serialize, Deserialize)]
struct Claim {
    agent: String,
    value: Value,
    fact: FactRef,
}

/// What one transaction changed in the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fed {
    /// Claims indexed (texts, vectors and refs).
    pub added: usize,
    /// Indexed claims that stopped holding.
    pub ended: usize,
}

impl Feeder {
    pub fn new() -> Feeder {
        Feeder::default()
    }

    /// Feeds transaction `tx` (its datoms in transaction order, committed at `tx_time_ns`) to
    /// `index`. `schema` says how each attribute of a scope is indexed at this transaction.
    /// Transactions must come in order, each once.
    pub fn feed_tx(
        &mut self,
        index: &mut RecallIndex,
        tx: TxId,
        tx_time_ns: i64,
        datoms: &[Datom],
        schema: impl Fn(&Scope, &Attribute) -> Indexing,
    ) -> Result<Fed, RecallError> {
        index.text.advance(tx)?;
        let mut fed = Fed::default();
        // A transaction's datoms almost always share one scope: built again only on a change.
        let mut scope: Option<Scope> = None;
        for (seq, d) in datoms.iter().enumerate() {
            if d.tx != tx {
                return Err(RecallError::Feed(format!(
                    "datom {seq} of transaction {} says transaction {}",
                    tx.0, d.tx.0
                )));
            }
            let scope = match &mut scope {
                Some(s) if s.namespace == d.namespace && s.branch == d.branch => &*s,
                slot => &*slot.insert(Scope {
                    namespace: d.namespace.clone(),
                    branch: d.branch.clone(),
                }),
            };
            let indexing = schema(scope, &d.attribute);
            let ends = |c: &Claim| match (d.op, indexing.cardinality) {
                (Op::Assert, Cardinality::One) => c.agent == d.provenance.agent,
                (Op::Assert, Cardinality::Many) | (Op::Retract, _) => c.value == d.value,
            };
            fed.ended += self.end_claims(index, scope, d, tx, ends)?;
            if d.op == Op::Retract {
                // A retraction ends claims; it is not one.
                continue;
            }
            let fact = FactRef {
                tx,
                seq: u32::try_from(seq).unwrap_or(u32::MAX),
                entity: d.entity,
                attribute: d.attribute.clone(),
            };
            let meta = || FactMeta {
                agent: d.provenance.agent.clone(),
                status: d.provenance.status,
                confidence: d.provenance.confidence,
                tx_time_ns,
                valid_from_ns: d.valid_from_ns,
                valid_to_ns: d.valid_to_ns,
            };
            let (mut indexed, mut added) = (true, false);
            match &d.value {
                Value::String(text) if indexing.searchable => {
                    added |= index.add_text(scope, fact.clone(), text, meta())?
                }
                Value::Vector(v) if indexing.searchable => {
                    added |= index.add_vector(scope, fact.clone(), v, meta())?
                }
                Value::Ref(target) => added |= index.add_edge(scope, fact.clone(), *target)?,
                _ => indexed = false,
            }
            if let Value::Keyword(k) | Value::String(k) = &d.value
                && d.attribute.as_str() == MEMORY_KIND
            {
                indexed = true;
                added |= index.add_kind(scope, fact.clone(), k)?;
            }
            if let Value::Instant(at_ns) = &d.value
                && d.attribute.as_str() == MEMORY_EXPIRES
            {
                indexed = true;
                added |= index.add_expiry(scope, fact.clone(), *at_ns)?;
            }
            if added {
                fed.added += 1;
            }
            if indexed {
                self.keep(scope, d, fact);
            }
        }
        Ok(fed)
    }

    /// How many indexed claims hold now, across scopes: what the feeder keeps in memory.
    pub fn live_claims(&self) -> usize {
        self.slots
            .values()
            .flat_map(|entities| entities.values().flatten())
            .map(|slot| slot.claims.len())
            .sum()
    }

    /// Ends the live claims of `d`'s slot that `ends` picks, in the index at `tx`; drops the
    /// slot once it holds none. Returns how many indexed claims stopped holding.
    fn end_claims(
        &mut self,
        index: &mut RecallIndex,
        scope: &Scope,
        d: &Datom,
        tx: TxId,
        ends: impl Fn(&Claim) -> bool,
    ) -> Result<usize, RecallError> {
        let Some(entities) = self.slots.get_mut(scope) else {
            return Ok(0);
        };
        let Some(slots) = entities.get_mut(&d.entity) else {
            return Ok(0);
        };
        let Some(at) = slots.iter().position(|s| s.attribute == d.attribute) else {
            return Ok(0);
        };
        let mut ended = 0;
        let claims = std::mem::take(&mut slots[at].claims);
        for c in claims {
            if ends(&c) {
                if index.end(scope, &c.fact, tx)? {
                    ended += 1;
                }
            } else {
                slots[at].claims.push(c);
            }
        }
        if slots[at].claims.is_empty() {
            slots.swap_remove(at);
            if slots.is_empty() {
                entities.remove(&d.entity);
            }
        }
        Ok(ended)
    }

    /// Keeps `d`, indexed as `fact`, among its slot's live claims.
    fn keep(&mut self, scope: &Scope, d: &Datom, fact: FactRef) {
        let entities = match self.slots.get_mut(scope) {
            Some(e) => e,
            None => self.slots.entry(scope.clone()).or_default(),
        };
        let slots = entities.entry(d.entity).or_default();
        let claim = Claim {
            agent: d.provenance.agent.clone(),
            value: d.value.clone(),
            fact,
        };
        match slots.iter_mut().find(|s| s.attribute == d.attribute) {
            Some(slot) => slot.claims.push(claim),
            None => slots.push(Slot {
                attribute: d.attribute.clone(),
                claims: vec![claim],
            }),
        }
    }
}
