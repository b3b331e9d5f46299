//! Engram as a [`System`] for the closed-loop load generator ([`EngramSystem`]), the 3-node
//! cluster of `engram serve` processes a bench run starts ([`BenchCluster`], over mutual TLS
//! with [`BenchTls`]), the leader's write-stage breakdown read off `/metrics` ([`StageMean`]),
//! and the report a run prints ([`emit`]). `load` runs the suite against Engram alone with it,
//! `versus` beside etcd, and `join`, `recall` and `redaction` start their clusters with it.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use engram_access::AgentKey;
use engram_client::{
    Client, ClientConfig, ClientTls, Consistency, GetOptions, HistoryTarget, RetryPolicy, WatchFilter, pb,
};
use engram_loadgen::{
    Machine, OpFuture, Progress, ReadKind, Row, SuiteReport, SuiteSpec, System, WatchLayout, rows, table,
};
use engram_types::{
    Attribute, AttributeDef, EntityId, EntityRef, Namespace, Op, Provenance, Status, TxOp, TxRequest, Value,
    ValueType,
};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use indicatif::ProgressBar;
use serde::Serialize;

use engram_cli::local_cluster::{LocalCluster, LocalNode, free_ports};
use engram_cli::ui::Ui;

use crate::suite::BenchArgs;

/// The namespace the load runs write and read.
const NAMESPACE: &str = "bench/load";
const VALUE_ATTR: &str = ":bench/value";
const MARKER_ATTR: &str = ":bench/marker";
/// Values per preload transaction: large transactions load faster, and stay well under the
/// default 1 MiB request limit at the value sizes the bench uses.
const PRELOAD_BATCH: usize = 2_000;
/// Concurrent preload writers.
const PRELOAD_WRITERS: usize = 4;

/// Engram behind the load generator's [`System`] interface.
pub struct EngramSystem {
    /// One client per connection, each to the leader only: writes and linearizable reads go
    /// where they are served, with no forwarding hop (the etcd runs do the same).
    leader: Arc<RwLock<Vec<Client>>>,
    /// The endpoint the `leader` clients talk to; [`System::prepare`] follows a new leader.
    leader_endpoint: Arc<RwLock<String>>,
    endpoints: Vec<String>,
    connections: usize,
    /// Over every endpoint, with the default retries: the preload tags its transactions with
    /// idempotency keys, so it rides out a leader change instead of failing the run.
    retrying: Client,
    /// One client per connection to each node in turn, for stale reads, which any node serves.
    spread: Vec<Client>,
    /// As `spread`, without a per-call deadline: the connections shared watches multiplex on.
    watch_spread: Vec<Client>,
    pids: Vec<u32>,
    /// How the report names this system ("engram", "engram-enforced", ...).
    name: String,
    /// How every request is made: signed by an agent key, over TLS.
    creds: Credentials,
    ns: Namespace,
    value_attr: Attribute,
    marker_attr: Attribute,
    loaded: Arc<Loaded>,
    /// What proven reads trust: established once from the chain, then one log per client that
    /// each proven answer moves forward.
    trust: Arc<ProvenTrust>,
}

/// The trusted logs of the proven-read runs (see [`EngramSystem::trust`]).
struct ProvenTrust {
    base: tokio::sync::OnceCell<engram_client::TrustedLog>,
    /// Indexed by client (modulo): a client's reads follow one another, so its slot is never
    /// waited for unless more clients run than there are slots.
    slots: Vec<tokio::sync::Mutex<Option<engram_client::TrustedLog>>>,
}

impl Default for ProvenTrust {
    fn default() -> ProvenTrust {
        ProvenTrust {
            base: tokio::sync::OnceCell::new(),
            slots: (0..PROVEN_TRUST_SLOTS)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
        }
    }
}

/// Trusted-log slots of the proven-read runs: more than any client count they run at.
const PROVEN_TRUST_SLOTS: usize = 1024;

/// What the preload wrote, for the reads to pick from.
struct Loaded {
    keys: std::sync::RwLock<Vec<EntityId>>,
    /// The first rewrite transaction (`u64::MAX` before any) and the last transaction: as-of
    /// reads pick a tx between them, where every key has a value.
    first_rewrite_tx: AtomicU64,
    last_tx: AtomicU64,
}

/// The principal the bench signs as in enforced mode, and the agent of every transaction.
pub const BENCH_AGENT: &str = "bench";

fn provenance() -> Provenance {
    Provenance {
        agent: BENCH_AGENT.into(),
        session: "engram-bench".into(),
        source: "load generator".into(),
        confidence: 1.0,
        status: Status::Candidate,
    }
}

/// How the bench's clients present themselves.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// Signs every request (a cluster in enforced mode).
    pub agent: Option<Arc<AgentKey>>,
    /// Connects over TLS, presenting the bench's client certificate (which names
    /// [`BENCH_AGENT`]: in an enforced cluster it authenticates unsigned requests).
    pub tls: Option<Arc<ClientTls>>,
}

/// A client that makes one attempt per call: the load generator counts failures rather than
/// hiding them behind retries.
fn one_shot(endpoint: &str, creds: &Credentials) -> Result<Client> {
    let config = ClientConfig {
        retry: RetryPolicy::never(),
        agent: creds.agent.clone(),
        tls: creds.tls.clone(),
        ..ClientConfig::default()
    };
    Ok(Client::with_config(vec![endpoint.to_string()], config)?)
}

/// A client for watches on `endpoint`: a watch is one long call, so no per-call deadline,
/// and no retries (the fan-out counts what arrives on the stream it opened).
fn watch_client(endpoint: &str, creds: &Credentials) -> Result<Client> {
    let config = ClientConfig {
        retry: RetryPolicy::never(),
        request_timeout: Duration::from_secs(24 * 3600),
        agent: creds.agent.clone(),
        tls: creds.tls.clone(),
        ..ClientConfig::default()
    };
    Ok(Client::with_config(vec![endpoint.to_string()], config)?)
}

impl EngramSystem {
    /// Connects `connections` channels to `leader` and as many spread over `endpoints`, each
    /// with `creds`; the report calls it `name`.
    pub fn connect(
        name: &str,
        leader: &str,
        endpoints: &[String],
        connections: usize,
        pids: Vec<u32>,
        creds: Credentials,
    ) -> Result<EngramSystem> {
        if endpoints.is_empty() || connections == 0 {
            bail!("the bench needs at least one endpoint and one connection");
        }
        let leader_clients = (0..connections)
            .map(|_| one_shot(leader, &creds))
            .collect::<Result<_>>()?;
        let spread = (0..connections)
            .map(|i| one_shot(&endpoints[i % endpoints.len()], &creds))
            .collect::<Result<_>>()?;
        let watch_spread = (0..connections)
            .map(|i| watch_client(&endpoints[i % endpoints.len()], &creds))
            .collect::<Result<_>>()?;
        let retrying = Client::with_config(
            endpoints.to_vec(),
            ClientConfig {
                agent: creds.agent.clone(),
                tls: creds.tls.clone(),
                ..ClientConfig::default()
            },
        )?;
        Ok(EngramSystem {
            leader: Arc::new(RwLock::new(leader_clients)),
            leader_endpoint: Arc::new(RwLock::new(leader.to_string())),
            endpoints: endpoints.to_vec(),
            connections,
            retrying,
            spread,
            watch_spread,
            pids,
            name: name.to_string(),
            creds,
            ns: Namespace::new(NAMESPACE)?,
            value_attr: Attribute::new(VALUE_ATTR)?,
            marker_attr: Attribute::new(MARKER_ATTR)?,
            loaded: Arc::new(Loaded {
                keys: std::sync::RwLock::new(Vec::new()),
                first_rewrite_tx: AtomicU64::new(u64::MAX),
                last_tx: AtomicU64::new(0),
            }),
            trust: Arc::default(),
        })
    }

    /// Declares the written attribute a string that is not searchable (`--unsearchable`), with
    /// the value index an implicit declaration would give it, so the writes measured after it
    /// differ from the default only in feeding no recall index.
    pub async fn declare_unsearchable(&self) -> Result<()> {
        let mut def = AttributeDef::new(self.value_attr.clone(), ValueType::String);
        def.indexed = true;
        def.searchable = false;
        self.retrying
            .apply_schema(&self.ns, &[def], &provenance(), Some("bench-unsearchable"))
            .await
            .context("declaring :bench/value unsearchable")?;
        Ok(())
    }

    fn conn(&self, client: usize) -> Client {
        let clients = self.leader.read().unwrap_or_else(|p| p.into_inner());
        clients[client % clients.len()].clone()
    }

    fn assert_op(&self, entity: EntityRef, attribute: &Attribute, value: Value) -> TxOp {
        TxOp {
            op: Op::Assert,
            entity,
            attribute: attribute.clone(),
            value,
            valid_from_ns: None,
            valid_to_ns: None,
        }
    }

    fn key(&self, pick: u64) -> Option<EntityId> {
        let keys = self.loaded.keys.read().ok()?;
        if keys.is_empty() {
            return None;
        }
        Some(keys[(pick % keys.len() as u64) as usize])
    }
}

/// Preload transactions made by this process so far. One count for the whole process, not
/// one per preload: a second preload into the same cluster (another phase) must not reuse the
/// first one's keys, which the cluster refuses for other content.
static PRELOAD_TXS: AtomicU64 = AtomicU64::new(0);

/// A preload transaction with a fresh idempotency key, so the client may retry it safely.
fn keyed(ns: &Namespace, ops: Vec<TxOp>) -> TxRequest {
    let mut tx = TxRequest::data(ns.clone(), ops, provenance());
    let n = PRELOAD_TXS.fetch_add(1, Ordering::Relaxed);
    tx.idempotency_key = Some(format!("bench-preload-{}-{n}", std::process::id()));
    tx
}

fn text(value: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(value).into_owned())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl System for EngramSystem {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn server_pids(&self) -> Vec<u32> {
        self.pids.clone()
    }

    fn write(&self, client: usize, seq: u64, datoms: usize, value: Arc<[u8]>) -> OpFuture {
        let ops = (0..datoms)
            .map(|i| {
                self.assert_op(
                    EntityRef::Temp(format!("c{client}s{seq}d{i}")),
                    &self.value_attr,
                    text(&value),
                )
            })
            .collect();
        let req = pb::TransactRequest::from(&TxRequest::data(self.ns.clone(), ops, provenance()));
        let c = self.conn(client);
        async move { c.transact_raw(req).await.map(|_| ()).map_err(err) }.boxed()
    }

    fn preload(
        &self,
        keys: usize,
        value_bytes: usize,
        total_datoms: u64,
        progress: Box<dyn Fn(u64) + Send + Sync>,
    ) -> BoxFuture<'static, Result<(), String>> {
        let c = self.retrying.clone();
        let ns = self.ns.clone();
        let attr = self.value_attr.clone();
        let value = text(&engram_loadgen::value_of(value_bytes));
        let loaded = self.loaded.clone();
        let op = move |entity: EntityRef| TxOp {
            op: Op::Assert,
            entity,
            attribute: attr.clone(),
            value: value.clone(),
            valid_from_ns: None,
            valid_to_ns: None,
        };
        async move {
            let written = Arc::new(AtomicU64::new(0));
            let progress: Arc<dyn Fn(u64) + Send + Sync> = Arc::from(progress);
            // 1. The keys: new entities, PRELOAD_BATCH per transaction.
            loop {
                let existing = loaded.keys.read().map(|k| k.len()).map_err(err)?;
                if existing >= keys {
                    break;
                }
                let n = (keys - existing).min(PRELOAD_BATCH);
                let ops = (0..n).map(|i| op(EntityRef::Temp(format!("k{i}")))).collect();
                let resp = c.transact(&keyed(&ns, ops)).await.map_err(err)?;
                let mut ids: Vec<(usize, EntityId)> = resp
                    .temp_ids
                    .iter()
                    .filter_map(|(k, v)| Some((k.strip_prefix('k')?.parse().ok()?, EntityId(*v))))
                    .collect();
                ids.sort();
                if ids.len() != n {
                    return Err(format!(
                        "preload: {n} new entities but {} ids came back",
                        ids.len()
                    ));
                }
                loaded
                    .keys
                    .write()
                    .map_err(err)?
                    .extend(ids.into_iter().map(|(_, id)| id));
                loaded.last_tx.fetch_max(resp.tx, Ordering::Relaxed);
                progress(written.fetch_add(n as u64, Ordering::Relaxed) + n as u64);
            }
            // 2. Rewrites of every key in turn until the store holds `total_datoms` values.
            let all: Arc<Vec<EntityId>> = Arc::new(loaded.keys.read().map_err(err)?.clone());
            let keys = all.len() as u64;
            let range = engram_loadgen::rewrite_in_turn(
                keys,
                PRELOAD_BATCH as u64,
                PRELOAD_WRITERS,
                total_datoms,
                written,
                progress,
                move |start, n| {
                    let ops = (start..start + n)
                        .map(|i| op(EntityRef::Id(all[(i % keys) as usize])))
                        .collect();
                    let tx = keyed(&ns, ops);
                    let c = c.clone();
                    async move { c.transact(&tx).await.map(|r| r.tx).map_err(err) }.boxed()
                },
            )
            .await?;
            if let Some((first, last)) = range {
                loaded.first_rewrite_tx.fetch_min(first, Ordering::Relaxed);
                loaded.last_tx.fetch_max(last, Ordering::Relaxed);
            }
            Ok(())
        }
        .boxed()
    }

    fn prepare(&self) -> BoxFuture<'static, Result<(), String>> {
        // Follow a leader change, so writes and linearizable reads keep going to the leader.
        let creds = self.creds.clone();
        let probes: Vec<(String, Client)> = self
            .endpoints
            .iter()
            .filter_map(|e| Some((e.clone(), one_shot(e, &creds).ok()?)))
            .collect();
        let (leader, leader_endpoint) = (self.leader.clone(), self.leader_endpoint.clone());
        let connections = self.connections;
        async move {
            for (endpoint, probe) in probes {
                let Ok(status) = probe.status().await else {
                    continue;
                };
                if status.role != "Leader" {
                    continue;
                }
                let mut current = leader_endpoint.write().map_err(err)?;
                if *current != endpoint {
                    let clients = (0..connections)
                        .map(|_| one_shot(&endpoint, &creds))
                        .collect::<Result<Vec<_>>>()
                        .map_err(err)?;
                    *leader.write().map_err(err)? = clients;
                    *current = endpoint;
                }
                return Ok(());
            }
            Err("no node says it leads".to_string())
        }
        .boxed()
    }

    fn read(&self, client: usize, pick: u64, read: ReadKind) -> OpFuture {
        let Some(entity) = self.key(pick) else {
            return async { Err("nothing preloaded to read".to_string()) }.boxed();
        };
        let ns = self.ns.clone();
        match read {
            ReadKind::Linearizable | ReadKind::Stale => {
                let (c, consistency) = if read == ReadKind::Linearizable {
                    (self.conn(client), Consistency::Linearizable)
                } else {
                    (
                        self.spread[client % self.spread.len()].clone(),
                        Consistency::Stale,
                    )
                };
                let opts = GetOptions {
                    consistency,
                    ..GetOptions::default()
                };
                async move { c.get(&ns, entity, opts).await.map(|_| ()).map_err(err) }.boxed()
            }
            ReadKind::AsOf => {
                let last = self.loaded.last_tx.load(Ordering::Relaxed);
                let first = self.loaded.first_rewrite_tx.load(Ordering::Relaxed).min(last);
                let as_of = first + (pick >> 32) % (last - first + 1);
                // History never changes below the applied head, so any node answers an as-of
                // read; both systems read it from the member the client is connected to.
                let c = self.spread[client % self.spread.len()].clone();
                let opts = GetOptions {
                    as_of_tx: Some(as_of),
                    consistency: Consistency::Stale,
                    ..GetOptions::default()
                };
                async move { c.get(&ns, entity, opts).await.map(|_| ()).map_err(err) }.boxed()
            }
            ReadKind::Proven | ReadKind::Complete => {
                let c = self.conn(client);
                let trust = self.trust.clone();
                async move {
                    let slot = &trust.slots[client % trust.slots.len()];
                    let mut held = slot.lock().await;
                    let mut log = match held.take() {
                        Some(log) => log,
                        None => trust
                            .base
                            .get_or_try_init(|| c.trust_chain())
                            .await
                            .map_err(err)?
                            .clone(),
                    };
                    let answer = if read == ReadKind::Proven {
                        c.get_verified(&mut log, &ns, entity, GetOptions::default())
                            .await
                            .map(|_| ())
                    } else {
                        c.get_complete(&mut log, &ns, entity, GetOptions::default())
                            .await
                            .map(|_| ())
                    };
                    *held = Some(log);
                    answer.map_err(err)
                }
                .boxed()
            }
            ReadKind::History => {
                let c = self.spread[client % self.spread.len()].clone();
                let target = HistoryTarget::Entity {
                    entity,
                    attribute: None,
                };
                async move {
                    c.history(&ns, target, 0, Consistency::Stale)
                        .await
                        .map(|_| ())
                        .map_err(err)
                }
                .boxed()
            }
        }
    }

    fn subscribe(
        &self,
        run: u64,
        subscriber: usize,
        layout: WatchLayout,
    ) -> BoxFuture<'static, Result<BoxStream<'static, Result<u64, String>>, String>> {
        let c = match layout {
            WatchLayout::Own => watch_client(&self.endpoints[subscriber % self.endpoints.len()], &self.creds),
            WatchLayout::Shared => Ok(self.watch_spread[subscriber % self.watch_spread.len()].clone()),
        };
        let ns = Namespace::new(format!("bench/watch-{run}"));
        async move {
            let c = c.map_err(err)?;
            let filter = WatchFilter {
                namespace: ns.map_err(err)?,
                from_tx: 0,
                attribute: None,
                entity: None,
                branch: None,
            };
            let stream = c.watch(filter).flat_map(|event| {
                let markers: Vec<Result<u64, String>> = match event {
                    Err(e) => vec![Err(e.to_string())],
                    Ok(ev) => ev
                        .datoms
                        .iter()
                        .filter(|d| d.attribute == MARKER_ATTR)
                        .filter_map(|d| match d.value.as_ref().and_then(|v| v.kind.as_ref()) {
                            Some(pb::value::Kind::I64(n)) => u64::try_from(*n).ok().map(Ok),
                            _ => None,
                        })
                        .collect(),
                };
                futures::stream::iter(markers)
            });
            Ok(stream.boxed())
        }
        .boxed()
    }

    fn write_marker(&self, run: u64, n: u64) -> OpFuture {
        let c = self.conn(0);
        let attr = self.marker_attr.clone();
        let ns = Namespace::new(format!("bench/watch-{run}"));
        async move {
            let ns = ns.map_err(err)?;
            let n = i64::try_from(n).map_err(err)?;
            let op = TxOp {
                op: Op::Assert,
                entity: EntityRef::Temp("m".into()),
                attribute: attr,
                value: Value::I64(n),
                valid_from_ns: None,
                valid_to_ns: None,
            };
            c.transact(&TxRequest::data(ns, vec![op], provenance()))
                .await
                .map(|_| ())
                .map_err(err)
        }
        .boxed()
    }
}

/// A 3-node bench cluster of `engram serve` processes, and where its data lives.
pub struct BenchCluster {
    pub cluster: LocalCluster,
    pub leader: String,
    /// In enforced mode, the administrator key the bench signs with.
    pub agent: Option<Arc<AgentKey>>,
    _temp: Option<tempfile::TempDir>,
}

impl BenchCluster {
    /// Starts the nodes with `exe`, forms the cluster (in enforced mode, with a fresh
    /// administrator key the bench signs with) and waits for a leader.
    pub async fn start(
        exe: &Path,
        data_dir: Option<&Path>,
        snapshot_every_entries: u64,
        enforced: bool,
        tls: Option<&BenchTls>,
        ui: Ui,
    ) -> Result<BenchCluster> {
        Self::start_with(exe, data_dir, snapshot_every_entries, enforced, tls, &[], ui).await
    }

    /// [`BenchCluster::start`] with `more_args` given to every node's `engram serve`.
    pub async fn start_with(
        exe: &Path,
        data_dir: Option<&Path>,
        snapshot_every_entries: u64,
        enforced: bool,
        tls: Option<&BenchTls>,
        more_args: &[String],
        ui: Ui,
    ) -> Result<BenchCluster> {
        let (temp, dir) = match data_dir {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                (None, d.to_path_buf())
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("engram-bench-")
                    .tempdir()
                    .context("creating a temporary directory")?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let pb = ui.spinner(format!("starting 3 engram nodes in {}", dir.display()));
        // Three for gRPC, three for `/metrics` (the leader's write-stage breakdown).
        let ports = free_ports(6)?;
        let extra = vec![
            "--snapshot-every-entries".to_string(),
            snapshot_every_entries.to_string(),
            // etcd's defaults: heartbeats every 100 ms, elections after a randomised 1-2 s.
            // Engram's own default (200-400 ms) fails over sooner but, on 2 cores saturated by
            // six servers and the load generator, also elects needlessly, which would measure
            // leader changes rather than the write path.
            "--election-timeout-min-ms".to_string(),
            "1000".to_string(),
            "--election-timeout-max-ms".to_string(),
            "2000".to_string(),
            // The preload's large transactions need more than a heartbeat to reach and be
            // fsynced by a saturated follower; with the heartbeat as the deadline they are cut
            // off and resent over and over (see docs/benchmarks.md, 10 M values).
            "--append-timeout-ms".to_string(),
            "1000".to_string(),
            // 8 MiB: the preload sends up to PRELOAD_BATCH values per transaction.
            "--max-tx-bytes".to_string(),
            (8u64 << 20).to_string(),
        ];
        let mut extra = extra;
        extra.extend_from_slice(more_args);
        if let Some(tls) = tls {
            extra.extend(tls.server_args());
        }
        let mut cluster = LocalCluster::start_with_tls(
            exe,
            &dir,
            &ports[..3],
            &ports[3..],
            &extra,
            tls.map(|t| t.client.clone()),
        )?;
        cluster.wait_all_answer(Duration::from_secs(60)).await?;
        let agent = if enforced {
            let principal = engram_access::Principal::new(BENCH_AGENT).map_err(|e| anyhow!("{e}"))?;
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| anyhow!("no OS randomness for a key: {e}"))?;
            Some(Arc::new(AgentKey::from_seed(principal, seed)))
        } else {
            None
        };
        let admin = agent.as_ref().map(|k| (BENCH_AGENT, k.public().0));
        let leader_id = cluster.init_with(Duration::from_secs(30), admin).await?;
        let leader = cluster.node(leader_id)?.endpoint();
        ui.done(
            &pb,
            format!("engram cluster up; node {leader_id} leads at {leader}"),
        );
        Ok(BenchCluster {
            cluster,
            leader,
            agent,
            _temp: temp,
        })
    }

    pub fn pids(&self) -> Vec<u32> {
        self.cluster.nodes().iter().filter_map(LocalNode::pid).collect()
    }

    /// The leader's write-stage breakdown (`engram_write_stage_seconds` in its `/metrics`):
    /// per stage, the writes it covers and their mean offset from arrival in milliseconds.
    pub async fn write_stages(&self) -> Result<Vec<StageMean>> {
        let node = self
            .cluster
            .nodes()
            .iter()
            .find(|n| n.endpoint() == self.leader)
            .context("the leader is not one of the bench's nodes")?;
        let addr = node.metrics_addr.context("the leader serves no /metrics")?;
        let text = http_get_metrics(addr).await?;
        Ok(parse_stage_means(&text))
    }
}

/// Certificates for a bench run over mutual TLS, made with `openssl` ([`engram_cli::pki`]) in a temporary
/// directory: a CA, one certificate every node serves and dials its peers with, and the bench's
/// client certificate, whose common name is [`BENCH_AGENT`].
pub struct BenchTls {
    dir: tempfile::TempDir,
    pub client: Arc<ClientTls>,
}

impl BenchTls {
    pub fn generate() -> Result<BenchTls> {
        let dir = tempfile::Builder::new()
            .prefix("engram-bench-tls-")
            .tempdir()
            .context("creating a temporary directory")?;
        let d = dir.path();
        engram_cli::pki::make_ca(d, "bench")?;
        engram_cli::pki::issue(
            d,
            "bench",
            "node",
            "/CN=engram-bench-node",
            engram_cli::pki::NODE_EXTENSIONS,
        )?;
        engram_cli::pki::issue(
            d,
            "bench",
            "client",
            "/CN=bench",
            &engram_cli::pki::client_extensions(None),
        )?;
        let read = |f: &str| std::fs::read(d.join(f)).with_context(|| format!("reading {f}"));
        let client = Arc::new(ClientTls {
            ca_pem: read("bench-ca.pem")?,
            identity: Some((read("client.pem")?, read("client.key")?)),
        });
        Ok(BenchTls { dir, client })
    }

    /// The `serve` arguments of a node.
    fn server_args(&self) -> Vec<String> {
        let path = |f: &str| self.dir.path().join(f).display().to_string();
        vec![
            "--tls-cert".into(),
            path("node.pem"),
            "--tls-key".into(),
            path("node.key"),
            "--tls-client-ca".into(),
            path("bench-ca.pem"),
        ]
    }
}

/// One stage of the write-stage breakdown.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageMean {
    pub stage: String,
    pub writes: u64,
    pub mean_ms: f64,
}

async fn http_get_metrics(addr: std::net::SocketAddr) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .with_context(|| format!("connecting to {addr}: timed out"))?
        .with_context(|| format!("connecting to {addr}"))?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await?;
    let mut body = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut body))
        .await
        .with_context(|| format!("reading {addr}/metrics: timed out"))??;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The `_sum` and `_count` series of `engram_write_stage_seconds`, as means per stage in the
/// order the exposition lists them.
fn parse_stage_means(text: &str) -> Vec<StageMean> {
    let mut sums: Vec<(String, f64)> = Vec::new();
    let mut counts: Vec<(String, u64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("engram_write_stage_seconds_") else {
            continue;
        };
        let Some((series, value)) = rest.rsplit_once(' ') else {
            continue;
        };
        let Some(stage) = series
            .split_once("stage=\"")
            .and_then(|(_, s)| s.split_once('"'))
            .map(|(s, _)| s.to_string())
        else {
            continue;
        };
        if series.starts_with("sum{") {
            if let Ok(v) = value.parse() {
                sums.push((stage, v));
            }
        } else if series.starts_with("count{")
            && let Ok(v) = value.parse()
        {
            counts.push((stage, v));
        }
    }
    counts
        .into_iter()
        .map(|(stage, writes)| {
            let sum = sums.iter().find(|(s, _)| *s == stage).map_or(0.0, |(_, v)| *v);
            let mean_ms = if writes == 0 {
                0.0
            } else {
                sum * 1e3 / writes as f64
            };
            StageMean {
                stage,
                writes,
                mean_ms,
            }
        })
        .collect()
}

/// The breakdown as one line per stage, for the bench's text report.
pub fn stage_lines(stages: &[StageMean]) -> String {
    let mut out = String::from("engram write stages on the leader (mean ms from a write's arrival):\n");
    for s in stages {
        out.push_str(&format!(
            "  {:<20} {:>8.3}  ({} writes)\n",
            s.stage, s.mean_ms, s.writes
        ));
    }
    out
}

#[cfg(test)]
mod stage_tests {
    use super::*;

    #[test]
    fn the_stage_means_come_from_the_sum_and_count_series() {
        let text = "# TYPE engram_write_stage_seconds histogram\n\
            engram_write_stage_seconds_bucket{node_id=\"1\",stage=\"committed\",le=\"0.001\"} 3\n\
            engram_write_stage_seconds_sum{node_id=\"1\",stage=\"committed\"} 0.5\n\
            engram_write_stage_seconds_count{node_id=\"1\",stage=\"committed\"} 4\n\
            engram_write_stage_seconds_sum{node_id=\"1\",stage=\"applied\"} 0\n\
            engram_write_stage_seconds_count{node_id=\"1\",stage=\"applied\"} 0\n\
            engram_up{node_id=\"1\"} 1\n";
        assert_eq!(
            parse_stage_means(text),
            vec![
                StageMean {
                    stage: "committed".into(),
                    writes: 4,
                    mean_ms: 125.0
                },
                StageMean {
                    stage: "applied".into(),
                    writes: 0,
                    mean_ms: 0.0
                },
            ]
        );
    }
}

/// [`Progress`] on the command's progress display.
pub struct UiProgress {
    ui: Ui,
    /// The running phase's bar and name (a hidden bar has no message to end with).
    bar: Mutex<Option<(ProgressBar, String)>>,
}

impl UiProgress {
    pub fn new(ui: Ui) -> UiProgress {
        UiProgress {
            ui,
            bar: Mutex::new(None),
        }
    }

    fn finish(&self) {
        if let Ok(mut bar) = self.bar.lock()
            && let Some((pb, name)) = bar.take()
        {
            self.ui.done(&pb, name);
        }
    }
}

impl Drop for UiProgress {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Progress for UiProgress {
    fn phase(&self, name: &str, steps: u64) {
        self.finish();
        let pb = if steps == 0 {
            self.ui.spinner(name.to_string())
        } else {
            self.ui.bar(
                steps,
                "{spinner:.cyan} {msg} [{bar:30}] {pos}/{len} {elapsed:.dim}",
                name.to_string(),
            )
        };
        if let Ok(mut bar) = self.bar.lock() {
            *bar = Some((pb, name.to_string()));
        }
    }

    fn step(&self, note: &str) {
        if let Ok(bar) = self.bar.lock()
            && let Some((pb, _)) = bar.as_ref()
        {
            pb.inc(1);
            pb.println(format!("  {note}"));
        }
    }

    fn loaded(&self, system: &str, values: u64, target: u64) {
        if let Ok(mut bar) = self.bar.lock()
            && let Some((pb, name)) = bar.as_mut()
        {
            *name = format!("loaded {system}: {values} of {target} values");
            pb.set_message(format!("loading {system}: {values} of {target} values"));
        }
    }
}

/// The JSON document `--json` prints and `--out` writes.
#[derive(Serialize)]
pub struct BenchDocument<'a> {
    pub machine: Machine,
    pub command: String,
    pub spec: &'a SuiteSpec,
    pub rows: Vec<Row>,
    pub report: &'a SuiteReport,
    /// Engram's write stages on the leader over the whole run (empty when attached to a
    /// cluster the bench did not start).
    pub write_stages: &'a [StageMean],
}

/// Prints the report (table or JSON) and writes `--out`.
pub fn emit(
    args: &BenchArgs,
    spec: &SuiteSpec,
    report: &SuiteReport,
    write_stages: &[StageMean],
    json: bool,
) -> Result<()> {
    let doc = BenchDocument {
        machine: Machine::read(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        spec,
        rows: rows(&report.measurements),
        report,
        write_stages,
    };
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    let mut w = std::io::stdout().lock();
    if json {
        writeln!(w, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    writeln!(w, "{}", doc.machine)?;
    write!(w, "{}", table(&doc.rows))?;
    for f in &report.fanouts {
        writeln!(
            w,
            "watch fan-out {:>6}: {} subscribers ({}) x {} markers: {}/{} delivered, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (the markers' writes: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; {:.1} KiB of server memory per idle watcher)",
            f.system,
            f.subscribers,
            f.layout,
            f.markers,
            f.delivered,
            f.expected,
            f.latency.p50_us / 1000.0,
            f.latency.p99_us / 1000.0,
            f.latency.max_us / 1000.0,
            f.write_latency.p50_us / 1000.0,
            f.write_latency.p99_us / 1000.0,
            f.write_latency.max_us / 1000.0,
            f.server_bytes_per_watcher / 1024.0
        )?;
    }
    for (system, values, secs) in &report.preloads {
        writeln!(
            w,
            "preload {system}: {values} values in {secs:.1} s ({:.0}/s)",
            *values as f64 / secs.max(1e-9)
        )?;
    }
    for s in &report.skipped {
        writeln!(w, "not measured: {s}")?;
    }
    if !write_stages.is_empty() {
        write!(w, "{}", stage_lines(write_stages))?;
    }
    Ok(())
}

/// Whether any measured point failed requests: the command then exits non-zero.
pub fn failures(report: &SuiteReport) -> Vec<String> {
    let mut out: Vec<String> = report
        .measurements
        .iter()
        .filter(|m| m.errors > 0 || m.ops == 0)
        .map(|m| {
            format!(
                "{} {} x{} round {}: {} errors, {} ok ({})",
                m.system,
                engram_loadgen::label(m),
                m.clients,
                m.round,
                m.errors,
                m.ops,
                m.first_error.as_deref().unwrap_or("no error message")
            )
        })
        .collect();
    out.extend(
        report
            .fanouts
            .iter()
            .filter(|f| f.delivered < f.expected)
            .map(|f| {
                format!(
                    "{} fan-out to {} ({}): {} of {} deliveries",
                    f.system, f.subscribers, f.layout, f.delivered, f.expected
                )
            }),
    );
    out
}
