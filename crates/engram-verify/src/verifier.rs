//! The offline verifier: reads an export as a stream and checks everything in it against
//! everything else, keeping O(keys + checkpoints) state.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use engram_audit::{
    Author, ChainError, ChainVerifier, EntryKind, KeyRecord, PublicKey, SignedCheckpoint, SignedEntry,
    tx_content_hash,
};
use engram_merkle::{Blake3, CompactTree, MerkleHasher};
use engram_statetree::StateTree;
use engram_types::redact::RedactedRef;
use engram_types::{Datom, Hash, TxId, slot};
use serde::Serialize;

use crate::authorship::Authorship;
use crate::format::{EXPORT_FORMAT_VERSION, ExportReader, Next, OpenError, Record};

/// What to check beyond the export itself.
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    /// Keep going after the first failure and report every one.
    pub all: bool,
    /// The trust anchor: the keys genesis must list. Without it the export's own genesis is
    /// taken as the anchor, and the report says so.
    pub genesis_keys: Option<Vec<PublicKey>>,
    /// A checkpoint obtained earlier (from this or another node): the export's history must
    /// contain it, which catches a rewritten or truncated history even when the export is
    /// internally consistent.
    pub pin: Option<SignedCheckpoint>,
}

/// One failed check, located as precisely as the export allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The audit entry (chain index) the failure is about; `None` for file-level failures.
    pub index: Option<u64>,
    /// Byte offset of the record that failed, when the failure is about one record.
    pub offset: Option<u64>,
    /// The field that failed, e.g. `prev_hash`, `attestation.signature`, `datoms`,
    /// `checkpoint.root`.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Some(index) => write!(f, "audit entry {index}, {}: {}", self.field, self.message)?,
            None => write!(f, "{}: {}", self.field, self.message)?,
        }
        if let Some(offset) = self.offset {
            write!(f, " (record at byte {offset})")?;
        }
        Ok(())
    }
}

/// One key as the verified chain records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyReport {
    pub key_id: String,
    pub public_key: String,
    pub node_id: u64,
    pub admitted_at: u64,
    pub retired_at: Option<u64>,
    pub revoked_at: Option<u64>,
}

impl From<&KeyRecord> for KeyReport {
    fn from(k: &KeyRecord) -> Self {
        KeyReport {
            key_id: k.key.key_id().to_string(),
            public_key: hex(&k.key.0),
            node_id: k.node_id,
            admitted_at: k.admitted_at,
            retired_at: k.retired_at,
            revoked_at: k.revoked_at,
        }
    }
}

/// What was verified, and every failure found (the first only, unless `all`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub format_version: u16,
    pub origin: Option<String>,
    pub exported_by_node: Option<u64>,
    pub entries: u64,
    pub transactions: u64,
    pub datoms: u64,
    /// Transaction entries whose recorded state root was checked against the map the chain's
    /// datoms give (I13): every slot's history chained (`engram_types::slot`).
    pub state_roots: u64,
    /// The state root after the last entry, once any entry recorded one.
    pub state_root: Option<String>,
    pub checkpoints: u64,
    /// Transactions whose entries record an agent's signature, each checked (see
    /// `authorship`): how many per agent.
    pub signed_by_agent: BTreeMap<String, u64>,
    pub head_index: u64,
    pub head_hash: Option<String>,
    /// The Merkle root of all verified entries.
    pub tree_root: String,
    /// What the verification is anchored on.
    pub anchor: String,
    /// The tree size of the pinned checkpoint, if one was given and it verified.
    pub pinned_size: Option<u64>,
    pub keys: Vec<KeyReport>,
    /// Every datom whose value a redaction recorded in the chain took, each checked against
    /// its record (a value missing without one is a failure instead).
    pub redacted: Vec<RedactedReport>,
    pub failures: Vec<Failure>,
    /// Whether verification stopped at the first failure (without `all`). Signatures are
    /// checked in batches, so the counts and the head above can run past the failing entry (by
    /// at most one batch of 8192 entries): they say how far the export was read, the failure
    /// says where it first fails.
    pub stopped_early: bool,
}

/// One redacted datom: "entry `entry` datom `seq` redacted by entry `by_entry`".
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RedactedReport {
    pub entry: u64,
    pub seq: u32,
    pub by_entry: u64,
    /// The kept hash is of the datom's unsalted encoding (formats 1 and 2, written before
    /// salts): whoever holds a guess of the value can test it against the hash. `false`: the
    /// hash was salted (formats 4 and 5), as the redaction record lists it.
    pub guessable: bool,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Why an export could not be verified at all: unreadable, not tampered.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("reading the export: {0}")]
    Io(#[from] std::io::Error),
}

/// How many entries' signatures are queued before they are checked, in batches on every core.
/// Large enough to keep the threads busy, small enough that a verifier stopping at the first
/// failure does not read far past it.
const SIGNATURE_BATCH_ENTRIES: usize = 8192;

/// Verifies an export read from `input`. `progress(bytes_read, entries_checked)` is called
/// after every record.
pub fn verify_export<R: Read>(
    input: R,
    options: &VerifyOptions,
    progress: impl FnMut(u64, u64),
) -> Result<Report, VerifyError> {
    verify_with(input, options, Some(SIGNATURE_BATCH_ENTRIES), progress)
}

/// `signature_batch`: how many entries' signatures to queue between batched checks; `None`
/// checks each inline (the reference the batched check is tested against).
fn verify_with<R: Read>(
    input: R,
    options: &VerifyOptions,
    signature_batch: Option<usize>,
    mut progress: impl FnMut(u64, u64),
) -> Result<Report, VerifyError> {
    let mut reader = ExportReader::open(input)?;
    let mut v = Verifier::new(options, signature_batch);
    v.format_version = reader.version();
    loop {
        if v.stop() {
            break;
        }
        match reader.next_record() {
            Ok(Next::Record { offset, record }) => v.record(offset, record),
            Ok(Next::Eof) => break,
            Err(Ok(io)) => return Err(VerifyError::Io(io)),
            Err(Err(frame)) => {
                // A damaged frame cannot say what it held; it is located after the last
                // entry read.
                let index = v.chain.checked() + 1;
                let reason = format!("{} (after entry {})", frame.reason, v.chain.checked());
                v.fail(Some(index), Some(frame.offset), "record", reason);
                break;
            }
        }
        progress(reader.offset(), v.chain.checked());
    }
    Ok(v.finish())
}

struct PendingTx {
    index: u64,
    tx: u64,
    tx_time_ns: i64,
    namespace: String,
    content_hash: Hash,
    datoms: u32,
    author: Option<Box<Author>>,
    state_root: Option<Hash>,
}

/// A transaction whose entry records an agent's signature, waiting for the signed request.
struct PendingRequest {
    index: u64,
    tx_time_ns: i64,
    namespace: String,
    author: Box<Author>,
    datoms: Vec<Datom>,
}

struct Verifier<'a> {
    options: &'a VerifyOptions,
    chain: ChainVerifier,
    tree: CompactTree<Blake3>,
    records: u64,
    /// (chain index, record offset) of each entry whose signature the chain verifier holds
    /// queued, in chain order, so a signature failure names its record.
    queued: Vec<(u64, u64)>,
    /// Entries queued before their signatures are checked; `None`: checked inline.
    signature_batch: Option<usize>,
    /// Threads for the queued signatures.
    threads: usize,
    header: Option<(String, u64, u64)>,
    end: Option<(u64, u64, u64)>,
    awaiting_datoms: Option<PendingTx>,
    awaiting_request: Option<PendingRequest>,
    authorship: Authorship,
    transactions: u64,
    datoms: u64,
    /// Redacted datoms seen, waiting for the record that must list them: (entry index, seq,
    /// what the record must list, the redacting tx).
    redacted: Vec<(u64, u32, RedactedRef, u64)>,
    /// What the redaction records seen list, by the (tx, seq) of each datom listed.
    listed: HashMap<(u64, u32), Listing>,
    /// Checkpoints seen, checked against the final key history at the end: (offset, note).
    checkpoints: Vec<(u64, SignedCheckpoint)>,
    /// The root at the pinned size, once the tree reached it.
    root_at_pin: Option<[u8; 32]>,
    failures: Vec<Failure>,
    /// The format version the export declares.
    format_version: u16,
    /// The state commitment's map, every transaction's datoms chained into their slots
    /// (`engram_types::slot`), to check the state root an entry records.
    state: StateTree,
    /// Entries whose recorded state root was checked.
    state_roots: u64,
    /// A datom failed its entry's content hash: the roots after it are not checked (each would
    /// fail for that one reason).
    state_unchecked: bool,
}

impl<'a> Verifier<'a> {
    fn new(options: &'a VerifyOptions, signature_batch: Option<usize>) -> Verifier<'a> {
        let chain = match &options.genesis_keys {
            Some(keys) => ChainVerifier::with_genesis_keys(keys.clone()),
            None => ChainVerifier::new(),
        };
        Verifier {
            options,
            chain: match signature_batch {
                Some(_) => chain.with_deferred_signatures(),
                None => chain,
            },
            tree: CompactTree::new(),
            records: 0,
            queued: Vec::new(),
            signature_batch,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            header: None,
            end: None,
            awaiting_datoms: None,
            awaiting_request: None,
            authorship: Authorship::default(),
            transactions: 0,
            datoms: 0,
            redacted: Vec::new(),
            listed: HashMap::new(),
            checkpoints: Vec::new(),
            root_at_pin: None,
            failures: Vec::new(),
            format_version: EXPORT_FORMAT_VERSION,
            state: StateTree::new(),
            state_roots: 0,
            state_unchecked: false,
        }
    }

    fn stop(&self) -> bool {
        !self.options.all && !self.failures.is_empty()
    }

    fn fail(&mut self, index: Option<u64>, offset: Option<u64>, field: &str, message: impl Into<String>) {
        self.failures.push(Failure {
            index,
            offset,
            field: field.to_string(),
            message: message.into(),
        });
    }

    fn chain_failure(&mut self, error: ChainError, offset: u64) {
        self.fail(
            Some(error.index),
            Some(offset),
            error.fault.field(),
            fault_message(&error),
        );
    }

    /// Checks the queued signatures and files their failures where the inline check would
    /// have: after every failure from a record at or before the entry's own, before any from a
    /// later record. (Failures found while streaming are in record order, so this keeps the
    /// list in the order an inline check produces it, and its first element the first failure.)
    fn flush_signatures(&mut self) {
        let errors = self.chain.verify_deferred(self.threads);
        let queued = std::mem::take(&mut self.queued);
        for error in errors {
            // Every queued signature is recorded with its entry's offset; were one missing, the
            // failure would still be reported, without an offset, rather than lost.
            let offset = queued
                .binary_search_by_key(&error.index, |(index, _)| *index)
                .ok()
                .map(|at| queued[at].1);
            let at = match offset {
                Some(offset) => self
                    .failures
                    .partition_point(|f| f.offset.is_some_and(|o| o <= offset)),
                None => self.failures.len(),
            };
            self.failures.insert(
                at,
                Failure {
                    index: Some(error.index),
                    offset,
                    field: error.fault.field().to_string(),
                    message: fault_message(&error),
                },
            );
        }
    }

    fn record(&mut self, offset: u64, record: Record) {
        self.records += 1;
        if let Some((_, _, end_offset)) = self.end {
            self.fail(
                None,
                Some(offset),
                "end",
                format!(
                    "a record follows the end record at byte {end_offset} (data appended after the export)"
                ),
            );
            return;
        }
        if self.records == 1 && !matches!(record, Record::Header { .. }) {
            self.fail(
                None,
                Some(offset),
                "header",
                "the export does not start with its header record",
            );
        }
        if !matches!(record, Record::Datoms { .. })
            && let Some(pending) = self.awaiting_datoms.take()
        {
            self.fail(
                Some(pending.index),
                Some(offset),
                "datoms",
                "the transaction's datoms record is missing",
            );
        }
        if !matches!(record, Record::Request { .. })
            && let Some(pending) = self.awaiting_request.take()
        {
            self.request_missing(&pending, Some(offset));
        }
        match record {
            Record::Header {
                origin,
                node_id,
                head_index,
            } => {
                if self.records != 1 {
                    self.fail(None, Some(offset), "header", "a second header record");
                }
                self.header = Some((origin, node_id, head_index));
            }
            Record::Entry(bytes) => self.entry(offset, &bytes),
            Record::Datoms { index, datoms } => self.tx_datoms(offset, index, &datoms),
            Record::Request { index, bytes } => self.request(offset, index, &bytes),
            Record::Checkpoint(text) => self.checkpoint(offset, &text),
            Record::End { entries, checkpoints } => self.end = Some((entries, checkpoints, offset)),
        }
    }

    fn entry(&mut self, offset: u64, bytes: &[u8]) {
        let next = self.chain.checked() + 1;
        let queued_before = self.chain.deferred();
        let signed = match SignedEntry::decode(bytes) {
            Ok(signed) => signed,
            Err(e) => {
                self.fail(
                    Some(next),
                    Some(offset),
                    "encoding",
                    format!("the entry does not decode: {e}"),
                );
                return;
            }
        };
        let hash = if self.options.all {
            let (hash, errors) = self.chain.push_all(&signed);
            for error in errors {
                self.chain_failure(error, offset);
            }
            hash
        } else {
            match self.chain.push(&signed) {
                Ok(hash) => hash,
                Err(error) => {
                    self.chain_failure(error, offset);
                    return;
                }
            }
        };
        if self.chain.deferred() > queued_before {
            self.queued.push((next, offset));
            if self
                .signature_batch
                .is_some_and(|batch| self.queued.len() >= batch)
            {
                self.flush_signatures();
            }
        }
        self.tree.push(hash.as_bytes());
        if let Some(pin) = &self.options.pin
            && pin.checkpoint.size == self.tree.size()
        {
            self.root_at_pin = Some(self.tree.root());
        }
        let state_root = signed.entry.state_root;
        if let EntryKind::Transaction {
            content_hash,
            datoms,
            author,
        } = signed.entry.kind
        {
            self.transactions += 1;
            self.awaiting_datoms = Some(PendingTx {
                index: signed.entry.index,
                tx: signed.entry.tx.0,
                tx_time_ns: signed.entry.tx_time_ns,
                namespace: signed.entry.namespace.clone(),
                content_hash,
                datoms,
                author,
                state_root,
            });
        }
    }

    fn tx_datoms(&mut self, offset: u64, index: u64, datoms: &[Vec<u8>]) {
        let Some(tx) = self.awaiting_datoms.take() else {
            self.fail(
                Some(index),
                Some(offset),
                "datoms",
                "a datoms record that follows no transaction entry",
            );
            return;
        };
        if tx.index != index {
            self.fail(
                Some(tx.index),
                Some(offset),
                "datoms",
                format!("the datoms record names entry {index}"),
            );
            return;
        }
        self.datoms += datoms.len() as u64;
        if datoms.len() != tx.datoms as usize {
            self.fail(
                Some(index),
                Some(offset),
                "datoms",
                format!(
                    "{} datoms exported, the entry records {} (a datom was added or removed)",
                    datoms.len(),
                    tx.datoms
                ),
            );
        }
        let mut hashes = Vec::with_capacity(datoms.len());
        let mut decoded = Vec::with_capacity(datoms.len());
        for (seq, bytes) in datoms.iter().enumerate() {
            let decoded_here = Datom::decode(bytes);
            // A redacted datom is stored without its value: its hash is the one kept from
            // before, which the entry's content hash checks like any other.
            let redacted = decoded_here
                .as_ref()
                .ok()
                .and_then(|d| d.value.redacted().cloned());
            match &redacted {
                Some(r) => {
                    hashes.push(r.datom_hash);
                    let seq = seq as u32;
                    let listed = RedactedRef {
                        tx: TxId(tx.tx),
                        seq,
                        hash: r.datom_hash,
                        salted: r.commitment.is_some(),
                    };
                    self.redacted.push((index, seq, listed, r.by_tx.0));
                }
                // A salted datom hashes its value's commitment, not its stored bytes.
                None => hashes.push(match &decoded_here {
                    Ok(d) => d.hash_with_encoding(bytes),
                    Err(_) => Hash::of(bytes),
                }),
            }
            match decoded_here {
                Ok(d) if d.tx.0 != tx.tx => self.fail(
                    Some(index),
                    Some(offset),
                    &format!("datoms[{seq}].tx"),
                    format!("{} is not the entry's tx {}", d.tx.0, tx.tx),
                ),
                Ok(d) if d.namespace.as_str() != tx.namespace => self.fail(
                    Some(index),
                    Some(offset),
                    &format!("datoms[{seq}].namespace"),
                    format!(
                        "{:?} is not the entry's namespace {:?}",
                        d.namespace.as_str(),
                        tx.namespace
                    ),
                ),
                Ok(d) => decoded.push(d),
                Err(e) => self.fail(
                    Some(index),
                    Some(offset),
                    &format!("datoms[{seq}]"),
                    format!("does not decode: {e}"),
                ),
            }
        }
        if tx.namespace == engram_access::SYSTEM_NAMESPACE {
            for r in RedactedRef::listed_by(&decoded) {
                self.listed.insert(
                    (r.tx.0, r.seq),
                    Listing {
                        hash: r.hash,
                        salted: r.salted,
                        record_tx: tx.tx,
                        record_entry: index,
                    },
                );
            }
        }
        let computed = tx_content_hash(&hashes);
        let altered = computed != tx.content_hash;
        if altered {
            self.fail(
                Some(index),
                Some(offset),
                "datoms",
                format!(
                    "the datoms hash to {computed}, the entry's content_hash is {} (a datom was altered)",
                    tx.content_hash
                ),
            );
            // Every later root would differ for the same reason: one failure says it.
            self.state_unchecked = true;
        }
        if decoded.len() == datoms.len() {
            self.chain_slots(offset, index, &decoded, &hashes, tx.state_root);
        }
        // A signed change's own datoms (a rotation, say) count from after its signature is
        // checked, against the agents as they were before it.
        match tx.author {
            Some(author) => {
                self.awaiting_request = Some(PendingRequest {
                    index,
                    tx_time_ns: tx.tx_time_ns,
                    namespace: tx.namespace.clone(),
                    author,
                    datoms: decoded,
                });
            }
            None => self.authorship.observe(&decoded),
        }
    }

    /// Chains a transaction's datoms into their slots' digests, and checks the state root
    /// its entry records (if it records one) against the map's.
    fn chain_slots(
        &mut self,
        offset: u64,
        index: u64,
        datoms: &[Datom],
        hashes: &[Hash],
        recorded: Option<Hash>,
    ) {
        let mut by_slot: std::collections::BTreeMap<[u8; 32], Vec<Hash>> = Default::default();
        for (d, h) in datoms.iter().zip(hashes) {
            let key = slot::slot_key(&d.namespace, d.branch.as_ref(), d.entity, &d.attribute);
            by_slot.entry(key).or_default().push(*h);
        }
        for (key, written) in by_slot {
            let prev = self.state.get(&key);
            if let Some(d) = datoms.first() {
                self.state.insert(key, slot::step(prev.as_ref(), d.tx, &written));
            }
        }
        if let Some(root) = recorded
            && !self.state_unchecked
        {
            self.state_roots += 1;
            let computed = Hash(self.state.root());
            if computed != root {
                self.fail(
                    Some(index),
                    Some(offset),
                    "state_root",
                    format!(
                        "the entry records state root {root}, the datoms of the chain up to it give {computed} (a datom or the root was altered, or a transaction left out)"
                    ),
                );
            }
        }
    }

    /// The request an agent signed, for the entry whose datoms came just before.
    fn request(&mut self, offset: u64, index: u64, bytes: &[u8]) {
        let Some(pending) = self.awaiting_request.take() else {
            self.fail(
                Some(index),
                Some(offset),
                "author.request",
                "a request record that follows no transaction signed by an agent",
            );
            return;
        };
        if pending.index != index {
            self.fail(
                Some(pending.index),
                Some(offset),
                "author.request",
                format!("the request record names entry {index}"),
            );
            return;
        }
        // A request whose values a redaction took is a marker naming the redaction: it must
        // name one that took a datom of this transaction.
        let request = match engram_types::redact::parse_redacted_request(bytes) {
            None => Some(bytes),
            Some(by_tx) => {
                if !pending
                    .datoms
                    .iter()
                    .any(|d| d.value.redacted().is_some_and(|r| r.by_tx == by_tx))
                {
                    self.fail(
                        Some(index),
                        Some(offset),
                        "author.request",
                        format!(
                            "the request is marked redacted by tx {}, which redacted none of this transaction's datoms",
                            by_tx.0
                        ),
                    );
                }
                None
            }
        };
        let faults = self.authorship.check(
            index,
            pending.tx_time_ns,
            &pending.namespace,
            &pending.author,
            &pending.datoms,
            request,
        );
        self.authorship.observe(&pending.datoms);
        for (field, message) in faults {
            self.fail(Some(index), Some(offset), field, message);
        }
    }

    fn request_missing(&mut self, pending: &PendingRequest, offset: Option<u64>) {
        self.authorship.observe(&pending.datoms);
        self.fail(
            Some(pending.index),
            offset,
            "author.request",
            format!(
                "the entry records a request signed by agent {}, and the export does not carry it",
                pending.author.principal
            ),
        );
    }

    fn checkpoint(&mut self, offset: u64, text: &[u8]) {
        let at = Some(self.chain.checked());
        let note = match SignedCheckpoint::parse_bytes(text) {
            Ok(note) => note,
            Err(e) => {
                self.fail(at, Some(offset), "checkpoint", format!("does not parse: {e}"));
                return;
            }
        };
        let cp = &note.checkpoint;
        if cp.size != self.tree.size() {
            self.fail(
                at,
                Some(offset),
                "checkpoint.size",
                format!(
                    "covers {} entries but follows entry {} (checkpoints follow the entry that completes them)",
                    cp.size,
                    self.tree.size()
                ),
            );
            return;
        }
        if Some(cp.origin.as_str()) != self.chain.origin() {
            self.fail(
                at,
                Some(offset),
                "checkpoint.origin",
                format!(
                    "{:?} is not this chain's origin {:?}",
                    cp.origin,
                    self.chain.origin()
                ),
            );
        }
        let root = self.tree.root();
        if cp.root.0 != root {
            self.fail(
                at,
                Some(offset),
                "checkpoint.root",
                format!(
                    "{} differs from the Merkle root {} of the exported entries 1..={}",
                    cp.root,
                    hex(&root),
                    cp.size
                ),
            );
        }
        if cp.tx_time_ns != self.chain.head_tx_time_ns() {
            self.fail(
                at,
                Some(offset),
                "checkpoint.tx_time",
                format!(
                    "{} ns is not the time of entry {}, {} ns",
                    cp.tx_time_ns,
                    cp.size,
                    self.chain.head_tx_time_ns()
                ),
            );
        }
        self.checkpoints.push((offset, note));
    }

    /// Checks a checkpoint's signatures against the whole key history: at least one signer
    /// the chain admits, none revoked, none rotated out before the checkpoint's size.
    fn signer_fault(&self, note: &SignedCheckpoint) -> Option<String> {
        let keys = self.chain.keys();
        let signers = note.signers(keys.values().map(|k| &k.key));
        if signers.is_empty() {
            return Some(format!(
                "signed by no key the chain admits (signature names: {})",
                note.signatures
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        for key in signers {
            let Some(record) = keys.get(&key.key_id()) else {
                continue;
            };
            if let Some(at) = record.revoked_at {
                return Some(format!("signed by key {}, revoked at entry {at}", key.key_id()));
            }
            if let Some(at) = record.retired_at.filter(|at| note.checkpoint.size > *at) {
                return Some(format!(
                    "signed by key {}, rotated out at entry {at}, for a later tree size",
                    key.key_id()
                ));
            }
        }
        None
    }

    fn finish(mut self) -> Report {
        // Whatever ended the read (the end of the file, a failure, a damaged frame), the
        // signatures read so far are judged before anything is reported.
        self.flush_signatures();
        let stopped_early = self.stop();
        if !stopped_early {
            self.final_checks();
        }
        let redacted = if stopped_early {
            Vec::new()
        } else {
            self.redactions()
        };
        if !self.options.all {
            self.failures.truncate(1);
        }
        let anchor = match (&self.options.genesis_keys, &self.options.pin) {
            (Some(_), _) => "the genesis keys given".to_string(),
            (None, Some(_)) => "the pinned checkpoint (genesis taken from the export)".to_string(),
            (None, None) => {
                "the export's own genesis entry (give --genesis-key or --pin to anchor it independently)"
                    .to_string()
            }
        };
        Report {
            format_version: self.format_version,
            origin: self.chain.origin().map(str::to_string),
            exported_by_node: self.header.as_ref().map(|(_, node, _)| *node),
            entries: self.chain.checked(),
            transactions: self.transactions,
            datoms: self.datoms,
            state_roots: self.state_roots,
            state_root: (self.state_roots > 0).then(|| hex(&self.state.root())),
            checkpoints: self.checkpoints.len() as u64,
            signed_by_agent: std::mem::take(&mut self.authorship.signed),
            head_index: self.chain.checked(),
            head_hash: self.chain.head().map(|h| h.to_hex()),
            tree_root: hex(&self.tree.root()),
            anchor,
            pinned_size: self.options.pin.as_ref().map(|p| p.checkpoint.size),
            keys: self.chain.keys().values().map(KeyReport::from).collect(),
            redacted,
            failures: self.failures,
            stopped_early,
        }
    }

    /// Every redacted datom against the record that took its value; a report line for each.
    fn redactions(&mut self) -> Vec<RedactedReport> {
        let mut out = Vec::new();
        for (entry, seq, want, by_tx) in std::mem::take(&mut self.redacted) {
            match self.listed.get(&(want.tx.0, want.seq)) {
                Some(l)
                    if (l.hash, l.salted) == (want.hash, want.salted)
                        && l.record_tx == by_tx
                        && l.record_entry > entry =>
                {
                    out.push(RedactedReport {
                        entry,
                        seq,
                        by_entry: l.record_entry,
                        guessable: !want.salted,
                    })
                }
                _ => self.fail(
                    Some(entry),
                    None,
                    &format!("datoms[{seq}].value"),
                    format!(
                        "the value is missing, marked redacted by tx {by_tx}, and no later redaction record lists this datom"
                    ),
                ),
            }
        }
        out
    }

    fn final_checks(&mut self) {
        let after_last = Some(self.chain.checked() + 1);
        if let Some(pending) = self.awaiting_datoms.take() {
            self.fail(
                Some(pending.index),
                None,
                "datoms",
                "the transaction's datoms record is missing",
            );
        }
        if let Some(pending) = self.awaiting_request.take() {
            self.request_missing(&pending, None);
        }
        for error in self.chain.unadmitted().into_iter().chain(self.chain.uncovered()) {
            self.fail(
                Some(error.index),
                None,
                error.fault.field(),
                fault_message(&error),
            );
        }
        let faults: Vec<(u64, u64, String)> = self
            .checkpoints
            .iter()
            .filter_map(|(offset, note)| {
                self.signer_fault(note)
                    .map(|f| (note.checkpoint.size, *offset, f))
            })
            .collect();
        for (size, offset, fault) in faults {
            self.fail(Some(size), Some(offset), "checkpoint.signature", fault);
        }
        match &self.header {
            None => self.fail(None, None, "header", "the export has no header record"),
            Some((origin, _, _))
                if Some(origin.as_str()) != self.chain.origin() && self.chain.checked() > 0 =>
            {
                let message = format!(
                    "names origin {origin:?}, but the chain's genesis gives {:?}",
                    self.chain.origin()
                );
                self.fail(None, None, "header.origin", message);
            }
            Some((_, _, head)) if *head != self.chain.checked() => {
                let message = format!(
                    "says the chain's head was entry {head} at export, the export holds {} entries",
                    self.chain.checked()
                );
                self.fail(
                    Some(self.chain.checked().min(*head) + 1),
                    None,
                    "header.head_index",
                    message,
                );
            }
            Some(_) => {}
        }
        match self.end {
            None => self.fail(
                after_last,
                None,
                "end",
                format!(
                    "the export stops after entry {} without its end record (it was truncated)",
                    self.chain.checked()
                ),
            ),
            Some((entries, checkpoints, offset)) => {
                if entries != self.chain.checked() || checkpoints != self.checkpoints.len() as u64 {
                    self.fail(
                        after_last,
                        Some(offset),
                        "end",
                        format!(
                            "the end record counts {entries} entries and {checkpoints} checkpoints, the export holds {} and {}",
                            self.chain.checked(),
                            self.checkpoints.len()
                        ),
                    );
                }
            }
        }
        if let Some(pin) = self.options.pin.clone() {
            self.check_pin(&pin);
        }
    }

    fn check_pin(&mut self, pin: &SignedCheckpoint) {
        let cp = &pin.checkpoint;
        if Some(cp.origin.as_str()) != self.chain.origin() {
            self.fail(
                None,
                None,
                "pin.origin",
                format!(
                    "the pinned checkpoint is for {:?}, this chain is {:?}",
                    cp.origin,
                    self.chain.origin()
                ),
            );
            return;
        }
        if let Some(fault) = self.signer_fault(pin) {
            self.fail(None, None, "pin.signature", fault);
        }
        if self.tree.size() < cp.size {
            self.fail(
                Some(self.tree.size() + 1),
                None,
                "pin.size",
                format!(
                    "the export ends at entry {}, but the pinned checkpoint covers {} entries (the tail was truncated)",
                    self.tree.size(),
                    cp.size
                ),
            );
            return;
        }
        if cp.size == 0 {
            return;
        }
        match self.root_at_pin {
            Some(root) if root == cp.root.0 => {}
            Some(root) => self.fail(
                Some(cp.size),
                None,
                "pin.root",
                format!(
                    "the exported entries 1..={} have Merkle root {}, the pinned checkpoint says {} (history was rewritten)",
                    cp.size,
                    hex(&root),
                    cp.root
                ),
            ),
            None => {}
        }
    }
}

/// A chain fault's message without its leading field name, which the failure names already.
fn fault_message(error: &ChainError) -> String {
    let text = error.fault.to_string();
    let prefix = format!("{}: ", error.fault.field());
    text.strip_prefix(&prefix).map_or(text.clone(), str::to_string)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Merkle leaf hash Engram uses for an audit entry hash.
pub fn leaf_hash(entry_hash: &Hash) -> [u8; 32] {
    Blake3::hash_leaf(entry_hash.as_bytes())
}

/// One datom as a redaction record lists it: its kept hash, whether that hash was salted, and
/// the record's transaction and audit entry.
struct Listing {
    hash: Hash,
    salted: bool,
    record_tx: u64,
    record_entry: u64,
}

#[cfg(test)]
mod tests {
    use engram_audit::{AuditEntry, Checkpoint, GENESIS_PREV_HASH, NodeKey};
    use engram_types::TxId;

    use super::*;
    use crate::format::ExportWriter;

    /// Genesis trusting two keys, then `len - 1` empty transactions signed by turns; `damage`
    /// edits the records (after signing) before they are written.
    fn export(len: u64, damage: impl FnOnce(&mut Vec<Record>, &mut Vec<SignedEntry>)) -> Vec<u8> {
        let keys = [NodeKey::from_seed([21; 32]), NodeKey::from_seed([22; 32])];
        let mut entries: Vec<SignedEntry> = Vec::new();
        let mut prev = GENESIS_PREV_HASH;
        for index in 1..=len {
            let kind = if index == 1 {
                EntryKind::Membership {
                    members: vec![(1, keys[0].public()), (2, keys[1].public())],
                }
            } else {
                EntryKind::Transaction {
                    content_hash: tx_content_hash(&[]),
                    datoms: 0,
                    author: None,
                }
            };
            let entry = AuditEntry {
                index,
                tx: TxId(index),
                tx_time_ns: index as i64,
                namespace: if index == 1 { String::new() } else { "ns".into() },
                kind,
                prev_hash: prev,
                state_root: None,
            };
            prev = entry.hash();
            entries.push(SignedEntry::sign(entry, &keys[(index % 2) as usize]));
        }
        let mut datoms: Vec<Record> = (2..=len)
            .map(|index| Record::Datoms {
                index,
                datoms: vec![],
            })
            .collect();
        damage(&mut datoms, &mut entries);
        let mut w = ExportWriter::new(Vec::new()).unwrap();
        w.write(&Record::Header {
            origin: Checkpoint::origin_for(&entries[0].entry.hash()),
            node_id: 1,
            head_index: len,
        })
        .unwrap();
        for (n, entry) in entries.iter().enumerate() {
            w.write(&Record::Entry(entry.encode())).unwrap();
            if n > 0 {
                w.write(&datoms[n - 1]).unwrap();
            }
        }
        w.write(&Record::End {
            entries: len,
            checkpoints: 0,
        })
        .unwrap();
        w.into_inner().unwrap()
    }

    fn failures(bytes: &[u8], all: bool, signature_batch: Option<usize>) -> Vec<Failure> {
        let options = VerifyOptions {
            all,
            ..Default::default()
        };
        verify_with(bytes, &options, signature_batch, |_, _| {})
            .unwrap()
            .failures
    }

    #[test]
    fn batched_signatures_fail_exactly_where_inline_checks_fail() {
        let honest = export(60, |_, _| {});
        assert!(failures(&honest, true, Some(8)).is_empty());
        let damaged = export(60, |datoms, entries| {
            entries[9].attestation.as_mut().unwrap().signature[20] ^= 1; // entry 10: signature
            datoms[28] = Record::Datoms {
                index: 30,
                datoms: vec![b"extra".to_vec()],
            }; // entry 30: datoms
            entries[39].entry.tx_time_ns += 1; // entry 40: signature, and entry 41's link
            entries[54].attestation.as_mut().unwrap().signature[63] |= 0x80; // entry 55: non-canonical s
        });
        let inline = failures(&damaged, true, None);
        let named: Vec<(Option<u64>, &str)> = inline.iter().map(|f| (f.index, f.field.as_str())).collect();
        assert_eq!(
            named,
            vec![
                (Some(10), "attestation.signature"),
                (Some(30), "datoms"),
                (Some(30), "datoms[0]"),
                (Some(30), "datoms"),
                (Some(40), "attestation.signature"),
                (Some(41), "prev_hash"),
                (Some(55), "attestation.signature"),
            ],
            "{inline:#?}"
        );
        for batch in [1, 3, 8, 1000] {
            assert_eq!(
                failures(&damaged, true, Some(batch)),
                inline,
                "all, batches of {batch}"
            );
            assert_eq!(
                failures(&damaged, false, Some(batch)),
                inline[..1],
                "first failure, batches of {batch}"
            );
        }
        // With the first signature intact, the first failure is a later record's, whichever
        // batch holds the damaged signatures read past it.
        let later = export(60, |datoms, entries| {
            datoms[28] = Record::Datoms {
                index: 30,
                datoms: vec![b"extra".to_vec()],
            };
            entries[39].attestation.as_mut().unwrap().signature[0] ^= 1;
        });
        let first = failures(&later, false, None);
        assert_eq!((first[0].index, first[0].field.as_str()), (Some(30), "datoms"));
        for batch in [1, 8, 1000] {
            assert_eq!(failures(&later, false, Some(batch)), first, "batches of {batch}");
        }
    }

    #[test]
    fn every_entry_needs_an_attestation_at_or_after_it() {
        // Attested once per group of five, as nodes applying groups store it: verifies.
        let grouped = export(30, |_, entries| {
            for e in entries.iter_mut().filter(|e| e.entry.index % 5 != 0) {
                e.attestation = None;
            }
        });
        for batch in [None, Some(1), Some(8)] {
            assert!(failures(&grouped, true, batch).is_empty(), "batches of {batch:?}");
        }
        // The last group's attestation is gone: the first entry after the last attested one
        // (26) is named, with the field, whatever the batching.
        let uncovered = export(30, |_, entries| {
            for e in entries.iter_mut().filter(|e| e.entry.index > 25) {
                e.attestation = None;
            }
        });
        for batch in [None, Some(1), Some(8)] {
            let named: Vec<(Option<u64>, String)> = failures(&uncovered, false, batch)
                .into_iter()
                .map(|f| (f.index, f.field))
                .collect();
            assert_eq!(
                named,
                vec![(Some(26), "attestation".to_string())],
                "batches of {batch:?}"
            );
        }
    }
}
