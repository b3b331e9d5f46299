//! Planning a transaction: checks it against the state and builds the datoms and rows it
//! writes, without writing anything. Everything here reads only the store and the request, so
//! every replica plans the same transaction into the same bytes. A rejection leaves no trace.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use engram_storage::{ReadView, Space, prefix_end};
use engram_types::{
    Attribute, AttributeDef, BranchName, BranchOp, Cardinality, Datom, EntityId, EntityRef, Namespace, Op,
    Precondition, Provenance, Salt, TxId, TxRequest, Unique, Value, salt_of,
};

use crate::branch::{self, BranchRow, BranchState};
use crate::current::{CurrentRow, ROW_AFTER_DATOMS};
use crate::planted::{self, PlantedBug};
use crate::reads::{self, ReadOptions, View};
use crate::rows::{Rejection, encode_row};
use crate::schema::{self, SchemaRow, SchemaVersion};
use crate::{CoreError, keys};

/// What a transaction writes besides its audit entry and tx-log row.
pub(crate) struct Planned {
    pub datoms: Vec<Datom>,
    pub temp_ids: BTreeMap<String, EntityId>,
    /// State rows (entity owners, schema rows, branch rows, index backfills).
    pub rows: Vec<(Vec<u8>, Vec<u8>)>,
    /// Attributes whose datoms get value-index (AVET) rows.
    pub value_indexed: BTreeSet<Attribute>,
}

type Plan = Result<Result<Planned, Rejection>, CoreError>;

/// `Ok(Err(rejection))` short-cut: the `?` of a rejection.
macro_rules! reject_on {
    ($e:expr) => {
        match $e? {
            Ok(v) => v,
            Err(rejection) => return Ok(Err(rejection)),
        }
    };
}

/// Where a transaction stands in the log: its id, its time, and the seed its datoms' salts
/// come from (`None`: an entry from before salts, whose datoms have none); or, for a request
/// an agent signed in its committed form, the salt of each op's value, in the ops' order
/// (`TxRequest::committed_bytes`), which its datoms take instead, so that each datom's hash
/// commits to its value as the signature does.
#[derive(Clone, Copy)]
pub(crate) struct Stamp<'s> {
    pub tx: TxId,
    pub tx_time_ns: i64,
    pub salt_seed: Option<[u8; 32]>,
    pub agent_salts: &'s [Salt],
}

pub(crate) fn plan(store: &dyn ReadView, req: &TxRequest, stamp: Stamp<'_>) -> Plan {
    if !req.schema.is_empty() {
        return plan_schema(store, req, stamp);
    }
    if let Some(op) = &req.branch_op {
        return plan_branch_op(store, req, op, stamp);
    }
    plan_data(store, req, stamp)
}

/// One assertion or retraction to plan, with whom it comes from.
struct Fact<'a> {
    op: Op,
    entity: EntityId,
    attribute: &'a Attribute,
    value: &'a Value,
    valid_from_ns: i64,
    valid_to_ns: Option<i64>,
    provenance: &'a Provenance,
}

/// The transaction being planned: the datoms so far and what it has learnt of the state.
struct Draft<'a> {
    store: &'a dyn ReadView,
    view: View<'a>,
    tx: TxId,
    tx_time_ns: i64,
    salt_seed: Option<[u8; 32]>,
    /// The agent's salts, one per op of a committed request (else empty).
    agent_salts: &'a [Salt],
    /// How many datoms have taken a salt: the next one's ordinal.
    salted: u32,
    strict: bool,
    /// How many ids the namespace has drawn (its `n` row), with this transaction's draws.
    drawn: u64,
    /// The `n` row's value before this transaction, to write the row only when it changed.
    drawn_before: u64,
    datoms: Vec<Datom>,
    rows: Vec<(Vec<u8>, Vec<u8>)>,
    temp_ids: BTreeMap<String, EntityId>,
    /// Entities made by this transaction (owned by the view's branch, if any).
    new_entities: Vec<EntityId>,
    visible: HashMap<EntityId, bool>,
    defs: HashMap<Attribute, Option<AttributeDef>>,
    implicit: Vec<AttributeDef>,
    slots: HashMap<(EntityId, Attribute), Slot>,
    value_indexed: BTreeSet<Attribute>,
}

/// What planning knows of one slot: its live claims (see [`crate::current`]), with this
/// transaction's datoms folded in.
struct Slot {
    row: CurrentRow,
    /// Whether the slot keeps a current-claims row: on main, for an attribute of the data.
    /// A branch's slots are read from their history (main's up to the fork, then the
    /// branch's own).
    indexed: bool,
    /// Whether its row was in the store under the slot's cardinality.
    stored: bool,
    /// Datoms folded into `row` from the history read and from this transaction.
    folded: usize,
    /// Whether this transaction wrote to the slot, so its row is rewritten.
    written: bool,
}

impl Slot {
    fn new(row: CurrentRow, indexed: bool, stored: bool, folded: usize) -> Slot {
        Slot {
            row,
            indexed,
            stored,
            folded,
            written: false,
        }
    }

    /// Whether the transaction writes the slot's row: a row once there is kept current; a slot
    /// without one gets it when its history reaches [`ROW_AFTER_DATOMS`].
    fn writes_row(&self) -> bool {
        self.indexed && self.written && (self.stored || self.folded >= ROW_AFTER_DATOMS)
    }
}

impl<'a> Draft<'a> {
    fn new(store: &'a dyn ReadView, view: View<'a>, stamp: Stamp<'a>) -> Result<Self, CoreError> {
        let drawn = match store.get(Space::State, &keys::entity_counter(view.ns))? {
            None => 0,
            Some(row) => <[u8; 8]>::try_from(row.as_slice())
                .map(u64::from_be_bytes)
                .map_err(|_| {
                    CoreError::corrupt("entity counter row", format!("{} bytes, expected 8", row.len()))
                })?,
        };
        Ok(Draft {
            store,
            view,
            tx: stamp.tx,
            tx_time_ns: stamp.tx_time_ns,
            salt_seed: stamp.salt_seed,
            agent_salts: stamp.agent_salts,
            salted: 0,
            strict: schema::namespace_schema(store, view.ns)?.strict,
            drawn,
            drawn_before: drawn,
            datoms: Vec::new(),
            rows: Vec::new(),
            temp_ids: BTreeMap::new(),
            new_entities: Vec::new(),
            visible: HashMap::new(),
            defs: HashMap::new(),
            implicit: Vec::new(),
            slots: HashMap::new(),
            value_indexed: BTreeSet::new(),
        })
    }

    fn ns(&self) -> &'a Namespace {
        self.view.ns
    }

    /// The salt of the next datom made, in the order datoms are made (the same on every
    /// replica, as planning is deterministic).
    fn next_salt(&mut self) -> Option<Salt> {
        // A committed request makes one datom per op, in the ops' order: datom k takes op k's
        // salt (a count that differs is refused before planning, `Engine::apply_tx_committed`).
        if let Some(salt) = self.agent_salts.get(self.salted as usize)
            && !crate::planted::active(crate::planted::PlantedBug::CommittedDatomsSaltedBySeed)
        {
            self.salted += 1;
            return Some(*salt);
        }
        let seed = self.salt_seed.as_ref()?;
        let salt = salt_of(seed, self.salted);
        self.salted += 1;
        Some(salt)
    }

    fn branch(&self) -> Option<&'a BranchName> {
        self.view.branch.map(|(name, _)| name)
    }

    /// A fresh entity id: the namespace's next draw (see [`keys::entity_id`]) that no entity
    /// holds yet, in any namespace or branch, nor one made earlier in this transaction. Reads
    /// only the store, so every replica draws the same ids.
    fn allocate(&mut self) -> Result<EntityId, CoreError> {
        loop {
            self.drawn = self
                .drawn
                .checked_add(1)
                .ok_or_else(|| CoreError::corrupt("entity counter row", "the counter is exhausted"))?;
            let id = keys::entity_id(self.view.ns, self.drawn);
            // `visible` is true for every id made in this transaction; an id it does not know
            // as visible may still be held elsewhere, which its `N` row tells.
            if self.visible.get(&id) == Some(&true)
                || self.store.get(Space::State, &keys::entity(id))?.is_some()
            {
                continue;
            }
            self.new_entities.push(id);
            self.visible.insert(id, true);
            return Ok(id);
        }
    }

    fn visible(&mut self, e: EntityId) -> Result<bool, CoreError> {
        if let Some(v) = self.visible.get(&e) {
            return Ok(*v);
        }
        let v = self.view.entity_visible(self.store, e)?;
        self.visible.insert(e, v);
        Ok(v)
    }

    fn def(&mut self, attr: &Attribute) -> Result<Option<AttributeDef>, CoreError> {
        if let Some(d) = self.defs.get(attr) {
            return Ok(d.clone());
        }
        let d = schema::def_at(self.store, self.ns(), attr, None)?;
        self.defs.insert(attr.clone(), d.clone());
        Ok(d)
    }

    /// The slot of `e` and `attr`, counting this transaction's datoms. Its claims come from
    /// the slot's current-claims row, so the cost does not grow with the slot's history; the
    /// history is folded only where there is no row under the attribute's cardinality.
    fn slot(&mut self, e: EntityId, attr: &Attribute) -> Result<&mut Slot, CoreError> {
        let key = (e, attr.clone());
        if !self.slots.contains_key(&key) {
            let slot = self.load_slot(e, attr)?;
            self.slots.insert(key.clone(), slot);
        }
        // Present: inserted above if it was not.
        Ok(self
            .slots
            .entry(key)
            .or_insert_with(|| Slot::new(CurrentRow::empty(Cardinality::One), false, false, 0)))
    }

    fn load_slot(&mut self, e: EntityId, attr: &Attribute) -> Result<Slot, CoreError> {
        let cardinality = self.def(attr)?.map_or(Cardinality::One, |d| d.cardinality);
        let indexed = self.view.branch.is_none() && !attr.is_reserved();
        if self.new_entities.contains(&e) {
            return Ok(Slot::new(CurrentRow::empty(cardinality), indexed, false, 0));
        }
        if indexed && let Some(bytes) = self.store.get(Space::State, &keys::current(self.ns(), e, attr))? {
            let row = CurrentRow::decode(&bytes)?;
            // A row folded under another cardinality is stale (the schema changed it since).
            if row.cardinality == cardinality {
                return Ok(Slot::new(row, indexed, true, 0));
            }
        }
        let history = self.view.slot_datoms(self.store, e, attr)?;
        let row = CurrentRow::fold_history(cardinality, &history);
        Ok(Slot::new(row, indexed, false, history.len()))
    }

    /// Whether `e` holds `value` for `attr`, counting this transaction's datoms.
    fn holds(&mut self, e: EntityId, attr: &Attribute, value: &Value) -> Result<bool, CoreError> {
        Ok(self.slot(e, attr)?.row.claims.iter().any(|d| d.value == *value))
    }

    /// The entities other than `except` that hold `value` for `attr`.
    fn holders(
        &mut self,
        attr: &Attribute,
        value: &Value,
        except: Option<EntityId>,
    ) -> Result<Vec<EntityId>, CoreError> {
        let mut candidates = self.view.value_candidates(self.store, attr, Some(value))?;
        candidates.extend(self.slots.keys().filter(|(_, a)| a == attr).map(|(e, _)| *e));
        candidates.sort();
        candidates.dedup();
        let mut out = Vec::new();
        for e in candidates {
            if Some(e) != except && self.holds(e, attr, value)? {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Checks one fact against the schema and the state, and adds its datom.
    fn add(&mut self, fact: Fact<'_>) -> Result<Result<(), Rejection>, CoreError> {
        let attr = fact.attribute;
        let def = match self.def(attr)? {
            Some(def) => def,
            None if self.strict => return Ok(Err(Rejection::UnknownAttribute(attr.clone()))),
            None => {
                let def = schema::implicit_def(attr, fact.value);
                self.implicit.push(def.clone());
                self.defs.insert(attr.clone(), Some(def.clone()));
                def
            }
        };
        let found = fact.value.value_type();
        if def.value_type != found {
            return Ok(Err(Rejection::TypeMismatch {
                attribute: attr.clone(),
                expected: def.value_type,
                found,
            }));
        }
        if let Value::Vector(v) = fact.value
            && v.len() != def.dimension as usize
        {
            return Ok(Err(Rejection::DimensionMismatch {
                attribute: attr.clone(),
                expected: def.dimension,
                found: u32::try_from(v.len()).unwrap_or(u32::MAX),
            }));
        }
        if def.deprecated && fact.op == Op::Assert {
            return Ok(Err(Rejection::Deprecated(attr.clone())));
        }
        if let Value::Ref(target) = fact.value
            && !self.visible(*target)?
        {
            return Ok(Err(Rejection::UnknownEntity(*target)));
        }
        match fact.op {
            Op::Retract => {
                if !self.holds(fact.entity, attr, fact.value)? {
                    return Ok(Err(Rejection::NotCurrent {
                        entity: fact.entity,
                        attribute: attr.clone(),
                        value: fact.value.clone(),
                    }));
                }
            }
            Op::Assert => {
                if def.unique.is_some()
                    && let Some(holder) = self.holders(attr, fact.value, Some(fact.entity))?.first()
                {
                    return Ok(Err(Rejection::UniqueConflict {
                        attribute: attr.clone(),
                        value: fact.value.clone(),
                        holder: *holder,
                    }));
                }
            }
        }
        if def.has_value_index() {
            self.value_indexed.insert(attr.clone());
        }
        let salt = self.next_salt();
        let datom = Datom {
            namespace: self.ns().clone(),
            branch: self.branch().cloned(),
            entity: fact.entity,
            attribute: attr.clone(),
            value: fact.value.clone(),
            op: fact.op,
            valid_from_ns: fact.valid_from_ns,
            valid_to_ns: fact.valid_to_ns,
            tx: self.tx,
            provenance: fact.provenance.clone(),
            salt,
        };
        let slot = self.slot(fact.entity, attr)?;
        slot.row.fold(datom.clone());
        slot.folded += 1;
        slot.written = true;
        self.datoms.push(datom);
        Ok(Ok(()))
    }

    /// A datom the engine writes itself (schema and branch records), on main.
    fn system(&mut self, entity: EntityId, attr: &str, value: Value, op: Op, provenance: &Provenance) {
        let salt = self.next_salt();
        self.datoms.push(Datom {
            namespace: self.ns().clone(),
            branch: None,
            entity,
            attribute: schema::reserved(attr),
            value,
            op,
            valid_from_ns: self.tx_time_ns,
            valid_to_ns: None,
            tx: self.tx,
            provenance: provenance.clone(),
            salt,
        });
    }

    /// Whether a precondition holds in this view (counting this transaction's datoms).
    fn check(&mut self, pre: &Precondition) -> Result<Result<(), Rejection>, CoreError> {
        if !self.visible(pre.entity)? {
            return Ok(Err(Rejection::UnknownEntity(pre.entity)));
        }
        let row = &self.slot(pre.entity, &pre.attribute)?.row;
        let current = reads::resolve_slot(&row.claims, row.cardinality, &ReadOptions::default()).current;
        let holds = match (&pre.expected, row.cardinality) {
            (None, _) => current.is_empty(),
            (Some(v), Cardinality::One) => current.first().is_some_and(|d| d.value == *v),
            (Some(v), Cardinality::Many) => current.iter().any(|d| d.value == *v),
        };
        if holds {
            return Ok(Ok(()));
        }
        Ok(Err(Rejection::PreconditionFailed {
            entity: pre.entity,
            attribute: pre.attribute.clone(),
            expected: pre.expected.clone(),
            actual: current.last().map(|d| d.value.clone()),
        }))
    }

    /// Finishes the plan: owner rows for new entities, schema rows for attributes typed by
    /// first use, the current-claims rows of the slots it wrote, and the entity counter.
    fn finish(mut self) -> Planned {
        let mut current: Vec<(Vec<u8>, Vec<u8>)> = self
            .slots
            .iter()
            .filter(|(_, slot)| slot.writes_row())
            .filter(|(_, slot)| !(slot.stored && planted::active(PlantedBug::StaleCurrentRow)))
            .map(|((e, attr), slot)| (keys::current(self.view.ns, *e, attr), slot.row.encode()))
            .collect();
        // In key order, so every replica builds the same batch.
        current.sort();
        self.rows.extend(current);
        let owner = keys::entity_owner(self.ns(), self.branch());
        for e in &self.new_entities {
            self.rows.push((keys::entity(*e), owner.clone()));
        }
        for def in &self.implicit {
            let row = SchemaRow {
                entity: None,
                versions: vec![SchemaVersion {
                    tx: self.tx,
                    version: 0,
                    def: def.clone(),
                }],
            };
            self.rows
                .push((keys::schema(self.view.ns, &def.ident), encode_row(&row)));
        }
        if self.drawn != self.drawn_before {
            self.rows.push((
                keys::entity_counter(self.view.ns),
                self.drawn.to_be_bytes().to_vec(),
            ));
        }
        Planned {
            datoms: self.datoms,
            temp_ids: self.temp_ids,
            rows: self.rows,
            value_indexed: self.value_indexed,
        }
    }
}

/// The open branch `name`, or why it cannot be written.
fn open_branch(
    store: &dyn ReadView,
    ns: &Namespace,
    name: &BranchName,
) -> Result<Result<BranchRow, Rejection>, CoreError> {
    match branch::row(store, ns, name)? {
        None => Ok(Err(Rejection::UnknownBranch(name.clone()))),
        Some(row) if row.state != BranchState::Open => Ok(Err(Rejection::BranchClosed {
            branch: name.clone(),
            state: row.state.name().to_string(),
        })),
        Some(row) => Ok(Ok(row)),
    }
}

fn plan_data(store: &dyn ReadView, req: &TxRequest, stamp: Stamp<'_>) -> Plan {
    let tx_time_ns = stamp.tx_time_ns;
    let ns = &req.namespace;
    let mut branch_row = None;
    let view = match &req.branch {
        None => View::main(ns),
        Some(name) => {
            let row = reject_on!(open_branch(store, ns, name));
            let view = View {
                ns,
                branch: Some((name, row.fork)),
            };
            branch_row = Some(row);
            view
        }
    };
    let mut draft = Draft::new(store, view, stamp)?;
    for pre in &req.preconditions {
        reject_on!(draft.check(pre));
    }

    // Temporary names that assert a unique-identity value someone holds are that entity
    // (upsert); the others are new entities, allocated in order of first use.
    for op in &req.ops {
        if let (EntityRef::Temp(name), Op::Assert) = (&op.entity, op.op)
            && !draft.temp_ids.contains_key(name)
            && draft
                .def(&op.attribute)?
                .is_some_and(|d| d.unique == Some(Unique::Identity))
            && let Some(holder) = draft.holders(&op.attribute, &op.value, None)?.first()
        {
            draft.temp_ids.insert(name.clone(), *holder);
        }
    }

    for op in &req.ops {
        let entity = match &op.entity {
            EntityRef::Id(e) => {
                if !draft.visible(*e)? {
                    return Ok(Err(Rejection::UnknownEntity(*e)));
                }
                *e
            }
            EntityRef::Temp(name) => match draft.temp_ids.get(name) {
                Some(e) => *e,
                None => {
                    let e = draft.allocate()?;
                    draft.temp_ids.insert(name.clone(), e);
                    e
                }
            },
            EntityRef::Lookup(attribute, value) => {
                if draft.def(attribute)?.is_none_or(|d| d.unique.is_none()) {
                    return Ok(Err(Rejection::NotUnique(attribute.clone())));
                }
                match draft.holders(attribute, value, None)?.first() {
                    Some(e) => *e,
                    None => {
                        return Ok(Err(Rejection::LookupNotFound {
                            attribute: attribute.clone(),
                            value: value.clone(),
                        }));
                    }
                }
            }
        };
        reject_on!(draft.add(Fact {
            op: op.op,
            entity,
            attribute: &op.attribute,
            value: &op.value,
            valid_from_ns: op.valid_from_ns.unwrap_or(tx_time_ns),
            valid_to_ns: op.valid_to_ns,
            provenance: &req.provenance,
        }));
    }
    if let Some(mut row) = branch_row {
        row.writes += 1;
        row.preconditions.extend(req.preconditions.iter().cloned());
        draft.rows.push((keys::branch(ns, &row.name), encode_row(&row)));
    }
    Ok(Ok(draft.finish()))
}

fn plan_schema(store: &dyn ReadView, req: &TxRequest, stamp: Stamp<'_>) -> Plan {
    let tx = stamp.tx;
    let ns = &req.namespace;
    let mut draft = Draft::new(store, View::main(ns), stamp)?;
    let mut ns_schema = schema::namespace_schema(store, ns)?;
    let version = ns_schema.version + 1;
    let mut changed = 0;
    for def in &req.schema {
        let (entity, old, mut row) = match schema::row(store, ns, &def.ident)? {
            None => {
                let e = draft.allocate()?;
                (
                    e,
                    None,
                    SchemaRow {
                        entity: Some(e),
                        versions: Vec::new(),
                    },
                )
            }
            Some(mut row) => {
                let Some(current) = row.at(None).map(|v| v.def.clone()) else {
                    return Err(CoreError::corrupt(
                        format!("schema row of {}", def.ident),
                        "no declaration",
                    ));
                };
                let declared = row.declared();
                if declared && current == *def {
                    continue;
                }
                if let Err(reason) = check_migration(store, ns, &current, declared, def) {
                    return Ok(Err(Rejection::UnsafeMigration {
                        attribute: def.ident.clone(),
                        reason,
                    }));
                }
                if def.has_value_index() && !current.has_value_index() {
                    for key in schema::backfill_value_index(store, ns, &def.ident)? {
                        draft.rows.push((key, Vec::new()));
                    }
                }
                let e = match row.entity {
                    Some(e) => e,
                    None => {
                        let e = draft.allocate()?;
                        row.entity = Some(e);
                        e
                    }
                };
                (e, declared.then_some(current), row)
            }
        };
        for (attr, value, assert) in schema::def_facts(old.as_ref(), def, version) {
            let op = if assert { Op::Assert } else { Op::Retract };
            draft.system(entity, attr.as_str(), value, op, &req.provenance);
        }
        row.versions.push(SchemaVersion {
            tx,
            version,
            def: def.clone(),
        });
        draft.rows.push((keys::schema(ns, &def.ident), encode_row(&row)));
        changed += 1;
    }
    if changed == 0 {
        return Ok(Err(Rejection::SchemaUnchanged));
    }
    ns_schema.version = version;
    ns_schema.strict = true;
    draft.rows.push((keys::ns_schema(ns), encode_row(&ns_schema)));
    Ok(Ok(draft.finish()))
}

fn state_keyword(state: BranchState) -> Value {
    Value::Keyword(format!(":db.branch.state/{}", state.name()))
}

fn plan_branch_op(store: &dyn ReadView, req: &TxRequest, op: &BranchOp, stamp: Stamp<'_>) -> Plan {
    let tx = stamp.tx;
    let ns = &req.namespace;
    let mut draft = Draft::new(store, View::main(ns), stamp)?;
    let provenance = &req.provenance;
    let row = match op {
        BranchOp::Create { name, from } => {
            if branch::row(store, ns, name)?.is_some() {
                return Ok(Err(Rejection::BranchExists(name.clone())));
            }
            let fork = from.unwrap_or(TxId(tx.0.saturating_sub(1)));
            if fork >= tx {
                return Ok(Err(Rejection::ForkInFuture { from: fork, tx }));
            }
            let entity = draft.allocate()?;
            draft.system(
                entity,
                schema::BRANCH_NAME,
                Value::String(name.to_string()),
                Op::Assert,
                provenance,
            );
            draft.system(
                entity,
                schema::BRANCH_FORK,
                Value::I64(i64::try_from(fork.0).unwrap_or(i64::MAX)),
                Op::Assert,
                provenance,
            );
            draft.system(
                entity,
                schema::BRANCH_STATE,
                state_keyword(BranchState::Open),
                Op::Assert,
                provenance,
            );
            BranchRow {
                name: name.clone(),
                entity,
                fork,
                created: tx,
                state: BranchState::Open,
                writes: 0,
                preconditions: Vec::new(),
            }
        }
        BranchOp::Abandon { name } => {
            let mut row = reject_on!(open_branch(store, ns, name));
            row.state = BranchState::Abandoned { tx };
            row
        }
        BranchOp::Merge { name } => {
            let mut row = reject_on!(open_branch(store, ns, name));
            reject_on!(replay(&mut draft, &row));
            row.state = BranchState::Merged { tx };
            row
        }
    };
    if !matches!(op, BranchOp::Create { .. }) {
        let entity = row.entity;
        draft.system(
            entity,
            schema::BRANCH_STATE,
            state_keyword(BranchState::Open),
            Op::Retract,
            provenance,
        );
        draft.system(
            entity,
            schema::BRANCH_STATE,
            state_keyword(row.state),
            Op::Assert,
            provenance,
        );
    }
    draft.rows.push((keys::branch(ns, &row.name), encode_row(&row)));
    Ok(Ok(draft.finish()))
}

/// Replays a branch's datoms whose values are still there onto main (the draft's view) after
/// re-checking the branch's preconditions against main as it is now: every slot the branch
/// wrote must be untouched on main since the fork, every precondition its transactions carried must still hold, and every
/// datom must pass the schema and state checks of main today.
fn replay(draft: &mut Draft<'_>, row: &BranchRow) -> Result<Result<(), Rejection>, CoreError> {
    let store = draft.store;
    let ns = draft.ns();
    let datoms = branch::datoms(store, ns, &row.name)?;
    let conflict = |entity: EntityId, attribute: &Attribute, reason: String| {
        Ok(Err(Rejection::MergeConflict {
            branch: row.name.clone(),
            entity,
            attribute: attribute.clone(),
            reason,
        }))
    };
    let mut written: Vec<(EntityId, Attribute)> = Vec::new();
    for d in &datoms {
        let slot = (d.entity, d.attribute.clone());
        if written.contains(&slot) {
            continue;
        }
        if let Some(change) = reads::slot_datoms_main(store, ns, d.entity, &d.attribute)?
            .into_iter()
            .find(|m| m.tx > row.fork)
        {
            return conflict(
                d.entity,
                &d.attribute,
                format!(
                    "main changed it at tx {} after the fork at tx {} (the branch wrote it too)",
                    change.tx, row.fork
                ),
            );
        }
        written.push(slot);
    }
    // Entities made on the branch become main's with the merge.
    let owner = keys::entity_owner(ns, Some(&row.name));
    let mut made_here = BTreeSet::new();
    for d in &datoms {
        if !made_here.contains(&d.entity)
            && store
                .get(engram_storage::Space::State, &keys::entity(d.entity))?
                .as_deref()
                == Some(&owner[..])
        {
            made_here.insert(d.entity);
        }
    }
    for e in &made_here {
        draft.visible.insert(*e, true);
        draft.new_entities.push(*e);
    }
    for pre in &row.preconditions {
        if written.contains(&(pre.entity, pre.attribute.clone())) {
            continue;
        }
        if let Err(rejection) = draft.check(pre)? {
            return conflict(
                pre.entity,
                &pre.attribute,
                format!("a precondition of the branch no longer holds on main ({rejection})"),
            );
        }
    }
    // A redacted datom has no value to replay: forgotten on the branch, it stays forgotten. A
    // value goes out of its slot whole (`crate::value_groups`), so what is left of a slot still
    // folds as it did.
    for d in datoms.iter().filter(|d| d.value.redacted().is_none()) {
        let fact = Fact {
            op: d.op,
            entity: d.entity,
            attribute: &d.attribute,
            value: &d.value,
            valid_from_ns: d.valid_from_ns,
            valid_to_ns: d.valid_to_ns,
            provenance: &d.provenance,
        };
        if let Err(rejection) = draft.add(fact)? {
            return conflict(d.entity, &d.attribute, rejection.to_string());
        }
    }
    Ok(Ok(()))
}

/// Why a declaration is not a forward migration of the one in force.
fn check_migration(
    store: &dyn ReadView,
    ns: &Namespace,
    old: &AttributeDef,
    declared: bool,
    new: &AttributeDef,
) -> Result<(), String> {
    if old.value_type != new.value_type {
        return Err(format!(
            "its value type is {} and a type never changes (declare a new attribute and deprecate this one)",
            old.value_type
        ));
    }
    if old.dimension != new.dimension {
        return Err(format!(
            "its dimension is {} and a vector's dimension never changes (declare a new attribute)",
            old.dimension
        ));
    }
    if declared {
        if old.component != new.component {
            return Err("whether it is a component cannot change after it is declared".into());
        }
        if old.indexed && !new.indexed {
            return Err("an index cannot be dropped: migrations only move forward".into());
        }
        if old.deprecated && !new.deprecated {
            return Err("a deprecated attribute cannot be revived: declare a new one".into());
        }
    }
    let narrowing = old.cardinality == Cardinality::Many && new.cardinality == Cardinality::One;
    let uniqueness = new.unique.is_some() && (old.unique.is_none() || !declared);
    if narrowing || uniqueness {
        let current = current_by_entity(store, ns, &new.ident, old.cardinality).map_err(|e| e.to_string())?;
        if narrowing && let Some((e, values)) = current.iter().find(|(_, v)| v.len() > 1) {
            return Err(format!(
                "entity {e} holds {} values, so narrowing cardinality many to one would hide all but one",
                values.len()
            ));
        }
        if uniqueness {
            let mut holders: BTreeMap<Vec<u8>, EntityId> = BTreeMap::new();
            for (e, values) in &current {
                for v in values {
                    if let Some(first) = holders.insert(v.canonical_bytes(), *e)
                        && first != *e
                    {
                        return Err(format!(
                            "entities {first} and {e} both hold {v}, so it cannot become unique"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every entity's current values of `attr` on main, under `cardinality`.
fn current_by_entity(
    store: &dyn ReadView,
    ns: &Namespace,
    attr: &Attribute,
    cardinality: Cardinality,
) -> Result<BTreeMap<EntityId, Vec<Value>>, CoreError> {
    let mut entities = BTreeSet::new();
    let prefix = keys::aevt_attr(ns, attr);
    for (k, _) in store.scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), usize::MAX)? {
        if let Some((e, _, _)) = keys::trailing_entity_tx_seq(&k) {
            entities.insert(e);
        }
    }
    let mut out = BTreeMap::new();
    for e in entities {
        let datoms = reads::slot_datoms_main(store, ns, e, attr)?;
        let values: Vec<Value> = reads::holding(&datoms, cardinality)
            .into_iter()
            .map(|d| d.value.clone())
            .collect();
        if !values.is_empty() {
            out.insert(e, values);
        }
    }
    Ok(out)
}
