"""The compute DSL: placeholders, computes and reductions describing *what* to compute.

    A = placeholder((m, k), "float32", "A")
    B = placeholder((k, n), "float32", "B")
    r = reduce_axis(k, "r")
    C = compute((m, n), lambda i, j: sum(A[i, r] * B[r, j], axis=r), "C")
    wl = Workload("matmul", inputs=(A, B), outputs=(C,))

Shapes are integers or symbolic `Var`s (bound before code generation). A `Tensor`
is a `Buffer` that remembers the operation producing it, so a workload is the DAG
reachable from its outputs.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ir import dtype as dt
from ir.errors import IRError
from ir.expr import (  # re-exported: the DSL's element-wise vocabulary  # noqa: F401
    Buffer,
    Const,
    Expr,
    ExprLike,
    IterVar,
    Load,
    Reduce,
    Var,
    as_expr,
    as_index,
    cast,
    eq,
    erf,
    exp,
    log,
    logical_and,
    maximum,
    minimum,
    ne,
    render,
    select,
    sqrt,
    tanh,
)
from ir.node import Node, walk

REDUCERS = ("sum", "max", "min")
ShapeLike = Sequence[int | Var | Expr]


@dataclass(frozen=True, slots=True, eq=True)
class ComputeOp(Node):
    """out[axes] = body, where body may be a Reduce over reduction axes."""

    axes: tuple[IterVar, ...]
    body: Expr


@dataclass(frozen=True, slots=True, eq=True)
class Tensor(Buffer):
    """A buffer of the DSL; `op` is None for a placeholder (an input)."""

    op: ComputeOp | None = None

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        # A tensor read inside an expression is a leaf: traversals stop at it
        # instead of descending into the producer's body.
        return ("name", "shape", "dtype", "scope")

    def as_buffer(self) -> Buffer:
        return Buffer(self.name, self.shape, self.dtype, self.scope)

    def __repr__(self) -> str:
        return self.name


def _shape(shape: ShapeLike, what: str) -> tuple[Expr, ...]:
    out = []
    for s in shape:
        if isinstance(s, bool) or not isinstance(s, int | Expr):
            raise IRError(f"{what}: dimension {s!r} is not an integer or a size variable")
        e = as_index(s)
        if isinstance(e, Const) and e.value <= 0:
            raise IRError(f"{what}: dimension {e.value} must be positive")
        out.append(e)
    return tuple(out)


def size_var(name: str) -> Var:
    """A symbolic size, bound to an integer before code generation."""
    return Var(name, dt.INDEX)


def placeholder(shape: ShapeLike, dtype: str = "float32", name: str = "A") -> Tensor:
    dt.check_dtype(dtype)
    return Tensor(name, _shape(shape, f"placeholder {name}"), dtype)


def reduce_axis(extent: int | Expr, name: str = "k") -> IterVar:
    return IterVar(Var(name), _shape((extent,), f"reduce_axis {name}")[0], "reduce")


def compute(
    shape: ShapeLike,
    fcompute: Callable[..., ExprLike],
    name: str = "C",
    *,
    axis_names: Sequence[str] | None = None,
) -> Tensor:
    """A tensor whose element at `axes` is `fcompute(*axes)`."""
    dims = _shape(shape, f"compute {name}")
    if axis_names is None:
        params = list(inspect.signature(fcompute).parameters)
        axis_names = params if len(params) == len(dims) else [f"i{d}" for d in range(len(dims))]
    if len(axis_names) != len(dims):
        raise IRError(f"compute {name}: {len(dims)} dimensions but {len(axis_names)} axis names")
    axes = tuple(IterVar(Var(n), d, "spatial") for n, d in zip(axis_names, dims))
    body = as_expr(fcompute(*(a.var for a in axes)))
    _check_body(name, body)
    return Tensor(name, dims, body.dtype, "global", ComputeOp(axes, body))


def _check_body(name: str, body: Expr) -> None:
    for n in walk(body):
        if isinstance(n, Reduce) and n is not body:
            raise IRError(f"compute {name}: a reduction must be the whole body, not inside it")


def _reduce(combiner: str, source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    if not axes or any(not isinstance(a, IterVar) or a.kind != "reduce" for a in axes):
        raise IRError(f"{combiner}(): axis must be one or more reduce_axis()")
    return Reduce(combiner, as_expr(source), axes)


def sum(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("sum", source, axis)


def max(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("max", source, axis)


def min(source: ExprLike, axis: IterVar | Sequence[IterVar]) -> Reduce:
    return _reduce("min", source, axis)


def reduce_identity(combiner: str, dtype: str) -> Const:
    if combiner == "sum":
        return Const(0, dtype)
    if combiner == "max":
        return Const(dt.min_value(dtype), dtype)
    if combiner == "min":
        return Const(dt.max_value(dtype), dtype)
    raise IRError(f"unknown reduction {combiner!r}; expected one of {', '.join(REDUCERS)}")


@dataclass(frozen=True, slots=True, eq=True)
class Workload(Node):
    """What to compute: named inputs and outputs (in call order) of a tensor DAG."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    def __post_init__(self) -> None:
        for t in self.inputs:
            if t.op is not None:
                raise IRError(
                    f"workload {self.name}: input {t.name} is computed, not a placeholder"
                )
        for t in self.outputs:
            if t.op is None:
                raise IRError(f"workload {self.name}: output {t.name} is a placeholder")
        tensors = self.tensors()
        names = [t.name for t in tensors]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise IRError(f"workload {self.name}: tensor name {dup[0]!r} is used twice")
        inputs = set(self.inputs)
        for t in tensors:
            if t.op is None and t not in inputs:
                raise IRError(f"workload {self.name}: {t.name} is read but not listed as an input")

    def tensors(self) -> list[Tensor]:
        """Every tensor reachable from the outputs, producers before consumers."""
        order: list[Tensor] = []
        seen: set[str] = set()

        def visit(t: Tensor) -> None:
            if t.name in seen:
                return
            seen.add(t.name)
            if t.op is not None:
                for n in walk(t.op.body):
                    if isinstance(n, Load) and isinstance(n.buffer, Tensor):
                        visit(n.buffer)
            order.append(t)

        for t in self.inputs:
            visit(t)
        for t in self.outputs:
            visit(t)
        return order

    def computes(self) -> list[Tensor]:
        return [t for t in self.tensors() if t.op is not None]

    def size_vars(self) -> list[Var]:
        found: dict[str, Var] = {}
        for t in self.tensors():
            for n in walk(Buffer(t.name, t.shape, t.dtype)):
                if isinstance(n, Var):
                    found[n.name] = n
            if t.op is not None:
                for a in t.op.axes:
                    for n in walk(a.extent):
                        if isinstance(n, Var):
                            found[n.name] = n
                for n in walk(t.op.body):
                    if isinstance(n, Reduce):
                        for a in n.axes:
                            for m in walk(a.extent):
                                if isinstance(m, Var):
                                    found[m.name] = m
        return [found[k] for k in builtins.sorted(found)]


def describe(t: Tensor) -> str:
    shape = ", ".join(render(s) for s in t.shape)
    return f"{t.name}[{shape}] {t.dtype}"
