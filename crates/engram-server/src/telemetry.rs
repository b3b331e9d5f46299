//! Logging and tracing: logs on stderr filtered by `RUST_LOG` (default `info`), as
//! human-readable lines or as one JSON object per line, and, when an OTLP endpoint is
//! configured, span export over OTLP/gRPC: a span per client call continuing the W3C trace
//! context (`traceparent`, `tracestate`) its caller sends ([`rpc_span`]), passed on when a
//! follower forwards a write.

use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

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

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `message` and the event's fields at the
    /// top level, and the span the event happened in (`span`, with its fields), for log
    /// collectors that index fields.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format {other:?}: expected text or json")),
        }
    }
}

/// The layer that writes log lines to stderr in `format`.
fn log_lines<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        // Colour only on a terminal: log files and collectors get plain text.
        LogFormat::Text => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        LogFormat::Json => lines
            .json()
            .with_ansi(false)
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    }
}

/// Installs the global subscriber, writing logs in `format`. `otlp_endpoint` (e.g.
/// `http://127.0.0.1:4317`) switches on span export.
pub fn init(otlp_endpoint: Option<&str>, format: LogFormat) -> Result<TelemetryGuard, ServerError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    let fmt = log_lines(format);
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
    EXPORTING_SPANS.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}

/// gRPC request metadata written as W3C trace-context carrier.
struct CarrierMut<'a>(&'a mut MetadataMap);

impl Injector for CarrierMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        // The propagator writes only `traceparent` and `tracestate`, both valid ASCII names;
        // a value that is not valid metadata is left out rather than sent broken.
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

/// An HTTP request's headers read as W3C trace-context carrier.
struct HeaderCarrier<'a>(&'a tonic::codegen::http::HeaderMap);

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Set once spans are exported: until then a call's span would be made for nobody (a span costs
/// an allocation and the log layer's formatting of its fields, on every call).
static EXPORTING_SPANS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The longest method name a span is given: a path no service knows is the caller's text.
const MAX_SPAN_METHOD_CHARS: usize = 128;

/// The span of one client call (`engram.v1.Memory/Get`), a child of the W3C trace context its
/// headers carry, if any: every handler's own spans (a write's `transact`) are children of it,
/// and a follower forwarding the call passes the trace on from within it. Its
/// `rpc.grpc.status_code` is recorded once the call is answered. Without span export it is
/// `Span::none()`.
pub fn rpc_span(path: &str, headers: &tonic::codegen::http::HeaderMap) -> tracing::Span {
    if !EXPORTING_SPANS.load(std::sync::atomic::Ordering::Relaxed) {
        return tracing::Span::none();
    }
    let method = path.strip_prefix('/').unwrap_or(path);
    let method = match method.char_indices().nth(MAX_SPAN_METHOD_CHARS) {
        Some((cut, _)) => &method[..cut],
        None => method,
    };
    let span = tracing::info_span!(
        "rpc",
        otel.name = method,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.method = method,
        rpc.grpc.status_code = tracing::field::Empty
    );
    let cx = TraceContextPropagator::new().extract(&HeaderCarrier(headers));
    if cx.span().span_context().is_valid() {
        // Fails only when no OpenTelemetry layer is installed (no span export).
        let _ = span.set_parent(cx);
    }
    span
}

/// Writes the current span's trace context into `meta`, so the node a request goes to next (the
/// leader a follower forwards a write to) continues the same trace.
pub fn pass_trace_on(meta: &mut MetadataMap) {
    let cx = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&cx, &mut CarrierMut(meta));
}
