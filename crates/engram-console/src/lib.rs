//! The operator console: a read-only web page over a running cluster, served by
//! `engram console` on the operator's own machine. It shows the cluster's status (members,
//! leader, applied index, alarms), the audit log with each entry checked against its hash and
//! the entry before it, one entry's proof walked step by step against a checkpoint the console
//! verified itself, an entity's timeline on both time axes with its contradictions and
//! branches, and each node's job and access logs.
//!
//! The console is a client like any other: it reads through [`engram_client::Client`] with the
//! operator's credentials (TLS, agent key), so in enforced mode it sees what that agent may
//! see and a call it may not make is shown with its gRPC code. Its own HTTP port answers only
//! requests that carry the token printed with its address. It never writes.
//!
//! Must not depend on: the server, the core or the storage crates (it runs where the operator
//! is, against a remote cluster), nor on the CLI (which depends on it).

mod api;
pub mod glance;
mod http;
pub mod proof;

use std::net::SocketAddr;
use std::sync::Arc;

use engram_client::Client;
use hyper_util::rt::TokioIo;

pub use http::TOKEN_HEADER;

/// Why the console could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no randomness for the console's token: {0}")]
    Token(String),
    #[error("accepting a connection: {0}")]
    Accept(std::io::Error),
}

/// A console bound to its port, not yet serving.
pub struct Console {
    listener: tokio::net::TcpListener,
    token: Arc<String>,
    api: Arc<api::Api>,
}

impl Console {
    /// Binds `listen` (port 0: any free port) for the cluster `client` reaches (every view
    /// that asks each node asks each of the client's endpoints).
    pub async fn bind(listen: SocketAddr, client: Client) -> Result<Console, ConsoleError> {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| ConsoleError::Listen { addr: listen, source })?;
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| ConsoleError::Token(e.to_string()))?;
        Ok(Console {
            listener,
            token: Arc::new(hex::encode(bytes)),
            api: Arc::new(api::Api::new(client)),
        })
    }

    /// The address to open: the page, with the token it needs in its query.
    pub fn url(&self) -> String {
        let addr = self
            .listener
            .local_addr()
            .map_or_else(|_| "127.0.0.1:0".to_string(), |a| a.to_string());
        format!("http://{addr}/?token={}", self.token)
    }

    /// Serves until `stop` completes.
    pub async fn serve(self, stop: impl std::future::Future<Output = ()>) -> Result<(), ConsoleError> {
        tokio::pin!(stop);
        loop {
            let (stream, _) = tokio::select! {
                accepted = self.listener.accept() => accepted.map_err(ConsoleError::Accept)?,
                _ = &mut stop => return Ok(()),
            };
            let api = self.api.clone();
            let token = self.token.clone();
            let service = hyper::service::service_fn(move |req| {
                let (api, token) = (api.clone(), token.clone());
                async move { Ok::<_, std::convert::Infallible>(http::answer(api, token, req).await) }
            });
            tokio::spawn(async move {
                // A connection that breaks concerns only its own page.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }
}
