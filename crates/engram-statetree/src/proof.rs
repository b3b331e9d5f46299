//! Proofs and their verification: the path from the root towards a key (or a prefix), and
//! where it ends.
//!
//! A path is a list of steps from the root down: each a branch on the way, given by the bit it
//! splits at and its other child's hash. The branch's prefix is not carried: it is the queried
//! key's (or prefix's) first bits, so a proof cannot move a branch elsewhere without changing
//! the root. Where the path ends says what the map holds there:
//!
//! - **a key proof** ([`KeyProof`]) ends at the key's leaf (present, with its value), at
//!   another key's leaf or at a branch whose prefix the key does not share (absent: in the one
//!   trie a key set has, the key would be there), or at an empty map;
//! - **a prefix proof** ([`PrefixProof`]) ends at the subtree holding every key under the prefix,
//!   listed whole (the verifier rebuilds its hash, so a key left out or added changes the root),
//!   or, as a key proof, at a node showing that no key has the prefix.
//!
//! Encoding (little to parse, nothing variable but counts): format byte `1`; a `u16` count
//! of steps, each `split (u8) ‖ sibling (32)`; then the end: `0` empty, `1` leaf `key ‖ value`,
//! `2` branch `split ‖ prefix ‖ left ‖ right`, and for a prefix proof `3` subtree: a `u32`
//! count, then each `key ‖ value`. All integers big-endian.

use crate::error::ProofError;
use crate::hash::{branch_hash, empty_root, leaf_hash};
use crate::key::{Digest, Key, bit, common_bits, has_prefix, masked};
use crate::shape::subtree_hash;

/// The encoding's format byte.
pub const PROOF_FORMAT: u8 = 1;

/// One branch on the path: where it splits, and the hash of its child off the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub split: u8,
    pub sibling: Digest,
}

/// The node a path ends at, when that node is not what was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// The map is empty.
    Empty,
    /// A leaf: the queried key's, or another key's that takes its place.
    Leaf { key: Key, value: Digest },
    /// A branch whose prefix leaves the queried path before its split bit.
    Branch {
        split: u8,
        prefix: Key,
        left: Digest,
        right: Digest,
    },
}

/// What the map holds at one key, with the path that shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyProof {
    pub steps: Vec<Step>,
    pub end: End,
}

/// Where a prefix proof ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixEnd {
    /// No key has the prefix: the node the path ends at shows it ([`End`]).
    Outside(End),
    /// Every key under the prefix, ascending, with its value: the whole subtree.
    Subtree(Vec<(Key, Digest)>),
}

/// Every key of the map under a prefix (or that there is none), with the path that shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixProof {
    pub steps: Vec<Step>,
    pub end: PrefixEnd,
}

impl KeyProof {
    /// The value `key` holds under `root` (`None`: absent), or why the proof does not show it.
    pub fn verify(&self, root: &Digest, key: &Key) -> Result<Option<Digest>, ProofError> {
        check_steps(&self.steps, None)?;
        let (hash, found) = end_hash(&self.end, &self.steps, key, crate::key::KEY_BITS)?;
        fold(hash, &self.steps, key, root)?;
        Ok(found)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 + self.steps.len() * 33 + 129);
        write_steps(&mut out, &self.steps);
        write_end(&mut out, &self.end);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<KeyProof, ProofError> {
        let mut r = Reader(bytes);
        let steps = read_steps(&mut r)?;
        let end = match r.u8("end tag")? {
            tag @ 0..=2 => read_end(&mut r, tag)?,
            tag => return Err(ProofError::Tag { what: "end", tag }),
        };
        r.finish()?;
        Ok(KeyProof { steps, end })
    }
}

impl PrefixProof {
    /// Every key under the first `bits` bits of `prefix` in the map whose root is `root`, with
    /// its value, ascending; or why the proof does not show them.
    pub fn verify(&self, root: &Digest, prefix: &Key, bits: u16) -> Result<Vec<(Key, Digest)>, ProofError> {
        let bits = bits.min(crate::key::KEY_BITS);
        let prefix = masked(prefix, bits);
        check_steps(&self.steps, Some(bits))?;
        let (hash, leaves) = match &self.end {
            PrefixEnd::Outside(end) => {
                let (hash, _) = end_hash(end, &self.steps, &prefix, bits)?;
                if let End::Leaf { key, .. } = end
                    && has_prefix(key, &prefix, bits)
                {
                    return Err(ProofError::LeafNotOutside);
                }
                (hash, Vec::new())
            }
            PrefixEnd::Subtree(leaves) => {
                if leaves.is_empty() {
                    return Err(ProofError::EmptySubtree);
                }
                for (index, (key, _)) in leaves.iter().enumerate() {
                    if !has_prefix(key, &prefix, bits) {
                        return Err(ProofError::OutsidePrefix { index });
                    }
                    if index > 0 && leaves[index - 1].0 >= *key {
                        return Err(ProofError::Unsorted { index });
                    }
                }
                // The keys share the prefix, and every step splits inside it (checked), so the
                // subtree they form hangs where the path ends.
                (subtree_hash(leaves), leaves.clone())
            }
        };
        fold(hash, &self.steps, &prefix, root)?;
        Ok(leaves)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 + self.steps.len() * 33 + 129);
        write_steps(&mut out, &self.steps);
        match &self.end {
            PrefixEnd::Outside(end) => write_end(&mut out, end),
            PrefixEnd::Subtree(leaves) => {
                out.push(3);
                out.extend_from_slice(&(leaves.len() as u32).to_be_bytes());
                for (key, value) in leaves {
                    out.extend_from_slice(key);
                    out.extend_from_slice(value);
                }
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<PrefixProof, ProofError> {
        let mut r = Reader(bytes);
        let steps = read_steps(&mut r)?;
        let end = match r.u8("end tag")? {
            tag @ 0..=2 => PrefixEnd::Outside(read_end(&mut r, tag)?),
            3 => {
                let count = r.u32("subtree key count")? as usize;
                // Each key takes 64 bytes: a count the bytes cannot hold is refused before
                // anything is allocated for it.
                if count > r.0.len() / 64 {
                    return Err(ProofError::Truncated {
                        what: "the subtree's keys",
                    });
                }
                let mut leaves = Vec::with_capacity(count);
                for _ in 0..count {
                    leaves.push((r.array("subtree key")?, r.array("subtree value")?));
                }
                PrefixEnd::Subtree(leaves)
            }
            tag => return Err(ProofError::Tag { what: "end", tag }),
        };
        r.finish()?;
        Ok(PrefixProof { steps, end })
    }
}

/// Steps split at strictly increasing bits (each branch is below the one before), and for a
/// prefix proof every one inside the prefix: a branch at or past it holds the whole subtree.
fn check_steps(steps: &[Step], prefix_bits: Option<u16>) -> Result<(), ProofError> {
    for (i, step) in steps.iter().enumerate() {
        if i > 0 && step.split <= steps[i - 1].split {
            return Err(ProofError::StepOrder {
                step: i,
                split: step.split,
                above: steps[i - 1].split,
            });
        }
        if let Some(bits) = prefix_bits
            && u16::from(step.split) >= bits
        {
            return Err(ProofError::StepInsidePrefix {
                step: i,
                split: step.split,
                bits,
            });
        }
    }
    Ok(())
}

/// The hash of the node a path ends at, after checking it belongs where the path puts it;
/// with the value found when it is the leaf of `path` itself.
fn end_hash(
    end: &End,
    steps: &[Step],
    path: &Key,
    path_bits: u16,
) -> Result<(Digest, Option<Digest>), ProofError> {
    // The node hangs below the last step, on the path's side: it shares the path's bits up to
    // and including that step's split bit.
    let shared = steps.last().map_or(0, |s| u16::from(s.split) + 1);
    match end {
        End::Empty => {
            if !steps.is_empty() {
                return Err(ProofError::EmptyWithSteps { steps: steps.len() });
            }
            Ok((empty_root(), None))
        }
        End::Leaf { key, value } => {
            let common = common_bits(key, path);
            if common < shared {
                return Err(ProofError::OffPath {
                    node: "leaf",
                    at: common,
                });
            }
            let found = (path_bits == crate::key::KEY_BITS && key == path).then_some(*value);
            Ok((leaf_hash(key, value), found))
        }
        End::Branch {
            split,
            prefix,
            left,
            right,
        } => {
            if *prefix != masked(prefix, u16::from(*split)) {
                return Err(ProofError::PrefixNotCanonical { split: *split });
            }
            let common = common_bits(prefix, path);
            if common < shared || u16::from(*split) < shared {
                return Err(ProofError::OffPath {
                    node: "branch",
                    at: common.min(u16::from(*split)),
                });
            }
            // It must leave the path before both its split and the path's end; otherwise the
            // path goes on below it and the proof stopped early.
            if common >= u16::from(*split).min(path_bits) {
                return Err(ProofError::StopsEarly { split: *split });
            }
            Ok((branch_hash(*split, prefix, left, right), None))
        }
    }
}

/// Hashes `hash` up the steps, with each branch's prefix taken from `path`, and compares the
/// result with `root`.
fn fold(mut hash: Digest, steps: &[Step], path: &Key, root: &Digest) -> Result<(), ProofError> {
    for step in steps.iter().rev() {
        let (left, right) = if bit(path, u16::from(step.split)) == 0 {
            (hash, step.sibling)
        } else {
            (step.sibling, hash)
        };
        hash = branch_hash(step.split, path, &left, &right);
    }
    if hash != *root {
        return Err(ProofError::RootMismatch {
            computed: hex(&hash),
            expected: hex(root),
        });
    }
    Ok(())
}

fn hex(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_steps(out: &mut Vec<u8>, steps: &[Step]) {
    out.push(PROOF_FORMAT);
    out.extend_from_slice(&(steps.len() as u16).to_be_bytes());
    for s in steps {
        out.push(s.split);
        out.extend_from_slice(&s.sibling);
    }
}

fn write_end(out: &mut Vec<u8>, end: &End) {
    match end {
        End::Empty => out.push(0),
        End::Leaf { key, value } => {
            out.push(1);
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        End::Branch {
            split,
            prefix,
            left,
            right,
        } => {
            out.extend_from_slice(&[2, *split]);
            out.extend_from_slice(prefix);
            out.extend_from_slice(left);
            out.extend_from_slice(right);
        }
    }
}

fn read_steps(r: &mut Reader<'_>) -> Result<Vec<Step>, ProofError> {
    let format = r.u8("format")?;
    if format != PROOF_FORMAT {
        return Err(ProofError::Format {
            found: format,
            supported: PROOF_FORMAT,
        });
    }
    let count = r.u16("step count")? as usize;
    // At most one branch per bit: a longer path is not a path of this trie.
    if count > 256 || count > r.0.len() / 33 {
        return Err(ProofError::Truncated { what: "the steps" });
    }
    let mut steps = Vec::with_capacity(count);
    for _ in 0..count {
        steps.push(Step {
            split: r.u8("step split")?,
            sibling: r.array("step sibling")?,
        });
    }
    Ok(steps)
}

fn read_end(r: &mut Reader<'_>, tag: u8) -> Result<End, ProofError> {
    Ok(match tag {
        0 => End::Empty,
        1 => End::Leaf {
            key: r.array("leaf key")?,
            value: r.array("leaf value")?,
        },
        _ => End::Branch {
            split: r.u8("branch split")?,
            prefix: r.array("branch prefix")?,
            left: r.array("branch left")?,
            right: r.array("branch right")?,
        },
    })
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ProofError> {
        let (head, tail) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(ProofError::Truncated { what })?;
        self.0 = tail;
        Ok(*head)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, ProofError> {
        Ok(self.take::<1>(what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, ProofError> {
        Ok(u16::from_be_bytes(self.take(what)?))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, ProofError> {
        Ok(u32::from_be_bytes(self.take(what)?))
    }
    fn array(&mut self, what: &'static str) -> Result<[u8; 32], ProofError> {
        self.take(what)
    }
    fn finish(self) -> Result<(), ProofError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ProofError::TrailingBytes { extra: self.0.len() })
        }
    }
}
