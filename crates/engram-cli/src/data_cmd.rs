//! The memory's writes and reads: `transact`, `get`, `history`, `find`, `namespaces`,
//! `entities`, `referrers`, `query`, `search`, `watch` and `diff`, with their proofs when asked.

use std::io::Read;

use anyhow::{Context, Result, anyhow, bail};
use engram_client::{
    Client, ClientError, DiffQuery, EntitiesQuery, FindQuery, GetOptions, HistoryQuery, HistoryTarget, Join,
    ReferrersQuery, SearchQuery, pb,
};
use engram_types::{Attribute, BranchName, EntityId, TxId};
use futures::StreamExt;
use serde_json::{Value as Json, json};

use crate::cli::{
    DiffArgs, EntitiesArgs, FindArgs, GetArgs, HistoryArgs, NamespacesArgs, QueryArgs, ReferrersArgs,
    RuleArg, SearchArgs, WatchArgs,
};
use crate::common::{Tampered, consistency, namespace, receipt_output};
use crate::output::print_json;
use crate::output::{Table, datom_table, format_time_ns, plural};
use crate::output::{out, outln};
use crate::ui::Ui;
use crate::{queryjson, txjson};

/// An optional `--branch`.
pub(crate) fn branch_arg(raw: Option<&str>) -> Result<Option<BranchName>> {
    raw.map(|b| BranchName::new(b).map_err(|e| anyhow!("--branch: {e}")))
        .transpose()
}

pub(crate) fn attribute(raw: &str) -> Result<Attribute> {
    Attribute::new(raw).map_err(|e| anyhow!("--attribute: {e}"))
}

pub(crate) fn read_input(file: &str) -> Result<String> {
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

pub(crate) async fn transact(client: &Client, file: &str, print_id: Option<&str>, json: bool) -> Result<()> {
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

pub(crate) fn datoms_output(datoms: &[pb::Datom], applied_tx: u64, extra: Json, json: bool) -> Result<()> {
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

pub(crate) async fn get(client: &Client, args: GetArgs, json: bool) -> Result<()> {
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
                "as_of_tx": proven.as_of_tx,
                "checkpoint_size": cp.size,
                "unfolded": proven.unfolded,
            });
        } else {
            eprintln!(
                "complete: {} of entity {}, {} of history, proven against the state root of tx {} \
                 (checkpoint {}) and folded here into the answer{}",
                plural(proven.slots, "attribute"),
                resp.entity,
                plural(proven.history_datoms, "datom"),
                proven.state_tx,
                cp.size,
                proven
                    .as_of_tx
                    .map(|t| format!(" as of tx {t}"))
                    .unwrap_or_default()
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
pub(crate) fn entity_output(resp: &pb::GetResponse, mut extra: Json, rule: &str, json: bool) -> Result<()> {
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
pub(crate) async fn trusted_log(client: &Client) -> Result<engram_client::TrustedLog> {
    client.trusted(&mut None).await.map_err(proof_error)
}

/// A failed proof or chain is tampering (exit 2); anything else keeps its context.
pub(crate) fn proof_error(e: ClientError) -> anyhow::Error {
    if e.is_tampering() {
        Tampered(format!("verification failed: {e}")).into()
    } else {
        anyhow::Error::new(e).context("verified read")
    }
}

pub(crate) fn verified_output(
    extra: &mut Json,
    trust: &engram_client::TrustedLog,
    datoms: usize,
    json: bool,
) {
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

pub(crate) async fn history(client: &Client, args: HistoryArgs, json: bool) -> Result<()> {
    let ns = namespace(&args.namespace)?;
    let attr = args.attribute.as_deref().map(attribute).transpose()?;
    if args.complete {
        let entity = args.entity.context("--complete needs --entity")?;
        if args.limit != 0 {
            bail!("--complete reads the whole history: give no --limit");
        }
        let mut trust = trusted_log(client).await?;
        let proven = client
            .history_complete(
                &mut trust,
                &ns,
                EntityId(entity),
                attr.as_ref(),
                args.as_of_tx.map(TxId),
            )
            .await
            .map_err(proof_error)?;
        let mut extra = json!({});
        verified_output(&mut extra, &trust, proven.datoms.len(), json);
        let cp = &trust.checkpoint().checkpoint;
        if json {
            extra["complete"] = json!({
                "slots": proven.slots,
                "state_tx": proven.state_tx,
                "as_of_tx": proven.as_of_tx,
                "checkpoint_size": cp.size,
            });
        } else {
            eprintln!(
                "complete: the whole history of {} up to tx {}, proven against the state root of tx {} (checkpoint {})",
                plural(proven.slots, "attribute"),
                proven.as_of_tx.unwrap_or(proven.state_tx),
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
pub(crate) fn paged_output(as_of_tx: u64, next_cursor: &[u8], json: bool) -> Json {
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
pub(crate) fn from_cursor(raw: Option<&str>) -> Result<Vec<u8>> {
    txjson::parse_cursor("--cursor", raw).map_err(|e| anyhow!(e))
}

/// Runs a paged read with a spinner on a terminal that counts the datoms read so far.
pub(crate) async fn with_progress<T, E>(
    json: bool,
    what: &str,
    read: impl AsyncFnOnce(&dyn Fn(usize)) -> Result<T, E>,
) -> Result<T, E> {
    let spinner = Ui::bars_only(json).spinner(what);
    let answer = read(&|n| spinner.set_message(format!("{what}: {}", plural(n, "datom")))).await;
    spinner.finish_and_clear();
    answer
}

pub(crate) async fn diff(client: &Client, args: DiffArgs, json: bool) -> Result<()> {
    let query = DiffQuery {
        namespace: namespace(&args.namespace)?,
        entity: args.entity.map(EntityId),
        from_tx: args.from_tx,
        to_tx: args.to_tx,
        limit: args.limit,
        consistency: consistency(args.stale),
        valid_at_ns: args.valid_at_ns,
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

pub(crate) async fn watch(client: &Client, args: WatchArgs, json: bool) -> Result<()> {
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

pub(crate) async fn find(client: &Client, args: FindArgs, json: bool) -> Result<()> {
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

pub(crate) async fn list_namespaces(client: &Client, args: NamespacesArgs, json: bool) -> Result<()> {
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

pub(crate) async fn list_entities(client: &Client, args: EntitiesArgs, json: bool) -> Result<()> {
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

pub(crate) async fn referrers(client: &Client, args: ReferrersArgs, json: bool) -> Result<()> {
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

pub(crate) fn entities_count(n: usize) -> String {
    if n == 1 {
        "1 entity".into()
    } else {
        format!("{n} entities")
    }
}

/// Says on stderr that a list goes on past `--limit`.
pub(crate) fn more_past_limit(next_cursor: &[u8], what: &str) -> Result<()> {
    if !next_cursor.is_empty() {
        eprintln!(
            "more {what} follow past --limit; --limit 0 reads them all, --json prints the cursor that --cursor goes on from"
        );
    }
    Ok(())
}

pub(crate) async fn search(client: &Client, args: SearchArgs, json: bool) -> Result<()> {
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

pub(crate) async fn query(client: &Client, args: QueryArgs, json: bool) -> Result<()> {
    let (text, source) = match (&args.query, &args.file) {
        (Some(text), _) => (text.clone(), "the QUERY argument".to_string()),
        (None, Some(file)) => (
            read_input(file)?,
            if file == "-" { "stdin".into() } else { file.clone() },
        ),
        (None, None) => bail!("give the query as an argument or with --file"),
    };
    let parsed = queryjson::parse_query(&text).with_context(|| format!("invalid query in {source}"))?;
    let join = Join {
        branch: branch_arg(args.branch.as_deref())?,
        as_of_tx: args.as_of.as_of_tx,
        as_of_time_ns: args.as_of.as_of_time_ns,
        valid_at_ns: args.valid_at_ns,
        include_expired: args.include_expired,
        limit: args.limit,
        max_rows_read: args.max_rows_read,
        explain: args.explain,
        consistency: consistency(args.stale),
        ..Join::new(namespace(&args.namespace)?, parsed)
    };
    let from = from_cursor(args.cursor.as_deref())?;
    let spinner = Ui::bars_only(json).spinner("querying");
    let resp = client
        .query_all(&join, &from, |n| {
            spinner.set_message(format!("querying: {}", plural(n, "row")));
        })
        .await;
    spinner.finish_and_clear();
    let resp = resp.context("query")?;
    if json {
        return print_json(&queryjson::rows_to_json(&resp));
    }
    if resp.rows.is_empty() {
        outln!("no rows (as of tx {})", resp.as_of_tx)?;
    } else {
        let header: Vec<&str> = resp.columns.iter().map(String::as_str).collect();
        let mut t = Table::new(&header);
        for row in &resp.rows {
            t.row(
                row.values
                    .iter()
                    .map(|v| crate::output::ellipsize(&txjson::pb_value_to_text(Some(v)), 60))
                    .collect(),
            );
        }
        out!("{}", t.render())?;
        outln!(
            "({}, as of tx {}, {} read)",
            plural(resp.rows.len(), "row"),
            resp.as_of_tx,
            plural(resp.rows_read as usize, "row")
        )?;
    }
    if !resp.plan.is_empty() {
        outln!("plan:")?;
        let mut t = Table::new(&[
            "STEP",
            "CLAUSE",
            "ACCESS",
            "USES",
            "BINDS",
            "FILTERS",
            "NOT",
            "ROWS READ",
            "ROWS OUT",
        ]);
        for (i, s) in resp.plan.iter().enumerate() {
            t.row(vec![
                (i + 1).to_string(),
                if s.or_clause {
                    format!("or {}", s.clause)
                } else {
                    s.clause.to_string()
                },
                s.access.clone(),
                s.uses.join(" "),
                s.binds.join(" "),
                s.filters
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
                s.negations
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
                s.rows_read.to_string(),
                s.rows_out.to_string(),
            ]);
        }
        out!("{}", t.render())?;
    }
    more_past_limit(&resp.next_cursor, "rows")
}
