//! **I4 signatures-valid**: every entry on every replica carries an Ed25519 attestation that
//! verifies, by a key of the simulated pool (a foreign key means something forged an entry),
//! and that key is trusted by the chain itself: a membership entry admits it — checked with
//! the same `ChainVerifier` an auditor runs offline. (A node that joined later re-attests
//! history with its own key; the verifier accepts that once the chain admits the key.)
//! Links and times are other checkers' business: only signature and trust faults count here.

use engram_audit::{ChainFault, ChainVerifier, PublicKey};

use super::{Replica, Violation};

pub const NAME: &str = "I4 signatures-valid";

pub fn check(replicas: &[Replica], pool_keys: &[PublicKey]) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in replicas {
        // Every signature, independently of the chain's shape.
        for stored in &r.entries {
            let Ok(signed) = &stored.entry else { continue };
            let key = pool_keys.iter().find(|k| k.key_id() == signed.attestation.key_id);
            let fault = match key {
                None => Some("signed by a key outside the pool"),
                Some(k) if !k.verify(signed.entry.hash().as_bytes(), &signed.attestation.signature) => {
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
        // Trust, as an auditor establishes it from the chain alone.
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
