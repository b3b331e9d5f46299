//! Python exceptions: one class per gRPC code the server answers with, each carrying the code
//! and the server's message, and `ProofError` for an answer whose proof does not verify.

use engram_client::{ClientError, code_name};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::{PyTypeInfo, create_exception};
use tonic::Code;

create_exception!(
    engram,
    EngramError,
    PyException,
    "A call the cluster refused or could not answer; `code` is the gRPC code name, `message` the server's words."
);
create_exception!(
    engram,
    InvalidArgument,
    EngramError,
    "INVALID_ARGUMENT: the request is malformed."
);
create_exception!(
    engram,
    NotFound,
    EngramError,
    "NOT_FOUND: an unknown entity, branch or key."
);
create_exception!(engram, AlreadyExists, EngramError, "ALREADY_EXISTS.");
create_exception!(
    engram,
    PermissionDenied,
    EngramError,
    "PERMISSION_DENIED: the agent has no grant for this."
);
create_exception!(
    engram,
    Unauthenticated,
    EngramError,
    "UNAUTHENTICATED: the request's signature is missing or not accepted."
);
create_exception!(
    engram,
    PreconditionFailed,
    EngramError,
    "FAILED_PRECONDITION: a precondition or a rule of the store refused the transaction; nothing was applied."
);
create_exception!(
    engram,
    ResourceExhausted,
    EngramError,
    "RESOURCE_EXHAUSTED: too large or too many."
);
create_exception!(engram, OutOfRange, EngramError, "OUT_OF_RANGE.");
create_exception!(
    engram,
    Unavailable,
    EngramError,
    "UNAVAILABLE: no node could answer in time (the outcome of a write without an idempotency key is unknown)."
);
create_exception!(
    engram,
    DeadlineExceeded,
    EngramError,
    "DEADLINE_EXCEEDED (the outcome of a write without an idempotency key is unknown)."
);
create_exception!(engram, Aborted, EngramError, "ABORTED.");
create_exception!(engram, Internal, EngramError, "INTERNAL.");
create_exception!(
    engram,
    DataLoss,
    EngramError,
    "DATA_LOSS: a node found its stored data damaged."
);
create_exception!(
    engram,
    ProofError,
    EngramError,
    "The answer's proof does not verify (or the history forked or rewound): no data is returned."
);

/// The exception for a client error, with `code` and `message` set on it.
pub fn to_py(py: Python<'_>, error: &ClientError) -> PyErr {
    let (class, code, message) = match error {
        e if e.is_tampering() => (ProofError::type_object(py), "PROOF".to_string(), e.to_string()),
        e => match e.code() {
            Some(code) => (class_of(py, code), code_name(code).to_string(), e.to_string()),
            None => (EngramError::type_object(py), "CLIENT".to_string(), e.to_string()),
        },
    };
    let err = PyErr::from_type(class, message.clone());
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail short of memory exhaustion;
    // the exception is raised either way.
    let _ = value.setattr("code", code);
    let _ = value.setattr("message", error.message().map(str::to_string).unwrap_or(message));
    err
}

fn class_of(py: Python<'_>, code: Code) -> Bound<'_, pyo3::types::PyType> {
    match code {
        Code::InvalidArgument => InvalidArgument::type_object(py),
        Code::NotFound => NotFound::type_object(py),
        Code::AlreadyExists => AlreadyExists::type_object(py),
        Code::PermissionDenied => PermissionDenied::type_object(py),
        Code::Unauthenticated => Unauthenticated::type_object(py),
        Code::FailedPrecondition => PreconditionFailed::type_object(py),
        Code::ResourceExhausted => ResourceExhausted::type_object(py),
        Code::OutOfRange => OutOfRange::type_object(py),
        Code::Unavailable => Unavailable::type_object(py),
        Code::DeadlineExceeded => DeadlineExceeded::type_object(py),
        Code::Aborted => Aborted::type_object(py),
        Code::Internal => Internal::type_object(py),
        Code::DataLoss => DataLoss::type_object(py),
        _ => EngramError::type_object(py),
    }
}

/// Registers every exception class on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    for (name, class) in [
        ("EngramError", EngramError::type_object(py)),
        ("InvalidArgument", InvalidArgument::type_object(py)),
        ("NotFound", NotFound::type_object(py)),
        ("AlreadyExists", AlreadyExists::type_object(py)),
        ("PermissionDenied", PermissionDenied::type_object(py)),
        ("Unauthenticated", Unauthenticated::type_object(py)),
        ("PreconditionFailed", PreconditionFailed::type_object(py)),
        ("ResourceExhausted", ResourceExhausted::type_object(py)),
        ("OutOfRange", OutOfRange::type_object(py)),
        ("Unavailable", Unavailable::type_object(py)),
        ("DeadlineExceeded", DeadlineExceeded::type_object(py)),
        ("Aborted", Aborted::type_object(py)),
        ("Internal", Internal::type_object(py)),
        ("DataLoss", DataLoss::type_object(py)),
        ("ProofError", ProofError::type_object(py)),
    ] {
        m.add(name, class)?;
    }
    Ok(())
}
