//! Layout of the state key space. Every key starts with a one-byte ASCII table tag; variable
//! parts (namespace, attribute) end with a 0x00 byte, which validation guarantees they never
//! contain, so keys are prefix-free and sort by their parts.
//!
//! | tag | key | value |
//! |---|---|---|
//! | `E` | ns 0 entity attr 0 tx seq | canonical datom (EAVT: the datom store) |
//! | `A` | ns 0 attr 0 entity tx seq | empty (AEVT) |
//! | `V` | ns 0 attr 0 value-hash16 entity tx seq | empty (AVET) |
//! | `R` | ns 0 ref-entity attr 0 entity tx seq | empty (VAET, reverse refs) |
//! | `T` | tx | tx-log row |
//! | `H` | audit index | signed audit entry |
//! | `I` | ns 0 idempotency key | the first receipt, then the 32-byte hash of the request's content (rows from before content hashes, and rows whose transaction a redaction took a value of: the receipt alone) |
//! | `J` | tx | the key of the `I` row the transaction wrote (so a redaction finds it) |
//! | `N` | entity | owning namespace (then 0 and the branch, for an entity made on a branch) |
//! | `n` | ns | how many entity ids the namespace has drawn (u64, big-endian; see [`entity_id`]) |
//! | `S` | ns 0 attr | the attribute's schema row: its declarations, oldest first (or the type its first assertion fixed, in a namespace with no declared schema) |
//! | `Q` | ns | the namespace's schema version and whether its schema is declared (strict) |
//! | `B` | ns 0 branch | the branch row: fork point, state, the preconditions its transactions carried |
//! | `b` | ns 0 branch 0 entity attr 0 tx seq | canonical datom written on a branch (the branch's own EAVT) |
//! | `K` | key id | public key admitted by genesis or a key change |
//! | `L` | level(u8) position | Merkle tree node: root of the perfect subtree of `2^level` leaves from `position * 2^level` (level 0: leaf hashes) |
//! | `X` | tx seq | the EAVT key of the transaction's datom `seq` (datoms by transaction) |
//! | `U` | ns 0 entity attr 0 | the slot's live claims on main under a cardinality (see [`crate::current`]): what a write checks instead of the slot's history |
//! | `W` | tx | the canonical bytes of the signed request a transaction executed (`TxRequest::signed_bytes`; for a request signed in its committed form, its salted form `TxRequest::salted_bytes`), for a transaction whose entry records an agent's signature |
//! | `w` | agent 0 nonce | the tx that used this agent's request nonce: a signed request applies once, cluster-wide |
//! | `Z` | slot key (32 bytes, [`crate::commitment::slot_key`]) | the slot's state-commitment digest: format byte, 32 bytes |
//! | `C` | tree size | this node's signed checkpoint of that size (a signed note) |
//! | `M` | name | engine metadata (`Mhead`: the chain head, `Mcheckpoint`: this node's last checkpoint, `Mattested`: the index of this node's last attested entry, u64 big-endian) and the Raft layer's rows |
//!
//! `C` rows, `Mcheckpoint` and `Mattested` are per node, like attestations: each node signs its
//! own entries and checkpoints, so they are left out of the replicated-state digest.

use engram_types::{Attribute, BranchName, EntityId, Namespace, TxId, Value};

pub const EAVT: u8 = b'E';
pub const AEVT: u8 = b'A';
pub const AVET: u8 = b'V';
pub const VAET: u8 = b'R';
pub const TX_LOG: u8 = b'T';
pub const AUDIT: u8 = b'H';
pub const IDEMPOTENCY: u8 = b'I';
/// A keyed transaction's `I` row, by transaction.
pub const IDEMPOTENCY_OF_TX: u8 = b'J';
pub const ENTITY: u8 = b'N';
pub const ENTITY_COUNTER: u8 = b'n';
pub const SCHEMA: u8 = b'S';
pub const NS_SCHEMA: u8 = b'Q';
pub const BRANCH: u8 = b'B';
pub const BRANCH_EAVT: u8 = b'b';
pub const META: u8 = b'M';

pub const MERKLE: u8 = b'L';
pub const TX_DATOMS: u8 = b'X';
pub const CHECKPOINT: u8 = b'C';
pub const CURRENT: u8 = b'U';
pub const SIGNED_REQUEST: u8 = b'W';
pub const USED_NONCE: u8 = b'w';
/// A slot's state-commitment digest (see [`crate::commitment`]).
pub const SLOT_COMMITMENT: u8 = b'Z';

pub const META_HEAD: &[u8] = b"Mhead";
pub const META_CHECKPOINT: &[u8] = b"Mcheckpoint";
pub const META_ATTESTED: &[u8] = b"Mattested";
/// The transaction of the last redaction recorded (big-endian u64), so that a node learns of
/// a redaction whether it applied the entry or installed a snapshot made after it, and purges
/// its own files (`engram_raft`'s purge). Replicated state, written by apply.
pub const META_LAST_REDACTION: &[u8] = b"Mlast-redaction";
/// Present when the `Z` rows cover every slot of the store (see [`crate::commitment`]):
/// replicated state, written with the first rows or by the rebuild of an older store.
pub const META_STATE_COMMITMENT: &[u8] = b"Mstate-commitment";

/// The big-endian u64 that follows the one-byte table tag of a `T`, `H` or `C` key (a tx id,
/// an audit index, a tree size); `None` if the key is too short.
pub fn u64_after_tag(key: &[u8]) -> Option<u64> {
    key.get(1..9)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
}

/// The lowest level of the Merkle tree whose nodes are stored (`L` rows): a leaf is the hash
/// of its audit entry, and a node below this level is recomputed from the at most
/// `2^MERKLE_STORED_LEVEL` entries under it when a proof needs it. Storing every level would
/// cost two rows per entry on every replica (one leaf, and on average one more completed
/// subtree); from level 3 on it costs a quarter of a row, for at most seven extra entry reads
/// per proof. Stores written before kept every level; the rows below are simply not read.
pub const MERKLE_STORED_LEVEL: u32 = 3;

pub fn merkle_node(level: u32, position: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(10);
    k.push(MERKLE);
    // A tree of u64 leaves has at most 64 levels above the leaves.
    k.push(level.min(255) as u8);
    k.extend_from_slice(&position.to_be_bytes());
    k
}

pub fn tx_datoms_prefix(tx: TxId) -> Vec<u8> {
    let mut k = Vec::with_capacity(13);
    k.push(TX_DATOMS);
    k.extend_from_slice(&tx.0.to_be_bytes());
    k
}

pub fn tx_datom(tx: TxId, seq: u32) -> Vec<u8> {
    let mut k = tx_datoms_prefix(tx);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

pub fn signed_request(tx: TxId) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(SIGNED_REQUEST);
    k.extend_from_slice(&tx.0.to_be_bytes());
    k
}

pub fn used_nonce(agent: &str, nonce: &[u8; 16]) -> Vec<u8> {
    let mut k = Vec::with_capacity(18 + agent.len());
    k.push(USED_NONCE);
    k.extend_from_slice(agent.as_bytes());
    k.push(0);
    k.extend_from_slice(nonce);
    k
}

pub fn checkpoint(size: u64) -> Vec<u8> {
    let mut k = vec![CHECKPOINT];
    k.extend_from_slice(&size.to_be_bytes());
    k
}

fn with_ns(tag: u8, ns: &Namespace) -> Vec<u8> {
    let mut k = Vec::with_capacity(64);
    k.push(tag);
    k.extend_from_slice(ns.as_str().as_bytes());
    k.push(0);
    k
}

fn push_attr(k: &mut Vec<u8>, attr: &Attribute) {
    k.extend_from_slice(attr.as_str().as_bytes());
    k.push(0);
}

fn push_tx_seq(k: &mut Vec<u8>, tx: TxId, seq: u32) {
    k.extend_from_slice(&tx.0.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
}

/// 16 bytes of blake3 over the canonical value: equality lookups without ordering.
pub fn value_digest(value: &Value) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&blake3::hash(&value.canonical_bytes()).as_bytes()[..16]);
    out
}

pub fn ns_schema(ns: &Namespace) -> Vec<u8> {
    let mut k = vec![NS_SCHEMA];
    k.extend_from_slice(ns.as_str().as_bytes());
    k
}

/// All of a namespace's schema rows.
pub fn schema_prefix(ns: &Namespace) -> Vec<u8> {
    with_ns(SCHEMA, ns)
}

pub fn branch(ns: &Namespace, name: &BranchName) -> Vec<u8> {
    let mut k = with_ns(BRANCH, ns);
    k.extend_from_slice(name.as_str().as_bytes());
    k
}

/// All of a namespace's branch rows.
pub fn branches_prefix(ns: &Namespace) -> Vec<u8> {
    with_ns(BRANCH, ns)
}

/// Every datom written on any branch of a namespace.
pub fn branch_eavt_namespace(ns: &Namespace) -> Vec<u8> {
    with_ns(BRANCH_EAVT, ns)
}

/// Every datom written on a branch.
pub fn branch_eavt_prefix(ns: &Namespace, name: &BranchName) -> Vec<u8> {
    let mut k = with_ns(BRANCH_EAVT, ns);
    k.extend_from_slice(name.as_str().as_bytes());
    k.push(0);
    k
}

pub fn branch_eavt_entity(ns: &Namespace, name: &BranchName, e: EntityId) -> Vec<u8> {
    let mut k = branch_eavt_prefix(ns, name);
    k.extend_from_slice(&e.0.to_be_bytes());
    k
}

pub fn branch_eavt_attr(ns: &Namespace, name: &BranchName, e: EntityId, attr: &Attribute) -> Vec<u8> {
    let mut k = branch_eavt_entity(ns, name, e);
    push_attr(&mut k, attr);
    k
}

pub fn branch_eavt(
    ns: &Namespace,
    name: &BranchName,
    e: EntityId,
    attr: &Attribute,
    tx: TxId,
    seq: u32,
) -> Vec<u8> {
    let mut k = branch_eavt_attr(ns, name, e, attr);
    push_tx_seq(&mut k, tx, seq);
    k
}

/// The `N` row value for an entity made in `ns` (on `branch`, if given).
pub fn entity_owner(ns: &Namespace, branch: Option<&BranchName>) -> Vec<u8> {
    let mut v = ns.as_str().as_bytes().to_vec();
    if let Some(b) = branch {
        v.push(0);
        v.extend_from_slice(b.as_str().as_bytes());
    }
    v
}

/// All of a namespace's datoms on main.
pub fn eavt_namespace(ns: &Namespace) -> Vec<u8> {
    with_ns(EAVT, ns)
}

pub fn eavt_entity(ns: &Namespace, e: EntityId) -> Vec<u8> {
    let mut k = with_ns(EAVT, ns);
    k.extend_from_slice(&e.0.to_be_bytes());
    k
}

pub fn eavt_attr(ns: &Namespace, e: EntityId, attr: &Attribute) -> Vec<u8> {
    let mut k = eavt_entity(ns, e);
    push_attr(&mut k, attr);
    k
}

/// The current-claims row of one slot on main.
pub fn current(ns: &Namespace, e: EntityId, attr: &Attribute) -> Vec<u8> {
    let mut k = with_ns(CURRENT, ns);
    k.extend_from_slice(&e.0.to_be_bytes());
    push_attr(&mut k, attr);
    k
}

pub fn eavt(ns: &Namespace, e: EntityId, attr: &Attribute, tx: TxId, seq: u32) -> Vec<u8> {
    let mut k = eavt_attr(ns, e, attr);
    push_tx_seq(&mut k, tx, seq);
    k
}

pub fn aevt_attr(ns: &Namespace, attr: &Attribute) -> Vec<u8> {
    let mut k = with_ns(AEVT, ns);
    push_attr(&mut k, attr);
    k
}

pub fn aevt(ns: &Namespace, attr: &Attribute, e: EntityId, tx: TxId, seq: u32) -> Vec<u8> {
    let mut k = aevt_attr(ns, attr);
    k.extend_from_slice(&e.0.to_be_bytes());
    push_tx_seq(&mut k, tx, seq);
    k
}

pub fn avet_value(ns: &Namespace, attr: &Attribute, value: &Value) -> Vec<u8> {
    let mut k = with_ns(AVET, ns);
    push_attr(&mut k, attr);
    k.extend_from_slice(&value_digest(value));
    k
}

pub fn avet(ns: &Namespace, attr: &Attribute, value: &Value, e: EntityId, tx: TxId, seq: u32) -> Vec<u8> {
    let mut k = avet_value(ns, attr, value);
    k.extend_from_slice(&e.0.to_be_bytes());
    push_tx_seq(&mut k, tx, seq);
    k
}

pub fn vaet_ref(ns: &Namespace, target: EntityId) -> Vec<u8> {
    let mut k = with_ns(VAET, ns);
    k.extend_from_slice(&target.0.to_be_bytes());
    k
}

pub fn vaet(ns: &Namespace, target: EntityId, attr: &Attribute, e: EntityId, tx: TxId, seq: u32) -> Vec<u8> {
    let mut k = vaet_ref(ns, target);
    push_attr(&mut k, attr);
    k.extend_from_slice(&e.0.to_be_bytes());
    push_tx_seq(&mut k, tx, seq);
    k
}

pub fn tx_log(tx: TxId) -> Vec<u8> {
    let mut k = vec![TX_LOG];
    k.extend_from_slice(&tx.0.to_be_bytes());
    k
}

pub fn audit(index: u64) -> Vec<u8> {
    let mut k = vec![AUDIT];
    k.extend_from_slice(&index.to_be_bytes());
    k
}

pub fn idempotency(ns: &Namespace, key: &str) -> Vec<u8> {
    let mut k = with_ns(IDEMPOTENCY, ns);
    k.extend_from_slice(key.as_bytes());
    k
}

pub fn idempotency_of_tx(tx: TxId) -> Vec<u8> {
    let mut k = vec![IDEMPOTENCY_OF_TX];
    k.extend_from_slice(&tx.0.to_be_bytes());
    k
}

pub fn entity(e: EntityId) -> Vec<u8> {
    let mut k = vec![ENTITY];
    k.extend_from_slice(&e.0.to_be_bytes());
    k
}

pub fn entity_counter(ns: &Namespace) -> Vec<u8> {
    with_ns(ENTITY_COUNTER, ns)
}

/// The largest entity id [`entity_id`] draws: ids stay below 2^53, so they are exact as JSON
/// numbers in every client.
pub const MAX_DRAWN_ENTITY_ID: u64 = (1 << 53) - 1;

/// The `draw`-th candidate entity id of `ns` (`draw` counts from 1): a hash of the namespace
/// and its own counter, in `1..=MAX_DRAWN_ENTITY_ID`. Ids come from the namespace's own count
/// so that a tenant's ids say nothing of how much other namespaces wrote (one cluster-wide
/// counter did); they are hashed rather than the count itself so that they stay unique across
/// namespaces, which the `N` row (keyed by id alone) and every `Ref` rely on. A candidate that
/// is already taken (a 1 in 2^53 chance per existing entity, or an id from the sequential
/// counter used before) is skipped by the next draw.
pub fn entity_id(ns: &Namespace, draw: u64) -> EntityId {
    let mut h = blake3::Hasher::new();
    h.update(b"engram/entity-id/v1\0");
    h.update(ns.as_str().as_bytes());
    h.update(&[0]);
    h.update(&draw.to_be_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&h.finalize().as_bytes()[..8]);
    EntityId(1 + u64::from_be_bytes(first) % MAX_DRAWN_ENTITY_ID)
}

pub fn schema(ns: &Namespace, attr: &Attribute) -> Vec<u8> {
    let mut k = with_ns(SCHEMA, ns);
    k.extend_from_slice(attr.as_str().as_bytes());
    k
}

/// Reads the trailing `entity tx seq` of an AEVT/AVET/VAET key.
pub fn trailing_entity_tx_seq(key: &[u8]) -> Option<(EntityId, TxId, u32)> {
    let n = key.len();
    if n < 20 {
        return None;
    }
    let e = u64::from_be_bytes(key[n - 20..n - 12].try_into().ok()?);
    let tx = u64::from_be_bytes(key[n - 12..n - 4].try_into().ok()?);
    let seq = u32::from_be_bytes(key[n - 4..].try_into().ok()?);
    Some((EntityId(e), TxId(tx), seq))
}

/// `K` key id → public key: the keys membership entries admitted, for checking attestations
/// on read.
pub const SIGNER: u8 = b'K';

pub fn signer(id: engram_audit::KeyId) -> Vec<u8> {
    let mut k = vec![SIGNER];
    k.extend_from_slice(&id.0);
    k
}

/// Reads the trailing `tx seq` of an EAVT-shaped key.
pub fn trailing_tx_seq(key: &[u8]) -> Option<(TxId, u32)> {
    let n = key.len();
    if n < 12 {
        return None;
    }
    let tx = u64::from_be_bytes(key[n - 12..n - 4].try_into().ok()?);
    let seq = u32::from_be_bytes(key[n - 4..].try_into().ok()?);
    Some((TxId(tx), seq))
}
