"""Which implementation each of a model's tasks runs (a conv directly or by Winograd):
decided in the model.

An implementation's stored time is its finalists' re-timing or its tuning median, each
taken alone at its own moment; choosing between two implementations by those compares
numbers taken minutes apart, and on a VM whose second vCPU has slow phases the choice
followed the phase (docs/decisions.md, Models: four of six 2-thread groups of ResNet-18
ran direct). So after tuning, every task with more than one tuned implementation is
decided inside the model (`service.in_model`): the reigning build (each task by its
fastest stored implementation, `Schedules.choose`) against one with every such task
switched to its fastest other; then only the switches that won, among reigning
neighbours. Both implementations' in-model medians become their final times on the
target, so `Schedules.choose` — compiling, running, inspecting, exporting the model —
picks what was faster in the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codegen.model import CompiledModel
from ir.graph.plan import ModelPlan
from ir.target import Target
from ir.task import Task, schedule_keys
from service.in_model import Times, alternate, commit_in_model
from service.model import Schedules, best_record, stored_schedules
from tuner.database import Database, median_of


@dataclass(frozen=True)
class ImplementationChoice:
    """One task's decision: each implementation's median time per call in the model (ms)."""

    pattern: str
    reigning: str
    challenger: str
    reigning_ms: float
    challenger_ms: float

    @property
    def switched(self) -> bool:
        """Whether the challenger runs now (it was faster in the model)."""
        return self.challenger_ms < self.reigning_ms


def settle_implementations(
    plan: ModelPlan,
    target: Target,
    database: Database,
    inputs: Sequence[np.ndarray],
    *,
    model_name: str = "",
) -> list[ImplementationChoice]:
    """Decide, in the model, between each task's tuned implementations (see the module
    docstring); the in-model times are committed as final choices."""
    canonical = target.canonical()
    schedules = stored_schedules(plan, canonical, database=database)
    reigning = schedules.choose(plan)
    contests = _contests(reigning, schedules)
    if not contests:
        return []

    def build(switched: set[str]) -> tuple[ModelPlan, CompiledModel]:
        """The model with each task's reigning implementation, but its challenger for the
        reigning keys in `switched`."""
        chosen = reigning.choose(
            lambda t: contests[t.task.key] if t.task.key in switched else t.implementation
        )
        model = CompiledModel(chosen, schedules.programs, target)
        model.set_inputs(*inputs)
        return chosen, model

    base_plan, base = build(set())
    everything = set(contests)
    first = _by_task(base_plan, base, *build(everything))
    wins = {k for k in everything if _faster(*first[k])}
    second = _by_task(base_plan, base, *build(wins)) if wins else {}
    choices = []
    for t in reigning.tasks:
        key = t.task.key
        if key not in contests:
            continue
        r_ms, c_ms = second[key] if key in wins else first[key]
        challenger = dict(t.implementations)[contests[key]]
        _commit(database, canonical, t.task, r_ms, model_name)
        _commit(database, canonical, challenger, c_ms, model_name)
        choices.append(
            ImplementationChoice(
                t.pattern, t.implementation, contests[key], median_of(r_ms), median_of(c_ms)
            )
        )
    return choices


def _contests(plan: ModelPlan, schedules: Schedules) -> dict[str, str]:
    """Per reigning task key with a tuned alternative: its fastest stored other one."""
    out = {}
    for t in plan.tasks:
        others = [
            (schedules.times.get(task.key, math.inf), name)
            for name, task in t.alternatives
            if schedules.tuned(task.key)
        ]
        if others and schedules.tuned(t.task.key):
            out[t.task.key] = min(others)[1]
    return out


def _by_task(
    base_plan: ModelPlan, base: CompiledModel, other_plan: ModelPlan, other: CompiledModel
) -> dict[str, tuple[list[float], list[float]]]:
    """Per reigning task key: its times in the base build and its counterpart's in the
    other (the same plan task, maybe another implementation), from alternating rounds."""
    times: tuple[Times, Times] = alternate(base, other)
    return {
        a.task.key: (times[0][a.task.key], times[1][b.task.key])
        for a, b in zip(base_plan.tasks, other_plan.tasks)
    }


def _faster(reigning_ms: list[float], challenger_ms: list[float]) -> bool:
    return median_of(challenger_ms) < median_of(reigning_ms)


def _commit(
    database: Database, canonical: str, task: Task, times_ms: list[float], model_name: str
) -> None:
    """Store the in-model time of the schedule the model ran for `task` as its final one."""
    record, _ = best_record(database, schedule_keys(task), canonical)
    if record is not None:
        commit_in_model(database, canonical, task, record, times_ms, model_name)
