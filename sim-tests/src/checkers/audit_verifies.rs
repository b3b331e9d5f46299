//! **I9 audit-verifies**: every replica's audit chain passes the offline verifier an auditor
//! would run on its export (`engram audit verify --data-dir`): links, attestations and key
//! changes, every transaction's datoms against its entry's content hash, the Merkle root at
//! every checkpoint the node signed, and every checkpoint's signature against the key history.
//! Crashes, torn writes, snapshot installs and membership changes must leave nothing an
//! auditor would call tampering.
//!
//! One copy is held to less: a node whose own admission never reached it (it replicated
//! entries while being added, and the addition was lost) attested them with a key its chain
//! does not admit, so its own attestations and checkpoints cannot verify from that chain. Such
//! a node must refuse to serve its chain (I4 checks that); here those faults — and only those,
//! naming its own key — are expected, and every other check still applies to its copy.

use std::collections::BTreeMap;

use engram_audit::PublicKey;

use super::{Replica, Violation};

pub const NAME: &str = "I9 audit-verifies";

/// `unadmitted`: the replicas whose own key their chain does not admit (the keys of
/// [`super::signatures_valid::check`]'s `refusals`).
pub fn check(
    replicas: &[Replica],
    pool_keys: &BTreeMap<u64, PublicKey>,
    unadmitted: &[u64],
) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in replicas {
        let own_unadmitted = pool_keys
            .get(&r.node)
            .filter(|_| unadmitted.contains(&r.node))
            .map(|k| k.key_id().to_string());
        match &r.audit {
            Err(e) => out.push(Violation::new(
                NAME,
                format!("node {}: the export does not read: {e}", r.node),
            )),
            Ok(report) => {
                let failures: Vec<_> = report
                    .failures
                    .iter()
                    .filter(|f| {
                        !own_unadmitted
                            .as_deref()
                            .is_some_and(|own| signed_by_own_key(f, own))
                    })
                    .collect();
                if let Some(first) = failures.first() {
                    out.push(Violation::new(
                        NAME,
                        format!(
                            "node {}: {first} ({} failures in all; {} entries, {} checkpoints checked)",
                            r.node,
                            failures.len(),
                            report.entries,
                            report.checkpoints
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// Whether `failure` is only that `own` (a key id) signed something its chain never admitted:
/// an entry's attestation, or a checkpoint that no other key signed.
fn signed_by_own_key(failure: &engram_verify::Failure, own: &str) -> bool {
    match failure.field.as_str() {
        "attestation.key_id" => failure.message.contains(own),
        "checkpoint.signature" => {
            failure.message.starts_with("signed by no key the chain admits") && failure.message.contains(own)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use engram_audit::{ChainFault, NodeKey, PublicKey, note_key_name};
    use engram_types::Hash;
    use engram_verify::{Failure, Report};

    use super::super::Replica;
    use super::check;

    fn key(n: u8) -> PublicKey {
        NodeKey::from_seed([n; 32]).public()
    }

    /// An entry attested by `signer`, a key the chain never admits, as the verifier words it.
    fn unknown_signer(index: u64, signer: &PublicKey) -> Failure {
        let fault = ChainFault::UnknownSigner(signer.key_id());
        let text = fault.to_string();
        Failure {
            index: Some(index),
            offset: None,
            field: fault.field().to_string(),
            message: text
                .strip_prefix(&format!("{}: ", fault.field()))
                .unwrap_or(&text)
                .to_string(),
        }
    }

    fn checkpoint_by(size: u64, signer: &PublicKey) -> Failure {
        Failure {
            index: Some(size),
            offset: Some(0),
            field: "checkpoint.signature".into(),
            message: format!(
                "signed by no key the chain admits (signature names: {})",
                note_key_name(signer)
            ),
        }
    }

    fn replica(node: u64, failures: Vec<Failure>) -> Replica {
        Replica {
            node,
            member: false,
            applied_index: 14,
            entries: Vec::new(),
            datoms: BTreeMap::new(),
            digest: Hash::of(b""),
            audit: Ok(Report {
                format_version: 1,
                origin: None,
                exported_by_node: Some(node),
                entries: 14,
                transactions: 10,
                datoms: 10,
                state_roots: 0,
                state_root: None,
                checkpoints: 1,
                signed_by_agent: BTreeMap::new(),
                head_index: 14,
                head_hash: None,
                tree_root: String::new(),
                anchor: String::new(),
                pinned_size: None,
                keys: Vec::new(),
                redacted: Vec::new(),
                failures,
                stopped_early: false,
            }),
        }
    }

    #[test]
    fn an_orphaned_joiner_may_fail_only_on_its_own_unadmitted_key() {
        let pool: BTreeMap<u64, PublicKey> = (1..=5).map(|n| (n, key(n as u8))).collect();
        let own = &pool[&5];
        let orphan = || {
            vec![
                unknown_signer(6, own),
                unknown_signer(14, own),
                checkpoint_by(10, own),
            ]
        };
        // Its chain does not admit it: those faults are what it must hold, nothing more.
        assert!(check(&[replica(5, orphan())], &pool, &[5]).is_empty());
        // The same copy on a node its chain admits is tampering.
        assert_eq!(check(&[replica(5, orphan())], &pool, &[]).len(), 1);
        // An orphan is still held to every other check: another unadmitted signer, a
        // checkpoint someone else signed, a broken link.
        let others = [
            unknown_signer(7, &pool[&4]),
            checkpoint_by(10, &pool[&4]),
            Failure {
                index: Some(3),
                offset: None,
                field: "prev_hash".into(),
                message: "does not match".into(),
            },
        ];
        for other in others {
            let mut failures = orphan();
            failures.push(other.clone());
            let found = check(&[replica(5, failures)], &pool, &[5]);
            assert_eq!(found.len(), 1, "{other:?} must still count");
            assert!(found[0].to_string().contains(&other.field), "{}", found[0]);
        }
    }
}
