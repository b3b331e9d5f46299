"""An enforced cluster: the Python client signs every request with its agent key; grants decide
what each agent may do, and refusals carry their code."""

import json
import time

import engram
import pytest
from conftest import Cluster, run_cli


@pytest.fixture(scope="module")
def enforced():
    c = Cluster()
    try:
        admin_key = str(c.dir / "admin.key")
        run_cli("agent", "keygen", "admin", "--out", admin_key)
        c.init("--security", "enforced", "--admin-key", admin_key)
        admin = engram.Engram(c.endpoints, agent_key=admin_key)
        c.wait_writable(admin, "ops/ready")
        bob_key = str(c.dir / "bob.key")
        cli = ["-e", ",".join(c.endpoints), "--agent-key", admin_key]
        # One agent made with the CLI, the rest of the administration from Python.
        run_cli(*cli, "agent", "create", "bob", "--out", bob_key)
        admin.grant("bob", ["read", "write"], "team/b")
        yield c, admin_key, bob_key
    finally:
        c.stop()


def test_signed_requests_and_grants(enforced):
    c, _, bob_key = enforced
    bob = engram.Engram(c.endpoints, agent_key=bob_key)
    assert bob.agent == "bob"
    me = bob.whoami()
    assert me["principal"] == "bob" and me["security"] == "enforced"
    assert {(g["action"], g["prefix"]) for g in me["grants"]} == {("read", "team/b"), ("write", "team/b")}

    r = bob.transact("team/b", [("t", ":task/title", "ship it")])
    got = bob.get("team/b", r.temp_ids["t"])
    assert got[":task/title"] == "ship it"
    assert got.datoms[0].agent == "bob"

    with pytest.raises(engram.PermissionDenied) as denied:
        bob.transact("team/a", [("t", ":task/title", "not mine")])
    assert denied.value.code == "PERMISSION_DENIED"
    assert "bob" in denied.value.message and "team/a" in denied.value.message


def test_unsigned_and_mismatched_requests_are_refused(enforced):
    c, admin_key, bob_key = enforced
    anonymous = engram.Engram(c.endpoints, agent="bob")
    with pytest.raises(engram.Unauthenticated) as unsigned:
        anonymous.transact("team/b", [("t", ":task/title", "who am I")])
    assert unsigned.value.code == "UNAUTHENTICATED"
    # Posing as another agent is refused before anything is sent.
    with pytest.raises(ValueError, match="differs from the key file"):
        engram.Engram(c.endpoints, agent_key=bob_key, agent="admin")
    # The refused writes left nothing behind.
    admin = engram.Engram(c.endpoints, agent_key=admin_key)
    titles = [d.value for d in admin.find("team/b", ":task/title")]
    assert "who am I" not in titles
    assert [d.value for d in admin.find("team/a", ":task/title")] == []


def test_agents_grants_and_roles_administered_from_python(enforced):
    c, admin_key, _ = enforced
    admin = engram.Engram(c.endpoints, agent_key=admin_key)
    carol_key = c.dir / "carol.key"
    made = admin.create_agent("carol", carol_key)
    assert len(made["public_key"]) == 64 and made["tx"] > 0
    with pytest.raises(ValueError, match="path"):
        admin.create_agent("carol2", carol_key)  # an existing key file is never overwritten
    carol = engram.Engram(c.endpoints, agent_key=carol_key)
    assert carol.agent == "carol"

    admin.grant("role:ops", "write", "infra")
    with pytest.raises(engram.PermissionDenied):
        carol.transact("infra/dns", [("r", ":dns/name", "a.example")])
    admin.assign_role("carol", "ops")
    assert carol.transact("infra/dns", [("r", ":dns/name", "a.example")]).tx > 0
    roles = {a["name"]: a["roles"] for a in admin.agents()}
    assert roles["carol"] == ["role:ops"] and roles["bob"] == []
    assert admin.grants("role:ops") == [{"principal": "role:ops", "action": "write", "prefix": "infra", "attribute": ""}]

    # A non-administrator cannot hand out roles; a bad action is refused before sending.
    with pytest.raises(engram.PermissionDenied):
        carol.assign_role("carol", "admins")
    with pytest.raises(ValueError, match=r"actions\[1\]"):
        admin.grant("carol", ["read", "delete"], "infra")
    with pytest.raises(engram.PreconditionFailed, match="already has role:ops"):
        admin.assign_role("carol", "ops")

    admin.unassign_role("carol", "ops")
    with pytest.raises(engram.PermissionDenied):
        carol.transact("infra/dns", [("r", ":dns/name", "b.example")])
    admin.revoke_agent("carol")
    with pytest.raises(engram.Unauthenticated):
        carol.whoami()

    # A key made in Python registers like one made by the CLI.
    dave_public = engram.keygen("dave", c.dir / "dave.key")
    admin.add_agent("dave", dave_public)
    assert engram.Engram(c.endpoints, agent_key=c.dir / "dave.key").whoami()["principal"] == "dave"


def test_grants_on_attributes_redact_what_they_do_not_cover(enforced):
    c, admin_key, _ = enforced
    admin = engram.Engram(c.endpoints, agent_key=admin_key)
    erin = admin.transact("team/hr", [("e", ":person/name", "Erin"), ("e", ":hr/salary", 91000)]).temp_ids["e"]
    eve_key = c.dir / "eve.key"
    admin.create_agent("eve", eve_key)
    admin.grant("eve", ["read", "read-history", "write"], "team/hr", attribute=":person/*")
    eve = engram.Engram(c.endpoints, agent_key=eve_key)

    got = {d.attribute: d for d in eve.get("team/hr", erin).datoms}
    assert got[":person/name"].value == "Erin" and got[":person/name"].redacted is None
    salary = got[":hr/salary"]
    assert salary.value is None
    assert "eve holds no read grant on :hr/salary" in salary.redacted
    # The datom is there, with its own hash: the administrator's unredacted copy has the same.
    full = {d.attribute: d for d in admin.get("team/hr", erin).datoms}
    assert full[":hr/salary"].value == 91000 and full[":hr/salary"].hash == salary.hash
    history = eve.history("team/hr", erin)
    assert sorted((d.attribute, d.value or "") for d in history) == [(":hr/salary", ""), (":person/name", "Erin")]
    # Finding by an attribute one may not read would reveal who holds a value.
    with pytest.raises(engram.PermissionDenied, match=":hr/salary"):
        eve.find("team/hr", ":hr/salary", 91000)
    assert [d.entity for d in eve.find("team/hr", ":person/name", "Erin")] == [erin]
    # Searching by words sees only the attributes one may read: a note on :hr/* is not found,
    # and naming an attribute outside the grant is refused.
    admin.transact("team/hr", [("m", ":hr/note", "Erin asked for a raise"), ("m", ":person/bio", "Erin joined in spring")])
    assert {(h.datom.attribute, h.datom.value) for h in admin.search("team/hr", "Erin")} == {
        (":person/name", "Erin"),
        (":hr/note", "Erin asked for a raise"),
        (":person/bio", "Erin joined in spring"),
    }
    assert {h.datom.attribute for h in eve.search("team/hr", "Erin")} == {":person/name", ":person/bio"}
    assert eve.search("team/hr", "raise") == []
    with pytest.raises(engram.PermissionDenied, match=":hr/note"):
        eve.search("team/hr", "raise", attributes=[":hr/note"])

    # Writes are held to the same attributes: one op outside refuses the whole transaction.
    eve.transact("team/hr", [(erin, ":person/name", "Erin B.")])
    with pytest.raises(engram.PermissionDenied, match="write on :hr/salary"):
        eve.transact("team/hr", [(erin, ":person/name", "E."), (erin, ":hr/salary", 1)])
    assert admin.get("team/hr", erin)[":hr/salary"] == 91000
    assert admin.get("team/hr", erin)[":person/name"] == "Erin B."

    # A proof still verifies over a redacted answer. Establishing trust from the whole audit
    # chain needs the audit grant; eve has none, so she pins the node keys the cluster lists
    # and trusts the checkpoints they sign.
    with pytest.raises(engram.PermissionDenied, match="audit"):
        eve.get("team/hr", erin, prove=True)
    status = json.loads(run_cli("-e", ",".join(c.endpoints), "--json", "cluster", "status").stdout)
    node_keys = [node["public_key"] for node in status]
    assert len(node_keys) == 3
    pinned = engram.Engram(c.endpoints, agent_key=eve_key, trust_keys=node_keys)
    proven = pinned.get("team/hr", erin, prove=True)
    assert proven.proven and proven[":person/name"] == "Erin B."
    assert {d.attribute: d.redacted is not None for d in proven.datoms} == {":person/name": False, ":hr/salary": True}
    with pytest.raises(ValueError, match="trust_keys"):
        engram.Engram(c.endpoints, agent_key=eve_key, trust_keys=["beef"])
    stranger = engram.Engram(c.endpoints, agent_key=eve_key, trust_keys=["11" * 32])
    with pytest.raises(engram.ProofError):
        stranger.get("team/hr", erin, prove=True)

    # Only the actions on facts are granted per attribute.
    with pytest.raises(engram.InvalidArgument, match="attribute"):
        admin.grant("eve", "schema", "team/hr", attribute=":person/*")
    assert {g["attribute"] for g in admin.grants("eve")} == {":person/*"}


def test_the_mcp_server_signs_as_its_agent(enforced):
    mcp = pytest.importorskip("mcp", reason="the MCP SDK is installed by crates/engram-py/check.sh")
    import asyncio
    import json

    from mcp.client.stdio import stdio_client

    from conftest import ENGRAM_BIN

    c, _, bob_key = enforced
    params = mcp.StdioServerParameters(
        command=ENGRAM_BIN,
        args=["-e", ",".join(c.endpoints), "--agent-key", str(bob_key), "mcp"],
    )

    async def session():
        async with stdio_client(params) as (read, write):
            async with mcp.ClientSession(read, write) as s:
                await s.initialize()
                allowed = await s.call_tool(
                    "remember", {"namespace": "team/b", "facts": [{"entity": "n", "attribute": ":note/text", "value": "mine"}]}
                )
                denied = await s.call_tool(
                    "remember", {"namespace": "team/a", "facts": [{"entity": "n", "attribute": ":note/text", "value": "not mine"}]}
                )
                return allowed, denied

    allowed, denied = asyncio.run(asyncio.wait_for(session(), 60))
    text = lambda r: "".join(x.text for x in r.content if x.type == "text")  # noqa: E731
    assert not allowed.is_error, text(allowed)
    entity = json.loads(text(allowed))["entities"]["n"]
    bob = engram.Engram(c.endpoints, agent_key=bob_key)
    assert bob.get("team/b", entity).datoms[0].agent == "bob"
    assert denied.is_error and "PERMISSION_DENIED" in text(denied) and "team/a" in text(denied)


def test_the_access_log_records_who_read_what(enforced):
    c, admin_key, bob_key = enforced
    admin = engram.Engram(c.endpoints, agent_key=admin_key)
    bob = engram.Engram(c.endpoints, agent_key=bob_key)
    entity = bob.transact("team/b", [("n", ":note/text", "read me")]).temp_ids["n"]
    # Switching the log is an audited change that needs the audit grant.
    with pytest.raises(engram.PermissionDenied):
        bob.set_access_log("team/b")
    change = admin.set_access_log("team/b")
    assert change["tx"] > 0
    bob.get("team/b", entity)
    events = []
    for _ in range(50):
        # Refusals are listed too (bob was refused a write in team/a by an earlier test).
        events = [e for e in admin.access_events("team", principal="bob") if e["refused"] is None]
        if events:
            break
        time.sleep(0.1)
    assert [(e["call"], e["namespace"], e["entity"], e["datoms"]) for e in events] == [
        ("get", "team/b", entity, 1)
    ]
    assert events[0]["read_at"] >= change["tx"]
    with pytest.raises(engram.PermissionDenied):
        bob.access_events("team")
    # Every node records the calls it refused, whatever it logs: bob's switch and bob's read
    # of the log, each with the code and the reason bob was given.
    # (Earlier tests of this module were refused bob's writes to team/a: those are listed too.)
    expected = {
        ("/engram.v1.Access/SetAccessLog", "PERMISSION_DENIED"),
        ("/engram.v1.Access/Events", "PERMISSION_DENIED"),
    }
    refused = []
    for _ in range(50):
        refused = admin.access_events(principal="bob", refused_only=True)
        if expected <= {(e["call"], e["refused"]["code"]) for e in refused}:
            break
        time.sleep(0.1)
    calls = {(e["call"], e["refused"]["code"]) for e in refused}
    assert expected <= calls, refused
    assert all("bob" in e["refused"]["reason"] for e in refused), refused
    admin.set_access_log("team/b", enabled=False)
    with pytest.raises(engram.PreconditionFailed):
        admin.set_access_log("team/b", enabled=False)


def test_forgetting_by_predicate_and_retention_need_the_redact_grant(enforced):
    c, admin_key, bob_key = enforced
    admin = engram.Engram(c.endpoints, agent_key=admin_key)
    bob = engram.Engram(c.endpoints, agent_key=bob_key)
    entity = bob.transact("team/b", [("n", ":note/text", "bob's secret")]).temp_ids["n"]
    with pytest.raises(engram.PermissionDenied):
        bob.redact_where("team/b", written_by="bob", reason="mine to forget?")
    with pytest.raises(engram.PermissionDenied):
        bob.set_retention("team/b", 60_000)
    assert bob.get("team/b", entity)[":note/text"] == "bob's secret"
    # With the grant, bob's signed request is checked at the gate and the grant at apply.
    admin.grant("bob", "redact", "team/b")
    try:
        done = bob.redact_where("team/b", written_by="bob", value="bob's secret", reason="erasure 31")
        assert done["datoms_redacted"] == 1
        assert bob.get("team/b", entity).datoms[0].value is None
        bob.set_retention("team/b", 60_000)
        assert [(p["namespace"], p["keep_ms"]) for p in admin.retention()] == [("team/b", 60_000)]
        bob.set_retention("team/b", 0)
    finally:
        admin.revoke_grant("bob", "redact", "team/b")


def test_lists_show_only_what_the_caller_may_read(enforced):
    c, admin_key, _ = enforced
    admin = engram.Engram(c.endpoints, agent_key=admin_key)
    lena_key = c.dir / "lena.key"
    admin.create_agent("lena", lena_key)
    admin.grant("lena", ["read", "write"], "lists/lena")
    admin.grant("lena", ["read"], "lists/shared", attribute=":doc/*")
    owner = admin.transact("lists/shared", [("o", ":person/name", "Olga")]).temp_ids["o"]
    doc = admin.transact(
        "lists/shared",
        [("d", ":doc/author", engram.Ref(owner)), ("d", ":hr/reviewer", engram.Ref(owner))],
    ).temp_ids["d"]
    admin.transact("lists/hidden", [("x", ":n/x", 1)])
    lena = engram.Engram(c.endpoints, agent_key=lena_key)
    lena.transact("lists/lena", [("t", ":n/x", 2)])

    everything = admin.namespaces()
    assert {"lists/lena", "lists/shared", "lists/hidden"} <= set(everything)
    assert everything == sorted(everything)
    # Lena sees the namespaces she may read (all of one, some attributes of the other).
    assert [n for n in lena.namespaces() if n.startswith("lists/")] == ["lists/lena", "lists/shared"]
    # The facts referring to Olga: lena is shown only the attribute she may read.
    assert {(d.attribute, d.entity) for d in admin.referrers("lists/shared", owner)} == {
        (":doc/author", doc),
        (":hr/reviewer", doc),
    }
    assert [(d.attribute, d.entity) for d in lena.referrers("lists/shared", owner)] == [(":doc/author", doc)]
    with pytest.raises(engram.PermissionDenied, match=":hr/reviewer"):
        lena.referrers("lists/shared", owner, attribute=":hr/reviewer")
    with pytest.raises(engram.PermissionDenied, match=":hr/reviewer"):
        lena.entities("lists/shared", ":hr/reviewer")
    with pytest.raises(engram.PermissionDenied):
        lena.entities("lists/hidden")
    # A join through an attribute she may not read is refused whole, naming it; through those
    # she may read, it answers.
    assert list(lena.query("lists/shared", ["?d"], [("?d", ":doc/author", engram.Ref(owner))])) == [
        (engram.Ref(doc),)
    ]
    with pytest.raises(engram.PermissionDenied, match=":hr/reviewer"):
        lena.query("lists/shared", ["?d"], [("?d", ":doc/author", "?o"), ("?d", ":hr/reviewer", "?o")])
    # A `not` through it would tell which documents have a reviewer: refused the same way.
    with pytest.raises(engram.PermissionDenied, match=":hr/reviewer"):
        lena.query("lists/shared", ["?d"], [("?d", ":doc/author", "?o"), ("not", ("?d", ":hr/reviewer", "?r"))])
    # And an `or` alternative through it would bind its values: refused too.
    with pytest.raises(engram.PermissionDenied, match=":hr/reviewer"):
        lena.query("lists/shared", ["?d"], [("or", ("?d", ":doc/author", "?o"), ("?d", ":hr/reviewer", "?o"))])
    with pytest.raises(engram.PermissionDenied):
        lena.query("lists/hidden", ["?x"], [("?x", ":n/x", "?v")])
    assert sorted(admin.entities("lists/shared")) == sorted([owner, doc])


def _wait_forgotten(db, ns, entity, timeout_s=60):
    """Waits until the entity's one datom in `ns` is redacted; the datom."""
    deadline = time.monotonic() + timeout_s
    while True:
        datom = db.get(ns, entity).datoms[0]
        if datom.redacted is not None:
            return datom
        assert time.monotonic() < deadline, f"{ns} {entity} never forgotten: {datom}"
        time.sleep(0.2)


def test_a_session_needs_the_redact_grant_and_lapses_without_anyone_granted(enforced):
    c, admin_key, bob_key = enforced
    admin = engram.Engram(c.endpoints, agent_key=admin_key)
    bob = engram.Engram(c.endpoints, agent_key=bob_key)
    note = bob.transact("team/b/scratch", [("n", ":note/text", "bob's draft")]).temp_ids["n"]
    with pytest.raises(engram.PermissionDenied):
        bob.open_session("team/b/scratch", 60_000)
    admin.grant("bob", "redact", "team/b/scratch")
    try:
        opened = bob.open_session("team/b/scratch", 1_500)
        with pytest.raises(engram.EngramError, match="renew it"):
            bob.open_session("team/b/scratch", 1_500)
        listed = admin.sessions()["open"]
        assert [(s["namespace"], s["ttl_ms"], s["since_tx"]) for s in listed] == [("team/b/scratch", 1_500, opened["tx"])]
    finally:
        admin.revoke_grant("bob", "redact", "team/b/scratch")
    # Nobody renews it: the leader ends it and forgets the namespace, with no agent's grant.
    datom = _wait_forgotten(bob, "team/b/scratch", note)
    assert datom.value is None
    ended = admin.sessions()
    assert ended["open"] == [] and [(s["namespace"], s["lapsed"]) for s in ended["ended"]] == [("team/b/scratch", True)]
    # Its grant gone, bob can no longer open one (the administrator holds no `redact` either).
    with pytest.raises(engram.PermissionDenied):
        bob.open_session("team/b/scratch", 1_500)


def test_the_console_reads_as_its_agent_and_shows_refusals(enforced):
    """The console is a client like any other: without a key an enforced cluster refuses it,
    with bob's key it reads what bob may, and the admin's console shows bob's refusal."""
    from test_console import Console

    c, admin_key, bob_key = enforced
    anonymous = Console(c.endpoints)
    bob = Console(c.endpoints, "--agent-key", bob_key)
    admin = Console(c.endpoints, "--agent-key", admin_key)
    try:
        status, body = anonymous.api("/api/audit")
        assert status == 502 and body["error"]["code"] == "UNAUTHENTICATED", body
        status, body = bob.api("/api/audit")
        assert status == 502 and body["error"]["code"] == "PERMISSION_DENIED", body
        assert "bob" in body["error"]["message"]
        status, audit = admin.api("/api/audit")
        assert status == 200 and audit["entries"] and all(e["intact"] for e in audit["entries"])
        # Metrics need read on engram.system: bob's cluster page shows why it has none.
        status, cluster = bob.api("/api/cluster")
        assert status == 200 and cluster["nodes"], cluster
        assert all(n["metrics"] is None and "PERMISSION_DENIED" in n["metrics_refused"] for n in cluster["nodes"]), cluster
        status, cluster = admin.api("/api/cluster")
        assert status == 200 and all(n["metrics"]["requests"] > 0 for n in cluster["nodes"]), cluster
        status, proof = admin.api(f"/api/entry?index={audit['head']}")
        assert status == 200 and proof["verified"], proof
        status, access = admin.api("/api/access?refused=1&limit=100")
        assert status == 200
        refusals = [e for n in access["nodes"] for e in n["events"]]
        assert any(e["principal"] == "bob" and e["refused_code"] == "PERMISSION_DENIED" for e in refusals), refusals
    finally:
        for console in (anonymous, bob, admin):
            console.close()
