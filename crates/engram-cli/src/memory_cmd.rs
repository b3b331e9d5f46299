//! `engram schema` and `engram branch`: declaring attributes (by file or preset) and working
//! with branches. Input is parsed into domain types before anything is sent.

use anyhow::{Context, Result, bail};
use engram_client::{Client, Consistency, pb};
use engram_types::{
    Attribute, AttributeDef, BranchName, Cardinality, EntityId, Provenance, RedactRequest, Status, Unique,
    ValueType,
};
use serde_json::{Value as Json, json};

use crate::cli::{BranchCommand, RedactArgs, RedactStatusArgs, SchemaCommand};
use crate::common::{
    Reported, consistency, namespace, node_statuses, probe_of, receipt_output, unanswered_json,
};
use crate::output::print_json;
use crate::output::{Table, datom_table};
use crate::output::{out, outln};
use crate::txjson::{self, JsonError};

/// The schema presets `engram schema apply --preset` knows.
pub const PRESETS: [(&str, &str); 1] = [("agent-memory", include_str!("../presets/agent-memory.json"))];

const DEF_FIELDS: [&str; 10] = [
    "ident",
    "type",
    "cardinality",
    "unique",
    "indexed",
    "component",
    "doc",
    "deprecated",
    "searchable",
    "dimension",
];

fn err<T>(path: String, reason: impl Into<String>) -> Result<T, JsonError> {
    Err(JsonError {
        path,
        reason: reason.into(),
    })
}

/// Parses a schema document: an array of attribute declarations, each
/// `{"ident", "type", "cardinality"?, "unique"?, "indexed"?, "component"?, "doc"?, "deprecated"?,
/// "searchable"?, "dimension"?}`.
pub fn parse_schema(text: &str) -> Result<Vec<AttributeDef>, JsonError> {
    let json: Json = serde_json::from_str(text).map_err(|e| JsonError {
        path: "(document)".into(),
        reason: format!("invalid JSON: {e}"),
    })?;
    let Json::Array(items) = json else {
        return err("(document)".into(), "expected an array of attribute declarations");
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let path = |f: &str| format!("[{i}].{f}");
        let Json::Object(map) = item else {
            return err(format!("[{i}]"), "expected an object");
        };
        if let Some(unknown) = map.keys().find(|k| !DEF_FIELDS.contains(&k.as_str())) {
            return err(
                path(unknown),
                format!("unknown field (known: {})", DEF_FIELDS.join(", ")),
            );
        }
        let text = |f: &str| -> Result<Option<&str>, JsonError> {
            match map.get(f) {
                None => Ok(None),
                Some(Json::String(s)) => Ok(Some(s.as_str())),
                Some(_) => err(path(f), "expected a string"),
            }
        };
        let flag = |f: &str| -> Result<bool, JsonError> {
            match map.get(f) {
                None => Ok(false),
                Some(Json::Bool(b)) => Ok(*b),
                Some(_) => err(path(f), "expected true or false"),
            }
        };
        let Some(ident) = text("ident")? else {
            return err(path("ident"), "is required");
        };
        let ident = Attribute::new(ident).map_err(|e| JsonError {
            path: path("ident"),
            reason: e.to_string(),
        })?;
        let Some(ty) = text("type")? else {
            return err(path("type"), "is required");
        };
        let value_type = ValueType::ALL.into_iter().find(|t| t.name() == ty);
        let Some(value_type) = value_type else {
            return err(
                path("type"),
                format!(
                    "unknown type {ty:?} (string, i64, f64, bool, bytes, instant, ref, keyword, json or vector)"
                ),
            );
        };
        let cardinality = match text("cardinality")? {
            None | Some("one") => Cardinality::One,
            Some("many") => Cardinality::Many,
            Some(other) => {
                return err(
                    path("cardinality"),
                    format!("expected \"one\" or \"many\", found {other:?}"),
                );
            }
        };
        let unique = match text("unique")? {
            None => None,
            Some("identity") => Some(Unique::Identity),
            Some("value") => Some(Unique::Value),
            Some(other) => {
                return err(
                    path("unique"),
                    format!("expected \"identity\" or \"value\", found {other:?}"),
                );
            }
        };
        let def = AttributeDef {
            ident,
            value_type,
            cardinality,
            unique,
            indexed: flag("indexed")?,
            component: flag("component")?,
            doc: text("doc")?.unwrap_or_default().to_string(),
            deprecated: flag("deprecated")?,
            searchable: flag("searchable")?,
            dimension: match map.get("dimension") {
                None => 0,
                Some(Json::Number(n)) => match n.as_u64().and_then(|d| u32::try_from(d).ok()) {
                    Some(d) => d,
                    None => {
                        return err(
                            path("dimension"),
                            format!("expected a component count, found {n}"),
                        );
                    }
                },
                Some(_) => return err(path("dimension"), "expected a number"),
            },
        };
        def.validate().map_err(|e| JsonError {
            path: format!("[{i}]"),
            reason: e.to_string(),
        })?;
        out.push(def);
    }
    Ok(out)
}

fn def_json(def: &pb::AttributeDef) -> Json {
    let cardinality = if def.cardinality == pb::Cardinality::Many as i32 {
        "many"
    } else {
        "one"
    };
    let unique = match pb::Uniqueness::try_from(def.unique) {
        Ok(pb::Uniqueness::Identity) => json!("identity"),
        Ok(pb::Uniqueness::Value) => json!("value"),
        _ => Json::Null,
    };
    json!({
        "ident": def.ident, "type": def.value_type, "cardinality": cardinality, "unique": unique,
        "indexed": def.indexed, "component": def.component, "doc": def.doc, "deprecated": def.deprecated,
        "searchable": def.searchable, "dimension": def.dimension,
    })
}

fn provenance(agent: &str) -> Result<Provenance> {
    let p = Provenance {
        agent: agent.to_string(),
        confidence: 1.0,
        status: Status::Verified,
        ..Provenance::default()
    };
    p.validate().context("--agent")?;
    Ok(p)
}

fn branch_name(raw: &str) -> Result<BranchName> {
    BranchName::new(raw).context("branch name")
}

pub async fn schema(client: &Client, cmd: SchemaCommand, json: bool) -> Result<()> {
    match cmd {
        SchemaCommand::Apply {
            namespace: ns,
            preset,
            file,
            agent,
        } => {
            let ns = namespace(&ns)?;
            let (source, text) = match (preset, file) {
                (Some(name), None) => match PRESETS.iter().find(|(n, _)| *n == name) {
                    Some((_, text)) => (format!("preset {name}"), text.to_string()),
                    None => bail!(
                        "--preset: unknown preset {name:?} (known: {})",
                        PRESETS.map(|(n, _)| n).join(", ")
                    ),
                },
                (None, Some(path)) => (
                    path.clone(),
                    std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?,
                ),
                _ => bail!("give --preset NAME or --file FILE"),
            };
            let defs = parse_schema(&text).with_context(|| source.clone())?;
            // Send only what differs from the declarations in force, so applying a preset
            // twice is a no-op rather than an error.
            let current = client
                .schema(&ns, None, Consistency::Linearizable)
                .await
                .context("schema")?;
            let changed: Vec<AttributeDef> = defs
                .into_iter()
                .filter(|d| {
                    !current
                        .attributes
                        .iter()
                        .any(|a| a.entity.is_some() && a.def.as_ref() == Some(&pb::AttributeDef::from(d)))
                })
                .collect();
            if changed.is_empty() {
                if json {
                    print_json(
                        &json!({ "namespace": ns.to_string(), "version": current.version, "changed": 0 }),
                    )?;
                } else {
                    outln!(
                        "schema of {ns} is up to date (version {}): nothing to apply",
                        current.version
                    )?;
                }
                return Ok(());
            }
            let receipt = client
                .apply_schema(&ns, &changed, &provenance(&agent)?, None)
                .await
                .context("schema apply")?;
            if !json {
                outln!(
                    "declared {} attribute{} in {ns} from {source}:",
                    changed.len(),
                    if changed.len() == 1 { "" } else { "s" }
                )?;
                for d in &changed {
                    outln!("  {}", d.ident)?;
                }
            }
            receipt_output(&receipt, json)?;
            Ok(())
        }
        SchemaCommand::Show {
            namespace: ns,
            as_of_tx,
            stale,
        } => {
            let ns = namespace(&ns)?;
            let consistency = consistency(stale);
            let resp = client
                .schema(&ns, as_of_tx, consistency)
                .await
                .context("schema")?;
            if json {
                print_json(&json!({
                    "namespace": ns.to_string(), "version": resp.version, "strict": resp.strict,
                    "applied_tx": resp.applied_tx,
                    "attributes": resp.attributes.iter().map(|a| {
                        let mut doc = a.def.as_ref().map(def_json).unwrap_or(Json::Null);
                        doc["since_tx"] = json!(a.since_tx);
                        doc["version"] = json!(a.version);
                        doc["entity"] = json!(a.entity);
                        doc
                    }).collect::<Vec<_>>(),
                }))?;
                return Ok(());
            }
            outln!(
                "schema of {ns}: version {}, {} (read at tx {})",
                resp.version,
                if resp.strict {
                    "strict: only declared attributes are accepted"
                } else {
                    "open: attributes are typed by their first assertion"
                },
                resp.applied_tx
            )?;
            let mut t = Table::new(&[
                "ATTRIBUTE",
                "TYPE",
                "CARD",
                "UNIQUE",
                "INDEX",
                "SEARCH",
                "SINCE TX",
                "VERSION",
                "DOC",
            ]);
            for a in &resp.attributes {
                let Some(d) = &a.def else { continue };
                let doc = def_json(d);
                let mut flags = d.doc.clone();
                if d.deprecated {
                    flags = format!("(deprecated) {flags}");
                }
                let value_type = if d.dimension > 0 {
                    format!("{}[{}]", d.value_type, d.dimension)
                } else {
                    d.value_type.clone()
                };
                t.row(vec![
                    d.ident.clone(),
                    value_type,
                    doc["cardinality"].as_str().unwrap_or("one").to_string(),
                    doc["unique"].as_str().unwrap_or("-").to_string(),
                    if d.indexed { "yes" } else { "-" }.to_string(),
                    if d.searchable { "yes" } else { "-" }.to_string(),
                    a.since_tx.to_string(),
                    if a.entity.is_some() {
                        a.version.to_string()
                    } else {
                        "by use".into()
                    },
                    crate::output::ellipsize(&flags, 60),
                ]);
            }
            out!("{}", t.render())?;
            Ok(())
        }
    }
}

fn branch_json(b: &pb::Branch) -> Json {
    json!({
        "name": b.name, "state": b.state, "fork_tx": b.fork_tx, "created_tx": b.created_tx,
        "closed_tx": b.closed_tx, "writes": b.writes, "entity": b.entity,
    })
}

pub async fn branch(client: &Client, cmd: BranchCommand, json: bool) -> Result<()> {
    match cmd {
        BranchCommand::Create {
            namespace: ns,
            name,
            from_tx,
            agent,
        } => {
            let ns = namespace(&ns)?;
            let name = branch_name(&name)?;
            let receipt = client
                .create_branch(&ns, &name, from_tx, &provenance(&agent)?)
                .await
                .context("branch create")?;
            if !json {
                let fork = from_tx.map_or("the head".to_string(), |t| format!("tx {t}"));
                outln!("created branch {name} of {ns} from {fork}")?;
            }
            receipt_output(&receipt, json)?;
            Ok(())
        }
        BranchCommand::Merge {
            namespace: ns,
            name,
            agent,
        } => close_branch(client, &ns, &name, &agent, true, json).await,
        BranchCommand::Abandon {
            namespace: ns,
            name,
            agent,
        } => close_branch(client, &ns, &name, &agent, false, json).await,
        BranchCommand::List { namespace: ns, stale } => {
            let ns = namespace(&ns)?;
            let consistency = consistency(stale);
            let resp = client.branches(&ns, consistency).await.context("branch list")?;
            if json {
                print_json(&json!({
                    "namespace": ns.to_string(), "applied_tx": resp.applied_tx,
                    "branches": resp.branches.iter().map(branch_json).collect::<Vec<_>>(),
                }))?;
                return Ok(());
            }
            if resp.branches.is_empty() {
                outln!("no branches in {ns} (read at tx {})", resp.applied_tx)?;
                return Ok(());
            }
            let mut t = Table::new(&["BRANCH", "STATE", "FORK TX", "CREATED TX", "CLOSED TX", "WRITES"]);
            for b in &resp.branches {
                t.row(vec![
                    b.name.clone(),
                    b.state.clone(),
                    b.fork_tx.to_string(),
                    b.created_tx.to_string(),
                    if b.closed_tx == 0 {
                        "-".into()
                    } else {
                        b.closed_tx.to_string()
                    },
                    b.writes.to_string(),
                ]);
            }
            out!("{}", t.render())?;
            Ok(())
        }
        BranchCommand::Diff {
            namespace: ns,
            name,
            entity,
            stale,
        } => {
            let ns = namespace(&ns)?;
            let name = branch_name(&name)?;
            let consistency = consistency(stale);
            let resp = client
                .branch_diff(&ns, &name, entity.map(EntityId), 0, consistency)
                .await
                .context("branch diff")?;
            let list = |d: &[pb::Datom]| d.iter().map(txjson::datom_to_json).collect::<Vec<_>>();
            if json {
                print_json(&json!({
                    "namespace": ns.to_string(), "branch": name.to_string(), "truncated": resp.truncated,
                    "asserted": list(&resp.asserted), "retracted": list(&resp.retracted),
                    "main_changed": list(&resp.main_changed),
                }))?;
                return Ok(());
            }
            outln!("branch {name} against main:")?;
            outln!("asserted on the branch ({}):", resp.asserted.len())?;
            out!("{}", datom_table(&resp.asserted))?;
            outln!("retracted on the branch ({}):", resp.retracted.len())?;
            out!("{}", datom_table(&resp.retracted))?;
            if resp.main_changed.is_empty() {
                outln!(
                    "main has not changed what the branch wrote since the fork: a merge would apply cleanly"
                )?;
            } else {
                outln!(
                    "changed on main since the fork, on what the branch also wrote ({}): a merge would conflict",
                    resp.main_changed.len()
                )?;
                out!("{}", datom_table(&resp.main_changed))?;
            }
            Ok(())
        }
    }
}

/// `engram branch merge` / `abandon`.
async fn close_branch(
    client: &Client,
    ns: &str,
    name: &str,
    agent: &str,
    merge: bool,
    json: bool,
) -> Result<()> {
    let ns = namespace(ns)?;
    let name = branch_name(name)?;
    let what = if merge { "merge" } else { "abandon" };
    let receipt = client
        .close_branch(&ns, &name, merge, &provenance(agent)?)
        .await
        .with_context(|| format!("branch {what}"))?;
    if !json {
        if merge {
            outln!("merged branch {name} into main of {ns} as one transaction")?;
        } else {
            outln!("abandoned branch {name} of {ns}; its history stays readable")?;
        }
    }
    receipt_output(&receipt, json)?;
    Ok(())
}

/// `engram redact`: `signer` is the --agent-key's agent, the default asker.
/// Where one node is with the redactions up to a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PurgeStage {
    /// It has not applied a redaction at or after the transaction yet.
    NotApplied,
    /// Applied (its reads no longer return the values); its files still hold them.
    Purging,
    /// Gone from its files too.
    Purged,
}

impl PurgeStage {
    fn of(tx: u64, s: &pb::StatusResponse) -> PurgeStage {
        if s.redactions_purged_index >= tx {
            PurgeStage::Purged
        } else if s.redactions_applied_index >= tx {
            PurgeStage::Purging
        } else {
            PurgeStage::NotApplied
        }
    }

    fn name(self) -> &'static str {
        match self {
            PurgeStage::NotApplied => "not applied",
            PurgeStage::Purging => "purging",
            PurgeStage::Purged => "purged",
        }
    }
}

/// `engram redact status TX`: each endpoint's stage for the redactions up to TX; with --wait,
/// asked again every second until every node has purged them or the deadline passes.
pub async fn redact_status(client: &Client, args: RedactStatusArgs, json: bool) -> Result<()> {
    if args.tx == 0 {
        bail!("TX must be a transaction id (1 or more)");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.timeout_secs);
    let ui = crate::ui::Ui::new(json);
    let spinner = args.wait.then(|| {
        ui.spinner(format!(
            "waiting until every node has purged redaction {}",
            args.tx
        ))
    });
    let probe = probe_of(client)?;
    let stage = |r: &Result<pb::StatusResponse, _>| r.as_ref().ok().map(|s| PurgeStage::of(args.tx, s));
    let results = loop {
        let results = node_statuses(&probe).await;
        let purged = results
            .iter()
            .filter(|r| stage(r) == Some(PurgeStage::Purged))
            .count();
        if let Some(spinner) = &spinner {
            spinner.set_message(format!(
                "waiting until every node has purged redaction {}: {purged} of {}",
                args.tx,
                results.len()
            ));
        }
        if !args.wait || purged == results.len() || std::time::Instant::now() >= deadline {
            break results;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    let endpoints = client.endpoints();
    let all_purged = results.iter().all(|r| stage(r) == Some(PurgeStage::Purged));
    if let Some(spinner) = &spinner {
        if all_purged {
            ui.done(spinner, format!("every node has purged redaction {}", args.tx));
        } else {
            ui.failed(
                spinner,
                format!("not every node has purged redaction {}", args.tx),
            );
        }
    }
    if json {
        let nodes: Vec<Json> = endpoints
            .iter()
            .zip(&results)
            .map(|(ep, r)| match r {
                Ok(s) => json!({
                    "endpoint": ep,
                    "node_id": s.node_id,
                    "stage": PurgeStage::of(args.tx, s).name(),
                    "redactions_applied_index": s.redactions_applied_index,
                    "redactions_purged_index": s.redactions_purged_index,
                }),
                Err(e) => unanswered_json(ep, e),
            })
            .collect();
        print_json(&json!({ "tx": args.tx, "purged": all_purged, "nodes": nodes }))?;
    } else {
        let mut t = Table::new(&["ENDPOINT", "NODE", "STAGE", "APPLIED UP TO", "PURGED UP TO"]);
        for (ep, r) in endpoints.iter().zip(&results) {
            match r {
                Ok(s) => t.row(vec![
                    ep.clone(),
                    s.node_id.to_string(),
                    PurgeStage::of(args.tx, s).name().into(),
                    s.redactions_applied_index.to_string(),
                    s.redactions_purged_index.to_string(),
                ]),
                Err(e) => t.row(vec![ep.clone(), "?".into(), format!("no answer: {e}")]),
            }
        }
        out!("{}", t.render())?;
    }
    let unanswered = results.iter().filter(|r| r.is_err()).count();
    if unanswered > 0 {
        return Err(Reported(format!(
            "{unanswered} of {} endpoints did not answer",
            endpoints.len()
        ))
        .into());
    }
    if args.wait && !all_purged {
        return Err(Reported(format!(
            "not every node purged redaction {} within {} s",
            args.tx, args.timeout_secs
        ))
        .into());
    }
    Ok(())
}

pub async fn redact(client: &Client, args: RedactArgs, signer: Option<String>, json: bool) -> Result<()> {
    let agent = args
        .agent
        .clone()
        .or(signer)
        .unwrap_or_else(|| "engram-cli".into());
    let attribute = args
        .attribute
        .as_deref()
        .map(Attribute::new)
        .transpose()
        .context("--attribute")?;
    let context = if args.dry_run {
        "redact (dry run)"
    } else {
        "redact"
    };
    let answer = match args.entity {
        Some(entity) => {
            let req = RedactRequest {
                namespace: namespace(&args.namespace)?,
                entity: EntityId(entity),
                attribute,
                reason: args.reason,
                provenance: provenance(&agent)?,
            };
            req.validate().context("--reason")?;
            client.redact(&req, args.dry_run).await.context(context)?
        }
        None => {
            let predicate = engram_types::Predicate {
                attribute,
                agent: args.written_by.clone(),
                value: args
                    .value
                    .as_deref()
                    .map(crate::txjson::parse_value)
                    .transpose()
                    .context("--value")?,
                before_tx: args.before_tx.map(engram_types::TxId),
                written_before_ns: args.written_before_ns,
                valid_from_before_ns: args.valid_from_before_ns,
            };
            if predicate.is_everything() && !args.all {
                bail!(
                    "engram redact needs --entity, a predicate (--attribute, --written-by, --value, --before-tx, --written-before-ns, --valid-from-before-ns) or --all (every datom of the namespace)"
                );
            }
            let req = engram_types::RedactWhere {
                namespace: namespace(&args.namespace)?,
                predicate,
                reason: args.reason,
                provenance: provenance(&agent)?,
            };
            req.validate().context("the redaction")?;
            client.redact_where(&req, args.dry_run).await.context(context)?
        }
    };
    if json {
        let datoms: Vec<Json> = answer
            .datoms
            .iter()
            .map(|d| {
                json!({
                    "tx": d.tx,
                    "seq": d.seq,
                    "hash": hex::encode(&d.hash),
                    "attribute": d.attribute,
                    "op": if d.op == pb::Op::Retract as i32 { "retract" } else { "assert" },
                    "guessable": d.guessable,
                    "redacted_by_tx": d.redacted_by_tx,
                    "branch": if d.branch.is_empty() { Json::Null } else { json!(d.branch) },
                })
            })
            .collect();
        return print_json(&json!({
            "dry_run": answer.dry_run,
            "tx": answer.tx,
            "datoms_redacted": answer.datoms_redacted,
            "listing_truncated": answer.listing_truncated,
            "part_txs": answer.part_txs,
            "audit_index": answer.audit_index,
            "audit_hash": hex::encode(&answer.audit_hash),
            "datoms": datoms,
        }));
    }
    let mut t = Table::new(&[
        "TX",
        "SEQ",
        "BRANCH",
        "ATTRIBUTE",
        "OP",
        "KEPT HASH",
        "COMMITMENT",
    ]);
    for d in &answer.datoms {
        t.row(vec![
            d.tx.to_string(),
            d.seq.to_string(),
            if d.branch.is_empty() {
                "main".into()
            } else {
                d.branch.clone()
            },
            d.attribute.clone(),
            if d.op == pb::Op::Retract as i32 {
                "retract"
            } else {
                "assert"
            }
            .into(),
            crate::output::short_hash(&d.hash),
            // docs/AUDIT.md, redaction's threat model: an unsalted hash can be tested against
            // guesses of the value.
            if d.guessable {
                "unsalted (guessable)"
            } else {
                "salted"
            }
            .into(),
        ]);
    }
    out!("{}", t.render())?;
    let count = usize::try_from(answer.datoms_redacted)
        .unwrap_or(usize::MAX)
        .max(answer.datoms.len());
    if answer.listing_truncated {
        outln!("(the first {} listed)", answer.datoms.len())?;
    }
    if answer.dry_run {
        outln!(
            "dry run: {} would be redacted (values only; nothing changed)",
            crate::output::plural(count, "datom")
        )?;
    } else {
        let parts = match answer.part_txs.as_slice() {
            [] | [_] => format!("tx {}", answer.tx),
            [first, .., last] => format!("{} parts, tx {first} to {last}", answer.part_txs.len()),
        };
        outln!(
            "redacted {} in {parts}, audit entry {} ({}); the values are gone from every replica's state",
            crate::output::plural(count, "datom"),
            answer.audit_index,
            crate::output::short_hash(&answer.audit_hash)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preset_parses_and_covers_every_memory_kind() {
        let defs = parse_schema(PRESETS[0].1).unwrap();
        assert!(defs.len() >= 10);
        let kind = defs.iter().find(|d| d.ident.as_str() == ":memory/kind").unwrap();
        for k in [
            "fact",
            "preference",
            "procedure",
            "blocker",
            "reference",
            "identity",
        ] {
            assert!(kind.doc.contains(&format!(":memory.kind/{k}")), "{k}");
        }
        let key = defs.iter().find(|d| d.ident.as_str() == ":memory/key").unwrap();
        assert_eq!(key.unique, Some(Unique::Identity));
    }

    #[test]
    fn bad_declarations_name_their_field() {
        let cases = [
            (r#"{"ident": ":a/b"}"#, "(document)"),
            (r#"[{"ident": ":a/b"}]"#, "[0].type"),
            (r#"[{"ident": "b", "type": "string"}]"#, "[0].ident"),
            (r#"[{"ident": ":a/b", "type": "text"}]"#, "[0].type"),
            (
                r#"[{"ident": ":a/b", "type": "string", "cardinality": "some"}]"#,
                "[0].cardinality",
            ),
            (
                r#"[{"ident": ":a/b", "type": "string", "indexd": true}]"#,
                "[0].indexd",
            ),
            (r#"[{"ident": ":db/b", "type": "string"}]"#, "[0]"),
        ];
        for (text, path) in cases {
            let e = parse_schema(text).unwrap_err();
            assert_eq!(e.path, path, "{text}: {e}");
        }
    }
}
