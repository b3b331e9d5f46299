use std::fmt;

use serde::{Deserialize, Serialize};

use crate::attribute::check_keyword;
use crate::{EntityId, MAX_VALUE_BYTES, ValidationError};

/// A typed datom value.
///
/// Invariants (checked by [`Value::validate`], which the wire layer calls on every value it
/// receives): `F64` is never NaN, so equality is total; `Keyword` has the attribute form;
/// `Json` holds canonical JSON (object keys sorted, no insignificant white space) so that equal
/// documents hash equally; `Vector` has 1 to [`MAX_VECTOR_DIMENSION`] finite components;
/// payloads are at most [`MAX_VALUE_BYTES`].
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub enum Value {
    String(String),
    I64(i64),
    F64(f64),
    Bool(bool),
    Bytes(Vec<u8>),
    /// Nanoseconds since the Unix epoch, UTC.
    Instant(i64),
    Ref(EntityId),
    Keyword(String),
    Json(String),
    /// An embedding the client computed: finite f32 components, as many as the attribute's
    /// schema `dimension` says.
    Vector(Vec<f32>),
    /// The marker a redacted datom carries instead of its value (`docs/FORGETTING.md`): never
    /// written by a request ([`Value::validate`] refuses it), only by the redaction's apply.
    /// Boxed: it is rare, and unboxed it would make every value (and datom) larger.
    Redacted(Box<Redacted>),
}

/// What is left of a redacted value: its type, which redaction took it, and an ordinal that
/// tells equal values of one redaction apart from different ones, so that a slot's history
/// folds to the same live claims after the redaction as before it (a retraction of a redacted
/// value still ends the redacted assertion of that value) without keeping anything a guess
/// could be tested against. The datom's hash is kept beside it: the hash the audit entry
/// committed to, which the datom no longer has the value to recompute.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Redacted {
    pub value_type: ValueType,
    /// The transaction that recorded the redaction.
    pub by_tx: crate::TxId,
    /// Equal values redacted by one transaction share an ordinal; different ones never do.
    pub value_ordinal: u32,
    /// The datom's hash as its transaction committed to it.
    pub datom_hash: crate::Hash,
    /// Of a salted datom (`DATOM_FORMAT_SALTED`): its value's commitment
    /// (`engram_types::value_commitment`), kept so that `datom_hash` is recomputed from it and
    /// every other field (none of them can be changed unseen), while the salt that made it is
    /// destroyed. `None` for a datom written before salts, which keeps only its hash: a guess
    /// of the value can be tested against that hash, and its other fields are not bound to it.
    #[serde(default)]
    pub commitment: Option<crate::Hash>,
}

/// Two redacted values are equal when one redaction took equal values: the kept datom hashes
/// differ between datoms of one value and say nothing about the value.
impl PartialEq for Redacted {
    fn eq(&self, other: &Redacted) -> bool {
        self.value_type == other.value_type
            && self.by_tx == other.by_tx
            && self.value_ordinal == other.value_ordinal
    }
}

/// Most components a vector value may have.
pub const MAX_VECTOR_DIMENSION: usize = 4096;

/// The type of a [`Value`], without its payload.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum ValueType {
    String,
    I64,
    F64,
    Bool,
    Bytes,
    Instant,
    Ref,
    Keyword,
    Json,
    Vector,
}

impl ValueType {
    pub const ALL: [ValueType; 10] = [
        ValueType::String,
        ValueType::I64,
        ValueType::F64,
        ValueType::Bool,
        ValueType::Bytes,
        ValueType::Instant,
        ValueType::Ref,
        ValueType::Keyword,
        ValueType::Json,
        ValueType::Vector,
    ];

    /// Stable one-byte tag used by the canonical encoding and storage keys.
    pub fn tag(self) -> u8 {
        match self {
            ValueType::String => 1,
            ValueType::I64 => 2,
            ValueType::F64 => 3,
            ValueType::Bool => 4,
            ValueType::Bytes => 5,
            ValueType::Instant => 6,
            ValueType::Ref => 7,
            ValueType::Keyword => 8,
            ValueType::Json => 9,
            ValueType::Vector => 10,
        }
    }

    pub fn from_tag(tag: u8) -> Option<ValueType> {
        ValueType::ALL.into_iter().find(|t| t.tag() == tag)
    }

    pub fn name(self) -> &'static str {
        match self {
            ValueType::String => "string",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
            ValueType::Bool => "bool",
            ValueType::Bytes => "bytes",
            ValueType::Instant => "instant",
            ValueType::Ref => "ref",
            ValueType::Keyword => "keyword",
            ValueType::Json => "json",
            ValueType::Vector => "vector",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::String(_) => ValueType::String,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::Bytes(_) => ValueType::Bytes,
            Value::Instant(_) => ValueType::Instant,
            Value::Ref(_) => ValueType::Ref,
            Value::Keyword(_) => ValueType::Keyword,
            Value::Json(_) => ValueType::Json,
            Value::Vector(_) => ValueType::Vector,
            Value::Redacted(r) => r.value_type,
        }
    }

    /// The redaction marker, if this value was redacted.
    pub fn redacted(&self) -> Option<&Redacted> {
        match self {
            Value::Redacted(r) => Some(r.as_ref()),
            _ => None,
        }
    }

    /// Builds a json value from any JSON text, canonicalising it. A number the canonical form
    /// could not keep as written is refused (see [`check_json_numbers`]).
    pub fn json(text: &str) -> Result<Value, ValidationError> {
        check_json_numbers(text)?;
        let parsed: serde_json::Value = serde_json::from_str(text).map_err(|e| ValidationError::Value {
            field: "json",
            reason: e.to_string(),
        })?;
        // serde_json's default map is a BTreeMap: keys come out sorted, giving one form per
        // document.
        let canonical = serde_json::to_string(&parsed).map_err(|e| ValidationError::Value {
            field: "json",
            reason: e.to_string(),
        })?;
        Ok(Value::Json(canonical))
    }

    /// Checks the invariants listed on the type.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let too_big = |field| ValidationError::Value {
            field,
            reason: format!("larger than {MAX_VALUE_BYTES} bytes"),
        };
        match self {
            Value::String(s) if s.len() > MAX_VALUE_BYTES => Err(too_big("string")),
            Value::Bytes(b) if b.len() > MAX_VALUE_BYTES => Err(too_big("bytes")),
            Value::F64(f) if f.is_nan() => Err(ValidationError::Value {
                field: "f64",
                reason: "NaN is not a value".into(),
            }),
            Value::Keyword(k) => check_keyword(k).map_err(|reason| ValidationError::Value {
                field: "keyword",
                reason: reason.into(),
            }),
            Value::Vector(v) => check_vector("vector", v),
            Value::Redacted(_) => Err(ValidationError::Value {
                field: "value",
                reason: "a redaction marker is not a value a request can write".into(),
            }),
            Value::Json(text) => {
                if text.len() > MAX_VALUE_BYTES {
                    return Err(too_big("json"));
                }
                match Value::json(text)? {
                    Value::Json(canonical) if canonical == *text => Ok(()),
                    _ => Err(ValidationError::Value {
                        field: "json",
                        reason: "not in canonical form (use Value::json)".into(),
                    }),
                }
            }
            _ => Ok(()),
        }
    }
}

/// Checks a vector's length and components; `field` names it in the error (a stored value's
/// type, or a query's field).
pub fn check_vector(field: &'static str, v: &[f32]) -> Result<(), ValidationError> {
    if v.is_empty() || v.len() > MAX_VECTOR_DIMENSION {
        return Err(ValidationError::Value {
            field,
            reason: format!(
                "has {} components; a vector has 1 to {MAX_VECTOR_DIMENSION}",
                v.len()
            ),
        });
    }
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(ValidationError::Value {
            field,
            reason: format!("component {i} is {}, not a finite number", v[i]),
        });
    }
    Ok(())
}

/// How much of an offending number an error repeats back.
const NUMBER_SHOWN_CHARS: usize = 40;

/// Refuses every number in the JSON `text` that the canonical form would not keep as written.
/// serde_json (without `arbitrary_precision`, which stays off: feature unification would change
/// every crate's JSON) holds an integer as an i64 or u64 and anything else as an f64, so it
/// silently turns `123456789012345678901234567890` into `1.2345678901234568e+29` and `1e-400`
/// into `0.0`. This scans the number lexemes outside strings: an integer must fit in i64 or
/// u64; any other number must print back, through the same parse and print the canonical form
/// uses, as the same decimal value (so `0.1` and `1.5e300` pass, while a 20-digit fraction, an
/// overflow and a non-zero underflow do not). It only refuses: a number it accepts keeps the
/// canonical form it always had, and every canonical text passes (it prints shortest forms).
/// Lexemes that are not JSON numbers are left to the parser, which reports the syntax error.
/// Public so that a client parsing a whole document (whose numbers its own parse would round
/// before they reach [`Value::json`]) can refuse the same numbers first.
pub fn check_json_numbers(text: &str) -> Result<(), ValidationError> {
    match inexact_json_numbers(text).into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Every number in the JSON `text` that [`check_json_numbers`] refuses: where its lexeme lies
/// in `text`, and why. For a reader that must parse a document anyway and wants to name the
/// field the number was in (the MCP server, whose SDK parses the request before any tool
/// sees it).
pub fn inexact_json_numbers(text: &str) -> Vec<(std::ops::Range<usize>, ValidationError)> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 2,
                b'"' => {
                    in_string = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if b == b'-' || b.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                i += 1;
            }
            // Only ASCII bytes were taken, so the slice is on char boundaries.
            if let Err(e) = check_json_number(&text[start..i]) {
                found.push((start..i, e));
            }
            continue;
        }
        i += 1;
    }
    found
}

/// Checks one number lexeme (see [`check_json_numbers`]).
fn check_json_number(lexeme: &str) -> Result<(), ValidationError> {
    let Some(written) = Decimal::parse(lexeme) else {
        return Ok(());
    };
    let shown = || {
        let mut s: String = lexeme.chars().take(NUMBER_SHOWN_CHARS).collect();
        if s.len() < lexeme.len() {
            s.push('…');
        }
        s
    };
    let refuse = |reason: String| {
        Err(ValidationError::Value {
            field: "json",
            reason,
        })
    };
    if written.integer {
        if lexeme.parse::<i64>().is_ok() || lexeme.parse::<u64>().is_ok() {
            return Ok(());
        }
        return refuse(format!(
            "number {} cannot be stored exactly: a JSON integer must fit in 64 bits (i64 or u64); send a larger one as a string",
            shown()
        ));
    }
    let printed = match serde_json::from_str::<serde_json::Value>(lexeme) {
        Ok(parsed) => parsed.to_string(),
        Err(_) => {
            return refuse(format!(
                "number {} cannot be stored exactly: it is beyond the range of a 64-bit float",
                shown()
            ));
        }
    };
    if Decimal::parse(&printed).is_some_and(|kept| kept.same_value(&written)) {
        return Ok(());
    }
    refuse(format!(
        "number {} cannot be stored exactly: as a 64-bit float it would become {printed}; send it as a string to keep every digit",
        shown()
    ))
}

/// A JSON number lexeme as a decimal value: `digits * 10^exponent`, with no leading or trailing
/// zeros in `digits` (empty for zero).
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
    /// Written without a fraction or an exponent.
    integer: bool,
}

impl Decimal {
    /// `None` unless `lexeme` follows the JSON number grammar
    /// (`-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`).
    fn parse(lexeme: &str) -> Option<Decimal> {
        let (negative, rest) = match lexeme.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, lexeme),
        };
        let (mantissa, exp) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        let (int, frac) = match mantissa.split_once('.') {
            Some((int, frac)) => (int, Some(frac)),
            None => (mantissa, None),
        };
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(int) || (int.len() > 1 && int.starts_with('0')) {
            return None;
        }
        if frac.is_some_and(|f| !all_digits(f)) {
            return None;
        }
        let mut exponent: i64 = 0;
        if let Some(exp) = exp {
            let (sign, digits) = match exp.as_bytes().first() {
                Some(b'-') => (-1, &exp[1..]),
                Some(b'+') => (1, &exp[1..]),
                _ => (1, exp),
            };
            if !all_digits(digits) {
                return None;
            }
            // Saturating: an exponent this large is out of range either way, and the values
            // compared below stay distinct.
            for d in digits.bytes() {
                exponent = exponent.saturating_mul(10).saturating_add(i64::from(d - b'0'));
            }
            exponent *= sign;
        }
        let frac = frac.unwrap_or("");
        let frac_len = i64::try_from(frac.len()).unwrap_or(i64::MAX);
        exponent = exponent.saturating_sub(frac_len);
        let all = format!("{int}{frac}");
        let significant = all.trim_start_matches('0');
        let trimmed = significant.trim_end_matches('0');
        let trailing = i64::try_from(significant.len() - trimmed.len()).unwrap_or(i64::MAX);
        Some(Decimal {
            negative,
            digits: trimmed.to_string(),
            exponent: if trimmed.is_empty() {
                0
            } else {
                exponent.saturating_add(trailing)
            },
            integer: exp.is_none() && frac.is_empty() && !mantissa.contains('.'),
        })
    }

    /// Equal as numbers; zeros are equal whatever their sign.
    fn same_value(&self, other: &Decimal) -> bool {
        if self.digits.is_empty() || other.digits.is_empty() {
            return self.digits.is_empty() && other.digits.is_empty();
        }
        self.negative == other.negative && self.digits == other.digits && self.exponent == other.exponent
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::String(s) => write!(f, "{s:?}"),
            Value::I64(i) => write!(f, "{i}"),
            Value::F64(x) => write!(f, "{x}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Bytes(b) => write!(f, "0x{}", hex::encode(b)),
            Value::Instant(ns) => write!(f, "#inst {ns}ns"),
            Value::Ref(e) => write!(f, "#ref {e}"),
            Value::Keyword(k) => f.write_str(k),
            Value::Json(j) => f.write_str(j),
            Value::Redacted(r) => write!(f, "#redacted {} by tx {}", r.value_type, r.by_tx.0),
            Value::Vector(v) => {
                // A vector of hundreds of components is noise in a message: its size and
                // first components say which one it is.
                const SHOWN: usize = 3;
                write!(f, "#vector[{}](", v.len())?;
                for (i, x) in v.iter().take(SHOWN).enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "{x}")?;
                }
                if v.len() > SHOWN {
                    f.write_str(" …")?;
                }
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_canonicalised() {
        let a = Value::json(r#"{ "b": 1, "a": [true, null] }"#).unwrap();
        let b = Value::json(r#"{"a":[true,null],"b":1}"#).unwrap();
        assert_eq!(a, b);
        a.validate().unwrap();
        assert!(Value::Json("{ \"a\": 1 }".into()).validate().is_err());
        assert!(Value::json("{oops").is_err());
    }

    fn refused(text: &str) -> String {
        match Value::json(text) {
            Err(ValidationError::Value { field, reason }) => {
                assert_eq!(field, "json");
                reason
            }
            other => panic!("{text} was not refused: {other:?}"),
        }
    }

    #[test]
    fn inexact_numbers_are_located_outside_strings_only() {
        let text = r#"{"a": 1, "b": "123456789012345678901234567890", "c": [0.1, 123456789012345678901234567890, 1e-400]}"#;
        let found: Vec<&str> = inexact_json_numbers(text)
            .into_iter()
            .map(|(at, _)| &text[at])
            .collect();
        assert_eq!(found, ["123456789012345678901234567890", "1e-400"]);
        assert!(inexact_json_numbers(r#"{"n": 9223372036854775807, "f": 0.1}"#).is_empty());
    }

    #[test]
    fn json_integers_beyond_64_bits_are_refused_not_rounded() {
        let reason = refused("123456789012345678901234567890");
        assert!(
            reason.starts_with("number 123456789012345678901234567890 cannot be stored exactly"),
            "{reason}"
        );
        let reason = refused(r#"{"a":[1,{"b":-123456789012345678901234567890}]}"#);
        assert!(
            reason.starts_with("number -123456789012345678901234567890 "),
            "{reason}"
        );
        // Just past each end of the 64-bit range.
        refused("18446744073709551616");
        refused("-9223372036854775809");
        // A long number is named by its prefix.
        let reason = refused(&"9".repeat(400));
        assert!(
            reason.starts_with(&format!("number {}… ", "9".repeat(40))),
            "{reason}"
        );
    }

    #[test]
    fn json_floats_that_would_change_are_refused() {
        assert!(refused("1e400").contains("beyond the range of a 64-bit float"));
        assert!(refused("-1e400").contains("number -1e400 "));
        let reason = refused("1e-400");
        assert!(
            reason.contains("number 1e-400 ") && reason.contains("would become 0.0"),
            "{reason}"
        );
        let reason = refused(r#"{"x":0.30000000000000000001}"#);
        assert!(reason.contains("would become 0.3"), "{reason}");
        // 2^53 + 1 has 16 digits, and still no f64 holds it.
        refused("9007199254740993.0");
    }

    #[test]
    fn json_numbers_that_fit_keep_their_canonical_form() {
        for (text, canonical) in [
            ("0", "0"),
            ("-0", "-0.0"),
            ("-0.0", "-0.0"),
            ("0.1", "0.1"),
            ("-2.5e-3", "-0.0025"),
            ("1E2", "100.0"),
            ("1.5e300", "1.5e+300"),
            ("5e-324", "5e-324"),
            ("9223372036854775807", "9223372036854775807"),
            ("-9223372036854775808", "-9223372036854775808"),
            ("18446744073709551615", "18446744073709551615"),
            ("1.2345678901234568e+29", "1.2345678901234568e+29"),
            (
                r#"{"b":[1,2.25,"1e400 in a string \" 123456789012345678901234567890"],"a":-7}"#,
                r#"{"a":-7,"b":[1,2.25,"1e400 in a string \" 123456789012345678901234567890"]}"#,
            ),
        ] {
            let value = Value::json(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(value, Value::Json(canonical.into()), "{text}");
            value.validate().unwrap();
        }
    }

    #[test]
    fn nan_and_bad_keywords_are_refused() {
        assert!(Value::F64(f64::NAN).validate().is_err());
        assert!(Value::F64(1.5).validate().is_ok());
        assert!(Value::Keyword("status".into()).validate().is_err());
        assert!(Value::Keyword(":status/open".into()).validate().is_ok());
    }

    #[test]
    fn vectors_are_finite_and_sized() {
        Value::Vector(vec![0.5, -1.0]).validate().unwrap();
        let reason = |v: Vec<f32>| Value::Vector(v).validate().unwrap_err().to_string();
        assert!(reason(vec![]).contains("has 0 components"));
        assert!(reason(vec![0.0; MAX_VECTOR_DIMENSION + 1]).contains("has 4097 components"));
        assert!(reason(vec![1.0, f32::NAN]).contains("component 1 is NaN"));
        assert!(reason(vec![f32::INFINITY]).contains("component 0 is inf"));
        assert_eq!(
            Value::Vector(vec![1.0, 2.5, 3.0, 4.0]).to_string(),
            "#vector[4](1 2.5 3 …)"
        );
    }

    #[test]
    fn tags_round_trip() {
        for t in ValueType::ALL {
            assert_eq!(ValueType::from_tag(t.tag()), Some(t));
        }
        assert_eq!(ValueType::from_tag(0), None);
    }
}
