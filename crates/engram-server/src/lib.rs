//! An Engram node: the gRPC services over a Raft node.
//!
//! PLACEHOLDER API (being implemented): `run(config)` serves until SIGINT/SIGTERM.

mod config;
pub mod telemetry;

pub use config::{Peer, ServerConfig};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Startup(String),
}

/// Runs the node until SIGINT or SIGTERM, then shuts down gracefully.
pub async fn run(config: ServerConfig) -> Result<(), ServerError> {
    Err(ServerError::Startup(format!("not built yet: {config:?}")))
}
