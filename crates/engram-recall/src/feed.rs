//! Feeding the recall indexes from committed transactions: which facts start holding, and
//! which stop.
//!
//! A slot (entity, attribute) holds what Engram's current-claims rule says it holds: under
//! cardinality one, each agent's latest assertion not retracted since; under cardinality many,
//! the latest assertion of each value not retracted since; a retraction ends every claim of
//! its value, whoever made it. The feeder keeps each slot's live claims (of every value type,
//! since a number can replace a text) and tells the index when a claim it holds ends, so an
//! as-of search finds exactly the claims that held then. Texts and vectors are indexed when
//! their attribute is searchable at their transaction; refs always (they are the graph), and
//! `:memory/kind` values always (they are the kind filter). Claims of several agents in one slot all
//! hold: they are a contradiction, and each is its own hit.
//!
//! One limit, written down rather than hidden: the schema used is the one in force when a
//! datom is fed. A schema change of an attribute's cardinality refolds a slot's history in the
//! store, and one that makes an attribute searchable would find its older values in a fresh
//! rebuild from the datoms; here both apply from the change on, on every node alike.

use std::collections::HashMap;

use engram_types::{Attribute, Cardinality, Datom, EntityId, Op, TxId, Value};

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

/// The live claims of every slot the feeder has seen.
#[derive(Default)]
pub struct Feeder {
    slots: HashMap<(Scope, EntityId, Attribute), Vec<Claim>>,
}

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
        for (seq, d) in datoms.iter().enumerate() {
            if d.tx != tx {
                return Err(RecallError::Feed(format!(
                    "datom {seq} of transaction {} says transaction {}",
                    tx.0, d.tx.0
                )));
            }
            let scope = Scope {
                namespace: d.namespace.clone(),
                branch: d.branch.clone(),
            };
            let claims = self
                .slots
                .entry((scope.clone(), d.entity, d.attribute.clone()))
                .or_default();
            let indexing = schema(&scope, &d.attribute);
            let ends = |c: &Claim| match (d.op, indexing.cardinality) {
                (Op::Assert, Cardinality::One) => c.agent == d.provenance.agent,
                (Op::Assert, Cardinality::Many) | (Op::Retract, _) => c.value == d.value,
            };
            let mut kept = Vec::with_capacity(claims.len());
            for c in claims.drain(..) {
                if ends(&c) {
                    if index.end(&scope, &c.fact, tx)? {
                        fed.ended += 1;
                    }
                } else {
                    kept.push(c);
                }
            }
            *claims = kept;
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
            let added = match &d.value {
                Value::String(text) if indexing.searchable => {
                    index.add_text(&scope, fact.clone(), text, meta())?
                }
                Value::Vector(v) if indexing.searchable => {
                    index.add_vector(&scope, fact.clone(), v, meta())?
                }
                Value::Ref(target) => index.add_edge(&scope, fact.clone(), *target)?,
                _ => false,
            };
            let kind = match &d.value {
                Value::Keyword(k) | Value::String(k) if d.attribute.as_str() == MEMORY_KIND => {
                    index.add_kind(&scope, fact.clone(), k)?
                }
                _ => false,
            };
            if added || kind {
                fed.added += 1;
            }
            claims.push(Claim {
                agent: d.provenance.agent.clone(),
                value: d.value.clone(),
                fact,
            });
        }
        Ok(fed)
    }
}
