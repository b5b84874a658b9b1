"""Simplified index arithmetic: constant folding, linear forms and range-aware rules.

Splits and fuses leave expressions such as `(i0 * 8 + i1) // 8` with `i1 < 8`; with
the ranges of the enclosing loops these fold to `i0`, and guards that always hold
disappear. Integer expressions of add/sub/mul-by-constant are rebuilt in one
canonical linear form (largest coefficient first) so equal indices print equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ir import dtype as dt
from ir.expr import Binary, Cast, Const, Expr, Select, Var
from ir.node import Node, map_children, walk
from ir.program import For, IfThenElse, Program, SeqStmt, Stmt, seq
from ir.visit import substitute

Bounds = Mapping[Var, tuple[int, int]]


# ---------------------------------------------------------------------------
# Linear forms: {atom: coefficient} + constant


def _linear(e: Expr) -> tuple[dict[Expr, int], int] | None:
    if not dt.is_int(e.dtype):
        return None
    if isinstance(e, Const):
        return {}, int(e.value)
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        terms = dict(a[0])
        for atom, c in b[0].items():
            terms[atom] = terms.get(atom, 0) + sign * c
        return {k: v for k, v in terms.items() if v != 0}, a[1] + sign * b[1]
    if isinstance(e, Binary) and e.op == "mul":
        a, b = _linear(e.a), _linear(e.b)
        if a is None or b is None:
            return None
        if not a[0]:
            a, b = b, a
        if not b[0]:  # linear * constant
            k = b[1]
            return {atom: c * k for atom, c in a[0].items() if c * k != 0}, a[1] * k
        return {e: 1}, 0
    return {e: 1}, 0


def _build(terms: Mapping[Expr, int], const: int, dtype: str) -> Expr:
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


# ---------------------------------------------------------------------------
# Expressions


def simplify_expr(e: Expr, env: Bounds | None = None) -> Expr:
    env = env or {}

    def visit(n: Node) -> Node:
        n = map_children(n, visit)
        return _rule(n, env) if isinstance(n, Expr) else n

    return visit(e)  # type: ignore[return-value]


def _rule(e: Expr, env: Bounds) -> Expr:
    if isinstance(e, Cast) and isinstance(e.value, Const):
        v = e.value.value
        if dt.is_float(e.dtype):
            return Const(float(v), e.dtype)
        if dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
            lo, hi = dt.min_value(e.dtype), dt.max_value(e.dtype)
            if lo <= int(v) <= hi:
                return Const(int(v), e.dtype)
        return e
    if isinstance(e, Select) and isinstance(e.cond, Const):
        return e.true_value if e.cond.value else e.false_value
    if not isinstance(e, Binary):
        return e
    a, b, op = e.a, e.b, e.op
    if op in ("and", "or"):
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Const):
                if op == "and":
                    return y if x.value else Const(False, "bool")
                return Const(True, "bool") if x.value else y
        return e
    if not dt.is_int(a.dtype):
        return e
    if op in ("add", "sub", "mul"):
        lin = _linear(e)
        if lin is not None:
            return _build(lin[0], lin[1], e.dtype)
        return e
    if op in ("floordiv", "floormod") and isinstance(b, Const) and b.value > 0:
        return _divmod(e, int(b.value), env)
    if op in ("max", "min"):
        ba, bb = bound(a, env), bound(b, env)
        if ba and bb:
            if ba[0] >= bb[1]:
                return a if op == "max" else b
            if bb[0] >= ba[1]:
                return b if op == "max" else a
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(max(a.value, b.value) if op == "max" else min(a.value, b.value), a.dtype)
        return e
    if op in ("lt", "le", "gt", "ge", "eq", "ne"):
        diff = bound(simplify_expr(Binary("sub", a, b), env), env)
        if diff is not None:
            lo, hi = diff
            verdict = {
                "lt": (hi < 0, lo >= 0),
                "le": (hi <= 0, lo > 0),
                "gt": (lo > 0, hi <= 0),
                "ge": (lo >= 0, hi < 0),
                "eq": (lo == hi == 0, lo > 0 or hi < 0),
                "ne": (lo > 0 or hi < 0, lo == hi == 0),
            }[op]
            if verdict[0]:
                return Const(True, "bool")
            if verdict[1]:
                return Const(False, "bool")
    return e


def _divmod(e: Binary, c: int, env: Bounds) -> Expr:
    """(q*c + r) // c -> q + r // c and (q*c + r) % c -> r % c; r // c -> 0 when 0 <= r < c."""
    if c == 1:
        return e.a if e.op == "floordiv" else Const(0, e.dtype)
    lin = _linear(e.a)
    if lin is None:
        return e
    terms, const = lin
    q_terms = {k: v // c for k, v in terms.items() if v % c == 0}
    r_terms = {k: v for k, v in terms.items() if v % c != 0}
    q_const, r_const = divmod(const, c)
    rest = _build(r_terms, r_const, e.dtype)
    rb = bound(rest, env)
    if rb is not None and rb[0] >= 0 and rb[1] < c:
        if e.op == "floordiv":
            return _build(q_terms, q_const, e.dtype)
        return rest
    if isinstance(e.a, Const):
        v = int(e.a.value)
        return Const(v // c if e.op == "floordiv" else v % c, e.dtype)
    if not q_terms and not q_const:
        return Binary(e.op, rest, e.b) if rest != e.a else e
    if e.op == "floormod":
        return Binary("floormod", rest, e.b)
    return Binary("add", _build(q_terms, q_const, e.dtype), Binary("floordiv", rest, e.b))


# ---------------------------------------------------------------------------
# Statements


def simplify_stmt(s: Stmt, env: Bounds | None = None) -> Stmt | None:
    """Simplified statement, or None when it does nothing (a zero-trip loop, a false guard)."""
    env = dict(env or {})
    if isinstance(s, SeqStmt):
        parts = [x for x in (simplify_stmt(t, env) for t in s.stmts) if x is not None]
        return seq(*parts) if parts else None
    if isinstance(s, For):
        extent = simplify_expr(s.extent, env)
        if isinstance(extent, Const):
            if extent.value <= 0:
                return None
            if extent.value == 1 and s.kind != "vectorized" and not s.annotations:
                return simplify_stmt(substitute(s.body, {s.var: Const(0, s.var.dtype)}), env)  # type: ignore[arg-type]
            env[s.var] = (0, int(extent.value) - 1)
        body = simplify_stmt(s.body, env)
        if body is None:
            return None
        return For(s.var, extent, s.kind, body, s.annotations)
    if isinstance(s, IfThenElse):
        cond = simplify_expr(s.cond, env)
        if isinstance(cond, Const):
            branch = s.then_case if cond.value else s.else_case
            return None if branch is None else simplify_stmt(branch, env)
        then = simplify_stmt(s.then_case, env)
        other = simplify_stmt(s.else_case, env) if s.else_case is not None else None
        if then is None and other is None:
            return None
        if then is None:
            return IfThenElse(Binary("eq", cond, Const(False, "bool")), other)  # type: ignore[arg-type]
        return IfThenElse(cond, then, other)

    def visit(n: Node) -> Node:
        if isinstance(n, Expr):
            return simplify_expr(n, env)
        if isinstance(n, Stmt):
            out = simplify_stmt(n, env)
            return out if out is not None else SeqStmt(())
        return map_children(n, visit)

    return map_children(s, visit)


def simplify(program: Program) -> Program:
    from dataclasses import replace

    body = simplify_stmt(program.body)
    return replace(program, body=body if body is not None else SeqStmt(()))


def linear_in(e: Expr, var: Var) -> tuple[int | None, Expr]:
    """Split e = stride * var + rest with `rest` free of `var`.

    stride is 0 when e does not mention var, and None when var appears other than
    linearly (e.g. inside a floordiv); then rest is e itself.
    """
    lin = _linear(e) if dt.is_int(e.dtype) else None
    if lin is None:
        return (None, e) if _mentions(e, var) else (0, e)
    terms, const = lin
    stride = terms.pop(var, 0)
    if any(_mentions(atom, var) for atom in terms):
        return None, e
    return stride, _build(terms, const, e.dtype)


def strides_in(e: Expr, variables: Sequence[Var]) -> list[int | None]:
    """`linear_in(e, v)[0]` for each v, with `e` analysed once (the cost model's features ask
    this of every access for every loop around it)."""
    lin = _linear(e) if dt.is_int(e.dtype) else None
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
