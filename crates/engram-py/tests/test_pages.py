"""No read stops silently: more than 100,000 matching datoms are read back whole through every
surface (the Python lists and iterators, the CLI, the MCP recall tool) by find, history and
diff, each datom exactly once, every page of an answer as of one transaction even while writes
go on."""

import asyncio
import json

import pytest

import engram
from conftest import ENGRAM_BIN, run_cli

N = 100_001
BATCH = 2_000


@pytest.fixture(scope="module")
def big(cluster):
    """A namespace with N entities holding `:cap/n` = 7, written in transactions of BATCH."""
    ns = "py/pages-100k"
    db = engram.Engram(cluster.endpoints, agent="pager")
    entities = []
    for start in range(0, N, BATCH):
        n = min(BATCH, N - start)
        receipt = db.transact(ns, [(f"e{i}", ":cap/n", 7) for i in range(n)])
        entities.extend(receipt.temp_ids[f"e{i}"] for i in range(n))
    assert len(set(entities)) == N
    return ns, db, entities


def test_python_reads_every_datom_once(big):
    ns, db, entities = big
    found = db.find(ns, ":cap/n", 7)
    assert [d.entity for d in found] == sorted(entities), "every entity once, in entity order"
    assert [d.entity for d in db.find(ns, ":cap/n")] == sorted(entities)
    history = db.history(ns, attribute=":cap/n")
    assert [d.entity for d in history] == entities, "every datom once, in the order written"
    assert len(db.find(ns, ":cap/n", limit=100_000)) == 100_000
    assert len(db.history(ns, attribute=":cap/n", limit=100_000)) == 100_000
    changes = db.diff(ns, 0)
    assert [d.entity for d in changes.asserted] == entities and not changes.truncated
    assert db.diff(ns, 0, limit=100_000).truncated


def test_lists_read_every_entity_once(big, cluster):
    ns, db, entities = big
    assert db.entities(ns) == sorted(entities), "every entity once, in id order, past one page"
    assert db.entities(ns, ":cap/n") == sorted(entities)
    assert len(db.entities(ns, limit=100_000)) == 100_000
    assert ns in db.namespaces()
    out = run_cli("-e", cluster.endpoints[2], "--json", "entities", "--ns", ns, "--limit", "100000")
    cut = json.loads(out.stdout)
    assert len(cut["entities"]) == 100_000 and cut["next_cursor"]
    out = run_cli("-e", cluster.endpoints[0], "--json", "entities", "--ns", ns, "--cursor", cut["next_cursor"])
    rest = json.loads(out.stdout)
    assert cut["entities"] + rest["entities"] == sorted(entities) and "next_cursor" not in rest


def test_the_cli_reads_every_datom_once_and_says_when_a_limit_cut_it(big, cluster):
    ns, _, entities = big
    endpoint = cluster.endpoints[1]
    out = run_cli("-e", endpoint, "--json", "find", "--ns", ns, "--attribute", ":cap/n")
    answer = json.loads(out.stdout)
    assert [d["entity"] for d in answer["datoms"]] == sorted(entities)
    assert answer["more"] is False and "next_cursor" not in answer
    out = run_cli("-e", endpoint, "--json", "history", "--ns", ns, "--attribute", ":cap/n")
    assert [d["entity"] for d in json.loads(out.stdout)["datoms"]] == entities
    out = run_cli("-e", endpoint, "--json", "find", "--ns", ns, "--attribute", ":cap/n", "--limit", "100000")
    cut = json.loads(out.stdout)
    assert len(cut["datoms"]) == 100_000 and cut["more"] is True and cut["next_cursor"]
    find = ["find", "--ns", ns, "--attribute", ":cap/n"]
    out = run_cli("-e", cluster.endpoints[2], "--json", *find, "--cursor", cut["next_cursor"])
    rest = json.loads(out.stdout)
    assert [d["entity"] for d in cut["datoms"] + rest["datoms"]] == sorted(entities), "--cursor goes on"
    assert rest["more"] is False and rest["as_of_tx"] == cut["as_of_tx"]
    bad = run_cli("-e", endpoint, *find, "--cursor", "zz", check=False)
    assert bad.returncode != 0 and "--cursor: not the next_cursor" in bad.stderr
    other = run_cli("-e", endpoint, "history", "--ns", ns, "--attribute", ":cap/n", "--cursor", cut["next_cursor"], check=False)
    assert other.returncode != 0 and "cursor: issued for a find read, not a history read" in other.stderr
    out = run_cli("-e", endpoint, "--json", "diff", "--ns", ns, "--from-tx", "0")
    changes = json.loads(out.stdout)
    assert [d["entity"] for d in changes["asserted"]] == entities and changes["truncated"] is False
    diff = ["diff", "--ns", ns, "--from-tx", "0"]
    first = json.loads(run_cli("-e", endpoint, "--json", *diff, "--limit", "100000").stdout)
    assert first["truncated"] is True and first["next_cursor"]
    rest = json.loads(run_cli("-e", endpoint, "--json", *diff, "--cursor", first["next_cursor"]).stdout)
    assert [d["entity"] for d in first["asserted"] + rest["asserted"]] == entities
    out = run_cli("-e", endpoint, "history", "--ns", ns, "--attribute", ":cap/n", "--limit", "10")
    assert "(10 datoms" in out.stdout
    assert "more datoms follow past --limit" in out.stderr


def test_mcp_recall_follows_its_cursor_to_every_fact(big, cluster):
    pytest.importorskip("mcp", reason="the MCP SDK is installed by crates/engram-py/check.sh")
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    ns, _, entities = big
    params = StdioServerParameters(command=ENGRAM_BIN, args=["-e", ",".join(cluster.endpoints), "mcp", "--agent", "pager"])

    async def session():
        seen, calls, cursor = [], 0, None
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                while True:
                    args = {"namespace": ns, "attribute": ":cap/n", "limit": 1000}
                    if cursor:
                        args["cursor"] = cursor
                    r = await s.call_tool("recall", args)
                    answer = json.loads("".join(c.text for c in r.content if c.type == "text"))
                    calls += 1
                    seen.extend(f["entity"] for f in answer["facts"])
                    if not answer["more"]:
                        return seen, calls
                    cursor = answer["next_cursor"]

    seen, calls = asyncio.run(asyncio.wait_for(session(), 300))
    assert seen == sorted(entities)
    assert calls == 101, "pages of 1,000 facts"


def test_iterators_read_as_of_their_first_page_while_writes_go_on(big):
    ns, db, entities = big
    pages = db.iter_find(ns, ":cap/n", 7, page_size=30_000)
    assert pages.as_of_tx is None
    first = [next(pages) for _ in range(10)]
    as_of = pages.as_of_tx
    late = db.transact(ns, [("late", ":cap/n", 7)])
    assert late.tx > as_of
    rest = list(pages)
    assert [d.entity for d in first + rest] == sorted(entities), "the late write is not in this answer"
    assert pages.as_of_tx == as_of
    history = list(db.iter_history(ns, attribute=":cap/n", page_size=40_000))
    assert [d.entity for d in history] == entities + [late.temp_ids["late"]], "a new answer sees it"
