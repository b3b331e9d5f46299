//! Faults, swarm style: every seed draws which fault kinds it uses and how often, so the suite
//! as a whole covers each kind alone and in combination. The driver applies them while the
//! workload runs, logs each one with its simulated time, and heals everything at the end.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use madsim::net::NetSim;
use madsim::rand::Rng;

use crate::checkers::monitor::Monitor;
use crate::cluster::Cluster;

/// The fault kinds a seed can draw.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultMix {
    /// Mean gap between process crashes (any node, the leader included), in ms.
    pub crash_every_ms: Option<u64>,
    /// Crashes may tear the oldest unsynced write batch.
    pub torn_writes: bool,
    /// Mean gap between network partitions, in ms.
    pub partition_every_ms: Option<u64>,
    /// Partitions may be one-way (a node hears but is not heard, or the reverse).
    pub asymmetric: bool,
    /// Probability that a message is lost.
    pub packet_loss: f64,
    /// Message latency range, in ms.
    pub latency_ms: (u64, u64),
    /// Largest clock skew between a node and true time, in ms.
    pub clock_skew_ms: i64,
    /// Mean gap between membership changes (add learner, promote, remove, re-add), in ms.
    pub membership_every_ms: Option<u64>,
    /// Kill every node at once, then restart them all, once in the fault phase.
    pub whole_cluster_restart: bool,
    /// Snapshot (and purge the log) every this many entries: small values force snapshot
    /// installs on lagging nodes.
    pub snapshot_every_entries: u64,
    pub clients: usize,
    pub registers: usize,
    /// How long faults fire, in simulated ms.
    pub fault_phase_ms: u64,
    /// Mean gap between forged Raft requests from a host that is not a member (the
    /// Byzantine-client fault), in ms.
    pub forge_every_ms: Option<u64>,
    /// Crash a node a few ms after it begins a snapshot install, in half the installs
    /// (installs span several batches; the crash lands between them).
    pub crash_in_install: bool,
}

impl FaultMix {
    /// Draws a mix from the simulation's seeded RNG.
    pub fn draw() -> FaultMix {
        let mut rng = madsim::rand::thread_rng();
        let on = |rng: &mut madsim::rand::GlobalRng| rng.gen_bool(0.5);
        FaultMix {
            crash_every_ms: rng.gen_bool(0.7).then(|| rng.gen_range(800..4000)),
            torn_writes: on(&mut rng),
            partition_every_ms: on(&mut rng).then(|| rng.gen_range(800..4000)),
            asymmetric: on(&mut rng),
            packet_loss: if on(&mut rng) {
                rng.gen_range(0.0..0.05)
            } else {
                0.0
            },
            // One-way latency stays under half the heartbeat interval: openraft gives each
            // append and heartbeat RPC a deadline of one heartbeat interval, so a round trip
            // longer than that is outside what the configuration supports (docs/ARCHITECTURE.md).
            latency_ms: if on(&mut rng) {
                (1, rng.gen_range(11..45))
            } else {
                (1, 10)
            },
            clock_skew_ms: if on(&mut rng) { rng.gen_range(1..5000) } else { 0 },
            membership_every_ms: on(&mut rng).then(|| rng.gen_range(1500..6000)),
            whole_cluster_restart: rng.gen_bool(0.3),
            snapshot_every_entries: [16, 40, 200][rng.gen_range(0..3)],
            clients: rng.gen_range(2..=5),
            registers: rng.gen_range(2..=5),
            fault_phase_ms: 20_000,
            // Drawn last, so the draws above stay what they were for every seed.
            forge_every_ms: on(&mut rng).then(|| rng.gen_range(20..200)),
            crash_in_install: on(&mut rng),
        }
    }

    /// The pool: two spare nodes when membership changes are on.
    pub fn pool_size(&self) -> u64 {
        if self.membership_every_ms.is_some() { 5 } else { 3 }
    }

    /// The fault kinds switched on, by name.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut k = Vec::new();
        if self.crash_every_ms.is_some() {
            k.push("crash-restart");
        }
        if self.crash_every_ms.is_some() && self.torn_writes {
            k.push("torn-write");
        }
        if self.partition_every_ms.is_some() {
            k.push(if self.asymmetric {
                "partition-asymmetric"
            } else {
                "partition-symmetric"
            });
        }
        if self.packet_loss > 0.0 {
            k.push("packet-loss");
        }
        if self.latency_ms.1 > 10 {
            k.push("delay");
        }
        if self.clock_skew_ms > 0 {
            k.push("clock-skew");
        }
        if self.membership_every_ms.is_some() {
            k.push("membership");
        }
        if self.whole_cluster_restart {
            k.push("whole-cluster-restart");
        }
        if self.snapshot_every_entries <= 40 {
            k.push("snapshot-install");
        }
        if self.forge_every_ms.is_some() {
            k.push("byzantine-client");
        }
        if self.crash_in_install {
            k.push("crash-in-install");
        }
        k
    }
}

impl fmt::Display for FaultMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let every = |v: Option<u64>| v.map_or("off".to_string(), |ms| format!("~{ms}ms"));
        write!(
            f,
            "crash={} torn={} partition={}{} loss={:.3} latency={}-{}ms skew=±{}ms membership={} whole-restart={} snapshot-every={} clients={} registers={} forge={} crash-in-install={}",
            every(self.crash_every_ms),
            self.torn_writes,
            every(self.partition_every_ms),
            if self.asymmetric { "(asym)" } else { "" },
            self.packet_loss,
            self.latency_ms.0,
            self.latency_ms.1,
            self.clock_skew_ms,
            every(self.membership_every_ms),
            self.whole_cluster_restart,
            self.snapshot_every_entries,
            self.clients,
            self.registers,
            every(self.forge_every_ms),
            self.crash_in_install,
        )
    }
}

/// Draws a node's clock skew in ns.
pub fn draw_skew_ns(max_ms: i64) -> i64 {
    if max_ms == 0 {
        return 0;
    }
    madsim::rand::thread_rng().gen_range(-max_ms..=max_ms) * 1_000_000
}

/// Applies a mix to a running cluster.
pub struct Driver<'a> {
    pub cluster: &'a mut Cluster,
    pub mix: FaultMix,
    pub log: Vec<String>,
    start: std::time::Instant,
    /// Links cut now: (from node, to node), madsim node ids of pool nodes.
    cut: BTreeSet<(u64, u64)>,
    pub counts: std::collections::BTreeMap<&'static str, u64>,
}

impl<'a> Driver<'a> {
    pub fn new(cluster: &'a mut Cluster, mix: FaultMix, start: std::time::Instant) -> Driver<'a> {
        Driver {
            cluster,
            mix,
            log: Vec::new(),
            start,
            cut: BTreeSet::new(),
            counts: Default::default(),
        }
    }

    fn note(&mut self, kind: &'static str, what: String) {
        let t = self.start.elapsed().as_millis();
        self.log.push(format!("t={t}ms {what}"));
        *self.counts.entry(kind).or_insert(0) += 1;
    }

    fn rng() -> madsim::rand::GlobalRng {
        madsim::rand::thread_rng()
    }

    /// Fires faults for the mix's fault phase, sampling the replicas with `monitor` twice a
    /// simulated second.
    pub async fn run(&mut self, monitor: &mut Monitor) {
        let net = NetSim::current();
        net.update_config(|c| {
            c.packet_loss_rate = self.mix.packet_loss;
            c.send_latency =
                Duration::from_millis(self.mix.latency_ms.0)..Duration::from_millis(self.mix.latency_ms.1);
        });
        let phase_end = self.start.elapsed() + Duration::from_millis(self.mix.fault_phase_ms);
        let whole_restart_at = self
            .mix
            .whole_cluster_restart
            .then(|| Duration::from_millis(Self::rng().gen_range(3000..self.mix.fault_phase_ms - 3000)));
        let mut whole_restart_done = false;
        let mut down_until: Vec<(u64, Duration)> = Vec::new();
        let mut cut_until: Vec<(Vec<(u64, u64)>, Duration)> = Vec::new();
        let mut next_crash = self.next_gap(self.mix.crash_every_ms);
        let mut next_partition = self.next_gap(self.mix.partition_every_ms);
        let mut next_membership = self.next_gap(self.mix.membership_every_ms);
        let mut membership_task: Option<madsim::task::JoinHandle<String>> = None;

        let mut tick: u64 = 0;
        crate::events::take_installing();
        // Nodes inside a snapshot install, and when to crash each (a few ms in: an install
        // of the simulation's snapshots takes one ms per chunk).
        let mut install_crashes: Vec<(u64, Duration)> = Vec::new();
        while self.start.elapsed() < phase_end {
            // Every 50 ms, in steps short enough to catch a node inside a snapshot install.
            for _ in 0..25 {
                madsim::time::sleep(Duration::from_millis(2)).await;
                let now = self.start.elapsed();
                for id in self.install_victims() {
                    // Half the installs: a node crashed in every one would never catch up.
                    if Self::rng().gen_bool(0.5) && !install_crashes.iter().any(|(v, _)| *v == id) {
                        install_crashes.push((id, now + Duration::from_millis(Self::rng().gen_range(2..40))));
                    }
                }
                let due: Vec<u64> = install_crashes
                    .iter()
                    .filter(|(_, at)| *at <= now)
                    .map(|(id, _)| *id)
                    .collect();
                install_crashes.retain(|(_, at)| *at > now);
                let alive = self.cluster.alive_ids();
                for id in due.into_iter().filter(|id| alive.contains(id)) {
                    // A killed process keeps what it handed the OS (every batch written so
                    // far), a lost machine only a prefix of what was not synced.
                    let torn = if Self::rng().gen_bool(0.5) {
                        Some(usize::MAX)
                    } else {
                        Some(Self::rng().gen_range(0..32))
                    };
                    self.crash(monitor, id, torn);
                    let back = self.start.elapsed() + Duration::from_millis(Self::rng().gen_range(100..1500));
                    down_until.push((id, back));
                    self.note(
                        "crash-in-install",
                        format!("crash n{id} in a snapshot install torn={torn:?}"),
                    );
                }
            }
            let now = self.start.elapsed();
            tick += 1;
            if tick.is_multiple_of(10) {
                monitor.sample(self.cluster);
            }

            // Restarts and heals that are due.
            for (id, _) in down_until.iter().filter(|(_, at)| *at <= now) {
                self.cluster.restart(*id);
                let skew = draw_skew_ns(self.mix.clock_skew_ms);
                *self
                    .cluster
                    .node(*id)
                    .clock_skew_ns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = skew;
                let t = now.as_millis();
                self.log
                    .push(format!("t={t}ms restart n{id} skew={}ms", skew / 1_000_000));
            }
            down_until.retain(|(_, at)| *at > now);
            let due: Vec<Vec<(u64, u64)>> = cut_until
                .iter()
                .filter(|(_, at)| *at <= now)
                .map(|(l, _)| l.clone())
                .collect();
            cut_until.retain(|(_, at)| *at > now);
            for links in due {
                self.heal_links(&links);
            }

            if let Some(at) = whole_restart_at
                && !whole_restart_done
                && now >= at
            {
                whole_restart_done = true;
                let ids = self.cluster.alive_ids();
                for id in &ids {
                    let torn = self.draw_torn();
                    self.crash(monitor, *id, torn);
                }
                self.note("whole-cluster-restart", format!("crash all {ids:?}"));
                madsim::time::sleep(Duration::from_millis(Self::rng().gen_range(100..1500))).await;
                for id in self.cluster.nodes.keys().copied().collect::<Vec<_>>() {
                    self.cluster.restart(id);
                }
                down_until.clear();
                let t = self.start.elapsed().as_millis();
                self.log.push(format!("t={t}ms restart all"));
            }

            if next_crash.is_some_and(|at| now >= at) {
                next_crash = self.next_gap(self.mix.crash_every_ms).map(|g| g + now);
                let down = self.cluster.nodes.len() - self.cluster.alive_ids().len();
                // At most two down at once, so the cluster keeps making progress at times.
                if down < 2 {
                    let victim = self.pick_victim().await;
                    if let Some(id) = victim {
                        let torn = self.draw_torn();
                        self.crash(monitor, id, torn);
                        let back = now + Duration::from_millis(Self::rng().gen_range(100..3000));
                        down_until.push((id, back));
                        self.note("crash-restart", format!("crash n{id} torn={torn:?}"));
                        if torn.is_some() {
                            *self.counts.entry("torn-write").or_insert(0) += 1;
                        }
                    }
                }
            }

            if next_partition.is_some_and(|at| now >= at) {
                next_partition = self.next_gap(self.mix.partition_every_ms).map(|g| g + now);
                let links = self.partition_links();
                if !links.is_empty() {
                    for (a, b) in &links {
                        self.clog(*a, *b);
                    }
                    let until = now + Duration::from_millis(Self::rng().gen_range(300..4000));
                    let kind = if self.mix.asymmetric {
                        "partition-asymmetric"
                    } else {
                        "partition-symmetric"
                    };
                    self.note(kind, format!("cut {links:?}"));
                    cut_until.push((links, until));
                }
            }

            if next_membership.is_some_and(|at| now >= at) {
                next_membership = self.next_gap(self.mix.membership_every_ms).map(|g| g + now);
                if membership_task.as_ref().is_none_or(|t| t.is_finished()) {
                    if let Some(t) = membership_task.take() {
                        let done = t.await.unwrap_or_else(|e| format!("membership task failed: {e}"));
                        let at = self.start.elapsed().as_millis();
                        self.log.push(format!("t={at}ms {done}"));
                    }
                    membership_task = self.membership_change().await;
                }
            }
        }
        if let Some(t) = membership_task.take() {
            let done = t.await.unwrap_or_else(|e| format!("membership task failed: {e}"));
            let at = self.start.elapsed().as_millis();
            self.log.push(format!("t={at}ms {done}"));
        }
    }

    /// Ends every fault: links restored, loss and extra latency off, dead nodes restarted.
    pub fn heal(&mut self) {
        let links: Vec<(u64, u64)> = self.cut.iter().copied().collect();
        self.heal_links(&links);
        NetSim::current().update_config(|c| {
            c.packet_loss_rate = 0.0;
            c.send_latency = Duration::from_millis(1)..Duration::from_millis(10);
        });
        for id in self.cluster.nodes.keys().copied().collect::<Vec<_>>() {
            self.cluster.restart(id);
        }
        let t = self.start.elapsed().as_millis();
        self.log.push(format!("t={t}ms heal"));
    }

    /// Alive nodes that began a snapshot install since the last look, to crash inside it
    /// (never more than two nodes down at once).
    fn install_victims(&self) -> Vec<u64> {
        let began = crate::events::take_installing();
        if !self.mix.crash_in_install {
            return Vec::new();
        }
        let alive = self.cluster.alive_ids();
        let mut down = self.cluster.nodes.len() - alive.len();
        let mut victims = Vec::new();
        for madsim_id in began {
            if down >= 2 {
                break;
            }
            if let Some(id) = alive
                .iter()
                .copied()
                .find(|id| self.cluster.node(*id).madsim_id() == madsim_id && !victims.contains(id))
            {
                victims.push(id);
                down += 1;
            }
        }
        victims
    }

    /// Crashes node `id` (keeping `torn` unsynced batches, see `Cluster::crash`) and checks
    /// what the crash left.
    fn crash(&mut self, monitor: &mut Monitor, id: u64, torn: Option<usize>) {
        self.cluster.crash(id, torn);
        monitor.after_crash(id, &*self.cluster.node(id).store);
    }

    fn next_gap(&self, mean_ms: Option<u64>) -> Option<Duration> {
        mean_ms.map(|m| self.start.elapsed() + Duration::from_millis(Self::rng().gen_range(m / 2..m * 3 / 2)))
    }

    fn draw_torn(&self) -> Option<usize> {
        (self.mix.torn_writes && Self::rng().gen_bool(0.5)).then(|| Self::rng().gen_range(0..8))
    }

    /// Half the time the leader (as an alive node reports it), otherwise any alive node.
    async fn pick_victim(&self) -> Option<u64> {
        let alive = self.cluster.alive_ids();
        if alive.is_empty() {
            return None;
        }
        if Self::rng().gen_bool(0.5) {
            let via = alive[Self::rng().gen_range(0..alive.len())];
            if let Ok(status) = self.cluster.status(via).await
                && let Some(leader) = status.leader_id
                && alive.contains(&leader)
            {
                return Some(leader);
            }
        }
        Some(alive[Self::rng().gen_range(0..alive.len())])
    }

    /// The links to cut: a minority cut off from the rest (both ways), or one way only.
    fn partition_links(&self) -> Vec<(u64, u64)> {
        let ids: Vec<u64> = self.cluster.nodes.keys().copied().collect();
        let mut rng = Self::rng();
        let minority_size = rng.gen_range(1..=ids.len().div_ceil(2).max(1));
        let mut minority = BTreeSet::new();
        while minority.len() < minority_size.min(ids.len()) {
            minority.insert(ids[rng.gen_range(0..ids.len())]);
        }
        let mut links = Vec::new();
        for a in &minority {
            for b in ids.iter().filter(|b| !minority.contains(b)) {
                if self.mix.asymmetric {
                    // One direction per pair, the same for the whole cut.
                    links.push(if rng.gen_bool(0.5) { (*a, *b) } else { (*b, *a) });
                } else {
                    links.push((*a, *b));
                    links.push((*b, *a));
                }
            }
        }
        links
    }

    fn clog(&mut self, from: u64, to: u64) {
        NetSim::current().clog_link(
            self.cluster.node(from).madsim_id(),
            self.cluster.node(to).madsim_id(),
        );
        self.cut.insert((from, to));
    }

    fn heal_links(&mut self, links: &[(u64, u64)]) {
        for (from, to) in links {
            if self.cut.remove(&(*from, *to)) {
                NetSim::current().unclog_link(
                    self.cluster.node(*from).madsim_id(),
                    self.cluster.node(*to).madsim_id(),
                );
            }
        }
    }

    /// Starts one membership change in the background: add a pool node that is not a member
    /// (as a learner, or all the way to voter; a removed node comes back this way too), or
    /// remove a voter while more than three remain.
    async fn membership_change(&mut self) -> Option<madsim::task::JoinHandle<String>> {
        let alive = self.cluster.alive_ids();
        if alive.is_empty() {
            return None;
        }
        let via = alive[Self::rng().gen_range(0..alive.len())];
        let (voters, learners) = self.cluster.membership().await?;
        let outsiders: Vec<u64> = self
            .cluster
            .nodes
            .keys()
            .copied()
            .filter(|id| !voters.contains(id))
            .collect();
        let add = !outsiders.is_empty() && (voters.len() <= 3 || Self::rng().gen_bool(0.5));
        if add {
            let id = outsiders[Self::rng().gen_range(0..outsiders.len())];
            // A learner already in the config gets promoted; others join as learners half the
            // time and are promoted by a later change.
            let learner_only = !learners.contains(&id) && Self::rng().gen_bool(0.5);
            let what = if learners.contains(&id) {
                "promote"
            } else if learner_only {
                "add learner"
            } else {
                "add voter"
            };
            self.note("membership", format!("{what} n{id} via n{via}"));
            let call = self.cluster.add_node_call(via, id, learner_only);
            Some(self.cluster.spawn_control(async move {
                match call.await {
                    Ok(()) => format!("{what} n{id}: done"),
                    Err(s) => format!("{what} n{id}: {:?} {}", s.code(), s.message()),
                }
            }))
        } else if voters.len() > 3 {
            let id = voters[Self::rng().gen_range(0..voters.len())];
            self.note("membership", format!("remove n{id} via n{via}"));
            let call = self.cluster.remove_node_call(via, id);
            Some(self.cluster.spawn_control(async move {
                match call.await {
                    Ok(()) => format!("remove n{id}: done"),
                    Err(s) => format!("remove n{id}: {:?} {}", s.code(), s.message()),
                }
            }))
        } else {
            None
        }
    }
}
