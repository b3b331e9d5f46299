//! Which agent wrote each transaction: the checks on an entry that records an agent's
//! signature, against the request it signed and the agent keys the chain registered.
//!
//! An entry with an [`Author`] says "agent A signed this request, with this key, for this
//! call". The export carries the request's canonical bytes (`TxRequest::signed_bytes`) in an
//! `R` record after the transaction's datoms. The verifier checks that
//!
//! - the request hashes to the hash the entry records, and decodes;
//! - the agent's Ed25519 signature over (agent, method, request hash, time, nonce) verifies
//!   with the key the entry names;
//! - that key is the agent's key at this entry, as the chain's own policy transactions
//!   (system namespace: `:engram.agent/name`, `/key`, `/status`) registered it, and the agent
//!   is not revoked;
//! - the request is for this namespace, written as this agent, and its data ops are exactly
//!   the datoms the entry binds (op, attribute, value, valid time, provenance, branch, and the
//!   entity wherever the request names one by id);
//! - the signature was made near the transaction's time and its nonce is not used twice
//!   (a node cannot replay an agent's request into another transaction).
//!
//! A signed policy change (an agent, a grant or a role given or taken) is checked the same
//! way, its exported bytes being the change (`PolicyOp::signed_bytes`): its datoms must record
//! it as the signer's change and say what it says. The agent registry a signature is checked
//! against is the one before the entry, so an agent rotating its own key signs with the old.
//!
//! So a node, even one holding a trusted node key that attests its own chain, cannot record a
//! transaction as some agent's without that agent's key. Schema and branch transactions are
//! checked for signature, key, namespace and agent; their datoms follow from the state (a
//! merge copies the branch's datoms), which an export does not replay.

use std::collections::{BTreeMap, HashMap, VecDeque};

use engram_access::request::RequestAuth;
use engram_access::{PolicyOp, Principal, SYSTEM_NAMESPACE};
use engram_audit::{Author, PublicKey};
use engram_types::redact::{self, RedactRequest};
use engram_types::{Datom, EntityId, EntityRef, Op, TxRequest, Value};

/// The gRPC path prefix of the calls whose signed body is a policy change (`PolicyOp`); every
/// other signed write's is a transaction request.
const POLICY_METHODS: &str = "/engram.v1.Access/";

/// The method a signed redaction is made with: its request is a `RedactRequest`.
const REDACT_METHOD: &str = "/engram.v1.Memory/Redact";

/// The agent whose claims record policy changes in the system namespace.
const POLICY_AGENT: &str = "engram.policy";

/// How far an agent's signing time may be from its transaction's time. A node's gate accepts a
/// signature within a minute of its own clock and the transaction time is the leader's clock
/// when it proposed; the rest allows for clocks that differ between nodes.
pub const MAX_SIGNING_SKEW_MS: i64 = 10 * 60 * 1000;

/// One failed check: the field and what is wrong.
pub type Fault = (&'static str, String);

/// An agent as the chain's policy transactions record it.
#[derive(Clone, Debug)]
struct Agent {
    key: Option<PublicKey>,
    revoked: bool,
}

/// What the verifier has learnt of agents so far, and of signatures.
#[derive(Default)]
pub struct Authorship {
    /// Agent entity in the system namespace → agent name.
    names: HashMap<u64, String>,
    agents: HashMap<String, Agent>,
    /// (agent, nonce) of the signatures inside the skew window of the latest transaction,
    /// with their signing time, oldest first.
    recent: VecDeque<(i64, String, [u8; 16])>,
    seen: HashMap<(String, [u8; 16]), u64>,
    /// Transactions per signing agent.
    pub signed: BTreeMap<String, u64>,
}

impl Authorship {
    /// Learns agent registrations, key rotations and revocations from a transaction's datoms.
    /// Only the system namespace's datoms count; clients cannot write there (apply refuses it).
    pub fn observe(&mut self, datoms: &[Datom]) {
        for d in datoms {
            if d.namespace.as_str() != SYSTEM_NAMESPACE || d.op != Op::Assert {
                continue;
            }
            match (d.attribute.as_str(), &d.value) {
                (":engram.agent/name", Value::String(name)) => {
                    self.names.insert(d.entity.0, name.clone());
                    self.agents.entry(name.clone()).or_insert(Agent {
                        key: None,
                        revoked: false,
                    });
                }
                (":engram.agent/key", Value::Bytes(bytes)) => {
                    if let Some(agent) = self.agent_of(d.entity) {
                        agent.key = <[u8; 32]>::try_from(bytes.as_slice()).ok().map(PublicKey);
                    }
                }
                (":engram.agent/status", Value::String(status)) => {
                    if let Some(agent) = self.agent_of(d.entity) {
                        agent.revoked = status == "revoked";
                    }
                }
                _ => {}
            }
        }
    }

    fn agent_of(&mut self, entity: EntityId) -> Option<&mut Agent> {
        let name = self.names.get(&entity.0)?;
        self.agents.get_mut(name)
    }

    /// Checks the author of entry `index` (transaction time `tx_time_ns`, namespace
    /// `namespace`, datoms `datoms`) against the exported request `request`; see the module
    /// docs. Returns every fault found.
    pub fn check(
        &mut self,
        index: u64,
        tx_time_ns: i64,
        namespace: &str,
        author: &Author,
        datoms: &[Datom],
        request: Option<&[u8]>,
    ) -> Vec<Fault> {
        let mut faults = Vec::new();
        *self.signed.entry(author.principal.clone()).or_default() += 1;
        // A transaction kept in its salted form hashes to what was signed through the
        // committed form it makes (`TxRequest::signed_hash_of_kept`).
        if let Some(request) = request {
            match TxRequest::signed_hash_of_kept(&author.method, request) {
                Ok(hash) if hash == author.request_hash => {}
                Ok(hash) => faults.push((
                    "author.request",
                    format!(
                        "the exported request hashes to {hash}, the entry records that agent {} signed {}",
                        author.principal, author.request_hash
                    ),
                )),
                Err(e) => faults.push((
                    "author.request",
                    format!("the exported salted request does not decode: {e}"),
                )),
            }
        }
        match Principal::new(author.principal.clone()) {
            Err(e) => faults.push(("author.principal", format!("{:?}: {e}", author.principal))),
            Ok(principal) => {
                let auth = RequestAuth {
                    principal,
                    time_ms: author.time_ms,
                    nonce: author.nonce,
                    signature: author.signature,
                };
                let verifier = author.key.verifier();
                if let Err(e) = auth.verify_hash(
                    &author.key,
                    verifier.as_ref(),
                    &author.method,
                    author.request_hash.as_bytes(),
                ) {
                    faults.push(("author.signature", e.to_string()));
                }
            }
        }
        match self.agents.get(&author.principal) {
            None => faults.push((
                "author.key",
                format!("no agent {} is registered before this entry", author.principal),
            )),
            Some(agent) if agent.revoked => faults.push((
                "author.key",
                format!("agent {} is revoked before this entry", author.principal),
            )),
            Some(agent) if agent.key != Some(author.key) => faults.push((
                "author.key",
                format!(
                    "agent {} signed with key {}, but its registered key at this entry is {}",
                    author.principal,
                    author.key.key_id(),
                    agent.key.map_or("none".to_string(), |k| k.key_id().to_string())
                ),
            )),
            Some(_) => {}
        }
        let tx_time_ms = tx_time_ns.div_euclid(1_000_000);
        if (author.time_ms - tx_time_ms).abs() > MAX_SIGNING_SKEW_MS {
            faults.push((
                "author.time",
                format!(
                    "signed at {} ms, {} s from the transaction's time {} ms (at most {} s)",
                    author.time_ms,
                    (author.time_ms - tx_time_ms) / 1000,
                    tx_time_ms,
                    MAX_SIGNING_SKEW_MS / 1000
                ),
            ));
        }
        self.check_nonce(index, tx_time_ms, author, &mut faults);
        // A request a redaction took (`None`): the signature over its hash is all that is left
        // to check; what it said went with the values.
        let Some(request) = request else {
            return faults;
        };
        if author.method == REDACT_METHOD {
            match RedactRequest::decode_signed(request) {
                Err(e) => faults.push((
                    "author.request",
                    format!("the exported redaction does not decode: {e}"),
                )),
                Ok(req) => bind_redaction(&req, namespace, datoms, &mut faults),
            }
        } else if author.method.starts_with(POLICY_METHODS) {
            match PolicyOp::decode_signed(request) {
                Err(e) => faults.push((
                    "author.request",
                    format!("the exported change does not decode: {e}"),
                )),
                Ok(op) => self.bind_policy(&op, author, namespace, datoms, &mut faults),
            }
        } else {
            match TxRequest::decode_kept(request) {
                Err(e) => faults.push((
                    "author.request",
                    format!("the exported request does not decode: {e}"),
                )),
                Ok(kept) => bind(
                    &kept.request,
                    &kept.salts,
                    author,
                    namespace,
                    tx_time_ns,
                    datoms,
                    &mut faults,
                ),
            }
        }
        faults
    }

    /// Holds a signed policy change against the system-namespace transaction that records it:
    /// every datom records the change as the signer's, and the datoms say what the change
    /// says (for an agent's key or status, on that agent's entity).
    fn bind_policy(
        &self,
        op: &PolicyOp,
        author: &Author,
        namespace: &str,
        datoms: &[Datom],
        faults: &mut Vec<Fault>,
    ) {
        if namespace != SYSTEM_NAMESPACE {
            faults.push((
                "author.request",
                format!("a signed policy change recorded in namespace {namespace:?}, not {SYSTEM_NAMESPACE}"),
            ));
            return;
        }
        if let Some(i) = datoms
            .iter()
            .position(|d| d.provenance.agent != POLICY_AGENT || d.provenance.source != author.principal)
        {
            faults.push((
                "author.request",
                format!(
                    "datom {i} is not recorded as a policy change made by agent {}",
                    author.principal
                ),
            ));
        }
        let s = |v: &str| Value::String(v.to_string());
        let expected: Vec<(&str, Value, Option<&str>)> = match op {
            PolicyOp::Configure { .. } => vec![],
            PolicyOp::AddAgent { name, key } => vec![
                (":engram.agent/name", s(name.as_str()), None),
                (":engram.agent/key", Value::Bytes(key.0.to_vec()), None),
            ],
            PolicyOp::RotateAgentKey { name, key } => {
                vec![(
                    ":engram.agent/key",
                    Value::Bytes(key.0.to_vec()),
                    Some(name.as_str()),
                )]
            }
            PolicyOp::RevokeAgent { name } => {
                vec![(":engram.agent/status", s("revoked"), Some(name.as_str()))]
            }
            PolicyOp::Grant(g) => {
                let mut v = vec![
                    (":engram.grant/principal", s(&g.principal), None),
                    (":engram.grant/action", s(g.action.name()), None),
                    (":engram.grant/prefix", s(&g.prefix), None),
                    (":engram.grant/status", s("active"), None),
                ];
                if !g.attribute.is_empty() {
                    v.push((":engram.grant/attribute", s(&g.attribute), None));
                }
                v
            }
            PolicyOp::Revoke(_) => vec![(":engram.grant/status", s("revoked"), None)],
            PolicyOp::AssignRole { agent, role } => vec![
                (":engram.role/agent", s(agent.as_str()), None),
                (":engram.role/role", s(role.as_str()), None),
                (":engram.role/status", s("active"), None),
            ],
            PolicyOp::UnassignRole { .. } => vec![(":engram.role/status", s("revoked"), None)],
            PolicyOp::AccessLog { prefix, on: true } => vec![
                (":engram.access-log/prefix", s(prefix), None),
                (":engram.access-log/status", s("on"), None),
            ],
            PolicyOp::AccessLog { on: false, .. } => vec![(":engram.access-log/status", s("off"), None)],
            PolicyOp::Retention { keep_ms, .. } => vec![(
                ":engram.retention/keep-ms",
                Value::I64(i64::try_from(*keep_ms).unwrap_or(i64::MAX)),
                None,
            )],
            PolicyOp::RetentionVersions { keep_versions, .. } => vec![(
                ":engram.retention/keep-versions",
                Value::I64(i64::from(*keep_versions)),
                None,
            )],
            PolicyOp::Session { ttl_ms: 0, .. } => vec![(":engram.session/status", s("ended"), None)],
            PolicyOp::Session { ttl_ms, .. } => vec![(
                ":engram.session/ttl-ms",
                Value::I64(i64::try_from(*ttl_ms).unwrap_or(i64::MAX)),
                None,
            )],
            // Never signed (`PolicyOp::signed_bytes`), so never decoded here.
            PolicyOp::SessionLapsed { .. } => vec![],
        };
        for (attribute, value, on_agent) in expected {
            let found = datoms.iter().any(|d| {
                d.op == Op::Assert
                    && d.attribute.as_str() == attribute
                    && d.value == value
                    && on_agent
                        .is_none_or(|name| self.names.get(&d.entity.0).map(String::as_str) == Some(name))
            });
            if !found {
                faults.push((
                    "author.request",
                    format!(
                        "the signed {} change asks for {attribute} {value}, and the transaction does not record it",
                        op.kind()
                    ),
                ));
            }
        }
    }

    fn check_nonce(&mut self, index: u64, tx_time_ms: i64, author: &Author, faults: &mut Vec<Fault>) {
        // A nonce signed before the window of this transaction cannot be replayed here without
        // failing the time check, so it need not be remembered.
        while let Some((time_ms, ..)) = self.recent.front()
            && *time_ms < tx_time_ms.saturating_sub(2 * MAX_SIGNING_SKEW_MS)
        {
            if let Some((_, agent, nonce)) = self.recent.pop_front() {
                self.seen.remove(&(agent, nonce));
            }
        }
        let key = (author.principal.clone(), author.nonce);
        if let Some(first) = self.seen.get(&key) {
            faults.push((
                "author.nonce",
                format!(
                    "agent {}'s signature with this nonce was already used by entry {first} (a replayed request)",
                    author.principal
                ),
            ));
            return;
        }
        self.seen.insert(key, index);
        self.recent
            .push_back((author.time_ms, author.principal.clone(), author.nonce));
    }
}

/// Holds the signed request against the entry and its datoms.
/// Holds a signed redaction against the system-namespace transaction that records it: every
/// datom is the signer's claim, and the record names the namespace, entity, attribute and
/// reason the agent signed. (Which datoms it took is judged against the stored datoms, by the
/// redaction check of the verifier.)
fn bind_redaction(req: &RedactRequest, namespace: &str, datoms: &[Datom], faults: &mut Vec<Fault>) {
    if namespace != SYSTEM_NAMESPACE {
        faults.push((
            "author.request",
            format!("a signed redaction recorded in namespace {namespace:?}, not {SYSTEM_NAMESPACE}"),
        ));
        return;
    }
    if let Some(i) = datoms
        .iter()
        .position(|d| d.provenance.agent != req.provenance.agent)
    {
        faults.push((
            "author.request",
            format!(
                "datom {i} is not recorded as the redaction's agent {}",
                req.provenance.agent
            ),
        ));
    }
    let value_of = |attribute: &str| {
        datoms
            .iter()
            .find(|d| d.attribute.as_str() == attribute)
            .map(|d| d.value.clone())
    };
    let mut expected = vec![
        (redact::RECORD_NAMESPACE, Value::String(req.namespace.to_string())),
        (redact::RECORD_ENTITY, Value::I64(req.entity.0 as i64)),
        (redact::RECORD_REASON, Value::String(req.reason.clone())),
    ];
    if let Some(a) = &req.attribute {
        expected.push((redact::RECORD_ATTRIBUTE, Value::Keyword(a.to_string())));
    }
    for (attribute, want) in expected {
        if value_of(attribute).as_ref() != Some(&want) {
            faults.push((
                "author.request",
                format!("the record's {attribute} is not the signed redaction's {want}"),
            ));
        }
    }
}

/// Holds a signed request against its transaction's datoms: one datom per op, each what its
/// op asks for; with value salts (a request signed in its committed form), each datom salted
/// with its op's salt, so its hash commits to its value as the signature did.
fn bind(
    req: &TxRequest,
    salts: &[engram_types::Salt],
    author: &Author,
    namespace: &str,
    tx_time_ns: i64,
    datoms: &[Datom],
    faults: &mut Vec<Fault>,
) {
    if req.namespace.as_str() != namespace {
        faults.push((
            "author.request",
            format!(
                "the signed request is for namespace {:?}, the entry is in {namespace:?}",
                req.namespace.as_str()
            ),
        ));
    }
    if req.provenance.agent != author.principal {
        faults.push((
            "author.request",
            format!(
                "the signed request writes as agent {:?}, signed by {:?}",
                req.provenance.agent, author.principal
            ),
        ));
    }
    if req.ops.is_empty() {
        return;
    }
    if req.ops.len() != datoms.len() {
        faults.push((
            "author.request",
            format!(
                "the signed request has {} ops, the transaction {} datoms",
                req.ops.len(),
                datoms.len()
            ),
        ));
        return;
    }
    let mut temp: HashMap<&str, EntityId> = HashMap::new();
    for (i, (op, d)) in req.ops.iter().zip(datoms).enumerate() {
        let entity_ok = match &op.entity {
            EntityRef::Id(e) => *e == d.entity,
            // One temporary name is one entity within a transaction.
            EntityRef::Temp(name) => *temp.entry(name.as_str()).or_insert(d.entity) == d.entity,
            // Resolved from the state at apply.
            EntityRef::Lookup(..) => true,
        };
        let same = entity_ok
            && op.op == d.op
            && op.attribute == d.attribute
            && op.value == d.value
            && op.valid_from_ns.unwrap_or(tx_time_ns) == d.valid_from_ns
            && op.valid_to_ns == d.valid_to_ns
            && req.provenance == d.provenance
            && req.branch == d.branch
            && salts.get(i).is_none_or(|salt| d.salt.as_ref() == Some(salt));
        if !same {
            faults.push((
                "author.request",
                format!("datom {i} is not what the signed request's op {i} asks for"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use engram_access::AgentKey;
    use engram_types::{Attribute, Hash, Namespace, Provenance, Status, TxId, TxOp};

    use super::*;

    const METHOD: &str = "/engram.v1.Memory/Transact";
    /// Transaction time of the checked entry, and a signing time a second before it.
    const TX_TIME_NS: i64 = 1_700_000_000_000_000_000;
    const SIGNED_MS: i64 = TX_TIME_NS / 1_000_000 - 1_000;

    fn key(seed: u8) -> AgentKey {
        AgentKey::from_seed(Principal::new("alice").unwrap(), [seed; 32])
    }

    fn datom(ns: &str, entity: u64, attribute: &str, value: Value, agent: &str) -> Datom {
        Datom {
            namespace: Namespace::new(ns).unwrap(),
            branch: None,
            entity: EntityId(entity),
            attribute: Attribute::new(attribute).unwrap(),
            value,
            op: Op::Assert,
            valid_from_ns: TX_TIME_NS,
            valid_to_ns: None,
            tx: TxId(9),
            provenance: provenance(agent),
            salt: None,
        }
    }

    fn provenance(agent: &str) -> Provenance {
        Provenance {
            agent: agent.into(),
            session: String::new(),
            source: String::new(),
            confidence: 1.0,
            status: Status::Candidate,
        }
    }

    /// The system namespace's datoms that register `alice` with `key`.
    fn register(key: &AgentKey) -> Vec<Datom> {
        let sys = |a: &str, v: Value| datom(SYSTEM_NAMESPACE, 5, a, v, "engram.policy");
        vec![
            sys(":engram.agent/name", Value::String("alice".into())),
            sys(":engram.agent/key", Value::Bytes(key.public().0.to_vec())),
            sys(":engram.agent/status", Value::String("active".into())),
        ]
    }

    /// A request by alice asserting one fact on entity 7, its datoms, and an author signed by
    /// `key` with `nonce`.
    fn signed(key: &AgentKey, nonce: u8) -> (Vec<u8>, Vec<Datom>, Author) {
        let req = TxRequest::data(
            Namespace::new("team/a").unwrap(),
            vec![TxOp {
                op: Op::Assert,
                entity: EntityRef::Id(EntityId(7)),
                attribute: Attribute::new(":memory/content").unwrap(),
                value: Value::String("hello".into()),
                valid_from_ns: None,
                valid_to_ns: None,
            }],
            provenance("alice"),
        );
        let bytes = req.signed_bytes();
        let auth = RequestAuth::sign(key, METHOD, &bytes, SIGNED_MS, [nonce; 16]);
        let author = Author {
            principal: "alice".into(),
            key: key.public(),
            method: METHOD.into(),
            request_hash: Hash::of(&bytes),
            time_ms: auth.time_ms,
            nonce: auth.nonce,
            signature: auth.signature,
        };
        let datoms = vec![datom(
            "team/a",
            7,
            ":memory/content",
            Value::String("hello".into()),
            "alice",
        )];
        (bytes, datoms, author)
    }

    fn fields(faults: &[Fault]) -> Vec<&'static str> {
        faults.iter().map(|(field, _)| *field).collect()
    }

    #[test]
    fn a_registered_agents_request_verifies_and_is_counted() {
        let alice = key(1);
        let mut a = Authorship::default();
        a.observe(&register(&alice));
        let (bytes, datoms, author) = signed(&alice, 1);
        assert_eq!(
            a.check(10, TX_TIME_NS, "team/a", &author, &datoms, Some(&bytes)),
            vec![]
        );
        assert_eq!(a.signed.get("alice"), Some(&1));
    }

    #[test]
    fn each_forgery_is_named_by_its_field() {
        let alice = key(1);
        let check = |author: &Author, datoms: &[Datom], bytes: &[u8], ns: &str| {
            let mut a = Authorship::default();
            a.observe(&register(&alice));
            fields(&a.check(10, TX_TIME_NS, ns, author, datoms, Some(bytes)))
        };
        let (bytes, datoms, author) = signed(&alice, 1);

        let mut forged = author.clone();
        forged.signature[0] ^= 1;
        assert_eq!(
            check(&forged, &datoms, &bytes, "team/a"),
            vec!["author.signature"]
        );

        // Another key signed it: the signature verifies with that key, which is not alice's.
        let (_, _, by_other) = signed(&key(2), 1);
        assert_eq!(check(&by_other, &datoms, &bytes, "team/a"), vec!["author.key"]);

        // The request was altered after signing.
        let mut altered = bytes.clone();
        let at = altered.len() - 20;
        altered[at] ^= 1;
        assert!(check(&author, &datoms, &altered, "team/a").contains(&"author.request"));

        // The datoms are not what the request asked for.
        let mut other = datoms.clone();
        other[0].value = Value::String("goodbye".into());
        assert_eq!(check(&author, &other, &bytes, "team/a"), vec!["author.request"]);
        let mut other = datoms.clone();
        other[0].entity = EntityId(8);
        assert_eq!(check(&author, &other, &bytes, "team/a"), vec!["author.request"]);
        assert_eq!(check(&author, &[], &bytes, "team/a"), vec!["author.request"]);
        assert_eq!(check(&author, &datoms, &bytes, "team/b"), vec!["author.request"]);

        // Signed long before the transaction: a stale request replayed later.
        let mut stale = author.clone();
        stale.time_ms -= MAX_SIGNING_SKEW_MS + 1;
        let found = check(&stale, &datoms, &bytes, "team/a");
        assert!(found.contains(&"author.time"), "{found:?}");
    }

    #[test]
    fn keys_follow_rotation_and_revocation_and_nonces_are_used_once() {
        let (old, new) = (key(1), key(2));
        let mut a = Authorship::default();
        // Before registration nobody is alice.
        let (bytes, datoms, author) = signed(&old, 1);
        assert_eq!(
            fields(&a.check(3, TX_TIME_NS, "team/a", &author, &datoms, Some(&bytes))),
            vec!["author.key"]
        );
        a.observe(&register(&old));
        let (bytes, datoms, author) = signed(&old, 2);
        assert_eq!(
            a.check(4, TX_TIME_NS, "team/a", &author, &datoms, Some(&bytes)),
            vec![]
        );
        // The same signature again, in another entry: a replay.
        let found = a.check(5, TX_TIME_NS, "team/a", &author, &datoms, Some(&bytes));
        assert_eq!(fields(&found), vec!["author.nonce"]);
        assert!(found[0].1.contains("entry 4"), "{}", found[0].1);

        // Rotation: the old key no longer signs for alice, the new one does.
        let rotate = datom(
            SYSTEM_NAMESPACE,
            5,
            ":engram.agent/key",
            Value::Bytes(new.public().0.to_vec()),
            "engram.policy",
        );
        a.observe(&[rotate]);
        let (bytes, datoms, author) = signed(&old, 3);
        assert_eq!(
            fields(&a.check(6, TX_TIME_NS, "team/a", &author, &datoms, Some(&bytes))),
            vec!["author.key"]
        );
        let (bytes, datoms, author) = signed(&new, 4);
        assert_eq!(
            a.check(7, TX_TIME_NS, "team/a", &author, &datoms, Some(&bytes)),
            vec![]
        );

        // Revocation: nothing signs for alice.
        let revoke = datom(
            SYSTEM_NAMESPACE,
            5,
            ":engram.agent/status",
            Value::String("revoked".into()),
            "engram.policy",
        );
        a.observe(&[revoke]);
        let (bytes, datoms, author) = signed(&new, 5);
        assert_eq!(
            fields(&a.check(8, TX_TIME_NS, "team/a", &author, &datoms, Some(&bytes))),
            vec!["author.key"]
        );
        // A client namespace's datoms that look like registrations register nobody.
        let mut b = Authorship::default();
        let fake: Vec<Datom> = register(&old)
            .into_iter()
            .map(|mut d| {
                d.namespace = Namespace::new("team/a").unwrap();
                d
            })
            .collect();
        b.observe(&fake);
        let (bytes, datoms, author) = signed(&old, 6);
        assert_eq!(
            fields(&b.check(9, TX_TIME_NS, "team/a", &author, &datoms, Some(&bytes))),
            vec!["author.key"]
        );
    }

    #[test]
    fn a_signed_policy_change_must_be_what_its_datoms_record() {
        let root = AgentKey::from_seed(Principal::new("root").unwrap(), [7; 32]);
        let bob = AgentKey::from_seed(Principal::new("bob").unwrap(), [8; 32]);
        let op = PolicyOp::AddAgent {
            name: bob.principal.clone(),
            key: bob.public(),
        };
        let bytes = op.signed_bytes().unwrap();
        let method = "/engram.v1.Access/AddAgent";
        let auth = RequestAuth::sign(&root, method, &bytes, SIGNED_MS, [1; 16]);
        let author = Author {
            principal: "root".into(),
            key: root.public(),
            method: method.into(),
            request_hash: Hash::of(&bytes),
            time_ms: auth.time_ms,
            nonce: auth.nonce,
            signature: auth.signature,
        };
        let recorded = |key: &AgentKey, source: &str| -> Vec<Datom> {
            let sys = |a: &str, v: Value| {
                let mut d = datom(SYSTEM_NAMESPACE, 6, a, v, "engram.policy");
                d.provenance.source = source.into();
                d
            };
            vec![
                sys(":engram.agent/name", Value::String("bob".into())),
                sys(":engram.agent/key", Value::Bytes(key.public().0.to_vec())),
                sys(":engram.agent/status", Value::String("active".into())),
            ]
        };
        let check = |datoms: &[Datom]| {
            let mut a = Authorship::default();
            let mut root_reg = register(&root);
            for d in &mut root_reg {
                if let Value::String(name) = &mut d.value
                    && name == "alice"
                {
                    *name = "root".into();
                }
            }
            a.observe(&root_reg);
            fields(&a.check(10, TX_TIME_NS, SYSTEM_NAMESPACE, &author, datoms, Some(&bytes)))
        };
        assert_eq!(check(&recorded(&bob, "root")), Vec::<&str>::new());
        // The datoms register another key than the one root signed for.
        assert_eq!(check(&recorded(&key(3), "root")), vec!["author.request"]);
        // The datoms name another actor.
        assert_eq!(check(&recorded(&bob, "mallory")), vec!["author.request"]);
    }
}
