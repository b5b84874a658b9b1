"""Where a compiled model's time goes: each kernel call timed alone, summed per task.

A whole model's speed-up from a second core is the time-weighted mean of its tasks'
speed-ups; this says which tasks hold it back (a kernel the search left serial, a small
one whose fork-join costs more than its work, one bound by memory bandwidth). Each call
runs on what the arena holds, as in an inference, one after another; the Python call
around each (about a microsecond) is counted in, so tiny kernels read a little slow.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

ROUNDS = 5


def task_times_ms(model: Any, rounds: int = ROUNDS) -> dict[str, float]:
    """Per task key: the median over `rounds` inferences of its kernels' summed time, ms."""
    steps = model.kernel_calls
    keys = [model.step_task(i).task.key for i in range(steps)]
    model.run()  # warm: caches, the pool's workers
    per_step = np.empty((rounds, steps))
    for r in range(rounds):
        for i in range(steps):
            start = time.perf_counter_ns()
            model.run_step(i)
            per_step[r, i] = time.perf_counter_ns() - start
    medians = np.median(per_step, axis=0) / 1e6
    out: dict[str, float] = {}
    for key, ms in zip(keys, medians):
        out[key] = out.get(key, 0.0) + float(ms)
    return out


def annotate(tasks: list[dict[str, Any]], times: dict[str, float]) -> None:
    """Each task of a row's `task_list` gets `ms` (per inference) and `time_share`."""
    total = sum(times.values()) or 1.0
    by_prefix = {key[:12]: ms for key, ms in times.items()}
    for t in tasks:
        ms = by_prefix.get(t["key"])
        if ms is not None:
            t["ms"] = ms
            t["time_share"] = ms / total


def scaling(one: list[dict[str, Any]], more: list[dict[str, Any]]) -> None:
    """Each task of a row above one thread gets `x_own_1thread`: its 1-thread ms over its ms."""
    single = {t["key"]: t.get("ms") for t in one}
    for t in more:
        base, ms = single.get(t["key"]), t.get("ms")
        if base and ms:
            t["x_own_1thread"] = base / ms
