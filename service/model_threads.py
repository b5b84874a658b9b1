"""At more than one thread, which schedule each task of a model runs: decided in the model.

Tuning times a kernel back to back: the same call again and again, the pool's workers
hot, its data in their caches. In a model a kernel follows other kernels, its inputs
written by one core or by both, and its time moves with that: on a znver4 VM one
depthwise task's serial 1-thread schedule took 64 µs per call among serial neighbours
and 150 µs among parallel ones (docs/decisions.md, Models). So after tuning a model at
more than one thread, every task with both a best of the target's own and a different
best tuned at fewer threads is decided inside the model: two builds, alternating
rounds, each kernel call timed (`codegen.model_profile`) — first every such task
switched from its reigning schedule (what `service.model` picks today) to the other,
then only the switches that won, among reigning neighbours. A switch stands where the
other schedule was `MARGIN` faster both times. The decision is the target's final
choice, its in-model time the re-timed median: the fewer-thread schedule's record on
this target (stored from these in-model times when the target has none), or the
target's own; `service.model` builds from the final choice."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codegen.host import llvm_version
from codegen.model import CompiledModel
from codegen.model_profile import task_times_ms
from ir.errors import LoomtuneError
from ir.graph.plan import ModelPlan, PlanTask
from ir.program import Program
from ir.target import Target
from ir.task import schedule_keys
from service.model import best_record, fewer_thread_best, stored_schedules
from tuner.database import Database, TuningRecord, median_of
from tuner.runner import MeasureResult
from tuner.search.loop import make_record
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace

MARGIN = 0.03
"""How much faster in the model the other schedule must be to replace the reigning one."""

PROFILE_S = 2.0
"""About how long the alternating rounds take in all (at least MIN_ROUNDS of each build)."""
MIN_ROUNDS, MAX_ROUNDS = 5, 41

WORKER = "model profile"
"""The worker label of a record stored from in-model times."""


@dataclass(frozen=True)
class ThreadChoice:
    """One task's decision: each schedule's median time inside the model (ms per inference)."""

    key: str
    pattern: str
    own_ms: float
    fewer_ms: float
    fewer: bool
    """Whether the fewer-thread schedule runs (else the target's own best)."""


@dataclass(frozen=True)
class _Pair:
    plan_task: PlanTask
    own: TuningRecord
    fewer: TuningRecord
    own_program: Program
    fewer_program: Program
    reigning_fewer: bool


def settle_thread_counts(
    plan: ModelPlan,
    target: Target,
    database: Database,
    inputs: Sequence[np.ndarray],
    *,
    model_name: str = "",
) -> list[ThreadChoice]:
    """Decide, in the model, between each task's own best on `target` and its best at
    fewer threads (see the module docstring); the decisions are committed as final
    choices. Nothing to decide at one thread."""
    if target.num_threads <= 1:
        return []
    canonical = target.canonical()
    pairs = _pairs(plan, canonical, database)
    if not pairs:
        return []
    base = dict(stored_schedules(plan, canonical, database=database).programs)

    def build(switched: set[str]) -> CompiledModel:
        """The model with each pair's reigning schedule, but the other one for `switched`."""
        programs = dict(base)
        for p in pairs:
            fewer = p.reigning_fewer != (p.plan_task.task.key in switched)
            programs[p.plan_task.task.key] = p.fewer_program if fewer else p.own_program
        model = CompiledModel(plan, programs, target)
        model.set_inputs(*inputs)
        return model

    # Every task switched at once; then the switches that won there, now among reigning
    # neighbours: where a kernel's inputs were written (by one core or by both) moves its
    # time, so a switch stands only where it wins in that company too.
    reigning = build(set())
    everything = {p.plan_task.task.key for p in pairs}
    first = _alternate(reigning, build(everything))
    wins = _winners(first, everything)
    second = _alternate(reigning, build(wins)) if wins else first
    kept = _winners(second, wins)
    choices = []
    for p in pairs:
        key = p.plan_task.task.key
        r_ms, c_ms = second if key in wins else first
        own_ms, fewer_ms = (c_ms[key], r_ms[key]) if p.reigning_fewer else (r_ms[key], c_ms[key])
        take_fewer = p.reigning_fewer != (key in kept)
        took = _commit(database, canonical, p, take_fewer, own_ms, fewer_ms, model_name)
        choices.append(
            ThreadChoice(key, p.plan_task.pattern, median_of(own_ms), median_of(fewer_ms), took)
        )
    return choices


def challenger_wins(reigning_ms: float, challenger_ms: float) -> bool:
    """The reigning schedule keeps its place unless the other is `MARGIN` faster."""
    return challenger_ms < reigning_ms * (1 - MARGIN)


def _winners(
    measured: tuple[dict[str, list[float]], dict[str, list[float]]], keys: set[str]
) -> set[str]:
    """Those of `keys` whose challenger (the second build) beat the reigning schedule."""
    reigning, challenger = measured
    return {k for k in keys if challenger_wins(median_of(reigning[k]), median_of(challenger[k]))}


def _pairs(plan: ModelPlan, canonical: str, database: Database) -> list[_Pair]:
    """The tasks with two different bests to decide between, and which reigns now."""
    out = []
    for t in plan.tasks:
        keys = schedule_keys(t.task)
        own = database.best(keys[0], canonical)
        fewer = fewer_thread_best(database, keys[:1], canonical)
        if own is None or fewer is None or own.trace_hash == fewer.trace_hash:
            continue
        try:
            own_program = Trace.from_json(own.trace).apply(t.task.program).program
            fewer_program = Trace.from_json(fewer.trace).apply(t.task.program).program
        except (TraceError, LoomtuneError):
            continue  # `stored_schedules` reports what does not replay
        reigning, _ = best_record(database, keys[:1], canonical)
        reigning_fewer = reigning is not None and reigning.record_id == fewer.record_id
        out.append(_Pair(t, own, fewer, own_program, fewer_program, reigning_fewer))
    return out


def _alternate(
    reigning: CompiledModel, challenger: CompiledModel
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per task key, its in-model time in each round of each build (alternating)."""
    start = time.perf_counter()
    first = (task_times_ms(reigning, rounds=1), task_times_ms(challenger, rounds=1))
    per_round = (time.perf_counter() - start) / 2  # each call warms with one inference too
    rounds = max(MIN_ROUNDS, min(MAX_ROUNDS, math.ceil(PROFILE_S / max(per_round, 1e-6) / 2)))
    out: tuple[dict[str, list[float]], dict[str, list[float]]] = ({}, {})
    for r in range(rounds):
        for model, times, seen in zip((reigning, challenger), out, first):
            got = seen if r == 0 else task_times_ms(model, rounds=1)
            for key, ms in got.items():
                times.setdefault(key, []).append(ms)
    return out


def _commit(
    database: Database,
    canonical: str,
    pair: _Pair,
    take_fewer: bool,
    own_ms: Sequence[float],
    fewer_ms: Sequence[float],
    model_name: str,
) -> bool:
    """Commit the decision; whether the fewer-thread schedule is now the final choice (not
    when its trace failed on this target before: that record stands)."""
    task = pair.plan_task.task
    if take_fewer:
        record = database.find_record(task.key, canonical, pair.fewer.trace_hash)
        if record is None:
            result = MeasureResult(
                "ok",
                tuple(fewer_ms),
                worker=WORKER,
                llvm_version=llvm_version(),
                message=f"timed inside model {model_name}".rstrip(),
            )
            record = make_record(task, canonical, Trace.from_json(pair.fewer.trace), result)
            if not database.commit_record(record):
                take_fewer = False
        if take_fewer:
            database.commit_final(task.key, canonical, record.record_id, median_of(fewer_ms))
            return True
    database.commit_final(task.key, canonical, pair.own.record_id, median_of(own_ms))
    return False
