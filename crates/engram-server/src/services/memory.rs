use std::sync::Arc;

use engram_core::reads;
use engram_proto::pb;
use engram_types::{EntityId, TxId, TxRequest};
use prost::Message;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{Route, Shared, forward_request, forwarded_err, is_forwarded};
use crate::error::ApiError;

/// `engram.v1.Memory`: transactions and reads.
pub struct MemoryService {
    shared: Arc<Shared>,
}

impl MemoryService {
    pub fn new(shared: Arc<Shared>) -> MemoryService {
        MemoryService { shared }
    }

    fn limit(limit: u32) -> usize {
        if limit == 0 {
            reads::MAX_READ_DATOMS
        } else {
            (limit as usize).min(reads::MAX_READ_DATOMS)
        }
    }

    async fn transact_inner(
        &self,
        request: Request<pb::TransactRequest>,
    ) -> Result<pb::TransactResponse, ApiError> {
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        let bytes = message.encoded_len();
        let limit = self.shared.config.max_tx_bytes;
        if bytes > limit {
            return Err(ApiError::TooLarge { bytes, limit });
        }
        if let Route::Leader(addr) = self.shared.route_write(forwarded)? {
            let mut client = self.shared.memory_client(&addr)?;
            return client
                .transact(forward_request(message))
                .await
                .map(Response::into_inner)
                .map_err(forwarded_err);
        }
        let tx = TxRequest::try_from(message.clone())?;
        match self.shared.node.propose(tx).await {
            Ok(Ok(receipt)) => {
                tracing::Span::current().record("tx_id", receipt.tx.0);
                Ok((&receipt).into())
            }
            Ok(Err(rejection)) => Err(ApiError::Rejected(rejection)),
            Err(engram_raft::NodeError::NotLeader {
                leader: Some((_, info)),
            }) if !forwarded => {
                let mut client = self.shared.memory_client(&info.addr)?;
                client
                    .transact(forward_request(message))
                    .await
                    .map(Response::into_inner)
                    .map_err(forwarded_err)
            }
            Err(e) => Err(e.into()),
        }
    }
}

fn namespace(raw: String) -> Result<engram_types::Namespace, ApiError> {
    Ok(engram_proto::namespace("namespace", raw)?)
}

fn datoms(list: &[engram_types::Datom]) -> Vec<pb::Datom> {
    list.iter().map(Into::into).collect()
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
    let store = &*shared.node.store;
    let (checkpoint, proofs) = engram_core::proofs::read_proof(store, &shared.node.keys.current(), found)?;
    let size = checkpoint.checkpoint.size;
    let consistency = if trusted_size > 0 && trusted_size <= size {
        engram_core::proofs::consistency(store, trusted_size, size)?.1
    } else {
        Vec::new()
    };
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
/// Events buffered per watch: a slow reader holds back only its own stream.
const WATCH_BUFFER: usize = 64;

type WatchStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::TxEvent, Status>> + Send>>;

/// The event for one transaction, with its datoms that pass the filter (`None`: none does).
fn watch_event(
    record: engram_core::reads::TxRecord,
    attribute: Option<&engram_types::Attribute>,
    entity: Option<EntityId>,
) -> Option<pb::TxEvent> {
    let datoms: Vec<pb::Datom> = record
        .datoms
        .iter()
        .filter(|d| attribute.is_none_or(|a| &d.attribute == a) && entity.is_none_or(|e| d.entity == e))
        .map(Into::into)
        .collect();
    if datoms.is_empty() {
        return None;
    }
    Some(pb::TxEvent {
        tx: record.receipt.tx.0,
        tx_time_ns: record.receipt.tx_time_ns,
        audit_index: record.receipt.audit_index,
        audit_hash: record.receipt.audit_hash.0.to_vec(),
        datoms,
    })
}

#[tonic::async_trait]
impl pb::memory_server::Memory for MemoryService {
    type WatchStream = WatchStream;

    async fn diff(&self, request: Request<pb::DiffRequest>) -> Result<Response<pb::DiffResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let req = request.into_inner();
        let ns = namespace(req.namespace.clone())?;
        if req.to_tx != 0 && req.from_tx > req.to_tx {
            return Err(ApiError::Invalid(format!(
                "from_tx {} is after to_tx {}: a diff runs forward in time",
                req.from_tx, req.to_tx
            ))
            .into());
        }
        if let Route::Leader(addr) = self.shared.route_read(req.consistency, forwarded).await? {
            let mut client = self.shared.memory_client(&addr).map_err(Status::from)?;
            return client
                .diff(forward_request(req))
                .await
                .map_err(|s| forwarded_err(s).into());
        }
        let to = if req.to_tx == 0 {
            self.shared.applied_index()
        } else {
            req.to_tx
        };
        let found = reads::diff(
            &*self.shared.node.store,
            &ns,
            req.entity.map(EntityId),
            TxId(req.from_tx),
            TxId(to),
            Self::limit(req.limit),
        )
        .map_err(ApiError::from)?;
        Ok(Response::new(pb::DiffResponse {
            asserted: datoms(&found.asserted),
            retracted: datoms(&found.retracted),
            to_tx: to,
            truncated: found.truncated,
        }))
    }

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let req = request.into_inner();
        let ns = namespace(req.namespace)?;
        let attribute = match req.attribute.as_str() {
            "" => None,
            a => Some(engram_proto::attribute("attribute", a.to_string()).map_err(ApiError::from)?),
        };
        let entity = req.entity.map(EntityId);
        let node = self.shared.node.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_BUFFER);
        tokio::task::spawn(async move {
            let mut next = TxId(req.from_tx);
            loop {
                let applied = node.status().applied_index;
                let (records, after) = match reads::transactions_from(&*node.store, &ns, next, WATCH_PAGE_TXS)
                {
                    Ok(page) => page,
                    Err(e) => {
                        let _ = tx.send(Err(Status::from(ApiError::from(e)))).await;
                        return;
                    }
                };
                for record in records {
                    if let Some(event) = watch_event(record, attribute.as_ref(), entity)
                        && tx.send(Ok(event)).await.is_err()
                    {
                        return; // the reader went away
                    }
                }
                if after == next {
                    // Caught up: wait for the next applied entry (bounded, so a reader that
                    // left is noticed even on an idle cluster).
                    if tx.is_closed() {
                        return;
                    }
                    node.wait_applied(applied + 1, std::time::Duration::from_secs(1))
                        .await;
                }
                next = after;
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
        let span = tracing::info_span!(
            "transact",
            node_id = self.shared.node.node_id,
            tx_id = tracing::field::Empty
        );
        Ok(Response::new(
            self.transact_inner(request).instrument(span).await?,
        ))
    }

    async fn get(&self, request: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let req = request.into_inner();
        let ns = namespace(req.namespace.clone())?;
        if let Route::Leader(addr) = self.shared.route_read(req.consistency, forwarded).await? {
            let mut client = self.shared.memory_client(&addr).map_err(Status::from)?;
            return client
                .get(forward_request(req))
                .await
                .map_err(|s| forwarded_err(s).into());
        }
        let found = reads::get(
            &*self.shared.node.store,
            &ns,
            EntityId(req.entity),
            req.as_of_tx.map(TxId),
            req.valid_at_ns,
        )
        .map_err(ApiError::from)?;
        Ok(Response::new(pb::GetResponse {
            entity: req.entity,
            datoms: datoms(&found),
            applied_tx: self.shared.applied_index(),
            proof: read_proof(&self.shared, req.prove, req.trusted_size, &found)?,
        }))
    }

    async fn history(
        &self,
        request: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let req = request.into_inner();
        let ns = namespace(req.namespace.clone())?;
        let limit = Self::limit(req.limit);
        let filter = match req.attribute_filter.as_str() {
            "" => None,
            a => Some(engram_proto::attribute("attribute_filter", a.to_string()).map_err(ApiError::from)?),
        };
        let target = req
            .target
            .clone()
            .ok_or_else(|| ApiError::Invalid("target: entity or attribute is required".into()))?;
        if let Route::Leader(addr) = self.shared.route_read(req.consistency, forwarded).await? {
            let mut client = self.shared.memory_client(&addr).map_err(Status::from)?;
            return client
                .history(forward_request(req))
                .await
                .map_err(|s| forwarded_err(s).into());
        }
        let store = &*self.shared.node.store;
        let found = match target {
            pb::history_request::Target::Entity(e) => {
                reads::entity_history(store, &ns, EntityId(e), filter.as_ref(), limit)
                    .map_err(ApiError::from)?
            }
            pb::history_request::Target::Attribute(a) => {
                let attr = engram_proto::attribute("attribute", a).map_err(ApiError::from)?;
                reads::attribute_history(store, &ns, &attr, limit).map_err(ApiError::from)?
            }
        };
        Ok(Response::new(pb::HistoryResponse {
            datoms: datoms(&found),
            applied_tx: self.shared.applied_index(),
            proof: read_proof(&self.shared, req.prove, req.trusted_size, &found)?,
        }))
    }

    async fn find(&self, request: Request<pb::FindRequest>) -> Result<Response<pb::FindResponse>, Status> {
        let forwarded = is_forwarded(&request);
        let req = request.into_inner();
        let ns = namespace(req.namespace.clone())?;
        let attr = engram_proto::attribute("attribute", req.attribute.clone()).map_err(ApiError::from)?;
        let value = match &req.value {
            None => None,
            some => Some(engram_proto::value("value", some.clone()).map_err(ApiError::from)?),
        };
        if let Route::Leader(addr) = self.shared.route_read(req.consistency, forwarded).await? {
            let mut client = self.shared.memory_client(&addr).map_err(Status::from)?;
            return client
                .find(forward_request(req))
                .await
                .map_err(|s| forwarded_err(s).into());
        }
        let found = reads::find(
            &*self.shared.node.store,
            &ns,
            &attr,
            value.as_ref(),
            req.as_of_tx.map(TxId),
            Self::limit(req.limit),
        )
        .map_err(ApiError::from)?;
        Ok(Response::new(pb::FindResponse {
            datoms: datoms(&found),
            applied_tx: self.shared.applied_index(),
        }))
    }
}
