//! Backup and restore against real clusters: a backup taken while a writer keeps writing holds
//! exactly the writes its checkpoint covers, verifies offline, and is refused whole when any
//! part of it is damaged or cut short; a restore builds a new 3-node cluster from it (one node
//! restored with a backed-up member's key, two joining with keys of their own) that serves every
//! write the backup covered, takes new writes, and whose chains verify on every node.
#![allow(clippy::unwrap_used)] // test set-up: a failed step should stop the test loudly

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{json_of, memory_tx, run, text, verify_each};
use engram_cli::local_cluster::{LocalCluster, free_ports};
use engram_client::{Client, Consistency, GetOptions};
use engram_types::{EntityId, Namespace};

const EXE: &str = env!("CARGO_BIN_EXE_engram");
const NS: &str = "ops/backup";

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `engram serve --id ID --listen 127.0.0.1:PORT --data-dir DIR ARGS`, logging to DIR.log.
fn serve(id: u64, port: u16, dir: &Path, args: &[String]) -> KillOnDrop {
    let mut log = dir.as_os_str().to_owned();
    log.push(".log");
    let child = Command::new(EXE)
        .args([
            "serve",
            "--id",
            &id.to_string(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

/// One acknowledged write: its `:memory/n`, entity and audit entry.
#[derive(Clone, Copy, Debug)]
struct Acked {
    n: i64,
    entity: u64,
    audit_index: u64,
}

async fn write(client: &Client, n: i64) -> Acked {
    let written = client.transact(&memory_tx(NS, n)).await.unwrap();
    Acked {
        n,
        entity: *written.temp_ids.get("m").unwrap(),
        audit_index: written.audit_index,
    }
}

/// Whether `client` serves write `w` (its entity holds `:memory/text` "ops/backup N").
async fn holds(client: &Client, w: &Acked) -> bool {
    let ns = Namespace::new(NS).unwrap();
    // Stale: what this node itself holds, not what its leader answers.
    let stale = GetOptions {
        consistency: Consistency::Stale,
        ..GetOptions::default()
    };
    match client.get(&ns, EntityId(w.entity), stale).await {
        Ok(got) => format!("{:?}", got.datoms).contains(&format!("\"{NS} {}\"", w.n)),
        Err(e) if e.code() == Some(tonic::Code::NotFound) => false,
        Err(e) => panic!("reading write {}: {e}", w.n),
    }
}

/// `engram ARGS` with its exit code and stdout + stderr.
fn engram(args: &[&str]) -> (i32, String) {
    outcome(&run(args))
}

/// A finished command's exit code and stdout + stderr.
fn outcome(out: &std::process::Output) -> (i32, String) {
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout) + &text(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_load_verifies_and_restores_into_a_new_cluster_with_every_write_it_covers() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(6).unwrap();
    let old_dir = dir.path().join("old");
    let mut old = LocalCluster::start(Path::new(EXE), &old_dir, &ports[..3], &[]).unwrap();
    old.wait_all_answer(Duration::from_secs(60)).await.unwrap();
    let leader = old.init(Duration::from_secs(30)).await.unwrap();
    let endpoint = old.node(leader).unwrap().endpoint();
    let client = Client::connect(old.endpoints()).await.unwrap();
    let mut before = Vec::new();
    for n in 0..30 {
        before.push(write(&client, n).await);
    }

    // A writer keeps writing while the backup is taken.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut n = 1_000;
            while !stop.load(Ordering::Relaxed) {
                acked.push(write(&client, n).await);
                n += 1;
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let backup = dir.path().join("cluster.backup");
    let backup_s = backup.to_str().unwrap();
    let out = run(&["-e", &endpoint, "--json", "backup", "--out", backup_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let during = writer.await.unwrap();
    assert!(
        !during.is_empty(),
        "the writer wrote nothing while the backup was taken"
    );
    let made = json_of(&out);
    let covered = made["chain_index"].as_u64().unwrap();
    assert_eq!(made["node_id"].as_u64(), Some(leader));
    assert!(covered >= before.last().unwrap().audit_index, "{made}");
    assert!(!Path::new(&format!("{backup_s}.partial")).exists());

    // A target that cannot be written: refused, nothing left behind.
    let (code, said) = engram(&["-e", &endpoint, "backup", "--out", "/nonexistent-dir/x.backup"]);
    assert_ne!(code, 0, "{said}");
    assert!(
        said.contains("cannot create /nonexistent-dir/x.backup.partial"),
        "{said}"
    );

    // Offline: verified whole, and named in the JSON verdict.
    let out = run(&["--json", "audit", "verify", "--backup", backup_s]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let verdict = json_of(&out);
    assert_eq!(verdict["verdict"], "verified", "{verdict}");
    assert_eq!(
        verdict["backup"]["chain_index"].as_u64(),
        Some(covered),
        "{verdict}"
    );

    // Damage anywhere is refused with exit code 2 and what is wrong; something that is not a
    // backup with exit code 3.
    let bytes = std::fs::read(&backup).unwrap();
    let damaged = dir.path().join("damaged.backup");
    let damaged_s = damaged.to_str().unwrap();
    for at in [
        20,
        bytes.len() / 3,
        bytes.len() / 2,
        bytes.len() - 100,
        bytes.len() - 1,
    ] {
        let mut copy = bytes.clone();
        copy[at] ^= 0x40;
        std::fs::write(&damaged, &copy).unwrap();
        let (code, said) = engram(&["audit", "verify", "--backup", damaged_s]);
        assert_eq!(code, 2, "byte {at}: {said}");
        assert!(
            said.contains("FAILED (tampered)") && said.contains("checksum"),
            "byte {at}: {said}"
        );
    }
    std::fs::write(&damaged, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let (code, said) = engram(&["audit", "verify", "--backup", damaged_s]);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("truncated"), "{said}");
    std::fs::write(&damaged, b"an export, a log file, anything else").unwrap();
    let (code, said) = engram(&["audit", "verify", "--backup", damaged_s]);
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("not an Engram backup"), "{said}");

    // The old cluster goes away; a new one is built from the backup.
    let key1 = old.node(leader).unwrap().data_dir.join("node.key");
    let key1 = key1.to_str().unwrap().to_string();
    let new_dir = dir.path().join("new");
    std::fs::create_dir_all(&new_dir).unwrap();
    let addr = |i: usize| format!("127.0.0.1:{}", ports[3 + i]);
    let data = |i: usize| new_dir.join(format!("node{}", i + 1));
    let data1 = data(0);
    let addr1 = addr(0);
    // `engram [--json] restore --backup FILE --data-dir node1 --addr ... --key-file KEY MORE`.
    let restore = |json: bool, file: &str, key: &str, more: &[&str]| {
        let mut args = if json { vec!["--json"] } else { Vec::new() };
        args.extend(["restore", "--backup", file, "--data-dir", data1.to_str().unwrap()]);
        args.extend(["--addr", addr1.as_str(), "--key-file", key]);
        args.extend(more);
        run(&args)
    };

    // Refusals first: a key the chain never trusted, a key restored as another node, a
    // directory that holds something. Each leaves nothing behind.
    let stranger = dir.path().join("stranger.key");
    std::fs::write(&stranger, hex_seed(7)).unwrap();
    let (code, said) = outcome(&restore(false, backup_s, stranger.to_str().unwrap(), &[]));
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("not one the backup's chain trusts"), "{said}");
    assert!(
        !data1.exists() || std::fs::read_dir(&data1).unwrap().next().is_none(),
        "{said}"
    );
    let other = if leader == 1 { "2" } else { "1" };
    let (code, said) = outcome(&restore(false, backup_s, &key1, &["--id", other]));
    assert_ne!(code, 0, "{said}");
    assert!(said.contains(&format!("belongs to node {leader}")), "{said}");
    std::fs::create_dir_all(&data1).unwrap();
    std::fs::write(data1.join("keep-me"), b"x").unwrap();
    let (code, said) = outcome(&restore(false, backup_s, &key1, &[]));
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("is not empty (it holds keep-me)"), "{said}");
    std::fs::remove_dir_all(&data1).unwrap();
    // A node.key of another key is not one a restore cut short left: refused, and kept.
    std::fs::create_dir_all(&data1).unwrap();
    std::fs::copy(&stranger, data1.join("node.key")).unwrap();
    let (code, said) = outcome(&restore(false, backup_s, &key1, &[]));
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("it holds node.key"), "{said}");
    assert_eq!(
        std::fs::read(data1.join("node.key")).unwrap(),
        std::fs::read(&stranger).unwrap()
    );
    std::fs::remove_dir_all(&data1).unwrap();
    std::fs::write(&damaged, &bytes[..bytes.len() - 1]).unwrap();
    let (code, said) = outcome(&restore(false, damaged_s, &key1, &[]));
    assert_ne!(code, 0, "{said}");
    assert!(said.contains("truncated") && !data1.exists(), "{said}");

    old.kill_all();
    // DIR as a fresh volume's mount point looks: it exists and holds `lost+found`; a restore
    // cut short also left its staging directory and moved the key in. The restore works in
    // DIR itself (a mount point cannot be renamed or replaced): the same directory, its
    // `lost+found` kept, the leftovers replaced.
    std::fs::create_dir_all(data1.join("lost+found")).unwrap();
    std::fs::create_dir_all(data1.join(".restoring/db")).unwrap();
    std::fs::write(
        data1.join(".restoring/db/CURRENT"),
        b"left by a restore cut short",
    )
    .unwrap();
    std::fs::copy(&key1, data1.join("node.key")).unwrap();
    let inode = std::fs::metadata(&data1).unwrap().ino();
    let out = restore(true, backup_s, &key1, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let restored = json_of(&out);
    assert_eq!(restored["node_id"].as_u64(), Some(leader), "{restored}");
    assert_eq!(restored["chain_index"].as_u64(), Some(covered), "{restored}");
    assert!(data1.join("node.key").is_file());
    assert_eq!(
        std::fs::metadata(&data1).unwrap().ino(),
        inode,
        "DIR was replaced"
    );
    let mut held: Vec<String> = std::fs::read_dir(&data1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    held.sort();
    assert_eq!(held, ["db", "lost+found", "node.key"]);

    // Node `leader` of the old cluster comes back as the only member; two new nodes join it.
    // The first joins with its old node key (as pods do whose keys Secret the old cluster
    // used), the second with a new one.
    let mut nodes = vec![serve(leader, ports[3], &data1, &[])];
    let first = format!("{leader}={}", addr(0));
    let ids: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let old_key = dir.path().join("old-key-of-a-joiner.key");
    std::fs::copy(old.node(ids[0]).unwrap().data_dir.join("node.key"), &old_key).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let mut args = vec!["--join".into(), "--peer".into(), first.clone()];
        if i == 0 {
            args.extend(["--key-file".into(), old_key.display().to_string()]);
        }
        nodes.push(serve(*id, ports[4 + i], &data(i + 1), &args));
    }
    let endpoints: Vec<String> = (0..3).map(addr).collect();
    let fresh = Client::connect(endpoints.clone()).await.unwrap();
    let started = Instant::now();
    loop {
        let voters = match fresh.status().await {
            Ok(s) if s.leader_id.is_some() => s.members.iter().filter(|m| m.voter).count(),
            _ => 0,
        };
        if voters == 3 {
            break;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let logs: String = (0..3)
                .map(|i| {
                    let log = new_dir.join(format!("node{}.log", i + 1));
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(15).collect();
                    format!(
                        "--- {}\n{}\n",
                        log.display(),
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )
                })
                .collect();
            panic!(
                "the new cluster did not reach 3 voters ({:?}):\n{logs}",
                fresh.status().await
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Exactly the writes the backup's checkpoint covers, served by every node.
    for (i, e) in endpoints.iter().enumerate() {
        let node = Client::connect(vec![e.clone()]).await.unwrap();
        for w in before.iter().chain(&during) {
            let wanted = w.audit_index <= covered;
            // A joining node serves once it has the state: wait for the last covered write.
            let deadline = Instant::now() + Duration::from_secs(30);
            while wanted && !holds(&node, w).await && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(
                holds(&node, w).await,
                wanted,
                "node {} write {w:?} (backup covers {covered})",
                i + 1
            );
        }
    }
    // It takes new writes, and every node's chain verifies and agrees.
    let next = write(&fresh, 9_999).await;
    assert!(next.audit_index > covered);
    let out = verify_each(EXE, &endpoints);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    drop(nodes);
}

/// A key file's contents: a 32-byte seed of `byte`, in hex.
fn hex_seed(byte: u8) -> String {
    [byte; 32].iter().map(|b| format!("{b:02x}")).collect()
}
