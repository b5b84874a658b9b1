"""Out-of-bounds reads of a workload, found before anything runs.

A custom workload is data a client sends; `A[i - 3, r]` in it would make every
measurement of every candidate fail (the reference itself reads out of
bounds). `out_of_bounds_reads` walks each compute's body with the interval
arithmetic of `ir.arith` (every axis over [0, extent)) and reports each load
whose index can leave its tensor. A load under a `select` is checked with the
select's condition assumed (comparisons of one variable with a constant, and
their conjunctions): the guarded padding of a convolution passes. An index
whose range is unknown (a data-dependent one) is not reported: this is a
proof of error, not of safety.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ir import dtype as dt
from ir.arith import Bounds, bound, linear_form
from ir.compute import Tensor, Workload
from ir.expr import Binary, Const, Expr, Load, Reduce, Select, Var, render
from ir.node import Node, children

__all__ = ["OutOfBounds", "out_of_bounds_reads"]


@dataclass(frozen=True)
class OutOfBounds:
    """A read of `tensor` by `compute` whose index on `axis` ranges over [low, high]."""

    compute: str
    tensor: str
    axis: int
    index: str
    low: int
    high: int
    extent: int

    def __str__(self) -> str:
        return (
            f"compute {self.compute} reads {self.tensor} out of bounds on axis {self.axis}: "
            f"index {self.index} ranges over [{self.low}, {self.high}], "
            f"{self.tensor} has {self.extent} (0..{self.extent - 1})"
        )


def out_of_bounds_reads(workload: Workload) -> list[OutOfBounds]:
    """Every load of a bound workload (integer shapes) that can read outside its tensor."""
    found: list[OutOfBounds] = []
    for tensor in workload.computes():
        assert tensor.op is not None
        env: dict[Var, tuple[int, int]] = {}
        for axis in tensor.op.axes:
            extent = _const(axis.extent)
            if extent is not None:
                env[axis.var] = (0, extent - 1)
        body = tensor.op.body
        if isinstance(body, Reduce):
            for axis in body.axes:
                extent = _const(axis.extent)
                if extent is not None:
                    env[axis.var] = (0, extent - 1)
            body = body.source
        found.extend(_check(tensor.name, body, env, {}))
    return found


def _const(e: Expr) -> int | None:
    return int(e.value) if isinstance(e, Const) and dt.is_int(e.dtype) else None


Facts = Mapping[tuple[tuple[str, int], ...], tuple[int, int]]
"""What a select's condition says of a linear sum of several variables: its range."""


def _check(compute: str, e: Node, env: Bounds, facts: Facts) -> Iterator[OutOfBounds]:
    if isinstance(e, Select):
        yield from _check(compute, e.cond, env, facts)
        yield from _check(compute, e.true_value, *_assume(e.cond, env, facts, True))
        yield from _check(compute, e.false_value, *_assume(e.cond, env, facts, False))
        return
    if isinstance(e, Load):
        yield from _check_load(compute, e, env, facts)
    for child in children(e):
        if not isinstance(child, Tensor):
            yield from _check(compute, child, env, facts)


def _check_load(compute: str, load: Load, env: Bounds, facts: Facts) -> Iterator[OutOfBounds]:
    for axis, (index, dim) in enumerate(zip(load.indices, load.buffer.shape)):
        extent = _const(dim)
        span = _span(index, env, facts)
        if extent is None or span is None or span[0] > span[1]:
            continue
        if span[0] < 0 or span[1] >= extent:
            yield OutOfBounds(
                compute, load.buffer.name, axis, render(index), span[0], span[1], extent
            )


def _span(index: Expr, env: Bounds, facts: Facts) -> tuple[int, int] | None:
    """The range of an index: its interval, narrowed by what the enclosing selects say."""
    if isinstance(index, Select):
        a = _span(index.true_value, *_assume(index.cond, env, facts, True))
        b = _span(index.false_value, *_assume(index.cond, env, facts, False))
        if a is None or b is None:
            return None
        if a[0] > a[1] or b[0] > b[1]:  # a branch the condition never takes
            return b if a[0] > a[1] else a
        return min(a[0], b[0]), max(a[1], b[1])
    span = bound(index, env)
    form = linear_form(index)
    known = facts.get(_key(form[0])) if form is not None else None
    if span is not None and form is not None and known is not None:
        span = (max(span[0], known[0] + form[1]), min(span[1], known[1] + form[1]))
    return span


def _key(terms: Mapping[Expr, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((render(atom), c) for atom, c in terms.items()))


_FLIP = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def _assume(cond: Expr, env: Bounds, facts: Facts, holds: bool) -> tuple[Bounds, Facts]:
    """`env` and `facts` narrowed by knowing that `cond` is `holds` (unchanged where that
    says nothing: a disjunction that holds, a comparison of non-linear terms)."""
    if isinstance(cond, Binary) and cond.op == ("and" if holds else "or"):
        env, facts = _assume(cond.a, env, facts, holds)
        return _assume(cond.b, env, facts, holds)
    if not isinstance(cond, Binary) or cond.op not in _FLIP:
        return env, facts
    op = cond.op if holds else _FLIP[cond.op]
    a, b = linear_form(cond.a), linear_form(cond.b)
    if a is None or b is None:
        return env, facts
    terms = dict(a[0])
    for atom, c in b[0].items():
        terms[atom] = terms.get(atom, 0) - c
    terms = {k: v for k, v in terms.items() if v != 0}
    if not terms:
        return env, facts
    # sum(terms) + const `op` 0
    const = a[1] - b[1]
    if len(terms) == 1:
        ((var, coef),) = terms.items()
        if isinstance(var, Var) and var in env:
            if coef < 0:
                coef, const, op = -coef, -const, _MIRROR[op]
            return {**env, var: _narrow(env[var], op, coef, const)}, facts
    key = _key(terms)
    known = facts.get(key, (-(2**63), 2**63))
    return env, {**facts, key: _narrow(known, op, 1, const)}


def _narrow(span: tuple[int, int], op: str, coef: int, const: int) -> tuple[int, int]:
    """`span` of v narrowed by `coef * v + const op 0` (coef > 0)."""
    low, high = span
    if op == "lt":
        high = min(high, -(const // coef) - 1)
    elif op == "le":
        high = min(high, (-const) // coef)
    elif op == "gt":
        low = max(low, (-const) // coef + 1)
    else:
        low = max(low, -(const // coef))
    return low, high
