//! `engram audit` against a live cluster: verify each node's chain, compare replicas, show
//! entries and proofs (offline verification and export are `offline`'s).

use anyhow::{Context, Result, anyhow};
use engram_audit::SignedEntry;
use engram_client::{Client, ClientError, code_name};
use futures::StreamExt;
use serde_json::{Value as Json, json};

use crate::cli::AuditCommand;
use crate::common::{Reported, Tampered};
use crate::output::print_json;
use crate::output::{Table, format_time_ns, short_hash};
use crate::output::{out, outln};
use crate::ui::Ui;

pub(crate) fn report_json(r: &engram_client::ChainReport) -> Json {
    json!({
        "ok": true,
        "endpoint": r.endpoint,
        "entries_checked": r.entries_checked,
        "head_index": r.head_index,
        "head_hash": r.head_hash.map(|h| h.to_hex()),
    })
}

pub(crate) fn failure_json(endpoint: &str, e: &ClientError) -> Json {
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

pub(crate) async fn verify_one(
    client: &Client,
    label: &str,
    ui: Ui,
) -> Result<engram_client::ChainReport, ClientError> {
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

pub(crate) async fn audit(client: &Client, cmd: AuditCommand, json: bool) -> Result<()> {
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
pub(crate) async fn first_divergence(a: &Client, b: &Client, differ_at: u64) -> Result<u64> {
    let mut search = engram_audit::Bisect::new(differ_at);
    while let Some(i) = search.probe() {
        search.record(i, entry_hash(a, i).await? == entry_hash(b, i).await?);
    }
    Ok(search.first())
}

pub(crate) async fn entry_hash(client: &Client, index: u64) -> Result<engram_types::Hash> {
    let mut stream = client.audit_entries(index, 1).await?;
    let entry = stream
        .next()
        .await
        .ok_or_else(|| anyhow!("entry {index} is missing"))??;
    // Already verified moments ago; a decode failure now means the node changed under us.
    let signed = SignedEntry::decode(&entry.signed).map_err(|e| anyhow!("entry {index}: {e}"))?;
    Ok(signed.entry.hash())
}
