"""Graph ops in the compute DSL: each node's output element as an expression of its inputs'.

A fused group (ir/graph/fuse.py) becomes one workload by composing these: an element-wise
op is an expression of its inputs' elements, inlined into its consumer; a layout op
(transpose, slice, expand, gather, concat, split) only remaps the index its consumer
asks for, so it costs no kernel of its own; a reduction (matmul, conv, pool, reduce,
softmax, layer norm) is a compute whose body is a `Reduce`, materialised before an
expression reads it. The workload's names are canonical (inputs `in0…`, computes
`t0…`, axes `i0…`, reduce axes `r0…`) so that two groups of one structure build the
same workload, whose key is then shared (BERT's repeated layers tune once).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ir import compute as te
from ir import dtype as dt
from ir.errors import GraphError
from ir.expr import (
    Const,
    Expr,
    IterVar,
    Reduce,
    call,
    cast,
    logical_and,
    maximum,
    minimum,
    ne,
    select,
)
from ir.graph.graph import Graph, Node

Index = tuple[Expr, ...]


@dataclass
class Lazy:
    """A value of the group: its element at an index, not yet stored anywhere.

    `reduces`: `at` returns a `Reduce`, which can only be a compute's whole body, so a
    reader materialises it first. `tensor`: the compute or placeholder it reads, when
    the value is exactly that tensor (so it is not copied again).
    """

    shape: tuple[int, ...]
    dtype: str
    at: Callable[[Index], Expr]
    reduces: bool = False
    tensor: te.Tensor | None = field(default=None)


def zero_index() -> Const:
    return Const(0, dt.INDEX)


def index_const(v: int) -> Const:
    return Const(v, dt.INDEX)


def broadcast_index(shape: Sequence[int], out_rank: int, idx: Index) -> Index:
    """The index into a value of `shape` broadcast (numpy rules) to `out_rank` dims."""
    lead = out_rank - len(shape)
    return tuple(zero_index() if d == 1 else idx[lead + i] for i, d in enumerate(shape))


class GroupBuilder:
    """Builds one group's workload: placeholders for the values it reads, computes in order."""

    def __init__(
        self, graph: Graph, resolve: Callable[[str], Lazy | None], *, winograd: bool = False
    ) -> None:
        self.graph = graph
        self.winograd = winograd  # lower eligible 3×3 convs by F(2×2, 3×3) (lower_winograd)
        self._resolve = resolve  # a value the group computes or reads through (else None)
        self.inputs: list[te.Tensor] = []
        self.input_values: list[str] = []
        self._placeholders: dict[str, Lazy] = {}
        self._computes = 0
        self._raxes = 0

    # -- values --------------------------------------------------------------------------

    def value(self, name: str) -> Lazy:
        """The group's view of a graph value: computed here, a scalar literal, or an input."""
        found = self._resolve(name)
        if found is not None:
            return found
        t = self.graph.types[name]
        const = self.graph.constants.get(name)
        if const is not None and const.size == 1:
            literal = Const(np.asarray(const).reshape(()).item(), t.dtype)
            return Lazy(t.shape, t.dtype, lambda idx: literal)
        if name not in self._placeholders:
            p = te.placeholder(t.shape or (1,), t.dtype, f"in{len(self.inputs)}")
            self.inputs.append(p)
            self.input_values.append(name)
            rank0 = not t.shape
            self._placeholders[name] = Lazy(
                t.shape,
                t.dtype,
                (lambda idx: p[(zero_index(),)]) if rank0 else (lambda idx: p[idx]),
                tensor=p,
            )
        return self._placeholders[name]

    def load(self, lazy: Lazy, idx: Index) -> Expr:
        """`lazy`'s element at `idx` as an expression (a reduction is materialised first)."""
        if lazy.reduces:
            m = self.materialize(lazy)
            lazy.at, lazy.reduces, lazy.tensor = m.at, False, m.tensor
        return lazy.at(idx)

    def reduce_axis(self, extent: int) -> IterVar:
        self._raxes += 1
        return te.reduce_axis(extent, f"r{self._raxes - 1}")

    def materialize(self, lazy: Lazy) -> Lazy:
        """A compute holding `lazy` (the lazy itself when it already is a stored tensor)."""
        if lazy.tensor is not None and lazy.tensor.op is not None and not lazy.reduces:
            return lazy
        shape = lazy.shape or (1,)
        name = f"t{self._computes}"
        self._computes += 1
        names = [f"i{d}" for d in range(len(shape))]
        if lazy.shape:
            tensor = te.compute(shape, lambda *ax: lazy.at(tuple(ax)), name, axis_names=names)
        else:
            tensor = te.compute(shape, lambda _: lazy.at(()), name, axis_names=names)
        at = (lambda idx: tensor[idx]) if lazy.shape else (lambda idx: tensor[(zero_index(),)])
        return Lazy(lazy.shape, lazy.dtype, at, tensor=tensor)

    # -- nodes ---------------------------------------------------------------------------

    def lower(self, node: Node) -> list[Lazy]:
        """The lazy values of `node`'s outputs."""
        fn = _LOWER.get(node.op)
        if fn is None:
            raise GraphError(f"node {node.label!r}: cannot lower graph op {node.op!r} to a kernel")
        ins = [self.value(v) if v else None for v in node.inputs]
        outs = [self.graph.types[v] for v in node.outputs]
        result = fn(self, node, ins, [t.shape for t in outs])
        return result if isinstance(result, list) else [result]


Lowering = Callable[[GroupBuilder, Node, list, list], "Lazy | list[Lazy]"]
_LOWER: dict[str, Lowering] = {}


def register_lowering(*names: str):
    def wrap(fn: Lowering) -> Lowering:
        for n in names:
            _LOWER[n] = fn
        return fn

    return wrap


def literal(value: float, dtype: str) -> Const:
    return Const(value, dtype)


# --- element-wise -----------------------------------------------------------------------


def _gelu(x: Expr, approximate: str) -> Expr:
    half, one = literal(0.5, x.dtype), literal(1.0, x.dtype)
    if approximate == "tanh":
        inner = literal(math.sqrt(2.0 / math.pi), x.dtype) * (
            x + literal(0.044715, x.dtype) * x * x * x
        )
        return half * x * (one + call("tanh", inner))
    return half * x * (one + call("erf", x * literal(1.0 / math.sqrt(2.0), x.dtype)))


def _clip(x: Expr, node: Node) -> Expr:
    lo, hi = float(node.attr("min", -math.inf)), float(node.attr("max", math.inf))
    if dt.is_int(x.dtype):
        lo, hi = (
            math.ceil(lo) if math.isfinite(lo) else lo,
            math.floor(hi) if math.isfinite(hi) else hi,
        )
        lo = max(lo, dt.min_value(x.dtype)) if math.isfinite(lo) else lo
        hi = min(hi, dt.max_value(x.dtype)) if math.isfinite(hi) else hi
    if math.isfinite(lo):
        x = maximum(x, literal(lo, x.dtype))
    if math.isfinite(hi):
        x = minimum(x, literal(hi, x.dtype))
    return x


def _unary(node: Node, x: Expr) -> Expr:
    op, t = node.op, x.dtype
    if op in ("exp", "tanh", "sqrt", "erf"):
        return call(op, x)
    if op == "neg":
        return literal(0, t) - x
    if op == "sigmoid":
        return literal(1.0, t) / (literal(1.0, t) + call("exp", literal(0.0, t) - x))
    if op == "relu":
        return maximum(x, literal(0, t))
    if op == "reciprocal":
        return literal(1.0, t) / x
    if op == "identity":
        return x
    if op == "gelu":
        return _gelu(x, node.attr("approximate", "none"))
    if op == "clip":
        return _clip(x, node)
    if op == "cast":
        return cast(node.attr("to"), x)
    raise GraphError(f"node {node.label!r}: unknown element-wise op {op!r}")


@register_lowering(
    "neg",
    "exp",
    "erf",
    "tanh",
    "sigmoid",
    "relu",
    "sqrt",
    "reciprocal",
    "identity",
    "gelu",
    "clip",
    "cast",
)
def _lower_unary(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    x = ins[0]
    dtype = node.attr("to") if node.op == "cast" else x.dtype
    return Lazy(outs[0], dtype, lambda idx: _unary(node, b.load(x, idx)))


def _pow(a: Expr, exponent: Lazy, b: GroupBuilder, idx: Index) -> Expr:
    e = b.load(exponent, broadcast_index(exponent.shape, len(idx), idx))
    if isinstance(e, Const):
        v = float(e.value)
        if v == 0.5:
            return call("sqrt", a)
        if v.is_integer() and 1 <= v <= 4:
            out = a
            for _ in range(int(v) - 1):
                out = out * a
            return out
        if v == -1.0:
            return literal(1.0, a.dtype) / a
    return call("exp", e * call("log", a))


def _int_div(a: Expr, c: Expr) -> Expr:
    """Division truncating toward zero (C, ONNX) from the DSL's floor division."""
    zero = literal(0, a.dtype)
    q = a // c
    fix = logical_and(ne(a % c, zero), ne(a < zero, c < zero))
    return select(fix, q + literal(1, a.dtype), q)


@register_lowering("add", "sub", "mul", "div", "pow")
def _lower_binary(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    x, y = ins
    rank = len(outs[0])

    def at(idx: Index) -> Expr:
        a = b.load(x, broadcast_index(x.shape, rank, idx))
        if node.op == "pow":
            return _pow(a, y, b, idx)
        c = b.load(y, broadcast_index(y.shape, rank, idx))
        if node.op == "add":
            return a + c
        if node.op == "sub":
            return a - c
        if node.op == "mul":
            return a * c
        return _int_div(a, c) if dt.is_int(a.dtype) else a / c

    return Lazy(outs[0], x.dtype, at)


@register_lowering("where")
def _lower_where(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    c, x, y = ins
    rank = len(outs[0])

    def at(idx: Index) -> Expr:
        return select(
            b.load(c, broadcast_index(c.shape, rank, idx)),
            b.load(x, broadcast_index(x.shape, rank, idx)),
            b.load(y, broadcast_index(y.shape, rank, idx)),
        )

    return Lazy(outs[0], x.dtype, at)


# --- matmul, convolution, pooling -------------------------------------------------------------


@register_lowering("matmul")
def _lower_matmul(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    x, y = ins
    sa = (1, *x.shape) if len(x.shape) == 1 else x.shape
    sb = (*y.shape, 1) if len(y.shape) == 1 else y.shape
    k = sa[-1]

    def at(idx: Index) -> Expr:
        full = list(idx)  # back to (batch..., i, j) where a 1-D operand dropped a dim
        if len(x.shape) == 1:
            full.insert(len(full) - (0 if len(y.shape) == 1 else 1), zero_index())
        if len(y.shape) == 1:
            full.append(zero_index())
        batch, i, j = full[:-2], full[-2], full[-1]
        r = b.reduce_axis(k)
        ia = (*broadcast_index(sa[:-2], len(batch), tuple(batch)), i, r.var)
        ib = (*broadcast_index(sb[:-2], len(batch), tuple(batch)), r.var, j)
        ia = ia[1:] if len(x.shape) == 1 else ia
        ib = ib[:-1] if len(y.shape) == 1 else ib
        return Reduce("sum", b.load(x, ia) * b.load(y, ib), (r,))

    return Lazy(outs[0], x.dtype, at, reduces=True)


# --- reductions and normalisations -----------------------------------------------------------


def _reduced(
    b: GroupBuilder, x: Lazy, axes: Sequence[int], combiner: str, body: Callable[[Index], Expr]
) -> Lazy:
    """A compute over x's shape with `axes` of extent 1, reducing `body(full index)` over them."""
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))

    def at(idx: Index) -> Expr:
        raxes = {d: b.reduce_axis(x.shape[d]) for d in axes}
        full = tuple(raxes[d].var if d in raxes else idx[d] for d in range(len(x.shape)))
        return Reduce(combiner, body(full), tuple(raxes[d] for d in axes))

    return b.materialize(Lazy(shape, x.dtype, at, reduces=True))


def _keep(idx: Index, axes: Sequence[int]) -> Index:
    return tuple(zero_index() if d in axes else i for d, i in enumerate(idx))


@register_lowering("reduce_sum", "reduce_max", "reduce_mean")
def _lower_reduce(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    x = ins[0]
    axes = tuple(node.attr("axes"))
    keep = bool(node.attr("keepdims", 1))
    combiner = "max" if node.op == "reduce_max" else "sum"
    total = _reduced(b, x, axes, combiner, lambda full: b.load(x, full))
    count = math.prod(x.shape[d] for d in axes)

    def at(idx: Index) -> Expr:
        if not keep:  # re-insert the reduced dims
            it = iter(idx)
            idx = tuple(zero_index() if d in axes else next(it) for d in range(len(x.shape)))
        v = b.load(total, _keep(idx, axes))
        return v / literal(float(count), x.dtype) if node.op == "reduce_mean" else v

    return Lazy(outs[0], x.dtype, at)


@register_lowering("softmax")
def _lower_softmax(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    x = ins[0]
    axes = (node.attr("axis"),)
    mx = _reduced(b, x, axes, "max", lambda full: b.load(x, full))

    def shifted(full: Index) -> Expr:
        return call("exp", b.load(x, full) - b.load(mx, _keep(full, axes)))

    total = _reduced(b, x, axes, "sum", shifted)
    return Lazy(outs[0], x.dtype, lambda idx: shifted(idx) / b.load(total, _keep(idx, axes)))


@register_lowering("layer_norm")
def _lower_layer_norm(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    """Two passes, like numpy's var: the mean, then the mean squared deviation from it."""
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    rank = len(x.shape)
    axes = tuple(range(node.attr("axis"), rank))
    n = literal(float(math.prod(x.shape[d] for d in axes)), x.dtype)
    eps = literal(float(node.attr("epsilon", 1e-5)), x.dtype)
    total = _reduced(b, x, axes, "sum", lambda full: b.load(x, full))

    def centred(full: Index) -> Expr:
        return b.load(x, full) - b.load(total, _keep(full, axes)) / n

    sq = _reduced(b, x, axes, "sum", lambda full: centred(full) * centred(full))

    def at(idx: Index) -> Expr:
        var = b.load(sq, _keep(idx, axes)) / n
        y = (
            centred(idx)
            / call("sqrt", var + eps)
            * b.load(scale, broadcast_index(scale.shape, rank, idx))
        )
        if bias is not None:
            y = y + b.load(bias, broadcast_index(bias.shape, rank, idx))
        return y

    return Lazy(outs[0], x.dtype, at)


# --- layout: index remapping only ------------------------------------------------------------


def _remap(x: Lazy, shape: tuple[int, ...], b: GroupBuilder, f: Callable[[Index], Index]) -> Lazy:
    """A value whose element at idx is x's at f(idx); a reduction stays one (its body moves)."""
    if x.reduces:
        return Lazy(shape, x.dtype, lambda idx: x.at(f(idx)), reduces=True)
    return Lazy(shape, x.dtype, lambda idx: b.load(x, f(idx)))


@register_lowering("transpose")
def _lower_transpose(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    perm = node.attr("perm")

    def f(idx: Index) -> Index:
        src: list[Expr] = [zero_index()] * len(perm)
        for d, p in enumerate(perm):
            src[p] = idx[d]
        return tuple(src)

    return _remap(ins[0], outs[0], b, f)


@register_lowering("expand")
def _lower_expand(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    x = ins[0]
    return _remap(x, outs[0], b, lambda idx: broadcast_index(x.shape, len(idx), idx))


@register_lowering("slice")
def _lower_slice(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    spec = {
        a: (s, st) for a, s, st in zip(node.attr("axes"), node.attr("starts"), node.attr("steps"))
    }

    def f(idx: Index) -> Index:
        out = list(idx)
        for a, (start, step) in spec.items():
            v = idx[a] * step if step != 1 else idx[a]
            out[a] = v + start if start else v
        return tuple(out)

    return _remap(ins[0], outs[0], b, f)


@register_lowering("split")
def _lower_split(b: GroupBuilder, node: Node, ins: list, outs: list) -> list[Lazy]:
    axis, x = node.attr("axis"), ins[0]
    offsets = np.cumsum((0, *node.attr("sizes")))[:-1]
    result = []
    for shape, off in zip(outs, offsets):

        def f(idx: Index, off: int = int(off)) -> Index:
            return tuple(i + off if d == axis and off else i for d, i in enumerate(idx))

        result.append(_remap(x, shape, b, f))
    return result


@register_lowering("gather")
def _lower_gather(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    """data[..., indices[j...], ...]; negative indices count from the end, and an index out
    of range is clamped (a kernel must not read outside its buffer; the interpreter refuses it)."""
    data, indices = ins
    axis, q = node.attr("axis"), len(indices.shape)
    dim = data.shape[axis]

    def at(idx: Index) -> Expr:
        raw = b.load(indices, idx[axis : axis + q]) if q else b.load(indices, ())
        i = cast(dt.INDEX, raw)
        i = select(i < zero_index(), i + index_const(dim), i)
        i = minimum(maximum(i, zero_index()), index_const(dim - 1))
        return b.load(data, (*idx[:axis], i, *idx[axis + q :]))

    return Lazy(outs[0], data.dtype, at)


@register_lowering("concat")
def _lower_concat(b: GroupBuilder, node: Node, ins: list, outs: list) -> Lazy:
    axis = node.attr("axis")
    parts = [x for x in ins if x.shape[axis] > 0]

    def at(idx: Index) -> Expr:
        offsets = np.cumsum([0] + [x.shape[axis] for x in parts])
        out: Expr | None = None
        for x, off, end in reversed(list(zip(parts, offsets[:-1], offsets[1:]))):
            src = tuple(i - int(off) if d == axis and off else i for d, i in enumerate(idx))
            v = b.load(x, src)
            out = v if out is None else select(idx[axis] < index_const(int(end)), v, out)
        assert out is not None
        return out

    return Lazy(outs[0], parts[0].dtype, at)


def workload_of(builder: GroupBuilder, output: Lazy, name: str) -> te.Workload:
    """The group's workload: its inputs (in first-use order) and the output compute."""
    out = builder.materialize(output)
    assert out.tensor is not None and out.tensor.op is not None
    return te.Workload(name, tuple(builder.inputs), (out.tensor,))


# The windowed ops register themselves into _LOWER when imported (after everything they
# use from here is defined).
from ir.graph import lower_windows  # noqa: E402, F401

__all__ = ["GroupBuilder", "Lazy", "broadcast_index", "workload_of"]
