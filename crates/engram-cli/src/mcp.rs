//! `engram mcp`: the cluster's memory as Model Context Protocol tools, over stdio or MCP's
//! streamable HTTP transport (`--listen`).
//!
//! One process acts as one agent: every fact it remembers is recorded as that agent (with an
//! agent key, every request is signed by it, so an enforced cluster holds it to its grants).
//! The tools are written for a language model: few, each with a description that says when to
//! use it, flat arguments, and answers as compact JSON. Errors come back as tool errors that
//! carry the gRPC code and the server's message, so the model can correct itself.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use engram_client::{
    Client, Consistency, DiffQuery, EntitiesQuery, FindQuery, GetOptions, HistoryQuery, HistoryTarget, Join,
    ReferrersQuery, SearchQuery, TrustedLog, pb,
};
use engram_types::{Attribute, BranchName, EntityId, Namespace, Provenance, RedactRequest, Status};
use hyper_util::rt::TokioIo;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::txjson::{self, pb_value_to_json};

const INSTRUCTIONS: &str = "Engram is a shared, append-only memory for a team of agents. \
Facts are (entity, attribute, value) triples inside a namespace such as \"team/a\"; attributes \
look like \":memory/content\". Nothing is overwritten: a new value is a new fact, other agents' \
disagreeing claims are kept and shown as conflicts, and every fact records which agent wrote it \
and in which transaction (tx). Use `remember` to record facts, `recall` to find entities by an \
attribute's value, `get` for everything known about an entity (optionally as of an earlier tx), \
`history` for how a fact changed, `what_changed` for everything since a tx, `list` for the \
namespaces you may read, the entities of one and the facts that refer to an entity, `branch` to try \
changes in isolation, `forget` to remove a value for good (the audit log keeps who wrote what, \
and verifies), and `verify` to check an entity's facts against the cluster's signed audit log.";

/// The MCP server: a client of the cluster, acting as `agent`.
#[derive(Clone)]
pub struct EngramTools {
    client: Client,
    agent: String,
    /// What `verify` has checked of the log so far (trust on first use, then extended).
    trust: Arc<tokio::sync::Mutex<Option<TrustedLog>>>,
    tool_router: ToolRouter<EngramTools>,
}

impl EngramTools {
    pub fn new(client: Client, agent: String) -> EngramTools {
        EngramTools {
            client,
            agent,
            trust: Arc::new(tokio::sync::Mutex::new(None)),
            tool_router: EngramTools::tool_router(),
        }
    }
}

/// Serves the tools on stdin/stdout until the client closes the stream.
pub async fn serve_stdio(client: Client, agent: String) -> Result<()> {
    // Each line passes through [`mark_inexact_numbers`] before the SDK parses it (see there).
    let (mut marked, to_sdk) = tokio::io::duplex(64 << 10);
    tokio::spawn(async move {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdin.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // Bytes that are not UTF-8 go on as they came: the SDK reports them.
            let out = match std::str::from_utf8(&line) {
                Ok(text) => mark_inexact_numbers(text).into_owned().into_bytes(),
                Err(_) => line.clone(),
            };
            if marked.write_all(&out).await.is_err() {
                break;
            }
        }
        // Dropping `marked` ends the SDK's input, as the end of stdin would.
    });
    let service = EngramTools::new(client, agent)
        .serve((to_sdk, tokio::io::stdout()))
        .await
        .context("starting the MCP session on stdio")?;
    service.waiting().await.context("the MCP session")?;
    Ok(())
}

/// Starts a marked number: a string no tool accepts (see [`mark_inexact_numbers`]).
const INEXACT: &str = "\u{0}engram: inexact number: ";

/// The JSON-RPC message `text` with every number in a `tools/call` request's arguments that a
/// 64-bit value cannot hold exactly (see `engram_types::check_json_numbers`) replaced by a
/// string that says why. The SDK parses each request into `serde_json` values before a tool
/// sees it, which silently turns `123456789012345678901234567890` into a float; marked, the
/// number reaches [`refuse_inexact`], which refuses the call and names the field, as the CLI
/// refuses the same number. Other messages go through unchanged.
fn mark_inexact_numbers(text: &str) -> std::borrow::Cow<'_, str> {
    let found = engram_types::inexact_json_numbers(text);
    if found.is_empty() {
        return text.into();
    }
    let is_tool_call = serde_json::from_str::<Json>(text)
        .is_ok_and(|m| m.get("method").and_then(Json::as_str) == Some("tools/call"));
    if !is_tool_call {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 128 * found.len());
    let mut done = 0;
    for (at, why) in found {
        let reason = match why {
            engram_types::ValidationError::Value { reason, .. } => reason,
            other => other.to_string(),
        };
        out.push_str(&text[done..at.start]);
        out.push_str(&Json::String(format!("{INEXACT}{reason}")).to_string());
        done = at.end;
    }
    out.push_str(&text[done..]);
    out.into()
}

/// Why a tool call is refused, if its arguments hold a number [`mark_inexact_numbers`] marked:
/// `facts[0].value: number … cannot be stored exactly: …; send … as a string`.
fn refuse_inexact(arguments: &serde_json::Map<String, Json>) -> Option<String> {
    fn find(path: &str, v: &Json) -> Option<String> {
        match v {
            Json::String(s) => s.strip_prefix(INEXACT).map(|why| format!("{path}: {why}")),
            Json::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| find(&format!("{path}[{i}]"), item)),
            Json::Object(map) => map.iter().find_map(|(k, item)| {
                find(
                    &if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    },
                    item,
                )
            }),
            _ => None,
        }
    }
    arguments.iter().find_map(|(k, v)| find(k, v))
}

/// Serves the tools over MCP's streamable HTTP transport on `listen` (any path) until
/// SIGINT. Requests whose `Host` is not loopback or one of `allowed_hosts` are refused, which
/// keeps a web page from reaching a local server through DNS rebinding.
pub async fn serve_http(
    client: Client,
    agent: String,
    listen: SocketAddr,
    allowed_hosts: Vec<String>,
) -> Result<()> {
    let mut config = StreamableHttpServerConfig::default();
    if !allowed_hosts.is_empty() {
        let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
        hosts.extend(allowed_hosts);
        config = config.with_allowed_hosts(hosts);
    }
    let body_limit_bytes = config.max_request_body_bytes;
    let tools = EngramTools::new(client, agent);
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(move || Ok(tools.clone()), sessions.clone(), config);
    let service = Http {
        service,
        sessions,
        body_limit_bytes,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let local = listener.local_addr().context("the listening address")?;
    // On stderr: a host reading stdout expects nothing there from an HTTP server.
    eprintln!("engram mcp: streamable HTTP on http://{local}/mcp");
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted.context("accepting a connection")?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let service = service.clone();
        let service = hyper::service::service_fn(move |req| {
            let service = service.clone();
            async move { Ok::<_, std::convert::Infallible>(service.handle(req).await) }
        });
        tokio::spawn(async move {
            // A connection that breaks concerns only its own client.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The SDK's streamable HTTP service, with two things changed in front of it: a `tools/call`
/// body passes through [`mark_inexact_numbers`] first (as each stdio line does), and `DELETE`
/// answers as the specification says, which the SDK does not: 404 for a session it does not
/// hold (the SDK answers 202 for any id, so a client cannot tell its session was gone) and
/// 204 once it closed one.
#[derive(Clone)]
struct Http {
    service: StreamableHttpService<EngramTools, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    body_limit_bytes: usize,
}

/// The header that names an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

type HttpResponse =
    hyper::Response<http_body_util::combinators::BoxBody<hyper::body::Bytes, std::convert::Infallible>>;

fn plain(status: hyper::StatusCode, text: &'static str) -> HttpResponse {
    use http_body_util::BodyExt;
    let mut response = hyper::Response::new(
        http_body_util::Full::new(hyper::body::Bytes::from_static(text.as_bytes())).boxed(),
    );
    *response.status_mut() = status;
    response
}

impl Http {
    async fn handle(&self, req: hyper::Request<hyper::body::Incoming>) -> HttpResponse {
        use http_body_util::BodyExt;
        use rmcp::transport::streamable_http_server::SessionManager;
        match *req.method() {
            hyper::Method::POST => {
                let (head, body) = req.into_parts();
                let body = match http_body_util::Limited::new(body, self.body_limit_bytes)
                    .collect()
                    .await
                {
                    Ok(collected) => collected.to_bytes(),
                    Err(_) => {
                        return plain(
                            hyper::StatusCode::PAYLOAD_TOO_LARGE,
                            "the request body is too large, or broke off",
                        );
                    }
                };
                // A body that is not UTF-8 goes on as it came: the SDK reports it.
                let marked = match std::str::from_utf8(&body).map(mark_inexact_numbers) {
                    Ok(std::borrow::Cow::Owned(marked)) => Some(marked),
                    _ => None,
                };
                let body = marked.map_or(body, hyper::body::Bytes::from);
                self.service
                    .handle(hyper::Request::from_parts(head, http_body_util::Full::new(body)))
                    .await
            }
            hyper::Method::DELETE => {
                let id = req
                    .headers()
                    .get(SESSION_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .map(Arc::<str>::from);
                if let Some(id) = id {
                    // A lookup that fails is left to the SDK, which answers it as an error.
                    if let Ok(false) = self.sessions.has_session(&id).await {
                        return plain(hyper::StatusCode::NOT_FOUND, "no such session\n");
                    }
                }
                let response = self.service.handle(req).await;
                if response.status() == hyper::StatusCode::ACCEPTED {
                    return plain(hyper::StatusCode::NO_CONTENT, "");
                }
                response
            }
            _ => self.service.handle(req).await,
        }
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct Fact {
    /// The entity: an existing entity id (integer), or a short name for a new entity (the same
    /// name within one call means the same new entity; the answer gives its id).
    pub entity: Json,
    /// The attribute, as ":prefix/name", e.g. ":memory/content".
    pub attribute: String,
    /// The value: a string, number or boolean as is; or a typed object with one key:
    /// {"keyword": ":status/open"}, {"ref": 12}, {"instant_ns": 1700000000000000000},
    /// {"json": {...}}, {"i64": 5}, {"f64": 1.5}.
    pub value: Json,
    /// true to retract this value instead of asserting it.
    #[serde(default)]
    pub retract: bool,
}

#[derive(Deserialize, JsonSchema)]
pub struct RememberArgs {
    /// The namespace, e.g. "team/a".
    pub namespace: String,
    /// The facts to record, all in one atomic transaction.
    pub facts: Vec<Fact>,
    /// How sure you are, from 0 to 1 (default 1).
    pub confidence: Option<f64>,
    /// "candidate" (default) for a hypothesis, "verified" once checked.
    pub status: Option<String>,
    /// Where the facts come from (a URL, a document, a tool).
    pub source: Option<String>,
    /// Write to this open branch instead of main.
    pub branch: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct RecallArgs {
    pub namespace: String,
    /// Words to search for in the facts' text, e.g. "deploy key rotation". Hits come best
    /// first (word relevance, then recency and verified/confidence), each with the signals
    /// that ranked it. Give this or `attribute`.
    pub query: Option<String>,
    /// An embedding of what you are looking for, from the same model as the stored vectors:
    /// finds the facts whose vectors are nearest (with or without `query`).
    pub vector: Option<Vec<f32>>,
    /// How many refs to follow from the best hits to the entities around them (0 to 3;
    /// default 1), with `query` or `vector`.
    pub hops: Option<u32>,
    /// The attribute to look in, e.g. ":memory/key". With `query`: only facts of this
    /// attribute. Without: every current fact of the attribute (or those holding `value`).
    pub attribute: Option<String>,
    /// Only facts with this value (same forms as in `remember`); with `attribute`, not
    /// `query`.
    pub value: Option<Json>,
    /// Only memories of these kinds, e.g. ["preference", "blocker"] (the memory's
    /// :memory/kind), with `query` or `vector`.
    pub kinds: Option<Vec<String>>,
    /// Search as of this earlier transaction (with `query`).
    pub as_of_tx: Option<u64>,
    /// Search as of this earlier instant, in nanoseconds since the Unix epoch: the memory as
    /// it stood after the last transaction at or before it (with `query`; not with
    /// `as_of_tx`).
    pub as_of_time_ns: Option<i64>,
    /// At most this many facts (default: 10 hits for a query, 50 facts for an attribute, at
    /// most 1,000 per answer).
    pub limit: Option<u32>,
    /// Also recall memories whose :memory/expires has passed (left out by default).
    pub include_expired: Option<bool>,
    /// With `attribute`: the `next_cursor` of an earlier answer, to read the facts after it
    /// (the rest of the arguments unchanged). An answer says `more: true` when facts remain.
    pub cursor: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct GetArgs {
    pub namespace: String,
    /// The entity id.
    pub entity: u64,
    /// Answer as the memory stood right after this transaction.
    pub as_of_tx: Option<u64>,
    /// Answer as the memory stood at this instant, in nanoseconds since the Unix epoch (after
    /// the last transaction at or before it; not with `as_of_tx`).
    pub as_of_time_ns: Option<i64>,
    /// Read this branch instead of main.
    pub branch: Option<String>,
    /// "latest" (default): the newest claim wins; "verified": verified claims first, then
    /// higher confidence.
    pub rule: Option<String>,
    /// Read the memory even if its :memory/expires has passed (then it answers no facts and
    /// says when it expired).
    pub include_expired: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
pub struct HistoryArgs {
    pub namespace: String,
    pub entity: u64,
    /// Only this attribute.
    pub attribute: Option<String>,
    /// At most this many facts, oldest first (default 200, at most 1,000). An answer says
    /// `more: true` when facts remain.
    pub limit: Option<u32>,
    /// The `next_cursor` of an earlier answer, to read the facts after it.
    pub cursor: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct ChangedArgs {
    pub namespace: String,
    /// Changes after this transaction (use the tx of an earlier answer).
    pub since_tx: u64,
    /// Only this entity.
    pub entity: Option<u64>,
    /// At most this many changes, oldest first (default 200, at most 1,000). An answer says
    /// `more: true` when changes remain.
    pub limit: Option<u32>,
    /// The `next_cursor` of an earlier answer, to read the changes after it.
    pub cursor: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct ListArgs {
    /// "namespaces" (those you may read), "entities" (of `namespace`; with `attribute`, those
    /// that have a fact of it) or "referrers" (the current facts of `namespace` whose value
    /// refers to `entity`).
    pub what: String,
    pub namespace: Option<String>,
    /// With "referrers": the entity referred to.
    pub entity: Option<u64>,
    /// With "entities" or "referrers": only this attribute.
    pub attribute: Option<String>,
    /// At most this many items (default 200, at most 1,000). An answer says `more: true` when
    /// items remain.
    pub limit: Option<u32>,
    /// The `next_cursor` of an earlier answer, to read the items after it (the rest of the
    /// arguments unchanged).
    pub cursor: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct QueryArgs {
    pub namespace: String,
    /// The variables each row lists, e.g. ["?task", "?owner"]; an entry may aggregate one:
    /// "(count ?task)", "(count-distinct ?x)", "(sum ?x)", "(avg ?x)", "(min ?x)", "(max ?x)".
    /// Each row is then a group of the plain variables listed, e.g. ["?owner", "(count ?task)"]
    /// counts each owner's tasks (over the joined rows, as SQL's GROUP BY does).
    pub find: Vec<String>,
    /// The clauses every row satisfies, each [entity, attribute, value]: the entity a variable
    /// ("?task") or an entity id; the value a variable, a string, number or boolean, or a
    /// typed value such as {"keyword": ":status/open"} or {"ref": 12} (a reference). A variable
    /// in an entity position joins a reference to its target, e.g.
    /// [["?task", ":task/owner", "?agent"], ["?agent", ":agent/team", "infra"]]. An entry
    /// [op, "?var", value or variable], op one of < <= > >= !=, is a filter the rows pass:
    /// [">", "?priority", 2]. An entry ["not", clause, ...] keeps only the rows for which its
    /// clauses do not all match at once, a variable no other clause binds being its own:
    /// ["not", ["?task", ":task/owner", "?anyone"]] (the tasks nobody owns),
    /// ["not", ["?t", ":task/owner", "?o"], ["?o", ":agent/team", "infra"]] (no owner in
    /// infra). An entry ["or", alternative, ...] matches any one of its alternatives, each a
    /// clause or ["and", clause, ...]: ["or", ["?t", ":task/status", "open"], ["and",
    /// ["?t", ":task/owner", "?o"], ["?o", ":agent/team", "infra"]]]; it binds the variables
    /// every alternative names (?t here; ?o is the second's own).
    #[serde(rename = "where")]
    pub clauses: Vec<Json>,
    /// Read as of this transaction (default: now).
    pub as_of_tx: Option<u64>,
    /// At most this many rows (default 200, at most 1,000). An answer says `more: true` when
    /// rows remain.
    pub limit: Option<u32>,
    /// The `next_cursor` of an earlier answer, to read the rows after it (the rest of the
    /// arguments unchanged).
    pub cursor: Option<String>,
    /// Also answer the plan the server ran (each clause's index use and rows).
    pub explain: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
pub struct BranchArgs {
    pub namespace: String,
    /// The branch name (letters, digits, - _ .).
    pub name: String,
    /// "create", "merge" (into main, as one transaction) or "abandon".
    pub action: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct ForgetArgs {
    pub namespace: String,
    /// The entity whose facts' values go.
    pub entity: u64,
    /// Only this attribute's facts (default: every attribute of the entity).
    pub attribute: Option<String>,
    /// Why (required; kept in the audit log for good, so do not repeat the value here).
    pub reason: String,
    /// List what would go and change nothing.
    pub dry_run: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
pub struct SessionArgs {
    /// The namespace that holds the working notes (e.g. "scratch/run-42").
    pub namespace: String,
    /// "open", "renew" or "end".
    pub action: String,
    /// For open and renew: how long the session lives without a renewal, in milliseconds.
    pub ttl_ms: Option<u64>,
}

#[derive(Deserialize, JsonSchema)]
pub struct VerifyArgs {
    pub namespace: String,
    pub entity: u64,
    /// Check the facts as they stood after this transaction (default: now), proven complete
    /// from the same whole histories.
    pub as_of_tx: Option<u64>,
}

/// The most facts one answer of `recall` by attribute or `history` holds: a model reads its
/// answers whole, so a larger set comes in pages it asks for with `cursor`.
const MAX_TOOL_PAGE: u32 = 1_000;

/// A tool's failure, as the text the model reads.
fn failed(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn namespace(raw: &str) -> Result<Namespace, String> {
    Namespace::new(raw).map_err(|e| format!("namespace: {e}"))
}

fn branch(raw: Option<&str>) -> Result<Option<BranchName>, String> {
    raw.map(|b| BranchName::new(b).map_err(|e| format!("branch: {e}")))
        .transpose()
}

/// A value as the model wrote it: plain JSON scalars as themselves, or a typed object.
fn value_json(v: &Json) -> Json {
    match v {
        Json::String(s) => json!({ "string": s }),
        Json::Bool(b) => json!({ "bool": b }),
        Json::Number(n) if n.is_i64() || n.is_u64() => json!({ "i64": n }),
        Json::Number(n) => json!({ "f64": n }),
        other => other.clone(),
    }
}

/// A datom as the model reads it.
fn fact(d: &pb::Datom) -> Json {
    let prov = d.provenance.clone().unwrap_or_default();
    let value = match pb_value_to_json(d.value.as_ref()) {
        Json::Object(map) if map.len() == 1 => match map.iter().next() {
            Some((k, v)) if matches!(k.as_str(), "string" | "i64" | "f64" | "bool") => v.clone(),
            _ => Json::Object(map),
        },
        other => other,
    };
    let mut out = json!({
        "entity": d.entity,
        "attribute": d.attribute,
        "value": value,
        "tx": d.tx,
        "agent": prov.agent,
        "status": txjson::datom_status_name(d),
        "confidence": prov.confidence,
    });
    if txjson::datom_op_name(d) == "retract" {
        out["retracted"] = json!(true);
    }
    if d.redacted_by_tx != 0 {
        out["forgotten_by_tx"] = json!(d.redacted_by_tx);
    }
    out
}

fn facts(datoms: &[pb::Datom]) -> Vec<Json> {
    datoms.iter().map(fact).collect()
}

fn answer(v: Json) -> String {
    serde_json::to_string_pretty(&v).unwrap_or_else(|_| v.to_string())
}

#[tool_router]
impl EngramTools {
    /// Record facts in shared memory as one atomic transaction (this server's agent is recorded
    /// as their author). Returns the transaction id and the ids given to new entities.
    #[tool]
    async fn remember(&self, Parameters(args): Parameters<RememberArgs>) -> Result<String, String> {
        let ops: Vec<Json> = args
            .facts
            .iter()
            .map(|f| {
                json!({
                    "op": if f.retract { "retract" } else { "assert" },
                    "entity": f.entity,
                    "attribute": f.attribute,
                    "value": value_json(&f.value),
                })
            })
            .collect();
        let mut doc = json!({
            "namespace": args.namespace,
            "agent": self.agent,
            "confidence": args.confidence.unwrap_or(1.0),
            "status": args.status.as_deref().unwrap_or("candidate"),
            "ops": ops,
            "idempotency_key": fresh_key()?,
        });
        if let Some(source) = &args.source {
            doc["source"] = json!(source);
        }
        if let Some(b) = &args.branch {
            doc["branch"] = json!(b);
        }
        let tx = txjson::tx_from_json(&doc).map_err(|e| {
            // The document's paths are the tool's: ops[i] is facts[i].
            format!("{}: {}", e.path.replace("ops[", "facts["), e.reason)
        })?;
        let receipt = self.client.transact(&tx).await.map_err(failed)?;
        let entities: serde_json::Map<String, Json> = receipt
            .temp_ids
            .iter()
            .map(|(name, id)| (name.clone(), json!(id)))
            .collect();
        Ok(answer(json!({ "tx": receipt.tx, "entities": entities })))
    }

    /// Find facts when you do not know an entity's id: by words in their text (`query`), or by
    /// an attribute's current value (`attribute`, optionally `value`).
    #[tool]
    async fn recall(&self, Parameters(args): Parameters<RecallArgs>) -> Result<String, String> {
        let ns = namespace(&args.namespace)?;
        let attribute = args
            .attribute
            .as_deref()
            .map(|a| engram_types::Attribute::new(a).map_err(|e| format!("attribute: {e}")))
            .transpose()?;
        if args.kinds.is_some() && args.query.is_none() && args.vector.is_none() {
            return Err("kinds: give it with query or vector".into());
        }
        if args.query.is_some() || args.vector.is_some() {
            if args.value.is_some() {
                return Err("value: give it with attribute alone, not with query or vector".into());
            }
            let mut query = SearchQuery::new(ns, args.query.unwrap_or_default());
            query.vector = args.vector;
            query.hops = args.hops;
            query.kinds = args.kinds.unwrap_or_default();
            query.k = args.limit.unwrap_or(0);
            query.as_of_tx = args.as_of_tx;
            query.as_of_time_ns = args.as_of_time_ns;
            query.attributes = attribute.into_iter().collect();
            query.include_expired = args.include_expired.unwrap_or(false);
            let found = self.client.search(&query).await.map_err(failed)?;
            let hits: Vec<Json> = found
                .hits
                .iter()
                .map(|h| {
                    let mut f = h.datom.as_ref().map(fact).unwrap_or(Json::Null);
                    f["score"] = json!(h.score);
                    f["found_by"] = json!(
                        h.signals
                            .iter()
                            .map(|s| json!({ "signal": s.signal, "rank": s.rank }))
                            .collect::<Vec<_>>()
                    );
                    if h.conflicting {
                        f["conflicting"] = json!(true);
                    }
                    f
                })
                .collect();
            return Ok(answer(json!({ "hits": hits, "as_of_tx": found.as_of_tx })));
        }
        let Some(attribute) = attribute else {
            return Err("give query (words to search for), vector, or attribute".into());
        };
        let value = match &args.value {
            None => None,
            Some(v) => Some(txjson::value_from_json("value", &value_json(v)).map_err(failed)?),
        };
        let query = FindQuery {
            namespace: ns,
            attribute,
            value,
            as_of_tx: None,
            as_of_time_ns: None,
            limit: args.limit.unwrap_or(50).clamp(1, MAX_TOOL_PAGE),
            consistency: Consistency::Linearizable,
            branch: None,
            include_expired: args.include_expired.unwrap_or(false),
            since_tx: None,
            valid_at_ns: None,
        };
        let found = self
            .client
            .find_page(&query, &txjson::parse_cursor("cursor", args.cursor.as_deref())?)
            .await
            .map_err(failed)?;
        let mut out = json!({ "facts": facts(&found.datoms), "read_at_tx": found.applied_tx });
        txjson::add_page_position(&mut out, found.as_of_tx, &found.next_cursor);
        Ok(answer(out))
    }

    /// Everything currently known about an entity, or as it stood at an earlier transaction.
    /// Disagreeing claims by other agents are listed under "conflicts".
    #[tool]
    async fn get(&self, Parameters(args): Parameters<GetArgs>) -> Result<String, String> {
        let rule = match args.rule.as_deref() {
            None | Some("latest") => pb::Resolution::Latest,
            Some("verified") => pb::Resolution::Verified,
            Some(other) => return Err(format!("rule: {other:?} is not \"latest\" or \"verified\"")),
        };
        let opts = GetOptions {
            as_of_tx: args.as_of_tx,
            as_of_time_ns: args.as_of_time_ns,
            branch: branch(args.branch.as_deref())?,
            rule,
            include_expired: args.include_expired.unwrap_or(false),
            ..GetOptions::default()
        };
        let got = self
            .client
            .get(&namespace(&args.namespace)?, EntityId(args.entity), opts)
            .await
            .map_err(failed)?;
        let mut out = json!({
            "entity": got.entity,
            "facts": facts(&got.datoms),
            "conflicts": facts(&got.conflicts),
            "read_at_tx": got.applied_tx,
        });
        if let Some(at_ns) = got.expired_at_ns {
            out["expired_at_ns"] = json!(at_ns);
        }
        if got.as_of_tx != 0 {
            out["as_of_tx"] = json!(got.as_of_tx);
        }
        Ok(answer(out))
    }

    /// Every fact ever recorded about an entity (assertions and retractions, by every agent),
    /// oldest first: how the memory of it changed and who changed it.
    #[tool]
    async fn history(&self, Parameters(args): Parameters<HistoryArgs>) -> Result<String, String> {
        let attribute = args
            .attribute
            .as_deref()
            .map(|a| engram_types::Attribute::new(a).map_err(|e| format!("attribute: {e}")))
            .transpose()?;
        let target = HistoryTarget::Entity {
            entity: EntityId(args.entity),
            attribute,
        };
        let query = HistoryQuery {
            limit: args.limit.unwrap_or(200).clamp(1, MAX_TOOL_PAGE),
            ..HistoryQuery::new(namespace(&args.namespace)?, target)
        };
        let h = self
            .client
            .history_page(&query, &txjson::parse_cursor("cursor", args.cursor.as_deref())?)
            .await
            .map_err(failed)?;
        let mut out = json!({ "facts": facts(&h.datoms) });
        txjson::add_page_position(&mut out, h.as_of_tx, &h.next_cursor);
        Ok(answer(out))
    }

    /// What was asserted and retracted in a namespace (or on one entity) after a transaction.
    #[tool]
    async fn what_changed(&self, Parameters(args): Parameters<ChangedArgs>) -> Result<String, String> {
        let query = DiffQuery {
            namespace: namespace(&args.namespace)?,
            entity: args.entity.map(EntityId),
            from_tx: args.since_tx,
            to_tx: 0,
            limit: args.limit.unwrap_or(200).clamp(1, MAX_TOOL_PAGE),
            consistency: Consistency::Linearizable,
            valid_at_ns: None,
        };
        let d = self
            .client
            .diff_page(&query, &txjson::parse_cursor("cursor", args.cursor.as_deref())?)
            .await
            .map_err(failed)?;
        let mut out = json!({
            "asserted": facts(&d.asserted),
            "retracted": facts(&d.retracted),
            "up_to_tx": d.to_tx,
        });
        txjson::add_page_position(&mut out, d.to_tx, &d.next_cursor);
        Ok(answer(out))
    }

    /// List what the memory holds: the namespaces you may read, the entities of a namespace, or
    /// the current facts that refer to an entity (who points at it, through which attribute).
    #[tool]
    async fn list(&self, Parameters(args): Parameters<ListArgs>) -> Result<String, String> {
        let cursor = txjson::parse_cursor("cursor", args.cursor.as_deref())?;
        let limit = args.limit.unwrap_or(200).clamp(1, MAX_TOOL_PAGE);
        let attribute = args
            .attribute
            .as_deref()
            .map(|a| engram_types::Attribute::new(a).map_err(|e| format!("attribute: {e}")))
            .transpose()?;
        let ns = || {
            args.namespace
                .as_deref()
                .ok_or_else(|| format!("namespace: required to list {}", args.what))
                .and_then(namespace)
        };
        match args.what.as_str() {
            "namespaces" => {
                let page = self
                    .client
                    .list_namespaces(limit, &cursor, Consistency::Linearizable)
                    .await
                    .map_err(failed)?;
                let mut out = json!({ "namespaces": page.namespaces, "more": !page.next_cursor.is_empty() });
                if !page.next_cursor.is_empty() {
                    out["next_cursor"] = json!(hex::encode(&page.next_cursor));
                }
                Ok(answer(out))
            }
            "entities" => {
                let query = EntitiesQuery {
                    attribute,
                    limit,
                    ..EntitiesQuery::new(ns()?)
                };
                let page = self
                    .client
                    .list_entities_page(&query, &cursor)
                    .await
                    .map_err(failed)?;
                let mut out = json!({ "entities": page.entities });
                txjson::add_page_position(&mut out, page.as_of_tx, &page.next_cursor);
                Ok(answer(out))
            }
            "referrers" => {
                let entity = args.entity.ok_or("entity: required to list referrers")?;
                let query = ReferrersQuery {
                    attribute,
                    limit,
                    ..ReferrersQuery::new(ns()?, EntityId(entity))
                };
                let page = self
                    .client
                    .referrers_page(&query, &cursor)
                    .await
                    .map_err(failed)?;
                let mut out = json!({ "facts": facts(&page.datoms) });
                txjson::add_page_position(&mut out, page.as_of_tx, &page.next_cursor);
                Ok(answer(out))
            }
            other => Err(format!(
                "what: {other:?} is not \"namespaces\", \"entities\" or \"referrers\""
            )),
        }
    }

    /// Ask a question that joins facts: the rows of values for `find` that satisfy every
    /// clause of `where` at once, over current facts as of one transaction (e.g. the open
    /// tasks whose owner is on a given team), in one call instead of many.
    #[tool]
    async fn query(&self, Parameters(args): Parameters<QueryArgs>) -> Result<String, String> {
        let cursor = txjson::parse_cursor("cursor", args.cursor.as_deref())?;
        let doc = json!({ "find": args.find, "where": args.clauses });
        let parsed = crate::queryjson::query_from_json(&doc).map_err(|e| e.to_string())?;
        let join = Join {
            as_of_tx: args.as_of_tx,
            limit: args.limit.unwrap_or(200).clamp(1, MAX_TOOL_PAGE),
            explain: args.explain.unwrap_or(false),
            ..Join::new(namespace(&args.namespace)?, parsed)
        };
        let page = self.client.query_page(&join, &cursor).await.map_err(failed)?;
        Ok(answer(crate::queryjson::rows_to_json(&page)))
    }

    /// Create a branch to try changes in isolation (write to it with `remember`'s "branch"),
    /// then merge it into main as one transaction or abandon it.
    #[tool]
    async fn branch(&self, Parameters(args): Parameters<BranchArgs>) -> Result<String, String> {
        let ns = namespace(&args.namespace)?;
        let name = BranchName::new(args.name.as_str()).map_err(|e| format!("name: {e}"))?;
        let provenance = Provenance {
            agent: self.agent.clone(),
            confidence: 1.0,
            status: Status::Candidate,
            ..Provenance::default()
        };
        let receipt = match args.action.as_str() {
            "create" => self.client.create_branch(&ns, &name, None, &provenance).await,
            "merge" => self.client.close_branch(&ns, &name, true, &provenance).await,
            "abandon" => self.client.close_branch(&ns, &name, false, &provenance).await,
            other => return Err(format!("action: {other:?} is not create, merge or abandon")),
        }
        .map_err(failed)?;
        Ok(answer(
            json!({ "branch": args.name, "action": args.action, "tx": receipt.tx }),
        ))
    }

    /// Forget the values of an entity's facts (or of one attribute) on every node, for good:
    /// each fact keeps who said it and when, and its hash, so the audit log still verifies; the
    /// forgetting itself is recorded with the reason. Reaches the entity's facts on every branch
    /// too (each such fact names its `branch`). Use `dry_run` first. Returns how many facts went
    /// and the transactions that recorded it (one per part of at most 100 facts).
    #[tool]
    async fn forget(&self, Parameters(args): Parameters<ForgetArgs>) -> Result<String, String> {
        let req = RedactRequest {
            namespace: namespace(&args.namespace)?,
            entity: EntityId(args.entity),
            attribute: args
                .attribute
                .as_deref()
                .map(|a| Attribute::new(a).map_err(|e| format!("attribute: {e}")))
                .transpose()?,
            reason: args.reason,
            provenance: Provenance {
                agent: self.agent.clone(),
                confidence: 1.0,
                status: Status::Candidate,
                ..Provenance::default()
            },
        };
        req.validate().map_err(failed)?;
        let dry_run = args.dry_run.unwrap_or(false);
        let answer_pb = self.client.redact(&req, dry_run).await.map_err(failed)?;
        let forgotten: Vec<Json> = answer_pb
            .datoms
            .iter()
            .map(|d| match d.branch.as_str() {
                "" => json!({ "tx": d.tx, "attribute": d.attribute }),
                branch => json!({ "tx": d.tx, "attribute": d.attribute, "branch": branch }),
            })
            .collect();
        Ok(answer(json!({
            "dry_run": dry_run,
            "forgotten": forgotten.len(),
            "facts": forgotten,
            "tx": answer_pb.tx,
            "part_txs": answer_pb.part_txs,
        })))
    }

    /// Keep working notes in a namespace that is forgotten when you are done: "open" a session
    /// on it for `ttl_ms`, "renew" it before that passes, "end" it when the work is done. When
    /// it ends or lapses, every fact written to the namespace is forgotten on every node (the
    /// audit log still verifies). Needs the `redact` grant in enforced mode.
    #[tool]
    async fn session(&self, Parameters(args): Parameters<SessionArgs>) -> Result<String, String> {
        let ns = namespace(&args.namespace)?;
        let ttl = || match args.ttl_ms {
            Some(ms) if ms > 0 => Ok(ms),
            _ => Err(format!("ttl_ms: {} needs a ttl_ms above 0", args.action)),
        };
        let receipt = match args.action.as_str() {
            "open" => self.client.open_session(ns.as_str(), ttl()?).await,
            "renew" => self.client.renew_session(ns.as_str(), ttl()?).await,
            "end" => self.client.end_session(ns.as_str()).await,
            other => return Err(format!("action: {other:?} is not open, renew or end")),
        }
        .map_err(failed)?;
        Ok(answer(json!({
            "namespace": args.namespace,
            "action": args.action,
            "ttl_ms": args.ttl_ms.filter(|_| args.action != "end"),
            "tx": receipt.tx,
        })))
    }

    /// Check an entity's current facts against the cluster's signed audit log: proven complete
    /// and current (every attribute it has, each with its whole history, against the state
    /// root a node-signed checkpoint covers; nothing left out, nothing stale), or as they stood
    /// after transaction `as_of_tx`. Returns the facts only if every proof verifies; an unknown
    /// entity is proven to have no facts.
    #[tool]
    async fn verify(&self, Parameters(args): Parameters<VerifyArgs>) -> Result<String, String> {
        let ns = namespace(&args.namespace)?;
        let mut guard = self.trust.lock().await;
        let mut log = self.client.trusted(&mut guard).await.map_err(failed)?;
        let got = self
            .client
            .get_complete(
                &mut log,
                &ns,
                EntityId(args.entity),
                GetOptions {
                    as_of_tx: args.as_of_tx,
                    ..GetOptions::default()
                },
            )
            .await;
        let size = log.size();
        *guard = Some(log);
        let got = got.map_err(failed)?;
        Ok(answer(json!({
            "verified": true,
            "complete": true,
            "entity": got.response.entity,
            "facts": facts(&got.response.datoms),
            "attributes": got.slots,
            "history_datoms": got.history_datoms,
            "state_tx": got.state_tx,
            "as_of_tx": got.as_of_tx,
            "unfolded": got.unfolded,
            "checked_against_log_size": size,
        })))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for EngramTools {
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        // Checked before any tool reads its arguments, so no tool can store a marked number
        // as the string that marks it.
        if let Some(why) = request.arguments.as_ref().and_then(refuse_inexact) {
            return Ok(rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(why)]).into());
        }
        let tcc = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tool_router.call(tcc).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("engram", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// A random idempotency key, so the client may retry a write without applying it twice.
fn fresh_key() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for an idempotency key: {e}"))?;
    Ok(format!("mcp-{}", hex::encode(bytes)))
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    #[test]
    fn inexact_numbers_in_a_tool_call_are_marked_then_refused_by_path() {
        let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"remember","arguments":{"namespace":"a","facts":[{"entity":"n","attribute":":n/b","value":0.1},{"entity":"n","attribute":":n/c","value":{"json":{"x":[123456789012345678901234567890]}}}]}}}"#;
        let marked = mark_inexact_numbers(call);
        let message: Json = serde_json::from_str(&marked).unwrap();
        let arguments = message["params"]["arguments"].as_object().unwrap();
        let why = refuse_inexact(arguments).unwrap();
        assert!(
            why.starts_with(
                "facts[1].value.json.x[0]: number 123456789012345678901234567890 cannot be stored exactly"
            ),
            "{why}"
        );
        assert!(why.ends_with("send a larger one as a string"), "{why}");
        assert_eq!(arguments["facts"][0]["value"], json!(0.1));
        // Exact numbers, and messages other than tool calls, pass as they came.
        let exact = call.replace("123456789012345678901234567890", "9223372036854775807");
        assert!(matches!(mark_inexact_numbers(&exact), Cow::Borrowed(_)));
        let listing = call.replace("tools/call", "tools/list");
        assert!(matches!(mark_inexact_numbers(&listing), Cow::Borrowed(_)));
        let exact: Json = serde_json::from_str(&exact).unwrap();
        assert_eq!(
            refuse_inexact(exact["params"]["arguments"].as_object().unwrap()),
            None
        );
    }
}
