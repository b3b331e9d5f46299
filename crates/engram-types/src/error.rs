use thiserror::Error;

/// Input that does not form a valid domain value. Always the caller's fault: the wire layer
/// maps it to `InvalidArgument`.
///
/// A `value` here is the input as the message quotes it, [`crate::excerpt`]: a bounded prefix,
/// never the whole input, which may be megabytes long.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ValidationError {
    #[error("invalid namespace {value}: {reason}")]
    Namespace { value: String, reason: &'static str },
    #[error("invalid attribute {value}: {reason}")]
    Attribute { value: String, reason: &'static str },
    #[error("invalid value for {field}: {reason}")]
    Value { field: &'static str, reason: String },
    #[error("invalid transaction: {0}")]
    Transaction(String),
    #[error("invalid branch name {value}: {reason}")]
    Branch { value: String, reason: &'static str },
    #[error("invalid attribute declaration: {0}")]
    Schema(String),
    /// A join query that cannot be run as written; the message starts with the field it names
    /// (`find[1]`, `clauses[2].value`).
    #[error("invalid query: {0}")]
    Query(String),
}

/// Bytes that are not a canonical encoding of what the reader expected. Seen when the disk or
/// a peer hands over corrupt data; callers treat it as corruption, never as a panic.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("unexpected end of input reading {0}")]
    Truncated(&'static str),
    #[error("unknown format version {0}")]
    Version(u8),
    #[error("unknown tag {tag} for {what}")]
    Tag { what: &'static str, tag: u8 },
    #[error("{0} trailing bytes after the encoded value")]
    Trailing(usize),
    #[error("decoded data is invalid: {0}")]
    Invalid(#[from] ValidationError),
    #[error("{0} is not valid UTF-8")]
    Utf8(&'static str),
    /// Fields that decode one by one but do not fit together.
    #[error("malformed: {0}")]
    Malformed(&'static str),
}
