//! Wire conversions of the `Access` service, and the method paths requests are signed over.

use engram_access::{Action, Grant, PolicyOp, Principal};
use engram_audit::PublicKey;

use crate::{WireError, pb};

/// The gRPC paths of the calls a client signs (the signature covers the path, so a signature
/// made for one call verifies for no other). Server and clients take them from here.
pub mod methods {
    pub const TRANSACT: &str = engram_types::TRANSACT_METHOD;
    pub const DIFF: &str = "/engram.v1.Memory/Diff";
    pub const GET: &str = "/engram.v1.Memory/Get";
    pub const HISTORY: &str = "/engram.v1.Memory/History";
    pub const FIND: &str = "/engram.v1.Memory/Find";
    pub const SEARCH: &str = "/engram.v1.Memory/Search";
    pub const LIST_NAMESPACES: &str = "/engram.v1.Memory/ListNamespaces";
    pub const LIST_ENTITIES: &str = "/engram.v1.Memory/ListEntities";
    pub const REFERRERS: &str = "/engram.v1.Memory/Referrers";
    pub const QUERY: &str = "/engram.v1.Memory/Query";
    pub const WATCH: &str = "/engram.v1.Memory/Watch";
    pub const APPLY_SCHEMA: &str = "/engram.v1.Memory/ApplySchema";
    pub const GET_SCHEMA: &str = "/engram.v1.Memory/GetSchema";
    pub const CREATE_BRANCH: &str = "/engram.v1.Memory/CreateBranch";
    pub const MERGE_BRANCH: &str = "/engram.v1.Memory/MergeBranch";
    pub const ABANDON_BRANCH: &str = "/engram.v1.Memory/AbandonBranch";
    pub const LIST_BRANCHES: &str = "/engram.v1.Memory/ListBranches";
    pub const REDACT: &str = "/engram.v1.Memory/Redact";
    pub const ENTRIES: &str = "/engram.v1.Audit/Entries";
    pub const HEAD: &str = "/engram.v1.Audit/Head";
    pub const CHECKPOINT: &str = "/engram.v1.Audit/Checkpoint";
    pub const INCLUSION_PROOF: &str = "/engram.v1.Audit/InclusionProof";
    pub const CONSISTENCY_PROOF: &str = "/engram.v1.Audit/ConsistencyProof";
    pub const EXPORT: &str = "/engram.v1.Audit/Export";
    pub const INIT: &str = "/engram.v1.Cluster/Init";
    pub const STATUS: &str = "/engram.v1.Cluster/Status";
    pub const ADD_NODE: &str = "/engram.v1.Cluster/AddNode";
    pub const REMOVE_NODE: &str = "/engram.v1.Cluster/RemoveNode";
    pub const REVOKE_KEY: &str = "/engram.v1.Cluster/RevokeKey";
    pub const ROTATE_KEY: &str = "/engram.v1.Cluster/RotateKey";
    pub const PROPOSE_KEY_CHANGE: &str = "/engram.v1.Cluster/ProposeKeyChange";
    pub const BACKUP: &str = "/engram.v1.Cluster/Backup";
    pub const LIST_JOBS: &str = "/engram.v1.Cluster/ListJobs";
    pub const METRICS: &str = "/engram.v1.Cluster/Metrics";
    pub const ADD_AGENT: &str = "/engram.v1.Access/AddAgent";
    pub const ROTATE_AGENT_KEY: &str = "/engram.v1.Access/RotateAgentKey";
    pub const REVOKE_AGENT: &str = "/engram.v1.Access/RevokeAgent";
    pub const GRANT: &str = "/engram.v1.Access/Grant";
    pub const REVOKE_GRANT: &str = "/engram.v1.Access/RevokeGrant";
    pub const LIST_AGENTS: &str = "/engram.v1.Access/ListAgents";
    pub const LIST_GRANTS: &str = "/engram.v1.Access/ListGrants";
    pub const WHO_AM_I: &str = "/engram.v1.Access/WhoAmI";
    pub const ASSIGN_ROLE: &str = "/engram.v1.Access/AssignRole";
    pub const UNASSIGN_ROLE: &str = "/engram.v1.Access/UnassignRole";
    pub const ACCESS_EVENTS: &str = "/engram.v1.Access/Events";
    pub const SET_ACCESS_LOG: &str = "/engram.v1.Access/SetAccessLog";
    pub const SET_RETENTION: &str = "/engram.v1.Access/SetRetention";
    pub const LIST_RETENTION: &str = "/engram.v1.Access/ListRetention";
    pub const SET_SESSION: &str = "/engram.v1.Access/SetSession";
    pub const LIST_SESSIONS: &str = "/engram.v1.Access/ListSessions";
}

/// A role request's agent and role principal (`role:<name>`).
pub fn role_request(req: &pb::RoleRequest) -> Result<(Principal, Principal), WireError> {
    let agent = principal("agent", req.agent.clone())?;
    let role = Principal::role(&req.role).map_err(|e| WireError::new("role", e))?;
    Ok((agent, role))
}

/// What a request's signature covers, its *body*: the message's protobuf bytes, except for
/// the calls that become a transaction (`Transact`, `ApplySchema` and the three branch calls),
/// whose body is the transaction's canonical bytes (`TxRequest::signed_bytes`), and the calls
/// that change the policy (agents, grants, roles), whose body is the change's canonical bytes
/// (`PolicyOp::signed_bytes`). Those bytes are
/// what the state machine executes and what the audit chain keeps beside the transaction's
/// entry, so an offline verifier can check the agent's signature and hold the request against
/// the datoms without a protobuf decoder. Clients and servers take the body from here.
pub trait SignedBody: prost::Message + Sized {
    fn signed_body(&self, method: &str) -> Vec<u8> {
        let _ = method;
        self.encode_to_vec()
    }
}

macro_rules! protobuf_body {
    ($($t:ident),* $(,)?) => { $(impl SignedBody for pb::$t {})* };
}

protobuf_body!(
    GetRequest,
    HistoryRequest,
    FindRequest,
    SearchRequest,
    ListNamespacesRequest,
    ListEntitiesRequest,
    ReferrersRequest,
    QueryRequest,
    WatchRequest,
    DiffRequest,
    GetSchemaRequest,
    ListBranchesRequest,
    EntriesRequest,
    HeadRequest,
    CheckpointRequest,
    InclusionProofRequest,
    ConsistencyProofRequest,
    ExportRequest,
    InitRequest,
    StatusRequest,
    AddNodeRequest,
    RemoveNodeRequest,
    RevokeKeyRequest,
    RotateKeyRequest,
    ListAgentsRequest,
    ListGrantsRequest,
    ListRetentionRequest,
    ListSessionsRequest,
    WhoAmIRequest,
    KeyChangeProposal,
    AccessEventsRequest,
    BackupRequest,
    ListJobsRequest,
    MetricsRequest,
);

/// The body of a call that becomes a transaction or a policy change: its canonical bytes, or,
/// for a message that does not convert (`None`; the server refuses it before any signature is
/// checked), its protobuf bytes.
fn canonical_body<T: prost::Message>(message: &T, canonical: Option<Vec<u8>>) -> Vec<u8> {
    canonical.unwrap_or_else(|| message.encode_to_vec())
}

/// A transaction's body is its canonical bytes: with value salts, the committed form (each
/// value's salted commitment in place of the value), else the values themselves.
impl SignedBody for pb::TransactRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        let canonical = crate::value_salts(self).ok().and_then(|salts| {
            let tx = engram_types::TxRequest::try_from(self.clone()).ok()?;
            if salts.is_empty() {
                Some(tx.signed_bytes())
            } else {
                tx.committed_bytes(&salts).ok()
            }
        });
        canonical_body(self, canonical)
    }
}

/// A redaction's body is the request's canonical bytes (`RedactRequest::signed_bytes`), which
/// the audit chain keeps; a dry run's is its protobuf bytes, so a signature on a dry run can
/// never be replayed as the redaction itself.
impl SignedBody for pb::RedactRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        // A redaction by predicate is recorded without the signature (the leader checks it,
        // and its replay guard the nonce): its body is the message's bytes, like a dry run's.
        if self.dry_run || self.matching.is_some() {
            return prost::Message::encode_to_vec(self);
        }
        canonical_body(
            self,
            crate::redact_request(self.clone()).ok().map(|r| r.signed_bytes()),
        )
    }
}

impl SignedBody for pb::ApplySchemaRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        canonical_body(
            self,
            crate::schema_request(self.clone()).ok().map(|t| t.signed_bytes()),
        )
    }
}

impl SignedBody for pb::CreateBranchRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        canonical_body(
            self,
            crate::create_branch_request(self.clone())
                .ok()
                .map(|t| t.signed_bytes()),
        )
    }
}

impl SignedBody for pb::BranchRequest {
    /// One message serves merging and abandoning: the method says which.
    fn signed_body(&self, method: &str) -> Vec<u8> {
        use engram_types::BranchOp;
        let op = if method == methods::ABANDON_BRANCH {
            |name| BranchOp::Abandon { name }
        } else {
            |name| BranchOp::Merge { name }
        };
        let tx = crate::branch_request(
            self.namespace.clone(),
            self.name.clone(),
            self.provenance.clone(),
            op,
        );
        canonical_body(self, tx.ok().map(|t| t.signed_bytes()))
    }
}

/// A policy change's canonical bytes, if the message converts into one.
fn policy_bytes(op: Result<PolicyOp, WireError>) -> Option<Vec<u8>> {
    op.ok().and_then(|op| op.signed_bytes())
}

pub fn add_agent_op(m: &pb::AddAgentRequest) -> Result<PolicyOp, WireError> {
    Ok(PolicyOp::AddAgent {
        name: principal("name", m.name.clone())?,
        key: public_key("public_key", &m.public_key)?,
    })
}

pub fn rotate_agent_key_op(m: &pb::RotateAgentKeyRequest) -> Result<PolicyOp, WireError> {
    Ok(PolicyOp::RotateAgentKey {
        name: principal("name", m.name.clone())?,
        key: public_key("public_key", &m.public_key)?,
    })
}

pub fn revoke_agent_op(m: &pb::RevokeAgentRequest) -> Result<PolicyOp, WireError> {
    Ok(PolicyOp::RevokeAgent {
        name: principal("name", m.name.clone())?,
    })
}

/// A grant request as the change it asks for: revoking when `revoke`.
pub fn grant_op(m: &pb::GrantRequest, revoke: bool) -> Result<PolicyOp, WireError> {
    let grant = Grant::try_from(m.clone())?;
    Ok(if revoke {
        PolicyOp::Revoke(grant)
    } else {
        PolicyOp::Grant(grant)
    })
}

/// A role request as the change it asks for: unassigning when `unassign`.
pub fn role_op(m: &pb::RoleRequest, unassign: bool) -> Result<PolicyOp, WireError> {
    let (agent, role) = role_request(m)?;
    Ok(if unassign {
        PolicyOp::UnassignRole { agent, role }
    } else {
        PolicyOp::AssignRole { agent, role }
    })
}

pub fn access_log_op(m: &pb::AccessLogRequest) -> Result<PolicyOp, WireError> {
    engram_access::access_log_prefix(&m.prefix).map_err(|e| WireError::new("prefix", e))?;
    Ok(PolicyOp::AccessLog {
        prefix: m.prefix.clone(),
        on: m.enabled,
    })
}

pub fn retention_op(m: &pb::RetentionRequest) -> Result<PolicyOp, WireError> {
    engram_access::retention_target(&m.namespace, &m.attribute)
        .map_err(|e| WireError::new("namespace", e))?;
    match m.keep_versions {
        Some(_) if m.keep_ms != 0 => Err(WireError::new(
            "keep_versions",
            "a policy keeps for a time (keep_ms) or a number of versions (keep_versions), not both",
        )),
        Some(keep_versions) => Ok(PolicyOp::RetentionVersions {
            namespace: m.namespace.clone(),
            attribute: m.attribute.clone(),
            keep_versions,
        }),
        None => Ok(PolicyOp::Retention {
            namespace: m.namespace.clone(),
            attribute: m.attribute.clone(),
            keep_ms: m.keep_ms,
        }),
    }
}

pub fn session_op(m: &pb::SessionRequest) -> Result<PolicyOp, WireError> {
    engram_access::session_target(&m.namespace).map_err(|e| WireError::new("namespace", e))?;
    Ok(PolicyOp::Session {
        namespace: m.namespace.clone(),
        ttl_ms: m.ttl_ms,
        renew: m.renew && m.ttl_ms > 0,
    })
}

impl SignedBody for pb::SessionRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        canonical_body(self, policy_bytes(session_op(self)))
    }
}

impl SignedBody for pb::RetentionRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        canonical_body(self, policy_bytes(retention_op(self)))
    }
}

impl SignedBody for pb::AccessLogRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        canonical_body(self, policy_bytes(access_log_op(self)))
    }
}

impl SignedBody for pb::AddAgentRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        canonical_body(self, policy_bytes(add_agent_op(self)))
    }
}

impl SignedBody for pb::RotateAgentKeyRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        canonical_body(self, policy_bytes(rotate_agent_key_op(self)))
    }
}

impl SignedBody for pb::RevokeAgentRequest {
    fn signed_body(&self, _: &str) -> Vec<u8> {
        canonical_body(self, policy_bytes(revoke_agent_op(self)))
    }
}

impl SignedBody for pb::GrantRequest {
    /// One message serves granting and revoking: the method says which.
    fn signed_body(&self, method: &str) -> Vec<u8> {
        canonical_body(
            self,
            policy_bytes(grant_op(self, method == methods::REVOKE_GRANT)),
        )
    }
}

impl SignedBody for pb::RoleRequest {
    /// One message serves assigning and unassigning: the method says which.
    fn signed_body(&self, method: &str) -> Vec<u8> {
        canonical_body(
            self,
            policy_bytes(role_op(self, method == methods::UNASSIGN_ROLE)),
        )
    }
}

/// `message` as a request to `method` signed by `key` at `time_ms` with `nonce`: the
/// signature over its body ([`SignedBody`]) travels in the request's metadata
/// (`engram_access::request`). Clients and a joining node sign through this.
pub fn signed_request<T: SignedBody>(
    key: &engram_access::AgentKey,
    method: &str,
    message: T,
    time_ms: i64,
    nonce: [u8; 16],
) -> tonic::Request<T> {
    let auth = engram_access::RequestAuth::sign(key, method, &message.signed_body(method), time_ms, nonce);
    let mut req = tonic::Request::new(message);
    for (name, value) in auth.headers() {
        if let Ok(value) = value.parse() {
            req.metadata_mut().insert(name, value);
        }
    }
    req
}

pub fn principal(field: &str, raw: String) -> Result<Principal, WireError> {
    Principal::new(raw).map_err(|e| WireError::new(field, e))
}

pub fn public_key(field: &str, raw: &[u8]) -> Result<PublicKey, WireError> {
    let bytes: [u8; 32] = raw.try_into().map_err(|_| {
        WireError::new(
            field,
            format!("{} bytes, expected a 32-byte Ed25519 key", raw.len()),
        )
    })?;
    Ok(PublicKey(bytes))
}

impl TryFrom<pb::GrantRequest> for Grant {
    type Error = WireError;
    fn try_from(raw: pb::GrantRequest) -> Result<Grant, WireError> {
        let action = raw
            .action
            .parse::<Action>()
            .map_err(|e| WireError::new("action", e))?;
        let grant = Grant {
            principal: raw.principal,
            action,
            prefix: raw.prefix,
            attribute: raw.attribute,
        };
        grant.validate().map_err(|e| {
            let field = ["principal", "attribute"]
                .into_iter()
                .find(|f| e.starts_with(f))
                .unwrap_or("prefix");
            WireError::new(field, e)
        })?;
        Ok(grant)
    }
}

impl From<&Grant> for pb::GrantRequest {
    fn from(g: &Grant) -> pb::GrantRequest {
        pb::GrantRequest {
            principal: g.principal.clone(),
            action: g.action.name().to_string(),
            prefix: g.prefix.clone(),
            attribute: g.attribute.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_validated_at_the_wire() {
        let ok = Grant::try_from(pb::GrantRequest {
            principal: "alice".into(),
            action: "write".into(),
            prefix: "team/a".into(),
            attribute: String::new(),
        })
        .unwrap();
        assert_eq!(ok.action, Action::Write);
        let bad_action = Grant::try_from(pb::GrantRequest {
            principal: "alice".into(),
            action: "delete".into(),
            prefix: String::new(),
            attribute: String::new(),
        })
        .unwrap_err();
        assert_eq!(bad_action.field, "action");
        let bad_principal = Grant::try_from(pb::GrantRequest {
            principal: "al ice".into(),
            action: "read".into(),
            prefix: String::new(),
            attribute: String::new(),
        })
        .unwrap_err();
        assert_eq!(bad_principal.field, "principal");
        let narrow_admin = Grant::try_from(pb::GrantRequest {
            principal: "alice".into(),
            action: "key-admin".into(),
            prefix: "team".into(),
            attribute: String::new(),
        })
        .unwrap_err();
        assert_eq!(narrow_admin.field, "prefix");
        let bad_attribute = Grant::try_from(pb::GrantRequest {
            principal: "alice".into(),
            action: "read".into(),
            prefix: "team".into(),
            attribute: "salary".into(),
        })
        .unwrap_err();
        assert_eq!(bad_attribute.field, "attribute");
        assert!(public_key("public_key", &[0; 31]).is_err());
    }
}
