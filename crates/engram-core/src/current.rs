//! The current-claims index: for each slot (entity, attribute) on main, the claims that are
//! live after its whole history, kept in one `U` row that every write to the slot rewrites.
//!
//! A write checks what a slot holds (a retraction must name a held value, a precondition
//! compares the current value, a unique value must not be held elsewhere). Without this row
//! that check folds the slot's whole history, so a key rewritten a million times costs a
//! million datom reads per write. The row holds only what survives the fold: under
//! cardinality one, each agent's latest assertion not retracted since (at most one per
//! agent); under cardinality many, the latest assertion of each value not retracted since.
//! Its size follows the slot's current state, not its history.
//!
//! The row is replicated state like the other indexes: it is a pure function of the slot's
//! datoms, written in the transaction's batch and counted in the state digest. It records the
//! cardinality it was folded under; a schema change of that cardinality makes the row stale,
//! and the next write to the slot folds the history once under the new cardinality. A slot
//! with no row (fewer than [`ROW_AFTER_DATOMS`] datoms, or written before this index existed)
//! is folded from its history the same way. The store scrub checks every row against its
//! slot's history. A node run for a while by a build without this index and then by one with
//! it again would keep rows the older build did not update: the scrub reports them.
//!
//! Must not depend on: the planner or the reads (they use this, not the other way round).

use engram_types::{Cardinality, Datom, Op};

use crate::CoreError;

/// A slot gets its row once it has this many datoms (history and the writing transaction's);
/// from then on every write keeps it current. Below this, reading the history costs about
/// what reading the row does, and writing the row would be pure cost: most slots are written
/// a few times (a new entity's first facts).
pub const ROW_AFTER_DATOMS: usize = 8;

/// The stored form's version byte.
const FORMAT: u8 = 1;

/// One slot's live claims, folded under `cardinality`, oldest claim first.
#[derive(Clone, Debug, PartialEq)]
pub struct CurrentRow {
    pub cardinality: Cardinality,
    pub claims: Vec<Datom>,
}

impl CurrentRow {
    /// An empty slot under `cardinality`.
    pub fn empty(cardinality: Cardinality) -> CurrentRow {
        CurrentRow {
            cardinality,
            claims: Vec::new(),
        }
    }

    /// The row of a slot with these datoms (any order; folded in transaction order).
    pub fn fold_history(cardinality: Cardinality, datoms: &[Datom]) -> CurrentRow {
        let mut ordered: Vec<&Datom> = datoms.iter().collect();
        // Stable: datoms of one transaction keep their order (their seq).
        ordered.sort_by_key(|d| d.tx);
        let mut row = CurrentRow::empty(cardinality);
        for d in ordered {
            row.fold(d.clone());
        }
        row
    }

    /// Folds one more datom of the slot, newer than every datom folded so far.
    pub fn fold(&mut self, d: Datom) {
        if fold_step(&mut self.claims, &d, self.cardinality, |c| c, |_| {}) {
            self.claims.push(d);
        }
    }

    /// The stored form: format, cardinality, claim count, then each claim's canonical
    /// encoding after its length.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(6 + self.claims.len() * 160);
        out.push(FORMAT);
        out.push(match self.cardinality {
            Cardinality::One => 1,
            Cardinality::Many => 2,
        });
        out.extend_from_slice(&(self.claims.len() as u32).to_be_bytes());
        for c in &self.claims {
            let bytes = c.encode();
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<CurrentRow, CoreError> {
        let bad = |why: String| CoreError::corrupt("current-claims row", why);
        let (&format, rest) = bytes.split_first().ok_or_else(|| bad("empty".into()))?;
        if format != FORMAT {
            return Err(bad(format!("format {format}, this build reads {FORMAT}")));
        }
        let (&card, mut rest) = rest.split_first().ok_or_else(|| bad("no cardinality".into()))?;
        let cardinality = match card {
            1 => Cardinality::One,
            2 => Cardinality::Many,
            other => return Err(bad(format!("cardinality byte {other}"))),
        };
        let count = take_u32(&mut rest).ok_or_else(|| bad("no claim count".into()))?;
        // Each claim takes at least its 4-byte length: a count the bytes cannot hold is damage,
        // not an allocation to attempt.
        if count as usize > rest.len() / 4 {
            return Err(bad(format!("{count} claims in {} bytes", rest.len())));
        }
        let mut claims = Vec::with_capacity(count as usize);
        for i in 0..count {
            let len = take_u32(&mut rest).ok_or_else(|| bad(format!("claim {i}: no length")))? as usize;
            if len > rest.len() {
                return Err(bad(format!("claim {i}: {len} bytes, {} left", rest.len())));
            }
            let (datom, tail) = rest.split_at(len);
            claims.push(Datom::decode(datom).map_err(|e| bad(format!("claim {i}: {e}")))?);
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} bytes after the last claim", rest.len())));
        }
        Ok(CurrentRow { cardinality, claims })
    }
}

/// The fold's one rule, over claims of any form (`datom` reads a claim's datom): ends the
/// claims `d` ends, calling `same_value` for each one it ends by matching its value, and
/// answers whether `d` is a claim now (the caller pushes it). [`CurrentRow::fold`] keeps
/// datoms; `crate::value_groups` keeps positions in a slot's history, to learn which datoms
/// the fold matched by value.
pub(crate) fn fold_step<C>(
    claims: &mut Vec<C>,
    d: &Datom,
    cardinality: Cardinality,
    datom: impl Fn(&C) -> &Datom,
    mut same_value: impl FnMut(&C),
) -> bool {
    match (d.op, cardinality) {
        // An agent holds one claim: its latest assertion replaces its earlier one, whatever
        // the values.
        (Op::Assert, Cardinality::One) => {
            claims.retain(|c| datom(c).provenance.agent != d.provenance.agent);
            true
        }
        // A value is held once: its latest assertion stands for it. A retraction ends every
        // claim of its value, whoever made it.
        (Op::Assert, Cardinality::Many) | (Op::Retract, _) => {
            claims.retain(|c| {
                let same = datom(c).value == d.value;
                if same {
                    same_value(c);
                }
                !same
            });
            d.op == Op::Assert
        }
    }
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let (head, tail) = rest.split_first_chunk::<4>()?;
    *rest = tail;
    Some(u32::from_be_bytes(*head))
}

/// One slot's made-up histories, for the tests here and in `crate::value_groups`.
#[cfg(test)]
pub(crate) mod test_slot {
    use engram_types::{Attribute, Datom, EntityId, Namespace, Op, Provenance, Status, TxId, Value};

    /// A datom of entity 7's `:slot/a` in namespace `t`.
    pub(crate) fn datom(tx: u64, op: Op, agent: &str, value: i64) -> Datom {
        Datom {
            namespace: Namespace::new("t").unwrap(),
            branch: None,
            entity: EntityId(7),
            attribute: Attribute::new(":slot/a").unwrap(),
            value: Value::I64(value),
            op,
            valid_from_ns: 0,
            valid_to_ns: None,
            tx: TxId(tx),
            provenance: Provenance {
                agent: agent.into(),
                session: String::new(),
                source: String::new(),
                confidence: 1.0,
                status: Status::Candidate,
            },
            salt: None,
        }
    }

    /// A small deterministic generator, so the histories made with it are the same on every
    /// run.
    pub(crate) struct Lcg(pub(crate) u64);
    impl Lcg {
        pub(crate) fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }
}

#[cfg(test)]
mod tests {
    use engram_types::{Cardinality, Datom, Op};

    use super::test_slot::{Lcg, datom};
    use super::*;
    use crate::reads;

    #[test]
    fn the_fold_keeps_what_the_history_reads_hold() {
        // The row must answer exactly what the planner asked of the whole history before it:
        // the live claims under cardinality one, the values held (latest claim of each) under
        // cardinality many. Checked after every datom of 300 random histories mixing three
        // agents, five values, assertions and retractions.
        let mut rng = Lcg(42);
        for _ in 0..300 {
            let mut history = Vec::new();
            let mut one = CurrentRow::empty(Cardinality::One);
            let mut many = CurrentRow::empty(Cardinality::Many);
            for tx in 1..=(1 + rng.next(40)) {
                let op = if rng.next(4) == 0 { Op::Retract } else { Op::Assert };
                let agent = ["a", "b", "c"][rng.next(3) as usize];
                let d = datom(tx, op, agent, rng.next(5) as i64);
                history.push(d.clone());
                one.fold(d.clone());
                many.fold(d);
                let want_one: Vec<Datom> = reads::claims(&history, Cardinality::One)
                    .into_iter()
                    .cloned()
                    .collect();
                let want_many: Vec<Datom> = reads::holding(&history, Cardinality::Many)
                    .into_iter()
                    .cloned()
                    .collect();
                assert_eq!(one.claims, want_one, "cardinality one after {history:?}");
                assert_eq!(many.claims, want_many, "cardinality many after {history:?}");
                assert_eq!(CurrentRow::fold_history(Cardinality::One, &history), one);
                assert_eq!(CurrentRow::fold_history(Cardinality::Many, &history), many);
            }
        }
    }

    #[test]
    fn a_slot_rewritten_by_one_agent_keeps_one_claim() {
        let mut row = CurrentRow::empty(Cardinality::One);
        for tx in 1..=1000 {
            row.fold(datom(tx, Op::Assert, "a", tx as i64));
        }
        assert_eq!(row.claims, vec![datom(1000, Op::Assert, "a", 1000)]);
        row.fold(datom(1001, Op::Retract, "b", 1000));
        assert!(row.claims.is_empty());
    }

    #[test]
    fn the_row_round_trips_and_damage_is_named() {
        let mut row = CurrentRow::empty(Cardinality::Many);
        row.fold(datom(1, Op::Assert, "a", 1));
        row.fold(datom(2, Op::Assert, "b", 2));
        let bytes = row.encode();
        assert_eq!(CurrentRow::decode(&bytes).unwrap(), row);
        assert_eq!(
            CurrentRow::decode(&CurrentRow::empty(Cardinality::One).encode()).unwrap(),
            CurrentRow::empty(Cardinality::One)
        );
        for (bytes, says) in [
            (Vec::new(), "empty"),
            (vec![9, 1, 0, 0, 0, 0], "format 9"),
            (vec![FORMAT, 3, 0, 0, 0, 0], "cardinality byte 3"),
            (vec![FORMAT, 1, 0, 0, 0, 9], "9 claims in 0 bytes"),
            (bytes[..bytes.len() - 1].to_vec(), "claim 1"),
            ([bytes.as_slice(), &[0]].concat(), "1 bytes after the last claim"),
        ] {
            let err = CurrentRow::decode(&bytes).unwrap_err().to_string();
            assert!(err.contains("current-claims row") && err.contains(says), "{err}");
        }
    }
}
