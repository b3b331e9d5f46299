use serde::{Deserialize, Serialize};

use crate::codec::{Reader, Writer};
use crate::{
    Attribute, BranchName, DATOM_FORMAT_REDACTED, DATOM_FORMAT_VERSION, DATOM_FORMAT_VERSION_BRANCH,
    DecodeError, EntityId, Hash, Namespace, Redacted, TxId, ValidationError, Value, ValueType,
};

/// Whether a datom adds a fact or retracts an earlier one.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Op {
    Assert,
    Retract,
}

/// How much a fact is believed: agents record hypotheses as `Candidate` and promote them to
/// `Verified` with a new datom, never by rewriting the old one.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize)]
pub enum Status {
    #[default]
    Candidate,
    Verified,
}

/// Who said a fact, in what session, from which source, and how sure they were.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
pub struct Provenance {
    pub agent: String,
    pub session: String,
    pub source: String,
    /// In `[0, 1]`.
    pub confidence: f64,
    pub status: Status,
}

impl Provenance {
    pub const MAX_FIELD_BYTES: usize = 1024;

    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.agent.is_empty() {
            return Err(ValidationError::Value {
                field: "provenance.agent",
                reason: "must not be empty".into(),
            });
        }
        for (field, text) in [
            ("provenance.agent", &self.agent),
            ("provenance.session", &self.session),
            ("provenance.source", &self.source),
        ] {
            if text.len() > Self::MAX_FIELD_BYTES {
                return Err(ValidationError::Value {
                    field,
                    reason: "longer than 1024 bytes".into(),
                });
            }
            if text.chars().any(char::is_control) {
                return Err(ValidationError::Value {
                    field,
                    reason: "contains control characters".into(),
                });
            }
        }
        if !(0.0..=1.0).contains(&self.confidence) {
            return Err(ValidationError::Value {
                field: "provenance.confidence",
                reason: format!("{} is outside [0, 1]", self.confidence),
            });
        }
        Ok(())
    }
}

/// One immutable fact. See the crate docs for the model.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Datom {
    pub namespace: Namespace,
    /// The branch the datom was written on; `None`: main.
    pub branch: Option<BranchName>,
    pub entity: EntityId,
    pub attribute: Attribute,
    pub value: Value,
    pub op: Op,
    /// Start of the valid-time interval (when the fact holds in the world), ns since epoch.
    pub valid_from_ns: i64,
    /// Exclusive end of the valid-time interval; `None` is open-ended.
    pub valid_to_ns: Option<i64>,
    pub tx: TxId,
    pub provenance: Provenance,
}

pub(crate) fn op_tag(op: Op) -> u8 {
    match op {
        Op::Assert => 1,
        Op::Retract => 2,
    }
}

fn status_tag(status: Status) -> u8 {
    match status {
        Status::Candidate => 1,
        Status::Verified => 2,
    }
}

pub(crate) fn read_op(r: &mut Reader<'_>) -> Result<Op, DecodeError> {
    match r.u8("op")? {
        1 => Ok(Op::Assert),
        2 => Ok(Op::Retract),
        tag => Err(DecodeError::Tag { what: "op", tag }),
    }
}

pub(crate) fn write_provenance(w: &mut Writer, p: &Provenance) {
    w.str(&p.agent)
        .str(&p.session)
        .str(&p.source)
        .f64(p.confidence)
        .u8(status_tag(p.status));
}

pub(crate) fn read_provenance(r: &mut Reader<'_>) -> Result<Provenance, DecodeError> {
    Ok(Provenance {
        agent: r.string("provenance.agent")?,
        session: r.string("provenance.session")?,
        source: r.string("provenance.source")?,
        confidence: r.f64("provenance.confidence")?,
        status: read_status(r)?,
    })
}

fn read_status(r: &mut Reader<'_>) -> Result<Status, DecodeError> {
    match r.u8("provenance.status")? {
        1 => Ok(Status::Candidate),
        2 => Ok(Status::Verified),
        tag => Err(DecodeError::Tag { what: "status", tag }),
    }
}

/// Canonical encoding of a value: type tag, then the payload.
pub(crate) fn encode_value(w: &mut Writer, value: &Value) {
    w.u8(value.value_type().tag());
    match value {
        Value::String(s) | Value::Keyword(s) | Value::Json(s) => {
            w.str(s);
        }
        Value::I64(i) | Value::Instant(i) => {
            w.i64(*i);
        }
        Value::F64(x) => {
            w.f64(*x);
        }
        Value::Bool(b) => {
            w.u8(u8::from(*b));
        }
        Value::Bytes(b) => {
            w.bytes(b);
        }
        Value::Ref(e) => {
            w.u64(e.0);
        }
        Value::Vector(v) => {
            // Validated values have at most MAX_VECTOR_DIMENSION components.
            w.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
            for x in v {
                w.raw(&x.to_bits().to_be_bytes());
            }
        }
        Value::Redacted(r) => {
            // Never part of a hashed encoding (a redacted datom's hash is the kept one); this
            // keeps the stored form's marker apart from every value.
            w.u64(r.by_tx.0).u32(r.value_ordinal);
        }
    }
}

pub(crate) fn decode_value(r: &mut Reader<'_>) -> Result<Value, DecodeError> {
    let tag = r.u8("value type")?;
    let ty = ValueType::from_tag(tag).ok_or(DecodeError::Tag {
        what: "value type",
        tag,
    })?;
    let value = match ty {
        ValueType::String => Value::String(r.string("string value")?),
        ValueType::Keyword => Value::Keyword(r.string("keyword value")?),
        ValueType::Json => Value::Json(r.string("json value")?),
        ValueType::I64 => Value::I64(r.i64("i64 value")?),
        ValueType::Instant => Value::Instant(r.i64("instant value")?),
        ValueType::F64 => Value::F64(r.f64("f64 value")?),
        ValueType::Bool => match r.u8("bool value")? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            tag => {
                return Err(DecodeError::Tag {
                    what: "bool value",
                    tag,
                });
            }
        },
        ValueType::Bytes => Value::Bytes(r.bytes("bytes value")?.to_vec()),
        ValueType::Ref => Value::Ref(EntityId(r.u64("ref value")?)),
        ValueType::Vector => {
            let n = r.u32("vector length")? as usize;
            // The length is checked against what is left before anything is allocated.
            let bytes = r.take(n.saturating_mul(4), "vector components")?;
            Value::Vector(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_bits(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
            )
        }
    };
    value.validate()?;
    Ok(value)
}

impl Value {
    /// The canonical encoding of this value alone (used for value-keyed indexes).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let mut w = Writer::new();
        encode_value(&mut w, self);
        w.finish()
    }
}

impl Datom {
    /// The canonical, versioned encoding. This is both what is hashed and what is stored; a
    /// redacted datom encodes to its stored form ([`DATOM_FORMAT_REDACTED`]), which is not
    /// hashed.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(96);
        if let Value::Redacted(r) = &self.value {
            w.u8(DATOM_FORMAT_REDACTED).raw(&r.datom_hash.0);
            match &self.branch {
                None => w.u8(0).str(self.namespace.as_str()),
                Some(branch) => w.u8(1).str(self.namespace.as_str()).str(branch.as_str()),
            };
            w.u64(self.entity.0).str(self.attribute.as_str());
            w.u8(r.value_type.tag()).u64(r.by_tx.0).u32(r.value_ordinal);
            self.write_rest(&mut w);
            return w.finish();
        }
        match &self.branch {
            None => w.u8(DATOM_FORMAT_VERSION).str(self.namespace.as_str()),
            Some(branch) => w
                .u8(DATOM_FORMAT_VERSION_BRANCH)
                .str(self.namespace.as_str())
                .str(branch.as_str()),
        };
        w.u64(self.entity.0).str(self.attribute.as_str());
        encode_value(&mut w, &self.value);
        self.write_rest(&mut w);
        w.finish()
    }

    /// The fields after the value, in every format.
    fn write_rest(&self, w: &mut Writer) {
        w.u8(op_tag(self.op))
            .i64(self.valid_from_ns)
            .opt_i64(self.valid_to_ns)
            .u64(self.tx.0);
        write_provenance(w, &self.provenance);
    }

    /// This datom with its value replaced by the marker of redaction `by_tx` (`value_ordinal`:
    /// see [`Redacted`]). An already redacted datom is returned unchanged.
    pub fn redact(&self, by_tx: TxId, value_ordinal: u32) -> Datom {
        if self.value.redacted().is_some() {
            return self.clone();
        }
        Datom {
            value: Value::Redacted(Box::new(Redacted {
                value_type: self.value.value_type(),
                by_tx,
                value_ordinal,
                datom_hash: self.hash(),
            })),
            ..self.clone()
        }
    }

    /// Decodes and re-validates a canonical encoding. Refuses unknown versions, unknown tags,
    /// invalid fields and trailing bytes.
    pub fn decode(bytes: &[u8]) -> Result<Datom, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("format version")?;
        let kept_hash = match version {
            DATOM_FORMAT_VERSION | DATOM_FORMAT_VERSION_BRANCH => None,
            DATOM_FORMAT_REDACTED => Some(r.hash("kept datom hash")?),
            _ => return Err(DecodeError::Version(version)),
        };
        let has_branch = match kept_hash {
            None => version == DATOM_FORMAT_VERSION_BRANCH,
            Some(_) => match r.u8("branch flag")? {
                0 => false,
                1 => true,
                tag => {
                    return Err(DecodeError::Tag {
                        what: "branch flag",
                        tag,
                    });
                }
            },
        };
        let namespace = Namespace::new(r.string("namespace")?)?;
        let branch = if has_branch {
            Some(BranchName::new(r.string("branch")?)?)
        } else {
            None
        };
        let entity = EntityId(r.u64("entity")?);
        let attribute = Attribute::new(r.string("attribute")?)?;
        let value = match kept_hash {
            None => decode_value(&mut r)?,
            Some(datom_hash) => {
                let tag = r.u8("value type")?;
                let value_type = ValueType::from_tag(tag).ok_or(DecodeError::Tag {
                    what: "value type",
                    tag,
                })?;
                Value::Redacted(Box::new(Redacted {
                    value_type,
                    by_tx: TxId(r.u64("redacting tx")?),
                    value_ordinal: r.u32("redacted value ordinal")?,
                    datom_hash,
                }))
            }
        };
        let op = read_op(&mut r)?;
        let valid_from_ns = r.i64("valid_from")?;
        let valid_to_ns = r.opt_i64("valid_to")?;
        let tx = TxId(r.u64("tx")?);
        let provenance = read_provenance(&mut r)?;
        provenance.validate()?;
        r.finish()?;
        Ok(Datom {
            namespace,
            branch,
            entity,
            attribute,
            value,
            op,
            valid_from_ns,
            valid_to_ns,
            tx,
            provenance,
        })
    }

    /// The content address: blake3 of the canonical encoding (of a redacted datom: the hash
    /// kept from before its value went).
    pub fn hash(&self) -> Hash {
        match &self.value {
            Value::Redacted(r) => r.datom_hash,
            _ => Hash::of(&self.encode()),
        }
    }

    /// Whether the fact holds in the world at valid time `at_ns`.
    pub fn valid_at(&self, at_ns: i64) -> bool {
        self.valid_from_ns <= at_ns && self.valid_to_ns.is_none_or(|to| at_ns < to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Datom {
        Datom {
            namespace: Namespace::new("team/a").unwrap(),
            branch: None,
            entity: EntityId(7),
            attribute: Attribute::new(":task/status").unwrap(),
            value: Value::Keyword(":status/open".into()),
            op: Op::Assert,
            valid_from_ns: 1_700_000_000_000_000_000,
            valid_to_ns: None,
            tx: TxId(12),
            provenance: Provenance {
                agent: "planner".into(),
                session: "s1".into(),
                source: "chat:42".into(),
                confidence: 0.75,
                status: Status::Candidate,
            },
        }
    }

    #[test]
    fn encoding_round_trips_for_every_value_type() {
        let values = [
            Value::String("hello".into()),
            Value::I64(-5),
            Value::F64(3.25),
            Value::Bool(true),
            Value::Bytes(vec![0, 1, 255]),
            Value::Instant(-1),
            Value::Ref(EntityId(99)),
            Value::Keyword(":a/b".into()),
            Value::json(r#"{"k":[1,2]}"#).unwrap(),
        ];
        for value in values {
            let mut d = sample();
            d.value = value;
            d.valid_to_ns = Some(5);
            let bytes = d.encode();
            assert_eq!(Datom::decode(&bytes).unwrap(), d);
        }
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let d = sample();
        assert_eq!(d.hash(), sample().hash());
        // Pinned: a change here means the canonical format changed, which needs a new version.
        assert_eq!(d.encode().len(), 107);
        let mut other = sample();
        other.provenance.confidence = 0.76;
        assert_ne!(d.hash(), other.hash());
    }

    #[test]
    fn a_branch_datom_is_version_2_and_round_trips() {
        let mut d = sample();
        d.branch = Some(BranchName::new("plan-a").unwrap());
        let bytes = d.encode();
        assert_eq!(bytes[0], DATOM_FORMAT_VERSION_BRANCH);
        assert_eq!(Datom::decode(&bytes).unwrap(), d);
        assert_ne!(
            d.hash(),
            sample().hash(),
            "the branch is part of the content address"
        );
        for cut in 0..bytes.len() {
            assert!(Datom::decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn a_value_stays_as_small_as_a_string() {
        // The redaction marker is boxed so that every value, and so every datom, stays this size.
        assert!(std::mem::size_of::<Value>() <= std::mem::size_of::<String>() + 8);
    }

    #[test]
    fn a_redacted_datom_keeps_its_hash_and_every_field_but_the_value() {
        for branch in [None, Some(BranchName::new("plan-a").unwrap())] {
            let mut d = sample();
            d.branch = branch;
            let hash = d.hash();
            let redacted = d.redact(TxId(40), 2);
            assert_eq!(redacted.hash(), hash, "the kept hash is the datom's hash");
            let bytes = redacted.encode();
            assert_eq!(bytes[0], DATOM_FORMAT_REDACTED);
            let back = Datom::decode(&bytes).unwrap();
            assert_eq!(back, redacted);
            assert_eq!(back.hash(), hash);
            assert_eq!(back.value.value_type(), ValueType::Keyword);
            assert!(
                !bytes.windows(b":status/open".len()).any(|w| w == b":status/open"),
                "the value's bytes are gone"
            );
            assert_eq!(
                (back.entity, back.tx, &back.provenance),
                (d.entity, d.tx, &d.provenance)
            );
            assert_eq!(
                redacted.redact(TxId(41), 0),
                redacted,
                "redacting twice changes nothing"
            );
            for cut in 0..bytes.len() {
                assert!(Datom::decode(&bytes[..cut]).is_err());
            }
        }
        // Equal values of one redaction compare equal (a retraction still matches its
        // assertion); different values, or another redaction, do not.
        let a = sample().redact(TxId(40), 0);
        let mut b = sample();
        b.tx = TxId(13);
        assert_eq!(a.value, b.redact(TxId(40), 0).value);
        assert_ne!(a.value, b.redact(TxId(40), 1).value);
        assert_ne!(a.value, b.redact(TxId(41), 0).value);
        assert!(a.value.validate().is_err(), "no request writes a marker");
    }

    #[test]
    fn corrupt_bytes_are_errors_not_panics() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            assert!(Datom::decode(&bytes[..cut]).is_err());
        }
        let mut versioned = bytes.clone();
        versioned[0] = 9;
        assert_eq!(Datom::decode(&versioned), Err(DecodeError::Version(9)));
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(Datom::decode(&trailing), Err(DecodeError::Trailing(1)));
    }

    #[test]
    fn valid_time_interval_is_half_open() {
        let mut d = sample();
        d.valid_from_ns = 10;
        d.valid_to_ns = Some(20);
        assert!(!d.valid_at(9));
        assert!(d.valid_at(10));
        assert!(d.valid_at(19));
        assert!(!d.valid_at(20));
    }
}
