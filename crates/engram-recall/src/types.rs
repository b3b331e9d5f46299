//! The shapes every part of the crate shares: what a fact is called, what is known about it,
//! what a query asks, what a hit says, and the errors. Nothing here depends on the rest of
//! the crate.

use engram_types::{Attribute, BranchName, EntityId, Namespace, Status, TxId};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Most hits one query may ask for.
pub const MAX_K: usize = 100;

/// Longest query text, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;

/// Most ref hops a graph expansion may walk.
pub const MAX_HOPS: usize = 3;

/// Hops walked when the wire request does not say (the library's [`Query::default`] walks
/// none).
pub const DEFAULT_HOPS: usize = 1;

/// Where facts live: a namespace, on main (`None`) or on a branch. Each scope has its own
/// index and its own statistics, so one namespace's words never weigh on another's ranking.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Scope {
    pub namespace: Namespace,
    pub branch: Option<BranchName>,
}

/// The assertion a hit points at: the datom `seq` of transaction `tx`, which asserted a value
/// of `attribute` for `entity`. Its inclusion proof is the proof of transaction `tx`.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FactRef {
    pub tx: TxId,
    pub seq: u32,
    pub entity: EntityId,
    pub attribute: Attribute,
}

/// What the filters and the priors read about a fact, copied from its datom.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct FactMeta {
    pub agent: String,
    pub status: Status,
    /// In `[0, 1]`.
    pub confidence: f64,
    /// Transaction time of the asserting transaction, ns since the epoch.
    pub tx_time_ns: i64,
    /// The fact's valid-time interval: from, and the exclusive end (`None`: open-ended).
    pub valid_from_ns: i64,
    pub valid_to_ns: Option<i64>,
}

/// Which facts a query may return. Empty lists mean "any".
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Filter {
    pub attributes: Vec<Attribute>,
    pub agents: Vec<String>,
    pub statuses: Vec<Status>,
    /// Only facts whose valid time overlaps `[from, to)`.
    pub valid_between_ns: Option<(i64, i64)>,
    /// Only facts of entities that are one of these kinds of memory at the query's
    /// transaction (their `:memory/kind`, e.g. `:memory.kind/preference`). Applies to what
    /// every signal finds, the graph's starting points included.
    pub kinds: Vec<String>,
    /// Leave out the facts of entities that had expired by this instant (nanoseconds since
    /// the Unix epoch), by the `:memory/expires` claims holding at the query's transaction;
    /// `None`: expiry is not applied. Like `kinds`, it applies to what every signal finds.
    pub expired_at_ns: Option<i64>,
}

impl Filter {
    /// Whether the fact passes every filter.
    pub fn admits(&self, fact: &FactRef, meta: &FactMeta) -> bool {
        (self.attributes.is_empty() || self.attributes.contains(&fact.attribute)) && self.admits_meta(meta)
    }

    /// Whether the fact passes every filter but the attribute list (which says what is
    /// returned, not what may lead to it).
    pub fn admits_meta(&self, meta: &FactMeta) -> bool {
        (self.agents.is_empty() || self.agents.contains(&meta.agent))
            && (self.statuses.is_empty() || self.statuses.contains(&meta.status))
            && self.valid_between_ns.is_none_or(|(from, to)| {
                meta.valid_from_ns < to && meta.valid_to_ns.is_none_or(|end| from < end)
            })
    }
}

/// One search: words and or a vector, the transaction it is answered as of, how many hits,
/// which facts, how far along refs to look.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Query {
    /// Words to find (may be empty when `vector` is given).
    pub text: String,
    /// A query embedding: nearest neighbours among the vectors of its dimension.
    pub vector: Option<Vec<f32>>,
    /// Ref hops walked from the best hits (0: no graph expansion), at most [`MAX_HOPS`].
    pub hops: usize,
    /// The answer is what an index fed the log up to and including this transaction gives.
    pub as_of: TxId,
    pub k: usize,
    pub filter: Filter,
}

/// When an indexed fact (a text, a vector, an edge) holds: from the transaction that asserted
/// it until the one that ended it, if any. Every index keeps one per fact, so an as-of query
/// reads exactly what held then. Sixteen bytes, kept apart from the facts themselves, so a scan
/// over a common word's postings or a scope's vectors reads little memory per fact.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Held {
    from: TxId,
    /// `OPEN` while it holds: a log index never reaches it.
    to: TxId,
}

const OPEN: TxId = TxId(u64::MAX);

impl Held {
    pub(crate) fn since(from: TxId) -> Held {
        Held { from, to: OPEN }
    }

    pub(crate) fn at(&self, as_of: TxId) -> bool {
        self.from <= as_of && as_of < self.to
    }

    /// Whether it had begun by `as_of` (whether or not it still held).
    pub(crate) fn begun_by(&self, as_of: TxId) -> bool {
        self.from <= as_of
    }

    /// Ends it at `at` (never before it began). False when it had already ended.
    pub(crate) fn end(&mut self, at: TxId) -> bool {
        if self.to != OPEN {
            return false;
        }
        // Below `OPEN` whatever `at` is, so an ended fact never reads as holding again.
        self.to = at.max(self.from).min(TxId(u64::MAX - 1));
        true
    }
}

/// A ranked signal that can find or order facts.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Signal {
    /// BM25 over the words of string values.
    Text,
    /// Cosine similarity of a vector value to the query vector.
    Vector,
    /// Ref hops from the best text and vector hits.
    Graph,
    /// Newest transaction first.
    Recency,
    /// Verified before candidate, then higher confidence first.
    Prior,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Text => "text",
            Signal::Vector => "vector",
            Signal::Graph => "graph",
            Signal::Recency => "recency",
            Signal::Prior => "prior",
        }
    }
}

/// A fact a signal ranked, with its score under that signal (BM25 for text).
#[derive(Clone, PartialEq, Debug)]
pub struct Scored {
    pub fact: FactRef,
    pub score: f64,
}

/// A fused hit: its reciprocal-rank-fusion score and, for each signal that ranked it, its rank
/// there (1 is first).
#[derive(Clone, PartialEq, Debug)]
pub struct Hit {
    pub fact: FactRef,
    pub score: f64,
    pub found_by: Vec<(Signal, usize)>,
}

#[derive(Debug, Error, PartialEq)]
pub enum RecallError {
    /// A query field is out of range; names the field, as the wire error will.
    #[error("{field}: {reason}")]
    InvalidQuery { field: &'static str, reason: String },
    /// The index was fed out of order. It is derived state: rebuild it from the datoms.
    #[error("recall index fed out of order: transaction {got} after {last}")]
    OutOfOrder { last: u64, got: u64 },
    /// A transaction fed does not hang together (its datoms name another transaction).
    #[error("recall index fed a malformed transaction: {0}")]
    Feed(String),
}

impl RecallError {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> RecallError {
        RecallError::InvalidQuery {
            field,
            reason: reason.into(),
        }
    }
}
