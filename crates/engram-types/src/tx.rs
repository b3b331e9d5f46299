use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Attribute, EntityId, Hash, Namespace, Op, Provenance, TxId, ValidationError, Value};

/// Names an entity in a transaction: an existing id, or a temporary name that the state
/// machine resolves to a freshly allocated id (the same name within one transaction means the
/// same new entity).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub enum EntityRef {
    Id(EntityId),
    Temp(String),
}

/// One assertion or retraction in a transaction.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct TxOp {
    pub op: Op,
    pub entity: EntityRef,
    pub attribute: Attribute,
    pub value: Value,
    /// Defaults to the transaction time.
    pub valid_from_ns: Option<i64>,
    pub valid_to_ns: Option<i64>,
}

/// A compare-and-set guard: the current value of `attribute` on `entity` must equal
/// `expected` (`None`: the attribute must have no current value) when the transaction
/// applies, or the whole transaction is rejected.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Precondition {
    pub entity: EntityId,
    pub attribute: Attribute,
    pub expected: Option<Value>,
}

/// What an agent asks the cluster to record, atomically.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct TxRequest {
    pub namespace: Namespace,
    pub ops: Vec<TxOp>,
    pub preconditions: Vec<Precondition>,
    /// A retry carrying the same key (in the same namespace) gets the original receipt back
    /// instead of applying twice.
    pub idempotency_key: Option<String>,
    pub provenance: Provenance,
}

impl TxRequest {
    pub const MAX_OPS: usize = 10_000;
    pub const MAX_KEY_BYTES: usize = 256;

    /// Structural checks that need no state. Everything that needs state (unknown entities,
    /// type agreement, preconditions) is checked deterministically at apply.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.ops.is_empty() {
            return Err(ValidationError::Transaction(
                "a transaction needs at least one op".into(),
            ));
        }
        if self.ops.len() > Self::MAX_OPS {
            return Err(ValidationError::Transaction(format!(
                "{} ops exceed the limit of {}",
                self.ops.len(),
                Self::MAX_OPS
            )));
        }
        if let Some(key) = &self.idempotency_key
            && (key.is_empty() || key.len() > Self::MAX_KEY_BYTES)
        {
            return Err(ValidationError::Transaction(
                "idempotency key must be 1..=256 bytes".into(),
            ));
        }
        self.provenance.validate()?;
        for op in &self.ops {
            op.value.validate()?;
            if let EntityRef::Temp(name) = &op.entity
                && (name.is_empty() || name.len() > Self::MAX_KEY_BYTES)
            {
                return Err(ValidationError::Transaction(
                    "temporary entity names must be 1..=256 bytes".into(),
                ));
            }
            if let (Some(from), Some(to)) = (op.valid_from_ns, op.valid_to_ns)
                && to <= from
            {
                return Err(ValidationError::Transaction(format!(
                    "valid_to ({to}) must be after valid_from ({from})"
                )));
            }
            if op.op == Op::Retract && matches!(op.entity, EntityRef::Temp(_)) {
                return Err(ValidationError::Transaction(
                    "cannot retract from a new entity".into(),
                ));
            }
        }
        for pre in &self.preconditions {
            if let Some(v) = &pre.expected {
                v.validate()?;
            }
        }
        Ok(())
    }
}

/// What the client gets back for an applied transaction.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct TxReceipt {
    pub tx: TxId,
    pub tx_time_ns: i64,
    pub datom_hashes: Vec<Hash>,
    /// Position of this transaction's entry in the audit chain (1-based).
    pub audit_index: u64,
    pub audit_hash: Hash,
    /// Ids allocated for the transaction's temporary entity names.
    pub temp_ids: BTreeMap<String, EntityId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> TxRequest {
        TxRequest {
            namespace: Namespace::new("ns").unwrap(),
            ops: vec![TxOp {
                op: Op::Assert,
                entity: EntityRef::Temp("t".into()),
                attribute: Attribute::new(":a/b").unwrap(),
                value: Value::I64(1),
                valid_from_ns: None,
                valid_to_ns: None,
            }],
            preconditions: vec![],
            idempotency_key: None,
            provenance: Provenance {
                agent: "a".into(),
                confidence: 1.0,
                ..Default::default()
            },
        }
    }

    #[test]
    fn structural_validation() {
        request().validate().unwrap();
        let mut empty = request();
        empty.ops.clear();
        assert!(empty.validate().is_err());
        let mut interval = request();
        interval.ops[0].valid_from_ns = Some(5);
        interval.ops[0].valid_to_ns = Some(5);
        assert!(interval.validate().is_err());
        let mut retract_new = request();
        retract_new.ops[0].op = Op::Retract;
        assert!(retract_new.validate().is_err());
        let mut anon = request();
        anon.provenance.agent.clear();
        assert!(anon.validate().is_err());
        let mut sure = request();
        sure.provenance.confidence = 1.5;
        assert!(sure.validate().is_err());
    }
}
