"""Type stubs of the extension module (the Rust client behind `engram`)."""

import datetime
from os import PathLike
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

Value = Union[str, int, float, bool, bytes, datetime.datetime, "Keyword", "Ref", "Vector", Dict[str, Any], List[Any]]
EntityArg = Union[int, str, "Ref", "Lookup"]
Time = Union[datetime.datetime, int]
Op = Union["Assert", "Retract", Tuple[EntityArg, str, Value]]

class Keyword:
    """A keyword value such as `:status/open`."""
    name: str
    def __init__(self, name: str) -> None: ...

class Vector:
    """An embedding value: finite floats (stored as 32-bit), as many as the attribute's schema dimension."""
    values: List[float]
    def __init__(self, values: List[float]) -> None: ...
    def __len__(self) -> int: ...

class Ref:
    """A reference to an entity of the same namespace."""
    id: int
    def __init__(self, id: int) -> None: ...
    def __int__(self) -> int: ...

class Lookup:
    """The entity whose current value of a unique attribute is `value`."""
    attribute: str
    value: Value
    def __init__(self, attribute: str, value: Value) -> None: ...

class Assert:
    """Assert `value` for `attribute` of `entity` (a str names a new entity)."""
    entity: EntityArg
    attribute: str
    value: Value
    valid_from: Optional[Time]
    valid_to: Optional[Time]
    def __init__(
        self,
        entity: EntityArg,
        attribute: str,
        value: Value,
        *,
        valid_from: Optional[Time] = None,
        valid_to: Optional[Time] = None,
    ) -> None: ...

class Retract:
    """Retract `value` of `attribute` of `entity`."""
    entity: EntityArg
    attribute: str
    value: Value
    def __init__(self, entity: EntityArg, attribute: str, value: Value) -> None: ...

class Datom:
    """One recorded fact."""
    namespace: str
    branch: Optional[str]
    entity: int
    attribute: str
    value: Value
    op: str  # "assert" | "retract"
    valid_from_ns: int
    valid_to_ns: Optional[int]
    tx: int
    agent: str
    session: str
    source: str
    confidence: float
    status: str  # "candidate" | "verified"
    hash: bytes
    redacted: Optional[str]  # why the value is withheld or gone (value is then None): grants, or a redaction

class Receipt:
    """What a committed transaction returns."""
    tx: int
    tx_time_ns: int
    audit_index: int
    audit_hash: bytes
    temp_ids: Dict[str, int]
    datom_hashes: List[bytes]

class Entity:
    """An entity's current facts."""
    id: int
    datoms: List[Datom]
    conflicts: List[Datom]
    applied_tx: int
    proven: bool
    complete: bool  # proven complete and current (get(..., complete=True))
    unfolded: List[str]  # with complete: attributes whose live claims were taken as sent
    expired_at_ns: Optional[int]
    def __getitem__(self, attribute: str) -> Any: ...
    def __contains__(self, attribute: str) -> bool: ...
    def get(self, attribute: str, default: Any = None) -> Any: ...
    def to_dict(self) -> Dict[str, Any]: ...

class Hit:
    """A fact `search` found."""
    datom: Datom
    score: float  # the fused score; hits come best first
    signals: List[Tuple[str, int]]  # (signal, rank): "text", "recency", "prior"; rank 1 is first
    conflicting: bool  # another hit is another agent's different claim on the same slot
    seq: int  # the datom's position in its transaction
    current: Optional[str]  # search(..., current=True): "current" | "superseded" | "unknown" | "not-on-main"

class Diff:
    asserted: List[Datom]
    retracted: List[Datom]
    main_changed: List[Datom]
    to_tx: int
    truncated: bool

class Rows(Iterable[Tuple[Any, ...]]):
    """A join's answer; iterating it yields the rows."""
    columns: List[str]
    rows: List[Tuple[Any, ...]]
    as_of_tx: int
    rows_read: int
    plan: List[Dict[str, Any]]
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Tuple[Any, ...]]: ...

class TxEvent:
    tx: int
    tx_time_ns: int
    audit_index: int
    datoms: List[Datom]

class Watch(Iterator[TxEvent]):
    def __iter__(self) -> "Watch": ...
    def __next__(self) -> TxEvent: ...
    def next(self, timeout_s: float) -> Optional[TxEvent]:
        """The next transaction, or None if none arrives within `timeout_s`."""
    def close(self) -> None: ...

class Pages(Iterator[Datom]):
    """The datoms of a history or find, read a page at a time as the iteration needs them."""
    as_of_tx: Optional[int]
    def __iter__(self) -> "Pages": ...
    def __next__(self) -> Datom: ...

class Client:
    agent: Optional[str]
    endpoints: List[str]
    def __init__(
        self,
        endpoints: Union[str, Sequence[str]],
        *,
        agent_key: Optional[Union[str, PathLike]] = None,
        agent: Optional[str] = None,
        timeout_s: float = 10.0,
        connect_timeout_s: float = 2.0,
        retry_budget_s: float = 15.0,
        tls_ca: Optional[Union[str, PathLike]] = None,
        tls_cert: Optional[Union[str, PathLike]] = None,
        tls_key: Optional[Union[str, PathLike]] = None,
        trust_keys: Optional[Sequence[str]] = None,
    ) -> None: ...
    def transact(
        self,
        namespace: str,
        ops: Iterable[Op],
        *,
        agent: Optional[str] = None,
        session: Optional[str] = None,
        source: Optional[str] = None,
        confidence: float = 1.0,
        status: str = "candidate",
        idempotency_key: Optional[str] = None,
        branch: Optional[str] = None,
        preconditions: Optional[Iterable[Tuple[Union[int, Ref], str, Optional[Value]]]] = None,
    ) -> Receipt: ...
    def apply_schema(
        self,
        namespace: str,
        attributes: Iterable[Dict[str, Any]],
        *,
        agent: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Receipt: ...
    def get(
        self,
        namespace: str,
        entity: Union[int, Ref],
        *,
        as_of_tx: Optional[int] = None,
        valid_at: Optional[Time] = None,
        branch: Optional[str] = None,
        rule: str = "latest",
        verified_only: bool = False,
        prove: bool = False,
        stale: bool = False,
        include_expired: bool = False,
        as_of_time: Optional[Time] = None,
        complete: bool = False,
    ) -> Entity: ...
    def history(
        self,
        namespace: str,
        entity: Optional[Union[int, Ref]] = None,
        *,
        attribute: Optional[str] = None,
        limit: int = 0,
        branch: Optional[str] = None,
        prove: bool = False,
        stale: bool = False,
        as_of_tx: Optional[int] = None,
        as_of_time: Optional[Time] = None,
        since_tx: Optional[int] = None,
        valid_at: Optional[Time] = None,
        complete: bool = False,
    ) -> List[Datom]: ...
    def iter_history(
        self,
        namespace: str,
        entity: Optional[Union[int, Ref]] = None,
        *,
        attribute: Optional[str] = None,
        page_size: int = 0,
        branch: Optional[str] = None,
        stale: bool = False,
        as_of_tx: Optional[int] = None,
        as_of_time: Optional[Time] = None,
        since_tx: Optional[int] = None,
        valid_at: Optional[Time] = None,
    ) -> Pages: ...
    def find(
        self,
        namespace: str,
        attribute: str,
        value: Optional[Value] = None,
        *,
        as_of_tx: Optional[int] = None,
        limit: int = 0,
        branch: Optional[str] = None,
        stale: bool = False,
        include_expired: bool = False,
        as_of_time: Optional[Time] = None,
        since_tx: Optional[int] = None,
        valid_at: Optional[Time] = None,
    ) -> List[Datom]: ...
    def iter_find(
        self,
        namespace: str,
        attribute: str,
        value: Optional[Value] = None,
        *,
        as_of_tx: Optional[int] = None,
        page_size: int = 0,
        branch: Optional[str] = None,
        stale: bool = False,
        include_expired: bool = False,
        as_of_time: Optional[Time] = None,
        since_tx: Optional[int] = None,
        valid_at: Optional[Time] = None,
    ) -> Pages: ...
    def namespaces(self, *, limit: int = 0, stale: bool = False) -> List[str]: ...
    def entities(
        self,
        namespace: str,
        attribute: Optional[str] = None,
        *,
        as_of_tx: Optional[int] = None,
        as_of_time: Optional[Time] = None,
        limit: int = 0,
        stale: bool = False,
    ) -> List[int]: ...
    def referrers(
        self,
        namespace: str,
        entity: Union[int, Ref],
        *,
        attribute: Optional[str] = None,
        as_of_tx: Optional[int] = None,
        as_of_time: Optional[Time] = None,
        valid_at: Optional[Time] = None,
        limit: int = 0,
        stale: bool = False,
    ) -> List[Datom]: ...
    def query(
        self,
        namespace: str,
        find: Sequence[str],
        where: Iterable[Tuple[Any, ...]],
        *,
        branch: Optional[str] = None,
        as_of_tx: Optional[int] = None,
        as_of_time: Optional[Time] = None,
        valid_at: Optional[Time] = None,
        include_expired: bool = False,
        limit: int = 0,
        max_rows_read: int = 0,
        explain: bool = False,
        stale: bool = False,
    ) -> Rows: ...
    def search(
        self,
        namespace: str,
        text: str = "",
        *,
        vector: Optional[List[float]] = None,
        hops: Optional[int] = None,
        k: int = 10,
        as_of_tx: Optional[int] = None,
        attributes: Optional[List[str]] = None,
        agents: Optional[List[str]] = None,
        verified_only: bool = False,
        valid_between_ns: Optional[Tuple[int, int]] = None,
        kinds: Optional[List[str]] = None,
        branch: Optional[str] = None,
        prove: bool = False,
        stale: bool = False,
        include_expired: bool = False,
        as_of_time: Optional[Time] = None,
        current: bool = False,
    ) -> List[Hit]: ...
    def diff(
        self,
        namespace: str,
        from_tx: int,
        to_tx: int = 0,
        *,
        entity: Optional[Union[int, Ref]] = None,
        limit: int = 0,
        stale: bool = False,
        valid_at: Optional[Time] = None,
    ) -> Diff: ...
    def branch_diff(
        self, namespace: str, branch: str, *, entity: Optional[Union[int, Ref]] = None, limit: int = 0
    ) -> Diff: ...
    def create_branch(
        self, namespace: str, name: str, *, from_tx: Optional[int] = None, agent: Optional[str] = None
    ) -> Receipt: ...
    def merge_branch(self, namespace: str, name: str, *, agent: Optional[str] = None) -> Receipt: ...
    def abandon_branch(self, namespace: str, name: str, *, agent: Optional[str] = None) -> Receipt: ...
    def redact(
        self,
        namespace: str,
        entity: Union[int, Ref],
        *,
        reason: str,
        attribute: Optional[str] = None,
        dry_run: bool = False,
        agent: Optional[str] = None,
    ) -> Dict[str, Any]: ...
    def watch(
        self,
        namespace: str,
        *,
        from_tx: int = 0,
        attribute: Optional[str] = None,
        entity: Optional[Union[int, Ref]] = None,
        branch: Optional[str] = None,
    ) -> Watch: ...
    def schema(self, namespace: str, *, as_of_tx: Optional[int] = None, stale: bool = False) -> Dict[str, Any]: ...
    def branches(self, namespace: str, *, stale: bool = False) -> List[Dict[str, Any]]: ...
    def whoami(self) -> Dict[str, Any]: ...
    # Agents, grants and roles: audited changes of engram.system; each returns
    # {"tx", "audit_index"} and is never retried.
    def create_agent(self, name: str, key_path: Union[str, PathLike]) -> Dict[str, Any]: ...
    def add_agent(self, name: str, public_key: Union[str, bytes]) -> Dict[str, Any]: ...
    def revoke_agent(self, name: str) -> Dict[str, Any]: ...
    def grant(
        self, principal: str, actions: Union[str, Sequence[str]], prefix: str = "", *, attribute: str = ""
    ) -> Dict[str, Any]: ...
    def revoke_grant(
        self, principal: str, actions: Union[str, Sequence[str]], prefix: str = "", *, attribute: str = ""
    ) -> Dict[str, Any]: ...
    def assign_role(self, agent: str, role: str) -> Dict[str, Any]: ...
    def unassign_role(self, agent: str, role: str) -> Dict[str, Any]: ...
    def agents(self) -> List[Dict[str, Any]]: ...
    def grants(self, principal: Optional[str] = None) -> List[Dict[str, Any]]: ...
    # The access log: who read what, and when (each node logs what it served), and every
    # call a node refused.
    def redact_where(
        self,
        namespace: str,
        *,
        reason: str,
        attribute: Optional[str] = None,
        written_by: Optional[str] = None,
        value: Any = None,
        before_tx: Optional[int] = None,
        written_before_ns: Optional[int] = None,
        valid_from_before_ns: Optional[int] = None,
        everything: bool = False,
        dry_run: bool = False,
        agent: Optional[str] = None,
    ) -> Dict[str, Any]: ...
    def set_retention(self, namespace: str, keep_ms: int, *, attribute: Optional[str] = None) -> Dict[str, Any]: ...
    def set_retention_versions(
        self, namespace: str, keep_versions: int, *, attribute: Optional[str] = None
    ) -> Dict[str, Any]: ...
    def retention(self) -> List[Dict[str, Any]]: ...
    def open_session(self, namespace: str, ttl_ms: int) -> Dict[str, Any]: ...
    def renew_session(self, namespace: str, ttl_ms: int) -> Dict[str, Any]: ...
    def end_session(self, namespace: str) -> Dict[str, Any]: ...
    def sessions(self) -> Dict[str, List[Dict[str, Any]]]: ...
    def set_access_log(self, prefix: str, enabled: bool = True) -> Dict[str, Any]: ...
    def access_events(
        self,
        namespace: str = "",
        *,
        principal: str = "",
        since_ns: Optional[int] = None,
        limit: int = 1000,
        refused_only: bool = False,
    ) -> List[Dict[str, Any]]: ...
    def jobs(self, kind: str = "", *, limit: int = 20) -> List[Dict[str, Any]]: ...

def keygen(name: str, path: Union[str, PathLike]) -> str:
    """Writes a new agent key file (mode 0600, never overwriting); returns its public key (hex)."""

class EngramError(Exception):
    code: str
    message: str

class InvalidArgument(EngramError): ...
class NotFound(EngramError): ...
class AlreadyExists(EngramError): ...
class PermissionDenied(EngramError): ...
class Unauthenticated(EngramError): ...
class PreconditionFailed(EngramError): ...
class ResourceExhausted(EngramError): ...
class OutOfRange(EngramError): ...
class Unavailable(EngramError): ...
class DeadlineExceeded(EngramError): ...
class Aborted(EngramError): ...
class Internal(EngramError): ...
class DataLoss(EngramError): ...
class ProofError(EngramError): ...
