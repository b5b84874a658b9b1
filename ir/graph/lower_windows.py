"""Windowed graph ops in the compute DSL: convolution (dense, grouped, depthwise), max and
average pooling, global average pooling — registered into `ir.graph.lower_ops`' table.

A dense convolution whose windows leave its input reads a zero-padded copy, a compute
of its own (`_padded`) that the design space places; grouped and depthwise ones and the
pools keep the bounds check in their reduction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ir.errors import GraphError
from ir.expr import Expr, Reduce, cast, logical_and, maximum, minimum, select
from ir.graph.graph import Node
from ir.graph.lower_ops import (
    GroupBuilder,
    Index,
    Lazy,
    index_const,
    literal,
    register_lowering,
    zero_index,
)
from ir.graph.lower_winograd import lower_winograd, winograd_eligible


def _nhwc(node: Node) -> None:
    if node.attr("layout", "NCHW") != "NHWC":
        raise GraphError(
            f"node {node.label!r}: {node.op} runs NHWC in a kernel (run the layout pass)"
        )


def _window(
    b: GroupBuilder, x: Lazy, node: Node, idx: Index, kernel: tuple[int, int], dil: tuple[int, int]
) -> tuple[Expr, Expr, Expr | None, list]:
    """Input row and column of a window tap, the in-bounds condition (None: always), the axes."""
    (sh, sw), (pt, pl, _, _) = node.attr("strides", (1, 1)), node.attr("pads", (0, 0, 0, 0))
    h, w = x.shape[1], x.shape[2]
    rh, rw = b.reduce_axis(kernel[0]), b.reduce_axis(kernel[1])
    oh, ow = idx[1], idx[2]
    ih = oh * sh + rh.var * dil[0] - pt if (sh, dil[0], pt) != (1, 1, 0) else oh + rh.var
    iw = ow * sw + rw.var * dil[1] - pl if (sw, dil[1], pl) != (1, 1, 0) else ow + rw.var
    checks = []
    out_h, out_w = node_out_hw(node, x.shape, kernel, dil)
    if pt > 0:
        checks.append(ih >= 0)
    if (out_h - 1) * sh + (kernel[0] - 1) * dil[0] - pt >= h:
        checks.append(ih < h)
    if pl > 0:
        checks.append(iw >= 0)
    if (out_w - 1) * sw + (kernel[1] - 1) * dil[1] - pl >= w:
        checks.append(iw < w)
    return ih, iw, (logical_and(*checks) if checks else None), [rh, rw]


def node_out_hw(
    node: Node, shape: Sequence[int], kernel: tuple[int, int], dil: tuple[int, int]
) -> tuple[int, int]:
    (sh, sw), (pt, pl, pb, pr) = node.attr("strides", (1, 1)), node.attr("pads", (0, 0, 0, 0))
    oh = (shape[1] + pt + pb - dil[0] * (kernel[0] - 1) - 1) // sh + 1
    ow = (shape[2] + pl + pr - dil[1] * (kernel[1] - 1) - 1) // sw + 1
    return oh, ow


def _padded(
    b: GroupBuilder, x: Lazy, node: Node, kernel: tuple[int, int], dil: tuple[int, int]
) -> Lazy | None:
    """`x` zero-padded to exactly the rows and columns the windows read, as a compute of
    its own (None when every tap is inside `x`).

    A dense convolution reads each input element once per output-channel tile; with the
    padding's bounds check inside the reduction, every one of those reads is a guarded
    load (a branch per row of the register tile, no broadcast folded into the FMA). As a
    block of its own, padding is placed by the design space like the library conv's
    `pad`: a copy up front or under a tile loop (tuner/space/rules/
    random_compute_location.py). Grouped convolutions keep the guard in the reduction."""
    (sh, sw), (pt, pl, _, _) = node.attr("strides", (1, 1)), node.attr("pads", (0, 0, 0, 0))
    n, h, w, c = x.shape
    out_h, out_w = node_out_hw(node, x.shape, kernel, dil)
    ph = (out_h - 1) * sh + (kernel[0] - 1) * dil[0] + 1
    pw = (out_w - 1) * sw + (kernel[1] - 1) * dil[1] + 1
    if pt == pl == 0 and ph <= h and pw <= w:
        return None

    def at(idx: Index) -> Expr:
        y, z = idx[1], idx[2]
        checks = []
        if pt > 0:
            checks.append(y >= pt)
        if ph - pt > h:
            checks.append(y < h + pt)
        if pl > 0:
            checks.append(z >= pl)
        if pw - pl > w:
            checks.append(z < w + pl)
        v = b.load(x, (idx[0], y - pt if pt else y, z - pl if pl else z, idx[3]))
        return select(logical_and(*checks), v, literal(0.0, x.dtype)) if checks else v

    return b.materialize(Lazy((n, ph, pw, c), x.dtype, at))


def _taps(
    b: GroupBuilder, node: Node, idx: Index, kernel: tuple[int, int], dil: tuple[int, int]
) -> tuple[Expr, Expr, list]:
    """Row and column of a window tap in the padded input (`_padded`), and the axes."""
    sh, sw = node.attr("strides", (1, 1))
    rh, rw = b.reduce_axis(kernel[0]), b.reduce_axis(kernel[1])
    ih = idx[1] * sh + rh.var * dil[0] if (sh, dil[0]) != (1, 1) else idx[1] + rh.var
    iw = idx[2] * sw + rw.var * dil[1] if (sw, dil[1]) != (1, 1) else idx[2] + rw.var
    return ih, iw, [rh, rw]


@register_lowering("conv2d")
def _lower_conv(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    _nhwc(node)
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    kh, kw, cig, co = w.shape
    cog = co // node.attr("groups", 1)
    dil = node.attr("dilations", (1, 1))

    if b.winograd and winograd_eligible(b.graph, node):
        conv = lower_winograd(b, node, x, w, outs[0])
        if bias is None:
            return conv
        return Lazy(outs[0], x.dtype, lambda idx: conv.at(idx) + b.load(bias, (idx[3],)))
    padded = _padded(b, x, node, (kh, kw), dil) if cig == x.shape[3] else None

    def at(idx: Index) -> Expr:
        if padded is not None:
            ih, iw, axes = _taps(b, node, idx, (kh, kw), dil)
            inside = None
        else:
            ih, iw, inside, axes = _window(b, x, node, idx, (kh, kw), dil)
        rc = b.reduce_axis(cig)
        o = idx[3]
        if cig == x.shape[3]:
            ch = rc.var
        elif cig == 1 and cog == 1:
            ch = o
        else:
            ch = (o // cog) * cig + rc.var if cig > 1 else o // cog
        v = b.load(padded or x, (idx[0], ih, iw, ch))
        if inside is not None:
            v = select(inside, v, literal(0.0, x.dtype))
        return Reduce("sum", v * b.load(w, (axes[0].var, axes[1].var, rc.var, o)), (*axes, rc))

    conv = Lazy(outs[0], x.dtype, at, reduces=True)
    if bias is None:
        return conv
    return Lazy(outs[0], x.dtype, lambda idx: b.load(conv, idx) + b.load(bias, (idx[3],)))


@register_lowering("max_pool2d", "avg_pool2d")
def _lower_pool(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    _nhwc(node)
    x = ins[0]
    kernel = node.attr("kernel")
    is_max = node.op == "max_pool2d"

    def at(idx: Index) -> Expr:
        ih, iw, inside, axes = _window(b, x, node, idx, kernel, (1, 1))
        v = b.load(x, (idx[0], ih, iw, idx[3]))
        if inside is not None:
            v = select(inside, v, literal(-math.inf if is_max else 0.0, x.dtype))
        return Reduce("max" if is_max else "sum", v, tuple(axes))

    pooled = Lazy(outs[0], x.dtype, at, reduces=True)
    if is_max:
        return pooled
    return Lazy(outs[0], x.dtype, lambda idx: b.load(pooled, idx) / _pool_count(node, x, idx))


def _pool_count(node: Node, x: Lazy, idx: Index) -> Expr:
    """Cells of the window inside the input (padding excluded unless count_include_pad)."""
    kh, kw = node.attr("kernel")
    (sh, sw), (pt, pl, pb, pr) = node.attr("strides", (1, 1)), node.attr("pads", (0, 0, 0, 0))
    if node.attr("count_include_pad", 0) or (pt, pl, pb, pr) == (0, 0, 0, 0):
        return literal(float(kh * kw), x.dtype)
    spans = []
    for o, s, p, k, n in ((idx[1], sh, pt, kh, x.shape[1]), (idx[2], sw, pl, kw, x.shape[2])):
        start = o * s - p
        spans.append(minimum(start + k, index_const(n)) - maximum(start, zero_index()))
    return cast(x.dtype, spans[0] * spans[1])


@register_lowering("global_avg_pool")
def _lower_global_pool(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    _nhwc(node)
    x = ins[0]
    h, w = x.shape[1], x.shape[2]

    def at(idx: Index) -> Expr:
        rh, rw = b.reduce_axis(h), b.reduce_axis(w)
        return Reduce("sum", b.load(x, (idx[0], rh.var, rw.var, idx[3])), (rh, rw))

    total = Lazy(outs[0], x.dtype, at, reduces=True)
    return Lazy(outs[0], x.dtype, lambda idx: b.load(total, idx) / literal(float(h * w), x.dtype))
