"""Integer index arithmetic: linear forms, their canonical rebuild, and value ranges.

The lowering passes, the schedule primitives' legality checks, codegen's vector
plans and the tuner's features all read indices through these functions, so an
index is analysed the same way wherever it is asked about.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ir import dtype as dt
from ir.expr import Binary, Const, Expr, Select, Var
from ir.node import Node, walk

__all__ = ["Bounds", "bound", "build_linear", "linear_form", "linear_in", "strides_in"]

Bounds = Mapping[Var, tuple[int, int]]


# ---------------------------------------------------------------------------
# Linear forms: {atom: coefficient} + constant


def linear_form(e: Expr) -> tuple[dict[Expr, int], int] | None:
    """`e` as ({atom: coefficient}, constant), or None when `e` is not an integer.

    Sums, differences and products by constants are expanded; any other
    subexpression (a variable, a floordiv, a product of two variables) is an atom.
    """
    if not dt.is_int(e.dtype):
        return None
    if isinstance(e, Const):
        return {}, int(e.value)
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        a, b = linear_form(e.a), linear_form(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        terms = dict(a[0])
        for atom, c in b[0].items():
            terms[atom] = terms.get(atom, 0) + sign * c
        return {k: v for k, v in terms.items() if v != 0}, a[1] + sign * b[1]
    if isinstance(e, Binary) and e.op == "mul":
        a, b = linear_form(e.a), linear_form(e.b)
        if a is None or b is None:
            return None
        if not a[0]:
            a, b = b, a
        if not b[0]:  # linear * constant
            k = b[1]
            return {atom: c * k for atom, c in a[0].items() if c * k != 0}, a[1] * k
        return {e: 1}, 0
    return {e: 1}, 0


def build_linear(terms: Mapping[Expr, int], const: int, dtype: str) -> Expr:
    """The canonical expression of a linear form: largest coefficient first, constant last."""
    items = sorted(terms.items(), key=lambda kv: (-abs(kv[1]), _key(kv[0])))
    out: Expr | None = None
    for atom, c in items:
        term = atom if abs(c) == 1 else Binary("mul", atom, Const(abs(c), dtype))
        if out is None:
            out = term if c > 0 else Binary("sub", Const(0, dtype), term)
        else:
            out = Binary("add" if c > 0 else "sub", out, term)
    if out is None:
        return Const(const, dtype)
    if const > 0:
        out = Binary("add", out, Const(const, dtype))
    elif const < 0:
        out = Binary("sub", out, Const(-const, dtype))
    return out


def _key(e: Expr) -> str:
    from ir.expr import render

    return render(e)


# ---------------------------------------------------------------------------
# Bounds


def bound(e: Expr, env: Bounds) -> tuple[int, int] | None:
    """Inclusive integer range of `e` given loop ranges, or None if unknown."""
    if isinstance(e, Const) and dt.is_int(e.dtype):
        return int(e.value), int(e.value)
    if isinstance(e, Var):
        return env.get(e)
    if isinstance(e, Binary) and dt.is_int(e.dtype):
        a, b = bound(e.a, env), bound(e.b, env)
        if a is None or b is None:
            return None
        if e.op == "add":
            return a[0] + b[0], a[1] + b[1]
        if e.op == "sub":
            return a[0] - b[1], a[1] - b[0]
        if e.op == "mul":
            p = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
            return min(p), max(p)
        if e.op in ("floordiv", "floormod") and b[0] == b[1] and b[0] > 0:
            c = b[0]
            if e.op == "floordiv":
                return a[0] // c, a[1] // c
            if a[0] // c == a[1] // c:
                return a[0] % c, a[1] % c
            return 0, c - 1
        if e.op == "max":
            return max(a[0], b[0]), max(a[1], b[1])
        if e.op == "min":
            return min(a[0], b[0]), min(a[1], b[1])
    if isinstance(e, Select):
        a, b = bound(e.true_value, env), bound(e.false_value, env)
        if a is None or b is None:
            return None
        return min(a[0], b[0]), max(a[1], b[1])
    return None


def linear_in(e: Expr, var: Var) -> tuple[int | None, Expr]:
    """Split e = stride * var + rest with `rest` free of `var`.

    stride is 0 when e does not mention var, and None when var appears other than
    linearly (e.g. inside a floordiv); then rest is e itself.
    """
    lin = linear_form(e) if dt.is_int(e.dtype) else None
    if lin is None:
        return (None, e) if _mentions(e, var) else (0, e)
    terms, const = lin
    stride = terms.pop(var, 0)
    if any(_mentions(atom, var) for atom in terms):
        return None, e
    return stride, build_linear(terms, const, e.dtype)


def strides_in(e: Expr, variables: Sequence[Var]) -> list[int | None]:
    """`linear_in(e, v)[0]` for each v, with `e` analysed once (the cost model's features ask
    this of every access for every loop around it)."""
    lin = linear_form(e) if dt.is_int(e.dtype) else None
    if lin is None:
        return [None if _mentions(e, v) else 0 for v in variables]
    terms, _ = lin
    inside = [(atom, {n for n in walk(atom) if isinstance(n, Var)}) for atom in terms]
    return [
        None if any(v in names for atom, names in inside if atom != v) else terms.get(v, 0)
        for v in variables
    ]


def _mentions(e: Node, var: Var) -> bool:
    return any(n == var for n in walk(e) if isinstance(n, Var))
