"""Row normalisations along the last axis: softmax and layer_norm."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ir import compute as te
from ir.compute import Workload
from ir.expr import Expr, exp, sqrt
from ir.library.spec import OpDef, Param

ROW_PARAMS = (
    Param("m", 128, doc="rows"),
    Param("n", 256, doc="columns: the normalised (last) axis"),
)

# ---------------------------------------------------------------------------
# softmax


def build_softmax(m: int, n: int) -> Workload:
    """Max-subtracted softmax in four computes (x_max, x_exp, exp_sum, Y), as numpy does it.

    Subtracting the row maximum keeps exp from overflowing; keeping the
    exponentials in x_exp computes each exp once.
    """
    X = te.placeholder((m, n), "float32", "X")
    r1, r2 = te.reduce_axis(n, "r"), te.reduce_axis(n, "r2")
    x_max = te.compute((m,), lambda i: te.max(X[i, r1], axis=r1), "x_max")
    x_exp = te.compute((m, n), lambda i, j: exp(X[i, j] - x_max[i]), "x_exp")
    exp_sum = te.compute((m,), lambda i: te.sum(x_exp[i, r2], axis=r2), "exp_sum")
    Y = te.compute((m, n), lambda i, j: x_exp[i, j] / exp_sum[i], "Y")
    return Workload("softmax", (X,), (Y,))


def ref_softmax(p: Mapping[str, int], X: np.ndarray) -> tuple[np.ndarray, ...]:
    e = np.exp(X - X.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True),)


def flops_softmax(p: Mapping[str, int]) -> int:
    """Per element: max, subtract, exp, add, divide."""
    return 5 * p["m"] * p["n"]


SOFTMAX = OpDef(
    name="softmax",
    params=ROW_PARAMS,
    doc=(
        "Softmax along the last axis, max-subtracted. Inputs: X[m,n] float32. "
        "Outputs: Y[m,n] float32. Intermediates: x_max[m], x_exp[m,n], exp_sum[m] float32."
    ),
    build=build_softmax,
    reference=ref_softmax,
    flops=flops_softmax,
)

# ---------------------------------------------------------------------------
# layer_norm

EPS = 1e-5


def build_layer_norm(m: int, n: int) -> Workload:
    """Y = (X − mean) / sqrt(var + eps) · gamma + beta with the biased variance (two passes).

    The variance is the mean of squared deviations from the mean (not E[x²] − E[x]²),
    which is what numpy's `var` computes and stays accurate when |mean| ≫ std.
    """
    X = te.placeholder((m, n), "float32", "X")
    gamma = te.placeholder((n,), "float32", "gamma")
    beta = te.placeholder((n,), "float32", "beta")
    r1, r2 = te.reduce_axis(n, "r"), te.reduce_axis(n, "r2")
    x_sum = te.compute((m,), lambda i: te.sum(X[i, r1], axis=r1), "x_sum")

    def sq_dev(i: Expr, k: Expr) -> Expr:
        d = X[i, k] - x_sum[i] / float(n)
        return d * d

    sq_sum = te.compute((m,), lambda i: te.sum(sq_dev(i, r2), axis=r2), "sq_sum")
    Y = te.compute(
        (m, n),
        lambda i, j: (
            (X[i, j] - x_sum[i] / float(n)) / sqrt(sq_sum[i] / float(n) + EPS) * gamma[j] + beta[j]
        ),
        "Y",
    )
    return Workload("layer_norm", (X, gamma, beta), (Y,))


def ref_layer_norm(
    p: Mapping[str, int], X: np.ndarray, gamma: np.ndarray, beta: np.ndarray
) -> tuple[np.ndarray, ...]:
    mu = X.mean(axis=-1, keepdims=True)
    var = X.var(axis=-1, keepdims=True)
    return ((X - mu) / np.sqrt(var + EPS) * gamma + beta,)


def flops_layer_norm(p: Mapping[str, int]) -> int:
    """Per element: 1 (sum) + 3 (deviation, square, sum) + 4 (subtract, divide, scale, shift)."""
    return 8 * p["m"] * p["n"]


LAYER_NORM = OpDef(
    name="layer_norm",
    params=ROW_PARAMS,
    doc=(
        "Layer normalisation along the last axis, eps 1e-5, biased variance. "
        "Inputs: X[m,n] float32, gamma[n] float32, beta[n] float32. Outputs: Y[m,n] float32. "
        "Intermediates: x_sum[m], sq_sum[m] float32."
    ),
    build=build_layer_norm,
    reference=ref_layer_norm,
    flops=flops_layer_norm,
)
