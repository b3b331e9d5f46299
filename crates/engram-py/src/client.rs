//! `engram.Client`: the Rust client behind a synchronous Python API.
//!
//! Each call runs on a Tokio runtime the object owns, with the GIL released, so other Python
//! threads go on while a call waits for the cluster. Leader discovery, endpoint rotation,
//! retries, request signing and proof checks are the Rust client's.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engram_access::AgentKey;
use engram_client::{
    Client, ClientConfig, ClientError, ClientTls, Consistency, DiffQuery, EntitiesQuery, FindQuery,
    GetOptions, HistoryQuery, HistoryTarget, Join, ReferrersQuery, SearchQuery, TrustedLog, WatchFilter, pb,
};
use engram_types::{
    AttributeDef, BranchName, Cardinality, Namespace, Precondition, Provenance, Status, TxRequest, Unique,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use pyo3::exceptions::{PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::convert;
use crate::errors;
use crate::types::{Datom, Diff, Entity, Hit, Receipt, Rows, TxEvent};

/// A connection to an Engram cluster through one or more of its nodes.
#[pyclass(subclass, name = "Client", module = "engram")]
pub struct EngramClient {
    runtime: Arc<tokio::runtime::Runtime>,
    client: Client,
    /// The agent transactions are recorded as by default: the key file's, or the one given.
    agent: Option<String>,
    /// What this client has verified of the cluster's log, for `prove=True` reads: established
    /// on first use from the whole chain, then moved forward by every proven answer.
    trust: Arc<tokio::sync::Mutex<Option<TrustedLog>>>,
}

impl EngramClient {
    /// Runs a client call with the GIL released; its error becomes the matching exception.
    fn run<T, F>(&self, py: Python<'_>, call: F) -> PyResult<T>
    where
        T: Send,
        F: Future<Output = Result<T, ClientError>> + Send,
    {
        let runtime = self.runtime.clone();
        py.detach(move || runtime.block_on(call))
            .map_err(|e| errors::to_py(py, &e))
    }

    /// Asks every endpoint in turn (a call each node answers for itself: its access log, its
    /// job log), in endpoint order; the first failure fails the whole.
    fn each_node<T, F, Fut>(&self, py: Python<'_>, call: F) -> PyResult<Vec<T>>
    where
        T: Send,
        F: Fn(Client) -> Fut + Send,
        Fut: Future<Output = Result<T, ClientError>> + Send,
    {
        let nodes: Vec<Client> = (0..self.client.endpoints().len())
            .filter_map(|i| self.client.node(i))
            .collect();
        self.run(py, async move {
            let mut all = Vec::with_capacity(nodes.len());
            for node in nodes {
                all.push(call(node).await?);
            }
            Ok(all)
        })
    }

    /// Runs a proven read: `call` gets the client and the trusted log (established on first
    /// use), and returns the log as the verified answer left it, with the answer.
    fn run_proven<T, F, Fut>(&self, py: Python<'_>, call: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(Client, TrustedLog) -> Fut + Send,
        Fut: Future<Output = (TrustedLog, Result<T, ClientError>)> + Send,
    {
        let client = self.client.clone();
        let trust = self.trust.clone();
        self.run(py, async move {
            let mut guard = trust.lock().await;
            let log = client.trusted(&mut guard).await?;
            let (log, answer) = call(client, log).await;
            *guard = Some(log);
            answer
        })
    }

    fn provenance(
        &self,
        agent: Option<String>,
        session: Option<String>,
        source: Option<String>,
        confidence: f64,
        status: &str,
    ) -> PyResult<Provenance> {
        let agent = agent.or_else(|| self.agent.clone()).ok_or_else(|| {
            PyValueError::new_err("agent: no agent given, and the client has no agent key or default agent")
        })?;
        let status = match status {
            "candidate" => Status::Candidate,
            "verified" => Status::Verified,
            other => {
                return Err(PyValueError::new_err(format!(
                    "status: {other:?} is not \"candidate\" or \"verified\""
                )));
            }
        };
        let provenance = Provenance {
            agent,
            session: session.unwrap_or_default(),
            source: source.unwrap_or_default(),
            confidence,
            status,
        };
        provenance.validate().map_err(invalid)?;
        Ok(provenance)
    }

    fn submit(&self, py: Python<'_>, mut request: TxRequest) -> PyResult<Receipt> {
        if request.idempotency_key.is_none() {
            // Every write carries a key, so the client may retry it on another node after a
            // failure in transit without applying it twice.
            request.idempotency_key = Some(fresh_key()?);
        }
        request.validate().map_err(invalid)?;
        let client = self.client.clone();
        let response = self.run(py, async move { client.transact(&request).await })?;
        receipt(py, response)
    }
}

#[pymethods]
impl EngramClient {
    /// Connects (lazily) to the nodes at `endpoints` (`host:port`, a list or a comma-separated
    /// string). With `agent_key` every request is signed as that agent, and transactions are
    /// recorded as it unless a call names another `agent`. `timeout_s` bounds one attempt;
    /// `retry_budget_s` bounds how long a call failing in transit is retried on other nodes.
    /// With `trust_keys` (node keys, hex), proven reads trust a checkpoint one of them signed
    /// instead of verifying the whole chain first (which needs the `audit` grant).
    #[new]
    #[pyo3(signature = (endpoints, *, agent_key=None, agent=None, timeout_s=10.0, connect_timeout_s=2.0, retry_budget_s=15.0, tls_ca=None, tls_cert=None, tls_key=None, trust_keys=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        agent_key: Option<PathBuf>,
        agent: Option<String>,
        timeout_s: f64,
        connect_timeout_s: f64,
        retry_budget_s: f64,
        tls_ca: Option<PathBuf>,
        tls_cert: Option<PathBuf>,
        tls_key: Option<PathBuf>,
        trust_keys: Option<Vec<String>>,
    ) -> PyResult<EngramClient> {
        let endpoints: Vec<String> = if endpoints.is_instance_of::<PyString>() {
            let text: String = endpoints.extract()?;
            text.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(String::from)
                .collect()
        } else {
            endpoints
                .extract()
                .map_err(|_| PyTypeError::new_err("endpoints: a str or a list of str (\"host:port\")"))?
        };
        if endpoints.is_empty() {
            return Err(PyValueError::new_err(
                "endpoints: at least one \"host:port\" is needed",
            ));
        }
        let seconds = |field: &str, s: f64| {
            if s.is_finite() && s > 0.0 {
                Ok(Duration::from_secs_f64(s))
            } else {
                Err(PyValueError::new_err(format!(
                    "{field}: a positive number of seconds"
                )))
            }
        };
        let key = agent_key
            .map(|path| AgentKey::load(&path).map_err(|e| PyValueError::new_err(format!("agent_key: {e}"))))
            .transpose()?;
        let agent = match (&key, agent) {
            (Some(key), Some(agent)) if agent != key.principal.as_str() => {
                return Err(PyValueError::new_err(format!(
                    "agent: {agent:?} differs from the key file's agent {:?}; a signed write must be recorded as its signer",
                    key.principal.as_str()
                )));
            }
            (Some(key), _) => Some(key.principal.as_str().to_string()),
            (None, agent) => agent,
        };
        if !(retry_budget_s.is_finite() && retry_budget_s >= 0.0) {
            return Err(PyValueError::new_err(
                "retry_budget_s: a non-negative number of seconds",
            ));
        }
        let mut config = ClientConfig {
            connect_timeout: seconds("connect_timeout_s", connect_timeout_s)?,
            request_timeout: seconds("timeout_s", timeout_s)?,
            agent: key.map(Arc::new),
            tls: tls(tls_ca, tls_cert, tls_key)?,
            trust_keys: trust_keys
                .unwrap_or_default()
                .iter()
                .map(|k| {
                    hex::decode(k.trim())
                        .ok()
                        .and_then(|b| <[u8; 32]>::try_from(b).ok())
                        .map(engram_client::PublicKey)
                        .ok_or_else(|| {
                            PyValueError::new_err(format!(
                                "trust_keys: {k:?} is not a node key (64 hex characters)"
                            ))
                        })
                })
                .collect::<PyResult<_>>()?,
            ..ClientConfig::default()
        };
        // How long a call that fails in transit (no leader, a node down) keeps being retried
        // on the other endpoints.
        config.retry.max_elapsed = Duration::from_secs_f64(retry_budget_s);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("engram-client")
            .enable_all()
            .build()
            .map_err(|e| PyValueError::new_err(format!("cannot start the client's runtime: {e}")))?;
        // Channels are made inside the runtime they will run on.
        let client = {
            let _inside = runtime.enter();
            Client::with_config(endpoints, config)
                .map_err(|e| PyValueError::new_err(format!("endpoints: {e}")))?
        };
        Ok(EngramClient {
            runtime: Arc::new(runtime),
            client,
            agent,
            trust: Arc::new(tokio::sync::Mutex::new(None)),
        })
    }

    /// The agent transactions are recorded as by default (`None`: every call must name one).
    #[getter]
    fn agent(&self) -> Option<String> {
        self.agent.clone()
    }

    /// The endpoints, as given.
    #[getter]
    fn endpoints(&self) -> Vec<String> {
        self.client.endpoints()
    }

    /// Records `ops` (each an `Assert`, a `Retract` or an `(entity, attribute, value)` tuple)
    /// as one transaction and returns its receipt. `preconditions` are
    /// `(entity, attribute, expected)` triples (`expected=None`: no current value) that must
    /// all hold when it applies, or nothing is applied (`PreconditionFailed`). Without an
    /// `idempotency_key` a fresh one is drawn, so retries never apply twice.
    #[pyo3(signature = (namespace, ops, *, agent=None, session=None, source=None, confidence=1.0, status="candidate", idempotency_key=None, branch=None, preconditions=None))]
    #[allow(clippy::too_many_arguments)]
    fn transact(
        &self,
        py: Python<'_>,
        namespace: &str,
        ops: &Bound<'_, PyAny>,
        agent: Option<String>,
        session: Option<String>,
        source: Option<String>,
        confidence: f64,
        status: &str,
        idempotency_key: Option<String>,
        branch: Option<String>,
        preconditions: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Receipt> {
        let namespace = namespace_arg(namespace)?;
        let mut tx_ops = Vec::new();
        for (i, op) in ops
            .try_iter()
            .map_err(|_| PyTypeError::new_err("ops: a list of ops"))?
            .enumerate()
        {
            tx_ops.push(convert::op(&format!("ops[{i}]"), &op?)?);
        }
        let provenance = self.provenance(agent, session, source, confidence, status)?;
        let mut request = TxRequest::data(namespace, tx_ops, provenance);
        request.branch = branch.map(|b| branch_arg("branch", b)).transpose()?;
        request.idempotency_key = idempotency_key;
        if let Some(pre) = preconditions {
            for (i, item) in pre
                .try_iter()
                .map_err(|_| PyTypeError::new_err("preconditions: a list of (entity, attribute, expected)"))?
                .enumerate()
            {
                request.preconditions.push(precondition(i, &item?)?);
            }
        }
        self.submit(py, request)
    }

    /// Declares or migrates attributes, each a dict: `ident`, `type` (string, i64, f64, bool,
    /// bytes, instant, ref, keyword, json, vector), and optionally `cardinality`
    /// ("one"/"many"), `unique` ("identity"/"value"), `indexed`, `component`, `doc`,
    /// `deprecated`, `searchable` (strings and vectors: found by `search`) and `dimension`
    /// (vectors: components per value).
    #[pyo3(signature = (namespace, attributes, *, agent=None, idempotency_key=None))]
    fn apply_schema(
        &self,
        py: Python<'_>,
        namespace: &str,
        attributes: &Bound<'_, PyAny>,
        agent: Option<String>,
        idempotency_key: Option<String>,
    ) -> PyResult<Receipt> {
        let namespace = namespace_arg(namespace)?;
        let mut defs = Vec::new();
        for (i, item) in attributes
            .try_iter()
            .map_err(|_| PyTypeError::new_err("attributes: a list of dicts"))?
            .enumerate()
        {
            defs.push(attribute_def(i, &item?)?);
        }
        let provenance = self.provenance(agent, None, None, 1.0, "candidate")?;
        let mut request = TxRequest::data(namespace, Vec::new(), provenance);
        request.schema = defs;
        request.idempotency_key = Some(match idempotency_key {
            Some(key) => key,
            None => fresh_key()?,
        });
        request.validate().map_err(invalid)?;
        let client = self.client.clone();
        let response = self.run(py, async move {
            client
                .apply_schema(
                    &request.namespace,
                    &request.schema,
                    &request.provenance,
                    request.idempotency_key.as_deref(),
                )
                .await
        })?;
        receipt(py, response)
    }

    /// The current facts of `entity`. `as_of_tx`: as they stood at that transaction;
    /// `as_of_time` (datetime or ns): as they stood at that instant (the last transaction at or
    /// before it); `valid_at`: only facts true at that time (datetime or ns); `rule`: "latest" or
    /// "verified" (verified claims first); `prove=True`: every datom is checked against a
    /// Merkle proof and a signed checkpoint, and `ProofError` is raised instead of returning
    /// anything that does not verify; `stale=True`: the answering node's state, possibly behind.
    /// An entity whose `:memory/expires` has passed comes back with no datoms and its
    /// `expired_at_ns` set, unless `include_expired=True` (reads with `as_of_tx` show it).
    /// `complete=True` (implies `prove`): the answer is also proven complete and current —
    /// every attribute of the entity with its whole history against the state root a signed
    /// checkpoint covers, folded here into the answer — or `ProofError` is raised; with
    /// `as_of_tx`, the same histories folded as of that transaction (the answer then, proven
    /// complete); on main (no `branch` or `as_of_time`); an unknown entity's absence is proven
    /// (no datoms, no error).
    #[pyo3(signature = (namespace, entity, *, as_of_tx=None, valid_at=None, branch=None, rule="latest", verified_only=false, prove=false, stale=false, include_expired=false, as_of_time=None, complete=false))]
    #[allow(clippy::too_many_arguments)]
    fn get(
        &self,
        py: Python<'_>,
        namespace: &str,
        entity: &Bound<'_, PyAny>,
        as_of_tx: Option<u64>,
        valid_at: Option<&Bound<'_, PyAny>>,
        branch: Option<String>,
        rule: &str,
        verified_only: bool,
        prove: bool,
        stale: bool,
        include_expired: bool,
        as_of_time: Option<&Bound<'_, PyAny>>,
        complete: bool,
    ) -> PyResult<Entity> {
        let namespace = namespace_arg(namespace)?;
        let entity = convert::entity_id("entity", entity)?;
        let opts = GetOptions {
            as_of_tx,
            as_of_time_ns: as_of_time_arg(as_of_time)?,
            valid_at_ns: valid_at.map(|v| convert::time_ns("valid_at", v)).transpose()?,
            consistency: consistency(stale),
            branch: branch.map(|b| branch_arg("branch", b)).transpose()?,
            rule: match rule {
                "latest" => pb::Resolution::Latest,
                "verified" => pb::Resolution::Verified,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "rule: {other:?} is not \"latest\" or \"verified\""
                    )));
                }
            },
            verified_only,
            include_expired,
        };
        let client = self.client.clone();
        let mut unfolded = Vec::new();
        let response = if complete {
            let proven = self.run_proven(py, move |client, mut log| async move {
                let answer = client.get_complete(&mut log, &namespace, entity, opts).await;
                (log, answer)
            })?;
            unfolded = proven.unfolded;
            proven.response
        } else if prove {
            self.run_proven(py, move |client, mut log| async move {
                let answer = client.get_verified(&mut log, &namespace, entity, opts).await;
                (log, answer)
            })?
        } else {
            self.run(py, async move { client.get(&namespace, entity, opts).await })?
        };
        Ok(Entity {
            id: response.entity,
            datoms: datom_list(py, response.datoms)?,
            conflicts: datom_list(py, response.conflicts)?,
            applied_tx: response.applied_tx,
            proven: prove || complete,
            complete,
            unfolded,
            expired_at_ns: response.expired_at_ns,
        })
    }

    /// Every datom (assertions and retractions) of an entity (optionally one `attribute` of
    /// it), or of one `attribute` across entities when `entity` is None, in transaction order:
    /// at most `limit` (0: all of them, read a page at a time as of one transaction); up to
    /// `as_of_tx`, or to the last transaction at or before `as_of_time` (datetime or ns).
    /// `complete=True`: an entity's history (or one `attribute`'s of it) proven whole against
    /// the state root a signed checkpoint covers, up to that checkpoint (or up to `as_of_tx`),
    /// or `ProofError`; needs `entity`, and no `limit`, `branch` or other bound.
    #[pyo3(signature = (namespace, entity=None, *, attribute=None, limit=0, branch=None, prove=false, stale=false, as_of_tx=None, as_of_time=None, since_tx=None, valid_at=None, complete=false))]
    #[allow(clippy::too_many_arguments)]
    fn history(
        &self,
        py: Python<'_>,
        namespace: &str,
        entity: Option<&Bound<'_, PyAny>>,
        attribute: Option<String>,
        limit: u32,
        branch: Option<String>,
        prove: bool,
        stale: bool,
        as_of_tx: Option<u64>,
        as_of_time: Option<&Bound<'_, PyAny>>,
        since_tx: Option<u64>,
        valid_at: Option<&Bound<'_, PyAny>>,
        complete: bool,
    ) -> PyResult<Py<PyList>> {
        let as_of = (as_of_tx, as_of_time_arg(as_of_time)?);
        let query = HistoryQuery {
            since_tx,
            valid_at_ns: valid_at.map(|v| convert::time_ns("valid_at", v)).transpose()?,
            ..history_query(namespace, entity, attribute, as_of, limit, branch, stale)?
        };
        let client = self.client.clone();
        let bounded_but_as_of_tx =
            query.as_of_time_ns.is_some() || since_tx.is_some() || query.valid_at_ns.is_some();
        let bounded = query.as_of_tx.is_some() || bounded_but_as_of_tx;
        if complete {
            let HistoryTarget::Entity { entity, attribute } = query.target else {
                return Err(PyValueError::new_err(
                    "complete: give the entity whose history to prove",
                ));
            };
            if bounded_but_as_of_tx || query.branch.is_some() || limit != 0 {
                return Err(PyValueError::new_err(
                    "complete: a history is proven whole up to the head (or as_of_tx), on main; give no limit, branch, as_of_time, since_tx or valid_at",
                ));
            }
            let (namespace, as_of) = (query.namespace, query.as_of_tx.map(engram_types::TxId));
            let proven = self.run_proven(py, move |client, mut log| async move {
                let answer = client
                    .history_complete(&mut log, &namespace, entity, attribute.as_ref(), as_of)
                    .await;
                (log, answer)
            })?;
            return datom_list(py, proven.datoms);
        }
        let response = match (prove, query.branch.is_some()) {
            (true, true) => {
                return Err(PyValueError::new_err(
                    "prove: proofs cover main's datoms; a branch's history cannot be proven",
                ));
            }
            (true, false) if bounded => {
                return Err(PyValueError::new_err(
                    "prove: a proven history is read whole up to the head; give no as_of_tx, as_of_time, since_tx or valid_at",
                ));
            }
            (true, false) => self.run_proven(py, move |client, mut log| async move {
                let answer = client
                    .history_verified(
                        &mut log,
                        &query.namespace,
                        query.target,
                        query.limit,
                        query.consistency,
                    )
                    .await;
                (log, answer)
            })?,
            (false, _) => self.run(py, async move { client.history_all(&query, &[], |_| ()).await })?,
        };
        datom_list(py, response.datoms)
    }

    /// `history`, as an iterator that reads a page of `page_size` datoms (0: the server's
    /// largest page) when it needs one: for answers too large to hold at once.
    #[pyo3(signature = (namespace, entity=None, *, attribute=None, page_size=0, branch=None, stale=false, as_of_tx=None, as_of_time=None, since_tx=None, valid_at=None))]
    #[allow(clippy::too_many_arguments)]
    fn iter_history(
        &self,
        namespace: &str,
        entity: Option<&Bound<'_, PyAny>>,
        attribute: Option<String>,
        page_size: u32,
        branch: Option<String>,
        stale: bool,
        as_of_tx: Option<u64>,
        as_of_time: Option<&Bound<'_, PyAny>>,
        since_tx: Option<u64>,
        valid_at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pages> {
        let as_of = (as_of_tx, as_of_time_arg(as_of_time)?);
        let query = HistoryQuery {
            since_tx,
            valid_at_ns: valid_at.map(|v| convert::time_ns("valid_at", v)).transpose()?,
            ..history_query(namespace, entity, attribute, as_of, page_size, branch, stale)?
        };
        Ok(self.pages(PagedQuery::History(query)))
    }

    /// The current datoms of `attribute`, optionally only those holding `value`, by entity: at
    /// most `limit` (0: all of them, read a page at a time as of one transaction). Entities
    /// whose `:memory/expires` has passed are left out unless `include_expired=True`.
    /// `as_of_time` (datetime or ns): as of the last transaction at or before that instant;
    /// `since_tx`: only current values written after that transaction; `valid_at` (datetime
    /// or ns): only values valid then.
    #[pyo3(signature = (namespace, attribute, value=None, *, as_of_tx=None, limit=0, branch=None, stale=false, include_expired=false, as_of_time=None, since_tx=None, valid_at=None))]
    #[allow(clippy::too_many_arguments)]
    fn find(
        &self,
        py: Python<'_>,
        namespace: &str,
        attribute: &str,
        value: Option<&Bound<'_, PyAny>>,
        as_of_tx: Option<u64>,
        limit: u32,
        branch: Option<String>,
        stale: bool,
        include_expired: bool,
        as_of_time: Option<&Bound<'_, PyAny>>,
        since_tx: Option<u64>,
        valid_at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyList>> {
        let query = find_query(
            namespace,
            attribute,
            value,
            (as_of_tx, as_of_time_arg(as_of_time)?),
            limit,
            branch,
            stale,
            include_expired,
        )?;
        let query = FindQuery {
            since_tx,
            valid_at_ns: valid_at.map(|v| convert::time_ns("valid_at", v)).transpose()?,
            ..query
        };
        let client = self.client.clone();
        let response = self.run(py, async move { client.find(&query).await })?;
        datom_list(py, response.datoms)
    }

    /// `find`, as an iterator that reads a page of `page_size` datoms (0: the server's largest
    /// page) when it needs one.
    #[pyo3(signature = (namespace, attribute, value=None, *, as_of_tx=None, page_size=0, branch=None, stale=false, include_expired=false, as_of_time=None, since_tx=None, valid_at=None))]
    #[allow(clippy::too_many_arguments)]
    fn iter_find(
        &self,
        namespace: &str,
        attribute: &str,
        value: Option<&Bound<'_, PyAny>>,
        as_of_tx: Option<u64>,
        page_size: u32,
        branch: Option<String>,
        stale: bool,
        include_expired: bool,
        as_of_time: Option<&Bound<'_, PyAny>>,
        since_tx: Option<u64>,
        valid_at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Pages> {
        let query = find_query(
            namespace,
            attribute,
            value,
            (as_of_tx, as_of_time_arg(as_of_time)?),
            page_size,
            branch,
            stale,
            include_expired,
        )?;
        let query = FindQuery {
            since_tx,
            valid_at_ns: valid_at.map(|v| convert::time_ns("valid_at", v)).transpose()?,
            ..query
        };
        Ok(self.pages(PagedQuery::Find(query)))
    }

    /// The namespaces this client may read, in name order: at most `limit` (0: all of them).
    #[pyo3(signature = (*, limit=0, stale=false))]
    fn namespaces(&self, py: Python<'_>, limit: u32, stale: bool) -> PyResult<Vec<String>> {
        let client = self.client.clone();
        let response = self.run(py, async move {
            client.list_namespaces(limit, &[], consistency(stale)).await
        })?;
        Ok(response.namespaces)
    }

    /// The ids of the entities of `namespace` with at least one datom (of `attribute`, if
    /// given) up to `as_of_tx` (or `as_of_time`, a datetime or ns), retracted or not, in id
    /// order: at most `limit` (0: all of them, read a page at a time as of one transaction).
    #[pyo3(signature = (namespace, attribute=None, *, as_of_tx=None, as_of_time=None, limit=0, stale=false))]
    #[allow(clippy::too_many_arguments)]
    fn entities(
        &self,
        py: Python<'_>,
        namespace: &str,
        attribute: Option<String>,
        as_of_tx: Option<u64>,
        as_of_time: Option<&Bound<'_, PyAny>>,
        limit: u32,
        stale: bool,
    ) -> PyResult<Vec<u64>> {
        let query = EntitiesQuery {
            attribute: attribute
                .map(|a| convert::attribute("attribute", &a))
                .transpose()?,
            as_of_tx,
            as_of_time_ns: as_of_time_arg(as_of_time)?,
            limit,
            consistency: consistency(stale),
            ..EntitiesQuery::new(namespace_arg(namespace)?)
        };
        let client = self.client.clone();
        let response = self.run(py, async move { client.list_entities(&query, &[], |_| ()).await })?;
        Ok(response.entities)
    }

    /// The current facts whose value refers to `entity` (reverse references), by attribute
    /// and entity: through `attribute` only, if given; as of `as_of_tx` (or `as_of_time`);
    /// valid at `valid_at` (datetime or ns) if given; at most `limit` (0: all of them).
    #[pyo3(signature = (namespace, entity, *, attribute=None, as_of_tx=None, as_of_time=None, valid_at=None, limit=0, stale=false))]
    #[allow(clippy::too_many_arguments)]
    fn referrers(
        &self,
        py: Python<'_>,
        namespace: &str,
        entity: &Bound<'_, PyAny>,
        attribute: Option<String>,
        as_of_tx: Option<u64>,
        as_of_time: Option<&Bound<'_, PyAny>>,
        valid_at: Option<&Bound<'_, PyAny>>,
        limit: u32,
        stale: bool,
    ) -> PyResult<Py<PyList>> {
        let query = ReferrersQuery {
            attribute: attribute
                .map(|a| convert::attribute("attribute", &a))
                .transpose()?,
            as_of_tx,
            as_of_time_ns: as_of_time_arg(as_of_time)?,
            valid_at_ns: valid_at.map(|v| convert::time_ns("valid_at", v)).transpose()?,
            limit,
            consistency: consistency(stale),
            ..ReferrersQuery::new(namespace_arg(namespace)?, convert::entity_id("entity", entity)?)
        };
        let client = self.client.clone();
        let response = self.run(py, async move { client.referrers(&query, &[]).await })?;
        datom_list(py, response.datoms)
    }

    /// The rows of values for `find` (variable names such as "?task") that satisfy every
    /// clause of `where` at once, over the current facts of `namespace` as of one transaction.
    /// A `find` entry may aggregate a variable ("(count ?task)", "(count-distinct ?x)",
    /// "(sum ?x)", "(avg ?x)", "(min ?x)", "(max ?x)"): each row is then a group of the plain
    /// variables listed, each aggregate folding its variable over the group's joined rows.
    /// Each clause is a tuple `(entity, attribute, value)`: the entity a variable or an entity
    /// id (int or `Ref`); the value a variable or any datom value (`Ref(id)` for a reference;
    /// a string starting with "?" is a variable). A variable in an entity position joins a
    /// reference to its target. A tuple `(op, "?var", value or variable)`, `op` one of `<`,
    /// `<=`, `>`, `>=`, `!=`, is a filter the rows pass; a tuple `("not", (entity, attribute,
    /// value), ...)` keeps the rows for which its clauses do not all match at once (a variable
    /// no other clause binds is its own: it joins the not's clauses and matches anything); a
    /// tuple `("or", alternative, ...)` matches any one of its alternatives, each a clause or
    /// `("and", clause, ...)`, and binds the variables every alternative names (one that only
    /// some name is theirs alone). As of `as_of_tx` (or `as_of_time`), valid at `valid_at`;
    /// at most `limit` rows (0: all, read page by page as of the first page's transaction);
    /// `max_rows_read` bounds each page's work (0: the server's 1,000,000); `explain=True`
    /// returns the plan. Rows are distinct and sorted.
    #[pyo3(signature = (namespace, find, r#where, *, branch=None, as_of_tx=None, as_of_time=None, valid_at=None, include_expired=false, limit=0, max_rows_read=0, explain=false, stale=false))]
    #[allow(clippy::too_many_arguments)]
    fn query(
        &self,
        py: Python<'_>,
        namespace: &str,
        find: Vec<String>,
        r#where: &Bound<'_, PyAny>,
        branch: Option<String>,
        as_of_tx: Option<u64>,
        as_of_time: Option<&Bound<'_, PyAny>>,
        valid_at: Option<&Bound<'_, PyAny>>,
        include_expired: bool,
        limit: u32,
        max_rows_read: u64,
        explain: bool,
        stale: bool,
    ) -> PyResult<Rows> {
        let query = convert::query(find, r#where)?;
        let join = Join {
            branch: branch.map(|b| branch_arg("branch", b)).transpose()?,
            as_of_tx,
            as_of_time_ns: as_of_time_arg(as_of_time)?,
            valid_at_ns: valid_at.map(|v| convert::time_ns("valid_at", v)).transpose()?,
            include_expired,
            limit,
            max_rows_read,
            explain,
            consistency: consistency(stale),
            ..Join::new(namespace_arg(namespace)?, query)
        };
        let client = self.client.clone();
        let response = self.run(py, async move { client.query(&join).await })?;
        let rows = PyList::empty(py);
        for row in &response.rows {
            let mut cells = Vec::with_capacity(row.values.len());
            for (i, v) in row.values.iter().enumerate() {
                let value = engram_proto::value(&format!("rows[{i}]"), Some(v.clone()))
                    .map_err(|e| PyValueError::new_err(format!("the server answered {e}")))?;
                cells.push(convert::to_py(py, &value)?);
            }
            rows.append(pyo3::types::PyTuple::new(py, cells)?)?;
        }
        let plan = PyList::empty(py);
        for step in &response.plan {
            let d = PyDict::new(py);
            d.set_item("clause", step.clause)?;
            d.set_item("access", &step.access)?;
            d.set_item("binds", &step.binds)?;
            d.set_item("uses", &step.uses)?;
            d.set_item("rows_read", step.rows_read)?;
            d.set_item("rows_out", step.rows_out)?;
            d.set_item("filters", &step.filters)?;
            d.set_item("negations", &step.negations)?;
            d.set_item("or_clause", step.or_clause)?;
            plan.append(d)?;
        }
        Ok(Rows {
            columns: response.columns,
            rows: rows.unbind(),
            as_of_tx: response.as_of_tx,
            rows_read: response.rows_read,
            plan: plan.unbind(),
        })
    }

    /// Facts found by their words (BM25 over searchable string values), by a query `vector`
    /// (nearest searchable vectors of its dimension, cosine) and `hops` refs around the best of
    /// those, fused and re-ranked by recency and the priors (verified first, then confidence),
    /// best `k` first; `as_of_tx` (or `as_of_time`, a datetime or ns: the last transaction at or
    /// before it) searches what held then, ranked as it would have been then;
    /// `kinds` keeps memories of those kinds only (their `:memory/kind`); memories whose
    /// `:memory/expires` has passed are left out unless `include_expired=True`. `current=True`
    /// (implies `prove`): each hit's `current` says whether its fact is still held on main
    /// ("current", "superseded", "unknown" when its values are withheld or redacted,
    /// "not-on-main"), proven from its entity's state against the state root.
    #[pyo3(signature = (namespace, text="", *, vector=None, hops=None, k=10, as_of_tx=None, attributes=None, agents=None, verified_only=false, valid_between_ns=None, kinds=None, branch=None, prove=false, stale=false, include_expired=false, as_of_time=None, current=false))]
    #[allow(clippy::too_many_arguments)]
    fn search(
        &self,
        py: Python<'_>,
        namespace: &str,
        text: &str,
        vector: Option<Vec<f32>>,
        hops: Option<u32>,
        k: u32,
        as_of_tx: Option<u64>,
        attributes: Option<Vec<String>>,
        agents: Option<Vec<String>>,
        verified_only: bool,
        valid_between_ns: Option<(i64, i64)>,
        kinds: Option<Vec<String>>,
        branch: Option<String>,
        prove: bool,
        stale: bool,
        include_expired: bool,
        as_of_time: Option<&Bound<'_, PyAny>>,
        current: bool,
    ) -> PyResult<Py<PyList>> {
        let mut query = SearchQuery::new(namespace_arg(namespace)?, text);
        if let Some(v) = &vector {
            engram_types::check_vector("vector", v)
                .map_err(|e| PyValueError::new_err(format!("vector: {e}")))?;
        }
        query.vector = vector;
        query.hops = hops;
        query.k = k;
        query.as_of_tx = as_of_tx;
        query.as_of_time_ns = as_of_time_arg(as_of_time)?;
        query.attributes = attributes
            .unwrap_or_default()
            .iter()
            .map(|a| convert::attribute("attributes", a))
            .collect::<PyResult<_>>()?;
        query.agents = agents.unwrap_or_default();
        query.verified_only = verified_only;
        query.valid_between_ns = valid_between_ns;
        query.kinds = kinds.unwrap_or_default();
        query.include_expired = include_expired;
        query.consistency = consistency(stale);
        query.branch = branch.map(|b| branch_arg("branch", b)).transpose()?;
        let client = self.client.clone();
        let mut states = Vec::new();
        let response = if current {
            let (response, found) = self.run_proven(py, move |client, mut log| async move {
                let answer = client.search_current(&mut log, &query).await;
                (log, answer)
            })?;
            states = found;
            response
        } else if prove {
            self.run_proven(py, move |client, mut log| async move {
                let answer = client.search_verified(&mut log, &query).await;
                (log, answer)
            })?
        } else {
            self.run(py, async move { client.search(&query).await })?
        };
        let list = PyList::empty(py);
        for (i, hit) in response.hits.into_iter().enumerate() {
            let state = states.get(i).map(|s| {
                match s {
                    engram_client::Currency::Current => "current",
                    engram_client::Currency::Superseded { .. } => "superseded",
                    engram_client::Currency::Unknown => "unknown",
                    engram_client::Currency::NotOnMain => "not-on-main",
                }
                .to_string()
            });
            let raw = hit
                .datom
                .ok_or_else(|| PyValueError::new_err("a search hit from the server without its datom"))?;
            list.append(Hit {
                datom: Py::new(py, datom(py, raw)?)?,
                score: hit.score,
                signals: hit.signals.into_iter().map(|s| (s.signal, s.rank)).collect(),
                conflicting: hit.conflicting,
                seq: hit.seq,
                current: state,
            })?;
        }
        Ok(list.unbind())
    }

    /// What changed after `from_tx` up to `to_tx` (0: the head), for one entity or the whole
    /// namespace; with `valid_at` (datetime or ns), only datoms valid at that instant.
    #[pyo3(signature = (namespace, from_tx, to_tx=0, *, entity=None, limit=0, stale=false, valid_at=None))]
    #[allow(clippy::too_many_arguments)]
    fn diff(
        &self,
        py: Python<'_>,
        namespace: &str,
        from_tx: u64,
        to_tx: u64,
        entity: Option<&Bound<'_, PyAny>>,
        limit: u32,
        stale: bool,
        valid_at: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Diff> {
        let query = DiffQuery {
            namespace: namespace_arg(namespace)?,
            entity: entity.map(|e| convert::entity_id("entity", e)).transpose()?,
            from_tx,
            to_tx,
            limit,
            consistency: consistency(stale),
            valid_at_ns: valid_at.map(|v| convert::time_ns("valid_at", v)).transpose()?,
        };
        let client = self.client.clone();
        let response = self.run(py, async move { client.diff_all(&query, &[], |_| ()).await })?;
        diff(py, response)
    }

    /// A branch against main: its own writes and what main changed since the fork on the same
    /// entity-attribute pairs (`main_changed`).
    #[pyo3(signature = (namespace, branch, *, entity=None, limit=0))]
    fn branch_diff(
        &self,
        py: Python<'_>,
        namespace: &str,
        branch: String,
        entity: Option<&Bound<'_, PyAny>>,
        limit: u32,
    ) -> PyResult<Diff> {
        let namespace = namespace_arg(namespace)?;
        let branch = branch_arg("branch", branch)?;
        let entity = entity.map(|e| convert::entity_id("entity", e)).transpose()?;
        let client = self.client.clone();
        let response = self.run(py, async move {
            client
                .branch_diff(&namespace, &branch, entity, limit, Consistency::Linearizable)
                .await
        })?;
        diff(py, response)
    }

    /// Forks branch `name` from main as of `from_tx` (None: the head).
    #[pyo3(signature = (namespace, name, *, from_tx=None, agent=None))]
    fn create_branch(
        &self,
        py: Python<'_>,
        namespace: &str,
        name: String,
        from_tx: Option<u64>,
        agent: Option<String>,
    ) -> PyResult<Receipt> {
        let namespace = namespace_arg(namespace)?;
        let name = branch_arg("name", name)?;
        let provenance = self.provenance(agent, None, None, 1.0, "candidate")?;
        let client = self.client.clone();
        let response = self.run(py, async move {
            client
                .create_branch(&namespace, &name, from_tx, &provenance)
                .await
        })?;
        receipt(py, response)
    }

    /// Merges branch `name` into main as one transaction.
    #[pyo3(signature = (namespace, name, *, agent=None))]
    fn merge_branch(
        &self,
        py: Python<'_>,
        namespace: &str,
        name: String,
        agent: Option<String>,
    ) -> PyResult<Receipt> {
        self.close_branch(py, namespace, name, true, agent)
    }

    /// Abandons branch `name`: its writes stay in the log, never in main.
    #[pyo3(signature = (namespace, name, *, agent=None))]
    fn abandon_branch(
        &self,
        py: Python<'_>,
        namespace: &str,
        name: String,
        agent: Option<String>,
    ) -> PyResult<Receipt> {
        self.close_branch(py, namespace, name, false, agent)
    }

    /// Forgets the values of `entity`'s datoms (only `attribute`'s, when given) on every
    /// replica: each datom keeps its other fields and its hash, so the audit chain and every
    /// proof still verify, and the redaction is recorded with `reason`. With `dry_run`, lists
    /// what would go and changes nothing. Applied in parts of at most 100 datoms, each its own
    /// transaction. Returns a dict: `dry_run`, `tx` (the last part's transaction),
    /// `part_txs` (every part's, first to last), `audit_index` and `datoms` (each `tx`, `seq`,
    /// `hash`, `attribute`, `op`, `redacted_by_tx`, `branch` (None: main; the entity's datoms on
    /// every branch go too), and `guessable`: written before salts, so its kept hash can be
    /// tested against a guess of the value). Datoms read afterwards carry no value and say
    /// `redacted`.
    #[pyo3(signature = (namespace, entity, *, reason, attribute=None, dry_run=false, agent=None))]
    #[allow(clippy::too_many_arguments)]
    fn redact<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        entity: &Bound<'py, PyAny>,
        reason: String,
        attribute: Option<String>,
        dry_run: bool,
        agent: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let req = engram_types::RedactRequest {
            namespace: namespace_arg(namespace)?,
            entity: convert::entity_id("entity", entity)?,
            attribute: attribute
                .map(|a| convert::attribute("attribute", &a))
                .transpose()?,
            reason,
            provenance: self.provenance(agent, None, None, 1.0, "candidate")?,
        };
        req.validate()
            .map_err(|e| PyValueError::new_err(format!("redact: {e}")))?;
        let client = self.client.clone();
        let response = self.run(py, async move { client.redact(&req, dry_run).await })?;
        redaction_dict(py, &response)
    }

    /// Forgets the values of every datom of `namespace` that meets every condition given
    /// (`attribute`, `written_by` an agent, `value`, `before_tx`, `written_before_ns`,
    /// `valid_from_before_ns`; `everything=True` with none of them: the whole namespace), in
    /// ranges of at most 1,000 datoms, each its own transaction; any number of datoms. Answered
    /// like `redact`, with `datoms_redacted` counting every datom taken and `datoms` listing
    /// the first 1,000 (`listing_truncated`). `dry_run=True` counts and lists what would go.
    #[pyo3(signature = (namespace, *, reason, attribute=None, written_by=None, value=None, before_tx=None, written_before_ns=None, valid_from_before_ns=None, everything=false, dry_run=false, agent=None))]
    #[allow(clippy::too_many_arguments)]
    fn redact_where<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        reason: String,
        attribute: Option<String>,
        written_by: Option<String>,
        value: Option<&Bound<'py, PyAny>>,
        before_tx: Option<u64>,
        written_before_ns: Option<i64>,
        valid_from_before_ns: Option<i64>,
        everything: bool,
        dry_run: bool,
        agent: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let predicate = engram_types::Predicate {
            attribute: attribute
                .map(|a| convert::attribute("attribute", &a))
                .transpose()?,
            agent: written_by,
            value: value.map(|v| convert::value("value", v)).transpose()?,
            before_tx: before_tx.map(engram_types::TxId),
            written_before_ns,
            valid_from_before_ns,
        };
        if predicate.is_everything() != everything {
            return Err(PyValueError::new_err(
                "redact_where: give a condition (attribute, written_by, value, before_tx, written_before_ns, valid_from_before_ns), or everything=True alone",
            ));
        }
        let req = engram_types::RedactWhere {
            namespace: namespace_arg(namespace)?,
            predicate,
            reason,
            provenance: self.provenance(agent, None, None, 1.0, "candidate")?,
        };
        req.validate()
            .map_err(|e| PyValueError::new_err(format!("redact_where: {e}")))?;
        let client = self.client.clone();
        let response = self.run(py, async move { client.redact_where(&req, dry_run).await })?;
        redaction_dict(py, &response)
    }

    /// Keeps what is written to `namespace` (only to `attribute`, when given) for `keep_ms`
    /// milliseconds, after which the leader redacts it; `keep_ms=0` ends the policy. An audited
    /// change; needs `redact` on the namespace.
    #[pyo3(signature = (namespace, keep_ms, *, attribute=None))]
    fn set_retention<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        keep_ms: u64,
        attribute: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (client, namespace) = (self.client.clone(), namespace.to_string());
        let attribute = attribute.unwrap_or_default();
        policy_change(
            py,
            self.run(py, async move {
                client.set_retention(&namespace, &attribute, keep_ms).await
            })?,
        )
    }

    /// Keeps, of each slot (entity, attribute) of `namespace` (only of `attribute`, when
    /// given), what the last `keep_versions` transactions that wrote it hold, and its live
    /// claims; the leader redacts older datoms. `keep_versions=0` ends the policy. An audited
    /// change; needs `redact` on the namespace.
    #[pyo3(signature = (namespace, keep_versions, *, attribute=None))]
    fn set_retention_versions<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        keep_versions: u32,
        attribute: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (client, namespace) = (self.client.clone(), namespace.to_string());
        let attribute = attribute.unwrap_or_default();
        policy_change(
            py,
            self.run(py, async move {
                client
                    .set_retention_versions(&namespace, &attribute, keep_versions)
                    .await
            })?,
        )
    }

    /// The retention policies in force: dicts `{"namespace", "attribute", "keep_ms",
    /// "keep_versions", "since_tx"}` (`attribute` `None`: the whole namespace; `keep_ms` 0 for
    /// a versions policy, `keep_versions` 0 for a time one).
    fn retention<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let client = self.client.clone();
        let response = self.run(py, async move { client.list_retention().await })?;
        let out = PyList::empty(py);
        for p in &response.policies {
            let row = PyDict::new(py);
            row.set_item("namespace", &p.namespace)?;
            row.set_item("attribute", Some(&p.attribute).filter(|a| !a.is_empty()))?;
            row.set_item("keep_ms", p.keep_ms)?;
            row.set_item("keep_versions", p.keep_versions)?;
            row.set_item("since_tx", p.since_tx)?;
            out.append(row)?;
        }
        Ok(out)
    }

    /// Opens a session on `namespace` for `ttl_ms` (refused if one is open there): while it
    /// lives the namespace is volatile, and when it ends or lapses (`ttl_ms` without a
    /// renewal) the leader forgets everything written there before the end. An audited change;
    /// needs `redact` on the namespace.
    fn open_session<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        ttl_ms: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (client, namespace) = (self.client.clone(), namespace.to_string());
        policy_change(
            py,
            self.run(py, async move { client.open_session(&namespace, ttl_ms).await })?,
        )
    }

    /// Renews the session open on `namespace`: it lapses `ttl_ms` from now. Refused if none
    /// is open (it lapsed or was ended, and what it held is forgotten).
    fn renew_session<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        ttl_ms: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (client, namespace) = (self.client.clone(), namespace.to_string());
        policy_change(
            py,
            self.run(py, async move { client.renew_session(&namespace, ttl_ms).await })?,
        )
    }

    /// Ends the session on `namespace` now: the leader forgets what was written there.
    fn end_session<'py>(&self, py: Python<'py>, namespace: &str) -> PyResult<Bound<'py, PyDict>> {
        let (client, namespace) = (self.client.clone(), namespace.to_string());
        policy_change(
            py,
            self.run(py, async move { client.end_session(&namespace).await })?,
        )
    }

    /// The sessions: `{"open": [{"namespace", "ttl_ms", "deadline_ns", "since_tx",
    /// "renewed_tx"}], "ended": [{"namespace", "ended_tx", "lapsed"}]}` (each namespace's last
    /// ended session).
    fn sessions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let client = self.client.clone();
        let response = self.run(py, async move { client.list_sessions().await })?;
        let open = PyList::empty(py);
        for s in &response.sessions {
            let row = PyDict::new(py);
            row.set_item("namespace", &s.namespace)?;
            row.set_item("ttl_ms", s.ttl_ms)?;
            row.set_item("deadline_ns", s.deadline_ns)?;
            row.set_item("since_tx", s.since_tx)?;
            row.set_item("renewed_tx", s.renewed_tx)?;
            open.append(row)?;
        }
        let ended = PyList::empty(py);
        for s in &response.ended {
            let row = PyDict::new(py);
            row.set_item("namespace", &s.namespace)?;
            row.set_item("ended_tx", s.ended_tx)?;
            row.set_item("lapsed", s.lapsed)?;
            ended.append(row)?;
        }
        let out = PyDict::new(py);
        out.set_item("open", open)?;
        out.set_item("ended", ended)?;
        Ok(out)
    }

    /// Every transaction of `namespace` from `from_tx` on, as it commits, with the datoms that
    /// pass the filter. Iterate it; it resumes on another node after a failure, delivering
    /// each transaction once, in order.
    #[pyo3(signature = (namespace, *, from_tx=0, attribute=None, entity=None, branch=None))]
    fn watch(
        &self,
        namespace: &str,
        from_tx: u64,
        attribute: Option<String>,
        entity: Option<&Bound<'_, PyAny>>,
        branch: Option<String>,
    ) -> PyResult<Watch> {
        let filter = WatchFilter {
            namespace: namespace_arg(namespace)?,
            from_tx,
            attribute: attribute
                .map(|a| convert::attribute("attribute", &a))
                .transpose()?,
            entity: entity.map(|e| convert::entity_id("entity", e)).transpose()?,
            branch: branch.map(|b| branch_arg("branch", b)).transpose()?,
        };
        let stream = {
            let _inside = self.runtime.enter();
            self.client.watch(filter)
        };
        Ok(Watch {
            runtime: self.runtime.clone(),
            stream: Mutex::new(Some(stream)),
        })
    }

    /// The namespace's schema, now or as of a transaction: `{"version", "strict",
    /// "attributes": [{"ident", "type", "cardinality", "unique", "indexed", "component",
    /// "doc", "deprecated", "searchable", "dimension", "since_tx"}]}` (`unique`: None,
    /// "identity" or "value").
    #[pyo3(signature = (namespace, *, as_of_tx=None, stale=false))]
    fn schema<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        as_of_tx: Option<u64>,
        stale: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let namespace = namespace_arg(namespace)?;
        let client = self.client.clone();
        let consistency = consistency(stale);
        let response = self.run(py, async move {
            client.schema(&namespace, as_of_tx, consistency).await
        })?;
        let out = PyDict::new(py);
        out.set_item("version", response.version)?;
        out.set_item("strict", response.strict)?;
        let attributes = PyList::empty(py);
        for a in response.attributes {
            let Some(def) = a.def else { continue };
            let row = PyDict::new(py);
            row.set_item("ident", def.ident)?;
            row.set_item("type", def.value_type)?;
            let cardinality = match pb::Cardinality::try_from(def.cardinality) {
                Ok(pb::Cardinality::Many) => "many",
                _ => "one",
            };
            row.set_item("cardinality", cardinality)?;
            let unique = match pb::Uniqueness::try_from(def.unique) {
                Ok(pb::Uniqueness::Identity) => Some("identity"),
                Ok(pb::Uniqueness::Value) => Some("value"),
                _ => None,
            };
            row.set_item("unique", unique)?;
            row.set_item("indexed", def.indexed)?;
            row.set_item("component", def.component)?;
            row.set_item("doc", def.doc)?;
            row.set_item("deprecated", def.deprecated)?;
            row.set_item("searchable", def.searchable)?;
            row.set_item("dimension", def.dimension)?;
            row.set_item("since_tx", a.since_tx)?;
            attributes.append(row)?;
        }
        out.set_item("attributes", attributes)?;
        Ok(out)
    }

    /// Every branch of the namespace: `{"name", "state" (open, merged or abandoned),
    /// "fork_tx", "created_tx", "closed_tx", "writes"}`.
    #[pyo3(signature = (namespace, *, stale=false))]
    fn branches<'py>(&self, py: Python<'py>, namespace: &str, stale: bool) -> PyResult<Bound<'py, PyList>> {
        let namespace = namespace_arg(namespace)?;
        let client = self.client.clone();
        let consistency = consistency(stale);
        let response = self.run(py, async move { client.branches(&namespace, consistency).await })?;
        let out = PyList::empty(py);
        for b in response.branches {
            let row = PyDict::new(py);
            row.set_item("name", b.name)?;
            row.set_item("state", b.state)?;
            row.set_item("fork_tx", b.fork_tx)?;
            row.set_item("created_tx", b.created_tx)?;
            row.set_item("closed_tx", b.closed_tx)?;
            row.set_item("writes", b.writes)?;
            out.append(row)?;
        }
        Ok(out)
    }

    /// The principal this client's requests are authenticated as, the cluster's security mode
    /// and the grants that apply: `{"principal", "security", "grants"}`.
    fn whoami<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let client = self.client.clone();
        let response = self.run(py, async move { client.who_am_i().await })?;
        let out = PyDict::new(py);
        out.set_item("principal", response.principal)?;
        out.set_item("security", response.security)?;
        let grants = PyList::empty(py);
        for g in response.grants {
            grants.append(grant_dict(py, &g)?)?;
        }
        out.set_item("grants", grants)?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!("Client({:?}, agent={:?})", self.client.endpoints(), self.agent)
    }

    // ---------------------------------------------------------------- agents and grants
    // Each change is an audited transaction of `engram.system`; in an enforced cluster the
    // caller needs key-admin (agents) or grant (grants, roles). They return
    // `{"tx", "audit_index"}` and are never retried.

    /// Makes a new key file for agent `name` at `key_path` (mode 0600, never overwriting) and
    /// registers its public key. Returns the change and the public key (hex).
    fn create_agent<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        key_path: PathBuf,
    ) -> PyResult<Bound<'py, PyDict>> {
        let public = keygen(name, key_path)?;
        let bytes = public_key_bytes(&public)?;
        let (client, name) = (self.client.clone(), name.to_string());
        let change = policy_change(
            py,
            self.run(py, async move { client.add_agent(&name, bytes).await })?,
        )?;
        change.set_item("public_key", public)?;
        Ok(change)
    }

    /// Registers agent `name` with a public key it already has (64 hex digits or 32 bytes).
    fn add_agent<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        public_key: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let bytes = match public_key.extract::<Vec<u8>>() {
            Ok(raw) if !public_key.is_instance_of::<PyString>() => raw
                .try_into()
                .map_err(|_| PyValueError::new_err("public_key: 32 bytes, or 64 hex digits"))?,
            _ => public_key_bytes(
                &public_key
                    .extract::<String>()
                    .map_err(|_| PyTypeError::new_err("public_key: 32 bytes, or 64 hex digits"))?,
            )?,
        };
        let (client, name) = (self.client.clone(), name.to_string());
        policy_change(
            py,
            self.run(py, async move { client.add_agent(&name, bytes).await })?,
        )
    }

    /// Refuses every key of agent `name` from now on.
    fn revoke_agent<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyDict>> {
        let (client, name) = (self.client.clone(), name.to_string());
        policy_change(py, self.run(py, async move { client.revoke_agent(&name).await })?)
    }

    /// Grants `principal` (an agent, `role:<name>` or `*`) each of `actions` (a name or a list
    /// of names: read, read-history, watch, write, retract, promote, schema, branch, merge,
    /// audit, cluster-admin, key-admin, grant) on the namespaces under `prefix` ("" for all).
    /// One audited change per action; returns the last. `attribute` limits the data
    /// actions to one attribute (`:hr/salary`) or prefix (`:hr/*`): reads of the others
    /// return them redacted.
    #[pyo3(signature = (principal, actions, prefix="", *, attribute=""))]
    fn grant<'py>(
        &self,
        py: Python<'py>,
        principal: &str,
        actions: &Bound<'_, PyAny>,
        prefix: &str,
        attribute: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.grant_each(py, (principal, prefix, attribute), actions, false)
    }

    /// Withdraws what [`grant`] gave.
    #[pyo3(signature = (principal, actions, prefix="", *, attribute=""))]
    fn revoke_grant<'py>(
        &self,
        py: Python<'py>,
        principal: &str,
        actions: &Bound<'_, PyAny>,
        prefix: &str,
        attribute: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.grant_each(py, (principal, prefix, attribute), actions, true)
    }

    /// Gives `agent` every grant of `role` (its name, without `role:`) while assigned.
    fn assign_role<'py>(&self, py: Python<'py>, agent: &str, role: &str) -> PyResult<Bound<'py, PyDict>> {
        let (client, agent, role) = (self.client.clone(), agent.to_string(), role.to_string());
        policy_change(
            py,
            self.run(py, async move { client.assign_role(&agent, &role, false).await })?,
        )
    }

    /// Takes `role` away from `agent`.
    fn unassign_role<'py>(&self, py: Python<'py>, agent: &str, role: &str) -> PyResult<Bound<'py, PyDict>> {
        let (client, agent, role) = (self.client.clone(), agent.to_string(), role.to_string());
        policy_change(
            py,
            self.run(py, async move { client.assign_role(&agent, &role, true).await })?,
        )
    }

    /// Every registered agent: `{"name", "public_key", "revoked", "roles", "since_tx"}`.
    fn agents<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let client = self.client.clone();
        let response = self.run(py, async move { client.list_agents().await })?;
        let out = PyList::empty(py);
        for a in response.agents {
            let row = PyDict::new(py);
            row.set_item("name", a.name)?;
            row.set_item("public_key", hex::encode(&a.public_key))?;
            row.set_item("revoked", a.revoked)?;
            row.set_item("roles", a.roles)?;
            row.set_item("since_tx", a.since_tx)?;
            out.append(row)?;
        }
        Ok(out)
    }

    /// Has every node log the reads, watches and exports under `prefix` (`*`: everything) in
    /// its access log (`enabled=False`: stop). An audited change; needs `audit` everywhere.
    #[pyo3(signature = (prefix, enabled=true))]
    fn set_access_log<'py>(
        &self,
        py: Python<'py>,
        prefix: &str,
        enabled: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (client, prefix) = (self.client.clone(), prefix.to_string());
        policy_change(
            py,
            self.run(py, async move { client.set_access_log(&prefix, enabled).await })?,
        )
    }

    /// Who read what, and when: the access events of each node (a node logs what it served,
    /// and every call it refused), filtered by namespace prefix, caller and time (ns since the
    /// Unix epoch, the node's clock), or to refusals only. Each event is a dict `{"node",
    /// "seq", "time_ns", "principal", "call", "namespace", "entity", "as_of_tx", "read_at",
    /// "datoms", "refused"}`, `refused` being `None` or `{"code", "reason"}`; at most `limit`
    /// per node.
    #[pyo3(signature = (namespace="", *, principal="", since_ns=None, limit=1000, refused_only=false))]
    fn access_events<'py>(
        &self,
        py: Python<'py>,
        namespace: &str,
        principal: &str,
        since_ns: Option<i64>,
        limit: u32,
        refused_only: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let request = pb::AccessEventsRequest {
            namespace: namespace.to_string(),
            principal: principal.to_string(),
            since_ns,
            after_seq: 0,
            limit,
            refused_only,
        };
        let responses = self.each_node(py, move |node| {
            let request = request.clone();
            async move { node.access_events(request).await }
        })?;
        let out = PyList::empty(py);
        for resp in responses {
            for e in resp.events {
                let row = PyDict::new(py);
                row.set_item("node", resp.node_id)?;
                row.set_item("seq", e.seq)?;
                row.set_item("time_ns", e.time_ns)?;
                row.set_item("principal", e.principal)?;
                row.set_item("call", e.call)?;
                row.set_item("namespace", e.namespace)?;
                row.set_item("entity", e.entity)?;
                row.set_item("as_of_tx", e.as_of_tx)?;
                row.set_item("read_at", e.read_at)?;
                row.set_item("datoms", e.datoms)?;
                if e.refused_code.is_empty() {
                    row.set_item("refused", py.None())?;
                } else {
                    let refused = PyDict::new(py);
                    refused.set_item("code", e.refused_code)?;
                    refused.set_item("reason", e.refused_reason)?;
                    row.set_item("refused", refused)?;
                }
                out.append(row)?;
            }
        }
        Ok(out)
    }

    /// The background work each node ran (snapshots built and installed, redaction purges,
    /// retention rounds, divergence checks, search rebuilds, backups), each node's newest
    /// first: dicts `{"node", "seq", "kind", "subject", "started_ns", "ended_ns", "outcome",
    /// "error", "figures"}`, `ended_ns` and `error` `None` where there is none; of `kind` only
    /// when given, at most `limit` per node.
    #[pyo3(signature = (kind="", *, limit=20))]
    fn jobs<'py>(&self, py: Python<'py>, kind: &str, limit: u32) -> PyResult<Bound<'py, PyList>> {
        let kind = kind.to_string();
        let responses = self.each_node(py, move |node| {
            let kind = kind.clone();
            async move { node.list_jobs(&kind, limit).await }
        })?;
        let out = PyList::empty(py);
        for resp in responses {
            for job in resp.jobs {
                let row = PyDict::new(py);
                row.set_item("node", resp.node_id)?;
                row.set_item("seq", job.seq)?;
                row.set_item("kind", job.kind)?;
                row.set_item("subject", job.subject)?;
                row.set_item("started_ns", job.started_ns)?;
                row.set_item("ended_ns", (job.ended_ns != 0).then_some(job.ended_ns))?;
                row.set_item("outcome", job.outcome)?;
                row.set_item("error", (!job.error.is_empty()).then_some(job.error))?;
                let figures = PyDict::new(py);
                for (name, value) in job.figures {
                    figures.set_item(name, value)?;
                }
                row.set_item("figures", figures)?;
                out.append(row)?;
            }
        }
        Ok(out)
    }

    /// Active grants, of `principal` or of everyone: `{"principal", "action", "prefix"}`.
    #[pyo3(signature = (principal=None))]
    fn grants<'py>(&self, py: Python<'py>, principal: Option<String>) -> PyResult<Bound<'py, PyList>> {
        let client = self.client.clone();
        let who = principal.unwrap_or_default();
        let response = self.run(py, async move { client.list_grants(&who).await })?;
        let out = PyList::empty(py);
        for g in response.grants {
            out.append(grant_dict(py, &g)?)?;
        }
        Ok(out)
    }
}

impl EngramClient {
    /// Grants or revokes each action to (principal, prefix, attribute).
    fn grant_each<'py>(
        &self,
        py: Python<'py>,
        (principal, prefix, attribute): (&str, &str, &str),
        actions: &Bound<'_, PyAny>,
        revoke: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let actions: Vec<String> = if actions.is_instance_of::<PyString>() {
            vec![actions.extract()?]
        } else {
            actions
                .extract()
                .map_err(|_| PyTypeError::new_err("actions: an action name or a list of them"))?
        };
        if actions.is_empty() {
            return Err(PyValueError::new_err("actions: at least one action"));
        }
        for (i, a) in actions.iter().enumerate() {
            a.parse::<engram_access::Action>()
                .map_err(|e| PyValueError::new_err(format!("actions[{i}]: {e}")))?;
        }
        let mut last = None;
        for action in actions {
            let client = self.client.clone();
            let (principal, prefix, attribute) =
                (principal.to_string(), prefix.to_string(), attribute.to_string());
            last = Some(self.run(py, async move {
                client
                    .grant_on(&principal, &action, &prefix, &attribute, revoke)
                    .await
            })?);
        }
        match last {
            Some(change) => policy_change(py, change),
            None => Err(PyValueError::new_err("actions: at least one action")),
        }
    }
}

impl EngramClient {
    fn close_branch(
        &self,
        py: Python<'_>,
        namespace: &str,
        name: String,
        merge: bool,
        agent: Option<String>,
    ) -> PyResult<Receipt> {
        let namespace = namespace_arg(namespace)?;
        let name = branch_arg("name", name)?;
        let provenance = self.provenance(agent, None, None, 1.0, "candidate")?;
        let client = self.client.clone();
        let response = self.run(py, async move {
            client.close_branch(&namespace, &name, merge, &provenance).await
        })?;
        receipt(py, response)
    }
}

/// An open watch: iterate it for [`TxEvent`]s.
#[pyclass(module = "engram")]
pub struct Watch {
    runtime: Arc<tokio::runtime::Runtime>,
    stream: Mutex<Option<BoxStream<'static, Result<pb::TxEvent, ClientError>>>>,
}

impl Watch {
    fn next_event(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<Option<TxEvent>> {
        let mut slot = self
            .stream
            .lock()
            .map_err(|_| PyValueError::new_err("the watch was poisoned by an earlier panic"))?;
        let Some(mut stream) = slot.take() else {
            return Err(PyStopIteration::new_err(()));
        };
        let runtime = self.runtime.clone();
        let (stream, next) = py.detach(move || {
            let next = runtime.block_on(async {
                match timeout {
                    Some(t) => tokio::time::timeout(t, stream.next()).await.ok(),
                    None => Some(stream.next().await),
                }
            });
            (stream, next)
        });
        match next {
            // Timed out: the watch stays open.
            None => {
                *slot = Some(stream);
                Ok(None)
            }
            Some(None) => Err(PyStopIteration::new_err(())),
            Some(Some(Err(e))) => Err(errors::to_py(py, &e)),
            Some(Some(Ok(event))) => {
                *slot = Some(stream);
                Ok(Some(TxEvent {
                    tx: event.tx,
                    tx_time_ns: event.tx_time_ns,
                    audit_index: event.audit_index,
                    datoms: datom_list(py, event.datoms)?,
                }))
            }
        }
    }
}

#[pymethods]
impl Watch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<TxEvent>> {
        self.next_event(py, None)
    }

    /// The next transaction, or None if none arrives within `timeout_s`.
    #[pyo3(signature = (timeout_s))]
    fn next(&self, py: Python<'_>, timeout_s: f64) -> PyResult<Option<TxEvent>> {
        if !(timeout_s.is_finite() && timeout_s >= 0.0) {
            return Err(PyValueError::new_err(
                "timeout_s: a non-negative number of seconds",
            ));
        }
        self.next_event(py, Some(Duration::from_secs_f64(timeout_s)))
    }

    /// Stops the watch; iterating it afterwards ends at once.
    fn close(&self) -> PyResult<()> {
        let mut slot = self
            .stream
            .lock()
            .map_err(|_| PyValueError::new_err("the watch was poisoned by an earlier panic"))?;
        *slot = None;
        Ok(())
    }
}

/// TLS from PEM files: the CA that signed the nodes' certificates, and the client's own
/// certificate and key where the nodes require one (mutual TLS).
fn tls(ca: Option<PathBuf>, cert: Option<PathBuf>, key: Option<PathBuf>) -> PyResult<Option<Arc<ClientTls>>> {
    let read = |field: &str, path: &PathBuf| {
        std::fs::read(path).map_err(|e| PyValueError::new_err(format!("{field}: {}: {e}", path.display())))
    };
    let identity = match (&cert, &key) {
        (Some(cert), Some(key)) => Some((read("tls_cert", cert)?, read("tls_key", key)?)),
        (None, None) => None,
        _ => {
            return Err(PyValueError::new_err(
                "tls_cert and tls_key: give both or neither",
            ));
        }
    };
    match ca {
        Some(ca) => Ok(Some(Arc::new(ClientTls {
            ca_pem: read("tls_ca", &ca)?,
            identity,
        }))),
        None if identity.is_some() => Err(PyValueError::new_err(
            "tls_ca: a client certificate needs the CA that signed the nodes' certificates",
        )),
        None => Ok(None),
    }
}

/// Writes a new agent key file for `name` at `path` (mode 0600; an existing file is never
/// overwritten) and returns its public key as 64 hex digits, for `Cluster.Init`'s first
/// administrator or `add_agent`. Nothing is sent anywhere.
#[pyfunction]
pub fn keygen(name: &str, path: PathBuf) -> PyResult<String> {
    let principal =
        engram_access::Principal::new(name).map_err(|e| PyValueError::new_err(format!("name: {e}")))?;
    let key = AgentKey::create(principal, &path).map_err(|e| PyValueError::new_err(format!("path: {e}")))?;
    Ok(hex::encode(key.public().0))
}

fn public_key_bytes(hex_key: &str) -> PyResult<[u8; 32]> {
    hex::decode(hex_key)
        .ok()
        .and_then(|raw| <[u8; 32]>::try_from(raw).ok())
        .ok_or_else(|| PyValueError::new_err("public_key: 32 bytes, or 64 hex digits"))
}

fn policy_change(py: Python<'_>, r: pb::PolicyResponse) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("tx", r.tx)?;
    out.set_item("audit_index", r.audit_index)?;
    Ok(out)
}

fn grant_dict<'py>(py: Python<'py>, g: &pb::GrantInfo) -> PyResult<Bound<'py, PyDict>> {
    let grant = PyDict::new(py);
    grant.set_item("principal", &g.principal)?;
    grant.set_item("action", &g.action)?;
    grant.set_item("prefix", &g.prefix)?;
    grant.set_item("attribute", &g.attribute)?;
    Ok(grant)
}

fn invalid(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn namespace_arg(raw: &str) -> PyResult<Namespace> {
    Namespace::new(raw).map_err(|e| PyValueError::new_err(format!("namespace: {e}")))
}

fn branch_arg(field: &str, raw: String) -> PyResult<BranchName> {
    BranchName::new(raw).map_err(|e| PyValueError::new_err(format!("{field}: {e}")))
}

fn consistency(stale: bool) -> Consistency {
    if stale {
        Consistency::Stale
    } else {
        Consistency::Linearizable
    }
}

/// A random idempotency key: 128 bits from the OS.
fn fresh_key() -> PyResult<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| PyValueError::new_err(format!("no randomness for an idempotency key: {e}")))?;
    Ok(format!("py-{}", hex::encode(bytes)))
}

fn precondition(i: usize, item: &Bound<'_, PyAny>) -> PyResult<Precondition> {
    let field = format!("preconditions[{i}]");
    let (entity, attribute, expected): (Bound<'_, PyAny>, String, Bound<'_, PyAny>) = item
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("{field}: an (entity, attribute, expected) tuple")))?;
    Ok(Precondition {
        entity: convert::entity_id(&format!("{field}.entity"), &entity)?,
        attribute: convert::attribute(&format!("{field}.attribute"), &attribute)?,
        expected: if expected.is_none() {
            None
        } else {
            Some(convert::value(&format!("{field}.expected"), &expected)?)
        },
    })
}

fn attribute_def(i: usize, item: &Bound<'_, PyAny>) -> PyResult<AttributeDef> {
    let field = format!("attributes[{i}]");
    let dict = item
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{field}: a dict with at least \"ident\" and \"type\"")))?;
    let text = |key: &str| -> PyResult<Option<String>> {
        match dict.get_item(key)? {
            None => Ok(None),
            Some(v) => v
                .extract()
                .map(Some)
                .map_err(|_| PyTypeError::new_err(format!("{field}.{key}: a str"))),
        }
    };
    let flag = |key: &str| -> PyResult<bool> {
        match dict.get_item(key)? {
            None => Ok(false),
            Some(v) => v
                .extract()
                .map_err(|_| PyTypeError::new_err(format!("{field}.{key}: a bool"))),
        }
    };
    let ident = text("ident")?.ok_or_else(|| PyValueError::new_err(format!("{field}.ident: missing")))?;
    let value_type = text("type")?.ok_or_else(|| PyValueError::new_err(format!("{field}.type: missing")))?;
    let value_type = engram_proto::value_type(&format!("{field}.type"), &value_type).map_err(invalid)?;
    let mut def = AttributeDef::new(convert::attribute(&format!("{field}.ident"), &ident)?, value_type);
    def.cardinality = match text("cardinality")?.as_deref() {
        None | Some("one") => Cardinality::One,
        Some("many") => Cardinality::Many,
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "{field}.cardinality: {other:?} is not \"one\" or \"many\""
            )));
        }
    };
    def.unique = match text("unique")?.as_deref() {
        None => None,
        Some("identity") => Some(Unique::Identity),
        Some("value") => Some(Unique::Value),
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "{field}.unique: {other:?} is not \"identity\" or \"value\""
            )));
        }
    };
    def.indexed = flag("indexed")?;
    def.component = flag("component")?;
    def.deprecated = flag("deprecated")?;
    def.searchable = flag("searchable")?;
    def.dimension = match dict.get_item("dimension")? {
        None => 0,
        Some(v) => v
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("{field}.dimension: an int from 1 to 4096")))?,
    };
    def.doc = text("doc")?.unwrap_or_default();
    def.validate().map_err(invalid)?;
    Ok(def)
}

fn receipt(py: Python<'_>, r: pb::TransactResponse) -> PyResult<Receipt> {
    let temp_ids = PyDict::new(py);
    for (name, id) in r.temp_ids.into_iter().collect::<BTreeMap<_, _>>() {
        temp_ids.set_item(name, id)?;
    }
    Ok(Receipt {
        tx: r.tx,
        tx_time_ns: r.tx_time_ns,
        audit_index: r.audit_index,
        audit_hash: r.audit_hash,
        temp_ids: temp_ids.unbind(),
        datom_hashes: r.datom_hashes,
    })
}

fn diff(py: Python<'_>, response: pb::DiffResponse) -> PyResult<Diff> {
    Ok(Diff {
        asserted: datom_list(py, response.asserted)?,
        retracted: datom_list(py, response.retracted)?,
        main_changed: datom_list(py, response.main_changed)?,
        to_tx: response.to_tx,
        truncated: response.truncated,
    })
}

/// The query `history` and `iter_history` make.
fn history_query(
    namespace: &str,
    entity: Option<&Bound<'_, PyAny>>,
    attribute: Option<String>,
    (as_of_tx, as_of_time_ns): (Option<u64>, Option<i64>),
    limit: u32,
    branch: Option<String>,
    stale: bool,
) -> PyResult<HistoryQuery> {
    let namespace = namespace_arg(namespace)?;
    let attribute = attribute
        .map(|a| convert::attribute("attribute", &a))
        .transpose()?;
    let target = match (entity, attribute) {
        (Some(e), attribute) => HistoryTarget::Entity {
            entity: convert::entity_id("entity", e)?,
            attribute,
        },
        (None, Some(attribute)) => HistoryTarget::Attribute(attribute),
        (None, None) => {
            return Err(PyValueError::new_err(
                "entity or attribute: one of them is needed",
            ));
        }
    };
    Ok(HistoryQuery {
        branch: branch.map(|b| branch_arg("branch", b)).transpose()?,
        limit,
        consistency: consistency(stale),
        as_of_tx,
        as_of_time_ns,
        ..HistoryQuery::new(namespace, target)
    })
}

/// An `as_of_time` argument (an aware datetime, or ns since the epoch) in ns.
fn as_of_time_arg(as_of_time: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    as_of_time.map(|v| convert::time_ns("as_of_time", v)).transpose()
}

/// The query `find` and `iter_find` make.
#[allow(clippy::too_many_arguments)]
fn find_query(
    namespace: &str,
    attribute: &str,
    value: Option<&Bound<'_, PyAny>>,
    (as_of_tx, as_of_time_ns): (Option<u64>, Option<i64>),
    limit: u32,
    branch: Option<String>,
    stale: bool,
    include_expired: bool,
) -> PyResult<FindQuery> {
    Ok(FindQuery {
        namespace: namespace_arg(namespace)?,
        attribute: convert::attribute("attribute", attribute)?,
        value: value.map(|v| convert::value("value", v)).transpose()?,
        as_of_tx,
        as_of_time_ns,
        limit,
        consistency: consistency(stale),
        branch: branch.map(|b| branch_arg("branch", b)).transpose()?,
        include_expired,
        since_tx: None,
        valid_at_ns: None,
    })
}

enum PagedQuery {
    History(HistoryQuery),
    Find(FindQuery),
}

impl EngramClient {
    fn pages(&self, query: PagedQuery) -> Pages {
        Pages {
            runtime: self.runtime.clone(),
            client: self.client.clone(),
            query: Arc::new(query),
            state: Mutex::new(PagesState::default()),
        }
    }
}

#[derive(Default)]
struct PagesState {
    /// The datoms of the page read last, not yet yielded.
    buffer: std::collections::VecDeque<pb::Datom>,
    /// Where the next page begins (empty before the first page).
    cursor: Vec<u8>,
    /// The last page has been read.
    done: bool,
    as_of_tx: Option<u64>,
}

/// The datoms of a History or Find, read a page at a time as the iteration needs them; every
/// page is read as of the transaction the first was (`as_of_tx`, set once the first page is
/// read).
#[pyclass(module = "engram")]
pub struct Pages {
    runtime: Arc<tokio::runtime::Runtime>,
    client: Client,
    query: Arc<PagedQuery>,
    state: Mutex<PagesState>,
}

#[pymethods]
impl Pages {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Datom> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| PyValueError::new_err("the iterator was poisoned by an earlier panic"))?;
        while state.buffer.is_empty() {
            if state.done {
                return Err(PyStopIteration::new_err(()));
            }
            let (client, query, runtime) = (self.client.clone(), self.query.clone(), self.runtime.clone());
            let cursor = state.cursor.clone();
            let page = py
                .detach(move || {
                    runtime.block_on(async move {
                        match &*query {
                            PagedQuery::History(q) => client
                                .history_page(q, &cursor)
                                .await
                                .map(|p| (p.datoms, p.next_cursor, p.as_of_tx)),
                            PagedQuery::Find(q) => client
                                .find_page(q, &cursor)
                                .await
                                .map(|p| (p.datoms, p.next_cursor, p.as_of_tx)),
                        }
                    })
                })
                .map_err(|e| errors::to_py(py, &e))?;
            let (datoms, next, as_of_tx) = page;
            state.done = next.is_empty();
            state.cursor = next;
            state.as_of_tx = Some(as_of_tx);
            state.buffer.extend(datoms);
        }
        match state.buffer.pop_front() {
            Some(raw) => datom(py, raw),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    /// The transaction every page is read as of; None before the first page is read.
    #[getter]
    fn as_of_tx(&self) -> PyResult<Option<u64>> {
        let state = self
            .state
            .lock()
            .map_err(|_| PyValueError::new_err("the iterator was poisoned by an earlier panic"))?;
        Ok(state.as_of_tx)
    }
}

fn datom_list(py: Python<'_>, datoms: Vec<pb::Datom>) -> PyResult<Py<PyList>> {
    let list = PyList::empty(py);
    for raw in datoms {
        list.append(datom(py, raw)?)?;
    }
    Ok(list.unbind())
}

fn datom(py: Python<'_>, mut raw: pb::Datom) -> PyResult<Datom> {
    let hash = raw.hash.clone();
    let redacted = std::mem::take(&mut raw.redacted);
    if !redacted.is_empty() {
        // The value is withheld; decode the rest around a placeholder.
        raw.value = Some(pb::Value {
            kind: Some(pb::value::Kind::Bool(false)),
        });
    }
    let d = engram_proto::datom(raw)
        .map_err(|e| PyValueError::new_err(format!("a malformed datom from the server: {e}")))?;
    Ok(Datom {
        namespace: d.namespace.to_string(),
        branch: d.branch.map(|b| b.to_string()),
        entity: d.entity.0,
        attribute: d.attribute.to_string(),
        value: if redacted.is_empty() {
            convert::to_py(py, &d.value)?.unbind()
        } else {
            py.None()
        },
        redacted: (!redacted.is_empty()).then_some(redacted),
        op: match d.op {
            engram_types::Op::Assert => "assert",
            engram_types::Op::Retract => "retract",
        },
        valid_from_ns: d.valid_from_ns,
        valid_to_ns: d.valid_to_ns,
        tx: d.tx.0,
        agent: d.provenance.agent,
        session: d.provenance.session,
        source: d.provenance.source,
        confidence: d.provenance.confidence,
        status: match d.provenance.status {
            Status::Candidate => "candidate",
            Status::Verified => "verified",
        },
        hash,
    })
}

/// A redaction's answer as a dict (`redact`, `redact_where`).
fn redaction_dict<'py>(py: Python<'py>, response: &pb::RedactResponse) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("dry_run", response.dry_run)?;
    out.set_item("tx", response.tx)?;
    out.set_item("part_txs", response.part_txs.clone())?;
    out.set_item("audit_index", response.audit_index)?;
    out.set_item("datoms_redacted", response.datoms_redacted)?;
    out.set_item("listing_truncated", response.listing_truncated)?;
    let datoms = PyList::empty(py);
    for d in &response.datoms {
        let item = PyDict::new(py);
        item.set_item("tx", d.tx)?;
        item.set_item("seq", d.seq)?;
        item.set_item("hash", PyBytes::new(py, &d.hash))?;
        item.set_item("attribute", &d.attribute)?;
        item.set_item("guessable", d.guessable)?;
        item.set_item("redacted_by_tx", d.redacted_by_tx)?;
        item.set_item("branch", (!d.branch.is_empty()).then_some(d.branch.as_str()))?;
        item.set_item(
            "op",
            if d.op == pb::Op::Retract as i32 {
                "retract"
            } else {
                "assert"
            },
        )?;
        datoms.append(item)?;
    }
    out.set_item("datoms", datoms)?;
    Ok(out)
}
