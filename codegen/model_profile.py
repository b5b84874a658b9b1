"""Where a compiled model's time goes: each kernel call timed alone, summed per task.

A kernel's time inside a model is not its time called back to back: its inputs were just
written by other kernels (at more than one thread, part of them in another core's cache),
and the pool's workers come from other regions. This times each call of an inference as it
runs, one after another on what the arena holds; the Python call around each (about a
microsecond) is counted in, so tiny kernels read a little slow.
"""

from __future__ import annotations

import time

import numpy as np

from codegen.model import CompiledModel

ROUNDS = 5


def task_times_ms(model: CompiledModel, rounds: int = ROUNDS) -> dict[str, float]:
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
