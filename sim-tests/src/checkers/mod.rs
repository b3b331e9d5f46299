//! Named invariant checkers, one per file, each documenting its property (I1–I8 of the design
//! brief) and returning every violation it finds with the replica and the exact index.
//!
//! Cheap checks also run continuously while faults fire ([`monitor`]); all of them run at the
//! end over the recorded history and the final state of every replica.

pub mod acked_durable;
pub mod asof_stable;
pub mod audit_verifies;
pub mod branches_durable;
pub mod chain_continuity;
pub mod forgotten;
pub mod linearizable;
pub mod liveness;
pub mod monitor;
pub mod no_partial_apply;
pub mod peer_auth;
pub mod purged;
pub mod replica_agreement;
pub mod retention;
pub mod search_agrees;
pub mod sessions;
pub mod signatures_valid;
pub mod state_consistent;
pub mod tx_time_monotonic;
pub mod watch_complete;

use std::collections::BTreeMap;
use std::fmt;

use engram_core::inspect::{self, StoredEntry, TxDatoms};
use engram_storage::Store;
use engram_types::{Hash, TxId};

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The checker's name, e.g. `I1 chain-continuity`.
    pub checker: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.checker, self.detail)
    }
}

impl Violation {
    pub fn new(checker: &'static str, detail: impl Into<String>) -> Violation {
        Violation {
            checker,
            detail: detail.into(),
        }
    }
}

/// An entity's datoms on main as one replica holds them, or `checker`'s violation saying why
/// they cannot be read.
pub fn entity_datoms(
    checker: &'static str,
    node: u64,
    store: &dyn Store,
    ns: &engram_types::Namespace,
    entity: u64,
) -> Result<Vec<engram_types::Datom>, Violation> {
    engram_core::reads::entity_datoms(store, ns, engram_types::EntityId(entity))
        .map_err(|e| Violation::new(checker, format!("node {node}: reading entity {entity}: {e}")))
}

/// One replica's final state, read straight from its store.
pub struct Replica {
    pub node: u64,
    /// Whether the node is a member (voter or learner) of the final configuration.
    pub member: bool,
    pub applied_index: u64,
    pub entries: Vec<StoredEntry>,
    pub datoms: BTreeMap<TxId, TxDatoms>,
    pub digest: Hash,
    /// The replica's audit export as the offline verifier judges it (`Err`: it could not be
    /// written or read at all).
    pub audit: Result<engram_verify::Report, String>,
}

impl Replica {
    /// Reads a replica. A store that cannot even be read is itself a violation.
    pub fn read(node: u64, member: bool, store: &dyn Store) -> Result<Replica, Violation> {
        let fail =
            |what: &str, e: String| Violation::new("store-readable", format!("node {node}: {what}: {e}"));
        Ok(Replica {
            node,
            member,
            applied_index: engram_raft::applied_index(store)
                .map_err(|e| fail("applied index", e.to_string()))?,
            entries: inspect::stored_audit_entries(store).map_err(|e| fail("audit rows", e.to_string()))?,
            datoms: inspect::datoms_by_tx(store).map_err(|e| fail("datoms", e.to_string()))?,
            digest: inspect::state_digest(store).map_err(|e| fail("state digest", e.to_string()))?,
            audit: audit_report(node, store),
        })
    }

    /// The entry hashes by index, for entries that decode.
    pub fn entry_hashes(&self) -> BTreeMap<u64, Hash> {
        self.entries
            .iter()
            .filter_map(|s| s.entry.as_ref().ok().map(|e| (s.index, e.entry.hash())))
            .collect()
    }
}

/// Exports a replica's chain and runs the offline verifier over it, exactly as `engram audit
/// verify --data-dir` does, listing every failure.
fn audit_report(node: u64, store: &dyn Store) -> Result<engram_verify::Report, String> {
    let mut bytes = Vec::new();
    engram_core::export::write_export(store, &mut bytes, node, |_, _| {}).map_err(|e| e.to_string())?;
    let options = engram_verify::VerifyOptions {
        all: true,
        ..Default::default()
    };
    engram_verify::verify_export(bytes.as_slice(), &options, |_, _| {}).map_err(|e| e.to_string())
}
