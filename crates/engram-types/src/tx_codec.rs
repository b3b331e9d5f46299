//! The canonical encoding of a transaction request: what an agent signs when it writes.
//!
//! A signature over the wire message (protobuf) would bind bytes that only a protobuf decoder
//! can read back. An agent instead signs this encoding of the validated request — what the
//! state machine executes — so an offline verifier, which knows no protobuf, can decode what
//! was signed and hold it against the datoms the transaction produced. The encoding is
//! versioned like the datom encoding: a version is never changed, only added.
//!
//! ```text
//! request = version:u8 namespace:str opt(branch:str) ops schema branch_op preconditions
//!           opt(idempotency_key:str) provenance
//! ```
//! Lists are a u32 count then the items; `opt(x)` is a 0 byte, or a 1 byte and `x`; values use
//! the datom encoding's value form.

use crate::codec::{Reader, Writer};
use crate::datom::{decode_value, encode_value, op_tag, read_op, read_provenance, write_provenance};
use crate::{
    Attribute, AttributeDef, BranchName, BranchOp, Cardinality, DecodeError, EntityId, EntityRef, Namespace,
    Precondition, TxId, TxOp, TxRequest, Unique, ValueType,
};

/// Format version of [`TxRequest::signed_bytes`]: 1, or 2 when a declaration carries the
/// fields version 2 added (`searchable`, `dimension`, each written after `deprecated`). A
/// request that needs no version 2 field is written as version 1, so its bytes, and the
/// signatures over them, are what they always were.
pub const TX_REQUEST_FORMAT_VERSION: u8 = 1;
pub const TX_REQUEST_FORMAT_VERSION_2: u8 = 2;

impl TxRequest {
    /// The canonical bytes of this request (see the module docs).
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(64 + 64 * self.ops.len());
        let v2 = self.schema.iter().any(|d| d.searchable || d.dimension != 0);
        let version = if v2 {
            TX_REQUEST_FORMAT_VERSION_2
        } else {
            TX_REQUEST_FORMAT_VERSION
        };
        w.u8(version).str(self.namespace.as_str());
        opt(&mut w, self.branch.as_ref(), |w, b| {
            w.str(b.as_str());
        });
        w.u32(count(self.ops.len()));
        for op in &self.ops {
            w.u8(op_tag(op.op));
            write_entity(&mut w, &op.entity);
            w.str(op.attribute.as_str());
            encode_value(&mut w, &op.value);
            w.opt_i64(op.valid_from_ns).opt_i64(op.valid_to_ns);
        }
        w.u32(count(self.schema.len()));
        for def in &self.schema {
            w.str(def.ident.as_str())
                .u8(def.value_type.tag())
                .u8(match def.cardinality {
                    Cardinality::One => 1,
                    Cardinality::Many => 2,
                })
                .u8(match def.unique {
                    None => 0,
                    Some(Unique::Identity) => 1,
                    Some(Unique::Value) => 2,
                })
                .u8(u8::from(def.indexed))
                .u8(u8::from(def.component))
                .str(&def.doc)
                .u8(u8::from(def.deprecated));
            if v2 {
                w.u8(u8::from(def.searchable)).u32(def.dimension);
            }
        }
        opt(&mut w, self.branch_op.as_ref(), |w, op| match op {
            BranchOp::Create { name, from } => {
                w.u8(1).str(name.as_str());
                opt(w, from.as_ref(), |w, tx| {
                    w.u64(tx.0);
                });
            }
            BranchOp::Merge { name } => {
                w.u8(2).str(name.as_str());
            }
            BranchOp::Abandon { name } => {
                w.u8(3).str(name.as_str());
            }
        });
        w.u32(count(self.preconditions.len()));
        for p in &self.preconditions {
            w.u64(p.entity.0).str(p.attribute.as_str());
            opt(&mut w, p.expected.as_ref(), encode_value);
        }
        opt(&mut w, self.idempotency_key.as_ref(), |w, k| {
            w.str(k);
        });
        write_provenance(&mut w, &self.provenance);
        w.finish()
    }

    /// Decodes [`TxRequest::signed_bytes`] and re-validates the request. Refuses unknown
    /// versions and tags, invalid fields and trailing bytes.
    pub fn decode_signed(bytes: &[u8]) -> Result<TxRequest, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("request format version")?;
        if version != TX_REQUEST_FORMAT_VERSION && version != TX_REQUEST_FORMAT_VERSION_2 {
            return Err(DecodeError::Version(version));
        }
        let v2 = version == TX_REQUEST_FORMAT_VERSION_2;
        let namespace = Namespace::new(r.string("namespace")?)?;
        let branch = read_opt(&mut r, "branch", |r| Ok(BranchName::new(r.string("branch")?)?))?;
        let ops = read_list(&mut r, "ops", TxRequest::MAX_OPS, |r| {
            Ok(TxOp {
                op: read_op(r)?,
                entity: read_entity(r)?,
                attribute: Attribute::new(r.string("op attribute")?)?,
                value: decode_value(r)?,
                valid_from_ns: r.opt_i64("valid_from")?,
                valid_to_ns: r.opt_i64("valid_to")?,
            })
        })?;
        let schema = read_list(&mut r, "schema", TxRequest::MAX_SCHEMA_DEFS, |r| read_def(r, v2))?;
        if v2 && !schema.iter().any(|d| d.searchable || d.dimension != 0) {
            // One encoding per request: this one is written as version 1.
            return Err(DecodeError::Version(version));
        }
        let branch_op = read_opt(&mut r, "branch op", |r| {
            let tag = r.u8("branch op")?;
            let name = BranchName::new(r.string("branch name")?)?;
            Ok(match tag {
                1 => BranchOp::Create {
                    name,
                    from: read_opt(r, "branch fork", |r| Ok(TxId(r.u64("branch fork")?)))?,
                },
                2 => BranchOp::Merge { name },
                3 => BranchOp::Abandon { name },
                tag => {
                    return Err(DecodeError::Tag {
                        what: "branch op",
                        tag,
                    });
                }
            })
        })?;
        let preconditions = read_list(&mut r, "preconditions", TxRequest::MAX_OPS, |r| {
            Ok(Precondition {
                entity: EntityId(r.u64("precondition entity")?),
                attribute: Attribute::new(r.string("precondition attribute")?)?,
                expected: read_opt(r, "precondition value", decode_value)?,
            })
        })?;
        let idempotency_key = read_opt(&mut r, "idempotency key", |r| r.string("idempotency key"))?;
        let provenance = read_provenance(&mut r)?;
        r.finish()?;
        let req = TxRequest {
            namespace,
            branch,
            ops,
            schema,
            branch_op,
            preconditions,
            idempotency_key,
            provenance,
        };
        req.validate()?;
        Ok(req)
    }
}

fn count(n: usize) -> u32 {
    // Every list is bounded by TxRequest's limits, far below u32::MAX.
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn opt<T>(w: &mut Writer, value: Option<&T>, write: impl FnOnce(&mut Writer, &T)) {
    match value {
        None => {
            w.u8(0);
        }
        Some(v) => {
            w.u8(1);
            write(w, v);
        }
    }
}

fn read_opt<'a, T>(
    r: &mut Reader<'a>,
    what: &'static str,
    read: impl FnOnce(&mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    match r.u8(what)? {
        0 => Ok(None),
        1 => read(r).map(Some),
        tag => Err(DecodeError::Tag { what, tag }),
    }
}

/// A list of at most `max` items: a longer count is refused before anything is allocated.
fn read_list<'a, T>(
    r: &mut Reader<'a>,
    what: &'static str,
    max: usize,
    mut read: impl FnMut(&mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    let n = r.u32(what)? as usize;
    if n > max {
        return Err(DecodeError::Invalid(crate::ValidationError::Transaction(
            format!("{n} {what} exceed the limit of {max}"),
        )));
    }
    (0..n).map(|_| read(r)).collect()
}

fn write_entity(w: &mut Writer, entity: &EntityRef) {
    match entity {
        EntityRef::Id(e) => {
            w.u8(1).u64(e.0);
        }
        EntityRef::Temp(name) => {
            w.u8(2).str(name);
        }
        EntityRef::Lookup(attribute, value) => {
            w.u8(3).str(attribute.as_str());
            encode_value(w, value);
        }
    }
}

fn read_entity(r: &mut Reader<'_>) -> Result<EntityRef, DecodeError> {
    Ok(match r.u8("op entity")? {
        1 => EntityRef::Id(EntityId(r.u64("op entity id")?)),
        2 => EntityRef::Temp(r.string("op temporary id")?),
        3 => EntityRef::Lookup(Attribute::new(r.string("lookup attribute")?)?, decode_value(r)?),
        tag => {
            return Err(DecodeError::Tag {
                what: "op entity",
                tag,
            });
        }
    })
}

fn read_def(r: &mut Reader<'_>, v2: bool) -> Result<AttributeDef, DecodeError> {
    let ident = Attribute::new(r.string("schema ident")?)?;
    let tag = r.u8("schema value type")?;
    let value_type = ValueType::from_tag(tag).ok_or(DecodeError::Tag {
        what: "schema value type",
        tag,
    })?;
    let cardinality = match r.u8("schema cardinality")? {
        1 => Cardinality::One,
        2 => Cardinality::Many,
        tag => {
            return Err(DecodeError::Tag {
                what: "schema cardinality",
                tag,
            });
        }
    };
    let unique = match r.u8("schema unique")? {
        0 => None,
        1 => Some(Unique::Identity),
        2 => Some(Unique::Value),
        tag => {
            return Err(DecodeError::Tag {
                what: "schema unique",
                tag,
            });
        }
    };
    let flag = |r: &mut Reader<'_>, what| match r.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        tag => Err(DecodeError::Tag { what, tag }),
    };
    let mut def = AttributeDef {
        ident,
        value_type,
        cardinality,
        unique,
        indexed: flag(r, "schema indexed")?,
        component: flag(r, "schema component")?,
        doc: r.string("schema doc")?,
        deprecated: flag(r, "schema deprecated")?,
        searchable: false,
        dimension: 0,
    };
    if v2 {
        def.searchable = flag(r, "schema searchable")?;
        def.dimension = r.u32("schema dimension")?;
    }
    Ok(def)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Op, Provenance, Status, Value};

    fn attr(name: &str) -> Attribute {
        Attribute::new(name).unwrap()
    }

    fn provenance() -> Provenance {
        Provenance {
            agent: "alice".into(),
            session: "s1".into(),
            source: "notes".into(),
            confidence: 0.75,
            status: Status::Verified,
        }
    }

    fn data() -> TxRequest {
        let mut req = TxRequest::data(
            Namespace::new("team/a").unwrap(),
            vec![
                TxOp {
                    op: Op::Assert,
                    entity: EntityRef::Temp("t".into()),
                    attribute: attr(":memory/content"),
                    value: Value::String("hello".into()),
                    valid_from_ns: Some(-5),
                    valid_to_ns: None,
                },
                TxOp {
                    op: Op::Retract,
                    entity: EntityRef::Id(EntityId(42)),
                    attribute: attr(":memory/score"),
                    value: Value::F64(0.5),
                    valid_from_ns: None,
                    valid_to_ns: Some(9),
                },
                TxOp {
                    op: Op::Assert,
                    entity: EntityRef::Lookup(attr(":user/email"), Value::String("a@b".into())),
                    attribute: attr(":user/blob"),
                    value: Value::Bytes(vec![0, 1, 2]),
                    valid_from_ns: None,
                    valid_to_ns: None,
                },
            ],
            provenance(),
        );
        req.branch = Some(BranchName::new("try").unwrap());
        req.preconditions = vec![
            Precondition {
                entity: EntityId(42),
                attribute: attr(":memory/score"),
                expected: Some(Value::F64(0.5)),
            },
            Precondition {
                entity: EntityId(7),
                attribute: attr(":memory/x"),
                expected: None,
            },
        ];
        req.idempotency_key = Some("key-1".into());
        req
    }

    #[test]
    fn every_kind_of_request_round_trips() {
        let mut schema = TxRequest::data(Namespace::new("team/a").unwrap(), vec![], provenance());
        let mut def = AttributeDef::new(attr(":user/email"), ValueType::String);
        def.unique = Some(Unique::Identity);
        def.doc = "the address".into();
        def.deprecated = true;
        let mut many = AttributeDef::new(attr(":user/tags"), ValueType::Keyword);
        many.cardinality = Cardinality::Many;
        many.indexed = true;
        schema.schema = vec![def, many];
        let mut fork = TxRequest::data(Namespace::new("team/a").unwrap(), vec![], provenance());
        fork.branch_op = Some(BranchOp::Create {
            name: BranchName::new("b").unwrap(),
            from: Some(TxId(3)),
        });
        let mut merge = fork.clone();
        merge.branch_op = Some(BranchOp::Merge {
            name: BranchName::new("b").unwrap(),
        });
        let mut recall = TxRequest::data(Namespace::new("team/a").unwrap(), vec![], provenance());
        let mut text = AttributeDef::new(attr(":doc/text"), ValueType::String);
        text.searchable = true;
        recall.schema = vec![text, AttributeDef::vector(attr(":doc/embedding"), 384)];
        let mut with_vector = data();
        with_vector.ops[0].value = Value::Vector(vec![0.25, -1.5, 3.0]);
        for (req, version) in [
            (data(), 1),
            (schema, 1),
            (fork, 1),
            (merge, 1),
            (recall, 2),
            (with_vector, 1),
        ] {
            let bytes = req.signed_bytes();
            assert_eq!(bytes[0], version, "{req:?}");
            assert_eq!(TxRequest::decode_signed(&bytes).unwrap(), req);
            // One request, one encoding.
            assert_eq!(req.clone().signed_bytes(), bytes);
        }
    }

    #[test]
    fn any_change_changes_the_bytes_and_damage_is_refused() {
        let base = data().signed_bytes();
        let mut other = data();
        other.ops[1].valid_to_ns = Some(10);
        assert_ne!(other.signed_bytes(), base);
        let mut other = data();
        other.provenance.agent = "bob".into();
        assert_ne!(other.signed_bytes(), base);

        assert!(matches!(
            TxRequest::decode_signed(&base[..base.len() - 1]),
            Err(DecodeError::Truncated(_))
        ));
        let mut trailing = base.clone();
        trailing.push(0);
        assert!(matches!(
            TxRequest::decode_signed(&trailing),
            Err(DecodeError::Trailing(1))
        ));
        let mut version = base;
        version[0] = 9;
        assert!(matches!(
            TxRequest::decode_signed(&version),
            Err(DecodeError::Version(9))
        ));
        // A version 2 request with nothing version 2 needs is written as version 1 only.
        let mut as_v2 = data().signed_bytes();
        as_v2[0] = TX_REQUEST_FORMAT_VERSION_2;
        assert!(matches!(
            TxRequest::decode_signed(&as_v2),
            Err(DecodeError::Version(2))
        ));
        // Well-formed bytes of an invalid request (no ops, schema or branch op) are refused.
        let empty = TxRequest::data(Namespace::new("team/a").unwrap(), vec![], provenance());
        assert!(matches!(
            TxRequest::decode_signed(&empty.signed_bytes()),
            Err(DecodeError::Invalid(_))
        ));
    }
}
