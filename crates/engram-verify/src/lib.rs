//! Engram's portable audit export and the offline verifier.
//!
//! An export ([`format`](mod@crate::format)) is one streamed file holding a node's whole audit chain as it was
//! stored: every signed entry, each transaction's datoms, the node's signed checkpoints, behind
//! a magic string and a format version. [`verify_export`] checks it with nothing else at hand
//! but, optionally, the genesis keys or a checkpoint pinned earlier:
//!
//! * every entry: index, link to its predecessor, tx order and time, and coverage: an
//!   attestation at or after it (a node signs once per apply group, the group's last entry),
//!   each by a key the chain trusts at that point (engram-audit's `ChainVerifier`, key changes
//!   included);
//! * every transaction's datoms against the content hash its entry records, and that each
//!   datom belongs to that transaction;
//! * the Merkle tree of the entries against every checkpoint's root, and every checkpoint's
//!   signature against the key history (unknown, rotated-out or revoked signers are refused);
//! * every transaction an agent signed: its signature against the agent key the chain's own
//!   policy registered at that entry, and the signed request (an `R` record) against the
//!   transaction's datoms (`authorship`);
//! * the pinned checkpoint, if any: the export must contain it (same root at its size), which
//!   exposes a truncated tail or a rewritten history even when the export is self-consistent.
//!
//! A failure names the chain index, the field and the byte offset of the record; with
//! `all` every failure is listed. A file that cannot be read as an export (wrong magic, a
//! future format version, I/O) is a [`VerifyError`], distinct from a failed check.
//!
//! Must not depend on: storage, networking, an async runtime or a clock. Writing an export
//! from a store is the core crate's job; this crate only defines and checks the format.

mod authorship;
pub mod format;
mod verifier;

pub use authorship::MAX_SIGNING_SKEW_MS;
pub use format::{EXPORT_FORMAT_VERSION, ExportReader, ExportWriter, OpenError, Record};
pub use verifier::{
    Failure, KeyReport, RedactedReport, Report, VerifyError, VerifyOptions, leaf_hash, verify_export,
};
