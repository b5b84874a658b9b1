"""The worker's side of the coordinator's wire format (REST API v1, `/v1/workers`).

Plain frozen dataclasses with `to_json` / `from_json`: `workers/` imports no
FastAPI, pydantic or SQLAlchemy (DESIGN.md's import rules), so the worker
daemon speaks the API through these, and a contract test
(`tests/workers/test_protocol_contract.py`) holds each of them to its pydantic
model in `service/coordinator/schemas.py`: the same field names, the same types, the same
required fields. Change one side without the other and that test fails.

    POST /v1/workers                       Register        -> Registered
    POST /v1/workers/{id}/heartbeat        (no body)       -> HeartbeatReply
    POST /v1/workers/{id}/lease            LeaseRequest    -> LeaseReply (LeasedCandidate...)
    POST /v1/workers/{id}/results          ResultsPost     -> ResultsReply   (409: a lease no longer held)
    POST /v1/workers/{id}/release          ReleaseRequest  -> ReleaseReply

Replies are read leniently (fields the coordinator adds later are ignored);
a missing or mistyped field is a `ProtocolError`. Times are timezone-aware
`datetime`s on this side and ISO 8601 text on the wire.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, TypeVar, Union

from ir.errors import LoomtuneError
from tuner.database import STATUSES

API_PREFIX = "/v1/workers"

T = TypeVar("T", bound="Message")


class ProtocolError(LoomtuneError):
    """A message that does not have the shape this worker expects (another loomtune version?)."""


class Message:
    """Base of the wire messages: JSON out (`to_json`) and in (`from_json`), by the dataclass's fields."""

    SCHEMA: ClassVar[str]
    """The name of the pydantic model in `service/coordinator/schemas.py` this message mirrors."""

    def to_json(self) -> dict[str, Any]:
        assert dataclasses.is_dataclass(self)
        return {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls: type[T], data: Any) -> T:
        if not isinstance(data, dict):
            raise ProtocolError(
                f"{cls.__name__}: expected a JSON object, got {type(data).__name__}"
            )
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise ProtocolError(f"{cls.__name__}: missing field {f.name!r}")
                continue
            values[f.name] = _load(hints[f.name], data[f.name], f"{cls.__name__}.{f.name}")
        return cls(**values)


def _dump(value: Any) -> Any:
    if isinstance(value, Message):
        return value.to_json()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _load(hint: Any, value: Any, where: str) -> Any:
    """`value` (JSON) as the Python type `hint`; ProtocolError naming `where` when it is not one."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None:
            if type(None) in args:
                return None
            raise ProtocolError(f"{where}: null where a value is required")
        (inner,) = [a for a in args if a is not type(None)]
        return _load(inner, value, where)
    if hint is Any:
        return value
    if origin is tuple:
        inner = typing.get_args(hint)[0]
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_load(inner, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object, got {type(value).__name__}")
        return dict(value)
    if isinstance(hint, type) and issubclass(hint, Message):
        return hint.from_json(value)
    if hint is datetime:
        if not isinstance(value, str):
            raise ProtocolError(f"{where}: expected an ISO 8601 time, got {type(value).__name__}")
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise ProtocolError(f"{where}: not an ISO 8601 time: {value!r}") from None
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ProtocolError(f"{where}: expected a number, got {type(value).__name__}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProtocolError(f"{where}: expected an integer, got {type(value).__name__}")
        return value
    if hint in (str, bool):
        if not isinstance(value, hint):
            raise ProtocolError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
        return value
    raise TypeError(f"{where}: no wire form for {hint!r}")  # a bug in this module


# -- register -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Register(Message):
    """POST /v1/workers: the worker's name and its CPU, `llvm -mcpu=... -mattr=... -num-threads=N`."""

    SCHEMA: ClassVar[str] = "WorkerRegister"
    name: str
    target: str


@dataclass(frozen=True)
class Registered(Message):
    """The answer to registration: the worker's id, and how often to heartbeat (s) and how long leases last (s)."""

    SCHEMA: ClassVar[str] = "WorkerRegistered"
    id: int
    name: str
    owner: str | None
    target: str
    registered_at: datetime
    last_heartbeat: datetime
    alive: bool
    leases: int
    lease_seconds: float
    heartbeat_seconds: float
    strikes: int = 0
    quarantined_at: datetime | None = None
    quarantine_reason: str | None = None


# -- heartbeat ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HeartbeatReply(Message):
    """POST /v1/workers/{id}/heartbeat (no body): every lease still held now lasts until `lease_expires_at`."""

    SCHEMA: ClassVar[str] = "HeartbeatOut"
    worker_id: int
    leases_extended: int
    lease_expires_at: datetime
    lease_seconds: float
    heartbeat_seconds: float
    held: tuple[int, ...] = ()


# -- lease --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseRequest(Message):
    """POST /v1/workers/{id}/lease: up to `max_candidates` (1-256) candidates of the worker's target."""

    SCHEMA: ClassVar[str] = "LeaseRequest"
    max_candidates: int = 1


@dataclass(frozen=True)
class LeasedCandidate(Message):
    """One candidate to measure: the workload spec, the target and the trace (JSON as `Trace.to_json`)."""

    SCHEMA: ClassVar[str] = "LeasedCandidate"
    candidate_id: int
    job_id: int
    workload_key: str
    workload: dict[str, Any]
    target: str
    trace: dict[str, Any]
    trace_hash: str
    attempt: int
    lease_expires_at: datetime


@dataclass(frozen=True)
class LeaseReply(Message):
    SCHEMA: ClassVar[str] = "LeaseOut"
    candidates: tuple[LeasedCandidate, ...]
    lease_seconds: float
    heartbeat_seconds: float


# -- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result(Message):
    """One measurement of a leased candidate.

    `record_id` is a UUID the worker gives the measurement when it is made; a
    post that may not have arrived is resent with the same id, and the
    coordinator stores it once. `status` is one of `tuner.database.STATUSES`;
    only `ok` has run times (ms, positive and finite).
    """

    SCHEMA: ClassVar[str] = "ResultIn"
    candidate_id: int
    record_id: str
    status: str
    run_times_ms: tuple[float, ...] = ()
    message: str = ""
    loomtune_version: str = ""
    llvm_version: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ProtocolError(
                f"Result.status must be one of {', '.join(STATUSES)}, got {self.status!r}"
            )


MAX_RESULTS_PER_POST = 1024
"""`service.coordinator.schemas.MAX_RESULTS_PER_POST`: the most results one post may carry."""
MAX_LEASE_BATCH = 256
"""`service.coordinator.schemas.MAX_LEASE_BATCH`: the most candidates one lease call hands out."""
MAX_MESSAGE_CHARS = 100_000
MAX_VERSION_CHARS = 64


@dataclass(frozen=True)
class ResultsPost(Message):
    SCHEMA: ClassVar[str] = "ResultsIn"
    results: tuple[Result, ...]


@dataclass(frozen=True)
class ResultsReply(Message):
    """`accepted`: candidates this post finished; `duplicates`: already finished by the same record id."""

    SCHEMA: ClassVar[str] = "ResultsOut"
    accepted: tuple[int, ...]
    duplicates: tuple[int, ...]


# -- release ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseRequest(Message):
    """POST /v1/workers/{id}/release: hand back the named leases (None: every lease the worker holds)."""

    SCHEMA: ClassVar[str] = "ReleaseIn"
    candidate_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ReleaseReply(Message):
    SCHEMA: ClassVar[str] = "ReleaseOut"
    released: tuple[int, ...]


MESSAGES: tuple[type[Message], ...] = (
    Register,
    Registered,
    HeartbeatReply,
    LeaseRequest,
    LeasedCandidate,
    LeaseReply,
    Result,
    ResultsPost,
    ResultsReply,
    ReleaseRequest,
    ReleaseReply,
)
"""Every message, each mirroring the schema named by its `SCHEMA`."""
