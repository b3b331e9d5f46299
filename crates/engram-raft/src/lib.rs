//! Raft wiring (in progress).
