"""`search` against a real cluster: facts found by their words, contradictions flagged, a
retracted fact found only as of before its retraction, filters, and bad queries refused."""

import pytest

import engram
from engram import Retract


def test_search_finds_facts_by_their_words(cluster, ns):
    planner = engram.Engram(cluster.endpoints, agent="planner")
    critic = engram.Engram(cluster.endpoints, agent="critic")
    key = planner.transact(ns, [("n", ":note/text", "rotate the deploy key before friday")])
    failed = planner.transact(ns, [("n", ":note/text", "deploy failed on the eu cluster; deploy again")])
    planner.transact(ns, [("n", ":note/text", "lunch menu for friday")])
    key_note, failed_note = key.temp_ids["n"], failed.temp_ids["n"]

    hits = planner.search(ns, "Deploy")
    assert [h.datom.entity for h in hits] == [failed_note, key_note]
    assert [s for s, _ in hits[0].signals] == ["text", "recency", "prior"]
    assert hits[0].signals[0] == ("text", 1)
    assert hits[0].score > hits[1].score
    assert hits[0].datom.agent == "planner" and hits[0].datom.value.startswith("deploy failed")
    assert "Hit(entity=" in repr(hits[0])

    # A retraction: gone now, found as of before it.
    planner.transact(ns, [Retract(failed_note, ":note/text", "deploy failed on the eu cluster; deploy again")])
    assert [h.datom.entity for h in planner.search(ns, "deploy")] == [key_note]
    then = planner.search(ns, "deploy", as_of_tx=failed.tx)
    assert [h.datom.entity for h in then] == [failed_note, key_note]

    # Two agents disagree on one slot: both are hits, flagged.
    critic.transact(ns, [(key_note, ":note/text", "rotate the deploy key on monday")])
    both = planner.search(ns, "rotate")
    assert sorted(h.datom.agent for h in both) == ["critic", "planner"]
    assert all(h.conflicting for h in both)

    # Proven: every hit's datom is checked against a Merkle proof and a signed checkpoint.
    proven = planner.search(ns, "rotate", prove=True)
    assert [(h.datom.entity, h.datom.value) for h in proven] == [(h.datom.entity, h.datom.value) for h in both]

    # Filters and k.
    assert [h.datom.agent for h in planner.search(ns, "rotate", agents=["critic"])] == ["critic"]
    assert planner.search(ns, "friday", attributes=[":other/attr"]) == []
    assert len(planner.search(ns, "friday deploy rotate lunch", k=1)) == 1
    assert planner.search(ns, "rotate", verified_only=True) == []


def test_bad_searches_are_refused_by_field(cluster, ns):
    db = engram.Engram(cluster.endpoints, agent="planner")
    with pytest.raises(engram.InvalidArgument, match="text: has no words"):
        db.search(ns, "?!")
    with pytest.raises(engram.InvalidArgument, match="k: must be at most 100"):
        db.search(ns, "deploy", k=101)
    with pytest.raises(engram.InvalidArgument, match="valid_to_ns"):
        db.search(ns, "deploy", valid_between_ns=(5, 5))
    with pytest.raises(ValueError, match="attributes"):
        db.search(ns, "deploy", attributes=["no-colon"])
