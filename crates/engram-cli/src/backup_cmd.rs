//! `engram backup` (an online backup of a node, streamed into one file) and `engram restore`
//! (a new node's store from a backup). The file format and its checks are
//! `engram_core::backup`'s; the restored node's Raft records are `engram_raft::restore`'s.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use engram_client::Client;
use engram_core::backup::BackupFile;
use engram_raft::NodeInfo;
use engram_storage::Store;
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

/// `engram restore`: checks the backup, then writes it as a new store into a sibling of DIR
/// that is moved to DIR only once complete (a restore cut short leaves no store that looks
/// whole), with the key file copied in as DIR/node.key.
pub fn restore(args: RestoreArgs, json: bool) -> Result<()> {
    let ui = Ui::new(json);
    let dir = &args.data_dir;
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} is not empty: a restore writes a new store (restore into a new directory)",
                dir.display()
            );
        }
    }
    if args.node_id == Some(0) {
        bail!("--id: node ids start at 1");
    }
    let key = engram_server::node_key::load(&args.key_file).map_err(|e| anyhow!("--key-file: {e}"))?;
    let started = Instant::now();
    let pb = ui.spinner(format!("checking {}", args.backup.display()));
    let backup = BackupFile::open(&args.backup).with_context(|| format!("{}", args.backup.display()))?;
    pb.set_message(format!(
        "restoring {} into {}",
        args.backup.display(),
        dir.display()
    ));
    let mut staging = dir.as_os_str().to_owned();
    staging.push(".restoring");
    let staging = std::path::PathBuf::from(staging);
    let _ = std::fs::remove_dir_all(&staging);
    let cleanup = RemoveOnDrop(staging.clone());
    std::fs::create_dir_all(&staging).with_context(|| format!("cannot create {}", staging.display()))?;
    let restored = {
        let store: Arc<dyn Store> = Arc::new(
            engram_storage_rocks::RocksStore::open(&staging.join("db"))
                .map_err(|e| anyhow!("cannot create the store in {}: {e}", staging.display()))?,
        );
        let info = NodeInfo {
            addr: args.addr.clone(),
            public_key: key.public().0,
        };
        let restored = engram_raft::restore::restore(store.clone(), &backup, args.node_id, info)
            .with_context(|| format!("restoring {}", args.backup.display()))?;
        store.sync().context("syncing the restored store")?;
        restored
    };
    engram_server::node_key::persist(&staging.join("node.key"), &key, &[])
        .with_context(|| format!("cannot write {}", staging.join("node.key").display()))?;
    if dir.exists() {
        std::fs::remove_dir(dir).with_context(|| format!("cannot replace the empty {}", dir.display()))?;
    }
    std::fs::rename(&staging, dir)
        .with_context(|| format!("cannot move {} to {}", staging.display(), dir.display()))?;
    std::mem::forget(cleanup);
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

/// Removes a directory (a restore's staging copy) unless forgotten.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
