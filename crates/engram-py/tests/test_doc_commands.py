"""The command blocks of the README and docs/ run as written, against real `engram serve` nodes.

Every ```sh block of a covered document is accounted for: it runs (in order, in one shell
whose variables carry from block to block, so an id captured with `--print-id` is used by the
commands after it), or an HTML comment right above it says why it does not run here:

    <!-- doc-test: skip: REASON -->      not run here; REASON says where it is covered
    <!-- doc-test: background -->       each line starts a long-running node, in the background
    <!-- doc-test: init -->             the command that initialises the cluster (recorded, so
                                         `new-cluster` can replay it)
    <!-- doc-test: new-cluster -->      before the block: stop every node, remove their data,
                                         start and initialise them again with the doc's own blocks
    <!-- doc-test: new-nodes -->        the same, but the nodes are left uninitialised

A plain ``` block right after an ```sh block is the output the reader should see: it is
compared line by line, after the parts that differ from run to run (times, hashes, entity ids,
ports, temporary paths) are replaced by placeholders and runs of spaces (table padding) are
collapsed. ```python blocks run in this interpreter, with the `engram` package installed.

The documents' fixed ports (7001-7003, 8090) and `/tmp/` paths are replaced by free ports and a
temporary directory of the test's own, in the commands and in the expected outputs alike.
`ENGRAM_DOC_OUTPUTS=DIR` keeps each block's real output in DIR, for updating a document.
"""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ENGRAM_BIN, ROOT, free_port

BLOCK_TIMEOUT_S = 180
DIRECTIVE = re.compile(r"<!--\s*doc-test:\s*([a-z-]+)(?::\s*(.*?))?\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    lang: str
    text: str
    line: int
    directive: str = ""
    reason: str = ""
    expected: str | None = None
    end: int = 0  # the line after the closing fence


def parse(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the directive above it and, for a shell
    block, the plain block that follows it as its expected output."""
    lines = path.read_text().split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        block = Block(lang=m.group(1), text="\n".join(body) + "\n", line=start + 1)
        above = start - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        d = DIRECTIVE.search(lines[above]) if above >= 0 else None
        if d:
            block.directive, block.reason = d.group(1), d.group(2) or ""
        if block.lang == "" and blocks and blocks[-1].lang in ("sh", "bash") and blocks[-1].expected is None \
                and not "\n".join(lines[blocks[-1].end:start]).strip():
            blocks[-1].expected = block.text
            continue
        block.end = i
        blocks.append(block)
    return blocks


HASH = re.compile(r"\b[0-9a-f]{16}\b|\b[0-9a-f]{64}\b")
TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\b")
BIG_ID = re.compile(r"\b\d{10,}\b")


def normalize(text: str) -> list[str]:
    out = []
    for line in text.split("\n"):
        line = TIME.sub("<time>", line)
        # One placeholder for both: a hash may be all digits, and an entity id may be 16 of them.
        line = HASH.sub("<x>", line)
        line = BIG_ID.sub("<x>", line)
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out


@dataclass
class Sandbox:
    """One document's run: its own directory, ports and nodes."""

    tmp: Path
    ports: dict[int, int]
    env: dict
    state: Path
    nodes: list[subprocess.Popen] = field(default_factory=list)
    serve_blocks: list[str] = field(default_factory=list)
    init_blocks: list[str] = field(default_factory=list)

    @classmethod
    def new(cls) -> "Sandbox":
        tmp = Path(tempfile.mkdtemp(prefix="engram-doc-"))
        ports = {p: free_port() for p in (7001, 7002, 7003, 8090)}
        env = dict(os.environ)
        # `engram`, then this interpreter's scripts (grpcurl, from the test environment).
        env["PATH"] = os.pathsep.join([str(Path(ENGRAM_BIN).parent), str(Path(sys.executable).parent), env["PATH"]])
        # The docs address nodes by --endpoint or by the default endpoint (127.0.0.1:7001).
        env["ENGRAM_ENDPOINTS"] = f"127.0.0.1:{ports[7001]}"
        env.pop("ENGRAM_AGENT_KEY", None)
        state = tmp / ".shell-state"
        state.write_text("")
        return cls(tmp=tmp, ports=ports, env=env, state=state)

    def localize(self, text: str) -> str:
        text = text.replace("/tmp/", f"{self.tmp}/")
        for doc_port, port in self.ports.items():
            text = re.sub(rf"(?<=[:\s]){doc_port}\b", str(port), text)
        return text

    def shell(self, script: str, where: str) -> str:
        """Runs `script` in bash with the variables earlier blocks set; returns its stdout."""
        wrapped = (
            f"set -eo pipefail\nsource {shlex.quote(str(self.state))}\nset -a\n"
            f"{script}\nset +a\nexport -p > {shlex.quote(str(self.state))}\n"
        )
        # From a file, so the shell's own command line does not hold the block (a `pkill -f`
        # in it would match the shell running it).
        script_file = self.tmp / ".block.sh"
        script_file.write_text(wrapped)
        r = subprocess.run(["bash", str(script_file)], cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        if r.returncode != 0:
            pytest.fail(f"{where} exited {r.returncode}\n--- script\n{script}\n--- stdout\n{r.stdout}\n"
                        f"--- stderr\n{r.stderr}")
        return r.stdout

    def start_nodes(self, script: str, where: str) -> None:
        for line in script.split("\n"):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            log = open(self.tmp / f"node-{len(self.nodes) + 1}.log", "w")
            self.nodes.append(subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=ROOT, env=self.env,
                                               stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                               start_new_session=True))
            addr = re.search(r"--listen\s+(\S+):(\d+)", line)
            if addr:
                self.wait_for_port(addr.group(1), int(addr.group(2)), where)

    def wait_for_port(self, host: str, port: int, where: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex((host, port)) == 0:
                    return
            time.sleep(0.1)
        pytest.fail(f"{where}: nothing listens on {host}:{port} after 30 s")

    def stop_nodes(self) -> None:
        for p in self.nodes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.nodes:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.nodes.clear()

    def new_cluster(self, initialise: bool, where: str) -> None:
        self.stop_nodes()
        for d in self.tmp.iterdir():
            if d.is_dir():
                subprocess.run(["rm", "-rf", str(d)], check=True)
        for script in self.serve_blocks:
            self.start_nodes(script, where)
        if initialise:
            for script in self.init_blocks:
                self.shell(script, where)


def run_doc(doc: Path, expect_min_run: int, python: bool = True) -> tuple[int, int]:
    """Runs every block of `doc` (its ```python blocks too unless `python` is false, for a
    document whose Python has a test of its own); returns (blocks run, blocks skipped)."""
    blocks = parse(doc)
    box = Sandbox.new()
    ran = skipped = 0
    try:
        for b in blocks:
            where = f"{doc.relative_to(ROOT)}:{b.line}"
            if b.lang not in ("sh", "bash", "python") or (b.lang == "python" and not python):
                continue
            if b.directive == "skip":
                assert b.reason, f"{where}: a skipped block must say why"
                skipped += 1
                continue
            script = box.localize(b.text)
            if b.directive in ("new-cluster", "new-nodes"):
                box.new_cluster(b.directive == "new-cluster", where)
            if b.directive == "background":
                box.serve_blocks.append(script)
                box.start_nodes(script, where)
                ran += 1
                continue
            if b.lang == "python":
                endpoints = [f"127.0.0.1:{box.ports[p]}" for p in (7001, 7002, 7003)]
                exec(compile(script, where, "exec"), {"__name__": "doc", "ENDPOINTS": endpoints})
                ran += 1
                continue
            if b.directive == "init":
                box.init_blocks.append(script)
            out = box.shell(script, where)
            if os.environ.get("ENGRAM_DOC_OUTPUTS"):
                # For whoever updates a document: each block's real output, by line number.
                keep = Path(os.environ["ENGRAM_DOC_OUTPUTS"]) / f"{doc.stem}-{b.line}.txt"
                keep.write_text(out.replace(str(box.tmp), "/tmp"))
            if b.expected is not None:
                want = normalize(box.localize(b.expected))
                got = normalize(out)
                assert got == want, (
                    f"{where}: the output differs from the document's\n--- document\n"
                    + "\n".join(want) + "\n--- binary\n" + "\n".join(got)
                )
            ran += 1
    finally:
        box.stop_nodes()
    assert ran >= expect_min_run, f"{doc}: only {ran} blocks ran"
    return ran, skipped


def test_normalize_keeps_what_must_match():
    a = normalize("tx 3 at 2026-11-22T13:49:29.850Z: 3 datoms, audit entry 3 (88513f52bbdb08cc)\n"
                  "  pref -> entity 1173789910425305\n")
    b = normalize("tx 3 at 2027-01-01T00:00:00.000Z: 3 datoms, audit entry 3 (0123456789abcdef)\n"
                  "  pref -> entity 99999999999\n")
    assert a == b
    c = normalize("tx 4 at 2026-11-22T13:49:29.850Z: 3 datoms, audit entry 3 (88513f52bbdb08cc)\n")
    assert a[0] != c[0], "a different tx number must not compare equal"


def test_parse_pairs_commands_with_their_output(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("text\n\n<!-- doc-test: skip: elsewhere -->\n```sh\nfoo\n```\n\n```sh\nbar\n```\n```\nout\n```\n")
    blocks = parse(doc)
    assert [(b.lang, b.text, b.directive, b.reason, b.expected) for b in blocks] == [
        ("sh", "foo\n", "skip", "elsewhere", None),
        ("sh", "bar\n", "", "", "out\n"),
    ]


def test_the_readme_runs_as_written():
    run_doc(ROOT / "README.md", expect_min_run=12)


@pytest.mark.parametrize("name", ["mcp.md", "deploy.md", "deploy-kubernetes.md", "benchmarks.md", "python.md", "console.md"])
def test_every_docs_command_block_runs_or_says_why_not(name):
    # docs/python.md's Python runs in test_docs.py, on the session's cluster.
    run_doc(ROOT / "docs" / name, expect_min_run=0, python=name != "python.md")


def test_the_main_job_runs_and_loses_nothing(tmp_path):
    """The README's first command, `bash .ci/run demo`, is `engram demo` on a release build:
    here the same demo, shorter, on the test build. Its own checks (every acknowledged write on
    every node, chains verified and equal, the export proving every agent's writes) decide."""
    r = subprocess.run([ENGRAM_BIN, "--json", "demo", "--duration-secs", "6", "--agents", "2",
                        "--data-dir", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"demo exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    summary = json.loads(r.stdout)
    assert summary["ok"] is True
    assert summary["tx_acked"] > 0 and summary["tx_lost"] == 0, summary
    assert summary["checks"] and all(c["ok"] for c in summary["checks"]), summary["checks"]
    heads = {(h["head_index"], h["head_hash"]) for h in summary["node_heads"]}
    assert len(summary["node_heads"]) == 3 and len(heads) == 1, summary["node_heads"]
