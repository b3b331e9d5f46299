//! Who may do what, as replicated state: the security mode, agents and their keys, grants.
//!
//! Every change ([`PolicyOp`]) is one transaction of the system namespace
//! ([`SYSTEM_NAMESPACE`]), so it is in the audit chain and readable as of any transaction
//! (`engram get --ns engram.system`): an agent entity carries `:engram.agent/name`, `/key` and
//! `/status`; a grant entity `:engram.grant/principal`, `/action`, `/prefix` and `/status`; the
//! cluster entity `:engram.cluster/security`; a role assignment entity `:engram.role/agent`,
//! `/role` and `/status`. The datoms are written by the agent
//! `engram.policy` (so one claim per attribute holds the current value) with the acting
//! principal as the provenance source. Beside them, apply keeps `P` rows that answer "which
//! key does agent X have" and "what may X do" with one or two point reads, so a check costs the
//! same however long the policy's history is:
//!
//! | key | value |
//! |---|---|
//! | `Pmode` | [`ModeRow`]: pending (genesis written, mode not yet recorded) or the mode |
//! | `Pa` name | [`AgentRow`]: the agent's entity, key and whether it is revoked |
//! | `Pg` principal 0 action 0 prefix 0 attribute | [`GrantRow`]: an active grant (attribute empty: all) |
//! | `Pr` agent 0 role | [`RoleRow`]: the agent holds the role's grants |
//! | `Pl` prefix | [`AccessLogRow`]: every node logs the reads under the prefix |
//! | `Pt` namespace 0 attribute | [`RetentionRow`]: what is written there is kept this long |
//! | `Pv` namespace 0 attribute | [`VersionsRow`]: of each slot there, this many versions are kept |
//! | `Ps` namespace 0 | [`SessionRow`]: a session is open on the namespace, until its deadline |
//! | `Pe` namespace 0 | [`EndedSessionRow`]: the namespace's last session ended at this transaction |
//!
//! A store with no `Pmode` row predates modes: it is open.

use std::collections::BTreeMap;

use engram_access::{Action, Grant, Mode, Policy, PolicyOp, Principal, SYSTEM_NAMESPACE};
use engram_audit::{Author, PublicKey};
use engram_storage::{KeyValue, ReadView, Space, WriteBatch};
use engram_types::{
    Attribute, BranchOp, EntityId, EntityRef, Hash, Namespace, Op, Provenance, Status, TxId, TxOp, TxRequest,
    Value,
};
use serde::{Deserialize, Serialize};

use crate::CoreError;
use crate::rows::{Rejection, decode_row, encode_row};

/// The agent whose claims record the policy in the system namespace.
pub const POLICY_AGENT: &str = "engram.policy";

const TAG: u8 = b'P';
const MODE_KEY: &[u8] = b"Pmode";

/// The security mode row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModeRow {
    /// Genesis is applied; no transaction is accepted until the mode is recorded.
    Pending,
    Set(Mode),
}

/// An agent: its entity in the system namespace, its current key, and since when it is revoked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRow {
    pub entity: EntityId,
    pub key: PublicKey,
    pub since_tx: TxId,
    pub revoked_tx: Option<TxId>,
}

/// An active grant: its entity in the system namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRow {
    pub entity: EntityId,
    pub since_tx: TxId,
}

/// The row a genesis entry writes when the cluster will record its mode next.
pub fn pending_mode_row(batch: &mut WriteBatch) {
    batch.put(Space::State, MODE_KEY.to_vec(), encode_row(&ModeRow::Pending));
}

pub fn mode_row(view: &dyn ReadView) -> Result<Option<ModeRow>, CoreError> {
    view.get(Space::State, MODE_KEY)?
        .map(|bytes| decode_row("policy mode row", &bytes))
        .transpose()
}

/// The mode requests are checked under: a store without a mode row is open; a pending one is
/// `None`.
pub fn mode(view: &dyn ReadView) -> Result<Option<Mode>, CoreError> {
    Ok(match mode_row(view)? {
        None => Some(Mode::Open),
        Some(ModeRow::Pending) => None,
        Some(ModeRow::Set(mode)) => Some(mode),
    })
}

/// The mode once it is settled: `None` before genesis is applied (a node not yet in a
/// cluster) and while the mode is pending; a store whose chain predates modes is open.
pub fn settled_mode(view: &dyn ReadView) -> Result<Option<Mode>, CoreError> {
    if view.get(Space::State, crate::keys::META_HEAD)?.is_none() {
        return Ok(None);
    }
    mode(view)
}

/// An active role assignment: its entity in the system namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleRow {
    pub entity: EntityId,
    pub since_tx: TxId,
}

fn agent_key(name: &str) -> Vec<u8> {
    let mut k = vec![TAG, b'a'];
    k.extend_from_slice(name.as_bytes());
    k
}

fn grants_prefix(principal: &str) -> Vec<u8> {
    let mut k = vec![TAG, b'g'];
    k.extend_from_slice(principal.as_bytes());
    k.push(0);
    k
}

fn grant_key(g: &Grant) -> Vec<u8> {
    let mut k = grants_prefix(&g.principal);
    k.extend_from_slice(g.action.name().as_bytes());
    k.push(0);
    k.extend_from_slice(g.prefix.as_bytes());
    k.push(0);
    k.extend_from_slice(g.attribute.as_bytes());
    k
}

fn roles_prefix(agent: &str) -> Vec<u8> {
    let mut k = vec![TAG, b'r'];
    k.extend_from_slice(agent.as_bytes());
    k.push(0);
    k
}

fn role_key(agent: &str, role: &str) -> Vec<u8> {
    let mut k = roles_prefix(agent);
    k.extend_from_slice(role.as_bytes());
    k
}

fn scan_prefix(view: &dyn ReadView, prefix: &[u8]) -> Result<Vec<KeyValue>, CoreError> {
    let end = engram_storage::prefix_end(prefix);
    Ok(view.scan(Space::State, prefix, end.as_deref(), usize::MAX)?)
}

pub fn agent(view: &dyn ReadView, name: &str) -> Result<Option<AgentRow>, CoreError> {
    view.get(Space::State, &agent_key(name))?
        .map(|bytes| decode_row("agent row", &bytes))
        .transpose()
}

/// Checks the agent signature a transaction entry will record against the policy at this
/// entry: the agent exists and is not revoked, `author.key` is its key, the signature is for
/// `request` (the canonical bytes of the transaction or policy change, which hash to
/// `author.request_hash`), and its nonce was never applied. The Ed25519 signature itself
/// was checked by the leader's gate and is checked again by any offline verifier; it is not
/// re-checked here, where it would cost every replica a verification per write. Returns the
/// agent as a principal.
pub fn check_author(
    view: &dyn ReadView,
    author: &Author,
    request: &[u8],
) -> Result<Result<Principal, Rejection>, CoreError> {
    let refuse = |why: String| Ok(Err(Rejection::Unauthenticated(why)));
    let Ok(principal) = Principal::new(author.principal.clone()) else {
        return refuse(format!("{:?} is not an agent name", author.principal));
    };
    let Some(row) = agent(view, principal.as_str())? else {
        return refuse(format!("no agent named {principal}"));
    };
    if let Some(tx) = row.revoked_tx {
        return refuse(format!("agent {principal} was revoked at tx {tx}"));
    }
    if row.key != author.key {
        return refuse(format!(
            "agent {principal} signed with key {}, but its key here is {}",
            author.key.key_id(),
            row.key.key_id()
        ));
    }
    if Hash::of(request) != author.request_hash {
        return refuse(format!("agent {principal}'s signature is for another request"));
    }
    // Every replica holds the nonces applied before, so a replay is refused wherever it is
    // proposed, after any leader change.
    if let Some(tx) = view.get(
        Space::State,
        &crate::keys::used_nonce(principal.as_str(), &author.nonce),
    )? {
        let tx = <[u8; 8]>::try_from(tx.as_slice()).map_or(0, u64::from_be_bytes);
        return refuse(format!(
            "agent {principal}'s request with this nonce was already applied at tx {tx} (a replay)"
        ));
    }
    Ok(Ok(principal))
}

/// A namespace prefix whose reads every node logs (`*`: everything): its entity in the system
/// namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessLogRow {
    pub entity: EntityId,
    pub since_tx: TxId,
}

fn access_log_key(prefix: &str) -> Vec<u8> {
    let mut k = vec![TAG, b'l'];
    k.extend_from_slice(prefix.as_bytes());
    k
}

/// The prefixes the policy says every node logs the reads of (`engram access --enable`).
pub fn access_log_prefixes(view: &dyn ReadView) -> Result<Vec<String>, CoreError> {
    Ok(scan_prefix(view, &[TAG, b'l'])?
        .into_iter()
        .map(|(k, _)| String::from_utf8_lossy(&k[2..]).into_owned())
        .collect())
}

/// A retention policy in force: what is written to a namespace (or one attribute of it) is
/// redacted once it is older than `keep_ms` (`crate::redact_where`, `docs/FORGETTING.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionRow {
    pub entity: EntityId,
    pub since_tx: TxId,
    pub keep_ms: u64,
}

/// One retention policy as [`retention_policies`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    pub namespace: Namespace,
    /// `None`: every attribute of the namespace.
    pub attribute: Option<Attribute>,
    pub row: RetentionRow,
}

/// A versions policy in force: of each slot of a namespace (or of one attribute of it), what
/// the last `keep_versions` transactions that wrote it hold is kept, and its live claims; older
/// datoms are redacted (`crate::redact_where::superseded`, `docs/FORGETTING.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionsRow {
    pub entity: EntityId,
    pub since_tx: TxId,
    pub keep_versions: u32,
}

/// One versions policy as [`versions_policies`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versions {
    pub namespace: Namespace,
    /// `None`: every attribute of the namespace.
    pub attribute: Option<Attribute>,
    pub row: VersionsRow,
}

/// The row tags of the two kinds of retention policy, and of sessions open and ended.
const RETENTION_TAG: u8 = b't';
const VERSIONS_TAG: u8 = b'v';
const SESSION_TAG: u8 = b's';
const ENDED_SESSION_TAG: u8 = b'e';

/// A session open on a namespace (`docs/FORGETTING.md`, "Volatile namespaces"): it lapses at
/// `deadline_ns` (the time of the entry that opened or last renewed it, plus `ttl_ms`) unless
/// renewed before; when it ends, everything written to the namespace before the end goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRow {
    pub entity: EntityId,
    /// The transaction that opened it.
    pub since_tx: TxId,
    /// The transaction that opened or last renewed it.
    pub renewed_tx: TxId,
    pub ttl_ms: u64,
    pub deadline_ns: i64,
}

/// The last session of a namespace that ended (by its end or its lapse): the leader forgets
/// what was written there before `ended_tx`, and apply takes only such ranges for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedSessionRow {
    pub entity: EntityId,
    pub ended_tx: TxId,
    /// Whether it lapsed (its deadline passed) rather than being ended.
    pub lapsed: bool,
}

/// A session as [`sessions`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub namespace: Namespace,
    pub row: SessionRow,
}

/// An ended session as [`ended_sessions`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndedSession {
    pub namespace: Namespace,
    pub row: EndedSessionRow,
}

fn session_key(namespace: &str) -> Vec<u8> {
    target_key(SESSION_TAG, namespace, "")
}

fn ended_session_key(namespace: &str) -> Vec<u8> {
    target_key(ENDED_SESSION_TAG, namespace, "")
}

/// Every session open, by namespace.
pub fn sessions(view: &dyn ReadView) -> Result<Vec<Session>, CoreError> {
    Ok(targeted_rows(view, SESSION_TAG, "session row")?
        .into_iter()
        .map(|(namespace, _, row)| Session { namespace, row })
        .collect())
}

/// The last ended session of every namespace that had one, by namespace.
pub fn ended_sessions(view: &dyn ReadView) -> Result<Vec<EndedSession>, CoreError> {
    Ok(targeted_rows(view, ENDED_SESSION_TAG, "ended session row")?
        .into_iter()
        .map(|(namespace, _, row)| EndedSession { namespace, row })
        .collect())
}

/// Whether an ended session makes `req`: the namespace's last session ended at or after the
/// predicate's `before_tx`, and the predicate says nothing else. What apply checks before it
/// takes a range the leader proposed to forget a session's namespace, in place of a grant.
pub fn session_allows(
    view: &dyn ReadView,
    req: &engram_types::RedactWhere,
) -> Result<Result<(), Rejection>, CoreError> {
    let refuse = |why: String| {
        Ok(Err(Rejection::Policy(format!(
            "session of {}: {why}",
            req.namespace
        ))))
    };
    let Some(bytes) = view.get(Space::State, &ended_session_key(req.namespace.as_str()))? else {
        return refuse("no session has ended there".into());
    };
    let row: EndedSessionRow = decode_row("ended session row", &bytes)?;
    let p = &req.predicate;
    let only_before = engram_types::Predicate {
        before_tx: p.before_tx,
        ..engram_types::Predicate::default()
    };
    match p.before_tx {
        Some(before) if *p == only_before && before <= row.ended_tx => Ok(Ok(())),
        _ => refuse("the predicate is not the ended session's".into()),
    }
}

fn retention_key(namespace: &str, attribute: &str) -> Vec<u8> {
    target_key(RETENTION_TAG, namespace, attribute)
}

fn versions_key(namespace: &str, attribute: &str) -> Vec<u8> {
    target_key(VERSIONS_TAG, namespace, attribute)
}

fn target_key(tag: u8, namespace: &str, attribute: &str) -> Vec<u8> {
    let mut k = vec![TAG, tag];
    k.extend_from_slice(namespace.as_bytes());
    k.push(0);
    k.extend_from_slice(attribute.as_bytes());
    k
}

/// Every retention policy in force, by namespace then attribute.
pub fn retention_policies(view: &dyn ReadView) -> Result<Vec<Retention>, CoreError> {
    Ok(targeted_rows(view, RETENTION_TAG, "retention row")?
        .into_iter()
        .map(|(namespace, attribute, row)| Retention {
            namespace,
            attribute,
            row,
        })
        .collect())
}

/// Every versions policy in force, by namespace then attribute.
pub fn versions_policies(view: &dyn ReadView) -> Result<Vec<Versions>, CoreError> {
    Ok(targeted_rows(view, VERSIONS_TAG, "versions row")?
        .into_iter()
        .map(|(namespace, attribute, row)| Versions {
            namespace,
            attribute,
            row,
        })
        .collect())
}

/// The rows under `tag` keyed by namespace and attribute, decoded.
fn targeted_rows<T: serde::de::DeserializeOwned>(
    view: &dyn ReadView,
    tag: u8,
    what: &'static str,
) -> Result<Vec<(Namespace, Option<Attribute>, T)>, CoreError> {
    let mut out = Vec::new();
    for (k, v) in scan_prefix(view, &[TAG, tag])? {
        let corrupt = |why: String| CoreError::corrupt(format!("{what} {}", crate::rows::hex(&k)), why);
        let rest = &k[2..];
        let split = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| corrupt("no separator".into()))?;
        let namespace = Namespace::new(String::from_utf8_lossy(&rest[..split]).into_owned())
            .map_err(|e| corrupt(e.to_string()))?;
        let attribute = match &rest[split + 1..] {
            [] => None,
            a => Some(
                Attribute::new(String::from_utf8_lossy(a).into_owned())
                    .map_err(|e| corrupt(e.to_string()))?,
            ),
        };
        out.push((namespace, attribute, decode_row(what, &v)?));
    }
    Ok(out)
}

/// Whether a retention policy in force makes `req` at `proposed_time_ns`: a policy on its
/// namespace and attribute keeping `keep_ms`, a predicate that says nothing but that attribute
/// and a write time no later than `keep_ms` before the entry's time. What apply checks before
/// it takes a range a retention policy proposed, in place of a grant.
pub fn retention_allows(
    view: &dyn ReadView,
    req: &engram_types::RedactWhere,
    keep_ms: u64,
    proposed_time_ns: i64,
) -> Result<Result<(), Rejection>, CoreError> {
    let p = &req.predicate;
    let attribute = p.attribute.as_ref().map(Attribute::as_str).unwrap_or_default();
    let refuse = |why: String| {
        Ok(Err(Rejection::Policy(format!(
            "retention of {}: {why}",
            req.namespace
        ))))
    };
    let Some(bytes) = view.get(Space::State, &retention_key(req.namespace.as_str(), attribute))? else {
        return refuse("no retention policy is in force".into());
    };
    let row: RetentionRow = decode_row("retention row", &bytes)?;
    if row.keep_ms != keep_ms {
        return refuse(format!("the policy keeps {} ms, not {keep_ms}", row.keep_ms));
    }
    let only_time = engram_types::Predicate {
        attribute: p.attribute.clone(),
        written_before_ns: p.written_before_ns,
        ..engram_types::Predicate::default()
    };
    let keep_ns = i64::try_from(keep_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
    match p.written_before_ns {
        Some(cutoff) if *p == only_time && cutoff <= proposed_time_ns.saturating_sub(keep_ns) => Ok(Ok(())),
        _ => refuse("the predicate is not the policy's".into()),
    }
}

/// Whether a versions policy in force makes `req`: a policy on its namespace and attribute
/// keeping exactly `keep_versions`, and a predicate that says nothing but that attribute. What
/// apply checks before it takes a range a versions policy proposed, in place of a grant.
pub fn retention_versions_allow(
    view: &dyn ReadView,
    req: &engram_types::RedactWhere,
    keep_versions: u32,
) -> Result<Result<(), Rejection>, CoreError> {
    let p = &req.predicate;
    let attribute = p.attribute.as_ref().map(Attribute::as_str).unwrap_or_default();
    let refuse = |why: String| {
        Ok(Err(Rejection::Policy(format!(
            "versions policy of {}: {why}",
            req.namespace
        ))))
    };
    let Some(bytes) = view.get(Space::State, &versions_key(req.namespace.as_str(), attribute))? else {
        return refuse("no versions policy is in force".into());
    };
    let row: VersionsRow = decode_row("versions row", &bytes)?;
    if row.keep_versions != keep_versions {
        return refuse(format!(
            "the policy keeps {} versions, not {keep_versions}",
            row.keep_versions
        ));
    }
    let only_attribute = engram_types::Predicate {
        attribute: p.attribute.clone(),
        ..engram_types::Predicate::default()
    };
    if *p != only_attribute {
        return refuse("the predicate is not the policy's".into());
    }
    Ok(Ok(()))
}

/// Every agent, by name.
pub fn agents(view: &dyn ReadView) -> Result<Vec<(String, AgentRow)>, CoreError> {
    scan_prefix(view, &[TAG, b'a'])?
        .into_iter()
        .map(|(k, v)| {
            let name = String::from_utf8_lossy(&k[2..]).into_owned();
            Ok((name, decode_row("agent row", &v)?))
        })
        .collect()
}

fn grant_from_key(key: &[u8]) -> Result<Grant, CoreError> {
    let body = &key[2..];
    let mut parts = body.splitn(4, |b| *b == 0);
    let (Some(principal), Some(action), Some(prefix), Some(attribute)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(CoreError::corrupt("grant row key", "fewer than four parts"));
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let action = text(action)
        .parse::<Action>()
        .map_err(|e| CoreError::corrupt("grant row key", e))?;
    Ok(Grant {
        principal: text(principal),
        action,
        prefix: text(prefix),
        attribute: text(attribute),
    })
}

/// Every active grant, with its row.
pub fn grants(view: &dyn ReadView) -> Result<Vec<(Grant, GrantRow)>, CoreError> {
    scan_prefix(view, &[TAG, b'g'])?
        .into_iter()
        .map(|(k, v)| Ok((grant_from_key(&k)?, decode_row("grant row", &v)?)))
        .collect()
}

/// The roles (`role:<name>`) `agent` is assigned to.
pub fn roles_of(view: &dyn ReadView, agent: &str) -> Result<Vec<String>, CoreError> {
    let prefix = roles_prefix(agent);
    Ok(scan_prefix(view, &prefix)?
        .into_iter()
        .map(|(k, _)| String::from_utf8_lossy(&k[prefix.len()..]).into_owned())
        .collect())
}

/// Every role assignment: agent, role, row.
pub fn role_assignments(view: &dyn ReadView) -> Result<Vec<(String, String, RoleRow)>, CoreError> {
    scan_prefix(view, &[TAG, b'r'])?
        .into_iter()
        .map(|(k, v)| {
            let body = &k[2..];
            let split = body
                .iter()
                .position(|b| *b == 0)
                .ok_or_else(|| CoreError::corrupt("role row key", "no separator"))?;
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            Ok((
                text(&body[..split]),
                text(&body[split + 1..]),
                decode_row("role row", &v)?,
            ))
        })
        .collect()
}

/// The grants that apply to `principal`: its own, those of `*`, and those of its roles.
pub fn policy_of(view: &dyn ReadView, principal: &str) -> Result<Policy, CoreError> {
    let roles = roles_of(view, principal)?;
    let mut grants = Vec::new();
    for who in [principal, Grant::ANYONE]
        .into_iter()
        .chain(roles.iter().map(String::as_str))
    {
        for (k, _) in scan_prefix(view, &grants_prefix(who))? {
            grants.push(grant_from_key(&k)?);
        }
    }
    Ok(Policy { grants, roles })
}

/// The actions a transaction needs, from its request alone.
pub fn actions_of(req: &TxRequest) -> Vec<Action> {
    let mut need = Vec::new();
    if req.ops.iter().any(|op| op.op == Op::Assert) {
        need.push(Action::Write);
    }
    if req.ops.iter().any(|op| op.op == Op::Retract) {
        need.push(Action::Retract);
    }
    if !req.ops.is_empty() && req.provenance.status == Status::Verified {
        need.push(Action::Promote);
    }
    if !req.schema.is_empty() {
        need.push(Action::Schema);
    }
    match &req.branch_op {
        Some(BranchOp::Merge { .. }) => need.push(Action::Merge),
        Some(_) => need.push(Action::Branch),
        None => {}
    }
    need
}

/// What [`PolicyCache::check_tx`] reads of the policy (the mode, and per principal its agent row and its
/// grants), kept between checks. Only a policy change or a replaced state (a snapshot install)
/// changes those rows, so its owner clears the cache then. Apply keeps one, and so does each
/// node's gate (cleared when the state machine's policy-change counter moves), so a request
/// costs no policy read while the policy stands.
#[derive(Default)]
pub struct PolicyCache {
    mode: Option<Option<Mode>>,
    access_log: Option<Vec<String>>,
    principals: std::collections::HashMap<String, (Option<AgentRow>, Policy)>,
}

impl PolicyCache {
    /// Principals kept at most; past it the cache starts over.
    const MAX_PRINCIPALS: usize = 10_000;

    pub fn clear(&mut self) {
        self.mode = None;
        self.access_log = None;
        self.principals.clear();
    }

    /// [`access_log_prefixes`], cached.
    pub fn access_log(&mut self, view: &dyn ReadView) -> Result<&[String], CoreError> {
        if self.access_log.is_none() {
            self.access_log = Some(access_log_prefixes(view)?);
        }
        Ok(self.access_log.as_deref().unwrap_or_default())
    }

    /// [`mode`], cached.
    pub fn mode(&mut self, view: &dyn ReadView) -> Result<Option<Mode>, CoreError> {
        match self.mode {
            Some(known) => Ok(known),
            None => Ok(*self.mode.insert(mode(view)?)),
        }
    }

    fn principal(
        &mut self,
        view: &dyn ReadView,
        name: &str,
    ) -> Result<&(Option<AgentRow>, Policy), CoreError> {
        if !self.principals.contains_key(name) {
            if self.principals.len() >= Self::MAX_PRINCIPALS {
                self.principals.clear();
            }
            let entry = (agent(view, name)?, policy_of(view, name)?);
            self.principals.insert(name.to_string(), entry);
        }
        self.principals
            .get(name)
            .ok_or_else(|| CoreError::corrupt("policy cache", "an entry vanished"))
    }

    /// [`agent`], cached.
    pub fn agent(&mut self, view: &dyn ReadView, name: &str) -> Result<Option<AgentRow>, CoreError> {
        Ok(self.principal(view, name)?.0.clone())
    }

    /// [`check_action`], cached.
    pub fn check_action(
        &mut self,
        view: &dyn ReadView,
        principal: Option<&Principal>,
        action: Action,
        namespace: &str,
    ) -> Result<Result<(), Rejection>, CoreError> {
        self.decide(view, principal, action, namespace, None)
    }

    /// Whether `principal` may do `action` in `namespace`: on `attribute` (an op of a
    /// transaction), or on the namespace as a whole (`None`; a read needs only some grant
    /// there, and what its grants do not cover is answered redacted, see [`ReadScope`]).
    fn decide(
        &mut self,
        view: &dyn ReadView,
        principal: Option<&Principal>,
        action: Action,
        namespace: &str,
        attribute: Option<&str>,
    ) -> Result<Result<(), Rejection>, CoreError> {
        let refuse = |who: &str, what: String| {
            Ok(Err(Rejection::NotAuthorized {
                principal: who.to_string(),
                action: what,
                namespace: namespace.to_string(),
            }))
        };
        let Some(p) = principal else {
            return refuse("(unauthenticated)", action.name().to_string());
        };
        let who = p.as_str();
        let (row, policy) = self.principal(view, who)?;
        let active = matches!(row, Some(r) if r.revoked_tx.is_none());
        let allowed = match attribute {
            Some(a) => policy.allows_attribute(who, action, namespace, a),
            None if matches!(action, Action::Read | Action::ReadHistory | Action::Watch) => {
                policy.allows_some(who, action, namespace)
            }
            None => policy.allows(who, action, namespace),
        };
        if active && allowed {
            return Ok(Ok(()));
        }
        // The refusal names the attribute only when the principal may do the action on other
        // attributes of the namespace; otherwise the action alone is what it lacks.
        let what = match attribute {
            Some(a) if active && policy.allows_some(who, action, namespace) => {
                format!("{} on {a}", action.name())
            }
            _ => action.name().to_string(),
        };
        refuse(who, what)
    }

    /// What `principal` may see of a read of `action` in `namespace`: `None` when its grants
    /// cover every attribute there. The grants are copied only when they narrow the read.
    pub fn read_scope(
        &mut self,
        view: &dyn ReadView,
        principal: &Principal,
        action: Action,
        namespace: &str,
    ) -> Result<Option<ReadScope>, CoreError> {
        let (row, policy) = self.principal(view, principal.as_str())?;
        let policy = match row {
            Some(r) if r.revoked_tx.is_none() => policy,
            _ => &Policy::default(),
        };
        if policy.allows(principal.as_str(), action, namespace) {
            return Ok(None);
        }
        Ok(Some(ReadScope {
            principal: principal.clone(),
            action,
            namespace: namespace.to_string(),
            policy: policy.clone(),
        }))
    }

    /// Whether `principal` may make this redaction under the current policy: the `redact`
    /// grant on its namespace in enforced mode; in open mode, anyone (as anyone may write),
    /// with a signed request's principal still required to be the request's agent.
    pub fn check_redact(
        &mut self,
        view: &dyn ReadView,
        principal: Option<&Principal>,
        req: &engram_types::RedactRequest,
    ) -> Result<Result<(), Rejection>, CoreError> {
        self.check_redact_in(view, principal, &req.namespace, &req.provenance.agent)
    }

    /// [`PolicyCache::check_redact`] for a redaction by predicate.
    pub fn check_redact_where(
        &mut self,
        view: &dyn ReadView,
        principal: Option<&Principal>,
        req: &engram_types::RedactWhere,
    ) -> Result<Result<(), Rejection>, CoreError> {
        self.check_redact_in(view, principal, &req.namespace, &req.provenance.agent)
    }

    fn check_redact_in(
        &mut self,
        view: &dyn ReadView,
        principal: Option<&Principal>,
        namespace: &Namespace,
        agent: &str,
    ) -> Result<Result<(), Rejection>, CoreError> {
        if let Some(refused) = refused_before_grants(namespace, agent, principal) {
            return Ok(Err(refused));
        }
        match self.mode(view)? {
            None => Ok(Err(Rejection::NotConfigured)),
            Some(Mode::Open) => Ok(Ok(())),
            Some(Mode::Enforced) => self.decide(view, principal, Action::Redact, namespace.as_str(), None),
        }
    }

    /// Whether `principal` may make this transaction under the current policy: the check apply
    /// makes (and the gateway makes first, for a precise answer before anything is proposed).
    /// Open mode checks only that a signed request's principal is the transaction's agent.
    pub fn check_tx(
        &mut self,
        view: &dyn ReadView,
        principal: Option<&Principal>,
        req: &TxRequest,
    ) -> Result<Result<(), Rejection>, CoreError> {
        if let Some(refused) = refused_before_grants(&req.namespace, &req.provenance.agent, principal) {
            return Ok(Err(refused));
        }
        match self.mode(view)? {
            None => Ok(Err(Rejection::NotConfigured)),
            Some(Mode::Open) => Ok(Ok(())),
            Some(Mode::Enforced) if crate::planted::active(crate::planted::PlantedBug::SkipGrantCheck) => {
                Ok(Ok(()))
            }
            Some(Mode::Enforced) => {
                let ns = req.namespace.as_str();
                // The actions on facts are checked per op, on its attribute (a grant may cover
                // some attributes only); the others on the namespace.
                let mut checks: Vec<(Action, Option<&str>)> = Vec::new();
                for action in actions_of(req) {
                    if !action.per_attribute() {
                        checks.push((action, None));
                        continue;
                    }
                    let ops = req.ops.iter().filter(|op| match action {
                        Action::Write => op.op == Op::Assert,
                        Action::Retract => op.op == Op::Retract,
                        _ => true,
                    });
                    checks.extend(ops.map(|op| (action, Some(op.attribute.as_str()))));
                }
                for (action, attribute) in checks {
                    if let Err(r) = self.decide(view, principal, action, ns, attribute)? {
                        return Ok(Err(r));
                    }
                }
                Ok(Ok(()))
            }
        }
    }
}

/// Whether `principal` holds `action` on `namespace` (`""`: cluster-wide) in enforced mode:
/// an active agent with a grant. Callers check the mode first.
pub fn check_action(
    view: &dyn ReadView,
    principal: Option<&Principal>,
    action: Action,
    namespace: &str,
) -> Result<Result<(), Rejection>, CoreError> {
    PolicyCache::default().check_action(view, principal, action, namespace)
}

/// What one caller may read of one namespace: the values of the attributes its grants cover;
/// of the others, a read returns the datom with its value withheld (its hash stays, so a proof
/// still verifies). `None` in open mode or for a grant on the whole namespace.
#[derive(Clone, Debug)]
pub struct ReadScope {
    pub principal: Principal,
    pub action: Action,
    pub namespace: String,
    pub policy: Policy,
}

impl ReadScope {
    /// Whether the values of `attribute` may be shown.
    pub fn shows(&self, attribute: &str) -> bool {
        self.policy
            .allows_attribute(self.principal.as_str(), self.action, &self.namespace, attribute)
    }

    /// Why a value of `attribute` is withheld, as a redacted datom says it.
    pub fn reason(&self, attribute: &str) -> String {
        format!(
            "{} holds no {} grant on {attribute} in {}",
            self.principal,
            self.action.name(),
            self.namespace
        )
    }
}

/// A policy change, planned: the system-namespace transaction that records it, and what to
/// do to the `P` rows once that transaction is applied.
pub struct PlannedChange {
    pub request: TxRequest,
    effect: Effect,
}

/// What a retention policy keeps: for a time, or a number of versions of each slot.
#[derive(Clone, Copy)]
enum Kept {
    Ms(u64),
    Versions(u32),
}

/// What a planned change does to the `P` rows once its transaction is applied.
#[derive(Default)]
struct Effect {
    mode: Option<Mode>,
    /// Agents to write: name, entity (`Temp` entities are resolved from the receipt), key,
    /// and whether this change revokes it.
    agents: Vec<(Principal, EntityRef, PublicKey, bool)>,
    /// Grants to record, with their entities.
    grants: Vec<(Grant, EntityRef)>,
    /// A grant this change ends.
    revoke: Option<Grant>,
    /// A role assignment to record (agent, role, entity), or to end (agent, role).
    assign: Option<(Principal, Principal, EntityRef)>,
    unassign: Option<(Principal, Principal)>,
    /// An access log prefix switched on (with its entity) or off.
    access_log: Option<(String, EntityRef, bool)>,
    /// A retention policy set (namespace, attribute, entity, rule; an amount of 0: ended).
    retention: Option<(String, String, EntityRef, Kept)>,
    /// A session opened, renewed or ended.
    session: Option<SessionEffect>,
}

/// What a session change does to the `Ps` and `Pe` rows.
enum SessionEffect {
    /// Opened (`since_tx` `None`: by this change) or renewed, lapsing at `deadline_ns`.
    Open {
        namespace: String,
        entity: EntityRef,
        since_tx: Option<TxId>,
        ttl_ms: u64,
        deadline_ns: i64,
    },
    Ended {
        namespace: String,
        entity: EntityId,
        lapsed: bool,
    },
}

fn attr(name: &str) -> Attribute {
    Attribute::new(name).expect("a valid built-in attribute name")
}

/// What refuses a write (a transaction or a redaction) in `namespace` recorded as `agent`'s,
/// made by `principal`, whatever the grants: the system namespace, written only by policy
/// changes, and a signer who is not the recorded agent.
fn refused_before_grants(
    namespace: &Namespace,
    agent: &str,
    principal: Option<&Principal>,
) -> Option<Rejection> {
    if namespace.as_str() == SYSTEM_NAMESPACE {
        return Some(Rejection::SystemNamespace);
    }
    match principal {
        Some(p) if p.as_str() != agent => Some(Rejection::AgentMismatch {
            agent: agent.to_string(),
            principal: p.to_string(),
        }),
        _ => None,
    }
}

fn assert(entity: &EntityRef, attribute: &str, value: Value) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity: entity.clone(),
        attribute: attr(attribute),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

fn agent_ops(entity: &EntityRef, name: &Principal, key: &PublicKey, status: &str, ops: &mut Vec<TxOp>) {
    ops.push(assert(
        entity,
        ":engram.agent/name",
        Value::String(name.to_string()),
    ));
    ops.push(assert(entity, ":engram.agent/key", Value::Bytes(key.0.to_vec())));
    ops.push(assert(
        entity,
        ":engram.agent/status",
        Value::String(status.into()),
    ));
}

fn grant_ops(entity: &EntityRef, g: &Grant, status: &str, ops: &mut Vec<TxOp>) {
    ops.push(assert(
        entity,
        ":engram.grant/principal",
        Value::String(g.principal.clone()),
    ));
    ops.push(assert(
        entity,
        ":engram.grant/action",
        Value::String(g.action.name().into()),
    ));
    ops.push(assert(
        entity,
        ":engram.grant/prefix",
        Value::String(g.prefix.clone()),
    ));
    if !g.attribute.is_empty() {
        ops.push(assert(
            entity,
            ":engram.grant/attribute",
            Value::String(g.attribute.clone()),
        ));
    }
    ops.push(assert(
        entity,
        ":engram.grant/status",
        Value::String(status.into()),
    ));
}

fn role_ops(entity: &EntityRef, agent: &Principal, role: &Principal, status: &str, ops: &mut Vec<TxOp>) {
    ops.push(assert(
        entity,
        ":engram.role/agent",
        Value::String(agent.to_string()),
    ));
    ops.push(assert(
        entity,
        ":engram.role/role",
        Value::String(role.to_string()),
    ));
    ops.push(assert(
        entity,
        ":engram.role/status",
        Value::String(status.into()),
    ));
}

/// Checks a policy change against the current policy and plans its transaction. `actor` is
/// the principal that signed the request (`None`: unsigned, allowed only in open mode);
/// `tx_time_ns` the transaction time the change will be recorded at (a session's deadline is
/// counted from it, and its lapse is taken only at or past the deadline).
pub fn plan_change(
    view: &dyn ReadView,
    op: &PolicyOp,
    actor: Option<&Principal>,
    tx_time_ns: i64,
) -> Result<Result<PlannedChange, Rejection>, CoreError> {
    let refuse = |why: String| Ok(Err(Rejection::Policy(why)));
    let current = mode_row(view)?;
    match (op, current) {
        (PolicyOp::Configure { .. }, Some(ModeRow::Set(mode))) => {
            return refuse(format!("the security mode is already recorded: {}", mode.name()));
        }
        (PolicyOp::Configure { .. }, None) => {
            return refuse("this cluster predates security modes: it stays open".into());
        }
        (PolicyOp::Configure { .. }, Some(ModeRow::Pending)) => {}
        (_, Some(ModeRow::Pending)) => return Ok(Err(Rejection::NotConfigured)),
        (_, _) => {}
    }
    if mode(view)? == Some(Mode::Enforced)
        && let Some((action, namespace)) = op.requires(actor)
        && let Err(r) = check_action(view, actor, action, &namespace)?
    {
        return Ok(Err(r));
    }
    let mut ops = Vec::new();
    let effect = match op {
        PolicyOp::Configure { mode, admin } => {
            let cluster = EntityRef::Temp("cluster".into());
            ops.push(assert(
                &cluster,
                ":engram.cluster/security",
                Value::String(mode.name().into()),
            ));
            let mut agents = Vec::new();
            let mut grants = Vec::new();
            match (mode, admin) {
                (Mode::Enforced, None) => {
                    return refuse(
                        "enforced mode needs a first administrator (a name and a public key)".into(),
                    );
                }
                (_, Some((name, key))) => {
                    let entity = EntityRef::Temp(format!("agent {name}"));
                    agent_ops(&entity, name, key, "active", &mut ops);
                    agents.push((name.clone(), entity, *key, false));
                    for action in Action::AT_CONFIGURE {
                        let g = Grant {
                            principal: name.to_string(),
                            action,
                            prefix: String::new(),
                            attribute: String::new(),
                        };
                        let entity = EntityRef::Temp(format!("grant {action}"));
                        grant_ops(&entity, &g, "active", &mut ops);
                        grants.push((g, entity));
                    }
                }
                (Mode::Open, None) => {}
            }
            Effect {
                mode: Some(*mode),
                agents,
                grants,
                ..Effect::default()
            }
        }
        PolicyOp::AddAgent { name, key } => {
            if name.is_role() {
                return refuse(format!(
                    "{name}: names starting with \"{}\" name roles, not agents",
                    Principal::ROLE_PREFIX
                ));
            }
            if let Some(row) = agent(view, name.as_str())? {
                let state = if row.revoked_tx.is_some() {
                    "revoked"
                } else {
                    "active"
                };
                return refuse(format!(
                    "agent {name} already exists ({state}); rotate its key instead (names are never reused)"
                ));
            }
            let entity = EntityRef::Temp("agent".into());
            agent_ops(&entity, name, key, "active", &mut ops);
            Effect {
                agents: vec![(name.clone(), entity, *key, false)],
                ..Effect::default()
            }
        }
        PolicyOp::RotateAgentKey { name, key } => {
            let Some(row) = agent(view, name.as_str())? else {
                return refuse(format!("no agent named {name}"));
            };
            if row.revoked_tx.is_some() {
                return refuse(format!("agent {name} is revoked"));
            }
            if row.key == *key {
                return refuse(format!("agent {name} already has this key"));
            }
            let entity = EntityRef::Id(row.entity);
            ops.push(assert(&entity, ":engram.agent/key", Value::Bytes(key.0.to_vec())));
            Effect {
                agents: vec![(name.clone(), entity, *key, false)],
                ..Effect::default()
            }
        }
        PolicyOp::RevokeAgent { name } => {
            let Some(row) = agent(view, name.as_str())? else {
                return refuse(format!("no agent named {name}"));
            };
            if row.revoked_tx.is_some() {
                return refuse(format!("agent {name} is already revoked"));
            }
            if mode(view)? == Some(Mode::Enforced) && !admins_after(view, Ending::Agent(name.as_str()))? {
                return Ok(Err(Rejection::LockOut(format!(
                    "revoking agent {name} would leave no active agent holding grant on every namespace"
                ))));
            }
            let entity = EntityRef::Id(row.entity);
            ops.push(assert(
                &entity,
                ":engram.agent/status",
                Value::String("revoked".into()),
            ));
            Effect {
                agents: vec![(name.clone(), entity, row.key, true)],
                ..Effect::default()
            }
        }
        PolicyOp::Grant(g) => {
            if let Err(why) = g.validate() {
                return refuse(why);
            }
            if view.get(Space::State, &grant_key(g))?.is_some() {
                return refuse(format!("already granted: {g}"));
            }
            let entity = EntityRef::Temp("grant".into());
            grant_ops(&entity, g, "active", &mut ops);
            Effect {
                grants: vec![(g.clone(), entity)],
                ..Effect::default()
            }
        }
        PolicyOp::Revoke(g) => {
            let Some(bytes) = view.get(Space::State, &grant_key(g))? else {
                return refuse(format!("no such grant: {g}"));
            };
            let row: GrantRow = decode_row("grant row", &bytes)?;
            if mode(view)? == Some(Mode::Enforced) && !admins_after(view, Ending::Grant(g))? {
                return Ok(Err(Rejection::LockOut(format!(
                    "revoking \"{g}\" would leave no active agent holding grant on every namespace"
                ))));
            }
            let entity = EntityRef::Id(row.entity);
            ops.push(assert(
                &entity,
                ":engram.grant/status",
                Value::String("revoked".into()),
            ));
            Effect {
                revoke: Some(g.clone()),
                ..Effect::default()
            }
        }
        PolicyOp::AssignRole { agent: who, role } => {
            if !role.is_role() {
                return refuse(format!("{role} is not a role (role:<name>)"));
            }
            match agent(view, who.as_str())? {
                None => return refuse(format!("no agent named {who}")),
                Some(row) if row.revoked_tx.is_some() => return refuse(format!("agent {who} is revoked")),
                Some(_) => {}
            }
            if view
                .get(Space::State, &role_key(who.as_str(), role.as_str()))?
                .is_some()
            {
                return refuse(format!("agent {who} already has {role}"));
            }
            let entity = EntityRef::Temp("role".into());
            role_ops(&entity, who, role, "active", &mut ops);
            Effect {
                assign: Some((who.clone(), role.clone(), entity)),
                ..Effect::default()
            }
        }
        PolicyOp::UnassignRole { agent: who, role } => {
            let Some(bytes) = view.get(Space::State, &role_key(who.as_str(), role.as_str()))? else {
                return refuse(format!("agent {who} does not have {role}"));
            };
            let row: RoleRow = decode_row("role row", &bytes)?;
            if mode(view)? == Some(Mode::Enforced)
                && !admins_after(view, Ending::Role(who.as_str(), role.as_str()))?
            {
                return Ok(Err(Rejection::LockOut(format!(
                    "taking {role} from {who} would leave no active agent holding grant on every namespace"
                ))));
            }
            ops.push(assert(
                &EntityRef::Id(row.entity),
                ":engram.role/status",
                Value::String("revoked".into()),
            ));
            Effect {
                unassign: Some((who.clone(), role.clone())),
                ..Effect::default()
            }
        }
        PolicyOp::AccessLog { prefix, on } => {
            if let Err(why) = engram_access::access_log_prefix(prefix) {
                return refuse(why);
            }
            let current = view.get(Space::State, &access_log_key(prefix))?;
            let entity = match (current, *on) {
                (Some(_), true) => return refuse(format!("reads under {prefix} are already logged")),
                (None, false) => return refuse(format!("reads under {prefix} are not logged")),
                (None, true) => {
                    let entity = EntityRef::Temp("access-log".into());
                    ops.push(assert(
                        &entity,
                        ":engram.access-log/prefix",
                        Value::String(prefix.clone()),
                    ));
                    entity
                }
                (Some(bytes), false) => {
                    EntityRef::Id(decode_row::<AccessLogRow>("access log row", &bytes)?.entity)
                }
            };
            ops.push(assert(
                &entity,
                ":engram.access-log/status",
                Value::String(if *on { "on" } else { "off" }.into()),
            ));
            Effect {
                access_log: Some((prefix.clone(), entity, *on)),
                ..Effect::default()
            }
        }
        PolicyOp::Retention {
            namespace,
            attribute,
            keep_ms,
        } => match plan_retention(view, &mut ops, namespace, attribute, Kept::Ms(*keep_ms))? {
            Ok(effect) => effect,
            Err(why) => return refuse(why),
        },
        PolicyOp::RetentionVersions {
            namespace,
            attribute,
            keep_versions,
        } => match plan_retention(
            view,
            &mut ops,
            namespace,
            attribute,
            Kept::Versions(*keep_versions),
        )? {
            Ok(effect) => effect,
            Err(why) => return refuse(why),
        },
        PolicyOp::Session {
            namespace,
            ttl_ms,
            renew,
        } => match plan_session(view, &mut ops, namespace, *ttl_ms, *renew, tx_time_ns)? {
            Ok(effect) => effect,
            Err(why) => return refuse(why),
        },
        PolicyOp::SessionLapsed { namespace } => {
            let Some(bytes) = view.get(Space::State, &session_key(namespace))? else {
                return refuse(format!("{namespace} has no session open"));
            };
            let row: SessionRow = decode_row("session row", &bytes)?;
            if tx_time_ns < row.deadline_ns {
                return refuse(format!(
                    "the session on {namespace} lapses at {} ns, after this change's time {tx_time_ns} ns",
                    row.deadline_ns
                ));
            }
            let entity = EntityRef::Id(row.entity);
            ops.push(assert(
                &entity,
                ":engram.session/status",
                Value::String("lapsed".into()),
            ));
            Effect {
                session: Some(SessionEffect::Ended {
                    namespace: namespace.clone(),
                    entity: row.entity,
                    lapsed: true,
                }),
                ..Effect::default()
            }
        }
    };
    let request = TxRequest::data(
        Namespace::new(SYSTEM_NAMESPACE).expect("the system namespace name is valid"),
        ops,
        Provenance {
            agent: POLICY_AGENT.into(),
            source: actor.map(ToString::to_string).unwrap_or_default(),
            confidence: 1.0,
            status: Status::Verified,
            ..Default::default()
        },
    );
    Ok(Ok(PlannedChange { request, effect }))
}

/// What a change about to be made ends, for [`admins_after`].
#[derive(Clone, Copy)]
enum Ending<'a> {
    Grant(&'a Grant),
    Agent(&'a str),
    Role(&'a str, &'a str),
}

/// Whether some active agent still holds `grant` on every namespace, directly or through a
/// role, once `ending` is gone (a `*` grant is not counted).
/// The ops and effect of setting (or, with an amount of 0, ending) a retention policy of
/// either kind on `namespace` (and `attribute`, when not empty); `Err`: why it is refused.
fn plan_retention(
    view: &dyn ReadView,
    ops: &mut Vec<TxOp>,
    namespace: &str,
    attribute: &str,
    rule: Kept,
) -> Result<Result<Effect, String>, CoreError> {
    if let Err(why) = engram_access::retention_target(namespace, attribute) {
        return Ok(Err(why));
    }
    let (key, amount, unit, keep_attribute) = match rule {
        Kept::Ms(ms) => (
            retention_key(namespace, attribute),
            ms,
            "ms",
            ":engram.retention/keep-ms",
        ),
        Kept::Versions(n) => (
            versions_key(namespace, attribute),
            u64::from(n),
            "versions",
            ":engram.retention/keep-versions",
        ),
    };
    let kind = match rule {
        Kept::Ms(_) => "retention",
        Kept::Versions(_) => "versions",
    };
    let target = match attribute.is_empty() {
        true => namespace.to_string(),
        false => format!("{namespace} {attribute}"),
    };
    let entity = match (view.get(Space::State, &key)?, amount) {
        (None, 0) => return Ok(Err(format!("{target} has no {kind} policy"))),
        (Some(bytes), amount) => {
            let (entity, kept) = match rule {
                Kept::Ms(_) => {
                    let row: RetentionRow = decode_row("retention row", &bytes)?;
                    (row.entity, row.keep_ms)
                }
                Kept::Versions(_) => {
                    let row: VersionsRow = decode_row("versions row", &bytes)?;
                    (row.entity, u64::from(row.keep_versions))
                }
            };
            if kept == amount {
                return Ok(Err(format!("{target} is already kept {amount} {unit}")));
            }
            EntityRef::Id(entity)
        }
        (None, _) => {
            let entity = EntityRef::Temp("retention".into());
            ops.push(assert(
                &entity,
                ":engram.retention/namespace",
                Value::String(namespace.to_string()),
            ));
            if !attribute.is_empty() {
                ops.push(assert(
                    &entity,
                    ":engram.retention/attribute",
                    Value::Keyword(attribute.to_string()),
                ));
            }
            entity
        }
    };
    ops.push(assert(
        &entity,
        keep_attribute,
        Value::I64(i64::try_from(amount).unwrap_or(i64::MAX)),
    ));
    Ok(Ok(Effect {
        retention: Some((namespace.to_string(), attribute.to_string(), entity, rule)),
        ..Effect::default()
    }))
}

/// The ops and effect of opening (`renew` false) or renewing a session on `namespace` for
/// `ttl_ms` from `tx_time_ns`, or ending it (`ttl_ms` 0); `Err`: why it is refused.
fn plan_session(
    view: &dyn ReadView,
    ops: &mut Vec<TxOp>,
    namespace: &str,
    ttl_ms: u64,
    renew: bool,
    tx_time_ns: i64,
) -> Result<Result<Effect, String>, CoreError> {
    if let Err(why) = engram_access::session_target(namespace) {
        return Ok(Err(why));
    }
    let open = match view.get(Space::State, &session_key(namespace))? {
        Some(bytes) => Some(decode_row::<SessionRow>("session row", &bytes)?),
        None => None,
    };
    let effect = match (open, ttl_ms) {
        (None, 0) => return Ok(Err(format!("{namespace} has no session open"))),
        (None, _) if renew => {
            return Ok(Err(format!(
                "{namespace} has no session open to renew: it lapsed or was ended (what it held is forgotten); open a new one"
            )));
        }
        (Some(row), ttl) if ttl > 0 && !renew => {
            return Ok(Err(format!(
                "{namespace} has a session open since tx {} (lapsing at {} ns): renew it",
                row.since_tx.0, row.deadline_ns
            )));
        }
        (Some(row), 0) => {
            let entity = EntityRef::Id(row.entity);
            ops.push(assert(
                &entity,
                ":engram.session/status",
                Value::String("ended".into()),
            ));
            SessionEffect::Ended {
                namespace: namespace.to_string(),
                entity: row.entity,
                lapsed: false,
            }
        }
        (open, ttl_ms) => {
            let ttl_ns = i64::try_from(ttl_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
            let deadline_ns = tx_time_ns.saturating_add(ttl_ns);
            let (entity, since_tx) = match open {
                Some(row) => (EntityRef::Id(row.entity), Some(row.since_tx)),
                None => {
                    let entity = EntityRef::Temp("session".into());
                    ops.push(assert(
                        &entity,
                        ":engram.session/namespace",
                        Value::String(namespace.to_string()),
                    ));
                    ops.push(assert(
                        &entity,
                        ":engram.session/status",
                        Value::String("open".into()),
                    ));
                    (entity, None)
                }
            };
            ops.push(assert(
                &entity,
                ":engram.session/ttl-ms",
                Value::I64(i64::try_from(ttl_ms).unwrap_or(i64::MAX)),
            ));
            ops.push(assert(
                &entity,
                ":engram.session/deadline",
                Value::Instant(deadline_ns),
            ));
            SessionEffect::Open {
                namespace: namespace.to_string(),
                entity,
                since_tx,
                ttl_ms,
                deadline_ns,
            }
        }
    };
    Ok(Ok(Effect {
        session: Some(effect),
        ..Effect::default()
    }))
}

fn admins_after(view: &dyn ReadView, ending: Ending<'_>) -> Result<bool, CoreError> {
    let active = |name: &str| -> Result<bool, CoreError> {
        if matches!(ending, Ending::Agent(gone) if gone == name) {
            return Ok(false);
        }
        Ok(matches!(agent(view, name)?, Some(row) if row.revoked_tx.is_none()))
    };
    let assignments = role_assignments(view)?;
    for (g, _) in grants(view)? {
        if g.action != Action::Grant || !g.prefix.is_empty() || g.principal == Grant::ANYONE {
            continue;
        }
        if matches!(ending, Ending::Grant(gone) if *gone == g) {
            continue;
        }
        if g.principal.starts_with(Principal::ROLE_PREFIX) {
            for (who, role, _) in &assignments {
                let removed = matches!(ending, Ending::Role(a, r) if a == who && r == role);
                if *role == g.principal && !removed && active(who)? {
                    return Ok(true);
                }
            }
        } else if active(&g.principal)? {
            return Ok(true);
        }
    }
    Ok(false)
}

impl PlannedChange {
    /// The `P` rows the change writes, once its transaction is applied as `tx` with the
    /// entities `temp_ids` allocated.
    pub fn rows(self, tx: TxId, temp_ids: &BTreeMap<String, EntityId>) -> Result<WriteBatch, CoreError> {
        let mut batch = WriteBatch::new();
        let resolve = |entity: &EntityRef| match entity {
            EntityRef::Id(id) => Ok(*id),
            EntityRef::Temp(name) => temp_ids
                .get(name)
                .copied()
                .ok_or_else(|| CoreError::corrupt("policy change", format!("no id allocated for {name}"))),
            EntityRef::Lookup(..) => Err(CoreError::corrupt("policy change", "a lookup ref")),
        };
        let Effect {
            mode,
            agents,
            grants,
            revoke,
            assign,
            unassign,
            access_log,
            retention,
            session,
        } = self.effect;
        if let Some(mode) = mode {
            batch.put(Space::State, MODE_KEY.to_vec(), encode_row(&ModeRow::Set(mode)));
        }
        for (name, entity, key, revoked) in agents {
            let row = AgentRow {
                entity: resolve(&entity)?,
                key,
                since_tx: tx,
                revoked_tx: revoked.then_some(tx),
            };
            batch.put(Space::State, agent_key(name.as_str()), encode_row(&row));
        }
        for (g, entity) in grants {
            let row = GrantRow {
                entity: resolve(&entity)?,
                since_tx: tx,
            };
            batch.put(Space::State, grant_key(&g), encode_row(&row));
        }
        if let Some(g) = revoke {
            batch.delete(Space::State, grant_key(&g));
        }
        if let Some((who, role, entity)) = assign {
            let row = RoleRow {
                entity: resolve(&entity)?,
                since_tx: tx,
            };
            batch.put(
                Space::State,
                role_key(who.as_str(), role.as_str()),
                encode_row(&row),
            );
        }
        if let Some((who, role)) = unassign
            && !crate::planted::active(crate::planted::PlantedBug::StaleRoleAssignment)
        {
            batch.delete(Space::State, role_key(who.as_str(), role.as_str()));
        }
        match access_log {
            Some((prefix, entity, true)) => {
                let row = AccessLogRow {
                    entity: resolve(&entity)?,
                    since_tx: tx,
                };
                batch.put(Space::State, access_log_key(&prefix), encode_row(&row));
            }
            Some((prefix, _, false)) => batch.delete(Space::State, access_log_key(&prefix)),
            None => {}
        }
        match retention {
            Some((namespace, attribute, _, Kept::Ms(0))) => {
                batch.delete(Space::State, retention_key(&namespace, &attribute))
            }
            Some((namespace, attribute, _, Kept::Versions(0))) => {
                batch.delete(Space::State, versions_key(&namespace, &attribute))
            }
            Some((namespace, attribute, entity, Kept::Ms(keep_ms))) => {
                let row = RetentionRow {
                    entity: resolve(&entity)?,
                    since_tx: tx,
                    keep_ms,
                };
                batch.put(
                    Space::State,
                    retention_key(&namespace, &attribute),
                    encode_row(&row),
                );
            }
            Some((namespace, attribute, entity, Kept::Versions(keep_versions))) => {
                let row = VersionsRow {
                    entity: resolve(&entity)?,
                    since_tx: tx,
                    keep_versions,
                };
                batch.put(
                    Space::State,
                    versions_key(&namespace, &attribute),
                    encode_row(&row),
                );
            }
            None => {}
        }
        match session {
            Some(SessionEffect::Open {
                namespace,
                entity,
                since_tx,
                ttl_ms,
                deadline_ns,
            }) => {
                let deadline_ns =
                    match crate::planted::active(crate::planted::PlantedBug::SessionDeadlineWithoutTtl) {
                        true => deadline_ns.saturating_sub(
                            i64::try_from(ttl_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX),
                        ),
                        false => deadline_ns,
                    };
                let row = SessionRow {
                    entity: resolve(&entity)?,
                    since_tx: since_tx.unwrap_or(tx),
                    renewed_tx: tx,
                    ttl_ms,
                    deadline_ns,
                };
                batch.put(Space::State, session_key(&namespace), encode_row(&row));
            }
            Some(SessionEffect::Ended {
                namespace,
                entity,
                lapsed,
            }) => {
                batch.delete(Space::State, session_key(&namespace));
                let row = EndedSessionRow {
                    entity,
                    ended_tx: tx,
                    lapsed,
                };
                batch.put(Space::State, ended_session_key(&namespace), encode_row(&row));
            }
            None => {}
        }
        Ok(batch)
    }
}
