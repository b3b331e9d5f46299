"""An asyncio face of `engram.Engram`.

Each call runs the synchronous client in a worker thread (`asyncio.to_thread`); the client
releases the GIL while it waits for the cluster, so many calls proceed at once and the event
loop is never blocked. Semantics, arguments and exceptions are those of `engram.Engram`.

    from engram.aio import AsyncEngram

    db = AsyncEngram(["127.0.0.1:7001"], agent="planner")
    receipts = await asyncio.gather(*(db.transact("team/a", [(f"t{i}", ":task/n", i)]) for i in range(10)))
    async for event in db.watch("team/a", from_tx=receipts[0].tx):
        ...
"""

import asyncio
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Optional

from . import Branch, Diff, Engram, Entity, Receipt, TxEvent

__all__ = ["AsyncEngram", "AsyncWatch"]

# How often a waiting watch hands control back, so cancelling its task takes effect promptly.
_WATCH_POLL_S = 0.5


class AsyncWatch:
    """An open watch as an async iterator of `TxEvent`s."""

    def __init__(self, watch) -> None:
        self._watch = watch

    def __aiter__(self) -> "AsyncWatch":
        return self

    async def __anext__(self) -> TxEvent:
        while True:
            try:
                event = await asyncio.to_thread(self._watch.next, _WATCH_POLL_S)
            except StopIteration:
                raise StopAsyncIteration from None
            if event is not None:
                return event

    async def next(self, timeout_s: float) -> Optional[TxEvent]:
        """The next transaction, or None if none arrives within `timeout_s`."""
        return await asyncio.to_thread(self._watch.next, timeout_s)

    def close(self) -> None:
        self._watch.close()


class AsyncEngram:
    """`engram.Engram` with awaitable calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sync = Engram(*args, **kwargs)

    @property
    def agent(self) -> Optional[str]:
        return self.sync.agent

    async def transact(self, namespace: str, ops, **kwargs: Any) -> Receipt:
        return await asyncio.to_thread(self.sync.transact, namespace, ops, **kwargs)

    async def apply_schema(self, namespace: str, attributes, **kwargs: Any) -> Receipt:
        return await asyncio.to_thread(self.sync.apply_schema, namespace, attributes, **kwargs)

    async def get(self, namespace: str, entity, **kwargs: Any) -> Entity:
        return await asyncio.to_thread(self.sync.get, namespace, entity, **kwargs)

    async def history(self, namespace: str, entity=None, **kwargs: Any):
        return await asyncio.to_thread(self.sync.history, namespace, entity, **kwargs)

    async def find(self, namespace: str, attribute: str, value=None, **kwargs: Any):
        return await asyncio.to_thread(self.sync.find, namespace, attribute, value, **kwargs)

    async def search(self, namespace: str, text: str = "", **kwargs: Any):
        return await asyncio.to_thread(self.sync.search, namespace, text, **kwargs)

    async def diff(self, namespace: str, from_tx: int, to_tx: int = 0, **kwargs: Any) -> Diff:
        return await asyncio.to_thread(self.sync.diff, namespace, from_tx, to_tx, **kwargs)

    async def branch_diff(self, namespace: str, branch: str, **kwargs: Any) -> Diff:
        return await asyncio.to_thread(self.sync.branch_diff, namespace, branch, **kwargs)

    async def create_branch(self, namespace: str, name: str, **kwargs: Any) -> Receipt:
        return await asyncio.to_thread(self.sync.create_branch, namespace, name, **kwargs)

    async def merge_branch(self, namespace: str, name: str, **kwargs: Any) -> Receipt:
        return await asyncio.to_thread(self.sync.merge_branch, namespace, name, **kwargs)

    async def abandon_branch(self, namespace: str, name: str, **kwargs: Any) -> Receipt:
        return await asyncio.to_thread(self.sync.abandon_branch, namespace, name, **kwargs)

    async def redact(self, namespace: str, entity: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.sync.redact, namespace, entity, **kwargs)

    async def whoami(self):
        return await asyncio.to_thread(self.sync.whoami)

    def __getattr__(self, name: str) -> Any:
        """Every other call of `Engram` (schema, branches, agents, grants, roles, ...), awaitable
        the same way."""
        attr = getattr(self.sync, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(attr, *args, **kwargs)

        call.__name__ = name
        call.__doc__ = attr.__doc__
        return call

    def watch(self, namespace: str, **kwargs: Any) -> AsyncWatch:
        return AsyncWatch(self.sync.watch(namespace, **kwargs))

    @asynccontextmanager
    async def branch(self, namespace: str, name: str, *, from_tx: Optional[int] = None,
                     agent: Optional[str] = None) -> AsyncIterator[Branch]:
        """As `Engram.branch`: merged when the block ends normally, abandoned when it raises.
        The yielded `Branch` makes synchronous calls."""
        await self.create_branch(namespace, name, from_tx=from_tx, agent=agent)
        try:
            yield Branch(self.sync, namespace, name)
        except BaseException:
            await self.abandon_branch(namespace, name, agent=agent)
            raise
        await self.merge_branch(namespace, name, agent=agent)
