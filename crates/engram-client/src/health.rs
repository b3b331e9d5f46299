//! The standard gRPC health check (`grpc.health.v1`) asked of one node, dialled exactly as the
//! client dials it, or over a client's own connection. A node reports `engram.ready` serving
//! once it has a leader and has applied what it knows to be committed, and the empty service
//! while it answers at all.

use std::future::Future;
use std::time::Duration;

use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::client::{Client, ClientConfig, node_endpoint};

/// What one node said of one service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// Whether the service is serving.
    pub serving: bool,
    /// The status by its canonical name (`SERVING`, `NOT_SERVING`, `SERVICE_UNKNOWN`, ...).
    pub status: &'static str,
}

/// Why a node gave no health answer: it could not be dialled, refused the check, or did not
/// answer within the time allowed. The message names the endpoint.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HealthUnanswered(pub String);

/// Asks the node at `endpoint` (with `config`'s TLS) whether `service` is serving, waiting at
/// most `timeout` for the connection and the answer together.
pub async fn check_health(
    endpoint: &str,
    config: &ClientConfig,
    service: &str,
    timeout: Duration,
) -> Result<Health, HealthUnanswered> {
    let dial = async {
        node_endpoint(endpoint, config)
            .map_err(|e| e.to_string())?
            .connect_timeout(timeout)
            .timeout(timeout)
            .connect()
            .await
            .map_err(|e| format!("{endpoint}: cannot connect: {e}"))
    };
    ask(endpoint, dial, service, timeout).await
}

impl Client {
    /// Asks this client's first endpoint whether `service` is serving, over the client's own
    /// connection (no new dial, no retry), waiting at most `timeout`: for a caller that asks
    /// again and again (the console), where [`check_health`] would dial each time.
    pub async fn health(&self, service: &str, timeout: Duration) -> Result<Health, HealthUnanswered> {
        let (endpoint, channel) = self.first_channel();
        ask(&endpoint, async { Ok(channel) }, service, timeout).await
    }
}

/// The check over the channel `channel` gives, the whole within `timeout`.
async fn ask(
    endpoint: &str,
    channel: impl Future<Output = Result<Channel, String>>,
    service: &str,
    timeout: Duration,
) -> Result<Health, HealthUnanswered> {
    let check = async {
        HealthClient::new(channel.await?)
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .map(|r| r.into_inner().status)
            .map_err(|s| format!("{endpoint}: health check of {service:?}: {}", s.message()))
    };
    let status = tokio::time::timeout(timeout, check)
        .await
        .map_err(|_| {
            HealthUnanswered(format!(
                "{endpoint}: no health answer within {} ms",
                timeout.as_millis()
            ))
        })?
        .map_err(HealthUnanswered)?;
    Ok(Health {
        serving: status == ServingStatus::Serving as i32,
        status: ServingStatus::try_from(status).map_or("UNKNOWN", |s| s.as_str_name()),
    })
}
