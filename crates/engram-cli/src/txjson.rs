//! The JSON formats of the command line: transactions for `engram transact`, values for
//! `engram find --value`, the rendering of values and datoms in `--json` output, and the
//! cursors of paged answers (the CLI's and the MCP tools' alike).
//!
//! Input is parsed into the domain types ([`TxRequest`], [`Value`]) before anything is sent,
//! and every error names the exact field path (`ops[2].value.i64: ...`), so a user fixes the
//! file without a round trip to the server. Unknown fields are refused: a misspelt field
//! (`"namspace"`) must not be silently ignored.

use std::fmt;

use engram_proto::pb;
use engram_types::{
    Attribute, BranchName, EntityId, EntityRef, Namespace, Op, Precondition, Provenance, Status, TxOp,
    TxRequest, Value,
};
use serde_json::{Map, Value as Json, json};

/// Documentation of the transaction format, shown by `engram transact --help`.
pub const TX_FORMAT_HELP: &str = r#"TRANSACTION FORMAT (JSON)
  {
    "namespace": "team/a",            required; segments of A-Z a-z 0-9 _ - . separated by /
    "branch": "plan-a",               optional: write to this open branch instead of main
    "agent": "planner",               required: who asserts this (provenance)
    "session": "s1",                  optional
    "source": "https://...",          optional: where the facts come from
    "confidence": 0.9,                optional, in [0, 1]; default 1.0
    "status": "candidate",            optional: "candidate" (default) or "verified"
    "idempotency_key": "plan-42",     optional; a retry with the same key returns the first
                                      receipt, so `engram transact` retries only with a key
                                      (the key with other content is FAILED_PRECONDITION)
    "ops": [                          required, at least one
      { "op": "assert",               "assert" (default) or "retract"
        "entity": "new-task",         a string names a new entity within this transaction
                                      (or, if it asserts a unique-identity value that an
                                      entity holds, that entity: upsert); an integer is an
                                      existing entity id; {"lookup": [":memory/key",
                                      {"string": "alice/theme"}]} is the entity holding that
                                      value of a unique attribute
        "attribute": ":task/title",   required, :prefix/name
        "value": {"string": "Ship it"},
        "valid_from_ns": 1700000000000000000,   optional (default: transaction time)
        "valid_to_ns": null }         optional (default: open-ended)
    ],
    "preconditions": [                optional compare-and-set guards
      { "entity": 12, "attribute": ":task/status",
        "expected": {"keyword": ":status/open"} }   null: the attribute must have no value
    ]
  }

VALUES (exactly one key)
  {"string": "text"}   {"i64": 5}          {"f64": 1.5}        {"bool": true}
  {"bytes_hex": "00ff"} {"instant_ns": 1700000000000000000}    {"ref": 12}
  {"keyword": ":status/open"}              {"json": {"any": ["JSON", 1]}}
  In a namespace with no declared schema, an attribute's value type is fixed by its first
  assertion; once the namespace declares a schema (`engram schema apply`), only declared
  attributes are accepted, with their declared types.

EXAMPLES
  engram transact tx.json
  engram transact - < tx.json
  echo '{"namespace":"team/a","agent":"planner","ops":[{"entity":"t","attribute":":task/title","value":{"string":"Ship it"}}]}' | engram transact

OUTPUT
  The receipt: tx id (the log index), tx time, audit chain index and hash, datom hashes, and
  the entity ids allocated for temporary names."#;

/// A field of the input that does not form a valid domain value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Path of the offending field, e.g. `ops[0].value.i64`; `(document)` for syntax errors.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

impl std::error::Error for JsonError {}

fn err<T>(path: impl Into<String>, reason: impl Into<String>) -> Result<T, JsonError> {
    Err(JsonError {
        path: path.into(),
        reason: reason.into(),
    })
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// A JSON object whose keys were checked against the allowed set.
struct Obj<'a> {
    path: String,
    map: &'a Map<String, Json>,
}

impl<'a> Obj<'a> {
    fn new(path: &str, v: &'a Json, allowed: &[&str]) -> Result<Obj<'a>, JsonError> {
        let Json::Object(map) = v else {
            return err(
                display_path(path),
                format!("expected an object, found {}", kind(v)),
            );
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                return err(
                    join(path, key),
                    format!("unknown field (expected one of: {})", allowed.join(", ")),
                );
            }
        }
        Ok(Obj {
            path: path.to_string(),
            map,
        })
    }

    fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// The field, treating an explicit `null` as absent.
    fn opt(&self, key: &str) -> Option<&'a Json> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn required(&self, key: &str) -> Result<&'a Json, JsonError> {
        self.opt(key).ok_or_else(|| JsonError {
            path: self.path(key),
            reason: "is required".into(),
        })
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, JsonError> {
        match self.opt(key) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s)),
            Some(v) => err(self.path(key), format!("expected a string, found {}", kind(v))),
        }
    }

    fn req_str(&self, key: &str) -> Result<&'a str, JsonError> {
        self.opt_str(key)?.ok_or_else(|| JsonError {
            path: self.path(key),
            reason: "is required".into(),
        })
    }

    fn opt_i64(&self, key: &str) -> Result<Option<i64>, JsonError> {
        self.opt(key).map(|v| as_i64(&self.path(key), v)).transpose()
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "(document)".into()
    } else {
        path.to_string()
    }
}

fn as_i64(path: &str, v: &Json) -> Result<i64, JsonError> {
    match v {
        Json::Number(n) => match n.as_i64() {
            Some(i) => Ok(i),
            None if n.is_u64() => err(
                path,
                format!(
                    "{n} is out of range for a signed 64-bit integer; send it as a string to keep every digit"
                ),
            ),
            None => err(path, format!("expected an integer, found {n}")),
        },
        _ => err(path, format!("expected an integer, found {}", kind(v))),
    }
}

fn as_u64(path: &str, v: &Json) -> Result<u64, JsonError> {
    match v {
        Json::Number(n) => match n.as_u64() {
            Some(u) => Ok(u),
            None if n.is_i64() => err(path, format!("expected a non-negative integer, found {n}")),
            None => err(path, format!("expected an integer, found {n}")),
        },
        _ => err(path, format!("expected an integer, found {}", kind(v))),
    }
}

const VALUE_KINDS: [&str; 10] = [
    "string",
    "i64",
    "f64",
    "bool",
    "bytes_hex",
    "instant_ns",
    "ref",
    "keyword",
    "json",
    "vector",
];

/// The components of a JSON array of numbers at `path`, as f32s; refuses anything else, and a
/// number that an f32 cannot hold (it would become infinite).
fn vector_from_json(path: &str, raw: &Json) -> Result<Vec<f32>, JsonError> {
    let Json::Array(items) = raw else {
        return err(path, format!("expected an array of numbers, found {}", kind(raw)));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.as_f64() {
            Some(x) if (x as f32).is_finite() => Ok(x as f32),
            Some(x) => err(
                format!("{path}[{i}]"),
                format!("{x} is beyond the range of a 32-bit float"),
            ),
            None => err(
                format!("{path}[{i}]"),
                format!("expected a number, found {}", kind(item)),
            ),
        })
        .collect()
}

/// Parses a query vector given on the command line, e.g. `--vector '[0.1, -0.5, 0.3]'`.
pub fn parse_vector(text: &str) -> Result<Vec<f32>, JsonError> {
    let json: Json = serde_json::from_str(text).map_err(|e| JsonError {
        path: "(vector)".into(),
        reason: format!("invalid JSON: {e}"),
    })?;
    let v = vector_from_json("(vector)", &json)?;
    engram_types::check_vector("vector", &v).map_err(|e| JsonError {
        path: "(vector)".into(),
        reason: e.to_string(),
    })?;
    Ok(v)
}

/// Parses a value object such as `{"i64": 5}` found at `path`.
pub fn value_from_json(path: &str, v: &Json) -> Result<Value, JsonError> {
    let obj = Obj::new(path, v, &VALUE_KINDS)?;
    let mut keys = obj.map.keys();
    let (Some(key), None) = (keys.next(), keys.next()) else {
        return err(
            display_path(path),
            format!(
                "a value has exactly one of: {} (found {} keys)",
                VALUE_KINDS.join(", "),
                obj.map.len()
            ),
        );
    };
    let p = obj.path(key);
    let raw = &obj.map[key];
    let value = match key.as_str() {
        "string" => match raw {
            Json::String(s) => Value::String(s.clone()),
            _ => return err(p, format!("expected a string, found {}", kind(raw))),
        },
        "i64" => Value::I64(as_i64(&p, raw)?),
        "f64" => match raw {
            Json::Number(n) => match n.as_f64() {
                Some(x) => Value::F64(x),
                None => return err(p, format!("{n} is not representable as f64")),
            },
            _ => return err(p, format!("expected a number, found {}", kind(raw))),
        },
        "bool" => match raw {
            Json::Bool(b) => Value::Bool(*b),
            _ => return err(p, format!("expected true or false, found {}", kind(raw))),
        },
        "bytes_hex" => match raw {
            Json::String(s) => match hex::decode(s) {
                Ok(bytes) => Value::Bytes(bytes),
                Err(e) => return err(p, format!("not hex: {e}")),
            },
            _ => return err(p, format!("expected a hex string, found {}", kind(raw))),
        },
        "instant_ns" => Value::Instant(as_i64(&p, raw)?),
        "ref" => Value::Ref(EntityId(as_u64(&p, raw)?)),
        "keyword" => match raw {
            Json::String(s) => Value::Keyword(s.clone()),
            _ => return err(p, format!("expected a keyword string, found {}", kind(raw))),
        },
        "json" => match Value::json(&raw.to_string()) {
            Ok(v) => v,
            Err(e) => return err(p, e.to_string()),
        },
        "vector" => Value::Vector(vector_from_json(&p, raw)?),
        // Obj::new refused every other key.
        other => return err(p, format!("unknown value kind {other:?}")),
    };
    if let Err(e) = value.validate() {
        return err(p, e.to_string());
    }
    Ok(value)
}

/// Parses a value given on the command line, e.g. `--value '{"keyword":":status/open"}'`.
pub fn parse_value(text: &str) -> Result<Value, JsonError> {
    exact_numbers("(value)", text)?;
    let json: Json = serde_json::from_str(text).map_err(|e| JsonError {
        path: "(value)".into(),
        reason: format!("invalid JSON: {e}"),
    })?;
    value_from_json("", &json).map_err(|e| JsonError {
        path: if e.path == "(document)" {
            "(value)".into()
        } else {
            e.path
        },
        ..e
    })
}

fn attribute(path: &str, raw: &str) -> Result<Attribute, JsonError> {
    Attribute::new(raw).map_err(|e| JsonError {
        path: path.into(),
        reason: e.to_string(),
    })
}

const TX_FIELDS: [&str; 10] = [
    "namespace",
    "branch",
    "agent",
    "session",
    "source",
    "confidence",
    "status",
    "idempotency_key",
    "ops",
    "preconditions",
];
const OP_FIELDS: [&str; 6] = [
    "op",
    "entity",
    "attribute",
    "value",
    "valid_from_ns",
    "valid_to_ns",
];
const PRE_FIELDS: [&str; 3] = ["entity", "attribute", "expected"];

/// Refuses a document holding a number that parsing would round (an integer beyond 64 bits, a
/// decimal no f64 holds as written): inside a `json` value it would reach the server already
/// changed, past the server's own check.
fn exact_numbers(path: &str, text: &str) -> Result<(), JsonError> {
    engram_types::check_json_numbers(text).map_err(|e| JsonError {
        path: path.into(),
        reason: e.to_string(),
    })
}

/// Parses a transaction in the format documented by [`TX_FORMAT_HELP`].
pub fn parse_tx(text: &str) -> Result<TxRequest, JsonError> {
    exact_numbers("(document)", text)?;
    let json: Json = serde_json::from_str(text).map_err(|e| JsonError {
        path: "(document)".into(),
        reason: format!("invalid JSON: {e}"),
    })?;
    tx_from_json(&json)
}

pub fn tx_from_json(json: &Json) -> Result<TxRequest, JsonError> {
    let top = Obj::new("", json, &TX_FIELDS)?;
    let namespace = Namespace::new(top.req_str("namespace")?).map_err(|e| JsonError {
        path: "namespace".into(),
        reason: e.to_string(),
    })?;

    let confidence = match top.opt("confidence") {
        None => 1.0,
        Some(Json::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(v) => return err("confidence", format!("expected a number, found {}", kind(v))),
    };
    if !(0.0..=1.0).contains(&confidence) {
        return err("confidence", format!("{confidence} is outside [0, 1]"));
    }
    let status = match top.opt_str("status")? {
        None | Some("candidate") => Status::Candidate,
        Some("verified") => Status::Verified,
        Some(other) => {
            return err(
                "status",
                format!("expected \"candidate\" or \"verified\", found {other:?}"),
            );
        }
    };
    let provenance = Provenance {
        agent: top.req_str("agent")?.to_string(),
        session: top.opt_str("session")?.unwrap_or_default().to_string(),
        source: top.opt_str("source")?.unwrap_or_default().to_string(),
        confidence,
        status,
    };
    if let Err(e) = provenance.validate() {
        // Provenance names its own field ("provenance.agent"); the input calls it "agent".
        let reason = e.to_string();
        let path = ["agent", "session", "source"]
            .into_iter()
            .find(|f| reason.contains(&format!("provenance.{f}")))
            .unwrap_or("agent");
        return err(path, reason);
    }

    let idempotency_key = match top.opt_str("idempotency_key")? {
        None => None,
        Some(k) if k.is_empty() || k.len() > TxRequest::MAX_KEY_BYTES => {
            return err(
                "idempotency_key",
                "must be 1..=256 bytes (omit the field for no key)",
            );
        }
        Some(k) => Some(k.to_string()),
    };

    let ops = match top.required("ops")? {
        Json::Array(items) if items.is_empty() => return err("ops", "a transaction needs at least one op"),
        Json::Array(items) if items.len() > TxRequest::MAX_OPS => {
            return err(
                "ops",
                format!("{} ops exceed the limit of {}", items.len(), TxRequest::MAX_OPS),
            );
        }
        Json::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| op_from_json(&format!("ops[{i}]"), item))
            .collect(),
        v => err("ops", format!("expected an array, found {}", kind(v))),
    }?;

    let preconditions = match top.opt("preconditions") {
        None => Vec::new(),
        Some(Json::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| precondition_from_json(&format!("preconditions[{i}]"), item))
            .collect::<Result<_, _>>()?,
        Some(v) => return err("preconditions", format!("expected an array, found {}", kind(v))),
    };

    let branch = match top.opt_str("branch")? {
        None => None,
        Some(b) => Some(BranchName::new(b).map_err(|e| JsonError {
            path: "branch".into(),
            reason: e.to_string(),
        })?),
    };
    let tx = TxRequest {
        namespace,
        branch,
        schema: Vec::new(),
        branch_op: None,
        ops,
        preconditions,
        idempotency_key,
        provenance,
    };
    // Everything above names its field; this catches any rule added to the domain later.
    tx.validate().map_err(|e| JsonError {
        path: "(transaction)".into(),
        reason: e.to_string(),
    })?;
    Ok(tx)
}

fn op_from_json(path: &str, json: &Json) -> Result<TxOp, JsonError> {
    let o = Obj::new(path, json, &OP_FIELDS)?;
    let op = match o.opt_str("op")? {
        None | Some("assert") => Op::Assert,
        Some("retract") => Op::Retract,
        Some(other) => {
            return err(
                o.path("op"),
                format!("expected \"assert\" or \"retract\", found {other:?}"),
            );
        }
    };
    let entity = match o.required("entity")? {
        Json::String(name) if name.is_empty() || name.len() > TxRequest::MAX_KEY_BYTES => {
            return err(o.path("entity"), "a temporary name must be 1..=256 bytes");
        }
        Json::String(name) => EntityRef::Temp(name.clone()),
        v @ Json::Number(_) => EntityRef::Id(EntityId(as_u64(&o.path("entity"), v)?)),
        Json::Object(map) if map.contains_key("lookup") => {
            let path = format!("{}.lookup", o.path("entity"));
            match (map.len(), &map["lookup"]) {
                (1, Json::Array(pair)) if pair.len() == 2 => {
                    let Json::String(a) = &pair[0] else {
                        return err(format!("{path}[0]"), "expected the unique attribute, as a string");
                    };
                    EntityRef::Lookup(
                        attribute(&format!("{path}[0]"), a)?,
                        value_from_json(&format!("{path}[1]"), &pair[1])?,
                    )
                }
                _ => return err(path, "expected [\":unique/attribute\", {\"string\": \"value\"}]"),
            }
        }
        v => {
            return err(
                o.path("entity"),
                format!(
                    "expected a temporary name (string), an entity id (integer) or a lookup ref ({{\"lookup\": [attribute, value]}}), found {}",
                    kind(v)
                ),
            );
        }
    };
    if op == Op::Retract && matches!(entity, EntityRef::Temp(_)) {
        return err(
            o.path("entity"),
            "cannot retract from a new entity: retract needs an existing entity id",
        );
    }
    let attribute = attribute(&o.path("attribute"), o.req_str("attribute")?)?;
    let value = value_from_json(&o.path("value"), o.required("value")?)?;
    let valid_from_ns = o.opt_i64("valid_from_ns")?;
    let valid_to_ns = o.opt_i64("valid_to_ns")?;
    if let (Some(from), Some(to)) = (valid_from_ns, valid_to_ns)
        && to <= from
    {
        return err(
            o.path("valid_to_ns"),
            format!("{to} must be after valid_from_ns {from}"),
        );
    }
    Ok(TxOp {
        op,
        entity,
        attribute,
        value,
        valid_from_ns,
        valid_to_ns,
    })
}

fn precondition_from_json(path: &str, json: &Json) -> Result<Precondition, JsonError> {
    let o = Obj::new(path, json, &PRE_FIELDS)?;
    let entity = EntityId(as_u64(&o.path("entity"), o.required("entity")?)?);
    let attribute = attribute(&o.path("attribute"), o.req_str("attribute")?)?;
    // `expected` must be present: null and absent would otherwise look alike, and "no current
    // value" is too strong a guard to apply by accident.
    let expected = match o.map.get("expected") {
        None => {
            return err(
                o.path("expected"),
                "is required (null: the attribute must have no current value)",
            );
        }
        Some(Json::Null) => None,
        Some(v) => Some(value_from_json(&o.path("expected"), v)?),
    };
    Ok(Precondition {
        entity,
        attribute,
        expected,
    })
}

// ------------------------------------------------------------------ output

/// Renders a value in the input format, so output can be pasted back as input.
pub fn value_to_json(v: &Value) -> Json {
    match v {
        Value::String(s) => json!({ "string": s }),
        Value::I64(i) => json!({ "i64": i }),
        Value::F64(x) => json!({ "f64": x }),
        Value::Bool(b) => json!({ "bool": b }),
        Value::Bytes(b) => json!({ "bytes_hex": hex::encode(b) }),
        Value::Instant(ns) => json!({ "instant_ns": ns }),
        Value::Ref(e) => json!({ "ref": e.0 }),
        Value::Keyword(k) => json!({ "keyword": k }),
        Value::Json(text) => match serde_json::from_str::<Json>(text) {
            Ok(doc) => json!({ "json": doc }),
            // Stored json is canonical and parses; keep the text rather than fail the output.
            Err(_) => json!({ "json_text": text }),
        },
        Value::Vector(v) => json!({ "vector": v }),
        Value::Redacted(r) => json!({ "redacted_by_tx": r.by_tx.0, "type": r.value_type.name() }),
    }
}

/// A wire value for output; `null` for a value the server should never have sent.
pub fn pb_value_to_json(v: Option<&pb::Value>) -> Json {
    v.and_then(engram_proto::value_to_domain_lossy)
        .map(|v| value_to_json(&v))
        .unwrap_or(Json::Null)
}

/// A human rendering of a wire value.
pub fn pb_value_to_text(v: Option<&pb::Value>) -> String {
    match v.and_then(engram_proto::value_to_domain_lossy) {
        Some(v) => v.to_string(),
        None => "<invalid>".into(),
    }
}

fn op_name(op: i32) -> &'static str {
    match pb::Op::try_from(op) {
        Ok(pb::Op::Assert) => "assert",
        Ok(pb::Op::Retract) => "retract",
        _ => "unknown",
    }
}

fn status_name(status: i32) -> &'static str {
    match pb::Status::try_from(status) {
        Ok(pb::Status::Verified) => "verified",
        _ => "candidate",
    }
}

/// A datom as JSON, values in the input format and hashes in hex.
pub fn datom_to_json(d: &pb::Datom) -> Json {
    let prov = d.provenance.clone().unwrap_or_default();
    json!({
        "namespace": d.namespace,
        "branch": if d.branch.is_empty() { Json::Null } else { json!(d.branch) },
        "entity": d.entity,
        "attribute": d.attribute,
        "value": pb_value_to_json(d.value.as_ref()),
        "op": op_name(d.op),
        "valid_from_ns": d.valid_from_ns,
        "valid_to_ns": d.valid_to_ns,
        "tx": d.tx,
        "provenance": {
            "agent": prov.agent,
            "session": prov.session,
            "source": prov.source,
            "confidence": prov.confidence,
            "status": status_name(prov.status),
        },
        "hash": hex::encode(&d.hash),
        "redacted": if d.redacted.is_empty() { Json::Null } else { json!(d.redacted) },
        "redacted_by_tx": if d.redacted_by_tx == 0 { Json::Null } else { json!(d.redacted_by_tx) },
    })
}

/// Human-readable names used by the table output.
pub fn datom_op_name(d: &pb::Datom) -> &'static str {
    op_name(d.op)
}

pub fn datom_status_name(d: &pb::Datom) -> &'static str {
    status_name(d.provenance.as_ref().map(|p| p.status).unwrap_or_default())
}

/// What a paged answer adds to its JSON: the transaction every page is read as of, whether
/// more remain, and (when they do) the hex cursor to them.
pub fn add_page_position(out: &mut Json, as_of_tx: u64, next_cursor: &[u8]) {
    out["as_of_tx"] = json!(as_of_tx);
    out["more"] = json!(!next_cursor.is_empty());
    if !next_cursor.is_empty() {
        out["next_cursor"] = json!(hex::encode(next_cursor));
    }
}

/// A cursor as the CLI and the tools take it, the hex of an answer's `next_cursor`; none or
/// empty: the beginning. `field` names the argument in the error.
pub fn parse_cursor(field: &str, raw: Option<&str>) -> Result<Vec<u8>, String> {
    match raw {
        None | Some("") => Ok(Vec::new()),
        Some(text) => {
            hex::decode(text).map_err(|e| format!("{field}: not the next_cursor of an earlier answer ({e})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
        "namespace": "team/a", "agent": "planner", "session": "s1", "source": "unit",
        "confidence": 0.9, "status": "verified", "idempotency_key": "k1",
        "ops": [
            {"op": "assert", "entity": "t", "attribute": ":task/title", "value": {"string": "Ship"}},
            {"entity": "t", "attribute": ":task/n", "value": {"i64": -5}, "valid_from_ns": 10, "valid_to_ns": 20},
            {"op": "retract", "entity": 12, "attribute": ":task/status", "value": {"keyword": ":status/open"}},
            {"entity": "t", "attribute": ":task/meta", "value": {"json": {"b": 1, "a": [true]}}},
            {"entity": "t", "attribute": ":task/blob", "value": {"bytes_hex": "00ff"}},
            {"entity": "t", "attribute": ":task/due", "value": {"instant_ns": 1700000000000000000}},
            {"entity": "t", "attribute": ":task/parent", "value": {"ref": 7}},
            {"entity": "t", "attribute": ":task/score", "value": {"f64": 3}},
            {"entity": "t", "attribute": ":task/done", "value": {"bool": false}}
        ],
        "preconditions": [
            {"entity": 12, "attribute": ":task/status", "expected": {"keyword": ":status/open"}},
            {"entity": 12, "attribute": ":task/owner", "expected": null}
        ]
    }"#;

    #[test]
    fn a_complete_transaction_parses_into_domain_types() {
        let tx = parse_tx(GOOD).unwrap();
        assert_eq!(tx.namespace.as_str(), "team/a");
        assert_eq!(tx.idempotency_key.as_deref(), Some("k1"));
        assert_eq!(
            tx.provenance,
            Provenance {
                agent: "planner".into(),
                session: "s1".into(),
                source: "unit".into(),
                confidence: 0.9,
                status: Status::Verified
            }
        );
        let values: Vec<&Value> = tx.ops.iter().map(|o| &o.value).collect();
        assert_eq!(
            values,
            [
                &Value::String("Ship".into()),
                &Value::I64(-5),
                &Value::Keyword(":status/open".into()),
                &Value::Json(r#"{"a":[true],"b":1}"#.into()),
                &Value::Bytes(vec![0, 255]),
                &Value::Instant(1_700_000_000_000_000_000),
                &Value::Ref(EntityId(7)),
                &Value::F64(3.0),
                &Value::Bool(false),
            ]
        );
        assert_eq!(tx.ops[0].entity, EntityRef::Temp("t".into()));
        assert_eq!(tx.ops[1].op, Op::Assert, "op defaults to assert");
        assert_eq!(
            (tx.ops[1].valid_from_ns, tx.ops[1].valid_to_ns),
            (Some(10), Some(20))
        );
        assert_eq!(
            (tx.ops[2].op, &tx.ops[2].entity),
            (Op::Retract, &EntityRef::Id(EntityId(12)))
        );
        assert_eq!(
            tx.preconditions[0].expected,
            Some(Value::Keyword(":status/open".into()))
        );
        assert_eq!(tx.preconditions[1].expected, None);
        // What the client sends is what the server's own wire validation accepts.
        let wire = pb::TransactRequest::from(&tx);
        assert_eq!(TxRequest::try_from(wire).unwrap(), tx);
    }

    #[test]
    fn defaults_for_optional_provenance() {
        let tx = parse_tx(r#"{"namespace":"a","agent":"x","ops":[{"entity":"e","attribute":":a/b","value":{"bool":true}}]}"#)
            .unwrap();
        assert_eq!(tx.provenance.confidence, 1.0);
        assert_eq!(tx.provenance.status, Status::Candidate);
        assert_eq!(tx.idempotency_key, None);
        assert!(tx.preconditions.is_empty());
    }

    #[test]
    fn a_json_number_the_parse_would_round_is_refused() {
        let tx = GOOD.replace(
            r#"{"b": 1, "a": [true]}"#,
            r#"{"n": 123456789012345678901234567890}"#,
        );
        assert_ne!(tx, GOOD);
        let e = parse_tx(&tx).unwrap_err();
        assert_eq!(e.path, "(document)");
        assert!(
            e.reason
                .contains("number 123456789012345678901234567890 cannot be stored exactly"),
            "{e}"
        );
        let e = parse_value(r#"{"json":[1e-400]}"#).unwrap_err();
        assert_eq!(e.path, "(value)");
        assert!(e.reason.contains("number 1e-400 cannot be stored exactly"), "{e}");
    }

    type Mutation = Box<dyn Fn(&mut Json)>;

    /// Each malformed input is refused with the path of the offending field.
    #[test]
    fn each_bad_field_is_named_by_its_path() {
        let base: Json = serde_json::from_str(GOOD).unwrap();
        let cases: Vec<(&str, &str, Mutation)> = vec![
            (
                "namespace",
                "is required",
                Box::new(|t| drop(t.as_object_mut().unwrap().remove("namespace"))),
            ),
            ("namespace", "'..'", Box::new(|t| t["namespace"] = json!("../x"))),
            (
                "namespace",
                "absolute",
                Box::new(|t| t["namespace"] = json!("/abs")),
            ),
            (
                "namespace",
                "expected a string",
                Box::new(|t| t["namespace"] = json!(5)),
            ),
            (
                "namspace",
                "unknown field",
                Box::new(|t| t["namspace"] = json!("x")),
            ),
            (
                "agent",
                "is required",
                Box::new(|t| drop(t.as_object_mut().unwrap().remove("agent"))),
            ),
            ("agent", "must not be empty", Box::new(|t| t["agent"] = json!(""))),
            (
                "session",
                "control",
                Box::new(|t| t["session"] = json!("a\u{7}b")),
            ),
            (
                "confidence",
                "outside [0, 1]",
                Box::new(|t| t["confidence"] = json!(1.5)),
            ),
            (
                "confidence",
                "expected a number",
                Box::new(|t| t["confidence"] = json!("high")),
            ),
            ("status", "candidate", Box::new(|t| t["status"] = json!("sure"))),
            (
                "idempotency_key",
                "1..=256",
                Box::new(|t| t["idempotency_key"] = json!("")),
            ),
            ("ops", "at least one", Box::new(|t| t["ops"] = json!([]))),
            ("ops", "expected an array", Box::new(|t| t["ops"] = json!({}))),
            (
                "ops",
                "is required",
                Box::new(|t| drop(t.as_object_mut().unwrap().remove("ops"))),
            ),
            (
                "ops[1]",
                "expected an object",
                Box::new(|t| t["ops"][1] = json!("assert")),
            ),
            (
                "ops[0].op",
                "\"assert\" or \"retract\"",
                Box::new(|t| t["ops"][0]["op"] = json!("upsert")),
            ),
            (
                "ops[0].entity",
                "is required",
                Box::new(|t| drop(t["ops"][0].as_object_mut().unwrap().remove("entity"))),
            ),
            (
                "ops[0].entity",
                "non-negative",
                Box::new(|t| t["ops"][0]["entity"] = json!(-1)),
            ),
            (
                "ops[0].entity",
                "found a boolean",
                Box::new(|t| t["ops"][0]["entity"] = json!(true)),
            ),
            (
                "ops[0].entity",
                "cannot retract from a new entity",
                Box::new(|t| t["ops"][0]["op"] = json!("retract")),
            ),
            (
                "ops[0].attribute",
                "must start with ':'",
                Box::new(|t| t["ops"][0]["attribute"] = json!("title")),
            ),
            (
                "ops[1].valid_to_ns",
                "must be after",
                Box::new(|t| t["ops"][1]["valid_to_ns"] = json!(10)),
            ),
            (
                "ops[0].valid_from_ns",
                "expected an integer",
                Box::new(|t| t["ops"][0]["valid_from_ns"] = json!(1.5)),
            ),
            (
                "ops[0].value",
                "is required",
                Box::new(|t| drop(t["ops"][0].as_object_mut().unwrap().remove("value"))),
            ),
            (
                "ops[0].value",
                "exactly one",
                Box::new(|t| t["ops"][0]["value"] = json!({})),
            ),
            (
                "ops[0].value",
                "exactly one",
                Box::new(|t| t["ops"][0]["value"] = json!({"i64": 1, "f64": 1.0})),
            ),
            (
                "ops[0].value.int",
                "unknown field",
                Box::new(|t| t["ops"][0]["value"] = json!({"int": 1})),
            ),
            (
                "ops[0].value",
                "expected an object",
                Box::new(|t| t["ops"][0]["value"] = json!("Ship")),
            ),
            (
                "ops[0].value.i64",
                "expected an integer",
                Box::new(|t| t["ops"][0]["value"] = json!({"i64": 1.5})),
            ),
            (
                "ops[0].value.i64",
                "out of range",
                Box::new(|t| t["ops"][0]["value"] = json!({"i64": u64::MAX})),
            ),
            (
                "ops[0].value.i64",
                "expected an integer",
                Box::new(|t| t["ops"][0]["value"] = json!({"i64": "5"})),
            ),
            (
                "ops[0].value.string",
                "expected a string",
                Box::new(|t| t["ops"][0]["value"] = json!({"string": 5})),
            ),
            (
                "ops[0].value.f64",
                "expected a number",
                Box::new(|t| t["ops"][0]["value"] = json!({"f64": "NaN"})),
            ),
            (
                "ops[0].value.bool",
                "true or false",
                Box::new(|t| t["ops"][0]["value"] = json!({"bool": "yes"})),
            ),
            (
                "ops[0].value.bytes_hex",
                "not hex",
                Box::new(|t| t["ops"][0]["value"] = json!({"bytes_hex": "zz"})),
            ),
            (
                "ops[0].value.ref",
                "non-negative",
                Box::new(|t| t["ops"][0]["value"] = json!({"ref": -3})),
            ),
            (
                "ops[0].value.keyword",
                "keyword",
                Box::new(|t| t["ops"][0]["value"] = json!({"keyword": "open"})),
            ),
            (
                "ops[0].value.instant_ns",
                "expected an integer",
                Box::new(|t| t["ops"][0]["value"] = json!({"instant_ns": null})),
            ),
            (
                "preconditions",
                "expected an array",
                Box::new(|t| t["preconditions"] = json!(1)),
            ),
            (
                "preconditions[0].entity",
                "integer",
                Box::new(|t| t["preconditions"][0]["entity"] = json!("t")),
            ),
            (
                "preconditions[1].expected",
                "is required",
                Box::new(|t| drop(t["preconditions"][1].as_object_mut().unwrap().remove("expected"))),
            ),
            (
                "preconditions[0].expected.i64",
                "expected an integer",
                Box::new(|t| t["preconditions"][0]["expected"] = json!({"i64": true})),
            ),
            (
                "preconditions[0].attribute",
                "prefix",
                Box::new(|t| t["preconditions"][0]["attribute"] = json!(":status")),
            ),
        ];
        for (path, reason, mutate) in cases {
            let mut doc = base.clone();
            mutate(&mut doc);
            let e = tx_from_json(&doc).expect_err(path);
            assert_eq!(e.path, path, "{e}");
            assert!(e.reason.contains(reason), "{path}: {e}");
        }
    }

    #[test]
    fn syntax_errors_point_at_the_document() {
        let e = parse_tx("{\"namespace\": ").unwrap_err();
        assert_eq!(e.path, "(document)");
        assert!(e.reason.contains("invalid JSON"), "{e}");
        assert_eq!(
            parse_tx("[]").unwrap_err().to_string(),
            "(document): expected an object, found an array"
        );
    }

    #[test]
    fn command_line_values_parse_and_round_trip() {
        assert_eq!(
            parse_value(r#"{"keyword":":status/open"}"#).unwrap(),
            Value::Keyword(":status/open".into())
        );
        assert_eq!(
            parse_value(r#"{"json":{"z":1,"a":null}}"#).unwrap(),
            Value::Json(r#"{"a":null,"z":1}"#.into())
        );
        assert_eq!(parse_value("5").unwrap_err().path, "(value)");
        assert_eq!(parse_value("{oops").unwrap_err().path, "(value)");
        assert_eq!(parse_value(r#"{"i64":1.0}"#).unwrap_err().path, "i64");
        for v in [
            Value::String("a\"b".into()),
            Value::I64(i64::MIN),
            Value::F64(-0.25),
            Value::Bool(true),
            Value::Bytes(vec![1, 2, 254]),
            Value::Instant(-1),
            Value::Ref(EntityId(u64::MAX)),
            Value::Keyword(":k/v".into()),
            Value::json(r#"{"x":[1,2,{"y":"z"}]}"#).unwrap(),
        ] {
            assert_eq!(value_from_json("", &value_to_json(&v)).unwrap(), v);
        }
    }
}
