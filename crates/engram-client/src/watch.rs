//! A watch that survives reconnects: [`Client::watch`] resumes from the last transaction it
//! delivered, on whichever endpoint answers, so the caller sees every matching transaction
//! exactly once, in order, across node failures and leader changes.

use engram_proto::{methods, pb};
use engram_types::{Attribute, BranchName, EntityId, Namespace};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tokio::time::Instant;

use crate::client::memory;
use crate::{Client, ClientError, Idempotency};

/// What a watch delivers.
#[derive(Clone, Debug)]
pub struct WatchFilter {
    pub namespace: Namespace,
    /// The first transaction to deliver (0: from the start).
    pub from_tx: u64,
    pub attribute: Option<Attribute>,
    pub entity: Option<EntityId>,
    /// Follow this branch's transactions instead of main's.
    pub branch: Option<BranchName>,
}

struct State {
    client: Client,
    filter: WatchFilter,
    stream: Option<(String, BoxStream<'static, Result<pb::TxEvent, tonic::Status>>)>,
    /// The last transaction delivered: the resume token.
    last_tx: Option<u64>,
    retry: u32,
    since_progress: Instant,
}

impl Client {
    /// Every committed transaction of the filter's namespace from `from_tx` on, as it commits,
    /// with only the datoms that pass the filter (transactions with none are skipped). When the
    /// stream breaks in a way a retry can mend (a node down, no leader, a timeout), it reopens
    /// on the next endpoint from the transaction after the last one delivered, within the
    /// retry budget counted from the last event. Ends with the error otherwise.
    pub fn watch(&self, filter: WatchFilter) -> BoxStream<'static, Result<pb::TxEvent, ClientError>> {
        let state = State {
            client: self.clone(),
            filter,
            stream: None,
            last_tx: None,
            retry: 0,
            since_progress: Instant::now(),
        };
        futures::stream::unfold(Some(state), |state| async move {
            let mut st = state?;
            loop {
                if st.stream.is_none() {
                    let req = pb::WatchRequest {
                        namespace: st.filter.namespace.to_string(),
                        from_tx: st.last_tx.map_or(st.filter.from_tx, |t| t + 1),
                        attribute: st
                            .filter
                            .attribute
                            .as_ref()
                            .map(|a| a.to_string())
                            .unwrap_or_default(),
                        entity: st.filter.entity.map(|e| e.0),
                        branch: st
                            .filter
                            .branch
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default(),
                    };
                    match st
                        .client
                        .call_with_endpoint(Idempotency::Safe, move |ch, s| {
                            let req = req.clone();
                            async move { memory(ch).watch(s.sign(methods::WATCH, req)).await }
                        })
                        .await
                    {
                        Ok((endpoint, stream)) => st.stream = Some((endpoint, stream.boxed())),
                        Err(e) => return Some((Err(e), None)),
                    }
                }
                let Some((endpoint, stream)) = st.stream.as_mut() else {
                    continue;
                };
                match stream.try_next().await {
                    Ok(Some(event)) => {
                        st.last_tx = Some(event.tx);
                        st.retry = 0;
                        st.since_progress = Instant::now();
                        return Some((Ok(event), Some(st)));
                    }
                    // A stream that ends or breaks transiently is reopened from the resume
                    // token; anything else ends the watch with the error.
                    Ok(None) => {}
                    Err(status) => {
                        let error = ClientError::rpc(endpoint, &status, st.retry + 1);
                        let policy = st.client.config().retry;
                        if !error.is_transient() || st.since_progress.elapsed() >= policy.max_elapsed {
                            return Some((Err(error), None));
                        }
                    }
                }
                st.stream = None;
                let delay = st.client.config().retry.backoff(st.retry);
                st.retry += 1;
                tokio::time::sleep(delay).await;
            }
        })
        .boxed()
    }
}
