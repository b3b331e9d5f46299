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
}

impl CoreError {
    pub fn corrupt(what: impl Into<String>, reason: impl ToString) -> CoreError {
        CoreError::Corrupt {
            what: what.into(),
            reason: reason.to_string(),
        }
    }
}
