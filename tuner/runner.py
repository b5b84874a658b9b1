"""What the tuning loop asks of a measurement back end: the `Runner` protocol.

A runner takes candidates (complete traces of one task) and, for each, gives
back a `MeasureResult`. The embedded `loomtune tune` uses the local pool of
measurement processes (`workers/pool.py`); the coordinator uses a runner that
writes candidates to the database and waits for remote workers; tests use the
deterministic simulated runner (`tuner/simulated.py`). The loop is the same.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ir.task import Task
from tuner.database import STATUSES, DatabaseError
from tuner.trace.trace import Trace


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of measuring one candidate.

    Attributes:
        status: one of `tuner.database.STATUSES`; only "ok" has run times
            that count (a wrong result is never a time).
        run_times_ms: one per-call time per repeat, in the order they ran.
        message: why it failed ("" when ok).
        worker: who measured it (a process, a machine).
        compile_ms: time spent lowering and compiling (0 when unknown).
        llvm_version: the LLVM that compiled it ("" when unknown).
        extra: anything else a runner wants to report (e.g. calls per repeat).
    """

    status: str
    run_times_ms: tuple[float, ...] = ()
    message: str = ""
    worker: str = ""
    compile_ms: float = 0.0
    llvm_version: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise DatabaseError(
                f"result status must be one of {', '.join(STATUSES)}, got {self.status!r}"
            )
        times = tuple(float(t) for t in self.run_times_ms)
        if self.status == "ok" and (
            not times or not all(math.isfinite(t) and t > 0 for t in times)
        ):
            raise DatabaseError(f"an ok result needs positive run times, got {times!r}")
        object.__setattr__(self, "run_times_ms", times if self.status == "ok" else ())

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def median_ms(self) -> float | None:
        return float(statistics.median(self.run_times_ms)) if self.ok else None

    @staticmethod
    def failure(status: str, message: str, worker: str = "") -> MeasureResult:
        return MeasureResult(status, (), message, worker)


@runtime_checkable
class RunnerFuture(Protocol):
    """A result that may not have arrived yet."""

    def done(self) -> bool: ...

    def result(self, timeout: float | None = None) -> MeasureResult:
        """Wait for the result (runners turn their own failures into failed results)."""


@runtime_checkable
class Runner(Protocol):
    """Measures candidates of one task on one target.

    `submit` returns at once with one future per candidate, in order; the
    runner decides where and when each is measured. `close` stops everything
    the runner started (processes, threads); pending futures end as failures.
    """

    def submit(self, task: Task, target: str, traces: Sequence[Trace]) -> list[RunnerFuture]: ...

    def close(self) -> None: ...


class ReadyFuture:
    """A future whose result is already known (simulated and synchronous runners)."""

    def __init__(self, result: MeasureResult) -> None:
        self._result = result

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> MeasureResult:
        return self._result
