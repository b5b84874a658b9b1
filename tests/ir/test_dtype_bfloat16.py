"""bfloat16 in the IR: the dtype, constants, what expressions refuse, serialisation, printing,
the evaluator's conversions and generated inputs."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from ir import compute as te
from ir import dtype as dt
from ir.build import build_program
from ir.errors import IRError
from ir.evaluate import evaluate
from ir.expr import Const, cast, rint, select
from ir.library import make_inputs
from ir.printer import print_program
from ir.serialize import program_from_json, program_to_json, structural_hash

BF16 = "bfloat16"


def test_dtype_facts() -> None:
    assert BF16 in dt.DTYPES and dt.is_float(BF16) and not dt.is_int(BF16)
    assert dt.itemsize(BF16) == 2 and dt.bits(BF16) == 16
    assert dt.to_numpy(BF16) == np.dtype(ml_dtypes.bfloat16)
    assert dt.max_value(BF16) == float("inf")


def test_constants_are_rounded_to_bfloat16_like_ml_dtypes() -> None:
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even, 1.0. 1 + 3·2^-8 rounds up.
    assert Const(1 + 2**-8, BF16).value == 1.0
    assert Const(1 + 3 * 2**-8, BF16).value == 1 + 2**-6
    assert Const(0.1, BF16).value == float(ml_dtypes.bfloat16(0.1))
    assert dt.bfloat16_bits(-2.0) == 0xC000


def _cast_workload() -> te.Workload:
    x = te.placeholder((6,), "float32", "X")
    y = te.compute((6,), lambda i: cast(BF16, x[i]), "Y")
    z = te.compute(
        (6,), lambda i: select(i < 3, cast("float32", y[i]), cast("float32", Const(0.1, BF16))), "Z"
    )
    return te.Workload("bf16_casts", (x,), (y, z))


def test_a_bfloat16_program_round_trips_through_json_and_prints() -> None:
    program = build_program(_cast_workload())
    again = program_from_json(json.loads(json.dumps(program_to_json(program))))
    assert again == program and structural_hash(again) == structural_hash(program)
    text = print_program(program)
    assert "Y: bfloat16[6]" in text and "Y[vi] = bfloat16(X[vi])" in text
    assert "float32(bfloat16(0.10009765625))" in text  # the constant, already rounded


def test_the_evaluator_rounds_as_ml_dtypes() -> None:
    xs = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1e-40, np.nan, -np.inf, 3.4e38], np.float32)
    y, z = evaluate(_cast_workload(), [xs])
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.view(np.uint16), xs.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(z[:3], xs[:3].astype(ml_dtypes.bfloat16).astype(np.float32))
    assert z[3] == np.float32(ml_dtypes.bfloat16(0.1))


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda a, b: a + b, ["add on bfloat16", "float32"]),
        (lambda a, b: a < b, ["lt on bfloat16"]),
        (lambda a, b: te.exp(a), ["exp on bfloat16"]),
        (lambda a, b: cast("int32", a), ["float32 only"]),
        (lambda a, b: cast(BF16, cast("float64", a)), ["float32 only"]),
    ],
)
def test_arithmetic_on_bfloat16_is_refused_with_the_way_out(build, words: list[str]) -> None:
    a = te.placeholder((4,), BF16, "A")
    b = te.placeholder((4,), BF16, "B")
    with pytest.raises(IRError) as err:
        build(a[0], b[0])
    for word in words:
        assert word in str(err.value)


def test_a_bfloat16_sum_is_refused_a_float32_sum_of_widened_values_is_not() -> None:
    a = te.placeholder((4, 8), BF16, "A")
    r = te.reduce_axis(8, "r")
    with pytest.raises(IRError, match="sum\\(\\) on bfloat16"):
        te.compute((4,), lambda i: te.sum(a[i, r], axis=r), "S")
    s = te.compute((4,), lambda i: te.sum(cast("float32", a[i, r]), axis=r), "S")
    assert s.dtype == "float32"


def test_rint_is_numpys_ties_to_even() -> None:
    x = te.placeholder((8,), "float32", "X")
    y = te.compute((8,), lambda i: rint(x[i]), "Y")
    xs = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.7, np.nan, -np.inf], np.float32)
    (out,) = evaluate(te.Workload("rint", (x,), (y,)), [xs])
    np.testing.assert_array_equal(out, np.rint(xs))
    assert list(out[:5]) == [0.0, 2.0, 2.0, -0.0, -2.0]


def test_inputs_of_bfloat16_are_in_range_and_ranges_narrow_inputs() -> None:
    a = te.placeholder((64, 64), BF16, "A")
    bias = te.placeholder((64,), "int32", "bias")
    s = te.placeholder((1,), "float32", "scale")
    out = te.compute((64,), lambda i: cast("float32", a[i, 0]) * s[0], "O")
    wl = te.Workload("w", (a, bias, s), (out,))
    x, b, sc = make_inputs(wl, seed=3, ranges={"bias": (-5, 5), "scale": (0.25, 0.25)})
    assert x.dtype == np.dtype(ml_dtypes.bfloat16) and x.ctypes.data % 64 == 0
    wide = x.astype(np.float32)
    assert -1 <= wide.min() < -0.9 and 0.9 < wide.max() <= 1
    assert b.min() >= -5 and b.max() <= 5 and len(np.unique(b)) == 11
    assert sc.tolist() == [0.25]
