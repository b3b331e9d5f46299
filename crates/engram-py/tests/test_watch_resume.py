"""A watch survives the loss of the node it was reading from: it resumes on another node from
the transaction after the last one it delivered, so nothing is missed or repeated."""

import time

import engram


def test_watch_resumes_after_its_node_is_killed(fresh_cluster):
    c = fresh_cluster
    ns = "py/watch-resume"
    db = engram.Engram(c.endpoints, agent="writer")
    start = db.transact(ns, [("n", ":n/value", 0)])
    n = start.temp_ids["n"]
    # The watch's first endpoint is node 1: it reads from node 1 until node 1 dies.
    watch = engram.Engram(c.endpoints, agent="reader").watch(ns, from_tx=start.tx)
    first = watch.next(timeout_s=10)
    assert first is not None and first.tx == start.tx

    before = [db.transact(ns, [(n, ":n/value", i)]).tx for i in range(1, 4)]
    seen = [watch.next(timeout_s=10).tx for _ in before]
    assert seen == before

    c.kill(1)
    survivors = engram.Engram(c.endpoints[1:], agent="writer", timeout_s=20)
    after = []
    deadline = time.time() + 60
    for i in range(4, 9):
        while True:
            try:
                after.append(survivors.transact(ns, [(n, ":n/value", i)], idempotency_key=f"resume-{i}").tx)
                break
            except (engram.Unavailable, engram.DeadlineExceeded):
                assert time.time() < deadline, "no leader after node 1 was killed"
                time.sleep(0.2)

    resumed = []
    while len(resumed) < len(after):
        event = watch.next(timeout_s=30)
        assert event is not None, f"the watch delivered {resumed} of {after} after node 1 died"
        resumed.append((event.tx, [d.value for d in event.datoms]))
    assert [tx for tx, _ in resumed] == after
    assert [values for _, values in resumed] == [[i] for i in range(4, 9)]
