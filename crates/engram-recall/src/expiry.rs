//! When each entity stops being worth recalling, as of any transaction: the `:memory/expires`
//! claims (an instant, see the agent-memory schema), so a search "as of now" leaves expired
//! memories out and one as of an earlier point still finds them.
//!
//! An entity may hold several expiry claims at once (two agents' claims): it is expired only
//! when every one of them has passed. A memory stays recallable while any agent still says it
//! is worth recalling; the agent who disagrees retracts or replaces its claim.

use engram_types::{EntityId, TxId};
use serde::{Deserialize, Serialize};

use crate::ledger::Ledger;
use crate::types::{FactRef, Scope};

pub use engram_types::MEMORY_EXPIRES;

/// Each claim's instant (nanoseconds since the Unix epoch), listed under its entity.
#[derive(Default, Serialize, Deserialize)]
pub(crate) struct Expiries {
    claims: Ledger<i64>,
}

impl Expiries {
    /// Records that `fact` says its entity expires at `at_ns`. Returns whether it was new.
    pub(crate) fn add(&mut self, scope: &Scope, fact: FactRef, at_ns: i64) -> bool {
        let entity = fact.entity;
        self.claims.add(scope, fact, &[entity], at_ns)
    }

    /// Records that the expiry `fact` claimed no longer holds from `at` on.
    pub(crate) fn end(&mut self, scope: &Scope, fact: &FactRef, at: TxId) -> bool {
        self.claims.end(scope, fact, at)
    }

    /// Whether `entity`, as the claims holding at `as_of` say, had expired by `now_ns`: it
    /// holds at least one expiry claim, and every one of them is at or before `now_ns`.
    pub(crate) fn expired(&self, scope: &Scope, entity: EntityId, as_of: TxId, now_ns: i64) -> bool {
        let mut latest: Option<i64> = None;
        for c in self.claims.touching(scope, entity).filter(|c| c.held.at(as_of)) {
            latest = Some(latest.map_or(c.item, |l| l.max(c.item)));
        }
        latest.is_some_and(|at| at <= now_ns)
    }
}
