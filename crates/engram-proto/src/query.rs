//! A join query on the wire (`QueryRequest.find`, `.clauses`, `.filters`, `.not_clauses`,
//! `.or_clauses` and `.not_groups`) and back. `not` groups (and an `or` group's alternatives)
//! that are all lone clauses travel in the lone-clause fields (`not_clauses`,
//! `QueryOr.alternatives`), which every server reads; a list that holds a conjunction of several
//! travels whole in the fields that carry conjunctions (`not_groups`, `QueryOr.all_of`), so its
//! order is kept. A server numbers the second kind after the first.

use engram_types::query::{Clause, Compare, EntityTerm, Filter, FindTerm, Query, ValueTerm, Variable};
use engram_types::{EntityId, ValidationError};

use crate::{WireError, attribute, pb, value};

/// The query a request's `find` and `clauses` describe, checked: each term of the kind its
/// position takes, every value valid, every listed variable bound (see [`Query::new`]).
pub fn query(
    find: Vec<String>,
    clauses: Vec<pb::QueryClause>,
    filters: Vec<pb::QueryFilter>,
    not_clauses: Vec<pb::QueryClause>,
    or_clauses: Vec<pb::QueryOr>,
    not_groups: Vec<pb::QueryAnd>,
) -> Result<Query, WireError> {
    let find = find
        .into_iter()
        .enumerate()
        .map(|(i, v)| FindTerm::parse(&v).map_err(|e| WireError::new(format!("find[{i}]"), e)))
        .collect::<Result<Vec<_>, _>>()?;
    let clauses = clauses
        .into_iter()
        .enumerate()
        .map(|(i, c)| clause(&format!("clauses[{i}]"), c))
        .collect::<Result<Vec<_>, _>>()?;
    // not_groups are numbered after not_clauses in the query's own errors and plan.
    let negations = not_clauses
        .into_iter()
        .enumerate()
        .map(|(i, c)| clause(&format!("not_clauses[{i}]"), c).map(|c| vec![c]))
        .chain(
            not_groups
                .into_iter()
                .enumerate()
                .map(|(i, group)| conjunction(&format!("not_groups[{i}]"), group)),
        )
        .collect::<Result<Vec<_>, _>>()?;
    let filters = filters
        .into_iter()
        .enumerate()
        .map(|(i, f)| filter(i, f))
        .collect::<Result<Vec<_>, _>>()?;
    let disjunctions = or_clauses
        .into_iter()
        .enumerate()
        .map(|(i, group)| {
            let singles = group
                .alternatives
                .into_iter()
                .enumerate()
                .map(|(j, c)| clause(&format!("or_clauses[{i}].alternatives[{j}]"), c).map(|c| vec![c]));
            let conjunctions = group
                .all_of
                .into_iter()
                .enumerate()
                .map(|(j, and)| conjunction(&format!("or_clauses[{i}].all_of[{j}]"), and));
            singles.chain(conjunctions).collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    Query::with_or(find, clauses, disjunctions)
        .and_then(|q| q.filtered(filters))
        .and_then(|q| q.negated(negations))
        .map_err(|e| match e {
            // The message already starts with the field it names.
            ValidationError::Query(m) => match m.split_once(": ") {
                Some((field, reason)) => WireError::new(field, reason),
                None => WireError::new("query", m),
            },
            other => WireError::new("query", other),
        })
}

fn filter(i: usize, f: pb::QueryFilter) -> Result<Filter, WireError> {
    let field = |part: &str| format!("filters[{i}].{part}");
    let op = Compare::parse(&f.op).ok_or_else(|| {
        WireError::new(
            field("op"),
            format!(
                "{} is not a comparison (<, <=, >, >= or !=)",
                engram_types::excerpt(&f.op)
            ),
        )
    })?;
    let left = Variable::new(f.left).map_err(|e| WireError::new(field("left"), e))?;
    let right = value_term(&field("right"), f.right)?;
    Ok(Filter { op, left, right })
}

/// A value position (a clause's value, a filter's right side): a variable or a value.
fn value_term(field: &str, term: Option<pb::QueryTerm>) -> Result<ValueTerm, WireError> {
    use pb::query_term::Kind;
    match term.and_then(|t| t.kind) {
        None => Err(WireError::new(field, "is required (a variable or a value)")),
        Some(Kind::Variable(name)) => Variable::new(name)
            .map(ValueTerm::Var)
            .map_err(|e| WireError::new(field, e)),
        Some(Kind::Value(v)) => Ok(ValueTerm::Value(value(field, Some(v))?)),
        Some(Kind::Entity(_)) => Err(WireError::new(
            field,
            "takes a variable or a value (a reference is a `ref` value), not an entity id",
        )),
    }
}

/// The wire form of a value position.
fn value_term_to_pb(t: &ValueTerm) -> Option<pb::QueryTerm> {
    use pb::query_term::Kind;
    Some(pb::QueryTerm {
        kind: Some(match t {
            ValueTerm::Var(v) => Kind::Variable(v.to_string()),
            ValueTerm::Value(v) => Kind::Value(v.into()),
        }),
    })
}

/// The wire form of `q`'s filters.
pub fn filters_to_pb(q: &Query) -> Vec<pb::QueryFilter> {
    q.filters
        .iter()
        .map(|f| pb::QueryFilter {
            op: f.op.symbol().to_string(),
            left: f.left.to_string(),
            right: value_term_to_pb(&f.right),
        })
        .collect()
}

/// The clause at `at` (`clauses[2]`, `not_clauses[0]`).
fn clause(at: &str, c: pb::QueryClause) -> Result<Clause, WireError> {
    use pb::query_term::Kind;
    let field = |part: &str| format!("{at}.{part}");
    let variable = |part: &str, name: String| Variable::new(name).map_err(|e| WireError::new(field(part), e));
    let entity = match c.entity.and_then(|t| t.kind) {
        None => {
            return Err(WireError::new(
                field("entity"),
                "is required (a variable or an entity id)",
            ));
        }
        Some(Kind::Variable(name)) => EntityTerm::Var(variable("entity", name)?),
        Some(Kind::Entity(e)) => EntityTerm::Entity(EntityId(e)),
        Some(Kind::Value(_)) => {
            return Err(WireError::new(
                field("entity"),
                "takes a variable or an entity id, not a value",
            ));
        }
    };
    let attribute = attribute(&field("attribute"), c.attribute)?;
    let value = value_term(&field("value"), c.value)?;
    Ok(Clause {
        entity,
        attribute,
        value,
    })
}

/// The wire form of `q`'s clauses.
pub fn clauses_to_pb(q: &Query) -> Vec<pb::QueryClause> {
    to_pb(&q.clauses)
}

/// The conjunction at `at` (`not_groups[1]`, `or_clauses[0].all_of[2]`).
fn conjunction(at: &str, and: pb::QueryAnd) -> Result<Vec<Clause>, WireError> {
    and.clauses
        .into_iter()
        .enumerate()
        .map(|(m, c)| clause(&format!("{at}.clauses[{m}]"), c))
        .collect()
}

/// The wire form of `q`'s `or` groups. A group of lone clauses only travels in
/// `alternatives`, as every server reads it; a group with a conjunction of several sends each
/// alternative in `all_of`, so the server numbers them as `q` does.
pub fn disjunctions_to_pb(q: &Query) -> Vec<pb::QueryOr> {
    q.disjunctions
        .iter()
        .map(|group| {
            if group.iter().all(|alternative| alternative.len() == 1) {
                pb::QueryOr {
                    alternatives: group.iter().flat_map(|alternative| to_pb(alternative)).collect(),
                    all_of: Vec::new(),
                }
            } else {
                pb::QueryOr {
                    alternatives: Vec::new(),
                    all_of: group
                        .iter()
                        .map(|alternative| pb::QueryAnd {
                            clauses: to_pb(alternative),
                        })
                        .collect(),
                }
            }
        })
        .collect()
}

/// The wire form of `q`'s `not` groups: all in `not_clauses` when each is one clause, as every
/// server reads them; else all in `not_groups` (a group may hold one clause), so the server
/// numbers them as `q` does.
pub fn negations_to_pb(q: &Query) -> (Vec<pb::QueryClause>, Vec<pb::QueryAnd>) {
    if q.negations.iter().all(|group| group.len() == 1) {
        (
            q.negations.iter().flat_map(|group| to_pb(group)).collect(),
            Vec::new(),
        )
    } else {
        let groups = q
            .negations
            .iter()
            .map(|group| pb::QueryAnd {
                clauses: to_pb(group),
            })
            .collect();
        (Vec::new(), groups)
    }
}

fn to_pb(clauses: &[Clause]) -> Vec<pb::QueryClause> {
    use pb::query_term::Kind;
    let term = |kind| Some(pb::QueryTerm { kind: Some(kind) });
    clauses
        .iter()
        .map(|c| pb::QueryClause {
            entity: term(match &c.entity {
                EntityTerm::Var(v) => Kind::Variable(v.to_string()),
                EntityTerm::Entity(e) => Kind::Entity(e.0),
            }),
            attribute: c.attribute.to_string(),
            value: value_term_to_pb(&c.value),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use engram_types::query::{Clause, EntityTerm, Query, ValueTerm, Variable};
    use engram_types::{Attribute, Value};

    use super::*;

    fn clause(e: &str, a: &str, v: &str) -> Clause {
        Clause {
            entity: EntityTerm::Var(Variable::new(e).expect("valid")),
            attribute: Attribute::new(a).expect("valid"),
            value: match v.strip_prefix('=') {
                Some(text) => ValueTerm::Value(Value::String(text.into())),
                None => ValueTerm::Var(Variable::new(v).expect("valid")),
            },
        }
    }

    fn through_the_wire(q: &Query) -> Query {
        let (not_clauses, not_groups) = negations_to_pb(q);
        query(
            q.find.iter().map(ToString::to_string).collect(),
            clauses_to_pb(q),
            filters_to_pb(q),
            not_clauses,
            disjunctions_to_pb(q),
            not_groups,
        )
        .expect("a valid query decodes")
    }

    #[test]
    fn conjunctions_cross_the_wire_in_order_and_lone_clauses_in_the_old_fields() {
        let t = || vec![Variable::new("?t").expect("valid")];
        let owner = clause("?t", ":task/owner", "?o");
        let infra = clause("?o", ":agent/team", "=infra");
        let open = clause("?t", ":task/status", "=open");
        // Lone clauses only: the fields every server reads.
        let plain = Query::with_or(
            t(),
            vec![owner.clone()],
            vec![vec![
                vec![open.clone()],
                vec![clause("?t", ":task/status", "=blocked")],
            ]],
        )
        .and_then(|q| q.negated(vec![vec![clause("?t", ":task/flag", "?f")]]))
        .expect("valid");
        let (not_clauses, not_groups) = negations_to_pb(&plain);
        assert_eq!((not_clauses.len(), not_groups.len()), (1, 0));
        assert!(disjunctions_to_pb(&plain)[0].all_of.is_empty());
        assert_eq!(through_the_wire(&plain), plain);
        // A conjunction first, a lone clause second: both lists keep their order.
        let mixed = Query::with_or(
            t(),
            vec![],
            vec![vec![vec![owner.clone(), infra.clone()], vec![open.clone()]]],
        )
        .and_then(|q| {
            q.negated(vec![
                vec![owner.clone(), infra],
                vec![clause("?t", ":task/flag", "?f")],
            ])
        })
        .expect("valid");
        let (not_clauses, not_groups) = negations_to_pb(&mixed);
        assert_eq!((not_clauses.len(), not_groups.len()), (0, 2));
        let ors = disjunctions_to_pb(&mixed);
        assert_eq!((ors[0].alternatives.len(), ors[0].all_of.len()), (0, 2));
        assert_eq!(through_the_wire(&mixed), mixed);
        // A conjunction with no clause is named by its wire path.
        let err = query(
            vec!["?t".into()],
            clauses_to_pb(&plain),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            vec![pb::QueryAnd { clauses: Vec::new() }],
        )
        .unwrap_err();
        assert!(err.to_string().contains("not_clauses[0]: 0 clauses"), "{err}");
    }
}
