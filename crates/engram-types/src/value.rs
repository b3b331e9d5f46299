use std::fmt;

use serde::{Deserialize, Serialize};

use crate::attribute::check_keyword;
use crate::{EntityId, MAX_VALUE_BYTES, ValidationError};

/// A typed datom value.
///
/// Invariants (checked by [`Value::validate`], which the wire layer calls on every value it
/// receives): `F64` is never NaN, so equality is total; `Keyword` has the attribute form;
/// `Json` holds canonical JSON (object keys sorted, no insignificant white space) so that equal
/// documents hash equally; payloads are at most [`MAX_VALUE_BYTES`].
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
}

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
}

impl ValueType {
    pub const ALL: [ValueType; 9] = [
        ValueType::String,
        ValueType::I64,
        ValueType::F64,
        ValueType::Bool,
        ValueType::Bytes,
        ValueType::Instant,
        ValueType::Ref,
        ValueType::Keyword,
        ValueType::Json,
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
        }
    }

    /// Builds a json value from any JSON text, canonicalising it.
    pub fn json(text: &str) -> Result<Value, ValidationError> {
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

    #[test]
    fn nan_and_bad_keywords_are_refused() {
        assert!(Value::F64(f64::NAN).validate().is_err());
        assert!(Value::F64(1.5).validate().is_ok());
        assert!(Value::Keyword("status".into()).validate().is_err());
        assert!(Value::Keyword(":status/open".into()).validate().is_ok());
    }

    #[test]
    fn tags_round_trip() {
        for t in ValueType::ALL {
            assert_eq!(ValueType::from_tag(t.tag()), Some(t));
        }
        assert_eq!(ValueType::from_tag(0), None);
    }
}
