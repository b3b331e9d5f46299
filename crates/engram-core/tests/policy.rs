//! Who may do what, at the state machine: the security mode recorded after genesis (nothing is
//! accepted before it), grants checked at each transaction's own entry, the agent field bound
//! to the signer, the system namespace closed to transactions, policy changes recorded as
//! readable datoms, and the lock-out guard. Every refusal leaves the state as it was.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::sync::Arc;

use engram_access::{Action, Grant, Mode, PolicyOp, Principal, SYSTEM_NAMESPACE};
use engram_audit::{NodeKey, PublicKey};
use engram_core::reads::{self, ReadOptions};
use engram_core::{Engine, PolicyActor, Rejection, TxOutcome, pages, policy};
use engram_storage::{MemStore, Space, Store, WriteBatch};
use engram_types::{
    Attribute, EntityId, EntityRef, Namespace, Op, Provenance, Status, TxId, TxOp, TxRequest, Value,
};

fn principal(name: &str) -> Principal {
    Principal::new(name).unwrap()
}

struct Node {
    store: Arc<MemStore>,
    engine: Engine,
    log: u64,
}

impl Node {
    /// A node whose genesis is applied the way the Raft state machine applies it: with the
    /// pending-mode row.
    fn genesis() -> Node {
        let store = Arc::new(MemStore::new());
        let key = NodeKey::from_seed([5; 32]);
        let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed(key.seed()))).unwrap();
        let mut extra = WriteBatch::new();
        policy::pending_mode_row(&mut extra);
        engine
            .apply_membership(1, vec![(1, key.public())], extra)
            .unwrap();
        Node {
            store,
            engine,
            log: 1,
        }
    }

    fn next(&mut self) -> (u64, i64) {
        self.log += 1;
        (self.log, 1_000_000 * self.log as i64)
    }

    fn policy(&mut self, op: PolicyOp, by: Option<&str>) -> TxOutcome {
        let (index, t) = self.next();
        let by = by.map(principal);
        self.engine
            .apply_policy(index, t, &op, &PolicyActor::Unsigned(by), WriteBatch::new())
            .unwrap()
    }

    fn write(&mut self, by: Option<&str>, req: &TxRequest) -> TxOutcome {
        let (index, t) = self.next();
        let by = by.map(principal);
        self.engine
            .apply_tx_as(index, t, req, by.as_ref(), WriteBatch::new())
            .unwrap()
    }

    /// Every state row except the Raft layer's: what a refusal must leave unchanged (the
    /// applied-position row is the caller's, and apply writes it for refusals too).
    fn state(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut rows = Vec::new();
        self.store
            .for_each(Space::State, &mut |k, v| {
                rows.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
        rows
    }
}

fn tx(ns: &str, agent: &str, op: Op, status: Status) -> TxRequest {
    let entity = match op {
        Op::Assert => EntityRef::Temp("t".into()),
        Op::Retract => EntityRef::Id(EntityId(1)),
    };
    TxRequest::data(
        Namespace::new(ns).unwrap(),
        vec![TxOp {
            op,
            entity,
            attribute: Attribute::new(":note/text").unwrap(),
            value: Value::String("hello".into()),
            valid_from_ns: None,
            valid_to_ns: None,
        }],
        Provenance {
            agent: agent.into(),
            confidence: 1.0,
            status,
            ..Default::default()
        },
    )
}

fn grant(who: &str, action: Action, prefix: &str) -> Grant {
    Grant {
        principal: who.into(),
        action,
        prefix: prefix.into(),
        attribute: String::new(),
    }
}

fn denied(outcome: TxOutcome) -> (String, String, String) {
    match outcome {
        Err(Rejection::NotAuthorized {
            principal,
            action,
            namespace,
        }) => (principal, action, namespace),
        other => panic!("expected NotAuthorized, got {other:?}"),
    }
}

fn enforced() -> Node {
    let mut node = Node::genesis();
    node.policy(
        PolicyOp::Configure {
            mode: Mode::Enforced,
            admin: Some((principal("root"), PublicKey([1; 32]))),
        },
        None,
    )
    .unwrap();
    node
}

#[test]
fn nothing_is_accepted_before_the_mode_is_recorded() {
    let mut node = Node::genesis();
    let before = node.state();
    assert_eq!(
        node.write(None, &tx("team/a", "x", Op::Assert, Status::Candidate)),
        Err(Rejection::NotConfigured)
    );
    let add = PolicyOp::AddAgent {
        name: principal("alice"),
        key: PublicKey([2; 32]),
    };
    assert_eq!(node.policy(add, None), Err(Rejection::NotConfigured));
    assert_eq!(node.state(), before);
    // Enforced mode without an administrator is refused; open mode is then recorded, once.
    let refused = node.policy(
        PolicyOp::Configure {
            mode: Mode::Enforced,
            admin: None,
        },
        None,
    );
    assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");
    let open = PolicyOp::Configure {
        mode: Mode::Open,
        admin: None,
    };
    node.policy(open.clone(), None).unwrap();
    assert_eq!(policy::mode(&*node.store).unwrap(), Some(Mode::Open));
    assert!(matches!(node.policy(open, None), Err(Rejection::Policy(m)) if m.contains("already recorded")));
    node.write(None, &tx("team/a", "x", Op::Assert, Status::Candidate))
        .unwrap();
}

#[test]
fn a_store_from_before_modes_is_open() {
    let store = Arc::new(MemStore::new());
    let key = NodeKey::from_seed([5; 32]);
    let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed(key.seed()))).unwrap();
    engine
        .apply_membership(1, vec![(1, key.public())], WriteBatch::new())
        .unwrap();
    assert_eq!(policy::mode(&*store).unwrap(), Some(Mode::Open));
    engine
        .apply_tx(
            2,
            2,
            &tx("team/a", "x", Op::Assert, Status::Candidate),
            WriteBatch::new(),
        )
        .unwrap()
        .unwrap();
    let configure = PolicyOp::Configure {
        mode: Mode::Enforced,
        admin: Some((principal("root"), PublicKey([1; 32]))),
    };
    let refused = engine
        .apply_policy(3, 3, &configure, &PolicyActor::Unsigned(None), WriteBatch::new())
        .unwrap();
    assert!(matches!(refused, Err(Rejection::Policy(m)) if m.contains("stays open")));
}

#[test]
fn grants_decide_each_action_at_the_entry() {
    let mut node = enforced();
    for name in ["alice", "bob"] {
        node.policy(
            PolicyOp::AddAgent {
                name: principal(name),
                key: PublicKey([name.len() as u8; 32]),
            },
            Some("root"),
        )
        .unwrap();
    }
    node.policy(
        PolicyOp::Grant(grant("alice", Action::Write, "team/a")),
        Some("root"),
    )
    .unwrap();
    let before = node.state();

    // Unsigned, unknown, ungranted, wrong namespace, retract and promote without their grants.
    assert_eq!(
        denied(node.write(None, &tx("team/a", "alice", Op::Assert, Status::Candidate))),
        ("(unauthenticated)".into(), "write".into(), "team/a".into())
    );
    assert_eq!(
        denied(node.write(
            Some("carol"),
            &tx("team/a", "carol", Op::Assert, Status::Candidate)
        ))
        .0,
        "carol"
    );
    assert_eq!(
        denied(node.write(Some("bob"), &tx("team/a", "bob", Op::Assert, Status::Candidate))),
        ("bob".into(), "write".into(), "team/a".into())
    );
    assert_eq!(
        denied(node.write(
            Some("alice"),
            &tx("teams", "alice", Op::Assert, Status::Candidate)
        ))
        .2,
        "teams"
    );
    assert_eq!(
        denied(node.write(
            Some("alice"),
            &tx("team/a", "alice", Op::Retract, Status::Candidate)
        ))
        .1,
        "retract"
    );
    assert_eq!(
        denied(node.write(
            Some("alice"),
            &tx("team/a", "alice", Op::Assert, Status::Verified)
        ))
        .1,
        "promote"
    );
    // The agent field is bound to the signer.
    assert_eq!(
        node.write(Some("alice"), &tx("team/a", "bob", Op::Assert, Status::Candidate)),
        Err(Rejection::AgentMismatch {
            agent: "bob".into(),
            principal: "alice".into()
        })
    );
    // Nobody writes the system namespace with a transaction, not even its administrator.
    assert_eq!(
        node.write(
            Some("root"),
            &tx(SYSTEM_NAMESPACE, "root", Op::Assert, Status::Candidate)
        ),
        Err(Rejection::SystemNamespace)
    );
    // Bob may not grant himself anything.
    assert_eq!(
        denied(node.policy(
            PolicyOp::Grant(grant("bob", Action::Write, "team/a")),
            Some("bob")
        ))
        .1,
        "grant"
    );
    assert_eq!(node.state(), before, "a refusal changed the state");

    // Granted: below the prefix, by whole segments.
    node.write(
        Some("alice"),
        &tx("team/a/notes", "alice", Op::Assert, Status::Candidate),
    )
    .unwrap();
    // A revoked grant stops the next write; a revoked agent stops everything.
    node.policy(
        PolicyOp::Revoke(grant("alice", Action::Write, "team/a")),
        Some("root"),
    )
    .unwrap();
    denied(node.write(
        Some("alice"),
        &tx("team/a", "alice", Op::Assert, Status::Candidate),
    ));
    node.policy(PolicyOp::Grant(grant("*", Action::Write, "shared")), Some("root"))
        .unwrap();
    node.write(Some("bob"), &tx("shared", "bob", Op::Assert, Status::Candidate))
        .unwrap();
    node.policy(
        PolicyOp::RevokeAgent {
            name: principal("bob"),
        },
        Some("root"),
    )
    .unwrap();
    assert_eq!(
        denied(node.write(Some("bob"), &tx("shared", "bob", Op::Assert, Status::Candidate))).0,
        "bob"
    );
}

#[test]
fn policy_changes_are_datoms_readable_as_of_any_transaction() {
    let mut node = enforced();
    node.policy(
        PolicyOp::AddAgent {
            name: principal("alice"),
            key: PublicKey([7; 32]),
        },
        Some("root"),
    )
    .unwrap();
    let granted = node
        .policy(
            PolicyOp::Grant(grant("alice", Action::Read, "team")),
            Some("root"),
        )
        .unwrap();
    let grant_entity = *granted.temp_ids.get("grant").unwrap();
    let revoked = node
        .policy(
            PolicyOp::Revoke(grant("alice", Action::Read, "team")),
            Some("root"),
        )
        .unwrap();
    let ns = Namespace::new(SYSTEM_NAMESPACE).unwrap();
    let status_at = |tx: TxId| {
        let opts = ReadOptions {
            as_of: Some(tx),
            ..Default::default()
        };
        let found = reads::get_facts(&*node.store, &ns, None, grant_entity, &opts).unwrap();
        let status = found
            .current
            .iter()
            .find(|d| d.attribute.as_str() == ":engram.grant/status")
            .map(|d| d.value.clone());
        let by = found.current.first().map(|d| d.provenance.source.clone());
        (status, by)
    };
    assert_eq!(
        status_at(granted.tx),
        (Some(Value::String("active".into())), Some("root".into()))
    );
    assert_eq!(status_at(revoked.tx).0, Some(Value::String("revoked".into())));
    assert!(
        policy::grants(&*node.store)
            .unwrap()
            .iter()
            .all(|(g, _)| g.principal != "alice")
    );
}

#[test]
fn the_last_administrator_cannot_be_locked_out() {
    let mut node = enforced();
    let before = node.state();
    let refused = node.policy(PolicyOp::Revoke(grant("root", Action::Grant, "")), Some("root"));
    assert!(matches!(refused, Err(Rejection::LockOut(_))), "{refused:?}");
    let refused = node.policy(
        PolicyOp::RevokeAgent {
            name: principal("root"),
        },
        Some("root"),
    );
    assert!(matches!(refused, Err(Rejection::LockOut(_))), "{refused:?}");
    assert_eq!(node.state(), before);
    // With a second administrator, the first may step down.
    node.policy(
        PolicyOp::AddAgent {
            name: principal("ops"),
            key: PublicKey([3; 32]),
        },
        Some("root"),
    )
    .unwrap();
    node.policy(PolicyOp::Grant(grant("ops", Action::Grant, "")), Some("root"))
        .unwrap();
    node.policy(
        PolicyOp::RevokeAgent {
            name: principal("root"),
        },
        Some("root"),
    )
    .unwrap();
    // root is revoked: it can no longer change anything.
    let after = node.policy(PolicyOp::Grant(grant("ops", Action::Write, "")), Some("root"));
    assert!(matches!(after, Err(Rejection::NotAuthorized { .. })), "{after:?}");
}

#[test]
fn a_role_lends_its_grants_while_assigned_and_counts_for_the_lock_out_guard() {
    let mut node = enforced();
    for (name, seed) in [("bob", 7u8), ("carol", 8)] {
        node.policy(
            PolicyOp::AddAgent {
                name: principal(name),
                key: PublicKey([seed; 32]),
            },
            Some("root"),
        )
        .unwrap();
    }
    let ops = Principal::role("ops").unwrap();
    node.policy(
        PolicyOp::Grant(grant("role:ops", Action::Write, "infra")),
        Some("root"),
    )
    .unwrap();
    let write = tx("infra/dns", "bob", Op::Assert, Status::Candidate);
    assert_eq!(denied(node.write(Some("bob"), &write)).0, "bob");

    // Assigning needs grant on every namespace: bob cannot assign himself.
    let by_bob = node.policy(
        PolicyOp::AssignRole {
            agent: principal("bob"),
            role: ops.clone(),
        },
        Some("bob"),
    );
    assert!(
        matches!(by_bob, Err(Rejection::NotAuthorized { .. })),
        "{by_bob:?}"
    );
    let assigned = node
        .policy(
            PolicyOp::AssignRole {
                agent: principal("bob"),
                role: ops.clone(),
            },
            Some("root"),
        )
        .unwrap();
    assert!(node.write(Some("bob"), &write).is_ok());
    assert_eq!(
        denied(node.write(
            Some("carol"),
            &tx("infra/dns", "carol", Op::Assert, Status::Candidate)
        ))
        .0,
        "carol"
    );
    // Only what the role holds: no retract, nothing outside infra.
    assert!(
        node.write(Some("bob"), &tx("team/a", "bob", Op::Assert, Status::Candidate))
            .is_err()
    );
    let view = node.store.clone();
    assert_eq!(
        policy::roles_of(&*view, "bob").unwrap(),
        vec!["role:ops".to_string()]
    );

    // Assigning twice, to an unknown agent, or a name that is not a role: refused.
    for (agent, role) in [("bob", "role:ops"), ("nobody", "role:ops"), ("carol", "ops")] {
        let refused = node.policy(
            PolicyOp::AssignRole {
                agent: principal(agent),
                role: principal(role),
            },
            Some("root"),
        );
        assert!(
            matches!(refused, Err(Rejection::Policy(_))),
            "{agent} {role}: {refused:?}"
        );
    }
    // An agent cannot be named like a role.
    let refused = node.policy(
        PolicyOp::AddAgent {
            name: principal("role:admins"),
            key: PublicKey([9; 32]),
        },
        Some("root"),
    );
    assert!(matches!(refused, Err(Rejection::Policy(_))), "{refused:?}");

    // Unassigned, the role's grants are gone at the next entry.
    node.policy(
        PolicyOp::UnassignRole {
            agent: principal("bob"),
            role: ops.clone(),
        },
        Some("root"),
    )
    .unwrap();
    assert_eq!(denied(node.write(Some("bob"), &write)).0, "bob");

    // The assignment is on record, readable as of the transaction that made it, with the
    // administrator who made it as the source.
    let on_record = pages::find_main(
        &*view,
        &Namespace::new(SYSTEM_NAMESPACE).unwrap(),
        &Attribute::new(":engram.role/agent").unwrap(),
        Some(&Value::String("bob".into())),
        Some(assigned.tx),
        10,
    )
    .unwrap();
    assert_eq!(on_record.len(), 1);
    assert_eq!(on_record[0].provenance.source, "root");

    // An administrator through a role counts: root may step down once carol holds role:admin.
    let admin = Principal::role("admin").unwrap();
    node.policy(
        PolicyOp::Grant(grant("role:admin", Action::Grant, "")),
        Some("root"),
    )
    .unwrap();
    node.policy(
        PolicyOp::AssignRole {
            agent: principal("carol"),
            role: admin.clone(),
        },
        Some("root"),
    )
    .unwrap();
    node.policy(PolicyOp::Revoke(grant("root", Action::Grant, "")), Some("root"))
        .unwrap();
    // Now carol is the only administrator, through the role: taking it is a lock-out.
    let before = node.state();
    let refused = node.policy(
        PolicyOp::UnassignRole {
            agent: principal("carol"),
            role: admin.clone(),
        },
        Some("carol"),
    );
    assert!(matches!(refused, Err(Rejection::LockOut(_))), "{refused:?}");
    let refused = node.policy(
        PolicyOp::Revoke(grant("role:admin", Action::Grant, "")),
        Some("carol"),
    );
    assert!(matches!(refused, Err(Rejection::LockOut(_))), "{refused:?}");
    assert_eq!(node.state(), before);
}

#[test]
fn a_grant_on_some_attributes_lets_a_transaction_write_only_those() {
    let mut node = enforced();
    node.policy(
        PolicyOp::AddAgent {
            name: principal("bob"),
            key: PublicKey([7; 32]),
        },
        Some("root"),
    )
    .unwrap();
    let scoped = Grant {
        attribute: ":note/*".into(),
        ..grant("bob", Action::Write, "hr")
    };
    node.policy(PolicyOp::Grant(scoped.clone()), Some("root"))
        .unwrap();
    // `tx` writes :note/text: covered.
    assert!(
        node.write(Some("bob"), &tx("hr", "bob", Op::Assert, Status::Candidate))
            .is_ok()
    );
    // One op outside the grant refuses the whole transaction, naming the attribute.
    let before = node.state();
    let mut mixed = tx("hr", "bob", Op::Assert, Status::Candidate);
    let mut salary = mixed.ops[0].clone();
    salary.attribute = Attribute::new(":hr/salary").unwrap();
    salary.value = Value::I64(1);
    mixed.ops.push(salary);
    let (who, action, ns) = denied(node.write(Some("bob"), &mixed));
    assert_eq!(
        (who.as_str(), action.as_str(), ns.as_str()),
        ("bob", "write on :hr/salary", "hr")
    );
    // Before the refusal's own applied-position row, nothing moved.
    assert_eq!(node.state().len(), before.len());
    // The grant is recorded with its attribute, and listed with it.
    let view = node.store.clone();
    assert!(policy::grants(&*view).unwrap().iter().any(|(g, _)| *g == scoped));
}
