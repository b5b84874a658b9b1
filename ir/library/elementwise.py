"""Element-wise and data-movement operators: gelu and transpose."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ir import compute as te
from ir.compute import Workload
from ir.expr import Expr, tanh
from ir.library.spec import OpDef, Param

# sqrt(2/pi) as a Python float: a numpy float64 scalar would promote the float32
# reference to float64.
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715

# ---------------------------------------------------------------------------
# gelu


def gelu_expr(x: Expr) -> Expr:
    """0.5·x·(1 + tanh(sqrt(2/pi)·(x + 0.044715·x³))), the tanh approximation."""
    return 0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * (x * x * x))))


def build_gelu(m: int, n: int) -> Workload:
    """Y = gelu(X) element-wise (tanh form)."""
    X = te.placeholder((m, n), "float32", "X")
    Y = te.compute((m, n), lambda i, j: gelu_expr(X[i, j]), "Y")
    return Workload("gelu", (X,), (Y,))


def ref_gelu(p: Mapping[str, int], X: np.ndarray) -> tuple[np.ndarray, ...]:
    return (0.5 * X * (1.0 + np.tanh(SQRT_2_OVER_PI * (X + GELU_CUBIC * (X * X * X)))),)


def flops_gelu(p: Mapping[str, int]) -> int:
    """Per element: 2 (cube) + 1 (scale) + 1 (add) + 1 (scale) + 1 (tanh) + 3 (add, two muls)."""
    return 9 * p["m"] * p["n"]


GELU = OpDef(
    name="gelu",
    params=(Param("m", 128, doc="rows"), Param("n", 256, doc="columns")),
    doc=(
        "GELU, tanh form 0.5x(1+tanh(√(2/π)(x+0.044715x³))), element-wise. "
        "Inputs: X[m,n] float32. Outputs: Y[m,n] float32."
    ),
    build=build_gelu,
    reference=ref_gelu,
    flops=flops_gelu,
)

# ---------------------------------------------------------------------------
# transpose


def build_transpose(m: int, n: int) -> Workload:
    """B[j, i] = A[i, j]: pure data movement, no arithmetic."""
    A = te.placeholder((m, n), "float32", "A")
    B = te.compute((n, m), lambda j, i: A[i, j], "B")
    return Workload("transpose", (A,), (B,))


def ref_transpose(p: Mapping[str, int], A: np.ndarray) -> tuple[np.ndarray, ...]:
    return (A.T.copy(),)


def flops_none(p: Mapping[str, int]) -> None:
    """Data movement has no FLOPs; GFLOP/s is reported as null."""
    return None


TRANSPOSE = OpDef(
    name="transpose",
    params=(Param("m", 128, doc="rows of A"), Param("n", 256, doc="columns of A")),
    doc="B[n,m] = A[m,n]. Inputs: A[m,n] float32. Outputs: B[n,m] float32.",
    build=build_transpose,
    reference=ref_transpose,
    flops=flops_none,
)
