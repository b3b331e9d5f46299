use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{ValidationError, excerpt};

/// A namespaced keyword naming an attribute, such as `:task/status`.
///
/// Form: `:` then a prefix, `/`, and a name; both parts non-empty and made of
/// `[A-Za-z0-9_.?!*+-]` (the prefix may itself contain `.`). At most 128 bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Deserialize)]
#[serde(try_from = "String")]
pub struct Attribute(String);

/// As a string, borrowed: no copy of the name per value serialized.
impl Serialize for Attribute {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl Attribute {
    pub const MAX_BYTES: usize = 128;

    pub fn new(value: impl Into<String>) -> Result<Attribute, ValidationError> {
        let value = value.into();
        check_keyword(&value).map_err(|reason| ValidationError::Attribute {
            value: excerpt(&value).to_string(),
            reason,
        })?;
        Ok(Attribute(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part before the `/`, without the leading `:`.
    pub fn prefix(&self) -> &str {
        self.0[1..].split_once('/').map_or("", |(p, _)| p)
    }

    /// Whether the attribute belongs to the system vocabulary (`:db/...`, `:db.<x>/...`): the
    /// schema and branch records. Transactions may not assert or retract these directly.
    pub fn is_reserved(&self) -> bool {
        let prefix = self.prefix();
        prefix == "db" || prefix.starts_with("db.")
    }
}

/// Shared by attributes and keyword values: `:prefix/name`.
pub(crate) fn check_keyword(value: &str) -> Result<(), &'static str> {
    if value.len() > Attribute::MAX_BYTES {
        return Err("longer than 128 bytes");
    }
    let Some(body) = value.strip_prefix(':') else {
        return Err("must start with ':'");
    };
    let Some((prefix, name)) = body.split_once('/') else {
        return Err("must have the form :prefix/name");
    };
    let valid = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.?!*+-".contains(&b))
    };
    if !valid(prefix) || !valid(name) {
        return Err("prefix and name must be non-empty and use only A-Z a-z 0-9 _ . ? ! * + -");
    }
    Ok(())
}

impl TryFrom<String> for Attribute {
    type Error = ValidationError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Attribute::new(value)
    }
}

impl From<Attribute> for String {
    fn from(a: Attribute) -> String {
        a.0
    }
}

impl fmt::Display for Attribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyword_rules() {
        assert!(Attribute::new(":task/status").is_ok());
        assert!(Attribute::new(":agent.memory/kind").is_ok());
        for bad in ["task/status", ":task", ":/x", ":x/", ":a b/c", ""] {
            assert!(Attribute::new(bad).is_err(), "{bad:?}");
        }
        assert!(Attribute::new(":db/ident").unwrap().is_reserved());
        assert!(Attribute::new(":db.branch/state").unwrap().is_reserved());
        assert!(!Attribute::new(":dbx/a").unwrap().is_reserved());
        assert_eq!(Attribute::new(":a.b/c").unwrap().prefix(), "a.b");
    }
}
