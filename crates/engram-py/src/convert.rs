//! Python values, ops and entity references into the data model, and back.
//!
//! Every check here runs before a request is sent, and every error names the argument it is
//! about (`ops[2].value`), so a type mistake never reaches the cluster.

use engram_types::query::{Clause, Compare, EntityTerm, Filter, FindTerm, Query, ValueTerm, Variable, Where};
use engram_types::{Attribute, EntityId, EntityRef, Op, TxOp, Value};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::types::{Assert, Keyword, Lookup, Ref, Retract, Vector};

/// A Python value as a datom value: `str`, `int`, `float`, `bool`, `bytes`, an aware
/// `datetime`, [`Keyword`], [`Ref`], [`Vector`], or a `dict`/`list` (stored as canonical JSON).
pub fn value(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let py = obj.py();
    let value = if obj.is_instance_of::<PyBool>() {
        Value::Bool(obj.extract()?)
    } else if obj.is_instance_of::<PyInt>() {
        // A value is an i64 or nothing: an int beyond it is refused, never rounded into a
        // float (which would also make the attribute a float one).
        Value::I64(obj.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "{field}: the integer does not fit in a signed 64-bit integer; send it as a string to keep every digit"
            ))
        })?)
    } else if obj.is_instance_of::<PyFloat>() {
        Value::F64(obj.extract()?)
    } else if obj.is_instance_of::<PyString>() {
        Value::String(obj.extract()?)
    } else if obj.is_instance_of::<PyBytes>() {
        Value::Bytes(obj.extract()?)
    } else if let Ok(k) = obj.cast::<Keyword>() {
        Value::Keyword(k.get().name.clone())
    } else if let Ok(r) = obj.cast::<Ref>() {
        Value::Ref(EntityId(r.get().id))
    } else if let Ok(v) = obj.cast::<Vector>() {
        Value::Vector(v.get().values.clone())
    } else if obj.is_instance_of::<PyDict>() || obj.is_instance_of::<PyList>() {
        let json = py.import("json")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("sort_keys", true)?;
        kwargs.set_item("separators", (",", ":"))?;
        kwargs.set_item("allow_nan", false)?;
        let text: String = json
            .call_method("dumps", (obj,), Some(&kwargs))
            .map_err(|e| PyValueError::new_err(format!("{field}: not JSON: {e}")))?
            .extract()?;
        Value::json(&text).map_err(|e| PyValueError::new_err(format!("{field}: {e}")))?
    } else if is_datetime(obj)? {
        Value::Instant(datetime_ns(field, obj)?)
    } else {
        return Err(PyTypeError::new_err(format!(
            "{field}: {} is not a datom value (str, int, float, bool, bytes, datetime, Keyword, Ref, Vector, dict or list)",
            type_name(obj)
        )));
    };
    value
        .validate()
        .map_err(|e| PyValueError::new_err(format!("{field}: {e}")))?;
    Ok(value)
}

/// A datom value as a Python object: the inverse of [`value`] (instants become aware UTC
/// datetimes, JSON becomes the parsed `dict` or `list`).
pub fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::I64(i) => i.into_pyobject(py)?.into_any(),
        Value::F64(f) => PyFloat::new(py, *f).into_any(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any(),
        Value::Instant(ns) => datetime_from_ns(py, *ns)?,
        Value::Ref(e) => Bound::new(py, Ref { id: e.0 })?.into_any(),
        Value::Keyword(k) => Bound::new(py, Keyword { name: k.clone() })?.into_any(),
        Value::Json(text) => py.import("json")?.call_method1("loads", (text,))?,
        Value::Vector(v) => Bound::new(py, Vector { values: v.clone() })?.into_any(),
        // A redacted datom reaches Python without a value (its `redacted` says why).
        Value::Redacted(_) => py.None().into_bound(py),
    })
}

/// An entity reference: an `int` is an existing entity, a `str` names a new one within the
/// transaction, a [`Lookup`] finds one by a unique attribute's value.
pub fn entity(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<EntityRef> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!("{field}: a bool is not an entity")));
    }
    if obj.is_instance_of::<PyInt>() {
        let id: u64 = obj.extract().map_err(|_| {
            PyValueError::new_err(format!("{field}: an entity id is a non-negative 64-bit integer"))
        })?;
        return Ok(EntityRef::Id(EntityId(id)));
    }
    if obj.is_instance_of::<PyString>() {
        let name: String = obj.extract()?;
        if name.is_empty() {
            return Err(PyValueError::new_err(format!(
                "{field}: a temporary name must not be empty"
            )));
        }
        return Ok(EntityRef::Temp(name));
    }
    if let Ok(r) = obj.cast::<Ref>() {
        return Ok(EntityRef::Id(EntityId(r.get().id)));
    }
    if let Ok(l) = obj.cast::<Lookup>() {
        let l = l.get();
        let attr = attribute(&format!("{field}.attribute"), &l.attribute)?;
        let value = value(&format!("{field}.value"), l.value.bind(obj.py()))?;
        return Ok(EntityRef::Lookup(attr, value));
    }
    Err(PyTypeError::new_err(format!(
        "{field}: {} is not an entity (int id, str temporary name, Ref or Lookup)",
        type_name(obj)
    )))
}

/// An existing entity id: an `int` or a [`Ref`].
pub fn entity_id(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<EntityId> {
    match entity(field, obj)? {
        EntityRef::Id(id) => Ok(id),
        _ => Err(PyTypeError::new_err(format!(
            "{field}: an existing entity id (int or Ref) is needed here"
        ))),
    }
}

pub fn attribute(field: &str, raw: &str) -> PyResult<Attribute> {
    Attribute::new(raw).map_err(|e| PyValueError::new_err(format!("{field}: {e}")))
}

/// One op: an [`Assert`], a [`Retract`], or a tuple `(entity, attribute, value)` (an assert).
pub fn op(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<TxOp> {
    let (kind, entity_obj, attr, value_obj, valid_from, valid_to) = if let Ok(a) = obj.cast::<Assert>() {
        let a = a.get();
        (
            Op::Assert,
            a.entity.bind(obj.py()).clone(),
            a.attribute.clone(),
            a.value.bind(obj.py()).clone(),
            a.valid_from.as_ref().map(|v| v.bind(obj.py()).clone()),
            a.valid_to.as_ref().map(|v| v.bind(obj.py()).clone()),
        )
    } else if let Ok(r) = obj.cast::<Retract>() {
        let r = r.get();
        (
            Op::Retract,
            r.entity.bind(obj.py()).clone(),
            r.attribute.clone(),
            r.value.bind(obj.py()).clone(),
            None,
            None,
        )
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        if t.len() != 3 {
            return Err(PyTypeError::new_err(format!(
                "{field}: a tuple op is (entity, attribute, value), got {} items",
                t.len()
            )));
        }
        let attr: String = t.get_item(1)?.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "{field}[1]: the attribute is a str like \":person/name\""
            ))
        })?;
        (Op::Assert, t.get_item(0)?, attr, t.get_item(2)?, None, None)
    } else {
        return Err(PyTypeError::new_err(format!(
            "{field}: {} is not an op (Assert, Retract or an (entity, attribute, value) tuple)",
            type_name(obj)
        )));
    };
    Ok(TxOp {
        op: kind,
        entity: entity(&format!("{field}.entity"), &entity_obj)?,
        attribute: attribute(&format!("{field}.attribute"), &attr)?,
        value: value(&format!("{field}.value"), &value_obj)?,
        valid_from_ns: valid_from
            .map(|v| time_ns(&format!("{field}.valid_from"), &v))
            .transpose()?,
        valid_to_ns: valid_to
            .map(|v| time_ns(&format!("{field}.valid_to"), &v))
            .transpose()?,
    })
}

/// A point in time: an aware `datetime`, or an `int` of nanoseconds since the Unix epoch.
pub fn time_ns(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        return obj
            .extract()
            .map_err(|_| PyValueError::new_err(format!("{field}: nanoseconds do not fit in 64 bits")));
    }
    if is_datetime(obj)? {
        return datetime_ns(field, obj);
    }
    Err(PyTypeError::new_err(format!(
        "{field}: {} is not a time (an aware datetime or int nanoseconds)",
        type_name(obj)
    )))
}

fn is_datetime(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let datetime = obj.py().import("datetime")?.getattr("datetime")?;
    obj.is_instance(&datetime)
}

/// Nanoseconds since the epoch of an aware datetime; a naive one is refused, since it would
/// silently mean the machine's local time.
fn datetime_ns(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    if obj.getattr("tzinfo")?.is_none() || obj.call_method0("utcoffset")?.is_none() {
        return Err(PyValueError::new_err(format!(
            "{field}: a naive datetime is ambiguous; give it a tzinfo (datetime.timezone.utc)"
        )));
    }
    let py = obj.py();
    let epoch = py.import("datetime")?.getattr("datetime")?.call_method1(
        "fromtimestamp",
        (0, py.import("datetime")?.getattr("timezone")?.getattr("utc")?),
    )?;
    let delta = obj.call_method1("__sub__", (epoch,))?;
    let days: i64 = delta.getattr("days")?.extract()?;
    let seconds: i64 = delta.getattr("seconds")?.extract()?;
    let micros: i64 = delta.getattr("microseconds")?.extract()?;
    days.checked_mul(86_400)
        .and_then(|s| s.checked_add(seconds))
        .and_then(|s| s.checked_mul(1_000_000))
        .and_then(|us| us.checked_add(micros))
        .and_then(|us| us.checked_mul(1_000))
        .ok_or_else(|| PyValueError::new_err(format!("{field}: out of the range of 64-bit nanoseconds")))
}

/// An aware UTC datetime (microsecond precision, as Python's) for nanoseconds since the epoch.
pub fn datetime_from_ns<'py>(py: Python<'py>, ns: i64) -> PyResult<Bound<'py, PyAny>> {
    let dt = py.import("datetime")?;
    let utc = dt.getattr("timezone")?.getattr("utc")?;
    let epoch = dt.getattr("datetime")?.call_method1("fromtimestamp", (0, utc))?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("microseconds", ns.div_euclid(1_000))?;
    let delta = dt.getattr("timedelta")?.call((), Some(&kwargs))?;
    epoch.call_method1("__add__", (delta,))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "this value".into())
}

/// A join query: `find` variable names and `where`, an iterable of `(entity, attribute,
/// value)` clauses (a string starting with `?` is a variable in either position),
/// `(op, "?variable", value)` filters (`op` one of `<`, `<=`, `>`, `>=`, `!=`),
/// `("not", (entity, attribute, value), ...)` groups no row matches all of, and `("or",
/// alternative, ...)` groups of which a row matches one, each alternative a clause or
/// `("and", clause, ...)`.
pub fn query(find: Vec<String>, entries: &Bound<'_, PyAny>) -> PyResult<Query> {
    let find = find
        .into_iter()
        .enumerate()
        .map(|(i, v)| FindTerm::parse(&v).map_err(|e| PyValueError::new_err(format!("find[{i}]: {e}"))))
        .collect::<PyResult<Vec<_>>>()?;
    let mut out = Vec::new();
    for (i, c) in entries.try_iter()?.enumerate() {
        let c = c?;
        let field = format!("where[{i}]");
        let tuple = c.cast::<PyTuple>().map_err(|_| {
            PyTypeError::new_err(format!("{field}: a clause is a tuple (entity, attribute, value)"))
        })?;
        let head = tuple.get_item(0).ok().and_then(|h| h.extract::<String>().ok());
        if head.as_deref() == Some("not") {
            // ("not", clause, ...): one clause or more that must not all hold at once.
            if tuple.len() < 2 {
                return Err(PyValueError::new_err(format!(
                    "{field}: a not is (\"not\", (entity, attribute, value), ...): one clause or more"
                )));
            }
            out.push(Where::Not(conjunction(
                &field,
                tuple,
                "a not is (\"not\", (entity, attribute, value), ...)",
            )?));
            continue;
        }
        if head.as_deref() == Some("or") {
            let mut alternatives = Vec::with_capacity(tuple.len().saturating_sub(1));
            for j in 1..tuple.len() {
                let inner_field = format!("{field}[{j}]");
                let inner = tuple.get_item(j)?;
                let inner = inner.cast::<PyTuple>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "{inner_field}: an or is (\"or\", (entity, attribute, value), (\"and\", clause, ...), ...)"
                    ))
                })?;
                let inner_head = inner.get_item(0).ok().and_then(|h| h.extract::<String>().ok());
                if inner_head.as_deref() == Some("and") {
                    if inner.len() < 2 {
                        return Err(PyValueError::new_err(format!(
                            "{inner_field}: an and is (\"and\", (entity, attribute, value), ...): one clause or more"
                        )));
                    }
                    alternatives.push(conjunction(
                        &inner_field,
                        inner,
                        "an and is (\"and\", (entity, attribute, value), ...)",
                    )?);
                } else {
                    alternatives.push(vec![clause(&inner_field, inner)?]);
                }
            }
            out.push(Where::Or(alternatives));
            continue;
        }
        if let Some(op) = head.as_deref().and_then(Compare::parse) {
            if tuple.len() != 3 {
                return Err(PyValueError::new_err(format!(
                    "{field}: a filter is a tuple (op, \"?variable\", value), not {} items",
                    tuple.len()
                )));
            }
            let left = variable(&field, 1, &tuple.get_item(1)?)?.ok_or_else(|| {
                PyValueError::new_err(format!("{field}[1]: a filter compares a variable (\"?name\")"))
            })?;
            out.push(Where::Filter(Filter {
                op,
                left,
                right: value_term(&field, &tuple.get_item(2)?)?,
            }));
            continue;
        }
        out.push(Where::Clause(clause(&field, tuple)?));
    }
    Query::from_where(find, out).map_err(|e| match e {
        engram_types::ValidationError::Query(m) => PyValueError::new_err(m),
        other => PyValueError::new_err(other.to_string()),
    })
}

/// The clause tuple at `field`: `(entity, attribute, value)`.
/// The clauses of a `("not", clause, ...)` or `("and", clause, ...)` tuple at `field`, its
/// clauses `field[1]` on; `shape` says how one is written.
fn conjunction(field: &str, tuple: &Bound<'_, PyTuple>, shape: &str) -> PyResult<Vec<Clause>> {
    let mut clauses = Vec::with_capacity(tuple.len().saturating_sub(1));
    for m in 1..tuple.len() {
        let inner_field = format!("{field}[{m}]");
        let inner = tuple.get_item(m)?;
        let inner = inner
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err(format!("{inner_field}: {shape}")))?;
        clauses.push(clause(&inner_field, inner)?);
    }
    Ok(clauses)
}

fn clause(field: &str, tuple: &Bound<'_, PyTuple>) -> PyResult<Clause> {
    if tuple.len() != 3 {
        return Err(PyValueError::new_err(format!(
            "{field}: a clause is a tuple (entity, attribute, value), not {} items",
            tuple.len()
        )));
    }
    let (e, a, v) = (tuple.get_item(0)?, tuple.get_item(1)?, tuple.get_item(2)?);
    let entity = match variable(field, 0, &e)? {
        Some(v) => EntityTerm::Var(v),
        None if e.is_instance_of::<PyString>() => {
            return Err(PyValueError::new_err(format!(
                "{field}[0]: a variable (\"?name\"), an entity id, a comparison (<, <=, >, >=, !=), \"not\" or \"or\", not this string"
            )));
        }
        None => EntityTerm::Entity(entity_id(&format!("{field}[0]"), &e)?),
    };
    let attribute = attribute(
        &format!("{field}[1]"),
        &a.extract::<String>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{field}[1]: an attribute is a str such as \":task/owner\""
            ))
        })?,
    )?;
    Ok(Clause {
        entity,
        attribute,
        value: value_term(field, &v)?,
    })
}

/// The variable at `field[part]`, if `obj` is a string starting with `?`.
fn variable(field: &str, part: usize, obj: &Bound<'_, PyAny>) -> PyResult<Option<Variable>> {
    if !obj.is_instance_of::<PyString>() {
        return Ok(None);
    }
    let s: String = obj.extract()?;
    if !s.starts_with('?') {
        return Ok(None);
    }
    Variable::new(s)
        .map(Some)
        .map_err(|e| PyValueError::new_err(format!("{field}[{part}]: {e}")))
}

/// The value position `field[2]`: a variable or a value.
fn value_term(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<ValueTerm> {
    Ok(match variable(field, 2, obj)? {
        Some(var) => ValueTerm::Var(var),
        None => ValueTerm::Value(value(&format!("{field}[2]"), obj)?),
    })
}
