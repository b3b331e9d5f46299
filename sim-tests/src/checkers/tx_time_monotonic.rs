//! **I7 tx-time-monotonic**: along every replica's chain, transaction time never decreases
//! and transaction ids strictly increase — whatever the skew between the clocks of the
//! leaders that stamped them.

use super::{Replica, Violation};

pub const NAME: &str = "I7 tx-time-monotonic";

pub fn check(replicas: &[Replica]) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in replicas {
        let mut prev: Option<(u64, i64, u64)> = None;
        for stored in &r.entries {
            let Ok(signed) = &stored.entry else { continue };
            let e = &signed.entry;
            if let Some((index, time, tx)) = prev {
                if e.tx_time_ns < time {
                    out.push(Violation::new(
                        NAME,
                        format!(
                            "node {} index {}: tx time {} ns is before index {index}'s {time} ns",
                            r.node, e.index, e.tx_time_ns
                        ),
                    ));
                    break;
                }
                if e.tx.0 <= tx {
                    out.push(Violation::new(
                        NAME,
                        format!(
                            "node {} index {}: tx {} does not follow tx {tx}",
                            r.node, e.index, e.tx.0
                        ),
                    ));
                    break;
                }
            }
            prev = Some((e.index, e.tx_time_ns, e.tx.0));
        }
    }
    out
}
