//! Engram's gRPC API (`proto/engram/v1/engram.proto`) and the conversions between wire and
//! domain types.
//!
//! Validation happens here, at the wire: `TryFrom<pb::X> for X` refuses anything malformed
//! (missing fields, unknown enum values, invalid namespaces or attributes, NaN, bad JSON,
//! over-long strings) with a [`WireError`] naming the field, which the server maps to
//! `INVALID_ARGUMENT`. Prost types never reach the core.
//!
//! Must not depend on: the core, storage, Raft or the server.

use engram_types::{
    Attribute, AttributeDef, BranchName, BranchOp, Cardinality, Datom, EntityId, EntityRef, Hash, Namespace,
    Op, Precondition, Provenance, Salt, Status, TxId, TxOp, TxReceipt, TxRequest, Unique, ValidationError,
    Value, ValueType,
};
use thiserror::Error;

mod search;
pub use search::{DEFAULT_K, search_request};

mod query;
pub use query::{clauses_to_pb, disjunctions_to_pb, filters_to_pb, negations_to_pb, query};

mod access;
pub use access::{
    SignedBody, access_log_op, add_agent_op, grant_op, methods, principal, public_key, retention_op,
    revoke_agent_op, role_op, role_request, rotate_agent_key_op, session_op, signed_request,
};

// Under madsim, messages travel as values and no codec runs.
#[cfg(not(madsim))]
pub mod codec;

#[allow(clippy::all, clippy::unwrap_used)]
pub mod pb {
    tonic::include_proto!("engram.v1");
}

/// The encoded `FileDescriptorSet` of the API, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/engram_descriptor.bin"));

/// A request field that does not form a valid domain value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {reason}")]
pub struct WireError {
    pub field: String,
    pub reason: String,
}

impl WireError {
    pub fn new(field: impl Into<String>, reason: impl ToString) -> WireError {
        WireError {
            field: field.into(),
            reason: reason.to_string(),
        }
    }

    fn missing(field: &str) -> WireError {
        WireError::new(field, "is required")
    }
}

fn at(field: impl Into<String>) -> impl FnOnce(ValidationError) -> WireError {
    let field = field.into();
    move |e| WireError::new(field, e)
}

pub fn namespace(field: &str, raw: String) -> Result<Namespace, WireError> {
    Namespace::new(raw).map_err(at(field))
}

pub fn attribute(field: &str, raw: String) -> Result<Attribute, WireError> {
    Attribute::new(raw).map_err(at(field))
}

/// An optional branch: empty is main.
pub fn branch(field: &str, raw: String) -> Result<Option<BranchName>, WireError> {
    if raw.is_empty() {
        return Ok(None);
    }
    BranchName::new(raw).map(Some).map_err(at(field))
}

/// A required branch name.
pub fn branch_name(field: &str, raw: String) -> Result<BranchName, WireError> {
    if raw.is_empty() {
        return Err(WireError::missing(field));
    }
    BranchName::new(raw).map_err(at(field))
}

pub fn value_type(field: &str, raw: &str) -> Result<ValueType, WireError> {
    ValueType::ALL
        .into_iter()
        .find(|t| t.name() == raw)
        .ok_or_else(|| {
            WireError::new(
                field,
                format!(
                    "unknown value type {} (string, i64, f64, bool, bytes, instant, ref, keyword or json)",
                    engram_types::excerpt(raw)
                ),
            )
        })
}

/// A wire cardinality (unspecified: one).
pub fn cardinality(field: &str, raw: i32) -> Result<Cardinality, WireError> {
    match pb::Cardinality::try_from(raw) {
        Ok(pb::Cardinality::Unspecified | pb::Cardinality::One) => Ok(Cardinality::One),
        Ok(pb::Cardinality::Many) => Ok(Cardinality::Many),
        Err(_) => Err(WireError::new(field, format!("unknown cardinality {raw}"))),
    }
}

pub fn cardinality_to_pb(c: Cardinality) -> pb::Cardinality {
    match c {
        Cardinality::One => pb::Cardinality::One,
        Cardinality::Many => pb::Cardinality::Many,
    }
}

pub fn attribute_def(field: &str, raw: pb::AttributeDef) -> Result<AttributeDef, WireError> {
    let sub = |name: &str| format!("{field}.{name}");
    let cardinality = cardinality(&sub("cardinality"), raw.cardinality)?;
    let unique = match pb::Uniqueness::try_from(raw.unique) {
        Ok(pb::Uniqueness::None) => None,
        Ok(pb::Uniqueness::Identity) => Some(Unique::Identity),
        Ok(pb::Uniqueness::Value) => Some(Unique::Value),
        Err(_) => {
            return Err(WireError::new(
                sub("unique"),
                format!("unknown uniqueness {}", raw.unique),
            ));
        }
    };
    let def = AttributeDef {
        ident: attribute(&sub("ident"), raw.ident)?,
        value_type: value_type(&sub("value_type"), &raw.value_type)?,
        cardinality,
        unique,
        indexed: raw.indexed,
        component: raw.component,
        doc: raw.doc,
        deprecated: raw.deprecated,
        searchable: raw.searchable,
        dimension: raw.dimension,
    };
    def.validate().map_err(at(field))?;
    Ok(def)
}

impl From<&AttributeDef> for pb::AttributeDef {
    fn from(d: &AttributeDef) -> pb::AttributeDef {
        pb::AttributeDef {
            ident: d.ident.to_string(),
            value_type: d.value_type.name().to_string(),
            cardinality: cardinality_to_pb(d.cardinality) as i32,
            unique: match d.unique {
                None => pb::Uniqueness::None,
                Some(Unique::Identity) => pb::Uniqueness::Identity,
                Some(Unique::Value) => pb::Uniqueness::Value,
            } as i32,
            indexed: d.indexed,
            component: d.component,
            doc: d.doc.clone(),
            deprecated: d.deprecated,
            searchable: d.searchable,
            dimension: d.dimension,
        }
    }
}

/// A redaction (`dry_run` is the caller's to read).
pub fn redact_request(req: pb::RedactRequest) -> Result<engram_types::RedactRequest, WireError> {
    let attribute = match req.attribute.is_empty() {
        true => None,
        false => Some(attribute("attribute", req.attribute)?),
    };
    if req.entity == 0 {
        return Err(WireError::missing("entity"));
    }
    let r = engram_types::RedactRequest {
        namespace: namespace("namespace", req.namespace)?,
        entity: engram_types::EntityId(req.entity),
        attribute,
        reason: req.reason,
        provenance: provenance(req.provenance)?,
    };
    r.validate().map_err(at("request"))?;
    Ok(r)
}

/// A redaction by predicate (`RedactRequest.matching` set): `entity` and `attribute` must be
/// left out (the predicate names its attribute).
pub fn redact_where_request(
    req: pb::RedactRequest,
    matching: pb::RedactPredicate,
) -> Result<engram_types::RedactWhere, WireError> {
    if req.entity != 0 {
        return Err(WireError::new(
            "entity",
            "a redaction by predicate names no entity (set `matching` or `entity`, not both)",
        ));
    }
    if !req.attribute.is_empty() {
        return Err(WireError::new(
            "attribute",
            "a redaction by predicate names its attribute in `matching.attribute`",
        ));
    }
    let predicate = engram_types::Predicate {
        attribute: match matching.attribute.is_empty() {
            true => None,
            false => Some(attribute("matching.attribute", matching.attribute)?),
        },
        agent: Some(matching.agent).filter(|a| !a.is_empty()),
        value: match matching.value {
            None => None,
            Some(v) => Some(value("matching.value", Some(v))?),
        },
        before_tx: Some(engram_types::TxId(matching.before_tx)).filter(|tx| tx.0 != 0),
        written_before_ns: matching.written_before_ns,
        valid_from_before_ns: matching.valid_from_before_ns,
    };
    let r = engram_types::RedactWhere {
        namespace: namespace("namespace", req.namespace)?,
        predicate,
        reason: req.reason,
        provenance: provenance(req.provenance)?,
    };
    r.validate().map_err(at("request"))?;
    Ok(r)
}

/// A schema transaction.
pub fn schema_request(req: pb::ApplySchemaRequest) -> Result<TxRequest, WireError> {
    let mut tx = TxRequest::data(
        namespace("namespace", req.namespace)?,
        Vec::new(),
        provenance(req.provenance)?,
    );
    for (i, def) in req.attributes.into_iter().enumerate() {
        tx.schema.push(attribute_def(&format!("attributes[{i}]"), def)?);
    }
    tx.idempotency_key = Some(req.idempotency_key).filter(|k| !k.is_empty());
    tx.validate().map_err(at("attributes"))?;
    Ok(tx)
}

/// A branch transaction: `op` builds the operation from the validated name.
pub fn branch_request(
    namespace_raw: String,
    name: String,
    provenance_raw: Option<pb::Provenance>,
    op: impl FnOnce(BranchName) -> BranchOp,
) -> Result<TxRequest, WireError> {
    let mut tx = TxRequest::data(
        namespace("namespace", namespace_raw)?,
        Vec::new(),
        provenance(provenance_raw)?,
    );
    tx.branch_op = Some(op(branch_name("name", name)?));
    tx.validate().map_err(at("request"))?;
    Ok(tx)
}

pub fn create_branch_request(req: pb::CreateBranchRequest) -> Result<TxRequest, WireError> {
    let from = req.from_tx.map(TxId);
    branch_request(req.namespace, req.name, req.provenance, |name| BranchOp::Create {
        name,
        from,
    })
}

pub fn value(field: &str, raw: Option<pb::Value>) -> Result<Value, WireError> {
    use pb::value::Kind;
    let kind = raw
        .and_then(|v| v.kind)
        .ok_or_else(|| WireError::missing(field))?;
    let v = match kind {
        Kind::String(s) => Value::String(s),
        Kind::I64(i) => Value::I64(i),
        Kind::F64(x) => Value::F64(x),
        Kind::Bool(b) => Value::Bool(b),
        Kind::Bytes(b) => Value::Bytes(b),
        Kind::InstantNs(ns) => Value::Instant(ns),
        Kind::Ref(e) => Value::Ref(EntityId(e)),
        Kind::Keyword(k) => Value::Keyword(k),
        Kind::Json(text) => Value::json(&text).map_err(at(field))?,
        Kind::Vector(v) => Value::Vector(v.values),
    };
    v.validate().map_err(at(field))?;
    Ok(v)
}

impl From<&Value> for pb::Value {
    fn from(v: &Value) -> pb::Value {
        use pb::value::Kind;
        let kind = match v {
            Value::String(s) => Kind::String(s.clone()),
            Value::I64(i) => Kind::I64(*i),
            Value::F64(x) => Kind::F64(*x),
            Value::Bool(b) => Kind::Bool(*b),
            Value::Bytes(b) => Kind::Bytes(b.clone()),
            Value::Instant(ns) => Kind::InstantNs(*ns),
            Value::Ref(e) => Kind::Ref(e.0),
            Value::Keyword(k) => Kind::Keyword(k.clone()),
            Value::Json(j) => Kind::Json(j.clone()),
            Value::Vector(v) => Kind::Vector(pb::Vector { values: v.clone() }),
            // A redacted datom is sent without a value (`From<&Datom>`); a marker alone has no
            // wire form.
            Value::Redacted(_) => return pb::Value { kind: None },
        };
        pb::Value { kind: Some(kind) }
    }
}

fn op(field: &str, raw: i32) -> Result<Op, WireError> {
    match pb::Op::try_from(raw) {
        Ok(pb::Op::Assert) => Ok(Op::Assert),
        Ok(pb::Op::Retract) => Ok(Op::Retract),
        _ => Err(WireError::new(
            field,
            format!("must be OP_ASSERT or OP_RETRACT, got {raw}"),
        )),
    }
}

fn op_to_pb(op: Op) -> pb::Op {
    match op {
        Op::Assert => pb::Op::Assert,
        Op::Retract => pb::Op::Retract,
    }
}

pub fn provenance(raw: Option<pb::Provenance>) -> Result<Provenance, WireError> {
    let p = raw.ok_or_else(|| WireError::missing("provenance"))?;
    let status = match pb::Status::try_from(p.status) {
        Ok(pb::Status::Unspecified | pb::Status::Candidate) => Status::Candidate,
        Ok(pb::Status::Verified) => Status::Verified,
        Err(_) => {
            return Err(WireError::new(
                "provenance.status",
                format!("unknown status {}", p.status),
            ));
        }
    };
    let prov = Provenance {
        agent: p.agent,
        session: p.session,
        source: p.source,
        confidence: p.confidence,
        status,
    };
    prov.validate().map_err(at("provenance"))?;
    Ok(prov)
}

impl From<&Provenance> for pb::Provenance {
    fn from(p: &Provenance) -> pb::Provenance {
        pb::Provenance {
            agent: p.agent.clone(),
            session: p.session.clone(),
            source: p.source.clone(),
            confidence: p.confidence,
            status: match p.status {
                Status::Candidate => pb::Status::Candidate,
                Status::Verified => pb::Status::Verified,
            } as i32,
        }
    }
}

impl TryFrom<pb::TransactRequest> for TxRequest {
    type Error = WireError;

    fn try_from(req: pb::TransactRequest) -> Result<TxRequest, WireError> {
        let namespace = namespace("namespace", req.namespace)?;
        let mut ops = Vec::with_capacity(req.ops.len());
        for (i, o) in req.ops.into_iter().enumerate() {
            let field = |name: &str| format!("ops[{i}].{name}");
            use pb::entity_ref::Kind;
            let entity = match o.entity.and_then(|e| e.kind) {
                Some(Kind::Id(id)) => EntityRef::Id(EntityId(id)),
                Some(Kind::Temp(name)) => EntityRef::Temp(name),
                Some(Kind::Lookup(l)) => EntityRef::Lookup(
                    attribute(&field("entity.lookup.attribute"), l.attribute)?,
                    value(&field("entity.lookup.value"), l.value)?,
                ),
                None => return Err(WireError::missing(&field("entity"))),
            };
            ops.push(TxOp {
                op: op(&field("op"), o.op)?,
                entity,
                attribute: attribute(&field("attribute"), o.attribute)?,
                value: value(&field("value"), o.value)?,
                valid_from_ns: o.valid_from_ns,
                valid_to_ns: o.valid_to_ns,
            });
        }
        let mut preconditions = Vec::with_capacity(req.preconditions.len());
        for (i, p) in req.preconditions.into_iter().enumerate() {
            let field = |name: &str| format!("preconditions[{i}].{name}");
            preconditions.push(Precondition {
                entity: EntityId(p.entity),
                attribute: attribute(&field("attribute"), p.attribute)?,
                expected: match p.expected {
                    None => None,
                    some => Some(value(&field("expected"), some)?),
                },
            });
        }
        let tx = TxRequest {
            namespace,
            branch: branch("branch", req.branch)?,
            ops,
            schema: Vec::new(),
            branch_op: None,
            preconditions,
            idempotency_key: Some(req.idempotency_key).filter(|k| !k.is_empty()),
            provenance: provenance(req.provenance)?,
        };
        tx.validate().map_err(at("transaction"))?;
        Ok(tx)
    }
}

impl From<&TxRequest> for pb::TransactRequest {
    fn from(tx: &TxRequest) -> pb::TransactRequest {
        pb::TransactRequest {
            namespace: tx.namespace.to_string(),
            ops: tx
                .ops
                .iter()
                .map(|o| pb::TxOp {
                    op: op_to_pb(o.op) as i32,
                    entity: Some(pb::EntityRef {
                        kind: Some(match &o.entity {
                            EntityRef::Id(e) => pb::entity_ref::Kind::Id(e.0),
                            EntityRef::Temp(t) => pb::entity_ref::Kind::Temp(t.clone()),
                            EntityRef::Lookup(a, v) => pb::entity_ref::Kind::Lookup(pb::LookupRef {
                                attribute: a.to_string(),
                                value: Some(v.into()),
                            }),
                        }),
                    }),
                    attribute: o.attribute.to_string(),
                    value: Some((&o.value).into()),
                    valid_from_ns: o.valid_from_ns,
                    valid_to_ns: o.valid_to_ns,
                })
                .collect(),
            preconditions: tx
                .preconditions
                .iter()
                .map(|p| pb::Precondition {
                    entity: p.entity.0,
                    attribute: p.attribute.to_string(),
                    expected: p.expected.as_ref().map(Into::into),
                })
                .collect(),
            idempotency_key: tx.idempotency_key.clone().unwrap_or_default(),
            provenance: Some((&tx.provenance).into()),
            branch: tx.branch.as_ref().map(ToString::to_string).unwrap_or_default(),
            value_salts: Vec::new(),
        }
    }
}

/// The request's value salts (`value_salts`): none, or one of [`engram_types::SALT_BYTES`]
/// bytes per op, then one per precondition.
pub fn value_salts(req: &pb::TransactRequest) -> Result<Vec<Salt>, WireError> {
    if req.value_salts.is_empty() {
        return Ok(Vec::new());
    }
    let wanted = req.ops.len() + req.preconditions.len();
    if req.ops.is_empty() || req.value_salts.len() != wanted {
        return Err(WireError::new(
            "value_salts",
            format!(
                "{} salts for {} ops and {} preconditions: give one per op, then one per precondition, or none",
                req.value_salts.len(),
                req.ops.len(),
                req.preconditions.len()
            ),
        ));
    }
    req.value_salts
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            Salt::try_from(raw.as_slice()).map_err(|_| {
                WireError::new(
                    format!("value_salts[{i}]"),
                    format!("{} bytes; a salt is {}", raw.len(), engram_types::SALT_BYTES),
                )
            })
        })
        .collect()
}

/// A datom as a server returned it, validated back into the domain type, so that a client can
/// recompute its hash from what it was given rather than trust the `hash` field.
pub fn datom(raw: pb::Datom) -> Result<Datom, WireError> {
    Ok(Datom {
        namespace: namespace("datom.namespace", raw.namespace)?,
        branch: branch("datom.branch", raw.branch)?,
        entity: engram_types::EntityId(raw.entity),
        attribute: attribute("datom.attribute", raw.attribute)?,
        value: value("datom.value", raw.value)?,
        op: op("datom.op", raw.op)?,
        valid_from_ns: raw.valid_from_ns,
        valid_to_ns: raw.valid_to_ns,
        tx: engram_types::TxId(raw.tx),
        provenance: provenance(raw.provenance)?,
        salt: salt("datom.salt", &raw.salt)?,
    })
}

/// A datom's salt: empty (none) or exactly [`engram_types::SALT_BYTES`] bytes.
fn salt(field: &str, raw: &[u8]) -> Result<Option<engram_types::Salt>, WireError> {
    if raw.is_empty() {
        return Ok(None);
    }
    engram_types::Salt::try_from(raw).map(Some).map_err(|_| {
        WireError::new(
            field,
            format!(
                "{} bytes, expected {} or none",
                raw.len(),
                engram_types::SALT_BYTES
            ),
        )
    })
}

impl From<&Datom> for pb::Datom {
    fn from(d: &Datom) -> pb::Datom {
        // A redacted value has nothing to send: the datom says which transaction took it, and
        // gives its value's commitment when it has one.
        let (value, redacted, redacted_by_tx, value_commitment) = match d.value.redacted() {
            None => (Some((&d.value).into()), String::new(), 0, Vec::new()),
            Some(r) => (
                None,
                format!("forgotten: redacted by transaction {}", r.by_tx.0),
                r.by_tx.0,
                r.commitment.map(|c| c.0.to_vec()).unwrap_or_default(),
            ),
        };
        pb::Datom {
            namespace: d.namespace.to_string(),
            entity: d.entity.0,
            attribute: d.attribute.to_string(),
            value,
            op: op_to_pb(d.op) as i32,
            valid_from_ns: d.valid_from_ns,
            valid_to_ns: d.valid_to_ns,
            tx: d.tx.0,
            provenance: Some((&d.provenance).into()),
            hash: d.hash().0.to_vec(),
            branch: d.branch.as_ref().map(ToString::to_string).unwrap_or_default(),
            redacted,
            redacted_by_tx,
            salt: d.salt.map(|s| s.to_vec()).unwrap_or_default(),
            value_commitment,
        }
    }
}

/// Withholds `d`'s value from a reader whose grants do not cover its attribute: no value, the
/// `reason`, and for a salted datom its value's commitment instead of its salt (the salt with
/// the hash and the other fields would let the reader test guesses of the value).
pub fn withhold(d: &mut pb::Datom, reason: String) {
    if let Some(value) = d.value.take()
        && let Ok(salt) = engram_types::Salt::try_from(d.salt.as_slice())
        && let Some(value) = value_to_domain_lossy(&value)
    {
        d.value_commitment = engram_types::value_commitment(&salt, &value).0.to_vec();
    }
    d.salt = Vec::new();
    d.redacted = reason;
}

/// The hash of a datom as a server sent it, recomputed from what was sent wherever it can be:
/// from the value (and salt), or, for a datom sent without its value, from its value's
/// commitment and every other field. Only a datom written before salts and sent without its
/// value leaves nothing to recompute: its `hash` is taken as sent (a proof still shows that
/// hash was recorded; its fields are not bound to it).
pub fn sent_datom_hash(raw: &pb::Datom) -> Result<Hash, WireError> {
    if raw.value.is_some() {
        return Ok(datom(raw.clone())?.hash());
    }
    if raw.value_commitment.is_empty() {
        return Hash::from_slice(&raw.hash)
            .ok_or_else(|| WireError::new("datom.hash", format!("{} bytes, expected 32", raw.hash.len())));
    }
    let commitment = Hash::from_slice(&raw.value_commitment).ok_or_else(|| {
        WireError::new(
            "datom.value_commitment",
            format!("{} bytes, expected 32", raw.value_commitment.len()),
        )
    })?;
    // Every field but the value, which the commitment stands for.
    let mut fields = raw.clone();
    fields.value = Some(pb::Value {
        kind: Some(pb::value::Kind::Bool(false)),
    });
    fields.salt = Vec::new();
    Ok(datom(fields)?.hash_with_commitment(&commitment))
}

impl From<&TxReceipt> for pb::TransactResponse {
    fn from(r: &TxReceipt) -> pb::TransactResponse {
        pb::TransactResponse {
            tx: r.tx.0,
            tx_time_ns: r.tx_time_ns,
            datom_hashes: r.datom_hashes.iter().map(|h| h.0.to_vec()).collect(),
            audit_index: r.audit_index,
            audit_hash: r.audit_hash.0.to_vec(),
            temp_ids: r.temp_ids.iter().map(|(k, v)| (k.clone(), v.0)).collect(),
        }
    }
}

/// A readable rendering of a wire value, for CLIs and logs.
pub fn value_to_domain_lossy(v: &pb::Value) -> Option<Value> {
    value("value", Some(v.clone())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> pb::TransactRequest {
        pb::TransactRequest {
            namespace: "team/a".into(),
            ops: vec![pb::TxOp {
                op: pb::Op::Assert as i32,
                entity: Some(pb::EntityRef {
                    kind: Some(pb::entity_ref::Kind::Temp("t".into())),
                }),
                attribute: ":task/title".into(),
                value: Some(pb::Value {
                    kind: Some(pb::value::Kind::Json(r#"{"b":1, "a":2}"#.into())),
                }),
                valid_from_ns: None,
                valid_to_ns: None,
            }],
            preconditions: vec![],
            idempotency_key: String::new(),
            provenance: Some(pb::Provenance {
                agent: "a1".into(),
                confidence: 0.5,
                ..Default::default()
            }),
            branch: String::new(),
            value_salts: Vec::new(),
        }
    }

    #[test]
    fn value_salts_are_one_per_op_then_per_precondition_or_none() {
        let mut req = good();
        assert_eq!(value_salts(&req), Ok(Vec::new()));
        req.value_salts = vec![vec![1; 16]];
        assert_eq!(value_salts(&req), Ok(vec![[1; 16]]));
        // The signed body is then the committed form, with no value in it.
        let body = crate::SignedBody::signed_body(&req, crate::methods::TRANSACT);
        assert_eq!(body[0], engram_types::TX_REQUEST_FORMAT_COMMITTED);
        assert!(!body.windows(5).any(|w| w == br#""b":1"#));
        let tx = TxRequest::try_from(req.clone()).unwrap();
        assert_eq!(body, tx.committed_bytes(&[[1; 16]]).unwrap());
        req.value_salts = vec![vec![1; 16], vec![2; 16]];
        let err = value_salts(&req).unwrap_err();
        assert_eq!(err.field, "value_salts");
        assert!(
            err.reason.contains("2 salts for 1 ops and 0 preconditions"),
            "{err}"
        );
        req.value_salts = vec![vec![1; 15]];
        let err = value_salts(&req).unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.reason.as_str()),
            ("value_salts[0]", "15 bytes; a salt is 16")
        );
        req.preconditions = vec![pb::Precondition {
            entity: 7,
            attribute: ":task/title".into(),
            expected: None,
        }];
        req.value_salts = vec![vec![1; 16], vec![2; 16]];
        assert_eq!(value_salts(&req).map(|s| s.len()), Ok(2));
    }

    #[test]
    fn a_valid_request_converts_and_round_trips() {
        let tx = TxRequest::try_from(good()).unwrap();
        assert_eq!(tx.ops[0].value, Value::Json(r#"{"a":2,"b":1}"#.into()));
        let back = TxRequest::try_from(pb::TransactRequest::from(&tx)).unwrap();
        assert_eq!(back, tx);
    }

    #[test]
    fn a_json_number_that_cannot_be_kept_exactly_is_refused_by_name() {
        let mut req = good();
        req.ops[0].value = Some(pb::Value {
            kind: Some(pb::value::Kind::Json(
                r#"{"n":123456789012345678901234567890}"#.into(),
            )),
        });
        let err = TxRequest::try_from(req).unwrap_err();
        assert_eq!(err.field, "ops[0].value");
        assert!(
            err.to_string().starts_with(
                "ops[0].value: invalid value for json: number 123456789012345678901234567890 cannot be stored exactly"
            ),
            "{err}"
        );
    }

    #[test]
    fn each_malformed_field_is_named() {
        type Mutate = Box<dyn Fn(&mut pb::TransactRequest)>;
        let cases: Vec<(&str, Mutate)> = vec![
            ("namespace", Box::new(|r| r.namespace = "../x".into())),
            ("namespace", Box::new(|r| r.namespace = "/abs".into())),
            (
                "ops[0].attribute",
                Box::new(|r| r.ops[0].attribute = "title".into()),
            ),
            ("ops[0].op", Box::new(|r| r.ops[0].op = 0)),
            ("ops[0].op", Box::new(|r| r.ops[0].op = 99)),
            ("ops[0].entity", Box::new(|r| r.ops[0].entity = None)),
            ("ops[0].value", Box::new(|r| r.ops[0].value = None)),
            (
                "ops[0].value",
                Box::new(|r| {
                    r.ops[0].value = Some(pb::Value {
                        kind: Some(pb::value::Kind::F64(f64::NAN)),
                    })
                }),
            ),
            (
                "ops[0].value",
                Box::new(|r| {
                    r.ops[0].value = Some(pb::Value {
                        kind: Some(pb::value::Kind::Json("{".into())),
                    })
                }),
            ),
            ("provenance", Box::new(|r| r.provenance = None)),
            (
                "provenance",
                Box::new(|r| r.provenance.as_mut().unwrap().confidence = 2.0),
            ),
            ("transaction", Box::new(|r| r.ops.clear())),
            ("branch", Box::new(|r| r.branch = "../main".into())),
            ("branch", Box::new(|r| r.branch = "main".into())),
            (
                "ops[0].entity.lookup.attribute",
                Box::new(|r| {
                    r.ops[0].entity = Some(pb::EntityRef {
                        kind: Some(pb::entity_ref::Kind::Lookup(pb::LookupRef {
                            attribute: "email".into(),
                            value: None,
                        })),
                    })
                }),
            ),
        ];
        for (field, mutate) in cases {
            let mut req = good();
            mutate(&mut req);
            let err = TxRequest::try_from(req).unwrap_err();
            assert!(err.field.starts_with(field), "expected {field}, got {err}");
        }
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    fn def() -> pb::AttributeDef {
        pb::AttributeDef {
            ident: ":memory/key".into(),
            value_type: "string".into(),
            cardinality: pb::Cardinality::One as i32,
            unique: pb::Uniqueness::Identity as i32,
            ..Default::default()
        }
    }

    fn request(defs: Vec<pb::AttributeDef>) -> pb::ApplySchemaRequest {
        pb::ApplySchemaRequest {
            namespace: "team/a".into(),
            attributes: defs,
            provenance: Some(pb::Provenance {
                agent: "admin".into(),
                confidence: 1.0,
                ..Default::default()
            }),
            idempotency_key: String::new(),
        }
    }

    #[test]
    fn definitions_round_trip_and_bad_ones_are_named() {
        let tx = schema_request(request(vec![def()])).unwrap();
        assert_eq!(tx.schema[0].unique, Some(Unique::Identity));
        assert_eq!(pb::AttributeDef::from(&tx.schema[0]), def());
        let cases: Vec<(&str, pb::AttributeDef)> = vec![
            (
                "attributes[0].value_type",
                pb::AttributeDef {
                    value_type: "text".into(),
                    ..def()
                },
            ),
            (
                "attributes[0].ident",
                pb::AttributeDef {
                    ident: "key".into(),
                    ..def()
                },
            ),
            (
                "attributes[0].cardinality",
                pb::AttributeDef {
                    cardinality: 7,
                    ..def()
                },
            ),
            (
                "attributes[0]",
                pb::AttributeDef {
                    ident: ":db/ident".into(),
                    ..def()
                },
            ),
            (
                "attributes[0]",
                pb::AttributeDef {
                    cardinality: pb::Cardinality::Many as i32,
                    ..def()
                },
            ),
        ];
        for (field, bad) in cases {
            let err = schema_request(request(vec![bad])).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        let err = schema_request(request(vec![])).unwrap_err();
        assert_eq!(err.field, "attributes");
    }

    #[test]
    fn branch_requests_need_a_valid_name() {
        let ok = create_branch_request(pb::CreateBranchRequest {
            namespace: "team/a".into(),
            name: "plan-a".into(),
            from_tx: Some(4),
            provenance: request(vec![]).provenance,
        })
        .unwrap();
        assert_eq!(
            ok.branch_op,
            Some(BranchOp::Create {
                name: BranchName::new("plan-a").unwrap(),
                from: Some(TxId(4))
            })
        );
        for bad in ["", "main", "a/b", ".."] {
            let err = create_branch_request(pb::CreateBranchRequest {
                namespace: "team/a".into(),
                name: bad.into(),
                from_tx: None,
                provenance: request(vec![]).provenance,
            })
            .unwrap_err();
            assert_eq!(err.field, "name", "{bad:?}: {err}");
        }
    }

    fn salted_datom() -> Datom {
        Datom {
            namespace: Namespace::new("team/a").unwrap(),
            branch: None,
            entity: EntityId(7),
            attribute: Attribute::new(":hr/pin").unwrap(),
            value: Value::String("4096".into()),
            op: Op::Assert,
            valid_from_ns: 5,
            valid_to_ns: None,
            tx: TxId(12),
            provenance: Provenance {
                agent: "hr".into(),
                confidence: 1.0,
                ..Provenance::default()
            },
            salt: Some(engram_types::salt_of(&[3; 32], 0)),
        }
    }

    #[test]
    fn a_salted_datom_round_trips_and_a_bad_salt_is_refused() {
        let d = salted_datom();
        let sent = pb::Datom::from(&d);
        assert_eq!(sent.salt.len(), engram_types::SALT_BYTES);
        assert_eq!(datom(sent.clone()).unwrap(), d);
        assert_eq!(sent_datom_hash(&sent).unwrap(), d.hash());
        let mut bad = sent;
        bad.salt.pop();
        let err = datom(bad).unwrap_err();
        assert_eq!(err.field, "datom.salt");
    }

    #[test]
    fn a_withheld_or_redacted_salted_datom_is_sent_with_its_commitment_and_no_salt() {
        let d = salted_datom();
        let mut withheld = pb::Datom::from(&d);
        withhold(&mut withheld, "no read grant".into());
        assert!(withheld.value.is_none() && withheld.salt.is_empty());
        assert_eq!(withheld.value_commitment.len(), 32);
        assert_eq!(
            sent_datom_hash(&withheld).unwrap(),
            d.hash(),
            "the hash is recomputed"
        );
        // A field changed on the way no longer gives the hash the proof is for.
        let mut forged = withheld.clone();
        forged.provenance.as_mut().unwrap().agent = "mallory".into();
        assert_ne!(sent_datom_hash(&forged).unwrap(), d.hash());

        let redacted = pb::Datom::from(&d.redact(TxId(40), 0));
        assert!(redacted.value.is_none() && redacted.salt.is_empty());
        assert_eq!(redacted.value_commitment, withheld.value_commitment);
        assert_eq!(sent_datom_hash(&redacted).unwrap(), d.hash());

        // A datom written before salts has no commitment: its hash is taken as sent.
        let mut old = d.clone();
        old.salt = None;
        let mut withheld_old = pb::Datom::from(&old);
        withhold(&mut withheld_old, "no read grant".into());
        assert!(withheld_old.value_commitment.is_empty());
        assert_eq!(sent_datom_hash(&withheld_old).unwrap(), old.hash());
    }
}
