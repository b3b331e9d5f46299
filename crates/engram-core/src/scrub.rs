//! The store scrub: reads every row of every space and cross-checks the state's redundant
//! rows, so damage that no request has touched yet is found before a client meets it.
//!
//! What is checked:
//! - **Every row reads.** Each space is walked whole; the engine verifies its own checksums on
//!   the way (RocksDB's block checksums), and [`Store::verify_checksums`] then checks the
//!   blocks no walk reads (filters, table properties). A block that fails is an
//!   [`FindingKind::Unreadable`] finding naming the space and the last key read before it.
//! - **Every index row against its datom.** An AEVT, AVET or VAET row, or a datoms-by-transaction
//!   (`X`) row, must point at an EAVT datom that exists, decodes and yields exactly that row.
//! - **Every datom against its index rows**: an EAVT datom has its AEVT row, its AVET row when
//!   the attribute's schema keeps a value index, its VAET row when its value is a reference,
//!   and the `X` row of its (tx, seq); a branch datom (`b`) has its `X` row.
//! - **Every current-claims row against its slot's history** (`U`): it must be the slot's
//!   datoms folded under the row's cardinality (a slot need not have one).
//! - **Every transaction entry against its datoms**: the hashes of the datoms its `X` rows name
//!   reproduce the entry's content hash and count, and each datom is of that transaction and
//!   namespace.
//! - **The state commitment against the history** (a store whose `Z` rows are complete): every
//!   slot's digest is what folding its history again gives ([`crate::commitment::rebuild`]),
//!   no slot lacks one and none is left over, and the state root the last transaction entry
//!   records is the root of those digests (invariant I13).
//!
//! A mismatch is [`FindingKind::Mismatch`]. The chain itself (links, attestations, keys,
//! checkpoints) is `engram_verify`'s job; the scrub binds the rest of the state to it.
//!
//! The walk stops at the first unreadable block of a space (an engine iterator cannot step
//! over it) and goes on with the next space. Findings are capped at [`MAX_FINDINGS`]; memory
//! stays bounded by that and by the schema's attribute count.
//!
//! [`check_on_start`] is what a node runs before it serves ([`StartCheck`]): the chain tip, the
//! last [`SAMPLE_ENTRIES`] entries, or everything.

use std::collections::HashMap;

use engram_audit::{EntryKind, GENESIS_PREV_HASH, KeyId, SignedEntry, tx_content_hash};
use engram_storage::{Space, StorageError, Store, prefix_end, short_hex_key};
use engram_types::{Attribute, Datom, EntityId, Hash, Namespace, TxId, TxRequest, Value};
use serde::Serialize;

use crate::current::CurrentRow;
use crate::rows::TxLogRow;
use crate::{CoreError, commitment, keys, reads, schema};

/// Findings kept in a report; later ones are only counted.
pub const MAX_FINDINGS: usize = 100;

/// What kind of problem a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// The engine could not read the row back: a checksum or format failure of its files.
    Unreadable,
    /// The row reads but disagrees with the rows it must agree with.
    Mismatch,
}

/// One problem, located.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    /// The key space (`log`, `raft`, `state`; `unknown` when the engine cannot tell).
    pub space: &'static str,
    /// The row's key in hex, shortened when long (for an unreadable block: the last key read
    /// before it, or the key range of the damaged file).
    pub key: String,
    /// What failed.
    pub what: String,
    /// The damaged file, when the engine named it (local use only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            FindingKind::Unreadable => "unreadable",
            FindingKind::Mismatch => "mismatch",
        };
        write!(f, "{kind}: {} key {}: {}", self.space, self.key, self.what)?;
        if let Some(file) = &self.file {
            write!(f, " (file {file})")?;
        }
        Ok(())
    }
}

/// What a scrub read and found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ScrubReport {
    /// Rows read, per space, in [`Space::ALL`] order.
    pub rows: [u64; Space::ALL.len()],
    /// EAVT and branch datoms checked.
    pub datoms: u64,
    /// AEVT, AVET, VAET, `X` and current-claims (`U`) rows checked.
    pub index_rows: u64,
    /// Transaction entries whose datoms were hashed.
    pub transactions: u64,
    /// The first [`MAX_FINDINGS`] problems, in the order found.
    pub findings: Vec<Finding>,
    /// Problems found beyond those kept.
    pub more_findings: u64,
}

impl ScrubReport {
    pub fn ok(&self) -> bool {
        self.findings.is_empty()
    }

    /// The first unreadable finding, if any: the engine's own damage comes before any
    /// mismatch it may have caused.
    pub fn first_unreadable(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.kind == FindingKind::Unreadable)
    }

    fn push(&mut self, finding: Finding) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(finding);
        } else {
            self.more_findings += 1;
        }
    }
}

/// Scrubs the whole store. `progress(space, rows_read_in_space)` is called every 4096 rows
/// and at the end of each space. Only an engine failure that is not corruption (an I/O
/// error) is an `Err`; everything the store holds wrong is a finding.
pub fn scrub(store: &dyn Store, progress: &mut dyn FnMut(Space, u64)) -> Result<ScrubReport, CoreError> {
    let mut checker = Checker::new(store);
    for (i, space) in Space::ALL.into_iter().enumerate() {
        let mut rows = 0u64;
        let mut fatal: Option<CoreError> = None;
        let walked = store.for_each(space, &mut |key, value| {
            rows += 1;
            if rows.is_multiple_of(4096) {
                progress(space, rows);
            }
            if space == Space::State
                && let Err(e) = checker.state_row(key, value)
            {
                fatal = Some(e);
                return Err(StorageError::Engine("scrub stopped".into()));
            }
            Ok(())
        });
        progress(space, rows);
        checker.report.rows[i] = rows;
        if let Some(e) = fatal {
            return Err(e);
        }
        if let Err(e) = walked {
            checker.storage(e)?;
        }
    }
    checker.state_commitment()?;
    if let Err(e) = store.verify_checksums() {
        checker.storage(e)?;
    }
    Ok(checker.report)
}

/// Checks the last `entries` audit entries: each transaction's datoms against its content
/// hash, and each of those datoms against its index rows. A bounded sample for a node's
/// start; [`scrub`] is the whole check.
pub fn scrub_recent(store: &dyn Store, head_index: u64, entries: u64) -> Result<ScrubReport, CoreError> {
    let mut checker = Checker::new(store);
    let from = head_index.saturating_sub(entries.saturating_sub(1)).max(1);
    let start = keys::audit(from);
    let end = prefix_end(&[keys::AUDIT]);
    let rows = match store.scan(Space::State, &start, end.as_deref(), usize::MAX) {
        Ok(rows) => rows,
        Err(e) => {
            checker.storage(e)?;
            return Ok(checker.report);
        }
    };
    for (key, value) in rows {
        checker.report.rows[2] += 1;
        if let Some(datom_keys) = checker.entry(&key, &value)? {
            for eavt_key in datom_keys {
                let Some(bytes) = checker.get(&eavt_key)? else {
                    continue;
                };
                checker.report.rows[2] += 1;
                checker.datom_row(&eavt_key, &bytes)?;
            }
        }
    }
    Ok(checker.report)
}

/// A row a datom needs: its key, the value it must hold (`None`: any) and the index's name.
type Wanted = (Vec<u8>, Option<Vec<u8>>, &'static str);

/// How much of its store a node checks before it serves (`engram serve --verify-on-start`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartCheck {
    /// Nothing.
    None,
    /// The chain tip: it decodes, links to the entry before it, is attested by a key the chain
    /// trusts and is the entry the head row names; its datoms reproduce its content hash and
    /// have their index rows.
    #[default]
    Tip,
    /// The same for the last [`SAMPLE_ENTRIES`] entries.
    Sample,
    /// The whole chain, then the whole store ([`scrub`]).
    Full,
}

/// Entries a [`StartCheck::Sample`] covers, from the tip back.
pub const SAMPLE_ENTRIES: u64 = 1024;

impl std::str::FromStr for StartCheck {
    type Err = String;

    fn from_str(s: &str) -> Result<StartCheck, String> {
        match s {
            "none" => Ok(StartCheck::None),
            "tip" => Ok(StartCheck::Tip),
            "sample" => Ok(StartCheck::Sample),
            "full" => Ok(StartCheck::Full),
            other => Err(format!("{other:?}: expected none, tip, sample or full")),
        }
    }
}

impl std::fmt::Display for StartCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StartCheck::None => "none",
            StartCheck::Tip => "tip",
            StartCheck::Sample => "sample",
            StartCheck::Full => "full",
        })
    }
}

/// Why a start-up check failed.
#[derive(Debug, thiserror::Error)]
pub enum StartCheckError {
    #[error(transparent)]
    Core(#[from] CoreError),
    #[error("audit entry {index}: {what}")]
    Chain { index: u64, what: String },
    #[error("{0}")]
    Store(Finding),
}

impl From<StorageError> for StartCheckError {
    fn from(e: StorageError) -> Self {
        StartCheckError::Core(CoreError::Storage(e))
    }
}

/// What a passed start-up check covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartSummary {
    /// Audit entries whose link and attestation were checked.
    pub entries: u64,
    /// Datoms checked against their entries and index rows.
    pub datoms: u64,
}

/// Runs `depth`'s check over `store`. `own_keys` are this node's keys: an entry it attested
/// before the chain admitted it (a node that joined and is replaying history) is accepted,
/// as the verifier accepts it once the admission arrives; any other unknown signer fails.
pub fn check_on_start(
    store: &dyn Store,
    depth: StartCheck,
    own_keys: &[KeyId],
) -> Result<StartSummary, StartCheckError> {
    let entries = match depth {
        StartCheck::None => return Ok(StartSummary::default()),
        StartCheck::Tip => 1,
        StartCheck::Sample => SAMPLE_ENTRIES,
        StartCheck::Full => u64::MAX,
    };
    let head = crate::reads::head(store)?;
    if head.index == 0 {
        return Ok(StartSummary::default());
    }
    // The check reaches back at least to the last attested entry, whose signature covers the
    // entries after the one before it; the entries after it (the node stopped before signing
    // its last group) are checked for their links and attested when the node opens.
    let attested = crate::reads::attested_index(store)?.min(head.index).max(1);
    let from = head
        .index
        .saturating_sub(entries.saturating_sub(1))
        .max(1)
        .min(attested);
    let checked = check_chain(store, from, head.index, head.hash, own_keys)?;
    let report = match depth {
        StartCheck::Full => scrub(store, &mut |_, _| {})?,
        _ => scrub_recent(store, head.index, entries)?,
    };
    let first = report.first_unreadable().or(report.findings.first()).cloned();
    if let Some(first) = first {
        return Err(StartCheckError::Store(first));
    }
    Ok(StartSummary {
        entries: checked,
        datoms: report.datoms,
    })
}

/// Checks entries `from..=head_index`: each decodes, sits at its index, links to the one
/// before it and, if it carries an attestation, is attested by a key valid then; the last is
/// the one the head row names.
fn check_chain(
    store: &dyn Store,
    from: u64,
    head_index: u64,
    head_hash: Hash,
    own_keys: &[KeyId],
) -> Result<u64, StartCheckError> {
    const PAGE: usize = 1024;
    let fail = |index: u64, what: String| Err(StartCheckError::Chain { index, what });
    let decode = |index: u64, bytes: &[u8]| {
        SignedEntry::decode(bytes).map_err(|e| StartCheckError::Chain {
            index,
            what: format!("does not decode: {e}"),
        })
    };
    let mut prev = if from == 1 {
        GENESIS_PREV_HASH
    } else {
        match store.get(Space::State, &keys::audit(from - 1))? {
            Some(bytes) => decode(from - 1, &bytes)?.entry.hash(),
            None => return fail(from - 1, "is missing".into()),
        }
    };
    let mut signers: HashMap<[u8; 8], Option<engram_audit::KeyRecord>> = HashMap::new();
    let end = prefix_end(&[keys::AUDIT]);
    let mut next = from;
    while next <= head_index {
        let rows = store.scan(Space::State, &keys::audit(next), end.as_deref(), PAGE)?;
        if rows.is_empty() {
            return fail(next, format!("is missing (the head is entry {head_index})"));
        }
        for (_, bytes) in rows {
            let index = next;
            if index > head_index {
                break;
            }
            let signed = decode(index, &bytes)?;
            if signed.entry.index != index {
                return fail(
                    index,
                    format!("is missing (entry {} follows)", signed.entry.index),
                );
            }
            if signed.entry.prev_hash != prev {
                return fail(index, format!("does not link to entry {}", index - 1));
            }
            let hash = signed.entry.hash();
            if let Some(attestation) = &signed.attestation {
                let key_id = attestation.key_id;
                let record = match signers.get(&key_id.0) {
                    Some(r) => r.clone(),
                    None => {
                        let r = crate::reads::signer(store, key_id)?;
                        signers.insert(key_id.0, r.clone());
                        r
                    }
                };
                match record {
                    None if own_keys.contains(&key_id) => {}
                    None => {
                        return fail(
                            index,
                            format!("attested by {key_id}, a key the chain never admitted"),
                        );
                    }
                    Some(k) if !k.key.verify(hash.as_bytes(), &attestation.signature) => {
                        return fail(index, format!("its attestation by {key_id} does not verify"));
                    }
                    Some(k) => {
                        if let Err(fault) = k.valid_at(index) {
                            return fail(index, format!("attestation: {fault}"));
                        }
                    }
                }
            }
            prev = hash;
            next += 1;
        }
    }
    if prev != head_hash {
        return fail(
            head_index,
            "is not the entry the chain head row names (the head row or the entry is damaged)".into(),
        );
    }
    Ok(head_index + 1 - from)
}

struct Checker<'a> {
    store: &'a dyn Store,
    report: ScrubReport,
    /// Whether an attribute keeps a value index now, per (namespace, attribute).
    value_indexed: HashMap<(Namespace, Attribute), bool>,
    /// The last transaction whose tx-log row was read for its datom keys, and what it lists.
    /// Kept because the entry's check and a transaction's datoms read the same row in turn.
    tx_keys: Option<(TxId, Listed)>,
    /// The datoms each redaction record read so far lists (`crate::redact`).
    redactions: HashMap<TxId, Vec<crate::redact::RedactedRef>>,
}

/// A key's parts after the namespace: `ns 0 rest`.
fn split_ns(key: &[u8]) -> Option<(Namespace, &[u8])> {
    let body = key.get(1..)?;
    let end = body.iter().position(|b| *b == 0)?;
    let ns = Namespace::new(std::str::from_utf8(&body[..end]).ok()?.to_string()).ok()?;
    Some((ns, &body[end + 1..]))
}

/// `attr 0 rest`.
fn split_attr(bytes: &[u8]) -> Option<(Attribute, &[u8])> {
    let end = bytes.iter().position(|b| *b == 0)?;
    let attr = Attribute::new(std::str::from_utf8(&bytes[..end]).ok()?.to_string()).ok()?;
    Some((attr, &bytes[end + 1..]))
}

/// `entity tx seq`, exactly.
fn entity_tx_seq(bytes: &[u8]) -> Option<(EntityId, TxId, u32)> {
    (bytes.len() == 20).then(|| keys::trailing_entity_tx_seq(bytes))?
}

impl<'a> Checker<'a> {
    fn new(store: &'a dyn Store) -> Checker<'a> {
        Checker {
            store,
            report: ScrubReport::default(),
            value_indexed: HashMap::new(),
            tx_keys: None,
            redactions: HashMap::new(),
        }
    }

    /// Records a storage error as a finding if it is corruption; any other engine failure
    /// stops the scrub.
    fn storage(&mut self, e: StorageError) -> Result<(), CoreError> {
        match e {
            StorageError::Corruption {
                space,
                key,
                reason,
                file,
            } => {
                self.report.push(Finding {
                    kind: FindingKind::Unreadable,
                    space,
                    key,
                    what: reason,
                    file,
                });
                Ok(())
            }
            other => Err(CoreError::Storage(other)),
        }
    }

    fn mismatch(&mut self, key: &[u8], what: impl Into<String>) {
        self.report.push(Finding {
            kind: FindingKind::Mismatch,
            space: Space::State.name(),
            key: short_hex_key(key),
            what: what.into(),
            file: None,
        });
    }

    /// A state row, or `None` if it is missing or unreadable (an unreadable one is recorded).
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, CoreError> {
        match self.store.get(Space::State, key) {
            Ok(v) => Ok(v),
            Err(e) => self.storage(e).map(|()| None),
        }
    }

    /// Every slot's digest against its history, and the last recorded state root against the
    /// digests (see the module's list). Skipped for a store whose rows are not complete (from
    /// before the state commitment, not yet rebuilt).
    fn state_commitment(&mut self) -> Result<(), CoreError> {
        let view: &dyn engram_storage::ReadView = self.store;
        if !commitment::marked(view)? {
            return Ok(());
        }
        let (stored, rebuilt) = match (commitment::load(view), commitment::rebuild(view)) {
            (Ok(stored), Ok(rebuilt)) => (stored, rebuilt),
            (Err(CoreError::Storage(e)), _) | (_, Err(CoreError::Storage(e))) => return self.storage(e),
            (Err(e), _) | (_, Err(e)) => {
                self.mismatch(
                    &[keys::SLOT_COMMITMENT],
                    format!("the state commitment cannot be checked: {e}"),
                );
                return Ok(());
            }
        };
        let rows: std::collections::BTreeMap<_, _> = stored.pairs().into_iter().collect();
        self.report.index_rows += rows.len() as u64;
        for (slot, digest) in &rows {
            match rebuilt.get(slot) {
                Some(want) if want == digest => {}
                Some(want) => self.mismatch(
                    &commitment::row_key(slot),
                    format!(
                        "the slot's state commitment is {}, its history gives {}",
                        crate::rows::hex(digest),
                        crate::rows::hex(want)
                    ),
                ),
                None => self.mismatch(
                    &commitment::row_key(slot),
                    "a state commitment for a slot with no datom",
                ),
            }
        }
        for slot in rebuilt.keys().filter(|slot| !rows.contains_key(*slot)) {
            self.mismatch(
                &commitment::row_key(slot),
                "a slot with datoms has no state commitment",
            );
        }
        // The newest transaction entry: no later entry changes a slot.
        let head = match reads::head(view) {
            Ok(head) => head,
            Err(CoreError::Storage(e)) => return self.storage(e),
            Err(e) => {
                self.mismatch(keys::META_HEAD, e.to_string());
                return Ok(());
            }
        };
        let mut index = head.index;
        while index > 0 {
            let key = keys::audit(index);
            let Some(bytes) = self.get(&key)? else {
                return Ok(());
            };
            let Ok(signed) = SignedEntry::decode(&bytes) else {
                // The walk reported it.
                return Ok(());
            };
            if let EntryKind::Transaction { .. } = signed.entry.kind {
                if let Some(root) = signed.entry.state_root
                    && root.0 != stored.root()
                {
                    self.mismatch(
                        &key,
                        format!(
                            "audit entry {index} records state root {root}, the slots' digests give {}",
                            crate::rows::hex(&stored.root())
                        ),
                    );
                }
                return Ok(());
            }
            index -= 1;
        }
        Ok(())
    }

    fn state_row(&mut self, key: &[u8], value: &[u8]) -> Result<(), CoreError> {
        match key.first().copied() {
            Some(keys::EAVT | keys::BRANCH_EAVT) => self.datom_row(key, value),
            Some(keys::AEVT) => self.aevt_row(key),
            Some(keys::AVET) => self.avet_row(key),
            Some(keys::VAET) => self.vaet_row(key),
            Some(keys::TX_DATOMS) => self.tx_datom_row(key, value),
            Some(keys::CURRENT) => self.current_row(key, value),
            Some(keys::AUDIT) => self.entry(key, value).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// The datom an index row points at, decoded, or `None` after recording why it is not
    /// there.
    fn indexed_datom(
        &mut self,
        index_key: &[u8],
        eavt_key: &[u8],
        index: &str,
    ) -> Result<Option<Datom>, CoreError> {
        self.report.index_rows += 1;
        let Some(bytes) = self.get(eavt_key)? else {
            self.mismatch(
                index_key,
                format!(
                    "{index} row points at a missing datom {}",
                    short_hex_key(eavt_key)
                ),
            );
            return Ok(None);
        };
        match Datom::decode(&bytes) {
            Ok(d) => Ok(Some(d)),
            // The datom row reports its own decoding failure when the walk reaches it.
            Err(_) => Ok(None),
        }
    }

    /// A current-claims row must be its slot's history folded under the row's cardinality.
    fn current_row(&mut self, key: &[u8], value: &[u8]) -> Result<(), CoreError> {
        self.report.index_rows += 1;
        let parsed = split_ns(key).and_then(|(ns, rest)| {
            let (entity, rest) = rest.split_first_chunk::<8>()?;
            let (attr, rest) = split_attr(rest)?;
            rest.is_empty()
                .then_some((ns, EntityId(u64::from_be_bytes(*entity)), attr))
        });
        let Some((ns, e, attr)) = parsed else {
            self.mismatch(key, "current-claims key does not parse");
            return Ok(());
        };
        let row = match CurrentRow::decode(value) {
            Ok(row) => row,
            Err(err) => {
                self.mismatch(key, err.to_string());
                return Ok(());
            }
        };
        let prefix = keys::eavt_attr(&ns, e, &attr);
        let rows = match self
            .store
            .scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), usize::MAX)
        {
            Ok(rows) => rows,
            Err(err) => return self.storage(err),
        };
        let mut history = Vec::with_capacity(rows.len());
        for (_, bytes) in rows {
            match Datom::decode(&bytes) {
                Ok(d) => history.push(d),
                // The datom row reports its own decoding failure when the walk reaches it.
                Err(_) => return Ok(()),
            }
        }
        if CurrentRow::fold_history(row.cardinality, &history) != row {
            self.mismatch(
                key,
                format!(
                    "current-claims row of entity {e} {attr} is not its {} datoms folded",
                    history.len()
                ),
            );
        }
        Ok(())
    }

    fn aevt_row(&mut self, key: &[u8]) -> Result<(), CoreError> {
        let parsed = split_ns(key).and_then(|(ns, rest)| {
            let (attr, rest) = split_attr(rest)?;
            let (e, tx, seq) = entity_tx_seq(rest)?;
            Some((ns, attr, e, tx, seq))
        });
        let Some((ns, attr, e, tx, seq)) = parsed else {
            self.report.index_rows += 1;
            self.mismatch(key, "AEVT key does not parse");
            return Ok(());
        };
        let eavt = keys::eavt(&ns, e, &attr, tx, seq);
        if let Some(d) = self.indexed_datom(key, &eavt, "AEVT")?
            && keys::aevt(&d.namespace, &d.attribute, d.entity, d.tx, seq) != key
        {
            self.mismatch(key, "AEVT row does not match its datom");
        }
        Ok(())
    }

    fn avet_row(&mut self, key: &[u8]) -> Result<(), CoreError> {
        let parsed = split_ns(key).and_then(|(ns, rest)| {
            let (attr, rest) = split_attr(rest)?;
            let (e, tx, seq) = entity_tx_seq(rest.get(16..)?)?;
            Some((ns, attr, e, tx, seq))
        });
        let Some((ns, attr, e, tx, seq)) = parsed else {
            self.report.index_rows += 1;
            self.mismatch(key, "AVET key does not parse");
            return Ok(());
        };
        let eavt = keys::eavt(&ns, e, &attr, tx, seq);
        if let Some(d) = self.indexed_datom(key, &eavt, "AVET")?
            && keys::avet(&d.namespace, &d.attribute, &d.value, d.entity, d.tx, seq) != key
        {
            self.mismatch(key, "AVET row does not match its datom's value");
        }
        Ok(())
    }

    fn vaet_row(&mut self, key: &[u8]) -> Result<(), CoreError> {
        let parsed = split_ns(key).and_then(|(ns, rest)| {
            let target = EntityId(u64::from_be_bytes(rest.get(..8)?.try_into().ok()?));
            let (attr, rest) = split_attr(&rest[8..])?;
            let (e, tx, seq) = entity_tx_seq(rest)?;
            Some((ns, target, attr, e, tx, seq))
        });
        let Some((ns, target, attr, e, tx, seq)) = parsed else {
            self.report.index_rows += 1;
            self.mismatch(key, "VAET key does not parse");
            return Ok(());
        };
        let eavt = keys::eavt(&ns, e, &attr, tx, seq);
        if let Some(d) = self.indexed_datom(key, &eavt, "VAET")?
            && (d.value != Value::Ref(target)
                || keys::vaet(&d.namespace, target, &d.attribute, d.entity, d.tx, seq) != key)
        {
            self.mismatch(key, "VAET row does not match its datom's reference");
        }
        Ok(())
    }

    /// An `X` row: `tx seq` → the EAVT (or branch) key of that datom.
    fn tx_datom_row(&mut self, key: &[u8], eavt_key: &[u8]) -> Result<(), CoreError> {
        let Some((tx, seq)) = (key.len() == 13).then(|| keys::trailing_tx_seq(key)).flatten() else {
            self.report.index_rows += 1;
            self.mismatch(key, "datoms-by-transaction key does not parse");
            return Ok(());
        };
        if let Some(d) = self.indexed_datom(key, eavt_key, "datoms-by-transaction")?
            && (d.tx != tx || keys::trailing_tx_seq(eavt_key) != Some((tx, seq)))
        {
            self.mismatch(
                key,
                format!(
                    "datoms-by-transaction row names a datom of another transaction ({})",
                    d.tx.0
                ),
            );
        }
        Ok(())
    }

    /// An EAVT or branch datom: it decodes, its key is the one its content gives, and the rows
    /// indexing it exist.
    fn datom_row(&mut self, key: &[u8], value: &[u8]) -> Result<(), CoreError> {
        self.report.datoms += 1;
        let datom = match Datom::decode(value) {
            Ok(d) => d,
            Err(e) => {
                self.mismatch(key, format!("datom does not decode: {e}"));
                return Ok(());
            }
        };
        let Some((tx, seq)) = keys::trailing_tx_seq(key) else {
            self.mismatch(key, "datom key does not parse");
            return Ok(());
        };
        let d = &datom;
        let expected = match &d.branch {
            None => keys::eavt(&d.namespace, d.entity, &d.attribute, d.tx, seq),
            Some(b) => keys::branch_eavt(&d.namespace, b, d.entity, &d.attribute, d.tx, seq),
        };
        if expected != key || tx != d.tx {
            self.mismatch(key, "datom is stored under a key its content does not give");
            return Ok(());
        }
        let mut wanted: Vec<Wanted> = Vec::new();
        self.load_tx_keys(tx)?;
        match self.tx_keys.as_ref().map(|(_, listed)| listed) {
            Some(Listed::Keys(listed)) => {
                let at_seq = usize::try_from(seq).ok().and_then(|i| listed.get(i));
                if at_seq.map(Vec::as_slice) != Some(key) {
                    self.mismatch(
                        key,
                        "datom is not listed at its position by its transaction's tx-log row",
                    );
                }
            }
            // An earlier build's transaction: its `X` row names the datom.
            Some(Listed::ByXRows) => wanted.push((
                keys::tx_datom(tx, seq),
                Some(key.to_vec()),
                "datoms-by-transaction",
            )),
            Some(Listed::NoRow) | None => {
                self.mismatch(key, "datom's transaction has no readable tx-log row")
            }
        }
        if let Some(r) = d.value.redacted() {
            // A value may be missing only where a redaction recorded in the chain took it.
            let listed = self.redaction_listing(r.by_tx)?;
            let this = crate::redact::RedactedRef {
                tx,
                seq,
                hash: r.datom_hash,
                salted: r.commitment.is_some(),
            };
            if !listed.contains(&this) {
                self.mismatch(
                    key,
                    format!(
                        "datom is redacted by tx {}, whose redaction record does not list it",
                        r.by_tx.0
                    ),
                );
            }
        }
        if d.branch.is_none() {
            wanted.push((
                keys::aevt(&d.namespace, &d.attribute, d.entity, tx, seq),
                None,
                "AEVT",
            ));
            // A redacted datom's value-keyed rows went with its value.
            if d.value.redacted().is_none() && self.has_value_index(&d.namespace, &d.attribute)? {
                wanted.push((
                    keys::avet(&d.namespace, &d.attribute, &d.value, d.entity, tx, seq),
                    None,
                    "AVET",
                ));
            }
            if let Value::Ref(target) = d.value {
                wanted.push((
                    keys::vaet(&d.namespace, target, &d.attribute, d.entity, tx, seq),
                    None,
                    "VAET",
                ));
            }
        }
        for (row_key, row_value, index) in wanted {
            match self.store.get(Space::State, &row_key) {
                Ok(None) => self.mismatch(key, format!("datom has no {index} row")),
                Ok(Some(v)) => {
                    if row_value.is_some_and(|want| want != v) {
                        self.mismatch(key, format!("the {index} row names another datom"));
                    }
                }
                Err(e) => self.storage(e)?,
            }
        }
        Ok(())
    }

    /// The datoms redaction record `record` lists (empty if it is no record), read once.
    fn redaction_listing(&mut self, record: TxId) -> Result<&[crate::redact::RedactedRef], CoreError> {
        if !self.redactions.contains_key(&record) {
            let listed = match crate::redact::listed_in(self.store, record) {
                Ok(listed) => listed,
                Err(CoreError::Storage(e)) => {
                    self.storage(e)?;
                    Vec::new()
                }
                // An unreadable record lists nothing: the datom is reported against it.
                Err(CoreError::Corrupt { .. }) => Vec::new(),
                Err(other) => return Err(other),
            };
            self.redactions.insert(record, listed);
        }
        Ok(self
            .redactions
            .get(&record)
            .map(Vec::as_slice)
            .unwrap_or_default())
    }

    /// Reads the datom keys transaction `tx`'s tx-log row lists into `tx_keys`, unless they
    /// are there already.
    fn load_tx_keys(&mut self, tx: TxId) -> Result<(), CoreError> {
        if self.tx_keys.as_ref().is_some_and(|(cached, _)| *cached == tx) {
            return Ok(());
        }
        let listed = match self.get(&keys::tx_log(tx))?.map(|bytes| TxLogRow::decode(&bytes)) {
            Some(Ok(TxLogRow {
                datom_keys: Some(keys),
                ..
            })) => Listed::Keys(keys),
            Some(Ok(_)) => Listed::ByXRows,
            Some(Err(_)) | None => Listed::NoRow,
        };
        self.tx_keys = Some((tx, listed));
        Ok(())
    }

    /// Whether the attribute's schema keeps AVET rows now. Declaring an index backfills the
    /// rows of every datom already recorded, and an index is never dropped, so every datom of
    /// an attribute indexed now has its row.
    fn has_value_index(&mut self, ns: &Namespace, attr: &Attribute) -> Result<bool, CoreError> {
        if let Some(known) = self.value_indexed.get(&(ns.clone(), attr.clone())) {
            return Ok(*known);
        }
        let indexed = match schema::def_at(self.store, ns, attr, None) {
            Ok(def) => def.is_some_and(|d| d.has_value_index()),
            Err(CoreError::Storage(e)) => {
                self.storage(e)?;
                false
            }
            // An undecodable schema row: reported by its own read paths; no AVET expectation.
            Err(CoreError::Corrupt { .. }) => false,
            Err(other) => return Err(other),
        };
        self.value_indexed.insert((ns.clone(), attr.clone()), indexed);
        Ok(indexed)
    }

    /// An audit row: for a transaction entry, its datoms (those its tx-log row lists, or an
    /// earlier build's `X` rows) must hash to
    /// the entry's content hash. Returns the datom keys it checked (`None`: not a transaction,
    /// or it could not be checked).
    fn entry(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<Vec<u8>>>, CoreError> {
        let signed = match SignedEntry::decode(value) {
            Ok(s) => s,
            Err(e) => {
                self.mismatch(key, format!("audit entry does not decode: {e}"));
                return Ok(None);
            }
        };
        let EntryKind::Transaction {
            content_hash,
            datoms,
            author,
        } = signed.entry.kind
        else {
            return Ok(None);
        };
        self.report.transactions += 1;
        let index = signed.entry.index;
        if let Some(author) = author {
            let stored = self.get(&keys::signed_request(signed.entry.tx))?;
            let redacted_by = stored
                .as_deref()
                .and_then(engram_types::redact::parse_redacted_request);
            match (stored, redacted_by) {
                (None, _) => self.mismatch(
                    key,
                    format!(
                        "audit entry {index}: the request agent {} signed is missing",
                        author.principal
                    ),
                ),
                (Some(_), Some(by_tx)) => {
                    let tx = signed.entry.tx;
                    if !self.redaction_listing(by_tx)?.iter().any(|r| r.tx == tx) {
                        self.mismatch(
                            key,
                            format!(
                                "audit entry {index}: the signed request is marked redacted by tx {}, which redacted none of its datoms",
                                by_tx.0
                            ),
                        );
                    }
                }
                // A transaction kept in its salted form hashes to what was signed through the
                // committed form it makes.
                (Some(bytes), None)
                    if TxRequest::signed_hash_of_kept(&author.method, &bytes).ok() != Some(author.request_hash) =>
                {
                    self.mismatch(
                        key,
                        format!(
                            "audit entry {index}: the stored request does not hash to the one agent {} signed",
                            author.principal
                        ),
                    )
                }
                (Some(_), None) => {}
            }
        }
        self.load_tx_keys(signed.entry.tx)?;
        let listed = match self.tx_keys.as_ref().map(|(_, listed)| listed) {
            Some(Listed::Keys(keys)) => Some(keys.clone()),
            Some(Listed::ByXRows) => None,
            Some(Listed::NoRow) | None => {
                self.mismatch(
                    key,
                    format!(
                        "audit entry {index}: the tx-log row of tx {} is missing or does not decode",
                        signed.entry.tx.0
                    ),
                );
                return Ok(None);
            }
        };
        let rows = match reads::datom_keys_of_tx(self.store, signed.entry.tx, listed) {
            Ok(rows) => rows,
            Err(CoreError::Storage(e)) => {
                self.storage(e)?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let mut hashes: Vec<Hash> = Vec::with_capacity(rows.len());
        let mut datom_keys = Vec::with_capacity(rows.len());
        for eavt_key in rows {
            let Some(bytes) = self.get(&eavt_key)? else {
                self.mismatch(
                    key,
                    format!(
                        "audit entry {index}: datom {} is missing",
                        short_hex_key(&eavt_key)
                    ),
                );
                return Ok(None);
            };
            let decoded = Datom::decode(&bytes);
            if let Ok(d) = &decoded
                && (d.tx != signed.entry.tx || d.namespace.as_str() != signed.entry.namespace)
            {
                self.mismatch(
                    key,
                    format!(
                        "audit entry {index}: datom {} belongs to another transaction",
                        short_hex_key(&eavt_key)
                    ),
                );
            }
            // A salted datom hashes its value's commitment, not its stored bytes; a redacted
            // one holds no value: its hash is kept, or recomputed from the kept commitment.
            hashes.push(match &decoded {
                Ok(d) => d.hash_with_encoding(&bytes),
                Err(_) => Hash::of(&bytes),
            });
            datom_keys.push(eavt_key);
        }
        if hashes.len() != datoms as usize {
            self.mismatch(
                key,
                format!(
                    "audit entry {index}: records {datoms} datoms, the store holds {}",
                    hashes.len()
                ),
            );
        } else if tx_content_hash(&hashes) != content_hash {
            self.mismatch(
                key,
                format!("audit entry {index}: its datoms do not reproduce its content hash"),
            );
        }
        Ok(Some(datom_keys))
    }
}

/// What a transaction's tx-log row says of its datoms.
#[derive(Clone)]
enum Listed {
    /// Their keys, in transaction order.
    Keys(Vec<Vec<u8>>),
    /// Nothing: a row of an earlier build, whose `X` rows list the datoms.
    ByXRows,
    /// There is no readable row (the entry's check reports it).
    NoRow,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use engram_audit::NodeKey;
    use engram_storage::{Durability, MemStore, ReadView, WriteBatch};
    use engram_types::{AttributeDef, EntityRef, Op, Provenance, Status, TxOp, TxRequest, Unique, ValueType};

    use super::*;
    use crate::Engine;

    fn ns() -> Namespace {
        Namespace::new("team/scrub").unwrap()
    }

    fn attr(a: &str) -> Attribute {
        Attribute::new(a).unwrap()
    }

    fn op(entity: EntityRef, a: &str, value: Value) -> TxOp {
        TxOp {
            op: Op::Assert,
            entity,
            attribute: attr(a),
            value,
            valid_from_ns: None,
            valid_to_ns: None,
        }
    }

    fn request(ops: Vec<TxOp>, schema: Vec<AttributeDef>) -> TxRequest {
        TxRequest {
            namespace: ns(),
            branch: None,
            schema,
            branch_op: None,
            ops,
            preconditions: vec![],
            idempotency_key: None,
            provenance: Provenance {
                agent: "a1".into(),
                confidence: 0.9,
                status: Status::Candidate,
                ..Default::default()
            },
        }
    }

    fn tx(ops: Vec<TxOp>) -> TxRequest {
        request(ops, Vec::new())
    }

    /// A store with a schema (a unique attribute: AVET rows), two entities, one referring to
    /// the other (a VAET row).
    fn populated() -> (Arc<MemStore>, EntityId, EntityId) {
        let store = Arc::new(MemStore::new());
        let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed([3; 32]))).unwrap();
        let key = NodeKey::from_seed([3; 32]).public();
        engine
            .apply_membership(1, vec![(1, key)], WriteBatch::new())
            .unwrap();
        let mut defs = Vec::new();
        for (ident, value_type, unique) in [
            (":task/title", ValueType::String, Some(Unique::Identity)),
            (":task/parent", ValueType::Ref, None),
        ] {
            let mut def = AttributeDef::new(attr(ident), value_type);
            def.unique = unique;
            defs.push(def);
        }
        let schema = request(Vec::new(), defs);
        engine
            .apply_tx(2, 2_000, &schema, WriteBatch::new())
            .unwrap()
            .unwrap();
        let first = engine
            .apply_tx(
                3,
                3_000,
                &tx(vec![op(
                    EntityRef::Temp("a".into()),
                    ":task/title",
                    Value::String("root".into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        let a = first.temp_ids["a"];
        let second = engine
            .apply_tx(
                4,
                4_000,
                &tx(vec![
                    op(
                        EntityRef::Temp("b".into()),
                        ":task/title",
                        Value::String("child".into()),
                    ),
                    op(EntityRef::Temp("b".into()), ":task/parent", Value::Ref(a)),
                ]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        (store, a, second.temp_ids["b"])
    }

    fn full(store: &dyn Store) -> ScrubReport {
        scrub(store, &mut |_, _| {}).unwrap()
    }

    fn delete(store: &MemStore, key: Vec<u8>) {
        let mut b = WriteBatch::new();
        b.delete(Space::State, key);
        store.write(b, Durability::Sync).unwrap();
    }

    fn put(store: &MemStore, key: Vec<u8>, value: Vec<u8>) {
        let mut b = WriteBatch::new();
        b.put(Space::State, key, value);
        store.write(b, Durability::Sync).unwrap();
    }

    fn eavt_of(store: &MemStore, e: EntityId, a: &str) -> (Vec<u8>, Vec<u8>) {
        let prefix = keys::eavt_attr(&ns(), e, &attr(a));
        store
            .scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), 1)
            .unwrap()
            .pop()
            .unwrap()
    }

    fn assert_names(report: &ScrubReport, key: &[u8], what: &str) {
        let key = short_hex_key(key);
        assert!(
            report.findings.iter().any(|f| f.kind == FindingKind::Mismatch
                && f.space == "state"
                && f.key == key
                && f.what.contains(what)),
            "expected a finding at {key} about {what:?}, got {:#?}",
            report.findings
        );
    }

    #[test]
    fn a_state_commitment_that_is_not_its_history_is_a_mismatch() {
        let (store, a, b) = populated();
        assert!(full(&*store).ok());
        let slot = crate::commitment::slot_key(&ns(), None, a, &attr(":task/title"));
        let row = crate::commitment::row_key(&slot);
        let kept = store
            .get(Space::State, &row)
            .unwrap()
            .expect("the slot has a digest");
        // A digest that is not the slot's history chained.
        let mut wrong = kept.clone();
        wrong[5] ^= 1;
        put(&store, row.clone(), wrong);
        let report = full(&*store);
        assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
        assert!(
            report.findings[0].what.contains("its history gives"),
            "{}",
            report.findings[0]
        );
        // A slot with datoms and no digest, and a digest with no datoms.
        delete(&store, row.clone());
        let stray =
            crate::commitment::row_key(&crate::commitment::slot_key(&ns(), None, b, &attr(":task/none")));
        put(&store, stray, kept.clone());
        let whats: Vec<String> = full(&*store).findings.into_iter().map(|f| f.what).collect();
        assert_eq!(whats.len(), 2, "{whats:?}");
        assert!(
            whats.iter().any(|w| w.contains("has no state commitment")),
            "{whats:?}"
        );
        assert!(
            whats.iter().any(|w| w.contains("slot with no datom")),
            "{whats:?}"
        );
    }

    #[test]
    fn a_recorded_state_root_that_is_not_the_digests_root_is_a_mismatch() {
        let (store, a, _) = populated();
        let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed([3; 32]))).unwrap();
        engine.keep_state_commitment().unwrap();
        engine.record_state_root(true);
        let receipt = engine
            .apply_tx(
                5,
                5_000,
                &tx(vec![op(
                    EntityRef::Id(a),
                    ":task/title",
                    Value::String("renamed".into()),
                )]),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        assert!(full(&*store).ok());
        // Another digest for one slot, consistent with nothing the entry recorded: the slot
        // check and the root check both see it.
        let slot = crate::commitment::slot_key(&ns(), None, a, &attr(":task/title"));
        put(
            &store,
            crate::commitment::row_key(&slot),
            crate::commitment::encode_row(&[7; 32]),
        );
        let whats: Vec<String> = full(&*store).findings.into_iter().map(|f| f.what).collect();
        assert!(
            whats
                .iter()
                .any(|w| w.contains(&format!("audit entry {} records state root", receipt.audit_index))),
            "{whats:?}"
        );
    }

    #[test]
    fn an_intact_store_scrubs_clean() {
        let (store, _, _) = populated();
        let report = full(&*store);
        assert!(report.ok(), "{:#?}", report.findings);
        assert!(report.datoms >= 3, "{report:?}");
        // AEVT + X for each of the 3 data datoms, AVET for the two titles, VAET for the
        // parent, and the schema's own datoms.
        assert!(report.index_rows >= 9, "{report:?}");
        assert_eq!(report.transactions, 3);
        let head = crate::reads::head(&*store).unwrap();
        assert!(scrub_recent(&*store, head.index, 2).unwrap().ok());
    }

    #[test]
    fn a_deleted_index_row_is_named_from_its_datom() {
        let (store, _, b) = populated();
        let (eavt, bytes) = eavt_of(&store, b, ":task/parent");
        let d = Datom::decode(&bytes).unwrap();
        let (tx, seq) = keys::trailing_tx_seq(&eavt).unwrap();
        let Value::Ref(target) = d.value else {
            panic!("a ref")
        };
        delete(&store, keys::vaet(&ns(), target, &d.attribute, b, tx, seq));
        let report = full(&*store);
        assert_names(&report, &eavt, "no VAET row");
        assert_eq!(report.findings.len(), 1, "{:#?}", report.findings);

        // The sample check at start finds it too: the datom belongs to the last entry.
        let head = crate::reads::head(&*store).unwrap();
        let recent = scrub_recent(&*store, head.index, 1).unwrap();
        assert_names(&recent, &eavt, "no VAET row");
    }

    #[test]
    fn an_altered_index_row_is_named() {
        let (store, a, _) = populated();
        let (eavt, bytes) = eavt_of(&store, a, ":task/title");
        let d = Datom::decode(&bytes).unwrap();
        let (tx, seq) = keys::trailing_tx_seq(&eavt).unwrap();
        // An AVET row for a value the datom does not hold (what a flipped digest byte gives),
        // and the real one gone.
        let real = keys::avet(&ns(), &d.attribute, &d.value, a, tx, seq);
        let forged = keys::avet(&ns(), &d.attribute, &Value::String("rot".into()), a, tx, seq);
        delete(&store, real);
        put(&store, forged.clone(), Vec::new());
        let report = full(&*store);
        assert_names(&report, &forged, "does not match its datom's value");
        assert_names(&report, &eavt, "no AVET row");
    }

    #[test]
    fn an_altered_datom_is_named_against_its_entry() {
        let (store, a, _) = populated();
        let (eavt, bytes) = eavt_of(&store, a, ":task/title");
        let mut d = Datom::decode(&bytes).unwrap();
        // Same key, same indexes (the value's digest aside), but not what the entry hashed.
        d.provenance.confidence = 0.1;
        put(&store, eavt.clone(), d.encode());
        let report = full(&*store);
        let entry_key = keys::audit(3);
        assert_names(
            &report,
            &entry_key,
            "audit entry 3: its datoms do not reproduce its content hash",
        );
    }

    #[test]
    fn a_deleted_datom_is_named_by_its_index_rows_and_its_entry() {
        let (store, a, _) = populated();
        let (eavt, bytes) = eavt_of(&store, a, ":task/title");
        let d = Datom::decode(&bytes).unwrap();
        let (tx, seq) = keys::trailing_tx_seq(&eavt).unwrap();
        delete(&store, eavt.clone());
        let report = full(&*store);
        assert_names(
            &report,
            &keys::aevt(&ns(), &d.attribute, a, tx, seq),
            "AEVT row points at a missing datom",
        );
        assert_names(&report, &keys::audit(3), "audit entry 3: datom");
    }

    /// Rewrites every tx-log row as a build that kept `X` rows stored it, with those rows.
    fn as_earlier_build(store: &MemStore) {
        let mut b = WriteBatch::new();
        let rows = store
            .scan(
                Space::State,
                &[keys::TX_LOG],
                prefix_end(&[keys::TX_LOG]).as_deref(),
                usize::MAX,
            )
            .unwrap();
        for (key, value) in rows {
            let mut row = TxLogRow::decode(&value).unwrap();
            let tx = TxId(keys::u64_after_tag(&key).unwrap());
            for (seq, datom_key) in row.datom_keys.take().unwrap().into_iter().enumerate() {
                b.put(Space::State, keys::tx_datom(tx, seq as u32), datom_key);
            }
            b.put(Space::State, key, row.encode());
        }
        store.write(b, Durability::Sync).unwrap();
    }

    #[test]
    fn a_datom_its_tx_log_row_does_not_list_is_named() {
        let (store, _, b) = populated();
        let (eavt, _) = eavt_of(&store, b, ":task/parent");
        let (tx, _) = keys::trailing_tx_seq(&eavt).unwrap();
        let row_key = keys::tx_log(tx);
        let mut row = TxLogRow::decode(&store.get(Space::State, &row_key).unwrap().unwrap()).unwrap();
        row.datom_keys.as_mut().unwrap().reverse();
        put(&store, row_key, row.encode());
        let report = full(&*store);
        assert_names(
            &report,
            &eavt,
            "not listed at its position by its transaction's tx-log row",
        );
        // The entry of that transaction (genesis, the schema, then `a`'s and `b`'s).
        assert_names(&report, &keys::audit(4), "do not reproduce its content hash");
    }

    #[test]
    fn an_earlier_builds_layout_scrubs_clean_and_reads_the_same() {
        let (store, a, b) = populated();
        // What the reads by transaction (watches, diffs) see: every transaction with its datoms.
        let tail = |store: &MemStore| {
            let (txs, _) = crate::reads::tx_log_range(store, TxId(1), TxId(10), usize::MAX).unwrap();
            txs.into_iter()
                .map(|t| {
                    (
                        t.namespace,
                        t.branch,
                        t.record.receipt,
                        t.record.datoms,
                        t.datom_bytes,
                    )
                })
                .collect::<Vec<_>>()
        };
        let before = tail(&store);
        assert!(before.iter().any(|t| t.3.iter().any(|d| d.entity == a)));
        assert!(before.iter().any(|t| t.3.iter().any(|d| d.entity == b)));
        let first_key = crate::reads::datom_key_of_tx(&*store, before[1].2.tx, 0).unwrap();
        assert!(first_key.is_some());
        as_earlier_build(&store);
        let x_rows = store
            .scan(
                Space::State,
                &[keys::TX_DATOMS],
                prefix_end(&[keys::TX_DATOMS]).as_deref(),
                usize::MAX,
            )
            .unwrap();
        let datoms: usize = before.iter().map(|t| t.3.len()).sum();
        assert!(datoms >= 3, "{before:?}");
        assert_eq!(x_rows.len(), datoms, "the earlier layout has an X row per datom");
        let report = full(&*store);
        assert!(report.ok(), "{:#?}", report.findings);
        assert_eq!(tail(&store), before);
        assert_eq!(
            crate::reads::datom_key_of_tx(&*store, before[1].2.tx, 0).unwrap(),
            first_key
        );
        // An X row that names the wrong datom is still caught in that layout.
        let (eavt, _) = eavt_of(&store, b, ":task/parent");
        let (tx, seq) = keys::trailing_tx_seq(&eavt).unwrap();
        let (other, _) = eavt_of(&store, b, ":task/title");
        put(&store, keys::tx_datom(tx, seq), other);
        let report = full(&*store);
        assert_names(
            &report,
            &eavt,
            "the datoms-by-transaction row names another datom",
        );
    }

    #[test]
    fn start_checks_pass_an_intact_store_and_name_what_fails() {
        let (store, a, _) = populated();
        for depth in [
            StartCheck::None,
            StartCheck::Tip,
            StartCheck::Sample,
            StartCheck::Full,
        ] {
            check_on_start(&*store, depth, &[]).unwrap();
        }
        assert_eq!(check_on_start(&*store, StartCheck::Full, &[]).unwrap().entries, 4);
        assert_eq!("sample".parse::<StartCheck>(), Ok(StartCheck::Sample));
        assert!("most".parse::<StartCheck>().is_err());

        // The tip's entry altered (its attestation no longer verifies): every depth but none
        // refuses, naming the entry.
        let tip = keys::audit(4);
        let mut bytes = store.get(Space::State, &tip).unwrap().unwrap();
        let mut signed = SignedEntry::decode(&bytes).unwrap();
        signed.entry.tx_time_ns += 1;
        put(&store, tip.clone(), signed.encode());
        let e = check_on_start(&*store, StartCheck::Tip, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "audit entry 4: its attestation by {} does not verify",
                signed.attestation.as_ref().unwrap().key_id
            )
        );
        put(&store, tip, std::mem::take(&mut bytes));
        check_on_start(&*store, StartCheck::Tip, &[]).unwrap();

        // A datom of an older entry altered: beyond the tip, found by the deeper checks.
        let (eavt, bytes) = eavt_of(&store, a, ":task/title");
        let mut d = Datom::decode(&bytes).unwrap();
        d.provenance.confidence = 0.2;
        put(&store, eavt, d.encode());
        check_on_start(&*store, StartCheck::Tip, &[]).unwrap();
        for depth in [StartCheck::Sample, StartCheck::Full] {
            let e = check_on_start(&*store, depth, &[]).unwrap_err();
            assert!(
                e.to_string()
                    .contains("audit entry 3: its datoms do not reproduce its content hash"),
                "{depth}: {e}"
            );
        }
    }

    #[test]
    fn the_tip_check_reaches_back_to_the_last_attested_entry() {
        // The node stopped after writing a group's entries (3 and 4) and before attesting it.
        let (store, _, _) = populated();
        let mut stored = Vec::new();
        for index in [3, 4] {
            let key = keys::audit(index);
            let bytes = store.get(Space::State, &key).unwrap().unwrap();
            let entry = SignedEntry::decode(&bytes).unwrap().entry;
            put(
                &store,
                key.clone(),
                SignedEntry::unattested(entry.clone()).encode(),
            );
            stored.push((key, entry));
        }
        put(&store, keys::META_ATTESTED.to_vec(), 2u64.to_be_bytes().to_vec());
        // Accepted (the node attests the tail when it opens), and entry 2's attestation, the
        // last one, is among what was checked.
        assert_eq!(check_on_start(&*store, StartCheck::Tip, &[]).unwrap().entries, 3);
        // An unattested entry altered: the link of the entry after it names it.
        let (key, mut entry) = stored[0].clone();
        entry.tx_time_ns += 1;
        put(&store, key, SignedEntry::unattested(entry).encode());
        let e = check_on_start(&*store, StartCheck::Tip, &[]).unwrap_err();
        assert_eq!(e.to_string(), "audit entry 4: does not link to entry 3");
    }

    #[test]
    fn an_undecodable_datom_is_named() {
        let (store, a, _) = populated();
        let (eavt, mut bytes) = eavt_of(&store, a, ":task/title");
        bytes[0] = 0x7f; // an unknown format version
        put(&store, eavt.clone(), bytes);
        let report = full(&*store);
        assert_names(&report, &eavt, "datom does not decode");
    }
}
