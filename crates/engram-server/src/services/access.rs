//! `engram.v1.Access`: agents, their keys, grants, and who is calling.

use std::sync::Arc;

use engram_access::{Action, Grant, PolicyOp, SYSTEM_NAMESPACE};
use engram_core::policy;
use engram_proto::{methods, pb};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::gate::{Caller, Need};
use super::{Route, Shared, forwarded_err};
use crate::error::ApiError;

pub struct AccessService {
    shared: Arc<Shared>,
}

impl AccessService {
    pub fn new(shared: Arc<Shared>) -> AccessService {
        AccessService { shared }
    }

    /// Proposes a policy change on the leader (forwarding it there when this node does not
    /// lead). The policy at this node's applied state answers first; apply decides.
    async fn change(&self, caller: Caller, call: PolicyCall) -> Result<Response<pb::PolicyResponse>, Status> {
        let op = call.to_op()?;
        if let Err(rejection) = self.shared.read_state(|store| {
            policy::plan_change(store, &op, caller.principal.as_ref()).map(|planned| planned.map(|_| ()))
        })? {
            return Err(ApiError::Rejected(rejection).into());
        }
        if let Route::Leader(addr) = self.shared.route_write(caller.forwarded)? {
            return Ok(Response::new(
                call.forward(self.shared.access_client(&addr)?, &caller).await?,
            ));
        }
        match self
            .shared
            .node
            .propose_policy(op, caller.principal.clone())
            .await
        {
            Ok(Ok(receipt)) => Ok(Response::new(pb::PolicyResponse {
                tx: receipt.tx.0,
                audit_index: receipt.audit_index,
            })),
            Ok(Err(rejection)) => Err(ApiError::Rejected(rejection).into()),
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

/// A call of the Access service that becomes one policy change.
enum PolicyCall {
    AddAgent(pb::AddAgentRequest),
    RotateAgentKey(pb::RotateAgentKeyRequest),
    RevokeAgent(pb::RevokeAgentRequest),
    Grant(pb::GrantRequest),
    RevokeGrant(pb::GrantRequest),
}

impl PolicyCall {
    /// Validates the request into the change it proposes.
    fn to_op(&self) -> Result<PolicyOp, ApiError> {
        Ok(match self {
            PolicyCall::AddAgent(m) => PolicyOp::AddAgent {
                name: engram_proto::principal("name", m.name.clone())?,
                key: engram_proto::public_key("public_key", &m.public_key)?,
            },
            PolicyCall::RotateAgentKey(m) => PolicyOp::RotateAgentKey {
                name: engram_proto::principal("name", m.name.clone())?,
                key: engram_proto::public_key("public_key", &m.public_key)?,
            },
            PolicyCall::RevokeAgent(m) => PolicyOp::RevokeAgent {
                name: engram_proto::principal("name", m.name.clone())?,
            },
            PolicyCall::Grant(m) => PolicyOp::Grant(Grant::try_from(m.clone())?),
            PolicyCall::RevokeGrant(m) => PolicyOp::Revoke(Grant::try_from(m.clone())?),
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
    }
}

#[tonic::async_trait]
impl pb::access_server::Access for AccessService {
    async fn add_agent(
        &self,
        request: Request<pb::AddAgentRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let caller = self.shared.admit(&request, methods::ADD_AGENT, Need::Principal)?;
        self.change(caller, PolicyCall::AddAgent(request.into_inner()))
            .await
    }

    async fn rotate_agent_key(
        &self,
        request: Request<pb::RotateAgentKeyRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let caller = self
            .shared
            .admit(&request, methods::ROTATE_AGENT_KEY, Need::Principal)?;
        self.change(caller, PolicyCall::RotateAgentKey(request.into_inner()))
            .await
    }

    async fn revoke_agent(
        &self,
        request: Request<pb::RevokeAgentRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let caller = self
            .shared
            .admit(&request, methods::REVOKE_AGENT, Need::Principal)?;
        self.change(caller, PolicyCall::RevokeAgent(request.into_inner()))
            .await
    }

    async fn grant(
        &self,
        request: Request<pb::GrantRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let caller = self.shared.admit(&request, methods::GRANT, Need::Principal)?;
        self.change(caller, PolicyCall::Grant(request.into_inner())).await
    }

    async fn revoke_grant(
        &self,
        request: Request<pb::GrantRequest>,
    ) -> Result<Response<pb::PolicyResponse>, Status> {
        let caller = self
            .shared
            .admit(&request, methods::REVOKE_GRANT, Need::Principal)?;
        self.change(caller, PolicyCall::RevokeGrant(request.into_inner()))
            .await
    }

    async fn list_agents(
        &self,
        request: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsResponse>, Status> {
        self.shared.admit(
            &request,
            methods::LIST_AGENTS,
            Need::on(Action::Read, SYSTEM_NAMESPACE),
        )?;
        let agents = self.shared.read_state(|store| policy::agents(store))?;
        Ok(Response::new(pb::ListAgentsResponse {
            agents: agents
                .into_iter()
                .map(|(name, row)| pb::AgentInfo {
                    name,
                    public_key: row.key.0.to_vec(),
                    revoked: row.revoked_tx.is_some(),
                    entity: row.entity.0,
                    since_tx: row.since_tx.0,
                })
                .collect(),
            applied_tx: self.shared.applied_index(),
        }))
    }

    async fn list_grants(
        &self,
        request: Request<pb::ListGrantsRequest>,
    ) -> Result<Response<pb::ListGrantsResponse>, Status> {
        self.shared.admit(
            &request,
            methods::LIST_GRANTS,
            Need::on(Action::Read, SYSTEM_NAMESPACE),
        )?;
        let who = request.into_inner().principal;
        let grants = self.shared.read_state(|store| policy::grants(store))?;
        Ok(Response::new(pb::ListGrantsResponse {
            grants: grants
                .iter()
                .filter(|(g, _)| who.is_empty() || g.principal == who)
                .map(|(g, row)| grant_pb(g, Some(row)))
                .collect(),
            applied_tx: self.shared.applied_index(),
        }))
    }

    async fn who_am_i(
        &self,
        request: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIResponse>, Status> {
        let caller = self.shared.admit(&request, methods::WHO_AM_I, Need::Nothing)?;
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
}
