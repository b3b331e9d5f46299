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
//!
//! **Values committed to, not signed** (versions 3 and 4). A signature must still verify after
//! a redaction takes a value, and what it covers is kept (the audit entry records the hash of
//! the signed bytes); if those bytes held the value, that hash would let anyone test a guess
//! of a redacted value (an e-mail address, a PIN). So an agent that writes draws a salt per
//! op and signs the **committed form** (version 3), in which each op's value is its type and
//! `engram_types::value_commitment(salt, value)`; the datom takes the agent's salt, so its own
//! hash commits to the value the same way, and a redaction destroys the salt with the value.
//! The node keeps the **salted form** (version 4: the values, each followed by its salt) for
//! the export, from which a verifier rebuilds the committed form and checks its hash; a
//! redaction replaces it by a marker, as it does any request it took a value of. A
//! precondition's expected value (a compare-and-set guard names a value without writing it)
//! has a salt of its own and is held as its commitment in both forms, so no kept request ever
//! holds a value it only guarded; that salt is kept nowhere but the log entry, which the purge
//! removes. Both forms are the version 2 layout (declarations always carry version 2's
//! fields) apart from the values.

use crate::codec::{Reader, Writer};
use crate::datom::{decode_value, encode_value, op_tag, read_op, read_provenance, write_provenance};
use crate::{
    Attribute, AttributeDef, BranchName, BranchOp, Cardinality, DecodeError, EntityId, EntityRef, Hash,
    Namespace, Precondition, Salt, TxId, TxOp, TxRequest, Unique, ValueType, value_commitment,
};

/// Format version of [`TxRequest::signed_bytes`]: 1, or 2 when a declaration carries the
/// fields version 2 added (`searchable`, `dimension`, each written after `deprecated`). A
/// request that needs no version 2 field is written as version 1, so its bytes, and the
/// signatures over them, are what they always were.
pub const TX_REQUEST_FORMAT_VERSION: u8 = 1;
pub const TX_REQUEST_FORMAT_VERSION_2: u8 = 2;
/// The gRPC method of a transaction: the only request an agent signs in the committed form.
pub const TRANSACT_METHOD: &str = "/engram.v1.Memory/Transact";
/// The committed form an agent signs (see the module docs): never stored, rebuilt from the
/// salted form.
pub const TX_REQUEST_FORMAT_COMMITTED: u8 = 3;
/// The salted form a node keeps of a request whose values were committed to.
pub const TX_REQUEST_FORMAT_SALTED: u8 = 4;

/// How an encoding writes the ops' values and the preconditions' expected values.
#[derive(Clone, Copy)]
enum Form<'a> {
    /// The values themselves (versions 1 and 2).
    Plain,
    /// Every value as its type and its commitment under its salt (version 3): `salts` holds
    /// one per op, then one per precondition.
    Committed(&'a [Salt]),
    /// The ops' values each followed by its salt, the preconditions' as their commitments
    /// (version 4): `salts` as for `Committed`.
    Salted(&'a [Salt]),
    /// The committed form rebuilt from a kept salted form: the ops' values under `salts` (one
    /// per op), the preconditions as kept.
    Rebuilt(&'a [Salt], &'a [CommittedPrecondition]),
}

/// A precondition as the committed and salted forms hold it: its expected value's type and
/// commitment (`None`: the attribute must have no current value), never the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedPrecondition {
    pub entity: EntityId,
    pub attribute: Attribute,
    pub expected: Option<(ValueType, Hash)>,
}

/// What a node keeps of a signed request, decoded ([`TxRequest::decode_kept`]).
#[derive(Clone, Debug, PartialEq)]
pub struct KeptRequest {
    /// The request; in the salted form its preconditions are in `preconditions`, as
    /// commitments, and this list is empty.
    pub request: TxRequest,
    /// The ops' salts (the salted form), else empty.
    pub salts: Vec<Salt>,
    /// The salted form's preconditions, else empty.
    pub preconditions: Vec<CommittedPrecondition>,
}

/// Why salts cannot go with a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a request with {ops} ops and {preconditions} preconditions carries {salts} value salts: one per op, then one per precondition"
)]
pub struct SaltCount {
    pub ops: usize,
    pub preconditions: usize,
    pub salts: usize,
}

impl TxRequest {
    /// The canonical bytes of this request (see the module docs).
    pub fn signed_bytes(&self) -> Vec<u8> {
        self.encode(Form::Plain)
    }

    /// The committed form an agent signs when it commits to its values with `salts`: one per
    /// op, then one per precondition (version 3; see the module docs).
    pub fn committed_bytes(&self, salts: &[Salt]) -> Result<Vec<u8>, SaltCount> {
        self.salt_count(salts)?;
        Ok(self.encode(Form::Committed(salts)))
    }

    /// The salted form a node keeps of a request committed to with `salts` (version 4): the
    /// ops' values with their salts, the preconditions' expected values as commitments only.
    pub fn salted_bytes(&self, salts: &[Salt]) -> Result<Vec<u8>, SaltCount> {
        self.salt_count(salts)?;
        Ok(self.encode(Form::Salted(salts)))
    }

    fn salt_count(&self, salts: &[Salt]) -> Result<(), SaltCount> {
        if self.ops.is_empty() || salts.len() != self.ops.len() + self.preconditions.len() {
            return Err(SaltCount {
                ops: self.ops.len(),
                preconditions: self.preconditions.len(),
                salts: salts.len(),
            });
        }
        Ok(())
    }

    fn encode(&self, form: Form<'_>) -> Vec<u8> {
        let mut w = Writer::with_capacity(64 + 64 * self.ops.len());
        let v2 = !matches!(form, Form::Plain) || self.schema.iter().any(|d| d.searchable || d.dimension != 0);
        let version = match form {
            Form::Plain if v2 => TX_REQUEST_FORMAT_VERSION_2,
            Form::Plain => TX_REQUEST_FORMAT_VERSION,
            Form::Committed(_) | Form::Rebuilt(..) => TX_REQUEST_FORMAT_COMMITTED,
            Form::Salted(_) => TX_REQUEST_FORMAT_SALTED,
        };
        // The salt counts were checked against the request by the callers.
        let salt = |k: usize| match form {
            Form::Committed(salts) | Form::Salted(salts) | Form::Rebuilt(salts, _) => {
                salts.get(k).copied().unwrap_or_default()
            }
            Form::Plain => Salt::default(),
        };
        w.u8(version).str(self.namespace.as_str());
        opt(&mut w, self.branch.as_ref(), |w, b| {
            w.str(b.as_str());
        });
        w.u32(count(self.ops.len()));
        for (k, op) in self.ops.iter().enumerate() {
            w.u8(op_tag(op.op));
            write_entity(&mut w, &op.entity);
            w.str(op.attribute.as_str());
            match form {
                Form::Plain => {
                    encode_value(&mut w, &op.value);
                }
                Form::Committed(_) | Form::Rebuilt(..) => {
                    write_commitment(
                        &mut w,
                        op.value.value_type(),
                        &value_commitment(&salt(k), &op.value),
                    );
                }
                Form::Salted(_) => {
                    encode_value(&mut w, &op.value);
                    w.raw(&salt(k));
                }
            }
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
        match form {
            Form::Plain => {
                w.u32(count(self.preconditions.len()));
                for p in &self.preconditions {
                    w.u64(p.entity.0).str(p.attribute.as_str());
                    opt(&mut w, p.expected.as_ref(), encode_value);
                }
            }
            Form::Committed(_) | Form::Salted(_) => {
                w.u32(count(self.preconditions.len()));
                for (j, p) in self.preconditions.iter().enumerate() {
                    w.u64(p.entity.0).str(p.attribute.as_str());
                    opt(&mut w, p.expected.as_ref(), |w, v| {
                        write_commitment(w, v.value_type(), &value_commitment(&salt(self.ops.len() + j), v));
                    });
                }
            }
            Form::Rebuilt(_, kept) => {
                w.u32(count(kept.len()));
                for p in kept {
                    w.u64(p.entity.0).str(p.attribute.as_str());
                    opt(&mut w, p.expected.as_ref(), |w, (ty, c)| {
                        write_commitment(w, *ty, c)
                    });
                }
            }
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
        match bytes.first() {
            Some(&TX_REQUEST_FORMAT_SALTED) => Err(DecodeError::Version(TX_REQUEST_FORMAT_SALTED)),
            _ => Self::decode_kept(bytes).map(|kept| kept.request),
        }
    }

    /// Decodes what a node keeps of a signed request: its signed bytes (versions 1 and 2, no
    /// salts), or the salted form of one whose values were committed to (version 4, with the
    /// ops' salts and the preconditions' commitments). Refuses the committed form (version 3),
    /// which holds no values, unknown versions and tags, invalid fields and trailing bytes.
    pub fn decode_kept(bytes: &[u8]) -> Result<KeptRequest, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("request format version")?;
        if ![
            TX_REQUEST_FORMAT_VERSION,
            TX_REQUEST_FORMAT_VERSION_2,
            TX_REQUEST_FORMAT_SALTED,
        ]
        .contains(&version)
        {
            return Err(DecodeError::Version(version));
        }
        let salted = version == TX_REQUEST_FORMAT_SALTED;
        let v2 = version != TX_REQUEST_FORMAT_VERSION;
        let namespace = Namespace::new(r.string("namespace")?)?;
        let branch = read_opt(&mut r, "branch", |r| Ok(BranchName::new(r.string("branch")?)?))?;
        let mut salts = Vec::new();
        let ops = read_list(&mut r, "ops", TxRequest::MAX_OPS, |r| {
            let (op, entity, attribute, value) = (
                read_op(r)?,
                read_entity(r)?,
                Attribute::new(r.string("op attribute")?)?,
                decode_value(r)?,
            );
            if salted {
                let mut salt = Salt::default();
                salt.copy_from_slice(r.take(crate::SALT_BYTES, "op salt")?);
                salts.push(salt);
            }
            Ok(TxOp {
                op,
                entity,
                attribute,
                value,
                valid_from_ns: r.opt_i64("valid_from")?,
                valid_to_ns: r.opt_i64("valid_to")?,
            })
        })?;
        if salted && ops.is_empty() {
            return Err(DecodeError::Malformed("a salted request with no ops"));
        }
        let schema = read_list(&mut r, "schema", TxRequest::MAX_SCHEMA_DEFS, |r| read_def(r, v2))?;
        if version == TX_REQUEST_FORMAT_VERSION_2 && !schema.iter().any(|d| d.searchable || d.dimension != 0)
        {
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
        let (mut preconditions, mut committed) = (Vec::new(), Vec::new());
        read_list(&mut r, "preconditions", TxRequest::MAX_OPS, |r| {
            let (entity, attribute) = (
                EntityId(r.u64("precondition entity")?),
                Attribute::new(r.string("precondition attribute")?)?,
            );
            if salted {
                let expected = read_opt(r, "precondition commitment", read_commitment)?;
                committed.push(CommittedPrecondition {
                    entity,
                    attribute,
                    expected,
                });
            } else {
                let expected = read_opt(r, "precondition value", decode_value)?;
                preconditions.push(Precondition {
                    entity,
                    attribute,
                    expected,
                });
            }
            Ok(())
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
        Ok(KeptRequest {
            request: req,
            salts,
            preconditions: committed,
        })
    }

    /// The hash an agent's signature covers, from what a node keeps of a request it signed
    /// for gRPC method `method`: the kept bytes' own hash, or, for a transaction
    /// ([`TRANSACT_METHOD`]) kept in the salted form, the hash of the committed form it makes.
    /// (A node keeps other signed requests, redactions and policy changes, as they were signed;
    /// their bytes may start with any byte.)
    pub fn signed_hash_of_kept(method: &str, bytes: &[u8]) -> Result<Hash, DecodeError> {
        if method != TRANSACT_METHOD || bytes.first() != Some(&TX_REQUEST_FORMAT_SALTED) {
            return Ok(Hash::of(bytes));
        }
        let kept = Self::decode_kept(bytes)?;
        Ok(Hash::of(
            &kept
                .request
                .encode(Form::Rebuilt(&kept.salts, &kept.preconditions)),
        ))
    }
}

/// A value as the committed forms hold it: its type's tag and its commitment.
fn write_commitment(w: &mut Writer, ty: ValueType, commitment: &Hash) {
    w.u8(ty.tag()).raw(commitment.as_bytes());
}

fn read_commitment(r: &mut Reader<'_>) -> Result<(ValueType, Hash), DecodeError> {
    let tag = r.u8("committed value type")?;
    let ty = ValueType::from_tag(tag).ok_or(DecodeError::Tag {
        what: "committed value type",
        tag,
    })?;
    let bytes = r.take(32, "value commitment")?;
    let commitment = Hash::from_slice(bytes).ok_or(DecodeError::Truncated("value commitment"))?;
    Ok((ty, commitment))
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

    fn salts(n: usize) -> Vec<Salt> {
        (0..n).map(|k| [u8::try_from(k + 1).unwrap(); 16]).collect()
    }

    #[test]
    fn a_committed_request_signs_commitments_and_keeps_values_with_their_salts() {
        let mut req = data();
        req.preconditions[0].expected = Some(Value::String("guarded-secret".into()));
        // One salt per op (3), then one per precondition (2).
        let s = salts(5);
        let committed = req.committed_bytes(&s).unwrap();
        let kept = req.salted_bytes(&s).unwrap();
        assert_eq!(committed[0], TX_REQUEST_FORMAT_COMMITTED);
        assert_eq!(kept[0], TX_REQUEST_FORMAT_SALTED);
        // The signed form holds no value: the string and the bytes are nowhere in it, their
        // commitments are; the kept form holds the ops' values, never a guarded one.
        let holds = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
        assert!(!holds(&committed, b"hello"));
        assert!(!holds(&committed, &[0, 0, 0, 3, 0, 1, 2]));
        assert!(holds(
            &committed,
            value_commitment(&s[0], &req.ops[0].value).as_bytes()
        ));
        assert!(holds(&kept, b"hello"));
        for form in [&committed, &kept] {
            assert!(!holds(form, b"guarded-secret"));
            assert!(holds(
                form,
                value_commitment(&s[3], &Value::String("guarded-secret".into())).as_bytes()
            ));
            // A precondition's salt is in neither form.
            assert!(!holds(form, &s[3]));
        }
        // The kept form gives back the request (its guards as commitments) and the ops'
        // salts, and the hash the agent signed.
        let back = TxRequest::decode_kept(&kept).unwrap();
        assert_eq!(back.request.ops, req.ops);
        assert!(back.request.preconditions.is_empty());
        assert_eq!(back.salts, s[..3].to_vec());
        assert_eq!(
            back.preconditions,
            vec![
                CommittedPrecondition {
                    entity: EntityId(42),
                    attribute: attr(":memory/score"),
                    expected: Some((
                        ValueType::String,
                        value_commitment(&s[3], &Value::String("guarded-secret".into()))
                    )),
                },
                CommittedPrecondition {
                    entity: EntityId(7),
                    attribute: attr(":memory/x"),
                    expected: None,
                },
            ]
        );
        assert_eq!(
            TxRequest::signed_hash_of_kept(TRANSACT_METHOD, &kept).unwrap(),
            Hash::of(&committed)
        );
        // Another method's kept bytes are hashed as they are, whatever their first byte.
        assert_eq!(
            TxRequest::signed_hash_of_kept("/engram.v1.Access/Grant", &kept).unwrap(),
            Hash::of(&kept)
        );
        // Older forms are kept as signed: their hash is their own, and they carry no salts.
        let plain = req.signed_bytes();
        assert_eq!(
            TxRequest::signed_hash_of_kept(TRANSACT_METHOD, &plain).unwrap(),
            Hash::of(&plain)
        );
        let back = TxRequest::decode_kept(&plain).unwrap();
        assert_eq!((back.request, back.salts.len()), (req.clone(), 0));
        // Another salt or another value makes another signed form.
        for k in [2, 3] {
            let mut other = s.clone();
            other[k][0] ^= 1;
            assert_ne!(req.committed_bytes(&other).unwrap(), committed);
        }
        let mut changed = req.clone();
        changed.ops[0].value = Value::String("hellp".into());
        assert_ne!(changed.committed_bytes(&s).unwrap(), committed);
        let mut guarded = req.clone();
        guarded.preconditions[0].expected = Some(Value::String("guarded-secreT".into()));
        assert_ne!(guarded.committed_bytes(&s).unwrap(), committed);
        // A salt per op and per precondition, no more and no fewer.
        assert_eq!(
            req.committed_bytes(&s[..3]),
            Err(SaltCount {
                ops: 3,
                preconditions: 2,
                salts: 3
            })
        );
        assert!(req.salted_bytes(&salts(6)).is_err());
        // The committed form holds no values, so nothing decodes it; the salted form is not
        // a request's signed bytes; a cut salt is refused.
        assert_eq!(
            TxRequest::decode_kept(&committed).map(|_| ()),
            Err(DecodeError::Version(3))
        );
        assert_eq!(TxRequest::decode_signed(&kept), Err(DecodeError::Version(4)));
        assert!(matches!(
            TxRequest::decode_kept(&kept[..kept.len() - 1]),
            Err(DecodeError::Truncated(_))
        ));
        let schema_only = {
            let mut r = TxRequest::data(Namespace::new("team/a").unwrap(), vec![], provenance());
            r.schema = vec![AttributeDef::new(attr(":doc/title"), ValueType::String)];
            r
        };
        assert!(schema_only.committed_bytes(&[]).is_err());
    }
}
