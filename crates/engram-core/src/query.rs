//! Join queries ([`Query`]): the rows of values that satisfy every clause at once, over one
//! namespace's current claims as of one transaction (and, if given, one valid instant).
//!
//! - **What a clause matches.** Each current claim of its attribute, resolved per slot as
//!   `Get` and `Find` resolve it (the schema's cardinality as of the answer's transaction, the
//!   latest claim winning). A redacted claim matches nothing (its value is gone, and its
//!   presence says nothing a join could use); an entity expired at the read's instant holds no
//!   claims. Attributes the caller may not read are refused before a query runs (the server's
//!   gate), so a hidden value never binds a variable.
//! - **The plan.** Clauses run one after another, each extending the partial rows of those
//!   before. The next clause is the cheapest given what is bound: an entity known (a slot
//!   read per row), then a value known and indexed (the value index, or for a reference the
//!   reverse-reference index), then a value known and not indexed (the attribute read once and
//!   looked up by value), then a clause sharing a variable, then one sharing none (a cartesian
//!   product). Ties go to the clause written first, so a query always runs the same plan on
//!   every node. [`Step`] reports each with what it read. When several clauses bind the same
//!   entity, an entity's rows (up to 256 of them) are read with one seek and its
//!   slots taken from them, rather than a seek per slot.
//! - **`not` groups.** Each is asked of every row once the clauses bound its variables (as a
//!   filter is). A group of one clause: a row stays if the pattern matches none of the current
//!   claims its bound terms lead to (read as a clause with those terms would read them: the
//!   slot, the value index, the reverse-reference index or the attribute), a variable local to
//!   it matching anything. A group of several: its clauses are planned as a conjunction after
//!   what the rows bind and run over all the rows at once, each row tagged with its place; a
//!   row any extension of which comes through is dropped. Its own variables join its clauses
//!   to each other and nothing else. The rows it reads count against the limit like any
//!   clause's, named in the step after which it runs ([`Step::negations`]).
//! - **`or` groups.** A group runs as one step, planned like a clause at the cost of its
//!   dearest alternative (an alternative of several clauses costs what its first costs): each
//!   alternative extends the same rows by its own clauses, planned as a conjunction, and a row
//!   two alternatives extend alike is kept once ([`Step::alternatives`]). A group binds the
//!   variables every alternative names; an alternative's own variables are dropped from the
//!   rows it returns, so every row binds the same ones whichever matched.
//! - **Aggregates** in `find` fold each group of the plain variables' values over the group's
//!   rows of the join (every distinct binding of all variables), as SQL's `GROUP BY` folds
//!   joined rows; see [`aggregate`].
//! - **Limits.** A run reads at most `max_rows_read` index and datom rows and holds at most
//!   [`MAX_PARTIAL_ROWS`] partial rows; past either it stops with [`ReadError::TooCostly`]
//!   naming the clause, never with a partial answer.
//! - **Pages.** The answer's rows are distinct and sorted (column by column, values of one
//!   kind in their natural order); a page is a window of them, and its cursor holds the
//!   offset, the transaction and (when expiry is judged) the instant the first page was
//!   judged at, so every page reads the same state. Each page runs the join again: the work
//!   limit bounds a page, not the answer.
//!
//! Must not depend on: Raft, gRPC, RocksDB, an async runtime or a clock.

use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};

use engram_storage::{ReadView, Space, prefix_end};
use engram_types::query::{
    Aggregate, Clause, Compare, EntityTerm, Filter, FindTerm, Query, ValueTerm, Variable, conjunction_field,
    conjunction_variables, shared_variables,
};
use engram_types::{Attribute, BranchName, Cardinality, Datom, EntityId, Namespace, TxId, Value};

use crate::cursor::{Cursor, CursorKind, QueryKey};
use crate::pages::{Candidates, answer_as_of};
use crate::reads::{self, ReadError, ReadOptions, View};
use crate::rows::hex;
use crate::{CoreError, keys, schema};

/// The most rows one page holds (a request's limit of 0 asks for this many).
pub const MAX_PAGE_ROWS: usize = 10_000;
/// The rows a run may read when the request names no limit.
pub const DEFAULT_MAX_ROWS_READ: u64 = 1_000_000;
/// The most rows a request may let a run read.
pub const MAX_ROWS_READ: u64 = 10_000_000;
/// The most partial rows held between two steps.
pub const MAX_PARTIAL_ROWS: usize = 1_000_000;

/// Index rows read per scan of the reverse-reference index.
const SCAN_CHUNK: usize = 1024;
/// The most rows of one entity a run reads whole (when several clauses bind the same entity,
/// one seek for its rows costs less than a seek per slot); an entity with more is read a slot
/// at a time.
const ENTITY_ROWS: usize = 256;

/// The page size a request's `limit` asks for: 0 is the largest.
pub fn page_rows(limit: u32) -> usize {
    if limit == 0 {
        MAX_PAGE_ROWS
    } else {
        (limit as usize).min(MAX_PAGE_ROWS)
    }
}

/// How a step reads the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The entity is known: its slot, once per entity.
    Slot,
    /// The value is known and the attribute indexed: the value index, once per value.
    ValueIndex,
    /// The value is a reference, or a variable that may hold references, and the attribute
    /// is not indexed: references through the reverse-reference index (main only), other
    /// values through one read of the attribute.
    RefIndex,
    /// The value is known, not a reference, and the attribute not indexed (or the read is of
    /// a branch, which the reverse-reference index does not reach): the attribute read once,
    /// looked up by value.
    ScanFiltered,
    /// Nothing of the clause is known: every claim of the attribute.
    Scan,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::Slot => "slot",
            Access::ValueIndex => "value index",
            Access::RefIndex => "reference index",
            Access::ScanFiltered => "attribute scan, filtered",
            Access::Scan => "attribute scan",
        }
    }
}

/// One step of the plan, with what it did.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The clause's index in the query.
    pub clause: usize,
    pub access: Access,
    /// The variables this step binds.
    pub binds: Vec<Variable>,
    /// The variables bound before it that it reads by.
    pub uses: Vec<Variable>,
    /// Whether it shares no variable with the steps before (a cartesian product).
    pub disconnected: bool,
    pub rows_read: u64,
    /// The partial rows after it (and after the filters applied with it).
    pub rows_out: u64,
    /// The query's filters applied after it: those whose variables it was the last to bind.
    pub filters: Vec<usize>,
    /// The query's `not` clauses asked after it (indexes in [`Query::negations`]), likewise;
    /// their reads are in `rows_read`.
    pub negations: Vec<usize>,
    /// Whether the step ran an `or` group (`clause` is then its index in
    /// [`Query::disjunctions`]), with each alternative's clauses in the order they ran (their
    /// indexes in the alternative) and how each read the store (`access` is the first's).
    pub alternatives: Vec<Order>,
}

/// A conjunction's clauses in the order they run (each by its index in the conjunction), with
/// how each reads the store.
pub type Order = Vec<(usize, Access)>;

impl Step {
    /// Whether the step ran an `or` group rather than a clause.
    pub fn is_or(&self) -> bool {
        !self.alternatives.is_empty()
    }
}

/// What a query reads as of, and its limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueryOptions {
    /// `None`: the head when the first page is read.
    pub as_of: Option<TxId>,
    pub valid_at_ns: Option<i64>,
    /// Judge expiry at this instant (`None`: not at all); a later page judges it at the first
    /// page's instant, which its cursor carries.
    pub expired_at_ns: Option<i64>,
    pub max_rows_read: u64,
}

/// One page of a query's rows.
#[derive(Clone, Debug, PartialEq)]
pub struct QueryPage {
    /// One value per `find` variable; an entity is a [`Value::Ref`].
    pub rows: Vec<Vec<Value>>,
    pub as_of: TxId,
    pub next: Option<Cursor>,
    /// The index and datom rows this page's run read.
    pub rows_read: u64,
    pub plan: Vec<Step>,
}

/// A page of `q`'s rows on main or `branch`, after `cursor` (empty: the first page).
pub fn run(
    store: &dyn ReadView,
    ns: &Namespace,
    branch: Option<&BranchName>,
    q: &Query,
    opts: &QueryOptions,
    cursor: &[u8],
    limit: usize,
) -> Result<QueryPage, ReadError> {
    let key = query_key(ns, branch, q, opts);
    let cursor = Cursor::continuing(cursor, CursorKind::Query, key)?;
    let (view, _) = View::of(store, ns, branch)?;
    let as_of = answer_as_of(store, cursor.as_ref(), opts.as_of)?;
    // A later page judges expiry where the first did.
    let expired_at_ns = match (&cursor, opts.expired_at_ns) {
        (Some(c), Some(_)) => Some(
            c.after_key
                .as_slice()
                .try_into()
                .map(i64::from_be_bytes)
                .map_err(|_| crate::cursor::CursorError::Malformed("no expiry instant"))?,
        ),
        (_, judged) => judged,
    };
    // One schema read per clause: whether its attribute is declared, and indexed.
    let indexed_at = |field: String, c: &Clause| -> Result<bool, ReadError> {
        let def = schema::def_at(store, ns, &c.attribute, None)?;
        if def.is_none() && branch.is_none() {
            written(store, ns, &format!("{field}.attribute"), &c.attribute)?;
        }
        Ok(def.is_some_and(|d| d.has_value_index()))
    };
    let conjunction_indexed = |base: &str, k: usize, clauses: &[Clause]| -> Result<Vec<bool>, ReadError> {
        clauses
            .iter()
            .enumerate()
            .map(|(m, c)| indexed_at(conjunction_field(base, k, m, clauses.len()), c))
            .collect()
    };
    let indexed = q
        .clauses
        .iter()
        .enumerate()
        .map(|(i, c)| indexed_at(format!("clauses[{i}]"), c))
        .collect::<Result<Vec<_>, _>>()?;
    let negations_indexed = q
        .negations
        .iter()
        .enumerate()
        .map(|(i, group)| conjunction_indexed("not_clauses", i, group))
        .collect::<Result<Vec<_>, _>>()?;
    let or_indexed = q
        .disjunctions
        .iter()
        .enumerate()
        .map(|(j, group)| {
            let base = format!("or_clauses[{j}].alternatives");
            group
                .iter()
                .enumerate()
                .map(|(k, alternative)| conjunction_indexed(&base, k, alternative))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut plan = plan(q, &indexed, &or_indexed, branch.is_some());
    let mut exec = Exec::new(store, view, as_of, opts, expired_at_ns)?;
    let rows = exec.rows(q, &mut plan, &negations_indexed)?;
    let offset = cursor.as_ref().map_or(0, |c| c.after.0 as usize);
    let end = offset.saturating_add(limit).min(rows.len());
    let page: Vec<Vec<Value>> = rows.get(offset..end).map(<[_]>::to_vec).unwrap_or_default();
    let next = (end < rows.len()).then(|| Cursor {
        after_key: expired_at_ns
            .map(|ns| ns.to_be_bytes().to_vec())
            .unwrap_or_default(),
        ..Cursor::at(CursorKind::Query, key, as_of, (end as u64, 0))
    });
    Ok(QueryPage {
        rows: page,
        as_of,
        next,
        rows_read: exec.rows_read,
        plan,
    })
}

/// Refuses an undeclared attribute that holds no datom on main; `field` names it.
fn written(store: &dyn ReadView, ns: &Namespace, field: &str, attr: &Attribute) -> Result<(), ReadError> {
    let prefix = keys::aevt_attr(ns, attr);
    if store
        .scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), 1)?
        .is_empty()
    {
        return Err(ReadError::UnknownAttribute {
            field: field.to_string(),
            attribute: attr.clone(),
        });
    }
    Ok(())
}

/// How a clause whose entity is `entity_known` (or not) and whose value is `value_known` (or
/// not) reads the store; `indexed`: whether its attribute has a value index.
fn access_of(
    c: &Clause,
    entity_known: bool,
    value_known: bool,
    indexed: bool,
    on_branch: bool,
) -> Option<Access> {
    if entity_known {
        Some(Access::Slot)
    } else if value_known && indexed {
        Some(Access::ValueIndex)
    } else if value_known
        && !on_branch
        && !matches!(&c.value, ValueTerm::Value(v) if !matches!(v, Value::Ref(_)))
    {
        // A reference given, or a variable that may hold references.
        Some(Access::RefIndex)
    } else if value_known {
        Some(Access::ScanFiltered)
    } else {
        None
    }
}

/// What running clause `c` next costs given the variables `bound` (lower runs first), and how
/// it reads: its slot, the value index, another lookup by value, a scan joined to what is
/// bound, a scan that joins nothing (a cartesian product).
fn clause_cost(c: &Clause, indexed: bool, bound: &BTreeSet<&Variable>, on_branch: bool) -> (u8, Access) {
    let is_bound = |v: &Variable| bound.contains(v);
    let entity_known = match &c.entity {
        EntityTerm::Entity(_) => true,
        EntityTerm::Var(v) => is_bound(v),
    };
    let value_known = match &c.value {
        ValueTerm::Value(_) => true,
        ValueTerm::Var(v) => is_bound(v),
    };
    let connected = bound.is_empty() || c.variables().any(is_bound) || c.variables().next().is_none();
    match access_of(c, entity_known, value_known, indexed, on_branch) {
        Some(Access::Slot) => (0, Access::Slot),
        Some(Access::ValueIndex) => (1, Access::ValueIndex),
        Some(access) => (2, access),
        None if connected => (3, Access::Scan),
        None => (4, Access::Scan),
    }
}

/// The order a conjunction's clauses run in given the variables `bound` before it, each the
/// cheapest next ([`clause_cost`]; ties to the clause written first), with how each reads;
/// and the cost of the first.
fn order_conjunction(
    clauses: &[Clause],
    indexed: &[bool],
    bound: &BTreeSet<&Variable>,
    on_branch: bool,
) -> (u8, Order) {
    let mut bound = bound.clone();
    let mut left: Vec<usize> = (0..clauses.len()).collect();
    let (mut first, mut order) = (None, Vec::with_capacity(clauses.len()));
    while !left.is_empty() {
        let mut best: Option<(u8, usize, Access)> = None;
        for (at, &m) in left.iter().enumerate() {
            let (cost, access) = clause_cost(&clauses[m], indexed[m], &bound, on_branch);
            if best.is_none_or(|(c, ..)| cost < c) {
                best = Some((cost, at, access));
            }
        }
        let Some((cost, at, access)) = best else {
            break;
        };
        let m = left.remove(at);
        first.get_or_insert(cost);
        order.push((m, access));
        bound.extend(clauses[m].variables());
    }
    (first.unwrap_or(0), order)
}

/// The order the clauses and `or` groups run in (see the module's doc), with how each reads;
/// `indexed[i]`: whether clause `i`'s attribute has a value index (`or_indexed[j][k][m]`: of
/// clause `m` of group `j`'s alternative `k`).
fn plan(q: &Query, indexed: &[bool], or_indexed: &[Vec<Vec<bool>>], on_branch: bool) -> Vec<Step> {
    let mut bound: BTreeSet<&Variable> = BTreeSet::new();
    // Each unit: a clause (`None`) or an `or` group, by its index.
    let mut left: Vec<(Option<&[Vec<Clause>]>, usize)> = (0..q.clauses.len())
        .map(|i| (None, i))
        .chain(
            q.disjunctions
                .iter()
                .enumerate()
                .map(|(j, g)| (Some(g.as_slice()), j)),
        )
        .collect();
    let mut steps = Vec::with_capacity(left.len());
    while !left.is_empty() {
        // (cost, place in `left`, the clause's access, each alternative's order)
        let mut best: Option<(u8, usize, Access, Vec<Order>)> = None;
        for (at, &(group, i)) in left.iter().enumerate() {
            let (cost, access, alternatives) = match group {
                None => {
                    let (cost, access) = clause_cost(&q.clauses[i], indexed[i], &bound, on_branch);
                    (cost, access, Vec::new())
                }
                // A group costs what its dearest alternative's first clause costs.
                Some(group) => {
                    let (mut cost, mut orders) = (0, Vec::with_capacity(group.len()));
                    for (k, alternative) in group.iter().enumerate() {
                        let (c, order) = order_conjunction(alternative, &or_indexed[i][k], &bound, on_branch);
                        cost = cost.max(c);
                        orders.push(order);
                    }
                    let access = orders
                        .first()
                        .and_then(|o| o.first())
                        .map_or(Access::Scan, |&(_, a)| a);
                    (cost, access, orders)
                }
            };
            if best.as_ref().is_none_or(|(c, ..)| cost < *c) {
                best = Some((cost, at, access, alternatives));
            }
        }
        let Some((_, at, access, alternatives)) = best else {
            break;
        };
        let (group, i) = left.remove(at);
        let names: Vec<&Variable> = match group {
            None => conjunction_variables(std::slice::from_ref(&q.clauses[i])),
            Some(group) => shared_variables(group),
        };
        let (uses, binds): (Vec<&Variable>, Vec<&Variable>) = names.iter().partition(|v| bound.contains(*v));
        // A unit that names nothing bound, after units that bound something: a cartesian
        // product (one that names no variable at all only keeps or drops every row).
        let disconnected = !bound.is_empty() && uses.is_empty() && !names.is_empty();
        steps.push(Step {
            clause: i,
            access,
            binds: binds.into_iter().cloned().collect(),
            uses: uses.into_iter().cloned().collect(),
            disconnected,
            rows_read: 0,
            rows_out: 0,
            filters: Vec::new(),
            negations: Vec::new(),
            alternatives,
        });
        bound.extend(names);
    }
    steps
}

/// A partial row: one slot per variable of the query, in [`Query::variables`] order.
type Partial = Vec<Option<Value>>;

/// One run of a query: the state it reads and what it has read.
struct Exec<'a> {
    store: &'a dyn ReadView,
    view: View<'a>,
    read: ReadOptions,
    as_of: TxId,
    /// `:memory/expires`, its cardinality and the instant expiry is judged at, when some
    /// entity of the namespace has one.
    expiry: Option<(Attribute, Cardinality, i64)>,
    expired: HashMap<EntityId, bool>,
    cardinalities: HashMap<Attribute, Cardinality>,
    rows_read: u64,
    max_rows_read: u64,
    /// The clause being run, as errors name it.
    at: String,
    /// Whether it shares no variable with the clauses before it.
    disconnected: bool,
    /// Whether several clauses bind the same entity term (then an entity's rows are read with
    /// one seek and its slots taken from them; main only).
    whole_entities: bool,
    /// The entities read whole, their datoms by attribute in tx order; `None`: more than
    /// [`ENTITY_ROWS`], read a slot at a time.
    entities: HashMap<EntityId, Option<HashMap<Attribute, Vec<Datom>>>>,
}

impl<'a> Exec<'a> {
    fn new(
        store: &'a dyn ReadView,
        view: View<'a>,
        as_of: TxId,
        opts: &QueryOptions,
        expired_at_ns: Option<i64>,
    ) -> Result<Exec<'a>, ReadError> {
        let expiry = match expired_at_ns {
            Some(now_ns) => {
                let expires = Attribute::new(reads::MEMORY_EXPIRES)
                    .map_err(|e| CoreError::corrupt("query", e.to_string()))?;
                let prefix = keys::aevt_attr(view.ns, &expires);
                let written = view.branch.is_some()
                    || !store
                        .scan(Space::State, &prefix, prefix_end(&prefix).as_deref(), 1)?
                        .is_empty();
                if written {
                    let cardinality = schema::cardinality_at(store, view.ns, &expires, Some(as_of))?;
                    Some((expires, cardinality, now_ns))
                } else {
                    None
                }
            }
            None => None,
        };
        Ok(Exec {
            store,
            view,
            read: ReadOptions {
                as_of: Some(as_of),
                valid_at_ns: opts.valid_at_ns,
                ..ReadOptions::default()
            },
            as_of,
            expiry,
            expired: HashMap::new(),
            cardinalities: HashMap::new(),
            rows_read: 0,
            max_rows_read: opts.max_rows_read,
            at: String::new(),
            disconnected: false,
            whole_entities: false,
            entities: HashMap::new(),
        })
    }

    /// The answer's rows: every step run, projected on `find`, distinct and sorted;
    /// `negations_indexed[i][m]`: whether clause `m` of `not` group `i` has a value index.
    fn rows(
        &mut self,
        q: &Query,
        plan: &mut [Step],
        negations_indexed: &[Vec<bool>],
    ) -> Result<Vec<Vec<Value>>, ReadError> {
        let vars = q.variables();
        let slot = |v: &Variable| vars.iter().position(|x| *x == v);
        let entity_terms: Vec<&EntityTerm> = q.clauses.iter().map(|c| &c.entity).collect();
        self.whole_entities = self.view.branch.is_none()
            && entity_terms
                .iter()
                .enumerate()
                .any(|(i, e)| entity_terms[i + 1..].contains(e));
        let mut partial: Vec<Partial> = vec![vec![None; vars.len()]];
        let mut applied = vec![false; q.filters.len()];
        let mut asked = vec![false; q.negations.len()];
        for step in plan.iter_mut() {
            self.disconnected = step.disconnected;
            let before = self.rows_read;
            partial = if step.is_or() {
                // Every alternative extends the same rows; a row two of them extend alike is
                // kept once.
                let group = &q.disjunctions[step.clause];
                let base = format!("or_clauses[{}].alternatives", step.clause);
                let mut out = Vec::new();
                for (k, (alternative, order)) in group.iter().zip(&step.alternatives).enumerate() {
                    let extended = self.conjunction(&base, k, alternative, order, &vars, &partial, false)?;
                    out.extend(extended);
                    // Each alternative is held to the bound; so are they together.
                    if out.len() >= MAX_PARTIAL_ROWS {
                        return Err(ReadError::TooCostly(format!(
                            "or_clauses[{}] would hold more than {MAX_PARTIAL_ROWS} partial rows; narrow the query",
                            step.clause
                        )));
                    }
                }
                distinct(out)
            } else {
                let c = &q.clauses[step.clause];
                self.at = format!("clauses[{}] {c}", step.clause);
                self.extend_by(&Terms::of(c, slot), &partial, step.access)?
            };
            // Each filter runs once all its variables are bound: after this step if the rows
            // bind them now.
            for (i, f) in q.filters.iter().enumerate() {
                if applied[i] {
                    continue;
                }
                let at: Option<Vec<usize>> = f.variables().map(slot).collect();
                let Some(at) = at else { continue };
                if partial
                    .first()
                    .is_some_and(|row| at.iter().all(|&s| row[s].is_some()))
                {
                    partial.retain(|row| passes(f, row, &at));
                    applied[i] = true;
                    step.filters.push(i);
                }
            }
            // Each `not` group likewise, once the variables the clauses bind in it are bound
            // (its own ones are never bound: they match anything).
            for (i, group) in q.negations.iter().enumerate() {
                let outer: Vec<usize> = group
                    .iter()
                    .flat_map(Clause::variables)
                    .filter_map(slot)
                    .collect();
                if asked[i]
                    || !partial
                        .first()
                        .is_some_and(|row| outer.iter().all(|&s| row[s].is_some()))
                {
                    continue;
                }
                partial = match group.as_slice() {
                    [n] => {
                        self.at = format!("not_clauses[{i}] (not {n})");
                        let terms = Terms::of(n, slot);
                        let entity_known =
                            matches!(n.entity, EntityTerm::Entity(_)) || terms.entity_at.is_some();
                        let value_known = matches!(n.value, ValueTerm::Value(_)) || terms.value_at.is_some();
                        // `Query::negated` holds a variable the clauses bind in every `not`.
                        let access = access_of(
                            n,
                            entity_known,
                            value_known,
                            negations_indexed[i][0],
                            self.view.branch.is_some(),
                        )
                        .unwrap_or(Access::Scan);
                        self.without(&terms, partial, access)?
                    }
                    clauses => {
                        // Planned as a conjunction after what the rows bind, run over the rows
                        // each tagged with its place: a row any of whose tags comes through
                        // matches the group.
                        let bound: BTreeSet<&Variable> = vars
                            .iter()
                            .enumerate()
                            .filter(|&(s, _)| partial.first().is_some_and(|row| row[s].is_some()))
                            .map(|(_, v)| *v)
                            .collect();
                        let (_, order) = order_conjunction(
                            clauses,
                            &negations_indexed[i],
                            &bound,
                            self.view.branch.is_some(),
                        );
                        let matched =
                            self.conjunction("not_clauses", i, clauses, &order, &vars, &partial, true)?;
                        let tag = vars.len();
                        let hit: std::collections::HashSet<usize> = matched
                            .iter()
                            .filter_map(|row| match row.get(tag) {
                                Some(Some(Value::I64(n))) => usize::try_from(*n).ok(),
                                _ => None,
                            })
                            .collect();
                        partial
                            .into_iter()
                            .enumerate()
                            .filter(|(n, _)| !hit.contains(n))
                            .map(|(_, row)| row)
                            .collect()
                    }
                };
                asked[i] = true;
                step.negations.push(i);
            }
            step.rows_read = self.rows_read - before;
            step.rows_out = partial.len() as u64;
            if partial.is_empty() {
                break;
            }
        }
        if q.aggregates() {
            // Every variable is bound in a complete row (an empty join stops early, unbound).
            let full: Vec<Vec<Value>> = partial
                .into_iter()
                .filter_map(|p| p.into_iter().collect::<Option<Vec<Value>>>())
                .collect();
            return aggregate(q, &vars, full);
        }
        let columns: Vec<usize> = q.find.iter().filter_map(|t| slot(t.variable())).collect();
        let mut rows: Vec<Vec<Value>> = partial
            .into_iter()
            .map(|p| columns.iter().filter_map(|&i| p[i].clone()).collect::<Vec<_>>())
            .filter(|r| r.len() == columns.len())
            .collect();
        rows.sort_by(|a, b| row_order(a, b));
        rows.dedup_by(|a, b| row_order(a, b) == Ordering::Equal);
        Ok(rows)
    }

    /// The rows `partial` extended by conjunction `k` of the list `base` (an `or` group's
    /// alternative, a `not` group), its clauses run in `order`. Its own variables (those not in
    /// `vars`) take places after the query's while it runs, and are dropped from the rows it
    /// returns; when `tagged`, each row comes back with one more place, after the query's,
    /// holding the index of the row of `partial` it extends.
    #[allow(clippy::too_many_arguments)]
    fn conjunction(
        &mut self,
        base: &str,
        k: usize,
        clauses: &[Clause],
        order: &[(usize, Access)],
        vars: &[&Variable],
        partial: &[Partial],
        tagged: bool,
    ) -> Result<Vec<Partial>, ReadError> {
        let own: Vec<&Variable> = conjunction_variables(clauses)
            .into_iter()
            .filter(|v| !vars.contains(v))
            .collect();
        let slot = |v: &Variable| {
            vars.iter()
                .position(|x| *x == v)
                .or_else(|| own.iter().position(|x| *x == v).map(|i| vars.len() + i))
        };
        // Rows with places for its own variables and the tag; without either, the rows as given
        // (not copied: the first clause extends them into new rows anyway).
        let width = vars.len() + own.len();
        let mut rows: Option<Vec<Partial>> = (width > vars.len() || tagged).then(|| {
            partial
                .iter()
                .enumerate()
                .map(|(n, row)| {
                    let mut row = row.clone();
                    row.resize(width, None);
                    if tagged {
                        row.push(Some(Value::I64(i64::try_from(n).unwrap_or(i64::MAX))));
                    }
                    row
                })
                .collect()
        });
        for &(m, access) in order {
            let c = &clauses[m];
            self.at = format!("{} {c}", conjunction_field(base, k, m, clauses.len()));
            let extended = self.extend_by(&Terms::of(c, slot), rows.as_deref().unwrap_or(partial), access)?;
            let done = extended.is_empty();
            rows = Some(extended);
            if done {
                break;
            }
        }
        let mut rows = rows.unwrap_or_else(|| partial.to_vec());
        if !own.is_empty() {
            // Its own variables are its alone: the rows keep the query's places (and the tag).
            for row in &mut rows {
                let tag = if tagged { row.pop() } else { None };
                row.truncate(vars.len());
                row.extend(tag);
            }
            if !tagged {
                rows = distinct(rows);
            }
        }
        Ok(rows)
    }

    /// The rows `partial` extended by the clause of `t`, read as `access` says.
    fn extend_by(
        &mut self,
        t: &Terms<'_>,
        partial: &[Partial],
        access: Access,
    ) -> Result<Vec<Partial>, ReadError> {
        match access {
            Access::Slot => self.by_slot(t, partial),
            Access::ValueIndex | Access::RefIndex => self.by_value(t, partial, access),
            Access::ScanFiltered | Access::Scan => self.by_scan(t, partial),
        }
    }

    /// Each row's entity known: its slot's claims.
    fn by_slot(&mut self, t: &Terms<'_>, partial: &[Partial]) -> Result<Vec<Partial>, ReadError> {
        let mut out = Vec::new();
        let mut seen: HashMap<EntityId, Vec<Value>> = HashMap::new();
        for row in partial {
            let Some(e) = t.entity(row) else {
                continue;
            };
            if let Entry::Vacant(slot) = seen.entry(e) {
                slot.insert(self.claims(e, &t.clause.attribute)?);
            }
            for v in &seen[&e] {
                self.extend(t, row, e, v, &mut out)?;
            }
        }
        Ok(out)
    }

    /// Each row's value known: the entities holding it, once per value.
    fn by_value(
        &mut self,
        t: &Terms<'_>,
        partial: &[Partial],
        access: Access,
    ) -> Result<Vec<Partial>, ReadError> {
        let mut out = Vec::new();
        let mut holders = Holders::default();
        for row in partial {
            let Some(v) = t.value(row) else {
                continue;
            };
            for &e in self.holders(&mut holders, &t.clause.attribute, &v, access)? {
                self.extend(t, row, e, &v, &mut out)?;
            }
        }
        Ok(out)
    }

    /// The entities whose current claims of `attr` hold `v`, found as `access` says, each value
    /// looked up once per step (`seen`).
    fn holders<'s>(
        &mut self,
        seen: &'s mut Holders,
        attr: &Attribute,
        v: &Value,
        access: Access,
    ) -> Result<&'s [EntityId], ReadError> {
        let digest = keys::value_digest(v);
        if !seen.by_value.contains_key(&digest) {
            let found = self.look_up(seen, attr, v, &digest, access)?;
            seen.by_value.insert(digest, found);
        }
        Ok(seen.by_value.get(&digest).map_or(&[][..], Vec::as_slice))
    }

    /// What [`Exec::holders`] finds for a value this step has not looked up yet.
    fn look_up(
        &mut self,
        seen: &mut Holders,
        attr: &Attribute,
        v: &Value,
        digest: &[u8; 16],
        access: Access,
    ) -> Result<Vec<EntityId>, ReadError> {
        Ok(match (v, access) {
            (_, Access::ValueIndex) => self.holding(attr, v)?,
            (Value::Ref(target), _) => self.referring(attr, *target)?,
            _ => {
                if seen.scanned.is_none() {
                    let mut by_value: HashMap<[u8; 16], Vec<EntityId>> = HashMap::new();
                    for (e, held) in self.all(attr)? {
                        by_value.entry(keys::value_digest(&held)).or_default().push(e);
                    }
                    seen.scanned = Some(by_value);
                }
                seen.scanned
                    .as_ref()
                    .and_then(|s| s.get(digest))
                    .cloned()
                    .unwrap_or_default()
            }
        })
    }

    /// The rows for which the `not` clause `t` matches no current claim, read as `access` says
    /// (a scan when neither its entity nor its value is known: every claim of the attribute).
    fn without(
        &mut self,
        t: &Terms<'_>,
        partial: Vec<Partial>,
        access: Access,
    ) -> Result<Vec<Partial>, ReadError> {
        let mut claims: HashMap<EntityId, Vec<Value>> = HashMap::new();
        let mut holders = Holders::default();
        let mut all: Option<Vec<(EntityId, Value)>> = None;
        let mut out = Vec::with_capacity(partial.len());
        for row in partial {
            let matched = match access {
                Access::Slot => match t.entity(&row) {
                    // Bound to a value that is not a reference: no entity is it.
                    None => false,
                    Some(e) => {
                        if let Entry::Vacant(slot) = claims.entry(e) {
                            slot.insert(self.claims(e, &t.clause.attribute)?);
                        }
                        claims[&e].iter().any(|v| t.agrees(&row, e, v))
                    }
                },
                Access::ValueIndex | Access::RefIndex | Access::ScanFiltered => match t.value(&row) {
                    None => false,
                    Some(v) => self
                        .holders(&mut holders, &t.clause.attribute, &v, access)?
                        .iter()
                        .any(|&e| t.agrees(&row, e, &v)),
                },
                Access::Scan => {
                    if all.is_none() {
                        all = Some(self.all(&t.clause.attribute)?);
                    }
                    all.iter().flatten().any(|(e, v)| t.agrees(&row, *e, v))
                }
            };
            if !matched {
                out.push(row);
            }
        }
        Ok(out)
    }

    /// The attribute's claims read once; each row takes those its terms agree with.
    fn by_scan(&mut self, t: &Terms<'_>, partial: &[Partial]) -> Result<Vec<Partial>, ReadError> {
        let all = self.all(&t.clause.attribute)?;
        let mut by_value: HashMap<[u8; 16], Vec<usize>> = HashMap::new();
        let mut out = Vec::new();
        for row in partial {
            match t.value(row) {
                Some(v) => {
                    if by_value.is_empty() {
                        for (i, (_, held)) in all.iter().enumerate() {
                            by_value.entry(keys::value_digest(held)).or_default().push(i);
                        }
                    }
                    for &i in by_value
                        .get(&keys::value_digest(&v))
                        .map_or(&[][..], Vec::as_slice)
                    {
                        let (e, held) = &all[i];
                        self.extend(t, row, *e, held, &mut out)?;
                    }
                }
                None => {
                    for (e, held) in &all {
                        self.extend(t, row, *e, held, &mut out)?;
                    }
                }
            }
        }
        Ok(out)
    }

    /// `row` extended by the claim (`e`, `v`) if the clause's terms agree with it.
    fn extend(
        &self,
        t: &Terms<'_>,
        row: &Partial,
        e: EntityId,
        v: &Value,
        out: &mut Vec<Partial>,
    ) -> Result<(), ReadError> {
        if !t.agrees(row, e, v) {
            return Ok(());
        }
        let mut next = row.clone();
        if let Some(i) = t.entity_at
            && next[i].is_none()
        {
            next[i] = Some(Value::Ref(e));
        }
        if let Some(i) = t.value_at
            && next[i].is_none()
        {
            next[i] = Some(v.clone());
        }
        if out.len() >= MAX_PARTIAL_ROWS {
            return Err(ReadError::TooCostly(format!(
                "{}{} would hold more than {MAX_PARTIAL_ROWS} partial rows; narrow the query",
                self.at,
                self.cartesian()
            )));
        }
        out.push(next);
        Ok(())
    }

    /// Counts `n` rows read against the limit.
    fn charge(&mut self, n: u64) -> Result<(), ReadError> {
        self.rows_read += n;
        if self.rows_read > self.max_rows_read {
            return Err(ReadError::TooCostly(format!(
                "{}{} read past the limit of {} rows (max_rows_read); narrow the query or raise the limit",
                self.at,
                self.cartesian(),
                self.max_rows_read
            )));
        }
        Ok(())
    }

    /// What an error adds about a clause that joins nothing before it.
    fn cartesian(&self) -> &'static str {
        if self.disconnected {
            " (it shares no variable with the clauses before it: a cartesian product)"
        } else {
            ""
        }
    }

    /// The current claims of one slot, redacted ones left out; none if the entity expired.
    fn claims(&mut self, e: EntityId, attr: &Attribute) -> Result<Vec<Value>, ReadError> {
        let cardinality = self.cardinality(attr)?;
        let slot = self.slot(e, attr)?;
        let current: Vec<Value> = reads::resolve_slot(&slot, cardinality, &self.read)
            .current
            .into_iter()
            .map(|d| d.value)
            .filter(|v| v.redacted().is_none())
            .collect();
        if current.is_empty() || !self.expired(e)? {
            return Ok(current);
        }
        Ok(Vec::new())
    }

    /// Whether `e` had expired at the instant expiry is judged at (memoised per run).
    fn expired(&mut self, e: EntityId) -> Result<bool, ReadError> {
        let Some((expires, cardinality, now_ns)) = self.expiry.clone() else {
            return Ok(false);
        };
        if let Some(&known) = self.expired.get(&e) {
            return Ok(known);
        }
        let slot = self.slot(e, &expires)?;
        let held = reads::resolve_slot(&slot, cardinality, &self.read);
        let gone = reads::expiry(held.current.iter().chain(&held.conflicts)).is_some_and(|at| at <= now_ns);
        self.expired.insert(e, gone);
        Ok(gone)
    }

    /// One slot's datoms in tx order: taken from the entity's rows when this run reads
    /// entities whole, else read with one seek.
    fn slot(&mut self, e: EntityId, attr: &Attribute) -> Result<Vec<Datom>, ReadError> {
        if self.whole_entities {
            if let Some(read) = self.entities.get(&e) {
                if let Some(by_attr) = read {
                    return Ok(by_attr.get(attr).cloned().unwrap_or_default());
                }
            } else {
                let read = self.entity_rows(e)?;
                let slot = read
                    .as_ref()
                    .map(|by_attr| by_attr.get(attr).cloned().unwrap_or_default());
                self.entities.insert(e, read);
                if let Some(slot) = slot {
                    return Ok(slot);
                }
            }
        }
        let slot = self.view.slot_datoms(self.store, e, attr)?;
        self.charge(slot.len() as u64)?;
        Ok(slot)
    }

    /// The rows of `e` on main by attribute, if it has at most [`ENTITY_ROWS`].
    fn entity_rows(&mut self, e: EntityId) -> Result<Option<HashMap<Attribute, Vec<Datom>>>, ReadError> {
        let prefix = keys::eavt_entity(self.view.ns, e);
        let rows = self.store.scan(
            Space::State,
            &prefix,
            prefix_end(&prefix).as_deref(),
            ENTITY_ROWS + 1,
        )?;
        self.charge(rows.len() as u64)?;
        if rows.len() > ENTITY_ROWS {
            return Ok(None);
        }
        let mut by_attr: HashMap<Attribute, Vec<Datom>> = HashMap::new();
        for (key, bytes) in rows {
            let d = Datom::decode(&bytes)
                .map_err(|err| CoreError::corrupt(format!("datom row {}", hex(&key)), err))?;
            by_attr.entry(d.attribute.clone()).or_default().push(d);
        }
        Ok(Some(by_attr))
    }

    fn cardinality(&mut self, attr: &Attribute) -> Result<Cardinality, ReadError> {
        if let Some(c) = self.cardinalities.get(attr) {
            return Ok(*c);
        }
        let c = schema::cardinality_at(self.store, self.view.ns, attr, Some(self.as_of))?;
        self.cardinalities.insert(attr.clone(), c);
        Ok(c)
    }

    /// The entities whose current claims of `attr` hold `v`, by the value index.
    fn holding(&mut self, attr: &Attribute, v: &Value) -> Result<Vec<EntityId>, ReadError> {
        let mut candidates = Candidates::new(self.store, &self.view, attr, Some(v), None)?;
        let mut out = Vec::new();
        while let Some(e) = candidates.next()? {
            self.charge(1)?;
            if self.claims(e, attr)?.contains(v) {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// The entities whose current claims of `attr` refer to `target`, by the reverse-reference
    /// index (main only).
    fn referring(&mut self, attr: &Attribute, target: EntityId) -> Result<Vec<EntityId>, ReadError> {
        let mut prefix = keys::vaet_ref(self.view.ns, target);
        prefix.extend_from_slice(attr.as_str().as_bytes());
        prefix.push(0);
        let end = prefix_end(&prefix);
        let mut from = prefix.clone();
        let mut entities: Vec<EntityId> = Vec::new();
        loop {
            let rows = self.store.scan(Space::State, &from, end.as_deref(), SCAN_CHUNK)?;
            self.charge(rows.len() as u64)?;
            for (key, _) in &rows {
                let (e, _, _) = keys::trailing_entity_tx_seq(key).ok_or_else(|| {
                    CoreError::corrupt(format!("reference index row {}", hex(key)), "too short")
                })?;
                if entities.last() != Some(&e) {
                    entities.push(e);
                }
            }
            match rows.last() {
                Some((key, _)) if rows.len() == SCAN_CHUNK => {
                    from = key.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
        let referred = Value::Ref(target);
        let mut out = Vec::new();
        for e in entities {
            if self.claims(e, attr)?.contains(&referred) {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Every current claim of `attr`, in entity order.
    fn all(&mut self, attr: &Attribute) -> Result<Vec<(EntityId, Value)>, ReadError> {
        let mut candidates = Candidates::new(self.store, &self.view, attr, None, None)?;
        let mut out = Vec::new();
        while let Some(e) = candidates.next()? {
            self.charge(1)?;
            for v in self.claims(e, attr)? {
                out.push((e, v));
            }
        }
        Ok(out)
    }
}

/// Whether `row` passes `f`, its variables at `at` (left, then right's if a variable).
fn passes(f: &Filter, row: &Partial, at: &[usize]) -> bool {
    let value_at = |i: usize| at.get(i).and_then(|&s| row[s].as_ref());
    let Some(left) = value_at(0) else {
        return false;
    };
    let right = match &f.right {
        ValueTerm::Value(v) => Some(v),
        ValueTerm::Var(_) => value_at(1),
    };
    let Some(right) = right else {
        return false;
    };
    if left.value_type() != right.value_type() {
        // Kinds are never ordered; they are only ever different.
        return f.op == Compare::Ne;
    }
    f.op.holds(value_order(left, right))
}

/// A clause with where its variables sit in a partial row.
struct Terms<'q> {
    clause: &'q Clause,
    entity_at: Option<usize>,
    value_at: Option<usize>,
}

impl<'q> Terms<'q> {
    /// `clause` with its variables placed by `slot` (`None`: a variable the rows never bind).
    fn of(clause: &'q Clause, slot: impl Fn(&Variable) -> Option<usize>) -> Terms<'q> {
        Terms {
            clause,
            entity_at: match &clause.entity {
                EntityTerm::Var(v) => slot(v),
                EntityTerm::Entity(_) => None,
            },
            value_at: match &clause.value {
                ValueTerm::Var(v) => slot(v),
                ValueTerm::Value(_) => None,
            },
        }
    }

    /// The entity the row (or the clause) fixes: `None` when unbound, or bound to a value
    /// that is not a reference (which no entity position matches).
    fn entity(&self, row: &Partial) -> Option<EntityId> {
        match (&self.clause.entity, self.entity_at) {
            (EntityTerm::Entity(e), _) => Some(*e),
            (EntityTerm::Var(_), Some(i)) => match &row[i] {
                Some(Value::Ref(e)) => Some(*e),
                _ => None,
            },
            (EntityTerm::Var(_), None) => None,
        }
    }

    /// The value the row (or the clause) fixes.
    fn value(&self, row: &Partial) -> Option<Value> {
        match (&self.clause.value, self.value_at) {
            (ValueTerm::Value(v), _) => Some(v.clone()),
            (ValueTerm::Var(_), Some(i)) => row[i].clone(),
            (ValueTerm::Var(_), None) => None,
        }
    }

    /// Whether the claim (`e`, `v`) agrees with the clause's terms as `row` binds them: a
    /// variable the row leaves unbound takes anything, and one variable in both positions
    /// takes a claim whose value is a reference to its own entity.
    fn agrees(&self, row: &Partial, e: EntityId, v: &Value) -> bool {
        let entity = Value::Ref(e);
        let mut bound_here = None;
        match (&self.clause.entity, self.entity_at) {
            (EntityTerm::Entity(x), _) if *x != e => return false,
            (EntityTerm::Var(_), Some(i)) => match &row[i] {
                Some(held) if *held != entity => return false,
                Some(_) => {}
                None => bound_here = Some(i),
            },
            _ => {}
        }
        match (&self.clause.value, self.value_at) {
            (ValueTerm::Value(x), _) => x == v,
            (ValueTerm::Var(_), Some(i)) => match &row[i] {
                Some(held) => held == v,
                None if bound_here == Some(i) => entity == *v,
                None => true,
            },
            (ValueTerm::Var(_), None) => true,
        }
    }
}

/// `rows` with each row kept once (the first of equal ones), in their order.
fn distinct(rows: Vec<Partial>) -> Vec<Partial> {
    let mut seen = std::collections::HashSet::with_capacity(rows.len());
    rows.into_iter()
        .filter(|row| {
            let mut key = Vec::new();
            for v in row {
                match v {
                    Some(v) => {
                        let bytes = v.canonical_bytes();
                        key.push(1);
                        key.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
                        key.extend_from_slice(&bytes);
                    }
                    None => key.push(0),
                }
            }
            seen.insert(key)
        })
        .collect()
}

/// The answer of a query with aggregates from the join's `full` rows (a value for each of
/// `vars`): the distinct rows grouped by the plain variables `find` lists, one answer row per
/// group, each aggregate folding its variable's values over the group's rows; sorted as any
/// answer is. No row joins: no group, so no answer row (not a count of 0).
fn aggregate(q: &Query, vars: &[&Variable], mut full: Vec<Vec<Value>>) -> Result<Vec<Vec<Value>>, ReadError> {
    let slot = |v: &Variable| vars.iter().position(|x| *x == v);
    let keys: Vec<usize> = q
        .find
        .iter()
        .filter_map(|t| match t {
            FindTerm::Var(v) => slot(v),
            FindTerm::Aggregate(..) => None,
        })
        .collect();
    let key_order = |a: &[Value], b: &[Value]| {
        keys.iter()
            .map(|&k| value_order(&a[k], &b[k]))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    full.sort_by(|a, b| key_order(a, b).then_with(|| row_order(a, b)));
    full.dedup_by(|a, b| row_order(a, b) == Ordering::Equal);
    let mut out = Vec::new();
    for group in full.chunk_by(|a, b| key_order(a, b) == Ordering::Equal) {
        let mut row = Vec::with_capacity(q.find.len());
        for (i, term) in q.find.iter().enumerate() {
            let Some(at) = slot(term.variable()) else {
                continue;
            };
            row.push(match term {
                FindTerm::Var(_) => group[0][at].clone(),
                FindTerm::Aggregate(a, v) => fold(*a, group.iter().map(|r| &r[at]))
                    .map_err(|why| ReadError::Aggregate(format!("find[{i}] {term}: {v} {why}")))?,
            });
        }
        out.push(row);
    }
    out.sort_by(|a, b| row_order(a, b));
    Ok(out)
}

/// One aggregate over a group's values (at least one); the error says what it met.
fn fold<'v>(a: Aggregate, mut values: impl Iterator<Item = &'v Value>) -> Result<Value, String> {
    let count = |n: usize| Value::I64(i64::try_from(n).unwrap_or(i64::MAX));
    match a {
        Aggregate::Count => Ok(count(values.count())),
        Aggregate::CountDistinct => {
            let mut distinct: Vec<&Value> = values.collect();
            distinct.sort_by(|x, y| value_order(x, y));
            distinct.dedup_by(|x, y| value_order(x, y) == Ordering::Equal);
            Ok(count(distinct.len()))
        }
        Aggregate::Min => values
            .min_by(|x, y| value_order(x, y))
            .cloned()
            .ok_or_else(|| "has no value".to_string()),
        Aggregate::Max => values
            .max_by(|x, y| value_order(x, y))
            .cloned()
            .ok_or_else(|| "has no value".to_string()),
        Aggregate::Sum | Aggregate::Avg => {
            // Whole numbers add exactly while every value is one; a float makes the sum one.
            let (mut whole, mut float, mut n, mut floats) = (0i64, 0f64, 0usize, false);
            for v in values.by_ref() {
                match v {
                    Value::I64(x) => {
                        whole = whole
                            .checked_add(*x)
                            .ok_or_else(|| format!("sums past the i64 range (at {x}); sum as f64 values"))?;
                    }
                    Value::F64(x) => {
                        float += x;
                        floats = true;
                    }
                    other => {
                        return Err(format!(
                            "holds a {} value, and {} takes numbers (i64, f64)",
                            other.value_type(),
                            a.name()
                        ));
                    }
                }
                n += 1;
            }
            let total = float + whole as f64;
            Ok(match a {
                Aggregate::Avg => Value::F64(total / n.max(1) as f64),
                _ if floats => Value::F64(total),
                _ => Value::I64(whole),
            })
        }
    }
}

/// What one step has looked up by value: the holders of each value, and the attribute's
/// claims when it was read whole.
#[derive(Default)]
struct Holders {
    by_value: HashMap<[u8; 16], Vec<EntityId>>,
    scanned: Option<HashMap<[u8; 16], Vec<EntityId>>>,
}

/// The fingerprint a query's cursor is bound to.
fn query_key(ns: &Namespace, branch: Option<&BranchName>, q: &Query, opts: &QueryOptions) -> QueryKey {
    let mut encoded: Vec<Vec<u8>> = vec![
        ns.as_str().as_bytes().to_vec(),
        branch.map_or("", |b| b.as_str()).as_bytes().to_vec(),
        b"find".to_vec(),
    ];
    encoded.extend(q.find.iter().map(|t| t.to_string().into_bytes()));
    for c in &q.clauses {
        encoded.push(entity_bytes(&c.entity));
        encoded.push(c.attribute.as_str().as_bytes().to_vec());
        encoded.push(term_bytes(&c.value));
    }
    for f in &q.filters {
        encoded.push(f.op.symbol().as_bytes().to_vec());
        encoded.push(f.left.as_str().as_bytes().to_vec());
        encoded.push(term_bytes(&f.right));
    }
    // Tagged, and only when there are some: cursors of queries without one keep their key (and
    // a conjunction of one clause is keyed as the lone clause was).
    let clause_parts = |encoded: &mut Vec<Vec<u8>>, c: &Clause| {
        encoded.push(entity_bytes(&c.entity));
        encoded.push(c.attribute.as_str().as_bytes().to_vec());
        encoded.push(term_bytes(&c.value));
    };
    let conjunction_parts = |encoded: &mut Vec<Vec<u8>>, clauses: &[Clause]| {
        if clauses.len() > 1 {
            encoded.push(b"and".to_vec());
            encoded.push((clauses.len() as u64).to_be_bytes().to_vec());
        }
        for c in clauses {
            clause_parts(encoded, c);
        }
    };
    for group in &q.disjunctions {
        encoded.push(b"or".to_vec());
        encoded.push((group.len() as u64).to_be_bytes().to_vec());
        for alternative in group {
            conjunction_parts(&mut encoded, alternative);
        }
    }
    for group in &q.negations {
        encoded.push(b"not".to_vec());
        conjunction_parts(&mut encoded, group);
    }
    encoded.push(opts.as_of.map_or(0, |t| t.0).to_be_bytes().to_vec());
    encoded.push(vec![u8::from(opts.expired_at_ns.is_some())]);
    if let Some(valid) = opts.valid_at_ns {
        encoded.extend([b"valid-at".to_vec(), valid.to_be_bytes().to_vec()]);
    }
    let parts: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
    QueryKey::of(CursorKind::Query, &parts)
}

/// An entity position as the fingerprint takes it: a variable's name or an id, tagged apart.
fn entity_bytes(t: &EntityTerm) -> Vec<u8> {
    match t {
        EntityTerm::Var(v) => [b"?".as_slice(), v.as_str().as_bytes()].concat(),
        EntityTerm::Entity(e) => [b"#".as_slice(), &e.0.to_be_bytes()].concat(),
    }
}

/// A value position as the fingerprint takes it: a variable's name or a value's canonical
/// bytes, tagged apart.
fn term_bytes(t: &ValueTerm) -> Vec<u8> {
    match t {
        ValueTerm::Var(v) => [b"?".as_slice(), v.as_str().as_bytes()].concat(),
        ValueTerm::Value(v) => [b"=".as_slice(), &v.canonical_bytes()].concat(),
    }
}

/// The answer's order: column by column; values of one kind in their natural order, kinds in
/// their tag order.
fn row_order(a: &[Value], b: &[Value]) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| value_order(x, y))
        .find(|o| o.is_ne())
        .unwrap_or_else(|| a.len().cmp(&b.len()))
}

fn value_order(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::String(x), Value::String(y)) | (Value::Keyword(x), Value::Keyword(y)) => x.cmp(y),
        (Value::Json(x), Value::Json(y)) => x.cmp(y),
        (Value::I64(x), Value::I64(y)) | (Value::Instant(x), Value::Instant(y)) => x.cmp(y),
        (Value::F64(x), Value::F64(y)) => x.total_cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Bytes(x), Value::Bytes(y)) => x.cmp(y),
        (Value::Ref(x), Value::Ref(y)) => x.cmp(y),
        (Value::Vector(x), Value::Vector(y)) => x
            .iter()
            .zip(y)
            .map(|(p, q)| p.total_cmp(q))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        _ => a
            .value_type()
            .tag()
            .cmp(&b.value_type().tag())
            .then_with(|| a.canonical_bytes().cmp(&b.canonical_bytes())),
    }
}
