"""The low-precision operators: QNN's int8 requantization pinned exactly, bf16 references from
the widened values, verification inputs that exercise the rounding, and the float twins."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from codegen.kernel import compile_program
from ir.errors import WorkloadError
from ir.expr import render
from ir.library import OPS, instantiate
from ir.library.matmul import int32_dot
from ir.task import library_task
from workers.verify import empty_outputs, verify

LOW_PRECISION = [n for n in OPS if n.endswith(("_int8", "_bf16"))]


def _qnn(x, w, bias, scale, xzp, yzp):  # type: ignore[no-untyped-def]
    """DESIGN.md's formula in Python integers and one float32 product per output."""
    m, k = x.shape
    n = w.shape[1]
    y = np.zeros((m, n), np.uint8)
    for i, j in itertools.product(range(m), range(n)):
        acc = sum((int(x[i, r]) - xzp) * int(w[r, j]) for r in range(k)) + int(bias[j])
        v = np.float32(acc) * np.float32(scale[0])
        y[i, j] = min(max(float(np.rint(v)) + yzp, 0), 255)
    return y


def test_dense_int8_reference_is_designs_formula_with_ties_to_even() -> None:
    # acc · 0.5 lands on x.5 for odd acc: ties. Zero points 3 and 100; outputs clip at both ends.
    x = np.array([[3, 4, 5, 6], [255, 0, 3, 3]], np.uint8)
    w = np.array(
        [[1, -1, 127, -128, 0], [1, 1, 1, 1, 1], [0, 2, 5, -3, 9], [1, 0, 0, 0, -7]], np.int8
    )
    bias = np.array([0, 1, -1, 600, -600], np.int32)
    scale = np.array([0.5], np.float32)
    op = OPS["dense_int8"]
    params = {"m": 2, "n": 5, "k": 4, "x_zero_point": 3, "y_zero_point": 100}
    (y,) = op.reference(params, x, w, bias, scale)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, _qnn(x, w, bias, scale, 3, 100))
    assert 0 in y and 255 in y
    # acc = (x − 3)·w + bias = [[4, 6, 10, 595, -602], [249, -254, 32000, -31659, -603]];
    # half of it, rounded (297.5 → 298, 124.5 → 124, -301.5 → -302: ties to even), + 100.
    np.testing.assert_array_equal(y, [[102, 103, 105, 255, 0], [224, 0, 255, 0, 0]])


def _task_outputs(op: str, params: dict[str, int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    task = library_task(op, params)
    inputs = task.make_inputs(0)
    return inputs, task.reference(inputs)


def test_dense_int8_inputs_exercise_rounding_and_rarely_saturate() -> None:
    """With the operator's input ranges, a round-half-away requantization gives a different
    answer on the default shape, and most outputs are neither 0 nor 255."""
    (x, w, bias, scale), (y,) = _task_outputs("dense_int8", {})
    zp = OPS["dense_int8"].defaults()
    acc = (x.astype(np.int32) - zp["x_zero_point"]) @ w.astype(np.int32) + bias
    v = acc.astype(np.float32) * scale[0]
    ties = np.abs(v - np.trunc(v)) == 0.5
    assert ties.sum() >= 5
    away = np.clip(np.trunc(v + np.copysign(0.5, v)) + zp["y_zero_point"], 0, 255)
    assert (away.astype(np.uint8) != y).sum() >= 5
    assert ((y == 0) | (y == 255)).mean() < 0.1
    assert len(np.unique(y)) > 100


def test_conv2d_nhwc_int8_pads_with_the_zero_point() -> None:
    """A padded cell is X's zero point, so it adds nothing: a 3×3 kernel of ones over a 1×1
    input with pad 1 sees the one real cell only."""
    params = {"n": 1, "h": 1, "w": 1, "ci": 1, "co": 1, "kh": 3, "kw": 3, "pad": 1}
    params |= {"x_zero_point": 10, "y_zero_point": 0}
    op = OPS["conv2d_nhwc_int8"]
    x = np.array([17], np.uint8).reshape(1, 1, 1, 1)
    w = np.ones((3, 3, 1, 1), np.int8)
    (y,) = op.reference(
        {**op.defaults(), **params}, x, w, np.array([0], np.int32), np.array([1.0], np.float32)
    )
    assert y.reshape(-1).tolist() == [17 - 10]


def test_conv2d_nhwc_int8_kernel_is_exact_with_padding() -> None:
    task = library_task(
        "conv2d_nhwc_int8",
        {"n": 2, "h": 5, "w": 6, "ci": 5, "co": 9, "kh": 3, "kw": 3, "pad": 2, "x_zero_point": 77},
    )
    kernel = compile_program(task.program)
    inputs = task.make_inputs(4)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    (ref,) = task.reference(inputs)
    np.testing.assert_array_equal(outputs[0], ref)


@pytest.mark.parametrize("op", ["matmul_bf16", "dense_bf16", "batch_matmul_bf16"])
def test_bf16_references_are_float32_on_the_same_values(op: str) -> None:
    inputs, (ref,) = _task_outputs(op, {})
    assert inputs[0].dtype == np.dtype(ml_dtypes.bfloat16) and ref.dtype == np.float32
    twin_op, twin_params = OPS[op].float_twin(OPS[op].defaults())  # type: ignore[misc]
    wide = [np.asarray(a, np.float32) for a in inputs]
    (want,) = OPS[twin_op].reference(twin_params, *wide)
    np.testing.assert_array_equal(ref, want)


def test_a_bf16_kernel_is_checked_against_the_rounded_inputs_not_the_float32_draws() -> None:
    """The kernel reads bf16 values: a reference on unrounded float32 inputs would differ by
    more than the tolerance, so the check is sensitive to rounding the inputs."""
    task = library_task("matmul_bf16", {"m": 16, "n": 16, "k": 256})
    kernel = compile_program(task.program)
    inputs = task.make_inputs(0)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    refs = task.reference(inputs)
    assert verify(outputs, refs, task.output_names, task.reduction_length) is None
    a, b = (np.random.default_rng(0).uniform(-1, 1, x.shape).astype(np.float32) for x in inputs)
    assert verify(outputs, [a @ b], task.output_names, task.reduction_length) is not None


@pytest.mark.parametrize("op", LOW_PRECISION)
def test_every_low_precision_operator_has_a_float32_twin_of_the_same_shape(op: str) -> None:
    opdef = OPS[op]
    assert opdef.float_twin is not None
    name, params = opdef.float_twin(opdef.defaults())
    _, _, twin = instantiate(name, params)
    _, _, wl = instantiate(op, {})
    assert all(t.dtype == "float32" for t in twin.inputs)
    assert [t.concrete_shape() for t in twin.outputs] == [t.concrete_shape() for t in wl.outputs]


def test_float_operators_have_no_twin() -> None:
    assert all(OPS[n].float_twin is None for n in OPS if n not in LOW_PRECISION)


@pytest.mark.parametrize("value", ["-1", "256"])
def test_zero_points_are_bytes(value: str) -> None:
    with pytest.raises(WorkloadError, match="x_zero_point"):
        instantiate("dense_int8", {"x_zero_point": value})


@pytest.mark.parametrize("op", ["dense_int8", "conv2d_nhwc_int8"])
def test_the_product_is_plain_u8_by_s8_whatever_the_zero_point(op: str) -> None:
    """acc is matmul_int8's computation (what the int8 tensor intrinsics match), and the block
    names do not depend on the zero points, so a trace replays across them."""
    names = []
    for zp in (0, 77):
        _, _, wl = instantiate(op, {"x_zero_point": zp, "y_zero_point": zp})
        acc = next(t for t in wl.computes() if t.name == "acc")
        assert acc.op is not None
        assert render(acc.op.body.source).startswith("int32(")
        assert "-" not in render(acc.op.body.source)
        names.append([t.name for t in wl.computes()])
    assert names[0] == names[1] and {"acc", "wsum", "Y"} <= set(names[0])


def test_int32_dot_is_numpys_wrapping_int32_product_through_blas() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (30, 50), dtype=np.uint8)
    b = rng.integers(-128, 128, (50, 20), dtype=np.int8)
    np.testing.assert_array_equal(
        int32_dot(a, b, ([1], [0])), a.astype(np.int32) @ b.astype(np.int32)
    )
    # 70000 · 255 · -128 wraps past -2**31, as the kernels' int32 accumulators do.
    a, b = np.full((1, 70000), 255, np.uint8), np.full((70000, 2), -128, np.int8)
    wrapped = int32_dot(a, b, ([1], [0]))
    assert wrapped.dtype == np.int32 and wrapped[0, 0] == 70000 * 255 * -128 + 2**32
    # Operands too wide for float64 to be exact take the int64 path.
    big = np.full((1, 3), 2**30 + 1, np.int32)  # 3·(2^60 + 2^31 + 1): 62 bits, inexact in float64
    assert int32_dot(big, big.T, ([1], [0]))[0, 0] == -(2**31) + 3
