"""Low-precision operators: bfloat16 matrix products and QNN's int8 dense and conv2d.

bf16 operators (`matmul_bf16`, `dense_bf16`, `batch_matmul_bf16`) read bfloat16
inputs, widen each element to float32 (exact) and accumulate and write float32;
their reference is float32 numpy on the same bf16 values, so the only
difference is the order of the float32 sums, which the usual tolerance with K
the reduction length covers.

int8 operators follow QNN (DESIGN.md "Tensor instructions and quantized
operators"): a uint8 input X with zero point `x_zero_point`, an int8 weight, an
int32 bias, a float32 `scale` input of shape [1] and the output's zero point
`y_zero_point`:

    Y = clip(rint(float32((X − x_zero_point)·W + bias) · scale) + y_zero_point, 0, 255)

as uint8, accumulated in int32 (wrapping past 2**31, like numpy), rint ties to
even (np.rint on float32). Exact against numpy: every step is one correctly
rounded float32 operation or exact integer arithmetic.

The kernel computes it as QNN lowers it: the product is the plain u8 × s8 → s32
reduction "acc" = X·W (matmul_int8's computation, which a VNNI or AMX tensor
intrinsic matches), the zero point's share is x_zero_point · "wsum", the
weight's column sums (a k·n reduction), and the output compute "Y" requantizes
acc − x_zero_point·wsum + bias, so a schedule tiles the product and folds the
requantization into its write-back. In int32 arithmetic modulo 2**32 the two
forms are equal; the numpy reference computes the first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial

import numpy as np

from ir import compute as te
from ir.compute import Tensor, Workload
from ir.expr import Expr, cast, maximum, minimum, rint
from ir.library.conv import (
    CONV_PARAMS,
    check_window,
    flops_conv,
    out_size,
    pad_hw,
    pad_np,
    scaled,
    windows,
)
from ir.library.matmul import (
    BATCH_MATMUL,
    DENSE,
    MATMUL,
    build_batch_matmul,
    build_dense,
    build_matmul,
    flops_batch_matmul,
    flops_dense,
    flops_matmul,
    int32_dot,
    ref_batch_matmul,
    ref_dense,
    ref_matmul,
)
from ir.library.spec import OpDef, Param

BF16 = "bfloat16"


Reference = Callable[..., tuple[np.ndarray, ...]]


def _widened(reference: Reference) -> Reference:
    """A float32 reference run on the bf16 inputs widened to float32 (exact)."""

    def ref(params: Mapping[str, int], *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        return reference(params, *(np.asarray(x, dtype=np.float32) for x in inputs))

    return ref


def _same(op: str) -> Callable[[Mapping[str, int]], tuple[str, dict[str, int]]]:
    """The float32 operator `op` with the same parameters."""
    return lambda p: (op, dict(p))


MATMUL_BF16 = OpDef(
    name="matmul_bf16",
    params=MATMUL.params,  # the float32 operator's, as the float twin says
    doc=(
        "C[m,n] = A[m,k]·B[k,n] summed in float32. Inputs: A[m,k] bfloat16, B[k,n] bfloat16. "
        "Outputs: C[m,n] float32."
    ),
    build=partial(build_matmul, dtype=BF16, name="matmul_bf16"),
    reference=_widened(ref_matmul),
    flops=flops_matmul,
    float_twin=_same("matmul"),
)

BATCH_MATMUL_BF16 = OpDef(
    name="batch_matmul_bf16",
    params=BATCH_MATMUL.params,  # the float32 operator's, as the float twin says
    doc=(
        "C[b] = A[b]·B[b] summed in float32. Inputs: A[b,m,k] bfloat16, B[b,k,n] bfloat16. "
        "Outputs: C[b,m,n] float32."
    ),
    build=partial(build_batch_matmul, dtype=BF16, name="batch_matmul_bf16"),
    reference=_widened(ref_batch_matmul),
    flops=flops_batch_matmul,
    float_twin=_same("batch_matmul"),
)

DENSE_BF16 = OpDef(
    name="dense_bf16",
    params=DENSE.params,  # the float32 operator's, as the float twin says
    doc=(
        "Y = X[m,k]·W[k,n] summed in float32 (+ bias[n]) (then relu). Inputs: X[m,k] bfloat16, "
        "W[k,n] bfloat16, bias[n] float32 (only when bias=1). Outputs: Y[m,n] float32. When "
        "bias or relu is on, the product is the intermediate XW[m,n] float32."
    ),
    build=partial(build_dense, dtype=BF16, name="dense_bf16"),
    reference=_widened(ref_dense),
    flops=flops_dense,
    float_twin=_same("dense"),
)

# ---------------------------------------------------------------------------
# QNN int8: shared requantization

ZERO_POINT_PARAMS = (
    Param("x_zero_point", 128, minimum=0, maximum=255, doc="X's zero point"),
    Param("y_zero_point", 128, minimum=0, maximum=255, doc="Y's zero point"),
)


def _requantize(
    acc: Tensor, wsum: Tensor, x_zero_point: int, bias: Tensor, scale: Tensor, y_zero_point: int
) -> Tensor:
    """Y[..., o] = uint8(clip(rint(float32(bias[o] − x_zero_point·wsum[o] + acc) · scale[0])
    + y_zero_point, 0, 255))."""

    def body(*idx: Expr) -> Expr:
        o = idx[-1]
        # The column sums come first: the naive program computes them before the product,
        # so the requantization can fold into the product's write-back (int32 adds commute).
        exact = bias[o] - wsum[o] * x_zero_point + acc[idx]
        v = cast("float32", exact) * scale[0]
        v = rint(v) + float(y_zero_point)
        return cast("uint8", maximum(minimum(v, 255.0), 0.0))

    assert acc.op is not None
    names = [a.var.name for a in acc.op.axes]
    return te.compute(acc.concrete_shape(), body, "Y", axis_names=names)


def _requantize_np(
    acc: np.ndarray, bias: np.ndarray, scale: np.ndarray, y_zero_point: int
) -> np.ndarray:
    v = (acc + bias).astype(np.float32) * scale.astype(np.float32)[0]
    return np.clip(np.rint(v) + np.float32(y_zero_point), 0, 255).astype(np.uint8)


def _i32(x: Expr) -> Expr:
    return cast("int32", x)


def quantized_ranges(k: int) -> dict[str, tuple[float, float]]:
    """Verification inputs for a reduction of length k over full-range uint8 × int8 values.

    The accumulator's spread is about √k · 74 · 74 (the uniform values' standard
    deviations); `scale`, a power of two, maps it to about ±64 around the zero
    point so most outputs neither saturate nor collapse, and k·(scale's
    denominator) makes exact ties (x.5) common enough that round-half-to-even is
    tested. The bias has the accumulator's spread.
    """
    spread = math.sqrt(k) * 74 * 74
    scale = 2.0 ** -max(0, round(math.log2(spread / 64)))
    return {"bias": (-spread, spread), "scale": (scale, scale)}


def flops_requantized(product: int, outputs: int) -> int:
    """The products' multiply-adds plus, per output, the bias add and the scale multiply."""
    return product + 2 * outputs


# ---------------------------------------------------------------------------
# dense_int8


def build_dense_int8(m: int, n: int, k: int, x_zero_point: int, y_zero_point: int) -> Workload:
    X = te.placeholder((m, k), "uint8", "X")
    W = te.placeholder((k, n), "int8", "W")
    bias = te.placeholder((n,), "int32", "bias")
    scale = te.placeholder((1,), "float32", "scale")
    rk = te.reduce_axis(k, "rk")
    wsum = te.compute((n,), lambda j: te.sum(_i32(W[rk, j]), axis=rk), "wsum")
    r = te.reduce_axis(k, "r")
    acc = te.compute((m, n), lambda i, j: te.sum(_i32(X[i, r]) * _i32(W[r, j]), axis=r), "acc")
    Y = _requantize(acc, wsum, x_zero_point, bias, scale, y_zero_point)
    return Workload("dense_int8", (X, W, bias, scale), (Y,))


def ref_dense_int8(
    p: Mapping[str, int], X: np.ndarray, W: np.ndarray, bias: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, ...]:
    acc = int32_dot(X.astype(np.int32) - np.int32(p["x_zero_point"]), W, ([1], [0]))
    return (_requantize_np(acc, bias, scale, p["y_zero_point"]),)


DENSE_INT8 = OpDef(
    name="dense_int8",
    params=(
        Param("m", 128, doc="rows of X and Y (the batch)"),
        Param("n", 128, doc="output features: columns of W and Y"),
        Param("k", 128, doc="input features: the reduction length"),
        *ZERO_POINT_PARAMS,
    ),
    doc=(
        "QNN dense: Y = clip(rint(float32((X − x_zero_point)·W + bias)·scale) + y_zero_point, "
        "0, 255), int32 accumulation, rint ties to even. Inputs: X[m,k] uint8, W[k,n] int8, "
        "bias[n] int32, scale[1] float32. Outputs: Y[m,n] uint8. Intermediates: acc[m,n] int32 "
        "(X·W), wsum[n] int32 (W's column sums)."
    ),
    build=build_dense_int8,
    reference=ref_dense_int8,
    flops=lambda p: flops_requantized(flops_matmul(p), p["m"] * p["n"]),
    input_ranges=lambda p: quantized_ranges(p["k"]),
    float_twin=lambda p: ("dense", {"m": p["m"], "n": p["n"], "k": p["k"], "bias": 1, "relu": 0}),
)

# ---------------------------------------------------------------------------
# conv2d_nhwc_int8


def build_conv2d_nhwc_int8(
    n: int,
    h: int,
    w: int,
    ci: int,
    co: int,
    kh: int,
    kw: int,
    stride: int,
    pad: int,
    dilation: int,
    x_zero_point: int,
    y_zero_point: int,
) -> Workload:
    """conv2d_nhwc's loop nest on uint8 × int8, padded with the zero point (a padded cell is
    a real 0: every window has kh·kw·ci cells, so x_zero_point·wsum is its share), then
    requantized."""
    ho = out_size(h, kh, stride, pad, dilation)
    wo = out_size(w, kw, stride, pad, dilation)
    X = te.placeholder((n, h, w, ci), "uint8", "X")
    W = te.placeholder((kh, kw, ci, co), "int8", "W")
    bias = te.placeholder((co,), "int32", "bias")
    scale = te.placeholder((1,), "float32", "scale")
    P = pad_hw(X, pad, 1, value=x_zero_point)
    sh, sw, sc = te.reduce_axis(kh, "sh"), te.reduce_axis(kw, "sw"), te.reduce_axis(ci, "sc")
    wsum = te.compute((co,), lambda o: te.sum(_i32(W[sh, sw, sc, o]), axis=[sh, sw, sc]), "wsum")
    rh, rw, rc = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw"), te.reduce_axis(ci, "rc")

    def product(b: Expr, i: Expr, j: Expr, o: Expr) -> Expr:
        x = P[
            b,
            scaled(i, stride) + scaled(rh, dilation),
            scaled(j, stride) + scaled(rw, dilation),
            rc,
        ]
        return te.sum(_i32(x) * _i32(W[rh, rw, rc, o]), axis=[rh, rw, rc])

    acc = te.compute((n, ho, wo, co), product, "acc")
    Y = _requantize(acc, wsum, x_zero_point, bias, scale, y_zero_point)
    return Workload("conv2d_nhwc_int8", (X, W, bias, scale), (Y,))


def ref_conv2d_nhwc_int8(
    p: Mapping[str, int], X: np.ndarray, W: np.ndarray, bias: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, ...]:
    padded = pad_np(X, p["pad"], 1, value=p["x_zero_point"])
    win = windows(padded, p["kh"], p["kw"], p["stride"], p["dilation"], 1)
    win = win.astype(np.int32) - np.int32(p["x_zero_point"])
    # win: (n, ho, wo, ci, kh, kw); W: (kh, kw, ci, co).
    acc = int32_dot(win, W, ([3, 4, 5], [2, 0, 1]))
    return (_requantize_np(acc, bias, scale, p["y_zero_point"]),)


def _conv_out(p: Mapping[str, int]) -> int:
    ho = out_size(p["h"], p["kh"], p["stride"], p["pad"], p["dilation"])
    wo = out_size(p["w"], p["kw"], p["stride"], p["pad"], p["dilation"])
    return p["n"] * ho * wo * p["co"]


def _check_conv_int8(p: Mapping[str, int]) -> None:
    check_window("conv2d_nhwc_int8", p, p["dilation"])


_CONV_KEYS = tuple(q.name for q in CONV_PARAMS)

CONV2D_NHWC_INT8 = OpDef(
    name="conv2d_nhwc_int8",
    params=(*CONV_PARAMS, *ZERO_POINT_PARAMS),
    doc=(
        "QNN conv2d, NHWC input, HWIO weight (conv2d_nhwc's parameters), padded with "
        "x_zero_point, requantized as dense_int8. Inputs: X[n,h,w,ci] uint8, W[kh,kw,ci,co] "
        "int8, bias[co] int32, scale[1] float32. Outputs: Y[n,ho,wo,co] uint8. "
        "Intermediates: pad uint8, acc[n,ho,wo,co] int32, wsum[co] int32."
    ),
    build=build_conv2d_nhwc_int8,
    reference=ref_conv2d_nhwc_int8,
    flops=lambda p: flops_requantized(flops_conv(p), _conv_out(p)),
    check=_check_conv_int8,
    input_ranges=lambda p: quantized_ranges(p["kh"] * p["kw"] * p["ci"]),
    float_twin=lambda p: ("conv2d_nhwc", {k: p[k] for k in _CONV_KEYS}),
)
