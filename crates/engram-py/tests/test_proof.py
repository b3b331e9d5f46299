"""Proven reads: an honest answer verifies; an answer altered on the wire raises ProofError and
returns nothing. The alteration is made by a real TCP proxy between the client and a node."""

import asyncio
import threading
import time

import pytest

import engram
from conftest import free_port

ORIGINAL = b"budget is 1200 EUR"
ALTERED = b"budget is 9900 EUR"


class TamperingProxy:
    """Forwards TCP to `target`, replacing `needle` with `replacement` (same length) in what the
    server sends back. gRPC messages are not compressed, so the bytes of a string value travel
    as they are inside HTTP/2 DATA frames."""

    def __init__(self, target_port: int, needle: bytes, replacement: bytes):
        assert len(needle) == len(replacement)
        self.target_port = target_port
        self.needle, self.replacement = needle, replacement
        self.port = free_port()
        self.replaced = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_forever()

    async def _shutdown(self):
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _client(self, client_reader, client_writer):
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(
            self._pipe(client_reader, server_writer, tamper=False),
            self._pipe(server_reader, client_writer, tamper=True),
            return_exceptions=True,
        )

    async def _pipe(self, reader, writer, tamper):
        held = b""
        keep = len(self.needle) - 1
        try:
            while True:
                try:
                    chunk = await asyncio.wait_for(reader.read(65536), 0.02)
                except asyncio.TimeoutError:
                    chunk = None
                if chunk == b"":
                    break
                if chunk is None:
                    # Quiet: flush what was held back for a needle split across reads.
                    if held:
                        writer.write(held)
                        await writer.drain()
                        held = b""
                    continue
                data = held + chunk
                if tamper and self.needle in data:
                    self.replaced += data.count(self.needle)
                    data = data.replace(self.needle, self.replacement)
                held = data[-keep:] if tamper else b""
                out = data[: len(data) - len(held)]
                if out:
                    writer.write(out)
                    await writer.drain()
            if held:
                writer.write(held)
        finally:
            writer.close()

    def close(self):
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def test_a_proven_read_verifies(db, ns):
    r = db.transact(ns, [("b", ":project/budget", ORIGINAL.decode())])
    entity = db.get(ns, r.temp_ids["b"], prove=True)
    assert entity.proven
    assert entity[":project/budget"] == ORIGINAL.decode()
    history = db.history(ns, r.temp_ids["b"], prove=True)
    assert [d.value for d in history] == [ORIGINAL.decode()]


def test_an_altered_answer_raises_and_returns_nothing(cluster, db, ns):
    r = db.transact(ns, [("b", ":project/budget", ORIGINAL.decode())])
    budget = r.temp_ids["b"]
    proxy = TamperingProxy(cluster.ports[0], ORIGINAL, ALTERED)
    try:
        through = engram.Engram(f"127.0.0.1:{proxy.port}", agent="auditor")
        # Unproven, the altered value is what arrives: the proxy really changes the answer.
        assert through.get(ns, budget)[":project/budget"] == ALTERED.decode()
        assert proxy.replaced >= 1
        with pytest.raises(engram.ProofError) as raised:
            through.get(ns, budget, prove=True)
        assert raised.value.code == "PROOF"
        assert "proof does not verify" in str(raised.value)
        with pytest.raises(engram.ProofError):
            through.history(ns, budget, prove=True)
    finally:
        proxy.close()
    # The same read straight from the node verifies.
    assert db.get(ns, budget, prove=True)[":project/budget"] == ORIGINAL.decode()


def test_a_complete_read_proves_every_attribute_and_an_absence(cluster, db, ns):
    r = db.transact(ns, [("t", ":task/title", "ship it"), ("t", ":task/status", "open")])
    task = r.temp_ids["t"]
    worker = engram.Engram(cluster.endpoints, agent="worker")
    worker.transact(ns, [(task, ":task/status", "done")])
    entity = db.get(ns, task, complete=True)
    assert entity.proven and entity.complete
    assert entity.unfolded == []
    assert entity[":task/status"] == "done"
    assert [d.value for d in entity.conflicts] == ["open"], "the planner's claim is still live"
    # An entity nobody wrote is proven absent: no datoms, no error.
    absent = db.get(ns, task + 1_000_000, complete=True)
    assert absent.complete and absent.datoms == []
    # As of the first transaction: the same whole histories folded then, before the worker.
    then = db.get(ns, task, complete=True, as_of_tx=r.tx)
    assert then.complete and then[":task/status"] == "open" and then.conflicts == []
    assert then[":task/title"] == "ship it"
    # An instant names a transaction the proof does not bind; a transaction past the head is
    # beyond what any node can prove.
    with pytest.raises(engram.InvalidArgument, match="as_of_tx"):
        db.get(ns, task, complete=True, as_of_time=time.time_ns() - 1)
    with pytest.raises(engram.OutOfRange, match="the state this node can prove is at tx"):
        db.get(ns, task, complete=True, as_of_tx=r.tx + 1_000_000)


def test_an_altered_complete_answer_raises(cluster, db, ns):
    r = db.transact(ns, [("b", ":project/budget", ORIGINAL.decode()), ("b", ":project/owner", "ops")])
    budget = r.temp_ids["b"]
    proxy = TamperingProxy(cluster.ports[0], ORIGINAL, ALTERED)
    try:
        through = engram.Engram(f"127.0.0.1:{proxy.port}", agent="auditor")
        with pytest.raises(engram.ProofError) as raised:
            through.get(ns, budget, complete=True)
        assert proxy.replaced >= 1
        assert "does not chain" in str(raised.value), str(raised.value)
    finally:
        proxy.close()
    assert db.get(ns, budget, complete=True)[":project/budget"] == ORIGINAL.decode()


def test_a_history_proven_whole(db, ns):
    r = db.transact(ns, [("t", ":task/owner", "alice"), ("t", ":task/title", "ship it")])
    task = r.temp_ids["t"]
    db.transact(ns, [engram.Retract(task, ":task/owner", "alice")])
    owner = db.history(ns, task, attribute=":task/owner", complete=True)
    assert [d.op for d in owner] == ["assert", "retract"]
    assert len(db.history(ns, task, complete=True)) == 3
    assert db.history(ns, task, attribute=":task/never", complete=True) == []
    # Up to the first transaction: the assertions alone, proven whole then.
    first = db.history(ns, task, complete=True, as_of_tx=r.tx)
    assert sorted(d.op for d in first) == ["assert", "assert"] and all(d.tx == r.tx for d in first)
    with pytest.raises(ValueError):
        db.history(ns, task, complete=True, limit=1)


def test_search_hits_proven_current_or_superseded(db, ns):
    r = db.transact(ns, [("t", ":task/owner", "zanzibar"), ("t", ":task/title", "quarterly numbers")])
    task = r.temp_ids["t"]
    db.transact(ns, [engram.Retract(task, ":task/owner", "zanzibar")])
    [held] = db.search(ns, "quarterly", current=True)
    assert held.current == "current"
    [gone] = db.search(ns, "zanzibar", as_of_tx=r.tx, current=True)
    assert gone.current == "superseded"
    assert db.search(ns, "quarterly")[0].current is None
