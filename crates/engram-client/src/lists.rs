//! Lists the server answers in pages: the namespaces the caller may read, the entities of a
//! namespace, the current claims that refer to an entity, and the lists a caller takes whole
//! (agents, grants, retention policies, sessions, a namespace's branches).
//!
//! Like [`crate::pages`], [`Client::list_namespaces`], [`Client::list_entities`] and
//! [`Client::referrers`] follow the server's cursors until the list ends or the query's limit
//! is reached (then the answer's `next_cursor` is set, and the `*_page` calls go on from it a
//! page at a time), so no list stops short without saying so.

use engram_proto::{methods, pb};
use engram_types::{Attribute, EntityId, Namespace};

use crate::client::{access, memory};
use crate::pages::{Follow, every_page};
use crate::{Client, ClientError, Consistency, Idempotency};

/// A [`Client::list_entities`] query: the entities of a namespace on main with a datom (of
/// `attribute`, if set) up to the as-of transaction, in id order.
#[derive(Clone, Debug)]
pub struct EntitiesQuery {
    pub namespace: Namespace,
    /// Only entities with a datom of this attribute; `None`: every entity.
    pub attribute: Option<Attribute>,
    pub as_of_tx: Option<u64>,
    /// As of the last transaction at or before this instant (ns since the Unix epoch); not
    /// with `as_of_tx`.
    pub as_of_time_ns: Option<i64>,
    /// At most this many entities in all (0: every one); for [`Client::list_entities_page`],
    /// the page size (0: the server's largest).
    pub limit: u32,
    pub consistency: Consistency,
}

impl EntitiesQuery {
    /// Every entity of `namespace`, read linearizably.
    pub fn new(namespace: Namespace) -> EntitiesQuery {
        EntitiesQuery {
            namespace,
            attribute: None,
            as_of_tx: None,
            as_of_time_ns: None,
            limit: 0,
            consistency: Consistency::Linearizable,
        }
    }
}

/// A [`Client::referrers`] query: the current claims on main whose value refers to `entity`.
#[derive(Clone, Debug)]
pub struct ReferrersQuery {
    pub namespace: Namespace,
    pub entity: EntityId,
    /// Only through this attribute; `None`: any the caller may read.
    pub attribute: Option<Attribute>,
    pub as_of_tx: Option<u64>,
    /// As of the last transaction at or before this instant; not with `as_of_tx`.
    pub as_of_time_ns: Option<i64>,
    /// Only claims whose valid-time interval holds this instant.
    pub valid_at_ns: Option<i64>,
    /// At most this many datoms in all (0: every one); for [`Client::referrers_page`], the
    /// page size (0: the server's largest).
    pub limit: u32,
    pub consistency: Consistency,
}

impl ReferrersQuery {
    /// Every current claim referring to `entity`, read linearizably.
    pub fn new(namespace: Namespace, entity: EntityId) -> ReferrersQuery {
        ReferrersQuery {
            namespace,
            entity,
            attribute: None,
            as_of_tx: None,
            as_of_time_ns: None,
            valid_at_ns: None,
            limit: 0,
            consistency: Consistency::Linearizable,
        }
    }
}

impl Client {
    /// The namespaces the caller may read, in name order: at most `limit` (0: all of them),
    /// from `from` (empty: the beginning; else the `next_cursor` of an earlier answer).
    pub async fn list_namespaces(
        &self,
        limit: u32,
        from: &[u8],
        consistency: Consistency,
    ) -> Result<pb::ListNamespacesResponse, ClientError> {
        let mut pages = Follow::new(limit, from);
        while let Some((cursor, size)) = pages.next() {
            let req = pb::ListNamespacesRequest {
                limit: size,
                cursor,
                consistency: consistency.to_pb(),
            };
            let page = self
                .call_with_endpoint(Idempotency::Safe, move |ch, s| {
                    let req = req.clone();
                    async move {
                        memory(ch)
                            .list_namespaces(s.sign(methods::LIST_NAMESPACES, req))
                            .await
                    }
                })
                .await?
                .1;
            pages.add(page);
        }
        Ok(pages.finish().unwrap_or_default())
    }

    /// The entities `query` asks for, following the server's pages: at most `query.limit`
    /// (0: all of them), from `from` (empty: the beginning), telling `progress` the number of
    /// entities read after each page.
    pub async fn list_entities(
        &self,
        query: &EntitiesQuery,
        from: &[u8],
        mut progress: impl FnMut(usize),
    ) -> Result<pb::ListEntitiesResponse, ClientError> {
        let mut pages = Follow::new(query.limit, from);
        while let Some((cursor, size)) = pages.next() {
            progress(pages.add(self.entities_page_of(query, &cursor, size).await?));
        }
        Ok(pages.finish().unwrap_or_default())
    }

    /// One page of `query` (at most `query.limit` entities) from `cursor` (empty: the first).
    pub async fn list_entities_page(
        &self,
        query: &EntitiesQuery,
        cursor: &[u8],
    ) -> Result<pb::ListEntitiesResponse, ClientError> {
        self.entities_page_of(query, cursor, query.limit).await
    }

    async fn entities_page_of(
        &self,
        query: &EntitiesQuery,
        cursor: &[u8],
        size: u32,
    ) -> Result<pb::ListEntitiesResponse, ClientError> {
        let req = pb::ListEntitiesRequest {
            namespace: query.namespace.to_string(),
            attribute: query
                .attribute
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            as_of_tx: query.as_of_tx,
            as_of_time_ns: query.as_of_time_ns,
            limit: size,
            cursor: cursor.to_vec(),
            consistency: query.consistency.to_pb(),
        };
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move {
                memory(ch)
                    .list_entities(s.sign(methods::LIST_ENTITIES, req))
                    .await
            }
        })
        .await
        .map(|(_, r)| r)
    }

    /// The claims `query` asks for, following the server's pages: at most `query.limit`
    /// (0: all of them), from `from` (empty: the beginning).
    pub async fn referrers(
        &self,
        query: &ReferrersQuery,
        from: &[u8],
    ) -> Result<pb::ReferrersResponse, ClientError> {
        let mut pages = Follow::new(query.limit, from);
        while let Some((cursor, size)) = pages.next() {
            pages.add(self.referrers_page_of(query, &cursor, size).await?);
        }
        Ok(pages.finish().unwrap_or_default())
    }

    /// One page of `query` (at most `query.limit` datoms) from `cursor` (empty: the first).
    pub async fn referrers_page(
        &self,
        query: &ReferrersQuery,
        cursor: &[u8],
    ) -> Result<pb::ReferrersResponse, ClientError> {
        self.referrers_page_of(query, cursor, query.limit).await
    }

    async fn referrers_page_of(
        &self,
        query: &ReferrersQuery,
        cursor: &[u8],
        size: u32,
    ) -> Result<pb::ReferrersResponse, ClientError> {
        let req = pb::ReferrersRequest {
            namespace: query.namespace.to_string(),
            entity: query.entity.0,
            attribute: query
                .attribute
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            as_of_tx: query.as_of_tx,
            as_of_time_ns: query.as_of_time_ns,
            valid_at_ns: query.valid_at_ns,
            limit: size,
            cursor: cursor.to_vec(),
            consistency: query.consistency.to_pb(),
        };
        self.call_with_endpoint(Idempotency::Safe, move |ch, s| {
            let req = req.clone();
            async move { memory(ch).referrers(s.sign(methods::REFERRERS, req)).await }
        })
        .await
        .map(|(_, r)| r)
    }
}

/// The lists a caller takes whole, read a page at a time (each page at most the server's
/// largest, 10,000 items), so a long list is never one answer too large to send.
impl Client {
    /// Every branch of a namespace, in name order (read a page at a time).
    pub async fn branches(
        &self,
        namespace: &Namespace,
        consistency: Consistency,
    ) -> Result<pb::ListBranchesResponse, ClientError> {
        every_page(|cursor| {
            let req = pb::ListBranchesRequest {
                namespace: namespace.to_string(),
                consistency: consistency.to_pb(),
                limit: 0,
                cursor,
            };
            self.call(Idempotency::Safe, move |ch, s| {
                let req = req.clone();
                async move {
                    memory(ch)
                        .list_branches(s.sign(methods::LIST_BRANCHES, req))
                        .await
                }
            })
        })
        .await
    }

    /// Every agent, in name order (read a page at a time).
    pub async fn list_agents(&self) -> Result<pb::ListAgentsResponse, ClientError> {
        every_page(|cursor| {
            let req = pb::ListAgentsRequest { limit: 0, cursor };
            self.call(Idempotency::Safe, move |ch, s| {
                let req = req.clone();
                async move { access(ch).list_agents(s.sign(methods::LIST_AGENTS, req)).await }
            })
        })
        .await
    }

    /// Active grants, of one principal or (empty) of all (read a page at a time).
    pub async fn list_grants(&self, principal: &str) -> Result<pb::ListGrantsResponse, ClientError> {
        every_page(|cursor| {
            let req = pb::ListGrantsRequest {
                principal: principal.to_string(),
                limit: 0,
                cursor,
            };
            self.call(Idempotency::Safe, move |ch, s| {
                let req = req.clone();
                async move { access(ch).list_grants(s.sign(methods::LIST_GRANTS, req)).await }
            })
        })
        .await
    }

    /// The retention policies in force (read a page at a time).
    pub async fn list_retention(&self) -> Result<pb::ListRetentionResponse, ClientError> {
        every_page(|cursor| {
            let req = pb::ListRetentionRequest { limit: 0, cursor };
            self.call(Idempotency::Safe, move |ch, s| {
                let req = req.clone();
                async move {
                    access(ch)
                        .list_retention(s.sign(methods::LIST_RETENTION, req))
                        .await
                }
            })
        })
        .await
    }

    /// The sessions open, and each namespace's last ended session (read a page at a time).
    pub async fn list_sessions(&self) -> Result<pb::ListSessionsResponse, ClientError> {
        every_page(|cursor| {
            let req = pb::ListSessionsRequest { limit: 0, cursor };
            self.call(Idempotency::Safe, move |ch, s| {
                let req = req.clone();
                async move {
                    access(ch)
                        .list_sessions(s.sign(methods::LIST_SESSIONS, req))
                        .await
                }
            })
        })
        .await
    }
}
