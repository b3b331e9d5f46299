//! The operation history: every client operation as an invoke and a return, in the total
//! order in which the simulation observed them.

use std::sync::{Arc, Mutex};

/// A register: one entity's `reg/v` attribute.
pub type Key = usize;

/// What a client asked for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// Assert `value` (unconditionally).
    Write { key: Key, value: i64 },
    /// Assert `value` if the register currently holds `expected` (`None`: empty).
    Cas {
        key: Key,
        expected: Option<i64>,
        value: i64,
    },
    /// A linearizable read of the current value.
    Read { key: Key },
    /// A read as of transaction `as_of_tx`.
    ReadAsOf { key: Key, as_of_tx: u64 },
}

impl Call {
    pub fn key(&self) -> Key {
        match self {
            Call::Write { key, .. }
            | Call::Cas { key, .. }
            | Call::Read { key }
            | Call::ReadAsOf { key, .. } => *key,
        }
    }
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The write committed as transaction `tx`.
    Written { tx: u64 },
    /// The compare-and-set was refused: the register held something else.
    CasFailed,
    /// A read returned `value` (`None`: no current value).
    Value { value: Option<i64> },
    /// No definite answer (timeouts, no leader) before the client gave up: the write may or
    /// may not have taken effect. Reads that end like this have no effect and are dropped.
    Unknown,
}

/// One completed operation.
#[derive(Clone, Debug)]
pub struct Op {
    pub client: usize,
    pub call: Call,
    pub outcome: Outcome,
    /// Position of the invoke and the return in the history's event order.
    pub invoked_at: u64,
    pub returned_at: u64,
    /// Simulated milliseconds since the start, for reports.
    pub invoked_ms: u64,
    pub returned_ms: u64,
}

#[derive(Default)]
struct Inner {
    next_event: u64,
    ops: Vec<Op>,
}

/// The shared recorder. Clients take an event number when they invoke (before the request
/// leaves) and another when they return (after the answer arrived); the numbers are taken
/// under one lock, so they are a real-time order, in a simulation and on real threads alike.
#[derive(Clone, Default)]
pub struct History {
    inner: Arc<Mutex<Inner>>,
}

/// An operation in flight.
pub struct Pending {
    client: usize,
    call: Call,
    invoked_at: u64,
    invoked_ms: u64,
}

impl History {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn invoke(&self, client: usize, call: Call, now_ms: u64) -> Pending {
        let mut inner = self.lock();
        let invoked_at = inner.next_event;
        inner.next_event += 1;
        Pending {
            client,
            call,
            invoked_at,
            invoked_ms: now_ms,
        }
    }

    pub fn complete(&self, pending: Pending, outcome: Outcome, now_ms: u64) {
        let mut inner = self.lock();
        let returned_at = inner.next_event;
        inner.next_event += 1;
        inner.ops.push(Op {
            client: pending.client,
            call: pending.call,
            outcome,
            invoked_at: pending.invoked_at,
            returned_at,
            invoked_ms: pending.invoked_ms,
            returned_ms: now_ms,
        });
    }

    pub fn ops(&self) -> Vec<Op> {
        let mut ops = self.lock().ops.clone();
        ops.sort_by_key(|o| o.invoked_at);
        ops
    }
}
