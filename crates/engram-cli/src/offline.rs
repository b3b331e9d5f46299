//! `audit export` and offline `audit verify`: an export file, or a stopped node's store (opened
//! read-only: a verifier must not change what it judges) read through the core's export writer and piped into the same verifier, so a data directory is
//! judged exactly as its export would be; a data directory is then scrubbed whole
//! (`engram_core::scrub`): every row of every space read with checksums verified, every index
//! row checked against its datom and every datom against its index rows and its entry.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use engram_audit::{PublicKey, SignedCheckpoint};
use engram_client::Client;
use engram_core::scrub::{FindingKind, ScrubReport};
use engram_storage::Store;
use engram_verify::{Report, VerifyError, VerifyOptions, verify_export};
use serde_json::json;

use crate::cli::VerifyArgs;
use crate::common::{Reported, Tampered};
use crate::output::print_json;
use crate::output::{outln, plural};
use crate::staged::Staged;
use crate::ui::Ui;

/// The input of an offline verification could not be read at all: exit code 3.
#[derive(Debug)]
pub struct Unreadable(pub String);

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unreadable {}

/// Like [`Unreadable`] (exit code 3), raised after the full result was printed, so no further
/// JSON document follows.
#[derive(Debug)]
pub struct UnreadableReported(pub String);

impl fmt::Display for UnreadableReported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnreadableReported {}

/// Opens a stopped node's store for reading only: an offline command judges the directory and
/// must not change it (no flush of the write-ahead log, no compaction, no new MANIFEST), and
/// rows the node left only in its write-ahead log are read like the rest. A directory whose
/// `LOCK` a running node holds is refused: stop the node first.
fn open_store(data_dir: &Path) -> Result<Arc<dyn Store>, Unreadable> {
    let db = data_dir.join("db");
    if !db.join("CURRENT").is_file() {
        return Err(Unreadable(format!(
            "{} holds no Engram store (expected {})",
            data_dir.display(),
            db.display()
        )));
    }
    let store = engram_storage_rocks::RocksStore::open_read_only(&db)
        .map(|s| Arc::new(s) as Arc<dyn Store>)
        .map_err(|e| match &e {
            // Opening reads every table's footer, index and properties: a damaged one shows
            // here, and it is not a lock held by a running node.
            engram_storage::StorageError::Corruption { reason, file, .. } => Unreadable(format!(
                "{}: unreadable: the store does not open: {reason}{}",
                data_dir.display(),
                file.as_deref()
                    .map(|f| format!(" (file {f})"))
                    .unwrap_or_default()
            )),
            engram_storage::StorageError::Engine(_) => Unreadable(format!(
                "cannot open the store in {} (is the node still running? stop it first): {e}",
                data_dir.display()
            )),
        })?;
    // A newer build's store is not judged by rules that do not know its rows.
    engram_core::store_format::check(store.as_ref())
        .map_err(|e| Unreadable(format!("{}: {e}", data_dir.display())))?;
    Ok(store)
}

/// The node id a data directory belongs to, from its key file and the chain's key history
/// (0 when it cannot be told).
fn node_id_of(data_dir: &Path, store: &dyn Store) -> u64 {
    let Ok(seed) = std::fs::read(data_dir.join("node.key")) else {
        return 0;
    };
    let seed = match seed.len() {
        32 => <[u8; 32]>::try_from(seed.as_slice()).ok(),
        _ => hex::decode(String::from_utf8_lossy(&seed).trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok()),
    };
    let Some(seed) = seed else { return 0 };
    let key = engram_audit::NodeKey::from_seed(seed);
    engram_core::reads::signer(store, key.key_id())
        .ok()
        .flatten()
        .map_or(0, |row| row.node_id)
}

/// `audit export --out FILE [--data-dir DIR]`.
pub async fn export(client: Option<&Client>, data_dir: Option<&Path>, out: &Path, json: bool) -> Result<()> {
    let ui = Ui::new(json);
    let (staged, mut writer) = Staged::create(out)?;
    let (entries, bytes) = match data_dir {
        Some(dir) => {
            let store = open_store(dir)?;
            let head = engram_core::reads::head(&*store).context("reading the chain head")?;
            let pb = ui.bar(
                head.index,
                "{spinner:.cyan} {msg} [{bar:40}] {pos}/{len} entries {per_sec:.dim}",
                format!("exporting the audit chain of {}", dir.display()),
            );
            let node_id = node_id_of(dir, &*store);
            let summary = engram_core::export::write_export(&*store, &mut writer, node_id, |done, _| {
                pb.set_position(done);
            })
            .context("export")?;
            ui.done(&pb, format!("{} entries exported", summary.entries));
            (Some(summary.entries), summary.bytes)
        }
        None => {
            let client = client.ok_or_else(|| anyhow!("no endpoint to export from"))?;
            let pb = ui.spinner("receiving the audit export");
            let stream = client.export().await.context("audit export")?;
            let bytes = crate::staged::receive(stream, &mut writer, &pb, "the audit export").await?;
            ui.done(&pb, format!("{} KiB received", bytes / 1024));
            (None, bytes)
        }
    };
    staged.commit(writer)?;
    if json {
        print_json(
            &json!({ "ok": true, "out": out.display().to_string(), "bytes": bytes, "entries": entries }),
        )?;
    } else {
        outln!("wrote {} ({} bytes)", out.display(), bytes)?;
    }
    Ok(())
}

fn options(args: &VerifyArgs) -> Result<VerifyOptions> {
    let genesis_keys = if args.genesis_keys.is_empty() {
        None
    } else {
        let mut keys = Vec::new();
        for raw in &args.genesis_keys {
            let bytes =
                hex::decode(raw.trim()).map_err(|e| anyhow!("--genesis-key {raw:?}: not hex: {e}"))?;
            let key = <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
                anyhow!(
                    "--genesis-key {raw:?}: {} bytes, a public key has 32",
                    bytes.len()
                )
            })?;
            keys.push(PublicKey(key));
        }
        Some(keys)
    };
    let pin = match &args.pin {
        None => None,
        Some(path) => {
            let text =
                std::fs::read(path).map_err(|e| Unreadable(format!("--pin {}: {e}", path.display())))?;
            Some(
                SignedCheckpoint::parse_bytes(&text)
                    .map_err(|e| Unreadable(format!("--pin {}: not a checkpoint: {e}", path.display())))?,
            )
        }
    };
    Ok(VerifyOptions {
        all: args.all,
        genesis_keys,
        pin,
    })
}

/// `audit verify FILE` or `audit verify --data-dir DIR`.
pub fn verify(args: &VerifyArgs, json: bool) -> Result<()> {
    let options = options(args)?;
    let ui = Ui::bars_only(json);
    let (label, result) = if let Some(path) = &args.file {
        let file = File::open(path).map_err(|e| Unreadable(format!("{}: {e}", path.display())))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let pb = ui.bar(
            len,
            "{spinner:.cyan} {msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec:.dim}",
            format!("verifying {}", path.display()),
        );
        let result = verify_export(BufReader::with_capacity(1 << 20, file), &options, |bytes, _| {
            pb.set_position(bytes);
        });
        pb.finish_and_clear();
        (path.display().to_string(), result)
    } else if let Some(dir) = &args.data_dir {
        return verify_data_dir(dir, &options, ui, json);
    } else if let Some(path) = &args.backup {
        return verify_backup(path, &options, ui, json);
    } else {
        return Err(anyhow!("verify offline needs FILE or --data-dir"));
    };
    let report = match result {
        Ok(report) => report,
        Err(VerifyError::Open(e)) => return Err(Unreadable(format!("{label}: {e}")).into()),
        Err(VerifyError::Io(e)) => return Err(Unreadable(format!("{label}: {e}")).into()),
    };
    let printed = print_report(&label, &report, json);
    // The verdict outranks a closed stdout: a chain that does not verify exits 2 even when
    // the reader stopped reading the report.
    if let Some(first) = report.failures.first() {
        return Err(Tampered(format!("{label}: {first}")).into());
    }
    printed
}

/// `audit verify --data-dir DIR`: the chain, through the export pipe, then the scrub. The
/// store's own damage (a block that fails its checksum) is reported as unreadable, exit 3,
/// even when it also made the chain look tampered: that is the cause, the rest its effect.
///
/// The first line of the text output is the verdict, and `--json` always carries `verdict`,
/// also when the store cannot be read at all: a reader of the first line (or of `verdict`)
/// never takes a damaged store for a verified one.
fn verify_data_dir(dir: &Path, options: &VerifyOptions, ui: Ui, json: bool) -> Result<()> {
    let label = dir.display().to_string();
    report_unreadable(&label, judge_data_dir(dir, &label, options, ui, json, None), json)
}

/// Prints the verdict "unreadable" for an error that says so (see [`verify_data_dir`]).
fn report_unreadable(label: &str, result: Result<()>, json: bool) -> Result<()> {
    let Err(err) = result else {
        return Ok(());
    };
    let Some(Unreadable(message)) = err.downcast_ref::<Unreadable>() else {
        return Err(err);
    };
    if json {
        print_json(&json!({
            "ok": false,
            "verdict": "unreadable",
            "input": label,
            "error": { "message": message, "tampered": false },
        }))?;
    } else {
        outln!("FAILED (unreadable): {message}")?;
    }
    Err(UnreadableReported(message.clone()).into())
}

/// `audit verify --backup FILE`: the file's sizes and checksum, its state's structure and audit
/// chain and the checkpoint against that chain (`BackupFile::verify`), then the state written
/// into a temporary store and judged as `--data-dir` judges a stopped node's: every entry's
/// datoms, the Merkle roots against every checkpoint, every row scrubbed. Damage anywhere in the
/// file is "tampered" (exit 2): the checksum cannot tell an accident from an alteration.
fn verify_backup(path: &Path, options: &VerifyOptions, ui: Ui, json: bool) -> Result<()> {
    use engram_core::backup::{BackupError, BackupFile};
    let label = path.display().to_string();
    let refused = |e: BackupError| -> anyhow::Error {
        match e {
            BackupError::NotABackup
            | BackupError::Newer(_)
            | BackupError::StoreFormat(_)
            | BackupError::Io(_) => Unreadable(format!("{label}: {e}")).into(),
            BackupError::Damaged(_)
            | BackupError::Checksum
            | BackupError::Snapshot(_)
            | BackupError::Checkpoint(_) => Tampered(format!("{label}: {e}")).into(),
        }
    };
    let pb = ui.spinner(format!("checking {label}"));
    let checked = (|| {
        let backup = BackupFile::open(path).map_err(refused)?;
        pb.set_message(format!("checking the state and checkpoint of {label}"));
        let verified = backup.verify(&mut |_, _| {}).map_err(refused)?;
        pb.set_message(format!("copying the state of {label} into a temporary store"));
        let copy = tempfile::Builder::new()
            .prefix("engram-verify-backup-")
            .tempdir()
            .map_err(|e| {
                Unreadable(format!(
                    "creating a temporary directory for the backup's state: {e}"
                ))
            })?;
        let store = engram_storage_rocks::RocksStore::open(&copy.path().join("db"))
            .map_err(|e| Unreadable(format!("creating a temporary store: {e}")))?;
        let mut installer = engram_core::snapshot::Installer::new(&store, backup.snapshot_bytes, 1 << 20)
            .map_err(|e| refused(e.into()))?;
        backup
            .for_each_snapshot_piece(&mut |piece| Ok(installer.push(piece)?))
            .map_err(refused)?;
        installer
            .finish(engram_storage::WriteBatch::new())
            .map_err(|e| refused(e.into()))?;
        Ok::<_, anyhow::Error>((backup, verified, copy))
    })();
    pb.finish_and_clear();
    let (backup, verified, copy) = match checked {
        Ok(checked) => checked,
        Err(e) => {
            let tampered = e.downcast_ref::<Tampered>().is_some();
            let verdict = if tampered { "tampered" } else { "unreadable" };
            if json {
                print_json(&json!({
                    "ok": false,
                    "verdict": verdict,
                    "input": label,
                    "error": { "message": e.to_string(), "tampered": tampered },
                }))?;
            } else {
                outln!("FAILED ({verdict}): {e}")?;
            }
            return Err(if tampered {
                Tampered(e.to_string()).into()
            } else {
                UnreadableReported(e.to_string()).into()
            });
        }
    };
    let signers: Vec<String> = verified
        .signed_by
        .iter()
        .map(|key| {
            let node = verified
                .active_keys
                .iter()
                .find(|(_, k)| k == key)
                .map_or(0, |(n, _)| *n);
            format!("{} (node {node})", key.key_id())
        })
        .collect();
    let summary = (
        json!({
            "node_id": backup.node_id,
            "bytes": backup.bytes,
            "chain_index": verified.head.index,
            "origin": verified.origin,
            "checkpoint_signed_by": signers,
        }),
        format!(
            "  backup       made by node {}, {} bytes: its checkpoint covers all {} entries and is signed by {}",
            backup.node_id,
            backup.bytes,
            verified.head.index,
            signers.join(", ")
        ),
    );
    report_unreadable(
        &label,
        judge_data_dir(copy.path(), &label, options, ui, json, Some(summary)),
        json,
    )
}

/// Judges a data directory; `backup` adds what a backup's own checks found (a JSON field and a
/// line under the verdict).
fn judge_data_dir(
    dir: &Path,
    label: &str,
    options: &VerifyOptions,
    ui: Ui,
    json: bool,
    backup: Option<(serde_json::Value, String)>,
) -> Result<()> {
    let label = label.to_string();
    let store = open_store(dir)?;
    let head = engram_core::reads::head(&*store).map_err(|e| {
        let file = match &e {
            engram_core::CoreError::Storage(s) => s.file().map(|f| format!(" (file {f})")),
            _ => None,
        };
        Unreadable(format!(
            "{label}: unreadable: the chain head does not read: {e}{}",
            file.unwrap_or_default()
        ))
    })?;
    let node_id = node_id_of(dir, &*store);
    // Entries after the node's last attested one (it stopped between a group's entries and
    // their attestation) are not in the export; the node attests them when it starts. They
    // are reported, not judged: the scrub still reads them and checks their datoms.
    let attested = engram_core::reads::attested_index(&*store).unwrap_or(head.index);
    let unattested = (attested < head.index).then(|| (attested + 1, head.index));
    let pb = ui.bar(
        head.index,
        "{spinner:.cyan} {msg} [{bar:40}] {pos}/{len} entries {per_sec:.dim}",
        format!("verifying the chain in {label}"),
    );
    // The export writer feeds the verifier through a pipe: the store is judged exactly as
    // its export would be, in bounded memory.
    let (reader, writer) = std::io::pipe().context("creating a pipe")?;
    let writer_store = store.clone();
    let producer = std::thread::spawn(move || {
        let mut writer = BufWriter::with_capacity(1 << 20, writer);
        engram_core::export::write_export(&*writer_store, &mut writer, node_id, |_, _| {})?;
        writer.flush()?;
        Ok::<(), engram_core::export::ExportError>(())
    });
    let result = verify_export(
        BufReader::with_capacity(1 << 20, reader),
        options,
        |_, entries| {
            pb.set_position(entries);
        },
    );
    pb.finish_and_clear();
    let exported = producer
        .join()
        .map_err(|_| anyhow!("the export thread panicked"))?;
    let report = match result {
        Ok(report) => report,
        Err(VerifyError::Open(e)) => return Err(Unreadable(format!("{label}: {e}")).into()),
        Err(VerifyError::Io(e)) => return Err(Unreadable(format!("{label}: {e}")).into()),
    };

    let pb = ui.spinner(format!("scrubbing every row of {label}"));
    let mut scrub = engram_core::scrub::scrub(&*store, &mut |space, rows| {
        pb.set_message(format!("scrubbing {label}: {} space, {rows} rows", space.name()));
    })
    .map_err(|e| Unreadable(format!("{label}: scrubbing the store: {e}")))?;
    pb.finish_and_clear();
    match exported {
        Ok(()) => {}
        // A damaged block the export met is the store's damage, whatever the verifier made of
        // the stream it cut short; the scrub normally names the same block, but never lose it.
        Err(engram_core::export::ExportError::Core(engram_core::CoreError::Storage(e)))
            if e.is_corruption() =>
        {
            if scrub.first_unreadable().is_none()
                && let engram_storage::StorageError::Corruption {
                    space,
                    key,
                    reason,
                    file,
                } = e
            {
                scrub.findings.insert(
                    0,
                    engram_core::scrub::Finding {
                        kind: FindingKind::Unreadable,
                        space,
                        key,
                        what: reason,
                        file,
                    },
                );
            }
        }
        // The verifier stops reading at its first failure, which breaks the pipe: only an
        // error before that is the store's.
        Err(e) if report.ok() => {
            return Err(Unreadable(format!("reading the store in {label}: {e}")).into());
        }
        Err(_) => {}
    }

    let verdict = Verdict::of(&report, &scrub);
    if json {
        let mut doc = serde_json::to_value(&report).unwrap_or_else(|e| json!({ "error": e.to_string() }));
        if let Some(map) = doc.as_object_mut() {
            map.insert("ok".into(), json!(verdict == Verdict::Verified));
            map.insert("input".into(), json!(label));
            map.insert("chain_ok".into(), json!(report.ok()));
            map.insert(
                "unattested".into(),
                match unattested {
                    Some((from, to)) => json!({ "from": from, "to": to }),
                    None => serde_json::Value::Null,
                },
            );
            map.insert(
                "scrub".into(),
                serde_json::to_value(&scrub).unwrap_or_else(|e| json!({ "error": e.to_string() })),
            );
            map.insert("verdict".into(), json!(verdict.name()));
            if let Some((fields, _)) = &backup {
                map.insert("backup".into(), fields.clone());
            }
        }
        print_json(&doc)?;
    } else {
        outln!("{}", verdict_line(&label, verdict, &report, &scrub))?;
        if let Some((_, line)) = &backup {
            outln!("{line}")?;
        }
        print_chain(&report)?;
        if let Some((from, to)) = unattested {
            outln!(
                "  unattested   entries {from}..={to}: applied, not yet attested by this node (it stopped before signing its last group; it attests them when it starts); the chain above ends at {attested}, the scrub read them"
            )?;
        }
        print_scrub(&scrub)?;
    }
    if let Some(first) = scrub.first_unreadable() {
        return Err(UnreadableReported(format!("{label}: {first}")).into());
    }
    if let Some(first) = report.failures.first() {
        return Err(Tampered(format!("{label}: {first}")).into());
    }
    if let Some(first) = scrub.findings.first() {
        return Err(Tampered(format!("{label}: {first}")).into());
    }
    Ok(())
}

/// What an offline verification of a data directory concludes; its exit code follows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verdict {
    Verified,
    /// The chain does not verify, or rows disagree with the rows they must agree with: exit 2.
    Tampered,
    /// A block of the store fails its checksum: exit 3, even when the chain looks tampered too,
    /// since the damage is the cause.
    Unreadable,
}

impl Verdict {
    fn of(report: &Report, scrub: &ScrubReport) -> Verdict {
        if scrub.first_unreadable().is_some() {
            Verdict::Unreadable
        } else if !report.ok() || !scrub.ok() {
            Verdict::Tampered
        } else {
            Verdict::Verified
        }
    }

    fn name(self) -> &'static str {
        match self {
            Verdict::Verified => "verified",
            Verdict::Tampered => "tampered",
            Verdict::Unreadable => "unreadable",
        }
    }
}

/// The first line of a data directory's text report: the verdict and its first reason.
fn verdict_line(label: &str, verdict: Verdict, report: &Report, scrub: &ScrubReport) -> String {
    match verdict {
        Verdict::Verified => format!(
            "verified: {label}: {} entries ({} transactions, {} datoms), {} checkpoints{}; store scrub clean",
            report.entries,
            report.transactions,
            report.datoms,
            report.checkpoints,
            state_roots(report)
        ),
        Verdict::Unreadable => {
            let damage = scrub.first_unreadable().map_or_else(String::new, |f| {
                let file = f.file.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p));
                match file {
                    Some(name) => format!(" in {name}: {f}"),
                    None => format!(": {f}"),
                }
            });
            format!("FAILED (unreadable): {label}: store scrub found damage{damage}")
        }
        Verdict::Tampered => match (report.failures.first(), scrub.findings.first()) {
            (Some(failure), _) => {
                format!("FAILED (tampered): {label}: the audit chain does not verify: {failure}")
            }
            (None, Some(finding)) => format!("FAILED (tampered): {label}: store scrub found {finding}"),
            (None, None) => format!("FAILED (tampered): {label}"),
        },
    }
}

/// The chain half of a data directory's text report, under the verdict line.
/// What a chain that verified holds, as both reports print it.
fn verified_counts(report: &Report) -> String {
    format!(
        "verified {} entries ({} transactions, {} datoms), {} checkpoints{}",
        report.entries,
        report.transactions,
        report.datoms,
        report.checkpoints,
        state_roots(report)
    )
}

/// How many recorded state roots the verifier rebuilt from the datoms (I13), when any was.
fn state_roots(report: &Report) -> String {
    match report.state_roots {
        0 => String::new(),
        n => format!(", {n} state roots rebuilt from the datoms"),
    }
}

fn print_chain(report: &Report) -> Result<()> {
    if report.ok() {
        outln!("  audit chain  {}", verified_counts(report))?;
    } else {
        outln!(
            "  audit chain  DOES NOT VERIFY (checked before stopping: {} entries, {} checkpoints)",
            report.entries,
            report.checkpoints
        )?;
        for f in &report.failures {
            outln!("    {f}")?;
        }
        if report.stopped_early {
            outln!("    (stopped at the first failure; --all lists every one)")?;
        }
    }
    print_details(report)
}

fn print_scrub(scrub: &ScrubReport) -> Result<()> {
    let [log, raft, state, access] = scrub.rows;
    let read = format!(
        "{} rows read (log {log}, raft {raft}, state {state}, access log {access}); {} datoms, {} index rows, {} transactions cross-checked",
        log + raft + state + access,
        scrub.datoms,
        scrub.index_rows,
        scrub.transactions
    );
    if scrub.ok() {
        outln!("  store scrub  clean: {read}")?;
        return Ok(());
    }
    outln!("  store scrub  FAILED: {read}")?;
    for f in &scrub.findings {
        outln!("    {f}")?;
    }
    if scrub.more_findings > 0 {
        outln!("    … and {} more", scrub.more_findings)?;
    }
    Ok(())
}

fn print_report(label: &str, report: &Report, json: bool) -> Result<()> {
    if json {
        let mut doc = serde_json::to_value(report).unwrap_or_else(|e| json!({ "error": e.to_string() }));
        if let Some(map) = doc.as_object_mut() {
            map.insert("ok".into(), json!(report.ok()));
            map.insert("input".into(), json!(label));
        }
        return print_json(&doc);
    }
    if report.ok() {
        outln!("{label}: {}", verified_counts(report))?;
    } else {
        outln!("{label}: DOES NOT VERIFY")?;
        for f in &report.failures {
            outln!("  {f}")?;
        }
        if report.stopped_early {
            outln!("  (stopped at the first failure; --all lists every one)")?;
        }
        outln!(
            "checked before stopping: {} entries, {} checkpoints",
            report.entries,
            report.checkpoints
        )?;
    }
    print_details(report)
}

/// The lines of a chain report after its verdict: head, root, signers, keys.
fn print_details(report: &Report) -> Result<()> {
    outln!(
        "  head         {} {}",
        report.head_index,
        report.head_hash.as_deref().unwrap_or("(empty)")
    )?;
    outln!("  merkle root  {}", report.tree_root)?;
    if !report.signed_by_agent.is_empty() {
        let agents: Vec<String> = report
            .signed_by_agent
            .iter()
            .map(|(agent, n)| format!("{agent} {n}"))
            .collect();
        outln!("  signed by    {} (transactions per agent)", agents.join(", "))?;
    }
    if !report.redacted.is_empty() {
        // A long list is cut: --json has every one.
        const SHOWN: usize = 20;
        outln!(
            "  redacted     {} (values gone; each kept hash checked against its entry and its redaction)",
            plural(report.redacted.len(), "datom")
        )?;
        for r in report.redacted.iter().take(SHOWN) {
            let guessable = if r.guessable {
                " (hash kept, guessable)"
            } else {
                " (salted commitment kept)"
            };
            outln!(
                "    entry {} datom {} redacted by entry {}{guessable}",
                r.entry,
                r.seq,
                r.by_entry
            )?;
        }
        if report.redacted.len() > SHOWN {
            outln!(
                "    ... {} more (--json lists every one)",
                report.redacted.len() - SHOWN
            )?;
        }
    }
    if let Some(origin) = &report.origin {
        outln!("  origin       {origin}")?;
    }
    if let Some(size) = report.pinned_size {
        outln!("  pinned       checkpoint of {size} entries")?;
    }
    outln!("  anchored on  {}", report.anchor)?;
    for k in &report.keys {
        let mut history = format!("admitted at {}", k.admitted_at);
        if let Some(at) = k.retired_at {
            history.push_str(&format!(", rotated out at {at}"));
        }
        if let Some(at) = k.revoked_at {
            history.push_str(&format!(", REVOKED at {at}"));
        }
        outln!("  key          {} (node {}): {history}", k.key_id, k.node_id)?;
    }
    Ok(())
}

/// Turns an offline failure into its exit code, if it is one (3 for unreadable input).
pub fn exit_code(err: &anyhow::Error) -> Option<u8> {
    err.chain()
        .any(|e| e.is::<Unreadable>() || e.is::<UnreadableReported>())
        .then_some(3)
}

/// Whether `err` was already reported in full.
pub fn is_reported(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|e| e.is::<Reported>() || e.is::<UnreadableReported>())
}
