use thiserror::Error;

/// Why a proof was refused. Every failure names what was wrong; none panics.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProofError {
    #[error("state proof truncated: no room for {what}")]
    Truncated { what: &'static str },
    #[error("state proof has {extra} bytes after its end")]
    TrailingBytes { extra: usize },
    #[error("state proof format {found}; this build reads format {supported}")]
    Format { found: u8, supported: u8 },
    #[error("state proof: unknown {what} tag {tag}")]
    Tag { what: &'static str, tag: u8 },
    #[error("state proof: step {step} splits at bit {split}, not below the step above it (bit {above})")]
    StepOrder { step: usize, split: u8, above: u8 },
    #[error("state proof: step {step} splits at bit {split}, inside the prefix of {bits} bits it proves")]
    StepInsidePrefix { step: usize, split: u8, bits: u16 },
    #[error("state proof of an empty map carries {steps} steps")]
    EmptyWithSteps { steps: usize },
    #[error(
        "state proof ends at a {node} that is not on the path it proves (it leaves the path at bit {at})"
    )]
    OffPath { node: &'static str, at: u16 },
    #[error(
        "state proof ends at a branch splitting at bit {split} whose prefix is the queried one: the proof stops early"
    )]
    StopsEarly { split: u8 },
    #[error("state proof ends at a branch whose prefix has bits set past its split bit {split}")]
    PrefixNotCanonical { split: u8 },
    #[error("state proof ends at a leaf under the queried prefix but as outside it")]
    LeafNotOutside,
    #[error("state proof lists no key under the prefix but claims the subtree holding them")]
    EmptySubtree,
    #[error("state proof lists key {index} out of order (keys must be strictly ascending)")]
    Unsorted { index: usize },
    #[error("state proof lists key {index}, which is not under the queried prefix")]
    OutsidePrefix { index: usize },
    #[error("state proof does not lead to the trusted root: it gives {computed}, the root is {expected}")]
    RootMismatch { computed: String, expected: String },
}
