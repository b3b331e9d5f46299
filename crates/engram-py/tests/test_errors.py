"""Bad input: Python type and value errors are raised before anything is sent, naming the
argument; server refusals keep their gRPC code and message; nothing is applied."""

import datetime

import pytest

import engram
from engram import Assert, Keyword


@pytest.mark.parametrize(
    "ops, error, names",
    [
        ([("e", ":a/b", {1, 2})], TypeError, "ops[0].value"),
        ([("e", ":a/b", object())], TypeError, "ops[0].value"),
        ([("e", ":a/b", 2**64)], ValueError, "ops[0].value"),
        ([("e", ":a/b", float("nan"))], ValueError, "ops[0].value"),
        ([("e", ":a/b", datetime.datetime(2026, 1, 1))], ValueError, "ops[0].value"),
        ([("e", "no-colon", 1)], ValueError, "ops[0].attribute"),
        ([(True, ":a/b", 1)], TypeError, "ops[0].entity"),
        ([(-1, ":a/b", 1)], ValueError, "ops[0].entity"),
        ([("e", ":a/b")], TypeError, "ops[0]"),
        ([("e", ":a/b", 1), 42], TypeError, "ops[1]"),
        ([Assert("e", ":a/b", 1, valid_from="yesterday")], TypeError, "ops[0].valid_from"),
        ([("e", ":a/b", Keyword("no-colon"))], ValueError, "ops[0].value"),
        ([], ValueError, "at least one op"),
    ],
)
def test_type_errors_name_the_argument_and_send_nothing(db, ns, ops, error, names):
    with pytest.raises(error) as raised:
        db.transact(ns, ops)
    assert names in str(raised.value)
    # Nothing reached the cluster: the namespace has no transaction at all.
    assert db.diff(ns, 0).asserted == []


@pytest.mark.parametrize(
    "kwargs, names",
    [
        ({"status": "sure"}, "status"),
        ({"confidence": 1.5}, "confidence"),
        ({"branch": "bad branch!"}, "branch"),
        ({"preconditions": [(1, ":a/b")]}, "preconditions[0]"),
    ],
)
def test_bad_keyword_arguments(db, ns, kwargs, names):
    with pytest.raises((TypeError, ValueError)) as raised:
        db.transact(ns, [("e", ":a/b", 1)], **kwargs)
    assert names in str(raised.value)
    assert db.diff(ns, 0).asserted == []


def test_bad_arguments_to_reads(db):
    with pytest.raises(ValueError, match="namespace"):
        db.get("/abs/path", 1)
    with pytest.raises(TypeError, match="entity"):
        db.get("py/reads", "a-temp-name")
    with pytest.raises(ValueError, match="rule"):
        db.get("py/reads", 1, rule="loudest")
    with pytest.raises(ValueError, match="entity or attribute"):
        db.history("py/reads")
    with pytest.raises(TypeError):
        db.get("py/reads", 1, as_of_tx="yesterday")
    with pytest.raises(ValueError, match="retry_budget_s"):
        engram.Engram("127.0.0.1:1", retry_budget_s=-1)
    with pytest.raises(TypeError, match="endpoints"):
        engram.Engram(42)
    with pytest.raises(ValueError, match="agent_key"):
        engram.Engram("127.0.0.1:1", agent_key="/nonexistent/key")


def test_an_agent_is_required(cluster, ns):
    anonymous = engram.Engram(cluster.endpoints)
    with pytest.raises(ValueError, match="agent"):
        anonymous.transact(ns, [("e", ":a/b", 1)])


def test_server_refusals_keep_their_code(db, ns):
    db.apply_schema(ns, [{"ident": ":doc/title", "type": "string"}])
    head = db.diff(ns, 0).to_tx

    with pytest.raises(engram.InvalidArgument) as wrong_type:
        db.transact(ns, [("d", ":doc/title", 7)])
    assert wrong_type.value.code == "INVALID_ARGUMENT"
    assert ":doc/title" in wrong_type.value.message

    with pytest.raises(engram.InvalidArgument) as undeclared:
        db.transact(ns, [("d", ":doc/undeclared", "x")])
    assert "declare it first" in undeclared.value.message

    with pytest.raises(engram.NotFound) as unknown:
        db.transact(ns, [(123456789, ":doc/title", "x")])
    assert unknown.value.code == "NOT_FOUND"

    with pytest.raises(engram.EngramError) as no_branch:
        db.get(ns, 1, branch="never-created")
    assert no_branch.value.code == "NOT_FOUND"

    # None of it was applied.
    after = db.diff(ns, 0)
    assert after.to_tx >= head
    assert [d.attribute for d in after.asserted if not d.attribute.startswith(":db/")] == []


def test_unreachable_cluster_is_unavailable():
    db = engram.Engram("127.0.0.1:1", agent="x", timeout_s=0.5, connect_timeout_s=0.2, retry_budget_s=1)
    with pytest.raises((engram.Unavailable, engram.DeadlineExceeded)) as raised:
        db.get("py/none", 1)
    assert raised.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def test_numbers_are_kept_exactly_or_refused(db, ns):
    receipt = db.transact(ns, [("n", ":n/big", 2**63 - 1), ("n", ":n/tenth", 0.1)])
    n = receipt.temp_ids["n"]
    before = [(d.attribute, d.value) for d in db.diff(ns, 0).asserted]
    for big in (2**63, 2**64, 123456789012345678901234567890, -(2**63) - 1):
        with pytest.raises(ValueError) as raised:
            db.transact(ns, [(n, ":n/big", big)])
        message = str(raised.value)
        assert message.startswith("ops[0].value: the integer") and "send it as a string" in message, message
    with pytest.raises(ValueError) as raised:
        db.transact(ns, [(n, ":n/doc", {"n": 123456789012345678901234567890})])
    assert "cannot be stored exactly" in str(raised.value) and "as a string" in str(raised.value)
    # Nothing was sent, and the attribute is still an integer one.
    assert [(d.attribute, d.value) for d in db.diff(ns, 0).asserted] == before
    db.transact(ns, [("m", ":n/big", -5)])
    got = db.get(ns, n)
    assert got[":n/big"] == 2**63 - 1 and type(got[":n/big"]) is int
    assert got[":n/tenth"] == 0.1 and type(got[":n/tenth"]) is float
