"""Request and response bodies of the REST API (v1), as pydantic models.

These are the wire format: the worker daemon's `workers/protocol.py` and the
Python client speak them, and a contract test holds them together. Strings
that reach the database refuse NUL and control characters here (PostgreSQL
cannot store NUL), so bad input is a 422 naming the field, never a 500.
"""

from __future__ import annotations

import math
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    field_validator,
    model_validator,
)

from service.coordinator.tokens import OWNER_PATTERN
from tuner.database import STATUSES

MAX_ID = 2_147_483_647
"""Ids are 32-bit integers in the database."""
MAX_LEASE_BATCH = 256
"""The most candidates one lease call hands out."""
MAX_RESULTS_PER_POST = 1024


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a boolean")
    return value


class _JsonBounds:
    """Bounds as JSON Schema spells them: behind `_not_bool` pydantic writes `ge`/`le`,
    keywords no client or schemathesis reads (it then generated 0 for a minimum of 1)."""

    def __get_pydantic_json_schema__(self, core: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core)
        for ours, theirs in (("ge", "minimum"), ("le", "maximum")):
            if ours in schema:
                schema[theirs] = schema.pop(ours)
        return schema


Int = Annotated[int, Strict(), BeforeValidator(_not_bool)]
"""An integer as JSON spells one: "4", 4.0 and true are refused (no coercion). Bounded, it
is written `Annotated[Int, Field(ge=..., le=...), BOUNDS]`."""
BOUNDS = _JsonBounds()

FLOAT32_MAX = 3.4028234663852886e38
MAX_DEFINITION_DEPTH = 64


def finite_json(value: Any, path: str = "", depth: int = 0) -> None:
    """Refuse what the database cannot store or a float32 kernel cannot mean: non-finite
    numbers, floats beyond float32, integers beyond 32 bits; the error names the path."""
    if depth > MAX_DEFINITION_DEPTH:
        raise ValueError(f"{path or 'value'}: nested more than {MAX_DEFINITION_DEPTH} deep")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
            raise ValueError(
                f"{path or 'value'}: {value!r} is not a finite float32 number"
                ' (use {"const": "inf", "dtype": ...} for an infinity)'
            )
    elif isinstance(value, int):
        if abs(value) > MAX_ID:
            raise ValueError(f"{path or 'value'}: {value} does not fit a 32-bit integer")
    elif isinstance(value, dict):
        for k, v in value.items():
            finite_json(v, f"{path}.{k}" if path else str(k), depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            finite_json(v, f"{path}[{i}]", depth + 1)


_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
_NO_NUL = r"^[^\x00]*$"

Name = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=_PRINTABLE)]
TargetText = Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=_PRINTABLE)]
Owner = Annotated[str, StringConstraints(pattern=OWNER_PATTERN)]
Version = Annotated[str, StringConstraints(max_length=64, pattern=_PRINTABLE)]
Message = Annotated[str, StringConstraints(max_length=100_000, pattern=_NO_NUL)]
Id = Annotated[Int, Field(ge=1, le=MAX_ID), BOUNDS]
RecordStatus = Literal["ok", "compile_error", "runtime_error", "timeout", "wrong_result", "crashed"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
ShownStatus = Literal["queued", "waiting", "running", "succeeded", "failed", "cancelled"]
"""A job's status as shown: `waiting` is a queued or running job no live worker can measure."""
Role = Literal["admin", "client", "worker"]
Standing = Literal["local", "unconfirmed", "confirmed", "refuted", "quarantined", "invalid"]

assert set(RecordStatus.__args__) == set(STATUSES)  # type: ignore[attr-defined]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- jobs -----------------------------------------------------------------------------------


def _exactly_one(*names: str) -> ConfigDict:
    """A body with exactly one of these fields, as the OpenAPI schema says it: `oneOf` of
    `required`, and the fields not nullable there (null means absent: pydantic's nullable
    form would let `{"workload": null}` pass as the one field given)."""

    def extra(schema: dict[str, Any]) -> None:
        schema["oneOf"] = [{"required": [n]} for n in names]
        for name in names:
            field = schema["properties"][name]
            kinds = [k for k in field.pop("anyOf", []) if k != {"type": "null"}]
            if len(kinds) == 1:
                field.update(kinds[0])
            field.pop("default", None)

    return ConfigDict(extra="forbid", json_schema_extra=extra)


class WorkloadIn(_In):
    """A library operator with parameters, or a custom definition (`loomtune.workload/1`)."""

    model_config = _exactly_one("op", "definition")

    op: (
        Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=_PRINTABLE)] | None
    ) = Field(default=None, description="a library operator (`loomtune ops`)", examples=["matmul"])
    params: dict[
        Annotated[str, StringConstraints(max_length=64, pattern=_PRINTABLE)],
        Annotated[Int, Field(ge=-MAX_ID, le=MAX_ID), BOUNDS],
    ] = Field(
        default_factory=dict,
        description="parameters, name -> integer",
        examples=[{"m": 256, "n": 256, "k": 256}],
    )
    definition: dict[str, Any] | None = Field(
        default=None, description="a custom workload definition (loomtune.workload/1)"
    )

    @field_validator("definition")
    @classmethod
    def _storable(cls, definition: dict[str, Any] | None) -> dict[str, Any] | None:
        if definition is not None:
            finite_json(definition)
        return definition

    @model_validator(mode="after")
    def _one_kind(self) -> WorkloadIn:
        if (self.op is None) == (self.definition is None):
            raise ValueError(
                'a workload is {"op", "params"} or {"definition", "params"}: give exactly one of op, definition'
            )
        return self

    def spec(self) -> dict[str, Any]:
        if self.definition is not None:
            return {"definition": self.definition, "params": dict(self.params)}
        return {"op": self.op, "params": dict(self.params)}


class JobCreate(_In):
    model_config = _exactly_one("workload", "model")

    workload: WorkloadIn | None = Field(
        default=None, description="the workload to tune (or `model`, not both)"
    )
    model: dict[str, Any] | None = Field(
        default=None,
        description="a model's structure without its weights (loomtune.graph/1): its distinct "
        "tasks are tuned under one budget (or `workload`, not both)",
    )
    target: TargetText = Field(
        default="host",
        description="'host' (the CPU of this coordinator's workers) or 'llvm -mcpu=... -mattr=... -num-threads=N'",
    )
    trials: Annotated[
        Int,
        Field(ge=1, description="the budget: measurements to make (at most LOOMTUNE_MAX_TRIALS)"),
        BOUNDS,
    ]
    strategy: (
        Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=_PRINTABLE)] | None
    ) = Field(
        default=None,
        description="search strategy (default: evolutionary when it exists, else replay)",
    )
    seed: Annotated[Int, Field(ge=0, le=MAX_ID), BOUNDS] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> JobCreate:
        if (self.workload is None) == (self.model is None):
            raise ValueError("a job tunes a workload or a model: give exactly one of them")
        return self


class WorkloadRef(BaseModel):
    key: str
    op: str
    params: dict[str, int]
    spec: dict[str, Any] | None = Field(
        description="the workload as submitted ({op, params} or {definition, params})"
    )


class ModelTaskOut(BaseModel):
    key: str = Field(description="the task's workload key")
    op: str = Field(description='a library operator, or "fused"')
    pattern: str = Field(examples=["matmul+add+gelu"])
    count: int = Field(description="how often the model runs it")
    job_id: int = Field(description="the task's own job (its records and history)")
    trials: int = Field(description="trials measured for it so far")
    best_ms: float | None
    best_record_id: str | None
    share: float | None = Field(description="count × best_ms over the model's total")


class ModelOut(BaseModel):
    name: str
    model_key: str
    tasks: list[ModelTaskOut]


class JobOut(BaseModel):
    id: int
    owner: str
    status: ShownStatus
    workload: WorkloadRef | None = Field(description="None for a model job (see `model`)")
    model: ModelOut | None = Field(
        default=None,
        description="a model job's tasks; its best_latency_ms is the sum of count × best_ms",
    )
    target: str
    trials: int
    trials_done: int
    strategy: str
    seed: int | None
    best_latency_ms: float | None
    best_record_id: str | None
    error: str | None = Field(description="why the job failed")
    note: str | None = Field(default=None, description="a remark on a job that succeeded")
    waiting_reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class JobList(BaseModel):
    jobs: list[JobOut]


class HistoryPointOut(BaseModel):
    trial: int
    record_id: str
    status: RecordStatus
    latency_ms: float | None
    best_ms: float | None = Field(description="best median so far, ms (null before the first ok)")
    measured_at: datetime


class JobHistory(BaseModel):
    job_id: int
    status: JobStatus
    trials: int
    trials_done: int
    points: list[HistoryPointOut]


# -- records, workloads, schedules ----------------------------------------------------------


class RecordOut(BaseModel):
    record_id: str
    workload_key: str
    target: str
    job_id: int | None
    trace: dict[str, Any]
    trace_hash: str
    run_times_ms: list[float]
    median_ms: float | None
    status: RecordStatus
    message: str
    worker: str = Field(description="a display label (the worker's name)")
    worker_id: int | None = Field(
        default=None, description="the registered worker that posted it (None: measured locally)"
    )
    standing: Standing = "local"
    trusted_ms: float | None = Field(
        default=None, description="the time best ranks by (None: not confirmed)"
    )
    loomtune_version: str
    llvm_version: str
    measured_at: datetime


class RecordList(BaseModel):
    workload_key: str
    records: list[RecordOut]


class WorkloadOut(BaseModel):
    key: str
    op: str
    params: dict[str, int]
    records: int
    created_at: datetime


class WorkloadList(BaseModel):
    workloads: list[WorkloadOut]


class TraceFileOut(BaseModel):
    """A trace file (`loomtune.trace/1`): save it and `loomtune apply` replays it."""

    format: str
    workload: dict[str, Any]
    target: str
    trace: dict[str, Any]


class BestOut(BaseModel):
    workload_key: str
    op: str
    params: dict[str, int]
    target: str
    record_id: str
    measured_at: datetime
    latency_ms: float = Field(description="the stored median, ms")
    retimed_ms: float | None = Field(
        default=None,
        description="its median when a tuning run's finalists were re-timed together and chose it, ms",
    )
    run_times_ms: list[float]
    worker: str
    worker_id: int | None = None
    standing: Standing = "local"
    confirmed: bool = Field(
        default=True,
        description="false: no trusted record exists and this is one worker's unconfirmed word",
    )
    trusted_ms: float | None = Field(default=None, description="the confirmed time, ms")
    trace: dict[str, Any]
    trace_file: TraceFileOut


# -- tokens ---------------------------------------------------------------------------------


class TokenCreate(_In):
    role: Role
    owner: Owner | None = Field(
        default=None, description="who the token's jobs belong to (default: the role)"
    )


class TokenOut(BaseModel):
    id: int
    role: Role
    owner: str
    created_at: datetime
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    secret: str = Field(description="the bearer secret; shown this once, stored only as a hash")


class TokenList(BaseModel):
    tokens: list[TokenOut]


# -- workers --------------------------------------------------------------------------------


class WorkerRegister(_In):
    name: Name
    target: TargetText = Field(
        description="the worker's CPU: 'llvm -mcpu=... -mattr=... -num-threads=N'"
    )


class WorkerOut(BaseModel):
    id: int
    name: str
    owner: str | None
    target: str
    registered_at: datetime
    last_heartbeat: datetime
    alive: bool
    leases: int = Field(description="leases held now")
    strikes: int = Field(
        default=0,
        description="results refused as physically implausible, or doubted by a confirmer",
    )
    quarantined_at: datetime | None = Field(
        default=None, description="when its results failed confirmation (no more leases)"
    )
    quarantine_reason: str | None = None


class WorkerRegistered(WorkerOut):
    lease_seconds: float
    heartbeat_seconds: float


class WorkerList(BaseModel):
    workers: list[WorkerOut]


class HeartbeatOut(BaseModel):
    worker_id: int
    leases_extended: int
    held: list[int] = Field(
        default_factory=list, description="candidates this worker holds now (extended)"
    )
    lease_expires_at: datetime
    lease_seconds: float
    heartbeat_seconds: float


class LeaseRequest(_In):
    max_candidates: Annotated[Int, Field(ge=1, le=MAX_LEASE_BATCH), BOUNDS] = 1


class LeasedCandidate(BaseModel):
    candidate_id: int
    job_id: int
    workload_key: str
    workload: dict[str, Any] = Field(
        description="the workload spec ({op, params} or {definition, params})"
    )
    target: str
    trace: dict[str, Any]
    trace_hash: str
    attempt: int
    lease_expires_at: datetime


class LeaseOut(BaseModel):
    candidates: list[LeasedCandidate]
    lease_seconds: float
    heartbeat_seconds: float


class ResultIn(_In):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [  # an ok result has at least one run time
                {"properties": {"status": {"not": {"const": "ok"}}}},
                {"required": ["run_times_ms"], "properties": {"run_times_ms": {"minItems": 1}}},
            ]
        },
    )

    candidate_id: Id
    record_id: uuid.UUID = Field(
        description="a UUID the worker gives the measurement; posting it again is a no-op"
    )
    status: RecordStatus
    run_times_ms: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=list, max_length=100_000
    )
    message: Message = ""
    loomtune_version: Version = ""
    llvm_version: Version = ""

    @model_validator(mode="after")
    def _ok_has_times(self) -> ResultIn:
        if self.status == "ok" and not self.run_times_ms:
            raise ValueError("an ok result needs at least one run time (run_times_ms)")
        return self

    @field_validator("run_times_ms")
    @classmethod
    def _finite(cls, times: list[float]) -> list[float]:
        if not all(math.isfinite(t) for t in times):
            raise ValueError("run times must be finite")
        return times


class ResultsIn(_In):
    results: list[ResultIn] = Field(min_length=1, max_length=MAX_RESULTS_PER_POST)


class ResultsOut(BaseModel):
    accepted: list[int] = Field(description="candidates this post finished")
    duplicates: list[int] = Field(
        description="candidates whose result (same record id) was already accepted"
    )


class ReleaseIn(_In):
    candidate_ids: list[Id] | None = Field(
        default=None, description="leases to hand back (default: all)", max_length=10_000
    )


class ReleaseOut(BaseModel):
    released: list[int]


# -- health ---------------------------------------------------------------------------------


class Health(BaseModel):
    status: Literal["ok"]
    schema_revision: str
