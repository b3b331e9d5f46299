//! Join queries ([`Join`]): the rows of values that satisfy every clause at once, over one
//! namespace's current claims as of one point.
//!
//! Like the other paged reads, [`Client::query`] follows the server's cursors until the answer
//! ends or the join's limit is reached (then the answer's `next_cursor` is set and
//! [`Client::query_page`] goes on from it), so no answer stops short without saying so.

use engram_proto::{methods, pb};
use engram_types::query::Query;
use engram_types::{BranchName, Namespace};

use crate::client::memory;
use crate::pages::Follow;
use crate::{Client, ClientError, Consistency, Idempotency};

/// A [`Client::query`] request.
#[derive(Clone, Debug)]
pub struct Join {
    pub namespace: Namespace,
    /// `None`: main.
    pub branch: Option<BranchName>,
    pub query: Query,
    pub as_of_tx: Option<u64>,
    /// As of the last transaction at or before this instant; not with `as_of_tx`.
    pub as_of_time_ns: Option<i64>,
    /// Only claims whose valid-time interval holds this instant.
    pub valid_at_ns: Option<i64>,
    /// Let entities whose `:memory/expires` has passed match too.
    pub include_expired: bool,
    /// At most this many rows in all (0: every one); for [`Client::query_page`], the page
    /// size (0: the server's largest).
    pub limit: u32,
    /// The most rows one page's run may read (0: the server's default).
    pub max_rows_read: u64,
    /// Ask for the plan the server ran.
    pub explain: bool,
    pub consistency: Consistency,
}

impl Join {
    /// `query` over `namespace`'s main as of now, read linearizably.
    pub fn new(namespace: Namespace, query: Query) -> Join {
        Join {
            namespace,
            branch: None,
            query,
            as_of_tx: None,
            as_of_time_ns: None,
            valid_at_ns: None,
            include_expired: false,
            limit: 0,
            max_rows_read: 0,
            explain: false,
            consistency: Consistency::Linearizable,
        }
    }
}

impl Client {
    /// Every row of `join` (up to its limit), following cursors; the plan is the first page's.
    pub async fn query(&self, join: &Join) -> Result<pb::QueryResponse, ClientError> {
        self.query_all(join, &[], |_| ()).await
    }

    /// [`Client::query`] from `from` (empty: the beginning; else the `next_cursor` of an
    /// earlier answer), telling `progress` the number of rows read after each page.
    pub async fn query_all(
        &self,
        join: &Join,
        from: &[u8],
        mut progress: impl FnMut(usize),
    ) -> Result<pb::QueryResponse, ClientError> {
        let mut pages = Follow::new(join.limit, from);
        while let Some((cursor, size)) = pages.next() {
            progress(pages.add(self.query_page_of(join, &cursor, size).await?));
        }
        Ok(pages.finish().unwrap_or_default())
    }

    /// One page of `join` (at most `join.limit` rows) from `cursor` (empty: the first).
    pub async fn query_page(&self, join: &Join, cursor: &[u8]) -> Result<pb::QueryResponse, ClientError> {
        self.query_page_of(join, cursor, join.limit).await
    }

    async fn query_page_of(
        &self,
        join: &Join,
        cursor: &[u8],
        size: u32,
    ) -> Result<pb::QueryResponse, ClientError> {
        let (not_clauses, not_groups) = engram_proto::negations_to_pb(&join.query);
        let req = pb::QueryRequest {
            namespace: join.namespace.to_string(),
            branch: join.branch.as_ref().map(ToString::to_string).unwrap_or_default(),
            find: join.query.find.iter().map(ToString::to_string).collect(),
            clauses: engram_proto::clauses_to_pb(&join.query),
            filters: engram_proto::filters_to_pb(&join.query),
            not_clauses,
            or_clauses: engram_proto::disjunctions_to_pb(&join.query),
            not_groups,
            as_of_tx: join.as_of_tx,
            as_of_time_ns: join.as_of_time_ns,
            valid_at_ns: join.valid_at_ns,
            include_expired: join.include_expired,
            limit: size,
            cursor: cursor.to_vec(),
            max_rows_read: join.max_rows_read,
            explain: join.explain,
            consistency: join.consistency.to_pb(),
        };
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).query(s.sign(methods::QUERY, req)).await }
        })
        .await
        .map(|(_, r)| r)
    }
}
