"""2-D convolutions: conv2d_nhwc, conv2d_nchw and depthwise_conv2d_nhwc.

Padding is a separate compute, "pad", that every conv has (a plain copy when
pad=0) so the block names a schedule refers to do not depend on the parameters.
Its select guards the out-of-bounds load: only the chosen side is evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ir import compute as te
from ir.compute import Tensor, Workload
from ir.errors import WorkloadError
from ir.expr import Expr, logical_and, select
from ir.library.spec import OpDef, Param

# ---------------------------------------------------------------------------
# Shared shape arithmetic (also used by the pools)


def out_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """Output extent of a window sliding over `size` cells padded by `pad` on both sides.

    Zero or negative when the (dilated) kernel does not fit in the padded input.
    """
    span = dilation * (kernel - 1) + 1
    if size + 2 * pad < span:
        return 0
    return (size + 2 * pad - span) // stride + 1


def check_window(op: str, p: Mapping[str, int], dilation: int = 1) -> None:
    """Raise WorkloadError when the output height or width would be empty."""
    for axis, size, kernel in (("height", "h", "kh"), ("width", "w", "kw")):
        if out_size(p[size], p[kernel], p["stride"], p["pad"], dilation) <= 0:
            dil = f", dilation={dilation}" if "dilation" in p else ""
            raise WorkloadError(
                f"{op}: output {axis} is 0 ({size}={p[size]}, pad={p['pad']}, "
                f"{kernel}={p[kernel]}{dil}, stride={p['stride']}): "
                "the kernel is larger than the padded input"
            )


def scaled(v: Expr, factor: int) -> Expr:
    """v * factor, without the multiply when factor is 1 (keeps the naive IR readable)."""
    return v if factor == 1 else v * factor


def pad_hw(X: Tensor, pad: int, h_dim: int, value: float | int = 0.0) -> Tensor:
    """The copy of X padded with `value` over its two spatial dimensions h_dim and h_dim+1."""
    shape = list(X.concrete_shape())
    h, w = shape[h_dim], shape[h_dim + 1]
    padded = list(shape)
    padded[h_dim] += 2 * pad
    padded[h_dim + 1] += 2 * pad

    def body(*idx: Expr) -> Expr:
        y, x = idx[h_dim], idx[h_dim + 1]
        src = list(idx)
        src[h_dim] = y - pad if pad else y
        src[h_dim + 1] = x - pad if pad else x
        load = X[tuple(src)]
        if not pad:
            return load
        inside = logical_and(y >= pad, y < h + pad, x >= pad, x < w + pad)
        return select(inside, load, value)

    names = ["b", "c", "y", "x"] if h_dim == 2 else ["b", "y", "x", "c"]
    return te.compute(tuple(padded), body, "pad", axis_names=names)


def pad_np(x: np.ndarray, pad: int, h_dim: int, value: float = 0.0) -> np.ndarray:
    widths = [(0, 0)] * x.ndim
    widths[h_dim] = (pad, pad)
    widths[h_dim + 1] = (pad, pad)
    return np.pad(x, widths, constant_values=value) if pad else x


def windows(x: np.ndarray, kh: int, kw: int, stride: int, dilation: int, h_dim: int) -> np.ndarray:
    """Strided view (..., ho, wo, ..., kh, kw) of the (already padded) input's windows."""
    span_h, span_w = dilation * (kh - 1) + 1, dilation * (kw - 1) + 1
    v = sliding_window_view(x, (span_h, span_w), axis=(h_dim, h_dim + 1))
    sl = [slice(None)] * v.ndim
    sl[h_dim] = slice(None, None, stride)
    sl[h_dim + 1] = slice(None, None, stride)
    sl[-2] = slice(None, None, dilation)
    sl[-1] = slice(None, None, dilation)
    return v[tuple(sl)]


CONV_PARAMS = (
    Param("n", 1, doc="batch size"),
    Param("h", 16, doc="input height"),
    Param("w", 16, doc="input width"),
    Param("ci", 16, doc="input channels"),
    Param("co", 16, doc="output channels"),
    Param("kh", 3, doc="kernel height"),
    Param("kw", 3, doc="kernel width"),
    Param("stride", 1, doc="stride along height and width"),
    Param("pad", 1, minimum=0, doc="zero padding on each side of height and width"),
    Param("dilation", 1, doc="spacing between kernel taps along height and width"),
)


def flops_conv(p: Mapping[str, int]) -> int:
    ho = out_size(p["h"], p["kh"], p["stride"], p["pad"], p["dilation"])
    wo = out_size(p["w"], p["kw"], p["stride"], p["pad"], p["dilation"])
    return 2 * p["n"] * ho * wo * p["co"] * p["ci"] * p["kh"] * p["kw"]


# ---------------------------------------------------------------------------
# conv2d_nhwc


def build_conv2d_nhwc(
    n: int, h: int, w: int, ci: int, co: int, kh: int, kw: int, stride: int, pad: int, dilation: int
) -> Workload:
    """Y[b,i,j,o] = sum_{rh,rw,rc} pad[b, i*s + rh*d, j*s + rw*d, rc] * W[rh,rw,rc,o]."""
    ho = out_size(h, kh, stride, pad, dilation)
    wo = out_size(w, kw, stride, pad, dilation)
    X = te.placeholder((n, h, w, ci), "float32", "X")
    W = te.placeholder((kh, kw, ci, co), "float32", "W")
    P = pad_hw(X, pad, 1)
    rh, rw, rc = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw"), te.reduce_axis(ci, "rc")
    Y = te.compute(
        (n, ho, wo, co),
        lambda b, i, j, o: te.sum(
            P[
                b,
                scaled(i, stride) + scaled(rh, dilation),
                scaled(j, stride) + scaled(rw, dilation),
                rc,
            ]
            * W[rh, rw, rc, o],
            axis=[rh, rw, rc],
        ),
        "Y",
    )
    return Workload("conv2d_nhwc", (X, W), (Y,))


def ref_conv2d_nhwc(p: Mapping[str, int], X: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, ...]:
    win = windows(pad_np(X, p["pad"], 1), p["kh"], p["kw"], p["stride"], p["dilation"], 1)
    # win: (n, ho, wo, ci, kh, kw); W: (kh, kw, ci, co)
    return (np.tensordot(win, W, axes=([3, 4, 5], [2, 0, 1])),)


def check_conv2d_nhwc(p: Mapping[str, int]) -> None:
    check_window("conv2d_nhwc", p, p["dilation"])


CONV2D_NHWC = OpDef(
    name="conv2d_nhwc",
    params=CONV_PARAMS,
    doc=(
        "2-D convolution, NHWC input, HWIO weight, symmetric stride/pad/dilation. "
        "Inputs: X[n,h,w,ci] float32, W[kh,kw,ci,co] float32. Outputs: Y[n,ho,wo,co] float32 "
        "with ho = (h + 2·pad − dilation·(kh−1) − 1) // stride + 1 (wo likewise). "
        "Intermediate: pad[n,h+2·pad,w+2·pad,ci] float32."
    ),
    build=build_conv2d_nhwc,
    reference=ref_conv2d_nhwc,
    flops=flops_conv,
    check=check_conv2d_nhwc,
)

# ---------------------------------------------------------------------------
# conv2d_nchw


def build_conv2d_nchw(
    n: int, h: int, w: int, ci: int, co: int, kh: int, kw: int, stride: int, pad: int, dilation: int
) -> Workload:
    """Y[b,o,i,j] = sum_{rc,rh,rw} pad[b, rc, i*s + rh*d, j*s + rw*d] * W[o,rc,rh,rw]."""
    ho = out_size(h, kh, stride, pad, dilation)
    wo = out_size(w, kw, stride, pad, dilation)
    X = te.placeholder((n, ci, h, w), "float32", "X")
    W = te.placeholder((co, ci, kh, kw), "float32", "W")
    P = pad_hw(X, pad, 2)
    rc, rh, rw = te.reduce_axis(ci, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    Y = te.compute(
        (n, co, ho, wo),
        lambda b, o, i, j: te.sum(
            P[
                b,
                rc,
                scaled(i, stride) + scaled(rh, dilation),
                scaled(j, stride) + scaled(rw, dilation),
            ]
            * W[o, rc, rh, rw],
            axis=[rc, rh, rw],
        ),
        "Y",
    )
    return Workload("conv2d_nchw", (X, W), (Y,))


def ref_conv2d_nchw(p: Mapping[str, int], X: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, ...]:
    win = windows(pad_np(X, p["pad"], 2), p["kh"], p["kw"], p["stride"], p["dilation"], 2)
    # win: (n, ci, ho, wo, kh, kw); W: (co, ci, kh, kw) -> (n, ho, wo, co) -> NCHW
    out = np.tensordot(win, W, axes=([1, 4, 5], [1, 2, 3]))
    return (np.ascontiguousarray(out.transpose(0, 3, 1, 2)),)


def check_conv2d_nchw(p: Mapping[str, int]) -> None:
    check_window("conv2d_nchw", p, p["dilation"])


CONV2D_NCHW = OpDef(
    name="conv2d_nchw",
    params=CONV_PARAMS,
    doc=(
        "2-D convolution, NCHW input, OIHW weight, symmetric stride/pad/dilation. "
        "Inputs: X[n,ci,h,w] float32, W[co,ci,kh,kw] float32. Outputs: Y[n,co,ho,wo] float32 "
        "with ho = (h + 2·pad − dilation·(kh−1) − 1) // stride + 1 (wo likewise). "
        "Intermediate: pad[n,ci,h+2·pad,w+2·pad] float32."
    ),
    build=build_conv2d_nchw,
    reference=ref_conv2d_nchw,
    flops=flops_conv,
    check=check_conv2d_nchw,
)

# ---------------------------------------------------------------------------
# depthwise_conv2d_nhwc


def build_depthwise_conv2d_nhwc(
    n: int, h: int, w: int, c: int, kh: int, kw: int, stride: int, pad: int
) -> Workload:
    """Y[b,i,j,ch] = sum_{rh,rw} pad[b, i*s + rh, j*s + rw, ch] * W[rh,rw,ch]."""
    ho = out_size(h, kh, stride, pad)
    wo = out_size(w, kw, stride, pad)
    X = te.placeholder((n, h, w, c), "float32", "X")
    W = te.placeholder((kh, kw, c), "float32", "W")
    P = pad_hw(X, pad, 1)
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    Y = te.compute(
        (n, ho, wo, c),
        lambda b, i, j, ch: te.sum(
            P[b, scaled(i, stride) + rh, scaled(j, stride) + rw, ch] * W[rh, rw, ch],
            axis=[rh, rw],
        ),
        "Y",
    )
    return Workload("depthwise_conv2d_nhwc", (X, W), (Y,))


def ref_depthwise_conv2d_nhwc(
    p: Mapping[str, int], X: np.ndarray, W: np.ndarray
) -> tuple[np.ndarray, ...]:
    win = windows(pad_np(X, p["pad"], 1), p["kh"], p["kw"], p["stride"], 1, 1)
    # win: (n, ho, wo, c, kh, kw); W: (kh, kw, c)
    return (np.einsum("nhwcij,ijc->nhwc", win, W),)


def flops_depthwise(p: Mapping[str, int]) -> int:
    ho = out_size(p["h"], p["kh"], p["stride"], p["pad"])
    wo = out_size(p["w"], p["kw"], p["stride"], p["pad"])
    return 2 * p["n"] * ho * wo * p["c"] * p["kh"] * p["kw"]


def check_depthwise(p: Mapping[str, int]) -> None:
    check_window("depthwise_conv2d_nhwc", p)


WINDOW_PARAMS = (
    Param("n", 1, doc="batch size"),
    Param("h", 32, doc="input height"),
    Param("w", 32, doc="input width"),
    Param("c", 32, doc="channels"),
    Param("kh", 3, doc="window height"),
    Param("kw", 3, doc="window width"),
    Param("stride", 1, doc="stride along height and width"),
    Param("pad", 1, minimum=0, doc="padding on each side of height and width"),
)

DEPTHWISE_CONV2D_NHWC = OpDef(
    name="depthwise_conv2d_nhwc",
    params=WINDOW_PARAMS,
    doc=(
        "Depthwise 2-D convolution (one filter per channel), NHWC input, HWC weight. "
        "Inputs: X[n,h,w,c] float32, W[kh,kw,c] float32. Outputs: Y[n,ho,wo,c] float32 "
        "with ho = (h + 2·pad − kh) // stride + 1 (wo likewise). "
        "Intermediate: pad[n,h+2·pad,w+2·pad,c] float32."
    ),
    build=build_depthwise_conv2d_nhwc,
    reference=ref_depthwise_conv2d_nhwc,
    flops=flops_depthwise,
    check=check_depthwise,
)
