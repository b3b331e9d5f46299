use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{ValidationError, excerpt};

/// A validated, hierarchical namespace such as `team-a/agents/planner`.
///
/// Namespaces scope all data, and they are also used to build storage keys and, by operators,
/// directory-like paths, so the rules refuse anything that could escape or alias another
/// namespace: no absolute paths, no `.` or `..` segments, no empty segments, no control
/// characters, and only `[A-Za-z0-9_.-]` inside a segment.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Deserialize)]
#[serde(try_from = "String")]
pub struct Namespace(String);

/// As a string, borrowed: no copy of the name per value serialized.
impl Serialize for Namespace {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl Namespace {
    pub const MAX_BYTES: usize = 256;

    pub fn new(value: impl Into<String>) -> Result<Namespace, ValidationError> {
        let value = value.into();
        let fail = |reason| {
            Err(ValidationError::Namespace {
                value: excerpt(&value).to_string(),
                reason,
            })
        };
        if value.is_empty() {
            return fail("must not be empty");
        }
        if value.len() > Self::MAX_BYTES {
            return fail("longer than 256 bytes");
        }
        if value.starts_with('/') {
            return fail("must not be an absolute path");
        }
        if value.chars().any(|c| c.is_control()) {
            return fail("must not contain control characters");
        }
        for segment in value.split('/') {
            if segment.is_empty() {
                return fail("must not contain empty segments");
            }
            if segment == "." || segment == ".." {
                return fail("must not contain '.' or '..' segments");
            }
            if !segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            {
                return fail("segments may only contain A-Z a-z 0-9 _ - .");
            }
        }
        Ok(Namespace(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Namespace {
    type Error = ValidationError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Namespace::new(value)
    }
}

impl From<Namespace> for String {
    fn from(ns: Namespace) -> String {
        ns.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_hierarchical_names() {
        for ok in ["a", "team-a/agents/planner", "x.y_z/1"] {
            assert_eq!(Namespace::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_escapes_and_junk() {
        for bad in [
            "", "/abs", "../x", "a/../b", "a//b", "a/", ".", "a/./b", "a\nb", "a b", "ä",
        ] {
            assert!(Namespace::new(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(Namespace::new("a".repeat(257)).is_err());
    }

    #[test]
    fn errors_quote_a_bounded_prefix_of_the_input() {
        let message = Namespace::new("a".repeat(10_000)).unwrap_err().to_string();
        assert_eq!(
            message,
            format!(
                "invalid namespace \"{}\"…(10000 bytes): longer than 256 bytes",
                "a".repeat(crate::EXCERPT_MAX_BYTES)
            )
        );
        let message = Namespace::new("a b").unwrap_err().to_string();
        assert_eq!(
            message,
            "invalid namespace \"a b\": segments may only contain A-Z a-z 0-9 _ - ."
        );
        let message = crate::Attribute::new(format!(":a/{}", "b".repeat(1 << 20)))
            .unwrap_err()
            .to_string();
        assert!(message.len() < 200, "{message}");
        assert!(
            message.ends_with("…(1048579 bytes): longer than 128 bytes"),
            "{message}"
        );
        let message = crate::BranchName::new("x".repeat(1 << 20))
            .unwrap_err()
            .to_string();
        assert!(message.len() < 200, "{message}");
        assert!(
            message.ends_with("…(1048576 bytes): longer than 64 bytes"),
            "{message}"
        );
    }
}
