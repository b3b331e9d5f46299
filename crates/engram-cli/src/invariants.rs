//! Named invariant checkers for a run against a cluster: what must hold after any sequence of
//! crashes and restarts, given what clients were told (acknowledgements) and what each node
//! serves afterwards. Each checker is a pure function over those observations, so `engram
//! demo` and the integration tests state the properties once and the unit tests below show
//! that each one does fail when its property is broken.

use std::collections::{BTreeMap, HashMap, HashSet};

use engram_audit::{EntryKind, tx_content_hash};
use engram_client::pb;
use engram_types::{Attribute, Datom, EntityId, Hash, Namespace, Op, TxId, Value};

/// A transaction the cluster acknowledged to a client, with what the client asked for.
#[derive(Clone, Debug)]
pub struct AckedTx {
    pub label: String,
    pub namespace: Namespace,
    pub tx: u64,
    pub audit_index: u64,
    pub audit_hash: Hash,
    pub datom_hashes: Vec<Hash>,
    /// The datoms the client asked for, with temporary names resolved through the receipt.
    pub datoms: Vec<ExpectedDatom>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedDatom {
    pub entity: EntityId,
    pub attribute: Attribute,
    pub value: Value,
    pub op: Op,
}

/// One audit chain entry as a node served it (after verification).
#[derive(Clone, Debug)]
pub struct ChainEntry {
    pub tx: u64,
    pub namespace: String,
    pub kind: EntryKind,
    pub hash: Hash,
}

impl ChainEntry {
    /// The entry `verify_chain` just checked, keyed by its chain index.
    pub fn verified(p: &engram_client::VerifyProgress<'_>) -> (u64, ChainEntry) {
        let e = &p.entry.entry;
        (
            e.index,
            ChainEntry {
                tx: e.tx.0,
                namespace: e.namespace.clone(),
                kind: e.kind.clone(),
                hash: p.hash,
            },
        )
    }
}

/// A datom as a node served it, with its hash recomputed from its content.
#[derive(Clone, Debug)]
pub struct StoredDatom {
    pub entity: EntityId,
    pub attribute: String,
    pub value: Option<Value>,
    pub op: Option<Op>,
    pub tx: u64,
    pub hash: Option<Hash>,
    /// `None` if the served datom does not even form a valid domain datom.
    pub recomputed: Option<Hash>,
}

impl StoredDatom {
    pub fn from_pb(d: &pb::Datom) -> StoredDatom {
        let value = engram_proto::value("value", d.value.clone()).ok();
        let op = match pb::Op::try_from(d.op) {
            Ok(pb::Op::Assert) => Some(Op::Assert),
            Ok(pb::Op::Retract) => Some(Op::Retract),
            _ => None,
        };
        let recomputed = (|| {
            let datom = Datom {
                namespace: Namespace::new(d.namespace.clone()).ok()?,
                branch: match d.branch.as_str() {
                    "" => None,
                    b => Some(engram_types::BranchName::new(b).ok()?),
                },
                entity: EntityId(d.entity),
                attribute: Attribute::new(d.attribute.clone()).ok()?,
                value: value.clone()?,
                op: op?,
                valid_from_ns: d.valid_from_ns,
                valid_to_ns: d.valid_to_ns,
                tx: TxId(d.tx),
                provenance: engram_proto::provenance(d.provenance.clone()).ok()?,
                salt: match d.salt.as_slice() {
                    [] => None,
                    salt => Some(engram_types::Salt::try_from(salt).ok()?),
                },
            };
            Some(datom.hash())
        })();
        StoredDatom {
            entity: EntityId(d.entity),
            attribute: d.attribute.clone(),
            value,
            op,
            tx: d.tx,
            hash: Hash::from_slice(&d.hash),
            recomputed,
        }
    }
}

/// What one node served after the run.
#[derive(Clone, Debug, Default)]
pub struct NodeView {
    pub id: u64,
    /// The node's verified chain, by index.
    pub chain: BTreeMap<u64, ChainEntry>,
    /// Full histories of the entities the run wrote, by (namespace, entity).
    pub histories: HashMap<(String, u64), Vec<StoredDatom>>,
    /// `Audit.Head`: (index, hash).
    pub head: Option<(u64, Hash)>,
}

/// A broken invariant, with enough detail to find the offending entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    /// The acknowledged tx concerned, if any.
    pub tx: Option<u64>,
    pub node: Option<u64>,
    pub detail: String,
}

/// **acked_writes_durable**: every acknowledged transaction is on every node, both in the audit
/// chain (the entry at its `audit_index` has its tx, namespace, hash and the content hash of its
/// datom hashes) and in the store (each requested datom is in the entity's history at that tx,
/// with content that hashes to one of the acknowledged datom hashes).
pub fn acked_writes_durable(acked: &[AckedTx], nodes: &[NodeView]) -> Vec<Violation> {
    const NAME: &str = "acked_writes_durable";
    let mut out = Vec::new();
    for a in acked {
        let hashes: HashSet<Hash> = a.datom_hashes.iter().copied().collect();
        for node in nodes {
            let mut fail = |detail: String| {
                out.push(Violation {
                    invariant: NAME,
                    tx: Some(a.tx),
                    node: Some(node.id),
                    detail,
                })
            };
            match node.chain.get(&a.audit_index) {
                None => fail(format!("{}: audit entry {} is missing", a.label, a.audit_index)),
                Some(e) => {
                    let content = tx_content_hash(&a.datom_hashes);
                    let content_ok = matches!(&e.kind, EntryKind::Transaction { content_hash, datoms, .. }
                        if *content_hash == content && *datoms as usize == a.datom_hashes.len());
                    if e.tx != a.tx
                        || e.namespace != a.namespace.as_str()
                        || e.hash != a.audit_hash
                        || !content_ok
                    {
                        fail(format!(
                            "{}: audit entry {} is tx {} in {:?} with hash {}, expected tx {} in {} with hash {} \
                             and the content hash of its {} datoms",
                            a.label,
                            a.audit_index,
                            e.tx,
                            e.namespace,
                            e.hash,
                            a.tx,
                            a.namespace,
                            a.audit_hash,
                            a.datom_hashes.len()
                        ));
                    }
                }
            }
            for want in &a.datoms {
                let key = (a.namespace.to_string(), want.entity.0);
                let found = node.histories.get(&key).is_some_and(|history| {
                    history.iter().any(|d| {
                        d.tx == a.tx
                            && d.entity == want.entity
                            && d.attribute == want.attribute.as_str()
                            && d.value.as_ref() == Some(&want.value)
                            && d.op == Some(want.op)
                            && d.recomputed.is_some()
                            && d.recomputed == d.hash
                            && d.recomputed.is_some_and(|h| hashes.contains(&h))
                    })
                });
                if !found {
                    fail(format!(
                        "{}: {} {} {} {} (tx {}) is not in the history of entity {} with an acknowledged hash",
                        a.label,
                        if want.op == Op::Assert {
                            "assert"
                        } else {
                            "retract"
                        },
                        want.entity,
                        want.attribute,
                        want.value,
                        a.tx,
                        want.entity
                    ));
                }
            }
        }
    }
    out
}

/// **audit_chains_agree**: every node reports the same head (index and hash), and each node's
/// verified chain ends at the head it reports.
pub fn audit_chains_agree(nodes: &[NodeView]) -> Vec<Violation> {
    const NAME: &str = "audit_chains_agree";
    let mut out = Vec::new();
    let first = nodes.first().and_then(|n| n.head);
    for node in nodes {
        let fail = |detail: String| Violation {
            invariant: NAME,
            tx: None,
            node: Some(node.id),
            detail,
        };
        let Some((index, hash)) = node.head else {
            out.push(fail("reported no head".into()));
            continue;
        };
        let last = node.chain.last_key_value().map(|(i, e)| (*i, e.hash));
        if last != Some((index, hash)) {
            out.push(fail(format!(
                "head is entry {index} {hash}, but its verified chain ends at {last:?}"
            )));
        }
        if let Some((i0, h0)) = first
            && (i0, h0) != (index, hash)
        {
            out.push(fail(format!(
                "head is entry {index} {hash}, node {} has entry {i0} {h0}",
                nodes[0].id
            )));
        }
    }
    out
}

/// **exactly_once**: retries with an idempotency key did not apply a transaction twice. Every
/// acknowledgement names a distinct audit entry, and the transaction entries the run added to
/// the chain (after `start_index`) number between the acknowledged transactions and those
/// plus the ones whose outcome the client never learnt (`unacknowledged`).
pub fn exactly_once(
    acked: &[AckedTx],
    node: &NodeView,
    start_index: u64,
    unacknowledged: u64,
) -> Vec<Violation> {
    const NAME: &str = "exactly_once";
    let mut out = Vec::new();
    let mut seen: HashMap<u64, &str> = HashMap::new();
    for a in acked {
        if let Some(other) = seen.insert(a.audit_index, &a.label) {
            out.push(Violation {
                invariant: NAME,
                tx: Some(a.tx),
                node: None,
                detail: format!(
                    "{} and {other} were both acknowledged as audit entry {}",
                    a.label, a.audit_index
                ),
            });
        }
    }
    let applied = node
        .chain
        .range(start_index + 1..)
        .filter(|(_, e)| matches!(e.kind, EntryKind::Transaction { .. }))
        .count() as u64;
    let acked_count = acked.len() as u64;
    if applied < acked_count || applied > acked_count + unacknowledged {
        out.push(Violation {
            invariant: NAME,
            tx: None,
            node: Some(node.id),
            detail: format!(
                "the chain gained {applied} transaction entries for {acked_count} acknowledged and \
                 {unacknowledged} unacknowledged transactions"
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use engram_types::{Provenance, Status};

    use super::*;

    fn datom(ns: &str, entity: u64, value: i64, tx: u64) -> Datom {
        Datom {
            namespace: Namespace::new(ns).unwrap(),
            branch: None,
            entity: EntityId(entity),
            attribute: Attribute::new(":memory/n").unwrap(),
            value: Value::I64(value),
            op: Op::Assert,
            valid_from_ns: 5,
            valid_to_ns: None,
            tx: TxId(tx),
            provenance: Provenance {
                agent: "a".into(),
                confidence: 1.0,
                status: Status::Candidate,
                ..Default::default()
            },
            salt: None,
        }
    }

    /// One acknowledged tx (tx 7, audit entry 2) and a node that holds it faithfully.
    fn world() -> (AckedTx, NodeView) {
        let d = datom("demo/a", 3, 42, 7);
        let acked = AckedTx {
            label: "agent-1#1".into(),
            namespace: d.namespace.clone(),
            tx: 7,
            audit_index: 2,
            audit_hash: Hash::of(b"entry 2"),
            datom_hashes: vec![d.hash()],
            datoms: vec![ExpectedDatom {
                entity: d.entity,
                attribute: d.attribute.clone(),
                value: d.value.clone(),
                op: Op::Assert,
            }],
        };
        let mut node = NodeView {
            id: 1,
            ..NodeView::default()
        };
        node.chain.insert(
            1,
            ChainEntry {
                tx: 1,
                namespace: String::new(),
                kind: EntryKind::Membership { members: vec![] },
                hash: Hash::of(b"entry 1"),
            },
        );
        node.chain.insert(
            2,
            ChainEntry {
                tx: 7,
                namespace: "demo/a".into(),
                kind: EntryKind::Transaction {
                    content_hash: tx_content_hash(&[d.hash()]),
                    datoms: 1,
                    author: None,
                },
                hash: Hash::of(b"entry 2"),
            },
        );
        node.histories.insert(
            ("demo/a".into(), 3),
            vec![StoredDatom::from_pb(&pb::Datom::from(&d))],
        );
        node.head = Some((2, Hash::of(b"entry 2")));
        (acked, node)
    }

    #[test]
    fn a_faithful_node_satisfies_every_invariant() {
        let (acked, node) = world();
        assert_eq!(
            acked_writes_durable(std::slice::from_ref(&acked), &[node.clone(), node.clone()]),
            vec![]
        );
        assert_eq!(audit_chains_agree(&[node.clone(), node.clone()]), vec![]);
        assert_eq!(exactly_once(&[acked], &node, 1, 0), vec![]);
    }

    #[test]
    fn a_missing_or_altered_write_is_reported() {
        let (acked, node) = world();
        let mut no_entry = node.clone();
        no_entry.chain.remove(&2);
        let v = acked_writes_durable(std::slice::from_ref(&acked), &[node.clone(), no_entry]);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].tx, v[0].node), (Some(7), Some(1)));
        assert!(v[0].detail.contains("missing"), "{v:?}");

        let mut no_datom = node.clone();
        no_datom.histories.clear();
        assert_eq!(
            acked_writes_durable(std::slice::from_ref(&acked), &[no_datom]).len(),
            1
        );

        // A datom whose content was changed no longer hashes to the acknowledged hash.
        let mut altered = node.clone();
        let d = datom("demo/a", 3, 43, 7);
        altered.histories.insert(
            ("demo/a".into(), 3),
            vec![StoredDatom::from_pb(&pb::Datom::from(&d))],
        );
        assert_eq!(
            acked_writes_durable(std::slice::from_ref(&acked), &[altered]).len(),
            1
        );

        // A served hash that does not match the served content is caught too.
        let mut lying = node.clone();
        let mut wire = pb::Datom::from(&datom("demo/a", 3, 42, 7));
        wire.valid_from_ns = 6;
        lying
            .histories
            .insert(("demo/a".into(), 3), vec![StoredDatom::from_pb(&wire)]);
        assert_eq!(
            acked_writes_durable(std::slice::from_ref(&acked), &[lying]).len(),
            1
        );

        let mut wrong_tx = node;
        if let Some(e) = wrong_tx.chain.get_mut(&2) {
            e.tx = 8;
        }
        assert_eq!(acked_writes_durable(&[acked], &[wrong_tx]).len(), 1);
    }

    #[test]
    fn diverging_heads_are_reported() {
        let (_, node) = world();
        let mut behind = node.clone();
        behind.id = 2;
        behind.chain.remove(&2);
        behind.head = Some((1, Hash::of(b"entry 1")));
        let v = audit_chains_agree(&[node.clone(), behind]);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].node, Some(2));

        let mut inconsistent = node;
        inconsistent.head = Some((2, Hash::of(b"other")));
        assert_eq!(audit_chains_agree(&[inconsistent]).len(), 1);
    }

    #[test]
    fn double_applies_and_shared_receipts_are_reported() {
        let (acked, node) = world();
        let mut twice = node.clone();
        twice.chain.insert(3, twice.chain[&2].clone());
        assert_eq!(exactly_once(std::slice::from_ref(&acked), &twice, 1, 0).len(), 1);
        assert_eq!(
            exactly_once(std::slice::from_ref(&acked), &twice, 1, 1),
            vec![],
            "one ambiguous tx may have applied"
        );
        let v = exactly_once(&[acked.clone(), acked.clone()], &twice, 1, 0);
        assert!(v.iter().any(|v| v.detail.contains("both acknowledged")), "{v:?}");
        assert_eq!(
            exactly_once(&[acked], &node, 2, 0).len(),
            1,
            "fewer entries than acknowledgements"
        );
    }
}
