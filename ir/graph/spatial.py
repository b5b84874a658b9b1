"""Convolution and pooling: type inference and numpy evaluation for the graph ops
`conv2d`, `max_pool2d`, `avg_pool2d` and `global_avg_pool`, in NCHW or NHWC.

Evaluation works in NCHW (an NHWC tensor is transposed in and out) and builds one
im2col matrix per call, so a convolution is a single batched matmul in float64.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ir.errors import GraphError
from ir.graph.graph import Node, TensorType

LAYOUTS = ("NCHW", "NHWC")


def _pair(node: Node, key: str, default: tuple[int, int] | None = None) -> tuple[int, int]:
    value = node.attr(key, default)
    if value is None:
        raise GraphError(f"missing attribute {key!r}")
    if not (
        isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value)
    ):
        raise GraphError(f"attribute {key!r} must be two ints, got {value!r}")
    return value


def _geometry(node: Node) -> tuple[str, tuple[int, int], tuple[int, int, int, int]]:
    layout = node.attr("layout", "NCHW")
    if layout not in LAYOUTS:
        raise GraphError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    strides = _pair(node, "strides", (1, 1))
    pads = node.attr("pads", (0, 0, 0, 0))
    if not (isinstance(pads, tuple) and len(pads) == 4 and all(isinstance(p, int) for p in pads)):
        raise GraphError(
            f"attribute 'pads' must be four ints (top, left, bottom, right), got {pads!r}"
        )
    if min(strides) < 1 or min(pads) < 0:
        raise GraphError(f"strides must be >= 1 and pads >= 0, got {strides} and {pads}")
    return layout, strides, pads


def _spatial(t: TensorType, layout: str) -> tuple[int, int, int, int]:
    """(N, C, H, W) of a 4-D activation in either layout."""
    if t.rank != 4:
        raise GraphError(f"expects a 4-D input, got {t}")
    n, a, b, c = t.shape
    return (n, a, b, c) if layout == "NCHW" else (n, c, a, b)


def _out_dim(size: int, pad: int, kernel: int, stride: int, what: str) -> int:
    out = (size + pad - kernel) // stride + 1
    if size + pad < kernel or out < 1:
        raise GraphError(
            f"{what}: the window ({kernel}) is larger than the padded input ({size + pad})"
        )
    return out


def _activation(layout: str, n: int, c: int, h: int, w: int, dtype: str) -> TensorType:
    shape = (n, c, h, w) if layout == "NCHW" else (n, h, w, c)
    return TensorType(shape, dtype)


def infer_conv2d(types: Sequence[TensorType | None], node: Node) -> tuple[TensorType, ...]:
    if len(types) not in (2, 3) or types[0] is None or types[1] is None:
        raise GraphError("takes inputs (X, W, B-or-'')")
    layout, (sh, sw), (pt, pl, pb, pr) = _geometry(node)
    dh, dw = _pair(node, "dilations", (1, 1))
    groups = node.attr("groups", 1)
    x, w = types[0], types[1]
    n, c, h, wd = _spatial(x, layout)
    if w.rank != 4:
        raise GraphError(f"the weight must be 4-D, got {w}")
    co, cig, kh, kw = w.shape if layout == "NCHW" else (w.shape[3], w.shape[2], *w.shape[:2])
    if not isinstance(groups, int) or groups < 1 or c % groups or co % groups:
        raise GraphError(
            f"groups={groups!r} must divide the input ({c}) and output ({co}) channels"
        )
    if cig * groups != c:
        raise GraphError(f"the weight {w} takes {cig * groups} input channels, the input has {c}")
    if x.dtype != w.dtype or x.dtype not in ("float32", "float64"):
        raise GraphError(f"input and weight must share a float dtype, got {x.dtype} and {w.dtype}")
    if min(dh, dw) < 1:
        raise GraphError(f"dilations must be >= 1, got {(dh, dw)}")
    if len(types) == 3 and types[2] is not None and types[2] != TensorType((co,), x.dtype):
        raise GraphError(f"the bias must be {x.dtype}[{co}], got {types[2]}")
    oh = _out_dim(h, pt + pb, dh * (kh - 1) + 1, sh, "height")
    ow = _out_dim(wd, pl + pr, dw * (kw - 1) + 1, sw, "width")
    return (_activation(layout, n, co, oh, ow, x.dtype),)


def _windows(
    xp: np.ndarray,
    kh: int,
    kw: int,
    strides: tuple[int, int],
    dil: tuple[int, int],
    oh: int,
    ow: int,
) -> list[np.ndarray]:
    """The kh*kw strided views of a padded NCHW tensor, each [N, C, oh, ow]."""
    (sh, sw), (dh, dw) = strides, dil
    return [
        xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]


def conv2d_nchw(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    strides: tuple[int, int],
    pads: tuple[int, int, int, int],
    dilations: tuple[int, int],
    groups: int,
) -> np.ndarray:
    """The float64 reference convolution: im2col, then one matmul per group."""
    n, _c, _, _ = x.shape
    co, cig, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (xp.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    g, k = groups, kh * kw
    cols = np.stack(_windows(xp, kh, kw, strides, dilations, oh, ow))  # [K, N, C, oh, ow]
    cols = cols.reshape(k, n, g, cig, oh, ow).transpose(2, 3, 0, 1, 4, 5)
    cols = cols.reshape(g, cig * k, n * oh * ow)
    wg = w.astype(np.float64).reshape(g, co // g, cig * k)
    out = np.matmul(wg, cols).reshape(co, n, oh, ow).transpose(1, 0, 2, 3)
    if b is not None:
        out = out + b.astype(np.float64).reshape(1, co, 1, 1)
    return out


def _to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 3, 1, 2)


def _from_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 2, 3, 1)


def eval_conv2d(args: Sequence[np.ndarray | None], node: Node) -> tuple[np.ndarray, ...]:
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    layout, strides, pads = _geometry(node)
    dil = _pair(node, "dilations", (1, 1))
    if layout == "NHWC":
        w = w.transpose(3, 2, 0, 1)  # HWIO -> OIHW
    out = conv2d_nchw(_to_nchw(x, layout), w, b, strides, pads, dil, node.attr("groups", 1))
    return (np.ascontiguousarray(_from_nchw(out, layout)).astype(x.dtype),)


def infer_pool(types: Sequence[TensorType | None], node: Node) -> tuple[TensorType, ...]:
    if len(types) != 1 or types[0] is None:
        raise GraphError("takes one input")
    layout, (sh, sw), (pt, pl, pb, pr) = _geometry(node)
    kh, kw = _pair(node, "kernel")
    if min(kh, kw) < 1:
        raise GraphError(f"the kernel must be >= 1, got {(kh, kw)}")
    if max(pt, pb) >= kh or max(pl, pr) >= kw:
        raise GraphError(f"pads {(pt, pl, pb, pr)} must be smaller than the kernel {(kh, kw)}")
    if node.op == "avg_pool2d" and node.attr("count_include_pad", 0) not in (0, 1):
        raise GraphError("count_include_pad must be 0 or 1")
    n, c, h, w = _spatial(types[0], layout)
    if types[0].dtype not in ("float32", "float64"):
        raise GraphError(f"expects a float input, got {types[0]}")
    oh = _out_dim(h, pt + pb, kh, sh, "height")
    ow = _out_dim(w, pl + pr, kw, sw, "width")
    return (_activation(layout, n, c, oh, ow, types[0].dtype),)


def eval_pool(args: Sequence[np.ndarray | None], node: Node) -> tuple[np.ndarray, ...]:
    x0 = args[0]
    layout, strides, (pt, pl, pb, pr) = _geometry(node)
    kh, kw = _pair(node, "kernel")
    x = _to_nchw(x0, layout).astype(np.float64)
    fill = -np.inf if node.op == "max_pool2d" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    oh = (xp.shape[2] - kh) // strides[0] + 1
    ow = (xp.shape[3] - kw) // strides[1] + 1
    views = _windows(xp, kh, kw, strides, (1, 1), oh, ow)
    if node.op == "max_pool2d":
        out = np.maximum.reduce(views)
    else:
        out = np.add.reduce(views)
        if node.attr("count_include_pad", 0):
            out = out / (kh * kw)
        else:
            ones = np.pad(np.ones((1, 1, *x.shape[2:])), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
            out = out / np.add.reduce(_windows(ones, kh, kw, strides, (1, 1), oh, ow))
    return (np.ascontiguousarray(_from_nchw(out, layout)).astype(x0.dtype),)


def infer_global_avg_pool(types: Sequence[TensorType | None], node: Node) -> tuple[TensorType, ...]:
    if len(types) != 1 or types[0] is None:
        raise GraphError("takes one input")
    layout = node.attr("layout", "NCHW")
    if layout not in LAYOUTS:
        raise GraphError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    n, c, _, _ = _spatial(types[0], layout)
    if types[0].dtype not in ("float32", "float64"):
        raise GraphError(f"expects a float input, got {types[0]}")
    return (_activation(layout, n, c, 1, 1, types[0].dtype),)


def eval_global_avg_pool(args: Sequence[np.ndarray | None], node: Node) -> tuple[np.ndarray, ...]:
    x = args[0]
    axes = (2, 3) if node.attr("layout", "NCHW") == "NCHW" else (1, 2)
    return (x.astype(np.float64).mean(axis=axes, keepdims=True).astype(x.dtype),)
