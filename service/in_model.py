"""Deciding between schedules inside the model: two builds timed in alternating rounds.

Tuning times a kernel back to back, alone. In a model a kernel follows other kernels: its
inputs were just written (at more than one thread, part of them by the other core), its
scratch and the arena compete for the caches, and the machine drifts between one
measurement and the next (on a shared VM by up to 2× over minutes). Two choices compared
by numbers taken minutes apart are compared by the phase they were taken in. So a choice
between schedules of a model's tasks (a thread count, `service.model_threads`; an
implementation, `service.model_implementations`) is made here: a reigning build and a
challenger build, each kernel call timed (`codegen.model_profile`) in alternating rounds,
so both see the same phases; the decision is stored as each task's final choice on the
target with its in-model median.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence

from codegen.host import llvm_version
from codegen.model import CompiledModel
from codegen.model_profile import task_times_ms
from ir.task import Task
from tuner.database import Database, TuningRecord, median_of
from tuner.runner import MeasureResult
from tuner.search.loop import make_record
from tuner.trace.trace import Trace

PROFILE_S = 2.0
"""About how long the alternating rounds take in all (at least MIN_ROUNDS of each build)."""
MIN_ROUNDS, MAX_ROUNDS = 5, 41

WORKER = "model profile"
"""The worker label of a record stored from in-model times."""

Times = dict[str, list[float]]
"""Per task key: its in-model time per call (ms) in each round."""


def alternate(reigning: CompiledModel, challenger: CompiledModel) -> tuple[Times, Times]:
    """Per task key, its in-model time per call in each round of each build (alternating):
    a kernel's time as a record holds it, whether the model calls it once or twice."""
    start = time.perf_counter()
    first = (_per_call(reigning), _per_call(challenger))
    per_round = (time.perf_counter() - start) / 2  # each call warms with one inference too
    rounds = max(MIN_ROUNDS, min(MAX_ROUNDS, math.ceil(PROFILE_S / max(per_round, 1e-6) / 2)))
    out: tuple[Times, Times] = ({}, {})
    for r in range(rounds):
        for model, times, seen in zip((reigning, challenger), out, first):
            got = seen if r == 0 else _per_call(model)
            for key, ms in got.items():
                times.setdefault(key, []).append(ms)
    return out


def _per_call(model: CompiledModel) -> dict[str, float]:
    calls = Counter(model.step_task(i).task.key for i in range(model.kernel_calls))
    return {key: ms / calls[key] for key, ms in task_times_ms(model, rounds=1).items()}


def commit_in_model(
    database: Database,
    canonical: str,
    task: Task,
    record: TuningRecord,
    times_ms: Sequence[float],
    model_name: str = "",
) -> TuningRecord | None:
    """Make `record`'s schedule `task`'s final choice on `canonical`, its time the median of
    `times_ms` (in-model, per call). A record tuned on another target (fewer threads) is stored on
    this one from those times first. The record now final, or None when this target holds
    that trace as failed (nothing is committed: that record stands)."""
    if record.target != canonical:
        found = database.find_record(task.key, canonical, record.trace_hash)
        if found is None:
            result = MeasureResult(
                "ok",
                tuple(times_ms),
                worker=WORKER,
                llvm_version=llvm_version(),
                message=f"timed inside model {model_name}".rstrip(),
            )
            found = make_record(task, canonical, Trace.from_json(record.trace), result)
            if not database.commit_record(found):
                return None
        record = found
    database.commit_final(record.workload_key, canonical, record.record_id, median_of(times_ms))
    return record
