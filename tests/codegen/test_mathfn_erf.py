"""erf in generated code: the float32 polynomial (scalar and vector lanes) and libm's float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

from codegen.kernel import compile_program
from ir import compute as te
from ir.build import build_program
from ir.definition import from_definition, to_definition
from ir.evaluate import evaluate
from tests.codegen.loopkit import with_loop

N = 4096


def _erf_kernel(dtype: str, vectorized: bool):
    x = te.placeholder((N,), dtype, "X")
    y = te.compute((N,), lambda i: te.erf(x[i]), "Y")
    program = build_program(te.Workload("erf_of_x", (x,), (y,)))
    if vectorized:
        program = with_loop(program, "i", "vectorized", vector_width=8)
    return compile_program(program), te.Workload("erf_of_x", (x,), (y,))


@pytest.mark.parametrize("vectorized", [False, True])
def test_float32_erf_is_within_1e_6_relative_over_minus_10_to_10(vectorized: bool) -> None:
    kernel, _ = _erf_kernel("float32", vectorized)
    xs = np.linspace(-10, 10, N - 4, dtype=np.float32)
    xs = np.concatenate([xs, np.float32([0.0, 1e-6, -3.6218, np.nan])])
    y = np.full(N, np.nan, np.float32)
    kernel(xs, y)
    ref = np.array([math.erf(float(v)) for v in xs[:-1]])
    rel = np.abs(y[:-1] - ref) / np.maximum(np.abs(ref), 1e-30)
    assert rel.max() <= 1e-6, f"max relative error {rel.max():.3g} at x={xs[rel.argmax()]}"
    assert np.isnan(y[-1])


def test_float64_erf_calls_libm_and_matches_math_erf() -> None:
    kernel, _ = _erf_kernel("float64", vectorized=True)
    xs = np.linspace(-6, 6, N)
    y = np.full(N, np.nan)
    kernel(xs, y)
    np.testing.assert_allclose(y, [math.erf(v) for v in xs], rtol=1e-14, atol=1e-15)


def test_erf_survives_the_definition_round_trip_and_the_evaluator_matches_math_erf() -> None:
    _, workload = _erf_kernel("float32", vectorized=False)
    definition = to_definition(workload)
    assert definition["computes"][0]["body"] == ["erf", ["load", "X", "i"]]
    rebuilt = from_definition(definition)
    xs = np.linspace(-5, 5, N, dtype=np.float32)
    (y,) = evaluate(rebuilt, [xs])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, [math.erf(float(v)) for v in xs], rtol=1e-6, atol=1e-7)
