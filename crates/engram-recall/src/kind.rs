//! Which kind of memory each entity is, as of any transaction: the `:memory/kind` claims (see
//! the agent-memory schema), so a query can ask for preferences only, or blockers only.
//!
//! An entity may hold several kinds at once (two agents' claims, or a cardinality-many
//! attribute); it passes a kind filter when any of them is asked for.

use engram_types::{EntityId, TxId};
use serde::{Deserialize, Serialize};

use crate::ledger::Ledger;
use crate::types::{FactRef, Scope};

/// The attribute whose keyword (or string) values say what kind of memory an entity is.
pub const MEMORY_KIND: &str = ":memory/kind";

/// Each claim's kind, listed under the entity it is about.
#[derive(Default, Serialize, Deserialize)]
pub(crate) struct Kinds {
    claims: Ledger<String>,
}

impl Kinds {
    /// Records that `fact` says its entity is of `kind`. Returns whether it was new.
    pub(crate) fn add(&mut self, scope: &Scope, fact: FactRef, kind: &str) -> bool {
        let entity = fact.entity;
        self.claims.add(scope, fact, &[entity], kind.to_string())
    }

    /// Records that the kind `fact` claimed no longer holds from `at` on.
    pub(crate) fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> bool {
        self.claims.end(scope, fact, at)
    }

    /// Whether `entity` holds one of `kinds` at `as_of`.
    pub(crate) fn is_any(&self, scope: &Scope, entity: EntityId, as_of: TxId, kinds: &[String]) -> bool {
        self.claims
            .touching(scope, entity)
            .any(|c| c.held.at(as_of) && kinds.contains(&c.item))
    }
}
