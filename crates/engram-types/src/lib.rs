//! Engram's data model: the vocabulary every other crate speaks.
//!
//! A **datom** is one immutable fact: (namespace, entity, attribute, value, op, valid time,
//! transaction, provenance). Datoms are never overwritten; a retraction is a new datom. This
//! crate defines the datom and its parts as validated newtypes, the transaction request that
//! carries them into the log, and the **canonical encoding**: a versioned, length-prefixed
//! binary form whose blake3 hash is the datom's content address. The same datom yields the
//! same bytes and hash on every node and every code version that reads that format version.
//!
//! Must not depend on: any I/O, async runtime, storage engine, network or clock. Everything
//! here is a pure function of its inputs, so the state machine can build on it.

mod attribute;
pub mod codec;
mod datom;
mod error;
mod excerpt;
mod hash;
mod ids;
mod namespace;
pub mod query;
pub mod redact;
pub mod redact_where;
pub mod resolve;
mod schema;
pub mod slot;
mod tx;
mod tx_codec;
mod value;

pub use attribute::Attribute;
pub use datom::{Datom, Op, Provenance, Status, salt_of, value_commitment};
pub use error::{DecodeError, ValidationError};
pub use excerpt::{EXCERPT_MAX_BYTES, Excerpt, clip, excerpt};
pub use hash::Hash;
pub use ids::{EntityId, TxId};
pub use namespace::Namespace;
pub use redact::{REDACT_REQUEST_FORMAT_VERSION, RedactPart, RedactRequest};
pub use redact_where::{Predicate, RedactRange, RedactWhere, RetentionRule};
pub use schema::{AttributeDef, BranchName, BranchOp, Cardinality, Unique};
pub use tx::{EntityRef, Precondition, TxOp, TxReceipt, TxRequest};
pub use tx_codec::{
    CommittedPrecondition, KeptRequest, SaltCount, TRANSACT_METHOD, TX_REQUEST_FORMAT_COMMITTED,
    TX_REQUEST_FORMAT_SALTED, TX_REQUEST_FORMAT_VERSION,
};
pub use value::{
    MAX_VECTOR_DIMENSION, Redacted, Value, ValueType, check_json_numbers, check_vector, inexact_json_numbers,
};

/// Format version of the canonical datom encoding. Bumped only with a new decoder arm, never
/// by changing what an existing version means.
pub const DATOM_FORMAT_VERSION: u8 = 1;

/// Format version of a datom written on a branch: version 1 with the branch name after the
/// namespace. Datoms on main keep version 1, so their bytes and hashes are unchanged.
pub const DATOM_FORMAT_VERSION_BRANCH: u8 = 2;

/// The stored form of a redacted datom (of either version above): the version byte, the
/// datom's kept hash, whether a branch follows, then the fields of version 1 or 2 with the
/// value replaced by its [`Redacted`] marker. It is a stored form only, never hashed: the
/// kept hash is the datom's hash.
pub const DATOM_FORMAT_REDACTED: u8 = 3;

/// Format version of a datom on main whose value is committed to with a salt: version 1 with
/// the datom's [`Salt`] between the attribute and the value. The salt is part of what is
/// hashed, so the kept hash of a redacted datom cannot be tested against guessed values
/// (`docs/AUDIT.md`, "Redaction's threat model"); it is destroyed with the value.
pub const DATOM_FORMAT_SALTED: u8 = 4;

/// [`DATOM_FORMAT_SALTED`] for a datom written on a branch (version 2 with the salt).
pub const DATOM_FORMAT_SALTED_BRANCH: u8 = 5;

/// Bytes of a datom's salt.
pub const SALT_BYTES: usize = 16;

/// A datom's salt: chosen at random (derived from the seed the leader puts in the log entry,
/// [`salt_of`]), never derived from anything a reader of the chain could know.
pub type Salt = [u8; SALT_BYTES];

/// Largest string, keyword, bytes or json payload of one value, in bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// The agent-memory schema's attribute whose instant says when a memory stops being worth
/// recalling: reads and searches of the current state leave the entity out once every such
/// claim it holds has passed (`docs/FORGETTING.md`). Read by the core's reads and the recall
/// index alike, so both name it from here.
pub const MEMORY_EXPIRES: &str = ":memory/expires";
