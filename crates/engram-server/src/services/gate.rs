//! The gate every client call passes first: who is calling, and whether a grant allows it.
//!
//! A signed request (see `engram_access::request`) is checked against the key the node's
//! applied policy records for its agent, then against the replay guard (a timestamp within
//! [`REPLAY_WINDOW_MS`] of this node's clock, a nonce not seen inside the window). In enforced
//! mode an unsigned request is refused, and the call's action must be granted. A follower that
//! forwards a call copies the signature headers, and the leader checks them again: the
//! forwarding marker is a routing hint, never a credential.
//!
//! The node that serves a call checks it: a follower relays writes and linearizable reads to
//! the leader unchecked, and the leader (whose policy is current) decides. Apply checks
//! transactions and policy changes again against the policy at their own log entry; the
//! gate's check answers early and covers reads, which never reach the log. A stale read, a
//! watch or an audit call is checked against the answering node's applied policy.

use std::collections::HashMap;
use std::sync::Mutex;

use engram_access::request::{HEADERS, RequestAuth};
use engram_access::{Action, Mode, Principal, ReplayGuard};
use engram_audit::{Author, PublicKey, Verifier};
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

/// What a call needs of its caller.
pub enum Need {
    /// Nothing: served to anyone (cluster status, who-am-I, node-signed key changes).
    Nothing,
    /// A principal, in enforced mode; the action is checked later, on the parsed request (a
    /// transaction's actions depend on its ops).
    Principal,
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
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            replay: Mutex::new(ReplayGuard::new(REPLAY_WINDOW_MS, MAX_REMEMBERED_NONCES)),
            verifiers: Mutex::new(HashMap::new()),
            policy: Mutex::new((0, PolicyCache::default())),
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
}

impl Caller {
    /// What routing needs to know of a call before any check: whether another node forwarded
    /// it, and its signature headers to pass on. A call is checked by the node that serves it
    /// ([`Shared::admit`]), which for writes and linearizable reads is the leader: a follower
    /// whose applied policy lags (an agent registered a moment ago) never refuses a call it
    /// only relays.
    pub fn incoming(meta: &MetadataMap) -> Caller {
        Caller {
            principal: None,
            mode: None,
            forwarded: meta.contains_key(FORWARDED),
            scope: None,
            author: None,
            access_logged: false,
            signature: signature_headers(meta),
        }
    }

    /// The call as this node forwards it to the leader: marked forwarded, still signed.
    pub fn forward<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        let meta = req.metadata_mut();
        meta.insert(FORWARDED, AsciiMetadataValue::from_static("1"));
        for (name, value) in &self.signature {
            meta.insert(*name, value.clone());
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

    /// Authenticates a call of `method` (its metadata `meta` and message `message`) and checks
    /// `need`; see the module docs.
    pub fn admit<T: SignedBody>(
        &self,
        meta: &MetadataMap,
        message: &T,
        method: &str,
        need: Need,
    ) -> Result<Caller, ApiError> {
        self.admit_body(meta, || message.signed_body(method), method, need)
    }

    /// [`Shared::admit`] given how to make the call's signed body (for a call that becomes a
    /// transaction, from the converted request the caller has at hand). The body is made only
    /// for a signed request.
    pub fn admit_body(
        &self,
        meta: &MetadataMap,
        body: impl FnOnce() -> Vec<u8>,
        method: &str,
        need: Need,
    ) -> Result<Caller, ApiError> {
        let auth = RequestAuth::from_headers(|h| meta.get(h).and_then(|v| v.to_str().ok()))
            .map_err(|e| ApiError::Unauthenticated(e.to_string()))?;
        // One pass over the policy: the mode, the claimed agent's row and, if the call needs
        // an action, whether that agent holds it (used only once its signature verifies).
        // Whether the policy has every node log this call's reads (`engram access --enable`).
        let mut logged = false;
        let (mode, agent, verdict, scope) = self.with_policy(|cache, store| {
            let mode = cache.mode(store)?;
            if let Need::Action(_, namespace) = &need {
                logged = cache
                    .access_log(store)?
                    .iter()
                    .any(|p| crate::access_log::prefix_logs(p, namespace));
            }
            let Some(a) = &auth else {
                return Ok((mode, None, Ok(()), None));
            };
            let agent = cache.agent(store, a.principal.as_str())?;
            let (verdict, scope) = match &need {
                Need::Action(action, namespace) => {
                    let verdict = cache.check_action(store, Some(&a.principal), *action, namespace)?;
                    let scope = if mode == Some(Mode::Enforced) && verdict.is_ok() && action.per_attribute() {
                        cache.read_scope(store, &a.principal, *action, namespace)?
                    } else {
                        None
                    };
                    (verdict, scope)
                }
                Need::Nothing | Need::Principal => (Ok(()), None),
            };
            Ok((mode, agent, verdict, scope))
        })?;
        let mut author = None;
        let principal = match auth {
            None => None,
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
                if matches!(need, Need::Principal) {
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
            match (&need, &principal) {
                (Need::Nothing, _) => {}
                (_, None) => {
                    return Err(ApiError::Unauthenticated(
                        "this cluster requires signed requests: sign with a registered agent key (--agent-key)".into(),
                    ));
                }
                (Need::Principal | Need::Action(..), Some(_)) => {
                    if let Err(rejection) = verdict {
                        return Err(ApiError::PermissionDenied(rejection.to_string()));
                    }
                }
            }
        }
        Ok(Caller {
            principal,
            mode,
            forwarded: meta.contains_key(FORWARDED),
            // Only a verified principal's grants narrow what it is shown.
            scope: if mode == Some(Mode::Enforced) { scope } else { None },
            author,
            access_logged: logged,
            signature: signature_headers(meta),
        })
    }
}
