//! What the console checks itself, on the operator's machine, about the audit entries a node
//! serves: each entry's bytes against the hash it is listed under and the link the next entry
//! makes to it, one entry's inclusion in a signed checkpoint's Merkle tree, and the consistency
//! of that checkpoint's tree with the one the console trusts, hash by hash, so the page can
//! show every step of the proofs and say which one failed.
//!
//! Pure functions of what was served and what the console already trusts: no network here.

use engram_audit::{Checkpoint, EntryKind, SignedEntry};
use engram_merkle::{
    Blake3, ConsistencyRole, MerkleHasher, parse_proof, root_from_inclusion_proof_visiting,
    verify_consistency_visiting,
};
use engram_proto::pb;
use serde_json::{Value as Json, json};

/// One step of a check: what was compared, whether it held, and the figures behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub title: String,
    pub ok: bool,
    pub detail: String,
}

impl Step {
    pub fn new(title: impl Into<String>, ok: bool, detail: impl Into<String>) -> Step {
        Step {
            title: title.into(),
            ok,
            detail: detail.into(),
        }
    }

    pub fn to_json(&self) -> Json {
        json!({ "title": self.title, "ok": self.ok, "detail": self.detail })
    }
}

/// What the console makes of one served entry on its own and against the entry before it.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryCheck {
    pub index: u64,
    /// The hash of the entry's bytes as served; `None` when they do not decode.
    pub computed: Option<engram_types::Hash>,
    /// Empty when the entry is intact as far as this page can tell.
    pub problems: Vec<String>,
    pub decoded: Option<SignedEntry>,
}

/// Checks a run of consecutive entries (`before`: the entry just before the first, when there
/// is one): each entry's bytes decode, hash to the hash it is listed under, say the index it is
/// listed at, and link to the previous entry's hash as recomputed here. An entry whose bytes
/// were altered is flagged twice: its own hash no longer matches, and the next entry's link
/// breaks (so an alteration that also rewrote the listed hash is still caught).
pub fn check_entries(before: Option<&pb::AuditEntry>, entries: &[pb::AuditEntry]) -> Vec<EntryCheck> {
    let mut prev_hash = before
        .and_then(|b| SignedEntry::decode(&b.signed).ok())
        .map(|s| s.entry.hash());
    let mut out = Vec::with_capacity(entries.len());
    for served in entries {
        let mut problems = Vec::new();
        let decoded = match SignedEntry::decode(&served.signed) {
            Ok(signed) => Some(signed),
            Err(e) => {
                problems.push(format!("its bytes do not decode: {e}"));
                None
            }
        };
        let computed = decoded.as_ref().map(|s| s.entry.hash());
        if let (Some(signed), Some(hash)) = (&decoded, computed) {
            if hash.as_bytes().as_slice() != served.hash.as_slice() {
                problems.push(format!(
                    "its bytes hash to {}, not to the {} it is listed under",
                    short(hash.as_bytes()),
                    short(&served.hash)
                ));
            }
            if signed.entry.index != served.index {
                problems.push(format!(
                    "its bytes say entry {}, it is listed as {}",
                    signed.entry.index, served.index
                ));
            }
            if let Some(prev) = prev_hash
                && signed.entry.prev_hash != prev
            {
                problems.push(format!(
                    "it links to {}, but entry {} hashes to {}",
                    short(signed.entry.prev_hash.as_bytes()),
                    served.index.saturating_sub(1),
                    short(prev.as_bytes())
                ));
            }
        }
        prev_hash = computed;
        out.push(EntryCheck {
            index: served.index,
            computed,
            problems,
            decoded,
        });
    }
    out
}

/// The proof that entry `served` is leaf `served.index` of the tree `checkpoint` commits to,
/// walked step by step: the entry's own bytes (and, when given, its link to the entry before),
/// its leaf hash, each node up the path, and the root reached against the checkpoint's.
/// `checkpoint` must already be verified (signature and consistency with what is trusted).
pub fn inclusion_steps(
    served: &pb::AuditEntry,
    before: Option<&pb::AuditEntry>,
    checkpoint: &Checkpoint,
    path: &[Vec<u8>],
) -> Vec<Step> {
    let mut steps = Vec::new();
    let checks = check_entries(before, std::slice::from_ref(served));
    let check = &checks[0];
    let Some(signed) = &check.decoded else {
        steps.push(Step::new("The entry's bytes", false, check.problems.join("; ")));
        return steps;
    };
    let hash = signed.entry.hash();
    steps.push(Step::new(
        "The entry's bytes",
        check.problems.is_empty(),
        if check.problems.is_empty() {
            format!(
                "entry {} ({}) hashes to {}{}",
                signed.entry.index,
                kind_name(&signed.entry.kind),
                hex::encode(hash.as_bytes()),
                if before.is_some() {
                    ", and links to the entry before it"
                } else {
                    ""
                }
            )
        } else {
            check.problems.join("; ")
        },
    ));
    let index = signed.entry.index;
    if index == 0 || index > checkpoint.size {
        steps.push(Step::new(
            "Within the checkpoint",
            false,
            format!(
                "entry {index} is outside the checkpoint's {} entries",
                checkpoint.size
            ),
        ));
        return steps;
    }
    let leaf = Blake3::hash_leaf(hash.as_bytes());
    steps.push(Step::new(
        "Leaf hash",
        true,
        format!("blake3(0x00 ‖ entry hash) = {}", hex::encode(leaf)),
    ));
    let path = match parse_proof::<Blake3>(path) {
        Ok(path) => path,
        Err(e) => {
            steps.push(Step::new("The proof's hashes", false, e.to_string()));
            return steps;
        }
    };
    let mut walked = Vec::new();
    let root =
        root_from_inclusion_proof_visiting::<Blake3>(&leaf, index - 1, checkpoint.size, &path, |step| {
            walked.push(step)
        });
    for (level, step) in walked.iter().enumerate() {
        steps.push(Step::new(
            format!("Level {}", level + 1),
            true,
            format!(
                "with {} on the {}: {}",
                short(&step.sibling),
                if step.sibling_on_left { "left" } else { "right" },
                hex::encode(step.parent)
            ),
        ));
    }
    match root {
        Ok(root) => {
            let ok = root == checkpoint.root.0;
            steps.push(Step::new(
                "Root",
                ok,
                if ok {
                    format!(
                        "the path reaches {}, the root the checkpoint of {} entries signs",
                        hex::encode(root),
                        checkpoint.size
                    )
                } else {
                    format!(
                        "the path reaches {}, but the checkpoint of {} entries signs {}",
                        hex::encode(root),
                        checkpoint.size,
                        hex::encode(checkpoint.root.0)
                    )
                },
            ));
        }
        Err(e) => steps.push(Step::new("Root", false, e.to_string())),
    }
    steps
}

/// The consistency proof that the tree `checkpoint` signs extends the tree `trusted` commits
/// to, walked step by step (RFC 9162 §2.1.4.2): where both rebuilds start, each hash of the
/// path and which of the two roots it goes into, and the two roots reached against the
/// trusted one and the checkpoint's. Equal sizes need no path: the roots must be equal.
pub fn consistency_steps(trusted: &Checkpoint, checkpoint: &Checkpoint, path: &[Vec<u8>]) -> Vec<Step> {
    let (old, new) = (trusted, checkpoint);
    let path = match parse_proof::<Blake3>(path) {
        Ok(path) => path,
        Err(e) => return vec![Step::new("Consistency: the proof's hashes", false, e.to_string())],
    };
    if old.size == new.size {
        let ok = old.root == new.root && path.is_empty();
        return vec![Step::new(
            "Consistency: the same tree",
            ok,
            match ok {
                true => format!(
                    "the checkpoint signs the trusted tree of {} entries itself",
                    new.size
                ),
                false => format!(
                    "the checkpoint signs {} for the {} entries the trusted tree has as {}",
                    hex::encode(new.root.0),
                    new.size,
                    hex::encode(old.root.0)
                ),
            },
        )];
    }
    let mut steps = Vec::new();
    let verdict = verify_consistency_visiting::<Blake3>(
        old.size,
        new.size,
        &old.root.0,
        &new.root.0,
        &path,
        |s| {
            let (title, detail) = match s.role {
                ConsistencyRole::Seed { from_old_root: true } => (
                    "Consistency: start".to_string(),
                    format!(
                        "the trusted tree of {} entries is a whole subtree of the new one: both rebuilds start from its root {}",
                        old.size,
                        short(&s.hash)
                    ),
                ),
                ConsistencyRole::Seed { from_old_root: false } => (
                    "Consistency: start".to_string(),
                    format!(
                        "both rebuilds start from {}, the root of the trusted tree's last whole subtree",
                        short(&s.hash)
                    ),
                ),
                ConsistencyRole::Shared => (
                    format!("Consistency: hash {}", steps.len()),
                    format!(
                        "{} on the left, in both trees: old so far {}, new so far {}",
                        short(&s.hash),
                        short(&s.old_so_far),
                        short(&s.new_so_far)
                    ),
                ),
                ConsistencyRole::NewOnly => (
                    format!("Consistency: hash {}", steps.len()),
                    format!(
                        "{} on the right, only in the new tree: new so far {}",
                        short(&s.hash),
                        short(&s.new_so_far)
                    ),
                ),
            };
            steps.push(Step::new(title, true, detail));
        },
    );
    steps.push(match verdict {
        Ok(()) => Step::new(
            "Consistency: both roots",
            true,
            format!(
                "the path rebuilds the trusted root {} of {} entries and the checkpoint's root {} of {}: the new tree keeps every entry the trusted one had, unchanged and in order",
                hex::encode(old.root.0),
                old.size,
                hex::encode(new.root.0),
                new.size
            ),
        ),
        Err(e) => Step::new("Consistency: both roots", false, e.to_string()),
    });
    steps
}

pub fn kind_name(kind: &EntryKind) -> &'static str {
    match kind {
        EntryKind::Transaction { .. } => "transaction",
        // The first membership entry is the chain's genesis.
        EntryKind::Membership { .. } => "membership",
        EntryKind::KeyChange { .. } => "key change",
    }
}

/// The first 8 bytes of a hash in hex, as the page shows hashes in running text.
pub fn short(bytes: &[u8]) -> String {
    hex::encode(&bytes[..bytes.len().min(8)])
}

#[cfg(test)]
mod tests {
    use super::*;

    use engram_audit::{AuditEntry, Checkpoint, EntryKind, SignedEntry};
    use engram_merkle::{CompactTree, inclusion_proof};
    use engram_types::{Hash, TxId};

    /// A chain of `n` transaction entries, linked, as a node would serve them.
    fn chain(n: u64) -> Vec<pb::AuditEntry> {
        let mut prev = Hash::ZERO;
        (1..=n)
            .map(|index| {
                let entry = AuditEntry {
                    index,
                    tx: TxId(index + 10),
                    tx_time_ns: index as i64 * 1_000,
                    namespace: "console/test".into(),
                    kind: EntryKind::Transaction {
                        content_hash: Hash::of(&index.to_le_bytes()),
                        datoms: 1,
                        author: None,
                    },
                    prev_hash: prev,
                    state_root: None,
                };
                let hash = entry.hash();
                prev = hash;
                let signed = SignedEntry {
                    entry,
                    attestation: None,
                };
                pb::AuditEntry {
                    index,
                    tx: index + 10,
                    hash: hash.as_bytes().to_vec(),
                    signed: signed.encode(),
                    ..Default::default()
                }
            })
            .collect()
    }

    fn checkpoint_and_paths(entries: &[pb::AuditEntry]) -> (Checkpoint, Vec<Vec<Vec<u8>>>) {
        let leaves: Vec<[u8; 32]> = entries.iter().map(|e| Blake3::hash_leaf(&e.hash)).collect();
        let mut tree = CompactTree::<Blake3>::new();
        for leaf in &leaves {
            tree.push_leaf_hash(*leaf);
        }
        let size = leaves.len() as u64;
        let paths = (0..size)
            .map(|i| {
                inclusion_proof::<Blake3>(leaves.as_slice(), i, size)
                    .expect("a proof")
                    .iter()
                    .map(|d| d.to_vec())
                    .collect()
            })
            .collect();
        let checkpoint = Checkpoint {
            origin: "engram/test".into(),
            size,
            root: Hash(tree.root()),
            tx_time_ns: 0,
        };
        (checkpoint, paths)
    }

    #[test]
    fn every_entry_of_every_tree_size_walks_to_the_root() {
        for n in 1..=13u64 {
            let entries = chain(n);
            let (checkpoint, paths) = checkpoint_and_paths(&entries);
            for (i, entry) in entries.iter().enumerate() {
                let before = i.checked_sub(1).map(|j| &entries[j]);
                let steps = inclusion_steps(entry, before, &checkpoint, &paths[i]);
                assert!(steps.iter().all(|s| s.ok), "size {n} entry {}: {steps:?}", i + 1);
                // The bytes, the leaf, one step per level of the path, the root.
                assert_eq!(steps.len(), 3 + paths[i].len(), "size {n} entry {}", i + 1);
                assert!(steps.last().is_some_and(|s| s.title == "Root"));
            }
        }
    }

    #[test]
    fn an_altered_entry_fails_its_own_hash_the_next_link_and_the_root() {
        let mut entries = chain(6);
        let (checkpoint, paths) = checkpoint_and_paths(&entries);
        // What a tampering proxy does: the same length of bytes, another namespace.
        let signed = &mut entries[2].signed;
        let at = signed
            .windows(12)
            .position(|w| w == b"console/test")
            .expect("the namespace is in the entry's bytes");
        signed[at..at + 12].copy_from_slice(b"console/tEst");
        let checks = check_entries(None, &entries);
        assert!(checks[0].problems.is_empty() && checks[1].problems.is_empty());
        assert!(
            checks[2].problems[0].contains("not to the"),
            "{:?}",
            checks[2].problems
        );
        assert!(
            checks[3].problems[0].contains("but entry 3 hashes to"),
            "{:?}",
            checks[3].problems
        );
        assert!(checks[4].problems.is_empty());
        let steps = inclusion_steps(&entries[2], Some(&entries[1]), &checkpoint, &paths[2]);
        assert!(!steps[0].ok, "{steps:?}");
        // With the listed hash rewritten too, the bytes look whole but the path misses the root.
        entries[2].hash = SignedEntry::decode(&entries[2].signed)
            .expect("decodes")
            .entry
            .hash()
            .as_bytes()
            .to_vec();
        let steps = inclusion_steps(&entries[2], Some(&entries[1]), &checkpoint, &paths[2]);
        assert!(steps[0].ok, "{steps:?}");
        let root = steps.last().expect("a root step");
        assert!(!root.ok && root.detail.contains("but the checkpoint"), "{root:?}");
    }

    #[test]
    fn every_consistency_proof_is_drawn_hash_by_hash_and_a_forked_tree_fails() {
        let entries = chain(13);
        let leaves: Vec<[u8; 32]> = entries.iter().map(|e| Blake3::hash_leaf(&e.hash)).collect();
        let tree_of = |size: u64| {
            let (cp, _) = checkpoint_and_paths(&entries[..size as usize]);
            cp
        };
        for new in 1..=13u64 {
            for old in 1..=new {
                let path: Vec<Vec<u8>> =
                    engram_merkle::consistency_proof::<Blake3>(leaves.as_slice(), old, new)
                        .expect("a proof")
                        .iter()
                        .map(|d| d.to_vec())
                        .collect();
                let (trusted, checkpoint) = (tree_of(old), tree_of(new));
                let steps = consistency_steps(&trusted, &checkpoint, &path);
                assert!(steps.iter().all(|s| s.ok), "{old} → {new}: {steps:?}");
                if old < new {
                    // The start, one step per hash after it, both roots.
                    let seed_sent = usize::from(!old.is_power_of_two());
                    assert_eq!(steps.len(), 2 + path.len() - seed_sent, "{old} → {new}");
                    assert_eq!(steps[0].title, "Consistency: start");
                }
                // A tree whose entry `old` (the trusted tree's last) was rewritten: its root
                // differs, and the drawn proof fails at the end.
                if old < new {
                    let mut forked = checkpoint.clone();
                    let mut other = leaves.clone();
                    other[old as usize - 1] = Blake3::hash_leaf(b"rewritten");
                    forked.root = Hash(
                        engram_merkle::subtree_root::<Blake3>(other.as_slice(), 0, new).expect("a root"),
                    );
                    let steps = consistency_steps(&trusted, &forked, &path);
                    let last = steps.last().expect("a step");
                    assert!(
                        !last.ok && last.title == "Consistency: both roots",
                        "{old} → {new}: {steps:?}"
                    );
                }
            }
        }
        // A wrong length, and equal sizes with other roots, fail too.
        let (trusted, checkpoint) = (tree_of(5), tree_of(9));
        assert!(
            !consistency_steps(&trusted, &checkpoint, &[])
                .last()
                .expect("a step")
                .ok
        );
        let mut other = trusted.clone();
        other.root = checkpoint.root;
        assert!(!consistency_steps(&trusted, &other, &[])[0].ok);
    }

    #[test]
    fn an_entry_outside_the_checkpoint_or_a_short_path_fails() {
        let entries = chain(5);
        let (mut checkpoint, paths) = checkpoint_and_paths(&entries);
        let steps = inclusion_steps(&entries[4], None, &checkpoint, &paths[4][..paths[4].len() - 1]);
        assert!(!steps.last().expect("a step").ok, "{steps:?}");
        checkpoint.size = 4;
        let steps = inclusion_steps(&entries[4], None, &checkpoint, &paths[4]);
        assert_eq!(
            steps.last().map(|s| s.title.as_str()),
            Some("Within the checkpoint")
        );
        assert!(!steps.last().expect("a step").ok);
    }
}
