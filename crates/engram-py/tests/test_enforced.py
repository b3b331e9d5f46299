"""An enforced cluster: the Python client signs every request with its agent key; grants decide
what each agent may do, and refusals carry their code."""

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
        run_cli(*cli, "agent", "create", "bob", "--out", bob_key)
        run_cli(*cli, "grant", "bob", "--action", "read,write", "--ns", "team/b")
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
