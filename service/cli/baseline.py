"""What a kernel's time is compared with, named for what it is (DESIGN.md "Baselines").

A library float operator is compared with its numpy reference ("numpy"). An
integer or bf16 operator with numpy's float32 version of it on the same shapes
("numpy float32"): numpy's integer matmul has no BLAS and flatters every
kernel. A custom workload's reference is the DSL evaluator, a correctness
oracle and not numpy's speed: it is named "evaluator" and no speedup is claimed.
"""

from __future__ import annotations

from typing import Any

NUMPY = "numpy"
NUMPY_FLOAT32 = "numpy float32"
EVALUATOR = "evaluator"

_LOW_PRECISION_SUFFIXES = ("_int8", "_uint8", "_bf16")


def baseline_of(task: Any) -> str:
    """The baseline a task's kernel is timed against."""
    if task.is_custom:
        return EVALUATOR
    if any(not _is_wide_float(t.dtype) for t in task.workload.inputs):
        return NUMPY_FLOAT32
    return NUMPY


def _is_wide_float(dtype: str) -> bool:
    return dtype in ("float32", "float64")


def with_baseline(result: dict[str, Any], task: Any) -> dict[str, Any]:
    """`result` (run/apply/tune fields) with `baseline`, and the speedup only over numpy.

    For "numpy float32" `numpy_ms` is re-timed here (the comparison timed the
    integer reference); for "evaluator" it stays the evaluator's time and
    `speedup_vs_numpy` is null.
    """
    baseline = baseline_of(task)
    result["baseline"] = baseline
    latency = result.get("latency_ms")
    if baseline == EVALUATOR:
        result["speedup_vs_numpy"] = None
    elif baseline == NUMPY_FLOAT32 and latency:
        result["numpy_ms"] = float32_ms(task, result["threads"])
        result["speedup_vs_numpy"] = result["numpy_ms"] / latency
    return result


def float32_ms(task: Any, threads: int) -> float:
    """numpy's float32 version of `task` on the same shapes (its float sibling's reference,
    e.g. matmul for matmul_int8), limited to `threads`, median ms."""
    import numpy as np

    from ir.library import OPS
    from workers.compare import COMPARE_CONFIG
    from workers.machine import limit_numpy_threads
    from workers.timing import time_interleaved

    sibling = task.op
    for suffix in _LOW_PRECISION_SUFFIXES:
        sibling = sibling.removesuffix(suffix)
    opdef = OPS.get(sibling, task.opdef)
    inputs = [np.ascontiguousarray(x, dtype=np.float32) for x in task.make_inputs(0)]
    with limit_numpy_threads(threads):
        (timing,) = time_interleaved(
            [lambda: opdef.reference(task.params, *inputs)], COMPARE_CONFIG
        )
    return timing.median_ms


def vs_text(result: dict[str, Any]) -> str:
    """The table's "vs" cell of the kernel: a speedup over numpy, or "-" over the evaluator."""
    speedup = result.get("speedup_vs_numpy")
    return f"{speedup:.2f}x" if speedup is not None else "-"
