//! What the recall tests share: a namespace and its scope, datoms, and a small deterministic
//! generator for the property tests.

// Each test binary uses some of these.
#![allow(dead_code)]

use engram_recall::Scope;
use engram_types::{Attribute, Datom, EntityId, Namespace, Op, Provenance, Status, TxId, Value};

pub fn ns() -> Namespace {
    Namespace::new("team/a").expect("a valid namespace")
}

pub fn scope() -> Scope {
    Scope {
        namespace: ns(),
        branch: None,
    }
}

/// A datom of transaction `tx` in `team/a`, by `agent`, confidence 0.5, a candidate.
pub fn datom(tx: u64, op: Op, entity: u64, attribute: &str, value: Value, agent: &str) -> Datom {
    Datom {
        namespace: ns(),
        branch: None,
        entity: EntityId(entity),
        attribute: Attribute::new(attribute).expect("a valid attribute"),
        value,
        op,
        valid_from_ns: 0,
        valid_to_ns: None,
        tx: TxId(tx),
        provenance: Provenance {
            agent: agent.into(),
            confidence: 0.5,
            status: Status::Candidate,
            ..Provenance::default()
        },
        salt: None,
    }
}

pub fn text(s: &str) -> Value {
    Value::String(s.into())
}

/// A small deterministic generator (xorshift64*), so the properties need no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
