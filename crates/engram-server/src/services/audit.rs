use std::pin::Pin;
use std::sync::Arc;

use engram_access::Action;
use engram_audit::{EntryKind, SignedCheckpoint, SignedEntry};
use engram_core::{proofs, reads};
use engram_proto::{methods, pb};
use engram_types::Hash;
use futures::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::Shared;
use super::gate::Need;
use crate::error::ApiError;

/// Entries read from the store per page while streaming.
const PAGE_ENTRIES: usize = 1024;

/// `engram.v1.Audit`: the chain, entry by entry, re-verified as it is read.
pub struct AuditService {
    shared: Arc<Shared>,
}

impl AuditService {
    pub fn new(shared: Arc<Shared>) -> AuditService {
        AuditService { shared }
    }
}

pub(crate) fn to_pb(signed: &SignedEntry) -> pb::AuditEntry {
    let e = &signed.entry;
    pb::AuditEntry {
        index: e.index,
        tx: e.tx.0,
        tx_time_ns: e.tx_time_ns,
        namespace: e.namespace.clone(),
        kind: match e.kind {
            EntryKind::Transaction { .. } => "transaction",
            EntryKind::Membership { .. } => "membership",
            EntryKind::KeyChange { .. } => "key_change",
        }
        .to_string(),
        prev_hash: e.prev_hash.0.to_vec(),
        hash: e.hash().0.to_vec(),
        state_root: e.state_root.map(|r| r.0.to_vec()).unwrap_or_default(),
        signer_key_id: signed
            .attestation
            .as_ref()
            .map(|a| a.key_id.0.to_vec())
            .unwrap_or_default(),
        signed: signed.encode(),
    }
}

pub(crate) fn checkpoint_pb(note: &SignedCheckpoint) -> pb::SignedCheckpoint {
    let cp = &note.checkpoint;
    pb::SignedCheckpoint {
        note: note.to_text(),
        origin: cp.origin.clone(),
        size: cp.size,
        root: cp.root.0.to_vec(),
        tx_time_ns: cp.tx_time_ns,
    }
}

fn hashes_pb(hashes: &[Hash]) -> Vec<Vec<u8>> {
    hashes.iter().map(|h| h.0.to_vec()).collect()
}

/// Bytes per export chunk on the wire.
const EXPORT_CHUNK_BYTES: usize = 256 << 10;

/// An `io::Write` that sends what it is given as export chunks over a bounded channel, from
/// the blocking thread that writes the export.
#[cfg(not(madsim))]
struct ChunkSink {
    tx: tokio::sync::mpsc::Sender<Result<pb::ExportChunk, Status>>,
    buf: Vec<u8>,
}

#[cfg(not(madsim))]
impl ChunkSink {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.buf);
        self.tx
            .blocking_send(Ok(pb::ExportChunk { data }))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

#[cfg(not(madsim))]
impl std::io::Write for ChunkSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= EXPORT_CHUNK_BYTES {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

type EntryStream = Pin<Box<dyn Stream<Item = Result<pb::AuditEntry, Status>> + Send>>;
type ExportStream = Pin<Box<dyn Stream<Item = Result<pb::ExportChunk, Status>> + Send>>;

#[tonic::async_trait]
impl pb::audit_server::Audit for AuditService {
    type EntriesStream = EntryStream;
    type ExportStream = ExportStream;

    async fn checkpoint(
        &self,
        request: Request<pb::CheckpointRequest>,
    ) -> Result<Response<pb::SignedCheckpoint>, Status> {
        self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::CHECKPOINT,
            // A signed tree size and root reveal no datom: any principal may check what it
            // reads against them (see `Client::trust_keys`).
            Need::Principal(String::new()),
        )?;
        let at_head = request.into_inner().at_head;
        let note = self.shared.read_state(|store| {
            if at_head {
                proofs::checkpoint_at_head(store, &self.shared.node.keys.current())
            } else {
                proofs::latest_checkpoint(store)
            }
        })?;
        match note {
            Some(note) => Ok(Response::new(checkpoint_pb(&note))),
            None => {
                Err(ApiError::NotFound("this node has no checkpoint yet (its chain is empty)".into()).into())
            }
        }
    }

    async fn inclusion_proof(
        &self,
        request: Request<pb::InclusionProofRequest>,
    ) -> Result<Response<pb::InclusionProofResponse>, Status> {
        self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::INCLUSION_PROOF,
            Need::cluster(Action::Audit),
        )?;
        let req = request.into_inner();
        let proof = self
            .shared
            .read_state(|store| proofs::inclusion(store, req.index, req.tree_size))?;
        Ok(Response::new(pb::InclusionProofResponse {
            entry: Some(to_pb(&proof.entry)),
            tree_size: proof.tree_size,
            path: hashes_pb(&proof.path),
        }))
    }

    async fn consistency_proof(
        &self,
        request: Request<pb::ConsistencyProofRequest>,
    ) -> Result<Response<pb::ConsistencyProofResponse>, Status> {
        self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::CONSISTENCY_PROOF,
            // Hashes of the tree only, as for checkpoints.
            Need::Principal(String::new()),
        )?;
        let req = request.into_inner();
        let (new_size, path) = self
            .shared
            .read_state(|store| proofs::consistency(store, req.old_size, req.new_size))?;
        Ok(Response::new(pb::ConsistencyProofResponse {
            old_size: req.old_size,
            new_size,
            path: hashes_pb(&path),
        }))
    }

    async fn export(&self, request: Request<pb::ExportRequest>) -> Result<Response<ExportStream>, Status> {
        let caller = self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::EXPORT,
            Need::cluster(Action::Audit),
        )?;
        // An export holds every namespace's datoms: logged when everything is (`*`).
        self.shared
            .record_access(&caller, "export", "", None, None, 0)
            .await;
        let node = self.shared.node.clone();
        let node_id = node.node_id;
        // A bounded channel: a slow reader holds back only its own export.
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        #[cfg(not(madsim))]
        {
            let errors = tx.clone();
            // Reading the store is blocking work: off the async workers, streamed as it goes.
            tokio::task::spawn_blocking(move || {
                let mut sink = ChunkSink { tx, buf: Vec::new() };
                // A snapshot install during the export would tear it: the export then ends
                // with UNAVAILABLE instead of its end record.
                let result = node
                    .read_state(|store| {
                        engram_core::export::write_export(store, &mut sink, node_id, |_, _| {})
                            .and_then(|_| Ok(std::io::Write::flush(&mut sink)?))
                    })
                    .map_err(ApiError::from)
                    .and_then(|written| Ok(written?));
                if let Err(e) = result {
                    let _ = errors.blocking_send(Err(Status::from(e)));
                }
            });
        }
        // The simulation has no blocking threads: export into memory, then stream the chunks.
        #[cfg(madsim)]
        {
            let mut bytes = Vec::new();
            let result = node
                .read_state(|store| engram_core::export::write_export(store, &mut bytes, node_id, |_, _| {}))
                .map_err(ApiError::from)
                .and_then(|written| Ok(written?));
            tokio::task::spawn(async move {
                let items = match result {
                    Ok(_) => bytes
                        .chunks(EXPORT_CHUNK_BYTES)
                        .map(|c| Ok(pb::ExportChunk { data: c.to_vec() }))
                        .collect(),
                    Err(e) => vec![Err(Status::from(e))],
                };
                for item in items {
                    if tx.send(item).await.is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn entries(&self, request: Request<pb::EntriesRequest>) -> Result<Response<EntryStream>, Status> {
        self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::ENTRIES,
            Need::cluster(Action::Audit),
        )?;
        let req = request.into_inner();
        let node = self.shared.node.clone();
        let head = self.shared.read_state(|store| reads::head(store))?;
        // A node attests what it applies with its own key. If no membership entry of its chain
        // admits that key — it replicated entries while being added, and the addition never
        // committed — its attestations cannot be verified from the chain, and streaming them
        // would look like tampering to a verifier. Say so instead.
        let key_id = engram_audit::PublicKey(self.shared.node.info.public_key).key_id();
        if head.index > 0
            && !self
                .shared
                .read_state(|store| reads::signer_admitted(store, key_id))?
        {
            return Err(ApiError::Conflict(format!(
                "node {} holds the audit chain but is not admitted by it (its key {key_id} is in no membership entry), so its attestations cannot be verified; read the chain from a member of the cluster",
                self.shared.node.node_id
            ))
            .into());
        }
        let from = req.from_index.max(1);
        // The chain this node vouches for ends at its last attested entry: an apply group in
        // progress is served once the attestation covering it is written.
        let end = head
            .index
            .min(self.shared.read_state(|store| reads::attested_index(store))?);
        let last = if req.limit == 0 {
            end
        } else {
            end.min(from.saturating_add(req.limit) - 1)
        };
        // A bounded channel: a slow reader holds back only its own stream, never apply.
        let (tx, rx) = tokio::sync::mpsc::channel(PAGE_ENTRIES);
        tokio::task::spawn(async move {
            let mut next = from;
            while next <= last {
                let want = ((last - next + 1) as usize).min(PAGE_ENTRIES);
                let page = super::read_state(&node, |store| reads::audit_entries(store, next, want))
                    .and_then(|page| page.map_err(ApiError::Chain));
                let page = match page {
                    Ok(page) => page,
                    Err(e) => {
                        let _ = tx.send(Err(Status::from(e))).await;
                        return;
                    }
                };
                if page.is_empty() {
                    return;
                }
                for signed in &page {
                    if tx.send(Ok(to_pb(signed))).await.is_err() {
                        return; // the client went away
                    }
                }
                next += page.len() as u64;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    /// The head of the chain this node vouches for: its last attested entry (the chain head
    /// itself but while an apply group is being written).
    async fn head(&self, request: Request<pb::HeadRequest>) -> Result<Response<pb::HeadResponse>, Status> {
        self.shared.admit(
            request.metadata(),
            request.get_ref(),
            methods::HEAD,
            Need::cluster(Action::Audit),
        )?;
        let (index, hash, tx, tx_time_ns) = self.shared.read_state(|store| {
            let head = reads::head(store).map_err(ApiError::from)?;
            let attested = reads::attested_index(store).map_err(ApiError::from)?;
            if attested >= head.index {
                return Ok((head.index, head.hash, head.tx.0, head.tx_time_ns));
            }
            if attested == 0 {
                return Ok((0, Hash::ZERO, 0, 0));
            }
            let entry = match reads::audit_entries(store, attested, 1).map_err(ApiError::from)? {
                Ok(mut page) if page.len() == 1 => page.remove(0).entry,
                Ok(_) => {
                    return Err(ApiError::from(engram_core::CoreError::corrupt(
                        format!("audit entry {attested}"),
                        "the attested mark names an entry the store does not hold",
                    )));
                }
                Err(chain) => return Err(ApiError::Chain(chain)),
            };
            Ok((entry.index, entry.hash(), entry.tx.0, entry.tx_time_ns))
        })?;
        Ok(Response::new(pb::HeadResponse {
            index,
            hash: if index == 0 { Vec::new() } else { hash.0.to_vec() },
            tx,
            tx_time_ns,
            node_id: self.shared.node.node_id,
        }))
    }
}
