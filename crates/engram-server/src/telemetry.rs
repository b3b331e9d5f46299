//! Logging and tracing set-up (placeholder signature).

/// Keeps exporters alive; flushes them when dropped.
pub struct TelemetryGuard;

/// Installs the tracing subscriber: human logs on stderr (`RUST_LOG` filters, default
/// `info`), and OTLP/gRPC span export when `otlp_endpoint` is given.
pub fn init(otlp_endpoint: Option<&str>) -> Result<TelemetryGuard, crate::ServerError> {
    let _ = otlp_endpoint;
    Ok(TelemetryGuard)
}
