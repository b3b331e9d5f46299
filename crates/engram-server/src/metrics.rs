//! Prometheus metrics over plain HTTP (`--metrics-listen`): `GET /metrics` answers the text
//! exposition format (version 0.0.4) with the node's Raft position, its audit chain, its
//! readiness, its client calls by method and code with their latencies, and the storage
//! corruption its requests met. A deliberately small HTTP/1.1 responder: one request per connection, `GET`
//! only, no body read, so it needs no HTTP stack beyond what the node already links.

use std::fmt::Write as _;
use std::net::SocketAddr;

use engram_raft::RaftNode;
use engram_storage::Space;

use crate::services::watch_hub::WatchHub;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{info, warn};

/// Writes one single-sample metric of node `node_id` per row of `rows`: name, kind (`gauge` or
/// `counter`), help, value. What the search index and the watch hub report.
pub(crate) fn write_node_samples(
    out: &mut String,
    node_id: u64,
    rows: &[(&str, &str, &str, &std::sync::atomic::AtomicU64)],
) {
    for (name, kind, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{node_id=\"{node_id}\"}} {}",
            value.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
}

/// The exposition text for `node` now; `insecure_open`: the node runs with `--insecure-open`.
pub fn render(node: &RaftNode, watches: &WatchHub, insecure_open: bool) -> String {
    let status = node.status();
    let head = node
        .read_state(|store| engram_core::reads::head(store))
        .ok()
        .and_then(Result::ok);
    let ready = crate::ready(node).is_ok();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        let _ = writeln!(out, "{name}{{node_id=\"{}\"}} {value}", node.node_id);
    };
    gauge("engram_up", "1 while the node serves.", 1.0);
    gauge(
        "engram_ready",
        "1 when the node is a caught-up member with a verified chain tip (the engram.ready health service).",
        f64::from(u8::from(ready)),
    );
    gauge(
        "engram_raft_is_leader",
        "1 on the leader.",
        f64::from(u8::from(status.role == "Leader")),
    );
    gauge("engram_raft_term", "The current Raft term.", status.term as f64);
    gauge(
        "engram_raft_last_log_index",
        "The last index in this node's Raft log.",
        status.last_log_index as f64,
    );
    gauge(
        "engram_raft_applied_index",
        "The last log index this node applied.",
        status.applied_index as f64,
    );
    gauge(
        "engram_raft_cluster_committed_index",
        "The last index committed by a quorum, as the leader reported it.",
        status.cluster_committed_index as f64,
    );
    gauge(
        "engram_raft_members",
        "Members (voters and learners) of the current configuration.",
        status.members.len() as f64,
    );
    gauge(
        "engram_divergence_alarm",
        "1 once this node found its audit chain differs from a peer's (it then refuses writes and is not ready).",
        f64::from(u8::from(node.alarm().is_some())),
    );
    let mode = node
        .read_state(|store| engram_core::policy::settled_mode(store))
        .ok()
        .and_then(Result::ok)
        .flatten();
    gauge(
        "engram_security_enforced",
        "1 in enforced mode (signed requests, grants); 0 in open mode, where anyone who reaches a node may do anything; -1 until the mode is recorded.",
        match mode {
            Some(engram_access::Mode::Enforced) => 1.0,
            Some(engram_access::Mode::Open) => 0.0,
            None => -1.0,
        },
    );
    gauge(
        "engram_insecure_open",
        "1 when the node runs with --insecure-open: in open mode it serves anyone who reaches it, not only loopback callers.",
        f64::from(u8::from(insecure_open)),
    );
    if let Some(head) = head {
        gauge(
            "engram_audit_chain_entries",
            "Entries in this node's audit chain.",
            head.index as f64,
        );
        gauge(
            "engram_audit_head_tx_time_seconds",
            "Transaction time of the chain's last entry, in seconds since the Unix epoch.",
            head.tx_time_ns as f64 / 1e9,
        );
    }
    node.stages.render(node.node_id, &mut out);
    let refused = node.peer_refused.total();
    let _ = writeln!(
        out,
        "# HELP engram_raft_peer_requests_refused_total Raft requests refused because the sender was not an authenticated member.\n# TYPE engram_raft_peer_requests_refused_total counter\nengram_raft_peer_requests_refused_total{{node_id=\"{}\"}} {refused}",
        node.node_id
    );
    // The log names at most one refusal per reason every few seconds; this counts each.
    let _ = writeln!(
        out,
        "# HELP engram_peer_refusals_total Raft requests refused, by why (the node logs a sample of them).\n# TYPE engram_peer_refusals_total counter"
    );
    for (reason, count) in node.peer_refused.counts() {
        let _ = writeln!(
            out,
            "engram_peer_refusals_total{{node_id=\"{}\",reason=\"{reason}\"}} {count}",
            node.node_id
        );
    }
    let _ = writeln!(
        out,
        "# HELP engram_peer_requests_accepted_total Raft requests accepted, by how the sender proved itself (signature, or tag once this node accepts tags).\n# TYPE engram_peer_requests_accepted_total counter"
    );
    for (proof, count) in node.peer_refused.accepted_counts() {
        let _ = writeln!(
            out,
            "engram_peer_requests_accepted_total{{node_id=\"{}\",proof=\"{proof}\"}} {count}",
            node.node_id
        );
    }
    let _ = writeln!(
        out,
        "# HELP engram_access_refusals_unrecorded_total Refused calls the access log could not record (its queue was full).\n# TYPE engram_access_refusals_unrecorded_total counter\nengram_access_refusals_unrecorded_total{{node_id=\"{}\"}} {}",
        node.node_id,
        crate::access_log::refusals_unrecorded()
    );
    crate::services::search_index::render_metrics(node.node_id, status.applied_index, &mut out);
    if let Ok(sizes) = node.read_state(|store| Space::ALL.map(|space| (space, store.space_bytes(space)))) {
        let _ = writeln!(
            &mut out,
            "# HELP engram_store_bytes Bytes this node's store holds per space (log, raft, state, access): table files and write buffers, not the shared write-ahead log.\n# TYPE engram_store_bytes gauge"
        );
        for (space, bytes) in sizes {
            if let Some(bytes) = bytes {
                let _ = writeln!(
                    &mut out,
                    "engram_store_bytes{{node_id=\"{}\",space=\"{}\"}} {bytes}",
                    node.node_id,
                    space.name()
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP engram_jobs_total Background jobs this node ended since it started (engram jobs lists them), by kind and outcome.\n# TYPE engram_jobs_total counter"
    );
    for (kind, done, failed) in node.jobs().ended_counts() {
        for (outcome, count) in [("done", done), ("failed", failed)] {
            let _ = writeln!(
                out,
                "engram_jobs_total{{node_id=\"{}\",kind=\"{}\",outcome=\"{outcome}\"}} {count}",
                node.node_id,
                kind.name()
            );
        }
    }
    crate::services::watch_hub::render_metrics(node.node_id, watches, &mut out);
    crate::services::rpc_metrics::render_metrics(node.node_id, &mut out);
    let _ = writeln!(
        out,
        "# HELP engram_storage_corruption_total Requests that met storage corruption (a block failing its checksum, a row that does not decode); any makes the node not ready."
    );
    let _ = writeln!(out, "# TYPE engram_storage_corruption_total counter");
    let _ = writeln!(
        out,
        "engram_storage_corruption_total{{node_id=\"{}\"}} {}",
        node.node_id,
        crate::error::corruptions_seen()
    );
    out
}

/// Reads a request's head: up to the blank line that ends it, the first 1 KiB, or the end of
/// the stream, whichever comes first; `None` if nothing arrives within 5 s. One `read` is not
/// enough: a client may send the request line in several segments.
async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    const LIMIT_BYTES: usize = 1024;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while head.len() < LIMIT_BYTES && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => head.extend_from_slice(&buf[..n]),
            _ if head.is_empty() => return None,
            _ => break,
        }
    }
    Some(head)
}

/// Serves `/metrics` on `addr` until the process ends.
pub async fn serve(
    addr: SocketAddr,
    node: RaftNode,
    watches: std::sync::Arc<WatchHub>,
    insecure_open: bool,
) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    info!(%addr, "metrics: serving /metrics");
    loop {
        let (mut stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                warn!(error = %e, "metrics: accept failed");
                continue;
            }
        };
        let node = node.clone();
        let watches = watches.clone();
        tokio::spawn(async move {
            let Some(head) = read_head(&mut stream).await else {
                return;
            };
            let request = String::from_utf8_lossy(&head);
            let line = request.lines().next().unwrap_or_default();
            let (status, content_type, body) = match line.split_whitespace().collect::<Vec<_>>()[..] {
                ["GET", "/metrics", ..] => (
                    "200 OK",
                    "text/plain; version=0.0.4",
                    render(&node, &watches, insecure_open),
                ),
                ["GET", ..] => (
                    "404 Not Found",
                    "text/plain",
                    "only /metrics is served here\n".into(),
                ),
                _ => ("405 Method Not Allowed", "text/plain", "GET /metrics\n".into()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::read_head;

    #[tokio::test]
    async fn a_request_sent_in_pieces_is_read_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            for piece in ["GET ", "/metrics", " HTTP/1.1\r\nHost: x\r\n", "\r\n"] {
                s.write_all(piece.as_bytes()).await.expect("write");
                s.flush().await.expect("flush");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            s
        });
        let (mut stream, _) = listener.accept().await.expect("accept");
        let head = read_head(&mut stream).await.expect("a head");
        assert_eq!(head, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        drop(client.await.expect("client"));
    }
}
