"""The DSL evaluator (custom and fused workloads' reference): right, and bounded in memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import ir.evaluate
from ir.evaluate import evaluate
from ir.task import library_task

CONV = {"n": 1, "h": 28, "w": 28, "ci": 32, "co": 32, "kh": 3, "kw": 3, "stride": 1, "pad": 1}


def test_a_batch_one_convolution_is_evaluated_a_few_rows_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks used to split only the first axis: at batch 1 a convolution's whole grid
    (output × reduction, 7.2 M elements here, 441 MiB for ResNet-18's 56² layer) was one
    chunk, and fused model tasks failed their reference with MemoryError."""
    task = library_task("conv2d_nhwc", CONV)
    inputs = task.make_inputs(seed=0)
    (expected,) = task.opdef.reference(task.params, *inputs)
    monkeypatch.setattr(ir.evaluate, "_CHUNK_ELEMENTS", 1 << 16)
    tracemalloc.start()
    try:
        (got,) = evaluate(task.workload, inputs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    grid = 28 * 28 * 32 * 3 * 3 * 32
    assert peak < grid  # under one byte per grid element: the int64 index grid alone is 8


@pytest.mark.parametrize("chunk", [1, 7, 1 << 22])
def test_every_chunking_gives_the_same_answer(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    task = library_task("dense", {"m": 5, "n": 6, "k": 7, "bias": 1, "relu": 1})
    inputs = task.make_inputs(seed=1)
    (expected,) = task.opdef.reference(task.params, *inputs)
    monkeypatch.setattr(ir.evaluate, "_CHUNK_ELEMENTS", chunk)
    (got,) = evaluate(task.workload, inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
