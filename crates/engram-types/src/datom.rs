use serde::{Deserialize, Serialize};

use crate::codec::{Reader, Writer};
use crate::{
    Attribute, BranchName, DATOM_FORMAT_REDACTED, DATOM_FORMAT_SALTED, DATOM_FORMAT_SALTED_BRANCH,
    DATOM_FORMAT_VERSION, DATOM_FORMAT_VERSION_BRANCH, DecodeError, EntityId, Hash, Namespace, Redacted,
    SALT_BYTES, Salt, TxId, ValidationError, Value, ValueType,
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
    /// The salt its value is committed to with ([`DATOM_FORMAT_SALTED`]); `None`: a datom
    /// written before salts, or one whose salt went with its redacted value.
    #[serde(default)]
    pub salt: Option<Salt>,
}

/// The salt of the `ordinal`-th datom a log entry makes, from the seed the leader chose for
/// the entry at random and carried in it: every replica derives the same salts, and a salt
/// tells nothing of the seed or of any other datom's salt (blake3 in keyed mode is a PRF).
pub fn salt_of(seed: &[u8; 32], ordinal: u32) -> Salt {
    let mut input = [0u8; 24];
    input[..20].copy_from_slice(b"engram/datom-salt/v1");
    input[20..].copy_from_slice(&ordinal.to_be_bytes());
    let mut salt = [0u8; SALT_BYTES];
    salt.copy_from_slice(&blake3::keyed_hash(seed, &input).as_bytes()[..SALT_BYTES]);
    salt
}

/// What a salted datom's hash holds in place of its value: blake3 of a domain tag, the salt
/// and the value's canonical encoding. With the salt destroyed, a guess of the value cannot be
/// tested against it.
pub fn value_commitment(salt: &Salt, value: &Value) -> Hash {
    let mut w = Writer::with_capacity(64);
    w.raw(b"engram/value/v1\0").raw(salt);
    encode_value(&mut w, value);
    Hash::of(&w.finish())
}

/// The flag bits of a redacted datom's stored form.
const REDACTED_ON_BRANCH: u8 = 1;
const REDACTED_WAS_SALTED: u8 = 2;

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
    /// The canonical, versioned encoding: what is stored, and for an unsalted datom (formats
    /// 1 and 2) also what is hashed. A salted datom (formats 4 and 5) stores its salt and value
    /// here but hashes their commitment ([`Datom::hash`]); a redacted datom encodes to its
    /// stored form ([`DATOM_FORMAT_REDACTED`]), which is never hashed.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(96);
        if let Value::Redacted(r) = &self.value {
            // A salted datom keeps its value's commitment, from which its hash is recomputed
            // with every other field; an unsalted one can keep only its hash.
            w.u8(DATOM_FORMAT_REDACTED);
            match &r.commitment {
                Some(c) => w.raw(&c.0),
                None => w.raw(&r.datom_hash.0),
            };
            let salted = if r.commitment.is_some() {
                REDACTED_WAS_SALTED
            } else {
                0
            };
            match &self.branch {
                None => w.u8(salted).str(self.namespace.as_str()),
                Some(branch) => w
                    .u8(salted | REDACTED_ON_BRANCH)
                    .str(self.namespace.as_str())
                    .str(branch.as_str()),
            };
            w.u64(self.entity.0).str(self.attribute.as_str());
            w.u8(r.value_type.tag()).u64(r.by_tx.0).u32(r.value_ordinal);
            self.write_rest(&mut w);
            return w.finish();
        }
        self.write_head(&mut w, self.salt.is_some());
        if let Some(salt) = &self.salt {
            w.raw(salt);
        }
        encode_value(&mut w, &self.value);
        self.write_rest(&mut w);
        w.finish()
    }

    /// The version byte, namespace, branch, entity and attribute: the fields before the value.
    fn write_head(&self, w: &mut Writer, salted: bool) {
        let version = match (&self.branch, salted) {
            (None, false) => DATOM_FORMAT_VERSION,
            (Some(_), false) => DATOM_FORMAT_VERSION_BRANCH,
            (None, true) => DATOM_FORMAT_SALTED,
            (Some(_), true) => DATOM_FORMAT_SALTED_BRANCH,
        };
        w.u8(version).str(self.namespace.as_str());
        if let Some(branch) = &self.branch {
            w.str(branch.as_str());
        }
        w.u64(self.entity.0).str(self.attribute.as_str());
    }

    /// The fields after the value, in every format.
    fn write_rest(&self, w: &mut Writer) {
        w.u8(op_tag(self.op))
            .i64(self.valid_from_ns)
            .opt_i64(self.valid_to_ns)
            .u64(self.tx.0);
        write_provenance(w, &self.provenance);
    }

    /// Whether the datom's hash commits to its value through a salt: it has one, or it had
    /// one and it went with its redacted value.
    pub fn salted(&self) -> bool {
        match &self.value {
            Value::Redacted(r) => r.commitment.is_some(),
            _ => self.salt.is_some(),
        }
    }

    /// The hash of a salted datom, from its value's `commitment` ([`value_commitment`]) and
    /// every field but the value (which it ignores): how a reader that was not sent the value
    /// (redacted, or withheld by its grants) binds the fields it was sent to the hash.
    pub fn hash_with_commitment(&self, commitment: &Hash) -> Hash {
        let mut w = Writer::with_capacity(128);
        self.write_head(&mut w, true);
        w.raw(&commitment.0);
        self.write_rest(&mut w);
        Hash::of(&w.finish())
    }

    /// This datom with its value replaced by the marker of redaction `by_tx` (`value_ordinal`:
    /// see [`Redacted`]), and its salt gone with it. An already redacted datom is returned
    /// unchanged.
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
                commitment: self.salt.map(|salt| value_commitment(&salt, &self.value)),
            })),
            salt: None,
            ..self.clone()
        }
    }

    /// Decodes and re-validates a canonical encoding. Refuses unknown versions, unknown tags,
    /// invalid fields and trailing bytes.
    pub fn decode(bytes: &[u8]) -> Result<Datom, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("format version")?;
        // Of a redacted datom: its kept hash, or (salted) its value's commitment.
        let (kept, has_branch, salted) = match version {
            DATOM_FORMAT_VERSION => (None, false, false),
            DATOM_FORMAT_VERSION_BRANCH => (None, true, false),
            DATOM_FORMAT_SALTED => (None, false, true),
            DATOM_FORMAT_SALTED_BRANCH => (None, true, true),
            DATOM_FORMAT_REDACTED => {
                let kept = r.hash("kept datom hash or value commitment")?;
                let flags = r.u8("redacted datom flags")?;
                if flags & !(REDACTED_ON_BRANCH | REDACTED_WAS_SALTED) != 0 {
                    return Err(DecodeError::Tag {
                        what: "redacted datom flags",
                        tag: flags,
                    });
                }
                (
                    Some(kept),
                    flags & REDACTED_ON_BRANCH != 0,
                    flags & REDACTED_WAS_SALTED != 0,
                )
            }
            _ => return Err(DecodeError::Version(version)),
        };
        let namespace = Namespace::new(r.string("namespace")?)?;
        let branch = if has_branch {
            Some(BranchName::new(r.string("branch")?)?)
        } else {
            None
        };
        let entity = EntityId(r.u64("entity")?);
        let attribute = Attribute::new(r.string("attribute")?)?;
        let salt = match (&kept, salted) {
            (None, true) => {
                let mut salt = [0u8; SALT_BYTES];
                salt.copy_from_slice(r.take(SALT_BYTES, "salt")?);
                Some(salt)
            }
            _ => None,
        };
        let value = match kept {
            None => decode_value(&mut r)?,
            Some(kept) => {
                let tag = r.u8("value type")?;
                let value_type = ValueType::from_tag(tag).ok_or(DecodeError::Tag {
                    what: "value type",
                    tag,
                })?;
                Value::Redacted(Box::new(Redacted {
                    value_type,
                    by_tx: TxId(r.u64("redacting tx")?),
                    value_ordinal: r.u32("redacted value ordinal")?,
                    // Recomputed below from the commitment when salted.
                    datom_hash: kept,
                    commitment: salted.then_some(kept),
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
        let mut datom = Datom {
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
            salt,
        };
        let recomputed = match &datom.value {
            Value::Redacted(r) => r.commitment.map(|c| datom.hash_with_commitment(&c)),
            _ => None,
        };
        if let (Some(hash), Value::Redacted(r)) = (recomputed, &mut datom.value) {
            r.datom_hash = hash;
        }
        Ok(datom)
    }

    /// The content address, which the transaction's audit entry commits to: blake3 of the
    /// canonical encoding for an unsalted datom; for a salted one, blake3 of that encoding with
    /// the salt and value replaced by their [`value_commitment`]; for a redacted datom, the
    /// hash from before its value went (recomputed from the kept commitment when salted).
    pub fn hash(&self) -> Hash {
        match (&self.value, &self.salt) {
            (Value::Redacted(r), _) => r.datom_hash,
            (_, None) => Hash::of(&self.encode()),
            (value, Some(salt)) => self.hash_with_commitment(&value_commitment(salt, value)),
        }
    }

    /// [`Datom::hash`] when the caller already holds the datom's [`Datom::encode`]: the same
    /// hash, without encoding an unsalted datom twice.
    pub fn hash_with_encoding(&self, encoded: &[u8]) -> Hash {
        match (&self.value, &self.salt) {
            (Value::Redacted(_), _) | (_, Some(_)) => self.hash(),
            (_, None) => Hash::of(encoded),
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
            salt: None,
        }
    }

    #[test]
    fn a_salted_datom_commits_to_its_salt_and_round_trips() {
        for branch in [None, Some(BranchName::new("plan-a").unwrap())] {
            let mut d = sample();
            d.branch = branch.clone();
            let unsalted = d.hash();
            d.salt = Some(salt_of(&[7; 32], 0));
            let bytes = d.encode();
            let expected = if branch.is_some() {
                DATOM_FORMAT_SALTED_BRANCH
            } else {
                DATOM_FORMAT_SALTED
            };
            assert_eq!(bytes[0], expected);
            assert_eq!(Datom::decode(&bytes).unwrap(), d);
            assert_ne!(d.hash(), unsalted, "the salt is part of the content address");
            let mut other = d.clone();
            other.salt = Some(salt_of(&[7; 32], 1));
            assert_ne!(
                other.hash(),
                d.hash(),
                "each datom of an entry has a salt of its own"
            );
            for cut in 0..bytes.len() {
                assert!(Datom::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn salts_come_from_the_seed_and_the_ordinal_alone() {
        assert_eq!(salt_of(&[1; 32], 3), salt_of(&[1; 32], 3));
        assert_ne!(salt_of(&[1; 32], 3), salt_of(&[1; 32], 4));
        assert_ne!(salt_of(&[1; 32], 3), salt_of(&[2; 32], 3));
    }

    #[test]
    fn redacting_a_salted_datom_destroys_the_salt_and_says_it_had_one() {
        for branch in [None, Some(BranchName::new("plan-a").unwrap())] {
            let mut d = sample();
            d.branch = branch.clone();
            let salt = salt_of(&[9; 32], 2);
            d.salt = Some(salt);
            let hash = d.hash();
            let redacted = d.redact(TxId(40), 0);
            assert_eq!(redacted.salt, None);
            assert_eq!(redacted.hash(), hash);
            let bytes = redacted.encode();
            assert!(
                !bytes.windows(salt.len()).any(|w| w == salt),
                "the salt's bytes are gone"
            );
            let back = Datom::decode(&bytes).unwrap();
            assert_eq!(back.branch, branch);
            assert_eq!(back.hash(), hash);
            assert!(back.salted());
            // Every kept field is bound to the hash through the commitment: a changed agent
            // gives another hash, which the entry's content hash then refuses.
            let mut forged = back.clone();
            forged.provenance.agent = "someone-else".into();
            let forged = Datom::decode(&forged.encode()).unwrap();
            assert_ne!(forged.hash(), hash);
            // A datom written before salts says so once redacted: its kept hash is guessable.
            let mut old = sample();
            old.branch = branch;
            let old = Datom::decode(&old.redact(TxId(40), 0).encode()).unwrap();
            assert!(!old.salted());
        }
        // Flag bits this build does not know are refused, not ignored.
        let mut bytes = sample().redact(TxId(40), 0).encode();
        bytes[33] |= 4;
        assert!(Datom::decode(&bytes).is_err());
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
