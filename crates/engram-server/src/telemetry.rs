//! Logging and tracing: human-readable logs on stderr filtered by `RUST_LOG` (default
//! `info`), and, when an OTLP endpoint is configured, span export over OTLP/gRPC.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::ServerError;

/// Keeps the exporter alive; flushes and stops it when dropped (bounded: an absent collector
/// must not hold up shutdown).
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = provider.shutdown();
                let _ = done_tx.send(());
            });
            let _ = done_rx.recv_timeout(Duration::from_secs(2));
        }
    }
}

/// Installs the global subscriber. `otlp_endpoint` (e.g. `http://127.0.0.1:4317`) switches
/// on span export.
pub fn init(otlp_endpoint: Option<&str>) -> Result<TelemetryGuard, ServerError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    // Colour only on a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi);
    let Some(endpoint) = otlp_endpoint.filter(|e| !e.is_empty()) else {
        tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .try_init()
            .map_err(|e| ServerError::Startup(format!("logging: {e}")))?;
        return Ok(TelemetryGuard { provider: None });
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| ServerError::Startup(format!("OTLP exporter for {endpoint}: {e}")))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("engram")
                .build(),
        )
        .build();
    let tracer = provider.tracer("engram");
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .try_init()
        .map_err(|e| ServerError::Startup(format!("logging: {e}")))?;
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}
