"""The Python API against a real cluster: the worked example of docs/python.md, every value type
both ways, time travel, history, find, diff, branches and watch."""

import datetime
import time

import pytest

import engram
from engram import Assert, Keyword, Lookup, Ref, Retract

UTC = datetime.timezone.utc


def test_worked_example(cluster, ns):
    # Two agents share one memory; each is recorded as the writer of its own claims.
    planner = engram.Engram(cluster.endpoints, agent="planner")
    critic = engram.Engram(cluster.endpoints, agent="critic")
    planner.apply_schema(
        ns,
        [
            {"ident": ":memory/key", "type": "string", "unique": "identity"},
            {"ident": ":memory/content", "type": "string"},
            {"ident": ":memory/tags", "type": "keyword", "cardinality": "many", "indexed": True},
        ],
    )
    first = planner.transact(
        ns,
        [
            ("pref", ":memory/key", "alice/editor-theme"),
            ("pref", ":memory/content", "Alice prefers a dark theme"),
            ("pref", ":memory/tags", Keyword(":tag/ui")),
        ],
        confidence=0.6,
        session="s-1",
    )
    pref = first.temp_ids["pref"]

    # The critic disagrees, and verifies its own claim.
    critic.transact(
        ns,
        [(Lookup(":memory/key", "alice/editor-theme"), ":memory/content", "Alice prefers a light theme")],
        confidence=0.9,
        status="verified",
    )

    latest = planner.get(ns, pref)
    assert latest[":memory/content"] == "Alice prefers a light theme"
    assert [c.value for c in latest.conflicts] == ["Alice prefers a dark theme"]
    assert latest.conflicts[0].agent == "planner"

    # What did we believe right after the planner's write?
    then = planner.get(ns, pref, as_of_tx=first.tx)
    assert then[":memory/content"] == "Alice prefers a dark theme"
    assert then.conflicts == []

    # The same by wall-clock instant (transaction time), as a datetime or in ns: the last
    # transaction at or before it. Before the first transaction there is nothing to read.
    just_after = datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(
        microseconds=first.tx_time_ns // 1000 + 1
    )
    for when in (first.tx_time_ns, just_after):
        then = planner.get(ns, pref, as_of_time=when)
        assert then[":memory/content"] == "Alice prefers a dark theme", when
    assert [d.value for d in planner.find(ns, ":memory/content", as_of_time=first.tx_time_ns)] == [
        "Alice prefers a dark theme"
    ]
    with pytest.raises(engram.OutOfRange, match="as_of_time_ns"):
        planner.get(ns, pref, as_of_time=1)
    with pytest.raises(TypeError, match="as_of_time"):
        planner.get(ns, pref, as_of_time="yesterday")

    # Only verified claims.
    verified = planner.get(ns, pref, verified_only=True)
    assert verified[":memory/content"] == "Alice prefers a light theme"
    assert verified.datoms[0].agent == "critic" and verified.datoms[0].status == "verified"

    history = planner.history(ns, pref, attribute=":memory/content")
    assert [(d.agent, d.value) for d in history] == [
        ("planner", "Alice prefers a dark theme"),
        ("critic", "Alice prefers a light theme"),
    ]
    assert history[0].session == "s-1" and history[0].confidence == pytest.approx(0.6)
    # The history as it stood at the planner's write, by transaction or by instant.
    for bound in ({"as_of_tx": first.tx}, {"as_of_time": first.tx_time_ns}):
        then = planner.history(ns, pref, attribute=":memory/content", **bound)
        assert [(d.agent, d.value) for d in then] == [("planner", "Alice prefers a dark theme")], bound

    tagged = planner.find(ns, ":memory/tags", Keyword(":tag/ui"))
    assert [d.entity for d in tagged] == [pref]

    changes = planner.diff(ns, first.tx)
    assert [d.value for d in changes.asserted] == ["Alice prefers a light theme"]
    assert changes.retracted == []


def test_every_value_type_round_trips(db, ns):
    when = datetime.datetime(2026, 5, 17, 9, 30, 15, 123456, tzinfo=UTC)
    target = db.transact(ns, [("t", ":x/name", "target")]).temp_ids["t"]
    values = {
        ":v/string": "héllo",
        ":v/int": -(2**63),
        ":v/float": 2.5,
        ":v/bool": True,
        ":v/bytes": b"\x00\xffraw",
        ":v/instant": when,
        ":v/keyword": Keyword(":color/blue"),
        ":v/ref": Ref(target),
        ":v/json": {"b": [1, 2, {"c": None}], "a": "x"},
        ":v/list": [1, "two", 3.0],
    }
    r = db.transact(ns, [Assert("e", a, v) for a, v in values.items()])
    got = db.get(ns, r.temp_ids["e"])
    assert got.to_dict() == values
    assert type(got[":v/bool"]) is bool and type(got[":v/int"]) is int
    assert got[":v/instant"].tzinfo is not None
    # A datetime in another zone is the same instant.
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    r2 = db.transact(ns, [(r.temp_ids["e"], ":v/instant", when.astimezone(plus_two))])
    assert db.get(ns, r.temp_ids["e"], as_of_tx=r2.tx)[":v/instant"] == when


def test_retract_valid_time_and_preconditions(db, ns):
    r = db.transact(ns, [("job", ":job/state", Keyword(":state/open"))])
    job = r.temp_ids["job"]
    # Compare-and-set: only one of two writers that read "open" wins.
    db.transact(
        ns,
        [Retract(job, ":job/state", Keyword(":state/open")), (job, ":job/state", Keyword(":state/taken"))],
        preconditions=[(job, ":job/state", Keyword(":state/open"))],
    )
    with pytest.raises(engram.PreconditionFailed) as refused:
        db.transact(
            ns,
            [(job, ":job/state", Keyword(":state/taken-twice"))],
            preconditions=[(job, ":job/state", Keyword(":state/open"))],
        )
    assert refused.value.code == "FAILED_PRECONDITION"
    assert db.get(ns, job)[":job/state"] == Keyword(":state/taken")

    # Valid time: a fact recorded now about last year.
    last_year = datetime.datetime(2025, 1, 1, tzinfo=UTC)
    db.transact(ns, [Assert(job, ":job/owner", "ops", valid_from=last_year)])
    assert db.get(ns, job, valid_at=datetime.datetime(2025, 6, 1, tzinfo=UTC))[":job/owner"] == "ops"
    assert ":job/owner" not in db.get(ns, job, valid_at=datetime.datetime(2024, 6, 1, tzinfo=UTC))


def test_branch_merges_on_success_and_is_abandoned_on_error(db, ns):
    base = db.transact(ns, [("plan", ":plan/step", "draft")])
    plan = base.temp_ids["plan"]
    with db.branch(ns, "try-a") as b:
        b.transact([(plan, ":plan/step", "try A")])
        assert b.get(plan)[":plan/step"] == "try A"
        assert db.get(ns, plan)[":plan/step"] == "draft"  # main does not see it yet
        assert [d.value for d in b.diff().asserted] == ["try A"]
    assert db.get(ns, plan)[":plan/step"] == "try A"

    with pytest.raises(RuntimeError):
        with db.branch(ns, "try-b") as b:
            b.transact([(plan, ":plan/step", "try B")])
            raise RuntimeError("the agent changed its mind")
    assert db.get(ns, plan)[":plan/step"] == "try A"
    with pytest.raises(engram.EngramError):
        db.transact(ns, [(plan, ":plan/step", "late")], branch="try-b")
    states = {b["name"]: (b["state"], b["writes"]) for b in db.branches(ns)}
    assert states == {"try-a": ("merged", 1), "try-b": ("abandoned", 1)}


def test_schema_as_declared_and_as_of_before(db, ns):
    before = db.transact(ns, [("x", ":free/form", "open namespace")])
    declared = db.apply_schema(
        ns,
        [
            {"ident": ":doc/key", "type": "string", "unique": "identity", "doc": "a stable name"},
            {"ident": ":doc/tags", "type": "keyword", "cardinality": "many", "indexed": True},
        ],
    )
    now = db.schema(ns)
    assert now["strict"] is True
    by_ident = {a["ident"]: a for a in now["attributes"]}
    assert by_ident[":doc/key"]["unique"] == "identity" and by_ident[":doc/key"]["doc"] == "a stable name"
    assert by_ident[":doc/tags"]["cardinality"] == "many" and by_ident[":doc/tags"]["indexed"] is True
    assert by_ident[":doc/key"]["since_tx"] == declared.tx
    assert db.schema(ns, as_of_tx=before.tx)["strict"] is False


def test_watch_delivers_each_transaction_in_order(db, ns):
    start = db.transact(ns, [("w", ":w/n", 0)])
    w = start.temp_ids["w"]
    watch = db.watch(ns, from_tx=start.tx + 1)
    written = [db.transact(ns, [(w, ":w/n", n)]).tx for n in range(1, 6)]
    seen = []
    while len(seen) < len(written):
        event = watch.next(timeout_s=10)
        assert event is not None, f"watch delivered {seen} of {written}"
        seen.append(event.tx)
        assert [d.value for d in event.datoms] == [len(seen)]
    assert seen == written
    assert watch.next(timeout_s=0.3) is None
    watch.close()
    assert list(watch) == []


def test_redact_forgets_a_value_and_says_so(db, ns):
    r = db.transact(ns, [("p", ":person/email", "grace@secret.example"), ("p", ":person/name", "Grace")])
    person = r.temp_ids["p"]
    dry = db.redact(ns, person, attribute=":person/email", reason="erasure 12", dry_run=True)
    assert dry["dry_run"] is True and len(dry["datoms"]) == 1
    assert db.get(ns, person)[":person/email"] == "grace@secret.example"

    done = db.redact(ns, person, attribute=":person/email", reason="erasure 12")
    assert done["tx"] > r.tx
    assert done["part_txs"] == [done["tx"]], "one datom: one part"
    assert [d["attribute"] for d in done["datoms"]] == [":person/email"]
    assert done["datoms"][0]["redacted_by_tx"] == done["tx"]
    assert done["datoms"][0]["hash"] == dry["datoms"][0]["hash"]
    # Written by this build: its kept commitment is salted, not guessable.
    assert done["datoms"][0]["guessable"] is False

    datoms = {d.attribute: d for d in db.get(ns, person).datoms}
    assert datoms[":person/email"].value is None
    assert "redacted by transaction" in datoms[":person/email"].redacted
    assert datoms[":person/name"].value == "Grace"
    assert all(d.value != "grace@secret.example" for d in db.history(ns, entity=person))

    with pytest.raises(engram.NotFound):
        db.redact(ns, person, attribute=":person/email", reason="again")
    with pytest.raises(ValueError):
        db.redact(ns, person, reason="")


def test_redact_reaches_the_value_on_a_branch_and_a_merge_does_not_bring_it_back(db, ns):
    r = db.transact(ns, [("p", ":person/email", "ada@main.example"), ("p", ":person/name", "Ada")])
    person = r.temp_ids["p"]
    with db.branch(ns, "draft-email") as b:
        b.transact([(person, ":person/email", "ada@branch.example")])
        dry = db.redact(ns, person, attribute=":person/email", reason="erasure 13", dry_run=True)
        assert sorted(d["branch"] or "main" for d in dry["datoms"]) == ["draft-email", "main"]
        done = db.redact(ns, person, attribute=":person/email", reason="erasure 13")
        assert sorted(d["branch"] or "main" for d in done["datoms"]) == ["draft-email", "main"]
        on_branch = {d.attribute: d for d in b.get(person).datoms}
        assert on_branch[":person/email"].value is None
        assert "redacted by transaction" in on_branch[":person/email"].redacted
    # Merged on leaving the block: the branch's redacted datom is not replayed onto main.
    datoms = {d.attribute: d for d in db.get(ns, person).datoms}
    assert datoms[":person/email"].value is None
    assert datoms[":person/name"].value == "Ada"
    assert all(
        d.value not in ("ada@main.example", "ada@branch.example") for d in db.history(ns, entity=person)
    )


def test_redact_where_forgets_what_an_agent_wrote_and_only_that(cluster, db, ns):
    crawler = engram.Engram(cluster.endpoints, agent="crawler")
    crawled = [crawler.transact(ns, [("p", ":person/email", f"{i}@crawled.example")]).temp_ids["p"] for i in range(3)]
    mine = db.transact(ns, [("p", ":person/email", "mine@kept.example")]).temp_ids["p"]
    with pytest.raises(ValueError):
        db.redact_where(ns, reason="no condition")
    dry = db.redact_where(ns, written_by="crawler", reason="crawled without consent", dry_run=True)
    assert dry["dry_run"] is True and dry["datoms_redacted"] == 3
    assert db.get(ns, crawled[0])[":person/email"] == "0@crawled.example"

    done = db.redact_where(ns, written_by="crawler", reason="crawled without consent")
    assert done["datoms_redacted"] == 3 and not done["listing_truncated"]
    assert len(done["datoms"]) == 3 and done["tx"] in done["part_txs"]
    for e in crawled:
        assert db.get(ns, e).datoms[0].value is None
    assert db.get(ns, mine)[":person/email"] == "mine@kept.example"
    with pytest.raises(engram.NotFound):
        db.redact_where(ns, written_by="crawler", reason="again")


def test_a_retention_policy_is_set_listed_and_ended(db, ns):
    db.set_retention(ns, 86_400_000, attribute=":chat/text")
    db.set_retention_versions(ns, 3, attribute=":plan/text")
    policies = [p for p in db.retention() if p["namespace"] == ns]
    assert policies == [
        {"namespace": ns, "attribute": ":chat/text", "keep_ms": 86_400_000, "keep_versions": 0, "since_tx": policies[0]["since_tx"]},
        {"namespace": ns, "attribute": ":plan/text", "keep_ms": 0, "keep_versions": 3, "since_tx": policies[1]["since_tx"]},
    ]
    with pytest.raises(engram.EngramError):
        db.set_retention(ns, 86_400_000, attribute=":chat/text")  # already so
    with pytest.raises(engram.EngramError):
        db.set_retention_versions(ns, 3, attribute=":plan/text")  # already so
    db.set_retention(ns, 0, attribute=":chat/text")
    db.set_retention_versions(ns, 0, attribute=":plan/text")
    assert [p for p in db.retention() if p["namespace"] == ns] == []


def test_a_session_makes_a_namespace_volatile_until_it_ends(db, ns):
    scratch = f"{ns}/scratch"
    kept = db.transact(ns, [("k", ":note/text", "kept outside the session")]).temp_ids["k"]
    note = db.transact(scratch, [("n", ":note/text", "a working note")]).temp_ids["n"]
    with pytest.raises(engram.EngramError, match="no session open"):
        db.end_session(scratch)
    opened = db.open_session(scratch, 3_600_000)
    renewed = db.renew_session(scratch, 3_600_000)
    [listed] = [s for s in db.sessions()["open"] if s["namespace"] == scratch]
    assert (listed["since_tx"], listed["renewed_tx"], listed["ttl_ms"]) == (opened["tx"], renewed["tx"], 3_600_000)
    ended = db.end_session(scratch)
    deadline = time.monotonic() + 60
    while db.get(scratch, note).datoms[0].redacted is None:
        assert time.monotonic() < deadline, "the ended session's namespace was never forgotten"
        time.sleep(0.2)
    assert db.get(scratch, note).datoms[0].value is None
    assert db.get(ns, kept)[":note/text"] == "kept outside the session"
    [last] = [s for s in db.sessions()["ended"] if s["namespace"] == scratch]
    assert (last["ended_tx"], last["lapsed"]) == (ended["tx"], False)


def test_each_node_lists_its_background_jobs(db, ns):
    db.transact(ns, [("j", ":job/n", 1)])
    # Every node's search index rebuilt itself from the log once it had entries to take in.
    rebuilt = db.jobs("search-rebuild")
    assert {j["node"] for j in rebuilt} == {1, 2, 3}, rebuilt
    for job in rebuilt:
        assert job["kind"] == "search-rebuild" and job["outcome"] == "done", job
        assert job["ended_ns"] >= job["started_ns"] and job["error"] is None, job
        assert job["figures"]["log_index"] >= 1, job
    assert len(db.jobs(limit=1)) == 3, "at most one per node"
    with pytest.raises(engram.EngramError, match="no job kind"):
        db.jobs("compaction")


def test_history_and_find_since_a_transaction_and_at_a_valid_instant(db, ns):
    first = db.transact(ns, [("a", ":cap/tag", "x")])
    later = db.transact(ns, [("b", ":cap/tag", "x")])
    b = later.temp_ids["b"]
    assert [d.entity for d in db.history(ns, attribute=":cap/tag", since_tx=first.tx)] == [b]
    assert [d.entity for d in db.iter_history(ns, attribute=":cap/tag", since_tx=first.tx, page_size=1)] == [b]
    assert [d.entity for d in db.find(ns, ":cap/tag", since_tx=first.tx)] == [b]
    # A claim valid only from an instant on: not at the instant before it, in find and history.
    starts = 2_000_000_000_000_000_000
    c = db.transact(ns, [Assert("c", ":cap/tag", "x", valid_from=starts)]).temp_ids["c"]
    assert c not in [d.entity for d in db.find(ns, ":cap/tag", valid_at=starts - 1)]
    assert c in [d.entity for d in db.find(ns, ":cap/tag", valid_at=starts)]
    assert c not in [d.entity for d in db.history(ns, attribute=":cap/tag", valid_at=starts - 1)]
    assert [d.entity for d in db.history(ns, c, valid_at=starts)] == [c]
    # And in a diff: what changed about that moment.
    assert c not in [d.entity for d in db.diff(ns, first.tx, valid_at=starts - 1).asserted]
    assert [d.entity for d in db.diff(ns, later.tx, valid_at=starts).asserted] == [c]


def test_query_joins_clauses_as_of_one_transaction_and_pages_the_rows(db, ns):
    first = db.transact(
        ns,
        [
            ("ann", ":agent/team", "infra"),
            ("bob", ":agent/team", "infra"),
            ("cid", ":agent/team", "web"),
        ],
    )
    ann, bob, cid = (first.temp_ids[n] for n in ("ann", "bob", "cid"))
    owners = [ann, bob, cid, ann]
    tasks = db.transact(
        ns,
        [op for i, o in enumerate(owners) for op in [
            (f"t{i}", ":task/owner", Ref(o)),
            (f"t{i}", ":task/status", Keyword(":status/open" if i < 3 else ":status/done")),
        ]],
    )
    t = [tasks.temp_ids[f"t{i}"] for i in range(4)]
    # The open tasks of team infra, with their owner.
    where = [
        ("?task", ":task/status", Keyword(":status/open")),
        ("?task", ":task/owner", "?who"),
        ("?who", ":agent/team", "infra"),
    ]
    rows = db.query(ns, ["?task", "?who"], where, explain=True)
    assert rows.columns == ["?task", "?who"]
    assert set(rows) == {(Ref(t[0]), Ref(ann)), (Ref(t[1]), Ref(bob))}
    assert len(rows) == 2 and rows.as_of_tx == tasks.tx and rows.rows_read > 0
    assert [s["clause"] for s in rows.plan] == [0, 1, 2] and rows.plan[0]["access"] == "value index"

    # bob's task moves to cid: as of before the move, the answer is as it was.
    db.transact(ns, [(t[1], ":task/owner", Ref(cid))])
    assert list(db.query(ns, ["?task"], where)) == [(Ref(t[0]),)]
    assert len(db.query(ns, ["?task"], where, as_of_tx=tasks.tx)) == 2
    # A row a page, each once; an entity id in the entity position.
    assert len(db.query(ns, ["?s"], [(t[3], ":task/status", "?s")], limit=1)) == 1
    assert list(db.query(ns, ["?s"], [(t[3], ":task/status", "?s")])) == [(Keyword(":status/done"),)]
    owners_now = db.query(ns, ["?who"], [("?t", ":task/owner", "?who")])
    assert set(owners_now) == {(Ref(ann),), (Ref(cid),)} and len(owners_now) == 2, "each owner once"

    # A filter: only the open tasks whose priority is above 1.
    db.transact(ns, [(t[0], ":task/priority", 1), (t[2], ":task/priority", 5)])
    urgent = db.query(
        ns,
        ["?task"],
        [("?task", ":task/status", Keyword(":status/open")), ("?task", ":task/priority", "?p"), (">", "?p", 1)],
        explain=True,
    )
    assert list(urgent) == [(Ref(t[2]),)] and urgent.plan[1]["filters"] == [0]
    with pytest.raises(ValueError, match=r"where\[1\]: \?x is bound by no clause"):
        db.query(ns, ["?task"], [("?task", ":task/priority", "?p"), ("<", "?x", 1)])

    # `not`: the open tasks with no priority (t1, now cid's), and the agents who own no open
    # task (bob, whose task moved; ann owns t0); ?p and ?t are local to their not clauses.
    open_task = ("?task", ":task/status", Keyword(":status/open"))
    unprioritised = db.query(ns, ["?task"], [open_task, ("not", ("?task", ":task/priority", "?p"))], explain=True)
    assert list(unprioritised) == [(Ref(t[1]),)]
    assert unprioritised.plan[0]["negations"] == [0] and unprioritised.plan[0]["access"] == "value index"
    idle = db.query(
        ns,
        ["?who"],
        [("?who", ":agent/team", "?team"), ("not", ("?t", ":task/owner", "?who"))],
    )
    assert list(idle) == [(Ref(bob),)], "ann owns t0 and t3, cid owns t1 and t2"
    # As of before the move, bob owned t1.
    assert len(db.query(ns, ["?who"], [("?who", ":agent/team", "?team"), ("not", ("?t", ":task/owner", "?who"))], as_of_tx=tasks.tx)) == 0
    with pytest.raises(ValueError, match=r"where\[1\]: .* shares no variable with the clauses"):
        db.query(ns, ["?task"], [open_task, ("not", ("?x", ":task/priority", "?p"))])
    with pytest.raises(TypeError, match=r"where\[1\]\[1\]: a not is"):
        db.query(ns, ["?task"], [open_task, ("not", "?task")])
    # A not of several clauses: the open tasks owned by no one in infra (t0 is ann's); ?o is
    # the not's own, joining its two clauses.
    not_infra = db.query(
        ns,
        ["?task"],
        [open_task, ("not", ("?task", ":task/owner", "?o"), ("?o", ":agent/team", "infra"))],
        explain=True,
    )
    assert set(not_infra) == {(Ref(t[1]),), (Ref(t[2]),)} and len(not_infra) == 2
    assert not_infra.plan[0]["negations"] == [0]

    # `or`: the tasks that are done or have priority 5 (t3 done; t2 priority 5), each once;
    # both alternatives name ?task alone.
    done_or_urgent = db.query(
        ns,
        ["?task"],
        [("or", ("?task", ":task/status", Keyword(":status/done")), ("?task", ":task/priority", 5))],
        explain=True,
    )
    assert set(done_or_urgent) == {(Ref(t[3]),), (Ref(t[2]),)} and len(done_or_urgent) == 2
    assert done_or_urgent.plan[0]["or_clause"] and " | " in done_or_urgent.plan[0]["access"]
    # An alternative of several clauses: done, or owned by someone in web (cid owns t1 and t2);
    # ?o is that alternative's own.
    done_or_web = db.query(
        ns,
        ["?task"],
        [(
            "or",
            ("?task", ":task/status", Keyword(":status/done")),
            ("and", ("?task", ":task/owner", "?o"), ("?o", ":agent/team", "web")),
        )],
        explain=True,
    )
    assert set(done_or_web) == {(Ref(t[1]),), (Ref(t[2]),), (Ref(t[3]),)} and len(done_or_web) == 3
    assert " & " in done_or_web.plan[0]["access"], done_or_web.plan[0]["access"]
    with pytest.raises(ValueError, match=r"find\[1\]: \?o is bound by no clause"):
        db.query(ns, ["?task", "?o"], [("or", ("?task", ":task/status", "?s"), ("and", ("?task", ":task/owner", "?o"),))])
    with pytest.raises(ValueError, match=r"where\[1\]\.alternatives\[0\]: \?s is named by this alternative but not by every alternative"):
        db.query(ns, ["?task"], [("?task", ":task/status", "?s"), ("or", ("?task", ":task/owner", "?s"), ("?task", ":task/priority", 5))])

    # Aggregates: each owner's tasks counted (ann owns t0 and t3, cid t1 and t2), the
    # priorities (1 and 5) summed over the joined rows; a sum of keywords is refused.
    per_owner = db.query(ns, ["?who", "(count ?task)"], [("?task", ":task/owner", "?who")])
    assert set(per_owner) == {(Ref(ann), 2), (Ref(cid), 2)} and len(per_owner) == 2
    assert list(db.query(ns, ["(sum ?p)", "(max ?p)", "(avg ?p)"], [("?task", ":task/priority", "?p")])) == [(6, 5, 3.0)]
    with pytest.raises(ValueError, match=r"find\[0\]: .*median.* is not an aggregate"):
        db.query(ns, ["(median ?p)"], [("?task", ":task/priority", "?p")])
    with pytest.raises(engram.InvalidArgument, match=r"find\[0\] \(sum \?s\): \?s holds a keyword value"):
        db.query(ns, ["(sum ?s)"], [("?task", ":task/status", "?s")])

    # Bad queries name what is wrong; nothing is written.
    with pytest.raises(ValueError, match=r"find\[0\]: \?nobody is bound by no clause"):
        db.query(ns, ["?nobody"], where)
    with pytest.raises(ValueError, match=r"where\[0\]: a clause is a tuple"):
        db.query(ns, ["?t"], [("?t", ":task/owner")])
    with pytest.raises(engram.NotFound, match=r"clauses\[0\].attribute: attribute :task/ownr"):
        db.query(ns, ["?t"], [("?t", ":task/ownr", "?o")])
    with pytest.raises(engram.ResourceExhausted, match="max_rows_read"):
        db.query(ns, ["?task"], where, max_rows_read=2)
