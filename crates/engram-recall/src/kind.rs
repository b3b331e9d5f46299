//! Which kind of memory each entity is, as of any transaction: the `:memory/kind` claims (see
//! the agent-memory schema), so a query can ask for preferences only, or blockers only.
//!
//! An entity may hold several kinds at once (two agents' claims, or a cardinality-many
//! attribute); it passes a kind filter when any of them is asked for.

use std::collections::HashMap;

use engram_types::{EntityId, TxId};

use crate::types::{FactRef, Held, Scope};

/// The attribute whose keyword (or string) values say what kind of memory an entity is.
pub const MEMORY_KIND: &str = ":memory/kind";

#[derive(Default)]
pub(crate) struct Kinds {
    shelves: HashMap<Scope, Shelf>,
}

#[derive(Default)]
struct Shelf {
    claims: Vec<KindClaim>,
    by_fact: HashMap<FactRef, u32>,
    by_entity: HashMap<EntityId, Vec<u32>>,
}

struct KindClaim {
    kind: String,
    held: Held,
}

impl Kinds {
    /// Records that `fact` says its entity is of `kind`. Returns whether it was new.
    pub(crate) fn add(&mut self, scope: &Scope, fact: FactRef, kind: &str) -> bool {
        let shelf = self.shelves.entry(scope.clone()).or_default();
        if shelf.by_fact.contains_key(&fact) {
            return false;
        }
        let Ok(id) = u32::try_from(shelf.claims.len()) else {
            return false;
        };
        shelf.by_entity.entry(fact.entity).or_default().push(id);
        shelf.claims.push(KindClaim {
            kind: kind.to_string(),
            held: Held::since(fact.tx),
        });
        shelf.by_fact.insert(fact, id);
        true
    }

    /// Records that the kind `fact` claimed no longer holds from `at` on.
    pub(crate) fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> bool {
        let Some(shelf) = self.shelves.get_mut(scope) else {
            return false;
        };
        let Some(claim) = shelf
            .by_fact
            .get(fact)
            .and_then(|&id| shelf.claims.get_mut(id as usize))
        else {
            return false;
        };
        claim.held.end(at)
    }

    /// Whether `entity` holds one of `kinds` at `as_of`.
    pub(crate) fn is_any(&self, scope: &Scope, entity: EntityId, as_of: TxId, kinds: &[String]) -> bool {
        let Some(shelf) = self.shelves.get(scope) else {
            return false;
        };
        shelf
            .by_entity
            .get(&entity)
            .into_iter()
            .flatten()
            .filter_map(|id| shelf.claims.get(*id as usize))
            .any(|c| c.held.at(as_of) && kinds.contains(&c.kind))
    }
}
