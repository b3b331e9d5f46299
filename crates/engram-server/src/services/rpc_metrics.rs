//! Per-RPC figures for `/metrics`: how many calls each client-facing method answered, by gRPC
//! code (`engram_rpc_requests_total`), and how long they took (`engram_rpc_duration_seconds`).
//!
//! [`Measured`] wraps the whole stack of a client-facing service, the exposure check and the
//! certificate interceptor included, so a refused call is counted with its code. A call is
//! timed until its response headers: a unary call's whole handling, a streaming call's
//! (`Watch`, `Entries`, `Export`) until the stream opened. Its code is the `grpc-status` those
//! headers carry (every refusal and every unary error is answered that way), else `OK`; an error
//! a stream ends with later is not counted here. A path no service knows is counted as method
//! `unknown`, so a caller cannot grow the label set.
//!
//! Each call also runs in a span of its own (`crate::telemetry::rpc_span`), named by its
//! method, continuing the caller's W3C trace context and carrying the code it was answered with.
//!
//! The table is per process, which is one node. Raft's own service is not measured here; a
//! write's stages are, by [`engram_raft::stages::WriteStages`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds: from half a millisecond (a local read) to
/// ten seconds (the client's default deadline).
const BUCKETS_S: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One method's calls: counts by code, and the latency histogram over all of them.
#[derive(Default)]
struct MethodFigures {
    by_code: BTreeMap<&'static str, u64>,
    /// Calls at or under each bound of [`BUCKETS_S`] (not cumulative; summed when rendered).
    buckets: [u64; BUCKETS_S.len()],
    count: u64,
    sum_s: f64,
}

static TABLE: Mutex<BTreeMap<String, MethodFigures>> = Mutex::new(BTreeMap::new());

/// The method label of a request path: `/engram.v1.Memory/Get` → `Memory/Get`.
fn method_label(path: &str) -> &str {
    path.strip_prefix("/engram.v1.").unwrap_or(path)
}

/// Records one answered call of `path` with gRPC code `code`, `took` after it arrived.
#[cfg_attr(madsim, allow(dead_code))] // called by the Tokio build's service only
pub fn record(path: &str, code: tonic::Code, took: Duration) {
    let method = if code == tonic::Code::Unimplemented {
        "unknown"
    } else {
        method_label(path)
    };
    let secs = took.as_secs_f64();
    let Ok(mut table) = TABLE.lock() else {
        return;
    };
    let figures = match table.get_mut(method) {
        Some(f) => f,
        None => table.entry(method.to_string()).or_default(),
    };
    *figures.by_code.entry(code_name(code)).or_default() += 1;
    if let Some(i) = BUCKETS_S.iter().position(|bound| secs <= *bound) {
        figures.buckets[i] += 1;
    }
    figures.count += 1;
    figures.sum_s += secs;
}

/// The code of a response from its headers: `grpc-status` when the answer is trailers-only (a
/// refusal, a unary error), else OK.
#[cfg_attr(madsim, allow(dead_code))] // read by the Tokio build's service only
fn code_of(headers: &tonic::codegen::http::HeaderMap) -> tonic::Code {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<i32>().ok())
        .map_or(tonic::Code::Ok, tonic::Code::from)
}

/// The code's name as gRPC spells it (`NOT_FOUND`), the usual Prometheus label value.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Appends the two families to `out`, labelled with `node_id`.
#[cfg_attr(madsim, allow(dead_code))] // `/metrics` is served by the Tokio build only
pub fn render_metrics(node_id: u64, out: &mut String) {
    let Ok(table) = TABLE.lock() else {
        return;
    };
    let _ = writeln!(
        out,
        "# HELP engram_rpc_requests_total Client calls answered, by method and gRPC code (a stream by how it opened).\n# TYPE engram_rpc_requests_total counter"
    );
    for (method, figures) in table.iter() {
        for (code, n) in &figures.by_code {
            let _ = writeln!(
                out,
                "engram_rpc_requests_total{{node_id=\"{node_id}\",method=\"{method}\",code=\"{code}\"}} {n}"
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP engram_rpc_duration_seconds Time from a client call's arrival to its response headers (a stream: until it opened), by method.\n# TYPE engram_rpc_duration_seconds histogram"
    );
    for (method, figures) in table.iter() {
        let labels = format!("node_id=\"{node_id}\",method=\"{method}\"");
        let mut below = 0;
        for (bound, n) in BUCKETS_S.iter().zip(figures.buckets) {
            below += n;
            let _ = writeln!(
                out,
                "engram_rpc_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {below}"
            );
        }
        let _ = writeln!(
            out,
            "engram_rpc_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\nengram_rpc_duration_seconds_sum{{{labels}}} {}\nengram_rpc_duration_seconds_count{{{labels}}} {}",
            figures.count, figures.sum_s, figures.count
        );
    }
}

/// A client-facing service whose calls are counted and timed (see the module docs).
#[derive(Clone)]
#[cfg_attr(madsim, allow(dead_code))] // the simulation's network carries its own clients only
pub struct Measured<S> {
    inner: S,
}

#[cfg_attr(madsim, allow(dead_code))]
impl<S> Measured<S> {
    pub fn new(inner: S) -> Measured<S> {
        Measured { inner }
    }
}

#[cfg(not(madsim))]
mod service {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tonic::codegen::{Service, http};
    use tonic::server::NamedService;

    use super::Measured;

    impl<S: NamedService> NamedService for Measured<S> {
        const NAME: &'static str = S::NAME;
    }

    impl<S, B, R> Service<http::Request<B>> for Measured<S>
    where
        S: Service<http::Request<B>, Response = http::Response<R>>,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        R: Send + 'static,
    {
        type Response = http::Response<R>;
        type Error = S::Error;
        type Future = Pin<Box<dyn Future<Output = Result<http::Response<R>, S::Error>> + Send>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            let path = req.uri().path().to_string();
            let arrived = std::time::Instant::now();
            let span = crate::telemetry::rpc_span(&path, req.headers());
            let answer = span.in_scope(|| self.inner.call(req));
            let call_span = span.clone();
            let answered = async move {
                let answer = answer.await;
                // A transport-level failure has no gRPC code; the client sees it as UNKNOWN.
                let code = answer
                    .as_ref()
                    .map_or(tonic::Code::Unknown, |resp| super::code_of(resp.headers()));
                call_span.record("rpc.grpc.status_code", code as i32);
                super::record(&path, code, arrived.elapsed());
                answer
            };
            Box::pin(tracing::Instrument::instrument(answered, span))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn calls_are_counted_by_method_and_code_and_bucketed_by_latency() {
        // The table is per process: a method name of this test's own keeps it apart.
        let path = "/engram.v1.Test/CountMe";
        record(path, tonic::Code::Ok, Duration::from_micros(300));
        record(path, tonic::Code::Ok, Duration::from_millis(20));
        record(path, tonic::Code::NotFound, Duration::from_secs(30));
        record(
            "/engram.v1.Test/NoSuchMethod",
            tonic::Code::Unimplemented,
            Duration::ZERO,
        );
        let mut out = String::new();
        render_metrics(7, &mut out);
        let line = |prefix: &str| -> String {
            out.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no line {prefix} in\n{out}"))
                .to_string()
        };
        let m = "node_id=\"7\",method=\"Test/CountMe\"";
        assert!(line(&format!("engram_rpc_requests_total{{{m},code=\"OK\"}}")).ends_with(" 2"));
        assert!(line(&format!("engram_rpc_requests_total{{{m},code=\"NOT_FOUND\"}}")).ends_with(" 1"));
        assert!(
            line("engram_rpc_requests_total{node_id=\"7\",method=\"unknown\",code=\"UNIMPLEMENTED\"}")
                .ends_with(" 1")
        );
        // Cumulative buckets: 300 µs under 0.5 ms, 20 ms under 25 ms, 30 s only in +Inf.
        assert!(
            line(&format!(
                "engram_rpc_duration_seconds_bucket{{{m},le=\"0.0005\"}}"
            ))
            .ends_with(" 1")
        );
        assert!(line(&format!("engram_rpc_duration_seconds_bucket{{{m},le=\"0.01\"}}")).ends_with(" 1"));
        assert!(line(&format!("engram_rpc_duration_seconds_bucket{{{m},le=\"0.025\"}}")).ends_with(" 2"));
        assert!(line(&format!("engram_rpc_duration_seconds_bucket{{{m},le=\"10\"}}")).ends_with(" 2"));
        assert!(line(&format!("engram_rpc_duration_seconds_bucket{{{m},le=\"+Inf\"}}")).ends_with(" 3"));
        assert!(line(&format!("engram_rpc_duration_seconds_count{{{m}}}")).ends_with(" 3"));
        assert!(!out.contains("NoSuchMethod"), "unknown paths never become labels");
    }

    #[test]
    fn the_code_comes_from_a_trailers_only_answer() {
        let mut headers = tonic::codegen::http::HeaderMap::new();
        assert_eq!(code_of(&headers), tonic::Code::Ok);
        headers.insert("grpc-status", "5".parse().expect("a header value"));
        assert_eq!(code_of(&headers), tonic::Code::NotFound);
    }
}
