"""Every library operator, at odd shapes, compiles and matches its numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.kernel import compile_program
from ir.library import OPS
from ir.task import library_task
from tests.ir.library.param_sets import PARAM_SETS
from workers.verify import empty_outputs, verify

CASES = [(op, params) for op in OPS for params in PARAM_SETS[op]]


@pytest.mark.parametrize(
    ("op", "params"), CASES, ids=[f"{o}-{'-'.join(map(str, p.values()))}" for o, p in CASES]
)
def test_default_nest_is_correct(op: str, params: dict[str, int]) -> None:
    task = library_task(op, params)
    kernel = compile_program(task.program)
    inputs = task.make_inputs(seed=1)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    refs = task.reference(inputs)
    for out, ref in zip(outputs, refs):
        assert out.shape == ref.shape and out.dtype == ref.dtype
    assert verify(outputs, refs, task.output_names, task.reduction_length) is None


def test_param_sets_cover_the_extents() -> None:
    for op in OPS:
        values = {v for p in PARAM_SETS[op] for v in p.values()}
        assert {1, 7, 127, 1000} <= values, op
        assert len(PARAM_SETS[op]) >= 3, op


def test_outputs_are_reset_so_a_silent_kernel_fails() -> None:
    task = library_task("matmul", {"m": 4, "n": 4, "k": 4})
    outputs = empty_outputs(task.output_specs())  # the kernel is never called
    refs = task.reference(task.make_inputs())
    assert verify(outputs, refs, task.output_names, task.reduction_length) is not None


def test_tolerance_rejects_all_zero_softmax() -> None:
    task = library_task("softmax", {"m": 8, "n": 16})
    (ref,) = task.reference(task.make_inputs())
    reason = verify([np.zeros_like(ref)], [ref], ["Y"], task.reduction_length)
    assert reason is not None and "tolerance" in reason


def test_tolerance_rejects_layer_norm_with_unbiased_variance() -> None:
    task = library_task("layer_norm", {"m": 8, "n": 32})
    inputs = task.make_inputs()
    x, gamma, beta = inputs
    (ref,) = task.reference(inputs)
    mean = x.mean(-1, keepdims=True)
    wrong = ((x - mean) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + 1e-5) * gamma + beta).astype(
        np.float32
    )
    reason = verify([wrong], [ref], ["Y"], task.reduction_length)
    assert reason is not None and "tolerance" in reason
    # ... and the right formula passes.
    right = ((x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * gamma + beta).astype(
        np.float32
    )
    assert verify([right], [ref], ["Y"], task.reduction_length) is None


def test_integer_results_must_be_exact() -> None:
    task = library_task("matmul_int8", {"m": 4, "n": 5, "k": 6})
    inputs = task.make_inputs()
    (ref,) = task.reference(inputs)
    off = ref.copy()
    off[0, 0] += 1
    assert verify([off], [ref], ["C"]) is not None
