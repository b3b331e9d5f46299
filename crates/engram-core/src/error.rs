use engram_storage::StorageError;
use thiserror::Error;

/// Failures of the state machine itself (never of the client's input, which is a
/// [`crate::Rejection`]). Both are fatal to the node: its disk is failing or corrupt.
#[derive(Debug, Error)]
pub enum CoreError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("corrupt state at {what}: {reason}")]
    Corrupt { what: String, reason: String },
    /// The chain revoked this node's signing key: the node attests nothing after the revoking
    /// entry, so it stops applying rather than store entries no verifier would accept. It
    /// cannot rotate a revoked key; it must be removed and added back with a new key.
    #[error(
        "this node's signing key {key_id} was revoked by audit entry {revoked_at}, so it attests no later entry (entry {index} is next): remove this node from the cluster and add it back with a new key"
    )]
    SigningKeyRevoked {
        key_id: String,
        revoked_at: u64,
        index: u64,
    },
    /// The log asks audit entry `index` to record the state root, but this node's state
    /// commitment does not cover its whole store (a store from before it, not rebuilt).
    #[error(
        "audit entry {index} records the state root, but this node's store has no complete state commitment: start the node with `engram serve`, which rebuilds it once before applying"
    )]
    StateCommitmentIncomplete { index: u64 },
}

impl CoreError {
    pub fn corrupt(what: impl Into<String>, reason: impl ToString) -> CoreError {
        CoreError::Corrupt {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}
