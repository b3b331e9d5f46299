//! The JSON form of a join query, shared by `engram query` and the MCP `query` tool:
//!
//! ```json
//! {"find": ["?task", "?owner"],
//!  "where": [["?task", ":task/status", {"keyword": ":status/open"}],
//!            ["?task", ":task/owner", "?owner"],
//!            ["?owner", ":agent/team", "infra"]]}
//! ```
//!
//! Each clause is `[entity, attribute, value]`. The entity is a variable (`"?name"`) or an
//! entity id (a number). The value is a variable, a plain JSON string, integer, float or
//! boolean (a `string`, `i64`, `f64` or `bool` value), or a value object in the transaction
//! format (`{"keyword": ...}`, `{"ref": 12}`, `{"instant_ns": ...}`; `{"string": "?x"}` for a
//! string that starts with `?`).
//!
//! An entry `[op, "?var", value or variable]` (op one of `<`, `<=`, `>`, `>=`, `!=`) is a
//! filter; an entry `["not", [entity, attribute, value], ...]` keeps only the rows for which
//! its clauses do not all match at once (a variable no other clause binds is its own: it joins
//! the not's clauses and matches anything). An entry `["or", alternative, ...]` extends a row by
//! any one of its alternatives, each a clause or `["and", clause, ...]`; it binds the variables
//! every alternative names (one that only some name is theirs alone). A `find` entry is a
//! variable or an aggregate of one (`"(count ?task)"`).

use engram_types::query::{Clause, Compare, EntityTerm, Filter, FindTerm, Query, ValueTerm, Variable, Where};
use engram_types::{Attribute, EntityId, ValidationError, Value};
use serde_json::{Value as Json, json};

use crate::txjson::{self, JsonError};

/// What `engram query --help` shows after the options: examples and the format.
pub const QUERY_HELP: &str = "EXAMPLES\n  \
engram query --ns team/a '{\"find\": [\"?task\"], \"where\": [[\"?task\", \":task/owner\", {\"ref\": 7}]]}'\n  \
engram query --ns team/a --file open-tasks.json --explain --json\n\n\
QUERY FORMAT (JSON)\n  \
{\"find\": [\"?task\", \"?owner\"],\n   \
\"where\": [[\"?task\", \":task/status\", {\"keyword\": \":status/open\"}],\n             \
[\"?task\", \":task/owner\", \"?owner\"],\n             \
[\"?owner\", \":agent/team\", \"infra\"]]}\n\n  \
Each clause is [entity, attribute, value]: the entity a variable (\"?name\") or an entity id;\n  \
the value a variable, a JSON string, integer, float or boolean, or a value object as in\n  \
transactions ({\"keyword\": \":x/y\"}, {\"ref\": 12}, {\"instant_ns\": N}). A variable in an\n  \
entity position joins a reference to its target. An entry [op, \"?var\", value or variable],\n  \
op one of < <= > >= !=, is a filter: [\">\", \"?priority\", 2]. An entry [\"not\", clause, ...]\n  \
keeps the rows for which its clauses do not all match: [\"not\", [\"?task\", \":task/owner\", \"?anyone\"]]\n  \
(a variable no other clause binds, ?anyone, is the not's own and matches anything; two\n  \
clauses of one not join on it). An entry [\"or\", alternative, ...] matches any one of its\n  \
alternatives, each a clause or [\"and\", clause, ...], and binds what every one names:\n  \
[\"or\", [\"?task\", \":task/status\", \"open\"], [\"and\", [\"?task\", \":task/owner\", \"?o\"],\n  \
[\"?o\", \":agent/team\", \"infra\"]]] (?o is the and's own). Rows are distinct, sorted, and\n  \
read as of one transaction; every clause reads current claims.\n\n  \
A find entry may aggregate a variable: (count ?x), (count-distinct ?x), (sum ?x), (avg ?x),\n  \
(min ?x) or (max ?x). Each row is then a group of the plain variables listed, each aggregate\n  \
folding its variable over the group's joined rows (as SQL's GROUP BY does):\n  \
{\"find\": [\"?owner\", \"(count ?task)\"], \"where\": [[\"?task\", \":task/owner\", \"?owner\"]]}";

fn fail<T>(path: impl Into<String>, reason: impl Into<String>) -> Result<T, JsonError> {
    Err(JsonError {
        path: path.into(),
        reason: reason.into(),
    })
}

/// Parses a query document given as text.
pub fn parse_query(text: &str) -> Result<Query, JsonError> {
    engram_types::check_json_numbers(text).map_err(|e| JsonError {
        path: "(query)".into(),
        reason: e.to_string(),
    })?;
    let json: Json = serde_json::from_str(text).map_err(|e| JsonError {
        path: "(query)".into(),
        reason: format!("invalid JSON: {e}"),
    })?;
    query_from_json(&json)
}

/// A query from its JSON document: `find` and `where`.
pub fn query_from_json(doc: &Json) -> Result<Query, JsonError> {
    let Some(obj) = doc.as_object() else {
        return fail("(query)", "expected an object with \"find\" and \"where\"");
    };
    if let Some(other) = obj.keys().find(|k| *k != "find" && *k != "where") {
        return fail(
            other.as_str(),
            "unknown field (a query has \"find\" and \"where\")",
        );
    }
    let find = match obj.get("find") {
        Some(Json::Array(vars)) => vars
            .iter()
            .enumerate()
            .map(|(i, v)| find_term(&format!("find[{i}]"), v))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return fail(
                "find",
                "expected an array of variables, e.g. [\"?task\"] or [\"?owner\", \"(count ?task)\"]",
            );
        }
        None => return fail("find", "is required: the variables each row lists"),
    };
    // A `where` entry whose first element is a comparison (`[">", "?p", 3]`) is a filter, one
    // whose first element is "not" a `not` group, "or" an `or` group; any other is a clause.
    let entries = match obj.get("where") {
        Some(Json::Array(cs)) => cs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let head = c.as_array().and_then(|a| a.first()).and_then(Json::as_str);
                match (head, head.and_then(Compare::parse)) {
                    (_, Some(op)) => filter(i, op, c).map(Where::Filter),
                    (Some("not"), None) => negation(i, c).map(Where::Not),
                    (Some("or"), None) => disjunction(i, c).map(Where::Or),
                    _ => clause(&format!("where[{i}]"), c).map(Where::Clause),
                }
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return fail("where", "expected an array of [entity, attribute, value] clauses"),
        None => return fail("where", "is required: the clauses every row satisfies"),
    };
    Query::from_where(find, entries).map_err(|e| match e {
        // The message starts with the field it names (`where[2]`, `find[0]`).
        ValidationError::Query(m) => match m.split_once(": ") {
            Some((path, reason)) => JsonError {
                path: path.into(),
                reason: reason.into(),
            },
            None => JsonError {
                path: "(query)".into(),
                reason: m,
            },
        },
        other => JsonError {
            path: "(query)".into(),
            reason: other.to_string(),
        },
    })
}

/// A filter entry: `[op, "?left", right]`, the right a variable or a value as in clauses.
fn filter(i: usize, op: Compare, c: &Json) -> Result<Filter, JsonError> {
    let path = format!("where[{i}]");
    let Some([_, left, right]) = c.as_array().map(Vec::as_slice) else {
        return fail(path, "a filter is [op, \"?variable\", value or variable]");
    };
    let left = variable(&format!("{path}[1]"), left)?;
    let right = value_term(&format!("{path}[2]"), right)?;
    Ok(Filter { op, left, right })
}

/// A `find` entry: a variable, or an aggregate of one (`"(count ?task)"`).
fn find_term(path: &str, v: &Json) -> Result<FindTerm, JsonError> {
    match v {
        Json::String(s) => FindTerm::parse(s).map_err(|e| JsonError {
            path: path.into(),
            reason: e,
        }),
        _ => fail(
            path,
            "expected a variable such as \"?task\" or an aggregate such as \"(count ?task)\"",
        ),
    }
}

fn variable(path: &str, v: &Json) -> Result<Variable, JsonError> {
    match v {
        Json::String(s) => Variable::new(s.as_str()).map_err(|e| JsonError {
            path: path.into(),
            reason: e.into(),
        }),
        _ => fail(path, "expected a variable such as \"?task\""),
    }
}

/// A `not` entry: `["not", clause, ...]`, one clause or more that must not all hold at once,
/// its clauses `where[i][1]` on.
fn negation(i: usize, c: &Json) -> Result<Vec<Clause>, JsonError> {
    let path = format!("where[{i}]");
    match c.as_array().map(Vec::as_slice) {
        Some([_, clauses @ ..]) if !clauses.is_empty() && clauses.iter().all(Json::is_array) => clauses
            .iter()
            .enumerate()
            .map(|(j, inner)| clause(&format!("{path}[{}]", j + 1), inner))
            .collect(),
        _ => fail(
            path,
            "a not entry is [\"not\", [entity, attribute, value], ...]: one clause or more",
        ),
    }
}

/// An `or` entry: `["or", alternative, alternative, ...]`, its alternatives `where[i][1]` on,
/// each a clause or `["and", clause, clause, ...]`.
fn disjunction(i: usize, c: &Json) -> Result<Vec<Vec<Clause>>, JsonError> {
    let path = format!("where[{i}]");
    let Some([_, alternatives @ ..]) = c.as_array().map(Vec::as_slice) else {
        return fail(path, "an or entry is [\"or\", clause, clause, ...]");
    };
    alternatives
        .iter()
        .enumerate()
        .map(|(j, alt)| {
            let at = format!("{path}[{}]", j + 1);
            match alt.as_array().map(Vec::as_slice) {
                Some([Json::String(head), clauses @ ..]) if head == "and" => {
                    if clauses.is_empty() {
                        return fail(at, "an and is [\"and\", clause, ...]: one clause or more");
                    }
                    clauses
                        .iter()
                        .enumerate()
                        .map(|(m, inner)| clause(&format!("{at}[{}]", m + 1), inner))
                        .collect()
                }
                _ => clause(&at, alt).map(|c| vec![c]),
            }
        })
        .collect()
}

/// The clause at `path` (`where[2]`, `where[3][1]`).
fn clause(path: &str, c: &Json) -> Result<Clause, JsonError> {
    let path = path.to_string();
    let Some([e, a, v]) = c.as_array().map(Vec::as_slice) else {
        return fail(path, "expected [entity, attribute, value]");
    };
    let entity = match e {
        Json::String(s) if s.starts_with('?') => EntityTerm::Var(variable(&format!("{path}[0]"), e)?),
        Json::Number(n) => match n.as_u64() {
            Some(id) => EntityTerm::Entity(EntityId(id)),
            None => return fail(format!("{path}[0]"), "an entity id is a whole number ≥ 0"),
        },
        _ => {
            return fail(
                format!("{path}[0]"),
                "expected a variable (\"?name\") or an entity id",
            );
        }
    };
    let attribute = match a {
        Json::String(s) => Attribute::new(s.as_str()).map_err(|err| JsonError {
            path: format!("{path}[1]"),
            reason: err.to_string(),
        })?,
        _ => {
            return fail(
                format!("{path}[1]"),
                "expected an attribute such as \":task/owner\"",
            );
        }
    };
    let value = value_term(&format!("{path}[2]"), v)?;
    Ok(Clause {
        entity,
        attribute,
        value,
    })
}

/// A value position: a variable, a plain JSON string, number or boolean, or a value object.
fn value_term(path: &str, v: &Json) -> Result<ValueTerm, JsonError> {
    Ok(match v {
        Json::String(s) if s.starts_with('?') => ValueTerm::Var(variable(path, v)?),
        Json::String(s) => ValueTerm::Value(Value::String(s.clone())),
        Json::Bool(b) => ValueTerm::Value(Value::Bool(*b)),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => ValueTerm::Value(Value::I64(i)),
            (None, Some(x)) if !n.is_u64() => ValueTerm::Value(Value::F64(x)),
            _ => return fail(path, format!("{n} is outside the i64 range")),
        },
        Json::Object(_) => ValueTerm::Value(txjson::value_from_json(path, v)?),
        _ => return fail(path, "expected a variable, a value, or a value object"),
    })
}

/// An answer as JSON: its columns, each row as an object of variable → value (in the value
/// format), and where it was read.
pub fn rows_to_json(resp: &engram_client::pb::QueryResponse) -> Json {
    let rows: Vec<Json> = resp
        .rows
        .iter()
        .map(|r| {
            let cells: serde_json::Map<String, Json> = resp
                .columns
                .iter()
                .zip(&r.values)
                .map(|(c, v)| (c.clone(), txjson::pb_value_to_json(Some(v))))
                .collect();
            Json::Object(cells)
        })
        .collect();
    let mut doc = json!({
        "columns": resp.columns,
        "rows": rows,
        "as_of_tx": resp.as_of_tx,
        "applied_tx": resp.applied_tx,
        "rows_read": resp.rows_read,
    });
    txjson::add_page_position(&mut doc, resp.as_of_tx, &resp.next_cursor);
    if !resp.plan.is_empty() {
        doc["plan"] = Json::Array(
            resp.plan
                .iter()
                .map(|s| {
                    json!({
                        "clause": s.clause, "access": s.access, "binds": s.binds, "uses": s.uses,
                        "rows_read": s.rows_read, "rows_out": s.rows_out, "filters": s.filters,
                        "negations": s.negations, "or_clause": s.or_clause,
                    })
                })
                .collect(),
        );
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_document_parses_with_plain_and_typed_values() {
        let q = parse_query(
            r#"{"find": ["?t", "?o"], "where": [
                ["?t", ":task/status", {"keyword": ":status/open"}],
                ["?t", ":task/owner", "?o"],
                ["?o", ":agent/team", "infra"],
                [12, ":agent/level", 3],
                ["?o", ":agent/score", 0.5],
                ["?o", ":agent/on", true],
                ["?o", ":agent/mark", {"string": "?literal"}]]}"#,
        )
        .expect("parses");
        assert_eq!(q.clauses.len(), 7);
        assert_eq!(
            q.clauses[0].value,
            ValueTerm::Value(Value::Keyword(":status/open".into()))
        );
        assert_eq!(
            q.clauses[2].value,
            ValueTerm::Value(Value::String("infra".into()))
        );
        assert_eq!(q.clauses[3].entity, EntityTerm::Entity(EntityId(12)));
        assert_eq!(q.clauses[3].value, ValueTerm::Value(Value::I64(3)));
        assert_eq!(q.clauses[4].value, ValueTerm::Value(Value::F64(0.5)));
        assert_eq!(q.clauses[5].value, ValueTerm::Value(Value::Bool(true)));
        assert_eq!(
            q.clauses[6].value,
            ValueTerm::Value(Value::String("?literal".into()))
        );
    }

    #[test]
    fn an_entry_that_starts_with_a_comparison_is_a_filter_named_by_its_place() {
        let q = parse_query(
            r#"{"find": ["?t"], "where": [
                ["?t", ":task/priority", "?p"], [">=", "?p", 2], ["!=", "?p", "?q"],
                ["?t", ":task/cap", "?q"]]}"#,
        )
        .expect("parses");
        assert_eq!((q.clauses.len(), q.filters.len()), (2, 2));
        assert_eq!(q.filters[0].op, Compare::Ge);
        assert_eq!(q.filters[0].right, ValueTerm::Value(Value::I64(2)));
        assert_eq!(
            q.filters[1].right,
            ValueTerm::Var(Variable::new("?q").expect("valid"))
        );
        let err =
            parse_query(r#"{"find": ["?t"], "where": [["?t", ":a/b", "?p"], ["<", "?x", 1]]}"#).unwrap_err();
        assert_eq!(
            (err.path.as_str(), err.reason.as_str()),
            ("where[1]", "?x is bound by no clause")
        );
        let err =
            parse_query(r#"{"find": ["?t"], "where": [["<", "?p"], ["?t", ":a/b", "?p"]]}"#).unwrap_err();
        assert_eq!(err.path, "where[0]");
        let err =
            parse_query(r#"{"find": ["?x"], "where": [[">", "?p", 1], ["?t", ":a/b", "?p"]]}"#).unwrap_err();
        assert_eq!(err.path, "find[0]");
    }

    #[test]
    fn an_or_entry_holds_alternative_clauses() {
        let q = parse_query(
            r#"{"find": ["?t"], "where": [
                ["or", ["?t", ":task/status", "open"], ["?t", ":task/status", "blocked"]]]}"#,
        )
        .expect("parses");
        assert_eq!(
            (q.clauses.len(), q.disjunctions.len(), q.disjunctions[0].len()),
            (0, 1, 2)
        );
        let err = parse_query(r#"{"find": ["?t"], "where": [["or", ["?t", ":a/b"]], ["?t", ":a/c", 1]]}"#)
            .unwrap_err();
        assert_eq!(err.path, "where[0][1]");
        let err = parse_query(r#"{"find": ["?t"], "where": [["?t", ":a/c", 1], ["or", ["?t", ":a/b", 1]]]}"#)
            .unwrap_err();
        assert_eq!(
            (err.path.as_str(), err.reason.as_str()),
            ("where[1]", "1 alternatives; an or holds 2 to 16")
        );
        // An alternative of several clauses: open, or owned by someone in infra.
        let q = parse_query(
            r#"{"find": ["?t"], "where": [["or", ["?t", ":task/status", "open"],
                ["and", ["?t", ":task/owner", "?o"], ["?o", ":agent/team", "infra"]]]]}"#,
        )
        .expect("parses");
        assert_eq!(q.disjunctions[0].iter().map(Vec::len).collect::<Vec<_>>(), [1, 2]);
        let err =
            parse_query(r#"{"find": ["?t"], "where": [["or", ["?t", ":a/b", 1], ["and"]]]}"#).unwrap_err();
        assert_eq!(
            (err.path.as_str(), err.reason.as_str()),
            (
                "where[0][2]",
                "an and is [\"and\", clause, ...]: one clause or more"
            )
        );
        let err = parse_query(
            r#"{"find": ["?t"], "where": [["?t", ":a/x", "?o"], ["or", ["?t", ":a/b", 1], ["and", ["?t", ":a/c", "?o"]]]]}"#,
        )
        .unwrap_err();
        assert_eq!(err.path, "where[1].alternatives[1]");
        assert!(
            err.reason.contains("?o is named by this alternative"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn a_find_entry_may_aggregate_a_variable() {
        let q = parse_query(r#"{"find": ["?o", "(count ?t)"], "where": [["?t", ":task/owner", "?o"]]}"#)
            .expect("parses");
        assert!(q.aggregates());
        assert_eq!(q.find[1].to_string(), "(count ?t)");
        let err = parse_query(r#"{"find": ["(avg)"], "where": [["?t", ":a/b", "?p"]]}"#).unwrap_err();
        assert_eq!(
            (err.path.as_str(), err.reason.as_str()),
            (
                "find[0]",
                "an aggregate is written (name ?variable): a name and one variable"
            )
        );
        let err = parse_query(r#"{"find": [3], "where": [["?t", ":a/b", "?p"]]}"#).unwrap_err();
        assert!(err.reason.contains("(count ?task)"), "{}", err.reason);
    }

    #[test]
    fn a_not_entry_is_a_clause_that_keeps_the_rows_it_does_not_match() {
        let q = parse_query(
            r#"{"find": ["?t"], "where": [
                ["not", ["?t", ":task/owner", "?anyone"]], ["?t", ":task/status", "open"]]}"#,
        )
        .expect("parses");
        assert_eq!((q.clauses.len(), q.negations.len()), (1, 1));
        assert_eq!(
            q.negations[0][0].value,
            ValueTerm::Var(Variable::new("?anyone").expect("valid"))
        );
        let err = |text: &str| {
            let e = parse_query(text).unwrap_err();
            (e.path, e.reason)
        };
        let (path, _) = err(r#"{"find": ["?t"], "where": [["?t", ":a/b", 1], ["not", ["?t", "a/c", 1]]]}"#);
        assert_eq!(path, "where[1][1][1]", "the attribute inside the not entry");
        let (path, reason) =
            err(r#"{"find": ["?t"], "where": [["?t", ":a/b", 1], ["not", "?t", ":a/c", 1]]}"#);
        assert_eq!(
            (path.as_str(), reason.as_str()),
            (
                "where[1]",
                "a not entry is [\"not\", [entity, attribute, value], ...]: one clause or more"
            )
        );
        let (path, reason) =
            err(r#"{"find": ["?t"], "where": [["?t", ":a/b", 1], ["not", ["?x", ":a/c", "?y"]]]}"#);
        assert_eq!(path, "where[1]");
        assert!(reason.contains("shares no variable with the clauses"), "{reason}");
        // A not of several clauses: the tasks owned by no one in infra (?o its own).
        let q = parse_query(
            r#"{"find": ["?t"], "where": [["?t", ":task/status", "open"],
                ["not", ["?t", ":task/owner", "?o"], ["?o", ":agent/team", "infra"]]]}"#,
        )
        .expect("parses");
        assert_eq!(q.negations[0].len(), 2);
        assert_eq!(q.variables().len(), 1, "?o is the not's own");
        let (path, _) = err(
            r#"{"find": ["?t"], "where": [["?t", ":a/b", 1], ["not", ["?t", ":a/c", "?o"], ["?o", "a/d", 1]]]}"#,
        );
        assert_eq!(path, "where[1][2][1]", "the second clause's attribute");
    }

    #[test]
    fn a_bad_document_names_the_field() {
        let path = |text: &str| parse_query(text).unwrap_err().path;
        assert_eq!(path("[]"), "(query)");
        assert_eq!(path(r#"{"find": ["?t"]}"#), "where");
        assert_eq!(path(r#"{"where": []}"#), "find");
        assert_eq!(path(r#"{"find": ["?t"], "where": [], "limit": 3}"#), "limit");
        assert_eq!(
            path(r#"{"find": ["t"], "where": [["?t", ":a/b", 1]]}"#),
            "find[0]"
        );
        assert_eq!(path(r#"{"find": ["?t"], "where": [["?t", ":a/b"]]}"#), "where[0]");
        assert_eq!(
            path(r#"{"find": ["?t"], "where": [["x", ":a/b", 1]]}"#),
            "where[0][0]"
        );
        assert_eq!(
            path(r#"{"find": ["?t"], "where": [["?t", "ab", 1]]}"#),
            "where[0][1]"
        );
        assert_eq!(
            path(r#"{"find": ["?t"], "where": [["?t", ":a/b", null]]}"#),
            "where[0][2]"
        );
        assert_eq!(
            path(r#"{"find": ["?x"], "where": [["?t", ":a/b", 1]]}"#),
            "find[0]"
        );
        assert_eq!(path(r#"{"find": ["?t"], "where": []}"#), "where");
        let err = parse_query(r#"{"find": ["?x"], "where": [["?t", ":a/b", 1]]}"#).unwrap_err();
        assert_eq!(err.reason, "?x is bound by no clause");
    }
}
