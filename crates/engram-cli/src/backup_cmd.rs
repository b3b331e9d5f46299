//! `engram backup` (an online backup of a node, streamed into one file) and `engram restore`
//! (a new node's store from a backup). The file format and its checks are
//! `engram_core::backup`'s; the restored data directory is `engram_server::restore_dir`'s.

use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use engram_client::Client;
use engram_core::backup::BackupFile;
use engram_server::restore_dir;
use serde_json::json;

use crate::cli::{BackupArgs, RestoreArgs};
use crate::output::{outln, print_json};
use crate::staged::{Staged, mib};
use crate::ui::Ui;

/// `engram backup --out FILE`: streams the first endpoint's backup to FILE.partial, opens it
/// (sizes and checksum), and only then moves it to FILE.
pub async fn backup(client: &Client, args: BackupArgs, json: bool) -> Result<()> {
    let ui = Ui::new(json);
    let started = Instant::now();
    let (staged, mut writer) = Staged::create(&args.out)?;
    let pb = ui.spinner("receiving the backup");
    let stream = client.backup().await.context("backup")?;
    let bytes = crate::staged::receive(stream, &mut writer, &pb, "the backup").await?;
    let file = staged.commit_checked(writer, |partial| {
        BackupFile::open(partial).map_err(|e| anyhow!("the backup received is not whole: {e}"))
    })?;
    let secs = started.elapsed().as_secs_f64();
    ui.done(&pb, format!("{:.1} MiB received", mib(bytes)));
    let cp = &file.checkpoint.checkpoint;
    if json {
        print_json(&json!({
            "ok": true,
            "out": args.out.display().to_string(),
            "bytes": file.bytes,
            "node_id": file.node_id,
            "chain_index": cp.size,
            "origin": cp.origin,
            "tx_time_ns": cp.tx_time_ns,
            "seconds": secs,
            "mib_per_second": mib(bytes) / secs.max(1e-9),
        }))?;
    } else {
        outln!(
            "wrote {} ({:.1} MiB in {:.1} s, {:.1} MiB/s): node {}'s state through audit entry {}, checkpoint signed",
            args.out.display(),
            mib(bytes),
            secs,
            mib(bytes) / secs.max(1e-9),
            file.node_id,
            cp.size
        )?;
    }
    Ok(())
}

/// `engram restore`: checks the backup, then builds DIR from it
/// (`engram_server::restore_dir`: staged in DIR, moved into place once whole, DIR itself never
/// replaced, so it may be a volume's mount point), with the key file copied in as DIR/node.key.
pub fn restore(args: RestoreArgs, json: bool) -> Result<()> {
    let ui = Ui::new(json);
    let dir = &args.data_dir;
    if args.node_id == Some(0) {
        bail!("--id: node ids start at 1");
    }
    let key = engram_server::node_key::load(&args.key_file).map_err(|e| anyhow!("--key-file: {e}"))?;
    // Before the backup is read: a directory in use is refused at once.
    restore_dir::check_restorable(dir, &key)?;
    let started = Instant::now();
    let pb = ui.spinner(format!("checking {}", args.backup.display()));
    let backup = BackupFile::open(&args.backup).with_context(|| format!("{}", args.backup.display()))?;
    pb.set_message(format!(
        "restoring {} into {}",
        args.backup.display(),
        dir.display()
    ));
    let restored = restore_dir::restore_into(dir, &backup, &key, args.node_id, &args.addr)
        .with_context(|| format!("restoring {}", args.backup.display()))?;
    let secs = started.elapsed().as_secs_f64();
    ui.done(
        &pb,
        format!("restored {:.1} MiB in {:.1} s", mib(backup.bytes), secs),
    );
    let head = &restored.verified.head;
    let serve = format!(
        "engram serve --id {} --listen {} --data-dir {}",
        restored.node_id,
        args.addr,
        dir.display()
    );
    if json {
        print_json(&json!({
            "ok": true,
            "data_dir": dir.display().to_string(),
            "node_id": restored.node_id,
            "addr": args.addr,
            "chain_index": head.index,
            "applied_index": restored.applied_index,
            "origin": restored.verified.origin,
            "bytes": backup.bytes,
            "seconds": secs,
            "serve": serve,
        }))?;
    } else {
        outln!(
            "restored node {} into {}: audit chain of {} entries verified (log index {}), a one-node cluster at {}",
            restored.node_id,
            dir.display(),
            head.index,
            restored.applied_index,
            args.addr
        )?;
        outln!("start it:  {serve}")?;
        outln!(
            "then add nodes:  engram serve --id N --listen HOST:PORT --data-dir DIR --join --peer {}={}",
            restored.node_id,
            args.addr
        )?;
    }
    Ok(())
}
