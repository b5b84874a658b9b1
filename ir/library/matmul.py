"""Matrix products: matmul, batch_matmul, dense (with optional bias and relu), matmul_int8."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ir import compute as te
from ir.compute import Workload
from ir.expr import Expr, cast, maximum
from ir.library.spec import OpDef, Param

# ---------------------------------------------------------------------------
# matmul


def f32(e: Expr) -> Expr:
    """`e` widened to float32 (itself when it is float32: the float operators' IR is unchanged)."""
    return cast("float32", e)


def build_matmul(
    m: int, n: int, k: int, *, dtype: str = "float32", name: str = "matmul"
) -> Workload:
    """C[m,n] = sum_r A[m,r] * B[r,n], inputs of `dtype` (float32, bfloat16) summed in float32."""
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(f32(A[i, r]) * f32(B[r, j]), axis=r), "C")
    return Workload(name, (A, B), (C,))


def ref_matmul(params: Mapping[str, int], A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, ...]:
    return (A @ B,)


def flops_matmul(p: Mapping[str, int]) -> int:
    return 2 * p["m"] * p["n"] * p["k"]


MATMUL = OpDef(
    name="matmul",
    params=(
        Param("m", 128, doc="rows of A and C"),
        Param("n", 128, doc="columns of B and C"),
        Param("k", 128, doc="the reduction length"),
    ),
    doc=(
        "C[m,n] = A[m,k]·B[k,n]. Inputs: A[m,k] float32, B[k,n] float32. Outputs: C[m,n] float32."
    ),
    build=build_matmul,
    reference=ref_matmul,
    flops=flops_matmul,
)

# ---------------------------------------------------------------------------
# batch_matmul


def build_batch_matmul(
    b: int, m: int, n: int, k: int, *, dtype: str = "float32", name: str = "batch_matmul"
) -> Workload:
    """C[b] = A[b]·B[b] for every batch index, inputs of `dtype` summed in float32."""
    A = te.placeholder((b, m, k), dtype, "A")
    B = te.placeholder((b, k, n), dtype, "B")
    r = te.reduce_axis(k, "r")
    C = te.compute(
        (b, m, n), lambda bb, i, j: te.sum(f32(A[bb, i, r]) * f32(B[bb, r, j]), axis=r), "C"
    )
    return Workload(name, (A, B), (C,))


def ref_batch_matmul(
    params: Mapping[str, int], A: np.ndarray, B: np.ndarray
) -> tuple[np.ndarray, ...]:
    return (A @ B,)


def flops_batch_matmul(p: Mapping[str, int]) -> int:
    return 2 * p["b"] * p["m"] * p["n"] * p["k"]


BATCH_MATMUL = OpDef(
    name="batch_matmul",
    params=(
        Param("b", 8, doc="batch size"),
        Param("m", 64, doc="rows of each A[b] and C[b]"),
        Param("n", 64, doc="columns of each B[b] and C[b]"),
        Param("k", 64, doc="the reduction length"),
    ),
    doc=(
        "C[b] = A[b]·B[b]. Inputs: A[b,m,k] float32, B[b,k,n] float32. Outputs: C[b,m,n] float32."
    ),
    build=build_batch_matmul,
    reference=ref_batch_matmul,
    flops=flops_batch_matmul,
)

# ---------------------------------------------------------------------------
# dense


def build_dense(
    m: int, n: int, k: int, bias: int, relu: int, *, dtype: str = "float32", name: str = "dense"
) -> Workload:
    """Y = X·W (+ bias) (then relu); the epilogue is its own compute so it can be fused later.

    With neither bias nor relu the product itself is the output Y; otherwise the
    product is the intermediate "XW" and Y applies the epilogue to it. X and W
    are of `dtype` (float32, bfloat16), the product, bias and Y float32.
    """
    X = te.placeholder((m, k), dtype, "X")
    W = te.placeholder((k, n), dtype, "W")
    r = te.reduce_axis(k, "r")
    inputs = [X, W]

    def product(i: Expr, j: Expr) -> Expr:
        return te.sum(f32(X[i, r]) * f32(W[r, j]), axis=r)

    if not bias and not relu:
        Y = te.compute((m, n), product, "Y")
        return Workload(name, tuple(inputs), (Y,))
    XW = te.compute((m, n), product, "XW")
    Bias = te.placeholder((n,), "float32", "bias") if bias else None
    if Bias is not None:
        inputs.append(Bias)

    def epilogue(i: Expr, j: Expr) -> Expr:
        v: Expr = XW[i, j]
        if Bias is not None:
            v = v + Bias[j]
        if relu:
            v = maximum(v, 0.0)
        return v

    Y = te.compute((m, n), epilogue, "Y")
    return Workload(name, tuple(inputs), (Y,))


def ref_dense(
    params: Mapping[str, int], X: np.ndarray, W: np.ndarray, *rest: np.ndarray
) -> tuple[np.ndarray, ...]:
    Y = X @ W
    if params["bias"]:
        Y = Y + rest[0]
    if params["relu"]:
        Y = np.maximum(Y, 0)
    return (Y,)


def flops_dense(p: Mapping[str, int]) -> int:
    # One add per element for the bias and one comparison per element for relu.
    return (2 * p["k"] + p["bias"] + p["relu"]) * p["m"] * p["n"]


DENSE = OpDef(
    name="dense",
    params=(
        Param("m", 128, doc="rows of X and Y (the batch)"),
        Param("n", 128, doc="output features: columns of W and Y"),
        Param("k", 128, doc="input features: the reduction length"),
        Param("bias", 1, minimum=0, choices=(0, 1), doc="1: add bias[n]"),
        Param("relu", 1, minimum=0, choices=(0, 1), doc="1: apply max(·, 0) last"),
    ),
    doc=(
        "Y = X[m,k]·W[k,n] (+ bias[n]) (then relu). Inputs: X[m,k] float32, W[k,n] float32, "
        "bias[n] float32 (only when bias=1). Outputs: Y[m,n] float32. When bias or relu is "
        "on, the product is the intermediate XW[m,n] float32."
    ),
    build=build_dense,
    reference=ref_dense,
    flops=flops_dense,
)

# ---------------------------------------------------------------------------
# matmul_int8


def build_matmul_int8(m: int, n: int, k: int) -> Workload:
    """C = A·B with uint8 A, int8 B, widened to int32 before the multiply (no overflow per product)."""
    A = te.placeholder((m, k), "uint8", "A")
    B = te.placeholder((k, n), "int8", "B")
    r = te.reduce_axis(k, "r")
    C = te.compute(
        (m, n),
        lambda i, j: te.sum(cast("int32", A[i, r]) * cast("int32", B[r, j]), axis=r),
        "C",
    )
    return Workload("matmul_int8", (A, B), (C,))


def int32_dot(a: np.ndarray, b: np.ndarray, axes: tuple[list[int], list[int]]) -> np.ndarray:
    """`np.tensordot(a, b, axes)` of integer arrays as int32 accumulators give it: exact,
    then wrapped modulo 2**32.

    numpy's integer matmul has no BLAS (5.5 s for 1024³ on one core); float64 BLAS is
    exact here, since every product and partial sum is an integer below 2**53 as long
    as max|a| · max|b| · K is (8-bit operands: K up to 2.7e11). Beyond that, int64.
    """
    k = math.prod(a.shape[d] for d in axes[0])
    bound = int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0)) * k
    if bound < 2**53:
        exact = np.tensordot(a.astype(np.float64), b.astype(np.float64), axes)
    else:
        exact = np.tensordot(a.astype(np.int64), b.astype(np.int64), axes)
    return exact.astype(np.int64).astype(np.int32)


def ref_matmul_int8(
    params: Mapping[str, int], A: np.ndarray, B: np.ndarray
) -> tuple[np.ndarray, ...]:
    return (int32_dot(A, B, ([1], [0])),)


MATMUL_INT8 = OpDef(
    name="matmul_int8",
    params=(
        Param("m", 128, doc="rows of A and C"),
        Param("n", 128, doc="columns of B and C"),
        Param("k", 128, doc="the reduction length"),
    ),
    doc=(
        "C[m,n] = sum_k int32(A[m,k])·int32(B[k,n]). Inputs: A[m,k] uint8, B[k,n] int8. "
        "Outputs: C[m,n] int32 (wraps modulo 2**32 beyond k=65793, like numpy)."
    ),
    build=build_matmul_int8,
    reference=ref_matmul_int8,
    flops=flops_matmul,
    float_twin=lambda p: ("matmul", dict(p)),
)
