//! Engram's recall indexes: how an agent finds facts without knowing their ids.
//!
//! - [`TextIndex`]: BM25 over the words of string values, per scope (namespace and branch),
//!   answerable as of any transaction with the statistics of that transaction, so an as-of
//!   search returns exactly what an index fed the log up to it would.
//! - the vector index: nearest neighbours of a query embedding by cosine similarity, exact
//!   for narrow vectors and small sets, and past that an 8-bit first pass re-ranked exactly
//!   (the client computes embeddings; nothing here knows a model);
//! - the ref graph: which entity points at which, walked from the best hits;
//! - the kinds: which kind of memory each entity is (`:memory/kind`), for the kind filter;
//! - the expiries: when each entity stops being worth recalling (`:memory/expires`), so a
//!   search as of now leaves expired memories out;
//! - [`RecallIndex`]: the five together, and [`RecallIndex::recall`], which fuses text,
//!   vector, graph, recency and the priors (verified, confidence) by reciprocal rank fusion
//!   ([`fuse`]); every hit says which signals ranked it and where.
//!
//! - [`Feeder`]: turns committed transactions into the index's additions and endings, by the
//!   rule Engram's current claims follow (an agent's newer claim replaces its older one under
//!   cardinality one; a retraction ends every claim of its value).
//!
//! - [`save`] and [`load`]: an index and its feeder as checked bytes, so a node that restarts
//!   takes its index from its last save and feeds it only what was applied since.
//!
//! The indexes are derived, node-local state: fed the committed log in transaction order and
//! rebuilt from the datoms, never part of the audit chain or the replica digest. Everything
//! here is deterministic (no clock, no randomness, ties broken by fact), so two nodes fed the
//! same log answer the same query the same way.
//!
//! Depends on `engram-types` (and serde, postcard and blake3 for saves) only: no storage, no
//! Raft, no server. Feeding the index from the state machine, and keeping its saves in files,
//! lives above.

mod expiry;
mod feed;
mod fuse;
mod graph;
mod index;
mod kind;
mod ledger;
mod saved;
mod text;
mod tokenize;
mod types;
mod vector;

pub use expiry::MEMORY_EXPIRES;
pub use feed::{Fed, Feeder, Indexing};
pub use fuse::{RRF_K, Ranking, fuse};
pub use index::{HOP_DECAY, RecallIndex, Sizes, WEIGHTS};
pub use kind::MEMORY_KIND;
pub use saved::{SAVED_FORMAT, SavedAt, SavedError, load, save};
pub use text::TextIndex;
pub use tokenize::{MAX_TOKEN_CHARS, tokens};
pub use types::{
    DEFAULT_HOPS, FactMeta, FactRef, Filter, Hit, MAX_HOPS, MAX_K, MAX_QUERY_BYTES, Query, RecallError,
    Scope, Scored, Signal,
};
