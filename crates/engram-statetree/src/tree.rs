//! The map itself: an immutable trie whose versions share every node they have in common, so
//! keeping the map as of an earlier write costs only the nodes written since.

use std::sync::Arc;

use crate::hash::{branch_hash, empty_root, leaf_hash};
use crate::key::{Digest, Key, bit, common_bits, has_prefix, masked};
use crate::proof::{End, KeyProof, PrefixEnd, PrefixProof, Step};

/// A map from 256-bit keys to 32-byte value digests whose root commits to every pair.
///
/// Cloning is O(1) and the clone is a version: writes to one never show in the other.
#[derive(Clone, Default)]
pub struct StateTree {
    root: Option<Node>,
    len: u64,
}

#[derive(Clone)]
enum Node {
    Leaf(Arc<Leaf>),
    Branch(Arc<Branch>),
}

#[derive(Clone)]
struct Leaf {
    key: Key,
    value: Digest,
    hash: Digest,
}

#[derive(Clone)]
struct Branch {
    /// The first bit where the keys below differ; those with a 0 there are on the left.
    split: u8,
    /// The bits every key below shares, the rest zero.
    prefix: Key,
    hash: Digest,
    children: [Node; 2],
}

impl Node {
    fn leaf(key: Key, value: Digest) -> Node {
        Node::Leaf(Arc::new(Leaf {
            hash: leaf_hash(&key, &value),
            key,
            value,
        }))
    }

    /// The branch splitting at `split` over `left` and `right`, whose keys begin as `any_key`.
    fn branch(split: u16, any_key: &Key, left: Node, right: Node) -> Node {
        let split = split as u8;
        Node::Branch(Arc::new(Branch {
            hash: branch_hash(split, any_key, &left.hash(), &right.hash()),
            prefix: masked(any_key, u16::from(split)),
            split,
            children: [left, right],
        }))
    }

    fn hash(&self) -> Digest {
        match self {
            Node::Leaf(l) => l.hash,
            Node::Branch(b) => b.hash,
        }
    }

    fn collect(&self, out: &mut Vec<(Key, Digest)>) {
        match self {
            Node::Leaf(l) => out.push((l.key, l.value)),
            Node::Branch(b) => {
                b.children[0].collect(out);
                b.children[1].collect(out);
            }
        }
    }

    /// Sets `key` to what `next` makes of the value it holds (`None`: it holds none), below this
    /// node and in one walk; `next` answering `None` leaves the map as it was. In place: a node
    /// another version shares is copied first (`Arc::make_mut`), one only this version holds is
    /// changed where it is, so the writes of one apply group copy each node once at most.
    fn upsert(
        &mut self,
        key: &Key,
        next: impl FnOnce(Option<&Digest>) -> Option<Digest>,
    ) -> (Inserted, Option<Digest>) {
        // Where the key goes, decided on a shared borrow; the change made after it.
        let (split_at, side) = match &*self {
            Node::Leaf(l) if l.key == *key => {
                let Some(value) = next(Some(&l.value)) else {
                    return (Inserted::Unchanged, None);
                };
                if l.value == value {
                    return (Inserted::Unchanged, Some(value));
                }
                *self = Node::leaf(*key, value);
                return (Inserted::Replaced, Some(value));
            }
            Node::Leaf(l) => (Some(common_bits(&l.key, key)), 0),
            Node::Branch(b) => {
                let common = common_bits(key, &b.prefix);
                if common < u16::from(b.split) {
                    // The key leaves this branch's prefix above its split: a new branch there.
                    (Some(common), 0)
                } else {
                    (None, bit(key, u16::from(b.split)))
                }
            }
        };
        if let Some(split) = split_at {
            let Some(value) = next(None) else {
                return (Inserted::Unchanged, None);
            };
            let existing = self.clone();
            *self = Node::pair(split, existing, Node::leaf(*key, value), key);
            return (Inserted::Added, Some(value));
        }
        let Node::Branch(b) = self else {
            unreachable!("a leaf is handled above")
        };
        let b = Arc::make_mut(b);
        let (outcome, value) = b.children[side].upsert(key, next);
        if outcome != Inserted::Unchanged {
            b.hash = branch_hash(b.split, &b.prefix, &b.children[0].hash(), &b.children[1].hash());
        }
        (outcome, value)
    }

    /// A branch at `split` over `existing` and `new`, placed by `new_key`'s bit there.
    fn pair(split: u16, existing: Node, new: Node, new_key: &Key) -> Node {
        if bit(new_key, split) == 0 {
            Node::branch(split, new_key, new, existing)
        } else {
            Node::branch(split, new_key, existing, new)
        }
    }

    fn remove(&self, key: &Key) -> Removed {
        match self {
            Node::Leaf(l) if l.key == *key => Removed::Gone(l.value),
            Node::Leaf(_) => Removed::Absent,
            Node::Branch(b) => {
                if common_bits(key, &b.prefix) < u16::from(b.split) {
                    return Removed::Absent;
                }
                let side = bit(key, u16::from(b.split));
                match b.children[side].remove(key) {
                    Removed::Absent => Removed::Absent,
                    // One child left: it takes the branch's place (a branch has two children).
                    Removed::Gone(value) => Removed::Replaced(b.children[1 - side].clone(), value),
                    Removed::Replaced(child, value) => Removed::Replaced(b.with_child(side, child), value),
                }
            }
        }
    }
}

impl Branch {
    fn with_child(&self, side: usize, child: Node) -> Node {
        let mut children = self.children.clone();
        children[side] = child;
        let [left, right] = children;
        Node::branch(u16::from(self.split), &self.prefix, left, right)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Inserted {
    Unchanged,
    Replaced,
    Added,
}

enum Removed {
    Absent,
    Gone(Digest),
    Replaced(Node, Digest),
}

impl StateTree {
    pub fn new() -> StateTree {
        StateTree::default()
    }

    /// The map holding these pairs, in any order; a key given twice keeps its last value.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (Key, Digest)>) -> StateTree {
        let mut sorted: Vec<(Key, Digest)> = pairs.into_iter().collect();
        // Stable, so of one key's pairs the last stays last and wins below.
        sorted.sort_by_key(|a| a.0);
        let mut unique: Vec<(Key, Digest)> = Vec::with_capacity(sorted.len());
        for pair in sorted {
            match unique.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => unique.push(pair),
            }
        }
        StateTree {
            len: unique.len() as u64,
            root: (!unique.is_empty()).then(|| build(&unique)),
        }
    }

    /// The root: a digest of every pair the map holds, and of nothing else.
    pub fn root(&self) -> Digest {
        self.root.as_ref().map_or_else(empty_root, Node::hash)
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, key: &Key) -> Option<Digest> {
        let mut node = self.root.as_ref()?;
        loop {
            match node {
                Node::Leaf(l) => return (l.key == *key).then_some(l.value),
                Node::Branch(b) => {
                    if common_bits(key, &b.prefix) < u16::from(b.split) {
                        return None;
                    }
                    node = &b.children[bit(key, u16::from(b.split))];
                }
            }
        }
    }

    /// Sets `key` to `value`. Versions cloned before keep what they held.
    pub fn insert(&mut self, key: Key, value: Digest) {
        self.update(key, |_| Some(value));
    }

    /// Sets `key` to what `next` makes of the value it holds (`None` when it holds none), and
    /// returns the value set; `next` answering `None` leaves the map as it was. One walk down
    /// the path where [`get`](Self::get) then [`insert`](Self::insert) would take two. Versions
    /// cloned before keep what they held.
    pub fn update(
        &mut self,
        key: Key,
        next: impl FnOnce(Option<&Digest>) -> Option<Digest>,
    ) -> Option<Digest> {
        match &mut self.root {
            None => {
                let value = next(None)?;
                self.root = Some(Node::leaf(key, value));
                self.len = 1;
                Some(value)
            }
            Some(root) => {
                let (outcome, value) = root.upsert(&key, next);
                if outcome == Inserted::Added {
                    self.len += 1;
                }
                value
            }
        }
    }

    /// Removes `key`, returning what it held.
    pub fn remove(&mut self, key: &Key) -> Option<Digest> {
        match self.root.as_ref()?.remove(key) {
            Removed::Absent => None,
            Removed::Gone(value) => {
                self.root = None;
                self.len = 0;
                Some(value)
            }
            Removed::Replaced(root, value) => {
                self.root = Some(root);
                self.len -= 1;
                Some(value)
            }
        }
    }

    /// Every pair, ascending by key.
    pub fn pairs(&self) -> Vec<(Key, Digest)> {
        let mut out = Vec::with_capacity(self.len as usize);
        if let Some(root) = &self.root {
            root.collect(&mut out);
        }
        out
    }

    /// What the map holds at `key` (or that it holds nothing), provably against [`root`](Self::root).
    pub fn prove(&self, key: &Key) -> KeyProof {
        let mut steps = Vec::new();
        let Some(mut node) = self.root.as_ref() else {
            return KeyProof {
                steps,
                end: End::Empty,
            };
        };
        loop {
            match node {
                Node::Leaf(l) => {
                    return KeyProof {
                        steps,
                        end: End::Leaf {
                            key: l.key,
                            value: l.value,
                        },
                    };
                }
                Node::Branch(b) => {
                    if common_bits(key, &b.prefix) < u16::from(b.split) {
                        return KeyProof {
                            steps,
                            end: branch_end(b),
                        };
                    }
                    let side = bit(key, u16::from(b.split));
                    steps.push(Step {
                        split: b.split,
                        sibling: b.children[1 - side].hash(),
                    });
                    node = &b.children[side];
                }
            }
        }
    }

    /// Every pair whose key begins with the first `bits` bits of `prefix` (or that there is
    /// none), provably against [`root`](Self::root): the whole subtree is in the proof.
    pub fn prove_prefix(&self, prefix: &Key, bits: u16) -> PrefixProof {
        let bits = bits.min(crate::key::KEY_BITS);
        let prefix = masked(prefix, bits);
        let mut steps = Vec::new();
        let Some(mut node) = self.root.as_ref() else {
            return PrefixProof {
                steps,
                end: PrefixEnd::Outside(End::Empty),
            };
        };
        loop {
            match node {
                Node::Leaf(l) => {
                    let end = if has_prefix(&l.key, &prefix, bits) {
                        PrefixEnd::Subtree(vec![(l.key, l.value)])
                    } else {
                        PrefixEnd::Outside(End::Leaf {
                            key: l.key,
                            value: l.value,
                        })
                    };
                    return PrefixProof { steps, end };
                }
                Node::Branch(b) => {
                    let split = u16::from(b.split);
                    if common_bits(&prefix, &b.prefix) < split.min(bits) {
                        return PrefixProof {
                            steps,
                            end: PrefixEnd::Outside(branch_end(b)),
                        };
                    }
                    if split >= bits {
                        let mut leaves = Vec::new();
                        node.collect(&mut leaves);
                        return PrefixProof {
                            steps,
                            end: PrefixEnd::Subtree(leaves),
                        };
                    }
                    let side = bit(&prefix, split);
                    steps.push(Step {
                        split: b.split,
                        sibling: b.children[1 - side].hash(),
                    });
                    node = &b.children[side];
                }
            }
        }
    }
}

fn branch_end(b: &Branch) -> End {
    End::Branch {
        split: b.split,
        prefix: b.prefix,
        left: b.children[0].hash(),
        right: b.children[1].hash(),
    }
}

/// The trie of sorted, distinct, non-empty `pairs` (the shape `shape::subtree_hash` hashes).
fn build(pairs: &[(Key, Digest)]) -> Node {
    match pairs {
        [(key, value)] => Node::leaf(*key, *value),
        _ => {
            let (first, last) = (&pairs[0].0, &pairs[pairs.len() - 1].0);
            let split = common_bits(first, last);
            let at = pairs.partition_point(|(k, _)| bit(k, split) == 0);
            Node::branch(split, first, build(&pairs[..at]), build(&pairs[at..]))
        }
    }
}
