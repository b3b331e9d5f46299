//! `engram retention`: set, end and list retention policies (`docs/FORGETTING.md`,
//! "Retention"); `engram session`: open, renew, end and list sessions on volatile namespaces
//! ("Volatile namespaces"). The leader applies both (`engram_server`'s retention driver).

use anyhow::{Context, Result};
use engram_client::Client;
use engram_types::RetentionRule;
use serde_json::json;

use crate::cli::{RetentionCommand, RetentionTarget, SessionCommand};
use crate::output::{Table, out, outln, print_json};

pub async fn retention(client: &Client, cmd: RetentionCommand, json: bool) -> Result<()> {
    let (target, rule) = match cmd {
        RetentionCommand::List => return list(client, json).await,
        RetentionCommand::Set(args) => match (args.keep, args.keep_versions) {
            (_, Some(n)) => (args.target, RetentionRule::KeepVersions(n)),
            // clap requires one of the two.
            (keep, None) => (args.target, RetentionRule::KeepMs(keep.unwrap_or_default())),
        },
        RetentionCommand::Off(args) if args.versions => (args.target, RetentionRule::KeepVersions(0)),
        RetentionCommand::Off(args) => (args.target, RetentionRule::KeepMs(0)),
    };
    let RetentionTarget { namespace, attribute } = target;
    let attribute = attribute.unwrap_or_default();
    let answer = match rule {
        RetentionRule::KeepMs(keep_ms) => client.set_retention(&namespace, &attribute, keep_ms).await,
        RetentionRule::KeepVersions(n) => client.set_retention_versions(&namespace, &attribute, n).await,
        RetentionRule::SessionEnded => anyhow::bail!("a session is ended with `engram session end`"),
    }
    .context("retention")?;
    let what = match attribute.is_empty() {
        true => namespace.clone(),
        false => format!("{namespace} {attribute}"),
    };
    if json {
        return print_json(&json!({
            "namespace": namespace,
            "attribute": attribute,
            "keep_ms": rule.keep_ms().unwrap_or(0),
            "keep_versions": rule.keep_versions().unwrap_or(0),
            "tx": answer.tx,
            "audit_index": answer.audit_index,
        }));
    }
    match rule {
        RetentionRule::KeepMs(0) => outln!("{what}: retention ended (tx {})", answer.tx)?,
        RetentionRule::KeepVersions(0) => outln!("{what}: versions policy ended (tx {})", answer.tx)?,
        RetentionRule::KeepMs(ms) => outln!(
            "{what}: kept {}, then redacted by the leader (tx {})",
            human_ms(ms),
            answer.tx
        )?,
        RetentionRule::KeepVersions(n) => outln!(
            "{what}: the last {n} versions of each slot and its live claims kept, older datoms redacted by the leader (tx {})",
            answer.tx
        )?,
        RetentionRule::SessionEnded => {}
    }
    Ok(())
}

pub async fn session(client: &Client, cmd: SessionCommand, json: bool) -> Result<()> {
    let (namespace, ttl_ms, verb) = match cmd {
        SessionCommand::List => return list_sessions(client, json).await,
        SessionCommand::Open(args) => (args.namespace, args.ttl, "open"),
        SessionCommand::Renew(args) => (args.namespace, args.ttl, "renew"),
        SessionCommand::End(args) => (args.namespace, 0, "end"),
    };
    let answer = match verb {
        "open" => client.open_session(&namespace, ttl_ms).await,
        "renew" => client.renew_session(&namespace, ttl_ms).await,
        _ => client.end_session(&namespace).await,
    }
    .with_context(|| format!("session {verb}"))?;
    if json {
        return print_json(&json!({
            "namespace": namespace,
            "ttl_ms": ttl_ms,
            "tx": answer.tx,
            "audit_index": answer.audit_index,
        }));
    }
    match ttl_ms {
        0 => outln!(
            "{namespace}: session ended (tx {}); the leader forgets what was written there before it",
            answer.tx
        )?,
        ttl_ms => outln!(
            "{namespace}: session {} (tx {}); it lapses {} from now unless renewed, and then what was written there is forgotten",
            if verb == "open" { "opened" } else { "renewed" },
            answer.tx,
            human_ms(ttl_ms)
        )?,
    }
    Ok(())
}

async fn list_sessions(client: &Client, json: bool) -> Result<()> {
    let answer = client.list_sessions().await.context("session list")?;
    if json {
        let open: Vec<_> = answer
            .sessions
            .iter()
            .map(|s| {
                json!({
                    "namespace": s.namespace,
                    "ttl_ms": s.ttl_ms,
                    "deadline_ns": s.deadline_ns,
                    "since_tx": s.since_tx,
                    "renewed_tx": s.renewed_tx,
                })
            })
            .collect();
        let ended: Vec<_> = answer
            .ended
            .iter()
            .map(|s| json!({ "namespace": s.namespace, "ended_tx": s.ended_tx, "lapsed": s.lapsed }))
            .collect();
        return print_json(&json!({ "sessions": open, "ended": ended, "applied_tx": answer.applied_tx }));
    }
    if answer.sessions.is_empty() && answer.ended.is_empty() {
        outln!("no session: no namespace is volatile")?;
        return Ok(());
    }
    let mut t = Table::new(&["NAMESPACE", "STATE", "TTL", "DEADLINE (ns)", "TX"]);
    for s in &answer.sessions {
        t.row(vec![
            s.namespace.clone(),
            "open".into(),
            human_ms(s.ttl_ms),
            s.deadline_ns.to_string(),
            s.renewed_tx.to_string(),
        ]);
    }
    for s in &answer.ended {
        t.row(vec![
            s.namespace.clone(),
            if s.lapsed { "lapsed" } else { "ended" }.into(),
            "-".into(),
            "-".into(),
            s.ended_tx.to_string(),
        ]);
    }
    out!("{}", t.render())?;
    Ok(())
}

async fn list(client: &Client, json: bool) -> Result<()> {
    let answer = client.list_retention().await.context("retention list")?;
    if json {
        let policies: Vec<_> = answer
            .policies
            .iter()
            .map(|p| {
                json!({
                    "namespace": p.namespace,
                    "attribute": p.attribute,
                    "keep_ms": p.keep_ms,
                    "keep_versions": p.keep_versions,
                    "since_tx": p.since_tx,
                })
            })
            .collect();
        return print_json(&json!({ "policies": policies, "applied_tx": answer.applied_tx }));
    }
    if answer.policies.is_empty() {
        outln!("no retention policy: everything is kept")?;
        return Ok(());
    }
    let mut t = Table::new(&["NAMESPACE", "ATTRIBUTE", "KEEP", "SINCE TX"]);
    for p in &answer.policies {
        t.row(vec![
            p.namespace.clone(),
            if p.attribute.is_empty() {
                "*".into()
            } else {
                p.attribute.clone()
            },
            match p.keep_versions {
                0 => human_ms(p.keep_ms),
                n => format!("{n} versions"),
            },
            p.since_tx.to_string(),
        ]);
    }
    out!("{}", t.render())?;
    Ok(())
}

/// `keep_ms` in the largest unit that divides it exactly (30d, 12h, 1500ms).
fn human_ms(ms: u64) -> String {
    for (unit, per) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_keep_ms;

    #[test]
    fn durations_parse_and_print_back() {
        for (raw, ms) in [
            ("30d", 2_592_000_000),
            ("12h", 43_200_000),
            ("90m", 5_400_000),
            ("45s", 45_000),
            ("1500ms", 1_500),
        ] {
            assert_eq!(parse_keep_ms(raw), Ok(ms), "{raw}");
        }
        assert_eq!(human_ms(2_592_000_000), "30d");
        assert_eq!(human_ms(5_400_000), "90m");
        assert_eq!(human_ms(1_500), "1500ms");
        for bad in ["30", "d", "0d", "5y", "-3d", "99999999999999999999d"] {
            assert!(parse_keep_ms(bad).is_err(), "{bad}");
        }
    }
}
