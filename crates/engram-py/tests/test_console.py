"""The operator console (`engram console`), end to end: a real cluster, the console process, and
the page rendered by headless Chromium (Debian's `chromium`, run with `--dump-dom`, which waits
for the page's requests and prints the DOM the script built). A tampering TCP proxy between
the console and a node shows an altered audit entry flagged in the log and failing its proof.

Screenshots of each page are written to $ENGRAM_CONSOLE_SHOTS when it is set (docs/console/
holds the ones the documentation shows)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import engram
from conftest import ENGRAM_BIN, free_port
from test_proof import TamperingProxy

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Console:
    """`engram console` against `endpoints`, on a free port; `url` carries its token."""

    def __init__(self, endpoints, *flags):
        """`flags`: more global flags (`--agent-key FILE`)."""
        self.proc = subprocess.Popen(
            [ENGRAM_BIN, "-e", ",".join(endpoints), *flags, "--json", "console", "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        # `--json` prints one document, indented over several lines, before serving.
        text = ""
        while True:
            line = self.proc.stdout.readline()
            assert line, f"the console printed {text!r} and stopped: {self.proc.stderr.read()}"
            text += line
            if line.rstrip() == "}":
                break
        doc = json.loads(text)
        assert doc["endpoints"] == list(endpoints)
        self.url = doc["url"]
        m = re.fullmatch(r"(http://127\.0\.0\.1:\d+)/\?token=([0-9a-f]{32})", self.url)
        assert m, self.url
        self.base, self.token = m.group(1), m.group(2)

    def api(self, path, token=True, method="GET"):
        """(status, JSON body) of one view."""
        req = urllib.request.Request(self.base + path, method=method)
        if token:
            req.add_header("X-Engram-Token", self.token)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def close(self):
        self.proc.kill()
        self.proc.wait()


def chromium(*args, timeout=120):
    assert CHROMIUM, "the console's browser test needs Debian's chromium (.ci/setup.sh installs it)"
    profile = tempfile.mkdtemp(prefix="engram-chromium-")
    try:
        done = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", f"--user-data-dir={profile}", "--virtual-time-budget=30000", *args],
            capture_output=True, text=True, timeout=timeout,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def render(console, route):
    """The page at `route` (a hash route) as the browser built it."""
    dom = chromium("--dump-dom", f"{console.url}#{route}")
    assert 'data-state="ready"' in dom, f"{route} did not render:\n{dom[-3000:]}"
    return dom


def screenshot(console, route, name):
    out = Path(os.environ.get("ENGRAM_CONSOLE_SHOTS") or tempfile.mkdtemp(prefix="engram-shots-"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    chromium(f"--screenshot={path}", "--window-size=1280,860", f"{console.url}#{route}")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, f"{path}: {len(data)} bytes"


@pytest.fixture
def console(cluster):
    c = Console(cluster.endpoints)
    yield c
    c.close()


def task_with_a_dispute(cluster, ns):
    """An entity two agents disagree on, and a branch that wrote to it; its entity id and the
    audit index of its first transaction."""
    planner = engram.Engram(cluster.endpoints, agent="planner")
    critic = engram.Engram(cluster.endpoints, agent="critic")
    first = planner.transact(ns, [("t", ":task/title", "Write the quarterly report"), ("t", ":task/status", "open")])
    task = first.temp_ids["t"]
    critic.transact(ns, [(task, ":task/status", "done")])
    planner.create_branch(ns, "what-if")
    planner.transact(ns, [(task, ":task/status", "blocked")], branch="what-if")
    return task, first.tx


def entry_index_of(console, tx):
    status, page = console.api("/api/audit?limit=200")
    assert status == 200, page
    found = [e["index"] for e in page["entries"] if e["tx"] == tx]
    assert found, f"tx {tx} is not among the last 200 entries"
    return found[0]


def test_the_views_refuse_without_the_token_and_name_bad_arguments(console):
    status, body = console.api("/api/cluster", token=False)
    assert status == 401 and "token" in body["error"]["message"]
    status, body = console.api("/api/audit?from=abc")
    assert status == 400 and body["error"]["message"] == 'from: "abc" is not a whole number'
    status, body = console.api("/api/entry?index=99999999")
    assert status == 404 and "past the head" in body["error"]["message"], body
    status, body = console.api("/api/entity?ns=py/none&entity=1")
    assert status == 404, body
    status, body = console.api("/api/cluster", method="POST")
    assert status == 405 and "read-only" in body["error"]["message"]
    # The page itself needs no token (it holds no data), and is served whole.
    with urllib.request.urlopen(console.base + "/console.js", timeout=10) as resp:
        assert resp.status == 200 and b"X-Engram-Token" in resp.read()


def test_a_node_that_does_not_answer_is_an_alarm_and_the_others_still_show(cluster):
    dead = f"127.0.0.1:{free_port()}"
    console = Console([*cluster.endpoints, dead])
    try:
        status, page = console.api("/api/cluster")
        assert status == 200, page
        down = [n for n in page["nodes"] if n["endpoint"] == dead]
        assert len(down) == 1 and down[0]["reachable"] is False and down[0]["error"], page
        assert any(dead in a and "does not answer" in a for a in page["alarms"]), page["alarms"]
        assert sum(n["reachable"] for n in page["nodes"]) == 3 and len(page["leaders"]) == 1
        status, jobs = console.api("/api/jobs")
        assert status == 200 and [n["endpoint"] for n in jobs["nodes"] if "error" in n] == [dead], jobs
    finally:
        console.close()


def test_every_page_renders_in_a_browser_and_an_entry_proves(cluster, console, ns):
    task, tx = task_with_a_dispute(cluster, ns)
    index = entry_index_of(console, tx)

    dom = render(console, "/cluster")
    assert dom.count("<tr data-node=") == 3, dom
    assert "No alarms." in dom and ">Leader<" in dom
    # Each node's metrics at a glance, read over gRPC (Cluster.Metrics): calls counted, a
    # store of some size, no corruption.
    assert dom.count("<tr data-metrics=") == 3 and ">Watch lag<" in dom, dom
    status, page = console.api("/api/cluster")
    assert status == 200, page
    for node in page["nodes"]:
        m = node["metrics"]
        assert m["requests"] > 0 and m["store_bytes"] > 0, node
        assert m["storage_corruptions"] == 0 and m["watch_lag_entries"] == 0, node

    dom = render(console, f"/audit?from={max(1, index - 5)}")
    assert f'data-index="{index}" data-intact="true"' in dom
    assert 'data-intact="false"' not in dom and "TAMPERED" not in dom

    dom = render(console, f"/entry/{index}")
    assert 'data-verdict="verified"' in dom, dom
    assert dom.count('data-ok="true"') >= 4 and 'data-ok="false"' not in dom
    # The log grows past what the console trusts: the next proof moves its trust forward by a
    # consistency proof, drawn hash by hash, both roots rebuilt.
    status, before = console.api(f"/api/entry?index={index}")
    assert status == 200 and before["verified"], before
    writer = engram.Engram(cluster.endpoints, agent="planner")
    for i in range(5):
        writer.transact(ns, [(task, ":task/note", f"note {i}")])
    status, after = console.api(f"/api/entry?index={index}")
    assert status == 200 and after["verified"], after
    titles = [s["title"] for s in after["steps"]]
    assert "Consistency: start" in titles and titles.count("Consistency: both roots") == 1, titles
    assert any(t.startswith("Consistency: hash") for t in titles), titles
    assert all(s["ok"] for s in after["steps"]), after["steps"]

    dom = render(console, f"/entity?ns={ns}&entity={task}")
    assert 'id="timeline"' in dom
    assert "Write the quarterly report" in dom
    # The critic's "done" is current; the planner's "open" disagrees with it; the branch's
    # "blocked" is on its own row.
    assert re.search(r'<tr class="conflict"[^>]*data-attribute=":task/status"', dom), dom
    assert ">what-if<" in dom and ">blocked<" in dom
    assert "1 claim disagrees with the current value; 1 of 1 branch wrote to it" in dom

    dom = render(console, "/jobs")
    assert dom.count('<div data-node="') == 3, dom

    dom = render(console, "/access?refused=1")
    assert dom.count('<div data-node="') == 3 and "Refused calls" in dom

    for route, name in [("/cluster", "cluster"), ("/audit", "audit"), (f"/entry/{index}", "entry"),
                        (f"/entity?ns={ns}&entity={task}", "entity"), ("/jobs", "jobs")]:
        screenshot(console, route, name)


def test_a_tampered_entry_is_shown_as_such(cluster, ns):
    task, tx = task_with_a_dispute(cluster, ns)
    # The proxy changes one letter of the namespace in every answer: the audit entry of the
    # transaction names it, inside its signed bytes.
    needle = ns.encode()
    altered = needle[:-1] + (b"X" if needle[-1:] != b"X" else b"Y")
    proxy = TamperingProxy(cluster.ports[0], needle, altered)
    honest = Console(cluster.endpoints)
    tampered = Console([f"127.0.0.1:{proxy.port}"])
    try:
        index = entry_index_of(honest, tx)
        dom = render(tampered, f"/audit?from={max(1, index - 3)}")
        assert proxy.replaced >= 1
        assert f'data-index="{index}" data-intact="false"' in dom, dom
        assert "TAMPERED: its bytes hash to" in dom
        # The critic's transaction, after it, is altered too (same namespace) and links to
        # the real entry, not to the altered one.
        assert f'data-index="{index + 1}" data-intact="false"' in dom
        assert "do not match their hashes or links" in dom

        dom = render(tampered, f"/entry/{index}")
        assert 'data-verdict="failed"' in dom and "NOT verified" in dom, dom
        screenshot(tampered, f"/audit?from={max(1, index - 3)}", "audit-tampered")
    finally:
        honest.close()
        tampered.close()
        proxy.close()
