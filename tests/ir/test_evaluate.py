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


CASES = [
    ("dense", {"m": 5, "n": 6, "k": 7, "bias": 1, "relu": 1}),
    ("conv2d_nchw", {"n": 2, "h": 7, "w": 6, "ci": 3, "co": 4, "stride": 2, "pad": 2}),
    ("depthwise_conv2d_nhwc", {"n": 1, "h": 6, "w": 6, "c": 5, "stride": 2}),
    ("softmax", {"m": 3, "n": 9}),
    ("layer_norm", {"m": 4, "n": 10}),
    ("batch_matmul", {"b": 2, "m": 3, "n": 4, "k": 5}),
    ("avg_pool2d", {"n": 1, "h": 5, "w": 5, "c": 2}),
]


@pytest.mark.parametrize("chunk", [1, 7, 1 << 22])
@pytest.mark.parametrize(("op", "params"), CASES)
def test_every_chunking_gives_the_library_references_answer(
    op: str, params: dict[str, int], chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Products of loads are contracted by einsum, anything else over the whole grid: both
    agree with the numpy reference whatever the chunk size."""
    task = library_task(op, params)
    inputs = task.make_inputs(seed=1)
    expected = task.opdef.reference(task.params, *inputs)
    monkeypatch.setattr(ir.evaluate, "_CHUNK_ELEMENTS", chunk)
    for got, want in zip(evaluate(task.workload, inputs), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_axes_no_factor_reads_are_broadcast_or_counted() -> None:
    """An output axis no factor reads (BERT's batch of 1 indexed by a constant) is
    broadcast; a reduction axis no factor reads multiplies by its extent."""
    from ir import compute as te

    a = te.placeholder((4, 5), name="A")
    b = te.placeholder((5, 3), name="B")
    r = te.reduce_axis(5, name="r")
    s = te.reduce_axis(2, name="s")
    c = te.compute((2, 4, 3), lambda z, i, j: te.sum(a[i, r] * b[r, j], axis=[r]), name="C")
    d = te.compute((4, 3), lambda i, j: te.sum(a[i, r] * b[r, j], axis=[r, s]), name="D")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 5), np.float32), rng.standard_normal((5, 3), np.float32)
    got_c, got_d = evaluate(te.Workload("w", [a, b], [c, d]), [x, y])
    np.testing.assert_allclose(got_c, np.broadcast_to(x @ y, (2, 4, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_d, 2 * (x @ y), rtol=1e-5, atol=1e-5)
