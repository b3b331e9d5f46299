//! `engram serve`: a node in this process, from flags and the environment (a pod's name and
//! the chart's settings).

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use engram_server::{ServerConfig, telemetry};

use crate::cli::ServeArgs;

/// `identity`: --tls-cert and --tls-key, the node's own certificate and key.
pub(crate) async fn serve(args: ServeArgs, identity: (Option<PathBuf>, Option<PathBuf>)) -> Result<()> {
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
    config.restore_from = args.restore_from.map(|backup| engram_server::RestoreFrom {
        backup,
        node_id: args.restore_node,
    });
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
    if let Some(v) = args.session_check_ms {
        config.session_check_ms = v;
    }
    if let Some(v) = args.recall_save_ms {
        config.recall_save_ms = v;
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
