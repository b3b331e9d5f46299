//! Schema and branch vocabulary: how an attribute is declared, and how a branch is named and
//! operated on. Both travel inside a [`crate::TxRequest`], so they are ordinary transactions:
//! replicated through the log, applied deterministically, recorded in the audit chain.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Attribute, TxId, ValidationError, ValueType, excerpt};

/// How many values an entity holds for an attribute at once.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize)]
pub enum Cardinality {
    /// One value; each agent holds at most one claim, and disagreeing claims are conflicts.
    #[default]
    One,
    /// A set of values; an assertion adds to the set, a retraction removes one value.
    Many,
}

/// What uniqueness an attribute enforces across the entities of a namespace.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Unique {
    /// The value names its entity: a new entity asserting a value another entity holds is
    /// that entity (upsert), and `[attribute value]` works as a lookup ref.
    Identity,
    /// No two entities may hold the same value; a second holder is refused.
    Value,
}

/// The declaration of one attribute: what a transaction sends to add or migrate it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AttributeDef {
    pub ident: Attribute,
    pub value_type: ValueType,
    pub cardinality: Cardinality,
    pub unique: Option<Unique>,
    /// Keep a value index (AVET) for lookups by value. Unique attributes are always indexed.
    pub indexed: bool,
    /// A `Ref` attribute whose target is part of the entity that points at it.
    pub component: bool,
    pub doc: String,
    /// Closed for new assertions; existing facts stay readable and retractable.
    pub deprecated: bool,
    /// Found by recall (`Memory.Search`): a string attribute's words, a vector attribute's
    /// nearest neighbours. Only string and vector attributes can be searchable.
    pub searchable: bool,
    /// A vector attribute's number of components (every value has exactly this many); 0 for
    /// every other type.
    pub dimension: u32,
}

impl AttributeDef {
    pub const MAX_DOC_BYTES: usize = 4096;

    /// A plain declaration: cardinality one, not unique, not indexed, no doc.
    pub fn new(ident: Attribute, value_type: ValueType) -> AttributeDef {
        AttributeDef {
            ident,
            value_type,
            cardinality: Cardinality::One,
            unique: None,
            indexed: false,
            component: false,
            doc: String::new(),
            deprecated: false,
            searchable: false,
            dimension: 0,
        }
    }

    /// A vector attribute of `dimension` components, searchable by nearest neighbours.
    pub fn vector(ident: Attribute, dimension: u32) -> AttributeDef {
        let mut def = AttributeDef::new(ident, ValueType::Vector);
        def.dimension = dimension;
        def.searchable = true;
        def
    }

    /// Whether lookups by value use an index (AVET rows are written for this attribute).
    pub fn has_value_index(&self) -> bool {
        self.indexed || self.unique.is_some()
    }

    /// Checks that need no state.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let fail = |reason: String| Err(ValidationError::Schema(format!("{}: {reason}", self.ident)));
        if self.ident.is_reserved() {
            return fail("the :db prefixes are reserved for the schema and branches".into());
        }
        if self.doc.len() > Self::MAX_DOC_BYTES {
            return fail(format!("doc is longer than {} bytes", Self::MAX_DOC_BYTES));
        }
        if self.doc.chars().any(|c| c.is_control() && c != '\n') {
            return fail("doc contains control characters".into());
        }
        if self.component && self.value_type != ValueType::Ref {
            return fail("only a ref attribute can be a component".into());
        }
        if self.unique.is_some() && self.cardinality == Cardinality::Many {
            return fail("a unique attribute must have cardinality one".into());
        }
        if self.unique.is_some()
            && matches!(
                self.value_type,
                ValueType::F64 | ValueType::Json | ValueType::Vector
            )
        {
            return fail(format!("a {} value cannot be unique", self.value_type));
        }
        if self.searchable && !matches!(self.value_type, ValueType::String | ValueType::Vector) {
            return fail(format!(
                "only string and vector attributes can be searchable, not {}",
                self.value_type
            ));
        }
        match (self.value_type, self.dimension) {
            (ValueType::Vector, d) if d == 0 || d as usize > crate::MAX_VECTOR_DIMENSION => {
                return fail(format!(
                    "a vector attribute needs a dimension from 1 to {}, not {d}",
                    crate::MAX_VECTOR_DIMENSION
                ));
            }
            (ValueType::Vector, _) if self.indexed => {
                return fail(
                    "a vector attribute has no value index (it is searched by nearest neighbours)".into(),
                );
            }
            (ValueType::Vector, _) | (_, 0) => {}
            (t, _) => return fail(format!("only a vector attribute has a dimension, not {t}")),
        }
        Ok(())
    }
}

/// The name of a branch of a namespace: one segment of `[A-Za-z0-9_.-]`, at most 64 bytes,
/// not `.` or `..`, and not `main` (the namespace itself).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Deserialize)]
#[serde(try_from = "String")]
pub struct BranchName(String);

/// As a string, borrowed: no copy of the name per value serialized.
impl Serialize for BranchName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl BranchName {
    pub const MAX_BYTES: usize = 64;

    pub fn new(value: impl Into<String>) -> Result<BranchName, ValidationError> {
        let value = value.into();
        let fail = |reason| {
            Err(ValidationError::Branch {
                value: excerpt(&value).to_string(),
                reason,
            })
        };
        if value.is_empty() {
            return fail("must not be empty");
        }
        if value.len() > Self::MAX_BYTES {
            return fail("longer than 64 bytes");
        }
        if value == "." || value == ".." {
            return fail("must not be '.' or '..'");
        }
        if value == "main" {
            return fail("'main' is the namespace itself, not a branch");
        }
        if !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return fail("may only contain A-Z a-z 0-9 _ - .");
        }
        Ok(BranchName(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for BranchName {
    type Error = ValidationError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        BranchName::new(value)
    }
}

impl From<BranchName> for String {
    fn from(b: BranchName) -> String {
        b.0
    }
}

impl fmt::Display for BranchName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A change to a namespace's branches, carried by a transaction on the namespace itself.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum BranchOp {
    /// Fork a branch from main as of `from` (`None`: the transaction before this one).
    Create { name: BranchName, from: Option<TxId> },
    /// Apply the branch's writes to main as one transaction, after re-checking them.
    Merge { name: BranchName },
    /// Close the branch without merging; its history stays.
    Abandon { name: BranchName },
}

impl BranchOp {
    pub fn name(&self) -> &BranchName {
        match self {
            BranchOp::Create { name, .. } | BranchOp::Merge { name } | BranchOp::Abandon { name } => name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(a: &str) -> Attribute {
        Attribute::new(a).unwrap()
    }

    #[test]
    fn branch_names() {
        for ok in ["plan-a", "x.1", "A_b"] {
            assert_eq!(BranchName::new(ok).unwrap().as_str(), ok);
        }
        for bad in ["", "main", ".", "..", "a/b", "a b", "ä", &"x".repeat(65)] {
            assert!(BranchName::new(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn definitions_are_checked() {
        AttributeDef::new(attr(":a/b"), ValueType::String)
            .validate()
            .unwrap();
        let reserved = AttributeDef::new(attr(":db/ident"), ValueType::Keyword);
        assert!(reserved.validate().unwrap_err().to_string().contains("reserved"));
        let mut component = AttributeDef::new(attr(":a/c"), ValueType::String);
        component.component = true;
        assert!(component.validate().is_err());
        let mut unique_many = AttributeDef::new(attr(":a/d"), ValueType::String);
        unique_many.unique = Some(Unique::Identity);
        unique_many.cardinality = Cardinality::Many;
        assert!(unique_many.validate().is_err());
        let mut doc = AttributeDef::new(attr(":a/e"), ValueType::String);
        doc.doc = "line\u{7}".into();
        assert!(doc.validate().is_err());
    }

    #[test]
    fn searchable_and_vector_definitions_are_checked() {
        let reason = |d: &AttributeDef| d.validate().unwrap_err().to_string();
        AttributeDef::vector(attr(":doc/embedding"), 384)
            .validate()
            .unwrap();
        let mut text = AttributeDef::new(attr(":doc/text"), ValueType::String);
        text.searchable = true;
        text.validate().unwrap();
        assert!(reason(&AttributeDef::vector(attr(":a/v"), 0)).contains("dimension from 1 to 4096, not 0"));
        assert!(reason(&AttributeDef::vector(attr(":a/v"), 4097)).contains("not 4097"));
        let mut indexed = AttributeDef::vector(attr(":a/v"), 3);
        indexed.indexed = true;
        assert!(reason(&indexed).contains("no value index"));
        let mut unique = AttributeDef::vector(attr(":a/v"), 3);
        unique.unique = Some(Unique::Value);
        assert!(reason(&unique).contains("a vector value cannot be unique"));
        let mut number = AttributeDef::new(attr(":a/n"), ValueType::I64);
        number.searchable = true;
        assert!(reason(&number).contains("only string and vector attributes can be searchable, not i64"));
        number.searchable = false;
        number.dimension = 3;
        assert!(reason(&number).contains("only a vector attribute has a dimension, not i64"));
    }
}
