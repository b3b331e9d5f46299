"""The asyncio face: concurrent calls, an async watch, an async branch block."""

import asyncio

import engram
from engram.aio import AsyncEngram


def test_concurrent_writes_reads_and_an_async_watch(cluster, ns):
    async def main():
        db = AsyncEngram(cluster.endpoints, agent="async-agent")
        first = await db.transact(ns, [("c", ":c/n", -1)])
        counter = first.temp_ids["c"]
        watch = db.watch(ns, from_tx=first.tx + 1)
        receipts = await asyncio.gather(*(db.transact(ns, [(f"t{i}", ":t/n", i)]) for i in range(12)))
        txs = sorted(r.tx for r in receipts)
        assert len(set(txs)) == 12
        seen = []
        async for event in watch:
            seen.append(event.tx)
            if len(seen) == 12:
                break
        watch.close()
        assert seen == txs
        got = await asyncio.gather(*(db.get(ns, r.temp_ids[f"t{i}"]) for i, r in enumerate(receipts)))
        assert [g[":t/n"] for g in got] == list(range(12))
        assert (await db.get(ns, counter))[":c/n"] == -1

        async with db.branch(ns, "async-try") as b:
            b.transact([(counter, ":c/n", 1)])
        assert (await db.get(ns, counter))[":c/n"] == 1
        try:
            async with db.branch(ns, "async-fail") as b:
                b.transact([(counter, ":c/n", 2)])
                raise KeyError("changed my mind")
        except KeyError:
            pass
        assert (await db.get(ns, counter))[":c/n"] == 1
        # The calls without an explicit async twin are awaitable too.
        assert {b["name"]: b["state"] for b in await db.branches(ns)} == {
            "async-try": "merged",
            "async-fail": "abandoned",
        }
        assert (await db.schema(ns))["strict"] is False

        try:
            await db.transact(ns, [(counter, ":c/n", 3)], preconditions=[(counter, ":c/n", 0)])
        except engram.PreconditionFailed as e:
            return e.code

    assert asyncio.run(asyncio.wait_for(main(), 60)) == "FAILED_PRECONDITION"
