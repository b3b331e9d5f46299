//! The one place where errors become gRPC statuses. Handlers return [`ApiError`]; nothing else
//! builds a `Status` from a domain error.

use engram_audit::ChainError;
use engram_core::reads::ReadError;
use engram_core::{CoreError, Rejection};
use engram_proto::WireError;
use engram_raft::NodeError;
use tonic::{Code, Status};

/// How long a client should wait before retrying an UNAVAILABLE answer, sent as the
/// `retry-after-ms` response metadata.
pub const RETRY_AFTER_MS: u64 = 250;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("transaction is {bytes} bytes, above the limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
    #[error("transaction rejected: {0}")]
    Rejected(Rejection),
    #[error("{0}")]
    NotFound(String),
    #[error("out of range: {0}")]
    OutOfRange(String),
    #[error("{0}")]
    Conflict(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("audit chain corrupt: {0}")]
    Chain(#[from] ChainError),
    #[error("internal error: {0}")]
    Internal(String),
    /// The leader's answer to a forwarded request, passed through as it came.
    #[error("{}", .0.message())]
    Forwarded(Status),
}

impl From<WireError> for ApiError {
    fn from(e: WireError) -> Self {
        ApiError::Invalid(e.to_string())
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Corrupt { .. } => ApiError::Internal(format!("storage corruption: {e}")),
            CoreError::Storage(_) => ApiError::Internal(e.to_string()),
        }
    }
}

impl From<engram_core::proofs::ProofReadError> for ApiError {
    fn from(e: engram_core::proofs::ProofReadError) -> Self {
        use engram_core::proofs::ProofReadError;
        match e {
            ProofReadError::OutOfRange(m) => ApiError::OutOfRange(m),
            ProofReadError::Proof(p) => ApiError::Internal(format!("Merkle proof over the stored tree: {p}")),
            ProofReadError::Core(c) => c.into(),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::UnknownEntity(_) | ReadError::UnknownBranch(_) => ApiError::NotFound(e.to_string()),
            ReadError::Core(c) => c.into(),
        }
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        match e {
            NodeError::NotLeader { .. } | NodeError::Unavailable(_) => ApiError::Unavailable(e.to_string()),
            NodeError::Rejected(m) => ApiError::Conflict(m),
            NodeError::Fatal(m) => ApiError::Internal(m),
        }
    }
}

impl ApiError {
    pub fn code(&self) -> Code {
        match self {
            ApiError::Invalid(_) => Code::InvalidArgument,
            ApiError::TooLarge { .. } => Code::ResourceExhausted,
            ApiError::Rejected(r) => match r {
                Rejection::PreconditionFailed { .. } | Rejection::NotCurrent { .. } => {
                    Code::FailedPrecondition
                }
                Rejection::UnknownEntity(_)
                | Rejection::UnknownBranch(_)
                | Rejection::LookupNotFound { .. } => Code::NotFound,
                Rejection::TypeMismatch { .. }
                | Rejection::UnknownAttribute(_)
                | Rejection::NotUnique(_)
                | Rejection::ForkInFuture { .. } => Code::InvalidArgument,
                Rejection::UniqueConflict { .. } | Rejection::BranchExists(_) => Code::AlreadyExists,
                Rejection::KeyChange(_)
                | Rejection::Deprecated(_)
                | Rejection::UnsafeMigration { .. }
                | Rejection::SchemaUnchanged
                | Rejection::BranchClosed { .. }
                | Rejection::MergeConflict { .. } => Code::FailedPrecondition,
            },
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::OutOfRange(_) => Code::OutOfRange,
            ApiError::Conflict(_) => Code::FailedPrecondition,
            ApiError::Unavailable(_) => Code::Unavailable,
            ApiError::Chain(_) => Code::DataLoss,
            ApiError::Internal(_) => Code::Internal,
            ApiError::Forwarded(s) => s.code(),
        }
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        if let ApiError::Forwarded(status) = e {
            return status;
        }
        let code = e.code();
        if matches!(code, Code::Internal | Code::DataLoss) {
            // Logged once, here, where it is turned into an answer.
            tracing::error!(error = %e, "request failed");
        }
        let mut status = Status::new(code, e.to_string());
        if code == Code::Unavailable
            && let Ok(v) = RETRY_AFTER_MS.to_string().parse()
        {
            status.metadata_mut().insert("retry-after-ms", v);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use engram_types::{Attribute, EntityId, ValueType};

    use super::*;

    #[test]
    fn codes_follow_the_api_contract() {
        let attr = Attribute::new(":a/b").unwrap();
        let cases = [
            (ApiError::Invalid("x".into()), Code::InvalidArgument),
            (ApiError::TooLarge { bytes: 2, limit: 1 }, Code::ResourceExhausted),
            (
                ApiError::Rejected(Rejection::PreconditionFailed {
                    entity: EntityId(1),
                    attribute: attr.clone(),
                    expected: None,
                    actual: None,
                }),
                Code::FailedPrecondition,
            ),
            (
                ApiError::Rejected(Rejection::UnknownEntity(EntityId(9))),
                Code::NotFound,
            ),
            (
                ApiError::Rejected(Rejection::TypeMismatch {
                    attribute: attr,
                    expected: ValueType::I64,
                    found: ValueType::String,
                }),
                Code::InvalidArgument,
            ),
            (
                ApiError::from(NodeError::Unavailable("no leader".into())),
                Code::Unavailable,
            ),
        ];
        for (err, code) in cases {
            let status = Status::from(err);
            assert_eq!(status.code(), code, "{status:?}");
        }
        let status = Status::from(ApiError::Unavailable("x".into()));
        assert_eq!(status.metadata().get("retry-after-ms").unwrap(), "250");
    }
}
