"""`engram mcp` driven by the official Python MCP SDK's client over stdio: a real MCP client,
not a mock, lists the tools and calls them against a real cluster."""

import asyncio
import json
import socket
import subprocess
import time

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP SDK is installed by crates/engram-py/check.sh")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from conftest import ENGRAM_BIN, free_port  # noqa: E402


def run(cluster, body):
    params = StdioServerParameters(
        command=ENGRAM_BIN,
        args=["-e", ",".join(cluster.endpoints), "mcp", "--agent", "mcp-researcher"],
    )

    async def session():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                return await body(s)

    return asyncio.run(asyncio.wait_for(session(), 60))


def text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def test_tools_are_listed_with_schemas(cluster):
    async def body(s):
        return (await s.list_tools()).tools

    tools = {t.name: t for t in run(cluster, body)}
    assert set(tools) == {
        "remember", "recall", "get", "history", "what_changed", "list", "query", "branch", "forget", "session", "verify",
    }
    assert set(tools["query"].input_schema["required"]) == {"namespace", "find", "where"}
    assert set(tools["forget"].input_schema["required"]) == {"namespace", "entity", "reason"}
    assert set(tools["session"].input_schema["required"]) == {"namespace", "action"}
    remember = tools["remember"]
    assert "transaction" in remember.description
    assert set(remember.input_schema["required"]) == {"namespace", "facts"}
    assert "confidence" in remember.input_schema["properties"]


def test_remember_then_recall_get_history_and_verify(cluster):
    ns = "mcp/research"

    async def body(s):
        out = {}
        r = await s.call_tool(
            "remember",
            {
                "namespace": ns,
                "facts": [
                    {"entity": "paper", "attribute": ":paper/title", "value": "Attention is all you need"},
                    {"entity": "paper", "attribute": ":paper/year", "value": 2017},
                    {"entity": "paper", "attribute": ":paper/topic", "value": {"keyword": ":topic/transformers"}},
                ],
                "confidence": 0.8,
                "source": "arxiv:1706.03762",
            },
        )
        assert not r.is_error, text(r)
        out["remember"] = json.loads(text(r))
        paper = out["remember"]["entities"]["paper"]
        r = await s.call_tool("recall", {"namespace": ns, "attribute": ":paper/year", "value": 2017})
        out["recall"] = json.loads(text(r))
        r = await s.call_tool("recall", {"namespace": ns, "query": "attention"})
        assert not r.is_error, text(r)
        out["recall_words"] = json.loads(text(r))
        r = await s.call_tool("recall", {"namespace": ns, "query": "attention", "kinds": ["preference"]})
        assert not r.is_error, text(r)
        out["recall_kind"] = json.loads(text(r))
        r = await s.call_tool("get", {"namespace": ns, "entity": paper})
        out["get"] = json.loads(text(r))
        r = await s.call_tool("history", {"namespace": ns, "entity": paper, "attribute": ":paper/title"})
        out["history"] = json.loads(text(r))
        r = await s.call_tool("verify", {"namespace": ns, "entity": paper})
        assert not r.is_error, text(r)
        out["verify"] = json.loads(text(r))
        # As of the transaction before the paper was remembered: proven to have had no facts.
        r = await s.call_tool("verify", {"namespace": ns, "entity": paper, "as_of_tx": out["remember"]["tx"] - 1})
        assert not r.is_error, text(r)
        out["verify_before"] = json.loads(text(r))
        r = await s.call_tool("what_changed", {"namespace": ns, "since_tx": out["remember"]["tx"] - 1})
        out["changed"] = json.loads(text(r))
        return out

    out = run(cluster, body)
    paper = out["remember"]["entities"]["paper"]
    assert [f["entity"] for f in out["recall"]["facts"]] == [paper]
    words = out["recall_words"]["hits"]
    assert [(h["entity"], h["attribute"], h["value"]) for h in words] == [
        (paper, ":paper/title", "Attention is all you need")
    ]
    assert words[0]["found_by"][0] == {"signal": "text", "rank": 1} and words[0]["score"] > 0
    assert out["recall_kind"]["hits"] == [], "the paper is no preference"
    got = {f["attribute"]: f["value"] for f in out["get"]["facts"]}
    assert got == {
        ":paper/title": "Attention is all you need",
        ":paper/year": 2017,
        ":paper/topic": {"keyword": ":topic/transformers"},
    }
    assert {f["agent"] for f in out["get"]["facts"]} == {"mcp-researcher"}
    assert out["get"]["facts"][0]["confidence"] == pytest.approx(0.8)
    assert [f["value"] for f in out["history"]["facts"]] == ["Attention is all you need"]
    assert out["verify"]["verified"] is True and len(out["verify"]["facts"]) == 3
    assert out["verify"]["complete"] is True and out["verify"]["attributes"] == 3, out["verify"]
    before = out["verify_before"]
    assert before["verified"] is True and before["facts"] == [], before
    assert before["as_of_tx"] == out["remember"]["tx"] - 1 and before["attributes"] == 3, before
    assert len(out["changed"]["asserted"]) == 3


def test_forget_takes_a_value_and_the_fact_says_so(cluster):
    ns = "mcp/forget"

    async def body(s):
        out = {}
        r = await s.call_tool(
            "remember",
            {"namespace": ns, "facts": [{"entity": "c", "attribute": ":contact/phone", "value": "+44 20 7946 0958"}]},
        )
        contact = json.loads(text(r))["entities"]["c"]
        r = await s.call_tool("forget", {"namespace": ns, "entity": contact, "reason": "asked", "dry_run": True})
        out["dry"] = json.loads(text(r))
        r = await s.call_tool("forget", {"namespace": ns, "entity": contact, "reason": "asked"})
        out["forget"] = json.loads(text(r))
        r = await s.call_tool("get", {"namespace": ns, "entity": contact})
        out["get"] = json.loads(text(r))
        again = await s.call_tool("forget", {"namespace": ns, "entity": contact, "reason": "again"})
        out["again"] = (again.is_error, text(again))
        return out

    out = run(cluster, body)
    assert out["dry"]["dry_run"] is True and out["dry"]["forgotten"] == 1
    assert out["forget"]["forgotten"] == 1 and out["forget"]["tx"] > 0
    fact = out["get"]["facts"][0]
    assert fact["value"] is None and fact["forgotten_by_tx"] == out["forget"]["tx"]
    assert "7946" not in json.dumps(out["get"])
    assert out["again"][0] and "already redacted" in out["again"][1]


def test_bad_calls_are_tool_errors_the_model_can_read(cluster):
    async def body(s):
        bad_attr = await s.call_tool(
            "remember", {"namespace": "mcp/bad", "facts": [{"entity": "x", "attribute": "title", "value": 1}]}
        )
        bad_ns = await s.call_tool("get", {"namespace": "/etc", "entity": 1})
        bad_action = await s.call_tool("branch", {"namespace": "mcp/bad", "name": "b", "action": "delete"})
        nothing = await s.call_tool("recall", {"namespace": "mcp/bad", "attribute": ":x/title"})
        neither = await s.call_tool("recall", {"namespace": "mcp/bad"})
        no_words = await s.call_tool("recall", {"namespace": "mcp/bad", "query": "?!"})
        kinds_alone = await s.call_tool("recall", {"namespace": "mcp/bad", "attribute": ":x/title", "kinds": ["fact"]})
        return bad_attr, bad_ns, bad_action, nothing, neither, no_words, kinds_alone

    bad_attr, bad_ns, bad_action, nothing, neither, no_words, kinds_alone = run(cluster, body)
    assert kinds_alone.is_error and "kinds: give it with query or vector" in text(kinds_alone)
    assert neither.is_error and "give query" in text(neither)
    assert no_words.is_error and "text: has no words" in text(no_words)
    assert bad_attr.is_error and "facts[0].attribute" in text(bad_attr)
    assert bad_ns.is_error and "namespace" in text(bad_ns)
    assert bad_action.is_error and "create, merge or abandon" in text(bad_action)
    assert json.loads(text(nothing))["facts"] == []


def test_list_names_namespaces_entities_and_referrers_in_pages(cluster):
    ns = "mcp/lists"

    async def body(s):
        r = await s.call_tool(
            "remember",
            {"namespace": ns, "facts": [{"entity": "lead", "attribute": ":person/name", "value": "Lee"}]},
        )
        assert not r.is_error, text(r)
        lead = json.loads(text(r))["entities"]["lead"]
        facts = [{"entity": f"t{i}", "attribute": ":task/owner", "value": {"ref": lead}} for i in range(3)]
        r = await s.call_tool("remember", {"namespace": ns, "facts": facts})
        assert not r.is_error, text(r)
        tasks = sorted(json.loads(text(r))["entities"].values())
        namespaces = json.loads(text(await s.call_tool("list", {"what": "namespaces", "limit": 1000})))
        first = json.loads(text(await s.call_tool("list", {"what": "entities", "namespace": ns, "limit": 2})))
        rest = json.loads(
            text(await s.call_tool("list", {"what": "entities", "namespace": ns, "cursor": first["next_cursor"]}))
        )
        refs = json.loads(text(await s.call_tool("list", {"what": "referrers", "namespace": ns, "entity": lead})))
        bad = await s.call_tool("list", {"what": "everything"})
        missing = await s.call_tool("list", {"what": "referrers", "namespace": ns})
        return lead, tasks, namespaces, first, rest, refs, bad, missing

    lead, tasks, namespaces, first, rest, refs, bad, missing = run(cluster, body)
    assert ns in namespaces["namespaces"]
    assert first["more"] is True and len(first["entities"]) == 2
    assert first["entities"] + rest["entities"] == sorted([lead] + tasks) and rest["more"] is False
    assert [(f["entity"], f["attribute"]) for f in refs["facts"]] == [(t, ":task/owner") for t in tasks]
    assert bad.is_error and "namespaces" in text(bad)
    assert missing.is_error and "entity" in text(missing)


def test_query_joins_facts_in_pages_and_names_a_bad_clause(cluster):
    ns = "mcp/query"

    async def body(s):
        r = await s.call_tool(
            "remember",
            {"namespace": ns, "facts": [
                {"entity": "lee", "attribute": ":person/team", "value": "infra"},
                {"entity": "kim", "attribute": ":person/team", "value": "web"},
            ]},
        )
        assert not r.is_error, text(r)
        people = json.loads(text(r))["entities"]
        facts = [
            {"entity": f"t{i}", "attribute": ":task/owner", "value": {"ref": people["lee" if i < 3 else "kim"]}}
            for i in range(4)
        ]
        r = await s.call_tool("remember", {"namespace": ns, "facts": facts})
        assert not r.is_error, text(r)
        tasks = json.loads(text(r))["entities"]
        where = [["?t", ":task/owner", "?p"], ["?p", ":person/team", "infra"]]
        first = json.loads(text(await s.call_tool(
            "query", {"namespace": ns, "find": ["?t"], "where": where, "limit": 2, "explain": True})))
        rest = json.loads(text(await s.call_tool(
            "query", {"namespace": ns, "find": ["?t"], "where": where, "cursor": first["next_cursor"]})))
        unbound = await s.call_tool("query", {"namespace": ns, "find": ["?x"], "where": where})
        short = await s.call_tool("query", {"namespace": ns, "find": ["?t"], "where": [["?t", ":task/owner"]]})
        # The people no task is owned by: kim owns t3, lee the rest; a third person owns none.
        r = await s.call_tool(
            "remember", {"namespace": ns, "facts": [{"entity": "ida", "attribute": ":person/team", "value": "web"}]}
        )
        assert not r.is_error, text(r)
        ida = json.loads(text(r))["entities"]["ida"]
        idle = json.loads(text(await s.call_tool(
            "query",
            {"namespace": ns, "find": ["?p"],
             "where": [["?p", ":person/team", "?team"], ["not", ["?t", ":task/owner", "?p"]]]})))
        # Each team's tasks counted: a row per group, keyed by the find entry as written.
        per_team = json.loads(text(await s.call_tool(
            "query",
            {"namespace": ns, "find": ["?team", "(count ?t)"],
             "where": [["?t", ":task/owner", "?p"], ["?p", ":person/team", "?team"]]})))
        return people, tasks, first, rest, unbound, short, ida, idle, per_team

    people, tasks, first, rest, unbound, short, ida, idle, per_team = run(cluster, body)
    assert [r["?p"]["ref"] for r in idle["rows"]] == [ida]
    assert per_team["columns"] == ["?team", "(count ?t)"]
    counted = [(r["?team"]["string"], r["(count ?t)"]["i64"]) for r in per_team["rows"]]
    assert counted == [("infra", 3), ("web", 1)], per_team
    infra = sorted(tasks[f"t{i}"] for i in range(3))
    assert first["more"] is True and rest["more"] is False
    assert [r["?t"]["ref"] for r in first["rows"] + rest["rows"]] == infra
    assert first["as_of_tx"] == rest["as_of_tx"]
    assert [step["clause"] for step in first["plan"]] == [1, 0]
    assert unbound.is_error and "find[0]: ?x is bound by no clause" in text(unbound)
    assert short.is_error and "where[0]" in text(short)


def test_the_same_tools_over_streamable_http(cluster):
    port = free_port()
    server = subprocess.Popen(
        [ENGRAM_BIN, "-e", ",".join(cluster.endpoints), "mcp", "--agent", "mcp-http", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.time() < deadline, "engram mcp --listen did not start listening"
                time.sleep(0.1)

        async def session():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, *_):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    names = {t.name for t in (await s.list_tools()).tools}
                    r = await s.call_tool(
                        "remember",
                        {"namespace": "mcp/http", "facts": [{"entity": "n", "attribute": ":note/text", "value": "over http"}]},
                    )
                    assert not r.is_error, text(r)
                    entity = json.loads(text(r))["entities"]["n"]
                    got = json.loads(text(await s.call_tool("get", {"namespace": "mcp/http", "entity": entity})))
                    return names, got

        names, got = asyncio.run(asyncio.wait_for(session(), 60))
        assert "remember" in names and "verify" in names
        assert got["facts"][0]["value"] == "over http" and got["facts"][0]["agent"] == "mcp-http"
    finally:
        server.terminate()
        server.wait(10)


def remember_value(s, ns, entity, attribute, value):
    return s.call_tool(
        "remember", {"namespace": ns, "facts": [{"entity": entity, "attribute": attribute, "value": value}]}
    )


async def numbers_body(s, ns):
    """Numbers through `remember`: kept exactly, or refused naming the field (never rounded)."""
    out = {}
    r = await s.call_tool(
        "remember",
        {
            "namespace": ns,
            "facts": [
                {"entity": "n", "attribute": ":n/big", "value": 2**63 - 1},
                {"entity": "n", "attribute": ":n/tenth", "value": 0.1},
            ],
        },
    )
    assert not r.is_error, text(r)
    n = json.loads(text(r))["entities"]["n"]
    out["before"] = json.loads(text(await s.call_tool("history", {"namespace": ns, "entity": n})))
    out["refused"] = [
        await remember_value(s, ns, n, ":n/big", 123456789012345678901234567890),
        await remember_value(s, ns, n, ":n/big", {"i64": 123456789012345678901234567890}),
        await remember_value(s, ns, n, ":n/big", 2**64 - 1),
        await remember_value(s, ns, n, ":n/doc", {"json": {"deep": [123456789012345678901234567890]}}),
        await remember_value(s, ns, 123456789012345678901234567890, ":n/big", 1),
    ]
    out["after"] = json.loads(text(await s.call_tool("history", {"namespace": ns, "entity": n})))
    # Still an integer attribute.
    r = await remember_value(s, ns, "m", ":n/big", -5)
    assert not r.is_error, text(r)
    out["get"] = json.loads(text(await s.call_tool("get", {"namespace": ns, "entity": n})))
    return out


def check_numbers(out):
    big, typed, u64, deep, entity = out["refused"]
    for r in (big, typed, u64, deep, entity):
        assert r.is_error, text(r)
        assert "as a string" in text(r), text(r)
    assert text(big).startswith("facts[0].value: number 123456789012345678901234567890 cannot be stored exactly")
    assert text(typed).startswith("facts[0].value.i64: number 123456789012345678901234567890")
    assert "18446744073709551615 is out of range for a signed 64-bit integer" in text(u64)
    assert text(deep).startswith("facts[0].value.json.deep[0]: number")
    assert text(entity).startswith("facts[0].entity: number")
    # The refusals wrote nothing.
    assert out["after"] == out["before"]
    values = {f["attribute"]: f["value"] for f in out["get"]["facts"]}
    assert values[":n/big"] == 2**63 - 1 and type(values[":n/big"]) is int
    assert values[":n/tenth"] == 0.1 and type(values[":n/tenth"]) is float


def test_numbers_are_kept_exactly_or_refused(cluster):
    check_numbers(run(cluster, lambda s: numbers_body(s, "mcp/numbers")))


def start_http(cluster, agent):
    port = free_port()
    server = subprocess.Popen(
        [ENGRAM_BIN, "-e", ",".join(cluster.endpoints), "mcp", "--agent", agent, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, port
        except OSError:
            assert server.poll() is None, server.stderr.read().decode()
            assert time.time() < deadline, "engram mcp --listen did not start listening"
            time.sleep(0.1)


def http(port, method, session=None, body=None):
    import urllib.error
    import urllib.request

    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-03-26"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if session is not None:
        headers["Mcp-Session-Id"] = session
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/mcp",
        method=method,
        headers=headers,
        data=None if body is None else json.dumps(body).encode(),
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers


def test_http_delete_ends_a_known_session_and_404s_an_unknown_one(cluster, caplog):
    server, port = start_http(cluster, "mcp-http-delete")
    try:
        status, _ = http(port, "DELETE", session="made-up-session")
        assert status == 404
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        }
        status, headers = http(port, "POST", body=initialize)
        assert status == 200
        session = headers["Mcp-Session-Id"]
        assert session
        status, _ = http(port, "DELETE", session=session)
        assert status == 204
        # Gone: a second DELETE, like any id the server does not hold, is 404.
        status, _ = http(port, "DELETE", session=session)
        assert status == 404

        # The SDK's own client ends its session on exit without a warning, and numbers over
        # HTTP are kept or refused as over stdio.
        async def session_body():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, *_):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    return await numbers_body(s, "mcp/http-numbers")

        with caplog.at_level("DEBUG"):
            out = asyncio.run(asyncio.wait_for(session_body(), 60))
        check_numbers(out)
        assert "Session termination failed" not in caplog.text
    finally:
        server.terminate()
        server.wait(10)


def test_a_session_keeps_working_notes_until_it_ends(cluster):
    ns = "mcp/scratch"

    async def body(s):
        out = {}
        r = await s.call_tool("session", {"namespace": ns, "action": "open", "ttl_ms": 600_000})
        out["open"] = json.loads(text(r))
        r = await s.call_tool(
            "remember",
            {"namespace": ns, "facts": [{"entity": "n", "attribute": ":note/text", "value": "try the cache first"}]},
        )
        note = json.loads(text(r))["entities"]["n"]
        again = await s.call_tool("session", {"namespace": ns, "action": "open", "ttl_ms": 600_000})
        out["again"] = (again.is_error, text(again))
        no_ttl = await s.call_tool("session", {"namespace": ns, "action": "renew"})
        out["no_ttl"] = (no_ttl.is_error, text(no_ttl))
        r = await s.call_tool("session", {"namespace": ns, "action": "end"})
        out["end"] = json.loads(text(r))
        for _ in range(300):
            r = await s.call_tool("get", {"namespace": ns, "entity": note})
            out["get"] = json.loads(text(r))
            if out["get"]["facts"][0].get("forgotten_by_tx"):
                break
            await asyncio.sleep(0.2)
        return out

    out = run(cluster, body)
    assert out["open"]["action"] == "open" and out["open"]["tx"] > 0
    assert out["again"][0] and "renew it" in out["again"][1]
    assert out["no_ttl"][0] and "ttl_ms" in out["no_ttl"][1]
    assert out["end"]["tx"] > out["open"]["tx"]
    fact = out["get"]["facts"][0]
    assert fact["value"] is None and fact["forgotten_by_tx"] > out["end"]["tx"], out["get"]
    assert "cache" not in json.dumps(out["get"])
