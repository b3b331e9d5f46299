//! A store stamped with a newer format than this build's is refused, naming both formats, by
//! the node and by the offline tools, and left as it is.
#![allow(clippy::unwrap_used)] // test set-up: a failed step should stop the test loudly

use std::process::Command;

use engram_core::store_format::{self, STORE_FORMAT};

const EXE: &str = env!("CARGO_BIN_EXE_engram");

#[test]
fn a_newer_builds_store_is_refused_by_the_node_and_the_offline_tools() {
    let dir = tempfile::tempdir().unwrap();
    let newer = STORE_FORMAT + 1;
    {
        let store = engram_storage_rocks::RocksStore::open(&dir.path().join("db")).unwrap();
        store_format::stamp(&store, newer).unwrap();
    }
    let serve = Command::new(EXE)
        .args(["serve", "--id", "1", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(!serve.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "this store is format {newer}, written by a newer Engram"
        )) && stderr.contains(&format!("reads store formats up to {STORE_FORMAT}")),
        "{stderr}"
    );
    let verify = Command::new(EXE)
        .args(["audit", "verify", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&verify.stdout).into_owned() + &String::from_utf8_lossy(&verify.stderr);
    assert!(!verify.status.success(), "{out}");
    assert!(out.contains(&format!("this store is format {newer}")), "{out}");
    // Left as it was found.
    let store = engram_storage_rocks::RocksStore::open(&dir.path().join("db")).unwrap();
    assert!(matches!(
        store_format::check(&store),
        Err(store_format::StoreFormatError::Newer { found }) if found == newer
    ));
}
