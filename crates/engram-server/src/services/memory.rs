use std::sync::Arc;

use engram_access::Action;
use engram_core::policy::ReadScope;
use engram_core::{keys, pages, reads};
use engram_proto::{methods, pb};
use engram_raft::Proposer;
use engram_types::{BranchOp, EntityId, RedactRequest, Salt, TxId, TxRequest};
use prost::Message;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::gate::{Caller, Need};
use super::watch_hub::{self, Served};
use super::{Route, Shared, forwarded_err, relay};
use crate::error::ApiError;

/// `engram.v1.Memory`: transactions and reads.
pub struct MemoryService {
    shared: Arc<Shared>,
}

impl MemoryService {
    pub fn new(shared: Arc<Shared>) -> MemoryService {
        MemoryService { shared }
    }

    /// Proposes a write on the leader (forwarding it there when this node does not lead).
    async fn write(&self, meta: MetadataMap, call: WriteCall) -> Result<pb::TransactResponse, ApiError> {
        let incoming = self.shared.incoming(&meta)?;
        let forwarded = incoming.forwarded;
        // An invalid namespace is the more precise answer than the size limit (a namespace
        // of megabytes is both), and checking it first is cheap: its length is checked first.
        let received = std::time::Instant::now();
        namespace(call.namespace().to_string())?;
        let bytes = call.encoded_len();
        let limit = self.shared.config.max_tx_bytes;
        if bytes > limit {
            return Err(ApiError::TooLarge { bytes, limit });
        }
        let tx = call.to_tx()?;
        let salts = call.value_salts()?;
        if let Route::Leader(addr) = self.shared.route_write(forwarded)? {
            let client = self.shared.memory_client(&addr)?;
            return super::while_leading(&self.shared.node, &addr, call.forward(client, &incoming)).await;
        }
        // The leader checks: who signed, and (by the policy it has applied) whether they may;
        // apply checks again at the transaction's own log entry.
        // With value salts the agent signed the committed form (their count is checked
        // against the ops above, so it always forms).
        let caller = self.shared.admit_body(
            &meta,
            || {
                if salts.is_empty() {
                    tx.signed_bytes()
                } else {
                    tx.committed_bytes(&salts).unwrap_or_default()
                }
            },
            call.method(),
            Need::Principal(call.namespace().to_string()),
        )?;
        let refused = |e| self.shared.refusal(&meta, call.method(), call.namespace(), e);
        if let Err(rejection) = self.shared.check_tx(caller.principal.as_ref(), &tx)? {
            return Err(refused(ApiError::Rejected(rejection)));
        }
        let proposed = std::time::Instant::now();
        // Salts of an unsigned request are not kept: nothing signed commits to them, and its
        // datoms are salted by the leader as any unsigned write's.
        let by = match (&caller.author, salts.is_empty()) {
            (Some(author), false) => Proposer::SignedCommitted {
                author: author.clone(),
                salts,
            },
            (Some(author), true) => Proposer::Signed(author.clone()),
            (None, _) => Proposer::Unsigned(caller.principal.clone()),
        };
        match self.shared.node.propose(tx, by).await {
            Ok(Ok(receipt)) => {
                let span = tracing::Span::current();
                span.record("tx_id", receipt.tx.0);
                // The transaction id is the entry's log index.
                for (stage, us) in self.shared.node.stages.record(received, proposed, receipt.tx.0) {
                    span.record(stage.span_field(), us);
                }
                Ok((&receipt).into())
            }
            // A grant revoked between the check above and the entry is refused at apply.
            Ok(Err(rejection)) => Err(refused(ApiError::Rejected(rejection))),
            Err(engram_raft::NodeError::NotLeader {
                leader: Some((_, info)),
            }) if !forwarded => {
                let client = self.shared.memory_client(&info.addr)?;
                super::while_leading(&self.shared.node, &info.addr, call.forward(client, &caller)).await
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A redaction (of an entity, or by predicate), or its dry run, answered by the leader
    /// (which a follower forwards to), so a dry run lists what the redaction would take against
    /// the newest state.
    async fn redact_call(
        &self,
        meta: MetadataMap,
        msg: pb::RedactRequest,
    ) -> Result<pb::RedactResponse, ApiError> {
        let incoming = self.shared.incoming(&meta)?;
        // Validated at the wire, before anything is forwarded.
        let target = match msg.matching.clone() {
            Some(matching) => RedactTarget::Where(engram_proto::redact_where_request(msg.clone(), matching)?),
            None => RedactTarget::Entity(engram_proto::redact_request(msg.clone())?),
        };
        if let Route::Leader(addr) = self.shared.route_write(incoming.forwarded)? {
            let mut client = self.shared.memory_client(&addr)?;
            let forward = async move {
                client
                    .redact(incoming.forward(msg))
                    .await
                    .map(Response::into_inner)
                    .map_err(forwarded_err)
            };
            return super::while_leading(&self.shared.node, &addr, forward).await;
        }
        let namespace = match &target {
            RedactTarget::Entity(req) => req.namespace.to_string(),
            RedactTarget::Where(req) => req.namespace.to_string(),
        };
        let caller = self
            .shared
            .admit(&meta, &msg, methods::REDACT, Need::Principal(namespace.clone()))?;
        let principal = caller.principal.as_ref();
        let checked = match &target {
            RedactTarget::Entity(req) => self.shared.check_redact(principal, req)?,
            RedactTarget::Where(req) => self.shared.check_redact_where(principal, req)?,
        };
        let answer = match (checked, target) {
            (Err(rejection), _) => Err(ApiError::Rejected(rejection)),
            (Ok(()), RedactTarget::Entity(req)) => self.redact_entity(&caller, msg.dry_run, req).await,
            (Ok(()), RedactTarget::Where(req)) => self.redact_where(&caller, msg.dry_run, req).await,
        };
        answer.map_err(|e| self.shared.refusal(&meta, methods::REDACT, &namespace, e))
    }

    /// An entity's redaction, checked, on the leader.
    async fn redact_entity(
        &self,
        caller: &Caller,
        dry_run: bool,
        req: RedactRequest,
    ) -> Result<pb::RedactResponse, ApiError> {
        if dry_run {
            // Up to 100,000 rows of the target: on the read pool, off the Raft core.
            let checked = req.clone();
            let targets = self
                .shared
                .read_sized(true, move |store| {
                    engram_core::redact::targets(store, &checked, RedactRequest::MAX_DATOMS, true)
                })
                .await?
                .map_err(ApiError::Rejected)?;
            return Ok(pb::RedactResponse {
                datoms: targets
                    .iter()
                    .map(|t| redacted_pb(t.listed(), &t.datom, TxId(0)))
                    .collect(),
                dry_run: true,
                datoms_redacted: targets.len() as u64,
                ..pb::RedactResponse::default()
            });
        }
        let by = match &caller.author {
            Some(author) => Proposer::Signed(author.clone()),
            None => Proposer::Unsigned(caller.principal.clone()),
        };
        let parts = self
            .shared
            .node
            .propose_redaction(req, by)
            .await?
            .map_err(ApiError::Rejected)?;
        Ok(pb::RedactResponse {
            datoms: parts
                .iter()
                .flat_map(|p| p.taken.iter().map(|(r, d)| redacted_pb(*r, d, p.receipt.tx)))
                .collect(),
            dry_run: false,
            part_txs: parts.iter().map(|p| p.receipt.tx.0).collect(),
            datoms_redacted: parts.iter().map(|p| p.taken.len() as u64).sum(),
            listing_truncated: false,
            ..applied_through(parts.last().map(|p| &p.receipt))?
        })
    }

    /// A redaction by predicate, checked, on the leader. The answer lists the first
    /// [`LISTED_DATOMS`] datoms taken and counts them all.
    async fn redact_where(
        &self,
        caller: &Caller,
        dry_run: bool,
        req: engram_types::RedactWhere,
    ) -> Result<pb::RedactResponse, ApiError> {
        if dry_run {
            // A scan of the whole namespace, maybe: on the read pool, off the Raft core.
            let (targets, count) = self
                .shared
                .read_sized(true, move |store| {
                    engram_core::redact_where::preview(store, &req, LISTED_DATOMS)
                })
                .await?;
            return Ok(pb::RedactResponse {
                datoms: targets
                    .iter()
                    .map(|t| redacted_pb(t.listed(), &t.datom, TxId(0)))
                    .collect(),
                dry_run: true,
                datoms_redacted: count,
                listing_truncated: count > targets.len() as u64,
                ..pb::RedactResponse::default()
            });
        }
        // A signature was checked at the gate (and its nonce spent there): the ranges are
        // proposed as the agent it authenticated, and apply checks that agent's grant.
        let principal = caller
            .author
            .as_ref()
            .and_then(|a| engram_access::Principal::new(a.principal.clone()).ok())
            .or(caller.principal.clone());
        let done = self
            .shared
            .node
            .propose_redaction_where(req, principal, None, LISTED_DATOMS)
            .await?
            .map_err(ApiError::Rejected)?;
        Ok(pb::RedactResponse {
            datoms: done
                .listed
                .iter()
                .map(|(r, d, by)| redacted_pb(*r, d, *by))
                .collect(),
            dry_run: false,
            part_txs: done.receipts.iter().map(|r| r.tx.0).collect(),
            datoms_redacted: done.datoms,
            listing_truncated: done.datoms > done.listed.len() as u64,
            ..applied_through(done.receipts.last())?
        })
    }

    async fn traced_write(
        &self,
        meta: MetadataMap,
        call: WriteCall,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        let span = tracing::info_span!(
            "transact",
            node_id = self.shared.node.node_id,
            kind = call.kind(),
            tx_id = tracing::field::Empty,
            // Microseconds from arrival to each stage of the write's path (engram_raft::stages).
            proposed_us = tracing::field::Empty,
            leader_log_durable_us = tracing::field::Empty,
            follower_durable_us = tracing::field::Empty,
            committed_us = tracing::field::Empty,
            applied_us = tracing::field::Empty,
            answered_us = tracing::field::Empty
        );
        // A child of the call's own span, which continues the caller's trace
        // (`rpc_metrics::Measured`).
        Ok(Response::new(self.write(meta, call).instrument(span).await?))
    }
}

/// A write request of any of the Memory RPCs that become one transaction.
enum WriteCall {
    Transact(pb::TransactRequest),
    ApplySchema(pb::ApplySchemaRequest),
    CreateBranch(pb::CreateBranchRequest),
    MergeBranch(pb::BranchRequest),
    AbandonBranch(pb::BranchRequest),
}

impl WriteCall {
    fn kind(&self) -> &'static str {
        match self {
            WriteCall::Transact(_) => "data",
            WriteCall::ApplySchema(_) => "schema",
            WriteCall::CreateBranch(_) => "create-branch",
            WriteCall::MergeBranch(_) => "merge-branch",
            WriteCall::AbandonBranch(_) => "abandon-branch",
        }
    }

    fn namespace(&self) -> &str {
        match self {
            WriteCall::Transact(m) => &m.namespace,
            WriteCall::ApplySchema(m) => &m.namespace,
            WriteCall::CreateBranch(m) => &m.namespace,
            WriteCall::MergeBranch(m) | WriteCall::AbandonBranch(m) => &m.namespace,
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            WriteCall::Transact(m) => m.encoded_len(),
            WriteCall::ApplySchema(m) => m.encoded_len(),
            WriteCall::CreateBranch(m) => m.encoded_len(),
            WriteCall::MergeBranch(m) | WriteCall::AbandonBranch(m) => m.encoded_len(),
        }
    }

    /// The method the call was signed for. Its signed body is the transaction's canonical
    /// bytes (`engram_proto::SignedBody`), which the caller computes from the converted request.
    fn method(&self) -> &'static str {
        match self {
            WriteCall::Transact(_) => methods::TRANSACT,
            WriteCall::ApplySchema(_) => methods::APPLY_SCHEMA,
            WriteCall::CreateBranch(_) => methods::CREATE_BRANCH,
            WriteCall::MergeBranch(_) => methods::MERGE_BRANCH,
            WriteCall::AbandonBranch(_) => methods::ABANDON_BRANCH,
        }
    }

    /// The salts of a transaction's values, when its agent signed it in the committed form
    /// (`TxRequest::committed_bytes`); none for the other writes, which have no ops.
    fn value_salts(&self) -> Result<Vec<Salt>, ApiError> {
        Ok(match self {
            WriteCall::Transact(m) => engram_proto::value_salts(m)?,
            _ => Vec::new(),
        })
    }

    /// Validates the request into the transaction it proposes.
    fn to_tx(&self) -> Result<TxRequest, ApiError> {
        Ok(match self {
            WriteCall::Transact(m) => TxRequest::try_from(m.clone())?,
            WriteCall::ApplySchema(m) => engram_proto::schema_request(m.clone())?,
            WriteCall::CreateBranch(m) => engram_proto::create_branch_request(m.clone())?,
            WriteCall::MergeBranch(m) => engram_proto::branch_request(
                m.namespace.clone(),
                m.name.clone(),
                m.provenance.clone(),
                |name| BranchOp::Merge { name },
            )?,
            WriteCall::AbandonBranch(m) => engram_proto::branch_request(
                m.namespace.clone(),
                m.name.clone(),
                m.provenance.clone(),
                |name| BranchOp::Abandon { name },
            )?,
        })
    }

    /// Sends the same call to the leader.
    async fn forward(
        self,
        mut client: pb::memory_client::MemoryClient<tonic::transport::Channel>,
        caller: &Caller,
    ) -> Result<pb::TransactResponse, ApiError> {
        let answer = match self {
            WriteCall::Transact(m) => client.transact(caller.forward(m)).await,
            WriteCall::ApplySchema(m) => client.apply_schema(caller.forward(m)).await,
            WriteCall::CreateBranch(m) => client.create_branch(caller.forward(m)).await,
            WriteCall::MergeBranch(m) => client.merge_branch(caller.forward(m)).await,
            WriteCall::AbandonBranch(m) => client.abandon_branch(caller.forward(m)).await,
        };
        answer.map(Response::into_inner).map_err(forwarded_err)
    }
}

/// What a History request asks about, validated.
#[derive(Clone)]
enum HistoryTarget {
    Entity(EntityId),
    Attribute(engram_types::Attribute),
}

/// A redaction's answer as far as its last entry goes (the one a purge must reach: its
/// transaction, audit index and hash), that transaction recorded on the call's span.
fn applied_through(last: Option<&engram_types::TxReceipt>) -> Result<pb::RedactResponse, ApiError> {
    let last = last.ok_or_else(|| ApiError::Internal("a redaction answered no entry".into()))?;
    tracing::Span::current().record("tx_id", last.tx.0);
    Ok(pb::RedactResponse {
        tx: last.tx.0,
        audit_index: last.audit_index,
        audit_hash: last.audit_hash.0.to_vec(),
        ..pb::RedactResponse::default()
    })
}

/// What a `Memory.Redact` call asks to forget, validated.
enum RedactTarget {
    Entity(RedactRequest),
    Where(engram_types::RedactWhere),
}

/// Most datoms a redaction by predicate's answer lists (it counts them all).
const LISTED_DATOMS: usize = 1_000;

/// One datom a redaction took (`by_tx`: the part that took it; 0 in a dry run).
fn redacted_pb(
    r: engram_core::redact::RedactedRef,
    d: &engram_types::Datom,
    by_tx: TxId,
) -> pb::RedactedDatom {
    pb::RedactedDatom {
        redacted_by_tx: by_tx.0,
        tx: r.tx.0,
        seq: r.seq,
        hash: r.hash.0.to_vec(),
        attribute: d.attribute.to_string(),
        op: match d.op {
            engram_types::Op::Assert => pb::Op::Assert,
            engram_types::Op::Retract => pb::Op::Retract,
        } as i32,
        guessable: !r.salted,
        branch: d.branch.as_ref().map(|b| b.to_string()).unwrap_or_default(),
    }
}

fn namespace(raw: String) -> Result<engram_types::Namespace, ApiError> {
    Ok(engram_proto::namespace("namespace", raw)?)
}

fn branch(raw: String) -> Result<Option<engram_types::BranchName>, ApiError> {
    Ok(engram_proto::branch("branch", raw)?)
}

/// An optional attribute argument (`""`: none).
fn optional_attribute(raw: &str) -> Result<Option<engram_types::Attribute>, ApiError> {
    match raw {
        "" => Ok(None),
        a => Ok(Some(engram_proto::attribute("attribute", a.to_string())?)),
    }
}

/// Refuses a read by an attribute the caller may not read: finding or listing by it would tell
/// which entities hold a value.
fn may_see(caller: &Caller, attr: &engram_types::Attribute) -> Result<(), ApiError> {
    match &caller.scope {
        Some(scope) if !scope.shows(attr.as_str()) => {
            Err(ApiError::PermissionDenied(scope.reason(attr.as_str())))
        }
        _ => Ok(()),
    }
}

fn resolution(raw: i32) -> Result<reads::Resolution, ApiError> {
    match pb::Resolution::try_from(raw) {
        Ok(pb::Resolution::Unspecified | pb::Resolution::Latest) => Ok(reads::Resolution::Latest),
        Ok(pb::Resolution::Verified) => Ok(reads::Resolution::Verified),
        Err(_) => Err(ApiError::Invalid(format!("rule: unknown resolution {raw}"))),
    }
}

fn schema_pb(view: &engram_core::schema::SchemaView, applied_tx: u64) -> pb::GetSchemaResponse {
    pb::GetSchemaResponse {
        version: view.version,
        strict: view.strict,
        attributes: view
            .attributes
            .iter()
            .map(|(v, entity)| pb::AttributeSchema {
                def: Some((&v.def).into()),
                since_tx: v.tx.0,
                version: v.version,
                entity: entity.map(|e| e.0),
            })
            .collect(),
        applied_tx,
    }
}

fn branch_pb(row: &engram_core::branch::BranchRow) -> pb::Branch {
    use engram_core::branch::BranchState;
    pb::Branch {
        name: row.name.to_string(),
        fork_tx: row.fork.0,
        created_tx: row.created.0,
        state: row.state.name().to_string(),
        closed_tx: match row.state {
            BranchState::Open => 0,
            BranchState::Merged { tx } | BranchState::Abandoned { tx } => tx.0,
        },
        writes: row.writes,
        entity: row.entity.0,
    }
}

fn datoms(list: &[engram_types::Datom]) -> Vec<pb::Datom> {
    list.iter().map(Into::into).collect()
}

/// How many times (a millisecond apart) a proven-complete read waits for the state map to catch
/// up with the caller's trusted checkpoint.
const VERSION_WAIT_TRIES: usize = 200;

impl MemoryService {
    /// `Get` with `complete`: the answer recomputed from the entity's slot histories as of the
    /// state map's latest version (or folded from them as of an earlier transaction), with the
    /// proof that they are all of them (`engram_core::state_proof`).
    async fn get_complete(
        &self,
        req: &pb::GetRequest,
        ns: engram_types::Namespace,
        on: Option<&engram_types::BranchName>,
        opts: &reads::ReadOptions,
        scope: Option<&ReadScope>,
    ) -> Result<pb::GetResponse, ApiError> {
        if on.is_some() {
            return Err(ApiError::Invalid(
                "complete: proofs of completeness are of main; branch cannot be proven complete yet \
                 (ask with prove alone for an inclusion proof)"
                    .into(),
            ));
        }
        if req.as_of_time_ns.is_some() {
            // Which transaction an instant names is this node's word: the proof would not bind it.
            return Err(ApiError::Invalid(
                "complete: a proven read is as of a transaction (as_of_tx); as_of_time_ns names an \
                 instant whose transaction the proof does not bind"
                    .into(),
            ));
        }
        let latest = || {
            self.shared.node.state_version().ok_or_else(|| {
                ApiError::Unproven("this node keeps no state commitment yet (it is still starting)".into())
            })
        };
        let mut version = latest()?;
        // A checkpoint of the head may be signed (by this node, for the caller's trust) between
        // a group's write and the publication of its map, which follows it at once: wait that
        // moment out rather than answer with a checkpoint older than the caller's. A node
        // truly behind answers after the wait, and the caller sees its answer is older.
        let as_of = opts.as_of;
        for _ in 0..VERSION_WAIT_TRIES {
            if version.head.index >= req.trusted_size && as_of.is_none_or(|t| version.head.tx >= t) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            version = latest()?;
        }
        let key = self.shared.node.keys.current();
        let trusted_size = req.trusted_size;
        let entity = EntityId(req.entity);
        let (proof, consistency) = self
            .shared
            .read_sized(true, move |store| {
                let proof =
                    engram_core::state_proof::entity_state(store, &key, &version, &ns, entity, as_of)?;
                let size = proof.checkpoint.checkpoint.size;
                let consistency = if trusted_size > 0 && trusted_size <= size {
                    engram_core::proofs::consistency(store, trusted_size, size)?.1
                } else {
                    Vec::new()
                };
                Ok::<_, ApiError>((proof, consistency))
            })
            .await?;
        let facts =
            engram_core::state_proof::facts_of(&proof.histories, &opts.slot_read(), opts.expired_at_ns);
        let hashes = |list: &[engram_types::Hash]| list.iter().map(|h| h.0.to_vec()).collect::<Vec<_>>();
        let read_at = proof.entries.last().map_or(0, |e| e.entry.tx.0);
        Ok(pb::GetResponse {
            entity: req.entity,
            datoms: shown(scope, &facts.current),
            applied_tx: read_at,
            proof: None,
            conflicts: shown(scope, &facts.conflicts),
            expired_at_ns: facts.expired_at_ns,
            as_of_tx: as_of.map_or(0, |t| t.0),
            state_proof: Some(pb::StateProof {
                checkpoint: Some(super::audit::checkpoint_pb(&proof.checkpoint)),
                consistency: hashes(&consistency),
                entries: proof.entries.iter().map(super::audit::to_pb).collect(),
                head_path: hashes(&proof.head_path),
                slots: proof.slots,
                histories: proof
                    .histories
                    .iter()
                    .map(|h| pb::SlotHistory {
                        attribute: h.attribute.as_str().to_string(),
                        cardinality: engram_proto::cardinality_to_pb(h.cardinality) as i32,
                        datoms: shown(scope, &h.datoms),
                    })
                    .collect(),
            }),
        })
    }
}

/// `list` as `scope` may see it: the values of attributes its grants do not cover are withheld,
/// with the reason; the datom and its hash stay, so the answer's proof still verifies.
fn shown(scope: Option<&ReadScope>, list: &[engram_types::Datom]) -> Vec<pb::Datom> {
    let mut out = datoms(list);
    if let Some(scope) = scope {
        redact(scope, &mut out);
    }
    out
}

fn redact(scope: &ReadScope, list: &mut [pb::Datom]) {
    for d in list {
        if !scope.shows(&d.attribute) {
            let reason = scope.reason(&d.attribute);
            engram_proto::withhold(d, reason);
        }
    }
}

/// The read proof for `found`, when the request asked for one.
fn read_proof(
    shared: &super::Shared,
    prove: bool,
    trusted_size: u64,
    found: &[engram_types::Datom],
) -> Result<Option<pb::ReadProof>, ApiError> {
    if !prove {
        return Ok(None);
    }
    let (checkpoint, proofs, consistency) = shared.read_state(|store| {
        let (checkpoint, proofs) =
            engram_core::proofs::read_proof(store, &shared.node.keys.current(), found)?;
        let size = checkpoint.checkpoint.size;
        let consistency = if trusted_size > 0 && trusted_size <= size {
            engram_core::proofs::consistency(store, trusted_size, size)?.1
        } else {
            Vec::new()
        };
        Ok::<_, ApiError>((checkpoint, proofs, consistency))
    })?;
    let hashes = |list: &[engram_types::Hash]| list.iter().map(|h| h.0.to_vec()).collect::<Vec<_>>();
    Ok(Some(pb::ReadProof {
        checkpoint: Some(super::audit::checkpoint_pb(&checkpoint)),
        proofs: proofs
            .iter()
            .map(|p| pb::DatomProof {
                entry: Some(super::audit::to_pb(&p.entry)),
                tx_datom_hashes: hashes(&p.tx_datom_hashes),
                seq: p.seq,
                inclusion_path: hashes(&p.inclusion_path),
            })
            .collect(),
        consistency: hashes(&consistency),
    }))
}

/// Transactions scanned per page while a watch catches up.
const WATCH_PAGE_TXS: usize = 256;
/// How long a watch waits before reading again while a snapshot install replaces the state.
const WATCH_INSTALL_WAIT_MS: u64 = 20;
/// Events buffered per watch: a slow reader holds back only its own stream. One more place is
/// kept for the last word of a watch cut off for stalling (see [`cut_off`]).
const WATCH_BUFFER: usize = 64;

/// Ends a watch whose reader stalled with its buffer full: `UNAVAILABLE` (which clients take
/// as "reopen") naming the first transaction it did not get, also in the `resume-from-tx`
/// metadata. It follows the buffered events, so a client that reopens after the last event it
/// read misses nothing and gets nothing twice.
fn cut_off(resume_from: u64, stalled: std::time::Duration) -> Status {
    let mut status = Status::unavailable(format!(
        "this watch was ended: its reader took nothing for {} ms while {WATCH_BUFFER} events waited; reopen it from tx {resume_from}",
        stalled.as_millis()
    ));
    status.metadata_mut().insert("resume-from-tx", resume_from.into());
    status
}

/// What became of an event handed to a watcher's buffer.
enum Sent {
    Yes,
    /// The reader went away.
    ReaderGone,
    /// The buffer stayed full for the whole stall cut-off.
    Stalled,
}

/// Puts `event` in a watcher's buffer, waiting at most `limit` for room.
async fn send_within(
    tx: &tokio::sync::mpsc::Sender<Result<pb::TxEvent, Status>>,
    event: pb::TxEvent,
    limit: std::time::Duration,
) -> Sent {
    use tokio::sync::mpsc::error::TrySendError;
    // The common case, room in the buffer, sets no timer.
    let event = match tx.try_send(Ok(event)) {
        Ok(()) => return Sent::Yes,
        Err(TrySendError::Closed(_)) => return Sent::ReaderGone,
        Err(TrySendError::Full(event)) => event,
    };
    // (`Sender::send_timeout` would read the real clock under the simulation.)
    match tokio::time::timeout(limit, tx.send(event)).await {
        Ok(Ok(())) => Sent::Yes,
        Ok(Err(_)) => Sent::ReaderGone,
        Err(_) => Sent::Stalled,
    }
}

type WatchStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::TxEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::memory_server::Memory for MemoryService {
    type WatchStream = WatchStream;

    async fn diff(&self, request: Request<pb::DiffRequest>) -> Result<Response<pb::DiffResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        let ns = namespace(req.namespace.clone())?;
        let on = branch(req.branch.clone())?;
        if on.is_none() && req.to_tx != 0 && req.from_tx > req.to_tx {
            return Err(ApiError::Invalid(format!(
                "from_tx {} is after to_tx {}: a diff runs forward in time",
                req.from_tx, req.to_tx
            ))
            .into());
        }
        if on.is_some() && req.valid_at_ns.is_some() {
            return Err(ApiError::Invalid(
                "valid_at_ns: not with branch (a branch diff lists the branch's own writes whole)".into(),
            )
            .into());
        }
        if let Some(mut leader) = self.shared.read_leader(req.consistency, forwarded).await? {
            return relay(leader.diff(caller.forward(req)).await);
        }
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::DIFF,
            Need::on(Action::ReadHistory, &req.namespace),
        )?;
        let scope = caller.scope.as_ref();
        if let Some(name) = &on {
            let found = self.shared.read_state(|store| {
                reads::branch_diff(
                    store,
                    &ns,
                    name,
                    req.entity.map(EntityId),
                    pages::page_size(req.limit),
                )
            })?;
            let returned =
                found.branch.asserted.len() + found.branch.retracted.len() + found.main_changed.len();
            self.shared
                .record_access(&caller, "diff", &req.namespace, req.entity, None, returned)
                .await;
            return Ok(Response::new(pb::DiffResponse {
                asserted: shown(scope, &found.branch.asserted),
                retracted: shown(scope, &found.branch.retracted),
                to_tx: self.shared.applied_index(),
                truncated: found.branch.truncated,
                main_changed: shown(scope, &found.main_changed),
                next_cursor: Vec::new(),
            }));
        }
        let page = {
            let ns = ns.clone();
            let (entity, from, to) = (
                req.entity.map(EntityId),
                TxId(req.from_tx),
                (req.to_tx != 0).then_some(TxId(req.to_tx)),
            );
            let (cursor, limit, valid_at_ns) =
                (req.cursor.clone(), pages::page_size(req.limit), req.valid_at_ns);
            self.shared
                .read_sized(entity.is_none(), move |store| {
                    pages::diff(store, &ns, entity, from, to, valid_at_ns, &cursor, limit)
                })
                .await?
        };
        let (asserted, retracted): (Vec<_>, Vec<_>) = page
            .datoms
            .into_iter()
            .partition(|d| d.op == engram_types::Op::Assert);
        self.shared
            .record_access(
                &caller,
                "diff",
                &req.namespace,
                req.entity,
                Some(page.as_of.0),
                asserted.len() + retracted.len(),
            )
            .await;
        Ok(Response::new(pb::DiffResponse {
            asserted: shown(scope, &asserted),
            retracted: shown(scope, &retracted),
            to_tx: page.as_of.0,
            truncated: page.next.is_some(),
            main_changed: Vec::new(),
            next_cursor: page.next.map(|c| c.encode()).unwrap_or_default(),
        }))
    }

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        // Watches are counted per connection as well as per principal.
        let connection = request.remote_addr();
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::WATCH,
            Need::on(Action::Watch, &req.namespace),
        )?;
        let scope = caller.scope.clone();
        let ns = namespace(req.namespace)?;
        let on = branch(req.branch)?;
        let attribute = match req.attribute.as_str() {
            "" => None,
            a => Some(engram_proto::attribute("attribute", a.to_string()).map_err(ApiError::from)?),
        };
        if let Some(name) = &on
            && self
                .shared
                .read_state(|store| engram_core::branch::row(store, &ns, name))?
                .is_none()
        {
            return Err(ApiError::from(reads::ReadError::UnknownBranch(name.clone())).into());
        }
        // One event for the watch, when it opens: what it will deliver follows from its filter.
        self.shared
            .record_access(&caller, "watch", ns.as_str(), req.entity, Some(req.from_tx), 0)
            .await;
        let entity = req.entity.map(EntityId);
        let node = self.shared.node.clone();
        let hub = self.shared.watch_hub.clone();
        let mut next = TxId(req.from_tx);
        let applied = node.applied_index();
        if next.0 <= applied {
            // A namespace without a schema row has no transaction to deliver through the
            // applied index (see `reads::has_schema`): start at the head instead of scanning
            // the log of every other namespace for none.
            let ns = ns.clone();
            let used = self
                .shared
                .reads
                .read(&node, move |store| reads::has_schema(store, &ns))
                .await
                .map_err(ApiError::from)?
                .map_err(ApiError::from)?;
            if !used {
                next = TxId(applied + 1);
            }
        }
        let principal = caller
            .principal
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let slot = hub.open_watch(&principal, connection, watch_hub::WatchLimits::default(), next)?;
        let stall_cutoff = std::time::Duration::from_millis(self.shared.config.watch_stall_cutoff_ms);
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_BUFFER + 1);
        // The place kept for a cut-off's last word, taken before any event.
        let Ok(last_word) = tx.clone().try_reserve_owned() else {
            return Err(Status::internal("a new watch channel has no room"));
        };
        super::read_pool::spawn_watcher(async move {
            // Counted until this task ends (the reader left, or the watch failed).
            let slot = slot;
            let wanted = |datom: &pb::Datom| {
                attribute.as_ref().is_none_or(|a| datom.attribute == a.as_str())
                    && entity.is_none_or(|e| datom.entity == e.0)
            };
            loop {
                // The newest transactions come from the hub's ring; a watcher behind it reads
                // shared pages of its namespace until it reaches the ring.
                let (txs, after) = match hub.serve(next, WATCH_PAGE_TXS) {
                    Served::Head { txs, next } => (txs, next),
                    Served::Behind => match hub.page(&node, &ns, on.as_ref(), next).await {
                        Ok(Ok(page)) => match page.read() {
                            Some((txs, after)) => (txs.clone(), *after),
                            None => continue,
                        },
                        Ok(Err(e)) => {
                            let _ = tx.send(Err(Status::from(ApiError::from(e)))).await;
                            return;
                        }
                        // A snapshot install is replacing this node's state: wait for it to
                        // end and read the page again (the install only moves the state forward).
                        Err(engram_raft::NodeError::Unavailable(_)) => {
                            tokio::time::sleep(std::time::Duration::from_millis(WATCH_INSTALL_WAIT_MS)).await;
                            if tx.is_closed() {
                                return;
                            }
                            continue;
                        }
                        Err(e) => {
                            let _ = tx.send(Err(Status::from(ApiError::from(e)))).await;
                            return;
                        }
                    },
                };
                for shared in &txs {
                    let logged = &shared.logged;
                    if logged.namespace != ns || logged.branch != on {
                        continue;
                    }
                    let all = shared.event();
                    let datoms: Vec<pb::Datom> = all.datoms.iter().filter(|d| wanted(d)).cloned().collect();
                    if datoms.is_empty() {
                        continue;
                    }
                    let mut event = pb::TxEvent {
                        tx: all.tx,
                        tx_time_ns: all.tx_time_ns,
                        audit_index: all.audit_index,
                        audit_hash: all.audit_hash.clone(),
                        datoms,
                    };
                    if let Some(scope) = &scope {
                        redact(scope, &mut event.datoms);
                    }
                    let at = event.tx;
                    match send_within(&tx, event, stall_cutoff).await {
                        Sent::Yes => {}
                        Sent::ReaderGone => return,
                        Sent::Stalled => {
                            watch_hub::count_cut_off();
                            last_word.send(Err(cut_off(at, stall_cutoff)));
                            return;
                        }
                    }
                }
                if after <= next {
                    // Caught up: wait for the ring to move past `next` (bounded, so a reader
                    // that left is noticed even on an idle cluster).
                    if tx.is_closed() {
                        return;
                    }
                    let stopped = hub
                        .wait_for(next.0, std::time::Duration::from_secs(1))
                        .await
                        .stopped;
                    if stopped {
                        // Without this the loop would spin: nothing more comes from a
                        // stopped Raft. The client reopens on another node.
                        let _ = tx
                            .send(Err(Status::from(ApiError::Unavailable(
                                "this node's Raft has stopped; reopen the watch on another node".into(),
                            ))))
                            .await;
                        return;
                    }
                }
                next = after.max(next);
                slot.moved_to(next);
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn transact(
        &self,
        request: Request<pb::TransactRequest>,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.traced_write(meta, WriteCall::Transact(req)).await
    }

    async fn apply_schema(
        &self,
        request: Request<pb::ApplySchemaRequest>,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.traced_write(meta, WriteCall::ApplySchema(req)).await
    }

    async fn create_branch(
        &self,
        request: Request<pb::CreateBranchRequest>,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.traced_write(meta, WriteCall::CreateBranch(req)).await
    }

    async fn merge_branch(
        &self,
        request: Request<pb::BranchRequest>,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.traced_write(meta, WriteCall::MergeBranch(req)).await
    }

    async fn abandon_branch(
        &self,
        request: Request<pb::BranchRequest>,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        self.traced_write(meta, WriteCall::AbandonBranch(req)).await
    }

    async fn redact(
        &self,
        request: Request<pb::RedactRequest>,
    ) -> Result<Response<pb::RedactResponse>, Status> {
        let (meta, _, msg) = request.into_parts();
        let span = tracing::info_span!(
            "redact",
            node_id = self.shared.node.node_id,
            dry_run = msg.dry_run,
            tx_id = tracing::field::Empty
        );
        Ok(Response::new(self.redact_call(meta, msg).instrument(span).await?))
    }

    async fn get_schema(
        &self,
        request: Request<pb::GetSchemaRequest>,
    ) -> Result<Response<pb::GetSchemaResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        let ns = namespace(req.namespace.clone())?;
        if let Some(mut leader) = self.shared.read_leader(req.consistency, forwarded).await? {
            return relay(leader.get_schema(caller.forward(req)).await);
        }
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::GET_SCHEMA,
            Need::on(Action::Read, &req.namespace),
        )?;
        let view = self
            .shared
            .read_state(|store| engram_core::schema::view(store, &ns, req.as_of_tx.map(TxId)))?;
        self.shared
            .record_access(&caller, "schema", &req.namespace, None, req.as_of_tx, 0)
            .await;
        Ok(Response::new(schema_pb(&view, self.shared.applied_index())))
    }

    async fn list_branches(
        &self,
        request: Request<pb::ListBranchesRequest>,
    ) -> Result<Response<pb::ListBranchesResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        let ns = namespace(req.namespace.clone())?;
        if let Some(mut leader) = self.shared.read_leader(req.consistency, forwarded).await? {
            return relay(leader.list_branches(caller.forward(req)).await);
        }
        self.shared.admit(
            &meta,
            &req,
            methods::LIST_BRANCHES,
            Need::on(Action::Read, &req.namespace),
        )?;
        let rows = self
            .shared
            .read_state(|store| engram_core::branch::list(store, &ns))?;
        let items = rows
            .iter()
            .map(|row| {
                let branch = branch_pb(row);
                (engram_core::lists::list_key(&[&branch.name]), branch)
            })
            .collect();
        let (branches, next_cursor) = super::list_page(
            engram_core::cursor::CursorKind::Branches,
            &[ns.as_str().as_bytes()],
            items,
            &req.cursor,
            req.limit,
        )?;
        Ok(Response::new(pb::ListBranchesResponse {
            branches,
            applied_tx: self.shared.applied_index(),
            next_cursor,
        }))
    }

    async fn get(&self, request: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        let ns = namespace(req.namespace.clone())?;
        let on = branch(req.branch.clone())?;
        resolution(req.rule)?;
        if let Some(mut leader) = self.shared.read_leader(req.consistency, forwarded).await? {
            return relay(leader.get(caller.forward(req)).await);
        }
        let caller = self
            .shared
            .admit(&meta, &req, methods::GET, Need::on(Action::Read, &req.namespace))?;
        let scope = caller.scope.as_ref();
        let as_of = AsOf::of(&self.shared, req.as_of_tx, req.as_of_time_ns)?;
        let opts = reads::ReadOptions {
            as_of: as_of.tx.map(TxId),
            valid_at_ns: req.valid_at_ns,
            rule: resolution(req.rule)?,
            verified_only: req.verified_only,
            expired_at_ns: as_of.expiry_judged_at(req.include_expired),
            since: None,
        };
        if req.complete {
            let resp = self.get_complete(&req, ns, on.as_ref(), &opts, scope).await?;
            let returned = resp.datoms.len() + resp.conflicts.len();
            self.shared
                .record_access(&caller, "get", &req.namespace, Some(req.entity), None, returned)
                .await;
            return Ok(Response::new(resp));
        }
        let found = self
            .shared
            .read_state(|store| reads::get_facts(store, &ns, on.as_ref(), EntityId(req.entity), &opts))?;
        let returned = found.current.len() + found.conflicts.len();
        self.shared
            .record_access(
                &caller,
                "get",
                &req.namespace,
                Some(req.entity),
                as_of.tx,
                returned,
            )
            .await;
        Ok(Response::new(pb::GetResponse {
            entity: req.entity,
            datoms: shown(scope, &found.current),
            applied_tx: self.shared.applied_index(),
            proof: read_proof(&self.shared, req.prove, req.trusted_size, &found.current)?,
            conflicts: shown(scope, &found.conflicts),
            expired_at_ns: found.expired_at_ns,
            as_of_tx: as_of.tx.unwrap_or(0),
            state_proof: None,
        }))
    }

    async fn history(
        &self,
        request: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        let ns = namespace(req.namespace.clone())?;
        let limit = pages::page_size(req.limit);
        let filter = match req.attribute_filter.as_str() {
            "" => None,
            a => Some(engram_proto::attribute("attribute_filter", a.to_string()).map_err(ApiError::from)?),
        };
        // Both targets are validated before the request may be forwarded: the leader would
        // refuse the same input, after a round trip.
        let target = match req.target.clone() {
            Some(pb::history_request::Target::Entity(e)) => HistoryTarget::Entity(EntityId(e)),
            Some(pb::history_request::Target::Attribute(a)) => {
                HistoryTarget::Attribute(engram_proto::attribute("attribute", a).map_err(ApiError::from)?)
            }
            None => return Err(ApiError::Invalid("target: entity or attribute is required".into()).into()),
        };
        let on = branch(req.branch.clone())?;
        if let Some(mut leader) = self.shared.read_leader(req.consistency, forwarded).await? {
            return relay(leader.history(caller.forward(req)).await);
        }
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::HISTORY,
            Need::on(Action::ReadHistory, &req.namespace),
        )?;
        let as_of = AsOf::of(&self.shared, req.as_of_tx, req.as_of_time_ns)?;
        let bounds = pages::Bounds {
            since: req.since_tx.map(TxId),
            as_of: as_of.tx.map(TxId),
            valid_at_ns: req.valid_at_ns,
        };
        // A page reads its target's index rows whole: an attribute's on the read pool, never
        // on a worker that drives Raft.
        let page = {
            let long = matches!(target, HistoryTarget::Attribute(_));
            let (ns, on, target, filter) = (ns.clone(), on.clone(), target.clone(), filter.clone());
            let cursor = req.cursor.clone();
            self.shared
                .read_sized(long, move |store| {
                    let of = match &target {
                        HistoryTarget::Entity(entity) => pages::HistoryOf::Entity {
                            entity: *entity,
                            attribute: filter.as_ref(),
                        },
                        HistoryTarget::Attribute(attr) => pages::HistoryOf::Attribute(attr),
                    };
                    pages::history(store, &ns, on.as_ref(), of, bounds, &cursor, limit)
                })
                .await?
        };
        let entity = match &target {
            HistoryTarget::Entity(e) => Some(e.0),
            HistoryTarget::Attribute(_) => None,
        };
        let found = page.datoms;
        self.shared
            .record_access(&caller, "history", &req.namespace, entity, as_of.tx, found.len())
            .await;
        Ok(Response::new(pb::HistoryResponse {
            datoms: shown(caller.scope.as_ref(), &found),
            applied_tx: self.shared.applied_index(),
            proof: read_proof(&self.shared, req.prove, req.trusted_size, &found)?,
            next_cursor: page.next.map(|c| c.encode()).unwrap_or_default(),
            as_of_tx: page.as_of.0,
        }))
    }

    async fn find(&self, request: Request<pb::FindRequest>) -> Result<Response<pb::FindResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        let ns = namespace(req.namespace.clone())?;
        let attr = engram_proto::attribute("attribute", req.attribute.clone()).map_err(ApiError::from)?;
        let on = branch(req.branch.clone())?;
        let value = match &req.value {
            None => None,
            some => Some(engram_proto::value("value", some.clone()).map_err(ApiError::from)?),
        };
        if let Some(mut leader) = self.shared.read_leader(req.consistency, forwarded).await? {
            return relay(leader.find(caller.forward(req)).await);
        }
        let caller = self
            .shared
            .admit(&meta, &req, methods::FIND, Need::on(Action::Read, &req.namespace))?;
        may_see(&caller, &attr)?;
        let as_of = AsOf::of(&self.shared, req.as_of_tx, req.as_of_time_ns)?;
        let opts = reads::ReadOptions {
            as_of: as_of.tx.map(TxId),
            expired_at_ns: as_of.expiry_judged_at(req.include_expired),
            since: req.since_tx.map(TxId),
            valid_at_ns: req.valid_at_ns,
            ..reads::ReadOptions::default()
        };
        let page = {
            let (ns, on, attr, value) = (ns.clone(), on.clone(), attr.clone(), value.clone());
            let (cursor, limit) = (req.cursor.clone(), pages::page_size(req.limit));
            self.shared
                .read_sized(true, move |store| {
                    pages::find(
                        store,
                        &ns,
                        on.as_ref(),
                        &attr,
                        value.as_ref(),
                        &opts,
                        &cursor,
                        limit,
                    )
                })
                .await?
        };
        let found = page.datoms;
        self.shared
            .record_access(&caller, "find", &req.namespace, None, as_of.tx, found.len())
            .await;
        Ok(Response::new(pb::FindResponse {
            datoms: shown(caller.scope.as_ref(), &found),
            applied_tx: self.shared.applied_index(),
            next_cursor: page.next.map(|c| c.encode()).unwrap_or_default(),
            as_of_tx: page.as_of.0,
        }))
    }

    async fn list_namespaces(
        &self,
        request: Request<pb::ListNamespacesRequest>,
    ) -> Result<Response<pb::ListNamespacesResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        if let Some(mut leader) = self.shared.read_leader(req.consistency, caller.forwarded).await? {
            return relay(leader.list_namespaces(caller.forward(req)).await);
        }
        // Any principal may ask; each namespace is listed only if it may read there.
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::LIST_NAMESPACES,
            Need::Principal(String::new()),
        )?;
        let filter = self.shared.readable_namespaces(&caller)?;
        let (cursor, limit) = (req.cursor, pages::page_size(req.limit));
        let page = self
            .shared
            .read_sized(true, move |store| {
                let readable = |ns: &engram_types::Namespace| {
                    filter
                        .as_ref()
                        .is_none_or(|(who, policy)| policy.allows_some(who, Action::Read, ns.as_str()))
                };
                engram_core::lists::namespaces(store, &readable, &cursor, limit)
            })
            .await?;
        Ok(Response::new(pb::ListNamespacesResponse {
            namespaces: page.namespaces.iter().map(ToString::to_string).collect(),
            next_cursor: page.next.map(|c| c.encode()).unwrap_or_default(),
            applied_tx: self.shared.applied_index(),
        }))
    }

    async fn list_entities(
        &self,
        request: Request<pb::ListEntitiesRequest>,
    ) -> Result<Response<pb::ListEntitiesResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let ns = namespace(req.namespace.clone())?;
        let attr = optional_attribute(&req.attribute)?;
        if let Some(mut leader) = self.shared.read_leader(req.consistency, caller.forwarded).await? {
            return relay(leader.list_entities(caller.forward(req)).await);
        }
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::LIST_ENTITIES,
            Need::on(Action::Read, &req.namespace),
        )?;
        if let Some(attr) = &attr {
            may_see(&caller, attr)?;
        }
        let as_of = AsOf::of(&self.shared, req.as_of_tx, req.as_of_time_ns)?;
        let bound = as_of.tx.map(TxId);
        let page = {
            let (cursor, limit) = (req.cursor.clone(), pages::page_size(req.limit));
            self.shared
                .read_sized(true, move |store| {
                    engram_core::lists::entities(store, &ns, attr.as_ref(), bound, &cursor, limit)
                })
                .await?
        };
        self.shared
            .record_access(&caller, "list-entities", &req.namespace, None, as_of.tx, 0)
            .await;
        Ok(Response::new(pb::ListEntitiesResponse {
            entities: page.entities.iter().map(|e| e.0).collect(),
            next_cursor: page.next.map(|c| c.encode()).unwrap_or_default(),
            as_of_tx: page.as_of.0,
            applied_tx: self.shared.applied_index(),
        }))
    }

    async fn referrers(
        &self,
        request: Request<pb::ReferrersRequest>,
    ) -> Result<Response<pb::ReferrersResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let ns = namespace(req.namespace.clone())?;
        let attr = optional_attribute(&req.attribute)?;
        if let Some(mut leader) = self.shared.read_leader(req.consistency, caller.forwarded).await? {
            return relay(leader.referrers(caller.forward(req)).await);
        }
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::REFERRERS,
            Need::on(Action::Read, &req.namespace),
        )?;
        if let Some(attr) = &attr {
            may_see(&caller, attr)?;
        }
        let as_of = AsOf::of(&self.shared, req.as_of_tx, req.as_of_time_ns)?;
        let opts = reads::ReadOptions {
            as_of: as_of.tx.map(TxId),
            valid_at_ns: req.valid_at_ns,
            ..reads::ReadOptions::default()
        };
        let page = {
            let scope = caller.scope.clone();
            let (cursor, limit) = (req.cursor.clone(), pages::page_size(req.limit));
            let target = EntityId(req.entity);
            self.shared
                .read_sized(true, move |store| {
                    // An attribute the caller may not read never says that it refers.
                    let shows =
                        |a: &engram_types::Attribute| scope.as_ref().is_none_or(|s| s.shows(a.as_str()));
                    engram_core::lists::referrers(
                        store,
                        &ns,
                        target,
                        attr.as_ref(),
                        &shows,
                        &opts,
                        &cursor,
                        limit,
                    )
                })
                .await?
        };
        self.shared
            .record_access(
                &caller,
                "referrers",
                &req.namespace,
                Some(req.entity),
                as_of.tx,
                page.datoms.len(),
            )
            .await;
        Ok(Response::new(pb::ReferrersResponse {
            datoms: datoms(&page.datoms),
            next_cursor: page.next.map(|c| c.encode()).unwrap_or_default(),
            as_of_tx: page.as_of.0,
            applied_tx: self.shared.applied_index(),
        }))
    }

    async fn query(&self, request: Request<pb::QueryRequest>) -> Result<Response<pb::QueryResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        // Checked before forwarding, so a bad request is refused by the node it reached.
        let ns = namespace(req.namespace.clone())?;
        let on = branch(req.branch.clone())?;
        let query = engram_proto::query(
            req.find.clone(),
            req.clauses.clone(),
            req.filters.clone(),
            req.not_clauses.clone(),
            req.or_clauses.clone(),
            req.not_groups.clone(),
        )
        .map_err(ApiError::from)?;
        let max_rows_read = match req.max_rows_read {
            0 => engram_core::query::DEFAULT_MAX_ROWS_READ,
            n if n > engram_core::query::MAX_ROWS_READ => {
                return Err(ApiError::Invalid(format!(
                    "max_rows_read: {n} is over the most a query may read ({})",
                    engram_core::query::MAX_ROWS_READ
                ))
                .into());
            }
            n => n,
        };
        if let Some(mut leader) = self.shared.read_leader(req.consistency, caller.forwarded).await? {
            return relay(leader.query(caller.forward(req)).await);
        }
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::QUERY,
            Need::on(Action::Read, &req.namespace),
        )?;
        // A join through an attribute one may not read would bind its values, and a `not` (or
        // an `or` alternative) of one would tell which entities hold it: refused whole, as a
        // Find of it is.
        for attribute in query.attributes() {
            may_see(&caller, attribute)?;
        }
        let as_of = AsOf::of(&self.shared, req.as_of_tx, req.as_of_time_ns)?;
        let opts = engram_core::query::QueryOptions {
            as_of: as_of.tx.map(TxId),
            valid_at_ns: req.valid_at_ns,
            expired_at_ns: as_of.expiry_judged_at(req.include_expired),
            max_rows_read,
        };
        let page = {
            let query = query.clone();
            let (cursor, limit) = (req.cursor.clone(), engram_core::query::page_rows(req.limit));
            self.shared
                .read_sized(true, move |store| {
                    engram_core::query::run(store, &ns, on.as_ref(), &query, &opts, &cursor, limit)
                })
                .await?
        };
        self.shared
            .record_access(&caller, "query", &req.namespace, None, as_of.tx, page.rows.len())
            .await;
        let plan = if req.explain {
            page.plan
                .iter()
                .map(|s| pb::QueryStep {
                    clause: s.clause as u32,
                    access: if s.is_or() {
                        let names: Vec<String> = s
                            .alternatives
                            .iter()
                            .map(|order| match order.as_slice() {
                                [(_, access)] => access.name().to_string(),
                                steps => {
                                    let named: Vec<String> =
                                        steps.iter().map(|(m, a)| format!("{} [{m}]", a.name())).collect();
                                    named.join(" & ")
                                }
                            })
                            .collect();
                        names.join(" | ")
                    } else {
                        s.access.name().to_string()
                    },
                    or_clause: s.is_or(),
                    binds: s.binds.iter().map(ToString::to_string).collect(),
                    uses: s.uses.iter().map(ToString::to_string).collect(),
                    rows_read: s.rows_read,
                    rows_out: s.rows_out,
                    filters: s.filters.iter().map(|&f| f as u32).collect(),
                    negations: s.negations.iter().map(|&n| n as u32).collect(),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Response::new(pb::QueryResponse {
            columns: query.find.iter().map(ToString::to_string).collect(),
            rows: page
                .rows
                .iter()
                .map(|r| pb::QueryRow {
                    values: r.iter().map(Into::into).collect(),
                })
                .collect(),
            next_cursor: page.next.map(|c| c.encode()).unwrap_or_default(),
            as_of_tx: page.as_of.0,
            applied_tx: self.shared.applied_index(),
            rows_read: page.rows_read,
            plan,
        }))
    }

    async fn search(
        &self,
        request: Request<pb::SearchRequest>,
    ) -> Result<Response<pb::SearchResponse>, Status> {
        let (meta, _, req) = request.into_parts();
        let caller = self.shared.incoming(&meta)?;
        let forwarded = caller.forwarded;
        // Checked before forwarding, so a bad request is refused by the node it reached. A
        // request naming no transaction is answered as of this node's applied state, set below.
        let (scope, mut query) =
            engram_proto::search_request(req.clone(), TxId(0)).map_err(ApiError::from)?;
        if let Some(mut leader) = self.shared.read_leader(req.consistency, forwarded).await? {
            return relay(leader.search(caller.forward(req)).await);
        }
        let caller = self.shared.admit(
            &meta,
            &req,
            methods::SEARCH,
            Need::on(Action::Read, &req.namespace),
        )?;
        let applied = self.shared.applied_index();
        let as_of = AsOf::of(&self.shared, req.as_of_tx, req.as_of_time_ns)?;
        query.as_of = TxId(as_of.tx.unwrap_or(applied));
        query.filter.expired_at_ns = as_of.expiry_judged_at(req.include_expired);
        // Searching by an attribute one may not read would tell what its values say.
        if let Some(grants) = &caller.scope
            && let Some(hidden) = query.filter.attributes.iter().find(|a| !grants.shows(a.as_str()))
        {
            return Err(ApiError::PermissionDenied(grants.reason(hidden.as_str())).into());
        }
        let namespace = scope.namespace.clone();
        let schema = self
            .shared
            .read_state(|store| engram_core::schema::view(store, &namespace, Some(query.as_of)))?;
        check_search_schema(&query, &namespace, &schema).map_err(ApiError::from)?;
        let shows = |a: &engram_types::Attribute| caller.scope.as_ref().is_none_or(|g| g.shows(a.as_str()));
        let hits = self
            .shared
            .search
            .recall(&self.shared.node, applied, &scope, &query, &shows)
            .await?;
        let found = self.shared.read_state(|store| {
            hits.iter()
                .map(|hit| {
                    // The hit names the datom's whole key (the search's scope, entity, attribute,
                    // tx, seq): one read, not a detour through its transaction's tx-log row.
                    let f = &hit.fact;
                    let key = match &scope.branch {
                        Some(b) => {
                            keys::branch_eavt(&scope.namespace, b, f.entity, &f.attribute, f.tx, f.seq)
                        }
                        None => keys::eavt(&scope.namespace, f.entity, &f.attribute, f.tx, f.seq),
                    };
                    let what = || format!("datom {} of tx {}", f.seq, f.tx.0);
                    let bytes = store.get(engram_storage::Space::State, &key)?.ok_or_else(|| {
                        engram_core::CoreError::corrupt(what(), "indexed for search but not stored")
                    })?;
                    engram_types::Datom::decode(&bytes)
                        .map_err(|e| engram_core::CoreError::corrupt(what(), e))
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        // The recall index is in memory and drops a redacted value's words only when it is
        // rebuilt from the stored datoms (at the node's start): until then a hit on one is left
        // out, so a search never tells what a forgotten value said.
        let (hits, found): (Vec<_>, Vec<_>) = hits
            .into_iter()
            .zip(found)
            .filter(|(_, d)| d.value.redacted().is_none())
            .unzip();
        let shown_datoms = shown(caller.scope.as_ref(), &found);
        let hits: Vec<pb::SearchHit> = hits
            .iter()
            .zip(shown_datoms)
            .enumerate()
            .map(|(i, (hit, datom))| pb::SearchHit {
                conflicting: found.iter().enumerate().any(|(j, other)| {
                    j != i
                        && other.entity == found[i].entity
                        && other.attribute == found[i].attribute
                        && other.provenance.agent != found[i].provenance.agent
                        && other.value != found[i].value
                }),
                datom: Some(datom),
                seq: hit.fact.seq,
                score: hit.score,
                signals: hit
                    .found_by
                    .iter()
                    .map(|(signal, rank)| pb::SignalRank {
                        signal: signal.name().to_string(),
                        rank: u32::try_from(*rank).unwrap_or(u32::MAX),
                    })
                    .collect(),
            })
            .collect();
        let proof = read_proof(&self.shared, req.prove, req.trusted_size, &found)?;
        self.shared
            .record_access(&caller, "search", &req.namespace, None, as_of.tx, hits.len())
            .await;
        Ok(Response::new(pb::SearchResponse {
            hits,
            applied_tx: applied,
            as_of_tx: query.as_of.0,
            proof,
        }))
    }
}

/// When a read is as of: a transaction the caller named, the last transaction at or before an
/// instant it named, or (neither) the current state.
struct AsOf {
    tx: Option<u64>,
    /// The instant named.
    at_ns: Option<i64>,
}

impl AsOf {
    /// Resolves a request's `as_of_tx` and `as_of_time_ns` (at most one of them) on this node:
    /// an instant becomes the last transaction at or before it (`reads::tx_at_time`).
    fn of(shared: &Shared, as_of_tx: Option<u64>, as_of_time_ns: Option<i64>) -> Result<AsOf, ApiError> {
        let Some(at_ns) = as_of_time_ns else {
            return Ok(AsOf {
                tx: as_of_tx,
                at_ns: None,
            });
        };
        if as_of_tx.is_some() {
            return Err(ApiError::Invalid(
                "as_of_time_ns: name a transaction (as_of_tx) or an instant (as_of_time_ns), not both".into(),
            ));
        }
        let now_ns = engram_raft::clock::now_ns();
        if at_ns > now_ns {
            return Err(ApiError::OutOfRange(format!(
                "as_of_time_ns: {at_ns} is after this node's clock ({now_ns}): what the memory will hold then is not known; read the current state (no as-of) instead"
            )));
        }
        match shared.read_state(|store| reads::tx_at_time(store, at_ns))? {
            Some((tx, _)) => Ok(AsOf {
                tx: Some(tx.0),
                at_ns: Some(at_ns),
            }),
            None => Err(ApiError::OutOfRange(format!(
                "as_of_time_ns: {at_ns} is before the first transaction: the memory held nothing then"
            ))),
        }
    }

    /// The instant a read judges `:memory/expires` at, unless the caller asked for expired
    /// entities too: the instant named, else this node's clock for a read of the current state.
    /// A read as of a transaction is the record as it stood, expired memories included: expiry
    /// is about what is worth recalling at a moment, and a transaction names none.
    fn expiry_judged_at(&self, include_expired: bool) -> Option<i64> {
        if include_expired {
            return None;
        }
        match (self.tx, self.at_ns) {
            (_, Some(at_ns)) => Some(at_ns),
            (Some(_), None) => None,
            (None, None) => Some(engram_raft::clock::now_ns()),
        }
    }
}

/// Refuses, naming the field, a search the namespace's schema (as of the answer's transaction)
/// cannot serve: a filter on an attribute that is not searchable, or a vector whose size no
/// searchable vector attribute (of the filter's, if it names any) has.
fn check_search_schema(
    query: &engram_recall::Query,
    namespace: &engram_types::Namespace,
    schema: &engram_core::schema::SchemaView,
) -> Result<(), engram_proto::WireError> {
    use engram_proto::WireError;
    use engram_types::ValueType;
    let def = |a: &engram_types::Attribute| {
        schema
            .attributes
            .iter()
            .map(|(v, _)| &v.def)
            .find(|d| d.ident == *a)
    };
    for (i, a) in query.filter.attributes.iter().enumerate() {
        if !def(a).is_some_and(|d| d.searchable) {
            return Err(WireError::new(
                format!("attributes[{i}]"),
                format!(
                    "{a} is not a searchable attribute of {namespace} (declare it with searchable: true)"
                ),
            ));
        }
    }
    if let Some(v) = &query.vector {
        let vectors: Vec<(&engram_types::Attribute, u32)> = schema
            .attributes
            .iter()
            .map(|(v, _)| &v.def)
            .filter(|d| d.value_type == ValueType::Vector && d.searchable)
            .filter(|d| query.filter.attributes.is_empty() || query.filter.attributes.contains(&d.ident))
            .map(|d| (&d.ident, d.dimension))
            .collect();
        if !vectors.iter().any(|(_, dim)| *dim as usize == v.len()) {
            let have = if vectors.is_empty() {
                format!("{namespace} has no searchable vector attribute")
            } else {
                let list: Vec<String> = vectors.iter().map(|(a, d)| format!("{a} has {d}")).collect();
                format!(
                    "of the searchable vector attributes of {namespace}, {}",
                    list.join(", ")
                )
            };
            return Err(WireError::new(
                "vector",
                format!("has {} components; {have}", v.len()),
            ));
        }
    }
    Ok(())
}
