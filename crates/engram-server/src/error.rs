//! The one place where errors become gRPC statuses. Handlers return [`ApiError`]; nothing else
//! builds a `Status` from a domain error.
//!
//! Storage corruption (a block that fails its checksum, a row that does not decode) is
//! `DATA_LOSS`, with a message naming the space and key but no file path, and it is counted
//! here, where every error passes: [`corruptions_seen`] feeds `/metrics` and makes the node
//! not ready ([`storage_intact`]), since a damaged store must be repaired, not served from.

use std::sync::atomic::{AtomicU64, Ordering};

use engram_audit::ChainError;
use engram_core::cursor::CursorError;
use engram_core::reads::ReadError;
use engram_core::{CoreError, Rejection};
use engram_proto::WireError;
use engram_raft::NodeError;
use tonic::{Code, Status};

/// How long a client should wait before retrying an UNAVAILABLE answer, sent as the
/// `retry-after-ms` response metadata.
pub const RETRY_AFTER_MS: u64 = 250;

/// Longest status message sent, in bytes. The message travels in an HTTP/2 header
/// (`grpc-message`, percent-encoded, so up to three times longer); clients refuse header
/// blocks of a few tens of KiB, which would turn the answer into a transport error. Validation
/// messages quote bounded excerpts of the input (`engram_types::excerpt`); this cap is the last
/// resort for messages that still carry large values, such as a rejection naming a value.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 2048;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("transaction is {bytes} bytes, above the limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
    /// A bounded resource of the node (open watches of a principal) is in use to its limit.
    #[error("resource exhausted: {0}")]
    Exhausted(String),
    #[error("transaction rejected: {0}")]
    Rejected(Rejection),
    #[error("{0}")]
    NotFound(String),
    #[error("out of range: {0}")]
    OutOfRange(String),
    /// A proof was asked of a state this node cannot prove (yet): the message says why.
    #[error("cannot prove: {0}")]
    Unproven(String),
    #[error("{0}")]
    Conflict(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The request is not signed where it must be, or its signature, key, time or nonce is
    /// refused.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The authenticated principal holds no grant for the call.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    #[error("audit chain corrupt: {0}")]
    Chain(#[from] ChainError),
    /// The divergence alarm is raised: this node's chain differs from a peer's, so it takes
    /// no writes until an operator has looked.
    #[error("this node refuses writes: {0}; an operator must repair or replace it, then restart it")]
    Diverged(String),
    /// The node's own store is damaged. The message is the storage error's, which names the
    /// space and key and never a path.
    #[error("{0}")]
    Corrupt(String),
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

/// Storage corruption met while serving, process-wide (a process runs one node).
static CORRUPTIONS_SEEN: AtomicU64 = AtomicU64::new(0);

/// How many requests failed on storage corruption since the process started.
pub fn corruptions_seen() -> u64 {
    CORRUPTIONS_SEEN.load(Ordering::Relaxed)
}

/// `Err` once any request met storage corruption: the node stays unready until it is stopped,
/// checked (`engram audit verify --data-dir`) and repaired or rebuilt from its peers.
pub fn storage_intact() -> Result<(), String> {
    match corruptions_seen() {
        0 => Ok(()),
        n => Err(format!(
            "the store is damaged: {n} reads met storage corruption (stop the node and run `engram audit verify --data-dir`)"
        )),
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        let corrupt = match &e {
            CoreError::Corrupt { .. } => true,
            CoreError::Storage(s) => s.is_corruption(),
            CoreError::SigningKeyRevoked { .. } => return ApiError::Conflict(e.to_string()),
            // A node that cannot apply what its log asks: not damage, not the caller's doing.
            CoreError::StateCommitmentIncomplete { .. } => false,
        };
        if !corrupt {
            return ApiError::Internal(e.to_string());
        }
        CORRUPTIONS_SEEN.fetch_add(1, Ordering::Relaxed);
        match e {
            CoreError::Storage(s) => ApiError::Corrupt(s.to_string()),
            other => ApiError::Corrupt(format!("storage corruption: {other}")),
        }
    }
}

impl From<engram_core::export::ExportError> for ApiError {
    fn from(e: engram_core::export::ExportError) -> Self {
        match e {
            engram_core::export::ExportError::Core(c) => c.into(),
            engram_core::export::ExportError::Io(io) => ApiError::Internal(format!("export failed: {io}")),
        }
    }
}

impl From<engram_core::proofs::ProofReadError> for ApiError {
    fn from(e: engram_core::proofs::ProofReadError) -> Self {
        use engram_core::proofs::ProofReadError;
        match e {
            ProofReadError::OutOfRange(m) => ApiError::OutOfRange(m),
            ProofReadError::Unproven(m) => ApiError::Unproven(m),
            ProofReadError::Proof(p) => ApiError::Internal(format!("Merkle proof over the stored tree: {p}")),
            ProofReadError::Core(c) => c.into(),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::UnknownEntity(_)
            | ReadError::UnknownBranch(_)
            | ReadError::UnknownAttribute { .. } => ApiError::NotFound(e.to_string()),
            ReadError::TooCostly(_) => ApiError::Exhausted(e.to_string()),
            ReadError::Aggregate(m) => ApiError::Invalid(m),
            // A node further behind than the one that answered the first page: retryable.
            ReadError::Cursor(CursorError::Ahead { .. }) => ApiError::Unavailable(e.to_string()),
            ReadError::Cursor(c) => ApiError::Invalid(c.to_string()),
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
            ApiError::TooLarge { .. } | ApiError::Exhausted(_) => Code::ResourceExhausted,
            ApiError::Rejected(r) => match r {
                Rejection::PreconditionFailed { .. } | Rejection::NotCurrent { .. } => {
                    Code::FailedPrecondition
                }
                Rejection::UnknownEntity(_)
                | Rejection::UnknownBranch(_)
                | Rejection::LookupNotFound { .. }
                | Rejection::NothingToRedact(_) => Code::NotFound,
                Rejection::TypeMismatch { .. }
                | Rejection::DimensionMismatch { .. }
                | Rejection::UnknownAttribute(_)
                | Rejection::NotUnique(_)
                | Rejection::ForkInFuture { .. } => Code::InvalidArgument,
                Rejection::UniqueConflict { .. } | Rejection::BranchExists(_) => Code::AlreadyExists,
                Rejection::KeyChange(_)
                | Rejection::Deprecated(_)
                | Rejection::UnsafeMigration { .. }
                | Rejection::SchemaUnchanged
                | Rejection::BranchClosed { .. }
                | Rejection::MergeConflict { .. }
                | Rejection::IdempotencyKeyReused { .. }
                | Rejection::Policy(_)
                | Rejection::RedactionTooLarge { .. }
                | Rejection::SlotTooLarge { .. }
                | Rejection::GroupsTooLarge { .. }
                | Rejection::LockOut(_) => Code::FailedPrecondition,
                Rejection::NotAuthorized { .. } => Code::PermissionDenied,
                // Transient: the cluster is being initialised.
                Rejection::NotConfigured => Code::Unavailable,
                Rejection::Unauthenticated(_) => Code::Unauthenticated,
                Rejection::AgentMismatch { .. } | Rejection::SystemNamespace => Code::InvalidArgument,
            },
            ApiError::Unauthenticated(_) => Code::Unauthenticated,
            ApiError::PermissionDenied(_) => Code::PermissionDenied,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::OutOfRange(_) => Code::OutOfRange,
            ApiError::Unproven(_) => Code::FailedPrecondition,
            ApiError::Conflict(_) => Code::FailedPrecondition,
            ApiError::Unavailable(_) => Code::Unavailable,
            ApiError::Chain(_) | ApiError::Corrupt(_) => Code::DataLoss,
            ApiError::Diverged(_) => Code::FailedPrecondition,
            ApiError::Internal(_) => Code::Internal,
            ApiError::Forwarded(s) => s.code(),
        }
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Status {
        if let ApiError::Forwarded(status) = e {
            if status.message().len() <= MAX_STATUS_MESSAGE_BYTES {
                return status;
            }
            let message = engram_types::clip(status.message(), MAX_STATUS_MESSAGE_BYTES).into_owned();
            return Status::with_metadata(status.code(), message, status.metadata().clone());
        }
        let code = e.code();
        if matches!(code, Code::Internal | Code::DataLoss) {
            // Logged once, here, where it is turned into an answer.
            tracing::error!(error = %e, "request failed");
        }
        let message = e.to_string();
        let mut status = Status::new(code, engram_types::clip(&message, MAX_STATUS_MESSAGE_BYTES));
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
            (ApiError::Exhausted("watches".into()), Code::ResourceExhausted),
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
                ApiError::Rejected(Rejection::IdempotencyKeyReused {
                    key: "k".into(),
                    first_tx: engram_types::TxId(7),
                }),
                Code::FailedPrecondition,
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

    #[test]
    fn storage_corruption_is_data_loss_without_paths_and_makes_the_node_unready() {
        let before = corruptions_seen();
        // What the RocksDB store reports for a damaged block: the path is kept aside.
        let damaged = engram_storage::StorageError::Corruption {
            space: "state",
            key: "4574".into(),
            reason: "block checksum mismatch: stored = 1, computed = 2 in 000010.sst offset 0 size 9".into(),
            file: Some("/var/lib/engram/db/000010.sst".into()),
        };
        let status = Status::from(ApiError::from(engram_core::reads::ReadError::Core(
            CoreError::Storage(damaged),
        )));
        assert_eq!(status.code(), Code::DataLoss, "{status:?}");
        assert_eq!(
            status.message(),
            "storage corruption in state at key 4574: block checksum mismatch: stored = 1, computed = 2 in 000010.sst offset 0 size 9"
        );
        assert!(!status.message().contains('/'), "{}", status.message());
        assert!(corruptions_seen() > before);
        let why = storage_intact().unwrap_err();
        assert!(why.contains("store is damaged"), "{why}");

        // An engine failure that is not corruption stays INTERNAL and is not counted as damage.
        let seen = corruptions_seen();
        let io = ApiError::from(CoreError::Storage(engram_storage::StorageError::Engine(
            "IO error: disk full".into(),
        )));
        assert_eq!(io.code(), Code::Internal);
        assert_eq!(corruptions_seen(), seen);
    }

    #[test]
    fn status_messages_are_capped() {
        let huge = "v".repeat(1 << 20);
        let status = Status::from(ApiError::Conflict(huge.clone()));
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(
            status.message(),
            format!("{}…(1048576 bytes)", "v".repeat(MAX_STATUS_MESSAGE_BYTES))
        );
        let forwarded = Status::from(ApiError::Forwarded(Status::not_found(huge)));
        assert_eq!(forwarded.code(), Code::NotFound);
        assert!(forwarded.message().len() < MAX_STATUS_MESSAGE_BYTES + 32);
        let short = Status::from(ApiError::Invalid("namespace: bad".into()));
        assert_eq!(short.message(), "invalid argument: namespace: bad");
    }
}
