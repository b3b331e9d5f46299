//! The compose cluster and the faults, through the `docker` and `docker-compose` commands.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A compose project of nodes `n1..=n3`.
pub struct Compose {
    pub file: PathBuf,
    pub project: String,
    pub image: String,
    /// Host ports of nodes 1..=3.
    pub ports: [u16; 3],
    /// More variables for the compose file (the first administrator, `ENGRAM_ADMIN`).
    pub env: Vec<(String, String)>,
}

fn run(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn docker(args: &[&str]) -> Result<String> {
    run(Command::new("docker").args(args))
}

/// The fault kinds a cycle can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `docker kill -s KILL`, then `docker start`.
    Kill,
    /// `docker network disconnect`, then reconnect under its service name.
    Partition,
    /// `docker pause`, then `docker unpause`.
    Pause,
}

impl Fault {
    pub const ALL: [Fault; 3] = [Fault::Kill, Fault::Partition, Fault::Pause];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Partition => "partition",
            Fault::Pause => "pause",
        }
    }
}

impl Compose {
    fn compose(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("docker-compose");
        cmd.arg("-p")
            .arg(&self.project)
            .arg("-f")
            .arg(&self.file)
            .args(args)
            .env("ENGRAM_IMAGE", &self.image);
        for (i, port) in self.ports.iter().enumerate() {
            cmd.env(format!("ENGRAM_PORT_{}", i + 1), port.to_string());
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        run(&mut cmd)
    }

    /// A fresh cluster: whatever the project had (containers and volumes) is removed first.
    pub fn up_fresh(&self) -> Result<()> {
        self.down()?;
        self.compose(&["up", "-d"]).map(|_| ())
    }

    pub fn down(&self) -> Result<()> {
        self.compose(&["down", "-v", "--remove-orphans"]).map(|_| ())
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    }

    fn container(&self, node: u64) -> Result<String> {
        let id = self.compose(&["ps", "-q", &format!("n{node}")])?;
        if id.is_empty() {
            bail!("no container for node {node}");
        }
        Ok(id)
    }

    fn network(&self) -> String {
        // docker-compose names the default network after the project, lower-cased.
        format!("{}_default", self.project.to_lowercase())
    }

    pub fn inject(&self, fault: Fault, node: u64) -> Result<()> {
        let id = self.container(node)?;
        match fault {
            Fault::Kill => docker(&["kill", "-s", "KILL", &id]).map(|_| ()),
            Fault::Partition => docker(&["network", "disconnect", &self.network(), &id]).map(|_| ()),
            Fault::Pause => docker(&["pause", &id]).map(|_| ()),
        }
    }

    pub fn heal(&self, fault: Fault, node: u64) -> Result<()> {
        let id = self.container(node)?;
        match fault {
            Fault::Kill => docker(&["start", &id]).map(|_| ()),
            Fault::Partition => {
                let alias = format!("n{node}");
                docker(&["network", "connect", "--alias", &alias, &self.network(), &id]).map(|_| ())
            }
            Fault::Pause => docker(&["unpause", &id]).map(|_| ()),
        }
    }

    /// Undoes whatever may still be in effect on every node (best effort, for the end of a run
    /// or after a failure): unpause, reconnect, start.
    pub fn heal_all(&self) {
        for node in 1..=3 {
            for fault in [Fault::Pause, Fault::Partition, Fault::Kill] {
                let _ = self.heal(fault, node);
            }
        }
    }
}
