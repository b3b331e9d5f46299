//! The state's shared row layouts and the outcome of applying an entry: the bottom of the
//! crate, which every other file may import and which imports none of them.

use std::fmt;

use engram_merkle::{Blake3, CompactTree};
use engram_types::{Attribute, BranchName, EntityId, Hash, Namespace, TxId, TxReceipt, Value, ValueType};
use serde::{Deserialize, Serialize};

use crate::CoreError;

/// The tip of the audit chain and the counters apply needs, persisted at `Mhead` in the same
/// batch as every change to them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChainHead {
    /// Index of the last audit entry (0: empty chain).
    pub index: u64,
    /// Hash of the last audit entry (the genesis prev-hash when empty).
    pub hash: Hash,
    /// Log index of the last audit entry.
    pub tx: TxId,
    /// Transaction time of the last audit entry; never decreases.
    pub tx_time_ns: i64,
    /// The cluster-wide entity counter ids were allocated from before each namespace drew its
    /// own (see `keys::entity_id`). No longer advanced: kept so that heads written before
    /// still decode, and so the head's encoding is unchanged.
    pub next_entity: u64,
    /// The Merkle tree over the entry hashes 1..=index, as its frontier: the roots of its
    /// perfect subtrees, largest first (see `engram_merkle::CompactTree`).
    pub frontier: Vec<Hash>,
}

impl ChainHead {
    /// The Merkle tree of the chain so far.
    pub fn tree(&self) -> Result<CompactTree<Blake3>, CoreError> {
        CompactTree::from_frontier(self.index, self.frontier.iter().map(|h| h.0).collect())
            .map_err(|e| CoreError::corrupt("chain head frontier", e))
    }

    /// The Merkle root over entries 1..=index.
    pub fn tree_root(&self) -> Result<Hash, CoreError> {
        Ok(Hash(self.tree()?.root()))
    }
}

/// The last checkpoint this node signed, persisted at `Mcheckpoint`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LastCheckpoint {
    pub size: u64,
    pub tx_time_ns: i64,
}

/// Why a transaction was refused at apply. A rejected transaction changes nothing but the
/// applied log position.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Rejection {
    /// An `expect` guard did not hold.
    PreconditionFailed {
        entity: EntityId,
        attribute: Attribute,
        expected: Option<Value>,
        actual: Option<Value>,
    },
    /// The entity does not exist in the transaction's namespace.
    UnknownEntity(EntityId),
    /// The value's type differs from the attribute's established type.
    TypeMismatch {
        attribute: Attribute,
        expected: ValueType,
        found: ValueType,
    },
    /// A retraction of a value that is not the attribute's current value.
    NotCurrent {
        entity: EntityId,
        attribute: Attribute,
        value: Value,
    },
    /// A key change whose authorisation does not hold at this point of the chain.
    KeyChange(String),
    /// The namespace declares its schema and this attribute is not in it.
    UnknownAttribute(Attribute),
    /// The attribute is deprecated: it takes no new assertions.
    Deprecated(Attribute),
    /// Another entity already holds this value of a unique attribute.
    UniqueConflict {
        attribute: Attribute,
        value: Value,
        holder: EntityId,
    },
    /// A lookup ref found no entity holding the value.
    LookupNotFound {
        attribute: Attribute,
        value: Value,
    },
    /// A lookup ref named an attribute that is not unique.
    NotUnique(Attribute),
    /// A schema change that is not a forward migration.
    UnsafeMigration {
        attribute: Attribute,
        reason: String,
    },
    /// A schema transaction in which every declaration is already in force.
    SchemaUnchanged,
    UnknownBranch(BranchName),
    BranchExists(BranchName),
    /// The branch was merged or abandoned and takes no more writes.
    BranchClosed {
        branch: BranchName,
        state: String,
    },
    /// A fork point after the transaction that creates the branch.
    ForkInFuture {
        from: TxId,
        tx: TxId,
    },
    /// A merge whose re-check against main failed; nothing was applied.
    MergeConflict {
        branch: BranchName,
        entity: EntityId,
        attribute: Attribute,
        reason: String,
    },
    /// The idempotency key was already used, by transaction `first_tx`, for a request with
    /// different content. Answering with the first receipt would acknowledge content that was
    /// never written. `key` is the key as sent, cut to [`Rejection::KEY_SHOWN_CHARS`].
    IdempotencyKeyReused {
        key: String,
        first_tx: TxId,
    },
    /// The acting principal holds no grant for this action on this namespace (`""`: a
    /// cluster-wide action), or, in enforced mode, the request carried no principal.
    NotAuthorized {
        principal: String,
        action: String,
        namespace: String,
    },
    /// The transaction's `provenance.agent` is not the principal that signed the request.
    AgentMismatch {
        agent: String,
        principal: String,
    },
    /// The system namespace is written only by agent and grant changes.
    SystemNamespace,
    /// The cluster was initialised but its security mode is not recorded yet.
    NotConfigured,
    /// A change to agents or grants that does not apply to the current policy (an unknown or
    /// revoked agent, a grant already held or not held, a mode already set).
    Policy(String),
    /// The change would leave no active agent holding `grant` on every namespace.
    LockOut(String),
    /// The agent's signature recorded with the transaction does not hold at its entry: the
    /// agent is unknown or revoked, its key changed since the signature was checked, or the
    /// signature is for another request.
    Unauthenticated(String),
    /// A vector whose number of components differs from the attribute's dimension. (Variants
    /// are added at the end: rejections are stored with their position.)
    DimensionMismatch {
        attribute: Attribute,
        expected: u32,
        found: u32,
    },
    /// A redaction whose target holds no datom with a value left to redact (`what` names the
    /// target).
    NothingToRedact(String),
    /// A redaction that would take more datoms than one redaction may.
    RedactionTooLarge {
        datoms: u64,
        limit: u64,
    },
    /// A redaction touching a slot with more than `rows` datoms: it takes a value out of a
    /// slot whole (`crate::value_groups`), and one entry reads at most that many rows to find
    /// what goes together.
    SlotTooLarge {
        entity: EntityId,
        attribute: Attribute,
        rows: u64,
    },
    /// A redaction entry whose slots hold more than `rows` datoms together: the leader
    /// proposes the range again with fewer datoms.
    GroupsTooLarge {
        rows: u64,
    },
}

impl Rejection {
    /// How much of an idempotency key a rejection repeats back (keys may be 256 bytes).
    pub const KEY_SHOWN_CHARS: usize = 48;

    pub(crate) fn key_reused(key: &str, first_tx: TxId) -> Rejection {
        let mut shown: String = key.chars().take(Self::KEY_SHOWN_CHARS).collect();
        if shown.len() < key.len() {
            shown.push('…');
        }
        Rejection::IdempotencyKeyReused { key: shown, first_tx }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<Value>| v.as_ref().map_or("<none>".to_string(), |v| v.to_string());
        match self {
            Rejection::PreconditionFailed {
                entity,
                attribute,
                expected,
                actual,
            } => write!(
                f,
                "precondition failed: entity {entity} {attribute} expected {} but is {}",
                show(expected),
                show(actual)
            ),
            Rejection::UnknownEntity(e) => write!(f, "unknown entity {e} in this namespace"),
            Rejection::TypeMismatch {
                attribute,
                expected,
                found,
            } => {
                write!(
                    f,
                    "wrong value type for {attribute}: expected {expected}, got {found}"
                )
            }
            Rejection::DimensionMismatch {
                attribute,
                expected,
                found,
            } => write!(
                f,
                "wrong vector dimension for {attribute}: expected {expected} components, got {found}"
            ),
            Rejection::NothingToRedact(what) => write!(f, "nothing to redact: {what}"),
            Rejection::RedactionTooLarge { datoms, limit } => write!(
                f,
                "the redaction would take {datoms} datoms; one redaction takes at most {limit} (redact attribute by attribute)"
            ),
            Rejection::SlotTooLarge {
                entity,
                attribute,
                rows,
            } => write!(
                f,
                "entity {entity} {attribute} has more than {rows} datoms: a redaction takes a value out of a slot whole, with every datom that holds it, and cannot read that many in one step"
            ),
            Rejection::GroupsTooLarge { rows } => write!(
                f,
                "the slots of this redaction step hold more than {rows} datoms together: a redaction takes each value out of its slot whole and reads at most that many in one step"
            ),
            Rejection::NotCurrent {
                entity,
                attribute,
                value,
            } => {
                write!(
                    f,
                    "cannot retract {value} from entity {entity} {attribute}: it is not the current value"
                )
            }
            Rejection::KeyChange(why) => write!(f, "key change refused: {why}"),
            Rejection::UnknownAttribute(a) => write!(
                f,
                "unknown attribute {a}: this namespace declares its schema and {a} is not in it (declare it first)"
            ),
            Rejection::Deprecated(a) => write!(f, "attribute {a} is deprecated and takes no new assertions"),
            Rejection::UniqueConflict {
                attribute,
                value,
                holder,
            } => write!(
                f,
                "{attribute} is unique and entity {holder} already holds {value}"
            ),
            Rejection::LookupNotFound { attribute, value } => {
                write!(f, "lookup ref [{attribute} {value}] names no entity")
            }
            Rejection::NotUnique(a) => write!(f, "lookup ref on {a}, which is not a unique attribute"),
            Rejection::UnsafeMigration { attribute, reason } => {
                write!(f, "unsafe migration of {attribute}: {reason}")
            }
            Rejection::SchemaUnchanged => {
                write!(
                    f,
                    "every attribute in the request is already declared as given: nothing to change"
                )
            }
            Rejection::UnknownBranch(b) => write!(f, "branch {b} does not exist in this namespace"),
            Rejection::BranchExists(b) => write!(
                f,
                "branch {b} already exists in this namespace (names are never reused, even after a merge or abandon)"
            ),
            Rejection::BranchClosed { branch, state } => {
                write!(f, "branch {branch} is {state} and takes no more writes")
            }
            Rejection::ForkInFuture { from, tx } => write!(
                f,
                "cannot fork from tx {from}: it is not before this transaction ({tx})"
            ),
            Rejection::MergeConflict {
                branch,
                entity,
                attribute,
                reason,
            } => write!(
                f,
                "merge of branch {branch} conflicts with main at entity {entity} {attribute}: {reason}; nothing was applied"
            ),
            Rejection::NotAuthorized {
                principal,
                action,
                namespace,
            } => {
                let on = if namespace.is_empty() {
                    "the cluster".to_string()
                } else {
                    format!("namespace {namespace}")
                };
                write!(
                    f,
                    "principal {principal} may not {action} on {on}: no grant allows it"
                )
            }
            Rejection::AgentMismatch { agent, principal } => write!(
                f,
                "provenance.agent is {agent:?} but the request is signed by principal {principal:?}; they must be the same"
            ),
            Rejection::SystemNamespace => write!(
                f,
                "namespace {} is written only by agent and grant changes (engram agent, engram grant)",
                engram_access::SYSTEM_NAMESPACE
            ),
            Rejection::NotConfigured => write!(
                f,
                "the cluster's security mode is not recorded yet; finish `engram cluster init` (run it again to retry)"
            ),
            Rejection::Policy(why) => write!(f, "{why}"),
            Rejection::LockOut(why) => write!(f, "refused: {why}"),
            Rejection::Unauthenticated(why) => write!(f, "not authenticated at this entry: {why}"),
            Rejection::IdempotencyKeyReused { key, first_tx } => write!(
                f,
                "idempotency key {key:?} was already used by tx {first_tx} for a transaction with different content; a retry must resend the same transaction, and a new transaction needs a new key"
            ),
        }
    }
}

/// The result of applying one transaction entry, as returned to the client.
pub type TxOutcome = Result<TxReceipt, Rejection>;

/// The tx-log row: what a transaction did, for receipts, idempotent retries, and the reads
/// that go through the log by transaction (watches, diffs, exports, the scrub).
#[derive(Clone, Debug, PartialEq)]
pub struct TxLogRow {
    pub namespace: Namespace,
    /// The branch the transaction wrote to; `None`: main.
    pub branch: Option<BranchName>,
    pub receipt: TxReceipt,
    /// The stored key of each of the transaction's datoms (its EAVT key, or its key in the
    /// branch's table), in transaction order. `None` for rows written before the row kept
    /// them: those builds wrote one `X` row per datom instead (`keys::tx_datom`), which is one
    /// more memtable insert, flush and compaction per datom on every replica.
    pub datom_keys: Option<Vec<Vec<u8>>>,
}

/// A tx-log row as stored now: the datom keys follow the receipt.
#[derive(Deserialize)]
struct StoredTxLogRow {
    namespace: Namespace,
    branch: Option<BranchName>,
    receipt: TxReceipt,
    datom_keys: Vec<Vec<u8>>,
}

/// A tx-log row as builds that wrote `X` rows stored it.
#[derive(Deserialize)]
struct EarlierTxLogRow {
    namespace: Namespace,
    branch: Option<BranchName>,
    receipt: TxReceipt,
}

impl TxLogRow {
    /// The row's stored form (postcard writes a tuple as it writes a struct of the same
    /// fields). A row without datom keys is stored as an earlier build did.
    pub fn encode(&self) -> Vec<u8> {
        let (namespace, branch, receipt) = (&self.namespace, &self.branch, &self.receipt);
        match &self.datom_keys {
            Some(datom_keys) => encode_row(&(namespace, branch, receipt, datom_keys)),
            None => encode_row(&(namespace, branch, receipt)),
        }
    }

    /// Decodes a row of either form. The current form is tried first: an earlier row ends
    /// where the datom keys would begin, so it cannot be read as one (postcard reports the
    /// missing length), while the earlier form would accept a current row and ignore its keys.
    pub fn decode(bytes: &[u8]) -> Result<TxLogRow, CoreError> {
        if let Ok(row) = postcard::from_bytes::<StoredTxLogRow>(bytes) {
            return Ok(TxLogRow {
                namespace: row.namespace,
                branch: row.branch,
                receipt: row.receipt,
                datom_keys: Some(row.datom_keys),
            });
        }
        let row: EarlierTxLogRow = decode_row("tx log row", bytes)?;
        Ok(TxLogRow {
            namespace: row.namespace,
            branch: row.branch,
            receipt: row.receipt,
            datom_keys: None,
        })
    }
}

/// The `I` row: the receipt of the transaction that first used an idempotency key, and the
/// `request_content_hash` (`crate::engine`) of that transaction, so a reuse of the key for other content is
/// refused instead of acknowledged with a receipt for content that was never written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct IdempotencyRow {
    pub receipt: TxReceipt,
    /// `None` for a row written before content hashes were recorded, or whose transaction a
    /// redaction took a value of (`crate::redact::rows`).
    pub content: Option<Hash>,
}

impl IdempotencyRow {
    /// The row is `postcard(receipt)` followed by the 32 content-hash bytes. Rows written
    /// before the hash was recorded hold `postcard(receipt)` alone. A receipt's postcard
    /// encoding is self-delimiting, so what follows it tells the two apart without a version
    /// byte: nothing (an old row) or exactly 32 bytes; anything else is corruption.
    pub fn encode(&self) -> Vec<u8> {
        let mut row = encode_row(&self.receipt);
        if let Some(content) = &self.content {
            row.extend_from_slice(content.as_bytes());
        }
        row
    }

    pub fn decode(bytes: &[u8]) -> Result<IdempotencyRow, CoreError> {
        let (receipt, rest) = postcard::take_from_bytes::<TxReceipt>(bytes)
            .map_err(|e| CoreError::corrupt("idempotency row", e))?;
        let content = match rest.len() {
            0 => None,
            _ => Some(Hash::from_slice(rest).ok_or_else(|| {
                CoreError::corrupt(
                    "idempotency row",
                    format!("{} bytes after the receipt, expected 0 or 32", rest.len()),
                )
            })?),
        };
        Ok(IdempotencyRow { receipt, content })
    }
}

pub(crate) fn encode_row<T: Serialize>(row: &T) -> Vec<u8> {
    // postcard serialisation of plain data cannot fail; a failure is a bug in a derive.
    postcard::to_allocvec(row).expect("postcard serialisation of a state row")
}

pub(crate) fn decode_row<T: for<'de> Deserialize<'de>>(what: &str, bytes: &[u8]) -> Result<T, CoreError> {
    postcard::from_bytes(bytes).map_err(|e| CoreError::corrupt(what, e))
}

/// Bytes in lower-case hex, for naming a row in an error.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
