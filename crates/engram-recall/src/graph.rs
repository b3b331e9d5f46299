//! The bitemporal ref graph: which entities point at which, through which attribute, between
//! which transactions. Recall walks it from its best hits to find the entities around them (a
//! task's project, a note's author), in both directions.

use engram_types::{Attribute, EntityId, TxId};
use serde::{Deserialize, Serialize};

use crate::ledger::Ledger;
use crate::types::{FactRef, Scope};

/// Each edge listed under both of its ends.
#[derive(Default, Serialize, Deserialize)]
pub(crate) struct Graph {
    edges: Ledger<Edge>,
}

#[derive(Serialize, Deserialize)]
struct Edge {
    source: EntityId,
    /// The ref attribute: the edge's label.
    attribute: Attribute,
    target: EntityId,
}

impl Graph {
    /// Records the edge `fact.entity → target` asserted by `fact`. Returns whether it was new.
    pub(crate) fn add(&mut self, scope: &Scope, fact: FactRef, target: EntityId) -> bool {
        let edge = Edge {
            source: fact.entity,
            attribute: fact.attribute.clone(),
            target,
        };
        self.edges.add(scope, fact, &[edge.source, target], edge)
    }

    /// Records that the edge `fact` asserted no longer holds from `at` on.
    pub(crate) fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> bool {
        self.edges.end(scope, fact, at)
    }

    /// The entities one hop from `entity` at `as_of`, either way along an edge whose attribute
    /// `follow` accepts; in the order the edges were added, each once.
    pub(crate) fn neighbours(
        &self,
        scope: &Scope,
        entity: EntityId,
        as_of: TxId,
        follow: &dyn Fn(&Attribute) -> bool,
    ) -> Vec<EntityId> {
        let mut out: Vec<EntityId> = Vec::new();
        for row in self.edges.touching(scope, entity) {
            let edge = &row.item;
            if !row.held.at(as_of) || !follow(&edge.attribute) {
                continue;
            }
            let other = if edge.source == entity {
                edge.target
            } else {
                edge.source
            };
            if other != entity && !out.contains(&other) {
                out.push(other);
            }
        }
        out
    }

    /// How many edges were ever recorded, across scopes.
    pub(crate) fn edges(&self) -> usize {
        self.edges.len()
    }
}
