//! Reads the server answers in pages: History, Find and Diff (the lists are in
//! [`crate::lists`]).
//!
//! The server returns at most a page (100,000 datoms at most) and, when the answer goes on, a
//! `next_cursor`; every page of one answer is read as of the transaction the first was
//! (`as_of_tx`). [`Client::history`], [`Client::history_all`], [`Client::find`],
//! [`Client::find_all`] and [`Client::diff`] follow the cursors until the answer ends or the
//! query's `limit` is reached, so a caller never gets a silently shortened answer: when a limit
//! stops the reading before the end, the answer's `next_cursor` is set, and
//! [`Client::history_page`], [`Client::find_page`] and [`Client::diff_page`] continue from it a
//! page at a time. A page that fails transiently is
//! retried like any read, on any node: the cursor carries the position, so no datom is read
//! twice or skipped.

use engram_proto::{methods, pb};
use engram_types::{BranchName, EntityId, Namespace};

use crate::client::{history_request, memory};
use crate::{Client, ClientError, Consistency, FindQuery, HistoryTarget, Idempotency};

/// A [`Client::history_all`] query: every datom of an entity or an attribute, in (tx, seq)
/// order.
#[derive(Clone, Debug)]
pub struct HistoryQuery {
    pub namespace: Namespace,
    pub target: HistoryTarget,
    /// Read this branch: main as of its fork plus the branch's own writes; `None`: main.
    pub branch: Option<BranchName>,
    /// At most this many datoms in all (0: every one); for [`Client::history_page`], the page
    /// size (0: the server's largest).
    pub limit: u32,
    pub consistency: Consistency,
    /// The history up to this transaction (inclusive); `None`: up to the head when the first
    /// page is read.
    pub as_of_tx: Option<u64>,
    /// The history up to the last transaction at or before this instant (ns since the Unix
    /// epoch); not with `as_of_tx`.
    pub as_of_time_ns: Option<i64>,
    /// Only what transactions after this one wrote; `None`: from the first.
    pub since_tx: Option<u64>,
    /// Only datoms valid at this instant (ns since the Unix epoch).
    pub valid_at_ns: Option<i64>,
}

impl HistoryQuery {
    /// Every datom of `target` on main, read linearizably.
    pub fn new(namespace: Namespace, target: HistoryTarget) -> HistoryQuery {
        HistoryQuery {
            namespace,
            target,
            branch: None,
            limit: 0,
            consistency: Consistency::Linearizable,
            as_of_tx: None,
            as_of_time_ns: None,
            since_tx: None,
            valid_at_ns: None,
        }
    }

    fn request(&self, cursor: &[u8], limit: u32) -> pb::HistoryRequest {
        let mut req = history_request(
            &self.namespace,
            self.target.clone(),
            limit,
            self.consistency,
            false,
        );
        req.branch = self.branch.as_ref().map(ToString::to_string).unwrap_or_default();
        req.cursor = cursor.to_vec();
        req.as_of_tx = self.as_of_tx;
        req.as_of_time_ns = self.as_of_time_ns;
        req.since_tx = self.since_tx;
        req.valid_at_ns = self.valid_at_ns;
        req
    }
}

/// A [`Client::diff_page`] and [`Client::diff_all`] query: what changed after `from_tx` up to `to_tx` (0: the head when
/// the first page is read), for one entity or the whole namespace.
#[derive(Clone, Debug)]
pub struct DiffQuery {
    pub namespace: Namespace,
    /// `None`: the whole namespace.
    pub entity: Option<EntityId>,
    pub from_tx: u64,
    pub to_tx: u64,
    /// For [`Client::diff_all`], at most this many datoms in all (0: every one); for
    /// [`Client::diff_page`], the page size (0: the server's largest).
    pub limit: u32,
    pub consistency: Consistency,
    /// Only datoms whose valid-time interval holds this instant (ns since the Unix epoch).
    pub valid_at_ns: Option<i64>,
}

impl Client {
    /// Every datom (assertions and retractions) of an entity or an attribute, in tx order,
    /// following the server's pages: at most `limit` (0: all of them).
    pub async fn history(
        &self,
        namespace: &Namespace,
        target: HistoryTarget,
        limit: u32,
        consistency: Consistency,
    ) -> Result<pb::HistoryResponse, ClientError> {
        let mut query = HistoryQuery::new(namespace.clone(), target);
        query.limit = limit;
        query.consistency = consistency;
        self.history_all(&query, &[], |_| ()).await
    }

    /// [`Client::history`] on a branch: main as of its fork plus the branch's writes.
    pub async fn history_on(
        &self,
        namespace: &Namespace,
        branch: &BranchName,
        target: HistoryTarget,
        limit: u32,
        consistency: Consistency,
    ) -> Result<pb::HistoryResponse, ClientError> {
        let mut query = HistoryQuery::new(namespace.clone(), target);
        query.branch = Some(branch.clone());
        query.limit = limit;
        query.consistency = consistency;
        self.history_all(&query, &[], |_| ()).await
    }

    /// The whole answer to `query` (at most `query.limit` datoms; 0: all), page after page, from
    /// `from` (empty: the beginning; else the `next_cursor` of an earlier answer, to go on from
    /// there); `progress` hears the number of datoms read after each page. `next_cursor` is set
    /// when the limit stopped the reading before the end.
    pub async fn history_all(
        &self,
        query: &HistoryQuery,
        from: &[u8],
        mut progress: impl FnMut(usize),
    ) -> Result<pb::HistoryResponse, ClientError> {
        let mut pages = Follow::new(query.limit, from);
        while let Some((cursor, size)) = pages.next() {
            progress(pages.add(self.history_page_of(query, &cursor, size).await?));
        }
        Ok(pages.finish().unwrap_or_default())
    }

    /// One page of `query` (at most `query.limit` datoms; 0: the server's largest page) from
    /// `cursor`: empty for the first page, else the `next_cursor` of the page before.
    pub async fn history_page(
        &self,
        query: &HistoryQuery,
        cursor: &[u8],
    ) -> Result<pb::HistoryResponse, ClientError> {
        self.history_page_of(query, cursor, query.limit).await
    }

    async fn history_page_of(
        &self,
        query: &HistoryQuery,
        cursor: &[u8],
        size: u32,
    ) -> Result<pb::HistoryResponse, ClientError> {
        self.history_raw(query.request(cursor, size))
            .await
            .map(|(_, r)| r)
    }

    /// What changed between `from_tx` (exclusive) and `to_tx` (inclusive; 0: the head when the
    /// first page is read) for one entity, or the whole namespace when `entity` is `None`,
    /// following the server's pages: at most `limit` datoms (0: all of them). `truncated` and
    /// `next_cursor` say when the limit stopped the reading before the end.
    pub async fn diff(
        &self,
        namespace: &Namespace,
        entity: Option<EntityId>,
        from_tx: u64,
        to_tx: u64,
        limit: u32,
        consistency: Consistency,
    ) -> Result<pb::DiffResponse, ClientError> {
        let query = DiffQuery {
            namespace: namespace.clone(),
            entity,
            from_tx,
            to_tx,
            limit,
            consistency,
            valid_at_ns: None,
        };
        self.diff_all(&query, &[], |_| ()).await
    }

    /// [`Client::diff`] of `query` (at most `query.limit` datoms; 0: all) from `from` (empty:
    /// the beginning; else the `next_cursor` of an earlier answer), telling `progress` the
    /// number of datoms read after each page.
    pub async fn diff_all(
        &self,
        query: &DiffQuery,
        from: &[u8],
        mut progress: impl FnMut(usize),
    ) -> Result<pb::DiffResponse, ClientError> {
        let mut pages = Follow::new(query.limit, from);
        while let Some((cursor, size)) = pages.next() {
            progress(pages.add(self.diff_page_of(query, &cursor, size).await?));
        }
        let mut answer = pages.finish().unwrap_or_default();
        answer.truncated = !answer.next_cursor.is_empty();
        Ok(answer)
    }

    /// One page of `query` (at most `query.limit` datoms; 0: the server's largest page) from
    /// `cursor`: empty for the first page, else the `next_cursor` of the page before.
    pub async fn diff_page(&self, query: &DiffQuery, cursor: &[u8]) -> Result<pb::DiffResponse, ClientError> {
        self.diff_page_of(query, cursor, query.limit).await
    }

    async fn diff_page_of(
        &self,
        query: &DiffQuery,
        cursor: &[u8],
        size: u32,
    ) -> Result<pb::DiffResponse, ClientError> {
        let req = pb::DiffRequest {
            namespace: query.namespace.to_string(),
            entity: query.entity.map(|e| e.0),
            from_tx: query.from_tx,
            to_tx: query.to_tx,
            limit: size,
            consistency: query.consistency.to_pb(),
            branch: String::new(),
            cursor: cursor.to_vec(),
            valid_at_ns: query.valid_at_ns,
        };
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).diff(s.sign(methods::DIFF, req)).await }
        })
        .await
        .map(|(_, r)| r)
    }

    /// The current datoms of an attribute, optionally only those with a given value, by
    /// entity, following the server's pages: at most `query.limit` (0: all of them).
    pub async fn find(&self, query: &FindQuery) -> Result<pb::FindResponse, ClientError> {
        self.find_all(query, &[], |_| ()).await
    }

    /// [`Client::find`] from `from` (empty: the beginning; else the `next_cursor` of an earlier
    /// answer), telling `progress` the number of datoms read after each page.
    pub async fn find_all(
        &self,
        query: &FindQuery,
        from: &[u8],
        mut progress: impl FnMut(usize),
    ) -> Result<pb::FindResponse, ClientError> {
        let mut pages = Follow::new(query.limit, from);
        while let Some((cursor, size)) = pages.next() {
            progress(pages.add(self.find_page_of(query, &cursor, size).await?));
        }
        Ok(pages.finish().unwrap_or_default())
    }

    /// One page of `query` (at most `query.limit` datoms, more only when one entity alone
    /// holds more; 0: the server's largest page) from `cursor`: empty for the first page, else
    /// the `next_cursor` of the page before.
    pub async fn find_page(&self, query: &FindQuery, cursor: &[u8]) -> Result<pb::FindResponse, ClientError> {
        self.find_page_of(query, cursor, query.limit).await
    }

    async fn find_page_of(
        &self,
        query: &FindQuery,
        cursor: &[u8],
        size: u32,
    ) -> Result<pb::FindResponse, ClientError> {
        let req = pb::FindRequest {
            namespace: query.namespace.to_string(),
            attribute: query.attribute.to_string(),
            value: query.value.as_ref().map(Into::into),
            as_of_tx: query.as_of_tx,
            limit: size,
            consistency: query.consistency.to_pb(),
            branch: query.branch.as_ref().map(ToString::to_string).unwrap_or_default(),
            include_expired: query.include_expired,
            cursor: cursor.to_vec(),
            as_of_time_ns: query.as_of_time_ns,
            since_tx: query.since_tx,
            valid_at_ns: query.valid_at_ns,
        };
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).find(s.sign(methods::FIND, req)).await }
        })
        .await
        .map(|(_, r)| r)
    }
}

/// Following a paged answer: which page to ask for next, and the answer so far (the first
/// page with every later page's datoms appended and the last page's cursor). Callers loop:
/// while [`Follow::next`] names a page, read it and [`Follow::add`] it.
pub(crate) struct Follow<P> {
    /// At most this many datoms (0: no limit).
    limit: u32,
    /// The cursor of the first page.
    start: Vec<u8>,
    answer: Option<P>,
}

impl<P: Paged> Follow<P> {
    /// Following from `start`: empty for the beginning, else the `next_cursor` of an earlier
    /// answer.
    pub(crate) fn new(limit: u32, start: &[u8]) -> Follow<P> {
        Follow {
            limit,
            start: start.to_vec(),
            answer: None,
        }
    }

    /// The cursor and page size of the next page to read; `None` once the answer ended or the
    /// limit is reached.
    pub(crate) fn next(&mut self) -> Option<(Vec<u8>, u32)> {
        let Some(answer) = self.answer.as_mut() else {
            return Some((self.start.clone(), self.limit));
        };
        if answer.next_cursor().is_empty() {
            return None;
        }
        let left = match self.limit {
            0 => 0,
            limit => match limit.checked_sub(u32::try_from(answer.len()).unwrap_or(u32::MAX)) {
                Some(left) if left > 0 => left,
                _ => return None,
            },
        };
        Some((answer.next_cursor().to_vec(), left))
    }

    /// Adds the page [`Follow::next`] named; returns the number of datoms read so far.
    pub(crate) fn add(&mut self, mut page: P) -> usize {
        match self.answer.as_mut() {
            None => self.answer = Some(page),
            Some(answer) => {
                answer.append(&mut page);
                *answer.next_cursor_mut() = std::mem::take(page.next_cursor_mut());
            }
        }
        self.answer.as_ref().map_or(0, Paged::len)
    }

    /// The answer; `None` if no page was added.
    pub(crate) fn finish(self) -> Option<P> {
        self.answer
    }
}

/// A page of a paged read: its datoms and where the next page begins.
pub(crate) trait Paged {
    /// The datoms it holds.
    fn len(&self) -> usize;
    /// Appends a later page's datoms.
    fn append(&mut self, later: &mut Self);
    fn next_cursor(&self) -> &[u8];
    fn next_cursor_mut(&mut self) -> &mut Vec<u8>;
}

/// The answers whose items (datoms, names, ids) are one list.
macro_rules! paged_list {
    ($($answer:ty => $items:ident),*) => {$(
        impl Paged for $answer {
            fn len(&self) -> usize {
                self.$items.len()
            }
            fn append(&mut self, later: &mut Self) {
                self.$items.append(&mut later.$items);
            }
            fn next_cursor(&self) -> &[u8] {
                &self.next_cursor
            }
            fn next_cursor_mut(&mut self) -> &mut Vec<u8> {
                &mut self.next_cursor
            }
        }
    )*};
}

paged_list!(
    pb::HistoryResponse => datoms,
    pb::FindResponse => datoms,
    pb::ListNamespacesResponse => namespaces,
    pb::ListEntitiesResponse => entities,
    pb::ReferrersResponse => datoms,
    pb::QueryResponse => rows,
    pb::ListAgentsResponse => agents,
    pb::ListGrantsResponse => grants,
    pb::ListRetentionResponse => policies,
    pb::ListBranchesResponse => branches
);

impl Paged for pb::ListSessionsResponse {
    fn len(&self) -> usize {
        self.sessions.len() + self.ended.len()
    }
    fn append(&mut self, later: &mut Self) {
        self.sessions.append(&mut later.sessions);
        self.ended.append(&mut later.ended);
    }
    fn next_cursor(&self) -> &[u8] {
        &self.next_cursor
    }
    fn next_cursor_mut(&mut self) -> &mut Vec<u8> {
        &mut self.next_cursor
    }
}

/// Every page of a list the server answers in pages, `ask(cursor)` reading the one at `cursor`
/// (empty: the first): the lists a caller takes whole (agents, grants, retention policies,
/// sessions, branches), which are never cut short.
pub(crate) async fn every_page<P, F, Fut>(mut ask: F) -> Result<P, crate::ClientError>
where
    P: Paged + Default,
    F: FnMut(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = Result<P, crate::ClientError>>,
{
    let mut pages = Follow::new(0, &[]);
    while let Some((cursor, _)) = pages.next() {
        pages.add(ask(cursor).await?);
    }
    Ok(pages.finish().unwrap_or_default())
}

impl Paged for pb::DiffResponse {
    fn len(&self) -> usize {
        self.asserted.len() + self.retracted.len()
    }
    fn append(&mut self, later: &mut Self) {
        self.asserted.append(&mut later.asserted);
        self.retracted.append(&mut later.retracted);
    }
    fn next_cursor(&self) -> &[u8] {
        &self.next_cursor
    }
    fn next_cursor_mut(&mut self) -> &mut Vec<u8> {
        &mut self.next_cursor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datom(n: u64) -> pb::Datom {
        pb::Datom {
            entity: n,
            ..Default::default()
        }
    }

    /// A server holding `total` datoms answering pages of at most `largest`, its cursor the
    /// index of the next datom; returns what following read and the page sizes asked.
    fn read(total: u64, largest: u32, limit: u32) -> (Vec<u64>, Vec<u8>, Vec<u32>) {
        let mut asked = Vec::new();
        let mut pages = Follow::new(limit, &[]);
        while let Some((cursor, size)) = pages.next() {
            asked.push(size);
            let from = if cursor.is_empty() {
                0
            } else {
                u64::from_be_bytes(cursor.try_into().expect("an 8-byte cursor"))
            };
            let size = if size == 0 { largest } else { size.min(largest) };
            let to = (from + u64::from(size)).min(total);
            pages.add(pb::FindResponse {
                datoms: (from..to).map(datom).collect(),
                next_cursor: if to < total {
                    to.to_be_bytes().to_vec()
                } else {
                    Vec::new()
                },
                ..Default::default()
            });
        }
        let answer = pages.finish().expect("a page");
        (
            answer.datoms.iter().map(|d| d.entity).collect(),
            answer.next_cursor,
            asked,
        )
    }

    #[test]
    fn following_reads_every_datom_once_and_stops_at_the_limit_with_a_cursor() {
        let (all, cursor, asked) = read(25, 10, 0);
        assert_eq!(all, (0..25).collect::<Vec<_>>());
        assert!(cursor.is_empty());
        assert_eq!(asked, [0, 0, 0]);
        let (some, cursor, asked) = read(25, 10, 13);
        assert_eq!(some, (0..13).collect::<Vec<_>>());
        assert_eq!(
            cursor,
            13u64.to_be_bytes(),
            "the limit stopped the reading: the cursor says where"
        );
        assert_eq!(asked, [13, 3]);
        let (exact, cursor, _) = read(20, 10, 20);
        assert_eq!(exact.len(), 20);
        assert!(cursor.is_empty(), "the answer ended exactly at the limit");
    }
}
