//! The shape the graph and the kind index share: per scope, the facts fed in feed order, each
//! with its item and the transactions it held between, found by the fact that asserted it
//! (to end it) and by the entities it touches (to answer).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

use engram_types::{EntityId, TxId};

use crate::types::{FactRef, Held, Scope};

#[derive(Serialize, Deserialize)]
pub(crate) struct Ledger<T> {
    shelves: HashMap<Scope, Shelf<T>>,
}

#[derive(Serialize, Deserialize)]
struct Shelf<T> {
    rows: Vec<Row<T>>,
    by_fact: HashMap<FactRef, u32>,
    /// Entity → its rows, in the order they were added.
    by_entity: HashMap<EntityId, Vec<u32>>,
}

/// One fact's item, and when it held.
#[derive(Serialize, Deserialize)]
pub(crate) struct Row<T> {
    pub(crate) held: Held,
    pub(crate) item: T,
}

impl<T> Default for Ledger<T> {
    fn default() -> Ledger<T> {
        Ledger {
            shelves: HashMap::new(),
        }
    }
}

impl<T> Ledger<T> {
    /// Records `item`, asserted by `fact` (holding from its transaction on), under each of
    /// `entities` once. Returns whether it was new.
    pub(crate) fn add(&mut self, scope: &Scope, fact: FactRef, entities: &[EntityId], item: T) -> bool {
        let shelf = self.shelves.entry(scope.clone()).or_insert_with(|| Shelf {
            rows: Vec::new(),
            by_fact: HashMap::new(),
            by_entity: HashMap::new(),
        });
        if shelf.by_fact.contains_key(&fact) {
            return false;
        }
        let Ok(id) = u32::try_from(shelf.rows.len()) else {
            return false;
        };
        for (i, entity) in entities.iter().enumerate() {
            if !entities[..i].contains(entity) {
                shelf.by_entity.entry(*entity).or_default().push(id);
            }
        }
        shelf.rows.push(Row {
            held: Held::since(fact.tx),
            item,
        });
        shelf.by_fact.insert(fact, id);
        true
    }

    /// Records that what `fact` asserted no longer holds from `at` on. False when the fact is
    /// unknown or had already ended.
    pub(crate) fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> bool {
        let Some(shelf) = self.shelves.get_mut(scope) else {
            return false;
        };
        shelf
            .by_fact
            .get(fact)
            .and_then(|&id| shelf.rows.get_mut(id as usize))
            .is_some_and(|row| row.held.end(at))
    }

    /// The rows listed under `entity`, in the order they were added, ended ones included.
    pub(crate) fn touching<'a>(
        &'a self,
        scope: &Scope,
        entity: EntityId,
    ) -> impl Iterator<Item = &'a Row<T>> + 'a {
        let shelf = self.shelves.get(scope);
        shelf
            .and_then(|s| s.by_entity.get(&entity))
            .into_iter()
            .flatten()
            .filter_map(move |id| shelf.and_then(|s| s.rows.get(*id as usize)))
    }

    /// How many facts were ever recorded, across scopes.
    pub(crate) fn len(&self) -> usize {
        self.shelves.values().map(|s| s.rows.len()).sum()
    }
}
