//! The bitemporal ref graph: which entities point at which, through which attribute, between
//! which transactions. Recall walks it from its best hits to find the entities around them (a
//! task's project, a note's author), in both directions.

use std::collections::HashMap;

use engram_types::{Attribute, EntityId, TxId};

use crate::types::{FactRef, Held, Scope};

#[derive(Default)]
pub(crate) struct Graph {
    shelves: HashMap<Scope, Shelf>,
}

#[derive(Default)]
struct Shelf {
    edges: Vec<Edge>,
    by_fact: HashMap<FactRef, u32>,
    /// Entity → the edges that start or end at it, in the order they were added.
    touching: HashMap<EntityId, Vec<u32>>,
}

struct Edge {
    /// The ref assertion: its entity is the source, its attribute the edge's label.
    fact: FactRef,
    target: EntityId,
    held: Held,
}

impl Graph {
    /// Records the edge `fact.entity → target` asserted by `fact`. Returns whether it was new.
    pub(crate) fn add(&mut self, scope: &Scope, fact: FactRef, target: EntityId) -> bool {
        let shelf = self.shelves.entry(scope.clone()).or_default();
        if shelf.by_fact.contains_key(&fact) {
            return false;
        }
        let Ok(id) = u32::try_from(shelf.edges.len()) else {
            return false;
        };
        shelf.touching.entry(fact.entity).or_default().push(id);
        if target != fact.entity {
            shelf.touching.entry(target).or_default().push(id);
        }
        shelf.by_fact.insert(fact.clone(), id);
        shelf.edges.push(Edge {
            held: Held::since(fact.tx),
            fact,
            target,
        });
        true
    }

    /// Records that the edge `fact` asserted no longer holds from `at` on.
    pub(crate) fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> bool {
        let Some(shelf) = self.shelves.get_mut(scope) else {
            return false;
        };
        let Some(edge) = shelf
            .by_fact
            .get(fact)
            .and_then(|&id| shelf.edges.get_mut(id as usize))
        else {
            return false;
        };
        edge.held.end(at)
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
        let Some(shelf) = self.shelves.get(scope) else {
            return Vec::new();
        };
        let mut out: Vec<EntityId> = Vec::new();
        for id in shelf.touching.get(&entity).into_iter().flatten() {
            let Some(edge) = shelf.edges.get(*id as usize) else {
                continue;
            };
            if !edge.held.at(as_of) || !follow(&edge.fact.attribute) {
                continue;
            }
            let other = if edge.fact.entity == entity {
                edge.target
            } else {
                edge.fact.entity
            };
            if other != entity && !out.contains(&other) {
                out.push(other);
            }
        }
        out
    }

    /// How many edges were ever recorded, across scopes.
    pub(crate) fn edges(&self) -> usize {
        self.shelves.values().map(|s| s.edges.len()).sum()
    }
}
