//! Who may speak Raft to this node.
//!
//! The internal `engram.v1.Raft` service shares the client port, so any client can reach it; a
//! forged `AppendEntries` from a client used to move leadership and split the replicas. Every
//! Raft request therefore carries a [`pb::PeerAuth`]: the sender's node id, the node it is for,
//! and Ed25519 signatures over [`signed_message`] (the request's kind, both ids and the blake3
//! hash of its payload). The receiver accepts it only if a signature verifies under a key it
//! binds to that node id ([`PeerKeys`]):
//!
//! 1. the audit chain it has applied: the key's row names this node id and is neither rotated
//!    out nor revoked (the chain is the trust root, as it is for attestations);
//! 2. otherwise, for a key the applied chain does not know yet, the membership the node has
//!    appended: the member's recorded public key (a node being added is in the membership before
//!    its admission entry is applied everywhere);
//! 3. a node that is neither in the membership it has appended nor in the last committed one
//!    (never initialised, or removed; a leader that has appended its own removal is still a
//!    member until that commits) belongs to no cluster: it accepts the first sender whose signature verifies and, from
//!    then on, only that sender's key and the member keys that first request listed
//!    (`PeerAuth.members`: every key the sender's applied chain trusts, by node id, covered by
//!    its signature), so a leader change between the first contact and the node's first
//!    appended entry does not strand it (`cluster init` and `AddNode` reach nodes in that
//!    state, and a removed node may be added again by a leader it never knew). Once it has
//!    appended a membership that includes it, rules 1–2 hold. A hostile first contact can
//!    thus make a node outside the cluster useless (it refuses the real leader and must be
//!    wiped or restarted), but not make it disturb the cluster when it is added: keep a new
//!    node's port private until it has joined.
//! 4. a key neither rule binds (the receiver's chain and log both end before the sender's
//!    admission: a member that fell behind while that node was added) is accepted if the
//!    request carries its admission (`PeerAuth.admissions`): the key-change request that
//!    admitted it (or rotated it in) for that node id, authorised by a key the receiver's
//!    applied chain trusts now, or by a key an earlier proof of the same request admitted,
//!    each authorisation checked against the cluster's origin as apply checks it. Without it a
//!    lagging member refuses every leader admitted after its applied point and, if none it
//!    knows leads again, never catches up (a simulation soak found this). It trusts no more
//!    than the chain it is about to append would: the same key changes, authorised by the same
//!    keys.
//!
//! **Tags instead of signatures.** A signature and its check cost about 60 µs of CPU, on the
//! path of every write (the leader signs each append, each follower checks it). Once a
//! receiver has said it accepts them (`RaftMessage.accepts_mac` on its replies, which every
//! node of this version sets), a sender *tags* its requests instead: a keyed blake3 hash of the
//! same [`signed_message`] under the key its own key and the receiver's share
//! ([`NodeKey::shared_key`]: X25519 on the two Ed25519 keys, computed once per pair of keys
//! and kept). Only the holder of one of the two secret keys can make a tag, and the receiver
//! knows it did not make it itself, so a tag that checks out under a key rules 1–4 bind to the
//! sender authenticates it as a signature does. A tag names the receiver's key it was made for;
//! one made for a key the receiver no longer holds (it rotated, and the sender has not applied
//! that yet) is refused as [`AuthError::StaleTarget`], and the sender signs again until its next
//! connection. A node that never sets `accepts_mac` (an older build, mid rolling upgrade) is
//! only ever sent signatures, and this node still checks the signatures older senders send.
//! Snapshot headers (one per install) stay signed.
//!
//! Signing the payload's hash with the target's id binds a message to one receiver and one
//! body. A replay of a member's earlier message is a duplicate Raft already tolerates (a stale
//! term is refused, a same-term append is idempotent). Replies are not signed: they come back
//! on the connection the sender opened to the member's recorded address (TLS covers an attacker
//! on the path).
//!
//! Client TLS certificates play no part, so a client certificate never passes as a peer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use engram_audit::{
    EntryKind, KeyAction, KeyChangeRequest, KeyId, KeyRing, NodeKey, PublicKey, Verifier, key_statement,
};
use engram_core::reads;
use engram_proto::pb;
use engram_storage::Store;
use engram_types::Hash;
use openraft::async_runtime::WatchReceiver;

use crate::Raft;

/// The most signatures a request may carry (the current key and the one it replaced).
pub const MAX_SIGNATURES: usize = 2;

/// The most member keys a request may list.
pub const MAX_MEMBERS: usize = 256;

/// The most key-change proofs a request may carry (rule 4); each costs the receiver at most one
/// signature check.
pub const MAX_ADMISSIONS: usize = 8;

const DOMAIN: &[u8] = b"engram.v1 raft peer request\n";

/// Which Raft RPC a request is; part of what is signed, so a signed vote cannot pass as an
/// append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcKind {
    AppendEntries,
    Vote,
    /// A pre-vote: signed apart from a vote, so neither passes as the other.
    PreVote,
    /// The header chunk of a snapshot stream (it commits to the data's size and hash).
    InstallSnapshot,
}

impl RpcKind {
    fn tag(self) -> u8 {
        match self {
            RpcKind::AppendEntries => 1,
            RpcKind::Vote => 2,
            RpcKind::InstallSnapshot => 3,
            RpcKind::PreVote => 4,
        }
    }
}

/// The bytes a sender signs for a request of `kind` from `from` to `to` carrying `payload` and
/// listing `members`.
pub fn signed_message(
    kind: RpcKind,
    from: u64,
    to: u64,
    payload: &[u8],
    members: &[(u64, PublicKey)],
) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN.len() + 1 + 16 + 64);
    m.extend_from_slice(DOMAIN);
    m.push(kind.tag());
    m.extend_from_slice(&from.to_be_bytes());
    m.extend_from_slice(&to.to_be_bytes());
    m.extend_from_slice(Hash::of(payload).as_bytes());
    let mut listed = Vec::with_capacity(members.len() * 40);
    for (id, key) in members {
        listed.extend_from_slice(&id.to_be_bytes());
        listed.extend_from_slice(&key.0);
    }
    m.extend_from_slice(Hash::of(&listed).as_bytes());
    m
}

/// Signs a request with this node's current key and, right after a rotation, the key it
/// replaced ([`KeyRing::previous`]), listing no member keys.
pub fn sign(keys: &KeyRing, kind: RpcKind, from: u64, to: u64, payload: &[u8]) -> pb::PeerAuth {
    sign_listing(keys, kind, from, to, payload, &[])
}

/// Like [`sign`], listing `members` (the keys the sender's chain trusts, by node id) for a
/// receiver outside any membership (rule 3).
pub fn sign_listing(
    keys: &KeyRing,
    kind: RpcKind,
    from: u64,
    to: u64,
    payload: &[u8],
    members: &[(u64, PublicKey)],
) -> pb::PeerAuth {
    let message = signed_message(kind, from, to, payload, members);
    let one = |key: &NodeKey| pb::PeerSignature {
        public_key: key.public().0.to_vec(),
        signature: key.sign(&message).to_vec(),
    };
    let mut signatures = vec![one(&keys.current())];
    if let Some(previous) = keys.previous() {
        signatures.push(one(&previous));
    }
    pb::PeerAuth {
        from_node: from,
        to_node: to,
        signatures,
        members: listed(members),
        admissions: Vec::new(),
        macs: Vec::new(),
    }
}

/// The keys a sender tags a request to one receiver with: for its current key and, right after
/// a rotation, the key it replaced, the key that one shares with the receiver's key `to_key`
/// (as the sender's chain or membership records it). Empty when `to_key` is unusable (not a
/// point, or small order): the sender signs instead.
pub fn pair_keys(keys: &KeyRing, to_key: &PublicKey) -> Vec<PairKey> {
    let mut mine = vec![keys.current()];
    mine.extend(keys.previous());
    mine.iter()
        .filter_map(|key| {
            key.shared_key(to_key).map(|secret| PairKey {
                from_key: key.public(),
                to_key: *to_key,
                secret,
            })
        })
        .collect()
}

/// One sender key's pair key with one receiver key ([`pair_keys`]).
#[derive(Clone)]
pub struct PairKey {
    pub from_key: PublicKey,
    pub to_key: PublicKey,
    pub secret: [u8; 32],
}

/// Like [`sign_listing`], but tagged with `pairs` ([`pair_keys`]) instead of signed: for a
/// receiver that has said it accepts tags.
pub fn tag_listing(
    pairs: &[PairKey],
    kind: RpcKind,
    from: u64,
    to: u64,
    payload: &[u8],
    members: &[(u64, PublicKey)],
) -> pb::PeerAuth {
    let message = signed_message(kind, from, to, payload, members);
    pb::PeerAuth {
        from_node: from,
        to_node: to,
        signatures: Vec::new(),
        members: listed(members),
        admissions: Vec::new(),
        macs: pairs
            .iter()
            .map(|pair| pb::PeerMac {
                from_key: pair.from_key.0.to_vec(),
                to_key: pair.to_key.0.to_vec(),
                mac: blake3::keyed_hash(&pair.secret, &message).as_bytes().to_vec(),
            })
            .collect(),
    }
}

fn listed(members: &[(u64, PublicKey)]) -> Vec<pb::MemberKey> {
    members
        .iter()
        .map(|(id, key)| pb::MemberKey {
            node_id: *id,
            public_key: key.0.to_vec(),
        })
        .collect()
}

/// Why a Raft request was refused. All of these become `UNAUTHENTICATED`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("raft request without peer authentication: only cluster members may call the Raft service")]
    Missing,
    #[error("raft request addressed to node {to}, but this is node {me}")]
    WrongTarget { to: u64, me: u64 },
    #[error("raft request carries {0} signatures and tags; at most {MAX_SIGNATURES} are accepted")]
    TooManySignatures(usize),
    #[error("raft request lists {0} member keys; at most {MAX_MEMBERS} are accepted")]
    TooManyMembers(usize),
    #[error("raft request carries {0} admissions; at most {MAX_ADMISSIONS} are accepted")]
    TooManyAdmissions(usize),
    #[error("raft request signature is malformed: {0}")]
    Malformed(&'static str),
    #[error(
        "raft request claims to be from node {from}, but no signature is by a key this node binds to node {from}"
    )]
    Untrusted { from: u64 },
    #[error("raft request from node {from}: signature by key {key} does not verify")]
    BadSignature { from: u64, key: String },
    #[error("raft request from node {from}: tag by key {key} does not verify")]
    BadTag { from: u64, key: String },
    #[error(
        "raft request from node {from} is tagged for key {key}, which this node does not hold (it rotated its key since); the sender signs its next requests"
    )]
    StaleTarget { from: u64, key: String },
    #[error("raft request from node {from}: an admission authorised by key {authorizer} does not verify")]
    BadAdmission { from: u64, authorizer: String },
    #[error("cannot check the raft request's sender: {0}")]
    Lookup(String),
}

/// What a receiver knows about which keys speak for which node.
pub trait PeerKeys {
    /// Whether `key` may sign for node `from`.
    fn trusts(&self, from: u64, key: &PublicKey) -> Result<bool, String>;

    /// Called once a request signed by `key` for `from`, listing `members`, has verified;
    /// `false` withdraws the trust (another sender was accepted first, see [`ClusterKeys`]).
    fn accepted(&self, _from: u64, _key: &PublicKey, _members: &[(u64, PublicKey)]) -> bool {
        true
    }

    /// The key `id` if the applied chain trusts it now (neither rotated out nor revoked): who
    /// may authorise a rule-4 admission.
    fn active_key(&self, _id: KeyId) -> Result<Option<PublicKey>, String> {
        Ok(None)
    }

    /// The cluster's origin, which key-change authorisations are bound to (`None` before
    /// genesis).
    fn origin(&self) -> Result<Option<String>, String> {
        Ok(None)
    }

    /// The key this node's key `to_key` shares with a sender's key `from_key`
    /// ([`NodeKey::shared_key`]); `None` when `to_key` is not a key this node holds, or the pair
    /// has none. Tags are refused by a receiver that does not implement it.
    fn pair_key(&self, _from_key: &PublicKey, _to_key: &PublicKey) -> Option<[u8; 32]> {
        None
    }

    /// Whether `signature` by `key` over `message` verifies ([`PublicKey::verify`]); a receiver
    /// may keep its senders' keys decompressed (a field square root per request otherwise).
    fn signature_verifies(&self, key: &PublicKey, message: &[u8], signature: &[u8; 64]) -> bool {
        key.verify(message, signature)
    }
}

/// Rule 4: whether `admissions` (encoded key-change requests) admit `key` for node `from`,
/// starting from the keys the receiver's chain trusts now. Decoded only here, so a request
/// rules 1–3 accept pays nothing for the proofs it carries. A proof whose authoriser is
/// trusted but whose authorisation does not verify is a forgery.
fn admitted_by(
    from: u64,
    key: &PublicKey,
    admissions: &[Vec<u8>],
    keys: &dyn PeerKeys,
) -> Result<bool, AuthError> {
    if admissions.is_empty() {
        return Ok(false);
    }
    let admissions = admissions
        .iter()
        .map(|bytes| {
            postcard::from_bytes::<KeyChangeRequest>(bytes)
                .map_err(|_| AuthError::Malformed("an admission does not decode"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let Some(origin) = keys.origin().map_err(AuthError::Lookup)? else {
        return Ok(false);
    };
    // Keys the proofs checked so far admitted, and which proofs are spent.
    let mut learnt: Vec<PublicKey> = Vec::new();
    let mut spent = vec![false; admissions.len()];
    loop {
        let mut progress = false;
        for (i, proof) in admissions.iter().enumerate() {
            if spent[i] {
                continue;
            }
            let authorizer = match learnt.iter().find(|k| k.key_id() == proof.authorizer) {
                Some(k) => *k,
                None => match keys.active_key(proof.authorizer).map_err(AuthError::Lookup)? {
                    Some(k) => k,
                    None => continue,
                },
            };
            if !authorizer.verify(&key_statement(&origin, &proof.action), &proof.authorization) {
                return Err(AuthError::BadAdmission {
                    from,
                    authorizer: proof.authorizer.to_string(),
                });
            }
            spent[i] = true;
            progress = true;
            let (node, admitted) = match &proof.action {
                KeyAction::Admit { node_id, key } => (*node_id, *key),
                KeyAction::Rotate { node_id, new, .. } => (*node_id, *new),
                KeyAction::Revoke { .. } => continue,
            };
            if node == from && admitted == *key {
                return Ok(true);
            }
            learnt.push(admitted);
        }
        if !progress {
            return Ok(false);
        }
    }
}

/// Rule 4's proofs for `key`, read from this node's applied chain: the key change that
/// admitted it, then the one that admitted that change's authoriser, and so on back to a
/// genesis key (which every member trusts), at most [`MAX_ADMISSIONS`]. Empty for a genesis
/// key, or a key the chain has not admitted yet.
pub fn admission_chain(store: &dyn Store, key: &PublicKey) -> Result<Vec<KeyChangeRequest>, String> {
    let mut out = Vec::new();
    let mut id = key.key_id();
    while out.len() < MAX_ADMISSIONS {
        let Some(record) = reads::signer(store, id).map_err(|e| e.to_string())? else {
            break;
        };
        if record.admitted_at <= 1 {
            break;
        }
        let entries = reads::audit_entries(store, record.admitted_at, 1)
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let Some(EntryKind::KeyChange {
            action,
            authorizer,
            authorization,
        }) = entries.into_iter().next().map(|s| s.entry.kind)
        else {
            break;
        };
        out.push(KeyChangeRequest {
            action,
            authorizer,
            authorization,
        });
        id = authorizer;
    }
    Ok(out)
}

/// How a request's sender proved who it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    Signature,
    Tag,
}

/// Checks `auth` on a request of `kind` with `payload` received by node `me`; returns the
/// authenticated sender and how it proved itself. Keys are looked up before any signature is checked, so a request
/// signed by unknown keys costs no signature verification.
pub fn verify(
    auth: Option<&pb::PeerAuth>,
    kind: RpcKind,
    me: u64,
    payload: &[u8],
    keys: &dyn PeerKeys,
) -> Result<(u64, Proof), AuthError> {
    let auth = auth.ok_or(AuthError::Missing)?;
    if auth.to_node != me {
        return Err(AuthError::WrongTarget { to: auth.to_node, me });
    }
    if auth.signatures.len() + auth.macs.len() > MAX_SIGNATURES {
        return Err(AuthError::TooManySignatures(
            auth.signatures.len() + auth.macs.len(),
        ));
    }
    if auth.members.len() > MAX_MEMBERS {
        return Err(AuthError::TooManyMembers(auth.members.len()));
    }
    let members = auth
        .members
        .iter()
        .map(|m| {
            <[u8; 32]>::try_from(m.public_key.as_slice())
                .map(|key| (m.node_id, PublicKey(key)))
                .map_err(|_| AuthError::Malformed("a member key is not 32 bytes"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if auth.admissions.len() > MAX_ADMISSIONS {
        return Err(AuthError::TooManyAdmissions(auth.admissions.len()));
    }
    let from = auth.from_node;
    let message = signed_message(kind, from, me, payload, &members);
    let key32 = |bytes: &[u8]| {
        <[u8; 32]>::try_from(bytes)
            .map(PublicKey)
            .map_err(|_| AuthError::Malformed("a public key is not 32 bytes"))
    };
    // Whether a key speaks for `from` (rules 1-4). Asked before any tag or signature is
    // checked: a key nobody binds costs no key agreement and no signature check.
    let bound = |key: &PublicKey| -> Result<bool, AuthError> {
        Ok(keys.trusts(from, key).map_err(AuthError::Lookup)?
            || admitted_by(from, key, &auth.admissions, keys)?)
    };
    let mut stale = None;
    for t in &auth.macs {
        let (key, to_key) = (key32(&t.from_key)?, key32(&t.to_key)?);
        let tag: [u8; 32] = t
            .mac
            .as_slice()
            .try_into()
            .map_err(|_| AuthError::Malformed("a tag is not 32 bytes"))?;
        if !bound(&key)? {
            continue;
        }
        let Some(secret) = keys.pair_key(&key, &to_key) else {
            stale = Some(to_key);
            continue;
        };
        // `blake3::Hash` compares in constant time.
        if blake3::keyed_hash(&secret, &message) != blake3::Hash::from_bytes(tag) {
            return Err(AuthError::BadTag {
                from,
                key: key.key_id().to_string(),
            });
        }
        if !keys.accepted(from, &key, &members) {
            return Err(AuthError::Untrusted { from });
        }
        return Ok((from, Proof::Tag));
    }
    for s in &auth.signatures {
        let key = key32(&s.public_key)?;
        let signature: [u8; 64] = s
            .signature
            .as_slice()
            .try_into()
            .map_err(|_| AuthError::Malformed("a signature is not 64 bytes"))?;
        if !bound(&key)? {
            continue;
        }
        // A trusted key whose signature fails is a forgery (or corruption), not a key we
        // merely do not know: say so rather than trying the next one.
        if !keys.signature_verifies(&key, &message, &signature) {
            return Err(AuthError::BadSignature {
                from,
                key: key.key_id().to_string(),
            });
        }
        if !keys.accepted(from, &key, &members) {
            break;
        }
        return Ok((from, Proof::Signature));
    }
    match stale {
        Some(key) if auth.signatures.is_empty() => Err(AuthError::StaleTarget {
            from,
            key: key.key_id().to_string(),
        }),
        _ => Err(AuthError::Untrusted { from }),
    }
}

/// Every key the applied chain of `store` trusts now, by node id: what a request lists for a
/// receiver outside any membership (rule 3).
pub fn chain_member_keys(store: &dyn Store) -> Result<Vec<(u64, PublicKey)>, String> {
    reads::active_keys(store)
        .map(|rows| rows.into_iter().map(|row| (row.node_id, row.key)).collect())
        .map_err(|e| e.to_string())
}

/// The receiver's [`PeerKeys`]: its applied audit chain, then its appended membership, then
/// (outside any membership) the first sender it accepted — the three rules in the module docs.
pub struct ClusterKeys {
    pub me: u64,
    pub store: Arc<dyn Store>,
    pub raft: Raft,
    /// Outside any membership: the first sender whose request verified. Only it, and the
    /// member keys it listed, are accepted until this node appends a membership that includes
    /// it (in memory: a restart forgets it).
    pub first_contact: Mutex<Option<FirstContact>>,
    /// Senders' keys, decompressed once (see [`PeerKeys::signature_verifies`]).
    pub verifiers: Mutex<HashMap<PublicKey, Verifier>>,
    /// This node's keys: the pair keys of tagged requests are made with them.
    pub keys: Arc<KeyRing>,
    /// Pair keys by (sender's key, this node's key), computed once (see [`PeerKeys::pair_key`]).
    pub pair_keys: Mutex<HashMap<(PublicKey, PublicKey), [u8; 32]>>,
}

/// The most sender keys [`ClusterKeys`] keeps decompressed, and pair keys it keeps, before it
/// starts over.
const MAX_CACHED_VERIFIERS: usize = 64;

/// Rule 3's binding: the first sender's key and the member keys its request listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirstContact {
    pub key: PublicKey,
    pub members: Vec<(u64, PublicKey)>,
}

impl FirstContact {
    /// Whether `key` may speak for node `from` under this binding.
    pub fn trusts(&self, from: u64, key: &PublicKey) -> bool {
        self.key == *key || self.members.iter().any(|(id, k)| *id == from && k == key)
    }
}

/// Whether node `me` is outside every membership it knows: the one it appended last and the
/// last committed one. A leader that has appended its own removal is still in the committed
/// membership until that commits; treating it as outside then would let any first contact
/// (a forger) speak for a leader of the cluster (a simulation soak found this, seed 4275).
fn outside(metrics: &openraft::RaftMetrics<crate::TypeConfig>, me: u64) -> bool {
    metrics.membership_config.membership().get_node(&me).is_none()
        && metrics
            .committed_membership_config
            .membership()
            .get_node(&me)
            .is_none()
}

impl ClusterKeys {
    fn outside_membership(&self) -> bool {
        outside(&self.raft.metrics().borrow_watched(), self.me)
    }

    fn first_contact(&self) -> std::sync::MutexGuard<'_, Option<FirstContact>> {
        self.first_contact.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl PeerKeys for ClusterKeys {
    fn trusts(&self, from: u64, key: &PublicKey) -> Result<bool, String> {
        // Read under the metrics borrow and let go at once: cloning the metrics (membership
        // maps, replication progress) for every Raft request was a measurable cost per write.
        let (is_outside, member_key) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow_watched();
            let member_key = m
                .membership_config
                .membership()
                .get_node(&from)
                .is_some_and(|node| node.public_key == key.0);
            (outside(&m, self.me), member_key)
        };
        if is_outside {
            // Never initialised, or removed: this node belongs to no cluster yet. Whoever adds
            // it must be able to reach it, so the first sender wins; everyone else is refused,
            // so a hostile first contact can make this node useless to the cluster (it must be
            // wiped) but cannot make it disturb the cluster once added.
            return Ok(self.first_contact().as_ref().is_none_or(|c| c.trusts(from, key)));
        }
        // A member again: whoever reaches it next time it is outside the cluster starts afresh.
        self.first_contact().take();
        if let Some(row) = reads::signer(&*self.store, key.key_id()).map_err(|e| e.to_string())? {
            // The chain knows this key: it decides, whatever the membership says.
            return Ok(row.node_id == from && row.retired_at.is_none() && row.revoked_at.is_none());
        }
        Ok(member_key)
    }

    fn signature_verifies(&self, key: &PublicKey, message: &[u8], signature: &[u8; 64]) -> bool {
        // The key is taken out of the map and checked after the lock is let go: requests from
        // several peers do not wait on one another's verification.
        let verifier = {
            let mut cached = self.verifiers.lock().unwrap_or_else(|p| p.into_inner());
            match cached.get(key) {
                Some(verifier) => verifier.clone(),
                None => {
                    let Some(verifier) = key.verifier() else {
                        return false;
                    };
                    // Only keys `trusts` accepted get here, so the map holds a cluster's few
                    // keys; the bound is for a chain that rotates keys for years.
                    if cached.len() >= MAX_CACHED_VERIFIERS {
                        cached.clear();
                    }
                    cached.insert(*key, verifier.clone());
                    verifier
                }
            }
        };
        verifier.verify(message, signature)
    }

    fn pair_key(&self, from_key: &PublicKey, to_key: &PublicKey) -> Option<[u8; 32]> {
        let mine = std::iter::once(self.keys.current())
            .chain(self.keys.previous())
            .find(|key| key.public() == *to_key)?;
        let mut cached = self.pair_keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(secret) = cached.get(&(*from_key, *to_key)) {
            return Some(*secret);
        }
        let secret = mine.shared_key(from_key)?;
        // Only keys `trusts` accepted get here; the bound is for a chain that rotates for years.
        if cached.len() >= MAX_CACHED_VERIFIERS {
            cached.clear();
        }
        cached.insert((*from_key, *to_key), secret);
        Some(secret)
    }

    fn active_key(&self, id: KeyId) -> Result<Option<PublicKey>, String> {
        Ok(reads::signer(&*self.store, id)
            .map_err(|e| e.to_string())?
            .filter(|row| row.retired_at.is_none() && row.revoked_at.is_none())
            .map(|row| row.key))
    }

    fn origin(&self) -> Result<Option<String>, String> {
        reads::origin(&*self.store).map_err(|e| e.to_string())
    }

    fn accepted(&self, from: u64, key: &PublicKey, members: &[(u64, PublicKey)]) -> bool {
        if !self.outside_membership() {
            return true;
        }
        let mut first = self.first_contact();
        match &*first {
            Some(contact) => contact.trusts(from, key),
            None => {
                *first = Some(FirstContact {
                    key: *key,
                    members: members.to_vec(),
                });
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<(u64, PublicKey)>);

    impl PeerKeys for Fixed {
        fn trusts(&self, from: u64, key: &PublicKey) -> Result<bool, String> {
            Ok(self.0.iter().any(|(id, k)| *id == from && k == key))
        }
    }

    fn ring(seed: u8) -> KeyRing {
        KeyRing::new(Arc::new(NodeKey::from_seed([seed; 32])))
    }

    #[test]
    fn a_member_signed_request_passes_and_names_its_sender() {
        let keys = ring(1);
        let trust = Fixed(vec![(1, keys.current().public())]);
        let auth = sign(&keys, RpcKind::AppendEntries, 1, 2, b"payload");
        assert_eq!(
            verify(Some(&auth), RpcKind::AppendEntries, 2, b"payload", &trust),
            Ok((1, Proof::Signature))
        );
    }

    #[test]
    fn forged_or_altered_requests_are_refused() {
        let member = ring(1);
        let outsider = ring(9);
        let trust = Fixed(vec![(1, member.current().public())]);
        let check =
            |auth: &pb::PeerAuth, kind, me, payload: &[u8]| verify(Some(auth), kind, me, payload, &trust);

        assert_eq!(
            verify(None, RpcKind::Vote, 2, b"p", &trust),
            Err(AuthError::Missing)
        );
        // An outsider claiming to be node 1 with its own key.
        let forged = sign(&outsider, RpcKind::AppendEntries, 1, 2, b"p");
        assert_eq!(
            check(&forged, RpcKind::AppendEntries, 2, b"p"),
            Err(AuthError::Untrusted { from: 1 })
        );
        let good = sign(&member, RpcKind::AppendEntries, 1, 2, b"p");
        // Another body, another receiver, another kind: each breaks the signature or the target.
        assert!(matches!(
            check(&good, RpcKind::AppendEntries, 2, b"q"),
            Err(AuthError::BadSignature { from: 1, .. })
        ));
        assert_eq!(
            check(&good, RpcKind::AppendEntries, 3, b"p"),
            Err(AuthError::WrongTarget { to: 2, me: 3 })
        );
        assert!(matches!(
            check(&good, RpcKind::Vote, 2, b"p"),
            Err(AuthError::BadSignature { .. })
        ));
        // A member's signed pre-vote cannot be replayed as a vote, nor a vote as a pre-vote.
        let pre_vote = sign(&member, RpcKind::PreVote, 1, 2, b"v");
        assert_eq!(
            check(&pre_vote, RpcKind::PreVote, 2, b"v"),
            Ok((1, Proof::Signature))
        );
        assert!(matches!(
            check(&pre_vote, RpcKind::Vote, 2, b"v"),
            Err(AuthError::BadSignature { .. })
        ));
        let vote = sign(&member, RpcKind::Vote, 1, 2, b"v");
        assert!(matches!(
            check(&vote, RpcKind::PreVote, 2, b"v"),
            Err(AuthError::BadSignature { .. })
        ));
        // The member's key used to claim another member's id.
        let claims_3 = sign(&member, RpcKind::AppendEntries, 3, 2, b"p");
        assert_eq!(
            check(&claims_3, RpcKind::AppendEntries, 2, b"p"),
            Err(AuthError::Untrusted { from: 3 })
        );
        let mut short = good.clone();
        short.signatures[0].signature.truncate(10);
        assert!(matches!(
            check(&short, RpcKind::AppendEntries, 2, b"p"),
            Err(AuthError::Malformed(_))
        ));
        let mut many = good.clone();
        many.signatures = vec![good.signatures[0].clone(); 3];
        assert_eq!(
            check(&many, RpcKind::AppendEntries, 2, b"p"),
            Err(AuthError::TooManySignatures(3))
        );
    }

    /// Rule 3 as [`ClusterKeys`] keeps it, without a Raft instance: the first verifying
    /// sender binds itself and the members it lists.
    #[derive(Default)]
    struct Outside(Mutex<Option<FirstContact>>);

    impl PeerKeys for Outside {
        fn trusts(&self, from: u64, key: &PublicKey) -> Result<bool, String> {
            let bound = self.0.lock().unwrap_or_else(|p| p.into_inner());
            Ok(bound.as_ref().is_none_or(|c| c.trusts(from, key)))
        }

        fn accepted(&self, from: u64, key: &PublicKey, members: &[(u64, PublicKey)]) -> bool {
            let mut bound = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match &*bound {
                Some(c) => c.trusts(from, key),
                None => {
                    *bound = Some(FirstContact {
                        key: *key,
                        members: members.to_vec(),
                    });
                    true
                }
            }
        }
    }

    #[test]
    fn a_node_being_added_accepts_every_member_its_first_contact_listed() {
        let (n1, n2, n3, outsider) = (ring(1), ring(2), ring(3), ring(9));
        let members: Vec<(u64, PublicKey)> = [(1, &n1), (2, &n2), (3, &n3)]
            .iter()
            .map(|(id, k)| (*id, k.current().public()))
            .collect();
        let node4 = Outside::default();
        // Node 2 leads while node 4 is added, and reaches it first.
        let first = sign_listing(&n2, RpcKind::Vote, 2, 4, b"v", &members);
        assert_eq!(
            verify(Some(&first), RpcKind::Vote, 4, b"v", &node4),
            Ok((2, Proof::Signature))
        );
        // Leadership moves to node 1 before node 4 has appended anything: still accepted.
        let next = sign(&n1, RpcKind::AppendEntries, 1, 4, b"a");
        assert_eq!(
            verify(Some(&next), RpcKind::AppendEntries, 4, b"a", &node4),
            Ok((1, Proof::Signature))
        );
        // An outsider, or a member's key claiming another id, is not.
        let forged = sign(&outsider, RpcKind::AppendEntries, 99, 4, b"a");
        assert_eq!(
            verify(Some(&forged), RpcKind::AppendEntries, 4, b"a", &node4),
            Err(AuthError::Untrusted { from: 99 })
        );
        let claims_3 = sign(&n1, RpcKind::AppendEntries, 3, 4, b"a");
        assert_eq!(
            verify(Some(&claims_3), RpcKind::AppendEntries, 4, b"a", &node4),
            Err(AuthError::Untrusted { from: 3 })
        );
        // The member list is covered by the signature: a list altered on the way (an outsider
        // slipping its key in) breaks it, so a fresh node binds nothing.
        let mut altered = sign_listing(&n2, RpcKind::Vote, 2, 4, b"v", &members);
        altered.members.push(pb::MemberKey {
            node_id: 99,
            public_key: outsider.current().public().0.to_vec(),
        });
        let fresh = Outside::default();
        assert!(matches!(
            verify(Some(&altered), RpcKind::Vote, 4, b"v", &fresh),
            Err(AuthError::BadSignature { from: 2, .. })
        ));
        assert!(fresh.0.lock().unwrap_or_else(|p| p.into_inner()).is_none());
        let mut bad_key = first.clone();
        bad_key.members[0].public_key.truncate(5);
        assert_eq!(
            verify(Some(&bad_key), RpcKind::Vote, 4, b"v", &fresh),
            Err(AuthError::Malformed("a member key is not 32 bytes"))
        );
    }

    /// A ring that started with key `seed` and rotated to key `next`; and the key it replaced.
    fn rotated(seed: u8, next: u8) -> (KeyRing, Arc<NodeKey>) {
        let keys = ring(seed);
        let old = keys.current();
        let new = NodeKey::from_seed([next; 32]);
        let new_public = new.public();
        keys.stage(new);
        assert!(keys.promote(&new_public));
        (keys, old)
    }

    #[test]
    fn after_a_rotation_both_keys_sign_so_peers_on_either_side_of_it_accept() {
        let (keys, old) = rotated(1, 2);
        let old = old.public();
        let auth = sign(&keys, RpcKind::Vote, 1, 2, b"v");
        assert_eq!(auth.signatures.len(), 2);
        let before_rotation = Fixed(vec![(1, old)]);
        let after_rotation = Fixed(vec![(1, keys.current().public())]);
        assert_eq!(
            verify(Some(&auth), RpcKind::Vote, 2, b"v", &before_rotation),
            Ok((1, Proof::Signature))
        );
        assert_eq!(
            verify(Some(&auth), RpcKind::Vote, 2, b"v", &after_rotation),
            Ok((1, Proof::Signature))
        );
    }

    /// A receiver whose applied chain trusts only `active` keys (by id), in cluster "origin".
    struct Lagging(Vec<PublicKey>);

    impl PeerKeys for Lagging {
        fn trusts(&self, from: u64, key: &PublicKey) -> Result<bool, String> {
            // Node 1 holds the genesis key; nothing else is bound by the chain or the log.
            Ok(from == 1 && self.0.first() == Some(key))
        }

        fn active_key(&self, id: KeyId) -> Result<Option<PublicKey>, String> {
            Ok(self.0.iter().find(|k| k.key_id() == id).copied())
        }

        fn origin(&self) -> Result<Option<String>, String> {
            Ok(Some("origin".into()))
        }
    }

    fn admit(node_id: u64, key: &KeyRing, by: &KeyRing) -> Vec<u8> {
        let action = KeyAction::Admit {
            node_id,
            key: key.current().public(),
        };
        postcard::to_allocvec(&KeyChangeRequest::sign("origin", action, &by.current())).unwrap()
    }

    #[test]
    fn a_lagging_member_trusts_a_node_admitted_after_its_applied_chain_through_its_admissions() {
        // Genesis key A (node 1); node 4 (key B) was admitted by A, node 5 (key C) by B. The
        // receiver's chain knows only A: it must accept node 5 with the two proofs, in either
        // order, and nothing less or altered.
        let (a, b, c) = (ring(1), ring(4), ring(5));
        let receiver = Lagging(vec![a.current().public()]);
        let request = |admissions: Vec<Vec<u8>>| {
            let mut auth = sign(&c, RpcKind::AppendEntries, 5, 3, b"entries");
            auth.admissions = admissions;
            verify(Some(&auth), RpcKind::AppendEntries, 3, b"entries", &receiver)
        };
        let (c_by_b, b_by_a) = (admit(5, &c, &b), admit(4, &b, &a));
        assert_eq!(request(vec![]), Err(AuthError::Untrusted { from: 5 }));
        assert_eq!(
            request(vec![c_by_b.clone(), b_by_a.clone()]),
            Ok((5, Proof::Signature))
        );
        assert_eq!(
            request(vec![b_by_a.clone(), c_by_b.clone()]),
            Ok((5, Proof::Signature))
        );
        // B's admission alone admits B, not C; C's alone has an authoriser nobody trusts.
        assert_eq!(
            request(vec![b_by_a.clone()]),
            Err(AuthError::Untrusted { from: 5 })
        );
        assert_eq!(
            request(vec![c_by_b.clone()]),
            Err(AuthError::Untrusted { from: 5 })
        );
        // An admission of C for another node id does not let C speak for node 5.
        assert_eq!(
            request(vec![admit(6, &c, &b), b_by_a.clone()]),
            Err(AuthError::Untrusted { from: 5 })
        );
        // A self-made admission (authorised by C itself) is worth nothing.
        assert_eq!(
            request(vec![admit(5, &c, &c)]),
            Err(AuthError::Untrusted { from: 5 })
        );
        // An altered authorisation by a trusted key is a forgery, named as such.
        let mut forged: KeyChangeRequest = postcard::from_bytes(&b_by_a).unwrap();
        forged.authorization[0] ^= 1;
        assert!(matches!(
            request(vec![c_by_b.clone(), postcard::to_allocvec(&forged).unwrap()]),
            Err(AuthError::BadAdmission { from: 5, .. })
        ));
        // Bounded, and bytes that do not decode are refused.
        assert_eq!(
            request(vec![b_by_a.clone(); MAX_ADMISSIONS + 1]),
            Err(AuthError::TooManyAdmissions(MAX_ADMISSIONS + 1))
        );
        assert_eq!(
            request(vec![vec![0xff; 3]]),
            Err(AuthError::Malformed("an admission does not decode"))
        );
        // Signed by the wrong cluster's origin: the authorisation does not verify.
        let other = postcard::to_allocvec(&KeyChangeRequest::sign(
            "another cluster",
            KeyAction::Admit {
                node_id: 5,
                key: c.current().public(),
            },
            &a.current(),
        ))
        .unwrap();
        assert!(matches!(
            request(vec![other]),
            Err(AuthError::BadAdmission { .. })
        ));
    }

    /// A receiver that trusts fixed keys by node id and holds `own` keys (current first).
    struct Holding {
        trusted: Vec<(u64, PublicKey)>,
        own: Vec<Arc<NodeKey>>,
    }

    impl PeerKeys for Holding {
        fn trusts(&self, from: u64, key: &PublicKey) -> Result<bool, String> {
            Ok(self.trusted.iter().any(|(id, k)| *id == from && k == key))
        }

        fn pair_key(&self, from_key: &PublicKey, to_key: &PublicKey) -> Option<[u8; 32]> {
            self.own
                .iter()
                .find(|k| k.public() == *to_key)?
                .shared_key(from_key)
        }
    }

    #[test]
    fn a_tagged_request_passes_only_unaltered_from_a_bound_key_to_a_key_the_receiver_holds() {
        let (member, receiver, outsider) = (ring(1), ring(2), ring(9));
        let holding = Holding {
            trusted: vec![(1, member.current().public())],
            own: vec![receiver.current()],
        };
        let pairs = pair_keys(&member, &receiver.current().public());
        assert_eq!(pairs.len(), 1);
        // An append from node 1 to node 2, tagged with `pairs`.
        let append = |pairs: &[PairKey]| tag_listing(pairs, RpcKind::AppendEntries, 1, 2, b"payload", &[]);
        let tagged = append(&pairs);
        assert!(
            tagged.signatures.is_empty(),
            "a tagged request carries no signature"
        );
        let check =
            |auth: &pb::PeerAuth, kind, payload: &[u8]| verify(Some(auth), kind, 2, payload, &holding);
        assert_eq!(
            check(&tagged, RpcKind::AppendEntries, b"payload"),
            Ok((1, Proof::Tag))
        );
        let bad_tag = Err(AuthError::BadTag {
            from: 1,
            key: member.current().key_id().to_string(),
        });
        // Another body, or the same body as another kind of request.
        assert_eq!(check(&tagged, RpcKind::AppendEntries, b"payloaD"), bad_tag);
        assert_eq!(check(&tagged, RpcKind::Vote, b"payload"), bad_tag);
        // A flipped bit in the tag.
        let mut flipped = tagged.clone();
        flipped.macs[0].mac[5] ^= 1;
        assert_eq!(check(&flipped, RpcKind::AppendEntries, b"payload"), bad_tag);
        // Addressed to another node: refused before any tag is checked.
        assert_eq!(
            verify(Some(&tagged), RpcKind::AppendEntries, 3, b"payload", &holding),
            Err(AuthError::WrongTarget { to: 2, me: 3 })
        );
        // An outsider claiming the member's key, tagging with its own secret and the
        // receiver's key: it holds neither secret of the member's pair.
        let forged_pair = PairKey {
            from_key: member.current().public(),
            to_key: receiver.current().public(),
            secret: outsider
                .current()
                .shared_key(&receiver.current().public())
                .unwrap(),
        };
        let forged = append(&[forged_pair]);
        assert_eq!(check(&forged, RpcKind::AppendEntries, b"payload"), bad_tag);
        // An outsider's own key, honestly paired: nobody binds it to node 1.
        let own = append(&pair_keys(&outsider, &receiver.current().public()));
        assert_eq!(
            check(&own, RpcKind::AppendEntries, b"payload"),
            Err(AuthError::Untrusted { from: 1 })
        );
        // Made for a key the receiver does not hold (it rotated since): named as such, so the
        // sender signs instead.
        let stale = append(&pair_keys(&member, &outsider.current().public()));
        assert_eq!(
            check(&stale, RpcKind::AppendEntries, b"payload"),
            Err(AuthError::StaleTarget {
                from: 1,
                key: outsider.current().key_id().to_string(),
            })
        );
        // Malformed and oversized requests.
        let mut short = tagged.clone();
        short.macs[0].mac.pop();
        assert_eq!(
            check(&short, RpcKind::AppendEntries, b"payload"),
            Err(AuthError::Malformed("a tag is not 32 bytes"))
        );
        let mut crowded = tagged.clone();
        crowded.signatures = sign(&member, RpcKind::AppendEntries, 1, 2, b"payload").signatures;
        crowded.macs.push(tagged.macs[0].clone());
        assert_eq!(
            check(&crowded, RpcKind::AppendEntries, b"payload"),
            Err(AuthError::TooManySignatures(3))
        );
    }

    #[test]
    fn tags_carry_across_a_rotation_on_either_end() {
        // The sender rotated: it tags with both keys, and a receiver that binds only the old
        // one accepts. The receiver rotated: a tag made for its previous key still checks.
        let (sender, old_sender_key) = rotated(1, 11);
        let old_sender_key = old_sender_key.public();
        let (receiver, old_receiver_key) = rotated(2, 12);
        let holding = Holding {
            trusted: vec![(1, old_sender_key)],
            own: vec![receiver.current(), old_receiver_key.clone()],
        };
        let pairs = pair_keys(&sender, &old_receiver_key.public());
        assert_eq!(pairs.len(), 2, "the current key and the one it replaced");
        let tagged = tag_listing(&pairs, RpcKind::Vote, 1, 2, b"v", &[]);
        assert_eq!(
            verify(Some(&tagged), RpcKind::Vote, 2, b"v", &holding),
            Ok((1, Proof::Tag))
        );
    }
}
