"""The worker's wire format (`workers/protocol.py`) against the coordinator's schemas (`service/coordinator/schemas.py`).

Each protocol message names the pydantic model it mirrors; they must agree on
field names, types (after JSON: UUIDs are text, Literals their values' type,
tuples lists), which fields are required, and defaults. A change to a worker
schema that `workers/protocol.py` does not follow fails here.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
import typing
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import pytest
from pydantic import BaseModel

from service.coordinator import schemas as S
from workers import protocol as P

ROOT = Path(__file__).resolve().parents[2]


def _norm(t: Any) -> Any:
    """A type as its JSON shape, comparable across pydantic models and protocol dataclasses."""
    origin = typing.get_origin(t)
    if origin is Annotated:
        return _norm(typing.get_args(t)[0])
    if origin in (Union, types.UnionType):
        return ("union", frozenset(_norm(a) for a in typing.get_args(t)))
    if origin is Literal:
        return _norm(type(typing.get_args(t)[0]))
    if origin in (list, tuple):
        return ("list", _norm(typing.get_args(t)[0]))
    if origin is dict:
        key, value = typing.get_args(t)
        return ("dict", _norm(key), _norm(value))
    if t is uuid.UUID:
        return str
    if isinstance(t, type) and issubclass(t, BaseModel):
        return ("message", t.__name__)
    if isinstance(t, type) and issubclass(t, P.Message):
        return ("message", t.SCHEMA)
    return t


def _default(value: Any) -> Any:
    return list(value) if isinstance(value, list | tuple) else value


def mismatches(message: type[P.Message], model: type[BaseModel]) -> list[str]:
    """How a protocol message and a pydantic model disagree (empty: they agree)."""
    problems: list[str] = []
    ours = {f.name: f for f in dataclasses.fields(message)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(message)
    theirs = model.model_fields
    for name in sorted(set(theirs) - set(ours)):
        problems.append(f"{model.__name__}.{name} is missing from {message.__name__}")
    for name in sorted(set(ours) - set(theirs)):
        problems.append(f"{message.__name__}.{name} is not a field of {model.__name__}")
    for name in sorted(set(ours) & set(theirs)):
        info, f = theirs[name], ours[name]
        if _norm(info.annotation) != _norm(hints[name]):
            problems.append(
                f"{name}: {model.__name__} says {info.annotation!r}, {message.__name__} says {hints[name]!r}"
            )
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if info.is_required() != required:
            problems.append(
                f"{name}: required in {'the schema' if info.is_required() else message.__name__} only"
            )
        elif not required:
            theirs_default = info.get_default(call_default_factory=True)
            ours_default = (
                f.default if f.default is not dataclasses.MISSING else f.default_factory()
            )  # type: ignore[misc]
            if _default(theirs_default) != _default(ours_default):
                problems.append(
                    f"{name}: default {theirs_default!r} in the schema, {ours_default!r} in {message.__name__}"
                )
    return problems


@pytest.mark.parametrize("message", P.MESSAGES, ids=lambda m: m.__name__)
def test_every_message_matches_its_schema(message: type[P.Message]) -> None:
    model = getattr(S, message.SCHEMA)
    assert mismatches(message, model) == []


def test_a_changed_schema_is_caught() -> None:
    class WithExtraField(S.ResultIn):
        cpu_temperature: float = 0.0

    class WithOtherType(S.ResultIn):
        run_times_ms: list[int]  # type: ignore[assignment]

    class WithRequiredMessage(S.ResultIn):
        message: str  # type: ignore[assignment]

    assert any("cpu_temperature" in p for p in mismatches(P.Result, WithExtraField))
    assert any(p.startswith("run_times_ms:") for p in mismatches(P.Result, WithOtherType))
    assert any(p.startswith("message: required") for p in mismatches(P.Result, WithRequiredMessage))


def test_every_worker_route_speaks_protocol_messages() -> None:
    """The workers router's bodies and answers (but the admin's list) all have a protocol twin."""
    from fastapi.routing import APIRoute

    from service.coordinator.routes.workers import router

    mirrored = {m.SCHEMA for m in P.MESSAGES}
    seen = set()
    for route in router.routes:
        assert isinstance(route, APIRoute)
        assert route.path.startswith(P.API_PREFIX)
        if route.methods == {"GET"}:
            continue  # the admin's worker list
        models = [route.response_model]
        if route.body_field is not None:
            body = (
                route.body_field.field_info.annotation
            )  # `LeaseRequest | None` where the body is optional
            models += [a for a in typing.get_args(body) if a is not type(None)] or [body]
        for model in models:
            assert model.__name__ in mirrored, (
                f"{route.path}: {model.__name__} has no twin in workers/protocol.py"
            )
            seen.add(route.path.removeprefix(P.API_PREFIX))
    assert seen == {
        "",
        "/{worker_id}/heartbeat",
        "/{worker_id}/lease",
        "/{worker_id}/results",
        "/{worker_id}/release",
    }
    assert (
        P.MAX_LEASE_BATCH == S.MAX_LEASE_BATCH and P.MAX_RESULTS_PER_POST == S.MAX_RESULTS_PER_POST
    )
    assert set(typing.get_args(S.RecordStatus)) == set(P.STATUSES)


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _replies() -> list[BaseModel]:
    candidate = S.LeasedCandidate(
        candidate_id=7,
        job_id=3,
        workload_key="ab" * 32,
        workload={"op": "matmul", "params": {"m": 16}},
        target="llvm -mcpu=znver3 -num-threads=1",
        trace={"version": 1, "instructions": []},
        trace_hash="cd" * 32,
        attempt=2,
        lease_expires_at=NOW,
    )
    return [
        S.WorkerRegistered(
            id=1,
            name="w",
            owner=None,
            target="llvm -mcpu=znver3 -num-threads=1",
            registered_at=NOW,
            last_heartbeat=NOW,
            alive=True,
            leases=0,
            lease_seconds=60.0,
            heartbeat_seconds=10.0,
        ),
        S.HeartbeatOut(
            worker_id=1,
            leases_extended=2,
            lease_expires_at=NOW,
            lease_seconds=60,
            heartbeat_seconds=10,
        ),
        S.LeaseOut(candidates=[candidate], lease_seconds=60.0, heartbeat_seconds=10.0),
        S.LeaseOut(candidates=[], lease_seconds=60.0, heartbeat_seconds=10.0),
        S.ResultsOut(accepted=[7], duplicates=[8]),
        S.ReleaseOut(released=[1, 2]),
    ]


@pytest.mark.parametrize("reply", _replies(), ids=lambda r: type(r).__name__)
def test_replies_read_by_the_worker_mean_the_same(reply: BaseModel) -> None:
    (message,) = [m for m in P.MESSAGES if type(reply).__name__ == m.SCHEMA]
    wire = reply.model_dump(mode="json")
    read = message.from_json(wire)
    assert type(reply).model_validate(read.to_json()) == reply
    assert (
        message.from_json({**wire, "added_later": 1}) == read
    )  # new fields of the coordinator are ignored


def _requests() -> list[P.Message]:
    ok = P.Result(
        candidate_id=7,
        record_id=str(uuid.uuid4()),
        status="ok",
        run_times_ms=(0.5, 0.25, 0.75),
        loomtune_version="0.1.0",
        llvm_version="22.1.0",
    )
    crashed = P.Result(
        candidate_id=8, record_id=str(uuid.uuid4()), status="crashed", message="SIGSEGV"
    )
    return [
        P.Register(name="host:1 cores=0", target="llvm -mcpu=znver3 -mattr=+avx2 -num-threads=1"),
        P.LeaseRequest(),
        P.LeaseRequest(max_candidates=4),
        P.ResultsPost(results=(ok, crashed)),
        P.ReleaseRequest(),
        P.ReleaseRequest(candidate_ids=(3, 4)),
    ]


@pytest.mark.parametrize("request_message", _requests(), ids=lambda r: type(r).__name__)
def test_requests_sent_by_the_worker_are_valid_bodies(request_message: P.Message) -> None:
    model = getattr(S, request_message.SCHEMA)
    parsed = model.model_validate(request_message.to_json())
    assert type(request_message).from_json(parsed.model_dump(mode="json")) == request_message


def test_bad_replies_are_protocol_errors() -> None:
    with pytest.raises(P.ProtocolError, match="missing field 'lease_seconds'"):
        P.LeaseReply.from_json({"candidates": [], "heartbeat_seconds": 1})
    with pytest.raises(P.ProtocolError, match="expected an integer"):
        P.ResultsReply.from_json({"accepted": [True], "duplicates": []})
    with pytest.raises(P.ProtocolError, match="ISO 8601"):
        P.HeartbeatReply.from_json(
            {
                "worker_id": 1,
                "leases_extended": 0,
                "lease_expires_at": "soon",
                "lease_seconds": 1,
                "heartbeat_seconds": 1,
            }
        )
    with pytest.raises(P.ProtocolError, match="status"):
        P.Result(candidate_id=1, record_id="x", status="fine")


def test_workers_import_no_service_frameworks() -> None:
    """DESIGN.md: only service/ imports FastAPI, pydantic's schemas or SQLAlchemy; the daemon speaks protocol.py."""
    code = (
        "import sys, workers.daemon, workers.protocol, workers.pool, workers.process\n"
        "print(sorted(m for m in ('fastapi', 'pydantic', 'sqlalchemy', 'starlette', 'service') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
