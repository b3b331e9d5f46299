//! Principals, actions, grants, the security mode, and the rule that decides.

use std::fmt;
use std::str::FromStr;

use engram_audit::PublicKey;
use serde::{Deserialize, Serialize};

/// The namespace that records agents, their keys, grants and the security mode. Clients never
/// write it directly; the `Access` service's calls become its transactions.
pub const SYSTEM_NAMESPACE: &str = "engram.system";

/// The validated name of an agent or operator: 1 to 128 bytes of `A-Z a-z 0-9 _ . @ : + -`.
/// A principal is what an authenticated request acts as, and, in enforced mode, what a
/// transaction's `provenance.agent` must say.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Principal(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("principal {value:?}: {reason}")]
pub struct PrincipalError {
    pub value: String,
    pub reason: &'static str,
}

impl Principal {
    pub const MAX_BYTES: usize = 128;

    pub fn new(value: impl Into<String>) -> Result<Principal, PrincipalError> {
        let value = value.into();
        let fail = |reason| {
            Err(PrincipalError {
                value: value.chars().take(40).collect(),
                reason,
            })
        };
        if value.is_empty() {
            return fail("must not be empty");
        }
        if value.len() > Self::MAX_BYTES {
            return fail("longer than 128 bytes");
        }
        if !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'@' | b':' | b'+' | b'-'))
        {
            return fail("may only contain A-Z a-z 0-9 _ . @ : + -");
        }
        Ok(Principal(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The principal grants to role `role` name: `role:<role>`. A role is a name for a set of
    /// grants that agents are assigned to; no request is ever authenticated as a role.
    pub fn role(role: &str) -> Result<Principal, PrincipalError> {
        if role.is_empty() || role.contains(':') {
            return Err(PrincipalError {
                value: role.chars().take(40).collect(),
                reason: "a role name is not empty and has no ':'",
            });
        }
        Principal::new(format!("{}{role}", Self::ROLE_PREFIX))
    }

    /// What every role principal starts with; no agent's name does.
    pub const ROLE_PREFIX: &'static str = "role:";

    /// Whether this names a role rather than an agent.
    pub fn is_role(&self) -> bool {
        self.0.starts_with(Self::ROLE_PREFIX)
    }
}

impl TryFrom<String> for Principal {
    type Error = PrincipalError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Principal::new(value)
    }
}

impl From<Principal> for String {
    fn from(p: Principal) -> String {
        p.0
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a principal may be granted. Each is separate: `write` does not imply `retract`, and
/// no action implies another, so a grant says exactly what it allows.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Action {
    /// Get, Find, GetSchema, ListBranches.
    Read,
    /// History and Diff: every version, not only the current facts.
    ReadHistory,
    Watch,
    /// Assert facts (data transactions).
    Write,
    /// Retract facts.
    Retract,
    /// Record a claim as verified (`status: verified`) rather than candidate.
    Promote,
    /// Declare or migrate attributes.
    Schema,
    /// Create and abandon branches.
    Branch,
    /// Merge a branch into main.
    Merge,
    /// The audit chain: entries, proofs, checkpoints, export.
    Audit,
    /// Add and remove nodes.
    ClusterAdmin,
    /// Add, rotate and revoke agent keys; rotate and revoke node keys.
    KeyAdmin,
    /// Grant and revoke actions (on namespaces the grantor's own `grant` covers).
    Grant,
    /// Redact (forget) datoms' values in a namespace (`docs/FORGETTING.md`).
    Redact,
}

impl Action {
    /// What enforced mode's first administrator is granted when the mode is recorded. Fixed:
    /// the grants are datoms of that entry, so a later build replaying the log must make the
    /// same ones; an action added since (`redact`) is granted explicitly.
    pub const AT_CONFIGURE: [Action; 13] = [
        Action::Read,
        Action::ReadHistory,
        Action::Watch,
        Action::Write,
        Action::Retract,
        Action::Promote,
        Action::Schema,
        Action::Branch,
        Action::Merge,
        Action::Audit,
        Action::ClusterAdmin,
        Action::KeyAdmin,
        Action::Grant,
    ];

    /// Every action: those above, then the ones added since.
    pub const ALL: [Action; 14] = {
        let mut all = [Action::Redact; 14];
        let mut i = 0;
        while i < Self::AT_CONFIGURE.len() {
            all[i] = Self::AT_CONFIGURE[i];
            i += 1;
        }
        all
    };

    pub fn name(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::ReadHistory => "read-history",
            Action::Watch => "watch",
            Action::Write => "write",
            Action::Retract => "retract",
            Action::Promote => "promote",
            Action::Schema => "schema",
            Action::Branch => "branch",
            Action::Merge => "merge",
            Action::Audit => "audit",
            Action::ClusterAdmin => "cluster-admin",
            Action::KeyAdmin => "key-admin",
            Action::Grant => "grant",
            Action::Redact => "redact",
        }
    }

    /// Whether a grant of the action may be limited to some attributes: the actions on facts.
    pub fn per_attribute(self) -> bool {
        matches!(
            self,
            Action::Read
                | Action::ReadHistory
                | Action::Watch
                | Action::Write
                | Action::Retract
                | Action::Promote
        )
    }

    /// Whether the action concerns the whole cluster rather than a namespace: only a grant
    /// on the empty prefix (every namespace) gives it.
    pub fn cluster_wide(self) -> bool {
        matches!(self, Action::Audit | Action::ClusterAdmin | Action::KeyAdmin)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Action, String> {
        Action::ALL.into_iter().find(|a| a.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Action::ALL.iter().map(|a| a.name()).collect();
            format!("unknown action {s:?}; one of {}", names.join(", "))
        })
    }
}

/// Whether a grant on namespace prefix `prefix` covers namespace `namespace`: the empty prefix
/// covers every namespace (and the cluster-wide actions); otherwise the namespace is the prefix
/// or lies below it by whole segments (`team` covers `team/a`, not `teams`).
pub fn prefix_covers(prefix: &str, namespace: &str) -> bool {
    prefix.is_empty()
        || namespace == prefix
        || (namespace.len() > prefix.len()
            && namespace.starts_with(prefix)
            && namespace.as_bytes()[prefix.len()] == b'/')
}

/// Whether a grant's attribute part `only` covers `attribute`: empty covers every attribute,
/// `:hr/*` every attribute of that prefix, `:hr/salary` that one.
pub fn attribute_covers(only: &str, attribute: &str) -> bool {
    match only.strip_suffix('*') {
        _ if only.is_empty() => true,
        Some(prefix) => attribute.starts_with(prefix),
        None => only == attribute,
    }
}

/// One grant: `principal` may do `action` in every namespace `prefix` covers, on every
/// attribute or only on `attribute`. The principal `*` stands for every authenticated
/// principal.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub struct Grant {
    pub principal: String,
    pub action: Action,
    pub prefix: String,
    /// Empty: every attribute. Otherwise one attribute (`:hr/salary`) or every attribute of
    /// one prefix (`:hr/*`); only the data actions (read, read-history, watch, write, retract,
    /// promote) take one.
    pub attribute: String,
}

impl Grant {
    /// The principal every authenticated caller matches.
    pub const ANYONE: &'static str = "*";

    /// Checks the parts: a principal name or `*`, and a prefix that is empty or a valid
    /// namespace.
    pub fn validate(&self) -> Result<(), String> {
        if self.principal != Self::ANYONE {
            Principal::new(self.principal.clone()).map_err(|e| e.to_string())?;
        }
        if !self.prefix.is_empty() {
            engram_types::Namespace::new(self.prefix.clone()).map_err(|e| format!("prefix: {e}"))?;
        }
        if self.action.cluster_wide() && !self.prefix.is_empty() {
            return Err(format!(
                "{} is cluster-wide: grant it on every namespace (an empty prefix)",
                self.action
            ));
        }
        if !self.attribute.is_empty() {
            if !self.action.per_attribute() {
                return Err(format!("attribute: {} is not granted per attribute", self.action));
            }
            let checked = match self.attribute.strip_suffix("/*") {
                Some(prefix) => format!("{prefix}/x"),
                None => self.attribute.clone(),
            };
            engram_types::Attribute::new(checked).map_err(|e| {
                format!(
                    "attribute: {:?} is not an attribute or :prefix/* ({e})",
                    self.attribute
                )
            })?;
        }
        Ok(())
    }

    /// Whether the grant covers `attribute` (see [`attribute_covers`]).
    pub fn covers_attribute(&self, attribute: &str) -> bool {
        attribute_covers(&self.attribute, attribute)
    }

    /// Whether the grant gives `principal` `action` on `namespace`, on any attribute.
    fn reaches(&self, principal: &str, action: Action, namespace: &str) -> bool {
        self.action == action
            && (self.principal == principal || self.principal == Self::ANYONE)
            && prefix_covers(&self.prefix, namespace)
    }

    /// Whether the grant gives `principal` `action` on `namespace` as a whole (every
    /// attribute).
    pub fn matches(&self, principal: &str, action: Action, namespace: &str) -> bool {
        self.attribute.is_empty() && self.reaches(principal, action, namespace)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = if self.prefix.is_empty() {
            "every namespace"
        } else {
            &self.prefix
        };
        write!(f, "{} may {} on {on}", self.principal, self.action)?;
        if !self.attribute.is_empty() {
            write!(f, " ({} only)", self.attribute)?;
        }
        Ok(())
    }
}

/// How a cluster treats callers, chosen when it is initialised and recorded in its chain.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Mode {
    /// Anyone who reaches a node may do anything; a signed request is still checked, and its
    /// principal must match the transaction's agent. Every node warns at start.
    Open,
    /// Every request is signed by a registered agent key and allowed by a grant.
    Enforced,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Open => "open",
            Mode::Enforced => "enforced",
        }
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "open" => Ok(Mode::Open),
            "enforced" => Ok(Mode::Enforced),
            other => Err(format!("unknown security mode {other:?}; open or enforced")),
        }
    }
}

/// What one principal holds: the grants that name it, `*` or one of its roles.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Policy {
    pub grants: Vec<Grant>,
    /// The role principals (`role:<name>`) the principal is assigned to.
    pub roles: Vec<String>,
}

impl Policy {
    /// The grants that give `principal` (itself, `*` or one of its roles) `action` on
    /// `namespace`, for some attributes at least.
    fn reaching<'a>(
        &'a self,
        principal: &'a str,
        action: Action,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Grant> + 'a {
        self.grants.iter().filter(move |g| {
            g.reaches(principal, action, namespace)
                || (self.roles.contains(&g.principal) && g.reaches(&g.principal, action, namespace))
        })
    }

    /// The one rule: some grant names the principal (or `*`, or one of its roles), the action,
    /// and a prefix that covers the namespace (`""` for the cluster-wide actions), on every
    /// attribute.
    pub fn allows(&self, principal: &str, action: Action, namespace: &str) -> bool {
        self.reaching(principal, action, namespace)
            .any(|g| g.attribute.is_empty())
    }

    /// The rule for one attribute: some grant as in [`Policy::allows`] covers `attribute`.
    pub fn allows_attribute(
        &self,
        principal: &str,
        action: Action,
        namespace: &str,
        attribute: &str,
    ) -> bool {
        self.reaching(principal, action, namespace)
            .any(|g| g.covers_attribute(attribute))
    }

    /// Whether some grant gives the action on the namespace, if only on some attributes: a
    /// read is then answered, with the other attributes' values redacted.
    pub fn allows_some(&self, principal: &str, action: Action, namespace: &str) -> bool {
        self.reaching(principal, action, namespace).next().is_some()
    }
}

/// Checks an access log prefix: `*` (everything) or a namespace prefix.
pub fn access_log_prefix(prefix: &str) -> Result<(), String> {
    if prefix == "*" {
        return Ok(());
    }
    engram_types::Namespace::new(prefix)
        .map(|_| ())
        .map_err(|e| format!("{prefix:?} is not a namespace prefix (or *): {e}"))
}

/// A change to who may do what, replicated as one log entry and recorded as one transaction
/// of the system namespace.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub enum PolicyOp {
    /// The cluster's security mode, recorded once, right after genesis. Enforced mode names
    /// the first administrator, who is granted every action on every namespace.
    Configure {
        mode: Mode,
        admin: Option<(Principal, PublicKey)>,
    },
    AddAgent {
        name: Principal,
        key: PublicKey,
    },
    /// Replaces an agent's key: requests signed by the old one are refused from this entry on.
    RotateAgentKey {
        name: Principal,
        key: PublicKey,
    },
    /// Refuses every key of the agent from this entry on; its grants stay on record.
    RevokeAgent {
        name: Principal,
    },
    Grant(Grant),
    Revoke(Grant),
    /// Gives `agent` every grant of `role` (a role principal, `role:<name>`), for as long as
    /// it is assigned.
    AssignRole {
        agent: Principal,
        role: Principal,
    },
    UnassignRole {
        agent: Principal,
        role: Principal,
    },
    /// Every node records the reads, watches and exports it serves on namespaces under
    /// `prefix` (`*`: everything, exports included) in its access log (`on`), or stops.
    AccessLog {
        prefix: String,
        on: bool,
    },
    /// Keep what is written to `namespace` (only to `attribute`, when not empty) for
    /// `keep_ms`: the leader redacts every datom written longer ago than that
    /// (`docs/FORGETTING.md`, "Retention"). `keep_ms` 0 ends the policy.
    Retention {
        namespace: String,
        attribute: String,
        keep_ms: u64,
    },
    /// Keep, of each slot of `namespace` (only of `attribute`, when not empty), what the last
    /// `keep_versions` transactions that wrote it hold, and its live claims: the leader redacts
    /// every older datom (`docs/FORGETTING.md`, "Retention"). `keep_versions` 0 ends the
    /// policy. (After `Retention` in the enum: entries keep their encoding.)
    RetentionVersions {
        namespace: String,
        attribute: String,
        keep_versions: u32,
    },
    /// Opens a session on `namespace` (`renew` false: refused if one is open), or renews the
    /// one open there (`renew` true: refused if none is), making the namespace volatile: when
    /// the session ends (`ttl_ms` 0) or `ttl_ms` passes without a renewal, the leader forgets
    /// everything written to the namespace before the end (`docs/FORGETTING.md`, "Volatile
    /// namespaces"). (After `RetentionVersions` in the enum: entries keep their encoding.)
    Session {
        namespace: String,
        ttl_ms: u64,
        renew: bool,
    },
    /// Ends the session on `namespace` because its deadline passed: proposed by the leader
    /// with its clock, never signed and never taken from a caller. Apply takes it only when the
    /// entry's time is at or past the deadline the session holds, so it cannot end a live one.
    SessionLapsed {
        namespace: String,
    },
}

/// Checks a retention policy's target: a namespace (not the system namespace) and an optional
/// attribute name.
pub fn retention_target(namespace: &str, attribute: &str) -> Result<(), String> {
    forgetting_target("retention", namespace, attribute)
}

/// Checks a session's namespace: not the system namespace.
pub fn session_target(namespace: &str) -> Result<(), String> {
    forgetting_target("session", namespace, "")
}

/// What a change that forgets (`what`: "retention", "session") may target.
fn forgetting_target(what: &str, namespace: &str, attribute: &str) -> Result<(), String> {
    let ns = engram_types::Namespace::new(namespace).map_err(|e| format!("{what} namespace: {e}"))?;
    if ns.as_str() == SYSTEM_NAMESPACE {
        return Err("the system namespace keeps its records for good".into());
    }
    if !attribute.is_empty() {
        let a = engram_types::Attribute::new(attribute).map_err(|e| format!("{what} attribute: {e}"))?;
        if a.is_reserved() {
            return Err(format!("attribute {a} is reserved for the schema and branches"));
        }
    }
    Ok(())
}

impl PolicyOp {
    /// What the acting principal must hold for the change, and where (`""`: cluster-wide).
    /// `None` for [`PolicyOp::Configure`], which only the cluster's initialisation makes.
    /// Rotating one's own key needs no grant: the request is signed by the current key.
    pub fn requires(&self, actor: Option<&Principal>) -> Option<(Action, String)> {
        match self {
            PolicyOp::Configure { .. } => None,
            PolicyOp::RotateAgentKey { name, .. } if actor == Some(name) => None,
            PolicyOp::AddAgent { .. } | PolicyOp::RotateAgentKey { .. } | PolicyOp::RevokeAgent { .. } => {
                Some((Action::KeyAdmin, String::new()))
            }
            PolicyOp::Grant(g) | PolicyOp::Revoke(g) => Some((Action::Grant, g.prefix.clone())),
            // A role may hold grants anywhere: handing them on takes `grant` everywhere.
            PolicyOp::AssignRole { .. } | PolicyOp::UnassignRole { .. } => {
                Some((Action::Grant, String::new()))
            }
            // Who reads what is audit evidence: switching it needs `audit` everywhere.
            PolicyOp::AccessLog { .. } => Some((Action::Audit, String::new())),
            // A retention policy forgets: it takes `redact` on its namespace.
            // So does a session: when it ends, everything in its namespace goes.
            PolicyOp::Retention { namespace, .. }
            | PolicyOp::RetentionVersions { namespace, .. }
            | PolicyOp::Session { namespace, .. } => Some((Action::Redact, namespace.clone())),
            // No agent's grant: apply checks that the session's deadline has passed.
            PolicyOp::SessionLapsed { .. } => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            PolicyOp::Configure { .. } => "configure",
            PolicyOp::AddAgent { .. } => "add-agent",
            PolicyOp::RotateAgentKey { .. } => "rotate-agent-key",
            PolicyOp::RevokeAgent { .. } => "revoke-agent",
            PolicyOp::Grant(_) => "grant",
            PolicyOp::Revoke(_) => "revoke-grant",
            PolicyOp::AssignRole { .. } => "assign-role",
            PolicyOp::UnassignRole { .. } => "unassign-role",
            PolicyOp::AccessLog { on: true, .. } => "access-log-on",
            PolicyOp::AccessLog { on: false, .. } => "access-log-off",
            PolicyOp::Retention { keep_ms: 0, .. } => "retention-off",
            PolicyOp::Retention { .. } => "retention",
            PolicyOp::RetentionVersions { keep_versions: 0, .. } => "retention-versions-off",
            PolicyOp::RetentionVersions { .. } => "retention-versions",
            PolicyOp::Session { ttl_ms: 0, .. } => "session-end",
            PolicyOp::Session { renew: true, .. } => "session-renew",
            PolicyOp::Session { .. } => "session-open",
            PolicyOp::SessionLapsed { .. } => "session-lapsed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(principal: &str, action: Action, prefix: &str) -> Grant {
        Grant {
            principal: principal.into(),
            action,
            prefix: prefix.into(),
            attribute: String::new(),
        }
    }

    #[test]
    fn principal_names() {
        assert!(Principal::new("planner-1@team.a").is_ok());
        assert!(Principal::new("").is_err());
        assert!(Principal::new("has space").is_err());
        assert!(Principal::new("x".repeat(129)).is_err());
        assert!(Principal::new("*").is_err());
    }

    #[test]
    fn prefixes_cover_whole_segments() {
        assert!(prefix_covers("", "anything/at/all"));
        assert!(prefix_covers("team", "team"));
        assert!(prefix_covers("team", "team/a"));
        assert!(!prefix_covers("team", "teams"));
        assert!(!prefix_covers("team/a", "team"));
        assert!(!prefix_covers("team", ""));
    }

    #[test]
    fn the_rule_needs_principal_action_and_prefix() {
        let policy = Policy {
            grants: vec![
                grant("alice", Action::Write, "team/a"),
                grant("*", Action::Read, "shared"),
                grant("root", Action::Audit, ""),
            ],
            roles: Vec::new(),
        };
        assert!(policy.allows("alice", Action::Write, "team/a/notes"));
        assert!(!policy.allows("alice", Action::Retract, "team/a"));
        assert!(!policy.allows("alice", Action::Write, "team/b"));
        assert!(!policy.allows("bob", Action::Write, "team/a"));
        assert!(policy.allows("bob", Action::Read, "shared"));
        assert!(!policy.allows("bob", Action::Write, "shared"));
        assert!(policy.allows("root", Action::Audit, ""));
        assert!(!policy.allows("alice", Action::Audit, ""));
    }

    #[test]
    fn a_role_lends_its_grants_only_to_its_members() {
        let ops = Principal::role("ops").unwrap();
        assert_eq!(ops.as_str(), "role:ops");
        assert!(ops.is_role() && !Principal::new("alice").unwrap().is_role());
        assert!(Principal::role("").is_err() && Principal::role("a:b").is_err());
        let grants = vec![
            grant("role:ops", Action::Write, "infra"),
            grant("bob", Action::Read, "infra"),
        ];
        let member = Policy {
            grants: grants.clone(),
            roles: vec!["role:ops".into()],
        };
        assert!(member.allows("alice", Action::Write, "infra/dns"));
        assert!(!member.allows("alice", Action::Write, "team"));
        assert!(!member.allows("alice", Action::Read, "infra"));
        let outsider = Policy {
            grants,
            roles: Vec::new(),
        };
        assert!(!outsider.allows("alice", Action::Write, "infra"));
        assert!(outsider.allows("bob", Action::Read, "infra"));
    }

    #[test]
    fn a_grant_on_attributes_covers_only_them() {
        let on = |attribute: &str| Grant {
            attribute: attribute.into(),
            ..grant("bob", Action::Read, "team")
        };
        let policy = Policy {
            grants: vec![on(":person/*"), on(":task/title")],
            roles: Vec::new(),
        };
        assert!(policy.allows_attribute("bob", Action::Read, "team/a", ":person/name"));
        assert!(policy.allows_attribute("bob", Action::Read, "team/a", ":task/title"));
        assert!(!policy.allows_attribute("bob", Action::Read, "team/a", ":task/owner"));
        assert!(!policy.allows_attribute("bob", Action::Read, "team/a", ":personal/x"));
        assert!(!policy.allows("bob", Action::Read, "team/a"));
        assert!(policy.allows_some("bob", Action::Read, "team/a"));
        assert!(!policy.allows_some("bob", Action::Read, "other"));
        assert!(!policy.allows_some("bob", Action::Write, "team/a"));
        assert!(on(":hr/*").validate().is_ok() && on(":hr/salary").validate().is_ok());
        assert!(on("salary").validate().is_err());
        let schema = Grant {
            attribute: ":hr/salary".into(),
            ..grant("bob", Action::Schema, "team")
        };
        assert!(
            schema
                .validate()
                .unwrap_err()
                .contains("not granted per attribute")
        );
    }

    #[test]
    fn grants_are_validated() {
        assert!(grant("alice", Action::Write, "team/a").validate().is_ok());
        assert!(grant("*", Action::Read, "").validate().is_ok());
        assert!(grant("al ice", Action::Write, "").validate().is_err());
        assert!(grant("alice", Action::Write, "/abs").validate().is_err());
        let wide = grant("alice", Action::Audit, "team").validate().unwrap_err();
        assert!(wide.contains("cluster-wide"), "{wide}");
    }

    #[test]
    fn actions_parse_by_name() {
        for a in Action::ALL {
            assert_eq!(a.name().parse::<Action>(), Ok(a));
        }
        assert!("delete".parse::<Action>().unwrap_err().contains("read-history"));
    }

    #[test]
    fn rotating_ones_own_key_needs_no_grant() {
        let alice = Principal::new("alice").unwrap();
        let bob = Principal::new("bob").unwrap();
        let op = PolicyOp::RotateAgentKey {
            name: alice.clone(),
            key: PublicKey([1; 32]),
        };
        assert_eq!(op.requires(Some(&alice)), None);
        assert_eq!(op.requires(Some(&bob)), Some((Action::KeyAdmin, String::new())));
        let g = PolicyOp::Grant(grant("bob", Action::Write, "team"));
        assert_eq!(g.requires(Some(&alice)), Some((Action::Grant, "team".into())));
    }
}
