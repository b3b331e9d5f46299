//! The Byzantine-client fault: a host that is not a member sends forged Raft requests to the
//! nodes while the workload runs. It speaks the internal Raft service on the client port, as
//! any client can, with well-formed payloads that would do damage if a node acted on them:
//! appends from a "leader" at ever higher terms that rewrite the start of the log and claim a
//! commit, and vote requests from a candidate claiming a longer log. Some carry no
//! authentication, some are signed by the forger's own key while claiming a member's id, some
//! name the forger's own (non-member) id, and some are tagged as coming from a member's key
//! with a tag the forger made with its own key (it holds neither secret of the pair).
//!
//! It aims at members (it asks each target's public status first). Every answer is recorded;
//! the `peer_auth` checker demands that each one that reached a node was refused as
//! unauthenticated, and the other checkers that none of it changed anything.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use engram_audit::{KeyRing, NodeKey, PublicKey};
use engram_proto::pb;
use engram_raft::peer_auth::{self, PairKey, RpcKind};
use engram_raft::{Entry, LogId, TypeConfig, Vote};
use madsim::rand::Rng;
use openraft::entry::RaftEntry;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::vote::RaftLeaderId;

use crate::cluster::{channel, node_addr};

/// The id the forger gives itself when it does not pretend to be a member.
pub const FORGER_ID: u64 = 99;

/// What the forger sent and what it was told.
#[derive(Default)]
pub struct ForgeLog {
    pub sent: Mutex<u64>,
    /// Answers that were not a refusal or a transport failure: `(target, what, answer)`.
    pub accepted: Mutex<Vec<(u64, String, String)>>,
    /// Requests refused as unauthenticated.
    pub refused: Mutex<u64>,
    pub stop: AtomicBool,
}

/// Sends a forged request to one of `pool` every `every_ms` (on average) until stopped.
pub async fn run_forger(pool: Vec<u64>, every_ms: u64, log: std::sync::Arc<ForgeLog>) {
    let mut seed = [0u8; 32];
    madsim::rand::thread_rng().fill(&mut seed);
    let keys = KeyRing::new(std::sync::Arc::new(NodeKey::from_seed(seed)));
    let mut term = 1_000u64;
    while !log.stop.load(Ordering::Relaxed) {
        let gap = madsim::rand::thread_rng().gen_range(every_ms / 2..=every_ms * 3 / 2);
        madsim::time::sleep(Duration::from_millis(gap)).await;
        let (target, style, claimed) = {
            let mut rng = madsim::rand::thread_rng();
            let target = pool[rng.gen_range(0..pool.len())];
            let claimed = pool[rng.gen_range(0..pool.len())];
            (target, rng.gen_range(0..5u8), claimed)
        };
        term += 1;
        // Members only: a node outside the cluster trusts its first contact by design (it has
        // nothing to protect; see engram_raft::peer_auth), so forging at spares proves nothing.
        let Some(members) = members_of(target).await else {
            continue;
        };
        let key_of = |id: u64| {
            members
                .iter()
                .find(|m| m.id == id)
                .and_then(|m| <[u8; 32]>::try_from(m.public_key.as_slice()).ok())
                .map(PublicKey)
        };
        let pair = match (key_of(claimed), key_of(target)) {
            (Some(from_key), Some(to_key)) => Some((from_key, to_key)),
            _ => None,
        };
        let (what, answer) = forge(&keys, target, style, claimed, term, pair).await;
        *log.sent.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        match answer {
            Err(status) if status.code() == tonic::Code::Unauthenticated => {
                *log.refused.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            }
            // The node was down or cut off, or the connection broke: nothing was processed.
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Cancelled
                        | tonic::Code::Unknown
                ) => {}
            // Anything else means the node decoded the request and Raft handled it (a Raft
            // level refusal is still an answer: the forger was listened to).
            other => {
                let answer = match other {
                    Ok(()) => "OK".to_string(),
                    Err(s) => format!("{:?} {}", s.code(), s.message()),
                };
                log.accepted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((target, what, answer));
            }
        }
    }
}

/// The members `node` lists (as any client can ask it), if it says it is one of them.
async fn members_of(node: u64) -> Option<Vec<pb::Member>> {
    let mut client = pb::cluster_client::ClusterClient::new(channel(&node_addr(node)));
    let mut req = tonic::Request::new(pb::StatusRequest {});
    req.set_timeout(Duration::from_millis(500));
    let members = client.status(req).await.ok()?.into_inner().members;
    members.iter().any(|m| m.id == node).then_some(members)
}

/// One forged request; `style` picks its shape and authentication.
async fn forge(
    keys: &KeyRing,
    target: u64,
    style: u8,
    claimed: u64,
    term: u64,
    pair: Option<(PublicKey, PublicKey)>,
) -> (String, Result<(), tonic::Status>) {
    let mut client = pb::raft_client::RaftClient::new(channel(&node_addr(target)));
    let deadline = Duration::from_millis(500);
    if style == 3 {
        // A candidate with a fantastically long log, asking for votes at a high term.
        let vote = Vote::new(term, FORGER_ID);
        let last = LogId {
            leader_id: vote.leader_id().to_committed(),
            index: 1_000_000,
        };
        let rpc = VoteRequest::<TypeConfig>::new(vote, Some(last));
        let payload = encode(&rpc);
        let auth = peer_auth::sign(keys, RpcKind::Vote, FORGER_ID, target, &payload);
        let mut req = tonic::Request::new(pb::RaftMessage {
            payload,
            auth: Some(auth),
            accepts_mac: false,
        });
        req.set_timeout(deadline);
        let what = format!("vote from n{FORGER_ID} term {term} to n{target}");
        return (what, client.vote(req).await.map(|_| ()));
    }
    // A "leader" that replaces the first entries of the log (openraft numbers them from 0) and
    // says they are committed.
    let vote = Vote::new_committed(term, claimed);
    let leader = vote.leader_id().to_committed();
    let entries: Vec<Entry> = (0..3)
        .map(|index| {
            Entry::new_blank(LogId {
                leader_id: leader,
                index,
            })
        })
        .collect();
    let rpc = AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: None,
        leader_commit: entries.last().map(|e| e.log_id),
        entries,
    };
    let payload = encode(&rpc);
    let (auth, how) = match (style, pair) {
        (0, _) => (None, "unsigned"),
        (1, _) => (
            Some(peer_auth::sign(
                keys,
                RpcKind::AppendEntries,
                claimed,
                target,
                &payload,
            )),
            "signed by an outsider's key",
        ),
        // The claimed member's key and the target's, paired by the forger's own secret: the
        // target pairs that member's key with its own secret and gets another key.
        (4, Some((from_key, to_key))) => {
            let pairs: Vec<PairKey> = keys
                .current()
                .shared_key(&to_key)
                .map(|secret| PairKey {
                    from_key,
                    to_key,
                    secret,
                })
                .into_iter()
                .collect();
            (
                Some(peer_auth::tag_listing(
                    &pairs,
                    RpcKind::AppendEntries,
                    claimed,
                    target,
                    &payload,
                    &[],
                )),
                "tagged as a member's key by an outsider",
            )
        }
        _ => (
            Some(peer_auth::sign(
                keys,
                RpcKind::AppendEntries,
                FORGER_ID,
                target,
                &payload,
            )),
            "from a non-member id",
        ),
    };
    let mut req = tonic::Request::new(pb::RaftMessage {
        payload,
        auth,
        accepts_mac: false,
    });
    req.set_timeout(deadline);
    let what = format!("append claiming n{claimed} term {term} to n{target}, {how}");
    (what, client.append_entries(req).await.map(|_| ()))
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    match engram_raft::codec::encode(value) {
        Ok(bytes) => bytes,
        Err(e) => panic!("the forger cannot encode its own request: {e}"),
    }
}
