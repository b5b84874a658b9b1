"""Stand-in tuning records for the database tests: workloads, traces and records of known medians."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tuner.database import TuningRecord

ZEN1 = "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=1"
ZEN4 = "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=4"
SKX1 = "llvm -mcpu=skylake-avx512 -mattr=+avx2,+avx512f -num-threads=1"

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def trace_of(n: int) -> tuple[dict[str, Any], str]:
    """A stand-in trace (the store treats traces as opaque JSON) and its hash."""
    trace = {"version": 1, "instructions": [], "decisions": {"0": [n, 1]}}
    return trace, hashlib.sha256(json.dumps(trace, sort_keys=True).encode()).hexdigest()


def workload(op: str, **params: int) -> tuple[str, str, dict[str, int], dict[str, Any]]:
    key = hashlib.sha256(json.dumps([op, params], sort_keys=True).encode()).hexdigest()
    return key, op, params, {"format": "loomtune.workload/1", "name": op, "stand_in": True}


MATMUL = workload("matmul", m=64, n=64, k=64)
MATMUL_BIG = workload("matmul", m=128, n=128, k=128)
MATMUL_ODD = workload("matmul", m=65, n=63, k=64)
SOFTMAX = workload("softmax", m=64, n=64)


def record(
    wl: tuple[str, str, dict[str, int], dict[str, Any]],
    n: int,
    median: float | None,
    *,
    target: str = ZEN1,
    status: str = "ok",
    at: int = 0,
) -> TuningRecord:
    key, op, params, definition = wl
    trace, trace_hash = trace_of(n)
    times = (median, median) if median is not None else (0.5,)
    return TuningRecord(
        record_id=str(uuid.uuid4()),
        workload_key=key,
        op=op,
        params=params,
        definition=definition,
        target=target,
        trace=trace,
        trace_hash=trace_hash,
        run_times_ms=times,  # type: ignore[arg-type]
        median_ms=median if status == "ok" else None,
        status=status,
        message="" if status == "ok" else f"{status} on purpose",
        worker="test",
        loomtune_version="0.1.0",
        llvm_version="22.1.0",
        measured_at=T0 + timedelta(seconds=at),
    )
