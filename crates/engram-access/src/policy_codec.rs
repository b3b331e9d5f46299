//! The canonical encoding of a policy change: what an agent signs when it changes who may do
//! what, kept beside the change's audit entry so an offline verifier can decode it (the same
//! role `TxRequest::signed_bytes` plays for data transactions). Versioned; a version is never
//! changed, only added.
//!
//! ```text
//! change = version:u8 kind:u8 fields
//! ```
//! Kinds: 1 add-agent (name:str key:32), 2 rotate-agent-key (name:str key:32), 3 revoke-agent
//! (name:str), 4 grant and 5 revoke-grant (principal:str action:str prefix:str attribute:str),
//! 6 assign-role and 7 unassign-role (agent:str role:str), 8 access-log (prefix:str on:u8),
//! 9 retention (namespace:str attribute:str keep_ms:u64), 10 retention-versions (namespace:str
//! attribute:str keep_versions:u32), 11 session (namespace:str ttl_ms:u64 renew:u8).
//! `Configure` is made by the cluster's initialisation and `SessionLapsed` by the leader, never
//! signed by an agent: they have no encoding.

use engram_audit::PublicKey;
use engram_types::DecodeError;
use engram_types::codec::{Reader, Writer};

use crate::{Grant, PolicyOp, Principal};

/// Format version of [`PolicyOp::signed_bytes`].
pub const POLICY_FORMAT_VERSION: u8 = 1;

impl PolicyOp {
    /// The canonical bytes of this change; `None` for [`PolicyOp::Configure`] and
    /// [`PolicyOp::SessionLapsed`].
    pub fn signed_bytes(&self) -> Option<Vec<u8>> {
        let mut w = Writer::with_capacity(96);
        w.u8(POLICY_FORMAT_VERSION);
        match self {
            PolicyOp::Configure { .. } | PolicyOp::SessionLapsed { .. } => return None,
            PolicyOp::AddAgent { name, key } => {
                w.u8(1).str(name.as_str()).raw(&key.0);
            }
            PolicyOp::RotateAgentKey { name, key } => {
                w.u8(2).str(name.as_str()).raw(&key.0);
            }
            PolicyOp::RevokeAgent { name } => {
                w.u8(3).str(name.as_str());
            }
            PolicyOp::Grant(g) | PolicyOp::Revoke(g) => {
                w.u8(if matches!(self, PolicyOp::Grant(_)) { 4 } else { 5 })
                    .str(&g.principal)
                    .str(g.action.name())
                    .str(&g.prefix)
                    .str(&g.attribute);
            }
            PolicyOp::AssignRole { agent, role } | PolicyOp::UnassignRole { agent, role } => {
                w.u8(if matches!(self, PolicyOp::AssignRole { .. }) {
                    6
                } else {
                    7
                })
                .str(agent.as_str())
                .str(role.as_str());
            }
            PolicyOp::AccessLog { prefix, on } => {
                w.u8(8).str(prefix).u8(u8::from(*on));
            }
            PolicyOp::Retention {
                namespace,
                attribute,
                keep_ms,
            } => {
                w.u8(9).str(namespace).str(attribute).u64(*keep_ms);
            }
            PolicyOp::RetentionVersions {
                namespace,
                attribute,
                keep_versions,
            } => {
                w.u8(10).str(namespace).str(attribute).u32(*keep_versions);
            }
            PolicyOp::Session {
                namespace,
                ttl_ms,
                renew,
            } => {
                w.u8(11).str(namespace).u64(*ttl_ms).u8(u8::from(*renew));
            }
        }
        Some(w.finish())
    }

    /// Decodes [`PolicyOp::signed_bytes`], validating every name, key and grant.
    pub fn decode_signed(bytes: &[u8]) -> Result<PolicyOp, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("policy format version")?;
        if version != POLICY_FORMAT_VERSION {
            return Err(DecodeError::Version(version));
        }
        let invalid = |what: &str, e: String| {
            DecodeError::Invalid(engram_types::ValidationError::Transaction(format!("{what}: {e}")))
        };
        let principal = |r: &mut Reader<'_>, what: &'static str| -> Result<Principal, DecodeError> {
            Principal::new(r.string(what)?).map_err(|e| invalid(what, e.to_string()))
        };
        let key =
            |r: &mut Reader<'_>| -> Result<PublicKey, DecodeError> { Ok(PublicKey(r.hash("agent key")?.0)) };
        let op = match r.u8("policy change")? {
            1 => PolicyOp::AddAgent {
                name: principal(&mut r, "agent name")?,
                key: key(&mut r)?,
            },
            2 => PolicyOp::RotateAgentKey {
                name: principal(&mut r, "agent name")?,
                key: key(&mut r)?,
            },
            3 => PolicyOp::RevokeAgent {
                name: principal(&mut r, "agent name")?,
            },
            tag @ (4 | 5) => {
                let grant = Grant {
                    principal: r.string("grant principal")?,
                    action: r
                        .string("grant action")?
                        .parse()
                        .map_err(|e| invalid("grant action", e))?,
                    prefix: r.string("grant prefix")?,
                    attribute: r.string("grant attribute")?,
                };
                grant.validate().map_err(|e| invalid("grant", e))?;
                if tag == 4 {
                    PolicyOp::Grant(grant)
                } else {
                    PolicyOp::Revoke(grant)
                }
            }
            tag @ (6 | 7) => {
                let agent = principal(&mut r, "role agent")?;
                let role = principal(&mut r, "role")?;
                if tag == 6 {
                    PolicyOp::AssignRole { agent, role }
                } else {
                    PolicyOp::UnassignRole { agent, role }
                }
            }
            8 => {
                let prefix = r.string("access log prefix")?;
                crate::policy::access_log_prefix(&prefix).map_err(|e| invalid("access log prefix", e))?;
                let on = flag(&mut r, "access log switch")?;
                PolicyOp::AccessLog { prefix, on }
            }
            9 => {
                let namespace = r.string("retention namespace")?;
                let attribute = r.string("retention attribute")?;
                crate::policy::retention_target(&namespace, &attribute)
                    .map_err(|e| invalid("retention", e))?;
                PolicyOp::Retention {
                    namespace,
                    attribute,
                    keep_ms: r.u64("retention keep_ms")?,
                }
            }
            10 => {
                let namespace = r.string("retention namespace")?;
                let attribute = r.string("retention attribute")?;
                crate::policy::retention_target(&namespace, &attribute)
                    .map_err(|e| invalid("retention", e))?;
                PolicyOp::RetentionVersions {
                    namespace,
                    attribute,
                    keep_versions: r.u32("retention keep_versions")?,
                }
            }
            11 => {
                let namespace = r.string("session namespace")?;
                crate::policy::session_target(&namespace).map_err(|e| invalid("session", e))?;
                PolicyOp::Session {
                    namespace,
                    ttl_ms: r.u64("session ttl_ms")?,
                    renew: flag(&mut r, "session renew")?,
                }
            }
            tag => {
                return Err(DecodeError::Tag {
                    what: "policy change",
                    tag,
                });
            }
        };
        r.finish()?;
        Ok(op)
    }
}

/// A one-byte switch: 0 or 1.
fn flag(r: &mut Reader<'_>, what: &'static str) -> Result<bool, DecodeError> {
    match r.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        tag => Err(DecodeError::Tag { what, tag }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Mode};

    #[test]
    fn every_signed_change_round_trips_and_damage_is_refused() {
        let name = Principal::new("alice").unwrap();
        let grant = Grant {
            principal: "alice".into(),
            action: Action::Write,
            prefix: "team/a".into(),
            attribute: ":hr/*".into(),
        };
        let ops = [
            PolicyOp::AddAgent {
                name: name.clone(),
                key: PublicKey([1; 32]),
            },
            PolicyOp::RotateAgentKey {
                name: name.clone(),
                key: PublicKey([2; 32]),
            },
            PolicyOp::RevokeAgent { name: name.clone() },
            PolicyOp::Grant(grant.clone()),
            PolicyOp::Revoke(grant),
            PolicyOp::AssignRole {
                agent: name.clone(),
                role: Principal::role("ops").unwrap(),
            },
            PolicyOp::UnassignRole {
                agent: name,
                role: Principal::role("ops").unwrap(),
            },
            PolicyOp::AccessLog {
                prefix: "team".into(),
                on: true,
            },
            PolicyOp::AccessLog {
                prefix: "*".into(),
                on: false,
            },
            PolicyOp::Retention {
                namespace: "team/chat".into(),
                attribute: String::new(),
                keep_ms: 86_400_000,
            },
            PolicyOp::Retention {
                namespace: "team/chat".into(),
                attribute: ":msg/text".into(),
                keep_ms: 0,
            },
            PolicyOp::RetentionVersions {
                namespace: "team/chat".into(),
                attribute: ":msg/text".into(),
                keep_versions: 3,
            },
            PolicyOp::RetentionVersions {
                namespace: "team/chat".into(),
                attribute: String::new(),
                keep_versions: 0,
            },
            PolicyOp::Session {
                namespace: "scratch/run-7".into(),
                ttl_ms: 900_000,
                renew: false,
            },
            PolicyOp::Session {
                namespace: "scratch/run-7".into(),
                ttl_ms: 900_000,
                renew: true,
            },
            PolicyOp::Session {
                namespace: "scratch/run-7".into(),
                ttl_ms: 0,
                renew: false,
            },
        ];
        let mut seen = std::collections::BTreeSet::new();
        for op in ops {
            let bytes = op.signed_bytes().unwrap();
            assert_eq!(PolicyOp::decode_signed(&bytes).unwrap(), op);
            assert!(seen.insert(bytes.clone()), "two changes share an encoding");
            assert!(PolicyOp::decode_signed(&bytes[..bytes.len() - 1]).is_err());
            let mut trailing = bytes.clone();
            trailing.push(0);
            assert!(PolicyOp::decode_signed(&trailing).is_err());
        }
        let configure = PolicyOp::Configure {
            mode: Mode::Open,
            admin: None,
        };
        assert_eq!(configure.signed_bytes(), None);
        // Only the leader ends a lapsed session: no agent can sign one.
        let lapsed = PolicyOp::SessionLapsed {
            namespace: "scratch/run-7".into(),
        };
        assert_eq!(lapsed.signed_bytes(), None);
        // A grant that does not validate does not decode.
        let mut w = Writer::new();
        w.u8(POLICY_FORMAT_VERSION)
            .u8(4)
            .str("alice")
            .str("fly")
            .str("team")
            .str("");
        assert!(PolicyOp::decode_signed(&w.finish()).is_err());
    }
}
