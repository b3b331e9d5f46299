//! Agent-memory semantics at the state machine: schema as data with forward-only migrations,
//! contradictions kept as per-agent claims and resolved by a selectable rule, unique identity
//! (upsert, lookup refs), branches (isolation, diff, merge with re-checks, abandon) and
//! namespace isolation through every read path. Every refusal is checked to leave the state
//! byte-for-byte as it was.
#![allow(clippy::unwrap_used)] // test helpers: a failed set-up step should stop the test loudly

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use engram_audit::NodeKey;
use engram_core::current::{CurrentRow, ROW_AFTER_DATOMS};
use engram_core::query::{self, QueryOptions};
use engram_core::reads::{self, ReadError, ReadOptions, Resolution};
use engram_core::{Engine, Rejection, TxOutcome, keys, pages, schema, scrub};
use engram_storage::{
    Durability, KeyValue, MemStore, ReadView, Space, StorageError, Store, Visitor, WriteBatch,
};
use engram_types::query::{Clause, EntityTerm, FindTerm, Query, ValueTerm, Variable};
use engram_types::{
    Attribute, AttributeDef, BranchName, BranchOp, Cardinality, EntityId, EntityRef, Namespace, Op,
    Precondition, Provenance, Status, TxId, TxOp, TxReceipt, TxRequest, Unique, Value, ValueType,
};

fn attr(a: &str) -> Attribute {
    Attribute::new(a).unwrap()
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}

fn branch(name: &str) -> BranchName {
    BranchName::new(name).unwrap()
}

fn assert_op(entity: EntityRef, a: &str, value: Value) -> TxOp {
    TxOp {
        op: Op::Assert,
        entity,
        attribute: attr(a),
        value,
        valid_from_ns: None,
        valid_to_ns: None,
    }
}

fn retract_op(entity: EntityId, a: &str, value: Value) -> TxOp {
    TxOp {
        op: Op::Retract,
        ..assert_op(EntityRef::Id(entity), a, value)
    }
}

fn temp(name: &str) -> EntityRef {
    EntityRef::Temp(name.into())
}

fn id(e: EntityId) -> EntityRef {
    EntityRef::Id(e)
}

fn agent(name: &str, status: Status, confidence: f64) -> Provenance {
    Provenance {
        agent: name.into(),
        confidence,
        status,
        ..Default::default()
    }
}

/// A memory store that counts the rows its reads return, so a test can tell how much of the
/// state a write looked at.
#[derive(Default)]
struct Counted {
    inner: MemStore,
    rows_read: AtomicU64,
}

impl Counted {
    fn count(&self, n: usize) {
        self.rows_read.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts the rows a scan returned.
    fn counted(&self, rows: Result<Vec<KeyValue>, StorageError>) -> Result<Vec<KeyValue>, StorageError> {
        let rows = rows?;
        self.count(rows.len());
        Ok(rows)
    }
}

impl ReadView for Counted {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        let row = self.inner.get(space, key)?;
        self.count(usize::from(row.is_some()));
        Ok(row)
    }

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.counted(self.inner.scan(space, start, end, limit))
    }

    fn scan_rev(
        &self,
        space: Space,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, StorageError> {
        self.counted(self.inner.scan_rev(space, start, end, limit))
    }
}

impl Store for Counted {
    fn write(&self, batch: WriteBatch, durability: Durability) -> Result<(), StorageError> {
        self.inner.write(batch, durability)
    }

    fn for_each(&self, space: Space, visit: &mut Visitor<'_>) -> Result<(), StorageError> {
        self.inner.for_each(space, visit)
    }
}

/// One node's engine over a memory store, with a log counter.
struct Mem {
    store: Arc<Counted>,
    engine: Engine,
    log: u64,
    ns: Namespace,
}

impl Mem {
    fn new(ns: &str) -> Mem {
        let store = Arc::new(Counted::default());
        let key = NodeKey::from_seed([5; 32]);
        let mut engine = Engine::open(store.clone(), Arc::new(NodeKey::from_seed(key.seed()))).unwrap();
        engine
            .apply_membership(1, vec![(1, key.public())], WriteBatch::new())
            .unwrap();
        Mem {
            store,
            engine,
            log: 1,
            ns: Namespace::new(ns).unwrap(),
        }
    }

    fn apply(&mut self, req: TxRequest) -> TxOutcome {
        self.log += 1;
        self.engine
            .apply_tx(self.log, 1_000_000 * self.log as i64, &req, WriteBatch::new())
            .unwrap()
    }

    fn request(&self) -> TxRequest {
        TxRequest::data(self.ns.clone(), Vec::new(), agent("admin", Status::Verified, 1.0))
    }

    fn declare(&mut self, defs: Vec<AttributeDef>) -> TxOutcome {
        let mut req = self.request();
        req.schema = defs;
        self.apply(req)
    }

    fn write(&mut self, who: Provenance, ops: Vec<TxOp>) -> TxOutcome {
        let mut req = self.request();
        req.provenance = who;
        req.ops = ops;
        self.apply(req)
    }

    /// Applies `write` and returns its outcome with the rows it read.
    fn rows_read_by(&mut self, write: impl FnOnce(&mut Mem) -> TxOutcome) -> (TxOutcome, u64) {
        let before = self.store.rows_read.load(Ordering::Relaxed);
        let outcome = write(self);
        (outcome, self.store.rows_read.load(Ordering::Relaxed) - before)
    }

    /// The slot's current-claims row, decoded.
    fn current_row(&self, e: EntityId, a: &str) -> Option<CurrentRow> {
        let bytes = self
            .store
            .get(Space::State, &keys::current(&self.ns, e, &attr(a)))
            .unwrap()?;
        Some(CurrentRow::decode(&bytes).unwrap())
    }

    fn scrub_findings(&self) -> Vec<String> {
        let report = scrub::scrub(&*self.store, &mut |_, _| {}).unwrap();
        report.findings.into_iter().map(|f| f.what).collect()
    }

    fn write_on(&mut self, on: &str, ops: Vec<TxOp>) -> TxOutcome {
        let mut req = self.request();
        req.branch = Some(branch(on));
        req.ops = ops;
        self.apply(req)
    }

    fn branch_op(&mut self, op: BranchOp) -> TxOutcome {
        let mut req = self.request();
        req.branch_op = Some(op);
        self.apply(req)
    }

    fn facts(&self, e: EntityId, on: Option<&str>, opts: ReadOptions) -> reads::Facts {
        let b = on.map(branch);
        reads::get_facts(&*self.store, &self.ns, b.as_ref(), e, &opts).unwrap()
    }

    fn value(&self, e: EntityId, a: &str, on: Option<&str>) -> Option<Value> {
        self.facts(e, on, ReadOptions::default())
            .current
            .into_iter()
            .find(|d| d.attribute.as_str() == a)
            .map(|d| d.value)
    }

    fn state(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        self.store
            .for_each(Space::State, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
        out
    }

    /// Applies `req`, expects it refused, and checks that nothing but the log position moved.
    fn refused(&mut self, outcome: impl FnOnce(&mut Mem) -> TxOutcome) -> Rejection {
        let before = self.state();
        let head = self.engine.head().clone();
        let rejection = outcome(self).unwrap_err();
        assert_eq!(
            self.state(),
            before,
            "a refused transaction changed the state: {rejection}"
        );
        assert_eq!(self.engine.head(), &head);
        rejection
    }
}

fn def(a: &str, ty: ValueType) -> AttributeDef {
    AttributeDef::new(attr(a), ty)
}

/// [`def`] with a value index.
fn indexed_def(a: &str, ty: ValueType) -> AttributeDef {
    AttributeDef {
        indexed: true,
        ..def(a, ty)
    }
}

fn created(receipt: &TxReceipt, name: &str) -> EntityId {
    receipt.temp_ids[name]
}

#[test]
fn a_declared_schema_is_data_validates_writes_and_reads_as_of() {
    let mut m = Mem::new("team/a");
    let open = m
        .write(
            agent("a", Status::Candidate, 0.5),
            vec![assert_op(temp("x"), ":note/text", s("typed by use"))],
        )
        .unwrap();
    assert!(
        !schema::namespace_schema(&*m.store, &m.ns).unwrap().strict,
        "an undeclared namespace is open"
    );
    let mut theme = def(":pref/theme", ValueType::String);
    theme.doc = "the user's editor theme".into();
    let receipt = m.declare(vec![theme.clone()]).unwrap();

    // The declaration is data: a schema entity with :db/* datoms, in the audit chain.
    let view = schema::view(&*m.store, &m.ns, None).unwrap();
    assert_eq!((view.version, view.strict), (1, true));
    let (declared, entity) = view
        .attributes
        .iter()
        .find(|(v, _)| v.def.ident == theme.ident)
        .unwrap();
    assert_eq!((declared.version, declared.tx), (1, receipt.tx));
    let schema_entity = entity.unwrap();
    assert_eq!(
        m.value(schema_entity, ":db/ident", None),
        Some(Value::Keyword(":pref/theme".into()))
    );
    assert_eq!(
        m.value(schema_entity, ":db/doc", None),
        Some(s("the user's editor theme"))
    );
    assert_eq!(
        receipt.datom_hashes.len(),
        8,
        "ident, type, cardinality, index, component, deprecated, doc, version"
    );

    // Strict now: an undeclared attribute is refused, a declared one must match its type, and
    // one typed by use before the first declaration stays usable.
    let user = agent("a", Status::Candidate, 0.5);
    let unknown = m.refused(|m| m.write(user.clone(), vec![assert_op(temp("y"), ":pref/font", s("mono"))]));
    assert_eq!(unknown, Rejection::UnknownAttribute(attr(":pref/font")));
    assert!(unknown.to_string().contains("declare it first"), "{unknown}");
    let mismatch = m.refused(|m| {
        m.write(
            user.clone(),
            vec![assert_op(temp("y"), ":pref/theme", Value::I64(3))],
        )
    });
    assert_eq!(
        mismatch,
        Rejection::TypeMismatch {
            attribute: attr(":pref/theme"),
            expected: ValueType::String,
            found: ValueType::I64
        }
    );
    m.write(
        user.clone(),
        vec![assert_op(id(open.temp_ids["x"]), ":note/text", s("still fine"))],
    )
    .unwrap();

    // As of a tx before the declaration, the namespace had no declared schema.
    let before = schema::view(&*m.store, &m.ns, Some(open.tx)).unwrap();
    assert_eq!((before.version, before.strict), (0, false));
    assert!(before.attributes.iter().all(|(v, _)| v.def.ident != theme.ident));

    // Declaring the same thing again changes nothing and says so.
    assert_eq!(
        m.refused(|m| m.declare(vec![theme.clone()])),
        Rejection::SchemaUnchanged
    );
}

#[test]
fn migrations_only_move_forward() {
    let mut m = Mem::new("team/a");
    let tags = def(":memory/tag", ValueType::Keyword);
    let label = def(":memory/label", ValueType::String);
    m.declare(vec![tags.clone(), label.clone()]).unwrap();
    let who = agent("a", Status::Candidate, 0.5);
    let first = m
        .write(
            who.clone(),
            vec![
                assert_op(temp("e"), ":memory/tag", Value::Keyword(":t/a".into())),
                assert_op(temp("e"), ":memory/label", s("same")),
                assert_op(temp("f"), ":memory/label", s("same")),
            ],
        )
        .unwrap();
    let (e, f) = (created(&first, "e"), created(&first, "f"));

    // Narrowing a type: refused, nothing changes.
    let narrowed = m.refused(|m| m.declare(vec![def(":memory/tag", ValueType::String)]));
    assert!(
        matches!(&narrowed, Rejection::UnsafeMigration { attribute, reason }
            if attribute.as_str() == ":memory/tag" && reason.contains("a type never changes")),
        "{narrowed}"
    );

    // Widening one -> many: the entity then holds two tags; as of before, the schema said one.
    let mut many = tags.clone();
    many.cardinality = Cardinality::Many;
    let widened = m.declare(vec![many.clone()]).unwrap();
    m.write(
        who.clone(),
        vec![assert_op(id(e), ":memory/tag", Value::Keyword(":t/b".into()))],
    )
    .unwrap();
    let now = m.facts(e, None, ReadOptions::default());
    assert_eq!(
        now.current
            .iter()
            .filter(|d| d.attribute.as_str() == ":memory/tag")
            .count(),
        2
    );
    assert_eq!(
        schema::cardinality_at(&*m.store, &m.ns, &attr(":memory/tag"), Some(first.tx)).unwrap(),
        Cardinality::One
    );
    assert_eq!(
        schema::cardinality_at(&*m.store, &m.ns, &attr(":memory/tag"), Some(widened.tx)).unwrap(),
        Cardinality::Many
    );

    // Many -> one while an entity holds two values: refused with the entity named.
    let back = m.refused(|m| m.declare(vec![tags.clone()]));
    assert!(
        back.to_string().contains(&format!("entity {e} holds 2 values")),
        "{back}"
    );

    // Unique over duplicate values: refused, naming both holders (in id order, and ids are
    // not in creation order).
    let mut unique = label.clone();
    unique.unique = Some(Unique::Value);
    let dup = m.refused(|m| m.declare(vec![unique.clone()]));
    let (low, high) = if e < f { (e, f) } else { (f, e) };
    assert!(
        dup.to_string()
            .contains(&format!("entities {low} and {high} both hold")),
        "{dup}"
    );

    // Adding an index backfills it: lookups by value find the datoms written before.
    let mut indexed = label.clone();
    indexed.indexed = true;
    m.declare(vec![indexed.clone()]).unwrap();
    let found = pages::find_main(
        &*m.store,
        &m.ns,
        &attr(":memory/label"),
        Some(&s("same")),
        None,
        10,
    )
    .unwrap();
    assert_eq!(
        found.iter().map(|d| d.entity).collect::<Vec<_>>(),
        vec![low, high]
    );
    let dropped = m.refused(|m| m.declare(vec![label.clone()]));
    assert!(
        dropped.to_string().contains("an index cannot be dropped"),
        "{dropped}"
    );

    // Deprecate: no new assertions, retractions still allowed, never revived.
    let mut deprecated = indexed.clone();
    deprecated.deprecated = true;
    m.declare(vec![deprecated.clone()]).unwrap();
    let closed = m.refused(|m| m.write(who.clone(), vec![assert_op(id(e), ":memory/label", s("new"))]));
    assert_eq!(closed, Rejection::Deprecated(attr(":memory/label")));
    m.write(who.clone(), vec![retract_op(f, ":memory/label", s("same"))])
        .unwrap();
    let revived = m.refused(|m| m.declare(vec![indexed.clone()]));
    assert!(revived.to_string().contains("cannot be revived"), "{revived}");
    assert_eq!(
        schema::view(&*m.store, &m.ns, None).unwrap().version,
        4,
        "declare, widen, index, deprecate"
    );
}

#[test]
fn contradicting_agents_are_both_kept_and_resolved_by_the_chosen_rule() {
    let mut m = Mem::new("team/a");
    let first = m
        .write(
            agent("planner", Status::Candidate, 0.6),
            vec![assert_op(temp("p"), ":pref/theme", s("dark"))],
        )
        .unwrap();
    let p = created(&first, "p");
    m.write(
        agent("critic", Status::Candidate, 0.8),
        vec![assert_op(id(p), ":pref/theme", s("light"))],
    )
    .unwrap();

    let latest = m.facts(p, None, ReadOptions::default());
    assert_eq!(latest.current[0].value, s("light"));
    assert_eq!(latest.conflicts.len(), 1);
    assert_eq!(
        (
            latest.conflicts[0].value.clone(),
            latest.conflicts[0].provenance.agent.as_str()
        ),
        (s("dark"), "planner")
    );

    // The planner verifies its claim: a new datom, the candidate stays in history.
    m.write(
        agent("planner", Status::Verified, 0.95),
        vec![assert_op(id(p), ":pref/theme", s("dark"))],
    )
    .unwrap();
    // The critic repeats itself later, still a candidate.
    m.write(
        agent("critic", Status::Candidate, 0.9),
        vec![assert_op(id(p), ":pref/theme", s("light"))],
    )
    .unwrap();
    let latest = m.facts(p, None, ReadOptions::default());
    assert_eq!(
        latest.current[0].value,
        s("light"),
        "latest claim wins under LATEST"
    );
    assert_eq!(latest.conflicts[0].value, s("dark"));
    let verified = ReadOptions {
        rule: Resolution::Verified,
        ..ReadOptions::default()
    };
    let best = m.facts(p, None, verified);
    assert_eq!(
        best.current[0].value,
        s("dark"),
        "the verified claim wins under VERIFIED"
    );
    assert_eq!(best.current[0].provenance.status, Status::Verified);
    assert_eq!(best.conflicts[0].value, s("light"));
    let only = m.facts(
        p,
        None,
        ReadOptions {
            verified_only: true,
            ..ReadOptions::default()
        },
    );
    assert_eq!(only.current[0].value, s("dark"));
    assert!(only.conflicts.is_empty(), "candidates are ignored entirely");
    let history = pages::entity_history(&*m.store, &m.ns, p, None, 100).unwrap();
    assert_eq!(history.len(), 4, "every claim is kept");

    // As of the first write, there was nothing to disagree with.
    let then = m.facts(
        p,
        None,
        ReadOptions {
            as_of: Some(first.tx),
            ..ReadOptions::default()
        },
    );
    assert_eq!(
        (then.current[0].value.clone(), then.conflicts.len()),
        (s("dark"), 0)
    );

    // Retracting "light" ends the critic's claim; the planner's stands alone.
    m.write(
        agent("critic", Status::Candidate, 0.9),
        vec![retract_op(p, ":pref/theme", s("light"))],
    )
    .unwrap();
    let after = m.facts(p, None, ReadOptions::default());
    assert_eq!(
        (after.current[0].value.clone(), after.conflicts.len()),
        (s("dark"), 0)
    );
    let who = agent("critic", Status::Candidate, 0.9);
    let stale = m.refused(|m| m.write(who.clone(), vec![retract_op(p, ":pref/theme", s("light"))]));
    assert!(matches!(stale, Rejection::NotCurrent { .. }), "{stale}");
}

#[test]
fn unique_identity_upserts_and_lookup_refs_resolve() {
    let mut m = Mem::new("team/a");
    let mut key = def(":memory/key", ValueType::String);
    key.unique = Some(Unique::Identity);
    let mut email = def(":person/email", ValueType::String);
    email.unique = Some(Unique::Value);
    let text = def(":memory/text", ValueType::String);
    m.declare(vec![key, email, text]).unwrap();
    let who = agent("a", Status::Candidate, 0.5);
    let first = m
        .write(
            who.clone(),
            vec![
                assert_op(temp("m"), ":memory/key", s("alice/theme")),
                assert_op(temp("m"), ":memory/text", s("dark")),
            ],
        )
        .unwrap();
    let e = created(&first, "m");

    // A new name asserting the same identity value is the same entity (upsert).
    let again = m
        .write(
            agent("b", Status::Candidate, 0.5),
            vec![
                assert_op(temp("other"), ":memory/key", s("alice/theme")),
                assert_op(temp("other"), ":memory/text", s("light")),
            ],
        )
        .unwrap();
    assert_eq!(created(&again, "other"), e);

    // A lookup ref addresses it without knowing the id.
    let lookup = EntityRef::Lookup(attr(":memory/key"), s("alice/theme"));
    m.write(
        who.clone(),
        vec![assert_op(lookup, ":memory/text", s("solarized"))],
    )
    .unwrap();
    assert_eq!(m.value(e, ":memory/text", None), Some(s("solarized")));

    let missing = EntityRef::Lookup(attr(":memory/key"), s("nobody"));
    let r = m.refused(|m| {
        m.write(
            who.clone(),
            vec![assert_op(missing.clone(), ":memory/text", s("x"))],
        )
    });
    assert_eq!(
        r,
        Rejection::LookupNotFound {
            attribute: attr(":memory/key"),
            value: s("nobody")
        }
    );
    let not_unique = EntityRef::Lookup(attr(":memory/text"), s("dark"));
    let r = m.refused(|m| {
        m.write(
            who.clone(),
            vec![assert_op(not_unique.clone(), ":memory/text", s("x"))],
        )
    });
    assert_eq!(r, Rejection::NotUnique(attr(":memory/text")));

    // Unique value: a second holder is refused.
    let p = created(
        &m.write(
            who.clone(),
            vec![assert_op(temp("p"), ":person/email", s("a@x.org"))],
        )
        .unwrap(),
        "p",
    );
    let r = m.refused(|m| {
        m.write(
            who.clone(),
            vec![assert_op(temp("q"), ":person/email", s("a@x.org"))],
        )
    });
    assert_eq!(
        r,
        Rejection::UniqueConflict {
            attribute: attr(":person/email"),
            value: s("a@x.org"),
            holder: p
        }
    );
}

#[test]
fn branches_are_isolated_diffable_mergeable_and_abandonable() {
    let mut m = Mem::new("team/a");
    let who = agent("planner", Status::Candidate, 0.7);
    let seed = m
        .write(who.clone(), vec![assert_op(temp("t"), ":plan/step", s("draft"))])
        .unwrap();
    let t = created(&seed, "t");
    m.branch_op(BranchOp::Create {
        name: branch("fast"),
        from: None,
    })
    .unwrap();
    m.branch_op(BranchOp::Create {
        name: branch("safe"),
        from: None,
    })
    .unwrap();

    let fast = m
        .write_on(
            "fast",
            vec![
                assert_op(id(t), ":plan/step", s("ship today")),
                assert_op(temp("n"), ":plan/note", s("skip review")),
            ],
        )
        .unwrap();
    let n = created(&fast, "n");
    m.write_on("safe", vec![assert_op(id(t), ":plan/step", s("review first"))])
        .unwrap();

    // Isolation: main and each branch see only their own writes.
    assert_eq!(m.value(t, ":plan/step", None), Some(s("draft")));
    assert_eq!(m.value(t, ":plan/step", Some("fast")), Some(s("ship today")));
    assert_eq!(m.value(t, ":plan/step", Some("safe")), Some(s("review first")));
    assert!(matches!(
        reads::get_facts(&*m.store, &m.ns, None, n, &ReadOptions::default()),
        Err(ReadError::UnknownEntity(_))
    ));
    let safe = branch("safe");
    assert!(matches!(
        reads::get_facts(&*m.store, &m.ns, Some(&safe), n, &ReadOptions::default()),
        Err(ReadError::UnknownEntity(_))
    ));
    let main_watch = reads::transactions_from(&*m.store, &m.ns, None, TxId(0), 100)
        .unwrap()
        .0;
    assert!(
        main_watch
            .iter()
            .all(|r| r.datoms.iter().all(|d| d.branch.is_none()))
    );
    let fast_name = branch("fast");
    let fast_watch = reads::transactions_from(&*m.store, &m.ns, Some(&fast_name), TxId(0), 100)
        .unwrap()
        .0;
    assert_eq!(fast_watch.len(), 1);
    assert_eq!(fast_watch[0].datoms[0].branch, Some(fast_name.clone()));
    // The whole log, as a node's watchers share it: every transaction of main and the branches,
    // each with where it wrote; and cut after the first once a byte budget is reached.
    let end = TxId(1 << 40);
    let (all, next) = reads::tx_log_range(&*m.store, TxId(0), end, usize::MAX).unwrap();
    assert_eq!(next, TxId(end.0 + 1));
    assert_eq!(
        all.iter()
            .filter(|t| t.branch.as_ref() == Some(&fast_name))
            .map(|t| t.record.receipt.tx)
            .collect::<Vec<_>>(),
        vec![fast_watch[0].receipt.tx]
    );
    let last = all.last().unwrap().record.receipt.tx;
    assert_eq!(
        all.iter()
            .filter(|t| t.branch.is_none())
            .map(|t| t.record.receipt.tx)
            .collect::<Vec<_>>(),
        main_watch.iter().map(|r| r.receipt.tx).collect::<Vec<_>>()
    );
    assert!(all.iter().all(|t| t.namespace == m.ns && t.datom_bytes > 0));
    assert!(
        all.windows(2)
            .all(|w| w[0].record.receipt.tx < w[1].record.receipt.tx)
    );
    let (first, after) = reads::tx_log_range(&*m.store, TxId(0), end, 1).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].record.receipt.tx, all[0].record.receipt.tx);
    assert_eq!(after, TxId(all[0].record.receipt.tx.0 + 1));
    assert!(
        reads::tx_log_range(&*m.store, TxId(last.0 + 1), last, usize::MAX)
            .unwrap()
            .0
            .is_empty()
    );

    // Diff against main: the branch's writes, and nothing main changed meanwhile.
    let diff = reads::branch_diff(&*m.store, &m.ns, &fast_name, None, 100).unwrap();
    assert_eq!(diff.branch.asserted.len(), 2);
    assert!(diff.main_changed.is_empty());

    // Merge "fast": one main transaction; the branch's entity becomes main's.
    let merged = m
        .branch_op(BranchOp::Merge {
            name: fast_name.clone(),
        })
        .unwrap();
    assert_eq!(
        merged.datom_hashes.len(),
        2 + 2,
        "two replayed datoms and the state change"
    );
    assert_eq!(m.value(t, ":plan/step", None), Some(s("ship today")));
    assert_eq!(m.value(n, ":plan/note", None), Some(s("skip review")));
    let replayed = pages::entity_history(&*m.store, &m.ns, t, None, 10).unwrap();
    assert_eq!(
        replayed.last().unwrap().provenance.agent,
        "admin",
        "the branch writer's provenance is kept"
    );

    // "safe" wrote the same slot, which main has changed since the fork: a clean conflict.
    let conflict = m.refused(|m| m.branch_op(BranchOp::Merge { name: branch("safe") }));
    assert!(
        matches!(&conflict, Rejection::MergeConflict { entity, attribute, .. }
            if *entity == t && attribute.as_str() == ":plan/step"),
        "{conflict}"
    );
    assert!(conflict.to_string().contains("nothing was applied"));
    let safe_diff = reads::branch_diff(&*m.store, &m.ns, &safe, None, 100).unwrap();
    assert_eq!(
        safe_diff.main_changed.len(),
        1,
        "the diff shows what a merge would conflict with"
    );

    // Abandon it: no more writes, its history stays readable.
    m.branch_op(BranchOp::Abandon { name: safe.clone() }).unwrap();
    let closed = m.refused(|m| m.write_on("safe", vec![assert_op(id(t), ":plan/step", s("again"))]));
    assert_eq!(
        closed,
        Rejection::BranchClosed {
            branch: safe.clone(),
            state: "abandoned".into()
        }
    );
    assert_eq!(m.value(t, ":plan/step", Some("safe")), Some(s("review first")));
    assert_eq!(
        m.refused(|m| m.branch_op(BranchOp::Merge { name: branch("fast") })),
        Rejection::BranchClosed {
            branch: fast_name,
            state: "merged".into()
        }
    );

    // A branch from an earlier tx sees main as it was then.
    m.branch_op(BranchOp::Create {
        name: branch("past"),
        from: Some(seed.tx),
    })
    .unwrap();
    assert_eq!(m.value(t, ":plan/step", Some("past")), Some(s("draft")));

    // Unknown, duplicate, future.
    assert_eq!(
        m.refused(|m| m.write_on("nope", vec![assert_op(id(t), ":plan/step", s("x"))])),
        Rejection::UnknownBranch(branch("nope"))
    );
    let nope = branch("nope");
    assert!(matches!(
        reads::get_facts(&*m.store, &m.ns, Some(&nope), t, &ReadOptions::default()),
        Err(ReadError::UnknownBranch(_))
    ));
    assert_eq!(
        m.refused(|m| m.branch_op(BranchOp::Create {
            name: branch("past"),
            from: None
        })),
        Rejection::BranchExists(branch("past"))
    );
    let future = m.refused(|m| {
        m.branch_op(BranchOp::Create {
            name: branch("later"),
            from: Some(TxId(10_000)),
        })
    });
    assert!(matches!(future, Rejection::ForkInFuture { .. }), "{future}");

    // The branch records are data on main.
    let rows = engram_core::branch::list(&*m.store, &m.ns).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.name.as_str(), r.state.name()))
            .collect::<Vec<_>>(),
        vec![("fast", "merged"), ("past", "open"), ("safe", "abandoned")]
    );
    assert_eq!(
        m.value(rows[2].entity, ":db.branch/state", None),
        Some(Value::Keyword(":db.branch.state/abandoned".into()))
    );
}

#[test]
fn a_merge_re_checks_the_branchs_preconditions_against_main() {
    let mut m = Mem::new("team/a");
    let who = agent("a", Status::Candidate, 0.5);
    let seed = m
        .write(
            who.clone(),
            vec![
                assert_op(temp("budget"), ":plan/budget", Value::I64(100)),
                assert_op(temp("task"), ":plan/step", s("draft")),
            ],
        )
        .unwrap();
    let (budget, task) = (created(&seed, "budget"), created(&seed, "task"));
    m.branch_op(BranchOp::Create {
        name: branch("spend"),
        from: None,
    })
    .unwrap();
    // The branch spends only if the budget is still 100.
    let mut req = m.request();
    req.branch = Some(branch("spend"));
    req.ops = vec![assert_op(id(task), ":plan/step", s("buy"))];
    req.preconditions = vec![Precondition {
        entity: budget,
        attribute: attr(":plan/budget"),
        expected: Some(Value::I64(100)),
    }];
    m.apply(req).unwrap();
    m.write(
        who.clone(),
        vec![assert_op(id(budget), ":plan/budget", Value::I64(10))],
    )
    .unwrap();
    let r = m.refused(|m| {
        m.branch_op(BranchOp::Merge {
            name: branch("spend"),
        })
    });
    assert!(
        r.to_string()
            .contains("a precondition of the branch no longer holds"),
        "{r}"
    );
    assert_eq!(m.value(task, ":plan/step", None), Some(s("draft")));
}

#[test]
fn a_namespace_never_reads_or_writes_another_through_any_path() {
    let mut m = Mem::new("team/a");
    let who = agent("a", Status::Candidate, 0.5);
    let secret = created(
        &m.write(who.clone(), vec![assert_op(temp("s"), ":secret/code", s("1234"))])
            .unwrap(),
        "s",
    );
    m.branch_op(BranchOp::Create {
        name: branch("work"),
        from: None,
    })
    .unwrap();
    m.write_on("work", vec![assert_op(id(secret), ":secret/code", s("5678"))])
        .unwrap();

    let other = Namespace::new("team/b").unwrap();
    let store = &*m.store;
    let opts = ReadOptions::default();
    let work = branch("work");
    // get, history, diff: the entity does not exist there.
    assert!(matches!(
        reads::get_facts(store, &other, None, secret, &opts),
        Err(ReadError::UnknownEntity(_))
    ));
    assert!(matches!(
        pages::entity_history(store, &other, secret, None, 10),
        Err(ReadError::UnknownEntity(_))
    ));
    assert!(matches!(
        pages::diff_main(store, &other, Some(secret), TxId(0), TxId(100), 10),
        Err(ReadError::UnknownEntity(_))
    ));
    // find, attribute history, namespace diff, watch: nothing of team/a.
    assert!(
        pages::find_main(store, &other, &attr(":secret/code"), None, None, 10)
            .unwrap()
            .is_empty()
    );
    assert!(
        pages::attribute_history(store, &other, &attr(":secret/code"), 10)
            .unwrap()
            .is_empty()
    );
    let d = pages::diff_main(store, &other, None, TxId(0), TxId(100), 10).unwrap();
    assert!(d.asserted.is_empty() && d.retracted.is_empty());
    assert!(
        reads::transactions_from(store, &other, None, TxId(0), 100)
            .unwrap()
            .0
            .is_empty()
    );
    assert!(
        reads::transactions_from(store, &other, Some(&work), TxId(0), 100)
            .unwrap()
            .0
            .is_empty()
    );
    // branches: team/a's branch does not exist in team/b.
    assert!(matches!(
        reads::get_facts(store, &other, Some(&work), secret, &opts),
        Err(ReadError::UnknownBranch(_))
    ));
    assert!(matches!(
        reads::branch_diff(store, &other, &work, None, 10),
        Err(ReadError::UnknownBranch(_))
    ));
    // schema: team/a's does not leak either.
    assert!(schema::view(store, &other, None).unwrap().attributes.is_empty());

    // Writes: neither directly, nor on a branch of its own, nor by merging.
    let mut cross = TxRequest::data(
        other.clone(),
        vec![assert_op(id(secret), ":secret/code", s("0"))],
        who.clone(),
    );
    assert_eq!(
        m.refused(|m| m.apply(cross.clone())),
        Rejection::UnknownEntity(secret)
    );
    let mut b_branch = TxRequest::data(other.clone(), vec![], who.clone());
    b_branch.branch_op = Some(BranchOp::Create {
        name: branch("steal"),
        from: None,
    });
    m.apply(b_branch).unwrap();
    cross.branch = Some(branch("steal"));
    assert_eq!(
        m.refused(|m| m.apply(cross.clone())),
        Rejection::UnknownEntity(secret)
    );
    let mut merge = TxRequest::data(other.clone(), vec![], who.clone());
    merge.branch_op = Some(BranchOp::Merge { name: work.clone() });
    assert_eq!(
        m.refused(|m| m.apply(merge.clone())),
        Rejection::UnknownBranch(work)
    );
    let lookup = EntityRef::Lookup(attr(":secret/code"), s("1234"));
    cross.branch = None;
    cross.ops = vec![assert_op(lookup, ":secret/code", s("0"))];
    assert!(matches!(
        m.refused(|m| m.apply(cross.clone())),
        Rejection::NotUnique(_)
    ));
}

#[test]
fn replicas_applying_the_same_log_hold_byte_identical_state() {
    let run = || {
        let mut m = Mem::new("team/a");
        let mut key = def(":memory/key", ValueType::String);
        key.unique = Some(Unique::Identity);
        m.declare(vec![key, def(":memory/text", ValueType::String)])
            .unwrap();
        let e = created(
            &m.write(
                agent("a", Status::Candidate, 0.4),
                vec![
                    assert_op(temp("m"), ":memory/key", s("k")),
                    assert_op(temp("m"), ":memory/text", s("one")),
                ],
            )
            .unwrap(),
            "m",
        );
        m.branch_op(BranchOp::Create {
            name: branch("b"),
            from: None,
        })
        .unwrap();
        m.write_on("b", vec![assert_op(id(e), ":memory/text", s("two"))])
            .unwrap();
        m.branch_op(BranchOp::Merge { name: branch("b") }).unwrap();
        m.write(
            agent("c", Status::Verified, 0.9),
            vec![assert_op(id(e), ":memory/text", s("three"))],
        )
        .unwrap();
        (m.state(), m.engine.head().clone())
    };
    let (a, head_a) = run();
    let (b, head_b) = run();
    assert_eq!(head_a, head_b);
    assert!(a == b, "replicas diverged");
}

#[test]
fn schema_branch_and_merge_transactions_verify_offline_and_a_moved_branch_datom_does_not() {
    let mut m = Mem::new("team/a");
    m.declare(vec![def(":plan/step", ValueType::String)]).unwrap();
    let t = created(
        &m.write(
            agent("a", Status::Candidate, 0.5),
            vec![assert_op(temp("t"), ":plan/step", s("draft"))],
        )
        .unwrap(),
        "t",
    );
    m.branch_op(BranchOp::Create {
        name: branch("b"),
        from: None,
    })
    .unwrap();
    let on_branch = m
        .write_on("b", vec![assert_op(id(t), ":plan/step", s("final"))])
        .unwrap();
    m.branch_op(BranchOp::Merge { name: branch("b") }).unwrap();

    let export = |store: &dyn Store| {
        let mut out = Vec::new();
        engram_core::export::write_export(store, &mut out, 1, |_, _| {}).unwrap();
        out
    };
    let options = engram_verify::VerifyOptions::default();
    let report = engram_verify::verify_export(&export(&*m.store)[..], &options, |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.failures);

    // Move the branch datom to main in storage (rewrite it without its branch): the audit
    // entry of the branch transaction no longer matches.
    let key = engram_core::reads::datom_key_of_tx(&*m.store, on_branch.tx, 0)
        .unwrap()
        .unwrap();
    let mut datom = engram_types::Datom::decode(&m.store.get(Space::State, &key).unwrap().unwrap()).unwrap();
    assert_eq!(datom.branch, Some(branch("b")));
    datom.branch = None;
    let mut batch = WriteBatch::new();
    batch.put(Space::State, key, datom.encode());
    m.store.write(batch, engram_storage::Durability::Sync).unwrap();
    let report = engram_verify::verify_export(&export(&*m.store)[..], &options, |_, _| {}).unwrap();
    let failure = report.failures.first().expect("the moved datom is caught");
    assert_eq!(failure.index, Some(on_branch.audit_index), "{failure:?}");
}

#[test]
fn a_write_reads_the_slots_current_claims_not_its_history() {
    // Decision: write cost must not grow with the number of versions a key has. A write,
    // a retraction and a precondition on a slot with 2 versions and with 600 versions must
    // read the same number of rows.
    let mut m = Mem::new("team/a");
    let who = agent("a", Status::Candidate, 1.0);
    let e = created(
        &m.write(
            who.clone(),
            vec![assert_op(temp("k"), ":counter/v", Value::I64(0))],
        )
        .unwrap(),
        "k",
    );
    let rewrite =
        |m: &mut Mem, n: i64| m.write(who.clone(), vec![assert_op(id(e), ":counter/v", Value::I64(n))]);
    let checks = |m: &mut Mem, n: i64| -> [u64; 3] {
        let (outcome, write) = m.rows_read_by(|m| rewrite(m, n));
        outcome.unwrap();
        let mut cas = m.request();
        cas.provenance = who.clone();
        cas.preconditions = vec![Precondition {
            entity: e,
            attribute: attr(":counter/v"),
            expected: Some(Value::I64(n)),
        }];
        cas.ops = vec![assert_op(id(e), ":counter/v", Value::I64(n + 1))];
        let (outcome, precondition) = m.rows_read_by(|m| m.apply(cas));
        outcome.unwrap();
        let (outcome, retract) =
            m.rows_read_by(|m| m.write(who.clone(), vec![retract_op(e, ":counter/v", Value::I64(n + 1))]));
        outcome.unwrap();
        [write, precondition, retract]
    };
    // A slot gets its row once it has ROW_AFTER_DATOMS datoms; below that, its few datoms are
    // read instead.
    for n in 1..ROW_AFTER_DATOMS as i64 {
        assert_eq!(m.current_row(e, ":counter/v"), None, "no row at {n} datoms");
        rewrite(&mut m, n).unwrap();
    }
    assert!(m.current_row(e, ":counter/v").is_some());
    let few = checks(&mut m, 1);
    for n in 10..600 {
        rewrite(&mut m, n).unwrap();
    }
    let many = checks(&mut m, 1_000);
    assert_eq!(few, many, "rows read by a write, a precondition and a retraction");
    assert_eq!(
        m.current_row(e, ":counter/v"),
        Some(CurrentRow::empty(Cardinality::One))
    );
    assert_eq!(m.scrub_findings(), Vec::<String>::new());

    // A slot without a row (written before the index existed) folds its history once, gets
    // the row, and then reads as little as the others.
    rewrite(&mut m, 7).unwrap();
    let row = m.current_row(e, ":counter/v").unwrap();
    let mut drop_row = WriteBatch::new();
    drop_row.delete(Space::State, keys::current(&m.ns, e, &attr(":counter/v")));
    m.store.write(drop_row, Durability::Sync).unwrap();
    let (outcome, first) =
        m.rows_read_by(|m| m.write(who.clone(), vec![retract_op(e, ":counter/v", Value::I64(7))]));
    outcome.unwrap();
    assert!(
        first > 600,
        "the first write after folds the history: {first} rows"
    );
    let (outcome, next) = m.rows_read_by(|m| rewrite(m, 8));
    outcome.unwrap();
    assert!(next < 50, "{next} rows");
    assert_eq!(row.claims.len(), 1);
    assert_eq!(m.value(e, ":counter/v", None), Some(Value::I64(8)));
    assert_eq!(m.scrub_findings(), Vec::<String>::new());
}

#[test]
fn current_claims_follow_agents_retractions_and_cardinality_changes() {
    let mut m = Mem::new("team/a");
    m.declare(vec![def(":claim/x", ValueType::I64)]).unwrap();
    let (a, b, c) = (
        agent("a", Status::Candidate, 1.0),
        agent("b", Status::Candidate, 1.0),
        agent("c", Status::Candidate, 1.0),
    );
    let held = |m: &Mem, e: EntityId| -> Vec<i64> {
        let row = m.current_row(e, ":claim/x").unwrap();
        row.claims
            .iter()
            .map(|d| match d.value {
                Value::I64(v) => v,
                _ => panic!("{d:?}"),
            })
            .collect()
    };
    let e = created(
        &m.write(a.clone(), vec![assert_op(temp("e"), ":claim/x", Value::I64(1))])
            .unwrap(),
        "e",
    );
    // Agent c rewrites the slot until it keeps a row.
    let padding: Vec<i64> = (100..100 + ROW_AFTER_DATOMS as i64).collect();
    for v in &padding {
        m.write(c.clone(), vec![assert_op(id(e), ":claim/x", Value::I64(*v))])
            .unwrap();
    }
    m.write(b.clone(), vec![assert_op(id(e), ":claim/x", Value::I64(2))])
        .unwrap();
    m.write(a.clone(), vec![assert_op(id(e), ":claim/x", Value::I64(3))])
        .unwrap();
    // Cardinality one: one claim per agent, a's latest replaced its first, c's last stands.
    assert_eq!(
        m.current_row(e, ":claim/x").unwrap().cardinality,
        Cardinality::One
    );
    assert_eq!(held(&m, e), vec![padding[padding.len() - 1], 2, 3]);
    // 1 is no longer held: retracting it is refused, as it was when the history was read.
    let refused = m.refused(|m| m.write(b.clone(), vec![retract_op(e, ":claim/x", Value::I64(1))]));
    assert!(matches!(refused, Rejection::NotCurrent { .. }), "{refused}");

    // Widened to many: the row folded under one is stale, the next write folds the history
    // under many (every value asserted and not retracted since, 1 included).
    let mut many = def(":claim/x", ValueType::I64);
    many.cardinality = Cardinality::Many;
    m.declare(vec![many]).unwrap();
    m.write(b.clone(), vec![retract_op(e, ":claim/x", Value::I64(1))])
        .unwrap();
    assert_eq!(
        m.current_row(e, ":claim/x").unwrap().cardinality,
        Cardinality::Many
    );
    let mut all = padding.clone();
    all.extend([2, 3]);
    assert_eq!(held(&m, e), all);
    let refused = m.refused(|m| m.write(b.clone(), vec![retract_op(e, ":claim/x", Value::I64(1))]));
    assert!(matches!(refused, Rejection::NotCurrent { .. }), "{refused}");
    assert_eq!(m.scrub_findings(), Vec::<String>::new());

    // Branches read their slots from history and keep no row; a merge writes main's.
    m.branch_op(BranchOp::Create {
        name: branch("try"),
        from: None,
    })
    .unwrap();
    m.write_on("try", vec![retract_op(e, ":claim/x", Value::I64(2))])
        .unwrap();
    assert_eq!(held(&m, e), all, "main is untouched");
    m.branch_op(BranchOp::Merge { name: branch("try") }).unwrap();
    all.retain(|v| *v != 2);
    assert_eq!(held(&m, e), all);
    assert_eq!(m.scrub_findings(), Vec::<String>::new());

    // A row that disagrees with its history is a scrub finding naming the slot.
    let mut wrong = m.current_row(e, ":claim/x").unwrap();
    wrong.claims.clear();
    let mut batch = WriteBatch::new();
    batch.put(
        Space::State,
        keys::current(&m.ns, e, &attr(":claim/x")),
        wrong.encode(),
    );
    m.store.write(batch, Durability::Sync).unwrap();
    let findings = m.scrub_findings();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(
        findings[0].contains("current-claims row of entity") && findings[0].contains(":claim/x"),
        "{findings:?}"
    );
}

#[test]
fn an_entity_expires_once_every_agents_expiry_has_passed() {
    let mut m = Mem::new("team/a");
    let first = m
        .write(
            agent("planner", Status::Candidate, 0.6),
            vec![
                assert_op(temp("p"), ":note/text", s("deploy friday")),
                assert_op(temp("p"), reads::MEMORY_EXPIRES, Value::Instant(5_000)),
            ],
        )
        .unwrap();
    let p = created(&first, "p");
    let at = |now_ns: i64| ReadOptions {
        expired_at_ns: Some(now_ns),
        ..ReadOptions::default()
    };
    let found = |m: &Mem, now_ns: i64| -> Vec<EntityId> {
        pages::find(
            &*m.store,
            &m.ns,
            None,
            &attr(":note/text"),
            None,
            &at(now_ns),
            &[],
            100,
        )
        .unwrap()
        .datoms
        .iter()
        .map(|d| d.entity)
        .collect()
    };
    assert_eq!(m.facts(p, None, at(4_999)).current.len(), 2, "not yet expired");
    assert_eq!(found(&m, 4_999), [p]);
    let gone = m.facts(p, None, at(5_000));
    assert_eq!(
        (gone.current.len(), gone.expired_at_ns),
        (0, Some(5_000)),
        "expired at its instant"
    );
    assert_eq!(found(&m, 5_000), Vec::<EntityId>::new());
    assert_eq!(
        m.facts(p, None, ReadOptions::default()).current.len(),
        2,
        "expiry not applied"
    );

    // The critic's later expiry is the one the latest rule picks; the planner's earlier one is
    // a conflicting claim. The entity stays until both have passed, whichever rule reads it.
    m.write(
        agent("critic", Status::Candidate, 0.8),
        vec![assert_op(id(p), reads::MEMORY_EXPIRES, Value::Instant(9_000))],
    )
    .unwrap();
    assert_eq!(m.facts(p, None, at(6_000)).expired_at_ns, None);
    assert_eq!(found(&m, 6_000), [p]);
    assert_eq!(m.facts(p, None, at(9_000)).expired_at_ns, Some(9_000));
    assert_eq!(found(&m, 9_000), Vec::<EntityId>::new());
    // An agent that moves its claim earlier does not hide what another still wants recalled.
    m.write(
        agent("critic", Status::Candidate, 0.8),
        vec![assert_op(id(p), reads::MEMORY_EXPIRES, Value::Instant(1_000))],
    )
    .unwrap();
    assert_eq!(
        m.facts(p, None, at(4_000)).expired_at_ns,
        None,
        "the planner's 5,000 holds"
    );
    assert_eq!(m.facts(p, None, at(5_000)).expired_at_ns, Some(5_000));
}

/// Writes `n` new entities holding `:cap/tag` = `tag` in one transaction; returns their ids.
fn tagged(m: &mut Mem, n: usize, tag: &str) -> Vec<EntityId> {
    let ops = (0..n)
        .map(|i| assert_op(temp(&format!("e{i}")), ":cap/tag", s(tag)))
        .collect();
    let receipt = m.write(agent("admin", Status::Verified, 1.0), ops).unwrap();
    (0..n).map(|i| created(&receipt, &format!("e{i}"))).collect()
}

/// The transaction that wrote `e`'s first datom.
fn first_tx(m: &Mem, e: EntityId) -> TxId {
    pages::entity_history(&*m.store, &m.ns, e, None, 1).unwrap()[0].tx
}

/// Reads every page of a paged read, `read(cursor)` answering one, and returns the pages.
fn every_page(mut read: impl FnMut(&[u8]) -> pages::Page) -> Vec<pages::Page> {
    let mut out: Vec<pages::Page> = Vec::new();
    loop {
        let cursor = out
            .last()
            .and_then(|p| p.next.as_ref())
            .map(|c| c.encode())
            .unwrap_or_default();
        if !out.is_empty() && cursor.is_empty() {
            return out;
        }
        out.push(read(&cursor));
        assert!(out.len() < 10_000, "the pages never end");
    }
}

#[test]
fn history_and_find_page_through_every_datom_once_as_of_the_first_page() {
    let mut m = Mem::new("team/a");
    m.declare(vec![def(":cap/tag", ValueType::String)]).unwrap();
    // More rows than one scan chunk reads (4,096), in three transactions.
    let mut written: Vec<EntityId> = Vec::new();
    for _ in 0..3 {
        written.extend(tagged(&mut m, 1_500, "x"));
    }
    let tag = attr(":cap/tag");
    let store = &*m.store;
    let first = pages::history(
        store,
        &m.ns,
        None,
        pages::HistoryOf::Attribute(&tag),
        pages::Bounds::default(),
        &[],
        1_000,
    )
    .unwrap();
    assert_eq!(first.datoms.len(), 1_000);
    let as_of = first.as_of;
    // Written between pages: never part of the answer.
    let late = tagged(&mut m, 10, "x");
    let store = &*m.store;
    let mut pages_read = vec![first];
    while let Some(next) = pages_read.last().and_then(|p| p.next.clone()) {
        let page = pages::history(
            store,
            &m.ns,
            None,
            pages::HistoryOf::Attribute(&tag),
            pages::Bounds::default(),
            &next.encode(),
            1_000,
        )
        .unwrap();
        assert_eq!(page.as_of, as_of, "every page reads as of the first");
        pages_read.push(page);
    }
    assert_eq!(pages_read.len(), 5, "4,500 datoms in pages of 1,000");
    let history: Vec<_> = pages_read.iter().flat_map(|p| p.datoms.iter()).collect();
    assert_eq!(history.len(), 4_500);
    assert!(history.windows(2).all(|w| w[0].tx <= w[1].tx), "in tx order");
    let entities: Vec<EntityId> = history.iter().map(|d| d.entity).collect();
    assert_eq!(
        entities, written,
        "each datom once, in the order its transaction wrote it"
    );
    assert!(history.iter().all(|d| !late.contains(&d.entity)));
    // Bounded by a transaction: only what the first two transactions wrote, on every page; a
    // cursor of the unbounded history does not continue the bounded one.
    let second = history[1_500].tx;
    let bounded = |cursor: &[u8]| {
        pages::history(
            store,
            &m.ns,
            None,
            pages::HistoryOf::Attribute(&tag),
            pages::Bounds::as_of(Some(second)),
            cursor,
            2_000,
        )
    };
    let head = bounded(&[]).unwrap();
    let tail = bounded(&head.next.unwrap().encode()).unwrap();
    assert_eq!((head.as_of, tail.as_of), (second, second));
    assert_eq!(head.datoms.len() + tail.datoms.len(), 3_000);
    assert!(tail.next.is_none());
    assert!(head.datoms.iter().chain(&tail.datoms).all(|d| d.tx <= second));
    let unbounded = pages_read[0].next.as_ref().unwrap().encode();
    assert!(bounded(&unbounded).is_err(), "a cursor of another query");

    // Find: entity order, a page of 700 at a time, as of the first page.
    let value = s("x");
    let find = |cursor: &[u8], limit: usize| {
        pages::find(
            &*m.store,
            &m.ns,
            None,
            &tag,
            Some(&value),
            &ReadOptions::default(),
            cursor,
            limit,
        )
        .unwrap()
    };
    let found = every_page(|cursor| find(cursor, 700));
    assert_eq!(found.len(), 7, "4,510 entities in pages of 700");
    let mut found_entities: Vec<EntityId> = found
        .iter()
        .flat_map(|p| p.datoms.iter().map(|d| d.entity))
        .collect();
    assert!(
        found_entities.windows(2).all(|w| w[0] < w[1]),
        "entity order, each once"
    );
    found_entities.sort();
    let mut all = written.clone();
    all.extend(&late);
    all.sort();
    assert_eq!(found_entities, all);
    assert!(found.last().unwrap().next.is_none());
    // An exact fit says it ends: no cursor to an empty page.
    let exact = find(&[], 4_510);
    assert_eq!((exact.datoms.len(), exact.next), (4_510, None));

    // Diff of the namespace after the first transaction, 700 datoms a page: pages end inside
    // transactions of 1,500 and the next goes on from the datom after.
    let from = first_tx(&m, written[0]);
    let diff =
        every_page(|cursor| pages::diff(&*m.store, &m.ns, None, from, None, None, cursor, 700).unwrap());
    let changed: Vec<EntityId> = diff
        .iter()
        .flat_map(|p| p.datoms.iter().map(|d| d.entity))
        .collect();
    assert_eq!(
        changed,
        [&written[1_500..], &late[..]].concat(),
        "each change once, in order"
    );
    assert!(diff.iter().all(|p| p.as_of == diff[0].as_of));

    // One entity's history a datom at a time.
    let e = written[0];
    m.write(
        agent("admin", Status::Verified, 1.0),
        vec![retract_op(e, ":cap/tag", s("x"))],
    )
    .unwrap();
    m.write(
        agent("admin", Status::Verified, 1.0),
        vec![assert_op(id(e), ":cap/tag", s("y"))],
    )
    .unwrap();
    let one = every_page(|cursor| {
        pages::history(
            &*m.store,
            &m.ns,
            None,
            pages::HistoryOf::Entity {
                entity: e,
                attribute: None,
            },
            pages::Bounds::default(),
            cursor,
            1,
        )
        .unwrap()
    });
    let ops: Vec<(Op, Value)> = one
        .iter()
        .flat_map(|p| p.datoms.iter().map(|d| (d.op, d.value.clone())))
        .collect();
    assert_eq!(
        ops,
        [(Op::Assert, s("x")), (Op::Retract, s("x")), (Op::Assert, s("y"))]
    );
}

#[test]
fn a_cursor_continues_only_its_own_query_and_as_of_point() {
    let mut m = Mem::new("team/a");
    m.declare(vec![
        def(":cap/tag", ValueType::String),
        def(":cap/other", ValueType::String),
    ])
    .unwrap();
    tagged(&mut m, 5, "x");
    let (tag, other) = (attr(":cap/tag"), attr(":cap/other"));
    let store = &*m.store;
    let history = |attr: &Attribute, cursor: &[u8]| {
        pages::history(
            store,
            &m.ns,
            None,
            pages::HistoryOf::Attribute(attr),
            pages::Bounds::default(),
            cursor,
            2,
        )
    };
    let find =
        |opts: &ReadOptions, cursor: &[u8]| pages::find(store, &m.ns, None, &tag, None, opts, cursor, 2);
    let h = history(&tag, &[]).unwrap().next.unwrap();
    let f = find(&ReadOptions::default(), &[]).unwrap().next.unwrap();
    let refused = |answer: Result<pages::Page, ReadError>| match answer {
        Err(ReadError::Cursor(e)) => e,
        other => panic!("expected a refused cursor, got {other:?}"),
    };
    use engram_core::cursor::CursorError;
    assert!(matches!(
        refused(history(&other, &h.encode())),
        CursorError::OtherQuery
    ));
    assert!(matches!(
        refused(find(&ReadOptions::default(), &h.encode())),
        CursorError::OtherKind { .. }
    ));
    let judging_expiry = ReadOptions {
        expired_at_ns: Some(1),
        ..ReadOptions::default()
    };
    assert!(matches!(
        refused(find(&judging_expiry, &f.encode())),
        CursorError::OtherQuery
    ));
    // The request's as-of is part of the query: unset stays unset on every page.
    for as_of in [f.as_of.0 - 1, f.as_of.0] {
        let asking = ReadOptions {
            as_of: Some(TxId(as_of)),
            ..ReadOptions::default()
        };
        assert!(matches!(
            refused(find(&asking, &f.encode())),
            CursorError::OtherQuery
        ));
    }
    // An as-of past the head reads the head, and its cursor goes on.
    let future = ReadOptions {
        as_of: Some(TxId(f.as_of.0 + 1_000)),
        ..ReadOptions::default()
    };
    let first = find(&future, &[]).unwrap();
    assert_eq!(first.as_of, f.as_of);
    assert_eq!(
        find(&future, &first.next.unwrap().encode()).unwrap().datoms.len(),
        2
    );
    // Diff: the lower and upper bounds are part of the query.
    let diff = |from: u64, to: Option<TxId>, cursor: &[u8]| {
        pages::diff(store, &m.ns, None, TxId(from), to, None, cursor, 2)
    };
    let d = diff(0, None, &[]).unwrap().next.unwrap();
    assert_eq!(diff(0, None, &d.encode()).unwrap().datoms.len(), 2);
    assert!(matches!(
        refused(diff(1, None, &d.encode())),
        CursorError::OtherQuery
    ));
    assert!(matches!(
        refused(diff(0, Some(d.as_of), &d.encode())),
        CursorError::OtherQuery
    ));
    let mut ahead = h.clone();
    ahead.as_of = TxId(h.as_of.0 + 10);
    assert!(matches!(
        refused(history(&tag, &ahead.encode())),
        CursorError::Ahead { .. }
    ));
    let mut damaged = h.encode();
    damaged[20] ^= 1;
    assert!(matches!(
        refused(history(&tag, &damaged)),
        CursorError::Malformed(_)
    ));
}

/// Every page of a list, `read(cursor)` answering one with its items and next cursor.
fn every_list_page<T>(mut read: impl FnMut(&[u8]) -> (Vec<T>, Option<Vec<u8>>)) -> Vec<Vec<T>> {
    let mut out = Vec::new();
    let mut cursor: Vec<u8> = Vec::new();
    loop {
        let (items, next) = read(&cursor);
        out.push(items);
        match next {
            Some(next) => cursor = next,
            None => return out,
        }
        assert!(out.len() < 10_000, "the pages never end");
    }
}

#[test]
fn namespaces_are_listed_once_each_in_name_order_and_filtered_by_the_reader() {
    let mut m = Mem::new("team/a");
    tagged(&mut m, 2, "x");
    // A namespace with datoms, one with a declared schema only, one with a branch only.
    m.ns = Namespace::new("team/b").unwrap();
    tagged(&mut m, 1, "y");
    m.ns = Namespace::new("ops").unwrap();
    m.declare(vec![def(":ops/note", ValueType::String)]).unwrap();
    m.ns = Namespace::new("scratch").unwrap();
    m.branch_op(BranchOp::Create {
        name: branch("try"),
        from: None,
    })
    .unwrap();
    let store = &*m.store;
    let list = |readable: &dyn Fn(&Namespace) -> bool, limit: usize| -> Vec<Vec<String>> {
        every_list_page(|cursor| {
            let page = engram_core::lists::namespaces(store, readable, cursor, limit).unwrap();
            (
                page.namespaces.iter().map(|n| n.as_str().to_string()).collect(),
                page.next.map(|c| c.encode()),
            )
        })
    };
    let all = list(&|_| true, 100);
    assert_eq!(all, [["ops", "scratch", "team/a", "team/b"]]);
    let one_by_one = list(&|_| true, 1);
    assert_eq!(one_by_one, [["ops"], ["scratch"], ["team/a"], ["team/b"]]);
    // Only what the reader may read; a page is filled past the ones left out.
    let teams = list(&|n: &Namespace| n.as_str().starts_with("team/"), 1);
    assert_eq!(teams, [["team/a"], ["team/b"]]);
    let none = list(&|_| false, 10);
    assert_eq!(none, [Vec::<String>::new()]);
    // A namespaces cursor continues nothing else.
    let cursor = engram_core::lists::namespaces(store, &|_| true, &[], 1)
        .unwrap()
        .next
        .unwrap()
        .encode();
    let tag = attr(":cap/tag");
    assert!(matches!(
        engram_core::lists::entities(store, &m.ns, Some(&tag), None, &cursor, 1),
        Err(ReadError::Cursor(_))
    ));
}

#[test]
fn entities_are_listed_in_id_order_as_of_a_transaction_by_attribute_or_all() {
    let mut m = Mem::new("team/a");
    let early = tagged(&mut m, 5, "x");
    let first = first_tx(&m, early[0]);
    let receipt = m
        .write(
            agent("admin", Status::Verified, 1.0),
            vec![assert_op(temp("n"), ":cap/note", s("other attribute"))],
        )
        .unwrap();
    let noted = created(&receipt, "n");
    // Retracted: it still exists, with no current value.
    m.write(
        agent("admin", Status::Verified, 1.0),
        vec![retract_op(early[0], ":cap/tag", s("x"))],
    )
    .unwrap();
    let store = &*m.store;
    let tag = attr(":cap/tag");
    let list = |attribute: Option<&Attribute>, as_of: Option<TxId>, limit: usize| -> Vec<EntityId> {
        let pages = every_list_page(|cursor| {
            let page = engram_core::lists::entities(store, &m.ns, attribute, as_of, cursor, limit).unwrap();
            (page.entities, page.next.map(|c| c.encode()))
        });
        assert!(pages.iter().all(|p| p.len() <= limit));
        pages.concat()
    };
    let mut everything = early.clone();
    everything.push(noted);
    everything.sort();
    let mut tagged_sorted = early.clone();
    tagged_sorted.sort();
    assert_eq!(list(None, None, 100), everything);
    assert_eq!(list(None, None, 2), everything, "pages of two, each once");
    assert_eq!(list(Some(&tag), None, 3), tagged_sorted);
    assert_eq!(list(None, Some(first), 4), tagged_sorted, "as of the first write");
    assert!(list(Some(&attr(":cap/none")), None, 4).is_empty());
    // Written between pages: not part of the answer.
    let page = engram_core::lists::entities(&*m.store, &m.ns, None, None, &[], 3).unwrap();
    let late = tagged(&mut m, 3, "z");
    let store = &*m.store;
    let rest =
        engram_core::lists::entities(store, &m.ns, None, None, &page.next.unwrap().encode(), 100).unwrap();
    assert_eq!([page.entities, rest.entities].concat(), everything);
    let now = engram_core::lists::entities(store, &m.ns, None, None, &[], 100).unwrap();
    assert_eq!(now.entities.iter().filter(|e| late.contains(e)).count(), 3);
}

/// Two people, "ann" and "bob", named by `attribute`: their entities.
fn ann_and_bob(m: &mut Mem, attribute: &str) -> (EntityId, EntityId) {
    let people = m
        .write(
            agent("admin", Status::Verified, 1.0),
            vec![
                assert_op(temp("ann"), attribute, s("ann")),
                assert_op(temp("bob"), attribute, s("bob")),
            ],
        )
        .unwrap();
    (created(&people, "ann"), created(&people, "bob"))
}

#[test]
fn referrers_are_the_current_claims_that_point_at_an_entity() {
    let mut m = Mem::new("team/a");
    let mut reviewer = def(":task/reviewer", ValueType::Ref);
    reviewer.cardinality = Cardinality::Many;
    m.declare(vec![
        def(":task/owner", ValueType::Ref),
        reviewer,
        def(":person/name", ValueType::String),
    ])
    .unwrap();
    let admin = agent("admin", Status::Verified, 1.0);
    let (ann, bob) = ann_and_bob(&mut m, ":person/name");
    let ops = (0..5)
        .map(|i| assert_op(temp(&format!("t{i}")), ":task/owner", Value::Ref(ann)))
        .collect();
    let tasks_receipt = m.write(admin.clone(), ops).unwrap();
    let tasks: Vec<EntityId> = (0..5)
        .map(|i| created(&tasks_receipt, &format!("t{i}")))
        .collect();
    let before_moves = tasks_receipt.tx;
    // t2 moves to bob; t3 gets ann as a reviewer too; t4's owner is retracted.
    m.write(
        admin.clone(),
        vec![assert_op(id(tasks[2]), ":task/owner", Value::Ref(bob))],
    )
    .unwrap();
    m.write(
        admin.clone(),
        vec![assert_op(id(tasks[3]), ":task/reviewer", Value::Ref(ann))],
    )
    .unwrap();
    m.write(
        admin.clone(),
        vec![retract_op(tasks[4], ":task/owner", Value::Ref(ann))],
    )
    .unwrap();
    let store = &*m.store;
    let read = |target: EntityId,
                attribute: Option<&Attribute>,
                shows: &dyn Fn(&Attribute) -> bool,
                as_of: Option<TxId>,
                limit: usize|
     -> Vec<(String, EntityId)> {
        let opts = ReadOptions {
            as_of,
            ..ReadOptions::default()
        };
        let pages = every_list_page(|cursor| {
            let page =
                engram_core::lists::referrers(store, &m.ns, target, attribute, shows, &opts, cursor, limit)
                    .unwrap();
            assert!(page.datoms.iter().all(|d| d.value == Value::Ref(target)));
            (page.datoms, page.next.map(|c| c.encode()))
        });
        pages
            .concat()
            .into_iter()
            .map(|d| (d.attribute.as_str().to_string(), d.entity))
            .collect()
    };
    let sorted = |mut v: Vec<EntityId>| {
        v.sort();
        v
    };
    let owned: Vec<(String, EntityId)> = sorted(vec![tasks[0], tasks[1], tasks[3]])
        .into_iter()
        .map(|e| (":task/owner".to_string(), e))
        .collect();
    let reviewing = vec![(":task/reviewer".to_string(), tasks[3])];
    let now = read(ann, None, &|_| true, None, 100);
    assert_eq!(
        now,
        [owned.clone(), reviewing.clone()].concat(),
        "attribute, then entity order"
    );
    assert_eq!(
        read(ann, None, &|_| true, None, 1),
        now,
        "a pair a page, each once"
    );
    assert_eq!(
        read(ann, Some(&attr(":task/reviewer")), &|_| true, None, 1),
        reviewing
    );
    // A hidden attribute never says that it refers.
    let owner_only = |a: &Attribute| a.as_str() == ":task/owner";
    assert_eq!(read(ann, None, &owner_only, None, 1), owned);
    // As of before the moves: all five.
    let then: Vec<EntityId> = read(ann, None, &|_| true, Some(before_moves), 2)
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(then, sorted(tasks.clone()));
    assert_eq!(
        read(bob, None, &|_| true, None, 10),
        [(":task/owner".to_string(), tasks[2])]
    );
    assert!(read(tasks[0], None, &|_| true, None, 10).is_empty());
}

#[test]
fn history_since_and_find_since_and_at_a_valid_instant() {
    let mut m = Mem::new("team/a");
    let early = tagged(&mut m, 3, "x");
    let first = first_tx(&m, early[0]);
    let later = tagged(&mut m, 2, "x");
    let tag = attr(":cap/tag");
    let store = &*m.store;
    let history = |since: Option<TxId>, cursor: &[u8]| {
        pages::history(
            store,
            &m.ns,
            None,
            pages::HistoryOf::Attribute(&tag),
            pages::Bounds {
                since,
                ..pages::Bounds::default()
            },
            cursor,
            1,
        )
    };
    let since: Vec<EntityId> = every_page(|c| history(Some(first), c).unwrap())
        .iter()
        .flat_map(|p| p.datoms.iter().map(|d| d.entity))
        .collect();
    assert_eq!(since, later, "only what was written after the first transaction");
    let all = history(None, &[]).unwrap().next.unwrap().encode();
    assert!(
        matches!(history(Some(first), &all), Err(ReadError::Cursor(_))),
        "the bound is part of the query"
    );
    let find = |opts: &ReadOptions| -> Vec<EntityId> {
        let mut found: Vec<EntityId> = pages::find(store, &m.ns, None, &tag, None, opts, &[], 100)
            .unwrap()
            .datoms
            .iter()
            .map(|d| d.entity)
            .collect();
        found.sort();
        found
    };
    let since_first = ReadOptions {
        since: Some(first),
        ..ReadOptions::default()
    };
    let mut expected = later.clone();
    expected.sort();
    assert_eq!(find(&since_first), expected);
    // Valid time: a claim valid only from an instant after every transaction time (this
    // harness gives transaction n the time n ms) is not current just before it.
    let starts: i64 = 1_000_000_000_000;
    let receipt = m
        .write(
            agent("admin", Status::Verified, 1.0),
            vec![TxOp {
                valid_from_ns: Some(starts),
                ..assert_op(temp("v"), ":cap/tag", s("x"))
            }],
        )
        .unwrap();
    let valid_later = created(&receipt, "v");
    let store = &*m.store;
    let at = |ns: i64| -> Vec<EntityId> {
        let opts = ReadOptions {
            valid_at_ns: Some(ns),
            ..ReadOptions::default()
        };
        pages::find(store, &m.ns, None, &tag, None, &opts, &[], 100)
            .unwrap()
            .datoms
            .iter()
            .map(|d| d.entity)
            .collect()
    };
    assert!(!at(starts - 1).contains(&valid_later));
    assert_eq!(
        at(starts - 1).len(),
        5,
        "the others hold from their transactions' times"
    );
    assert!(at(starts).contains(&valid_later));
    // History at a valid instant: of the attribute (read through its index) and of the entity.
    let history_at = |of: pages::HistoryOf<'_>, ns: i64| -> Vec<EntityId> {
        let bounds = pages::Bounds {
            valid_at_ns: Some(ns),
            ..pages::Bounds::default()
        };
        every_page(|c| pages::history(store, &m.ns, None, of, bounds, c, 2).unwrap())
            .iter()
            .flat_map(|p| p.datoms.iter().map(|d| d.entity))
            .collect()
    };
    let of_attribute = pages::HistoryOf::Attribute(&tag);
    let before = history_at(of_attribute, starts - 1);
    assert_eq!(
        before.len(),
        5,
        "the five written before, valid from their transactions' times"
    );
    assert!(!before.contains(&valid_later));
    assert_eq!(history_at(of_attribute, starts).len(), 6);
    let of_entity = pages::HistoryOf::Entity {
        entity: valid_later,
        attribute: None,
    };
    assert!(history_at(of_entity, starts - 1).is_empty());
    assert_eq!(history_at(of_entity, starts), [valid_later]);
}

/// A query from `find` and `[entity, attribute, value]` clauses, `?`-names as variables.
fn join(find: &[&str], clauses: Vec<(Term, &str, Term)>) -> Query {
    Query::new(
        find.iter().map(|v| Variable::new(*v).unwrap()).collect(),
        clauses.into_iter().map(clause_of).collect(),
    )
    .unwrap()
}

/// One `[entity, attribute, value]` clause, `?`-names as variables.
fn clause_of((e, a, v): (Term, &str, Term)) -> Clause {
    let var = |v: &str| Variable::new(v).unwrap();
    Clause {
        entity: match e {
            Term::Var(n) => EntityTerm::Var(var(n)),
            Term::Id(id) => EntityTerm::Entity(id),
            Term::Val(_) => panic!("a value in an entity position"),
        },
        attribute: attr(a),
        value: match v {
            Term::Var(n) => ValueTerm::Var(var(n)),
            Term::Val(x) => ValueTerm::Value(x),
            Term::Id(id) => ValueTerm::Value(Value::Ref(id)),
        },
    }
}

enum Term {
    Var(&'static str),
    Id(EntityId),
    Val(Value),
}

fn kw(k: &str) -> Value {
    Value::Keyword(k.into())
}

/// Every page of `q` on main at `limit` rows a page, with the first page's plan.
fn query_pages(m: &Mem, q: &Query, opts: &QueryOptions, limit: usize) -> (Vec<Vec<Value>>, Vec<query::Step>) {
    let mut rows = Vec::new();
    let mut cursor: Vec<u8> = Vec::new();
    let mut plan = None;
    loop {
        let page = query::run(&*m.store, &m.ns, None, q, opts, &cursor, limit).unwrap();
        assert!(page.rows.len() <= limit);
        plan.get_or_insert(page.plan);
        rows.extend(page.rows);
        match page.next {
            Some(c) => cursor = c.encode(),
            None => return (rows, plan.unwrap_or_default()),
        }
    }
}

/// Why `q`, run now on main, was refused.
fn refusal(m: &Mem, q: &Query) -> ReadError {
    query::run(&*m.store, &m.ns, None, q, &opts_now(), &[], 100).expect_err("the query is refused")
}

fn opts_now() -> QueryOptions {
    QueryOptions {
        as_of: None,
        valid_at_ns: None,
        expired_at_ns: None,
        max_rows_read: query::DEFAULT_MAX_ROWS_READ,
    }
}

/// `find` terms as written (`"?owner"`, `"(count ?task)"`) with `clauses`.
fn grouped(find: &[&str], clauses: Vec<(Term, &str, Term)>) -> Query {
    Query::new(
        find.iter().map(|t| FindTerm::parse(t).unwrap()).collect(),
        clauses.into_iter().map(clause_of).collect(),
    )
    .unwrap()
}

#[test]
fn an_or_group_extends_each_row_by_any_one_of_its_clauses() {
    let mut m = Mem::new("team/a");
    m.declare(vec![
        indexed_def(":task/status", ValueType::Keyword),
        def(":task/priority", ValueType::I64),
        def(":task/owner", ValueType::Ref),
    ])
    .unwrap();
    let admin = agent("admin", Status::Verified, 1.0);
    // t0 open, t1 blocked, t2 done with priority 5, t3 done; t0 and t1 owned by t3 (any ref).
    let w = m
        .write(
            admin.clone(),
            vec![
                assert_op(temp("t0"), ":task/status", kw(":s/open")),
                assert_op(temp("t1"), ":task/status", kw(":s/blocked")),
                assert_op(temp("t2"), ":task/status", kw(":s/done")),
                assert_op(temp("t2"), ":task/priority", Value::I64(5)),
                assert_op(temp("t3"), ":task/status", kw(":s/done")),
            ],
        )
        .unwrap();
    let t: Vec<EntityId> = (0..4).map(|i| created(&w, &format!("t{i}"))).collect();
    m.write(
        admin.clone(),
        vec![
            assert_op(id(t[0]), ":task/owner", Value::Ref(t[3])),
            assert_op(id(t[1]), ":task/owner", Value::Ref(t[3])),
            // t1 also has priority 5: two alternatives match it, and it is listed once.
            assert_op(id(t[1]), ":task/priority", Value::I64(5)),
        ],
    )
    .unwrap();
    let alt = |e: &'static str, a: &'static str, v: Term| vec![clause_of((Term::Var(e), a, v))];
    let refs = |ids: &[EntityId]| -> Vec<Vec<Value>> {
        let mut ids = ids.to_vec();
        ids.sort();
        ids.into_iter().map(|e| vec![Value::Ref(e)]).collect()
    };
    // Open, blocked or priority 5: t0, t1 (twice matched), t2.
    let q = Query::with_or(
        vec![Variable::new("?t").unwrap()],
        vec![],
        vec![vec![
            alt("?t", ":task/status", Term::Val(kw(":s/open"))),
            alt("?t", ":task/status", Term::Val(kw(":s/blocked"))),
            alt("?t", ":task/priority", Term::Val(Value::I64(5))),
        ]],
    )
    .unwrap();
    let (rows, plan) = query_pages(&m, &q, &opts_now(), 100);
    assert_eq!(rows, refs(&[t[0], t[1], t[2]]));
    assert_eq!(plan.len(), 1);
    assert!(plan[0].is_or());
    assert_eq!(
        plan[0].alternatives,
        [
            [(0, query::Access::ValueIndex)],
            [(0, query::Access::ValueIndex)],
            [(0, query::Access::ScanFiltered)]
        ],
        "each alternative by its own access path"
    );
    assert_eq!(plan[0].rows_out, 3, "t1 once, though two alternatives match it");
    assert_eq!(
        query_pages(&m, &q, &opts_now(), 1).0,
        rows,
        "a row a page, each once"
    );

    // With a clause: the owned tasks that are open or done, counted per owner. The group runs
    // first (both alternatives by the value index), then the owner by slot.
    let owned = Query::with_or(
        vec![
            FindTerm::parse("?o").unwrap(),
            FindTerm::parse("(count ?t)").unwrap(),
        ],
        vec![clause_of((Term::Var("?t"), ":task/owner", Term::Var("?o")))],
        vec![vec![
            alt("?t", ":task/status", Term::Val(kw(":s/open"))),
            alt("?t", ":task/status", Term::Val(kw(":s/done"))),
        ]],
    )
    .unwrap();
    let (rows, plan) = query_pages(&m, &owned, &opts_now(), 100);
    assert_eq!(
        rows,
        [vec![Value::Ref(t[3]), Value::I64(1)]],
        "t0 is open; t1 is blocked"
    );
    assert_eq!(
        plan[0].alternatives,
        [[(0, query::Access::ValueIndex)], [(0, query::Access::ValueIndex)]]
    );
    assert_eq!(
        (plan[1].clause, plan[1].access, plan[1].is_or()),
        (0, query::Access::Slot, false)
    );

    // An alternative through an attribute the namespace never saw is named by its place.
    let unknown = Query::with_or(
        vec![Variable::new("?t").unwrap()],
        vec![],
        vec![vec![
            alt("?t", ":task/status", Term::Val(kw(":s/open"))),
            alt("?t", ":task/nope", Term::Val(Value::I64(1))),
        ]],
    )
    .unwrap();
    match refusal(&m, &unknown) {
        ReadError::UnknownAttribute { field, .. } => {
            assert_eq!(field, "or_clauses[0].alternatives[1].attribute")
        }
        other => panic!("expected an unknown attribute, got {other:?}"),
    }
}

#[test]
fn an_or_alternative_and_a_not_group_join_several_clauses_on_their_own_variables() {
    let mut m = Mem::new("team/g");
    let mut owner = def(":task/owner", ValueType::Ref);
    owner.cardinality = Cardinality::Many;
    m.declare(vec![
        indexed_def(":task/status", ValueType::Keyword),
        owner,
        indexed_def(":agent/team", ValueType::String),
    ])
    .unwrap();
    let admin = agent("admin", Status::Verified, 1.0);
    // ann and bob in infra, cy in web; t0 open and unowned, t1 blocked owned by ann, t2 blocked
    // owned by cy, t3 done owned by bob, t4 blocked owned by ann and cy (cardinality many).
    let w = m
        .write(
            admin.clone(),
            vec![
                assert_op(temp("ann"), ":agent/team", s("infra")),
                assert_op(temp("bob"), ":agent/team", s("infra")),
                assert_op(temp("cy"), ":agent/team", s("web")),
                assert_op(temp("t0"), ":task/status", kw(":s/open")),
                assert_op(temp("t1"), ":task/status", kw(":s/blocked")),
                assert_op(temp("t2"), ":task/status", kw(":s/blocked")),
                assert_op(temp("t3"), ":task/status", kw(":s/done")),
                assert_op(temp("t4"), ":task/status", kw(":s/blocked")),
            ],
        )
        .unwrap();
    let [ann, bob, cy] = ["ann", "bob", "cy"].map(|n| created(&w, n));
    let t: Vec<EntityId> = (0..5).map(|i| created(&w, &format!("t{i}"))).collect();
    m.write(
        admin.clone(),
        vec![
            assert_op(id(t[1]), ":task/owner", Value::Ref(ann)),
            assert_op(id(t[2]), ":task/owner", Value::Ref(cy)),
            assert_op(id(t[3]), ":task/owner", Value::Ref(bob)),
            assert_op(id(t[4]), ":task/owner", Value::Ref(ann)),
            assert_op(id(t[4]), ":task/owner", Value::Ref(cy)),
        ],
    )
    .unwrap();
    let c = |e: &'static str, a: &'static str, v: Term| clause_of((Term::Var(e), a, v));
    let refs = |ids: &[EntityId]| -> Vec<Vec<Value>> {
        let mut ids = ids.to_vec();
        ids.sort();
        ids.into_iter().map(|e| vec![Value::Ref(e)]).collect()
    };
    let infra_owned = vec![
        c("?t", ":task/owner", Term::Var("?o")),
        c("?o", ":agent/team", Term::Val(s("infra"))),
    ];

    // Open, or owned by someone in infra: ?o is the second alternative's own.
    let q = Query::with_or(
        vec![Variable::new("?t").unwrap()],
        vec![],
        vec![vec![
            vec![c("?t", ":task/status", Term::Val(kw(":s/open")))],
            infra_owned.clone(),
        ]],
    )
    .unwrap();
    let (rows, plan) = query_pages(&m, &q, &opts_now(), 100);
    assert_eq!(
        rows,
        refs(&[t[0], t[1], t[3], t[4]]),
        "t4 once, though ann and cy own it"
    );
    assert_eq!(plan[0].binds, [Variable::new("?t").unwrap()]);
    assert_eq!(
        plan[0].alternatives,
        [
            vec![(0, query::Access::ValueIndex)],
            // The team first, by its value index; then each member's tasks by reference.
            vec![(1, query::Access::ValueIndex), (0, query::Access::RefIndex)],
        ]
    );
    assert_eq!(query_pages(&m, &q, &opts_now(), 1).0, rows, "a row a page");

    // The blocked tasks no one in infra owns: a not of two clauses, ?o its own.
    let blocked = Query::new(
        vec![Variable::new("?t").unwrap()],
        vec![c("?t", ":task/status", Term::Val(kw(":s/blocked")))],
    )
    .unwrap();
    let nobody_in_infra = blocked.clone().negated(vec![infra_owned.clone()]).unwrap();
    let (rows, plan) = query_pages(&m, &nobody_in_infra, &opts_now(), 100);
    assert_eq!(rows, refs(&[t[2]]), "t1 and t4 have an owner in infra");
    assert_eq!(plan[0].negations, [0]);
    assert_eq!(plan[0].rows_out, 1);
    // Not the same as a not of its first clause alone (owned by no one): every blocked task
    // has an owner. And a second clause alone, which names nothing bound, is refused.
    let unowned = blocked
        .clone()
        .negated(vec![vec![infra_owned[0].clone()]])
        .unwrap();
    assert!(query_pages(&m, &unowned, &opts_now(), 100).0.is_empty());
    assert!(
        blocked
            .clone()
            .negated(vec![vec![infra_owned[1].clone()]])
            .is_err()
    );

    // As of before the owners were written, every blocked task is kept.
    let then = QueryOptions {
        as_of: Some(w.tx),
        ..opts_now()
    };
    assert_eq!(
        query_pages(&m, &nobody_in_infra, &then, 100).0,
        refs(&[t[1], t[2], t[4]])
    );
    // Moving cy to infra: t2 has an owner in infra now.
    m.write(admin, vec![assert_op(id(cy), ":agent/team", s("infra"))])
        .unwrap();
    assert!(query_pages(&m, &nobody_in_infra, &opts_now(), 100).0.is_empty());

    // Each is part of the query its cursor continues: the same query with the group's clauses
    // apart is another query.
    let page = query::run(&*m.store, &m.ns, None, &q, &opts_now(), &[], 1).unwrap();
    let cursor = page.next.expect("more than one row").encode();
    let split = Query::with_or(
        vec![Variable::new("?t").unwrap()],
        vec![],
        vec![vec![
            vec![c("?t", ":task/status", Term::Val(kw(":s/open")))],
            vec![infra_owned[0].clone()],
        ]],
    );
    // (?o is not named by every alternative, and named by no other unit: still its own.)
    let split = split.unwrap();
    assert!(query::run(&*m.store, &m.ns, None, &split, &opts_now(), &cursor, 1).is_err());
    // A clause of a group through an attribute never seen is named by its place.
    let typo = blocked
        .negated(vec![vec![
            infra_owned[0].clone(),
            c("?o", ":agent/taem", Term::Val(s("infra"))),
        ]])
        .unwrap();
    let err = query::run(&*m.store, &m.ns, None, &typo, &opts_now(), &[], 10).unwrap_err();
    assert!(
        err.to_string().contains("not_clauses[0].clauses[1].attribute"),
        "{err}"
    );
}

#[test]
fn aggregates_fold_each_group_of_the_joined_rows() {
    let mut m = Mem::new("team/a");
    m.declare(vec![
        def(":task/owner", ValueType::Ref),
        def(":task/hours", ValueType::I64),
        def(":task/cost", ValueType::F64),
        def(":agent/name", ValueType::String),
    ])
    .unwrap();
    let admin = agent("admin", Status::Verified, 1.0);
    let people = m
        .write(
            admin.clone(),
            ["ann", "bob", "cid"]
                .iter()
                .map(|n| assert_op(temp(n), ":agent/name", s(n)))
                .collect(),
        )
        .unwrap();
    let (ann, bob) = (created(&people, "ann"), created(&people, "bob"));
    // ann: two tasks of 3 hours (costs 1.5 and 2.0); bob: one of 5 hours (cost 4); cid: none.
    let tasks = [(ann, 3, 1.5), (ann, 3, 2.0), (bob, 5, 4.0)];
    let ops = tasks
        .iter()
        .enumerate()
        .flat_map(|(i, (owner, hours, cost))| {
            let t = format!("t{i}");
            [
                assert_op(temp(&t), ":task/owner", Value::Ref(*owner)),
                assert_op(temp(&t), ":task/hours", Value::I64(*hours)),
                assert_op(temp(&t), ":task/cost", Value::F64(*cost)),
            ]
        })
        .collect();
    m.write(admin.clone(), ops).unwrap();
    let owned = |extra: Vec<(Term, &'static str, Term)>| {
        let mut c = vec![
            (Term::Var("?task"), ":task/owner", Term::Var("?owner")),
            (Term::Var("?task"), ":task/hours", Term::Var("?h")),
        ];
        c.extend(extra);
        c
    };

    // Per owner: a sum over the joined rows counts both of ann's 3-hour tasks (SQL's GROUP BY
    // over joined rows, not a set of hour values); count-distinct counts the values.
    let q = grouped(
        &[
            "?owner",
            "(count ?task)",
            "(sum ?h)",
            "(count-distinct ?h)",
            "(min ?h)",
            "(max ?h)",
            "(avg ?h)",
        ],
        owned(vec![]),
    );
    let (rows, _) = query_pages(&m, &q, &opts_now(), 100);
    let expect = |owner: EntityId, n: i64, sum: i64, distinct: i64, lo: i64, hi: i64, avg: f64| {
        vec![
            Value::Ref(owner),
            Value::I64(n),
            Value::I64(sum),
            Value::I64(distinct),
            Value::I64(lo),
            Value::I64(hi),
            Value::F64(avg),
        ]
    };
    let mut wanted = vec![expect(ann, 2, 6, 1, 3, 3, 3.0), expect(bob, 1, 5, 1, 5, 5, 5.0)];
    wanted.sort_by_key(|r| match r[0] {
        Value::Ref(e) => e,
        _ => unreachable!(),
    });
    assert_eq!(rows, wanted, "cid owns nothing, so no group");
    assert_eq!(
        query_pages(&m, &q, &opts_now(), 1).0,
        wanted,
        "a group a page, each once"
    );

    // No plain variable: one group of every row. Floats sum as f64.
    let all = grouped(
        &["(count ?task)", "(sum ?c)"],
        owned(vec![(Term::Var("?task"), ":task/cost", Term::Var("?c"))]),
    );
    assert_eq!(
        query_pages(&m, &all, &opts_now(), 100).0,
        [vec![Value::I64(3), Value::F64(7.5)]]
    );
    // The owner's name as the group: min and max order strings too.
    let named = grouped(
        &["(min ?name)", "(max ?name)", "(count-distinct ?owner)"],
        owned(vec![(Term::Var("?owner"), ":agent/name", Term::Var("?name"))]),
    );
    assert_eq!(
        query_pages(&m, &named, &opts_now(), 100).0,
        [vec![s("ann"), s("bob"), Value::I64(2)]]
    );
    // Nothing joins: no row at all (not a count of 0).
    let none = grouped(
        &["(count ?task)"],
        owned(vec![(
            Term::Var("?task"),
            ":task/owner",
            Term::Id(EntityId(999_999)),
        )]),
    );
    assert!(query_pages(&m, &none, &opts_now(), 100).0.is_empty());

    // A sum of strings is refused, naming the find entry and what it met.
    let words = grouped(
        &["(sum ?name)"],
        vec![(Term::Var("?a"), ":agent/name", Term::Var("?name"))],
    );
    match refusal(&m, &words) {
        ReadError::Aggregate(why) => assert_eq!(
            why,
            "find[0] (sum ?name): ?name holds a string value, and sum takes numbers (i64, f64)"
        ),
        other => panic!("expected a refused aggregate, got {other:?}"),
    }
    // A whole-number sum past i64 is refused rather than wrapped.
    m.write(
        admin.clone(),
        vec![
            assert_op(temp("big"), ":task/owner", Value::Ref(bob)),
            assert_op(temp("big"), ":task/hours", Value::I64(i64::MAX)),
        ],
    )
    .unwrap();
    let total = grouped(&["(sum ?h)"], owned(vec![]));
    match refusal(&m, &total) {
        ReadError::Aggregate(why) => assert!(why.contains("sums past the i64 range"), "{why}"),
        other => panic!("expected an overflow refused, got {other:?}"),
    }
}

#[test]
fn a_join_answers_the_rows_that_satisfy_every_clause_as_of_one_point() {
    let mut m = Mem::new("team/a");
    m.declare(vec![
        def(":task/owner", ValueType::Ref),
        indexed_def(":task/status", ValueType::Keyword),
        def(":agent/team", ValueType::String),
        def(":agent/name", ValueType::String),
    ])
    .unwrap();
    let admin = agent("admin", Status::Verified, 1.0);
    let people = m
        .write(
            admin.clone(),
            ["ann:infra", "bob:infra", "cid:web"]
                .iter()
                .flat_map(|p| {
                    let (name, team) = p.split_once(':').unwrap();
                    [
                        assert_op(temp(name), ":agent/name", s(name)),
                        assert_op(temp(name), ":agent/team", s(team)),
                    ]
                })
                .collect(),
        )
        .unwrap();
    let (ann, bob, cid) = (
        created(&people, "ann"),
        created(&people, "bob"),
        created(&people, "cid"),
    );
    // t0 ann open, t1 bob open, t2 cid open, t3 ann done, t4 bob open.
    let plan = [
        (ann, "open"),
        (bob, "open"),
        (cid, "open"),
        (ann, "done"),
        (bob, "open"),
    ];
    let ops = plan
        .iter()
        .enumerate()
        .flat_map(|(i, (owner, st))| {
            let t = format!("t{i}");
            [
                assert_op(temp(&t), ":task/owner", Value::Ref(*owner)),
                assert_op(temp(&t), ":task/status", kw(&format!(":status/{st}"))),
            ]
        })
        .collect();
    let receipt = m.write(admin.clone(), ops).unwrap();
    let t: Vec<EntityId> = (0..5).map(|i| created(&receipt, &format!("t{i}"))).collect();
    let before = receipt.tx;
    // t1 moves to cid; t4 is closed by a retraction of its status.
    m.write(
        admin.clone(),
        vec![assert_op(id(t[1]), ":task/owner", Value::Ref(cid))],
    )
    .unwrap();
    m.write(
        admin.clone(),
        vec![retract_op(t[4], ":task/status", kw(":status/open"))],
    )
    .unwrap();

    // The open tasks of team infra, with their owner's name.
    let q = join(
        &["?task", "?name"],
        vec![
            (Term::Var("?task"), ":task/status", Term::Val(kw(":status/open"))),
            (Term::Var("?task"), ":task/owner", Term::Var("?a")),
            (Term::Var("?a"), ":agent/team", Term::Val(s("infra"))),
            (Term::Var("?a"), ":agent/name", Term::Var("?name")),
        ],
    );
    let row = |task: EntityId, name: &str| vec![Value::Ref(task), s(name)];
    let (now, plan) = query_pages(&m, &q, &opts_now(), 100);
    assert_eq!(now, vec![row(t[0], "ann")], "t1 moved to web, t4 closed, t3 done");
    let steps: Vec<(usize, query::Access)> = plan.iter().map(|s| (s.clause, s.access)).collect();
    assert_eq!(
        steps,
        [
            (0, query::Access::ValueIndex),
            (1, query::Access::Slot),
            (2, query::Access::Slot),
            (3, query::Access::Slot)
        ],
        "the indexed value first, then slots by the bound entities"
    );
    assert_eq!(plan[0].rows_out, 3, "t0, t1 and t2 are open now");
    assert_eq!(plan[1].binds, [Variable::new("?a").unwrap()]);
    // As of before the moves: t1 (bob's) and t4 (bob's, open) too, each row once.
    let then = QueryOptions {
        as_of: Some(before),
        ..opts_now()
    };
    let mut expected = vec![row(t[0], "ann"), row(t[1], "bob"), row(t[4], "bob")];
    expected.sort_by_key(|r| match r[0] {
        Value::Ref(e) => e,
        _ => unreachable!(),
    });
    assert_eq!(query_pages(&m, &q, &then, 100).0, expected);
    assert_eq!(
        query_pages(&m, &q, &then, 1).0,
        expected,
        "a row a page, each once"
    );

    // Without indexes: the team read once and looked up by value, then the tasks referring
    // to each of its agents through the reverse-reference index.
    let by_team = join(
        &["?task"],
        vec![
            (Term::Var("?task"), ":task/owner", Term::Var("?a")),
            (Term::Var("?a"), ":agent/team", Term::Val(s("web"))),
        ],
    );
    let refs = |mut ids: Vec<EntityId>| -> Vec<Vec<Value>> {
        ids.sort();
        ids.into_iter().map(|e| vec![Value::Ref(e)]).collect()
    };
    let (rows, plan) = query_pages(&m, &by_team, &opts_now(), 100);
    assert_eq!(rows, refs(vec![t[1], t[2]]));
    let steps: Vec<(usize, query::Access)> = plan.iter().map(|s| (s.clause, s.access)).collect();
    assert_eq!(
        steps,
        [(1, query::Access::ScanFiltered), (0, query::Access::RefIndex)]
    );
    // An entity id in the entity position, and the same variable twice.
    let of_t3 = join(&["?st"], vec![(Term::Id(t[3]), ":task/status", Term::Var("?st"))]);
    assert_eq!(
        query_pages(&m, &of_t3, &opts_now(), 10).0,
        vec![vec![kw(":status/done")]]
    );
    // Rows are distinct: every owner of an open task, once.
    let owners = join(
        &["?a"],
        vec![
            (Term::Var("?t"), ":task/status", Term::Val(kw(":status/open"))),
            (Term::Var("?t"), ":task/owner", Term::Var("?a")),
        ],
    );
    assert_eq!(
        query_pages(&m, &owners, &then, 100).0,
        refs(vec![ann, bob, cid]),
        "four open tasks then, bob owning two: each owner once"
    );

    // Pages read as of the first page, whatever is written meanwhile.
    let first = query::run(&*m.store, &m.ns, None, &q, &then, &[], 1).unwrap();
    m.write(
        admin.clone(),
        vec![assert_op(id(t[0]), ":task/owner", Value::Ref(cid))],
    )
    .unwrap();
    let second = query::run(
        &*m.store,
        &m.ns,
        None,
        &q,
        &then,
        &first.next.unwrap().encode(),
        1,
    )
    .unwrap();
    assert_eq!(second.rows, vec![expected[1].clone()]);
    assert_eq!(query_pages(&m, &q, &opts_now(), 100).0, Vec::<Vec<Value>>::new());

    // A redacted claim matches nothing: t2's owner taken, t2 no longer joins team web.
    let redact = engram_types::RedactRequest {
        namespace: m.ns.clone(),
        entity: t[2],
        attribute: Some(attr(":task/owner")),
        reason: "test".into(),
        provenance: admin.clone(),
    };
    m.log += 1;
    m.engine
        .apply_redaction(
            m.log,
            1_000_000 * m.log as i64,
            &redact,
            None,
            &engram_core::PolicyActor::Unsigned(None),
            WriteBatch::new(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        query_pages(&m, &by_team, &opts_now(), 100).0,
        refs(vec![t[0], t[1]]),
        "t0 and t1 are cid's now; t2's owner is forgotten"
    );
}

#[test]
fn a_join_refuses_what_it_cannot_answer_whole() {
    let mut m = Mem::new("team/a");
    let admin = agent("admin", Status::Verified, 1.0);
    let ops = (0..30)
        .flat_map(|i| {
            [
                assert_op(temp(&format!("e{i}")), ":cap/tag", s("x")),
                assert_op(temp(&format!("e{i}")), ":cap/size", Value::I64(i)),
            ]
        })
        .collect();
    m.write(admin.clone(), ops).unwrap();
    let tagged_sizes = join(
        &["?e", "?n"],
        vec![
            (Term::Var("?e"), ":cap/tag", Term::Val(s("x"))),
            (Term::Var("?e"), ":cap/size", Term::Var("?n")),
        ],
    );
    let (rows, _) = query_pages(&m, &tagged_sizes, &opts_now(), 7);
    assert_eq!(rows.len(), 30, "every row once across pages of 7");
    let run = |q: &Query, opts: &QueryOptions, cursor: &[u8]| {
        query::run(&*m.store, &m.ns, None, q, opts, cursor, 100)
    };
    // The work limit: never a partial answer.
    let tight = QueryOptions {
        max_rows_read: 20,
        ..opts_now()
    };
    match run(&tagged_sizes, &tight, &[]) {
        Err(ReadError::TooCostly(m)) => {
            assert!(m.contains("clauses[0] [?e :cap/tag \"x\"]"), "{m}");
            assert!(m.contains("max_rows_read"), "{m}");
        }
        other => panic!("expected TooCostly, got {other:?}"),
    }
    // A clause joined to nothing before it says it is a cartesian product.
    let product = join(
        &["?e", "?f"],
        vec![
            (Term::Var("?e"), ":cap/tag", Term::Val(s("x"))),
            (Term::Var("?f"), ":cap/size", Term::Var("?n")),
        ],
    );
    let budget = QueryOptions {
        max_rows_read: 70,
        ..opts_now()
    };
    match run(&product, &budget, &[]) {
        Err(ReadError::TooCostly(m)) => assert!(m.contains("cartesian product"), "{m}"),
        other => panic!("expected TooCostly, got {other:?}"),
    }
    assert_eq!(
        run(&product, &opts_now(), &[]).unwrap().rows.len(),
        100,
        "30 × 30, a page of 100"
    );
    // An attribute neither declared nor written is named.
    let typo = join(
        &["?e"],
        vec![
            (Term::Var("?e"), ":cap/tag", Term::Val(s("x"))),
            (Term::Var("?e"), ":cap/sise", Term::Var("?n")),
        ],
    );
    match run(&typo, &opts_now(), &[]) {
        Err(e @ ReadError::UnknownAttribute { .. }) => assert_eq!(
            e.to_string(),
            "clauses[1].attribute: attribute :cap/sise is neither declared nor written in this namespace"
        ),
        other => panic!("expected UnknownAttribute, got {other:?}"),
    }
    // A cursor continues only its own query.
    let cursor = run(&tagged_sizes, &opts_now(), &[]).unwrap();
    let first = query::run(&*m.store, &m.ns, None, &tagged_sizes, &opts_now(), &[], 5).unwrap();
    assert!(cursor.next.is_none());
    let other = join(&["?e"], vec![(Term::Var("?e"), ":cap/tag", Term::Var("?v"))]);
    assert!(matches!(
        run(&other, &opts_now(), &first.next.unwrap().encode()),
        Err(ReadError::Cursor(engram_core::cursor::CursorError::OtherQuery))
    ));
}

#[test]
fn a_join_leaves_out_expired_entities_and_reads_a_branch() {
    let mut m = Mem::new("team/a");
    let admin = agent("admin", Status::Verified, 1.0);
    let r = m
        .write(
            admin.clone(),
            vec![
                assert_op(temp("p"), ":note/text", s("deploy friday")),
                assert_op(temp("p"), reads::MEMORY_EXPIRES, Value::Instant(5_000)),
                assert_op(temp("q"), ":note/text", s("keep")),
            ],
        )
        .unwrap();
    let (p, q) = (created(&r, "p"), created(&r, "q"));
    let notes = join(&["?n"], vec![(Term::Var("?n"), ":note/text", Term::Var("?t"))]);
    let at = |now_ns| QueryOptions {
        expired_at_ns: Some(now_ns),
        ..opts_now()
    };
    let ids = |rows: Vec<Vec<Value>>| rows.into_iter().map(|r| r[0].clone()).collect::<Vec<_>>();
    let mut both = vec![p, q];
    both.sort();
    assert_eq!(
        ids(query_pages(&m, &notes, &at(4_999), 10).0),
        both.into_iter().map(Value::Ref).collect::<Vec<_>>()
    );
    assert_eq!(ids(query_pages(&m, &notes, &at(5_000), 10).0), [Value::Ref(q)]);
    assert_eq!(
        ids(query_pages(&m, &notes, &opts_now(), 10).0).len(),
        2,
        "expiry not judged"
    );

    m.branch_op(BranchOp::Create {
        name: branch("try"),
        from: None,
    })
    .unwrap();
    m.write(admin.clone(), vec![assert_op(id(q), ":note/mark", s("kept"))])
        .unwrap();
    m.write_on("try", vec![assert_op(id(q), ":note/mark", s("changed"))])
        .unwrap();
    let changed = join(
        &["?n"],
        vec![(Term::Var("?n"), ":note/mark", Term::Val(s("changed")))],
    );
    let on_branch = query::run(
        &*m.store,
        &m.ns,
        Some(&branch("try")),
        &changed,
        &opts_now(),
        &[],
        10,
    )
    .unwrap();
    assert_eq!(on_branch.rows, vec![vec![Value::Ref(q)]]);
    assert!(
        query_pages(&m, &changed, &opts_now(), 10).0.is_empty(),
        "main is unchanged"
    );
}

#[test]
fn a_join_reads_an_entity_of_many_rows_a_slot_at_a_time_with_the_same_answer() {
    let mut m = Mem::new("team/a");
    let admin = agent("admin", Status::Verified, 1.0);
    // One entity of 300 rows (more than a run reads whole), one of three.
    let mut ops: Vec<TxOp> = (0..298)
        .map(|i| assert_op(temp("big"), &format!(":big/v{i}"), Value::I64(i)))
        .collect();
    ops.extend([
        assert_op(temp("big"), ":cap/tag", s("x")),
        assert_op(temp("big"), ":cap/size", Value::I64(300)),
        assert_op(temp("small"), ":cap/tag", s("x")),
        assert_op(temp("small"), ":cap/size", Value::I64(3)),
        assert_op(temp("small"), ":big/v7", Value::I64(7)),
    ]);
    let r = m.write(admin, ops).unwrap();
    let (big, small) = (created(&r, "big"), created(&r, "small"));
    let q = join(
        &["?e", "?n", "?v"],
        vec![
            (Term::Var("?e"), ":cap/tag", Term::Val(s("x"))),
            (Term::Var("?e"), ":cap/size", Term::Var("?n")),
            (Term::Var("?e"), ":big/v7", Term::Var("?v")),
        ],
    );
    let mut expected = vec![
        vec![Value::Ref(big), Value::I64(300), Value::I64(7)],
        vec![Value::Ref(small), Value::I64(3), Value::I64(7)],
    ];
    expected.sort_by_key(|r| match r[0] {
        Value::Ref(e) => e,
        _ => unreachable!(),
    });
    let (rows, plan) = query_pages(&m, &q, &opts_now(), 10);
    assert_eq!(rows, expected);
    // The small entity was read whole (3 rows once), the big one a slot at a time after its
    // first 257 rows were seen.
    let read: u64 = plan.iter().map(|s| s.rows_read).sum();
    assert!(read > 257 && read < 300, "{read} rows read");
}

/// `q` with the `not` clauses `nots`.
fn without(q: Query, nots: Vec<(Term, &str, Term)>) -> Query {
    q.negated(nots.into_iter().map(|n| vec![clause_of(n)]).collect())
        .unwrap()
}

#[test]
fn a_not_clause_keeps_the_rows_for_which_its_pattern_matches_no_current_claim() {
    let mut m = Mem::new("team/n");
    m.declare(vec![
        def(":task/owner", ValueType::Ref),
        indexed_def(":task/status", ValueType::Keyword),
        indexed_def(":task/title", ValueType::String),
        def(":agent/name", ValueType::String),
    ])
    .unwrap();
    let admin = agent("admin", Status::Verified, 1.0);
    let (ann, bob) = ann_and_bob(&mut m, ":agent/name");
    let tasks = m
        .write(
            admin.clone(),
            vec![
                assert_op(temp("t0"), ":task/status", kw(":status/open")),
                assert_op(temp("t0"), ":task/owner", Value::Ref(ann)),
                assert_op(temp("t0"), ":task/title", s("ann")),
                assert_op(temp("t1"), ":task/status", kw(":status/open")),
                assert_op(temp("t2"), ":task/status", kw(":status/done")),
                assert_op(temp("t2"), ":task/owner", Value::Ref(bob)),
            ],
        )
        .unwrap();
    let t: Vec<EntityId> = (0..3).map(|i| created(&tasks, &format!("t{i}"))).collect();
    let refs = |ids: &[EntityId]| -> Vec<Vec<Value>> { ids.iter().map(|e| vec![Value::Ref(*e)]).collect() };

    // The open tasks nobody owns (the entity bound: each task's owner slot; ?anyone local).
    let unowned = without(
        join(
            &["?t"],
            vec![(Term::Var("?t"), ":task/status", Term::Val(kw(":status/open")))],
        ),
        vec![(Term::Var("?t"), ":task/owner", Term::Var("?anyone"))],
    );
    let (rows, plan) = query_pages(&m, &unowned, &opts_now(), 100);
    assert_eq!(rows, refs(&[t[1]]));
    assert_eq!(plan[0].negations, [0], "asked once ?t is bound");
    assert_eq!(plan[0].rows_out, 1);

    // The people no task is owned by (the value bound: the reverse-reference index; ?t local).
    let idle = without(
        join(&["?p"], vec![(Term::Var("?p"), ":agent/name", Term::Var("?n"))]),
        vec![(Term::Var("?t"), ":task/owner", Term::Var("?p"))],
    );
    assert!(
        query_pages(&m, &idle, &opts_now(), 100).0.is_empty(),
        "ann owns t0, bob t2"
    );
    let freed = m
        .write(
            admin.clone(),
            vec![retract_op(t[2], ":task/owner", Value::Ref(bob))],
        )
        .unwrap();
    assert_eq!(query_pages(&m, &idle, &opts_now(), 100).0, refs(&[bob]));
    // A not clause reads as of the query's point like any clause.
    let then = QueryOptions {
        as_of: Some(tasks.tx),
        ..opts_now()
    };
    assert!(query_pages(&m, &idle, &then, 100).0.is_empty());
    // t0 moves to bob: ann is idle now, bob is not (the current claim, not the history).
    m.write(
        admin.clone(),
        vec![assert_op(id(t[0]), ":task/owner", Value::Ref(bob))],
    )
    .unwrap();
    assert_eq!(query_pages(&m, &idle, &opts_now(), 100).0, refs(&[ann]));
    let at_freed = QueryOptions {
        as_of: Some(freed.tx),
        ..opts_now()
    };
    assert_eq!(query_pages(&m, &idle, &at_freed, 100).0, refs(&[bob]));

    // The names no task is titled with (a value index, ?t local), and a not clause with a
    // constant value beside a bound entity (the tasks not open).
    let untitled = without(
        join(&["?n"], vec![(Term::Var("?p"), ":agent/name", Term::Var("?n"))]),
        vec![(Term::Var("?t"), ":task/title", Term::Var("?n"))],
    );
    assert_eq!(
        query_pages(&m, &untitled, &opts_now(), 100).0,
        vec![vec![s("bob")]]
    );
    let not_open = without(
        join(&["?t"], vec![(Term::Var("?t"), ":task/status", Term::Var("?s"))]),
        vec![(Term::Var("?t"), ":task/status", Term::Val(kw(":status/open")))],
    );
    assert_eq!(query_pages(&m, &not_open, &opts_now(), 100).0, refs(&[t[2]]));

    // A not clause is part of the query its cursor continues; one of an attribute never
    // declared nor written is refused, naming it.
    let first = query::run(&*m.store, &m.ns, None, &not_open, &opts_now(), &[], 1).unwrap();
    assert!(first.next.is_none());
    let cursor = query::run(&*m.store, &m.ns, None, &unowned, &opts_now(), &[], 1)
        .unwrap()
        .next;
    assert!(cursor.is_none(), "one row, one page");
    let plain = join(&["?t"], vec![(Term::Var("?t"), ":task/status", Term::Var("?s"))]);
    let page = query::run(&*m.store, &m.ns, None, &plain, &opts_now(), &[], 1).unwrap();
    let other = query::run(
        &*m.store,
        &m.ns,
        None,
        &not_open,
        &opts_now(),
        &page.next.expect("three tasks, a row a page").encode(),
        1,
    );
    assert!(other.is_err(), "a cursor of the query without the not clause");
    let typo = without(plain, vec![(Term::Var("?t"), ":task/ownr", Term::Var("?o"))]);
    let err = query::run(&*m.store, &m.ns, None, &typo, &opts_now(), &[], 10).unwrap_err();
    assert!(err.to_string().contains("not_clauses[0].attribute"), "{err}");
}

#[test]
fn a_join_keeps_the_rows_its_filters_pass_applied_once_their_variables_are_bound() {
    use engram_types::query::{Compare, Filter};
    let mut m = Mem::new("team/a");
    let admin = agent("admin", Status::Verified, 1.0);
    let ops = (0..30)
        .flat_map(|i| {
            let e = format!("e{i}");
            [
                assert_op(temp(&e), ":cap/tag", s(if i % 2 == 0 { "even" } else { "odd" })),
                assert_op(temp(&e), ":cap/size", Value::I64(i)),
                assert_op(temp(&e), ":cap/limit", Value::I64(10)),
            ]
        })
        .collect();
    m.write(admin, ops).unwrap();
    let sizes = |rows: Vec<Vec<Value>>| -> Vec<i64> {
        let mut out: Vec<i64> = rows
            .into_iter()
            .map(|r| match r[1] {
                Value::I64(n) => n,
                _ => unreachable!(),
            })
            .collect();
        out.sort();
        out
    };
    let var = |v: &str| Variable::new(v).unwrap();
    let base = join(
        &["?e", "?n"],
        vec![
            (Term::Var("?e"), ":cap/tag", Term::Val(s("even"))),
            (Term::Var("?e"), ":cap/size", Term::Var("?n")),
            (Term::Var("?e"), ":cap/limit", Term::Var("?l")),
        ],
    );
    let with = |filters: Vec<Filter>| base.clone().filtered(filters).unwrap();
    let above = with(vec![Filter {
        op: Compare::Gt,
        left: var("?n"),
        right: ValueTerm::Value(Value::I64(20)),
    }]);
    let (rows, plan) = query_pages(&m, &above, &opts_now(), 100);
    assert_eq!(sizes(rows), [22, 24, 26, 28]);
    assert_eq!(plan[1].filters, [0], "applied as soon as ?n is bound");
    assert_eq!(plan[1].rows_out, 4);
    // Two variables: sizes under each entity's own limit.
    let under = with(vec![Filter {
        op: Compare::Lt,
        left: var("?n"),
        right: ValueTerm::Var(var("?l")),
    }]);
    let (rows, plan) = query_pages(&m, &under, &opts_now(), 100);
    assert_eq!(sizes(rows), [0, 2, 4, 6, 8]);
    assert_eq!(plan[2].filters, [0], "applied once ?l is bound too");
    // Kinds are never ordered: a string bound never passes `<`, always passes `!=`.
    let string = |op| {
        with(vec![Filter {
            op,
            left: var("?n"),
            right: ValueTerm::Value(s("20")),
        }])
    };
    assert!(
        query_pages(&m, &string(Compare::Lt), &opts_now(), 100)
            .0
            .is_empty()
    );
    assert_eq!(
        query_pages(&m, &string(Compare::Ne), &opts_now(), 100).0.len(),
        15
    );
    // A filter is part of the query its cursor continues.
    let first = query::run(&*m.store, &m.ns, None, &above, &opts_now(), &[], 1).unwrap();
    let other = with(vec![Filter {
        op: Compare::Ge,
        left: var("?n"),
        right: ValueTerm::Value(Value::I64(20)),
    }]);
    assert!(matches!(
        query::run(
            &*m.store,
            &m.ns,
            None,
            &other,
            &opts_now(),
            &first.next.unwrap().encode(),
            1
        ),
        Err(ReadError::Cursor(_))
    ));
}

/// Redacts `e` (or its `attribute`) as a leader of this build proposes it: parts of at most
/// `limit` datoms, each taking values out of a slot whole and reaching branches (or, with
/// `on_branches` false, as an entry from before branches were reached), one after another until
/// nothing is left. Returns every datom taken, as listed and as stored now.
fn redact_in_parts(
    m: &mut Mem,
    e: EntityId,
    attribute: Option<&str>,
    limit: u32,
    on_branches: bool,
) -> Result<Vec<(engram_types::redact::RedactedRef, engram_types::Datom)>, Rejection> {
    use engram_core::redact;
    let req = engram_types::RedactRequest {
        namespace: m.ns.clone(),
        entity: e,
        attribute: attribute.map(attr),
        reason: "erasure request 12".into(),
        provenance: agent("dpo", Status::Verified, 1.0),
    };
    redact::targets(
        &*m.store,
        &req,
        engram_types::RedactRequest::MAX_DATOMS,
        on_branches,
    )
    .unwrap()?;
    let mut part = engram_types::RedactPart {
        first_tx: None,
        after_key: None,
        limit,
    };
    let mut taken = Vec::new();
    loop {
        m.log += 1;
        m.engine.redact_whole_values(true);
        m.engine.redact_on_branches(on_branches);
        let applied = m.engine.apply_redaction(
            m.log,
            1_000_000 * m.log as i64,
            &req,
            Some(&part),
            &engram_core::PolicyActor::Unsigned(None),
            WriteBatch::new(),
        );
        m.engine.redact_on_branches(false);
        let receipt = applied.unwrap()?;
        let this = redact::redacted_by(&*m.store, receipt.tx).unwrap();
        let first_tx = part.first_tx.unwrap_or(receipt.tx);
        let after = redact::last_key_of(&m.ns, &this).unwrap();
        let full = this.len() >= part.applied_limit();
        taken.extend(this);
        if !full || !redact::more_after(&*m.store, &req, first_tx, &after, on_branches).unwrap() {
            return Ok(taken);
        }
        part = engram_types::RedactPart {
            first_tx: Some(first_tx),
            after_key: Some(after),
            limit,
        };
    }
}

/// Whether any state row holds `needle`.
fn state_holds(m: &Mem, needle: &[u8]) -> bool {
    m.state().iter().any(|(k, v)| {
        [k, v]
            .iter()
            .any(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
    })
}

#[test]
fn an_entity_redaction_reaches_its_datoms_on_every_branch_and_the_chain_still_verifies() {
    let setup = || {
        let mut m = Mem::new("team/a");
        let who = agent("crm", Status::Candidate, 0.9);
        let seed = m
            .write(
                who.clone(),
                vec![
                    assert_op(temp("p"), ":person/email", s("ada@main.example")),
                    assert_op(temp("p"), ":person/name", s("Ada")),
                    assert_op(temp("q"), ":person/name", s("Grace")),
                ],
            )
            .unwrap();
        let (p, q) = (created(&seed, "p"), created(&seed, "q"));
        for name in ["open", "merged", "gone"] {
            m.branch_op(BranchOp::Create {
                name: branch(name),
                from: None,
            })
            .unwrap();
        }
        // On `open`: main's email retracted and another asserted (the branch's fold matches its
        // retraction with main's assertion), and an entity made on the branch.
        let made = m
            .write_on(
                "open",
                vec![
                    retract_op(p, ":person/email", s("ada@main.example")),
                    assert_op(id(p), ":person/email", s("ada@open.example")),
                    assert_op(temp("u"), ":person/email", s("ula@open.example")),
                ],
            )
            .unwrap();
        let u = created(&made, "u");
        // On `merged`: an attribute main never had, merged into main.
        m.write_on("merged", vec![assert_op(id(p), ":person/phone", s("555-0199"))])
            .unwrap();
        m.branch_op(BranchOp::Merge {
            name: branch("merged"),
        })
        .unwrap();
        // On `gone`: a value written and the branch abandoned.
        m.write_on("gone", vec![assert_op(id(p), ":person/name", s("Ada L."))])
            .unwrap();
        m.branch_op(BranchOp::Abandon { name: branch("gone") }).unwrap();
        (m, p, q, u)
    };
    let forgotten: [&[u8]; 4] = [b"ada@main.example", b"ada@open.example", b"555-0199", b"Ada L."];

    let (mut m, p, q, u) = setup();
    let read = |m: &Mem, on: Option<&str>| m.facts(p, on, ReadOptions::default()).current;
    let before: Vec<Vec<engram_types::Datom>> = [None, Some("open"), Some("merged"), Some("gone")]
        .map(|on| read(&m, on))
        .into();
    assert!(state_holds(&m, b"ada@open.example") && state_holds(&m, b"555-0199"));

    // Parts of two datoms: the scan goes through main's rows of the entity, then each
    // branch's; a main slot's branch datoms go with it.
    let taken = redact_in_parts(&mut m, p, None, 2, true).unwrap();
    let on_branches: Vec<Option<String>> = taken
        .iter()
        .map(|(_, d)| d.branch.as_ref().map(|b| b.to_string()))
        .collect();
    for name in ["open", "merged", "gone"] {
        assert!(
            on_branches.contains(&Some(name.to_string())),
            "the redaction took p's datoms on {name}: {on_branches:?}"
        );
    }
    for needle in forgotten {
        assert!(
            !state_holds(&m, needle),
            "{} is still in the state",
            String::from_utf8_lossy(needle)
        );
    }
    assert_eq!(
        m.value(q, ":person/name", None),
        Some(s("Grace")),
        "q, not named, keeps its values"
    );
    // Every branch still answers the same claims for p, each with a marker for its value: the
    // branch's fold met main's redacted assertion with its redacted retraction.
    for (i, on) in [None, Some("open"), Some("merged"), Some("gone")]
        .into_iter()
        .enumerate()
    {
        let after = read(&m, on);
        assert_eq!(after.len(), before[i].len(), "{on:?}: {after:?}");
        for (b, a) in before[i].iter().zip(&after) {
            assert_eq!(
                (a.hash(), a.attribute.clone()),
                (b.hash(), b.attribute.clone()),
                "{on:?}"
            );
            assert!(a.value.redacted().is_some(), "{on:?}: {a:?}");
        }
    }
    assert_eq!(m.scrub_findings(), Vec::<String>::new());
    let export = |m: &Mem| {
        let mut out = Vec::new();
        engram_core::export::write_export(&*m.store, &mut out, 1, |_, _| {}).unwrap();
        out
    };
    let options = engram_verify::VerifyOptions::default();
    let report = engram_verify::verify_export(&export(&m)[..], &options, |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.failures);

    // An entity made on a branch, with no datom on main, is found there.
    let ula = redact_in_parts(&mut m, u, None, 100, true).unwrap();
    assert_eq!(ula.len(), 1);
    assert!(!state_holds(&m, b"ula@open.example"));
    // Nothing is left of p; an entity nowhere is unknown.
    assert!(matches!(
        redact_in_parts(&mut m, p, None, 100, true),
        Err(Rejection::NothingToRedact(_))
    ));
    assert_eq!(
        redact_in_parts(&mut m, EntityId(987_654), None, 100, true).unwrap_err(),
        Rejection::UnknownEntity(EntityId(987_654))
    );
    // The open branch merges what is left: its redacted datoms are not replayed onto main.
    m.branch_op(BranchOp::Merge { name: branch("open") }).unwrap();
    assert!(read(&m, None).iter().all(|d| d.value.redacted().is_some()));
    assert_eq!(m.scrub_findings(), Vec::<String>::new());
    let report = engram_verify::verify_export(&export(&m)[..], &options, |_, _| {}).unwrap();
    assert!(report.ok(), "{:?}", report.failures);

    // An entry from before redactions reached branches applies as it did: main only.
    let (mut old, p, _, _) = setup();
    let taken = redact_in_parts(&mut old, p, None, 2, false).unwrap();
    assert!(taken.iter().all(|(_, d)| d.branch.is_none()));
    assert!(state_holds(&old, b"ada@open.example") && state_holds(&old, b"Ada L."));
}

/// Redacts what `predicate` matches in `m`'s namespace as a leader of this build proposes it:
/// range after range, each planned and then applied reaching branches (or, with `on_branches`
/// false, as entries from before). Returns every datom taken, as stored now.
fn redact_where_in_ranges(
    m: &mut Mem,
    predicate: engram_types::Predicate,
    on_branches: bool,
) -> Vec<engram_types::Datom> {
    use engram_core::redact_where::{self, Groups, Plan};
    let req = engram_types::RedactWhere {
        namespace: m.ns.clone(),
        predicate,
        reason: "consent withdrawn".into(),
        provenance: agent("dpo", Status::Verified, 1.0),
    };
    let (mut first, mut after, mut taken) = (None, None::<Vec<u8>>, Vec::new());
    loop {
        let plan = redact_where::plan_range(
            &*m.store,
            &req,
            None,
            Groups::Whole,
            first,
            after.as_deref(),
            2,
            50,
            on_branches,
        )
        .unwrap();
        let range = match plan {
            Plan::Done => return taken,
            Plan::Skip { after: next } => {
                after = Some(next);
                continue;
            }
            Plan::Range { range, .. } => range,
        };
        m.log += 1;
        m.engine.redact_whole_values(true);
        m.engine.redact_on_branches(on_branches);
        let applied = m.engine.apply_redaction_where(
            m.log,
            1_000_000 * m.log as i64,
            &req,
            &range,
            None,
            None,
            WriteBatch::new(),
        );
        m.engine.redact_on_branches(false);
        let receipt = applied.unwrap().unwrap();
        first.get_or_insert(receipt.tx);
        taken.extend(
            engram_core::redact::redacted_by(&*m.store, receipt.tx)
                .unwrap()
                .into_iter()
                .map(|(_, d)| d),
        );
        after = Some(range.through_key);
    }
}

#[test]
fn a_redaction_by_predicate_reaches_branches_and_takes_a_branch_value_out_of_its_slot_whole() {
    let setup = || {
        let mut m = Mem::new("crm/eu");
        let crawler = agent("crawler", Status::Candidate, 0.5);
        let human = agent("human", Status::Verified, 1.0);
        let seed = m
            .write(
                crawler.clone(),
                vec![
                    assert_op(temp("x"), ":page/text", s("crawled on main")),
                    assert_op(temp("y"), ":page/text", s("crawled too")),
                ],
            )
            .unwrap();
        let (x, y) = (created(&seed, "x"), created(&seed, "y"));
        m.write(
            human.clone(),
            vec![assert_op(id(x), ":page/note", s("human on main"))],
        )
        .unwrap();
        m.branch_op(BranchOp::Create {
            name: branch("draft"),
            from: None,
        })
        .unwrap();
        // On the branch: the crawler's value, the human's retraction of it (one group on the
        // branch), and the human's own value.
        let mut on_draft = m.request();
        on_draft.branch = Some(branch("draft"));
        on_draft.provenance = crawler.clone();
        on_draft.ops = vec![assert_op(id(y), ":page/text", s("crawled on draft"))];
        m.apply(on_draft.clone()).unwrap();
        on_draft.provenance = human.clone();
        on_draft.ops = vec![
            retract_op(y, ":page/text", s("crawled on draft")),
            assert_op(id(y), ":page/note", s("human on draft")),
        ];
        m.apply(on_draft).unwrap();
        (m, x, y)
    };
    let by_crawler = engram_types::Predicate {
        agent: Some("crawler".into()),
        ..engram_types::Predicate::default()
    };

    let (mut m, _, y) = setup();
    assert_eq!(
        m.value(y, ":page/text", Some("draft")),
        None,
        "retracted on the branch"
    );
    let taken = redact_where_in_ranges(&mut m, by_crawler.clone(), true);
    for gone in ["crawled on main", "crawled too", "crawled on draft"] {
        assert!(!state_holds(&m, gone.as_bytes()), "{gone} is still in the state");
    }
    assert!(
        taken
            .iter()
            .any(|d| d.branch.is_some() && d.provenance.agent == "human" && d.op == Op::Retract),
        "the human's retraction of the crawled value on the branch went with it: {taken:?}"
    );
    assert!(state_holds(&m, b"human on main") && state_holds(&m, b"human on draft"));
    // The branch still folds to what it did: y's text retracted there, its note the human's.
    assert_eq!(m.value(y, ":page/text", Some("draft")), None);
    assert_eq!(m.value(y, ":page/note", Some("draft")), Some(s("human on draft")));
    assert_eq!(m.scrub_findings(), Vec::<String>::new());
    let mut export = Vec::new();
    engram_core::export::write_export(&*m.store, &mut export, 1, |_, _| {}).unwrap();
    let report =
        engram_verify::verify_export(&export[..], &engram_verify::VerifyOptions::default(), |_, _| {})
            .unwrap();
    assert!(report.ok(), "{:?}", report.failures);

    // The whole namespace goes, branches included.
    redact_where_in_ranges(&mut m, engram_types::Predicate::default(), true);
    assert!(!state_holds(&m, b"human on draft") && !state_holds(&m, b"human on main"));
    assert_eq!(m.scrub_findings(), Vec::<String>::new());

    // Entries from before redactions reached branches take main's datoms only.
    let (mut old, _, _) = setup();
    let taken = redact_where_in_ranges(&mut old, by_crawler, false);
    assert!(taken.iter().all(|d| d.branch.is_none()), "{taken:?}");
    assert!(state_holds(&old, b"crawled on draft") && !state_holds(&old, b"crawled on main"));
}
