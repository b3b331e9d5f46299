//! A redaction request: which datoms' values to forget, and why (`docs/FORGETTING.md`).

use serde::{Deserialize, Serialize};

use crate::codec::{Reader, Writer};
use crate::datom::{read_provenance, write_provenance};
use crate::{
    Attribute, Datom, DecodeError, EntityId, Hash, Namespace, Provenance, TxId, ValidationError, Value,
};

/// Format version of [`RedactRequest::signed_bytes`].
pub const REDACT_REQUEST_FORMAT_VERSION: u8 = 1;

/// Forget the values of every datom on main of `entity` in `namespace` (only those of
/// `attribute`, when given), retractions included. Only values go: every other field of each
/// datom, and the hash its transaction committed to, stay, so the audit chain keeps verifying.
/// Applied like a transaction, in parts of at most [`RedactPart::MAX_DATOMS`] datoms (each its
/// own log entry, so writes commit between them): each part is evaluated against the state at
/// its log entry on every replica, and recorded in the chain as a transaction of the system
/// namespace that lists each datom it redacted (`engram_core::redact`).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct RedactRequest {
    pub namespace: Namespace,
    pub entity: EntityId,
    pub attribute: Option<Attribute>,
    /// Why, kept in the record for good (so it must not repeat what is being forgotten).
    pub reason: String,
    /// Who asks; recorded as the record's provenance.
    pub provenance: Provenance,
}

impl RedactRequest {
    /// Longest reason, in bytes.
    pub const MAX_REASON_BYTES: usize = 1024;
    /// Most datoms one redaction takes: a larger set is refused (redact it by attribute). Its
    /// parts bound what one log entry does; this bounds the call (its answer lists every
    /// datom taken).
    pub const MAX_DATOMS: usize = 10_000;

    pub fn validate(&self) -> Result<(), ValidationError> {
        validate_reason(&self.reason)?;
        if let Some(attribute) = &self.attribute
            && attribute.is_reserved()
        {
            return Err(ValidationError::Transaction(format!(
                "attribute {attribute} is reserved for the schema and branches: it cannot be redacted"
            )));
        }
        self.provenance.validate()
    }

    /// The canonical bytes an agent signs for this request (`Memory.Redact`), so a signed
    /// redaction is checked at apply like a signed transaction.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(64 + self.reason.len());
        w.u8(REDACT_REQUEST_FORMAT_VERSION)
            .str(self.namespace.as_str())
            .u64(self.entity.0);
        match &self.attribute {
            None => w.u8(0),
            Some(a) => w.u8(1).str(a.as_str()),
        };
        w.str(&self.reason);
        write_provenance(&mut w, &self.provenance);
        w.finish()
    }

    /// The request whose [`RedactRequest::signed_bytes`] these are (for a verifier holding a
    /// signed redaction against its record). Refuses unknown versions, invalid fields and
    /// trailing bytes.
    pub fn decode_signed(bytes: &[u8]) -> Result<RedactRequest, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.u8("redaction format version")?;
        if version != REDACT_REQUEST_FORMAT_VERSION {
            return Err(DecodeError::Version(version));
        }
        let namespace = Namespace::new(r.string("namespace")?)?;
        let entity = EntityId(r.u64("entity")?);
        let attribute = match r.u8("attribute flag")? {
            0 => None,
            1 => Some(Attribute::new(r.string("attribute")?)?),
            tag => {
                return Err(DecodeError::Tag {
                    what: "attribute flag",
                    tag,
                });
            }
        };
        let reason = r.string("reason")?;
        let provenance = read_provenance(&mut r)?;
        r.finish()?;
        let req = RedactRequest {
            namespace,
            entity,
            attribute,
            reason,
            provenance,
        };
        req.validate()?;
        Ok(req)
    }
}

/// A redaction's reason: required (it is kept in the audit chain), at most
/// [`RedactRequest::MAX_REASON_BYTES`], on one line.
pub(crate) fn validate_reason(text: &str) -> Result<(), ValidationError> {
    let reason = |reason: &str| ValidationError::Value {
        field: "reason",
        reason: reason.into(),
    };
    if text.trim().is_empty() {
        return Err(reason(
            "must say why the values go (it is kept in the audit chain)",
        ));
    }
    if text.len() > RedactRequest::MAX_REASON_BYTES {
        return Err(reason("longer than 1024 bytes"));
    }
    if text.chars().any(char::is_control) {
        return Err(reason("contains control characters"));
    }
    Ok(())
}

/// The attributes of a redaction's record, a transaction of the system namespace
/// (`engram_core::redact` writes it; a verifier reads it).
pub const RECORD_NAMESPACE: &str = ":engram.redaction/namespace";
pub const RECORD_ENTITY: &str = ":engram.redaction/entity";
pub const RECORD_ATTRIBUTE: &str = ":engram.redaction/attribute";
pub const RECORD_REASON: &str = ":engram.redaction/reason";
/// One per redacted datom: [`RedactedRef::encode`]. Records of whole-entry redactions (the
/// first format) list their datoms this way.
pub const RECORD_DATOM: &str = ":engram.redaction/datom";
/// The datoms a part redacted, packed: [`RedactedRef::encode`] of each, one after the other,
/// at most [`RedactPart::MAX_DATOMS`] per value. One value instead of one datom (with its index
/// rows, hash and Merkle share) per redacted datom.
pub const RECORD_DATOMS: &str = ":engram.redaction/datoms";
/// On every part after the first: the first part's transaction, which names the redaction.
pub const RECORD_PART_OF: &str = ":engram.redaction/part-of";

/// Which part of a redaction a log entry applies (`Command::RedactPart` in `engram_raft`),
/// chosen by the leader and carried in the entry so every replica applies the same part.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct RedactPart {
    /// The first part's transaction, for every later part: a later part takes only datoms
    /// written before it, so a write that lands between parts keeps its value. `None`: this
    /// is the first part (which checks the request's grant and target like a whole one).
    pub first_tx: Option<TxId>,
    /// The state key of the last datom the part before took: this part takes the datoms after
    /// it, in key order. `None` for the first part.
    pub after_key: Option<Vec<u8>>,
    /// Most datoms this part takes (applied as at most [`RedactPart::MAX_DATOMS`], at least 1).
    pub limit: u32,
}

impl RedactPart {
    /// Most datoms one part takes, whatever its entry says.
    pub const MAX_DATOMS: u32 = 1_000;

    /// The limit this part is applied with: a pure function of the entry.
    pub fn applied_limit(&self) -> usize {
        self.limit.clamp(1, Self::MAX_DATOMS) as usize
    }
}

/// What a transaction's kept signed request (the canonical bytes an agent signed, which hold
/// the values) becomes when a redaction takes any of its datoms: this tag and the redacting
/// transaction. The entry keeps the request's hash and the agent's signature over it, so the
/// signature still verifies; what the request said is gone with its values.
const REDACTED_REQUEST_TAG: &[u8] = b"\xffredacted-request";

/// The marker a redacted signed request is replaced by.
pub fn redacted_request(by_tx: TxId) -> Vec<u8> {
    let mut out = REDACTED_REQUEST_TAG.to_vec();
    out.extend_from_slice(&by_tx.0.to_be_bytes());
    out
}

/// The redacting transaction, if `bytes` is a redacted request's marker. (No canonical
/// request starts with 0xff: they start with their format version.)
pub fn parse_redacted_request(bytes: &[u8]) -> Option<TxId> {
    let rest = bytes.strip_prefix(REDACTED_REQUEST_TAG)?;
    Some(TxId(u64::from_be_bytes(rest.try_into().ok()?)))
}

/// A redacted datom as the record lists it: enough for a verifier to find it in its
/// transaction and check the kept hash, and whether that hash was salted (so the stored
/// datom's word on it is bound to the chain: a store cannot claim a salt it never had).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedactedRef {
    pub tx: TxId,
    pub seq: u32,
    pub hash: Hash,
    pub salted: bool,
}

impl RedactedRef {
    pub const ENCODED_BYTES: usize = 8 + 4 + 32 + 1;
    /// A record written before salts lists its datoms without the flag: none was salted.
    const UNFLAGGED_BYTES: usize = 8 + 4 + 32;

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::ENCODED_BYTES);
        out.extend_from_slice(&self.tx.0.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.hash.0);
        out.push(u8::from(self.salted));
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<RedactedRef> {
        let salted = match bytes.len() {
            Self::UNFLAGGED_BYTES => false,
            Self::ENCODED_BYTES => match bytes[Self::UNFLAGGED_BYTES] {
                0 => false,
                1 => true,
                _ => return None,
            },
            _ => return None,
        };
        let tx = u64::from_be_bytes(bytes[..8].try_into().ok()?);
        let seq = u32::from_be_bytes(bytes[8..12].try_into().ok()?);
        let hash: [u8; 32] = bytes[12..Self::UNFLAGGED_BYTES].try_into().ok()?;
        Some(RedactedRef {
            tx: TxId(tx),
            seq,
            hash: Hash(hash),
            salted,
        })
    }

    /// The datoms a record transaction lists, from its datoms, in the record's order, in either
    /// format (one datom per listed datom, or packed). Any other datom, and a listing that does
    /// not decode, is skipped: the verifier then finds the value it should have covered
    /// missing without a redaction.
    pub fn listed_by(record: &[Datom]) -> Vec<RedactedRef> {
        let mut out = Vec::new();
        for d in record {
            let Value::Bytes(b) = &d.value else { continue };
            match d.attribute.as_str() {
                RECORD_DATOM => out.extend(RedactedRef::decode(b)),
                RECORD_DATOMS if b.len() % Self::ENCODED_BYTES == 0 => {
                    out.extend(b.chunks(Self::ENCODED_BYTES).filter_map(RedactedRef::decode))
                }
                _ => {}
            }
        }
        out
    }

    /// `refs` packed into values of [`RECORD_DATOMS`], at most [`RedactPart::MAX_DATOMS`] each.
    pub fn pack(refs: &[RedactedRef]) -> Vec<Vec<u8>> {
        refs.chunks(RedactPart::MAX_DATOMS as usize)
            .map(|chunk| {
                let mut value = Vec::with_capacity(chunk.len() * Self::ENCODED_BYTES);
                for r in chunk {
                    value.extend_from_slice(&r.encode());
                }
                value
            })
            .collect()
    }

    /// Whether `attribute` lists redacted datoms (in either format): what makes a system
    /// transaction a redaction's record.
    pub fn is_listing(attribute: &str) -> bool {
        attribute == RECORD_DATOM || attribute == RECORD_DATOMS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> RedactRequest {
        RedactRequest {
            namespace: Namespace::new("team/a").unwrap(),
            entity: EntityId(7),
            attribute: Some(Attribute::new(":person/email").unwrap()),
            reason: "erasure request 42".into(),
            provenance: Provenance {
                agent: "dpo".into(),
                confidence: 1.0,
                ..Provenance::default()
            },
        }
    }

    #[test]
    fn a_redacted_request_marker_round_trips() {
        assert_eq!(
            parse_redacted_request(&redacted_request(TxId(42))),
            Some(TxId(42))
        );
        assert_eq!(parse_redacted_request(&request().signed_bytes()), None);
        assert_eq!(parse_redacted_request(&redacted_request(TxId(42))[1..]), None);
    }

    #[test]
    fn a_listed_datom_round_trips() {
        for salted in [false, true] {
            let r = RedactedRef {
                tx: TxId(9),
                seq: 3,
                hash: Hash([7; 32]),
                salted,
            };
            assert_eq!(RedactedRef::decode(&r.encode()), Some(r));
            assert_eq!(RedactedRef::decode(&r.encode()[2..]), None);
            // A record from before salts: 44 bytes, no flag, nothing salted.
            let unflagged = &r.encode()[..44];
            let old = RedactedRef::decode(unflagged).unwrap();
            assert_eq!(
                (old.tx, old.seq, old.hash, old.salted),
                (r.tx, r.seq, r.hash, false)
            );
        }
        let mut bad = RedactedRef {
            tx: TxId(9),
            seq: 3,
            hash: Hash([7; 32]),
            salted: true,
        }
        .encode();
        bad[44] = 2;
        assert_eq!(RedactedRef::decode(&bad), None, "an unknown flag is refused");
    }

    #[test]
    fn a_packed_listing_reads_back_like_one_datom_per_listed_datom() {
        let refs: Vec<RedactedRef> = (0..2_500u32)
            .map(|i| RedactedRef {
                tx: TxId(u64::from(i / 7) + 1),
                seq: i % 7,
                hash: Hash([(i % 251) as u8; 32]),
                salted: i % 3 == 0,
            })
            .collect();
        let packed = RedactedRef::pack(&refs);
        assert_eq!(
            packed.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![45_000, 45_000, 22_500],
            "at most RedactPart::MAX_DATOMS per value"
        );
        let datom = |attribute: &str, value: Vec<u8>| Datom {
            namespace: Namespace::new("_engram").unwrap(),
            entity: EntityId(1),
            attribute: Attribute::new(attribute).unwrap(),
            value: Value::Bytes(value),
            op: crate::Op::Assert,
            valid_from_ns: 0,
            valid_to_ns: None,
            tx: TxId(99),
            provenance: Provenance::default(),
            branch: None,
            salt: None,
        };
        let mut record: Vec<Datom> = packed.iter().map(|v| datom(RECORD_DATOMS, v.clone())).collect();
        assert_eq!(RedactedRef::listed_by(&record), refs);
        // The first format, and other datoms of the record, read alongside.
        record.insert(0, datom(RECORD_DATOM, refs[0].encode()));
        record.push(datom(RECORD_REASON, b"not a listing".to_vec()));
        assert_eq!(RedactedRef::listed_by(&record).len(), refs.len() + 1);
        // A packed value cut mid-datom lists nothing of itself.
        let cut = datom(RECORD_DATOMS, packed[2][..packed[2].len() - 1].to_vec());
        assert!(RedactedRef::listed_by(&[cut]).is_empty());
        assert!(RedactedRef::is_listing(RECORD_DATOMS) && RedactedRef::is_listing(RECORD_DATOM));
        assert!(!RedactedRef::is_listing(RECORD_PART_OF));
    }

    #[test]
    fn a_parts_limit_is_bounded_whatever_the_entry_says() {
        let part = |limit| RedactPart {
            first_tx: None,
            after_key: None,
            limit,
        };
        assert_eq!(part(0).applied_limit(), 1);
        assert_eq!(part(100).applied_limit(), 100);
        assert_eq!(part(u32::MAX).applied_limit(), 1_000);
    }

    #[test]
    fn a_reason_is_required_and_bounded() {
        assert!(request().validate().is_ok());
        for bad in ["", "  ", "a\nb"] {
            let mut r = request();
            r.reason = bad.into();
            assert!(r.validate().is_err(), "{bad:?}");
        }
        let mut long = request();
        long.reason = "x".repeat(RedactRequest::MAX_REASON_BYTES + 1);
        assert!(long.validate().is_err());
        let mut reserved = request();
        reserved.attribute = Some(Attribute::new(":db/ident").unwrap());
        assert!(reserved.validate().is_err());
    }

    #[test]
    fn the_signed_bytes_decode_back_and_refuse_damage() {
        for req in [
            request(),
            RedactRequest {
                attribute: None,
                ..request()
            },
        ] {
            let bytes = req.signed_bytes();
            assert_eq!(RedactRequest::decode_signed(&bytes), Ok(req));
            for cut in 0..bytes.len() {
                assert!(RedactRequest::decode_signed(&bytes[..cut]).is_err());
            }
            let mut trailing = bytes.clone();
            trailing.push(0);
            assert!(RedactRequest::decode_signed(&trailing).is_err());
        }
    }

    #[test]
    fn the_signed_bytes_cover_every_field() {
        let base = request().signed_bytes();
        let mut other = request();
        other.attribute = None;
        assert_ne!(other.signed_bytes(), base);
        let mut other = request();
        other.reason.push('!');
        assert_ne!(other.signed_bytes(), base);
        let mut other = request();
        other.entity = EntityId(8);
        assert_ne!(other.signed_bytes(), base);
        let mut other = request();
        other.provenance.agent = "x".into();
        assert_ne!(other.signed_bytes(), base);
    }
}
