//! Agent-signed transactions at the state machine and in the export: apply records the
//! agent's signature in the entry and keeps the signed request beside it; it refuses a
//! signature that does not hold at the entry (another key, another request); and the offline
//! refuses a replayed request (a nonce applied before); and the offline verifier proves which
//! agent wrote each transaction, catching what apply does not re-check (a forged signature)
//! even when the node attested its own chain. A write signed in its committed form (each value
//! through its salted commitment) is kept and proven the same way, and its redaction leaves
//! no hash of the value that could test a guess.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::sync::Arc;

use engram_access::request::RequestAuth;
use engram_access::{Action, AgentKey, Grant, Mode, PolicyOp, Principal};
use engram_audit::{Author, NodeKey};
use engram_core::{Engine, PolicyActor, Rejection, TxOutcome, export, keys, policy};
use engram_storage::{MemStore, ReadView, Space, Store, WriteBatch};
use engram_types::{Attribute, EntityRef, Hash, Namespace, Op, Provenance, TxOp, TxRequest, Value};
use engram_verify::format::{ExportReader, ExportWriter, Next, Record};
use engram_verify::{Report, VerifyOptions, verify_export};

const METHOD: &str = "/engram.v1.Memory/Transact";

fn alice() -> AgentKey {
    AgentKey::from_seed(Principal::new("alice").unwrap(), [3; 32])
}

struct Node {
    store: Arc<MemStore>,
    engine: Engine,
    log: u64,
}

impl Node {
    /// An enforced cluster whose administrator is alice.
    fn enforced() -> Node {
        let store = Arc::new(MemStore::new());
        let key = NodeKey::from_seed([5; 32]);
        let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed(key.seed()))).unwrap();
        let mut extra = WriteBatch::new();
        policy::pending_mode_row(&mut extra);
        engine
            .apply_membership(1, vec![(1, key.public())], extra)
            .unwrap();
        let mut node = Node {
            store,
            engine,
            log: 1,
        };
        let configure = PolicyOp::Configure {
            mode: Mode::Enforced,
            admin: Some((alice().principal.clone(), alice().public())),
        };
        let (index, t) = node.next();
        node.engine
            .apply_policy(
                index,
                t,
                &configure,
                &PolicyActor::Unsigned(None),
                WriteBatch::new(),
            )
            .unwrap()
            .unwrap();
        node
    }

    fn next(&mut self) -> (u64, i64) {
        self.log += 1;
        (self.log, 1_000_000_000 * self.log as i64)
    }

    fn signed(&mut self, req: &TxRequest, author: &Author) -> TxOutcome {
        let (index, t) = self.next();
        self.engine
            .apply_tx_signed(index, t, req, author, WriteBatch::new())
            .unwrap()
    }

    fn change(&mut self, op: &PolicyOp, author: &Author) -> TxOutcome {
        let (index, t) = self.next();
        self.engine
            .apply_policy(
                index,
                t,
                op,
                &PolicyActor::Signed(author.clone()),
                WriteBatch::new(),
            )
            .unwrap()
    }

    fn export(&self) -> Vec<u8> {
        let mut out = Vec::new();
        export::write_export(self.store.as_ref(), &mut out, 1, |_, _| {}).unwrap();
        out
    }

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

fn note(text: &str) -> TxRequest {
    note_by("alice", text)
}

fn note_by(agent: &str, text: &str) -> TxRequest {
    TxRequest::data(
        Namespace::new("team/a").unwrap(),
        vec![TxOp {
            op: Op::Assert,
            entity: EntityRef::Temp("t".into()),
            attribute: Attribute::new(":note/text").unwrap(),
            value: Value::String(text.into()),
            valid_from_ns: None,
            valid_to_ns: None,
        }],
        Provenance {
            agent: agent.into(),
            confidence: 1.0,
            ..Default::default()
        },
    )
}

/// `req` signed by `key` with `nonce`, as the leader's gate records it. The signing time is
/// near the entries' transaction times (`Node::next`).
fn author(key: &AgentKey, req: &TxRequest, nonce: u8) -> Author {
    signed_by(key, METHOD, &req.signed_bytes(), nonce)
}

/// A policy change signed by `key` for `method`.
fn change_author(key: &AgentKey, op: &PolicyOp, method: &str, nonce: u8) -> Author {
    signed_by(key, method, &op.signed_bytes().unwrap(), nonce)
}

fn signed_by(key: &AgentKey, method: &str, bytes: &[u8], nonce: u8) -> Author {
    let auth = RequestAuth::sign(key, method, bytes, 3_000, [nonce; 16]);
    Author {
        principal: key.principal.to_string(),
        key: key.public(),
        method: method.into(),
        request_hash: Hash::of(bytes),
        time_ms: auth.time_ms,
        nonce: auth.nonce,
        signature: auth.signature,
    }
}

fn verify(bytes: &[u8]) -> Report {
    let options = VerifyOptions {
        all: true,
        ..Default::default()
    };
    verify_export(bytes, &options, |_, _| {}).unwrap()
}

fn failures(report: &Report) -> Vec<(Option<u64>, String)> {
    report
        .failures
        .iter()
        .map(|f| (f.index, f.field.clone()))
        .collect()
}

#[test]
fn a_signed_transaction_records_its_author_and_the_export_proves_it() {
    let mut node = Node::enforced();
    let req = note("hello");
    let receipt = node.signed(&req, &author(&alice(), &req, 1)).unwrap();
    // The request the agent signed is kept beside the entry, exactly.
    let kept = node
        .store
        .get(Space::State, &keys::signed_request(receipt.tx))
        .unwrap();
    assert_eq!(kept, Some(req.signed_bytes()));
    let second = note("world");
    node.signed(&second, &author(&alice(), &second, 2)).unwrap();

    let report = verify(&node.export());
    assert!(report.ok(), "{:?}", report.failures);
    assert_eq!(report.signed_by_agent.get("alice"), Some(&2));
}

#[test]
fn apply_refuses_a_signature_that_does_not_hold_at_its_entry() {
    let mut node = Node::enforced();
    let before = node.state();
    let req = note("hello");
    // Signed by a key that is not alice's.
    let mallory = AgentKey::from_seed(Principal::new("alice").unwrap(), [4; 32]);
    let refused = node.signed(&req, &author(&mallory, &req, 1));
    assert!(
        matches!(&refused, Err(Rejection::Unauthenticated(why)) if why.contains("signed with key")),
        "{refused:?}"
    );
    // Alice's signature, but over another request.
    let refused = node.signed(&req, &author(&alice(), &note("other"), 2));
    assert!(
        matches!(&refused, Err(Rejection::Unauthenticated(why)) if why.contains("another request")),
        "{refused:?}"
    );
    // An agent the chain does not know.
    let bob = AgentKey::from_seed(Principal::new("bob").unwrap(), [5; 32]);
    let mut as_bob = note("hello");
    as_bob.provenance.agent = "bob".into();
    let refused = node.signed(&as_bob, &author(&bob, &as_bob, 3));
    assert!(
        matches!(&refused, Err(Rejection::Unauthenticated(why)) if why.contains("no agent named bob")),
        "{refused:?}"
    );
    // Nothing but the Raft layer's applied position moved (these tests write none).
    assert_eq!(node.state(), before);

    // A signed request applies once, wherever it is proposed: a replay is refused at apply
    // (every replica holds the nonces applied), and leaves nothing behind.
    let first = node.signed(&req, &author(&alice(), &req, 4)).unwrap();
    let before = node.state();
    let replayed = node.signed(&req, &author(&alice(), &req, 4));
    assert!(
        matches!(&replayed, Err(Rejection::Unauthenticated(why))
            if why.contains(&format!("already applied at tx {}", first.tx.0))),
        "{replayed:?}"
    );
    assert_eq!(node.state(), before);
}

#[test]
fn the_verifier_catches_a_forged_signature_the_node_attested() {
    let mut node = Node::enforced();
    let req = note("hello");
    let honest = author(&alice(), &req, 1);
    node.signed(&req, &honest).unwrap();
    // A node that writes as alice without her key: apply checks the key and the request, not
    // the Ed25519 signature (the leader's gate does, once), so the node attests this entry.
    let forged_req = note("transfer everything");
    let mut forged = author(&alice(), &forged_req, 2);
    forged.signature = [7; 64];
    let forged_tx = node.signed(&forged_req, &forged).unwrap();

    let report = verify(&node.export());
    assert_eq!(
        failures(&report),
        vec![(Some(forged_tx.audit_index), "author.signature".to_string())],
        "{:?}",
        report.failures
    );

    // The request record altered in the export: named at its entry.
    let bytes = node.export();
    let mut reader = ExportReader::open(bytes.as_slice()).unwrap();
    let mut out = ExportWriter::new(Vec::new()).unwrap();
    let mut altered_at = None;
    while let Ok(Next::Record { record, .. }) = reader.next_record() {
        let record = match record {
            Record::Request { index, bytes } if altered_at.is_none() => {
                let mut req = TxRequest::decode_signed(&bytes).unwrap();
                req.ops[0].value = Value::String("goodbye".into());
                altered_at = Some(index);
                Record::Request {
                    index,
                    bytes: req.signed_bytes(),
                }
            }
            other => other,
        };
        out.write(&record).unwrap();
    }
    let report = verify(&out.into_inner().unwrap());
    let first = &report.failures[0];
    assert_eq!(
        (first.index, first.field.as_str()),
        (altered_at, "author.request")
    );
    assert!(first.message.contains("hashes to"), "{}", first.message);
}

#[test]
fn signed_policy_changes_record_their_author_and_the_export_proves_them() {
    let mut node = Node::enforced();
    let bob = AgentKey::from_seed(Principal::new("bob").unwrap(), [8; 32]);
    let add = PolicyOp::AddAgent {
        name: bob.principal.clone(),
        key: bob.public(),
    };
    let by_alice = change_author(&alice(), &add, "/engram.v1.Access/AddAgent", 1);
    // A signature over another change is refused, and nothing is recorded.
    let other = PolicyOp::RevokeAgent {
        name: bob.principal.clone(),
    };
    let refused = node.change(&other, &by_alice);
    assert!(
        matches!(&refused, Err(Rejection::Unauthenticated(why)) if why.contains("another request")),
        "{refused:?}"
    );
    let added = node.change(&add, &by_alice).unwrap();
    let kept = node
        .store
        .get(Space::State, &keys::signed_request(added.tx))
        .unwrap();
    assert_eq!(kept, add.signed_bytes());
    let grant = PolicyOp::Grant(Grant {
        principal: "bob".into(),
        action: Action::Write,
        prefix: "team".into(),
        attribute: String::new(),
    });
    node.change(
        &grant,
        &change_author(&alice(), &grant, "/engram.v1.Access/Grant", 2),
    )
    .unwrap();
    let req = note_by("bob", "from bob");
    node.signed(&req, &author(&bob, &req, 3)).unwrap();
    // Bob rotates his own key, signing with the old one; his next write uses the new one.
    let bob2 = AgentKey::from_seed(Principal::new("bob").unwrap(), [9; 32]);
    let rotate = PolicyOp::RotateAgentKey {
        name: bob.principal.clone(),
        key: bob2.public(),
    };
    node.change(
        &rotate,
        &change_author(&bob, &rotate, "/engram.v1.Access/RotateAgentKey", 4),
    )
    .unwrap();
    let req = note_by("bob", "from bob, new key");
    node.signed(&req, &author(&bob2, &req, 5)).unwrap();

    // Alice switches the access log on and off for `team`: the policy rows follow, and each
    // switch is a signed change like the others.
    let on = PolicyOp::AccessLog {
        prefix: "team".into(),
        on: true,
    };
    node.change(
        &on,
        &change_author(&alice(), &on, "/engram.v1.Access/SetAccessLog", 6),
    )
    .unwrap();
    assert_eq!(
        policy::access_log_prefixes(node.store.as_ref()).unwrap(),
        vec!["team".to_string()]
    );
    let again = node.change(
        &on,
        &change_author(&alice(), &on, "/engram.v1.Access/SetAccessLog", 7),
    );
    assert!(
        matches!(&again, Err(Rejection::Policy(why)) if why.contains("already logged")),
        "{again:?}"
    );
    let off = PolicyOp::AccessLog {
        prefix: "team".into(),
        on: false,
    };
    node.change(
        &off,
        &change_author(&alice(), &off, "/engram.v1.Access/SetAccessLog", 8),
    )
    .unwrap();
    assert!(
        policy::access_log_prefixes(node.store.as_ref())
            .unwrap()
            .is_empty()
    );

    let report = verify(&node.export());
    assert!(report.ok(), "{:?}", report.failures);
    assert_eq!(report.signed_by_agent.get("alice"), Some(&4));
    assert_eq!(report.signed_by_agent.get("bob"), Some(&3));
}

#[test]
fn a_committed_write_signs_commitments_and_salts_its_datoms_with_the_agents_salts() {
    let mut node = Node::enforced();
    // A low-entropy value: signed over its commitment, a kept hash could not test guesses.
    let mut req = note("4711");
    req.idempotency_key = Some("pin-1".into());
    let salts = [[9u8; 16]];
    let committed = req.committed_bytes(&salts).unwrap();
    assert!(!committed.windows(4).any(|w| w == b"4711"));
    let signed = signed_by(&alice(), METHOD, &committed, 1);
    let (index, t) = node.next();
    let receipt = node
        .engine
        .apply_tx_committed(index, t, &req, &signed, &salts, WriteBatch::new())
        .unwrap()
        .unwrap();
    // The node keeps the salted form, from which the signed hash is rebuilt.
    let kept = node
        .store
        .get(Space::State, &keys::signed_request(receipt.tx))
        .unwrap()
        .unwrap();
    assert_eq!(kept, req.salted_bytes(&salts).unwrap());
    assert_eq!(
        TxRequest::signed_hash_of_kept(METHOD, &kept).unwrap(),
        signed.request_hash
    );
    // The datom took the agent's salt, so its hash commits to the value as the signature did.
    let datoms =
        engram_core::reads::entity_datoms(node.store.as_ref(), &req.namespace, receipt.temp_ids["t"])
            .unwrap();
    assert_eq!(datoms.len(), 1);
    assert_eq!(datoms[0].salt, Some(salts[0]));
    let report = verify(&node.export());
    assert!(report.ok(), "{:?}", report.failures);
    assert_eq!(report.signed_by_agent.get("alice"), Some(&1));
    // The idempotency row holds the receipt and a hash of the request's content.
    let idempotency = keys::idempotency(&req.namespace, "pin-1");
    let with_hash = node.store.get(Space::State, &idempotency).unwrap().unwrap();

    // The kept request with another salt: its committed form is another, named at its entry.
    let bytes = node.export();
    let mut reader = ExportReader::open(bytes.as_slice()).unwrap();
    let mut out = ExportWriter::new(Vec::new()).unwrap();
    while let Ok(Next::Record { record, .. }) = reader.next_record() {
        let record = match record {
            Record::Request { index, bytes } => {
                let req = TxRequest::decode_kept(&bytes).unwrap().request;
                Record::Request {
                    index,
                    bytes: req.salted_bytes(&[[8u8; 16]]).unwrap(),
                }
            }
            other => other,
        };
        out.write(&record).unwrap();
    }
    // Both the hash of the rebuilt committed form and the datom's salt no longer match.
    let report = verify(&out.into_inner().unwrap());
    assert_eq!(
        failures(&report),
        vec![(Some(receipt.audit_index), "author.request".to_string()); 2],
        "{:?}",
        report.failures
    );
    assert!(report.failures[0].message.contains("hashes to"));
    assert!(
        report.failures[1]
            .message
            .contains("is not what the signed request's op 0 asks for")
    );

    // Salts that do not fit the ops: refused at apply, nothing written.
    let before = node.state();
    let other = note("other");
    let two = [[1u8; 16], [2u8; 16]];
    let (index, t) = node.next();
    let refused = node.engine.apply_tx_committed(
        index,
        t,
        &other,
        &signed_by(&alice(), METHOD, &other.signed_bytes(), 2),
        &two,
        WriteBatch::new(),
    );
    assert!(
        matches!(&refused, Ok(Err(Rejection::Unauthenticated(why))) if why.contains("value salts")),
        "{refused:?}"
    );
    assert_eq!(node.state(), before);
    // A signature over the values, proposed as committed: the signed hash is not the
    // committed form's.
    let (index, t) = node.next();
    let refused = node.engine.apply_tx_committed(
        index,
        t,
        &other,
        &signed_by(&alice(), METHOD, &other.signed_bytes(), 3),
        &[[1u8; 16]],
        WriteBatch::new(),
    );
    assert!(
        matches!(&refused, Ok(Err(Rejection::Unauthenticated(why))) if why.contains("another request")),
        "{refused:?}"
    );

    // Redacted: the kept request goes, the chain still verifies, and what stays of the signed
    // request (its hash) covers the value only through the commitment whose salt went with it.
    let grant = PolicyOp::Grant(Grant {
        principal: "alice".into(),
        action: Action::Redact,
        prefix: "team".into(),
        attribute: String::new(),
    });
    node.change(
        &grant,
        &change_author(&alice(), &grant, "/engram.v1.Access/Grant", 10),
    )
    .unwrap();
    let redact = engram_types::RedactRequest {
        namespace: req.namespace.clone(),
        entity: receipt.temp_ids["t"],
        attribute: None,
        reason: "a PIN written by mistake".into(),
        provenance: Provenance {
            agent: "alice".into(),
            confidence: 1.0,
            ..Default::default()
        },
    };
    let (index, t) = node.next();
    node.engine
        .apply_redaction(
            index,
            t,
            &redact,
            None,
            &PolicyActor::Unsigned(Some(alice().principal.clone())),
            WriteBatch::new(),
        )
        .unwrap()
        .unwrap();
    let marker = node
        .store
        .get(Space::State, &keys::signed_request(receipt.tx))
        .unwrap()
        .unwrap();
    assert!(engram_types::redact::parse_redacted_request(&marker).is_some());
    assert!(!marker.windows(4).any(|w| w == b"4711"));
    let datoms =
        engram_core::reads::entity_datoms(node.store.as_ref(), &req.namespace, receipt.temp_ids["t"])
            .unwrap();
    assert_eq!(datoms[0].salt, None);
    assert!(matches!(datoms[0].value, Value::Redacted(_)));
    let report = verify(&node.export());
    assert!(report.ok(), "{:?}", report.failures);
    // The idempotency row lost its content hash (an unsalted hash of the values) and kept its
    // receipt: a retry is still answered with the first receipt.
    let without = node.store.get(Space::State, &idempotency).unwrap().unwrap();
    assert_eq!(without.len() + 32, with_hash.len());
    assert!(with_hash.starts_with(&without));
    let (index, t) = node.next();
    let retried = node
        .engine
        .apply_tx_committed(
            index,
            t,
            &req,
            &signed_by(&alice(), METHOD, &committed, 9),
            &salts,
            WriteBatch::new(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(retried.tx, receipt.tx);
}
