"""ONNX → graph ops: arithmetic, activations, matmul and Gemm, reductions, normalisations,
constants and the shape arithmetic that exists only to be folded (Shape, Range, Equal…).

Each handler takes the builder and one ONNX node and returns the graph value of each of
the node's outputs; the last op of a handler writes to the ONNX output's own name.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from frontend.onnx.builder import Builder, OnnxNode, dtype_name, tensor_array

Handler = Callable[[Builder, OnnxNode], list[str]]


def x(b: Builder, n: OnnxNode, i: int = 0) -> str:
    """The graph value of the node's i-th input."""
    return b.value(n.input(i))


def final(b: Builder, n: OnnxNode, op: str, inputs: list[str], i: int = 0, **attrs: object) -> str:
    """Emit the op producing the node's i-th output under its ONNX name."""
    return b.emit_to(op, inputs, [b.claim(n.outputs[i])], n.name, **attrs)[0]


def tmp(b: Builder, n: OnnxNode, op: str, inputs: list[str], **attrs: object) -> str:
    return b.emit(op, inputs, n.name, **attrs)[0]


def norm_axis(b: Builder, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise b.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def const_ints(b: Builder, value: str, what: str) -> list[int]:
    return [int(v) for v in np.asarray(b.const(value, what)).reshape(-1)]


def unused_extra_outputs(b: Builder, n: OnnxNode, keep: int) -> None:
    """Refuse a node whose outputs beyond the first `keep` are read (training statistics…)."""
    for o in n.outputs[keep:]:
        if o and b.uses.get(o, 0):
            raise b.error(f"output {o!r} is used; loomtune computes only the first {keep}")


UNARY = {
    "Neg": "neg",
    "Exp": "exp",
    "Erf": "erf",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Relu": "relu",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}


def unary(b: Builder, n: OnnxNode) -> list[str]:
    return [final(b, n, UNARY[n.op_type], [x(b, n)])]


def binary(b: Builder, n: OnnxNode) -> list[str]:
    lhs, rhs = x(b, n, 0), x(b, n, 1)
    if n.op_type == "Pow" and b.type(rhs).dtype != b.type(lhs).dtype:
        rhs = tmp(b, n, "cast", [rhs], to=b.type(lhs).dtype)
    return [final(b, n, BINARY[n.op_type], [lhs, rhs])]


def identity(b: Builder, n: OnnxNode) -> list[str]:
    out = [x(b, n)]
    if n.op_type == "Dropout" and len(n.outputs) > 1 and n.outputs[1]:  # the mask: all kept
        out.append(b.add_const(np.ones(b.type(out[0]).shape, np.bool_), n.outputs[1]))
    return out


def clip(b: Builder, n: OnnxNode) -> list[str]:
    if n.opset < 11:
        lo, hi = n.attr("min", -math.inf), n.attr("max", math.inf)
    else:
        bound = [x(b, n, i) for i in (1, 2)]
        lo, hi = (
            float(np.asarray(b.const(v, "the Clip bound")).reshape(())) if v else d
            for v, d in zip(bound, (-math.inf, math.inf))
        )
    return [final(b, n, "clip", [x(b, n)], min=float(lo), max=float(hi))]


def gelu(b: Builder, n: OnnxNode) -> list[str]:
    return [final(b, n, "gelu", [x(b, n)], approximate=n.attr("approximate", "none"))]


def cast(b: Builder, n: OnnxNode) -> list[str]:
    v, to = x(b, n), dtype_name(n.attr("to"), "Cast's target")
    return [v] if b.type(v).dtype == to else [final(b, n, "cast", [v], to=to)]


def matmul(b: Builder, n: OnnxNode) -> list[str]:
    return [final(b, n, "matmul", [x(b, n, 0), x(b, n, 1)])]


def gemm(b: Builder, n: OnnxNode) -> list[str]:
    """Y = alpha·A'·B' + beta·C: transposes and scalings fold into constant operands."""
    a, w, c = x(b, n, 0), x(b, n, 1), x(b, n, 2)
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if n.attr("transA", 0):
        a = tmp(b, n, "transpose", [a], perm=(1, 0))
    if n.attr("transB", 0):
        w = tmp(b, n, "transpose", [w], perm=(1, 0))
    scale = lambda v, k: tmp(b, n, "mul", [v, b.add_const(np.array(k, b.type(v).dtype))])  # noqa: E731
    if alpha != 1.0:  # onto the weight when it is a constant (folded), else onto A
        w, a = (scale(w, alpha), a) if b.is_const(w) else (w, scale(a, alpha))
    if c and beta != 1.0:
        c = scale(c, beta)
    if not c:
        return [final(b, n, "matmul", [a, w])]
    return [final(b, n, "add", [tmp(b, n, "matmul", [a, w]), c])]


def softmax(b: Builder, n: OnnxNode) -> list[str]:
    """Opset 13 normalises one axis; before, the input was coerced to 2-D at `axis`."""
    v = x(b, n)
    t = b.type(v)
    axis = norm_axis(b, n.attr("axis", -1 if n.opset >= 13 else 1), t.rank)
    if n.opset >= 13 or axis == t.rank - 1:
        return [final(b, n, "softmax", [v], axis=axis)]
    flat = (math.prod(t.shape[:axis]), math.prod(t.shape[axis:]))
    v = tmp(b, n, "reshape", [v], shape=flat)
    v = tmp(b, n, "softmax", [v], axis=1)
    return [final(b, n, "reshape", [v], shape=t.shape)]


def layer_norm(b: Builder, n: OnnxNode) -> list[str]:
    unused_extra_outputs(b, n, 1)
    v = x(b, n)
    axis = norm_axis(b, n.attr("axis", -1), b.type(v).rank)
    eps = float(n.attr("epsilon", 1e-5))
    return [final(b, n, "layer_norm", [v, x(b, n, 1), x(b, n, 2)], axis=axis, epsilon=eps)]


REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max"}


def reduce(b: Builder, n: OnnxNode) -> list[str]:
    """Axes come from an attribute (older opsets) or the second input (ReduceSum 13+, others 18+)."""
    v = x(b, n)
    rank = b.type(v).rank
    axes_in = x(b, n, 1)
    axes = const_ints(b, axes_in, "the reduction axes") if axes_in else n.attr("axes")
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return [v]
        axes = range(rank)
    axes = tuple(sorted({norm_axis(b, a, rank) for a in axes}))
    keep = int(n.attr("keepdims", 1))
    return [final(b, n, REDUCE[n.op_type], [v], axes=axes, keepdims=keep)]


# --- constants and the shape arithmetic that is folded at import ---------------------------


def constant(b: Builder, n: OnnxNode) -> list[str]:
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32)):
        if key in n.attrs:
            return [b.add_const(np.array(n.attrs[key], dtype), n.outputs[0])]
    for key in ("value_int", "value_ints"):
        if key in n.attrs:
            return [b.add_const(np.array(n.attrs[key], np.int64), n.outputs[0])]
    if isinstance(n.attrs.get("value"), onnx.TensorProto):
        array = tensor_array(n.attrs["value"], f"{b.where}'s value")
        return [b.add_const(array, n.outputs[0])]
    raise b.error(f"has none of the supported value attributes (got {sorted(n.attrs)})")


def shape(b: Builder, n: OnnxNode) -> list[str]:
    dims = b.type(x(b, n)).shape
    start, end = n.attr("start", 0), n.attr("end", len(dims))
    return [b.add_const(np.array(dims[start:end], np.int64), n.outputs[0])]


def size(b: Builder, n: OnnxNode) -> list[str]:
    return [b.add_const(np.array(b.type(x(b, n)).size, np.int64), n.outputs[0])]


def constant_of_shape(b: Builder, n: OnnxNode) -> list[str]:
    dims = const_ints(b, x(b, n), "the shape")
    value = n.attr("value")
    fill = (
        tensor_array(value, "ConstantOfShape's value")
        if value is not None
        else np.zeros(1, np.float32)
    )
    return [b.add_const(np.full(dims, fill.reshape(-1)[0], fill.dtype), n.outputs[0])]


def range_(b: Builder, n: OnnxNode) -> list[str]:
    start, limit, delta = (np.asarray(b.const(x(b, n, i), "Range's bounds")) for i in range(3))
    return [b.add_const(np.arange(start, limit, delta, dtype=start.dtype), n.outputs[0])]


FOLD_ONLY: dict[str, Callable[..., np.ndarray]] = {
    "Equal": np.equal,
    "Less": np.less,
    "Greater": np.greater,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Not": np.logical_not,
    "Min": np.minimum,
    "Max": np.maximum,
}


def fold_only(b: Builder, n: OnnxNode) -> list[str]:
    """Comparisons and logic that exporters use on shapes: evaluated at import only."""
    args = [
        b.const(x(b, n, i), f"{n.op_type}'s input (folded at import only)")
        for i in range(len(n.inputs))
    ]
    fn = FOLD_ONLY[n.op_type]
    out = fn.reduce(args) if n.op_type in ("Min", "Max") else fn(*args)
    return [b.add_const(np.asarray(out), n.outputs[0])]


HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(UNARY, unary),
    **dict.fromkeys(BINARY, binary),
    **dict.fromkeys(FOLD_ONLY, fold_only),
    **dict.fromkeys(REDUCE, reduce),
    "Identity": identity,
    "Dropout": identity,
    "Clip": clip,
    "Gelu": gelu,
    "Cast": cast,
    "MatMul": matmul,
    "Gemm": gemm,
    "Softmax": softmax,
    "LayerNormalization": layer_norm,
    "Constant": constant,
    "Shape": shape,
    "Size": size,
    "ConstantOfShape": constant_of_shape,
    "Range": range_,
}
