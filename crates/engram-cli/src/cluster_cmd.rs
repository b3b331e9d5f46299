//! `engram cluster` (init, status, membership, shrink) and `engram health`: the cluster's
//! members and each node's state.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use engram_client::{Client, ClientConfig, code_name, pb};
use serde_json::{Value as Json, json};

use crate::cli::ClusterCommand;
use crate::common::{Reported, node_statuses, probe_of, unanswered_json};
use crate::output::print_json;
use crate::output::{Table, short_hash};
use crate::output::{out, outln};

pub(crate) fn member_json(m: &pb::Member) -> Json {
    json!({ "id": m.id, "addr": m.addr, "public_key": hex::encode(&m.public_key), "voter": m.voter })
}

pub(crate) fn members_text(members: &[pb::Member]) -> String {
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

pub(crate) fn members_table(members: &[pb::Member]) -> String {
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

pub(crate) fn status_json(endpoint: &str, s: &pb::StatusResponse) -> Json {
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
pub(crate) fn purge_state(s: &pb::StatusResponse) -> &'static str {
    if s.redactions_applied_index == 0 {
        "none"
    } else if s.redactions_purged_index >= s.redactions_applied_index {
        "done"
    } else {
        "pending"
    }
}

pub(crate) async fn cluster(client: &Client, cmd: ClusterCommand, json: bool) -> Result<()> {
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

pub(crate) fn membership_output(what: &str, resp: &pb::MembershipResponse, json: bool) -> Result<()> {
    if json {
        print_json(&json!({ "members": resp.members.iter().map(member_json).collect::<Vec<_>>() }))?;
    } else {
        outln!("{what}; members now:")?;
        out!("{}", members_table(&resp.members))?;
    }
    Ok(())
}

/// `engram health`: one gRPC health check against the first endpoint, connecting as every
/// other client command does (`--tls-*` included).
pub(crate) async fn health(
    endpoints: &[String],
    config: &ClientConfig,
    args: crate::cli::HealthArgs,
    json: bool,
) -> Result<()> {
    let endpoint = endpoints
        .first()
        .ok_or_else(|| anyhow!("--endpoint: give a node"))?;
    let timeout = Duration::from_millis(args.timeout_ms);
    let engram_client::Health {
        serving,
        status: name,
    } = engram_client::check_health(endpoint, config, &args.service, timeout).await?;
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
pub(crate) async fn shrink(client: &Client, to: u64, json: bool) -> Result<()> {
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
