//! A redaction by predicate: forget the values of every datom of a namespace that a
//! [`Predicate`] matches (`docs/FORGETTING.md`, "Redaction by predicate and retention").
//!
//! Unlike a redaction of one entity ([`crate::RedactRequest`]), its target can be any size, so
//! the leader plans it in ranges ([`RedactRange`]): it scans for the next matching datoms off
//! the apply path and proposes the key range that holds them; every replica evaluates the
//! predicate again over that range only, so apply reads at most [`RedactRange::MAX_ROWS`]
//! rows per entry whatever the namespace holds.

use serde::{Deserialize, Serialize};

use crate::{Attribute, Datom, Namespace, Provenance, TxId, ValidationError, Value};

/// What a redaction by predicate takes: every datom on main of the namespace that meets every
/// condition given (none given: the whole namespace). Datoms on branches are not taken.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
pub struct Predicate {
    /// Only datoms of this attribute.
    pub attribute: Option<Attribute>,
    /// Only datoms recorded as this agent's (`provenance.agent`).
    pub agent: Option<String>,
    /// Only datoms holding exactly this value (assertions and retractions of it alike).
    pub value: Option<Value>,
    /// Only datoms written by a transaction before this one.
    pub before_tx: Option<TxId>,
    /// Only datoms whose transaction time is before this instant (Unix ns): evaluated at apply
    /// as "written by the last transaction at or before it, or earlier" against the chain, so
    /// every replica takes the same datoms (`engram_core::reads::tx_at_time`).
    pub written_before_ns: Option<i64>,
    /// Only datoms whose valid time starts before this instant (Unix ns).
    pub valid_from_before_ns: Option<i64>,
}

impl Predicate {
    /// Whether `d` meets every condition but the two time bounds on its transaction, which the
    /// caller resolves to one transaction bound ([`Predicate::before_tx`] and the transaction
    /// of [`Predicate::written_before_ns`]), on main or on a branch (whether a redaction reaches
    /// branches is the entry's: `engram_core::redact_where`).
    pub fn matches(&self, d: &Datom) -> bool {
        self.attribute.as_ref().is_none_or(|a| *a == d.attribute)
            && self.agent.as_ref().is_none_or(|a| *a == d.provenance.agent)
            && self.value.as_ref().is_none_or(|v| *v == d.value)
            && self.valid_from_before_ns.is_none_or(|t| d.valid_from_ns < t)
    }

    /// Whether the predicate says nothing but its namespace: the whole namespace goes.
    pub fn is_everything(&self) -> bool {
        *self == Predicate::default()
    }
}

/// Forget the values of every datom of `namespace` that `predicate` matches, retractions
/// included. Only values go, as for [`crate::RedactRequest`]: the chain keeps verifying.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct RedactWhere {
    pub namespace: Namespace,
    pub predicate: Predicate,
    /// Why, kept in the record for good.
    pub reason: String,
    /// Who asks; recorded as the record's provenance.
    pub provenance: Provenance,
}

impl RedactWhere {
    pub fn validate(&self) -> Result<(), ValidationError> {
        crate::redact::validate_reason(&self.reason)?;
        if let Some(attribute) = &self.predicate.attribute
            && attribute.is_reserved()
        {
            return Err(ValidationError::Transaction(format!(
                "attribute {attribute} is reserved for the schema and branches: it cannot be redacted"
            )));
        }
        if let Some(agent) = &self.predicate.agent
            && (agent.is_empty() || agent.len() > Provenance::MAX_FIELD_BYTES)
        {
            return Err(ValidationError::Value {
                field: "predicate.agent",
                reason: "must be 1 to 1024 bytes".into(),
            });
        }
        if self.predicate.before_tx == Some(TxId(0)) {
            return Err(ValidationError::Value {
                field: "predicate.before_tx",
                reason: "no transaction comes before transaction 0".into(),
            });
        }
        if let Some(value) = &self.predicate.value {
            value.validate()?;
        }
        self.provenance.validate()
    }
}

/// One entry of a redaction by predicate: the datoms the predicate matches among the rows from
/// `from_key` through `through_key` (both included) of the namespace's index the predicate is
/// scanned by, at most [`RedactRange::applied_limit`] of them, and after the first range only
/// those written before the first range's transaction. Chosen by the leader and carried in the
/// entry, so every replica takes the same datoms.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct RedactRange {
    /// The first range's transaction, for every later range. `None`: this is the first.
    pub first_tx: Option<TxId>,
    pub from_key: Vec<u8>,
    pub through_key: Vec<u8>,
    /// Most datoms this range takes (applied as at most [`crate::RedactPart::MAX_DATOMS`]).
    pub limit: u32,
}

impl RedactRange {
    /// Most rows one range reads at apply, whatever its entry says: a range the leader made
    /// wider than that is read only this far.
    pub const MAX_ROWS: usize = 10_000;

    pub fn applied_limit(&self) -> usize {
        self.limit.clamp(1, crate::RedactPart::MAX_DATOMS) as usize
    }
}

/// The attributes a redaction by predicate's record adds to those of
/// [`crate::redact::RECORD_NAMESPACE`] and [`crate::redact::RECORD_REASON`] (the first range's
/// record names the predicate; later ranges name the first, [`crate::redact::RECORD_PART_OF`]).
pub const RECORD_WHERE_ATTRIBUTE: &str = ":engram.redaction/where-attribute";
pub const RECORD_WHERE_AGENT: &str = ":engram.redaction/where-agent";
/// `true` when the predicate named a value (the value itself is not recorded: it is what goes).
pub const RECORD_WHERE_VALUE_GIVEN: &str = ":engram.redaction/where-value-given";
pub const RECORD_WHERE_BEFORE_TX: &str = ":engram.redaction/where-before-tx";
pub const RECORD_WHERE_WRITTEN_BEFORE: &str = ":engram.redaction/where-written-before";
pub const RECORD_WHERE_VALID_FROM_BEFORE: &str = ":engram.redaction/where-valid-from-before";
/// On a record a retention policy made: the policy's `keep_ms`.
pub const RECORD_RETENTION_KEEP_MS: &str = ":engram.redaction/retention-keep-ms";
/// On a record a versions policy made: the policy's `keep_versions`.
pub const RECORD_RETENTION_KEEP_VERSIONS: &str = ":engram.redaction/retention-keep-versions";
/// On a record made because the namespace's session ended: `true`.
pub const RECORD_SESSION_ENDED: &str = ":engram.redaction/session-ended";

/// What makes a retention policy's redaction, carried in its log entry and checked at apply
/// against the policy in force (`docs/FORGETTING.md`, "Retention policies").
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum RetentionRule {
    /// What was written longer ago than this goes.
    KeepMs(u64),
    /// Of each slot, what the last this many transactions that wrote it hold stays, and so do
    /// its live claims; older datoms go.
    KeepVersions(u32),
    /// The namespace's session ended: what was written there before the end goes.
    SessionEnded,
}

impl RetentionRule {
    /// The rule for a log line or a reason: "keep 60000 ms", "keep 3 versions".
    pub fn describe(&self) -> String {
        match self {
            RetentionRule::KeepMs(ms) => format!("keep {ms} ms"),
            RetentionRule::KeepVersions(n) => format!("keep {n} versions"),
            RetentionRule::SessionEnded => "session ended".into(),
        }
    }

    /// How long what is written is kept, for a time rule.
    pub fn keep_ms(&self) -> Option<u64> {
        match self {
            RetentionRule::KeepMs(ms) => Some(*ms),
            RetentionRule::KeepVersions(_) | RetentionRule::SessionEnded => None,
        }
    }

    /// The versions kept per slot, for a versions rule.
    pub fn keep_versions(&self) -> Option<u32> {
        match self {
            RetentionRule::KeepVersions(n) => Some(*n),
            RetentionRule::KeepMs(_) | RetentionRule::SessionEnded => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EntityId, Op};

    fn datom() -> Datom {
        Datom {
            namespace: Namespace::new("team/a").unwrap(),
            entity: EntityId(7),
            attribute: Attribute::new(":person/email").unwrap(),
            value: Value::String("a@example.com".into()),
            op: Op::Assert,
            valid_from_ns: 100,
            valid_to_ns: None,
            tx: TxId(9),
            provenance: Provenance {
                agent: "crawler".into(),
                confidence: 1.0,
                ..Provenance::default()
            },
            branch: None,
            salt: None,
        }
    }

    fn request(predicate: Predicate) -> RedactWhere {
        RedactWhere {
            namespace: Namespace::new("team/a").unwrap(),
            predicate,
            reason: "erasure request 42".into(),
            provenance: Provenance {
                agent: "dpo".into(),
                confidence: 1.0,
                ..Provenance::default()
            },
        }
    }

    #[test]
    fn a_predicate_matches_only_what_meets_every_condition() {
        let d = datom();
        assert!(Predicate::default().matches(&d));
        assert!(Predicate::default().is_everything());
        let p = Predicate {
            attribute: Some(Attribute::new(":person/email").unwrap()),
            agent: Some("crawler".into()),
            value: Some(Value::String("a@example.com".into())),
            valid_from_before_ns: Some(101),
            ..Predicate::default()
        };
        assert!(p.matches(&d) && !p.is_everything());
        let misses = [
            Predicate {
                attribute: Some(Attribute::new(":person/name").unwrap()),
                ..p.clone()
            },
            Predicate {
                agent: Some("someone-else".into()),
                ..p.clone()
            },
            Predicate {
                value: Some(Value::String("b@example.com".into())),
                ..p.clone()
            },
            Predicate {
                valid_from_before_ns: Some(100),
                ..p.clone()
            },
        ];
        for miss in misses {
            assert!(!miss.matches(&d), "{miss:?}");
        }
        let on_branch = Datom {
            branch: Some(crate::BranchName::new("draft").unwrap()),
            ..d
        };
        assert!(
            Predicate::default().matches(&on_branch),
            "a branch's datom matches like main's"
        );
        let other_agent = Predicate {
            agent: Some("someone else".into()),
            ..Predicate::default()
        };
        assert!(!other_agent.matches(&on_branch));
    }

    #[test]
    fn a_request_needs_a_reason_and_sane_bounds() {
        assert!(request(Predicate::default()).validate().is_ok());
        let mut no_reason = request(Predicate::default());
        no_reason.reason = " ".into();
        assert!(no_reason.validate().is_err());
        let bad = [
            Predicate {
                attribute: Some(Attribute::new(":db/ident").unwrap()),
                ..Predicate::default()
            },
            Predicate {
                agent: Some(String::new()),
                ..Predicate::default()
            },
            Predicate {
                before_tx: Some(TxId(0)),
                ..Predicate::default()
            },
        ];
        for p in bad {
            assert!(request(p.clone()).validate().is_err(), "{p:?}");
        }
    }

    #[test]
    fn a_ranges_limit_is_bounded_whatever_the_entry_says() {
        let range = |limit| RedactRange {
            first_tx: None,
            from_key: vec![1],
            through_key: vec![2],
            limit,
        };
        assert_eq!(range(0).applied_limit(), 1);
        assert_eq!(range(u32::MAX).applied_limit(), 1_000);
    }
}
