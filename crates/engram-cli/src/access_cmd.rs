//! `engram agent`, `engram grant`, `engram revoke` and `engram whoami`: agents, their keys and
//! what they may do.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use engram_access::{Action, AgentKey, Principal};
use engram_client::{Client, pb};
use serde_json::{Value as Json, json};

use crate::cli::{AccessArgs, AgentCommand, GrantArgs};
use crate::output::print_json;
use crate::output::{Table, out, outln};

/// A new agent key for `name`, from the OS RNG, written to `out` (never over an existing file).
pub fn new_key_file(name: &str, out: &Path) -> Result<AgentKey> {
    let principal = Principal::new(name).map_err(|e| anyhow!("{e}"))?;
    Ok(AgentKey::create(principal, out)?)
}

fn change_output(what: &str, resp: &pb::PolicyResponse, json: bool, extra: Json) -> Result<()> {
    if json {
        let mut value = json!({ "tx": resp.tx, "audit_index": resp.audit_index });
        if let (Json::Object(map), Json::Object(more)) = (&mut value, extra) {
            map.extend(more);
        }
        print_json(&value)
    } else {
        outln!("{what}: tx {}, audit entry {}", resp.tx, resp.audit_index)
    }
}

pub async fn agent(client: &Client, cmd: AgentCommand, json: bool) -> Result<()> {
    match cmd {
        AgentCommand::Keygen { name, out } => {
            let key = new_key_file(&name, &out)?;
            let public = hex::encode(key.public().0);
            if json {
                print_json(
                    &json!({ "agent": name, "public_key": public, "key_file": out.display().to_string() }),
                )
            } else {
                outln!("wrote {} for agent {name}\npublic key {public}", out.display())
            }
        }
        AgentCommand::Create { name, out } => {
            // The key file is written first: a registration that succeeds must never leave
            // an agent whose secret nobody holds.
            let key = new_key_file(&name, &out)?;
            let resp = client.add_agent(&name, key.public().0).await.with_context(|| {
                format!(
                    "registering agent {name} (its key file {} is kept)",
                    out.display()
                )
            })?;
            let public = hex::encode(key.public().0);
            change_output(
                &format!("agent {name} registered (key {public} in {})", out.display()),
                &resp,
                json,
                json!({ "agent": name, "public_key": public, "key_file": out.display().to_string() }),
            )
        }
        AgentCommand::Add { name, public_key } => {
            let raw = hex::decode(&public_key).map_err(|_| anyhow!("--public-key: not hex"))?;
            let key: [u8; 32] = raw
                .as_slice()
                .try_into()
                .map_err(|_| anyhow!("--public-key: {} bytes, expected 32", raw.len()))?;
            let resp = client
                .add_agent(&name, key)
                .await
                .context("registering the agent")?;
            change_output(
                &format!("agent {name} registered"),
                &resp,
                json,
                json!({ "agent": name }),
            )
        }
        AgentCommand::Rotate { name, out } => {
            let key = new_key_file(&name, &out)?;
            let resp = client
                .rotate_agent_key(&name, key.public().0)
                .await
                .with_context(|| {
                    format!(
                        "rotating agent {name}'s key (the new key file {} is kept)",
                        out.display()
                    )
                })?;
            change_output(
                &format!("agent {name} now signs with the key in {}", out.display()),
                &resp,
                json,
                json!({ "agent": name, "public_key": hex::encode(key.public().0), "key_file": out.display().to_string() }),
            )
        }
        AgentCommand::Revoke { name } => {
            let resp = client.revoke_agent(&name).await.context("revoking the agent")?;
            change_output(
                &format!("agent {name} revoked"),
                &resp,
                json,
                json!({ "agent": name }),
            )
        }
        AgentCommand::AssignRole { agent, role } => {
            let resp = client
                .assign_role(&agent, &role, false)
                .await
                .with_context(|| format!("assigning role {role} to agent {agent}"))?;
            change_output(
                &format!("agent {agent} now holds the grants of role:{role}"),
                &resp,
                json,
                json!({ "agent": agent, "role": format!("role:{role}") }),
            )
        }
        AgentCommand::UnassignRole { agent, role } => {
            let resp = client
                .assign_role(&agent, &role, true)
                .await
                .with_context(|| format!("taking role {role} from agent {agent}"))?;
            change_output(
                &format!("agent {agent} no longer holds role:{role}"),
                &resp,
                json,
                json!({ "agent": agent, "role": format!("role:{role}") }),
            )
        }
        AgentCommand::List => {
            let resp = client.list_agents().await.context("listing agents")?;
            if json {
                let rows: Vec<Json> = resp
                    .agents
                    .iter()
                    .map(|a| {
                        json!({ "name": a.name, "public_key": hex::encode(&a.public_key),
                            "revoked": a.revoked, "roles": a.roles, "entity": a.entity, "since_tx": a.since_tx })
                    })
                    .collect();
                print_json(&json!({ "agents": rows, "applied_tx": resp.applied_tx }))
            } else {
                let mut table = Table::new(&["agent", "public key", "state", "roles", "since tx"]);
                for a in &resp.agents {
                    let state = if a.revoked { "revoked" } else { "active" };
                    table.row(vec![
                        a.name.clone(),
                        hex::encode(&a.public_key),
                        state.into(),
                        a.roles.join(","),
                        a.since_tx.to_string(),
                    ]);
                }
                out!("{}", table.render())
            }
        }
    }
}

/// Grants (or revokes) each action of `args`, one audited change each.
pub async fn grant(client: &Client, args: GrantArgs, revoke: bool, json: bool) -> Result<()> {
    let actions = args
        .actions
        .iter()
        .map(|a| a.parse::<Action>().map_err(|e| anyhow!("--action: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let mut on = if args.prefix.is_empty() {
        "every namespace".to_string()
    } else {
        args.prefix.clone()
    };
    if !args.attribute.is_empty() {
        on = format!("{on}, attribute {} only", args.attribute);
    }
    let mut done = Vec::new();
    for action in actions {
        let resp = client
            .grant_on(
                &args.principal,
                action.name(),
                &args.prefix,
                &args.attribute,
                revoke,
            )
            .await
            .with_context(|| {
                let verb = if revoke { "revoking" } else { "granting" };
                format!("{verb} {action} on {on} for {}", args.principal)
            })?;
        if !json {
            let verb = if revoke { "revoked" } else { "granted" };
            outln!(
                "{verb}: {} may{} {action} on {on} (tx {}, audit entry {})",
                args.principal,
                if revoke { " no longer" } else { "" },
                resp.tx,
                resp.audit_index
            )?;
        }
        done.push(
            json!({ "principal": args.principal, "action": action.name(), "prefix": args.prefix,
            "attribute": args.attribute, "tx": resp.tx, "audit_index": resp.audit_index }),
        );
    }
    if json {
        print_json(&Json::Array(done))?;
    }
    Ok(())
}

pub async fn whoami(client: &Client, json: bool) -> Result<()> {
    let resp = client.who_am_i().await.context("asking who am I")?;
    let grants: Vec<Json> = resp
        .grants
        .iter()
        .map(|g| json!({ "principal": g.principal, "action": g.action, "prefix": g.prefix, "attribute": g.attribute }))
        .collect();
    if json {
        return print_json(
            &json!({ "principal": resp.principal, "security": resp.security, "grants": grants }),
        );
    }
    if resp.principal.is_empty() {
        outln!(
            "unsigned requests (no --agent-key); security mode: {}",
            resp.security
        )?;
        if resp.security != "open" {
            bail!("this cluster refuses unsigned requests: pass --agent-key FILE");
        }
        return Ok(());
    }
    outln!("agent {}; security mode: {}", resp.principal, resp.security)?;
    let mut table = Table::new(&["action", "on", "granted to"]);
    for g in &resp.grants {
        let on = if g.prefix.is_empty() {
            "every namespace".to_string()
        } else {
            g.prefix.clone()
        };
        table.row(vec![g.action.clone(), on, g.principal.clone()]);
    }
    if table.is_empty() {
        outln!("no grants")
    } else {
        out!("{}", table.render())
    }
}

/// `engram access`: each node's access log, filtered; or, with `--verify`, each node's whole log
/// checked.
pub async fn access_log(client: &Client, endpoints: &[String], args: AccessArgs, json: bool) -> Result<()> {
    let since_ns = match (args.since_ns, args.last_secs) {
        (Some(ns), _) => Some(ns),
        (None, Some(secs)) => Some(
            wall_clock_ns()
                .saturating_sub(i64::try_from(secs.saturating_mul(1_000_000_000)).unwrap_or(i64::MAX)),
        ),
        (None, None) => None,
    };
    if let Some((prefix, enabled)) = args
        .enable
        .as_ref()
        .map(|p| (p, true))
        .or(args.disable.as_ref().map(|p| (p, false)))
    {
        let resp = client.set_access_log(prefix, enabled).await.with_context(|| {
            format!(
                "switching the access log {} for {prefix}",
                if enabled { "on" } else { "off" }
            )
        })?;
        if json {
            return print_json(&json!({
                "prefix": prefix, "enabled": enabled, "tx": resp.tx, "audit_index": resp.audit_index,
            }));
        }
        let now = if enabled { "now logs" } else { "no longer logs" };
        return outln!(
            "every node {now} the reads under {prefix} (tx {}, audit entry {})",
            resp.tx,
            resp.audit_index
        );
    }
    let mut docs = Vec::new();
    let mut failed = Vec::new();
    if let Some(path) = &args.verify_file {
        for (endpoint, verdict) in verify_file(path)? {
            report_verdict(&endpoint, &verdict, json, &mut docs, &mut failed)?;
        }
        return finish(docs, failed, json);
    }
    if let Some(path) = &args.export {
        let events = export_logs(client, endpoints, path).await?;
        if json {
            return print_json(&json!({ "export": path.display().to_string(), "events": events }));
        }
        return outln!(
            "{events} access events of {} nodes written to {}",
            endpoints.len(),
            path.display()
        );
    }
    for (i, endpoint) in endpoints.iter().enumerate() {
        let node = client
            .node(i)
            .ok_or_else(|| anyhow!("no client for endpoint {endpoint}"))?;
        if args.verify {
            let verdict = verify_live(&node)
                .await
                .with_context(|| format!("reading the access log of {endpoint}"))?;
            report_verdict(endpoint, &verdict, json, &mut docs, &mut failed)?;
            continue;
        }
        let resp = node
            .access_events(pb::AccessEventsRequest {
                namespace: args.ns.clone().unwrap_or_default(),
                principal: args.principal.clone().unwrap_or_default(),
                since_ns,
                after_seq: 0,
                limit: u32::try_from(args.limit).unwrap_or(u32::MAX),
                refused_only: args.refused,
            })
            .await
            .with_context(|| format!("reading the access log of {endpoint}"))?;
        if json {
            let events: Vec<Json> = resp
                .events
                .iter()
                .map(|e| {
                    json!({
                        "seq": e.seq, "time_ns": e.time_ns, "principal": e.principal, "call": e.call,
                        "namespace": e.namespace, "entity": e.entity, "as_of_tx": e.as_of_tx,
                        "read_at": e.read_at, "datoms": e.datoms, "signed": hex::encode(&e.signed),
                        "refused": (!e.refused_code.is_empty())
                            .then(|| json!({ "code": e.refused_code, "reason": e.refused_reason })),
                    })
                })
                .collect();
            docs.push(json!({
                "endpoint": endpoint, "node_id": resp.node_id, "node_key": hex::encode(&resp.node_key),
                "logged_prefixes": resp.logged_prefixes, "head_seq": resp.head_seq, "events": events,
            }));
            continue;
        }
        let logs = if resp.logged_prefixes.is_empty() {
            "no reads (serve --access-log PREFIX)".to_string()
        } else {
            resp.logged_prefixes.join(", ")
        };
        outln!(
            "{endpoint}: node {} logs {logs}, and every call it refuses; {} events in all",
            resp.node_id,
            resp.head_seq
        )?;
        let mut table = Table::new(&[
            "seq",
            "time",
            "principal",
            "call",
            "namespace",
            "entity",
            "as of",
            "datoms",
            "refused",
        ]);
        for e in &resp.events {
            table.row(vec![
                e.seq.to_string(),
                crate::output::format_time_ns(e.time_ns),
                if e.principal.is_empty() {
                    "(unsigned)".into()
                } else {
                    e.principal.clone()
                },
                e.call.clone(),
                e.namespace.clone(),
                e.entity.map_or(String::new(), |x| x.to_string()),
                e.as_of_tx.map_or(String::new(), |x| x.to_string()),
                e.datoms.to_string(),
                if e.refused_code.is_empty() {
                    String::new()
                } else {
                    format!("{}: {}", e.refused_code, e.refused_reason)
                },
            ]);
        }
        if table.is_empty() {
            outln!("  no matching events")?;
        } else {
            out!("{}", table.render())?;
        }
    }
    finish(docs, failed, json)
}

fn finish(docs: Vec<Json>, failed: Vec<String>, json: bool) -> Result<()> {
    if json {
        print_json(&Json::Array(docs))?;
    }
    if !failed.is_empty() {
        return Err(crate::common::Tampered(failed.join("; ")).into());
    }
    Ok(())
}

fn report_verdict(
    endpoint: &str,
    verdict: &AccessVerdict,
    json: bool,
    docs: &mut Vec<Json>,
    failed: &mut Vec<String>,
) -> Result<()> {
    if let Err(fault) = &verdict.result {
        failed.push(format!("{endpoint}: {fault}"));
    }
    if json {
        docs.push(json!({
            "endpoint": endpoint, "node_id": verdict.node_id, "node_key_id": verdict.key_id,
            "events": verdict.events, "ok": verdict.result.is_ok(),
            "failure": verdict.result.as_ref().err().map(ToString::to_string),
        }));
        return Ok(());
    }
    match &verdict.result {
        Ok(()) => outln!(
            "{endpoint}: node {} access log verified: {} events, signed by key(s) {}",
            verdict.node_id,
            verdict.events,
            verdict.key_id
        ),
        Err(fault) => outln!(
            "{endpoint}: node {} ACCESS LOG DOES NOT VERIFY: {fault}",
            verdict.node_id
        ),
    }
}

/// What checking one node's whole access log found.
struct AccessVerdict {
    node_id: u64,
    key_id: String,
    events: u64,
    result: Result<(), engram_audit::AccessFault>,
}

/// The format tag of `engram access --export` files: JSON lines, a header line
/// `{"format": ...}`, then per node a line `{"node": {"endpoint", "node_id", "node_keys"}}`
/// followed by one line `{"event": HEX}` per stored event, in order. Written and read as a
/// stream, so a long log never sits in memory whole.
const EXPORT_FORMAT: &str = "engram-access-log/1";

/// One node's log as it is read: the node, then its events in order.
enum LogItem<'a> {
    Node {
        node_id: u64,
        /// The keys it may have signed with: its current key first.
        keys: &'a [engram_audit::PublicKey],
    },
    Event(&'a [u8]),
}

/// Reads a node's whole log, page by page, handing each item to `visit`.
async fn stream_log(node: &Client, mut visit: impl FnMut(LogItem<'_>) -> Result<()>) -> Result<()> {
    let mut after_seq = 0;
    let mut started = false;
    loop {
        let resp = node
            .access_events(pb::AccessEventsRequest {
                after_seq,
                limit: 10_000,
                ..Default::default()
            })
            .await?;
        if !started {
            let mut keys = vec![engram_proto::public_key("node_key", &resp.node_key)?];
            for k in &resp.node_keys {
                let k = engram_proto::public_key("node_keys", k)?;
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            visit(LogItem::Node {
                node_id: resp.node_id,
                keys: &keys,
            })?;
            started = true;
        }
        for e in &resp.events {
            visit(LogItem::Event(&e.signed))?;
        }
        if resp.events.is_empty() || resp.last_seq >= resp.head_seq {
            return Ok(());
        }
        after_seq = resp.last_seq;
    }
}

/// Checks one node's log as it streams, against the keys the node names. The keys are the
/// node's word: compare them with the node keys its audit chain lists (`engram audit verify`
/// prints them).
struct LogCheck {
    node_id: u64,
    key_ids: String,
    verifier: engram_audit::AccessLogVerifier,
    fault: Option<engram_audit::AccessFault>,
}

impl LogCheck {
    fn new(node_id: u64, keys: &[engram_audit::PublicKey]) -> LogCheck {
        LogCheck {
            node_id,
            key_ids: keys
                .iter()
                .map(|k| k.key_id().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            verifier: engram_audit::AccessLogVerifier::new(keys),
            fault: None,
        }
    }

    fn event(&mut self, bytes: &[u8]) {
        if self.fault.is_some() {
            return;
        }
        let seq = self.verifier.checked() + 1;
        let signed =
            engram_audit::SignedAccessEvent::decode(bytes).map_err(|err| engram_audit::AccessFault {
                seq,
                field: "encoding",
                message: err.to_string(),
            });
        if let Err(fault) = signed.and_then(|s| self.verifier.push(&s)) {
            self.fault = Some(fault);
        }
    }

    fn verdict(self) -> AccessVerdict {
        let result = match self.fault {
            Some(fault) => Err(fault),
            None => self.verifier.finish(),
        };
        AccessVerdict {
            node_id: self.node_id,
            key_id: self.key_ids,
            events: self.verifier.checked(),
            result,
        }
    }
}

/// Checks a node's whole log as it is read.
async fn verify_live(node: &Client) -> Result<AccessVerdict> {
    let mut check: Option<LogCheck> = None;
    stream_log(node, |item| {
        match item {
            LogItem::Node { node_id, keys } => check = Some(LogCheck::new(node_id, keys)),
            LogItem::Event(bytes) => {
                if let Some(c) = &mut check {
                    c.event(bytes);
                }
            }
        }
        Ok(())
    })
    .await?;
    check
        .map(LogCheck::verdict)
        .ok_or_else(|| anyhow!("the node sent no access log"))
}

/// Writes every node's log to `path` (see [`EXPORT_FORMAT`]); returns the events written.
async fn export_logs(client: &Client, endpoints: &[String], path: &Path) -> Result<u64> {
    use std::io::Write;
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let io = |e: std::io::Error| anyhow!("writing {}: {e}", path.display());
    writeln!(out, "{}", json!({ "format": EXPORT_FORMAT })).map_err(io)?;
    let mut events = 0u64;
    for (i, endpoint) in endpoints.iter().enumerate() {
        let node = client
            .node(i)
            .ok_or_else(|| anyhow!("no client for endpoint {endpoint}"))?;
        stream_log(&node, |item| {
            let line = match item {
                LogItem::Node { node_id, keys } => json!({ "node": {
                    "endpoint": endpoint, "node_id": node_id,
                    "node_keys": keys.iter().map(|k| hex::encode(k.0)).collect::<Vec<_>>(),
                }}),
                LogItem::Event(bytes) => {
                    events += 1;
                    json!({ "event": hex::encode(bytes) })
                }
            };
            writeln!(out, "{line}").map_err(io)
        })
        .await
        .with_context(|| format!("reading the access log of {endpoint}"))?;
    }
    out.flush().map_err(io)?;
    Ok(events)
}

/// Checks an `engram access --export` file, line by line.
fn verify_file(path: &Path) -> Result<Vec<(String, AccessVerdict)>> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = std::io::BufReader::new(file).lines().enumerate();
    let at = |n: usize| format!("{} line {}", path.display(), n + 1);
    let header: Json = match lines.next() {
        Some((n, line)) => serde_json::from_str(&line.with_context(|| at(n))?).with_context(|| at(n))?,
        None => bail!("{}: empty", path.display()),
    };
    if header["format"] != EXPORT_FORMAT {
        bail!(
            "{}: not an access log export (format {EXPORT_FORMAT})",
            path.display()
        );
    }
    let mut done = Vec::new();
    let mut current: Option<(String, LogCheck)> = None;
    for (n, line) in lines {
        let line: Json = serde_json::from_str(&line.with_context(|| at(n))?).with_context(|| at(n))?;
        if let Some(node) = line.get("node") {
            if let Some((endpoint, check)) = current.take() {
                done.push((endpoint, check.verdict()));
            }
            let keys = node["node_keys"]
                .as_array()
                .ok_or_else(|| anyhow!("{}: node_keys", at(n)))?
                .iter()
                .map(|k| {
                    let bytes = hex::decode(k.as_str().unwrap_or_default()).with_context(|| at(n))?;
                    engram_proto::public_key("node_keys", &bytes).with_context(|| at(n))
                })
                .collect::<Result<Vec<_>>>()?;
            let node_id = node["node_id"]
                .as_u64()
                .ok_or_else(|| anyhow!("{}: node_id", at(n)))?;
            let endpoint = node["endpoint"].as_str().unwrap_or("?").to_string();
            current = Some((endpoint, LogCheck::new(node_id, &keys)));
        } else if let Some(event) = line.get("event") {
            let Some((_, check)) = &mut current else {
                bail!("{}: an event before any node", at(n));
            };
            let bytes = hex::decode(event.as_str().unwrap_or_default()).with_context(|| at(n))?;
            check.event(&bytes);
        } else {
            bail!("{}: neither a node nor an event", at(n));
        }
    }
    if let Some((endpoint, check)) = current {
        done.push((endpoint, check.verdict()));
    }
    Ok(done)
}

/// This machine's clock, for `--last-secs`.
#[allow(clippy::disallowed_methods)]
fn wall_clock_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
