"""The graph ops: for each, type inference, a numpy evaluation and a kind for fusion.

Shapes are static and attributes canonical, so an importer normalises once and every
pass sees one spelling: axes are non-negative, `reshape`/`expand` carry the full
output shape, `slice` bounds are clamped (`normalize_slice`). Evaluation is the
reference: float32 matmuls, reductions and normalisations run in float64 and are cast
back; element-wise ops run in the input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ir.dtype import DTYPES, FLOAT_DTYPES, INT_DTYPES, to_numpy
from ir.errors import GraphError, GraphInputError
from ir.graph import spatial
from ir.graph.graph import Node, TensorType

Types = Sequence[TensorType | None]
Arrays = Sequence[np.ndarray | None]
KINDS = ("elementwise", "reduction", "matmul", "conv", "pool", "layout", "other")


@dataclass(frozen=True)
class GraphOp:
    """A graph op: `infer` raises GraphError on bad inputs or attributes (make_graph
    prefixes the node), `evaluate` is the numpy reference, `attrs` the allowed keys."""

    name: str
    infer: Callable[[Types, Node], tuple[TensorType, ...]]
    evaluate: Callable[[Arrays, Node], tuple[np.ndarray, ...]]
    kind: str
    attrs: frozenset[str] = frozenset()


OPS: dict[str, GraphOp] = {}


def _register(name: str, kind: str, infer, evaluate, attrs: Sequence[str] = ()) -> None:
    assert kind in KINDS and name not in OPS
    OPS[name] = GraphOp(name, infer, evaluate, kind, frozenset(attrs))


# --- attribute and arity helpers --------------------------------------------------------


def _arity(types: Types, required: int, optional: int = 0) -> list[TensorType]:
    if not required <= len(types) <= required + optional:
        extra = f" (+{optional} optional)" if optional else ""
        raise GraphError(f"takes {required}{extra} inputs, got {len(types)}")
    if any(t is None for t in types[:required]):
        raise GraphError(f"the first {required} inputs are required")
    return list(types)  # type: ignore[arg-type]


def _int(node: Node, key: str, default: int | None = None) -> int:
    v = node.attr(key, default)
    if not isinstance(v, int):
        raise GraphError(f"attribute {key!r} must be an int, got {v!r}")
    return v


def _ints(node: Node, key: str) -> tuple[int, ...]:
    v = node.attr(key)
    if not (isinstance(v, tuple) and all(isinstance(i, int) for i in v)):
        raise GraphError(f"attribute {key!r} must be a tuple of ints, got {v!r}")
    return v


def _float(node: Node, key: str, default: float) -> float:
    v = node.attr(key, default)
    if not isinstance(v, int | float):
        raise GraphError(f"attribute {key!r} must be a number, got {v!r}")
    return float(v)


def _axis(node: Node, rank: int, key: str = "axis") -> int:
    a = _int(node, key)
    if not 0 <= a < rank:
        raise GraphError(f"{key}={a} must be normalised to 0..{rank - 1}")
    return a


def _float_input(t: TensorType) -> TensorType:
    if t.dtype not in FLOAT_DTYPES:
        raise GraphError(f"expects a float input, got {t}")
    return t


def _numeric_input(t: TensorType) -> TensorType:
    if t.dtype == "bool":
        raise GraphError(f"expects a numeric input, got {t}")
    return t


def _wide(x: np.ndarray) -> np.ndarray:
    """The precision the reference computes in: float64 for floats."""
    return x.astype(np.float64) if x.dtype == np.float32 else x


# --- element-wise ---------------------------------------------------------------------


ERFC_COEFFS = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (numpy has none): the Numerical Recipes erfc, |rel. error| < 1.2e-7."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(t)
    for c in reversed(ERFC_COEFFS):  # Horner's rule
        poly = poly * t + c
    erfc = t * np.exp(-z * z + poly)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative,
    "exp": np.exp,
    "erf": erf,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "sqrt": np.sqrt,
    "reciprocal": lambda x: 1.0 / x,
    "identity": lambda x: x.copy(),
}
FLOAT_ONLY = frozenset({"exp", "erf", "tanh", "sigmoid", "sqrt", "reciprocal", "gelu"})


def _infer_unary(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    t = _float_input(t) if node.op in FLOAT_ONLY else t
    if node.op == "gelu" and node.attr("approximate", "none") not in ("none", "tanh"):
        raise GraphError(f"approximate must be 'none' or 'tanh', got {node.attr('approximate')!r}")
    if node.op in ("neg", "relu", "clip"):
        _numeric_input(t)
    if node.op == "clip":
        lo, hi = _float(node, "min", -math.inf), _float(node, "max", math.inf)
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            raise GraphError(f"clip bounds must satisfy min <= max, got {lo} and {hi}")
    return (t,)


def _eval_unary(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    x = args[0]
    if node.op == "gelu":
        out = _gelu(_wide(x), node.attr("approximate", "none"))
    elif node.op == "erf":
        out = erf(_wide(x))
    elif node.op == "clip":
        lo, hi = _float(node, "min", -math.inf), _float(node, "max", math.inf)
        if x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            lo, hi = max(lo, info.min), min(hi, info.max)
            out = np.clip(x, math.ceil(lo), math.floor(hi))
        else:
            out = np.clip(x, lo, hi)
    else:
        out = UNARY[node.op](x)
    return (np.asarray(out).astype(x.dtype, copy=False),)


for _name in (*UNARY, "gelu", "clip"):
    _attrs = {"gelu": ("approximate",), "clip": ("min", "max")}.get(_name, ())
    _register(_name, "elementwise", _infer_unary, _eval_unary, _attrs)


def _infer_cast(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    to = node.attr("to")
    if to not in DTYPES:
        raise GraphError(f"attribute 'to' must be one of {', '.join(DTYPES)}, got {to!r}")
    return (TensorType(t.shape, to),)


def _eval_cast(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    return (args[0].astype(to_numpy(node.attr("to"))),)


_register("cast", "elementwise", _infer_cast, _eval_cast, ("to",))


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise GraphError(f"shapes {', '.join(map(str, shapes))} do not broadcast") from None


def _infer_binary(types: Types, node: Node) -> tuple[TensorType, ...]:
    a, b = _arity(types, 2)
    if a.dtype != b.dtype:
        raise GraphError(f"operands must share a dtype, got {a} and {b}")
    _numeric_input(a)
    return (TensorType(_broadcast(a.shape, b.shape), a.dtype),)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C and ONNX Runtime), not numpy's floor."""
    if np.any(b == 0):
        raise GraphInputError("integer division by zero")
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": lambda a, b: _int_div(a, b) if a.dtype.kind in "iu" else np.divide(a, b),
    "pow": np.power,
}


def _eval_binary(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    a, b = args[0], args[1]
    if node.op == "pow" and a.dtype.kind == "f":
        return (np.power(_wide(a), _wide(b)).astype(a.dtype),)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return (np.asarray(BINARY[node.op](a, b)).astype(a.dtype, copy=False),)


for _name in BINARY:
    _register(_name, "elementwise", _infer_binary, _eval_binary)


def _infer_where(types: Types, node: Node) -> tuple[TensorType, ...]:
    c, a, b = _arity(types, 3)
    if c.dtype != "bool" or a.dtype != b.dtype:
        raise GraphError(f"takes a bool condition and two values of one dtype, got {c}, {a}, {b}")
    return (TensorType(_broadcast(c.shape, a.shape, b.shape), a.dtype),)


_register(
    "where", "elementwise", _infer_where, lambda args, node: (np.where(args[0], args[1], args[2]),)
)


# --- matmul ---------------------------------------------------------------------------------


def _infer_matmul(types: Types, node: Node) -> tuple[TensorType, ...]:
    a, b = _arity(types, 2)
    if a.dtype != b.dtype or a.rank == 0 or b.rank == 0:
        raise GraphError(f"takes two tensors of rank >= 1 and one dtype, got {a} and {b}")
    _numeric_input(a)
    sa = (1, *a.shape) if a.rank == 1 else a.shape
    sb = (*b.shape, 1) if b.rank == 1 else b.shape
    if sa[-1] != sb[-2]:
        raise GraphError(f"inner dimensions differ: {a} @ {b}")
    shape = (*_broadcast(sa[:-2], sb[:-2]), sa[-2], sb[-1])
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    return (TensorType(shape, a.dtype),)


def _eval_matmul(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    a, b = args[0], args[1]
    return (np.matmul(_wide(a), _wide(b)).astype(a.dtype, copy=False),)


_register("matmul", "matmul", _infer_matmul, _eval_matmul)


# --- reductions and normalisations ------------------------------------------------------------


def _reduce_axes(node: Node, rank: int) -> tuple[int, ...]:
    axes = _ints(node, "axes")
    if list(axes) != sorted(set(axes)) or any(not 0 <= a < rank for a in axes):
        raise GraphError(f"axes {axes} must be sorted, unique and within 0..{rank - 1}")
    return axes


def _infer_reduce(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    _numeric_input(t)
    axes = _reduce_axes(node, t.rank)
    keep = _int(node, "keepdims", 1)
    if keep not in (0, 1):
        raise GraphError(f"keepdims must be 0 or 1, got {keep}")
    if node.op == "reduce_max" and any(t.shape[a] == 0 for a in axes):
        raise GraphError(f"reduce_max over an empty axis of {t}")
    shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape) if keep or i not in axes)
    return (TensorType(shape, t.dtype),)


REDUCE = {"reduce_mean": np.mean, "reduce_sum": np.sum, "reduce_max": np.max}


def _eval_reduce(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    x = args[0]
    axes, keep = node.attr("axes"), bool(node.attr("keepdims", 1))
    out = REDUCE[node.op](_wide(x), axis=axes, keepdims=keep)
    return (np.asarray(out).astype(x.dtype),)


for _name in REDUCE:
    _register(_name, "reduction", _infer_reduce, _eval_reduce, ("axes", "keepdims"))


def _infer_softmax(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    _axis(node, t.rank)
    return (_float_input(t),)


def _eval_softmax(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    x, axis = _wide(args[0]), node.attr("axis")
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return ((e / e.sum(axis=axis, keepdims=True)).astype(args[0].dtype),)


_register("softmax", "other", _infer_softmax, _eval_softmax, ("axis",))


def _infer_layer_norm(types: Types, node: Node) -> tuple[TensorType, ...]:
    ts = _arity(types, 2, 1)
    x = _float_input(ts[0])
    axis = _axis(node, x.rank)
    if _float(node, "epsilon", 1e-5) < 0:
        raise GraphError("epsilon must be >= 0")
    for t in ts[1:]:
        if t is not None and (
            t.dtype != x.dtype or _broadcast(t.shape, x.shape[axis:]) != x.shape[axis:]
        ):
            raise GraphError(
                f"scale and bias must be {x.dtype} broadcastable to {x.shape[axis:]}, got {t}"
            )
    return (x,)


def _eval_layer_norm(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    x = _wide(args[0])
    axes = tuple(range(_int(node, "axis"), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=axes, keepdims=True)
    out = centred / np.sqrt(var + _float(node, "epsilon", 1e-5)) * _wide(args[1])
    if len(args) > 2 and args[2] is not None:
        out = out + _wide(args[2])
    return (out.astype(args[0].dtype),)


_register("layer_norm", "other", _infer_layer_norm, _eval_layer_norm, ("axis", "epsilon"))


# --- layout ------------------------------------------------------------------------------


def _infer_transpose(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    perm = _ints(node, "perm")
    if sorted(perm) != list(range(t.rank)):
        raise GraphError(f"perm {perm} is not a permutation of 0..{t.rank - 1}")
    return (TensorType(tuple(t.shape[p] for p in perm), t.dtype),)


_register(
    "transpose",
    "layout",
    _infer_transpose,
    lambda args, node: (args[0].transpose(node.attr("perm")).copy(),),
    ("perm",),
)


def _infer_reshape(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    shape = _ints(node, "shape")
    if any(d < 0 for d in shape) or math.prod(shape) != t.size:
        raise GraphError(f"cannot reshape {t} to {shape} (a concrete shape of {t.size} elements)")
    return (TensorType(shape, t.dtype),)


_register(
    "reshape",
    "layout",
    _infer_reshape,
    lambda a, n: (a[0].reshape(n.attr("shape")).copy(),),
    ("shape",),
)


def _infer_expand(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    shape = _ints(node, "shape")
    if _broadcast(t.shape, shape) != shape:
        raise GraphError(f"{t} does not broadcast to {shape}")
    return (TensorType(shape, t.dtype),)


_register(
    "expand",
    "layout",
    _infer_expand,
    lambda a, n: (np.broadcast_to(a[0], n.attr("shape")).copy(),),
    ("shape",),
)


def _infer_concat(types: Types, node: Node) -> tuple[TensorType, ...]:
    if not types or any(t is None for t in types):
        raise GraphError("takes one or more inputs")
    first = types[0]
    axis = _axis(node, first.rank)
    for t in types:
        same = t.rank == first.rank and all(
            d == e for i, (d, e) in enumerate(zip(t.shape, first.shape)) if i != axis
        )
        if not same or t.dtype != first.dtype:
            raise GraphError(f"inputs {first} and {t} do not concatenate on axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return (TensorType(tuple(shape), first.dtype),)


_register(
    "concat",
    "layout",
    _infer_concat,
    lambda a, n: (np.concatenate(a, axis=n.attr("axis")),),
    ("axis",),
)


def _infer_split(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    axis = _axis(node, t.rank)
    sizes = _ints(node, "sizes")
    if not sizes or any(s < 0 for s in sizes) or sum(sizes) != t.shape[axis]:
        raise GraphError(
            f"sizes {sizes} must be >= 0 and sum to {t.shape[axis]} (axis {axis} of {t})"
        )
    return tuple(TensorType((*t.shape[:axis], s, *t.shape[axis + 1 :]), t.dtype) for s in sizes)


def _eval_split(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    cuts = np.cumsum(node.attr("sizes"))[:-1]
    return tuple(p.copy() for p in np.split(args[0], cuts, axis=node.attr("axis")))


_register("split", "layout", _infer_split, _eval_split, ("axis", "sizes"))


def normalize_slice(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """Clamp ONNX/Python slice bounds on a dim of `dim` elements: for a positive step
    0 <= start, end <= dim; for a negative one 0 <= start <= dim-1 and -1 <= end <= dim-1
    (end -1 runs through index 0)."""
    if step == 0:
        raise GraphError("a slice step must not be 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def _slice_len(start: int, end: int, step: int) -> int:
    return max(0, -(-(end - start) // step))


def _slice_params(node: Node, t: TensorType) -> list[tuple[int, int, int, int]]:
    starts, ends, axes, steps = (_ints(node, k) for k in ("starts", "ends", "axes", "steps"))
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise GraphError("starts, ends, axes and steps must have one entry per sliced axis")
    if list(axes) != sorted(set(axes)) or any(not 0 <= a < t.rank for a in axes):
        raise GraphError(f"axes {axes} must be sorted, unique and within 0..{t.rank - 1}")
    params = list(zip(axes, starts, ends, steps))
    for a, s, e, st in params:
        dim = t.shape[a]
        ok = 0 <= s <= dim and 0 <= e <= dim if st > 0 else 0 <= s < max(dim, 1) and -1 <= e < dim
        if st == 0 or not ok:
            raise GraphError(f"slice {s}:{e}:{st} on axis {a} of {t} is not normalised")
    return params


def _infer_slice(types: Types, node: Node) -> tuple[TensorType, ...]:
    (t,) = _arity(types, 1)
    shape = list(t.shape)
    for a, s, e, st in _slice_params(node, t):
        shape[a] = _slice_len(s, e, st)
    return (TensorType(tuple(shape), t.dtype),)


def _eval_slice(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    x = args[0]
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(*(node.attr(k) for k in ("axes", "starts", "ends", "steps"))):
        index[a] = slice(s, e if e >= 0 else None, st)
    return (x[tuple(index)].copy(),)


_register("slice", "layout", _infer_slice, _eval_slice, ("starts", "ends", "axes", "steps"))


def _infer_gather(types: Types, node: Node) -> tuple[TensorType, ...]:
    data, idx = _arity(types, 2)
    axis = _axis(node, data.rank)
    if idx.dtype not in INT_DTYPES:
        raise GraphError(f"indices must be integers, got {idx}")
    shape = data.shape[:axis] + idx.shape + data.shape[axis + 1 :]
    return (TensorType(shape, data.dtype),)


def _eval_gather(args: Arrays, node: Node) -> tuple[np.ndarray, ...]:
    data, idx = args[0], args[1].astype(np.int64)
    axis = node.attr("axis")
    dim = data.shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        bad = int(idx[(idx < -dim) | (idx >= dim)].flat[0])
        raise GraphInputError(f"gather {node.label!r}: index {bad} is out of range for {dim} rows")
    return (np.take(data, np.where(idx < 0, idx + dim, idx), axis=axis),)


_register("gather", "other", _infer_gather, _eval_gather, ("axis",))


# --- convolution and pooling (ir/graph/spatial.py) -------------------------------------------

_GEOMETRY = ("layout", "strides", "pads")
_register(
    "conv2d", "conv", spatial.infer_conv2d, spatial.eval_conv2d, (*_GEOMETRY, "dilations", "groups")
)
_register("max_pool2d", "pool", spatial.infer_pool, spatial.eval_pool, (*_GEOMETRY, "kernel"))
_register(
    "avg_pool2d",
    "pool",
    spatial.infer_pool,
    spatial.eval_pool,
    (*_GEOMETRY, "kernel", "count_include_pad"),
)
_register(
    "global_avg_pool",
    "pool",
    spatial.infer_global_avg_pool,
    spatial.eval_global_avg_pool,
    ("layout",),
)
