//! What the command modules share: the two errors whose details were already printed, the
//! parsing of a namespace flag, read consistency, probe clients that ask each node once, and a
//! transaction's receipt as output. A leaf: it uses `output` and the client, and no command
//! module (they all use it, and `commands` dispatches to them).

use std::fmt;
use std::time::Duration;

use anyhow::{Result, anyhow};
use engram_client::{Client, ClientConfig, ClientError, Consistency, Keepalive, RetryPolicy, code_name, pb};
use engram_types::Namespace;
use serde_json::{Value as Json, json};

use crate::output::{format_time_ns, outln, plural, print_json, short_hash};

/// An error that means "the audit chain does not verify": exit code 2. Raised only after the
/// verification result was printed, so like [`Reported`] it needs no further JSON document.
#[derive(Debug)]
pub struct Tampered(pub String);

impl fmt::Display for Tampered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Tampered {}

/// An error whose details were already printed (as a table row or a JSON document); only the
/// one-line summary and the exit code remain.
#[derive(Debug)]
pub struct Reported(pub String);

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Reported {}

pub fn namespace(raw: &str) -> Result<Namespace> {
    Namespace::new(raw).map_err(|e| anyhow!("--ns: {e}"))
}

pub fn consistency(stale: bool) -> Consistency {
    if stale {
        Consistency::Stale
    } else {
        Consistency::Linearizable
    }
}

/// A client that makes one quick attempt per call: for asking particular nodes how they are,
/// where a dead node should show up as such rather than after a retry budget.
/// `tls` as the caller's own client has it.
pub fn probe_client(
    endpoints: Vec<String>,
    tls: Option<std::sync::Arc<engram_client::ClientTls>>,
) -> Result<Client> {
    Ok(Client::with_config(endpoints, probe_config(tls))?)
}

/// One quick attempt per call, as [`probe_client`] makes them; no agent.
fn probe_config(tls: Option<std::sync::Arc<engram_client::ClientTls>>) -> ClientConfig {
    ClientConfig {
        connect_timeout: Duration::from_millis(1500),
        request_timeout: Duration::from_secs(3),
        keepalive: Some(Keepalive::default()),
        retry: RetryPolicy::never(),
        tls,
        agent: None,
        trust_keys: Vec::new(),
    }
}

/// An endpoint that did not answer, as the per-node JSON of `cluster status` and `redact
/// status` shows it.
pub fn unanswered_json(endpoint: &str, e: &ClientError) -> Json {
    json!({ "endpoint": endpoint, "error": { "message": e.to_string(), "code": e.code().map(code_name) } })
}

/// A probe client (see [`probe_client`]) for the endpoints of `client`.
pub fn probe_of(client: &Client) -> Result<Client> {
    probe_client(client.endpoints(), client.config().tls)
}

/// A probe client (see [`probe_client`]) for the endpoints of `client` that signs its calls
/// with `client`'s agent key: for the calls an enforced cluster answers only to an agent.
pub fn agent_probe_of(client: &Client) -> Result<Client> {
    let mine = client.config();
    let config = ClientConfig {
        agent: mine.agent,
        trust_keys: mine.trust_keys,
        ..probe_config(mine.tls)
    };
    Ok(Client::with_config(client.endpoints(), config)?)
}

/// `call` made of each endpoint of `probe` (see [`probe_of`]: no retry, no forwarding), all
/// at once; the answers in the order of the endpoints.
pub async fn each_node<T, F, Fut>(probe: &Client, call: F) -> Vec<Result<T, ClientError>>
where
    F: Fn(Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let calls = (0..probe.endpoints().len()).map(|i| {
        let node = probe.node(i).ok_or_else(|| ClientError::Endpoint {
            endpoint: String::new(),
            reason: "missing".into(),
        });
        let call = &call;
        async move { call(node?).await }
    });
    futures::future::join_all(calls).await
}

/// Each endpoint's own status (see [`each_node`]).
pub async fn node_statuses(probe: &Client) -> Vec<Result<pb::StatusResponse, ClientError>> {
    each_node(probe, |node| async move { node.status().await }).await
}

pub fn receipt_json(r: &pb::TransactResponse) -> Json {
    json!({
        "tx": r.tx,
        "tx_time_ns": r.tx_time_ns,
        "audit_index": r.audit_index,
        "audit_hash": hex::encode(&r.audit_hash),
        "datom_hashes": r.datom_hashes.iter().map(hex::encode).collect::<Vec<_>>(),
        "temp_ids": r.temp_ids,
    })
}

/// A transaction's receipt: JSON, or one line and the temporary names it resolved.
pub fn receipt_output(receipt: &pb::TransactResponse, json: bool) -> Result<()> {
    if json {
        print_json(&receipt_json(receipt))?;
    } else {
        outln!(
            "tx {} at {}: {}, audit entry {} ({})",
            receipt.tx,
            format_time_ns(receipt.tx_time_ns),
            plural(receipt.datom_hashes.len(), "datom"),
            receipt.audit_index,
            short_hash(&receipt.audit_hash)
        )?;
        let mut temp: Vec<_> = receipt.temp_ids.iter().collect();
        temp.sort();
        for (name, id) in temp {
            outln!("  {name} -> entity {id}")?;
        }
    }
    Ok(())
}
