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


def baseline_of(task: Any) -> str:
    """The baseline a task's kernel is timed against: an operator with a float32 twin
    (`OpDef.float_twin`: the integer and bf16 ones) is timed against the twin."""
    if task.is_custom:
        return EVALUATOR
    if task.opdef.float_twin is not None:
        return NUMPY_FLOAT32
    return NUMPY


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
    """numpy's float32 version of `task` on the same shapes (the reference of its float twin,
    e.g. matmul for matmul_int8, dense with bias for dense_int8, on the twin's own float32
    inputs), limited to `threads`, median ms."""
    from ir.task import library_task
    from workers.compare import COMPARE_CONFIG
    from workers.machine import limit_numpy_threads
    from workers.timing import time_interleaved

    op, params = task.opdef.float_twin(task.params)
    twin = library_task(op, params)
    inputs = twin.make_inputs(0)
    with limit_numpy_threads(threads):
        (timing,) = time_interleaved(
            [lambda: twin.opdef.reference(twin.params, *inputs)], COMPARE_CONFIG
        )
    return timing.median_ms


def vs_text(result: dict[str, Any]) -> str:
    """The table's "vs" cell of the kernel: a speedup over numpy, or "-" over the evaluator."""
    speedup = result.get("speedup_vs_numpy")
    return f"{speedup:.2f}x" if speedup is not None else "-"
