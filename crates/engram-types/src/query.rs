//! Join queries: a conjunction of clauses `[entity attribute value]` over one namespace's
//! current claims, with variables shared between clauses, and the variables the answer lists.
//!
//! ```text
//! find ?task ?owner
//! where [?task  :task/status  :status/open]
//!       [?task  :task/owner   ?owner]
//!       [?owner :agent/team   "infra"]
//! ```
//!
//! A `not` clause removes the rows for which its pattern matches some current claim:
//!
//! ```text
//! find ?task
//! where [?task :task/status :status/open]
//!       (not [?task :task/owner ?anyone])
//! ```
//!
//! At least one of its variables is bound by the other clauses, so a `not` is asked of each
//! row, never of the whole store; a variable in its other position that no clause binds is
//! local to it and matches anything (`?anyone` above: "owned by no one").
//!
//! An `or` group extends a row by any one of its clauses, which all name the same variables:
//!
//! ```text
//! find ?task
//! where (or [?task :task/status :status/open]
//!           [?task :task/status :status/blocked])
//! ```
//!
//! A `find` entry may be an aggregate of a variable, `(count ?task)`, `(count-distinct ?x)`,
//! `(sum ?x)`, `(avg ?x)`, `(min ?x)` or `(max ?x)`: the answer then has one row per group of
//! the plain variables listed (one row in all when none is), each aggregate folding the
//! values its variable takes over the group's rows of the join, as SQL's `GROUP BY` folds
//! joined rows:
//!
//! ```text
//! find ?owner (count ?task)
//! where [?task :task/status :status/open]
//!       [?task :task/owner  ?owner]
//! ```
//!
//! The attribute of a clause is always given (an attribute variable would let one clause read
//! every attribute, past the read scope that hides some); the entity is a variable or an entity
//! id; the value a variable or a value. A variable in an entity position holds an entity id,
//! so one bound by a `ref` value joins a reference to its target. This module checks the shape
//! only; what a query reads is `engram_core::query`'s.
//!
//! Must not depend on: storage, Raft, gRPC.

use std::collections::BTreeSet;
use std::fmt;

use crate::{Attribute, EntityId, ValidationError, Value};

/// The most clauses one query holds.
pub const MAX_CLAUSES: usize = 16;
/// The longest variable name, `?` included.
pub const MAX_VARIABLE_BYTES: usize = 64;

/// A variable: `?` then letters, digits, `_` or `-` (`?task`, `?owner-2`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Variable(String);

impl Variable {
    pub fn new(name: impl Into<String>) -> Result<Variable, &'static str> {
        let name = name.into();
        let rest = name.strip_prefix('?').ok_or("a variable starts with ?")?;
        if rest.is_empty() {
            return Err("a variable needs a name after ?");
        }
        if name.len() > MAX_VARIABLE_BYTES {
            return Err("a variable is at most 64 bytes long");
        }
        if !rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err("a variable's name holds only letters, digits, _ and -");
        }
        Ok(Variable(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What stands in a clause's entity position.
#[derive(Clone, Debug, PartialEq)]
pub enum EntityTerm {
    Var(Variable),
    Entity(EntityId),
}

/// What stands in a clause's value position.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueTerm {
    Var(Variable),
    Value(Value),
}

/// One `[entity attribute value]` pattern: it matches each current claim of the attribute
/// whose entity and value agree with the terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Clause {
    pub entity: EntityTerm,
    pub attribute: Attribute,
    pub value: ValueTerm,
}

impl Clause {
    /// The clause's variables, entity's first.
    pub fn variables(&self) -> impl Iterator<Item = &Variable> {
        let e = match &self.entity {
            EntityTerm::Var(v) => Some(v),
            EntityTerm::Entity(_) => None,
        };
        let v = match &self.value {
            ValueTerm::Var(v) => Some(v),
            ValueTerm::Value(_) => None,
        };
        e.into_iter().chain(v)
    }
}

impl fmt::Display for Clause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        match &self.entity {
            EntityTerm::Var(v) => write!(f, "{v}")?,
            EntityTerm::Entity(e) => write!(f, "{}", e.0)?,
        }
        write!(f, " {} ", self.attribute)?;
        write!(f, "{}]", self.value)
    }
}

impl fmt::Display for ValueTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueTerm::Var(v) => write!(f, "{v}"),
            ValueTerm::Value(v) => write!(f, "{}", crate::clip(&shown(v), crate::EXCERPT_MAX_BYTES)),
        }
    }
}

/// A value as a clause prints it: strings quoted, others by kind.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::I64(i) => i.to_string(),
        Value::F64(x) => x.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Instant(ns) => format!("#instant {ns}"),
        Value::Ref(e) => format!("#ref {}", e.0),
        Value::Keyword(k) => k.clone(),
        Value::Json(j) => j.clone(),
        Value::Bytes(b) => format!("#bytes ({} bytes)", b.len()),
        Value::Vector(v) => format!("#vector ({} components)", v.len()),
        Value::Redacted(_) => "#redacted".into(),
    }
}

/// How a filter compares a variable's value with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    Lt,
    Le,
    Gt,
    Ge,
    Ne,
}

impl Compare {
    pub const ALL: [Compare; 5] = [Compare::Lt, Compare::Le, Compare::Gt, Compare::Ge, Compare::Ne];

    /// `<`, `<=`, `>`, `>=` or `!=`.
    pub fn parse(symbol: &str) -> Option<Compare> {
        Compare::ALL.into_iter().find(|c| c.symbol() == symbol)
    }

    pub fn symbol(self) -> &'static str {
        match self {
            Compare::Lt => "<",
            Compare::Le => "<=",
            Compare::Gt => ">",
            Compare::Ge => ">=",
            Compare::Ne => "!=",
        }
    }

    /// Whether the comparison holds for `left` against `right` ordered as `order`.
    pub fn holds(self, order: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::{Equal, Greater, Less};
        match self {
            Compare::Lt => order == Less,
            Compare::Le => order != Greater,
            Compare::Gt => order == Greater,
            Compare::Ge => order != Less,
            Compare::Ne => order != Equal,
        }
    }
}

/// `(op ?left right)`: keeps the rows whose value of `left` compares so with `right` (a value
/// or another variable). Values of different kinds are never ordered: `<`, `<=`, `>`, `>=`
/// between them do not hold, `!=` does.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    pub op: Compare,
    pub left: Variable,
    pub right: ValueTerm,
}

impl Filter {
    /// Its variables, the left first.
    pub fn variables(&self) -> impl Iterator<Item = &Variable> {
        let right = match &self.right {
            ValueTerm::Var(v) => Some(v),
            ValueTerm::Value(_) => None,
        };
        std::iter::once(&self.left).chain(right)
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({} {} ", self.op.symbol(), self.left)?;
        write!(f, "{})", self.right)
    }
}

/// How an aggregate folds the values its variable takes over a group's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    /// The rows (an `i64`).
    Count,
    /// The distinct values (an `i64`).
    CountDistinct,
    /// The sum of numbers: an `i64` when every value is one, else an `f64`.
    Sum,
    /// The mean of numbers (an `f64`).
    Avg,
    /// The least value, in the answer's order (values of one kind in their natural order).
    Min,
    /// The greatest value, likewise.
    Max,
}

impl Aggregate {
    pub const ALL: [Aggregate; 6] = [
        Aggregate::Count,
        Aggregate::CountDistinct,
        Aggregate::Sum,
        Aggregate::Avg,
        Aggregate::Min,
        Aggregate::Max,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Aggregate::Count => "count",
            Aggregate::CountDistinct => "count-distinct",
            Aggregate::Sum => "sum",
            Aggregate::Avg => "avg",
            Aggregate::Min => "min",
            Aggregate::Max => "max",
        }
    }

    pub fn parse(name: &str) -> Option<Aggregate> {
        Aggregate::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// One column of the answer: a variable's value, or an aggregate of its values.
#[derive(Clone, Debug, PartialEq)]
pub enum FindTerm {
    Var(Variable),
    Aggregate(Aggregate, Variable),
}

impl FindTerm {
    /// `?x`, or `(aggregate ?x)` (see [`Aggregate`]).
    pub fn parse(text: &str) -> Result<FindTerm, String> {
        let Some(inner) = text.strip_prefix('(') else {
            return Variable::new(text).map(FindTerm::Var).map_err(str::to_string);
        };
        let inner = inner
            .strip_suffix(')')
            .ok_or("an aggregate is written (name ?variable), closed by )")?;
        let mut words = inner.split_whitespace();
        let (Some(name), Some(var), None) = (words.next(), words.next(), words.next()) else {
            return Err("an aggregate is written (name ?variable): a name and one variable".into());
        };
        let aggregate = Aggregate::parse(name).ok_or_else(|| {
            let names: Vec<&str> = Aggregate::ALL.iter().map(|a| a.name()).collect();
            format!(
                "{} is not an aggregate ({})",
                crate::excerpt(name),
                names.join(", ")
            )
        })?;
        let var = Variable::new(var)?;
        Ok(FindTerm::Aggregate(aggregate, var))
    }

    /// The variable it lists or folds.
    pub fn variable(&self) -> &Variable {
        match self {
            FindTerm::Var(v) | FindTerm::Aggregate(_, v) => v,
        }
    }
}

impl From<Variable> for FindTerm {
    fn from(v: Variable) -> FindTerm {
        FindTerm::Var(v)
    }
}

impl fmt::Display for FindTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FindTerm::Var(v) => write!(f, "{v}"),
            FindTerm::Aggregate(a, v) => write!(f, "({} {v})", a.name()),
        }
    }
}

/// A query: the variables (or aggregates) to list, the clauses every answer satisfies, the
/// filters its values pass, and the `not` groups no answer satisfies.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub find: Vec<FindTerm>,
    pub clauses: Vec<Clause>,
    pub filters: Vec<Filter>,
    /// `(not [e a v] ...)`: each a conjunction of 1 to [`MAX_CLAUSES`] clauses. A row stays
    /// only if the group, its variables bound from the row, matches no current claims at once;
    /// a variable no clause outside binds is the group's own (shared by its clauses, free to
    /// take any value).
    pub negations: Vec<Vec<Clause>>,
    /// `(or alternative alternative ...)`: each group extends a row by any one of its
    /// alternatives, each a conjunction `(and [e a v] ...)` of 1 to [`MAX_CLAUSES`] clauses
    /// (a lone clause is a conjunction of one). A group binds the variables every alternative
    /// names ([`shared_variables`]); a variable only some name is that alternative's own.
    pub disjunctions: Vec<Vec<Vec<Clause>>>,
}

/// The most clause patterns one query holds in all: its clauses, every `or` alternative's and
/// every `not` group's.
pub const MAX_PATTERNS: usize = 64;

/// The variables a conjunction names, in order of first appearance.
pub fn conjunction_variables(clauses: &[Clause]) -> Vec<&Variable> {
    let mut out: Vec<&Variable> = Vec::new();
    for v in clauses.iter().flat_map(Clause::variables) {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// The variables an `or` group binds: those every alternative names, in the first
/// alternative's order.
pub fn shared_variables(group: &[Vec<Clause>]) -> Vec<&Variable> {
    let Some((first, rest)) = group.split_first() else {
        return Vec::new();
    };
    conjunction_variables(first)
        .into_iter()
        .filter(|v| {
            rest.iter()
                .all(|alt| alt.iter().flat_map(Clause::variables).any(|x| x == *v))
        })
        .collect()
}

/// `base[k]` for an alternative (or group) of one clause, `base[k].clauses[m]` for clause `m`
/// of one of several: how errors and plans name a clause of a conjunction.
pub fn conjunction_field(base: &str, k: usize, m: usize, len: usize) -> String {
    if len == 1 {
        format!("{base}[{k}]")
    } else {
        format!("{base}[{k}].clauses[{m}]")
    }
}

impl Query {
    /// Checks the shape: at least one clause and one variable to find, at most
    /// [`MAX_CLAUSES`] clauses, each variable found bound by some clause and found once, and
    /// the values valid ones a request may name.
    pub fn new<F: Into<FindTerm>>(find: Vec<F>, clauses: Vec<Clause>) -> Result<Query, ValidationError> {
        Query::with_or(find, clauses, Vec::new())
    }

    /// [`Query::new`] with `or` groups (`disjunctions`, at most [`MAX_CLAUSES`]): each of 2 to
    /// [`MAX_CLAUSES`] alternatives, each a conjunction of 1 to [`MAX_CLAUSES`] clauses. A
    /// variable only some alternatives of a group name is their own: no clause and no other
    /// group may name it. A query needs a clause or a group; what a group binds is bound.
    pub fn with_or<F: Into<FindTerm>>(
        find: Vec<F>,
        clauses: Vec<Clause>,
        disjunctions: Vec<Vec<Vec<Clause>>>,
    ) -> Result<Query, ValidationError> {
        let find: Vec<FindTerm> = find.into_iter().map(Into::into).collect();
        let invalid = |m: String| Err(ValidationError::Query(m));
        if clauses.is_empty() && disjunctions.is_empty() {
            return invalid("clauses: a query needs at least one clause".into());
        }
        if disjunctions.len() > MAX_CLAUSES {
            return invalid(format!(
                "or_clauses: {} or groups, at most {MAX_CLAUSES} are allowed",
                disjunctions.len()
            ));
        }
        for (i, group) in disjunctions.iter().enumerate() {
            let base = format!("or_clauses[{i}].alternatives");
            if group.len() < 2 || group.len() > MAX_CLAUSES {
                return invalid(format!(
                    "or_clauses[{i}]: {} alternatives; an or holds 2 to {MAX_CLAUSES}",
                    group.len()
                ));
            }
            for (k, alternative) in group.iter().enumerate() {
                check_conjunction(&base, k, alternative, "an and")?;
            }
            // A variable only some alternatives name is theirs alone: named anywhere else, it
            // would join to a row in some alternatives and not in others.
            let shared = shared_variables(group);
            for (k, alternative) in group.iter().enumerate() {
                for v in conjunction_variables(alternative) {
                    if shared.contains(&v) {
                        continue;
                    }
                    let elsewhere = clauses.iter().flat_map(Clause::variables).any(|x| x == v)
                        || disjunctions.iter().enumerate().any(|(j, g)| {
                            j != i && g.iter().flatten().flat_map(Clause::variables).any(|x| x == v)
                        });
                    if elsewhere {
                        return invalid(format!(
                            "{base}[{k}]: {v} is named by this alternative but not by every \
                             alternative of the or, and also outside it; an or binds only the \
                             variables every alternative names, so name {v} in each alternative \
                             or rename it here"
                        ));
                    }
                }
            }
        }
        if clauses.len() > MAX_CLAUSES {
            return invalid(format!(
                "clauses: {} clauses, at most {MAX_CLAUSES} are allowed",
                clauses.len()
            ));
        }
        let patterns = clauses.len() + disjunctions.iter().flatten().map(Vec::len).sum::<usize>();
        if patterns > MAX_PATTERNS {
            return invalid(format!(
                "or_clauses: the query holds {patterns} clause patterns, at most {MAX_PATTERNS} are allowed"
            ));
        }
        if find.is_empty() {
            return invalid("find: name at least one variable to list".into());
        }
        for (i, c) in clauses.iter().enumerate() {
            if let ValueTerm::Value(v) = &c.value
                && let Err(e) = v.validate()
            {
                return invalid(format!("clauses[{i}].value: {e}"));
            }
        }
        let q = Query {
            find,
            clauses,
            filters: Vec::new(),
            negations: Vec::new(),
            disjunctions,
        };
        let bound = q.variables();
        let mut listed = BTreeSet::new();
        for (i, term) in q.find.iter().enumerate() {
            let v = term.variable();
            if !bound.contains(&v) {
                return invalid(format!("find[{i}]: {v} is bound by no clause"));
            }
            if !listed.insert(term.to_string()) {
                return invalid(format!("find[{i}]: {term} is listed twice"));
            }
        }
        Ok(q)
    }

    /// Every attribute the query reads: its clauses', its `not` groups' and every `or`
    /// alternative's (what a read gate must let the caller see).
    pub fn attributes(&self) -> impl Iterator<Item = &Attribute> {
        self.clauses
            .iter()
            .chain(self.negations.iter().flatten())
            .chain(self.disjunctions.iter().flatten().flatten())
            .map(|c| &c.attribute)
    }

    /// The query with `filters` (at most [`MAX_CLAUSES`]), each variable of them bound by a
    /// clause.
    pub fn filtered(mut self, filters: Vec<Filter>) -> Result<Query, ValidationError> {
        let invalid = |m: String| Err(ValidationError::Query(m));
        if filters.len() > MAX_CLAUSES {
            return invalid(format!(
                "filters: {} filters, at most {MAX_CLAUSES} are allowed",
                filters.len()
            ));
        }
        let bound = self.variables();
        for (i, f) in filters.iter().enumerate() {
            if let Some(v) = f.variables().find(|v| !bound.contains(v)) {
                return invalid(format!("filters[{i}]: {v} is bound by no clause"));
            }
            if let ValueTerm::Value(v) = &f.right
                && let Err(e) = v.validate()
            {
                return invalid(format!("filters[{i}].right: {e}"));
            }
        }
        self.filters = filters;
        Ok(self)
    }

    /// The query with `negations` (at most [`MAX_CLAUSES`] groups of 1 to [`MAX_CLAUSES`]
    /// clauses): each group names at least one variable the clauses bind (so it is asked of a
    /// row, never of the whole store); its other variables are its own.
    pub fn negated(mut self, negations: Vec<Vec<Clause>>) -> Result<Query, ValidationError> {
        let invalid = |m: String| Err(ValidationError::Query(m));
        if negations.len() > MAX_CLAUSES {
            return invalid(format!(
                "not_clauses: {} not clauses, at most {MAX_CLAUSES} are allowed",
                negations.len()
            ));
        }
        let patterns = self.clauses.len()
            + self.disjunctions.iter().flatten().map(Vec::len).sum::<usize>()
            + negations.iter().map(Vec::len).sum::<usize>();
        if patterns > MAX_PATTERNS {
            return invalid(format!(
                "not_clauses: the query holds {patterns} clause patterns, at most {MAX_PATTERNS} are allowed"
            ));
        }
        let bound = self.variables();
        for (i, group) in negations.iter().enumerate() {
            check_conjunction("not_clauses", i, group, "a not")?;
            if !group
                .iter()
                .flat_map(Clause::variables)
                .any(|v| bound.contains(&v))
            {
                let shown: Vec<String> = group.iter().map(ToString::to_string).collect();
                return invalid(format!(
                    "not_clauses[{i}]: {} shares no variable with the clauses; a not clause \
                     removes rows, so it needs a variable the clauses bind",
                    shown.join(" ")
                ));
            }
        }
        self.negations = negations;
        Ok(self)
    }

    /// The query a single `where` list describes, clauses and filters mixed (the form the CLI,
    /// MCP and Python take): checked as [`Query::new`] and [`Query::filtered`] check, an error
    /// naming the entry by its place in `where` (`where[3]`) rather than in its own list.
    pub fn from_where<F: Into<FindTerm>>(
        find: Vec<F>,
        entries: Vec<Where>,
    ) -> Result<Query, ValidationError> {
        let (mut clauses, mut filters, mut negations) = (Vec::new(), Vec::new(), Vec::new());
        let (mut clause_at, mut filter_at, mut negation_at) = (Vec::new(), Vec::new(), Vec::new());
        let (mut disjunctions, mut or_at) = (Vec::new(), Vec::new());
        for (i, entry) in entries.into_iter().enumerate() {
            match entry {
                Where::Clause(c) => {
                    clauses.push(c);
                    clause_at.push(i);
                }
                Where::Filter(f) => {
                    filters.push(f);
                    filter_at.push(i);
                }
                Where::Not(group) => {
                    negations.push(group);
                    negation_at.push(i);
                }
                Where::Or(group) => {
                    disjunctions.push(group);
                    or_at.push(i);
                }
            }
        }
        Query::with_or(find, clauses, disjunctions)
            .and_then(|q| q.filtered(filters))
            .and_then(|q| q.negated(negations))
            .map_err(|e| match e {
                ValidationError::Query(m) => {
                    let m = renumber(&m, "clauses", &clause_at);
                    let m = renumber(&m, "filters", &filter_at);
                    let m = renumber(&m, "or_clauses", &or_at);
                    ValidationError::Query(renumber(&m, "not_clauses", &negation_at))
                }
                other => other,
            })
    }

    /// Whether `find` lists an aggregate (the answer is then one row per group).
    pub fn aggregates(&self) -> bool {
        self.find.iter().any(|t| matches!(t, FindTerm::Aggregate(..)))
    }

    /// Every variable the query binds, in order of first appearance in the clauses (then
    /// those each `or` group binds).
    pub fn variables(&self) -> Vec<&Variable> {
        let mut out: Vec<&Variable> = conjunction_variables(&self.clauses);
        for v in self.disjunctions.iter().flat_map(|g| shared_variables(g)) {
            if !out.contains(&v) {
                out.push(v);
            }
        }
        out
    }
}

/// Checks conjunction `k` of the list `base` (an `or` group's alternatives, the `not` groups):
/// 1 to [`MAX_CLAUSES`] clauses, each value one a request may name; `what` names it in errors.
fn check_conjunction(base: &str, k: usize, clauses: &[Clause], what: &str) -> Result<(), ValidationError> {
    if clauses.is_empty() || clauses.len() > MAX_CLAUSES {
        return Err(ValidationError::Query(format!(
            "{base}[{k}]: {} clauses; {what} holds 1 to {MAX_CLAUSES}",
            clauses.len()
        )));
    }
    for (m, c) in clauses.iter().enumerate() {
        if let ValueTerm::Value(v) = &c.value
            && let Err(e) = v.validate()
        {
            return Err(ValidationError::Query(format!(
                "{}.value: {e}",
                conjunction_field(base, k, m, clauses.len())
            )));
        }
    }
    Ok(())
}

/// One entry of a mixed `where` list.
#[derive(Clone, Debug, PartialEq)]
pub enum Where {
    Clause(Clause),
    Filter(Filter),
    /// `(not [e a v] ...)`: a conjunction of one clause or more.
    Not(Vec<Clause>),
    /// `(or [e a v] (and [e a v] [e a v]) ...)`: alternatives, each a conjunction.
    Or(Vec<Vec<Clause>>),
}

/// `kind[i]...` (a position in its own list) as `where[j]...`, `j` the entry's place in the
/// mixed list; a message about the whole list (`clauses: ...`) becomes `where: ...`.
fn renumber(message: &str, kind: &str, places: &[usize]) -> String {
    let Some(rest) = message.strip_prefix(kind) else {
        return message.to_string();
    };
    let indexed = rest
        .strip_prefix('[')
        .and_then(|r| r.split_once(']'))
        .and_then(|(n, tail)| Some((places.get(n.parse::<usize>().ok()?)?, tail)));
    match indexed {
        Some((j, tail)) => format!("where[{j}]{tail}"),
        None => format!("where{rest}"),
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("find")?;
        for v in &self.find {
            write!(f, " {v}")?;
        }
        f.write_str(" where")?;
        for c in &self.clauses {
            write!(f, " {c}")?;
        }
        for filter in &self.filters {
            write!(f, " {filter}")?;
        }
        for group in &self.disjunctions {
            f.write_str(" (or")?;
            for alternative in group {
                match alternative.as_slice() {
                    [c] => write!(f, " {c}")?,
                    clauses => {
                        f.write_str(" (and")?;
                        for c in clauses {
                            write!(f, " {c}")?;
                        }
                        f.write_str(")")?;
                    }
                }
            }
            f.write_str(")")?;
        }
        for group in &self.negations {
            f.write_str(" (not")?;
            for c in group {
                write!(f, " {c}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str) -> Variable {
        Variable::new(name).expect("valid")
    }

    fn clause(e: EntityTerm, a: &str, v: ValueTerm) -> Clause {
        Clause {
            entity: e,
            attribute: Attribute::new(a).expect("valid"),
            value: v,
        }
    }

    #[test]
    fn variables_are_checked_by_name() {
        assert!(Variable::new("?task").is_ok());
        assert!(Variable::new("?owner-2_b").is_ok());
        assert_eq!(Variable::new("task"), Err("a variable starts with ?"));
        assert_eq!(Variable::new("?"), Err("a variable needs a name after ?"));
        assert!(Variable::new("?a b").is_err());
        assert!(Variable::new(format!("?{}", "x".repeat(64))).is_err());
    }

    #[test]
    fn a_query_lists_only_variables_its_clauses_bind() {
        let c = clause(
            EntityTerm::Var(var("?t")),
            ":task/owner",
            ValueTerm::Var(var("?o")),
        );
        let q = Query::new(vec![var("?o"), var("?t")], vec![c.clone()]).expect("valid");
        assert_eq!(q.variables(), vec![&var("?t"), &var("?o")]);
        assert_eq!(q.to_string(), "find ?o ?t where [?t :task/owner ?o]");

        let unbound = Query::new(vec![var("?x")], vec![c.clone()]).unwrap_err();
        assert_eq!(
            unbound.to_string(),
            "invalid query: find[0]: ?x is bound by no clause"
        );
        let twice = Query::new(vec![var("?t"), var("?t")], vec![c.clone()]).unwrap_err();
        assert!(
            twice.to_string().contains("find[1]: ?t is listed twice"),
            "{twice}"
        );
        assert!(Query::new(vec![var("?t")], vec![]).is_err());
        assert!(Query::new(Vec::<Variable>::new(), vec![c.clone()]).is_err());
        let many = vec![c; MAX_CLAUSES + 1];
        assert!(
            Query::new(vec![var("?t")], many)
                .unwrap_err()
                .to_string()
                .contains("at most 16")
        );
    }

    #[test]
    fn find_lists_variables_or_aggregates_of_bound_ones() {
        assert_eq!(FindTerm::parse("?t"), Ok(FindTerm::Var(var("?t"))));
        assert_eq!(
            FindTerm::parse("(count-distinct ?o)"),
            Ok(FindTerm::Aggregate(Aggregate::CountDistinct, var("?o")))
        );
        for a in Aggregate::ALL {
            let text = format!("({} ?x)", a.name());
            let term = FindTerm::parse(&text).expect("valid");
            assert_eq!(term.to_string(), text);
            assert_eq!(Aggregate::parse(a.name()), Some(a));
        }
        let refused = |text: &str| FindTerm::parse(text).unwrap_err();
        let unknown = refused("(median ?x)");
        assert!(
            unknown.contains("median")
                && unknown.contains(" is not an aggregate (count, count-distinct, sum, avg, min, max)"),
            "{unknown}"
        );
        assert!(refused("(count ?x").contains("closed by )"));
        assert!(refused("(count)").contains("a name and one variable"));
        assert!(refused("(count ?x ?y)").contains("a name and one variable"));
        assert_eq!(refused("(count x)"), "a variable starts with ?");
        assert_eq!(refused("x"), "a variable starts with ?");

        let c = clause(
            EntityTerm::Var(var("?t")),
            ":task/owner",
            ValueTerm::Var(var("?o")),
        );
        let count = FindTerm::Aggregate(Aggregate::Count, var("?t"));
        let q = Query::new(vec![FindTerm::Var(var("?o")), count.clone()], vec![c.clone()]).expect("valid");
        assert!(q.aggregates());
        assert_eq!(q.to_string(), "find ?o (count ?t) where [?t :task/owner ?o]");
        assert!(
            !Query::new(vec![var("?o")], vec![c.clone()])
                .expect("valid")
                .aggregates()
        );
        let unbound = Query::new(
            vec![FindTerm::Aggregate(Aggregate::Sum, var("?h"))],
            vec![c.clone()],
        );
        assert_eq!(
            unbound.unwrap_err().to_string(),
            "invalid query: find[0]: ?h is bound by no clause"
        );
        let twice = Query::new(vec![count.clone(), count], vec![c.clone()]).unwrap_err();
        assert!(
            twice.to_string().contains("find[1]: (count ?t) is listed twice"),
            "{twice}"
        );
        // A variable and an aggregate of it are two columns.
        let both = vec![
            FindTerm::Var(var("?t")),
            FindTerm::Aggregate(Aggregate::Count, var("?t")),
        ];
        assert!(Query::new(both, vec![c]).is_ok());
    }

    #[test]
    fn an_or_group_binds_what_every_alternative_names() {
        let status = |v: &str| {
            vec![clause(
                EntityTerm::Var(var("?t")),
                ":task/status",
                ValueTerm::Value(Value::Keyword(v.into())),
            )]
        };
        let group = vec![status(":s/open"), status(":s/blocked")];
        // A query of one `or` group alone: what it binds is bound.
        let q = Query::with_or(vec![var("?t")], vec![], vec![group.clone()]).expect("valid");
        assert_eq!(
            q.to_string(),
            "find ?t where (or [?t :task/status :s/open] [?t :task/status :s/blocked])"
        );
        assert_eq!(q.variables(), vec![&var("?t")]);
        assert_eq!(q.attributes().count(), 2);
        let owner = |o: &str| clause(EntityTerm::Var(var("?t")), ":task/owner", ValueTerm::Var(var(o)));
        let team = |o: &str| {
            clause(
                EntityTerm::Var(var(o)),
                ":agent/team",
                ValueTerm::Value(Value::String("infra".into())),
            )
        };
        // An alternative of several clauses, with a variable of its own (?o): the group binds
        // ?t alone, so ?o can be neither listed nor compared.
        let owned_by_infra = vec![owner("?o"), team("?o")];
        let either = vec![status(":s/open"), owned_by_infra.clone()];
        let q = Query::with_or(vec![var("?t")], vec![], vec![either.clone()]).expect("valid");
        assert_eq!(
            q.to_string(),
            "find ?t where (or [?t :task/status :s/open] (and [?t :task/owner ?o] [?o :agent/team \"infra\"]))"
        );
        assert_eq!(q.variables(), vec![&var("?t")]);
        assert_eq!(shared_variables(&either), vec![&var("?t")]);
        assert_eq!(q.attributes().count(), 3);
        let refused = |find: &str, clauses: Vec<Clause>, groups: Vec<Vec<Vec<Clause>>>| {
            Query::with_or(vec![var(find)], clauses, groups)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused("?o", vec![], vec![either.clone()]),
            "invalid query: find[0]: ?o is bound by no clause"
        );
        // Named outside the group too, it would join in one alternative and not the other.
        let outside = refused("?t", vec![owner("?o")], vec![either.clone()]);
        assert!(
            outside.starts_with(
                "invalid query: or_clauses[0].alternatives[1]: ?o is named by this alternative but not by every alternative"
            ),
            "{outside}"
        );
        assert!(
            refused("?t", vec![], vec![vec![status(":s/open")]])
                .contains("or_clauses[0]: 1 alternatives; an or holds 2 to 16")
        );
        assert!(
            refused("?t", vec![], vec![vec![status(":s/open"), vec![]]])
                .contains("or_clauses[0].alternatives[1]: 0 clauses; an and holds 1 to 16")
        );
        let nan = vec![
            owner("?o"),
            clause(
                EntityTerm::Var(var("?o")),
                ":agent/load",
                ValueTerm::Value(Value::F64(f64::NAN)),
            ),
        ];
        assert!(
            refused("?t", vec![], vec![vec![status(":s/open"), nan]])
                .contains("or_clauses[0].alternatives[1].clauses[1].value:")
        );
        let wide = vec![vec![owner("?o"); MAX_CLAUSES]; MAX_CLAUSES];
        assert!(
            refused("?t", vec![], vec![wide]).contains(&format!("clause patterns, at most {MAX_PATTERNS}"))
        );
        assert!(refused("?t", vec![], vec![]).contains("needs at least one clause"));
        // Placed by its entry in a mixed list; a filter on what only the group binds is fine.
        let placed = Query::from_where(
            vec![var("?t")],
            vec![Where::Clause(owner("?o")), Where::Or(either.clone())],
        )
        .unwrap_err();
        assert!(
            placed.to_string().contains("where[1].alternatives[1]"),
            "{placed}"
        );
        let filtered = Query::from_where(
            vec![var("?t")],
            vec![
                Where::Or(group.clone()),
                Where::Filter(Filter {
                    op: Compare::Ne,
                    left: var("?t"),
                    right: ValueTerm::Value(Value::Ref(EntityId(3))),
                }),
            ],
        );
        assert!(filtered.is_ok(), "{filtered:?}");
        let on_own = Query::from_where(
            vec![var("?t")],
            vec![
                Where::Or(either),
                Where::Filter(Filter {
                    op: Compare::Ne,
                    left: var("?o"),
                    right: ValueTerm::Value(Value::Ref(EntityId(3))),
                }),
            ],
        )
        .unwrap_err();
        assert_eq!(
            on_own.to_string(),
            "invalid query: where[1]: ?o is bound by no clause"
        );
    }

    #[test]
    fn filters_compare_bound_variables_only() {
        let c = clause(
            EntityTerm::Var(var("?t")),
            ":task/priority",
            ValueTerm::Var(var("?p")),
        );
        let q = Query::new(vec![var("?t")], vec![c]).expect("valid");
        let above = Filter {
            op: Compare::Gt,
            left: var("?p"),
            right: ValueTerm::Value(Value::I64(2)),
        };
        let q2 = q.clone().filtered(vec![above]).expect("valid");
        assert_eq!(q2.to_string(), "find ?t where [?t :task/priority ?p] (> ?p 2)");
        let unbound = Filter {
            op: Compare::Ne,
            left: var("?p"),
            right: ValueTerm::Var(var("?q")),
        };
        let err = q.filtered(vec![unbound]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid query: filters[0]: ?q is bound by no clause"
        );
        use std::cmp::Ordering::{Equal, Greater, Less};
        let table = [
            (Compare::Lt, [true, false, false]),
            (Compare::Le, [true, true, false]),
            (Compare::Gt, [false, false, true]),
            (Compare::Ge, [false, true, true]),
            (Compare::Ne, [true, false, true]),
        ];
        for (op, expect) in table {
            assert_eq!(Compare::parse(op.symbol()), Some(op));
            assert_eq!([Less, Equal, Greater].map(|o| op.holds(o)), expect, "{op:?}");
        }
        assert_eq!(Compare::parse("=="), None);
    }

    #[test]
    fn a_mixed_where_list_names_an_entry_by_its_place() {
        let c = |v: &str| {
            Where::Clause(clause(
                EntityTerm::Var(var("?t")),
                ":task/priority",
                ValueTerm::Var(var(v)),
            ))
        };
        let f = |v: &str| {
            Where::Filter(Filter {
                op: Compare::Gt,
                left: var(v),
                right: ValueTerm::Value(Value::I64(1)),
            })
        };
        let q = Query::from_where(vec![var("?t")], vec![f("?p"), c("?p")]).expect("valid");
        assert_eq!((q.clauses.len(), q.filters.len()), (1, 1));
        let err = Query::from_where(vec![var("?t")], vec![c("?p"), c("?q"), f("?x")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid query: where[2]: ?x is bound by no clause"
        );
        let err = Query::from_where(vec![var("?t")], vec![f("?p")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid query: where: a query needs at least one clause"
        );
    }

    #[test]
    fn a_not_clause_shares_a_variable_with_the_clauses() {
        let open = clause(
            EntityTerm::Var(var("?t")),
            ":task/status",
            ValueTerm::Value(Value::Keyword(":status/open".into())),
        );
        let owned = |e: &str, v: &str| clause(EntityTerm::Var(var(e)), ":task/owner", ValueTerm::Var(var(v)));
        let q = Query::new(vec![var("?t")], vec![open.clone()]).expect("valid");
        let unowned = q
            .clone()
            .negated(vec![vec![owned("?t", "?anyone")]])
            .expect("valid");
        assert_eq!(
            unowned.to_string(),
            "find ?t where [?t :task/status :status/open] (not [?t :task/owner ?anyone])"
        );
        let apart = q.clone().negated(vec![vec![owned("?x", "?y")]]).unwrap_err();
        assert!(
            apart
                .to_string()
                .starts_with("invalid query: not_clauses[0]: [?x :task/owner ?y] shares no variable"),
            "{apart}"
        );
        // A bound variable may stand in both positions (the tasks that do not own themselves).
        assert!(q.clone().negated(vec![vec![owned("?t", "?t")]]).is_ok());
        let many = vec![vec![owned("?t", "?o")]; MAX_CLAUSES + 1];
        assert!(
            q.clone()
                .negated(many)
                .unwrap_err()
                .to_string()
                .contains("at most 16")
        );
        // A variable only a not clause names cannot be listed or compared.
        let listed = Query::from_where(
            vec![var("?o")],
            vec![Where::Clause(open.clone()), Where::Not(vec![owned("?t", "?o")])],
        )
        .unwrap_err();
        assert_eq!(
            listed.to_string(),
            "invalid query: find[0]: ?o is bound by no clause"
        );
        let placed = Query::from_where(
            vec![var("?t")],
            vec![Where::Not(vec![owned("?z", "?w")]), Where::Clause(open)],
        )
        .unwrap_err();
        assert!(
            placed.to_string().starts_with("invalid query: where[0]: "),
            "named by its place in where: {placed}"
        );
    }

    #[test]
    fn a_not_group_joins_its_clauses_on_its_own_variables() {
        let open = clause(
            EntityTerm::Var(var("?t")),
            ":task/status",
            ValueTerm::Value(Value::Keyword(":status/open".into())),
        );
        let owned = clause(
            EntityTerm::Var(var("?t")),
            ":task/owner",
            ValueTerm::Var(var("?o")),
        );
        let infra = clause(
            EntityTerm::Var(var("?o")),
            ":agent/team",
            ValueTerm::Value(Value::String("infra".into())),
        );
        let q = Query::new(vec![var("?t")], vec![open.clone()]).expect("valid");
        let not_infra = q
            .clone()
            .negated(vec![vec![owned.clone(), infra.clone()]])
            .expect("valid");
        assert_eq!(
            not_infra.to_string(),
            "find ?t where [?t :task/status :status/open] (not [?t :task/owner ?o] [?o :agent/team \"infra\"])"
        );
        assert_eq!(not_infra.variables(), vec![&var("?t")], "?o is the group's own");
        assert_eq!(not_infra.attributes().count(), 3);
        // A group none of whose variables the clauses bind would test the whole store.
        let apart = q.clone().negated(vec![vec![infra.clone()]]).unwrap_err();
        assert!(
            apart
                .to_string()
                .contains("not_clauses[0]: [?o :agent/team \"infra\"] shares no variable"),
            "{apart}"
        );
        let empty = q.clone().negated(vec![vec![]]).unwrap_err();
        assert!(
            empty
                .to_string()
                .contains("not_clauses[0]: 0 clauses; a not holds 1 to 16"),
            "{empty}"
        );
        let nan = clause(
            EntityTerm::Var(var("?o")),
            ":agent/load",
            ValueTerm::Value(Value::F64(f64::NAN)),
        );
        let bad = q
            .negated(vec![vec![owned.clone()], vec![owned, nan]])
            .unwrap_err();
        assert!(
            bad.to_string().contains("not_clauses[1].clauses[1].value:"),
            "{bad}"
        );
    }

    #[test]
    fn a_clause_value_must_be_one_a_request_may_name() {
        let c = clause(
            EntityTerm::Entity(EntityId(7)),
            ":x/y",
            ValueTerm::Value(Value::F64(f64::NAN)),
        );
        let c2 = clause(EntityTerm::Var(var("?e")), ":x/z", ValueTerm::Var(var("?v")));
        let err = Query::new(vec![var("?e")], vec![c2, c]).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid query: clauses[1].value:"),
            "{err}"
        );
    }
}
