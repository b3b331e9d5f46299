//! The audit chain: one entry per committed transaction (and per membership change), each
//! naming the hash of the one before, each attested by the Ed25519 key of the node that
//! applied it.
//!
//! The **hashed content** of an entry ([`AuditEntry`]) is identical on every replica: it is a
//! pure function of the log. The **attestation** ([`Attestation`]) is per replica: each node
//! signs the entry hash with its own key, so the signer is not part of what is hashed. The
//! keys a verifier trusts are themselves recorded in the chain: every membership entry lists
//! the members' public keys, the first of them (genesis) included, so an export can be checked
//! with nothing but the chain itself and the genesis key set.
//!
//! Must not depend on: storage, networking, an async runtime or a clock. Verification is a
//! pure function of the entries given to it.

mod access_event;
mod batch;
mod bisect;
mod chain;
mod checkpoint;
mod entry;
mod keys;

pub use access_event::{
    ACCESS_FORMAT_VERSION, ACCESS_REFUSAL_FORMAT_VERSION, AccessEvent, AccessFault, AccessLogVerifier,
    Refusal, SignedAccessEvent,
};
pub use bisect::Bisect;
pub use chain::{ChainError, ChainFault, ChainVerifier, KeyRecord, apply_key_change};
pub use checkpoint::{
    Checkpoint, CheckpointError, NoteSignature, SignedCheckpoint, note_key_hash, note_key_name, verifier_key,
};
pub use entry::{
    AUDIT_FORMAT_STATE_ROOT, AUDIT_FORMAT_VERSION, Attestation, AuditEntry, Author, EntryKind,
    GENESIS_PREV_HASH, KeyAction, KeyChangeRequest, SignedEntry, key_statement, tx_content_hash,
};
pub use keys::{KeyId, KeyRing, KeyRingListener, NodeKey, PublicKey, Verifier, verify_all_by};
