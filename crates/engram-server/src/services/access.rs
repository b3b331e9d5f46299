//! `engram.v1.Access`: agents, their keys, grants, and who is calling.

use std::sync::Arc;

use engram_access::{Action, Grant, PolicyOp, SYSTEM_NAMESPACE};
use engram_core::cursor::CursorKind;
use engram_core::{lists, policy};
use engram_proto::{methods, pb};
use engram_raft::Proposer;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::gate::{Caller, Need};
use super::{Route, Shared, forwarded_err, list_page, relay};
use crate::error::ApiError;

pub struct AccessService {
    shared: Arc<Shared>,
}

impl AccessService {
    pub fn new(shared: Arc<Shared>) -> AccessService {
        AccessService { shared }
    }

    /// Proposes a policy change on the leader (forwarding it there when this node does not
    /// lead). The leader's applied policy answers first; apply decides.
    async fn change(
        &self,
        meta: MetadataMap,
        call: PolicyCall,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let op = call.to_op()?;
        let incoming = self.shared.incoming(&meta)?;
        if let Route::Leader(addr) = self.shared.route_write(incoming.forwarded)? {
            return Ok(Response::new(
                call.forward(self.shared.access_client(&addr)?, &incoming).await?,
            ));
        }
        let caller = self.shared.admit_body(
            &meta,
            || op.signed_bytes().unwrap_or_default(),
            call.method(),
            Need::Principal(String::new()),
        )?;
        let refused = |rejection| {
            self.shared
                .refusal(&meta, call.method(), "", ApiError::Rejected(rejection))
        };
        if let Err(rejection) = self.shared.read_state(|store| {
            let now_ns = engram_raft::clock::now_ns().saturating_add(self.shared.config.clock_skew_ns);
            policy::plan_change(store, &op, caller.principal.as_ref(), now_ns)
                .map(|planned| planned.map(|_| ()))
        })? {
            return Err(refused(rejection).into());
        }
        let by = match &caller.author {
            Some(author) => Proposer::Signed(author.clone()),
            None => Proposer::Unsigned(caller.principal.clone()),
        };
        match self.shared.node.propose_policy(op, by).await {
            Ok(Ok(receipt)) => Ok(Response::new(pb::PolicyResponse {
                tx: receipt.tx.0,
                audit_index: receipt.audit_index,
            })),
            Ok(Err(rejection)) => Err(refused(rejection).into()),
            Err(engram_raft::NodeError::NotLeader {
                leader: Some((_, info)),
            }) if !caller.forwarded => Ok(Response::new(
                call.forward(self.shared.access_client(&info.addr)?, &caller)
                    .await?,
            )),
            Err(e) => Err(ApiError::from(e).into()),
        }
    }
}

impl AccessService {
    /// The leader's Access client when a read of the policy must be served there (the policy
    /// as of the last committed change, whichever node the caller asked); `None`: here.
    async fn access_leader(
        &self,
        forwarded: bool,
    ) -> Result<Option<pb::access_client::AccessClient<Channel>>, ApiError> {
        match self
            .shared
            .route_read(pb::ReadConsistency::Linearizable as i32, forwarded)
            .await?
        {
            Route::Local => Ok(None),
            Route::Leader(addr) => Ok(Some(self.shared.access_client(&addr)?)),
        }
    }
}

/// A call of the Access service that becomes one policy change.
enum PolicyCall {
    AddAgent(pb::AddAgentRequest),
    RotateAgentKey(pb::RotateAgentKeyRequest),
    RevokeAgent(pb::RevokeAgentRequest),
    Grant(pb::GrantRequest),
    RevokeGrant(pb::GrantRequest),
    AssignRole(pb::RoleRequest),
    UnassignRole(pb::RoleRequest),
    SetAccessLog(pb::AccessLogRequest),
    SetRetention(pb::RetentionRequest),
    SetSession(pb::SessionRequest),
}

impl PolicyCall {
    /// The method the call was signed for. Its signed body is the change's canonical bytes
    /// (`engram_proto::SignedBody`), which the caller computes from the converted change.
    fn method(&self) -> &'static str {
        match self {
            PolicyCall::AddAgent(_) => methods::ADD_AGENT,
            PolicyCall::RotateAgentKey(_) => methods::ROTATE_AGENT_KEY,
            PolicyCall::RevokeAgent(_) => methods::REVOKE_AGENT,
            PolicyCall::Grant(_) => methods::GRANT,
            PolicyCall::RevokeGrant(_) => methods::REVOKE_GRANT,
            PolicyCall::AssignRole(_) => methods::ASSIGN_ROLE,
            PolicyCall::UnassignRole(_) => methods::UNASSIGN_ROLE,
            PolicyCall::SetAccessLog(_) => methods::SET_ACCESS_LOG,
            PolicyCall::SetRetention(_) => methods::SET_RETENTION,
            PolicyCall::SetSession(_) => methods::SET_SESSION,
        }
    }

    /// Validates the request into the change it proposes.
    fn to_op(&self) -> Result<PolicyOp, ApiError> {
        Ok(match self {
            PolicyCall::AddAgent(m) => engram_proto::add_agent_op(m)?,
            PolicyCall::RotateAgentKey(m) => engram_proto::rotate_agent_key_op(m)?,
            PolicyCall::RevokeAgent(m) => engram_proto::revoke_agent_op(m)?,
            PolicyCall::Grant(m) => engram_proto::grant_op(m, false)?,
            PolicyCall::RevokeGrant(m) => engram_proto::grant_op(m, true)?,
            PolicyCall::AssignRole(m) => engram_proto::role_op(m, false)?,
            PolicyCall::UnassignRole(m) => engram_proto::role_op(m, true)?,
            PolicyCall::SetAccessLog(m) => engram_proto::access_log_op(m)?,
            PolicyCall::SetRetention(m) => engram_proto::retention_op(m)?,
            PolicyCall::SetSession(m) => engram_proto::session_op(m)?,
        })
    }

    /// Sends the same call, with the caller's signature, to the leader.
    async fn forward(
        self,
        mut client: pb::access_client::AccessClient<Channel>,
        caller: &Caller,
    ) -> Result<pb::PolicyResponse, ApiError> {
        let answer = match self {
            PolicyCall::AddAgent(m) => client.add_agent(caller.forward(m)).await,
            PolicyCall::RotateAgentKey(m) => client.rotate_agent_key(caller.forward(m)).await,
            PolicyCall::RevokeAgent(m) => client.revoke_agent(caller.forward(m)).await,
            PolicyCall::Grant(m) => client.grant(caller.forward(m)).await,
            PolicyCall::RevokeGrant(m) => client.revoke_grant(caller.forward(m)).await,
            PolicyCall::AssignRole(m) => client.assign_role(caller.forward(m)).await,
            PolicyCall::UnassignRole(m) => client.unassign_role(caller.forward(m)).await,
            PolicyCall::SetAccessLog(m) => client.set_access_log(caller.forward(m)).await,
            PolicyCall::SetRetention(m) => client.set_retention(caller.forward(m)).await,
            PolicyCall::SetSession(m) => client.set_session(caller.forward(m)).await,
        };
        answer.map(Response::into_inner).map_err(forwarded_err)
    }
}

fn grant_pb(g: &Grant, row: Option<&policy::GrantRow>) -> pb::GrantInfo {
    pb::GrantInfo {
        principal: g.principal.clone(),
        action: g.action.name().to_string(),
        prefix: g.prefix.clone(),
        since_tx: row.map_or(0, |r| r.since_tx.0),
        entity: row.map_or(0, |r| r.entity.0),
        attribute: g.attribute.clone(),
    }
}

#[tonic::async_trait]
impl pb::access_server::Access for AccessService {
    async fn add_agent(
        &self,
        request: Request<pb::AddAgentRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::AddAgent(req)).await
    }

    async fn rotate_agent_key(
        &self,
        request: Request<pb::RotateAgentKeyRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::RotateAgentKey(req)).await
    }

    async fn revoke_agent(
        &self,
        request: Request<pb::RevokeAgentRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::RevokeAgent(req)).await
    }

    async fn grant(
        &self,
        request: Request<pb::GrantRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::Grant(req)).await
    }

    async fn revoke_grant(
        &self,
        request: Request<pb::GrantRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::RevokeGrant(req)).await
    }

    async fn assign_role(
        &self,
        request: Request<pb::RoleRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::AssignRole(req)).await
    }

    async fn unassign_role(
        &self,
        request: Request<pb::RoleRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::UnassignRole(req)).await
    }

    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        if let Some(mut leader) = self.access_leader(caller.forwarded).await? {
            return relay(leader.list_agents(caller.forward(req)).await);
        }
        self.shared.admit(
            &meta,
            &req,
            methods::LIST_AGENTS,
            Need::on(Action::Read, SYSTEM_NAMESPACE),
        )?;
        let (agents, assignments) = self.shared.read_state(|store| {
            Ok::<_, engram_core::CoreError>((policy::agents(store)?, policy::role_assignments(store)?))
        })?;
        let items = agents
            .into_iter()
            .map(|(name, row)| {
                (
                    lists::list_key(&[&name]),
                    pb::AgentInfo {
                        roles: assignments
                            .iter()
                            .filter(|(agent, _, _)| *agent == name)
                            .map(|(_, role, _)| role.clone())
                            .collect(),
                        name,
                        public_key: row.key.0.to_vec(),
                        revoked: row.revoked_tx.is_some(),
                        entity: row.entity.0,
                        since_tx: row.since_tx.0,
                    },
                )
            })
            .collect();
        let (agents, next_cursor) = list_page(CursorKind::Agents, &[], items, &req.cursor, req.limit)?;
        Ok(Response::new(pb::ListAgentsResponse {
            agents,
            applied_tx: self.shared.applied_index(),
            next_cursor,
        }))
    }

    async fn list_grants(
        &self,
        request: Request<pb::ListGrantsRequest>,
    ) -> Result<Response<pb::ListGrantsResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        if let Some(mut leader) = self.access_leader(caller.forwarded).await? {
            return relay(leader.list_grants(caller.forward(req)).await);
        }
        self.shared.admit(
            &meta,
            &req,
            methods::LIST_GRANTS,
            Need::on(Action::Read, SYSTEM_NAMESPACE),
        )?;
        let who = req.principal;
        let grants = self.shared.read_state(|store| policy::grants(store))?;
        let items = grants
            .iter()
            .filter(|(g, _)| who.is_empty() || g.principal == who)
            .map(|(g, row)| {
                let key = lists::list_key(&[&g.principal, g.action.name(), &g.prefix, &g.attribute]);
                (key, grant_pb(g, Some(row)))
            })
            .collect();
        let (grants, next_cursor) = list_page(
            CursorKind::Grants,
            &[who.as_bytes()],
            items,
            &req.cursor,
            req.limit,
        )?;
        Ok(Response::new(pb::ListGrantsResponse {
            grants,
            applied_tx: self.shared.applied_index(),
            next_cursor,
        }))
    }

    async fn who_am_i(
        &self,
        request: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let incoming = self.shared.incoming(&meta)?;
        if let Some(mut leader) = self.access_leader(incoming.forwarded).await? {
            return relay(leader.who_am_i(incoming.forward(req)).await);
        }
        let caller = self.shared.admit(&meta, &req, methods::WHO_AM_I, Need::Nothing)?;
        let grants = match &caller.principal {
            Some(p) => {
                self.shared
                    .read_state(|store| policy::policy_of(store, p.as_str()))?
                    .grants
            }
            None => Vec::new(),
        };
        Ok(Response::new(pb::WhoAmIResponse {
            principal: caller.principal.map(|p| p.to_string()).unwrap_or_default(),
            security: caller.mode.map_or("pending", |m| m.name()).to_string(),
            grants: grants.iter().map(|g| grant_pb(g, None)).collect(),
        }))
    }

    async fn set_access_log(
        &self,
        request: Request<pb::AccessLogRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::SetAccessLog(req)).await
    }

    async fn set_retention(
        &self,
        request: Request<pb::RetentionRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::SetRetention(req)).await
    }

    async fn list_retention(
        &self,
        request: Request<pb::ListRetentionRequest>,
    ) -> Result<Response<pb::ListRetentionResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        if let Some(mut leader) = self.access_leader(caller.forwarded).await? {
            return relay(leader.list_retention(caller.forward(req)).await);
        }
        self.shared.admit(
            &meta,
            &req,
            methods::LIST_RETENTION,
            Need::on(Action::Read, SYSTEM_NAMESPACE),
        )?;
        let (by_time, by_versions) = self.shared.read_state(|store| {
            Ok::<_, engram_core::CoreError>((
                policy::retention_policies(store)?,
                policy::versions_policies(store)?,
            ))
        })?;
        let attribute = |a: Option<engram_types::Attribute>| a.map(|a| a.to_string()).unwrap_or_default();
        let policies: Vec<pb::RetentionInfo> = by_time
            .into_iter()
            .map(|p| pb::RetentionInfo {
                namespace: p.namespace.to_string(),
                attribute: attribute(p.attribute),
                keep_ms: p.row.keep_ms,
                since_tx: p.row.since_tx.0,
                keep_versions: 0,
            })
            .chain(by_versions.into_iter().map(|p| pb::RetentionInfo {
                namespace: p.namespace.to_string(),
                attribute: attribute(p.attribute),
                keep_ms: 0,
                since_tx: p.row.since_tx.0,
                keep_versions: p.row.keep_versions,
            }))
            .collect();
        // A time policy and a versions policy may share (namespace, attribute): the kind ends
        // the key.
        let items = policies
            .into_iter()
            .map(|p| {
                let kind = if p.keep_versions > 0 { "versions" } else { "time" };
                (lists::list_key(&[&p.namespace, &p.attribute, kind]), p)
            })
            .collect();
        let (policies, next_cursor) = list_page(CursorKind::Retention, &[], items, &req.cursor, req.limit)?;
        Ok(Response::new(pb::ListRetentionResponse {
            policies,
            applied_tx: self.shared.applied_index(),
            next_cursor,
        }))
    }

    async fn set_session(
        &self,
        request: Request<pb::SessionRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.change(meta, PolicyCall::SetSession(req)).await
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        if let Some(mut leader) = self.access_leader(caller.forwarded).await? {
            return relay(leader.list_sessions(caller.forward(req)).await);
        }
        self.shared.admit(
            &meta,
            &req,
            methods::LIST_SESSIONS,
            Need::on(Action::Read, SYSTEM_NAMESPACE),
        )?;
        let (open, ended) = self.shared.read_state(|store| {
            Ok::<_, engram_core::CoreError>((policy::sessions(store)?, policy::ended_sessions(store)?))
        })?;
        // A page of namespaces, each with its open session and its last ended one.
        let mut by_namespace: std::collections::BTreeMap<String, pb::ListSessionsResponse> =
            Default::default();
        for s in open {
            by_namespace
                .entry(s.namespace.to_string())
                .or_default()
                .sessions
                .push(pb::SessionInfo {
                    namespace: s.namespace.to_string(),
                    ttl_ms: s.row.ttl_ms,
                    deadline_ns: s.row.deadline_ns,
                    since_tx: s.row.since_tx.0,
                    renewed_tx: s.row.renewed_tx.0,
                });
        }
        for s in ended {
            by_namespace
                .entry(s.namespace.to_string())
                .or_default()
                .ended
                .push(pb::EndedSessionInfo {
                    namespace: s.namespace.to_string(),
                    ended_tx: s.row.ended_tx.0,
                    lapsed: s.row.lapsed,
                });
        }
        let items = by_namespace
            .into_iter()
            .map(|(ns, held)| (lists::list_key(&[&ns]), held))
            .collect();
        let (page, next_cursor) = list_page(CursorKind::Sessions, &[], items, &req.cursor, req.limit)?;
        let mut answer = pb::ListSessionsResponse {
            applied_tx: self.shared.applied_index(),
            next_cursor,
            ..Default::default()
        };
        for mut held in page {
            answer.sessions.append(&mut held.sessions);
            answer.ended.append(&mut held.ended);
        }
        Ok(Response::new(answer))
    }

    /// This node's access log, filtered; served by the node asked (each node logs what it
    /// served).
    async fn events(
        &self,
        request: Request<pb::AccessEventsRequest>,
    ) -> Result<Response<pb::AccessEventsResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.shared
            .admit(&meta, &req, methods::ACCESS_EVENTS, Need::cluster(Action::Audit))?;
        let limit = match req.limit {
            0 => 1000,
            n if n > MAX_ACCESS_EVENTS => {
                return Err(ApiError::Invalid(format!(
                    "limit: {n} is above the most one call returns, {MAX_ACCESS_EVENTS}"
                ))
                .into());
            }
            n => n as usize,
        };
        let query = engram_core::access_log::AccessQuery {
            namespace: req.namespace,
            principal: req.principal,
            since_ns: req.since_ns,
            after_seq: req.after_seq,
            limit,
            refused_only: req.refused_only,
        };
        let node = &self.shared.node;
        // The access log is this node's own key space: no snapshot install touches it.
        let (events, last_seq) =
            engram_core::access_log::query(node.store.as_ref(), &query).map_err(ApiError::from)?;
        let head_seq = engram_core::access_log::AccessLog::open(node.store.as_ref())
            .map_err(ApiError::from)?
            .head();
        let node_keys = self
            .shared
            .read_state(|store| engram_core::access_log::signing_keys(store, node.node_id))?;
        Ok(Response::new(pb::AccessEventsResponse {
            events: events
                .iter()
                .map(|signed| {
                    let e = &signed.event;
                    pb::AccessEventInfo {
                        seq: e.seq,
                        time_ns: e.time_ns,
                        principal: e.principal.clone(),
                        call: e.call.clone(),
                        namespace: e.namespace.clone(),
                        entity: e.entity,
                        as_of_tx: e.as_of_tx,
                        read_at: e.read_at,
                        datoms: e.datoms,
                        signed: signed.encode(),
                        refused_code: e.refused.as_ref().map(|r| r.code.clone()).unwrap_or_default(),
                        refused_reason: e.refused.as_ref().map(|r| r.reason.clone()).unwrap_or_default(),
                    }
                })
                .collect(),
            last_seq,
            head_seq,
            node_id: node.node_id,
            node_key: node.keys.current().public().0.to_vec(),
            logged_prefixes: self.shared.access_log_prefixes()?,
            node_keys: node_keys.iter().map(|k| k.0.to_vec()).collect(),
        }))
    }
}

/// The most access events one `Events` call returns.
const MAX_ACCESS_EVENTS: u32 = 10_000;
