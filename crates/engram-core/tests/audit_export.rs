//! The verifiable audit, end to end over the state machine: Merkle proofs and checkpoints as
//! apply stores them, key changes, and the export / offline verifier against every kind of
//! tampering (flipped bytes, deleted, reordered and duplicated entries, a datom edited in the
//! store, a truncated tail, checkpoints by unknown or revoked keys).
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::sync::Arc;

use engram_audit::{
    Checkpoint, KeyAction, KeyChangeRequest, KeyRing, NodeKey, SignedCheckpoint, SignedEntry,
};
use engram_core::{CheckpointPolicy, Engine, export, keys, proofs};
use engram_merkle::{Blake3, verify_consistency, verify_inclusion};
use engram_storage::{Durability, MemStore, ReadView, Space, Store, WriteBatch};
use engram_types::{EntityRef, Hash, Namespace, Op, Provenance, TxOp, TxRequest, Value};
use engram_verify::format::{ExportReader, ExportWriter, Next, Record};
use engram_verify::{Report, VerifyOptions, verify_export};

fn ring(key: NodeKey) -> Arc<KeyRing> {
    Arc::new(KeyRing::new(Arc::new(key)))
}

fn founder() -> NodeKey {
    NodeKey::from_seed([9; 32])
}

fn tx(n: u64) -> TxRequest {
    TxRequest {
        namespace: Namespace::new("team/a").unwrap(),
        branch: None,
        schema: Vec::new(),
        branch_op: None,
        ops: vec![
            TxOp {
                op: Op::Assert,
                entity: EntityRef::Temp("t".into()),
                attribute: engram_types::Attribute::new(":task/title").unwrap(),
                value: Value::String(format!("task {n}")),
                valid_from_ns: None,
                valid_to_ns: None,
            },
            TxOp {
                op: Op::Assert,
                entity: EntityRef::Temp("t".into()),
                attribute: engram_types::Attribute::new(":task/rank").unwrap(),
                value: Value::I64(n as i64),
                valid_from_ns: None,
                valid_to_ns: None,
            },
        ],
        preconditions: vec![],
        idempotency_key: None,
        provenance: Provenance {
            agent: "a1".into(),
            confidence: 0.5,
            ..Default::default()
        },
    }
}

/// A chain of genesis + `txs` transactions on one node, checkpointing every `every` entries.
fn chain(txs: u64, every: u64) -> (Arc<MemStore>, Engine) {
    let store = Arc::new(MemStore::new());
    let key = founder();
    let policy = CheckpointPolicy {
        every_entries: every,
        every_ms: 0,
    };
    let mut engine = Engine::open_with(store.clone(), ring(NodeKey::from_seed(key.seed())), policy).unwrap();
    engine
        .apply_membership(1, vec![(1, key.public())], WriteBatch::new())
        .unwrap();
    for n in 0..txs {
        engine
            .apply_tx(n + 2, 1_000 * (n as i64 + 1), &tx(n), WriteBatch::new())
            .unwrap()
            .unwrap();
    }
    (store, engine)
}

fn export_bytes(store: &dyn Store) -> Vec<u8> {
    let mut out = Vec::new();
    export::write_export(store, &mut out, 1, |_, _| {}).unwrap();
    out
}

fn verify(bytes: &[u8], options: &VerifyOptions) -> Report {
    verify_export(bytes, options, |_, _| {}).unwrap()
}

fn records(bytes: &[u8]) -> Vec<(u64, Record)> {
    let mut reader = ExportReader::open(bytes).unwrap();
    let mut out = Vec::new();
    while let Ok(Next::Record { offset, record }) = reader.next_record() {
        out.push((offset, record));
    }
    out
}

fn rewrite(records: &[Record]) -> Vec<u8> {
    let mut w = ExportWriter::new(Vec::new()).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    w.into_inner().unwrap()
}

fn first_failure(report: &Report) -> (Option<u64>, String) {
    let f = report.failures.first().expect("a failure");
    (f.index, f.field.clone())
}

#[test]
fn proofs_from_the_stored_tree_verify_against_checkpoints() {
    let (store, engine) = chain(40, 10);
    let head = engine.head().clone();
    assert_eq!(head.index, 41);
    let root = head.tree_root().unwrap();
    // Every entry, in trees of several sizes.
    for size in [1u64, 2, 7, 16, 33, 41] {
        let tree_root = Hash(
            engram_merkle::subtree_root::<Blake3>(
                &(1..=size)
                    .map(|i| {
                        let bytes = store.get(Space::State, &keys::audit(i)).unwrap().unwrap();
                        engram_verify::leaf_hash(&SignedEntry::decode(&bytes).unwrap().entry.hash())
                    })
                    .collect::<Vec<_>>(),
                0,
                size,
            )
            .unwrap(),
        );
        if size == 41 {
            assert_eq!(tree_root, root, "the head's frontier gives the tree's root");
        }
        for index in 1..=size {
            let p = proofs::inclusion(&*store, index, size).unwrap();
            let path: Vec<[u8; 32]> = p.path.iter().map(|h| h.0).collect();
            verify_inclusion::<Blake3>(
                &engram_verify::leaf_hash(&p.entry.entry.hash()),
                index - 1,
                size,
                &path,
                &tree_root.0,
            )
            .unwrap_or_else(|e| panic!("entry {index} in tree {size}: {e}"));
        }
        let (_, consistency) = proofs::consistency(&*store, size, 41).unwrap();
        let path: Vec<[u8; 32]> = consistency.iter().map(|h| h.0).collect();
        verify_consistency::<Blake3>(size, 41, &tree_root.0, &root.0, &path).unwrap();
    }
    // Only subtrees of 2^MERKLE_STORED_LEVEL leaves or more are stored: in a tree of 41, five
    // of 8 leaves, two of 16, one of 32; the proofs above recomputed the levels below.
    let stored: Vec<(u8, u64)> = store
        .scan(
            Space::State,
            &[keys::MERKLE],
            Some(&[keys::MERKLE + 1]),
            usize::MAX,
        )
        .unwrap()
        .into_iter()
        .map(|(k, _)| (k[1], keys::u64_after_tag(&k[1..]).unwrap()))
        .collect();
    assert_eq!(keys::MERKLE_STORED_LEVEL, 3);
    assert_eq!(
        stored,
        vec![(3, 0), (3, 1), (3, 2), (3, 3), (3, 4), (4, 0), (4, 1), (5, 0)],
        "stored Merkle nodes (level, position)"
    );
    // Out-of-range requests are refused, not answered with a wrong proof.
    assert!(proofs::inclusion(&*store, 0, 10).is_err());
    assert!(proofs::inclusion(&*store, 11, 10).is_err());
    assert!(proofs::inclusion(&*store, 1, 42).is_err());
    assert!(proofs::consistency(&*store, 20, 10).is_err());

    // Checkpoints: genesis, then every 10 entries; each signed, each with the tree's root.
    let stored = store
        .scan(
            Space::State,
            &[keys::CHECKPOINT],
            Some(&[keys::CHECKPOINT + 1]),
            usize::MAX,
        )
        .unwrap();
    let sizes: Vec<u64> = stored
        .iter()
        .map(|(_, v)| SignedCheckpoint::parse_bytes(v).unwrap().checkpoint.size)
        .collect();
    assert_eq!(sizes, vec![1, 11, 21, 31, 41]);
    let latest = proofs::latest_checkpoint(&*store).unwrap().unwrap();
    assert_eq!(latest.checkpoint.root, root);
    assert!(latest.verify_by(&founder().public()));
    let at_head = proofs::checkpoint_at_head(&*store, &founder()).unwrap().unwrap();
    assert_eq!(at_head, latest, "same head, same key: the same checkpoint");
}

#[test]
fn checkpoints_follow_transaction_time_when_the_count_trigger_is_off() {
    let store = Arc::new(MemStore::new());
    let policy = CheckpointPolicy {
        every_entries: 0,
        every_ms: 5,
    };
    let mut engine = Engine::open_with(store.clone(), ring(founder()), policy).unwrap();
    engine
        .apply_membership(1, vec![(1, founder().public())], WriteBatch::new())
        .unwrap();
    // One transaction per ms of transaction time: a checkpoint every 5 ms after genesis (t=0).
    for n in 0..12u64 {
        engine
            .apply_tx(n + 2, 1_000_000 * (n as i64 + 1), &tx(n), WriteBatch::new())
            .unwrap()
            .unwrap();
    }
    let sizes: Vec<u64> = store
        .scan(
            Space::State,
            &[keys::CHECKPOINT],
            Some(&[keys::CHECKPOINT + 1]),
            usize::MAX,
        )
        .unwrap()
        .iter()
        .map(|(_, v)| SignedCheckpoint::parse_bytes(v).unwrap().checkpoint.size)
        .collect();
    // Entry n+2 has time n+1 ms: 5 ms after genesis is entry 6, 5 ms after that entry 11.
    assert_eq!(sizes, vec![1, 6, 11]);
}

#[test]
fn an_honest_export_verifies_and_reports_what_it_checked() {
    let (store, engine) = chain(25, 8);
    let bytes = export_bytes(&*store);
    let report = verify(&bytes, &VerifyOptions::default());
    assert!(report.ok(), "{:?}", report.failures);
    assert_eq!(report.entries, 26);
    assert_eq!(report.transactions, 25);
    assert_eq!(report.datoms, 50);
    assert_eq!(report.checkpoints, 4, "sizes 1, 9, 17 and 25");
    assert_eq!(report.tree_root, engine.head().tree_root().unwrap().to_hex());
    assert!(report.anchor.contains("own genesis"));

    // Anchored on the genesis keys, and on a pinned checkpoint.
    let anchored = verify(
        &bytes,
        &VerifyOptions {
            genesis_keys: Some(vec![founder().public()]),
            pin: proofs::latest_checkpoint(&*store).unwrap(),
            ..Default::default()
        },
    );
    assert!(anchored.ok(), "{:?}", anchored.failures);
    // The wrong genesis keys are refused at entry 1.
    let wrong = verify(
        &bytes,
        &VerifyOptions {
            genesis_keys: Some(vec![NodeKey::from_seed([1; 32]).public()]),
            ..Default::default()
        },
    );
    assert_eq!(first_failure(&wrong), (Some(1), "kind".into()));
}

/// Which chain index a byte of the export belongs to, and what the verifier must name.
fn expected_index(
    recs: &[(u64, Record)],
    total: usize,
    pos: usize,
) -> Option<(Option<u64>, Vec<&'static str>)> {
    let header_len = engram_verify::format::MAGIC.len() + 2;
    if pos < header_len {
        return None; // unreadable, not tampered
    }
    let mut entry = 0u64;
    for (i, (offset, record)) in recs.iter().enumerate() {
        let end = recs.get(i + 1).map_or(total as u64, |(o, _)| *o);
        if let Record::Entry(_) = record {
            entry += 1;
        }
        if (pos as u64) >= *offset && (pos as u64) < end {
            return Some(match record {
                Record::Header { .. } => (None, vec!["header", "header.origin", "record"]),
                Record::End { .. } => (Some(entry + 1), vec!["end", "record"]),
                _ => (Some(entry.max(1)), vec![]),
            });
        }
    }
    Some((Some(entry + 1), vec!["end", "record"]))
}

#[test]
fn every_flipped_byte_is_detected_at_its_entry() {
    let (store, _) = chain(5, 3);
    let bytes = export_bytes(&*store);
    let recs = records(&bytes);
    for pos in 0..bytes.len() {
        let mut tampered = bytes.clone();
        tampered[pos] ^= 0x40;
        let result = verify_export(&tampered[..], &VerifyOptions::default(), |_, _| {});
        match expected_index(&recs, bytes.len(), pos) {
            None => assert!(result.is_err(), "byte {pos} of the file header: unreadable"),
            Some((index, fields)) => {
                let report = result.unwrap_or_else(|e| panic!("byte {pos}: {e}"));
                assert!(!report.ok(), "flipping byte {pos} went unnoticed");
                let (found, field) = first_failure(&report);
                if field == "record" {
                    // A damaged frame cannot say what it held: it is named as the position
                    // after the last entry read, which is the entry itself or the one before.
                    let index = index.unwrap_or(1);
                    assert!(
                        found == Some(index) || found == Some(index + 1),
                        "byte {pos}: {:?}",
                        report.failures
                    );
                } else if fields.is_empty() {
                    assert_eq!(found, index, "byte {pos}: {:?}", report.failures);
                } else {
                    assert!(
                        fields.contains(&field.as_str()),
                        "byte {pos}: field {field}, expected one of {fields:?}: {:?}",
                        report.failures
                    );
                }
            }
        }
    }
}

#[test]
fn deleted_reordered_and_duplicated_entries_are_named() {
    let (store, _) = chain(6, 100);
    let bytes = export_bytes(&*store);
    let recs: Vec<Record> = records(&bytes).into_iter().map(|(_, r)| r).collect();
    // Positions of each entry's records (the entry and, for a transaction, its datoms).
    let entry_at: Vec<usize> = recs
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Record::Entry(_)))
        .map(|(i, _)| i)
        .collect();
    let group = |n: usize| -> Vec<Record> { recs[entry_at[n - 1]..entry_at[n - 1] + 2].to_vec() };

    // Delete entry 4 (and its datoms): the chain breaks at position 4.
    let mut deleted = recs.clone();
    deleted.drain(entry_at[3]..entry_at[3] + 2);
    let report = verify(&rewrite(&deleted), &VerifyOptions::default());
    assert_eq!(
        first_failure(&report),
        (Some(4), "index".into()),
        "{:?}",
        report.failures
    );

    // Swap entries 4 and 5.
    let mut swapped = recs[..entry_at[3]].to_vec();
    swapped.extend(group(5));
    swapped.extend(group(4));
    swapped.extend(recs[entry_at[5]..].to_vec());
    let report = verify(&rewrite(&swapped), &VerifyOptions::default());
    assert_eq!(first_failure(&report), (Some(4), "index".into()));

    // Duplicate entry 3.
    let mut duplicated = recs[..entry_at[3]].to_vec();
    duplicated.extend(group(3));
    duplicated.extend(recs[entry_at[3]..].to_vec());
    let report = verify(&rewrite(&duplicated), &VerifyOptions::default());
    assert_eq!(first_failure(&report), (Some(4), "index".into()));

    // --all lists the whole damage, judged entry by entry against its real predecessor.
    let all = verify(
        &rewrite(&deleted),
        &VerifyOptions {
            all: true,
            ..Default::default()
        },
    );
    assert!(all.failures.len() >= 2, "{:?}", all.failures);
    assert!(
        all.failures
            .iter()
            .all(|f| f.index.is_some_and(|i| i >= 4) || f.index.is_none())
    );
}

#[test]
fn a_datom_edited_in_the_store_is_named_by_its_entry() {
    let (store, _) = chain(6, 100);
    // Entry 5 is the 4th transaction (tx 5): change the value of its first datom, in place.
    let key = engram_core::reads::datom_key_of_tx(&*store, engram_types::TxId(5), 0)
        .unwrap()
        .unwrap();
    let raw = store.get(Space::State, &key).unwrap().unwrap();
    let mut datom = engram_types::Datom::decode(&raw).unwrap();
    datom.value = Value::String("rewritten".into());
    let mut batch = WriteBatch::new();
    batch.put(Space::State, key, datom.encode());
    store.write(batch, Durability::Sync).unwrap();

    let report = verify(&export_bytes(&*store), &VerifyOptions::default());
    let failure = report.failures.first().expect("detected");
    assert_eq!(
        (failure.index, failure.field.as_str()),
        (Some(5), "datoms"),
        "{failure}"
    );
    assert!(failure.message.contains("content_hash"), "{failure}");
}

#[test]
fn a_truncated_tail_is_caught_by_a_pinned_checkpoint() {
    let (store, _) = chain(10, 4);
    let pin = proofs::checkpoint_at_head(&*store, &founder()).unwrap().unwrap();
    assert_eq!(pin.checkpoint.size, 11);
    let recs: Vec<Record> = records(&export_bytes(&*store))
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    // Cut after entry 8 and write a well-formed end record: self-consistent, but short.
    let cut = recs
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Record::Entry(_)))
        .nth(8)
        .map(|(i, _)| i)
        .unwrap();
    // The forger also rewrites the header (its checksum is not a signature).
    let mut truncated = recs[..cut].to_vec();
    if let Record::Header { head_index, .. } = &mut truncated[0] {
        *head_index = 8;
    }
    let checkpoints = truncated
        .iter()
        .filter(|r| matches!(r, Record::Checkpoint(_)))
        .count() as u64;
    truncated.push(Record::End {
        entries: 8,
        checkpoints,
    });
    let bytes = rewrite(&truncated);
    assert!(
        verify(&bytes, &VerifyOptions::default()).ok(),
        "without a pin it looks complete"
    );
    let report = verify(
        &bytes,
        &VerifyOptions {
            pin: Some(pin.clone()),
            ..Default::default()
        },
    );
    assert_eq!(
        first_failure(&report),
        (Some(9), "pin.size".into()),
        "{:?}",
        report.failures
    );

    // A rewritten history with the same length is caught by the pin's root.
    let (forked, mut forked_engine) = {
        let store = Arc::new(MemStore::new());
        let mut engine = Engine::open_with(
            store.clone(),
            ring(founder()),
            CheckpointPolicy {
                every_entries: 4,
                every_ms: 0,
            },
        )
        .unwrap();
        engine
            .apply_membership(1, vec![(1, founder().public())], WriteBatch::new())
            .unwrap();
        (store, engine)
    };
    for n in 0..10u64 {
        // Different content from entry 2 on: a fork signed by the same, trusted key.
        forked_engine
            .apply_tx(n + 2, 1_000 * (n as i64 + 1), &tx(n + 100), WriteBatch::new())
            .unwrap()
            .unwrap();
    }
    let report = verify(
        &export_bytes(&*forked),
        &VerifyOptions {
            pin: Some(pin),
            ..Default::default()
        },
    );
    assert_eq!(
        first_failure(&report),
        (Some(11), "pin.root".into()),
        "{:?}",
        report.failures
    );
}

#[test]
fn checkpoints_by_unknown_or_revoked_keys_are_refused() {
    let (store, mut engine) = chain(4, 100);
    let origin = engine.origin().unwrap().to_string();
    let stranger = NodeKey::from_seed([77; 32]);
    let joiner = NodeKey::from_seed([55; 32]);

    // Admit the joiner (authorised by the founder), then revoke it.
    let admit = KeyChangeRequest::sign(
        &origin,
        KeyAction::Admit {
            node_id: 2,
            key: joiner.public(),
        },
        &founder(),
    );
    let admitted = engine
        .apply_key_change(6, &admit, WriteBatch::new())
        .unwrap()
        .unwrap();
    assert_eq!(admitted.entry.index, 6);
    assert!(engine.key_active(joiner.key_id()).unwrap());
    // Admitting it again is refused and writes no entry.
    let again = engine.apply_key_change(7, &admit, WriteBatch::new()).unwrap();
    assert!(again.is_err());
    assert_eq!(engine.head().index, 6);
    // A key change authorised by a stranger is refused.
    let forged = KeyChangeRequest::sign(
        &origin,
        KeyAction::Revoke {
            node_id: 1,
            key: founder().key_id(),
        },
        &stranger,
    );
    assert!(
        engine
            .apply_key_change(8, &forged, WriteBatch::new())
            .unwrap()
            .is_err()
    );

    // A checkpoint the joiner signed before its revocation...
    let cp = |key: &NodeKey, engine: &Engine| {
        Checkpoint {
            origin: origin.clone(),
            size: engine.head().index,
            root: engine.head().tree_root().unwrap(),
            tx_time_ns: engine.head().tx_time_ns,
        }
        .sign(key)
    };
    let by_joiner = cp(&joiner, &engine);
    let by_stranger = cp(&stranger, &engine);
    let revoke = KeyChangeRequest::sign(
        &origin,
        KeyAction::Revoke {
            node_id: 2,
            key: joiner.key_id(),
        },
        &founder(),
    );
    engine
        .apply_key_change(9, &revoke, WriteBatch::new())
        .unwrap()
        .unwrap();
    assert!(!engine.key_active(joiner.key_id()).unwrap());

    // Put both checkpoints into the export, right after the entry they cover (entry 6).
    let recs: Vec<Record> = records(&export_bytes(&*store))
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let after6 = recs
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Record::Entry(_)))
        .nth(5)
        .map(|(i, _)| i + 1)
        .unwrap();
    for (note, what) in [(by_joiner, "revoked"), (by_stranger, "no key the chain admits")] {
        let mut with = recs.clone();
        with.insert(after6, Record::Checkpoint(note.to_text().into_bytes()));
        if let Some(Record::End { checkpoints, .. }) = with.last_mut() {
            *checkpoints += 1;
        }
        let report = verify(&rewrite(&with), &VerifyOptions::default());
        let failure = report.failures.first().expect("refused");
        assert_eq!(failure.field, "checkpoint.signature", "{failure}");
        assert!(failure.message.contains(what), "{failure}");
        // And as a pin.
        let report = verify(
            &rewrite(&recs),
            &VerifyOptions {
                pin: Some(note),
                ..Default::default()
            },
        );
        assert_eq!(
            report.failures.first().map(|f| f.field.as_str()),
            Some("pin.signature")
        );
    }
    // The honest export, with the key history in it, verifies.
    let report = verify(&rewrite(&recs), &VerifyOptions::default());
    assert!(report.ok(), "{:?}", report.failures);
    let joiner_row = report.keys.iter().find(|k| k.node_id == 2).unwrap();
    assert_eq!((joiner_row.admitted_at, joiner_row.revoked_at), (6, Some(7)));
}

#[test]
fn future_versions_and_foreign_files_are_unreadable_not_tampered() {
    let (store, _) = chain(2, 100);
    let mut bytes = export_bytes(&*store);
    let at = engram_verify::format::MAGIC.len();
    let next = engram_verify::EXPORT_FORMAT_VERSION + 1;
    bytes[at..at + 2].copy_from_slice(&next.to_be_bytes());
    let err = verify_export(&bytes[..], &VerifyOptions::default(), |_, _| {}).unwrap_err();
    assert!(
        err.to_string().contains(&format!("version {next} is newer")),
        "{err}"
    );
    let err = verify_export(
        &b"PK\x03\x04 a zip file"[..],
        &VerifyOptions::default(),
        |_, _| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("not an Engram audit export"), "{err}");
}

#[test]
fn a_rotation_switches_the_signing_key_at_its_entry_and_survives_a_restart() {
    let store = Arc::new(MemStore::new());
    let keys = ring(founder());
    let mut engine = Engine::open_with(store.clone(), keys.clone(), CheckpointPolicy::default()).unwrap();
    engine
        .apply_membership(1, vec![(1, founder().public())], WriteBatch::new())
        .unwrap();
    engine
        .apply_tx(2, 1_000, &tx(0), WriteBatch::new())
        .unwrap()
        .unwrap();
    let origin = engine.origin().unwrap().to_string();
    let new = NodeKey::from_seed([42; 32]);
    keys.stage(NodeKey::from_seed(new.seed()));
    let rotate = KeyChangeRequest::sign(
        &origin,
        KeyAction::Rotate {
            node_id: 1,
            old: founder().key_id(),
            new: new.public(),
        },
        &founder(),
    );
    let entry = engine
        .apply_key_change(3, &rotate, WriteBatch::new())
        .unwrap()
        .unwrap();
    assert_eq!(
        entry.attestation.as_ref().unwrap().key_id,
        founder().key_id(),
        "the rotation is the old key's last entry"
    );
    assert_eq!(
        keys.current().key_id(),
        new.key_id(),
        "switched at the rotation entry"
    );
    let next = engine
        .apply_tx(4, 2_000, &tx(1), WriteBatch::new())
        .unwrap()
        .unwrap();
    let stored = SignedEntry::decode(
        &store
            .get(Space::State, &keys::audit(next.audit_index))
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stored.attestation.as_ref().unwrap().key_id, new.key_id());
    let report = verify(&export_bytes(&*store), &VerifyOptions::default());
    assert!(report.ok(), "{:?}", report.failures);
    let old_row = report
        .keys
        .iter()
        .find(|k| k.key_id == founder().key_id().to_string())
        .unwrap();
    assert_eq!(old_row.retired_at, Some(3));

    // A node that stopped after the rotation applied but before it switched settles on the
    // staged key when it reopens.
    let reopened = ring(founder());
    reopened.stage(NodeKey::from_seed(new.seed()));
    let engine = Engine::open_with(store.clone(), reopened.clone(), CheckpointPolicy::default()).unwrap();
    assert_eq!(engine.key().key_id(), new.key_id());
    // And without the staged key it keeps the old one (whose entries after 3 would not verify).
    let stuck = ring(founder());
    let engine = Engine::open_with(store, stuck, CheckpointPolicy::default()).unwrap();
    assert_eq!(engine.key().key_id(), founder().key_id());
}

// ------------------------------------------------------------------ backups

/// A backup of `store` signed by `key`, written to a file in `dir`; its bytes too.
fn backup_file(store: &MemStore, key: &NodeKey, dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>, u64) {
    let mut bytes = Vec::new();
    // Small chunks, so the file is made of many emitted pieces.
    let written = engram_core::backup::write_backup(store, 1, key, 700, &mut |chunk| {
        bytes.extend_from_slice(&chunk);
        Ok(())
    })
    .unwrap();
    assert_eq!(written.bytes, bytes.len() as u64);
    let path = dir.join("node1.backup");
    std::fs::write(&path, &bytes).unwrap();
    (path, bytes, written.records)
}

#[test]
fn a_backup_holds_every_state_row_and_a_checkpoint_of_its_chain_signed_by_a_trusted_key() {
    use engram_core::backup::BackupFile;
    let (store, _engine) = chain(20, 5);
    let dir = tempfile::tempdir().unwrap();
    let (path, _, records) = backup_file(&store, &founder(), dir.path());
    let backup = BackupFile::open(&path).unwrap();
    assert_eq!(backup.node_id, 1);
    let mut rows = Vec::new();
    let verified = backup
        .verify(&mut |k, v| rows.push((k.to_vec(), v.to_vec())))
        .unwrap();
    // Every state row, as the store holds it, in key order.
    let expected = store.scan(Space::State, &[], None, usize::MAX).unwrap();
    assert_eq!(rows, expected);
    assert_eq!(rows.len() as u64, records);
    let head = engram_core::reads::head(&*store).unwrap();
    assert_eq!(verified.head, head);
    assert_eq!(backup.checkpoint.checkpoint.size, head.index);
    assert_eq!(backup.checkpoint.checkpoint.root, head.tree_root().unwrap());
    assert_eq!(verified.signed_by, vec![founder().public()]);
    assert_eq!(verified.active_keys, vec![(1, founder().public())]);
}

#[test]
fn a_backup_with_any_byte_changed_or_cut_short_is_refused_and_says_why() {
    use engram_core::backup::{BackupError, BackupFile};
    let (store, _engine) = chain(8, 4);
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes, _) = backup_file(&store, &founder(), dir.path());
    let damaged = dir.path().join("damaged.backup");
    // Every byte of a small backup: header, state, checkpoint, trailer fields and digest.
    for at in 0..bytes.len() {
        let mut copy = bytes.clone();
        copy[at] ^= 0x01;
        std::fs::write(&damaged, &copy).unwrap();
        let err = BackupFile::open(&damaged).expect_err(&format!("byte {at} flipped was accepted"));
        match at {
            0..12 => assert!(matches!(err, BackupError::NotABackup), "byte {at}: {err}"),
            12 => assert!(matches!(err, BackupError::Damaged(_)), "byte {at}: {err}"),
            _ => assert!(
                matches!(err, BackupError::Checksum | BackupError::Damaged(_)),
                "byte {at}: {err}"
            ),
        }
    }
    // A later format is named as such, not as damage.
    let mut newer = bytes.clone();
    newer[12] = 2;
    std::fs::write(&damaged, &newer).unwrap();
    let err = BackupFile::open(&damaged).unwrap_err();
    assert!(matches!(err, BackupError::Newer(2)), "{err}");
    assert!(err.to_string().contains("newer Engram"), "{err}");
    // Cut short anywhere: refused, as truncated where the header survives.
    for len in [0, 5, 13, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&damaged, &bytes[..len]).unwrap();
        let err = BackupFile::open(&damaged).expect_err(&format!("cut to {len} bytes was accepted"));
        if len >= 13 {
            assert!(matches!(err, BackupError::Damaged(_)), "cut to {len}: {err}");
            assert!(err.to_string().contains("truncated"), "cut to {len}: {err}");
        }
    }
    // The original still reads.
    BackupFile::open(&path).unwrap().verify(&mut |_, _| {}).unwrap();
}

#[test]
fn a_backup_whose_checkpoint_no_trusted_key_signed_is_refused() {
    use engram_core::backup::{BackupError, BackupFile};
    let (store, _engine) = chain(6, 3);
    let dir = tempfile::tempdir().unwrap();
    // Made (and checksummed) whole by someone holding a key the chain never admitted.
    let (path, _, _) = backup_file(&store, &NodeKey::from_seed([42; 32]), dir.path());
    let backup = BackupFile::open(&path).unwrap();
    let err = backup.verify(&mut |_, _| {}).unwrap_err();
    assert!(matches!(err, BackupError::Checkpoint(_)), "{err}");
    assert!(err.to_string().contains("trusts"), "{err}");
}

/// A chain like [`chain`] whose transaction entries record the state root (as every entry a
/// leader of this build proposes asks); the tasks it made.
fn rooted_chain(txs: u64) -> (Arc<MemStore>, Engine, Vec<engram_types::EntityId>) {
    let (store, mut engine) = chain(0, 100);
    engine.keep_state_commitment().unwrap();
    engine.record_state_root(true);
    let mut tasks = Vec::new();
    for n in 0..txs {
        let receipt = engine
            .apply_tx(n + 2, 1_000 * (n as i64 + 1), &tx(n), WriteBatch::new())
            .unwrap()
            .unwrap();
        tasks.push(receipt.temp_ids["t"]);
    }
    engine.record_state_root(false);
    (store, engine, tasks)
}

#[test]
fn the_verifier_rebuilds_the_state_root_every_entry_records() {
    let (store, engine, _) = rooted_chain(6);
    let report = verify(&export_bytes(&*store), &VerifyOptions::default());
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.state_roots, 6);
    let root = engine.state_root().unwrap();
    assert_eq!(report.state_root.as_deref(), Some(Hash(root).to_hex().as_str()));
}

#[test]
fn a_state_root_the_whole_cluster_agreed_on_wrongly_is_caught_offline() {
    // A node whose state commitment row of one slot is wrong records a wrong root in the next
    // entry, chains it and signs it: the entry verifies as a link, but the verifier chaining
    // the exported datoms itself gets another root and names the entry.
    let (store, _, tasks) = rooted_chain(3);
    let slot = engram_core::commitment::slot_key(
        &Namespace::new("team/a").unwrap(),
        None,
        tasks[0],
        &engram_types::Attribute::new(":task/title").unwrap(),
    );
    let mut batch = WriteBatch::new();
    batch.put(
        Space::State,
        engram_core::commitment::row_key(&slot),
        engram_core::commitment::encode_row(&[1; 32]),
    );
    store.write(batch, Durability::Sync).unwrap();
    let mut engine = Engine::open(store.clone(), Arc::new(founder())).unwrap();
    engine.keep_state_commitment().unwrap();
    engine.record_state_root(true);
    let receipt = engine
        .apply_tx(9, 9_000, &tx(7), WriteBatch::new())
        .unwrap()
        .unwrap();

    let report = verify(&export_bytes(&*store), &VerifyOptions::default());
    let failure = report.failures.first().expect("detected");
    assert_eq!(
        (failure.index, failure.field.as_str()),
        (Some(receipt.audit_index), "state_root"),
        "{failure}"
    );
    // The node's own scrub sees the row that is not its history.
    let scrub = engram_core::scrub::scrub(&*store, &mut |_, _| {}).unwrap();
    assert!(
        scrub
            .findings
            .iter()
            .any(|f| f.what.contains("its history gives")),
        "{:?}",
        scrub.findings
    );
}

#[test]
fn an_entitys_state_proof_lists_every_slot_against_the_root_its_entry_records() {
    use engram_core::state_proof::{entity_state, facts_of};
    let (store, engine, tasks) = rooted_chain(3);
    let ns = Namespace::new("team/a").unwrap();
    let version = engine.state_version().unwrap();
    let proof = entity_state(&*store, &founder(), &version, &ns, tasks[1], None).unwrap();
    // The checkpoint is of the version's head, whose entry records the map's root.
    assert_eq!(proof.checkpoint.checkpoint.size, engine.head().index);
    assert_eq!(proof.entries.len(), 1);
    assert_eq!(proof.entries[0].entry.state_root, Some(Hash(version.tree.root())));
    let attributes: Vec<&str> = proof.histories.iter().map(|h| h.attribute.as_str()).collect();
    assert_eq!(attributes, vec![":task/rank", ":task/title"]);
    let slots = engram_statetree::PrefixProof::decode(&proof.slots)
        .unwrap()
        .verify(
            &version.tree.root(),
            &engram_core::commitment::entity_prefix(&ns, None, tasks[1]),
            engram_core::commitment::ENTITY_PREFIX_BITS,
        )
        .unwrap();
    assert_eq!(slots.len(), 2);
    // The answer from the histories is the read's.
    let read = engram_core::reads::ReadOptions::default();
    let from_proof = facts_of(&proof.histories, &read.slot_read(), None);
    let from_reads = engram_core::reads::get_facts(&*store, &ns, None, tasks[1], &read).unwrap();
    assert_eq!(from_proof, from_reads);
    // As of each earlier transaction, the same histories folded as of it give that read's
    // answer: a proof of the whole history proves every earlier state too.
    for t in 1..=version.head.tx.0 {
        let at = engram_core::reads::ReadOptions {
            as_of: Some(engram_types::TxId(t)),
            ..Default::default()
        };
        let proof_at = entity_state(&*store, &founder(), &version, &ns, tasks[1], at.as_of).unwrap();
        assert_eq!(
            proof_at.histories.len(),
            proof.histories.len(),
            "the whole history, as of tx {t}"
        );
        let from_reads = engram_core::reads::get_facts(&*store, &ns, None, tasks[1], &at).unwrap();
        assert_eq!(
            facts_of(&proof_at.histories, &at.slot_read(), None),
            from_reads,
            "as of tx {t}"
        );
    }
    let beyond = entity_state(
        &*store,
        &founder(),
        &version,
        &ns,
        tasks[1],
        Some(engram_types::TxId(version.head.tx.0 + 1)),
    )
    .unwrap_err();
    assert!(
        matches!(beyond, proofs::ProofReadError::OutOfRange(_)),
        "{beyond}"
    );

    // An entity nobody wrote: no slot, proven.
    let absent = entity_state(
        &*store,
        &founder(),
        &version,
        &ns,
        engram_types::EntityId(999),
        None,
    )
    .unwrap();
    assert!(absent.histories.is_empty());

    // A map that is not the state the head's entry records is never signed for.
    let mut stale = version.clone();
    stale.tree.insert([7; 32], [7; 32]);
    let err = entity_state(&*store, &founder(), &stale, &ns, tasks[1], None).unwrap_err();
    assert!(err.to_string().contains("not the root"), "{err}");
}

#[test]
fn a_chain_whose_head_records_no_state_root_cannot_prove_the_state() {
    let (store, mut engine) = chain(3, 100);
    engine.keep_state_commitment().unwrap();
    let version = engine.state_version().unwrap();
    let err = engram_core::state_proof::entity_state(
        &*store,
        &founder(),
        &version,
        &Namespace::new("team/a").unwrap(),
        engram_types::EntityId(1),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, proofs::ProofReadError::Unproven(_)), "{err}");
    assert!(err.to_string().contains("records no state root"), "{err}");
}
