//! With an OTLP endpoint configured, the node's spans reach a collector: an in-process mock
//! OTLP/gRPC trace collector receives, in the trace of the W3C `traceparent` each caller sent,
//! the span of every call (a write's and a read's, named by method, child of the caller's span)
//! and, under the write's, its `transact` span; and the trace context a node passes on (to the
//! leader, when it forwards a write) continues that trace.

#![allow(clippy::unwrap_used)] // test set-up: a failed step should stop the test loudly

use std::net::TcpListener as StdListener;
use std::time::Duration;

use engram_proto::pb;
use engram_server::{ServerConfig, run_until};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

/// An exported span: name, attribute keys, trace id, parent span id, span id.
type Exported = (String, Vec<String>, Vec<u8>, Vec<u8>, Vec<u8>);

struct Collector {
    spans: mpsc::UnboundedSender<Exported>,
}

/// The caller's trace context: version 00, trace id, parent span id, sampled.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                for span in scope.spans {
                    let keys = span.attributes.iter().map(|a| a.key.clone()).collect();
                    let _ =
                        self.spans
                            .send((span.name, keys, span.trace_id, span.parent_span_id, span.span_id));
                }
            }
        }
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_addr = listener.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Collector { spans: tx }))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let guard = engram_server::telemetry::init(Some(&format!("http://{collector_addr}")), Default::default())
        .unwrap();

    let addr = StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let node = tokio::spawn(run_until(
        ServerConfig::new(1, addr, dir.path().to_path_buf()),
        async {
            let _ = stopped.await;
        },
    ));
    let channel = loop {
        if let Ok(ch) = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
        {
            break ch;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    pb::cluster_client::ClusterClient::new(channel.clone())
        .init(pb::InitRequest {
            members: vec![],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut memory = pb::memory_client::MemoryClient::new(channel);
    let request = pb::TransactRequest {
        branch: String::new(),
        value_salts: Vec::new(),
        namespace: "otel".into(),
        ops: vec![pb::TxOp {
            op: pb::Op::Assert as i32,
            entity: Some(pb::EntityRef {
                kind: Some(pb::entity_ref::Kind::Temp("e".into())),
            }),
            attribute: ":x/y".into(),
            value: Some(pb::Value {
                kind: Some(pb::value::Kind::I64(1)),
            }),
            valid_from_ns: None,
            valid_to_ns: None,
        }],
        preconditions: vec![],
        idempotency_key: String::new(),
        provenance: Some(pb::Provenance {
            agent: "otel-test".into(),
            confidence: 1.0,
            ..Default::default()
        }),
    };
    // The first write may race the single node's election; retry briefly.
    let mut done = false;
    for _ in 0..100 {
        if memory.transact(request.clone()).await.is_ok() {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(done, "the single-node cluster never accepted a write");
    // A write that comes with the caller's trace context.
    let mut traced = tonic::Request::new(request.clone());
    traced
        .metadata_mut()
        .insert("traceparent", TRACEPARENT.parse().unwrap());
    let written = memory.transact(traced).await.unwrap().into_inner();
    // A read with the caller's trace context has its span too.
    let mut read = tonic::Request::new(pb::GetRequest {
        namespace: "otel".into(),
        entity: written.temp_ids["e"],
        ..Default::default()
    });
    read.metadata_mut()
        .insert("traceparent", TRACEPARENT.parse().unwrap());
    memory.get(read).await.unwrap();

    // What a node passes on (a follower forwarding a write to the leader) continues the trace
    // its own span is in, with that span as the parent.
    let mut incoming = tonic::codegen::http::HeaderMap::new();
    incoming.insert("traceparent", TRACEPARENT.parse().unwrap());
    let span = engram_server::telemetry::rpc_span("/engram.v1.Memory/Transact", &incoming);
    let mut outgoing = tonic::metadata::MetadataMap::new();
    span.in_scope(|| engram_server::telemetry::pass_trace_on(&mut outgoing));
    let passed = outgoing
        .get("traceparent")
        .expect("a traceparent is passed on")
        .to_str()
        .unwrap()
        .to_string();
    let parts: Vec<&str> = passed.split('-').collect();
    assert_eq!(parts.len(), 4, "{passed}");
    assert_eq!(
        parts[1], "4bf92f3577b34da6a3ce929d0e0e4736",
        "the trace is continued: {passed}"
    );
    assert_ne!(
        parts[2], "00f067aa0ba902b7",
        "the parent is the node's own span: {passed}"
    );
    drop(span);

    // Dropping the guard flushes the batch exporter; it blocks, so not on a runtime worker.
    tokio::task::spawn_blocking(move || drop(guard)).await.unwrap();
    let trace_id = hex::decode("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    let parent_id = hex::decode("00f067aa0ba902b7").unwrap();
    // The span named `name` in the caller's trace, child of `parent`.
    let find = |seen: &[Exported], name: &str, parent: &[u8]| -> Option<Exported> {
        seen.iter()
            .find(|(n, _, trace, p, _)| n == name && *trace == trace_id && p.as_slice() == parent)
            .cloned()
    };
    let mut seen: Vec<Exported> = Vec::new();
    let complete = |seen: &[Exported]| {
        let call = find(seen, "engram.v1.Memory/Transact", &parent_id);
        call.is_some_and(|call| find(seen, "transact", &call.4).is_some())
            && find(seen, "engram.v1.Memory/Get", &parent_id).is_some()
    };
    while let Ok(Some(span)) = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await {
        seen.push(span);
        if complete(&seen) {
            break;
        }
    }
    // The write's call span, child of the caller's span, with its code; its `transact` span
    // under it, with the write's figures.
    let call = find(&seen, "engram.v1.Memory/Transact", &parent_id).unwrap_or_else(|| {
        panic!("no Transact call span in the caller's trace, child of its span: {seen:?}")
    });
    assert!(call.1.iter().any(|k| k == "rpc.grpc.status_code"), "{call:?}");
    let transact = find(&seen, "transact", &call.4)
        .unwrap_or_else(|| panic!("no transact span under the call's span: {seen:?}"));
    assert!(
        transact.1.iter().any(|k| k == "node_id"),
        "span attributes: {transact:?}"
    );
    assert!(
        transact.1.iter().any(|k| k == "tx_id"),
        "span attributes: {transact:?}"
    );
    assert!(
        find(&seen, "engram.v1.Memory/Get", &parent_id).is_some(),
        "no Get call span in the caller's trace: {seen:?}"
    );
    let _ = stop.send(());
    node.await.unwrap().unwrap();
}
