use std::pin::Pin;
use std::sync::Arc;

use engram_audit::{EntryKind, SignedEntry};
use engram_core::reads;
use engram_proto::pb;
use futures::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::Shared;
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

fn to_pb(signed: &SignedEntry) -> pb::AuditEntry {
    let e = &signed.entry;
    pb::AuditEntry {
        index: e.index,
        tx: e.tx.0,
        tx_time_ns: e.tx_time_ns,
        namespace: e.namespace.clone(),
        kind: match e.kind {
            EntryKind::Transaction { .. } => "transaction",
            EntryKind::Membership { .. } => "membership",
        }
        .to_string(),
        prev_hash: e.prev_hash.0.to_vec(),
        hash: e.hash().0.to_vec(),
        signer_key_id: signed.attestation.key_id.0.to_vec(),
        signed: signed.encode(),
    }
}

type EntryStream = Pin<Box<dyn Stream<Item = Result<pb::AuditEntry, Status>> + Send>>;

#[tonic::async_trait]
impl pb::audit_server::Audit for AuditService {
    type EntriesStream = EntryStream;

    async fn entries(&self, request: Request<pb::EntriesRequest>) -> Result<Response<EntryStream>, Status> {
        let req = request.into_inner();
        let store = self.shared.node.store.clone();
        let head = reads::head(&*store).map_err(ApiError::from)?;
        // A node attests what it applies with its own key. If no membership entry of its chain
        // admits that key — it replicated entries while being added, and the addition never
        // committed — its attestations cannot be verified from the chain, and streaming them
        // would look like tampering to a verifier. Say so instead.
        let key_id = engram_audit::PublicKey(self.shared.node.info.public_key).key_id();
        if head.index > 0 && !reads::signer_admitted(&*store, key_id).map_err(ApiError::from)? {
            return Err(ApiError::Conflict(format!(
                "node {} holds the audit chain but is not admitted by it (its key {key_id} is in no membership entry), so its attestations cannot be verified; read the chain from a member of the cluster",
                self.shared.node.node_id
            ))
            .into());
        }
        let from = req.from_index.max(1);
        let last = if req.limit == 0 {
            head.index
        } else {
            head.index.min(from.saturating_add(req.limit) - 1)
        };
        // A bounded channel: a slow reader holds back only its own stream, never apply.
        let (tx, rx) = tokio::sync::mpsc::channel(PAGE_ENTRIES);
        tokio::task::spawn(async move {
            let mut next = from;
            while next <= last {
                let want = ((last - next + 1) as usize).min(PAGE_ENTRIES);
                let page = match reads::audit_entries(&*store, next, want) {
                    Ok(Ok(page)) => page,
                    Ok(Err(chain)) => {
                        let _ = tx.send(Err(Status::from(ApiError::Chain(chain)))).await;
                        return;
                    }
                    Err(core) => {
                        let _ = tx.send(Err(Status::from(ApiError::from(core)))).await;
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

    async fn head(&self, _request: Request<pb::HeadRequest>) -> Result<Response<pb::HeadResponse>, Status> {
        let head = reads::head(&*self.shared.node.store).map_err(ApiError::from)?;
        Ok(Response::new(pb::HeadResponse {
            index: head.index,
            hash: if head.index == 0 {
                Vec::new()
            } else {
                head.hash.0.to_vec()
            },
            tx: head.tx.0,
            tx_time_ns: head.tx_time_ns,
            node_id: self.shared.node.node_id,
        }))
    }
}
