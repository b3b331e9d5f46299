use engram_audit::ChainError;
use thiserror::Error;
use tonic::Code;

/// Why a client call failed. Callers tell these apart: a CLI maps [`ClientError::Chain`] and
/// [`ClientError::ChainTruncated`] to "tampered", everything else to "could not check".
#[derive(Debug, Error)]
pub enum ClientError {
    /// An endpoint could not be parsed; nothing was sent.
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },

    /// The server (or the transport on the way to it) refused the call. `code` and `message`
    /// are the gRPC status as received from the last attempt.
    /// `transient` records whether the failure said nothing about the request itself (see
    /// [`crate::is_transient`]), judged on the original status, whose source is not kept.
    #[error("{endpoint}: {}: {message}", code_name(*code))]
    Rpc {
        endpoint: String,
        code: Code,
        message: String,
        attempts: u32,
        transient: bool,
    },

    /// A response that does not follow the API contract (e.g. a hash that is not 32 bytes).
    #[error("{endpoint}: malformed response: {reason}")]
    Protocol { endpoint: String, reason: String },

    /// The audit chain served by `endpoint` fails verification at `error.index`.
    #[error("{endpoint}: {error}")]
    Chain { endpoint: String, error: ChainError },

    /// The node reported a chain head at `head_index` but served fewer entries: the tail of
    /// the chain is missing.
    #[error("{endpoint}: the chain ends at entry {served} but the node reported head {head_index}")]
    ChainTruncated {
        endpoint: String,
        served: u64,
        head_index: u64,
    },

    /// A proof the server sent with an answer does not verify: the answer cannot be trusted.
    #[error("{endpoint}: proof does not verify: {reason}")]
    Proof { endpoint: String, reason: String },

    /// The server's history is shorter than a checkpoint this client already trusts: it has
    /// lost (or hides) entries it once vouched for.
    #[error(
        "{endpoint}: history rewound: the server's checkpoint covers {served_size} entries, but this client already trusts a checkpoint of {trusted_size}"
    )]
    Rewound {
        endpoint: String,
        trusted_size: u64,
        served_size: u64,
    },

    /// The server's history does not extend the one this client trusts: the consistency proof
    /// between the trusted checkpoint and the server's fails. The two histories have forked.
    #[error(
        "{endpoint}: history forked: the server's tree of {served_size} entries does not extend the trusted tree of {trusted_size} entries ({reason})"
    )]
    Forked {
        endpoint: String,
        trusted_size: u64,
        served_size: u64,
        reason: String,
    },

    /// The operating system gave no randomness for a signed write's value salts: the write is
    /// not sent, since a salt that can be guessed would let a redacted value be guessed too.
    #[error("no randomness for the write's value salts: {reason}")]
    Randomness { reason: String },
}

impl ClientError {
    /// The gRPC code, for errors that carry one.
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The gRPC status message, for errors that carry one.
    pub fn message(&self) -> Option<&str> {
        match self {
            ClientError::Rpc { message, .. } => Some(message),
            _ => None,
        }
    }

    /// Whether another attempt could succeed: the call failed in transit or found no leader,
    /// rather than being refused. For a write without an idempotency key, its outcome is unknown.
    pub fn is_transient(&self) -> bool {
        matches!(self, ClientError::Rpc { transient: true, .. })
    }

    /// Whether the server refused the request for what it is, so that it changed nothing:
    /// malformed, too large, a failed precondition, an unknown entity, and the like. Any other
    /// failure of a write leaves its outcome unknown (it may have been applied).
    pub fn is_definite_rejection(&self) -> bool {
        matches!(
            self.code(),
            Some(
                Code::InvalidArgument
                    | Code::NotFound
                    | Code::FailedPrecondition
                    | Code::ResourceExhausted
                    | Code::AlreadyExists
                    | Code::OutOfRange
                    | Code::PermissionDenied
                    | Code::Unauthenticated
                    | Code::Unimplemented
            )
        )
    }

    /// Whether the error is evidence that the audit chain was altered (as opposed to a failure
    /// to reach or read it).
    pub fn is_tampering(&self) -> bool {
        matches!(
            self,
            ClientError::Chain { .. }
                | ClientError::ChainTruncated { .. }
                | ClientError::Proof { .. }
                | ClientError::Rewound { .. }
                | ClientError::Forked { .. }
        ) || self.code() == Some(Code::DataLoss)
    }

    pub(crate) fn rpc(endpoint: &str, status: &tonic::Status, attempts: u32) -> ClientError {
        ClientError::Rpc {
            endpoint: endpoint.to_string(),
            code: status.code(),
            message: status.message().to_string(),
            attempts,
            transient: crate::is_transient(status),
        }
    }
}

/// The canonical gRPC name of a code (`NOT_FOUND`), as other gRPC tools print it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_errors_keep_code_and_message() {
        let err = ClientError::rpc("n1:1", &tonic::Status::not_found("entity 9 does not exist"), 1);
        assert_eq!(err.code(), Some(Code::NotFound));
        assert_eq!(err.message(), Some("entity 9 does not exist"));
        assert_eq!(err.to_string(), "n1:1: NOT_FOUND: entity 9 does not exist");
        assert!(!err.is_tampering());
        assert!(!err.is_transient());
        assert!(err.is_definite_rejection());
        assert!(!ClientError::rpc("n1:1", &tonic::Status::internal("bug"), 1).is_definite_rejection());
        assert!(ClientError::rpc("n1:1", &tonic::Status::unavailable("no leader"), 3).is_transient());
        assert!(ClientError::rpc("n1:1", &tonic::Status::data_loss("chain"), 1).is_tampering());
    }
}
