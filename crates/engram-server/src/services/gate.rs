//! The gate every client call passes first: who is calling, and whether a grant allows it.
//!
//! A signed request (see `engram_access::request`) is checked against the key the node's
//! applied policy records for its agent, then against the replay guard (a timestamp within
//! [`REPLAY_WINDOW_MS`] of this node's clock, a nonce not seen inside the window). In enforced
//! mode an unsigned request is refused, and the call's action must be granted. A follower that
//! forwards a call copies the signature headers, and the leader checks them again: the
//! forwarding marker is a routing hint, never a credential.
//!
//! The marker ([`FORWARDED`]) is still the forwarding node's to set, not the client's: a call
//! marked forwarded is never forwarded again, so a client that marked its own call would be
//! told by every follower that leadership is moving, and retry forever. The node signs the
//! marker (its id, under its node key: [`forward_message`]), and the receiver accepts it only
//! if a key its applied chain trusts for that node signed it; any other value is refused as
//! `INVALID_ARGUMENT`, which a client does not retry. The signature covers no time and no
//! request: a marker seen on the wire, sent again, only gives the sender back the answers a
//! marked call gets (no relaying, no certificate name of its own), never another's rights.
//!
//! The node that serves a call checks it: a follower relays writes and linearizable reads to
//! the leader unchecked, and the leader (whose policy is current) decides. Apply checks
//! transactions and policy changes again against the policy at their own log entry; the
//! gate's check answers early and covers reads, which never reach the log. A stale read, a
//! watch or an audit call is checked against the answering node's applied policy.
//!
//! Without a signature, a call over mutual TLS may be authenticated by its client certificate
//! ([`certificate_principal`] reads the name it gives, `engram_access::cert`): the name counts
//! as the principal if it is a registered agent that is not revoked. Such a call's writes are
//! attributed to the agent but carry no agent signature into the audit entry (there is none to
//! carry). A follower that forwards such a call vouches for the name it authenticated: it signs
//! (its node id, the time, the name) with its node key ([`VOUCH`]), and the serving node
//! accepts the name only if that signature verifies under a key its applied chain trusts for
//! that node, within [`REPLAY_WINDOW_MS`]. A forwarded call's own client certificate is the
//! forwarding node's, so it never names the caller; a client that marks its call forwarded
//! loses its certificate's name instead of gaining another's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use engram_access::request::{HEADERS, RequestAuth};
use engram_access::{Action, Mode, Principal, ReplayGuard};
use engram_audit::{Author, KeyRing, PublicKey, Verifier};
use engram_core::policy::{PolicyCache, ReadScope};
use engram_proto::SignedBody;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};

use super::{FORWARDED, Shared};
use crate::error::ApiError;

/// How far a signed request's time may be from this node's clock, either way. Every nonce
/// inside the window is remembered, so the window bounds that memory: at 10,000 signed
/// requests a second a node remembers 1.2 M (about 60 bytes each).
pub const REPLAY_WINDOW_MS: i64 = 60 * 1000;
/// Nonces remembered at most; beyond it the gate refuses signed requests until old ones
/// expire, rather than forget a nonce inside the window (about 250 MiB at the limit).
pub const MAX_REMEMBERED_NONCES: usize = 4 << 20;

/// The principal the caller's TLS client certificate names; set by [`certificate_principal`]
/// only (a value the client sends is removed first).
pub const CERT_PRINCIPAL: &str = "x-engram-cert-principal";
/// Why the caller's client certificate names no principal; set like [`CERT_PRINCIPAL`].
pub const CERT_REFUSED: &str = "x-engram-cert-refused";
/// A forwarding node's vouch for the principal its client's certificate named:
/// `NODE_ID.TIME_MS.KEY_HEX.SIGNATURE_HEX`, the signature over [`vouch_message`].
pub const VOUCH: &str = "x-engram-vouch";
/// The principal a [`VOUCH`] is for.
pub const VOUCHED_PRINCIPAL: &str = "x-engram-vouched-principal";
const VOUCH_DOMAIN: &[u8] = b"engram.v1 forwarded caller\n";
const FORWARD_DOMAIN: &[u8] = b"engram.v1 forwarded call\n";

/// The bytes node `from` signs for its forwarding marker: `FROM.KEY_HEX.SIGNATURE_HEX` in
/// [`FORWARDED`].
pub fn forward_message(from: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(FORWARD_DOMAIN.len() + 8);
    m.extend_from_slice(FORWARD_DOMAIN);
    m.extend_from_slice(&from.to_be_bytes());
    m
}

/// Forwarding markers' signatures that verified, kept at most; past it the set starts over.
/// Each node has one per key, so this is far more than a cluster needs.
const MAX_VERIFIED_MARKERS: usize = 1024;

/// The bytes node `from` signs at `time_ms` to vouch that its client authenticated as
/// `principal`.
pub fn vouch_message(from: u64, time_ms: i64, principal: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(VOUCH_DOMAIN.len() + 16 + principal.len());
    m.extend_from_slice(VOUCH_DOMAIN);
    m.extend_from_slice(&from.to_be_bytes());
    m.extend_from_slice(&time_ms.to_be_bytes());
    m.extend_from_slice(principal.as_bytes());
    m
}

/// The type of [`certificate_principal`].
#[cfg_attr(madsim, allow(dead_code))] // the simulation has no TLS
pub type CertInterceptor = fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>;

/// The interceptor in front of every client service: drops whatever the client put in
/// [`CERT_PRINCIPAL`], [`CERT_REFUSED`], then sets one of them from the certificate the TLS
/// handshake verified (without TLS, neither is set).
#[cfg_attr(madsim, allow(dead_code))] // the simulation has no TLS
pub fn certificate_principal(mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    let named = req.peer_certs().and_then(|certs| {
        certs
            .first()
            .map(|leaf| engram_access::cert::principal_of(leaf.as_ref()))
    });
    let meta = req.metadata_mut();
    meta.remove(CERT_PRINCIPAL);
    meta.remove(CERT_REFUSED);
    let (header, text) = match named {
        None => return Ok(req),
        Some(Ok(Some(principal))) => (CERT_PRINCIPAL, principal.to_string()),
        Some(Ok(None)) => (
            CERT_REFUSED,
            "the client certificate names no agent (no engram:agent: URI, no common name)".to_string(),
        ),
        Some(Err(e)) => (
            CERT_REFUSED,
            format!("the client certificate names no agent: {e}"),
        ),
    };
    // A name is ASCII by construction; a refusal may quote a common name that is not.
    let value = AsciiMetadataValue::try_from(text.as_str())
        .unwrap_or_else(|_| AsciiMetadataValue::from_static("the client certificate names no agent"));
    meta.insert(header, value);
    Ok(req)
}

/// What a call needs of its caller.
pub enum Need {
    /// Nothing: served to anyone (cluster status, who-am-I, node-signed key changes).
    Nothing,
    /// A principal, in enforced mode; the action is checked later, on the parsed request (a
    /// transaction's actions depend on its ops). The namespace the call is about (`""`:
    /// cluster-wide) is what a refusal records.
    Principal(String),
    /// The action on a namespace (`""`: cluster-wide).
    Action(Action, String),
}

impl Need {
    pub fn on(action: Action, namespace: &str) -> Need {
        Need::Action(action, namespace.to_string())
    }

    pub fn cluster(action: Action) -> Need {
        Need::Action(action, String::new())
    }

    /// The namespace the call is about (`""`: cluster-wide, or none).
    fn namespace(&self) -> &str {
        match self {
            Need::Nothing => "",
            Need::Principal(namespace) | Need::Action(_, namespace) => namespace,
        }
    }
}

/// Agent keys kept decompressed at most; past it the cache starts over.
const MAX_VERIFIERS: usize = 10_000;

/// The node's replay guard, and the agent keys it has decompressed (a key's decompressed form
/// never changes, so the cache needs no invalidation).
pub struct Gate {
    replay: Mutex<ReplayGuard>,
    verifiers: Mutex<HashMap<[u8; 32], Option<Verifier>>>,
    /// The policy rows this node has applied, read once and kept with the policy-change
    /// count they were read under (`RaftNode::policy_epoch`): a newer count drops them.
    policy: Mutex<(u64, PolicyCache)>,
    /// This node's forwarding marker, with the key that signed it (remade when the key
    /// rotates: signing on every forwarded call would be wasted, the marker does not change).
    marker: Mutex<Option<(Vec<PublicKey>, AsciiMetadataValue)>>,
    /// Markers of other nodes whose signature verified (whether the chain trusts the key is
    /// read again for every call: a key may be revoked).
    verified_markers: Mutex<std::collections::HashSet<String>>,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            replay: Mutex::new(ReplayGuard::new(REPLAY_WINDOW_MS, MAX_REMEMBERED_NONCES)),
            verifiers: Mutex::new(HashMap::new()),
            policy: Mutex::new((0, PolicyCache::default())),
            marker: Mutex::new(None),
            verified_markers: Mutex::new(std::collections::HashSet::new()),
        }
    }
}

impl Gate {
    fn verifier(&self, key: &PublicKey) -> Result<Option<Verifier>, ApiError> {
        let mut cache = self
            .verifiers
            .lock()
            .map_err(|_| ApiError::Internal("verifier cache poisoned".into()))?;
        if let Some(v) = cache.get(&key.0) {
            return Ok(v.clone());
        }
        if cache.len() >= MAX_VERIFIERS {
            cache.clear();
        }
        let v = key.verifier();
        cache.insert(key.0, v.clone());
        Ok(v)
    }
}

/// Who made an admitted call, and how to pass the call on.
pub struct Caller {
    pub principal: Option<Principal>,
    /// The mode the call was admitted under (`None`: the cluster's mode is not recorded yet).
    pub mode: Option<Mode>,
    pub forwarded: bool,
    /// For a read in enforced mode whose grants cover only some attributes: what may be shown
    /// (the rest is returned redacted). `None`: everything.
    pub scope: Option<ReadScope>,
    /// For a call that becomes a transaction ([`Need::Principal`]) signed by a verified agent:
    /// the signature as the transaction's audit entry records it.
    pub author: Option<Author>,
    /// Whether the policy switches the access log on for the namespace of the call's action
    /// (a node's own `--access-log` flag is checked where the call is recorded).
    pub access_logged: bool,
    signature: Vec<(&'static str, AsciiMetadataValue)>,
    /// For a call this node took directly whose client certificate named a principal: what
    /// [`Caller::forward`] vouches for.
    vouch: Option<Vouch>,
    /// This node's signed forwarding marker ([`Shared::forward_marker`]).
    marker: AsciiMetadataValue,
}

/// A principal this node's TLS authenticated, and the key to vouch for it with.
struct Vouch {
    principal: Principal,
    node_id: u64,
    keys: Arc<KeyRing>,
}

impl Caller {
    /// The call as this node forwards it to the leader: marked forwarded, still signed, and
    /// vouched for if this node's TLS authenticated its caller.
    pub fn forward<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        let meta = req.metadata_mut();
        // The simulation has no span export to continue.
        #[cfg(not(madsim))]
        crate::telemetry::pass_trace_on(meta);
        meta.insert(FORWARDED, self.marker.clone());
        for (name, value) in &self.signature {
            meta.insert(*name, value.clone());
        }
        if let Some(v) = &self.vouch {
            let time_ms = engram_raft::clock::now_ns() / 1_000_000;
            let key = v.keys.current();
            let signature = key.sign(&vouch_message(v.node_id, time_ms, v.principal.as_str()));
            let vouch = format!(
                "{}.{time_ms}.{}.{}",
                v.node_id,
                hex::encode(key.public().0),
                hex::encode(signature)
            );
            // Both are ASCII: a principal by construction, the vouch by its format.
            if let (Ok(vouch), Ok(principal)) = (
                AsciiMetadataValue::try_from(vouch.as_str()),
                AsciiMetadataValue::try_from(v.principal.as_str()),
            ) {
                meta.insert(VOUCH, vouch);
                meta.insert(VOUCHED_PRINCIPAL, principal);
            }
        }
        req
    }
}

fn signature_headers(meta: &MetadataMap) -> Vec<(&'static str, AsciiMetadataValue)> {
    HEADERS
        .iter()
        .filter_map(|h| meta.get(*h).map(|v| (*h, v.clone())))
        .collect()
}

impl Shared {
    /// What routing needs to know of a call before any check: whether another node forwarded
    /// it, its signature headers to pass on, and whom to vouch for. A call is checked by the
    /// node that serves it ([`Shared::admit`]), which for writes and linearizable reads is the
    /// leader: a follower whose applied policy lags (an agent registered a moment ago) never
    /// refuses a call it only relays.
    ///
    /// Refuses (`INVALID_ARGUMENT`) a forwarding marker no node of this cluster signed.
    pub fn incoming(&self, meta: &MetadataMap) -> Result<Caller, ApiError> {
        Ok(Caller {
            principal: None,
            mode: None,
            forwarded: self.forwarded(meta)?,
            scope: None,
            author: None,
            access_logged: false,
            signature: signature_headers(meta),
            vouch: self.vouch_for(meta),
            marker: self.forward_marker()?,
        })
    }

    /// This node's forwarding marker: `NODE_ID.KEY_HEX.SIGNATURE_HEX`, the signature over
    /// [`forward_message`] by its current node key, then the same by the key it replaced if
    /// this process rotated: its leader may apply the rotation after this node does, and
    /// until then trusts only the old key (as for node-to-node messages).
    pub fn forward_marker(&self) -> Result<AsciiMetadataValue, ApiError> {
        let keys = [Some(self.node.keys.current()), self.node.keys.previous()];
        let signers: Vec<PublicKey> = keys.iter().flatten().map(|k| k.public()).collect();
        let mut cached = self
            .gate
            .marker
            .lock()
            .map_err(|_| ApiError::Internal("forwarding marker poisoned".into()))?;
        if let Some((cached_signers, marker)) = &*cached
            && *cached_signers == signers
        {
            return Ok(marker.clone());
        }
        let id = self.node.node_id;
        let mut text = id.to_string();
        for key in keys.iter().flatten() {
            text.push('.');
            text.push_str(&hex::encode(key.public().0));
            text.push('.');
            text.push_str(&hex::encode(key.sign(&forward_message(id))));
        }
        let marker = AsciiMetadataValue::try_from(text.as_str())
            .map_err(|e| ApiError::Internal(format!("forwarding marker: {e}")))?;
        *cached = Some((signers, marker.clone()));
        Ok(marker)
    }

    /// Whether another node of this cluster forwarded the call: a signature of its
    /// [`FORWARDED`] marker verifies under a key this node's applied chain trusts for the node
    /// it names. A marker that does not is a client's, refused as `INVALID_ARGUMENT` (see the
    /// module docs).
    pub fn forwarded(&self, meta: &MetadataMap) -> Result<bool, ApiError> {
        let Some(marker) = meta.get(FORWARDED) else {
            return Ok(false);
        };
        let bad = |why: &str| {
            ApiError::Invalid(format!(
                "{FORWARDED}: {why}; only a node forwarding a call to its leader sets this header, a client must not send it"
            ))
        };
        let text = marker.to_str().map_err(|_| bad("is not ASCII"))?;
        let parts: Vec<&str> = text.split('.').collect();
        let (from, signed) = match parts[..] {
            [from, key, signature] => (from, vec![(key, signature)]),
            [from, key, signature, old_key, old_signature] => {
                (from, vec![(key, signature), (old_key, old_signature)])
            }
            _ => return Err(bad("is not a node's signed marker (NODE.KEY.SIGNATURE)")),
        };
        let from: u64 = from.parse().map_err(|_| bad("names no node id"))?;
        let mut why = String::new();
        for (key, signature) in signed {
            let key: [u8; 32] = hex::decode(key)
                .ok()
                .and_then(|k| k.try_into().ok())
                .ok_or_else(|| bad("has no 32-byte key"))?;
            let key = PublicKey(key);
            let trusted = self.read_state(|store| {
                engram_core::reads::active_signer(store, key.key_id())
                    .map(|row| row.is_some_and(|row| row.node_id == from && row.key == key))
            })?;
            if !trusted {
                why = format!("is signed by no key this node's chain trusts for node {from}");
                continue;
            }
            let mut verified = self
                .gate
                .verified_markers
                .lock()
                .map_err(|_| ApiError::Internal("forwarding markers poisoned".into()))?;
            let pair = format!("{from}.{}.{signature}", hex::encode(key.0));
            if verified.contains(&pair) {
                return Ok(true);
            }
            let signature: [u8; 64] = hex::decode(signature)
                .ok()
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| bad("has no 64-byte signature"))?;
            if !key.verify(&forward_message(from), &signature) {
                return Err(bad(&format!("does not verify under node {from}'s key")));
            }
            if verified.len() >= MAX_VERIFIED_MARKERS {
                verified.clear();
            }
            verified.insert(pair);
            return Ok(true);
        }
        Err(bad(&why))
    }

    fn vouch_for(&self, meta: &MetadataMap) -> Option<Vouch> {
        if meta.contains_key(FORWARDED) {
            return None;
        }
        let principal = Principal::new(meta.get(CERT_PRINCIPAL)?.to_str().ok()?).ok()?;
        Some(Vouch {
            principal,
            node_id: self.node.node_id,
            keys: self.node.keys.clone(),
        })
    }

    /// The principal the transport authenticated for an unsigned call: its client
    /// certificate's name, or for a forwarded call the forwarding node's verified vouch.
    fn transport_principal(&self, meta: &MetadataMap) -> Result<Option<Principal>, ApiError> {
        if !meta.contains_key(FORWARDED) {
            return Ok(meta
                .get(CERT_PRINCIPAL)
                .and_then(|v| v.to_str().ok())
                .and_then(|name| Principal::new(name).ok()));
        }
        let Some(vouch) = meta.get(VOUCH) else {
            return Ok(None);
        };
        let bad =
            |why: &str| ApiError::Unauthenticated(format!("a forwarded call's vouch for its caller {why}"));
        let text = vouch.to_str().map_err(|_| bad("is not ASCII"))?;
        let parts: Vec<&str> = text.split('.').collect();
        let [from, time_ms, key, signature] = parts[..] else {
            return Err(bad("is not NODE.TIME.KEY.SIGNATURE"));
        };
        let from: u64 = from.parse().map_err(|_| bad("has no node id"))?;
        let time_ms: i64 = time_ms.parse().map_err(|_| bad("has no time"))?;
        let key: [u8; 32] = hex::decode(key)
            .ok()
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| bad("has no 32-byte key"))?;
        let signature: [u8; 64] = hex::decode(signature)
            .ok()
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| bad("has no 64-byte signature"))?;
        let principal = meta
            .get(VOUCHED_PRINCIPAL)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| bad("names no principal"))?;
        let principal = Principal::new(principal).map_err(|e| bad(&e.to_string()))?;
        let now_ms = engram_raft::clock::now_ns() / 1_000_000;
        if (now_ms - time_ms).abs() > REPLAY_WINDOW_MS {
            return Err(bad(&format!(
                "was made {} s from this node's clock (the window is {} s)",
                (now_ms - time_ms) / 1000,
                REPLAY_WINDOW_MS / 1000
            )));
        }
        let key = PublicKey(key);
        let trusted = self.read_state(|store| {
            engram_core::reads::active_signer(store, key.key_id())
                .map(|row| row.is_some_and(|row| row.node_id == from && row.key == key))
        })?;
        if !trusted {
            return Err(bad(&format!(
                "is signed by a key this node's chain does not trust for node {from}"
            )));
        }
        if !key.verify(&vouch_message(from, time_ms, principal.as_str()), &signature) {
            return Err(bad(&format!("does not verify under node {from}'s key")));
        }
        Ok(Some(principal))
    }

    /// Runs `read` over this node's applied policy rows, through the gate's cache.
    fn with_policy<T>(
        &self,
        read: impl FnOnce(&mut PolicyCache, &dyn engram_storage::Store) -> Result<T, engram_core::CoreError>,
    ) -> Result<T, ApiError> {
        // The count is read before the rows: rows read after a change was written but before
        // the count moved are kept under the old count, and dropped at the next call.
        let epoch = self.node.policy_epoch();
        self.read_state(|store| {
            let mut guard = self
                .gate
                .policy
                .lock()
                .map_err(|_| ApiError::Internal("policy cache poisoned".into()))?;
            let (seen, cache) = &mut *guard;
            if *seen != epoch {
                cache.clear();
                *seen = epoch;
            }
            read(cache, store).map_err(ApiError::from)
        })
    }

    /// The security mode this node's applied chain records (`None`: not yet, this node being
    /// in no cluster or its cluster being initialised). Enforced comes from the gate's cache;
    /// anything else is read again, since an uninitialised store also reads as open there.
    #[cfg_attr(madsim, allow(dead_code))] // its caller, the exposure check, is not simulated
    pub fn security_mode(&self) -> Result<Option<Mode>, ApiError> {
        self.with_policy(|cache, store| match cache.mode(store)? {
            Some(Mode::Enforced) => Ok(Some(Mode::Enforced)),
            _ => engram_core::policy::settled_mode(store),
        })
    }

    /// The namespace prefixes this node logs the reads of: its `--access-log` flag and the
    /// policy's (`engram access --enable`), through the gate's cache.
    pub fn access_log_prefixes(&self) -> Result<Vec<String>, ApiError> {
        let mut all = self.access.prefixes().to_vec();
        let policy = self.with_policy(|cache, store| cache.access_log(store).map(<[String]>::to_vec))?;
        for p in policy {
            if !all.contains(&p) {
                all.push(p);
            }
        }
        Ok(all)
    }

    /// [`engram_core::policy::PolicyCache::check_tx`] at this node's applied policy, through
    /// the gate's cache.
    pub fn check_tx(
        &self,
        principal: Option<&Principal>,
        tx: &engram_types::TxRequest,
    ) -> Result<Result<(), engram_core::Rejection>, ApiError> {
        self.with_policy(|cache, store| cache.check_tx(store, principal, tx))
    }

    /// [`engram_core::policy::PolicyCache::check_redact`] at this node's applied policy.
    pub fn check_redact(
        &self,
        principal: Option<&Principal>,
        req: &engram_types::RedactRequest,
    ) -> Result<Result<(), engram_core::Rejection>, ApiError> {
        self.with_policy(|cache, store| cache.check_redact(store, principal, req))
    }

    /// [`engram_core::policy::PolicyCache::check_redact_where`] at this node's applied policy.
    pub fn check_redact_where(
        &self,
        principal: Option<&Principal>,
        req: &engram_types::RedactWhere,
    ) -> Result<Result<(), engram_core::Rejection>, ApiError> {
        self.with_policy(|cache, store| cache.check_redact_where(store, principal, req))
    }

    /// Which namespaces an admitted `caller` may read, for a list of them: `None` outside
    /// enforced mode (all of them); in enforced mode its grants (those it may read some
    /// attributes of are listed: a read there answers the rest withheld).
    pub fn readable_namespaces(
        &self,
        caller: &Caller,
    ) -> Result<Option<(String, engram_access::Policy)>, ApiError> {
        if caller.mode != Some(Mode::Enforced) {
            return Ok(None);
        }
        let Some(principal) = &caller.principal else {
            return Ok(Some((String::new(), engram_access::Policy::default())));
        };
        let policy = self.read_state(|store| engram_core::policy::policy_of(store, principal.as_str()))?;
        Ok(Some((principal.to_string(), policy)))
    }

    /// Authenticates a call of `method` (its metadata `meta` and message `message`) and checks
    /// `need`; see the module docs.
    pub fn admit<T: SignedBody>(
        &self,
        meta: &MetadataMap,
        message: &T,
        method: &'static str,
        need: Need,
    ) -> Result<Caller, ApiError> {
        self.admit_body(meta, || message.signed_body(method), method, need)
    }

    /// [`Shared::admit`] given how to make the call's signed body (for a call that becomes a
    /// transaction, from the converted request the caller has at hand). The body is made only
    /// for a signed request. A refusal is recorded in this node's access log
    /// ([`Shared::refusal`]).
    pub fn admit_body(
        &self,
        meta: &MetadataMap,
        body: impl FnOnce() -> Vec<u8>,
        method: &'static str,
        need: Need,
    ) -> Result<Caller, ApiError> {
        self.admit_checked(meta, body, method, &need)
            .map_err(|e| self.refusal(meta, method, need.namespace(), e))
    }

    /// Records `error` in this node's access log when it refuses a call of `method` on
    /// `namespace` for want of authentication or permission (`UNAUTHENTICATED`,
    /// `PERMISSION_DENIED`), with the agent the call claimed to come from; returns it. Only the
    /// node that decided records: an answer relayed from the leader is not recorded again.
    pub fn refusal(
        &self,
        meta: &MetadataMap,
        method: &'static str,
        namespace: &str,
        error: ApiError,
    ) -> ApiError {
        let code = error.code();
        if matches!(error, ApiError::Forwarded(_))
            || !matches!(code, tonic::Code::Unauthenticated | tonic::Code::PermissionDenied)
        {
            return error;
        }
        self.access.refuse(engram_core::access_log::Access {
            principal: claimed_principal(meta),
            call: method,
            namespace: namespace.to_string(),
            entity: None,
            as_of_tx: None,
            read_at: self.applied_index(),
            datoms: 0,
            refused: Some(engram_core::access_log::Refusal::new(
                super::rpc_metrics::code_name(code),
                &error.to_string(),
            )),
        });
        error
    }

    fn admit_checked(
        &self,
        meta: &MetadataMap,
        body: impl FnOnce() -> Vec<u8>,
        method: &str,
        need: &Need,
    ) -> Result<Caller, ApiError> {
        let forwarded = self.forwarded(meta)?;
        let auth = RequestAuth::from_headers(|h| meta.get(h).and_then(|v| v.to_str().ok()))
            .map_err(|e| ApiError::Unauthenticated(e.to_string()))?;
        // A signature names the caller; without one, the transport may.
        let transport = match &auth {
            Some(_) => None,
            None => self.transport_principal(meta)?,
        };
        let claimed = auth.as_ref().map(|a| &a.principal).or(transport.as_ref());
        // One pass over the policy: the mode, the claimed agent's row and, if the call needs
        // an action, whether that agent holds it (used only once its signature verifies).
        // Whether the policy has every node log this call's reads (`engram access --enable`).
        let mut logged = false;
        let (mode, agent, verdict, scope) = self.with_policy(|cache, store| {
            let mode = cache.mode(store)?;
            if let Need::Action(_, namespace) = need {
                logged = cache
                    .access_log(store)?
                    .iter()
                    .any(|p| crate::access_log::prefix_logs(p, namespace));
            }
            let Some(claimed) = claimed else {
                return Ok((mode, None, Ok(()), None));
            };
            let agent = cache.agent(store, claimed.as_str())?;
            let (verdict, scope) = match need {
                Need::Action(action, namespace) => {
                    let verdict = cache.check_action(store, Some(claimed), *action, namespace)?;
                    let scope = if mode == Some(Mode::Enforced) && verdict.is_ok() && action.per_attribute() {
                        cache.read_scope(store, claimed, *action, namespace)?
                    } else {
                        None
                    };
                    (verdict, scope)
                }
                Need::Nothing | Need::Principal(_) => (Ok(()), None),
            };
            Ok((mode, agent, verdict, scope))
        })?;
        let mut author = None;
        // Why an unsigned call's certificate did not name a principal, for a refusal.
        let mut unnamed = meta
            .get(CERT_REFUSED)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let principal = match auth {
            None => match (transport, &agent) {
                (None, _) => None,
                (Some(p), Some(row)) => match row.revoked_tx {
                    None => Some(p),
                    Some(tx) => {
                        unnamed = Some(format!(
                            "the client certificate names agent {p}, revoked at tx {tx}"
                        ));
                        None
                    }
                },
                (Some(p), None) => {
                    unnamed = Some(format!(
                        "the client certificate names {p}, which is not a registered agent (engram agent create)"
                    ));
                    None
                }
            },
            Some(auth) => {
                let who = &auth.principal;
                let Some(row) = agent else {
                    return Err(ApiError::Unauthenticated(format!(
                        "unknown agent {who}: no key is registered for it on this node (engram agent create)"
                    )));
                };
                if let Some(tx) = row.revoked_tx {
                    return Err(ApiError::Unauthenticated(format!(
                        "agent {who} was revoked at tx {tx}"
                    )));
                }
                let verifier = self.gate.verifier(&row.key)?;
                let body_hash = engram_types::Hash::of(&body());
                auth.verify_hash(&row.key, verifier.as_ref(), method, body_hash.as_bytes())
                    .map_err(|e| ApiError::Unauthenticated(e.to_string()))?;
                let now_ms = engram_raft::clock::now_ns() / 1_000_000;
                self.gate
                    .replay
                    .lock()
                    .map_err(|_| ApiError::Internal("replay guard poisoned".into()))?
                    .admit(&auth, now_ms)
                    .map_err(|e| ApiError::Unauthenticated(e.to_string()))?;
                if matches!(need, Need::Principal(_)) {
                    author = Some(Author {
                        principal: auth.principal.to_string(),
                        key: row.key,
                        method: method.to_string(),
                        request_hash: body_hash,
                        time_ms: auth.time_ms,
                        nonce: auth.nonce,
                        signature: auth.signature,
                    });
                }
                Some(auth.principal)
            }
        };
        // Until the mode is recorded (a cluster being initialised) nothing but what needs no
        // principal is served: the caller retries, and the mode decides the retry.
        if mode.is_none() && !matches!(need, Need::Nothing) {
            return Err(ApiError::Unavailable(
                "this cluster's security mode is not recorded yet (it is being initialised); retry".into(),
            ));
        }
        if mode == Some(Mode::Enforced) {
            match (need, &principal) {
                (Need::Nothing, _) => {}
                (_, None) => {
                    let mut why = "this cluster requires an authenticated caller: sign with a registered agent key (--agent-key), or present a TLS client certificate that names a registered agent".to_string();
                    if let Some(unnamed) = unnamed {
                        why.push_str("; ");
                        why.push_str(&unnamed);
                    }
                    return Err(ApiError::Unauthenticated(why));
                }
                (Need::Principal(_) | Need::Action(..), Some(_)) => {
                    if let Err(rejection) = verdict {
                        return Err(ApiError::PermissionDenied(rejection.to_string()));
                    }
                }
            }
        }
        Ok(Caller {
            principal,
            mode,
            forwarded,
            // Only a verified principal's grants narrow what it is shown.
            scope: if mode == Some(Mode::Enforced) { scope } else { None },
            author,
            access_logged: logged,
            signature: signature_headers(meta),
            vouch: self.vouch_for(meta),
            marker: self.forward_marker()?,
        })
    }
}

/// The agent a refused call claimed to come from, for the access log: its signature's agent,
/// else (a forwarded call) the agent the forwarding node vouched for, else its client
/// certificate's name; empty if none. None of them is verified here: the refusal may be for
/// exactly that.
fn claimed_principal(meta: &MetadataMap) -> String {
    if let Ok(Some(auth)) = RequestAuth::from_headers(|h| meta.get(h).and_then(|v| v.to_str().ok())) {
        return auth.principal.to_string();
    }
    let header = if meta.contains_key(FORWARDED) {
        VOUCHED_PRINCIPAL
    } else {
        CERT_PRINCIPAL
    };
    meta.get(header)
        .and_then(|v| v.to_str().ok())
        .and_then(|name| Principal::new(name).ok())
        .map(|p| p.to_string())
        .unwrap_or_default()
}
