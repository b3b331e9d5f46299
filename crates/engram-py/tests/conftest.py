"""A real three-node Engram cluster of `engram serve` processes on loopback, for the tests.

The `engram` binary is `$ENGRAM_BIN`, or the workspace's `target/debug/engram`.
"""

import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import engram

ROOT = Path(__file__).resolve().parents[3]
ENGRAM_BIN = os.environ.get("ENGRAM_BIN", str(ROOT / "target" / "debug" / "engram"))
_taken = set()


def free_port() -> int:
    """A free port below the kernel's ephemeral range, so no outgoing connection takes it
    between this check and the node's bind."""
    for _ in range(1000):
        port = random.randint(20000, 32000)
        if port in _taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken.add(port)
        return port
    raise RuntimeError("no free port")


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([ENGRAM_BIN, *args], capture_output=True, text=True, check=check, timeout=60)


class Cluster:
    def __init__(self, nodes: int = 3, extra_args=None, dir=None):
        """`extra_args(ports)` gives more `engram serve` flags, for nodes that must know each
        other's ports (`--peer`)."""
        self.dir = Path(dir) if dir else Path(tempfile.mkdtemp(prefix="engram-py-"))
        self.ports = [free_port() for _ in range(nodes)]
        self.extra_args = list(extra_args(self.ports)) if extra_args else []
        self.procs = {}
        for i in range(1, nodes + 1):
            self.start(i)

    @property
    def endpoints(self):
        return [f"127.0.0.1:{p}" for p in self.ports]

    def start(self, node: int) -> None:
        log = open(self.dir / f"node{node}.log", "ab")
        self.procs[node] = subprocess.Popen(
            [
                ENGRAM_BIN,
                "serve",
                "--id",
                str(node),
                "--listen",
                self.endpoints[node - 1],
                "--data-dir",
                str(self.dir / f"node{node}"),
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def kill(self, node: int) -> None:
        proc = self.procs.pop(node)
        proc.kill()
        proc.wait()

    def init(self, *extra: str) -> None:
        members = ",".join(f"{i}={e}" for i, e in enumerate(self.endpoints, start=1))
        deadline = time.time() + 60
        while True:
            done = run_cli("-e", self.endpoints[0], "cluster", "init", "--member", members, *extra, check=False)
            if done.returncode == 0 or "already initialised" in done.stderr:
                break
            if time.time() > deadline:
                raise RuntimeError(f"cluster init failed: {done.stderr}\n{self.logs()}")
            time.sleep(0.3)

    def wait_writable(self, db: "engram.Engram", namespace: str = "ready/check") -> None:
        deadline = time.time() + 60
        while True:
            try:
                db.transact(namespace, [("probe", ":probe/ok", True)])
                return
            except (engram.Unavailable, engram.DeadlineExceeded):
                if time.time() > deadline:
                    raise
                time.sleep(0.2)

    def logs(self) -> str:
        out = []
        for log in sorted(self.dir.glob("node*.log")):
            lines = log.read_text(errors="replace").splitlines()[-15:]
            out.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def stop(self) -> None:
        for node in list(self.procs):
            self.kill(node)
        shutil.rmtree(self.dir, ignore_errors=True)


def running_cluster():
    """A three-node cluster, initialised (open mode) and taking writes; stopped afterwards."""
    c = Cluster()
    try:
        c.init()
        c.wait_writable(engram.Engram(c.endpoints, agent="setup"))
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def cluster():
    yield from running_cluster()


@pytest.fixture
def db(cluster):
    return engram.Engram(cluster.endpoints, agent="planner")


@pytest.fixture
def fresh_cluster():
    """A cluster of its own, for a test that kills nodes."""
    yield from running_cluster()


@pytest.fixture
def ns(request):
    """A namespace of the test's own."""
    return "py/" + re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")[:80]
