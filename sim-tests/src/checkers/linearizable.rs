//! **I6 linearizable**: writes and (default, linearizable) reads behave as if each took effect
//! at one instant between its invoke and its return, per register. The checker itself lives in
//! `engram-lincheck`, shared with the chaos run against real containers.

use std::collections::BTreeSet;

use super::Violation;
use crate::history::{Key, Op};

pub const NAME: &str = "I6 linearizable";

pub fn check(ops: &[Op], committed: &BTreeSet<(Key, i64)>) -> Vec<Violation> {
    engram_lincheck::linearizable::check(ops, committed)
        .into_iter()
        .map(|detail| Violation::new(NAME, detail))
        .collect()
}
