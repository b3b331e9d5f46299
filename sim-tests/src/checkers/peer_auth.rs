//! **peer-auth**: only members speak Raft. Every forged request the Byzantine-client fault
//! (`crate::forger`) delivered to a node must have been refused as `UNAUTHENTICATED` before
//! Raft saw it; an answer of any other kind means a node decoded and acted on a request from a
//! host that is not a member. (What the forged requests would have done — a moved leader, a
//! rewritten log — is left to the other checkers.)

use crate::forger::ForgeLog;

use super::Violation;

pub const NAME: &str = "peer-auth";

pub fn check(log: &ForgeLog) -> Vec<Violation> {
    let accepted = log.accepted.lock().unwrap_or_else(|e| e.into_inner());
    accepted
        .iter()
        .take(5)
        .map(|(target, what, answer)| {
            Violation::new(
                NAME,
                format!("node {target} answered a forged request ({what}) with {answer} instead of UNAUTHENTICATED"),
            )
        })
        .chain((accepted.len() > 5).then(|| {
            Violation::new(NAME, format!("... {} forged requests accepted in all", accepted.len()))
        }))
        .collect()
}
