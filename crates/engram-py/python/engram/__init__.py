"""Engram: a replicated, verifiable memory shared by many agents.

    from engram import Engram, Assert, Retract, Keyword, Ref, Lookup

    db = Engram(["127.0.0.1:7001", "127.0.0.1:7002"], agent="planner")
    r = db.transact("team/a", [("alice", ":person/name", "Alice")])
    alice = r.temp_ids["alice"]
    db.get("team/a", alice)[":person/name"]        # 'Alice'

Every call goes to whichever node answers; writes reach the leader, failures in transit are
retried on another node (with an idempotency key, so nothing applies twice), and requests are
signed with the agent key when one is given. Errors are exceptions carrying the gRPC code and
the server's message (`PreconditionFailed`, `PermissionDenied`, ...). `prove=True` reads are
checked against Merkle proofs and signed checkpoints; a failure raises `ProofError` and
returns nothing.
"""

from contextlib import contextmanager
from typing import Iterator, Optional

from ._engram import (
    Aborted,
    AlreadyExists,
    Assert,
    Client,
    DataLoss,
    Datom,
    DeadlineExceeded,
    Diff,
    EngramError,
    Entity,
    Hit,
    Internal,
    InvalidArgument,
    Keyword,
    Lookup,
    NotFound,
    OutOfRange,
    Pages,
    PermissionDenied,
    PreconditionFailed,
    ProofError,
    Receipt,
    Ref,
    ResourceExhausted,
    Retract,
    Rows,
    TxEvent,
    Unauthenticated,
    Unavailable,
    Vector,
    Watch,
    keygen,
)

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Assert",
    "Branch",
    "Client",
    "DataLoss",
    "Datom",
    "DeadlineExceeded",
    "Diff",
    "Engram",
    "EngramError",
    "Entity",
    "Hit",
    "Internal",
    "InvalidArgument",
    "Keyword",
    "Lookup",
    "NotFound",
    "OutOfRange",
    "Pages",
    "PermissionDenied",
    "PreconditionFailed",
    "ProofError",
    "Receipt",
    "Ref",
    "ResourceExhausted",
    "Retract",
    "Rows",
    "TxEvent",
    "Unauthenticated",
    "Unavailable",
    "Vector",
    "Watch",
    "keygen",
]


class Branch:
    """Reads and writes bound to one open branch of a namespace (see `Engram.branch`)."""

    def __init__(self, db: "Engram", namespace: str, name: str) -> None:
        self.db = db
        self.namespace = namespace
        self.name = name

    def transact(self, ops, **kwargs) -> Receipt:
        return self.db.transact(self.namespace, ops, branch=self.name, **kwargs)

    def get(self, entity, **kwargs) -> Entity:
        return self.db.get(self.namespace, entity, branch=self.name, **kwargs)

    def history(self, entity=None, **kwargs):
        return self.db.history(self.namespace, entity, branch=self.name, **kwargs)

    def find(self, attribute: str, value=None, **kwargs):
        return self.db.find(self.namespace, attribute, value, branch=self.name, **kwargs)

    def search(self, text: str = "", **kwargs):
        return self.db.search(self.namespace, text, branch=self.name, **kwargs)

    def diff(self, **kwargs) -> Diff:
        return self.db.branch_diff(self.namespace, self.name, **kwargs)

    def __repr__(self) -> str:
        return f"Branch({self.namespace!r}, {self.name!r})"


class Engram(Client):
    """A client of an Engram cluster (see `Client` for every call)."""

    @contextmanager
    def branch(
        self,
        namespace: str,
        name: str,
        *,
        from_tx: Optional[int] = None,
        agent: Optional[str] = None,
    ) -> Iterator[Branch]:
        """Speculate on a branch: it is merged into main when the block ends normally, and
        abandoned (its writes never reach main) when the block raises."""
        self.create_branch(namespace, name, from_tx=from_tx, agent=agent)
        try:
            yield Branch(self, namespace, name)
        except BaseException:
            self.abandon_branch(namespace, name, agent=agent)
            raise
        self.merge_branch(namespace, name, agent=agent)
