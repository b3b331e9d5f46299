//! The dispatcher: builds the client from the global flags and hands each command to the
//! module that runs it (`data_cmd`, `cluster_cmd`, `audit_cmd`, `serve_cmd`, the other
//! `*_cmd` modules, `demo`, `mcp`, `offline`); and what an error becomes (its exit
//! code and JSON document). Each module parses its input into domain types, makes its calls
//! through [`engram_client::Client`], and prints a table (or `--json`).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use engram_client::{Client, ClientConfig, ClientError, code_name};
use serde_json::{Value as Json, json};

use crate::cli::{AuditCommand, Cli, Command, RedactCli, RedactCommand};

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

use crate::common::Tampered;
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
        Command::Serve(args) => crate::serve_cmd::serve(*args, identity).await,
        Command::Demo(args) => crate::demo::run(args, json).await.map(|_| ()),
        Command::Cluster(cmd) => crate::cluster_cmd::cluster(&client()?, cmd, json).await,
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
        Command::Transact(args) => {
            crate::data_cmd::transact(&client()?, &args.file, args.print_id.as_deref(), json).await
        }
        Command::Get(args) => crate::data_cmd::get(&client()?, args, json).await,
        Command::History(args) => crate::data_cmd::history(&client()?, args, json).await,
        Command::Find(args) => crate::data_cmd::find(&client()?, args, json).await,
        Command::Namespaces(args) => crate::data_cmd::list_namespaces(&client()?, args, json).await,
        Command::Entities(args) => crate::data_cmd::list_entities(&client()?, args, json).await,
        Command::Referrers(args) => crate::data_cmd::referrers(&client()?, args, json).await,
        Command::Query(args) => crate::data_cmd::query(&client()?, args, json).await,
        Command::Search(args) => crate::data_cmd::search(&client()?, args, json).await,
        Command::Watch(args) => crate::data_cmd::watch(&client()?, args, json).await,
        Command::Diff(args) => crate::data_cmd::diff(&client()?, args, json).await,
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
        Command::Session(cmd) => crate::retention_cmd::session(&client()?, cmd, json).await,
        Command::Health(args) => crate::cluster_cmd::health(&cli.endpoints, &config, args, json).await,
        Command::Schema(cmd) => crate::memory_cmd::schema(&client()?, cmd, json).await,
        Command::Branch(cmd) => crate::memory_cmd::branch(&client()?, cmd, json).await,
        Command::Backup(args) => crate::backup_cmd::backup(&client()?, args, json).await,
        Command::Console(args) => crate::console_cmd::console(client()?, args, json).await,
        Command::Jobs(args) => crate::jobs_cmd::jobs(&client()?, &cli.endpoints, args, json).await,
        Command::Metrics(args) => crate::metrics_cmd::metrics(&client()?, args, json).await,
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
        Command::Audit(cmd) => crate::audit_cmd::audit(&client()?, cmd, json).await,
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
