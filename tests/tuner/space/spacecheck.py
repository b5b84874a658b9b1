"""Shared helpers for design-space tests: odd library shapes, compiling and checking a trace."""

from __future__ import annotations

import random
from typing import Any

from codegen.kernel import compile_program
from ir.target import Target
from ir.task import Task, library_task
from tuner.space import DesignSpace, SpaceRejected
from tuner.space.rules.base import UNROLL
from tuner.space.space import RuleSpace
from tuner.trace.trace import Trace
from workers.verify import empty_outputs, verify

# Every library operator at a small shape that is not a power of two (fast to compile).
ODD_SHAPES: dict[str, dict[str, int]] = {
    "matmul": {"m": 30, "n": 40, "k": 18},
    "batch_matmul": {"b": 3, "m": 10, "n": 24, "k": 9},
    "dense": {"m": 12, "n": 20, "k": 15, "bias": 1, "relu": 1},
    "conv2d_nhwc": {
        "n": 1,
        "h": 7,
        "w": 9,
        "ci": 6,
        "co": 12,
        "kh": 3,
        "kw": 3,
        "stride": 1,
        "pad": 1,
    },
    "conv2d_nchw": {
        "n": 1,
        "h": 9,
        "w": 7,
        "ci": 5,
        "co": 8,
        "kh": 3,
        "kw": 3,
        "stride": 2,
        "pad": 1,
    },
    "depthwise_conv2d_nhwc": {
        "n": 1,
        "h": 9,
        "w": 10,
        "c": 12,
        "kh": 3,
        "kw": 3,
        "stride": 1,
        "pad": 1,
    },
    "max_pool2d": {"n": 1, "h": 11, "w": 9, "c": 10, "kh": 3, "kw": 3, "stride": 2, "pad": 1},
    "avg_pool2d": {"n": 1, "h": 11, "w": 9, "c": 10, "kh": 3, "kw": 3, "stride": 2, "pad": 1},
    "softmax": {"m": 13, "n": 37},
    "layer_norm": {"m": 9, "n": 50},
    "reduce_sum": {"m": 3, "n": 100},
    "reduce_max": {"m": 20, "n": 33},
    "gelu": {"m": 13, "n": 70},
    "transpose": {"m": 30, "n": 17},
    "matmul_int8": {"m": 12, "n": 40, "k": 20},
    "dense_int8": {"m": 12, "n": 40, "k": 20},
    "conv2d_nhwc_int8": {
        "n": 1,
        "h": 5,
        "w": 6,
        "ci": 4,
        "co": 12,
        "kh": 3,
        "kw": 3,
        "stride": 1,
        "pad": 1,
    },
    "matmul_bf16": {"m": 12, "n": 40, "k": 18},
    "dense_bf16": {"m": 12, "n": 20, "k": 15, "bias": 1, "relu": 1},
    "batch_matmul_bf16": {"b": 2, "m": 6, "n": 24, "k": 9},
}

# A fixed AVX2 target: sampling does not compile, so sketches and traces do not depend on the host.
AVX2_2_THREADS = Target.parse("llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=2")


def odd_task(op: str) -> Task:
    return library_task(op, ODD_SHAPES[op])


def check_correct(task: Task, trace: Trace, target: Target) -> None:
    """Replay the (complete) trace, compile it, and compare with numpy on NaN-filled outputs."""
    kernel = compile_program(trace.apply(task.program).program, target)
    inputs = task.make_inputs(seed=5)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    reason = verify(outputs, task.reference(inputs), task.output_names, task.reduction_length)
    assert reason is None, f"{task.op}: {reason}\n{trace.as_python()}"


def samples(space: DesignSpace, rng: random.Random, count: int, max_tries: int) -> list[Trace]:
    """`count` accepted samples (rejections retried, at most `max_tries` draws in all)."""
    out: list[Trace] = []
    for _ in range(max_tries):
        if len(out) == count:
            break
        try:
            out.append(space.sample(rng))
        except SpaceRejected:
            continue
    assert len(out) == count, f"only {len(out)} of {count} samples accepted in {max_tries} draws"
    return out


def unrolls_by_nest(space: RuleSpace, rules: Trace) -> dict[str, Any]:
    """Each top-level nest's unroll decision in a rule part, by the nest's subject."""
    return {
        nest: rules.decisions[i]
        for i, (key, nest) in space.nest_subjects(rules).items()
        if key == UNROLL
    }
