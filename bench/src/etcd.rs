//! etcd 3.4 as the peer: a 3-member cluster of `etcd` processes on loopback, and etcd behind
//! the load generator's [`System`] interface through the v3 gRPC API (`etcd-client`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use engram_loadgen::{OpFuture, ReadKind, System, WatchLayout};
use etcd_client::{Client, GetOptions, Txn, TxnOp, WatchOptions};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};

/// Puts per preload transaction (the members are started with `--max-txn-ops` above it).
const PRELOAD_BATCH: usize = 2_000;
const PRELOAD_WRITERS: usize = 4;

/// Three `etcd` members on loopback, killed when dropped.
pub struct EtcdCluster {
    children: Vec<Child>,
    pub client_urls: Vec<String>,
    _temp: Option<tempfile::TempDir>,
}

impl EtcdCluster {
    /// Starts the members with the defaults that matter for the comparison kept: the WAL is
    /// fsynced on every append (etcd's only mode unless `--unsafe-no-fsync`), and
    /// `--snapshot-count` stays at its default. Limits are raised only where the preload's
    /// large transactions need it.
    pub fn start(etcd: &Path, data_dir: Option<&Path>) -> Result<EtcdCluster> {
        let (temp, dir): (Option<tempfile::TempDir>, PathBuf) = match data_dir {
            Some(d) => (None, d.to_path_buf()),
            None => {
                let t = tempfile::Builder::new().prefix("etcd-bench-").tempdir()?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ports = engram_cli::local_cluster::free_ports(6)?;
        let peer = |i: usize| format!("http://127.0.0.1:{}", ports[3 + i]);
        let client_urls: Vec<String> = (0..3).map(|i| format!("http://127.0.0.1:{}", ports[i])).collect();
        let initial = (0..3)
            .map(|i| format!("m{i}={}", peer(i)))
            .collect::<Vec<_>>()
            .join(",");
        let mut children = Vec::new();
        for (i, client_url) in client_urls.iter().enumerate() {
            let log = std::fs::File::create(dir.join(format!("m{i}.log")))?;
            let child = Command::new(etcd)
                .args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(dir.join(format!("m{i}")))
                .args(["--listen-client-urls", client_url])
                .args(["--advertise-client-urls", client_url])
                .args(["--listen-peer-urls", &peer(i)])
                .args(["--initial-advertise-peer-urls", &peer(i)])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "engram-bench"])
                .args(["--max-txn-ops", "10000"])
                .args(["--max-request-bytes", &(8u64 << 20).to_string()])
                // 8 GiB: the 10 M-value history run writes past the 2 GiB default quota.
                .args(["--quota-backend-bytes", &(8u64 << 30).to_string()])
                .args([
                    "--logger",
                    "zap",
                    "--log-outputs",
                    "stderr",
                    "--log-level",
                    "warn",
                ])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("starting {}", etcd.display()))?;
            children.push(child);
        }
        Ok(EtcdCluster {
            children,
            client_urls,
            _temp: temp,
        })
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Waits until every member answers and they agree on a leader; returns its client URL.
    pub async fn wait_for_leader(&mut self, timeout: Duration) -> Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            for c in &mut self.children {
                if let Some(status) = c.try_wait()? {
                    bail!("an etcd member exited early ({status}); see its log in the data directory");
                }
            }
            if let Ok(url) = self.leader_url().await {
                return Ok(url);
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the etcd members did not elect a leader within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn leader_url(&self) -> Result<String> {
        let mut leader = None;
        let mut ids = Vec::new();
        for url in &self.client_urls {
            let mut c = Client::connect([url.as_str()], None).await?;
            let s = c.status().await?;
            let member = s.header().map(|h| h.member_id()).unwrap_or(0);
            ids.push((member, url.clone()));
            match leader {
                None => leader = Some(s.leader()),
                Some(l) if l != s.leader() => bail!("members disagree on the leader"),
                Some(_) => {}
            }
        }
        let leader = leader.filter(|l| *l != 0).context("no leader yet")?;
        ids.into_iter()
            .find(|(m, _)| *m == leader)
            .map(|(_, u)| u)
            .context("the leader is not one of the members")
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// etcd behind the [`System`] interface. Keys are `k/{index}`; a write of k values is one
/// `Txn` of k puts (a plain `Put` for one), as an Engram transaction of k datoms is one entry.
pub struct EtcdSystem {
    leader: Arc<RwLock<Vec<Client>>>,
    /// The member the `leader` clients talk to; [`System::prepare`] follows a new leader.
    leader_url: Arc<RwLock<String>>,
    endpoints: Vec<String>,
    connections: usize,
    spread: Vec<Client>,
    pids: Vec<u32>,
    loaded: Arc<Loaded>,
}

struct Loaded {
    keys: RwLock<usize>,
    first_rewrite_rev: AtomicU64,
    last_rev: AtomicU64,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn key(i: u64) -> String {
    format!("k/{i:08}")
}

impl EtcdSystem {
    pub async fn connect(
        leader: &str,
        endpoints: &[String],
        connections: usize,
        pids: Vec<u32>,
    ) -> Result<EtcdSystem> {
        let mut leader_clients = Vec::new();
        let mut spread = Vec::new();
        for i in 0..connections {
            leader_clients.push(Client::connect([leader], None).await?);
            spread.push(Client::connect([endpoints[i % endpoints.len()].as_str()], None).await?);
        }
        Ok(EtcdSystem {
            leader: Arc::new(RwLock::new(leader_clients)),
            leader_url: Arc::new(RwLock::new(leader.to_string())),
            endpoints: endpoints.to_vec(),
            connections,
            spread,
            pids,
            loaded: Arc::new(Loaded {
                keys: RwLock::new(0),
                first_rewrite_rev: AtomicU64::new(u64::MAX),
                last_rev: AtomicU64::new(0),
            }),
        })
    }

    fn conn(&self, client: usize) -> Client {
        let clients = self.leader.read().unwrap_or_else(|p| p.into_inner());
        clients[client % clients.len()].clone()
    }
}

fn txn_of(keys: impl Iterator<Item = String>, value: &[u8]) -> Txn {
    Txn::new().and_then(
        keys.map(|k| TxnOp::put(k, value.to_vec(), None))
            .collect::<Vec<_>>(),
    )
}

impl System for EtcdSystem {
    fn name(&self) -> String {
        "etcd".into()
    }

    fn server_pids(&self) -> Vec<u32> {
        self.pids.clone()
    }

    fn write(&self, client: usize, seq: u64, datoms: usize, value: Arc<[u8]>) -> OpFuture {
        let mut c = self.conn(client);
        async move {
            if datoms == 1 {
                c.put(format!("w/{client}/{seq}"), value.to_vec(), None)
                    .await
                    .map(|_| ())
                    .map_err(err)
            } else {
                let txn = txn_of((0..datoms).map(|i| format!("w/{client}/{seq}/{i}")), &value);
                c.txn(txn).await.map(|_| ()).map_err(err)
            }
        }
        .boxed()
    }

    fn preload(
        &self,
        keys: usize,
        value_bytes: usize,
        total_datoms: u64,
        progress: Box<dyn Fn(u64) + Send + Sync>,
    ) -> BoxFuture<'static, Result<(), String>> {
        let c = self.conn(0);
        let loaded = self.loaded.clone();
        let value = engram_loadgen::value_of(value_bytes);
        async move {
            let written = Arc::new(AtomicU64::new(0));
            let progress: Arc<dyn Fn(u64) + Send + Sync> = Arc::from(progress);
            loop {
                let existing = *loaded.keys.read().map_err(err)?;
                if existing >= keys {
                    break;
                }
                let n = (keys - existing).min(PRELOAD_BATCH);
                let resp = c
                    .clone()
                    .txn(txn_of((existing..existing + n).map(|i| key(i as u64)), &value))
                    .await
                    .map_err(err)?;
                let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
                loaded
                    .last_rev
                    .fetch_max(u64::try_from(rev).unwrap_or(0), Ordering::Relaxed);
                *loaded.keys.write().map_err(err)? += n;
                progress(written.fetch_add(n as u64, Ordering::Relaxed) + n as u64);
            }
            let all = *loaded.keys.read().map_err(err)? as u64;
            let range = engram_loadgen::rewrite_in_turn(
                all,
                PRELOAD_BATCH as u64,
                PRELOAD_WRITERS,
                total_datoms,
                written,
                progress,
                move |start, n| {
                    let txn = txn_of((start..start + n).map(|i| key(i % all)), &value);
                    let mut c = c.clone();
                    async move {
                        let resp = c.txn(txn).await.map_err(err)?;
                        Ok(u64::try_from(resp.header().map(|h| h.revision()).unwrap_or(0)).unwrap_or(0))
                    }
                    .boxed()
                },
            )
            .await?;
            if let Some((first, last)) = range {
                loaded.first_rewrite_rev.fetch_min(first, Ordering::Relaxed);
                loaded.last_rev.fetch_max(last, Ordering::Relaxed);
            }
            Ok(())
        }
        .boxed()
    }

    fn prepare(&self) -> BoxFuture<'static, Result<(), String>> {
        let endpoints = self.endpoints.clone();
        let (leader, leader_url) = (self.leader.clone(), self.leader_url.clone());
        let connections = self.connections;
        async move {
            for url in endpoints {
                let Ok(mut probe) = Client::connect([url.as_str()], None).await else {
                    continue;
                };
                let Ok(status) = probe.status().await else {
                    continue;
                };
                if status.header().map(|h| h.member_id()) != Some(status.leader()) {
                    continue;
                }
                let current = leader_url.read().map(|u| u.clone()).map_err(err)?;
                if current != url {
                    let mut clients = Vec::with_capacity(connections);
                    for _ in 0..connections {
                        clients.push(Client::connect([url.as_str()], None).await.map_err(err)?);
                    }
                    *leader.write().map_err(err)? = clients;
                    *leader_url.write().map_err(err)? = url;
                }
                return Ok(());
            }
            Err("no member says it leads".to_string())
        }
        .boxed()
    }

    fn supports(&self, read: ReadKind) -> bool {
        // etcd keeps every revision until compaction but has no call listing a key's versions,
        // and proves nothing about an answer.
        !matches!(read, ReadKind::History | ReadKind::Proven | ReadKind::Complete)
    }

    fn read(&self, client: usize, pick: u64, read: ReadKind) -> OpFuture {
        let keys = self.loaded.keys.read().map(|k| *k as u64).unwrap_or(0);
        if keys == 0 {
            return async { Err("nothing preloaded to read".to_string()) }.boxed();
        }
        let k = key(pick % keys);
        match read {
            ReadKind::Linearizable => {
                let mut c = self.conn(client);
                async move { c.get(k, None).await.map(|_| ()).map_err(err) }.boxed()
            }
            ReadKind::Stale => {
                let mut c = self.spread[client % self.spread.len()].clone();
                async move {
                    c.get(k, Some(GetOptions::new().with_serializable()))
                        .await
                        .map(|_| ())
                        .map_err(err)
                }
                .boxed()
            }
            ReadKind::AsOf => {
                let last = self.loaded.last_rev.load(Ordering::Relaxed);
                let first = self.loaded.first_rewrite_rev.load(Ordering::Relaxed).min(last);
                let rev = first + (pick >> 32) % (last - first + 1);
                let mut c = self.spread[client % self.spread.len()].clone();
                let opts = GetOptions::new()
                    .with_serializable()
                    .with_revision(i64::try_from(rev).unwrap_or(i64::MAX));
                async move { c.get(k, Some(opts)).await.map(|_| ()).map_err(err) }.boxed()
            }
            ReadKind::History => async { Err("etcd has no history read".to_string()) }.boxed(),
            ReadKind::Proven | ReadKind::Complete => {
                async { Err("etcd proves nothing about an answer".to_string()) }.boxed()
            }
        }
    }

    fn subscribe(
        &self,
        run: u64,
        subscriber: usize,
        layout: WatchLayout,
    ) -> BoxFuture<'static, Result<BoxStream<'static, Result<u64, String>>, String>> {
        let shared = self.spread[subscriber % self.spread.len()].clone();
        let endpoint = self.endpoints[subscriber % self.endpoints.len()].clone();
        async move {
            let mut c = match layout {
                WatchLayout::Shared => shared,
                WatchLayout::Own => Client::connect([endpoint.as_str()], None).await.map_err(err)?,
            };
            let stream = c
                .watch(format!("watch/{run}/"), Some(WatchOptions::new().with_prefix()))
                .await
                .map_err(err)?;
            let markers = stream.flat_map(|resp| {
                let items: Vec<Result<u64, String>> = match resp {
                    Err(e) => vec![Err(e.to_string())],
                    Ok(r) => r
                        .events()
                        .iter()
                        .filter_map(|e| e.kv())
                        .filter_map(|kv| kv.value_str().ok()?.parse::<u64>().ok())
                        .map(Ok)
                        .collect(),
                };
                futures::stream::iter(items)
            });
            Ok(markers.boxed())
        }
        .boxed()
    }

    fn write_marker(&self, run: u64, n: u64) -> OpFuture {
        let mut c = self.conn(0);
        async move {
            c.put(format!("watch/{run}/m"), n.to_string(), None)
                .await
                .map(|_| ())
                .map_err(err)
        }
        .boxed()
    }
}
