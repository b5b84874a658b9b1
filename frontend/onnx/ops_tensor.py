"""ONNX → graph ops: layout (Reshape, Transpose, Slice, …), Gather and Where, and the
convolutional ops (Conv, pools, BatchNormalization folded into the Conv before it).

Shapes are static here, so every target an ONNX op reads from a tensor input (Reshape's
shape, Slice's bounds, Squeeze's axes) must be a constant by the time it is read:
folding has turned the exporters' shape arithmetic into one.
"""

from __future__ import annotations

import math

import numpy as np

from frontend.onnx.builder import Builder, OnnxNode
from frontend.onnx.ops_math import (
    Handler,
    const_ints,
    final,
    norm_axis,
    tmp,
    unused_extra_outputs,
    x,
)
from ir.graph import make_node, normalize_slice


def _axes(b: Builder, n: OnnxNode, rank: int, *, input_index: int = 1) -> list[int] | None:
    """Axes from the given input (newer opsets) or the `axes` attribute (older), normalised."""
    v = x(b, n, input_index)
    axes = const_ints(b, v, "the axes") if v else n.attr("axes")
    return None if axes is None else [norm_axis(b, a, rank) for a in axes]


def transpose(b: Builder, n: OnnxNode) -> list[str]:
    v = x(b, n)
    perm = n.attr("perm") or list(range(b.type(v).rank))[::-1]
    return [final(b, n, "transpose", [v], perm=tuple(perm))]


def reshape_to(b: Builder, n: OnnxNode, v: str, shape: tuple[int, ...]) -> list[str]:
    return [final(b, n, "reshape", [v], shape=tuple(int(d) for d in shape))]


def reshape(b: Builder, n: OnnxNode) -> list[str]:
    """0 copies the input's dim (unless allowzero), one -1 takes what is left."""
    v = x(b, n)
    t = b.type(v)
    target = const_ints(b, x(b, n, 1), "Reshape's shape")
    copy = not n.attr("allowzero", 0)
    if copy and any(d == 0 and i >= t.rank for i, d in enumerate(target)):
        raise b.error(f"shape {target} copies a dim (0) that {t} does not have")
    out = [t.shape[i] if d == 0 and copy else d for i, d in enumerate(target)]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise b.error(f"shape {target} has more than one -1 or a negative dim")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or t.size % known:
            raise b.error(f"cannot reshape {t} to {target}")
        out[out.index(-1)] = t.size // known
    return reshape_to(b, n, v, tuple(out))


def flatten(b: Builder, n: OnnxNode) -> list[str]:
    v = x(b, n)
    t = b.type(v)
    axis = n.attr("axis", 1)
    if not -t.rank <= axis <= t.rank:
        raise b.error(f"axis {axis} is out of range for rank {t.rank}")
    axis = axis + t.rank if axis < 0 else axis
    return reshape_to(b, n, v, (math.prod(t.shape[:axis]), math.prod(t.shape[axis:])))


def squeeze(b: Builder, n: OnnxNode) -> list[str]:
    v = x(b, n)
    t = b.type(v)
    axes = _axes(b, n, t.rank)
    if axes is None:
        axes = [i for i, d in enumerate(t.shape) if d == 1]
    if any(t.shape[a] != 1 for a in axes):
        raise b.error(f"cannot squeeze axes {axes} of {t}: not all of size 1")
    return reshape_to(b, n, v, tuple(d for i, d in enumerate(t.shape) if i not in axes))


def unsqueeze(b: Builder, n: OnnxNode) -> list[str]:
    v = x(b, n)
    t = b.type(v)
    n_axes = len(const_ints(b, x(b, n, 1), "the axes") if x(b, n, 1) else n.attr("axes", []))
    axes = set(_axes(b, n, t.rank + n_axes) or [])
    dims = iter(t.shape)
    return reshape_to(
        b, n, v, tuple(1 if i in axes else next(dims) for i in range(t.rank + n_axes))
    )


def concat(b: Builder, n: OnnxNode) -> list[str]:
    values = [x(b, n, i) for i in range(len(n.inputs))]
    axis = norm_axis(b, n.attr("axis"), b.type(values[0]).rank)
    return [final(b, n, "concat", values, axis=axis)]


def split(b: Builder, n: OnnxNode) -> list[str]:
    """Sizes from the `split` input (13+) or attribute (<13), else equal parts (ceil, 18+)."""
    v = x(b, n)
    t = b.type(v)
    axis = norm_axis(b, n.attr("axis", 0), t.rank)
    dim, parts = t.shape[axis], len(n.outputs)
    sizes_in = x(b, n, 1)
    sizes = const_ints(b, sizes_in, "Split's sizes") if sizes_in else n.attr("split")
    if not sizes:
        step = -(-dim // parts)
        sizes = [min(step, dim - i * step) for i in range(parts)]
    outs = [b.claim(o) for o in n.outputs]
    return b.emit_to("split", [v], outs, n.name, axis=axis, sizes=tuple(sizes))


def slice_(b: Builder, n: OnnxNode) -> list[str]:
    v = x(b, n)
    t = b.type(v)
    if n.opset < 10:
        starts, ends, axes, steps = n.attr("starts"), n.attr("ends"), n.attr("axes"), None
    else:
        starts, ends = (const_ints(b, x(b, n, i), "Slice's bounds") for i in (1, 2))
        axes = const_ints(b, x(b, n, 3), "Slice's axes") if x(b, n, 3) else None
        steps = const_ints(b, x(b, n, 4), "Slice's steps") if x(b, n, 4) else None
    axes = [norm_axis(b, a, t.rank) for a in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(starts)
    spec = {}
    for a, s, e, st in sorted(zip(axes, starts, ends, steps)):
        if st == 0:
            raise b.error("a slice step must not be 0")
        spec[a] = (*normalize_slice(t.shape[a], s, e, st), st)
    keys = sorted(spec)
    return [
        final(
            b,
            n,
            "slice",
            [v],
            starts=tuple(spec[a][0] for a in keys),
            ends=tuple(spec[a][1] for a in keys),
            axes=tuple(keys),
            steps=tuple(spec[a][2] for a in keys),
        )
    ]


def gather(b: Builder, n: OnnxNode) -> list[str]:
    data, idx = x(b, n, 0), x(b, n, 1)
    axis = norm_axis(b, n.attr("axis", 0), b.type(data).rank)
    return [final(b, n, "gather", [data, idx], axis=axis)]


def where(b: Builder, n: OnnxNode) -> list[str]:
    return [final(b, n, "where", [x(b, n, 0), x(b, n, 1), x(b, n, 2)])]


def expand(b: Builder, n: OnnxNode) -> list[str]:
    v = x(b, n)
    t = b.type(v)
    target = const_ints(b, x(b, n, 1), "Expand's shape")
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(t.shape, tuple(target)))
    except ValueError:
        raise b.error(f"{t} does not broadcast with {target}") from None
    return [v] if out == t.shape else [final(b, n, "expand", [v], shape=out)]


# --- convolution and pooling ---------------------------------------------------------------


def _window(
    b: Builder,
    n: OnnxNode,
    hw: tuple[int, int],
    kernel: tuple[int, int],
    dilations: tuple[int, int],
) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Strides and (top, left, bottom, right) pads, `auto_pad` resolved."""
    strides = tuple(n.attr("strides", (1, 1)))
    auto = n.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = tuple(n.attr("pads", (0, 0, 0, 0)))
    elif auto == "VALID":
        pads = (0, 0, 0, 0)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(hw, kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        pads = (*begin, *end)
    else:
        raise b.error(f"unknown auto_pad {auto!r}")
    if len(strides) != 2 or len(pads) != 4:
        raise b.error("only 2-D convolutions and pools are supported (4-D NCHW inputs)")
    return strides, pads


def _spatial_input(b: Builder, n: OnnxNode) -> tuple[str, tuple[int, int]]:
    v = x(b, n)
    t = b.type(v)
    if t.rank != 4:
        raise b.error(f"expects a 4-D NCHW input (2-D spatial), got {t}")
    return v, (t.shape[2], t.shape[3])


def conv(b: Builder, n: OnnxNode) -> list[str]:
    v, hw = _spatial_input(b, n)
    w = x(b, n, 1)
    kernel = b.type(w).shape[2:]
    dilations = tuple(n.attr("dilations", (1, 1)))
    strides, pads = _window(b, n, hw, kernel, dilations)
    attrs = dict(layout="NCHW", strides=strides, pads=pads, dilations=dilations)
    return [final(b, n, "conv2d", [v, w, x(b, n, 2)], groups=n.attr("group", 1), **attrs)]


def pool(b: Builder, n: OnnxNode) -> list[str]:
    """ceil_mode becomes extra bottom/right padding (a window starting in it is dropped)."""
    unused_extra_outputs(b, n, 1)
    v, hw = _spatial_input(b, n)
    kernel = tuple(n.attr("kernel_shape"))
    if tuple(n.attr("dilations", (1, 1))) != (1, 1):
        raise b.error("dilated pooling is not supported")
    strides, (pt, pl, pb, pr) = _window(b, n, hw, kernel, (1, 1))
    include_pad = int(n.attr("count_include_pad", 0))
    if n.attr("ceil_mode", 0):
        extra = []
        for size, begin, end, k, s in zip(hw, (pt, pl), (pb, pr), kernel, strides):
            out = -(-(size + begin + end - k) // s) + 1
            if (out - 1) * s >= size + begin:
                out -= 1
            extra.append(max((out - 1) * s + k - (size + begin + end), 0))
        if any(extra) and n.op_type == "AveragePool" and include_pad:
            raise b.error("ceil_mode with count_include_pad=1 is not supported")
        pb, pr = pb + extra[0], pr + extra[1]
    attrs = dict(layout="NCHW", kernel=kernel, strides=strides, pads=(pt, pl, pb, pr))
    if n.op_type == "MaxPool":
        return [final(b, n, "max_pool2d", [v], **attrs)]
    return [final(b, n, "avg_pool2d", [v], count_include_pad=include_pad, **attrs)]


def global_avg_pool(b: Builder, n: OnnxNode) -> list[str]:
    v, _ = _spatial_input(b, n)
    return [final(b, n, "global_avg_pool", [v], layout="NCHW")]


def batch_norm(b: Builder, n: OnnxNode) -> list[str]:
    """Inference BatchNormalization: y = x·s + t with s = γ/√(σ²+ε), t = β − μ·s, folded into
    the weights and bias of the Conv before it when nothing else reads that Conv."""
    unused_extra_outputs(b, n, 1)
    if n.attr("training_mode", 0):
        raise b.error("training_mode=1 is not supported (inference only)")
    v = x(b, n)
    gamma, beta, mean, var = (
        np.asarray(b.const(x(b, n, i), "the batch-norm statistics"), np.float64)
        for i in range(1, 5)
    )
    s = gamma / np.sqrt(var + float(n.attr("epsilon", 1e-5)))
    t = beta - mean * s
    dtype = b.type(v).dtype
    p = b.producer(v)
    conv_node = b.nodes[p] if p is not None else None
    if (
        conv_node is not None
        and conv_node.op == "conv2d"
        and b.is_const(conv_node.inputs[1])
        and (not conv_node.inputs[2] or b.is_const(conv_node.inputs[2]))
        and b.uses.get(n.input(0), 0) == 1
    ):
        w = b.consts[conv_node.inputs[1]].astype(np.float64) * s.reshape(-1, 1, 1, 1)
        bias = t + (b.consts[conv_node.inputs[2]] * s if conv_node.inputs[2] else 0.0)
        hint = conv_node.inputs[1]
        ins = (
            conv_node.inputs[0],
            b.add_const(w.astype(dtype), hint=f"{hint}_bn"),
            b.add_const(bias.astype(dtype), hint=f"{hint}_bn_bias"),
        )
        b.nodes[p] = make_node(
            "conv2d", ins, conv_node.outputs, name=conv_node.name, **dict(conv_node.attrs)
        )
        return [v]
    shape = (-1,) + (1,) * (b.type(v).rank - 2)
    scaled = tmp(b, n, "mul", [v, b.add_const(s.reshape(shape).astype(dtype))])
    return [final(b, n, "add", [scaled, b.add_const(t.reshape(shape).astype(dtype))])]


HANDLERS: dict[str, Handler] = {
    "Transpose": transpose,
    "Reshape": reshape,
    "Flatten": flatten,
    "Squeeze": squeeze,
    "Unsqueeze": unsqueeze,
    "Concat": concat,
    "Split": split,
    "Slice": slice_,
    "Gather": gather,
    "Where": where,
    "Expand": expand,
    "Conv": conv,
    "MaxPool": pool,
    "AveragePool": pool,
    "GlobalAveragePool": global_avg_pool,
    "BatchNormalization": batch_norm,
}
