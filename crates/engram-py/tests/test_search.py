"""`search` against a real cluster: facts found by their words, by a vector and along refs,
contradictions flagged, a retracted fact found only as of before its retraction, what the
schema makes searchable, filters, and bad queries refused."""

import datetime

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
    with pytest.raises(engram.InvalidArgument, match=r"attributes\[0\]: :other/attr is not a searchable attribute"):
        planner.search(ns, "friday", attributes=[":other/attr"])
    assert len(planner.search(ns, "friday deploy rotate lunch", k=1)) == 1
    assert planner.search(ns, "rotate", verified_only=True) == []


def test_expired_memories_are_left_out_of_reads_of_now(cluster, ns):
    db = engram.Engram(cluster.endpoints, agent="planner")
    old = db.transact(ns, [("e", ":note/text", "deploy window friday")]).temp_ids["e"]
    new = db.transact(ns, [("e", ":note/text", "deploy freeze monday")]).temp_ids["e"]
    now = datetime.datetime.now(datetime.timezone.utc)
    passed = now - datetime.timedelta(hours=1)
    r = db.transact(
        ns,
        [(old, ":memory/expires", passed), (new, ":memory/expires", now + datetime.timedelta(days=1))],
    )
    assert [h.datom.entity for h in db.search(ns, "deploy")] == [new]
    assert sorted(h.datom.entity for h in db.search(ns, "deploy", include_expired=True)) == sorted([old, new])
    assert sorted(h.datom.entity for h in db.search(ns, "deploy", as_of_tx=r.tx)) == sorted([old, new])
    assert [d.entity for d in db.find(ns, ":note/text")] == [new]
    assert sorted(d.entity for d in db.find(ns, ":note/text", include_expired=True)) == sorted([old, new])
    gone = db.get(ns, old)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    assert gone.datoms == [] and gone.expired_at_ns == (passed - epoch) // datetime.timedelta(microseconds=1) * 1_000
    kept = db.get(ns, old, include_expired=True)
    assert kept[":note/text"] == "deploy window friday" and kept.expired_at_ns is None
    assert db.get(ns, new).expired_at_ns is None


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


def test_search_by_vector_and_along_refs_under_a_declared_schema(cluster, ns):
    db = engram.Engram(cluster.endpoints, agent="planner")
    db.apply_schema(
        ns,
        [
            {"ident": ":doc/text", "type": "string", "searchable": True},
            {"ident": ":doc/embedding", "type": "vector", "dimension": 3, "searchable": True},
            {"ident": ":doc/author", "type": "ref"},
            {"ident": ":person/bio", "type": "string", "searchable": True},
            {"ident": ":doc/draft", "type": "string"},
        ],
    )
    shown = {a["ident"]: a for a in db.schema(ns)["attributes"]}
    assert shown[":doc/embedding"]["dimension"] == 3 and shown[":doc/embedding"]["searchable"]
    assert not shown[":doc/draft"]["searchable"]

    person = db.transact(ns, [("p", ":person/bio", "owns the platform team")]).temp_ids["p"]
    r = db.transact(
        ns,
        [
            ("a", ":doc/text", "rotate the deploy key"),
            ("a", ":doc/embedding", engram.Vector([1.0, 0.0, 0.0])),
            ("a", ":doc/author", engram.Ref(person)),
            ("a", ":doc/draft", "secret deploy plan"),
            ("b", ":doc/text", "credentials expire soon"),
            ("b", ":doc/embedding", engram.Vector([0.9, 0.1, 0.0])),
            ("c", ":doc/text", "lunch on friday"),
            ("c", ":doc/embedding", engram.Vector([0.0, 1.0, 0.0])),
        ],
    )
    a, b, c = (r.temp_ids[n] for n in "abc")
    got = db.get(ns, a)
    assert got[":doc/embedding"] == engram.Vector([1.0, 0.0, 0.0])

    # By meaning: no shared word, a near vector; each hit shown by its entity's text.
    near = db.search(ns, vector=[1.0, 0.05, 0.0], hops=0)
    assert [h.datom.entity for h in near] == [a, b, c]
    assert near[0].signals[0] == ("vector", 1)
    assert near[0].datom.attribute == ":doc/text"

    # Words and graph: the deploy doc, then its author one ref away; the unsearchable draft
    # is never found.
    hits = db.search(ns, "deploy")
    assert [(h.datom.entity, h.datom.attribute) for h in hits] == [(a, ":doc/text"), (person, ":person/bio")]
    assert hits[1].signals[0] == ("graph", 2)  # below the hit that led to it
    assert [h.datom.entity for h in db.search(ns, "deploy", hops=0)] == [a]
    assert db.search(ns, "secret") == []

    # The schema refuses what it cannot serve, naming the field; nothing is written.
    before = [(h.datom.entity, h.datom.tx) for h in db.search(ns, "deploy")]
    with pytest.raises(engram.InvalidArgument, match="vector: has 2 components; of the searchable vector attributes"):
        db.search(ns, vector=[1.0, 0.0])
    with pytest.raises(engram.InvalidArgument, match=r"attributes\[0\]: :doc/draft is not a searchable attribute"):
        db.search(ns, "deploy", attributes=[":doc/draft"])
    with pytest.raises(engram.InvalidArgument, match="wrong vector dimension for :doc/embedding: expected 3 components, got 2"):
        db.transact(ns, [(a, ":doc/embedding", engram.Vector([1.0, 0.0]))])
    assert [(h.datom.entity, h.datom.tx) for h in db.search(ns, "deploy")] == before


def test_bad_vectors_are_refused_by_field(cluster, ns):
    db = engram.Engram(cluster.endpoints, agent="planner")
    with pytest.raises(ValueError, match="vector: .*component 1 is NaN"):
        db.search(ns, vector=[1.0, float("nan")])
    with pytest.raises(ValueError, match="vector: .*has 0 components"):
        db.search(ns, vector=[])
    with pytest.raises(engram.InvalidArgument, match="hops: must be at most 3"):
        db.search(ns, "deploy", hops=4)
    with pytest.raises(engram.InvalidArgument, match="text: has no words"):
        db.search(ns)
    with pytest.raises(ValueError, match=r"ops\[0\].value: .*component 0 is inf"):
        db.transact(ns, [("x", ":doc/embedding", engram.Vector([float("inf")]))])


def test_search_keeps_the_kinds_of_memory_asked_for(cluster, ns):
    db = engram.Engram(cluster.endpoints, agent="planner")
    first = db.transact(
        ns,
        [
            ("p", ":memory/text", "always pin the deploy key version"),
            ("b", ":memory/text", "the deploy key expired"),
            ("n", ":memory/text", "deploy key notes"),
        ],
    )
    p, b, n = (first.temp_ids[x] for x in "pbn")
    db.transact(
        ns,
        [
            (p, ":memory/kind", engram.Keyword(":memory.kind/preference")),
            (b, ":memory/kind", engram.Keyword(":memory.kind/blocker")),
        ],
    )
    assert {h.datom.entity for h in db.search(ns, "deploy key")} == {p, b, n}
    assert [h.datom.entity for h in db.search(ns, "deploy key", kinds=["preference"])] == [p]
    both = db.search(ns, "deploy key", kinds=["preference", ":memory.kind/blocker"])
    assert {h.datom.entity for h in both} == {p, b}
    # As of the first transaction the memories were there, but none had a kind yet.
    assert len(db.search(ns, "deploy key", as_of_tx=first.tx)) == 3
    assert db.search(ns, "deploy key", kinds=["preference"], as_of_tx=first.tx) == []
    with pytest.raises(engram.InvalidArgument, match=r"kinds\[1\]: "):
        db.search(ns, "deploy", kinds=["fact", "two words"])
