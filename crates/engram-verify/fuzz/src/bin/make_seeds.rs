//! Writes deterministic seed inputs for every fuzz target into `<out>/<target>/` (default
//! `corpus/`), so that the fuzzers start from inputs that reach deep code: valid exports
//! (which get past framing, decoding, chain links, signatures, datom hashes, Merkle roots and
//! checkpoint signers), valid checkpoint notes and entries, and honest Merkle proofs.
//!
//! Every export written is checked with `verify_export` here (default options, `all`, and
//! anchored on the genesis key with its last checkpoint pinned) and must verify OK.
//!
//! Run through `seeds.sh`, or: `cargo run --release --bin make_seeds -- corpus`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use engram_audit::{
    AuditEntry, Checkpoint, EntryKind, GENESIS_PREV_HASH, KeyAction, KeyChangeRequest, NodeKey, SignedCheckpoint,
    SignedEntry, tx_content_hash,
};
use engram_merkle::{Blake3, CompactTree, MerkleHasher, consistency_proof, inclusion_proof, subtree_root};
use engram_types::{Attribute, Datom, EntityId, Hash, Namespace, Op, Provenance, Status, TxId, Value};
use engram_verify::format::{ExportWriter, Record};
use engram_verify::{VerifyOptions, verify_export};

/// The genesis key of every seed export. `export_decode` anchors one of its passes on it.
fn founder() -> NodeKey {
    NodeKey::from_seed([7; 32])
}

/// Builds a chain and its export record by record, keeping the Merkle tree to sign
/// checkpoints with the right root.
struct Chain {
    records: Vec<Record>,
    entries: Vec<SignedEntry>,
    prev: Hash,
    origin: String,
    tree: CompactTree<Blake3>,
    tx: u64,
    time: i64,
    checkpoints: Vec<SignedCheckpoint>,
}

impl Chain {
    /// Genesis: a membership entry listing `members`, attested by `signer`.
    fn genesis(members: Vec<(u64, &NodeKey)>, signer: &NodeKey) -> Chain {
        let entry = AuditEntry {
            index: 1,
            tx: TxId(1),
            tx_time_ns: 0,
            namespace: String::new(),
            kind: EntryKind::Membership {
                members: members.iter().map(|(id, key)| (*id, key.public())).collect(),
            },
            prev_hash: GENESIS_PREV_HASH,
            state_root: None,
        };
        let origin = Checkpoint::origin_for(&entry.hash());
        let mut chain = Chain {
            records: Vec::new(),
            entries: Vec::new(),
            prev: GENESIS_PREV_HASH,
            origin,
            tree: CompactTree::new(),
            tx: 1,
            time: 0,
            checkpoints: Vec::new(),
        };
        chain.push(entry, signer, None);
        chain
    }

    fn next_entry(&mut self, namespace: &str, kind: EntryKind) -> AuditEntry {
        self.tx += 1 + self.entries.len() as u64 % 3;
        self.time += 1_000_000;
        AuditEntry {
            index: self.entries.len() as u64 + 1,
            tx: TxId(self.tx),
            tx_time_ns: self.time,
            namespace: namespace.to_string(),
            kind,
            prev_hash: self.prev,
            state_root: None,
        }
    }

    fn push(&mut self, entry: AuditEntry, signer: &NodeKey, datoms: Option<Vec<Vec<u8>>>) {
        let signed = SignedEntry::sign(entry, signer);
        let hash = signed.entry.hash();
        self.prev = hash;
        self.tree.push(hash.as_bytes());
        self.records.push(Record::Entry(signed.encode()));
        if let Some(datoms) = datoms {
            self.records.push(Record::Datoms {
                index: signed.entry.index,
                datoms,
            });
        }
        self.entries.push(signed);
    }

    /// A transaction of `values.len()` datoms in namespace `team/a`, attested by `signer`.
    fn tx(&mut self, values: Vec<Value>, signer: &NodeKey) {
        let namespace = "team/a";
        // The tx id and time the entry will get, to put in its datoms.
        let entry = self.next_entry(namespace, EntryKind::Transaction {
            content_hash: Hash::ZERO,
            datoms: 0,
            author: None,
        });
        let datoms: Vec<Vec<u8>> = values
            .into_iter()
            .enumerate()
            .map(|(i, value)| {
                Datom {
                    namespace: Namespace::new(namespace).expect("valid namespace"),
                    branch: None,
                    entity: EntityId(100 + entry.index),
                    attribute: Attribute::new(if i % 2 == 0 { ":task/title" } else { ":task/rank" })
                        .expect("valid attribute"),
                    value,
                    op: if i == 2 { Op::Retract } else { Op::Assert },
                    valid_from_ns: entry.tx_time_ns,
                    valid_to_ns: if i == 1 { Some(entry.tx_time_ns + 5) } else { None },
                    tx: entry.tx,
                    provenance: Provenance {
                        agent: "agent-1".into(),
                        session: "s".into(),
                        source: if i == 0 { String::new() } else { "seed".into() },
                        confidence: 0.5,
                        status: if i == 1 { Status::Verified } else { Status::Candidate },
                    },
                    salt: None,
                }
                .encode()
            })
            .collect();
        let hashes: Vec<Hash> = datoms.iter().map(|d| Hash::of(d)).collect();
        let entry = AuditEntry {
            kind: EntryKind::Transaction {
                content_hash: tx_content_hash(&hashes),
                datoms: datoms.len() as u32,
                author: None,
            },
            ..entry
            state_root: None,
        };
        self.push(entry, signer, Some(datoms));
    }

    fn key_change(&mut self, action: KeyAction, authorizer: &NodeKey, signer: &NodeKey) {
        let request = KeyChangeRequest::sign(&self.origin, action, authorizer);
        let entry = self.next_entry(
            "",
            EntryKind::KeyChange {
                action: request.action,
                authorizer: request.authorizer,
                authorization: request.authorization,
            },
        );
        self.push(entry, signer, None);
    }

    fn membership(&mut self, members: Vec<(u64, &NodeKey)>, signer: &NodeKey) {
        let entry = self.next_entry(
            "",
            EntryKind::Membership {
                members: members.iter().map(|(id, key)| (*id, key.public())).collect(),
            },
        );
        self.push(entry, signer, None);
    }

    /// A checkpoint of the chain as it is now, signed by the first key, cosigned by the rest.
    fn checkpoint(&mut self, signers: &[&NodeKey]) {
        let checkpoint = Checkpoint {
            origin: self.origin.clone(),
            size: self.tree.size(),
            root: Hash(self.tree.root()),
            tx_time_ns: self.time,
        };
        let mut signed = checkpoint.sign(signers[0]);
        for key in &signers[1..] {
            signed.cosign(key);
        }
        self.records.push(Record::Checkpoint(signed.to_text().into_bytes()));
        self.checkpoints.push(signed);
    }

    /// The export: header, the records, end.
    fn export(&self, node_id: u64) -> Vec<u8> {
        let mut w = ExportWriter::new(Vec::new()).expect("writing to a Vec");
        w.write(&Record::Header {
            origin: self.origin.clone(),
            node_id,
            head_index: self.entries.len() as u64,
        })
        .expect("header");
        for record in &self.records {
            w.write(record).expect("record");
        }
        w.write(&Record::End {
            entries: self.entries.len() as u64,
            checkpoints: self.checkpoints.len() as u64,
        })
        .expect("end");
        w.into_inner().expect("flush")
    }
}

fn values(n: u64) -> Vec<Value> {
    let all = [
        Value::String(format!("task {n}")),
        Value::I64(n as i64),
        Value::Bool(n % 2 == 0),
        Value::Keyword(":status/open".into()),
        Value::Bytes(vec![n as u8; 3]),
        Value::F64(0.25),
        Value::Instant(1_700_000_000),
        Value::Ref(EntityId(7)),
        Value::Json(r#"{"a":1,"b":[true,null]}"#.into()),
    ];
    (0..1 + n as usize % 4).map(|i| all[(2 * n as usize + i) % all.len()].clone()).collect()
}

/// The seed exports, by file name, each verified OK.
fn exports() -> Vec<(&'static str, Vec<u8>, Chain)> {
    let a = founder();
    let a2 = NodeKey::from_seed([8; 32]);
    let b = NodeKey::from_seed([9; 32]);
    let c = NodeKey::from_seed([10; 32]);
    let d = NodeKey::from_seed([11; 32]);
    let mut out = Vec::new();

    // Genesis and its checkpoint only.
    let mut g = Chain::genesis(vec![(1, &a)], &a);
    g.checkpoint(&[&a]);
    out.push(("genesis.export", g.export(1), g));

    // A few transactions, checkpoints every three entries.
    let mut t = Chain::genesis(vec![(1, &a)], &a);
    t.checkpoint(&[&a]);
    for n in 0..5 {
        t.tx(values(n), &a);
        if t.entries.len() % 3 == 0 {
            t.checkpoint(&[&a]);
        }
    }
    out.push(("transactions.export", t.export(1), t));

    // Key changes: admit B, B attests and cosigns, rotate A to A2, admit D, B revokes D.
    let mut k = Chain::genesis(vec![(1, &a)], &a);
    k.checkpoint(&[&a]);
    k.tx(values(1), &a);
    k.key_change(
        KeyAction::Admit {
            node_id: 2,
            key: b.public(),
        },
        &a,
        &a,
    );
    k.membership(vec![(1, &a), (2, &b)], &b);
    k.tx(values(2), &b);
    k.checkpoint(&[&a, &b]);
    k.key_change(
        KeyAction::Rotate {
            node_id: 1,
            old: a.key_id(),
            new: a2.public(),
        },
        &a,
        &a,
    );
    k.tx(values(3), &a2);
    k.key_change(
        KeyAction::Admit {
            node_id: 4,
            key: d.public(),
        },
        &a2,
        &a2,
    );
    k.key_change(
        KeyAction::Revoke {
            node_id: 4,
            key: d.key_id(),
        },
        &b,
        &a2,
    );
    k.tx(values(4), &a2);
    k.checkpoint(&[&a2, &b]);
    out.push(("key_changes.export", k.export(1), k));

    // A node that joined later attests history from before its admission (held pending until
    // the key change admitting it).
    let mut r = Chain::genesis(vec![(1, &a)], &a);
    r.tx(values(5), &c);
    r.key_change(
        KeyAction::Admit {
            node_id: 3,
            key: c.public(),
        },
        &a,
        &c,
    );
    r.tx(values(6), &c);
    r.checkpoint(&[&c, &a]);
    out.push(("replayed.export", r.export(3), r));

    for (name, bytes, chain) in &out {
        for options in [
            VerifyOptions::default(),
            VerifyOptions {
                all: true,
                ..VerifyOptions::default()
            },
            VerifyOptions {
                all: true,
                genesis_keys: Some(vec![a.public()]),
                pin: chain.checkpoints.last().cloned(),
            },
        ] {
            let report = verify_export(&bytes[..], &options, |_, _| {}).expect("the export opens");
            assert!(report.ok(), "{name} does not verify: {:?}", report.failures);
            assert_eq!(report.entries, chain.entries.len() as u64, "{name}");
            assert_eq!(report.checkpoints, chain.checkpoints.len() as u64, "{name}");
        }
    }
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("create the corpus directory");
    std::fs::write(dir.join(name), bytes).expect("write a seed");
}

fn inclusion_seed(size: u64, index: u64, tag: u8) -> Vec<u8> {
    let leaves: Vec<[u8; 32]> = (0..size).map(|i| Blake3::hash_leaf(&[tag, i as u8])).collect();
    let root = subtree_root::<Blake3>(&leaves, 0, size).expect("root");
    let proof = inclusion_proof::<Blake3>(&leaves, index, size).expect("proof");
    let mut out = Vec::new();
    out.extend_from_slice(&index.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&leaves[index as usize]);
    out.extend_from_slice(&root);
    for p in proof {
        out.extend_from_slice(&p);
    }
    out
}

fn consistency_seed(old: u64, new: u64, tag: u8) -> Vec<u8> {
    let leaves: Vec<[u8; 32]> = (0..new).map(|i| Blake3::hash_leaf(&[tag, i as u8])).collect();
    let old_root = subtree_root::<Blake3>(&leaves, 0, old).expect("old root");
    let new_root = subtree_root::<Blake3>(&leaves, 0, new).expect("new root");
    let proof = consistency_proof::<Blake3>(&leaves, old, new).expect("proof");
    let mut out = Vec::new();
    out.extend_from_slice(&old.to_be_bytes());
    out.extend_from_slice(&new.to_be_bytes());
    out.extend_from_slice(&old_root);
    out.extend_from_slice(&new_root);
    for p in proof {
        out.extend_from_slice(&p);
    }
    out
}

fn main() {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "corpus".into()));
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut put = |target: &'static str, name: &str, bytes: &[u8]| {
        write(&out.join(target), name, bytes);
        *counts.entry(target).or_default() += 1;
    };

    for (name, bytes, chain) in exports() {
        put("export_decode", name, &bytes);
        put("export_records", name, &bytes);
        for (i, entry) in chain.entries.iter().enumerate() {
            let stem = name.trim_end_matches(".export");
            put("entry_decode", &format!("{stem}-{}.entry", i + 1), &entry.encode());
        }
        for (i, note) in chain.checkpoints.iter().enumerate() {
            let stem = name.trim_end_matches(".export");
            put("checkpoint_parse", &format!("{stem}-{i}.note"), note.to_text().as_bytes());
        }
    }
    // A note with a cosignature line of a key Engram does not know (a witness), kept as it is.
    let mut note = Checkpoint {
        origin: "witness.example/log".into(),
        size: 42,
        root: Hash([7; 32]),
        tx_time_ns: -5,
    }
    .sign(&founder())
    .to_text();
    let blob = note.trim_end().rsplit_once(' ').expect("a signature line").1.to_string();
    note.push_str(&format!("— witness.example/w1 {blob}\n"));
    assert_eq!(SignedCheckpoint::parse(&note).map(|n| n.signatures.len()), Ok(2));
    put("checkpoint_parse", "witness.note", note.as_bytes());

    for (size, index) in [(1, 0), (2, 1), (7, 3), (13, 12), (64, 37)] {
        put(
            "inclusion_verify",
            &format!("size{size}-index{index}"),
            &inclusion_seed(size, index, 1),
        );
    }
    for (old, new) in [(0, 5), (3, 3), (1, 2), (3, 7), (4, 9), (6, 8), (13, 64)] {
        put(
            "consistency_verify",
            &format!("old{old}-new{new}"),
            &consistency_seed(old, new, 2),
        );
    }

    for (target, n) in counts {
        println!("{n:3} seeds in {}", out.join(target).display());
    }
}
