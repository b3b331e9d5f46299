//! The commands other than `demo`: each parses its input into domain types, makes its calls
//! through [`engram_client::Client`], and prints a table (or `--json`).

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use engram_audit::SignedEntry;
use engram_client::{
    Client, ClientConfig, ClientError, DiffQuery, EntitiesQuery, FindQuery, GetOptions, HistoryQuery,
    HistoryTarget, ReferrersQuery, SearchQuery, code_name, pb,
};
use engram_server::{ServerConfig, telemetry};
use engram_types::{Attribute, BranchName, EntityId};
use futures::StreamExt;
use serde_json::{Value as Json, json};

use crate::cli::{
    AuditCommand, Cli, ClusterCommand, Command, DiffArgs, EntitiesArgs, FindArgs, GetArgs, HistoryArgs,
    NamespacesArgs, RedactCli, RedactCommand, ReferrersArgs, RuleArg, SearchArgs, ServeArgs, WatchArgs,
};
use crate::output::{Table, datom_table, format_time_ns, plural, short_hash};
use crate::output::{out, outln};
use crate::txjson;
use crate::ui::Ui;

/// Whether the error's details were already printed on stdout.
pub fn already_reported(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.is::<Tampered>()) || crate::offline::is_reported(err)
}

/// The exit code for an error, per the documented table.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    if let Some(code) = crate::offline::exit_code(err) {
        return code;
    }
    if err.chain().any(|e| e.is::<Tampered>()) {
        2
    } else {
        1
    }
}

/// The error as a JSON document, with the gRPC code when there is one.
pub fn error_json(err: &anyhow::Error) -> Json {
    let client = err.chain().find_map(|e| e.downcast_ref::<ClientError>());
    json!({
        "error": {
            "message": format!("{err:#}"),
            "code": client.and_then(ClientError::code).map(code_name),
            "grpc_message": client.and_then(ClientError::message),
            "tampered": exit_code(err) == 2,
        }
    })
}

use crate::common::{Reported, Tampered};
use crate::common::{consistency, namespace, node_statuses, probe_of, receipt_output, unanswered_json};
pub use crate::output::print_json;

pub async fn run(cli: Cli) -> Result<()> {
    let json = cli.json;
    let mut config = ClientConfig::default();
    config.retry.max_elapsed = Duration::from_secs_f64(cli.retry_budget_secs);
    config.tls = client_tls(&cli)?;
    config.trust_keys.clone_from(&cli.trust_key);
    if let Some(path) = &cli.agent_key {
        config.agent = Some(std::sync::Arc::new(engram_access::AgentKey::load(path)?));
    }
    let identity = (cli.tls_cert.clone(), cli.tls_key.clone());
    let client = || Client::with_config(cli.endpoints.clone(), config.clone());
    match cli.command {
        Command::Serve(args) => serve(*args, identity).await,
        Command::Demo(args) => crate::demo::run(args, json).await.map(|_| ()),
        Command::Bench(args) => {
            crate::bench::run(args, cli.endpoints.clone(), config.agent.clone(), json).await
        }
        Command::Cluster(cmd) => cluster(&client()?, cmd, json).await,
        Command::Agent(cmd) => crate::access_cmd::agent(&client()?, cmd, json).await,
        Command::Grant(args) => crate::access_cmd::grant(&client()?, args, false, json).await,
        Command::Revoke(args) => crate::access_cmd::grant(&client()?, args, true, json).await,
        Command::Whoami => crate::access_cmd::whoami(&client()?, json).await,
        Command::Access(args) => crate::access_cmd::access_log(&client()?, &cli.endpoints, args, json).await,
        Command::Mcp(args) => {
            let agent = match (&config.agent, args.agent) {
                (Some(key), Some(agent)) if agent != key.principal.as_str() => bail!(
                    "--agent {agent:?} differs from the --agent-key file's agent {:?}: a signed write is recorded as its signer",
                    key.principal.as_str()
                ),
                (Some(key), _) => key.principal.as_str().to_string(),
                (None, Some(agent)) => agent,
                (None, None) => bail!(
                    "mcp: name the agent the facts are recorded as, with --agent NAME or --agent-key FILE"
                ),
            };
            match args.listen {
                Some(listen) => crate::mcp::serve_http(client()?, agent, listen, args.allowed_hosts).await,
                None => crate::mcp::serve_stdio(client()?, agent).await,
            }
        }
        Command::Transact(args) => transact(&client()?, &args.file, args.print_id.as_deref(), json).await,
        Command::Get(args) => get(&client()?, args, json).await,
        Command::History(args) => history(&client()?, args, json).await,
        Command::Find(args) => find(&client()?, args, json).await,
        Command::Namespaces(args) => list_namespaces(&client()?, args, json).await,
        Command::Entities(args) => list_entities(&client()?, args, json).await,
        Command::Referrers(args) => referrers(&client()?, args, json).await,
        Command::Search(args) => search(&client()?, args, json).await,
        Command::Watch(args) => watch(&client()?, args, json).await,
        Command::Diff(args) => diff(&client()?, args, json).await,
        Command::Redact(RedactCli {
            command: Some(RedactCommand::Status(args)),
            ..
        }) => crate::memory_cmd::redact_status(&client()?, args, json).await,
        Command::Redact(RedactCli { args: Some(args), .. }) => {
            let signer = config.agent.as_ref().map(|k| k.principal.to_string());
            crate::memory_cmd::redact(&client()?, args, signer, json).await
        }
        Command::Redact(RedactCli { .. }) => anyhow::bail!(
            "engram redact needs --ns, --reason and --entity (or a predicate, or --all), or `status TX` (see engram redact --help)"
        ),
        Command::Retention(cmd) => crate::retention_cmd::retention(&client()?, cmd, json).await,
        Command::Health(args) => health(&cli.endpoints, &config, args, json).await,
        Command::Schema(cmd) => crate::memory_cmd::schema(&client()?, cmd, json).await,
        Command::Branch(cmd) => crate::memory_cmd::branch(&client()?, cmd, json).await,
        Command::Backup(args) => crate::backup_cmd::backup(&client()?, args, json).await,
        Command::Jobs(args) => crate::jobs_cmd::jobs(&client()?, &cli.endpoints, args, json).await,
        Command::Restore(args) => crate::backup_cmd::restore(args, json),
        Command::Audit(AuditCommand::Verify(args))
            if args.file.is_some() || args.data_dir.is_some() || args.backup.is_some() =>
        {
            crate::offline::verify(&args, json)
        }
        Command::Audit(AuditCommand::Export {
            out,
            data_dir: Some(dir),
        }) => crate::offline::export(None, Some(&dir), &out, json).await,
        Command::Audit(cmd) => audit(&client()?, cmd, json).await,
    }
}

// ------------------------------------------------------------------ serve

/// The client's TLS settings from --tls-ca, --tls-cert and --tls-key.
fn client_tls(cli: &Cli) -> Result<Option<std::sync::Arc<engram_client::ClientTls>>> {
    let read =
        |path: &std::path::Path| std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    let Some(ca) = &cli.tls_ca else {
        return Ok(None);
    };
    let identity = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        _ => None,
    };
    Ok(Some(std::sync::Arc::new(engram_client::ClientTls {
        ca_pem: read(ca).context("--tls-ca")?,
        identity,
    })))
}

/// `identity`: --tls-cert and --tls-key, the node's own certificate and key.
async fn serve(args: ServeArgs, identity: (Option<PathBuf>, Option<PathBuf>)) -> Result<()> {
    let node_id = match (args.node_id, args.pod_name.as_deref()) {
        (Some(id), _) => id,
        (None, Some(pod)) => engram_server::node_id_from_pod_name(pod).ok_or_else(|| {
            anyhow!(
                "--pod-name: {pod:?} does not end in -<ordinal>, so no node id follows from it; give --id"
            )
        })?,
        (None, None) => bail!("--id is required (or --pod-name of a StatefulSet pod)"),
    };
    if node_id == 0 {
        bail!("--id: node ids start at 1");
    }
    // Keep the guard alive for the node's lifetime: dropping it flushes the span exporter.
    let _telemetry = telemetry::init(args.otlp_endpoint.as_deref(), args.log_format).context("telemetry")?;
    let mut config = ServerConfig::new(node_id, args.listen, args.data_dir);
    config.advertise_addr = args.advertise;
    config.key_file = args.key_file;
    config.peers = args.peers;
    config.bootstrap = args.bootstrap;
    config.join = args.join;
    config.security = engram_server::Security {
        enforced: args.security == engram_access::Mode::Enforced,
        admin: args.admin.clone(),
        join_key_file: args.join_agent_key.clone(),
    };
    if config.security.enforced && config.security.admin.is_none() {
        bail!(
            "--security enforced needs --admin NAME=PUBLIC_KEY (ENGRAM_ADMIN), the first administrator: `engram agent keygen admin --out admin.key` prints its public key. For open mode instead, pass --security open, and --insecure-open if the node listens beyond loopback"
        );
    }
    config.insecure_open = args.insecure_open;
    config.metrics_listen = args.metrics_listen;
    config.health_listen = args.health_listen;
    config.tls = match (&identity.0, &identity.1, &args.tls_client_ca) {
        (Some(cert), Some(key), Some(ca)) => Some(engram_server::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: ca.clone(),
        }),
        (None, None, None) => None,
        _ => bail!("TLS needs all of --tls-cert, --tls-key and --tls-client-ca"),
    };
    if let Some(v) = args.max_tx_bytes {
        config.max_tx_bytes = v;
    }
    if let Some(v) = args.watch_stall_cutoff_ms {
        config.watch_stall_cutoff_ms = v;
    }
    for prefix in &args.access_log {
        if prefix != "*" {
            engram_types::Namespace::new(prefix.as_str())
                .with_context(|| format!("--access-log {prefix:?}: not a namespace prefix (or *)"))?;
        }
    }
    config.access_log = args.access_log.clone();
    if let Some(v) = args.heartbeat_interval_ms {
        config.raft.heartbeat_interval_ms = v;
    }
    if let Some(v) = args.append_timeout_ms {
        config.raft.append_timeout_ms = v;
    }
    if let Some(v) = args.election_timeout_min_ms {
        config.raft.election_timeout_min_ms = v;
    }
    if let Some(v) = args.election_timeout_max_ms {
        config.raft.election_timeout_max_ms = v;
    }
    if let Some(v) = args.checkpoint_every_entries {
        config.checkpoint_every_entries = v;
    }
    if let Some(v) = args.checkpoint_every_ms {
        config.checkpoint_every_ms = v;
    }
    if let Some(v) = args.snapshot_every_entries {
        config.raft.snapshot_every_entries = v;
    }
    if let Some(v) = args.divergence_check_ms {
        config.divergence_check_ms = v;
    }
    if let Some(v) = args.retention_check_ms {
        config.retention_check_ms = v;
    }
    if let Some(v) = args.verify_on_start {
        config.verify_on_start = v;
    }
    // Checked here so a bad combination of flags is a usage error, not a failed node.
    if let Err(e) = config.raft.openraft_config() {
        bail!("{e}");
    }
    let node_id = config.node_id;
    engram_server::run(config)
        .await
        .with_context(|| format!("node {node_id}"))
}

// ------------------------------------------------------------------ cluster

fn member_json(m: &pb::Member) -> Json {
    json!({ "id": m.id, "addr": m.addr, "public_key": hex::encode(&m.public_key), "voter": m.voter })
}

fn members_text(members: &[pb::Member]) -> String {
    let mut parts: Vec<String> = members
        .iter()
        .map(|m| {
            if m.voter {
                m.id.to_string()
            } else {
                format!("{}(learner)", m.id)
            }
        })
        .collect();
    parts.sort();
    parts.join(",")
}

fn members_table(members: &[pb::Member]) -> String {
    let mut t = Table::new(&["ID", "ADDR", "VOTER", "PUBLIC KEY"]);
    for m in members {
        t.row(vec![
            m.id.to_string(),
            m.addr.clone(),
            m.voter.to_string(),
            hex::encode(&m.public_key),
        ]);
    }
    t.render()
}

fn status_json(endpoint: &str, s: &pb::StatusResponse) -> Json {
    json!({
        "endpoint": endpoint,
        "node_id": s.node_id,
        "addr": s.addr,
        "public_key": hex::encode(&s.public_key),
        "initialized": s.initialized,
        "role": s.role,
        "leader_id": s.leader_id,
        "term": s.term,
        "last_log_index": s.last_log_index,
        "applied_index": s.applied_index,
        "chain_index": s.chain_index,
        "chain_head": hex::encode(&s.chain_head),
        "members": s.members.iter().map(member_json).collect::<Vec<_>>(),
        "redactions": {
            "applied_index": s.redactions_applied_index,
            "purged_index": s.redactions_purged_index,
            "purge": purge_state(s),
        },
    })
}

/// Whether the node's files still hold values a redaction took: `none` (no redaction applied
/// here), `done` (every applied redaction purged), `pending`.
fn purge_state(s: &pb::StatusResponse) -> &'static str {
    if s.redactions_applied_index == 0 {
        "none"
    } else if s.redactions_purged_index >= s.redactions_applied_index {
        "done"
    } else {
        "pending"
    }
}

async fn cluster(client: &Client, cmd: ClusterCommand, json: bool) -> Result<()> {
    let endpoints = &client.endpoints();
    match cmd {
        ClusterCommand::Init {
            members,
            security,
            admin_key,
        } => {
            let members: Vec<(u64, String)> = members.into_iter().map(|p| (p.id, p.addr)).collect();
            let admin = match (security, admin_key) {
                (engram_access::Mode::Open, None) => None,
                (engram_access::Mode::Open, Some(_)) => {
                    bail!("--admin-key is for --security enforced (an open cluster has no administrator)")
                }
                (engram_access::Mode::Enforced, None) => {
                    bail!(
                        "--security enforced needs --admin-key FILE (make one with `engram agent keygen NAME --out FILE`)"
                    )
                }
                (engram_access::Mode::Enforced, Some(path)) => {
                    let key = engram_access::AgentKey::load(&path)?;
                    Some((key.principal.to_string(), key.public().0))
                }
            };
            let resp = client
                .init_with(&members, admin.as_ref().map(|(name, key)| (name.as_str(), *key)))
                .await
                .context("cluster init")?;
            if json {
                print_json(&json!({ "members": resp.members.iter().map(member_json).collect::<Vec<_>>() }))?;
            } else {
                if resp.members.is_empty() {
                    outln!("cluster initialised; see `engram cluster status` for its members")?;
                } else {
                    outln!("cluster initialised with {} members", resp.members.len())?;
                    out!("{}", members_table(&resp.members))?;
                }
            }
            Ok(())
        }
        ClusterCommand::Status => {
            let results = node_statuses(&probe_of(client)?).await;
            let failed = results.iter().filter(|r| r.is_err()).count();
            if json {
                let rows: Vec<Json> = endpoints
                    .iter()
                    .zip(&results)
                    .map(|(ep, r)| match r {
                        Ok(s) => status_json(ep, s),
                        Err(e) => unanswered_json(ep, e),
                    })
                    .collect();
                print_json(&Json::Array(rows))?;
            } else {
                let mut t = Table::new(&[
                    "ENDPOINT",
                    "NODE",
                    "ROLE",
                    "LEADER",
                    "TERM",
                    "LAST LOG",
                    "APPLIED",
                    "CHAIN",
                    "CHAIN HEAD",
                    "MEMBERS",
                    "PURGE",
                ]);
                for (ep, r) in endpoints.iter().zip(&results) {
                    match r {
                        Ok(s) => t.row(vec![
                            ep.clone(),
                            s.node_id.to_string(),
                            if s.initialized {
                                s.role.clone()
                            } else {
                                format!("{} (uninitialised)", s.role)
                            },
                            s.leader_id.map(|l| l.to_string()).unwrap_or_else(|| "-".into()),
                            s.term.to_string(),
                            s.last_log_index.to_string(),
                            s.applied_index.to_string(),
                            s.chain_index.to_string(),
                            short_hash(&s.chain_head),
                            members_text(&s.members),
                            purge_state(s).into(),
                        ]),
                        // A short word in the table; the whole message below it, so a long
                        // one does not widen the ROLE column for every row.
                        Err(e) => t.row(vec![
                            ep.clone(),
                            "?".into(),
                            e.code()
                                .map(|c| code_name(c).to_lowercase())
                                .unwrap_or_else(|| "unreachable".into()),
                        ]),
                    }
                }
                out!("{}", t.render())?;
                for (ep, r) in endpoints.iter().zip(&results) {
                    if let Err(e) = r {
                        outln!("{ep}: {}", e.message().unwrap_or("no answer"))?;
                    }
                }
            }
            if failed > 0 {
                let first = results
                    .iter()
                    .find_map(|r| r.as_ref().err())
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                return Err(Reported(format!(
                    "{failed} of {} endpoints did not answer ({first})",
                    endpoints.len()
                ))
                .into());
            }
            Ok(())
        }
        ClusterCommand::Add {
            id,
            addr,
            learner_only,
        } => {
            engram_client::parse_endpoint(&addr).context("--addr")?;
            let resp = client
                .add_node(id, &addr, learner_only)
                .await
                .context("cluster add")?;
            membership_output(&format!("node {id} added"), &resp, json)?;
            Ok(())
        }
        ClusterCommand::Shrink { to } => shrink(client, to, json).await,
        ClusterCommand::Remove { id } => {
            let resp = client.remove_node(id).await.context("cluster remove")?;
            membership_output(&format!("node {id} removed"), &resp, json)?;
            Ok(())
        }
        ClusterCommand::RotateKey { id } => {
            let index = client.rotate_key(id).await.context("cluster rotate-key")?;
            if json {
                print_json(&json!({ "ok": true, "node_id": id, "audit_index": index }))?;
            } else {
                outln!(
                    "key of node {id} rotated by audit entry {index}; it signs with the new key from there on"
                )?;
            }
            Ok(())
        }
        ClusterCommand::RevokeKey { id, key_id } => {
            let key_id = key_id
                .map(|raw| {
                    hex::decode(raw.trim())
                        .ok()
                        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
                        .ok_or_else(|| anyhow!("--key-id {raw:?}: expected 16 hex digits"))
                })
                .transpose()?;
            let index = client
                .revoke_key(id, key_id)
                .await
                .context("cluster revoke-key")?;
            if json {
                print_json(&json!({ "ok": true, "node_id": id, "audit_index": index }))?;
            } else {
                outln!(
                    "key of node {id} revoked by audit entry {index}; node {id} attests nothing from here on \
                     and reports NOT_SERVING: remove it (`engram cluster remove --id {id}`) and add it \
                     back later with a new key"
                )?;
            }
            Ok(())
        }
    }
}

fn membership_output(what: &str, resp: &pb::MembershipResponse, json: bool) -> Result<()> {
    if json {
        print_json(&json!({ "members": resp.members.iter().map(member_json).collect::<Vec<_>>() }))?;
    } else {
        outln!("{what}; members now:")?;
        out!("{}", members_table(&resp.members))?;
    }
    Ok(())
}

// ------------------------------------------------------------------ memory

/// An optional `--branch`.
fn branch_arg(raw: Option<&str>) -> Result<Option<BranchName>> {
    raw.map(|b| BranchName::new(b).map_err(|e| anyhow!("--branch: {e}")))
        .transpose()
}

fn attribute(raw: &str) -> Result<Attribute> {
    Attribute::new(raw).map_err(|e| anyhow!("--attribute: {e}"))
}

fn read_input(file: &str) -> Result<String> {
    if file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the transaction from stdin")?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {file}"))
    }
}

async fn transact(client: &Client, file: &str, print_id: Option<&str>, json: bool) -> Result<()> {
    let text = read_input(file)?;
    let source = if file == "-" { "stdin" } else { file };
    let tx = txjson::parse_tx(&text).with_context(|| format!("invalid transaction in {source}"))?;
    let receipt = client.transact(&tx).await.context("transaction refused")?;
    match print_id {
        // The receipt is already committed when a name is missing: say so, so a script
        // does not retry a write that happened.
        Some(name) => match receipt.temp_ids.get(name) {
            Some(id) if json => print_json(&json!({ "entity": id }))?,
            Some(id) => outln!("{id}")?,
            None => {
                let mut names: Vec<_> = receipt.temp_ids.keys().map(String::as_str).collect();
                names.sort_unstable();
                bail!(
                    "tx {} committed, but it gave no new entity the name {name:?} (its new names: {})",
                    receipt.tx,
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                );
            }
        },
        None => receipt_output(&receipt, json)?,
    }
    Ok(())
}

fn datoms_output(datoms: &[pb::Datom], applied_tx: u64, extra: Json, json: bool) -> Result<()> {
    if json {
        let mut doc = extra;
        doc["applied_tx"] = json!(applied_tx);
        doc["datoms"] = Json::Array(datoms.iter().map(txjson::datom_to_json).collect());
        print_json(&doc)?;
    } else if datoms.is_empty() {
        outln!("no datoms (read at tx {applied_tx})")?;
    } else {
        out!("{}", datom_table(datoms))?;
        outln!("({}, read at tx {applied_tx})", plural(datoms.len(), "datom"))?;
    }
    Ok(())
}

async fn get(client: &Client, args: GetArgs, json: bool) -> Result<()> {
    let ns = namespace(&args.namespace)?;
    let opts = GetOptions {
        as_of_tx: args.as_of_tx,
        as_of_time_ns: args.as_of_time_ns,
        valid_at_ns: args.valid_at_ns,
        consistency: consistency(args.stale),
        branch: branch_arg(args.branch.as_deref())?,
        rule: match args.rule {
            RuleArg::Latest => pb::Resolution::Latest,
            RuleArg::Verified => pb::Resolution::Verified,
        },
        verified_only: args.verified_only,
        include_expired: args.include_expired,
    };
    let rule = match args.rule {
        RuleArg::Latest => "latest",
        RuleArg::Verified => "verified",
    };
    if args.complete {
        let mut trust = trusted_log(client).await?;
        let proven = client
            .get_complete(&mut trust, &ns, EntityId(args.entity), opts)
            .await
            .map_err(proof_error)?;
        let resp = &proven.response;
        let mut extra = json!({ "entity": resp.entity });
        verified_output(&mut extra, &trust, resp.datoms.len(), json);
        let cp = &trust.checkpoint().checkpoint;
        if json {
            extra["complete"] = json!({
                "slots": proven.slots,
                "history_datoms": proven.history_datoms,
                "state_tx": proven.state_tx,
                "checkpoint_size": cp.size,
                "unfolded": proven.unfolded,
            });
        } else {
            eprintln!(
                "complete: {} of entity {}, {} of history, proven against the state root of tx {} \
                 (checkpoint {}) and folded here into the answer",
                plural(proven.slots, "attribute"),
                resp.entity,
                plural(proven.history_datoms, "datom"),
                proven.state_tx,
                cp.size
            );
            if !proven.unfolded.is_empty() {
                eprintln!(
                    "  histories proven, live claims as sent (values withheld or redacted): {}",
                    proven.unfolded.join(", ")
                );
            }
        }
        return entity_output(resp, extra, rule, json);
    }
    if args.verify {
        let mut trust = trusted_log(client).await?;
        let resp = client
            .get_verified(&mut trust, &ns, EntityId(args.entity), opts)
            .await
            .map_err(proof_error)?;
        let mut extra = json!({ "entity": resp.entity });
        verified_output(&mut extra, &trust, resp.datoms.len(), json);
        datoms_output(&resp.datoms, resp.applied_tx, extra, json)?;
        return Ok(());
    }
    let resp = client
        .get(&ns, EntityId(args.entity), opts)
        .await
        .context("get")?;
    let mut extra = json!({ "entity": resp.entity });
    // A read as of a transaction or an instant says which transaction it was read as of.
    if resp.as_of_tx != 0 {
        extra["as_of_tx"] = json!(resp.as_of_tx);
        if !json && args.as_of_time_ns.is_some() {
            outln!("as of tx {}, the last at or before that instant", resp.as_of_tx)?;
        }
    }
    entity_output(&resp, extra, rule, json)
}

/// An entity's answer: its datoms, the conflicts the `rule` did not pick, and its expiry.
fn entity_output(resp: &pb::GetResponse, mut extra: Json, rule: &str, json: bool) -> Result<()> {
    extra["conflicts"] = Json::Array(resp.conflicts.iter().map(txjson::datom_to_json).collect());
    if let Some(at_ns) = resp.expired_at_ns {
        extra["expired_at_ns"] = json!(at_ns);
        if !json {
            outln!(
                "entity {} expired at {} (:memory/expires); --include-expired reads it anyway",
                resp.entity,
                format_time_ns(at_ns)
            )?;
        }
    }
    datoms_output(&resp.datoms, resp.applied_tx, extra, json)?;
    if !json && !resp.conflicts.is_empty() {
        outln!(
            "conflicts: {} that other agents claim and the {rule} rule did not pick:",
            plural(resp.conflicts.len(), "value"),
        )?;
        out!("{}", datom_table(&resp.conflicts))?;
    }
    Ok(())
}

/// Trust for a verified read: a checkpoint of the head signed by a pinned key (`--trust-key`),
/// or else the chain verified from genesis and a checkpoint of its head.
async fn trusted_log(client: &Client) -> Result<engram_client::TrustedLog> {
    client.trusted(&mut None).await.map_err(proof_error)
}

/// A failed proof or chain is tampering (exit 2); anything else keeps its context.
fn proof_error(e: ClientError) -> anyhow::Error {
    if e.is_tampering() {
        Tampered(format!("verification failed: {e}")).into()
    } else {
        anyhow::Error::new(e).context("verified read")
    }
}

fn verified_output(extra: &mut Json, trust: &engram_client::TrustedLog, datoms: usize, json: bool) {
    let cp = &trust.checkpoint().checkpoint;
    if json {
        if let Some(map) = extra.as_object_mut() {
            map.insert(
                "verified".into(),
                json!({ "datoms": datoms, "checkpoint_size": cp.size, "root": cp.root.to_hex(),
                        "origin": cp.origin, "note": trust.checkpoint().to_text() }),
            );
        }
    } else {
        eprintln!(
            "verified: {datoms} datoms proven against checkpoint {} (root {}), which extends the chain verified from genesis",
            cp.size,
            &cp.root.to_hex()[..16]
        );
    }
}

async fn history(client: &Client, args: HistoryArgs, json: bool) -> Result<()> {
    let ns = namespace(&args.namespace)?;
    let attr = args.attribute.as_deref().map(attribute).transpose()?;
    if args.complete {
        let entity = args.entity.context("--complete needs --entity")?;
        if args.limit != 0 {
            bail!("--complete reads the whole history: give no --limit");
        }
        let mut trust = trusted_log(client).await?;
        let proven = client
            .history_complete(&mut trust, &ns, EntityId(entity), attr.as_ref())
            .await
            .map_err(proof_error)?;
        let mut extra = json!({});
        verified_output(&mut extra, &trust, proven.datoms.len(), json);
        let cp = &trust.checkpoint().checkpoint;
        if json {
            extra["complete"] = json!({
                "slots": proven.slots,
                "state_tx": proven.state_tx,
                "checkpoint_size": cp.size,
            });
        } else {
            eprintln!(
                "complete: the whole history of {} up to tx {}, proven against its state root (checkpoint {})",
                plural(proven.slots, "attribute"),
                proven.state_tx,
                cp.size
            );
        }
        return datoms_output(&proven.datoms, proven.state_tx, extra, json);
    }
    let target = match (args.entity, attr) {
        (Some(entity), attribute) => HistoryTarget::Entity {
            entity: EntityId(entity),
            attribute,
        },
        (None, Some(a)) => HistoryTarget::Attribute(a),
        // clap's ArgGroup requires one of them.
        (None, None) => bail!("give --entity, --attribute, or both"),
    };
    if args.verify {
        let mut trust = trusted_log(client).await?;
        let resp = client
            .history_verified(&mut trust, &ns, target, args.limit, consistency(args.stale))
            .await
            .map_err(proof_error)?;
        let mut extra = json!({});
        verified_output(&mut extra, &trust, resp.datoms.len(), json);
        if let (Some(map), Json::Object(paged)) = (
            extra.as_object_mut(),
            paged_output(resp.as_of_tx, &resp.next_cursor, json),
        ) {
            map.extend(paged);
        }
        datoms_output(&resp.datoms, resp.applied_tx, extra, json)?;
        return Ok(());
    }
    let query = HistoryQuery {
        branch: branch_arg(args.branch.as_deref())?,
        limit: args.limit,
        consistency: consistency(args.stale),
        as_of_tx: args.as_of_tx,
        as_of_time_ns: args.as_of_time_ns,
        since_tx: args.since_tx,
        valid_at_ns: args.valid_at_ns,
        ..HistoryQuery::new(ns, target)
    };
    let from = from_cursor(args.cursor.as_deref())?;
    let resp = with_progress(json, "reading history", async |progress| {
        client.history_all(&query, &from, progress).await
    })
    .await
    .context("history")?;
    let extra = paged_output(resp.as_of_tx, &resp.next_cursor, json);
    datoms_output(&resp.datoms, resp.applied_tx, extra, json)?;
    Ok(())
}

/// What a paged read adds to its output: the transaction it was read as of and, when the limit
/// stopped it before the end, the cursor to the rest (JSON) or a line saying more follow.
fn paged_output(as_of_tx: u64, next_cursor: &[u8], json: bool) -> Json {
    if !json && !next_cursor.is_empty() {
        eprintln!(
            "more datoms follow past --limit (read as of tx {as_of_tx}); --limit 0 reads them all, --json prints the cursor that --cursor goes on from"
        );
    }
    let mut extra = json!({});
    txjson::add_page_position(&mut extra, as_of_tx, next_cursor);
    extra
}

/// Where `--cursor` starts a paged read (see `txjson::parse_cursor`).
fn from_cursor(raw: Option<&str>) -> Result<Vec<u8>> {
    txjson::parse_cursor("--cursor", raw).map_err(|e| anyhow!(e))
}

/// Runs a paged read with a spinner on a terminal that counts the datoms read so far.
async fn with_progress<T, E>(
    json: bool,
    what: &str,
    read: impl AsyncFnOnce(&dyn Fn(usize)) -> Result<T, E>,
) -> Result<T, E> {
    let spinner = Ui::bars_only(json).spinner(what);
    let answer = read(&|n| spinner.set_message(format!("{what}: {}", plural(n, "datom")))).await;
    spinner.finish_and_clear();
    answer
}

async fn diff(client: &Client, args: DiffArgs, json: bool) -> Result<()> {
    let query = DiffQuery {
        namespace: namespace(&args.namespace)?,
        entity: args.entity.map(EntityId),
        from_tx: args.from_tx,
        to_tx: args.to_tx,
        limit: args.limit,
        consistency: consistency(args.stale),
    };
    let from = from_cursor(args.cursor.as_deref())?;
    let resp = with_progress(json, "reading changes", async |progress| {
        client.diff_all(&query, &from, progress).await
    })
    .await
    .context("diff")?;
    if json {
        let mut doc = json!({
            "from_tx": args.from_tx, "to_tx": resp.to_tx, "truncated": resp.truncated,
            "asserted": resp.asserted.iter().map(txjson::datom_to_json).collect::<Vec<_>>(),
            "retracted": resp.retracted.iter().map(txjson::datom_to_json).collect::<Vec<_>>(),
        });
        if !resp.next_cursor.is_empty() {
            doc["next_cursor"] = json!(hex::encode(&resp.next_cursor));
        }
        print_json(&doc)?;
    } else {
        outln!("changes after tx {} up to tx {}:", args.from_tx, resp.to_tx)?;
        outln!("asserted ({}):", resp.asserted.len())?;
        out!("{}", datom_table(&resp.asserted))?;
        outln!("retracted ({}):", resp.retracted.len())?;
        out!("{}", datom_table(&resp.retracted))?;
        if resp.truncated {
            outln!(
                "(more changes follow past --limit; --limit 0 reads them all, --json prints the cursor that --cursor goes on from)"
            )?;
        }
    }
    Ok(())
}

async fn watch(client: &Client, args: WatchArgs, json: bool) -> Result<()> {
    let filter = engram_client::WatchFilter {
        namespace: namespace(&args.namespace)?,
        from_tx: args.from_tx,
        attribute: args.attribute.as_deref().map(attribute).transpose()?,
        entity: args.entity.map(EntityId),
        branch: branch_arg(args.branch.as_deref())?,
    };
    let mut stream = client.watch(filter);
    let mut seen = 0u64;
    while args.limit.is_none_or(|limit| seen < limit) {
        let Some(event) = stream.next().await else { break };
        let event = event.context("watch")?;
        seen += 1;
        if json {
            // One JSON document per line, so a script can read events as they come.
            let doc = json!({
                "tx": event.tx, "tx_time_ns": event.tx_time_ns, "audit_index": event.audit_index,
                "audit_hash": hex::encode(&event.audit_hash),
                "datoms": event.datoms.iter().map(txjson::datom_to_json).collect::<Vec<_>>(),
            });
            outln!("{doc}")?;
        } else {
            outln!(
                "tx {} at {} (audit entry {}):",
                event.tx,
                format_time_ns(event.tx_time_ns),
                event.audit_index
            )?;
            out!("{}", datom_table(&event.datoms))?;
        }
    }
    Ok(())
}

async fn find(client: &Client, args: FindArgs, json: bool) -> Result<()> {
    let query = FindQuery {
        namespace: namespace(&args.namespace)?,
        attribute: attribute(&args.attribute)?,
        value: args
            .value
            .as_deref()
            .map(txjson::parse_value)
            .transpose()
            .context("--value")?,
        as_of_tx: args.as_of_tx,
        as_of_time_ns: args.as_of_time_ns,
        limit: args.limit,
        consistency: consistency(args.stale),
        branch: branch_arg(args.branch.as_deref())?,
        include_expired: args.include_expired,
        since_tx: args.since_tx,
        valid_at_ns: args.valid_at_ns,
    };
    let from = from_cursor(args.cursor.as_deref())?;
    let resp = with_progress(json, "finding", async |progress| {
        client.find_all(&query, &from, progress).await
    })
    .await
    .context("find")?;
    let extra = paged_output(resp.as_of_tx, &resp.next_cursor, json);
    datoms_output(&resp.datoms, resp.applied_tx, extra, json)?;
    Ok(())
}

async fn list_namespaces(client: &Client, args: NamespacesArgs, json: bool) -> Result<()> {
    let paging = args.paging;
    let from = from_cursor(paging.cursor.as_deref())?;
    let resp = client
        .list_namespaces(paging.limit, &from, consistency(paging.stale))
        .await
        .context("namespaces")?;
    if json {
        let mut doc = json!({ "namespaces": resp.namespaces, "applied_tx": resp.applied_tx });
        if !resp.next_cursor.is_empty() {
            doc["next_cursor"] = json!(hex::encode(&resp.next_cursor));
        }
        return print_json(&doc);
    }
    for ns in &resp.namespaces {
        outln!("{ns}")?;
    }
    outln!(
        "({}, read at tx {})",
        plural(resp.namespaces.len(), "namespace"),
        resp.applied_tx
    )?;
    more_past_limit(&resp.next_cursor, "namespaces")
}

async fn list_entities(client: &Client, args: EntitiesArgs, json: bool) -> Result<()> {
    let query = EntitiesQuery {
        attribute: args.attribute.as_deref().map(attribute).transpose()?,
        as_of_tx: args.as_of.as_of_tx,
        as_of_time_ns: args.as_of.as_of_time_ns,
        limit: args.paging.limit,
        consistency: consistency(args.paging.stale),
        ..EntitiesQuery::new(namespace(&args.namespace)?)
    };
    let from = from_cursor(args.paging.cursor.as_deref())?;
    let spinner = Ui::bars_only(json).spinner("listing entities");
    let resp = client
        .list_entities(&query, &from, |n| {
            spinner.set_message(format!("listing entities: {}", entities_count(n)));
        })
        .await;
    spinner.finish_and_clear();
    let resp = resp.context("entities")?;
    if json {
        let mut doc = json!({
            "entities": resp.entities, "as_of_tx": resp.as_of_tx, "applied_tx": resp.applied_tx,
        });
        if !resp.next_cursor.is_empty() {
            doc["next_cursor"] = json!(hex::encode(&resp.next_cursor));
        }
        return print_json(&doc);
    }
    for e in &resp.entities {
        outln!("{e}")?;
    }
    outln!(
        "({}, as of tx {})",
        entities_count(resp.entities.len()),
        resp.as_of_tx
    )?;
    more_past_limit(&resp.next_cursor, "entities")
}

async fn referrers(client: &Client, args: ReferrersArgs, json: bool) -> Result<()> {
    let query = ReferrersQuery {
        attribute: args.attribute.as_deref().map(attribute).transpose()?,
        as_of_tx: args.as_of.as_of_tx,
        as_of_time_ns: args.as_of.as_of_time_ns,
        valid_at_ns: args.valid_at_ns,
        limit: args.paging.limit,
        consistency: consistency(args.paging.stale),
        ..ReferrersQuery::new(namespace(&args.namespace)?, EntityId(args.entity))
    };
    let from = from_cursor(args.paging.cursor.as_deref())?;
    let resp = client.referrers(&query, &from).await.context("referrers")?;
    let extra = paged_output(resp.as_of_tx, &resp.next_cursor, json);
    datoms_output(&resp.datoms, resp.applied_tx, extra, json)
}

fn entities_count(n: usize) -> String {
    if n == 1 {
        "1 entity".into()
    } else {
        format!("{n} entities")
    }
}

/// Says on stderr that a list goes on past `--limit`.
fn more_past_limit(next_cursor: &[u8], what: &str) -> Result<()> {
    if !next_cursor.is_empty() {
        eprintln!(
            "more {what} follow past --limit; --limit 0 reads them all, --json prints the cursor that --cursor goes on from"
        );
    }
    Ok(())
}

async fn search(client: &Client, args: SearchArgs, json: bool) -> Result<()> {
    let mut query = SearchQuery::new(namespace(&args.namespace)?, args.words.join(" "));
    query.vector = args
        .vector
        .as_deref()
        .map(txjson::parse_vector)
        .transpose()
        .context("--vector")?;
    query.hops = args.hops;
    query.k = args.k;
    query.as_of_tx = args.as_of_tx;
    query.as_of_time_ns = args.as_of_time_ns;
    query.attributes = args
        .attribute
        .iter()
        .map(|a| attribute(a))
        .collect::<Result<_>>()?;
    query.agents = args.agent;
    query.verified_only = args.verified_only;
    query.kinds = args.kind;
    query.include_expired = args.include_expired;
    query.consistency = consistency(args.stale);
    query.branch = branch_arg(args.branch.as_deref())?;
    let mut extra = json!({});
    let mut currency: Vec<engram_client::Currency> = Vec::new();
    let resp = if args.current {
        let mut trust = trusted_log(client).await?;
        let (resp, states) = client
            .search_current(&mut trust, &query)
            .await
            .map_err(proof_error)?;
        verified_output(&mut extra, &trust, resp.hits.len(), json);
        currency = states;
        resp
    } else if args.verify {
        let mut trust = trusted_log(client).await?;
        let resp = client
            .search_verified(&mut trust, &query)
            .await
            .map_err(proof_error)?;
        verified_output(&mut extra, &trust, resp.hits.len(), json);
        resp
    } else {
        client.search(&query).await.context("search")?
    };
    let signals = |hit: &pb::SearchHit| {
        hit.signals
            .iter()
            .map(|s| format!("{} #{}", s.signal, s.rank))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let current_text = |i: usize| match currency.get(i) {
        None => None,
        Some(engram_client::Currency::Current) => Some("current"),
        Some(engram_client::Currency::Superseded { .. }) => Some("superseded"),
        Some(engram_client::Currency::Unknown) => Some("unknown"),
        Some(engram_client::Currency::NotOnMain) => Some("not-on-main"),
    };
    if json {
        let hits: Vec<Json> = resp
            .hits
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let mut hit = json!({
                    "score": h.score,
                    "seq": h.seq,
                    "conflicting": h.conflicting,
                    "signals": h.signals.iter().map(|s| json!({ "signal": s.signal, "rank": s.rank })).collect::<Vec<_>>(),
                    "datom": h.datom.as_ref().map(txjson::datom_to_json),
                });
                if let Some(state) = current_text(i) {
                    hit["current"] = json!(state);
                }
                if let Some(engram_client::Currency::Superseded { by }) = currency.get(i) {
                    hit["superseded_by"] = Json::Array(by.iter().map(txjson::datom_to_json).collect());
                }
                hit
            })
            .collect();
        extra["applied_tx"] = json!(resp.applied_tx);
        extra["as_of_tx"] = json!(resp.as_of_tx);
        extra["hits"] = Json::Array(hits);
        print_json(&extra)?;
        return Ok(());
    }
    if resp.hits.is_empty() {
        outln!("no hits (as of tx {})", resp.as_of_tx)?;
        return Ok(());
    }
    let mut t = Table::new(&[
        "#",
        "ENTITY",
        "ATTRIBUTE",
        "VALUE",
        "TX",
        "AGENT",
        "SCORE",
        "FOUND BY",
    ]);
    for (i, h) in resp.hits.iter().enumerate() {
        let d = h.datom.clone().unwrap_or_default();
        let value = if d.redacted.is_empty() {
            txjson::pb_value_to_text(d.value.as_ref())
        } else {
            "[redacted]".to_string()
        };
        t.row(vec![
            (i + 1).to_string(),
            d.entity.to_string(),
            d.attribute.clone(),
            if h.conflicting {
                format!("{value} (conflicting)")
            } else {
                value
            },
            d.tx.to_string(),
            d.provenance.map(|p| p.agent).unwrap_or_default(),
            format!("{:.4}", h.score),
            match current_text(i) {
                Some(state) => format!("{} [{state}]", signals(h)),
                None => signals(h),
            },
        ]);
    }
    out!("{}", t.render())?;
    outln!("({}, as of tx {})", plural(resp.hits.len(), "hit"), resp.as_of_tx)?;
    Ok(())
}

/// `engram health`: one gRPC health check against the first endpoint, connecting as every
/// other client command does (`--tls-*` included).
async fn health(
    endpoints: &[String],
    config: &ClientConfig,
    args: crate::cli::HealthArgs,
    json: bool,
) -> Result<()> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let endpoint = endpoints
        .first()
        .ok_or_else(|| anyhow!("--endpoint: give a node"))?;
    let timeout = Duration::from_millis(args.timeout_ms);
    let check = async {
        let channel = engram_client::node_endpoint(endpoint, config)?
            .connect_timeout(timeout)
            .timeout(timeout)
            .connect()
            .await?;
        let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
        let resp = client
            .check(tonic_health::pb::HealthCheckRequest {
                service: args.service.clone(),
            })
            .await?;
        anyhow::Ok(resp.into_inner().status)
    };
    let status = tokio::time::timeout(timeout, check)
        .await
        .map_err(|_| anyhow!("{endpoint}: no answer within {} ms", args.timeout_ms))?
        .with_context(|| format!("{endpoint}: health check of {:?}", args.service))?;
    let serving = status == ServingStatus::Serving as i32;
    let name = ServingStatus::try_from(status).map_or("UNKNOWN", |s| s.as_str_name());
    if json {
        print_json(
            &json!({ "endpoint": endpoint, "service": args.service, "status": name, "serving": serving }),
        )?;
    } else {
        outln!("{endpoint} {}: {name}", args.service)?;
    }
    if serving {
        Ok(())
    } else {
        Err(Reported(format!("{} is {name}", args.service)).into())
    }
}

/// `engram cluster shrink --to N`: see its `--help`.
async fn shrink(client: &Client, to: u64, json: bool) -> Result<()> {
    if to == 0 {
        bail!("--to: a cluster keeps at least node 1");
    }
    let status = client.status().await.context("cluster status")?;
    let Some(leader) = status.leader_id else {
        bail!("no leader is known: shrinking needs a working cluster");
    };
    let members: Vec<u64> = status.members.iter().map(|m| m.id).collect();
    let extra: Vec<u64> = members.iter().copied().filter(|id| *id > to).rev().collect();
    if extra.is_empty() {
        if json {
            print_json(&json!({ "ok": true, "removed": [], "members": members }))?;
        } else {
            outln!("nothing to remove: the members are {members:?}")?;
        }
        return Ok(());
    }
    // Every node that stays must be a member, answer and be caught up, or removing the others
    // could leave the cluster without a quorum.
    let leader_status = status
        .members
        .iter()
        .find(|m| m.id == leader)
        .map(|m| m.addr.clone())
        .ok_or_else(|| anyhow!("leader {leader} is not among the members"))?;
    let leader_client = Client::with_config(vec![leader_status], client.config())?;
    let commit = leader_client
        .status()
        .await
        .context("leader status")?
        .applied_index;
    for id in 1..=to {
        let Some(m) = status.members.iter().find(|m| m.id == id) else {
            bail!(
                "refusing to shrink to {to}: node {id} is not a member, so fewer than {to} nodes would remain"
            );
        };
        let node = Client::with_config(vec![m.addr.clone()], client.config())?;
        let s = node
            .status()
            .await
            .with_context(|| format!("refusing to shrink to {to}: node {id} does not answer"))?;
        let behind = commit.saturating_sub(s.applied_index);
        if behind > engram_server::READY_LAG_ENTRIES {
            bail!("refusing to shrink to {to}: node {id} is {behind} entries behind the leader");
        }
    }
    let mut removed = Vec::new();
    for id in extra {
        client
            .remove_node(id)
            .await
            .with_context(|| format!("removing node {id} (removed so far: {removed:?})"))?;
        if !json {
            outln!("node {id} removed")?;
        }
        removed.push(id);
    }
    if json {
        print_json(&json!({ "ok": true, "removed": removed }))?;
    }
    Ok(())
}

// ------------------------------------------------------------------ audit

fn report_json(r: &engram_client::ChainReport) -> Json {
    json!({
        "ok": true,
        "endpoint": r.endpoint,
        "entries_checked": r.entries_checked,
        "head_index": r.head_index,
        "head_hash": r.head_hash.map(|h| h.to_hex()),
    })
}

fn failure_json(endpoint: &str, e: &ClientError) -> Json {
    let (index, fault) = match e {
        ClientError::Chain { error, .. } => (Some(error.index), Some(error.fault.to_string())),
        ClientError::ChainTruncated { served, .. } => (Some(served + 1), Some("missing".to_string())),
        _ => (None, None),
    };
    json!({
        "ok": false,
        "endpoint": endpoint,
        "tampered": e.is_tampering(),
        "index": index,
        "fault": fault,
        "error": e.to_string(),
        "code": e.code().map(code_name),
    })
}

async fn verify_one(client: &Client, label: &str, ui: Ui) -> Result<engram_client::ChainReport, ClientError> {
    let pb = ui.bar(
        0,
        "{spinner:.cyan} {msg} [{bar:40}] {pos}/{len} entries {per_sec:.dim}",
        format!("verifying the audit chain of {label}"),
    );
    let result = client
        .verify_chain(|p| {
            pb.set_length(p.head_index.max(p.checked));
            pb.set_position(p.checked);
        })
        .await;
    match &result {
        Ok(r) => ui.done(
            &pb,
            format!("{}: {} entries verified", r.endpoint, r.entries_checked),
        ),
        Err(e) => ui.failed(&pb, e.to_string()),
    }
    result
}

async fn audit(client: &Client, cmd: AuditCommand, json: bool) -> Result<()> {
    let endpoints = &client.endpoints();
    match cmd {
        AuditCommand::Export { out, data_dir } => {
            crate::offline::export(Some(client), data_dir.as_deref(), &out, json).await
        }
        AuditCommand::Checkpoint { at_head, out } => {
            let cp = client.checkpoint(at_head).await.context("audit checkpoint")?;
            if let Some(path) = &out {
                std::fs::write(path, &cp.note).with_context(|| format!("cannot write {}", path.display()))?;
            }
            if json {
                print_json(&json!({
                    "origin": cp.origin, "size": cp.size, "root": hex::encode(&cp.root),
                    "tx_time_ns": cp.tx_time_ns, "note": cp.note,
                }))?;
            } else {
                out!("{}", cp.note)?;
            }
            Ok(())
        }
        AuditCommand::Verify(args) => {
            let each = args.each;
            let ui = Ui::bars_only(json);
            let targets: Vec<(String, Client)> = if each {
                (0..endpoints.len())
                    .filter_map(|i| client.node(i).map(|c| (endpoints[i].clone(), c)))
                    .collect()
            } else {
                vec![(endpoints.join(","), client.clone())]
            };
            let mut outcomes = Vec::new();
            for (label, c) in &targets {
                outcomes.push((label.clone(), c.clone(), verify_one(c, label, ui).await));
            }
            // With several chains: they must agree on their common prefix. Hash chaining makes
            // the entry at the shortest head index enough to compare.
            let mut divergence = None;
            let reports: Vec<_> = outcomes
                .iter()
                .filter_map(|(_, c, r)| r.as_ref().ok().map(|r| (c, r)))
                .collect();
            if let Some(common) = reports.iter().map(|(_, r)| r.head_index).min().filter(|i| *i > 0)
                && reports.len() > 1
            {
                let mut hashes = Vec::new();
                for (c, r) in &reports {
                    hashes.push((r.endpoint.clone(), entry_hash(c, common).await?));
                }
                if hashes.iter().any(|(_, h)| *h != hashes[0].1) {
                    // The heads only show that the chains differ somewhere before them; name
                    // the first entry where they do.
                    let mut first = common;
                    for (c, _) in &reports[1..] {
                        first = first.min(first_divergence(reports[0].0, c, common).await?);
                    }
                    let mut listed = Vec::new();
                    for (c, r) in &reports {
                        listed.push(format!("{}: {}", r.endpoint, entry_hash(c, first).await?));
                    }
                    divergence = Some(format!("chains diverge at entry {first}: {}", listed.join(", ")));
                }
            }
            if json {
                let mut rows: Vec<Json> = outcomes
                    .iter()
                    .map(|(label, _, r)| match r {
                        Ok(r) => report_json(r),
                        Err(e) => failure_json(label, e),
                    })
                    .collect();
                if let Some(d) = &divergence {
                    rows.push(json!({ "ok": false, "tampered": true, "error": d }));
                }
                print_json(&if each {
                    Json::Array(rows)
                } else {
                    rows.swap_remove(0)
                })?;
            } else {
                for (label, _, r) in &outcomes {
                    match r {
                        Ok(r) => outln!(
                            "{}: chain verified: {} entries, head {} {}",
                            r.endpoint,
                            r.entries_checked,
                            r.head_index,
                            r.head_hash
                                .map(|h| h.to_hex())
                                .unwrap_or_else(|| "(empty)".into())
                        )?,
                        Err(e) if e.is_tampering() => outln!("{label}: CHAIN DOES NOT VERIFY: {e}")?,
                        Err(e) => outln!("{label}: could not verify: {e}")?,
                    }
                }
                if let Some(d) = &divergence {
                    outln!("CHAINS DISAGREE: {d}")?;
                }
            }
            let tampered = outcomes
                .iter()
                .filter(|(_, _, r)| r.as_ref().is_err_and(|e| e.is_tampering()))
                .count()
                + usize::from(divergence.is_some());
            let failed = outcomes.iter().filter(|(_, _, r)| r.is_err()).count();
            if tampered > 0 {
                let first = outcomes
                    .iter()
                    .find_map(|(_, _, r)| {
                        r.as_ref()
                            .err()
                            .filter(|e| e.is_tampering())
                            .map(|e| e.to_string())
                    })
                    .or(divergence)
                    .unwrap_or_default();
                return Err(Tampered(first).into());
            }
            if failed > 0 {
                let first = outcomes
                    .iter()
                    .find_map(|(_, _, r)| r.as_ref().err().map(|e| e.to_string()))
                    .unwrap_or_default();
                return Err(Reported(format!("could not verify: {first}")).into());
            }
            Ok(())
        }
        AuditCommand::Head => {
            let h = client.head().await.context("audit head")?;
            if json {
                print_json(&json!({
                    "index": h.index, "hash": hex::encode(&h.hash), "tx": h.tx,
                    "tx_time_ns": h.tx_time_ns, "node_id": h.node_id,
                }))?;
            } else {
                outln!(
                    "head: entry {} {} (tx {}, {}; from node {})",
                    h.index,
                    hex::encode(&h.hash),
                    h.tx,
                    format_time_ns(h.tx_time_ns),
                    h.node_id
                )?;
            }
            Ok(())
        }
        AuditCommand::Entries { from, limit } => {
            let mut stream = client.audit_entries(from, limit).await.context("audit entries")?;
            let mut rows = Vec::new();
            let mut table = Table::new(&[
                "INDEX",
                "TX",
                "TIME",
                "KIND",
                "NAMESPACE",
                "HASH",
                "PREV",
                "STATE ROOT",
                "SIGNER",
            ]);
            while let Some(entry) = stream.next().await {
                let e = entry.context("audit entries")?;
                if json {
                    rows.push(json!({
                        "index": e.index, "tx": e.tx, "tx_time_ns": e.tx_time_ns, "namespace": e.namespace,
                        "kind": e.kind, "prev_hash": hex::encode(&e.prev_hash), "hash": hex::encode(&e.hash),
                        // null: no attestation of its own; a later one of the node covers it.
                        "signer_key_id": (!e.signer_key_id.is_empty()).then(|| hex::encode(&e.signer_key_id)),
                        "signed": hex::encode(&e.signed),
                        // null: the entry records no state root (not a transaction, or of format 1).
                        "state_root": (!e.state_root.is_empty()).then(|| hex::encode(&e.state_root)),
                    }));
                } else {
                    table.row(vec![
                        e.index.to_string(),
                        e.tx.to_string(),
                        format_time_ns(e.tx_time_ns),
                        e.kind.clone(),
                        e.namespace.clone(),
                        short_hash(&e.hash),
                        short_hash(&e.prev_hash),
                        if e.state_root.is_empty() {
                            "-".to_string()
                        } else {
                            short_hash(&e.state_root)
                        },
                        if e.signer_key_id.is_empty() {
                            "-".to_string()
                        } else {
                            hex::encode(&e.signer_key_id)
                        },
                    ]);
                }
            }
            if json {
                print_json(&Json::Array(rows))?;
            } else if table.is_empty() {
                outln!("no entries")?;
            } else {
                out!("{}", table.render())?;
            }
            Ok(())
        }
    }
}

/// The hash of entry `index` of a node's chain, recomputed from its signed form.
/// The first index in `1..=differ_at` where the chains of `a` and `b` hold different entries,
/// given that they differ at `differ_at` ([`engram_audit::Bisect`]).
async fn first_divergence(a: &Client, b: &Client, differ_at: u64) -> Result<u64> {
    let mut search = engram_audit::Bisect::new(differ_at);
    while let Some(i) = search.probe() {
        search.record(i, entry_hash(a, i).await? == entry_hash(b, i).await?);
    }
    Ok(search.first())
}

async fn entry_hash(client: &Client, index: u64) -> Result<engram_types::Hash> {
    let mut stream = client.audit_entries(index, 1).await?;
    let entry = stream
        .next()
        .await
        .ok_or_else(|| anyhow!("entry {index} is missing"))??;
    // Already verified moments ago; a decode failure now means the node changed under us.
    let signed = SignedEntry::decode(&entry.signed).map_err(|e| anyhow!("entry {index}: {e}"))?;
    Ok(signed.entry.hash())
}
