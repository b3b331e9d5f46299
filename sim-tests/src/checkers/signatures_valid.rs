//! **I4 signatures-valid**: every entry on every replica is covered by an Ed25519 attestation
//! at or after it (a node signs once per apply group: the group's last entry, whose hash
//! covers the entries before it), every attestation verifies, by a key of the simulated pool
//! (a foreign key means something forged an entry), and the chain itself establishes trust in
//! that key: genesis or a key change admits it. On a replica whose own key the chain admits,
//! that is checked with the same `ChainVerifier` an auditor runs offline, coverage included (a
//! node that joined later and re-attested history is accepted once the chain admits it).
//!
//! A node can hold the chain without being admitted by it: it replicated entries while being
//! added, and the addition never committed. Its own attestations then cannot be trusted from
//! the chain, so it must refuse to serve its chain (`FAILED_PRECONDITION`) rather than present
//! it; every other signer on it must still be admitted. Links and times are other checkers'
//! business: only signature and trust faults count here.

use std::collections::{BTreeMap, BTreeSet};

use engram_audit::{ChainFault, ChainVerifier, EntryKind, KeyAction, PublicKey};

use super::{Replica, Violation};

pub const NAME: &str = "I4 signatures-valid";

/// `refusals`: for each replica whose own key its chain does not admit, the status code its
/// `Audit.Entries` answered with (`None`: it streamed the chain).
pub fn check(
    replicas: &[Replica],
    pool_keys: &BTreeMap<u64, PublicKey>,
    refusals: &BTreeMap<u64, Option<tonic::Code>>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in replicas {
        // Every signature, independently of the chain's shape.
        for stored in &r.entries {
            let Ok(signed) = &stored.entry else { continue };
            let Some(attestation) = &signed.attestation else {
                continue;
            };
            let key = pool_keys.values().find(|k| k.key_id() == attestation.key_id);
            let fault = match key {
                None => Some("signed by a key outside the pool"),
                Some(k) if !k.verify(signed.entry.hash().as_bytes(), &attestation.signature) => {
                    Some("attestation.signature does not verify")
                }
                Some(_) => None,
            };
            if let Some(fault) = fault {
                out.push(Violation::new(
                    NAME,
                    format!("node {} index {}: {fault}", r.node, stored.index),
                ));
                break;
            }
        }
        let Some(own) = pool_keys.get(&r.node).map(|k| k.key_id()) else {
            continue;
        };
        if let Some(answer) = refusals.get(&r.node) {
            // Not admitted: it must not serve the chain, and every other signer must be.
            if *answer != Some(tonic::Code::FailedPrecondition) {
                out.push(Violation::new(
                    NAME,
                    format!(
                        "node {} is not admitted by its chain but Audit.Entries answered {answer:?}",
                        r.node
                    ),
                ));
            }
            let admitted: BTreeSet<_> = r
                .entries
                .iter()
                .filter_map(|s| s.entry.as_ref().ok())
                .flat_map(|s| match &s.entry.kind {
                    // Genesis is the trust root; every later key is admitted by a key change.
                    EntryKind::Membership { members } if s.entry.index == 1 => {
                        members.iter().map(|(_, k)| k.key_id()).collect::<Vec<_>>()
                    }
                    EntryKind::KeyChange {
                        action: KeyAction::Admit { key, .. } | KeyAction::Rotate { new: key, .. },
                        ..
                    } => vec![key.key_id()],
                    _ => Vec::new(),
                })
                .collect();
            for stored in &r.entries {
                let Ok(signed) = &stored.entry else { continue };
                let Some(signer) = signed.attestation.as_ref().map(|a| a.key_id) else {
                    continue;
                };
                if signer != own && !admitted.contains(&signer) {
                    out.push(Violation::new(
                        NAME,
                        format!(
                            "node {} index {}: signer {signer} is admitted by neither genesis nor a key change",
                            r.node, stored.index
                        ),
                    ));
                    break;
                }
            }
            continue;
        }
        // Admitted: trust as an auditor establishes it from the chain alone.
        let mut verifier = ChainVerifier::new();
        let mut stopped = false;
        for stored in &r.entries {
            let Ok(signed) = &stored.entry else {
                stopped = true;
                break;
            };
            if let Err(e) = verifier.push(signed) {
                if matches!(
                    e.fault,
                    ChainFault::UnknownSigner(_) | ChainFault::BadSignature(_)
                ) {
                    out.push(Violation::new(NAME, format!("node {}: {e}", r.node)));
                }
                stopped = true;
                break;
            }
        }
        if !stopped && let Err(e) = verifier.finish() {
            out.push(Violation::new(NAME, format!("node {}: {e}", r.node)));
        }
    }
    out
}
