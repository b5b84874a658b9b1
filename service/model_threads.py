"""At more than one thread, which schedule each task of a model runs: decided in the model.

Inside a model a kernel's time moves with its company: on a znver4 VM one depthwise task's
serial 1-thread schedule took 64 µs per call among serial neighbours and 150 µs among
parallel ones (docs/decisions.md, Models). So after tuning a model at more than one
thread, every task with both a best of the target's own and a different best tuned at
fewer threads is decided inside the model (`service.in_model`: two builds, alternating
rounds) — first every such task switched from its reigning schedule (what
`service.model` picks today) to the other, then only the switches that won, among
reigning neighbours. A switch stands where the other schedule was `MARGIN` faster both
times. The decision is the target's final choice, its in-model time the re-timed median:
the fewer-thread schedule's record on this target (stored from these in-model times when
the target has none), or the target's own; `service.model` builds from the final choice."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codegen.model import CompiledModel
from ir.errors import LoomtuneError
from ir.graph.plan import ModelPlan, PlanTask
from ir.program import Program
from ir.target import Target
from ir.task import schedule_keys
from service.in_model import alternate, commit_in_model
from service.model import best_record, fewer_thread_best, stored_schedules
from tuner.database import Database, TuningRecord, median_of
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace

MARGIN = 0.03
"""How much faster in the model the other schedule must be to replace the reigning one."""


@dataclass(frozen=True)
class ThreadChoice:
    """One task's decision: each schedule's median time per call inside the model (ms)."""

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
    first = alternate(reigning, build(everything))
    wins = _winners(first, everything)
    second = alternate(reigning, build(wins)) if wins else first
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
    if take_fewer and commit_in_model(database, canonical, task, pair.fewer, fewer_ms, model_name):
        return True
    commit_in_model(database, canonical, task, pair.own, own_ms)
    return False
