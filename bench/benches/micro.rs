//! `micro`: criterion benchmarks of the operations every write and every audit pays for.
//!
//! * `canonical`: a datom's canonical encoding and content hash, and a transaction's content
//!   hash over its datoms, as apply computes them;
//! * `apply`: one data transaction applied by the engine into RocksDB, audit entry, Merkle
//!   nodes and synced write included;
//! * `rewrite`: one transaction rewriting a key that already has 10, 1,000 or 10,000 versions
//!   (each timed rewrite adds one more); its cost must not grow with them, since the planner
//!   reads the slot's current-claims row, not its history;
//! * `audit_sign`: signing an audit entry, and checking one attestation;
//! * `chain_verify`: `ChainVerifier` over a 1,000-entry chain, signatures inline and deferred;
//! * `merkle`: appends to the compact tree, and inclusion and consistency proofs made and
//!   checked, for trees of 1,000 and 1,000,000 leaves;
//! * `state_tree`: the state commitment's trie (`engram-statetree`) over 1,000 and 1,000,000
//!   slots (100 and 100,000 entities of 10 attributes): one slot rewritten, keeping the version
//!   before (what a transaction will pay per slot it writes), a slot's next digest set after
//!   reading its last by two walks (`get` then `insert`) and by one (`update`, what apply
//!   does), a slot proven present and its
//!   proof checked, and an entity's 10 slots proven complete and checked;
//! * `peer_auth`: a Raft request's authentication as sender and receiver pay it, signed (an
//!   Ed25519 signature and its check) against tagged (a keyed blake3 hash under the pair key the
//!   two nodes' keys share), for a 1 KiB payload listing three member keys;
//! * `recall`: the text index alone (no server): feeding it 100,000 generated facts, and a
//!   two-word `recall` over them, now and as of halfway.
//!
//! Every benchmark first checks once, untimed, that what it times gives the right answer, so a
//! broken setup fails the run instead of producing a figure.

// A benchmark whose setup fails must abort the run: a figure measured on a broken setup is
// worse than none.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use engram_audit::{
    AuditEntry, ChainError, ChainVerifier, EntryKind, GENESIS_PREV_HASH, NodeKey, SignedEntry,
    tx_content_hash,
};
use engram_core::{Engine, PolicyActor};
use engram_merkle::{
    Blake3, CompactTree, LeafSource, MerkleHasher, consistency_proof, inclusion_proof, subtree_root,
    verify_consistency, verify_inclusion,
};
use engram_storage::WriteBatch;
use engram_storage_rocks::RocksStore;
use engram_types::{
    Attribute, Datom, EntityId, EntityRef, Hash, Namespace, Op, Provenance, RedactPart, RedactRequest,
    Status, TxId, TxOp, TxRequest, Value,
};

type Digest = <Blake3 as MerkleHasher>::Digest;

/// A transaction time in 2023, so valid times and tx times look like a live cluster's.
const EPOCH_NS: i64 = 1_700_000_000_000_000_000;

/// Deterministic text of exactly `len` bytes that differs with `seed`, so equal inputs cannot
/// make hashing look cheaper than it is.
fn text(len: usize, seed: u64) -> String {
    (0..len as u64)
        .map(|i| char::from(b'a' + ((i.wrapping_mul(7) + seed) % 26) as u8))
        .collect()
}

/// SplitMix64: spreads proof positions over the whole tree without a dependency on `rand`.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn provenance() -> Provenance {
    Provenance {
        agent: "planner".into(),
        session: "session-2024-05-01".into(),
        source: "chat:4711".into(),
        confidence: 0.8,
        status: Status::Candidate,
    }
}

// ---------------------------------------------------------------------------------------------
// canonical

fn datom(value_bytes: usize, seed: u64) -> Datom {
    Datom {
        namespace: Namespace::new("team/research").unwrap(),
        branch: None,
        entity: EntityId(10_000 + seed),
        attribute: Attribute::new(":note/text").unwrap(),
        value: Value::String(text(value_bytes, seed)),
        op: Op::Assert,
        valid_from_ns: EPOCH_NS,
        valid_to_ns: None,
        tx: TxId(42),
        provenance: provenance(),
        salt: None,
    }
}

/// What apply computes for a transaction's audit entry: every datom encoded and hashed, then
/// the hashes folded into the content hash.
fn tx_hash(datoms: &[Datom]) -> Hash {
    let hashes: Vec<Hash> = datoms.iter().map(Datom::hash).collect();
    tx_content_hash(&hashes)
}

fn canonical(c: &mut Criterion) {
    let mut group = c.benchmark_group("canonical");
    for (label, size) in [("16B", 16), ("1KiB", 1024)] {
        let d = datom(size, 1);
        let encoded = d.encode();
        assert!(encoded.len() > size, "the value is in the encoding");
        assert_eq!(Datom::decode(&encoded).unwrap(), d);
        assert_eq!(d.hash(), Hash::of(&encoded));
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        group.bench_with_input(BenchmarkId::new("datom_encode", label), &d, |b, d| {
            b.iter(|| black_box(d).encode());
        });
        group.bench_with_input(BenchmarkId::new("datom_hash", label), &d, |b, d| {
            b.iter(|| black_box(d).hash());
        });
    }
    for per_tx in [1u64, 100] {
        for (label, size) in [("16B", 16), ("1KiB", 1024)] {
            let datoms: Vec<Datom> = (0..per_tx).map(|seed| datom(size, seed)).collect();
            let hash = tx_hash(&datoms);
            if per_tx > 1 {
                // The content hash must cover every datom in order, or it would be cheap.
                let mut reordered = datoms.clone();
                reordered.swap(0, 1);
                assert_ne!(tx_hash(&reordered), hash);
            }
            group.throughput(Throughput::Elements(per_tx));
            group.bench_with_input(
                BenchmarkId::new("tx_content_hash", format!("{per_tx}x{label}")),
                &datoms,
                |b, datoms| b.iter(|| tx_hash(black_box(datoms))),
            );
        }
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// apply

/// One node's engine over a fresh RocksDB in a temporary directory, with its genesis applied.
struct Node {
    // Declared before `_dir` so the database closes before its directory is removed.
    engine: Engine,
    store: Arc<RocksStore>,
    /// The last Raft log index applied: every apply takes the next one, as the log does.
    log: u64,
    _dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RocksStore::open(dir.path()).unwrap());
        let key = NodeKey::from_seed([7; 32]);
        let public = key.public();
        let mut engine = Engine::open(store.clone(), Arc::new(key)).unwrap();
        engine
            .apply_membership(1, vec![(1, public)], WriteBatch::new())
            .unwrap();
        Node {
            engine,
            store,
            log: 1,
            _dir: dir,
        }
    }

    /// The leader's proposed time advances 1 ms per entry, so the default checkpoint policy
    /// (every 1,000 entries or 1 s) signs a checkpoint every 1,000 applies, as under steady load.
    fn apply(&mut self, req: &TxRequest) -> engram_core::TxOutcome {
        self.log += 1;
        let time = EPOCH_NS + self.log as i64 * 1_000_000;
        self.engine
            .apply_tx(self.log, time, req, WriteBatch::new())
            .unwrap()
    }

    /// Applies an unsigned redaction (whole, as entries from before parts did, or one part) at
    /// the next log index.
    fn redact(&mut self, req: &RedactRequest, part: Option<&RedactPart>) -> engram_core::TxOutcome {
        self.log += 1;
        let time = EPOCH_NS + self.log as i64 * 1_000_000;
        self.engine
            .apply_redaction(
                self.log,
                time,
                req,
                part,
                &PolicyActor::Unsigned(None),
                WriteBatch::new(),
            )
            .unwrap()
    }
}

/// A data transaction of `datoms` assertions about new entities, four attributes each, the
/// kind of write an agent makes when it records tasks.
fn task_request(datoms: usize) -> TxRequest {
    let ops = (0..datoms)
        .map(|i| {
            let entity = EntityRef::Temp(format!("task-{}", i / 4));
            let (attribute, value) = match i % 4 {
                0 => (":task/title", Value::String(text(40, i as u64))),
                1 => (":task/status", Value::Keyword(":status/open".into())),
                2 => (":task/priority", Value::I64(i as i64)),
                _ => (":task/note", Value::String(text(200, i as u64))),
            };
            TxOp {
                op: Op::Assert,
                entity,
                attribute: Attribute::new(attribute).unwrap(),
                value,
                valid_from_ns: None,
                valid_to_ns: None,
            }
        })
        .collect();
    TxRequest::data(Namespace::new("team/research").unwrap(), ops, provenance())
}

fn apply(c: &mut Criterion) {
    let mut group = c.benchmark_group("apply");
    // Each apply waits for an fsync: milliseconds, so few samples of few iterations each.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    for per_tx in [1usize, 10, 100] {
        let req = task_request(per_tx);
        req.validate().unwrap();
        let mut node = Node::new();
        // The first write of each attribute also records its implicit schema; later ones, which
        // are what a running node mostly does, do not. Apply one untimed to get past it.
        let receipt = node.apply(&req).unwrap();
        assert_eq!(receipt.datom_hashes.len(), per_tx);
        assert_eq!(receipt.audit_index, 2);
        group.throughput(Throughput::Elements(per_tx as u64));
        group.bench_function(BenchmarkId::new("tx", format!("{per_tx}_datoms")), |b| {
            b.iter(|| black_box(node.apply(&req)));
        });
        // A rejected transaction writes no audit entry, so one entry per apply means every
        // timed apply went the whole way.
        assert_eq!(node.engine.head().index, node.log, "an apply was rejected");
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// redact

/// One new entity of `datoms` 100-byte strings, one attribute each: what a redaction of the
/// entity then takes whole.
fn entity_request(datoms: usize) -> TxRequest {
    let ops = (0..datoms)
        .map(|i| TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp("e".into()),
            attribute: Attribute::new(format!(":secret/v{i}")).unwrap(),
            value: Value::String(text(100, i as u64)),
            valid_from_ns: None,
            valid_to_ns: None,
        })
        .collect();
    TxRequest::data(Namespace::new("team/research").unwrap(), ops, provenance())
}

/// A redaction of a fresh entity of `datoms` datoms: whole, in one entry whose record lists
/// each datom as a datom of its own (entries from before parts), or as one part whose record
/// packs the list into one value (what a leader proposes now, in parts of 100).
fn redact(c: &mut Criterion) {
    let mut group = c.benchmark_group("redact");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for (kind, datoms) in [
        ("whole", 100usize),
        ("whole", 1_000),
        ("part", 100),
        ("part", 1_000),
    ] {
        let write = entity_request(datoms);
        write.validate().unwrap();
        let mut node = Node::new();
        let part = (kind == "part").then_some(RedactPart {
            first_tx: None,
            after_key: None,
            limit: datoms as u32,
        });
        group.throughput(Throughput::Elements(datoms as u64));
        group.bench_function(BenchmarkId::new(kind, format!("{datoms}_datoms")), |b| {
            // Each timed redaction takes a fresh entity, written untimed just before.
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let receipt = node.apply(&write).unwrap();
                    let req = RedactRequest {
                        namespace: write.namespace.clone(),
                        entity: receipt.temp_ids["e"],
                        attribute: None,
                        reason: "micro bench".into(),
                        provenance: provenance(),
                    };
                    let started = Instant::now();
                    let done = node.redact(&req, part.as_ref()).unwrap();
                    timed += started.elapsed();
                    let listed = engram_core::redact::listed_in(&*node.store, done.tx).unwrap();
                    assert_eq!(listed.len(), datoms, "the record lists every datom taken");
                }
                timed
            })
        });
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// rewrite

fn rewrite_request(entity: EntityRef, value: i64) -> TxRequest {
    let op = TxOp {
        op: Op::Assert,
        entity,
        attribute: Attribute::new(":counter/value").unwrap(),
        value: Value::I64(value),
        valid_from_ns: None,
        valid_to_ns: None,
    };
    TxRequest::data(Namespace::new("team/research").unwrap(), vec![op], provenance())
}

fn rewrite(c: &mut Criterion) {
    let mut group = c.benchmark_group("rewrite");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    for versions in [10u64, 1_000, 10_000] {
        let mut node = Node::new();
        let first = node
            .apply(&rewrite_request(EntityRef::Temp("k".into()), 0))
            .unwrap();
        let key = EntityRef::Id(first.temp_ids["k"]);
        for v in 1..versions {
            node.apply(&rewrite_request(key.clone(), v as i64)).unwrap();
        }
        let mut next = versions as i64;
        group.bench_function(
            BenchmarkId::new("one_key", format!("from_{versions}_versions")),
            |b| {
                b.iter(|| {
                    next += 1;
                    black_box(node.apply(&rewrite_request(key.clone(), next)))
                });
            },
        );
        assert_eq!(node.engine.head().index, node.log, "a rewrite was rejected");
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// audit_sign

fn tx_entry(index: u64, prev_hash: Hash) -> AuditEntry {
    AuditEntry {
        index,
        tx: TxId(index),
        tx_time_ns: EPOCH_NS + index as i64 * 1_000_000,
        namespace: "team/research".into(),
        kind: EntryKind::Transaction {
            content_hash: Hash::of(&index.to_be_bytes()),
            datoms: 10,
            author: None,
        },
        prev_hash,
        state_root: None,
    }
}

fn audit_sign(c: &mut Criterion) {
    let mut group = c.benchmark_group("audit_sign");
    let key = NodeKey::from_seed([3; 32]);
    let public = key.public();
    let entry = tx_entry(1_234, Hash::of(b"previous entry"));
    let signed = SignedEntry::sign(entry.clone(), &key);
    let signature = signed.attestation.as_ref().expect("signed").signature;
    assert!(public.verify(entry.hash().as_bytes(), &signature));
    let mut forged = signature;
    forged[0] ^= 1;
    assert!(!public.verify(entry.hash().as_bytes(), &forged));

    group.bench_function("sign_entry", |b| {
        // The entry is moved into the signed one; cloning it is setup, not signing.
        b.iter_batched(
            || entry.clone(),
            |entry| SignedEntry::sign(entry, &key),
            BatchSize::SmallInput,
        );
    });
    group.bench_function("verify_attestation", |b| {
        // The entry hash is recomputed, as a verifier holding only the entry must.
        b.iter(|| {
            let signed = black_box(&signed);
            public.verify(signed.entry.hash().as_bytes(), &signature)
        });
    });
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// peer_auth

/// A receiver as the node is one: it binds node 1 to one key, holds its own key, and keeps the
/// sender's key decompressed and the pair key computed (as `ClusterKeys` does).
struct Receiver {
    sender: engram_audit::PublicKey,
    verifier: engram_audit::Verifier,
    own: Arc<NodeKey>,
    pair: [u8; 32],
}

impl engram_raft::peer_auth::PeerKeys for Receiver {
    fn trusts(&self, from: u64, key: &engram_audit::PublicKey) -> Result<bool, String> {
        Ok(from == 1 && *key == self.sender)
    }

    fn signature_verifies(
        &self,
        key: &engram_audit::PublicKey,
        message: &[u8],
        signature: &[u8; 64],
    ) -> bool {
        *key == self.sender && self.verifier.verify(message, signature)
    }

    fn pair_key(
        &self,
        from_key: &engram_audit::PublicKey,
        to_key: &engram_audit::PublicKey,
    ) -> Option<[u8; 32]> {
        (*from_key == self.sender && *to_key == self.own.public()).then_some(self.pair)
    }
}

fn peer_auth(c: &mut Criterion) {
    use engram_raft::peer_auth::{Proof, RpcKind, pair_keys, sign_listing, tag_listing, verify};
    let mut group = c.benchmark_group("peer_auth");
    let sender = engram_audit::KeyRing::new(Arc::new(NodeKey::from_seed([1; 32])));
    let own = Arc::new(NodeKey::from_seed([2; 32]));
    let receiver = Receiver {
        sender: sender.current().public(),
        verifier: sender.current().public().verifier().unwrap(),
        own: own.clone(),
        pair: own.shared_key(&sender.current().public()).unwrap(),
    };
    let members: Vec<(u64, engram_audit::PublicKey)> = (1..=3u8)
        .map(|i| (u64::from(i), NodeKey::from_seed([i; 32]).public()))
        .collect();
    let payload = vec![7u8; 1024];
    let pairs = pair_keys(&sender, &own.public());
    // An append from node 1 to node 2 carrying `payload`, signed or tagged.
    let sign = |payload: &[u8]| sign_listing(&sender, RpcKind::AppendEntries, 1, 2, payload, &members);
    let tag = |payload: &[u8]| tag_listing(&pairs, RpcKind::AppendEntries, 1, 2, payload, &members);
    let signed = sign(&payload);
    let tagged = tag(&payload);
    let check = |auth| verify(Some(auth), RpcKind::AppendEntries, 2, &payload, &receiver);
    assert_eq!(check(&signed), Ok((1, Proof::Signature)));
    assert_eq!(check(&tagged), Ok((1, Proof::Tag)));
    let for_a_vote = tag_listing(&pairs, RpcKind::Vote, 1, 2, &payload, &members);
    assert!(check(&for_a_vote).is_err());

    group.bench_function("sign_request", |b| b.iter(|| sign(black_box(&payload))));
    group.bench_function("check_signed", |b| b.iter(|| check(black_box(&signed))));
    group.bench_function("tag_request", |b| b.iter(|| tag(black_box(&payload))));
    group.bench_function("check_tagged", |b| b.iter(|| check(black_box(&tagged))));
    group.bench_function("pair_key_once", |b| {
        b.iter(|| own.shared_key(black_box(&receiver.sender)));
    });
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// chain_verify

const CHAIN_ENTRIES: u64 = 1_000;

/// A valid chain: genesis trusting three keys, then transactions attested by the keys in turn,
/// as a three-node cluster's replicas would attest them.
fn chain(len: u64, keys: &[NodeKey; 3]) -> Vec<SignedEntry> {
    let mut prev = GENESIS_PREV_HASH;
    (1..=len)
        .map(|index| {
            let entry = if index == 1 {
                AuditEntry {
                    index,
                    tx: TxId(index),
                    tx_time_ns: EPOCH_NS,
                    namespace: String::new(),
                    kind: EntryKind::Membership {
                        members: (1..).zip(keys.iter().map(NodeKey::public)).collect(),
                    },
                    prev_hash: prev,
                    state_root: None,
                }
            } else {
                tx_entry(index, prev)
            };
            prev = entry.hash();
            SignedEntry::sign(entry, &keys[(index % 3) as usize])
        })
        .collect()
}

fn verify_inline(chain: &[SignedEntry]) -> Result<(), ChainError> {
    let mut v = ChainVerifier::new();
    for signed in chain {
        v.push(signed)?;
    }
    v.finish()
}

fn verify_deferred(chain: &[SignedEntry], threads: usize) -> Result<(), ChainError> {
    let mut v = ChainVerifier::new().with_deferred_signatures();
    for signed in chain {
        v.push(signed)?;
    }
    if let Some(first) = v.verify_deferred(threads).into_iter().next() {
        return Err(first);
    }
    v.finish()
}

fn chain_verify(c: &mut Criterion) {
    let mut group = c.benchmark_group("chain_verify");
    // Tens of milliseconds an iteration: flat sampling keeps the run within its time.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(CHAIN_ENTRIES));
    let keys = [11u8, 12, 13].map(|seed| NodeKey::from_seed([seed; 32]));
    let entries = chain(CHAIN_ENTRIES, &keys);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());

    verify_inline(&entries).unwrap();
    verify_deferred(&entries, 1).unwrap();
    verify_deferred(&entries, threads).unwrap();
    // A verifier that skipped signatures would be fast and wrong: make sure both modes look.
    let mut tampered = entries.clone();
    tampered[CHAIN_ENTRIES as usize / 2]
        .attestation
        .as_mut()
        .expect("every entry of the bench chain is signed")
        .signature[10] ^= 1;
    assert!(verify_inline(&tampered).is_err());
    assert!(verify_deferred(&tampered, threads).is_err());

    group.bench_function("inline", |b| {
        b.iter(|| verify_inline(black_box(&entries)));
    });
    group.bench_function("deferred/1_thread", |b| {
        b.iter(|| verify_deferred(black_box(&entries), 1));
    });
    if threads > 1 {
        group.bench_function(format!("deferred/{threads}_threads"), |b| {
            b.iter(|| verify_deferred(black_box(&entries), threads));
        });
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// merkle

/// Every perfect subtree root of a tree, by level, as the engine stores them (its `L` rows):
/// proofs then cost O(log² n) lookups, not O(n) hashes.
struct StoredNodes {
    size: u64,
    /// `levels[j][p]`: the root of leaves `p * 2^j .. (p + 1) * 2^j`; level 0 is the leaves.
    levels: Vec<Vec<Digest>>,
}

impl StoredNodes {
    fn node(&self, level: u32, position: u64) -> Option<Digest> {
        let level = self.levels.get(level as usize)?;
        level.get(usize::try_from(position).ok()?).copied()
    }
}

impl LeafSource<Blake3> for StoredNodes {
    fn leaf_count(&self) -> u64 {
        self.size
    }

    fn leaf_hash(&self, index: u64) -> Option<Digest> {
        self.node(0, index)
    }

    fn cached_subtree_root(&self, start: u64, end: u64) -> Option<Digest> {
        let width = end - start;
        if !width.is_power_of_two() || !start.is_multiple_of(width) {
            return None;
        }
        self.node(width.trailing_zeros(), start / width)
    }
}

/// A tree of `size` leaves, each the leaf hash of an audit-entry-like hash, built the way apply
/// builds it.
fn merkle_tree(size: u64) -> (CompactTree<Blake3>, StoredNodes) {
    let mut tree = CompactTree::<Blake3>::new();
    let mut levels: Vec<Vec<Digest>> = Vec::new();
    for i in 0..size {
        let entry_hash = Hash::of(&i.to_be_bytes());
        tree.push_leaf_hash_visiting(
            Blake3::hash_leaf(entry_hash.as_bytes()),
            |level, position, node| {
                let level = level as usize;
                if levels.len() <= level {
                    levels.push(Vec::new());
                }
                debug_assert_eq!(levels[level].len() as u64, position);
                levels[level].push(*node);
            },
        );
    }
    (tree, StoredNodes { size, levels })
}

/// How many different positions each proof benchmark cycles through.
const SAMPLES: u64 = 256;

fn merkle(c: &mut Criterion) {
    let mut group = c.benchmark_group("merkle");
    for size in [1_000u64, 1_000_000] {
        let (tree, nodes) = merkle_tree(size);
        let root = tree.root();
        // The compact tree and the stored nodes must describe the same tree.
        assert_eq!(subtree_root::<Blake3>(&nodes.levels[0], 0, size).unwrap(), root);
        assert_eq!(subtree_root::<Blake3>(&nodes, 0, size).unwrap(), root);

        let indexes: Vec<u64> = (0..SAMPLES).map(|i| mix(i) % size).collect();
        let inclusions: Vec<(u64, Digest, Vec<Digest>)> = indexes
            .iter()
            .map(|&i| {
                let proof = inclusion_proof::<Blake3>(&nodes, i, size).unwrap();
                let leaf = nodes.leaf_hash(i).unwrap();
                verify_inclusion::<Blake3>(&leaf, i, size, &proof, &root).unwrap();
                (i, leaf, proof)
            })
            .collect();
        let (i, leaf, proof) = &inclusions[0];
        let other = nodes.leaf_hash((i + 1) % size).unwrap();
        assert!(verify_inclusion::<Blake3>(&other, *i, size, proof, &root).is_err());
        assert!(verify_inclusion::<Blake3>(leaf, *i, size, proof, &Blake3::empty_root()).is_err());

        let old_sizes: Vec<u64> = (0..SAMPLES).map(|i| 1 + mix(i + SAMPLES) % (size - 1)).collect();
        let consistencies: Vec<(u64, Digest, Vec<Digest>)> = old_sizes
            .iter()
            .map(|&old| {
                let proof = consistency_proof::<Blake3>(&nodes, old, size).unwrap();
                let old_root = subtree_root::<Blake3>(&nodes, 0, old).unwrap();
                verify_consistency::<Blake3>(old, size, &old_root, &root, &proof).unwrap();
                (old, old_root, proof)
            })
            .collect();
        let (old, _, proof) = &consistencies[0];
        assert!(verify_consistency::<Blake3>(*old, size, &root, &root, proof).is_err());

        group.bench_function(BenchmarkId::new("push", size), |b| {
            // The tree grows by one leaf an iteration; at this size that changes nothing measurable.
            let mut tree = tree.clone();
            let entry_hash = Hash::of(b"next audit entry");
            b.iter(|| tree.push(black_box(entry_hash.as_bytes())));
        });
        group.bench_function(BenchmarkId::new("inclusion_prove", size), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % indexes.len();
                inclusion_proof::<Blake3>(black_box(&nodes), indexes[n], size)
            });
        });
        if size <= 1_000 {
            // Without stored interior nodes a proof rehashes the tree: O(n), shown for contrast.
            group.bench_function(BenchmarkId::new("inclusion_prove_from_leaves", size), |b| {
                let mut n = 0usize;
                b.iter(|| {
                    n = (n + 1) % indexes.len();
                    inclusion_proof::<Blake3>(black_box(&nodes.levels[0]), indexes[n], size)
                });
            });
        }
        group.bench_function(BenchmarkId::new("inclusion_verify", size), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % inclusions.len();
                let (i, leaf, proof) = &inclusions[n];
                verify_inclusion::<Blake3>(leaf, *i, size, black_box(proof), &root)
            });
        });
        group.bench_function(BenchmarkId::new("consistency_prove", size), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % old_sizes.len();
                consistency_proof::<Blake3>(black_box(&nodes), old_sizes[n], size)
            });
        });
        group.bench_function(BenchmarkId::new("consistency_verify", size), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % consistencies.len();
                let (old, old_root, proof) = &consistencies[n];
                verify_consistency::<Blake3>(*old, size, old_root, &root, black_box(proof))
            });
        });
    }
    group.finish();
}

/// The key of attribute `a` of entity `e`: 16 bytes naming the entity, 16 the attribute, the
/// layout that puts one entity's slots in one subtree.
fn slot_key(e: u64, a: u64) -> engram_statetree::Key {
    let mut k = [0u8; 32];
    k[..16].copy_from_slice(&Hash::of(&e.to_be_bytes()).as_bytes()[..16]);
    k[16..].copy_from_slice(&Hash::of(&(a | 1 << 63).to_be_bytes()).as_bytes()[..16]);
    k
}

fn state_tree(c: &mut Criterion) {
    use engram_statetree::{KeyProof, PrefixProof, StateTree};
    let mut group = c.benchmark_group("state_tree");
    for entities in [100u64, 100_000] {
        let slots = entities * 10;
        let tree = StateTree::from_pairs((0..entities).flat_map(|e| {
            (0..10).map(move |a| (slot_key(e, a), *Hash::of(&(e ^ a).to_be_bytes()).as_bytes()))
        }));
        let root = tree.root();
        assert_eq!(tree.len(), slots);
        let picks: Vec<u64> = (0..SAMPLES).map(|i| mix(i) % entities).collect();
        let key_proofs: Vec<(engram_statetree::Key, KeyProof)> = picks
            .iter()
            .map(|&e| {
                let key = slot_key(e, e % 10);
                let proof = tree.prove(&key);
                assert!(proof.verify(&root, &key).unwrap().is_some());
                (key, proof)
            })
            .collect();
        let prefix_proofs: Vec<(engram_statetree::Key, PrefixProof)> = picks
            .iter()
            .map(|&e| {
                let key = slot_key(e, 0);
                let proof = tree.prove_prefix(&key, 128);
                assert_eq!(proof.verify(&root, &key, 128).unwrap().len(), 10);
                (key, proof)
            })
            .collect();
        assert!(key_proofs[0].1.verify(&root, &slot_key(entities + 1, 0)).is_err());

        group.bench_function(BenchmarkId::new("rewrite_slot_keep_version", slots), |b| {
            let mut current = tree.clone();
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                let before = current.clone();
                current.insert(
                    slot_key(picks[n as usize % picks.len()], n % 10),
                    *Hash::of(&n.to_be_bytes()).as_bytes(),
                );
                black_box((before, current.root()))
            });
        });
        // What apply does per written slot: read the slot's digest, then set the next one. Two
        // walks down the same path (`get`, then `insert`) against one (`update`).
        let next_digest = |prev: Option<&[u8; 32]>, n: u64| {
            let mut bytes = prev.copied().unwrap_or_default().to_vec();
            bytes.extend_from_slice(&n.to_be_bytes());
            *Hash::of(&bytes).as_bytes()
        };
        group.bench_function(BenchmarkId::new("step_slot_get_then_insert", slots), |b| {
            let mut current = tree.clone();
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                let key = slot_key(picks[n as usize % picks.len()], n % 10);
                let prev = current.get(&key);
                current.insert(key, next_digest(prev.as_ref(), n));
                black_box(current.len())
            });
        });
        group.bench_function(BenchmarkId::new("step_slot_update", slots), |b| {
            let mut current = tree.clone();
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                let key = slot_key(picks[n as usize % picks.len()], n % 10);
                black_box(current.update(key, |prev| Some(next_digest(prev, n))))
            });
        });
        group.bench_function(BenchmarkId::new("prove_slot", slots), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % key_proofs.len();
                black_box(&tree).prove(&key_proofs[n].0)
            });
        });
        group.bench_function(BenchmarkId::new("verify_slot", slots), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % key_proofs.len();
                let (key, proof) = &key_proofs[n];
                black_box(proof).verify(&root, key)
            });
        });
        group.bench_function(BenchmarkId::new("prove_entity_10_slots", slots), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % prefix_proofs.len();
                black_box(&tree).prove_prefix(&prefix_proofs[n].0, 128)
            });
        });
        group.bench_function(BenchmarkId::new("verify_entity_10_slots", slots), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % prefix_proofs.len();
                let (key, proof) = &prefix_proofs[n];
                black_box(proof).verify(&root, key, 128)
            });
        });
        let bytes: usize = key_proofs.iter().map(|(_, p)| p.encode().len()).sum();
        let entity_bytes: usize = prefix_proofs.iter().map(|(_, p)| p.encode().len()).sum();
        eprintln!(
            "state_tree {slots} slots: slot proof {} bytes, entity proof (10 slots) {} bytes on average",
            bytes / key_proofs.len(),
            entity_bytes / prefix_proofs.len()
        );
    }
    group.finish();
}

/// Facts in the `recall` benchmark's corpus.
const RECALL_FACTS: u64 = 100_000;

/// A generated corpus: fact `i` asserts 6 to 20 words drawn from 20,000 (small word numbers far
/// more often, as in text), by one of 8 agents; every tenth transaction also retracts the fact
/// written 50 transactions before it.
fn recall_corpus(facts: u64) -> engram_recall::RecallIndex {
    use engram_recall::{FactMeta, FactRef, RecallIndex, Scope};
    let scope = Scope {
        namespace: Namespace::new("bench/recall").unwrap(),
        branch: None,
    };
    let mut index = RecallIndex::new();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let fact = |tx: u64| FactRef {
        tx: TxId(tx),
        seq: 0,
        entity: EntityId(tx),
        attribute: Attribute::new(":note/text").unwrap(),
    };
    for tx in 1..=facts {
        let words = 6 + next() % 15;
        let text: Vec<String> = (0..words)
            .map(|_| {
                let r = next() % 20_000;
                format!("w{}", r * r / 20_000)
            })
            .collect();
        let meta = FactMeta {
            agent: format!("agent-{}", tx % 8),
            status: Status::Candidate,
            confidence: 0.5,
            tx_time_ns: tx as i64,
            valid_from_ns: 0,
            valid_to_ns: None,
        };
        index.add_text(&scope, fact(tx), &text.join(" "), meta).unwrap();
        if tx % 10 == 0 && tx > 50 {
            index.end(&scope, &fact(tx - 50), TxId(tx)).unwrap();
        }
    }
    index
}

fn recall(c: &mut Criterion) {
    use engram_recall::{Filter, Query, Scope};
    let scope = Scope {
        namespace: Namespace::new("bench/recall").unwrap(),
        branch: None,
    };
    let index = recall_corpus(RECALL_FACTS);
    let query = |text: &str, as_of: u64| Query {
        text: text.into(),
        as_of: TxId(as_of),
        k: 10,
        filter: Filter::default(),
        ..Query::default()
    };
    // Checked once: common words find a full page, as of now and as of halfway.
    for as_of in [RECALL_FACTS, RECALL_FACTS / 2] {
        let hits = index.recall(&scope, &query("w3 w17", as_of)).unwrap();
        assert_eq!(hits.len(), 10, "as of {as_of}");
        assert!(hits.iter().all(|h| h.fact.tx.0 <= as_of));
    }
    let texts: Vec<String> = (0..64)
        .map(|i| format!("w{} w{}", i * 7 % 500, 1000 + i * 13))
        .collect();

    let mut group = c.benchmark_group("recall");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.throughput(Throughput::Elements(RECALL_FACTS));
    group.bench_function(BenchmarkId::new("feed", RECALL_FACTS), |b| {
        b.iter(|| black_box(recall_corpus(RECALL_FACTS)))
    });
    group.finish();

    let mut group = c.benchmark_group("recall");
    for (name, as_of) in [
        ("search_now", RECALL_FACTS),
        ("search_as_of_half", RECALL_FACTS / 2),
    ] {
        group.bench_function(BenchmarkId::new(name, RECALL_FACTS), |b| {
            let mut n = 0usize;
            b.iter(|| {
                n = (n + 1) % texts.len();
                index.recall(&scope, &query(&texts[n], as_of)).unwrap()
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = micro;
    // Short runs: the whole suite has to finish in a few minutes on a two-core machine.
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = canonical, apply, redact, rewrite, audit_sign, peer_auth, chain_verify, merkle, state_tree, recall
}
criterion_main!(micro);
