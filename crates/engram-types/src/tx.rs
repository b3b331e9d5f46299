use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    Attribute, AttributeDef, BranchName, BranchOp, EntityId, Hash, Namespace, Op, Provenance, TxId,
    ValidationError, Value,
};

/// Names an entity in a transaction: an existing id, or a temporary name that the state
/// machine resolves to a freshly allocated id (the same name within one transaction means the
/// same new entity).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub enum EntityRef {
    Id(EntityId),
    Temp(String),
    /// The entity whose current value of a unique attribute is this value (a lookup ref).
    Lookup(Attribute, Value),
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

/// What an agent asks the cluster to record, atomically. A transaction carries exactly one
/// kind of change: data `ops` (on main, or on `branch`), `schema` declarations, or one
/// `branch_op`.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct TxRequest {
    pub namespace: Namespace,
    /// Where `ops` are written: `None` is main.
    pub branch: Option<BranchName>,
    pub ops: Vec<TxOp>,
    /// Attributes to declare or migrate (forward-only; see the engine's schema rules).
    pub schema: Vec<AttributeDef>,
    pub branch_op: Option<BranchOp>,
    pub preconditions: Vec<Precondition>,
    /// A retry carrying the same key (in the same namespace) gets the original receipt back
    /// instead of applying twice; the same key on a request with other content is refused.
    pub idempotency_key: Option<String>,
    pub provenance: Provenance,
}

impl TxRequest {
    pub const MAX_OPS: usize = 10_000;
    pub const MAX_KEY_BYTES: usize = 256;
    pub const MAX_SCHEMA_DEFS: usize = 1_000;

    /// A data transaction on main: `ops` only.
    pub fn data(namespace: Namespace, ops: Vec<TxOp>, provenance: Provenance) -> TxRequest {
        TxRequest {
            namespace,
            branch: None,
            ops,
            schema: Vec::new(),
            branch_op: None,
            preconditions: Vec::new(),
            idempotency_key: None,
            provenance,
        }
    }

    /// Structural checks that need no state. Everything that needs state (unknown entities,
    /// type agreement, preconditions) is checked deterministically at apply.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let kinds = usize::from(!self.ops.is_empty())
            + usize::from(!self.schema.is_empty())
            + usize::from(self.branch_op.is_some());
        if kinds == 0 {
            return Err(ValidationError::Transaction(
                "a transaction needs at least one op, schema declaration or branch operation".into(),
            ));
        }
        if kinds > 1 {
            return Err(ValidationError::Transaction(
                "a transaction carries data ops, schema declarations or one branch operation, not a mix"
                    .into(),
            ));
        }
        if self.branch.is_some() && self.ops.is_empty() {
            return Err(ValidationError::Transaction(
                "only data ops can be written to a branch; schema and branch operations go to main".into(),
            ));
        }
        if !self.preconditions.is_empty() && self.ops.is_empty() {
            return Err(ValidationError::Transaction(
                "preconditions guard data ops only".into(),
            ));
        }
        if self.schema.len() > Self::MAX_SCHEMA_DEFS {
            return Err(ValidationError::Transaction(format!(
                "{} schema declarations exceed the limit of {}",
                self.schema.len(),
                Self::MAX_SCHEMA_DEFS
            )));
        }
        let mut idents = std::collections::BTreeSet::new();
        for def in &self.schema {
            def.validate()?;
            if !idents.insert(&def.ident) {
                return Err(ValidationError::Schema(format!(
                    "{} is declared twice in one transaction",
                    def.ident
                )));
            }
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
            if op.attribute.is_reserved() {
                return Err(ValidationError::Transaction(format!(
                    "attribute {} is reserved for the schema and branches; use a schema declaration or a branch operation",
                    op.attribute
                )));
            }
            if let EntityRef::Lookup(attribute, value) = &op.entity {
                value.validate()?;
                if attribute.is_reserved() {
                    return Err(ValidationError::Transaction(format!(
                        "lookup attribute {attribute} is reserved"
                    )));
                }
            }
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
        TxRequest::data(
            Namespace::new("ns").unwrap(),
            vec![TxOp {
                op: Op::Assert,
                entity: EntityRef::Temp("t".into()),
                attribute: Attribute::new(":a/b").unwrap(),
                value: Value::I64(1),
                valid_from_ns: None,
                valid_to_ns: None,
            }],
            Provenance {
                agent: "a".into(),
                confidence: 1.0,
                ..Default::default()
            },
        )
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
        let mut reserved = request();
        reserved.ops[0].attribute = Attribute::new(":db/ident").unwrap();
        assert!(reserved.validate().unwrap_err().to_string().contains("reserved"));
    }

    #[test]
    fn one_kind_of_change_per_transaction() {
        let def = AttributeDef::new(Attribute::new(":a/b").unwrap(), crate::ValueType::I64);
        let mut mixed = request();
        mixed.schema.push(def.clone());
        assert!(mixed.validate().unwrap_err().to_string().contains("not a mix"));
        let mut schema = request();
        schema.ops.clear();
        schema.schema = vec![def.clone(), def];
        assert!(
            schema
                .validate()
                .unwrap_err()
                .to_string()
                .contains("declared twice")
        );
        schema.schema.pop();
        schema.validate().unwrap();
        schema.branch = Some(BranchName::new("b").unwrap());
        assert!(schema.validate().unwrap_err().to_string().contains("branch"));
        let mut on_branch = request();
        on_branch.branch = Some(BranchName::new("b").unwrap());
        on_branch.validate().unwrap();
    }
}
