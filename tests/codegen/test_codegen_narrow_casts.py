"""Float to 8- and 16-bit integer casts: saturating (NaN to 0), the same in scalar and
vector code, and vector code without a conversion per lane.

LLVM lowers `fptoui.sat` / `fptosi.sat` to a narrow vector with one vcvttss2si a
lane; a requantizing write-back (dense_int8's uint8 output) spent most of its
time there. Codegen clamps in floating point and converts through int32 instead.
"""

from __future__ import annotations

import numpy as np
import pytest

from codegen.kernel import compile_program
from ir import compute as te
from ir.build import build_program
from ir.expr import cast
from tests.codegen.loopkit import with_loop

N = 64
NARROW = ["uint8", "int8", "int16"]


def _inputs() -> np.ndarray:
    edges = [np.nan, -np.nan, np.inf, -np.inf, 3e38, -3e38, 255.9, 256.0, -0.9, -1.0, 127.5]
    edges += [-128.5, -129.0, 32768.0, -32768.5, -32769.0, 32767.9, 0.0, -0.0, 1e-40]
    xs = np.resize(np.array(edges, np.float32), N)
    xs[len(edges) :] = np.random.default_rng(0).uniform(-70000, 70000, N - len(edges))
    return xs


def _saturated(xs: np.ndarray, dtype: str) -> np.ndarray:
    """What llvm.fpto[su]i.sat gives: NaN to 0, toward zero, clamped to the type's range."""
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        whole = np.trunc(np.nan_to_num(xs, nan=0.0, posinf=np.inf, neginf=-np.inf))
    return np.clip(whole, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("lanes", [None, 16])
def test_a_float_to_narrow_integer_cast_saturates(dtype: str, lanes: int | None) -> None:
    x = te.placeholder((N,), "float32", "X")
    y = te.compute((N,), lambda i: cast(dtype, x[i]), "Y")
    program = build_program(te.Workload("narrow", (x,), (y,)))
    if lanes is not None:
        program = with_loop(program, "i", "vectorized", vector_width=lanes)
    kernel = compile_program(program)
    xs = _inputs()
    out = np.zeros(N, dtype)
    kernel(xs, out)
    np.testing.assert_array_equal(out, _saturated(xs, dtype))
    if lanes is not None:
        assert "vcvttss2si" not in kernel.module.assembly()  # no conversion per lane
