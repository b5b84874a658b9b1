"""Loop partitioning: imperfect tiles get a guard-free main loop and a guarded tail.

    for i_0 in range(171):                         for i_0 in range(170):
      for i_1 in unrolled(6):                 ->     for i_1 in unrolled(6): body        # no guard
        if i_0 * 6 + i_1 < 1024: body              for i_0 in range(1):
                                                     for i_1 in unrolled(6):
                                                       if i_0 * 6 + i_1 + 170 * 6 < 1024: body

An upper-bound guard `c * v + rest < N` (c > 0, rest bounded by the ranges of the
loops around and inside) holds for every v below some T; the loop over v is split
at T and each part re-simplified, which folds the guard away in the main part.
Splits and vector remainders then cost nothing inside the hot loop. A parallel
loop is not split in two: its body tests the variable and runs the main part or
the tail, so every iteration stays on the loop's threads.

When such a guard wraps everything a loop does, the iterations for which it
holds for no inner value are dead and are dropped first: a tile that covers
1000 columns with 2 x 16 x 48 keeps, in its last 768-column strip, one 48-wide
tile of which 40 columns are live, not 16 tiles of which 15 only test the guard.

A lower-bound guard `c * v + rest >= 0` (tiles shifted to start before the data, see
`ir.schedule.shift`) is the mirror image: the iterations before it holds for any inner
value are dropped, and the loop is split where it starts holding for every one, so only
a leading part keeps the guard.
"""

from __future__ import annotations

from dataclasses import replace

from ir import dtype as dt
from ir.arith import bound, linear_form
from ir.expr import Binary, Const, Expr, Var
from ir.lower.simplify import simplify_stmt
from ir.node import children, walk
from ir.program import Allocate, For, IfThenElse, Program, SeqStmt, Stmt, seq
from ir.visit import substitute

Ranges = dict[Var, tuple[int, int]]


def partition_loops(program: Program) -> Program:
    return replace(program, body=_part(program.body, {}))


def _part(s: Stmt, env: Ranges) -> Stmt:
    if isinstance(s, SeqStmt):
        return seq(*(_part(x, env) for x in s.stmts))
    if isinstance(s, For):
        if isinstance(s.extent, Const):
            n = int(s.extent.value)
            if not _guarded(s.body):
                return s  # nothing below to split or drop
            ranges = _inner_ranges(s, env)
            live = _live_limit(s, ranges)
            if live is not None and live < n:  # a dead tail
                return _part_of(s, 0, live, env)
            dead = _dead_head(s.body, s.var, ranges)
            if dead:
                return _part_of(s, min(dead, n), n, env)
            t = _split_point(s, ranges)
            if t is None or not 0 < t < n:
                t = _start_point(s, ranges)
            if t is not None and 0 < t < n and s.kind == "parallel":
                return _split_inside(s, t, env)
            if t is not None and 0 < t < n:
                return seq(_part_of(s, 0, t, env), _part_of(s, t, n, env))
            inner = dict(env)
            inner[s.var] = (0, n - 1)
            return replace(s, body=_part(s.body, inner))
        return replace(s, body=_part(s.body, env))
    if isinstance(s, IfThenElse):
        then = _part(s.then_case, env)
        other = _part(s.else_case, env) if s.else_case is not None else None
        return IfThenElse(s.cond, then, other)
    if isinstance(s, Allocate):
        return replace(s, body=_part(s.body, env))
    return s


def _iterations(loop: For, start: int, stop: int) -> For:
    """`loop` over its iterations [start, stop) only: the variable counts from 0 again."""
    body = substitute(loop.body, {loop.var: loop.var + start}) if start else loop.body
    return For(loop.var, Const(stop - start, "int64"), loop.kind, body, loop.annotations)  # type: ignore[arg-type]


def _part_of(loop: For, start: int, stop: int, env: Ranges) -> Stmt:
    """Iterations [start, stop) of `loop`, simplified and partitioned (none: nothing)."""
    part = simplify_stmt(_iterations(loop, start, stop), env) if stop > start else None
    return seq() if part is None else _part(part, env)


def _split_inside(loop: For, t: int, env: Ranges) -> Stmt:
    """A parallel loop split at t: a test on its variable picks the main part or the tail,
    inside the loop, so the tail's iterations stay on the loop's threads (as a second loop
    they would run on one thread after the rest)."""
    n = int(loop.extent.value)  # type: ignore[attr-defined]
    v = loop.var
    parts: list[Stmt] = []
    for lo, hi in ((0, t - 1), (t, n - 1)):
        ranges = {**env, v: (lo, hi)}
        body = substitute(loop.body, {v: Const(lo, v.dtype)}) if lo == hi else loop.body
        part = simplify_stmt(body, ranges)  # type: ignore[arg-type]
        parts.append(seq() if part is None else _part(part, ranges))
    return replace(loop, body=IfThenElse(v < t, parts[0], parts[1]))


def _statements(s: Stmt) -> list[Stmt]:
    """The statements of `s` in pre-order, without descending into expressions: the
    passes here look only for loops and guards, and expressions are most of the nodes."""
    out: list[Stmt] = []
    stack = [s]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(c for c in reversed(children(n)) if isinstance(c, Stmt))
    return out


def _guarded(s: Stmt) -> bool:
    """Whether `s` holds something partitioning acts on: a guard, or nothing at all (a
    loop over an empty body is dropped)."""
    return any(
        isinstance(n, IfThenElse) or (isinstance(n, SeqStmt) and not n.stmts)
        for n in _statements(s)
    )


def _inner_ranges(loop: For, env: Ranges) -> Ranges:
    ranges = dict(env)
    for n in _statements(loop.body):
        if isinstance(n, For) and isinstance(n.extent, Const):
            ranges[n.var] = (0, int(n.extent.value) - 1)
    return ranges


def _live_limit(loop: For, ranges: Ranges) -> int | None:
    """Leading iterations that can do anything, when every store of the body is under a
    guard on `loop`: past them each guard holds for no inner value. None: no such bound.
    `ranges`: those of the loops around and inside (`_inner_ranges`)."""
    return _live(loop.body, loop.var, ranges)


def _live(s: Stmt, var: Var, ranges: Ranges) -> int | None:
    if isinstance(s, SeqStmt):
        limits = [_live(x, var, ranges) for x in s.stmts]
        return None if any(t is None for t in limits) else max(limits, default=0)  # type: ignore[type-var]
    if isinstance(s, For | Allocate):
        return _live(s.body, var, ranges)
    if isinstance(s, IfThenElse) and s.else_case is None:
        limits = [_guard_limit(c, var, ranges, lowest=True) for c in _conjuncts(s.cond)]
        limits.append(_live(s.then_case, var, ranges))
        known = [t for t in limits if t is not None]
        return min(known) if known else None
    return None


def _split_point(loop: For, ranges: Ranges) -> int | None:
    """The number of leading iterations for which every upper-bound guard on `loop` holds.
    `ranges`: those of the loops around and inside (`_inner_ranges`)."""
    best: int | None = None
    for n in _statements(loop.body):
        if isinstance(n, IfThenElse):
            for cond in _conjuncts(n.cond):
                t = _guard_limit(cond, loop.var, ranges)
                if t is not None:
                    best = t if best is None else min(best, t)
    return best


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _dead_head(s: Stmt, var: Var, ranges: Ranges) -> int:
    """Leading iterations that can do nothing, when every store of `s` is under a guard on
    `var` that holds only from some iteration on (a lower bound): 0 when there is none."""
    if isinstance(s, SeqStmt):
        heads = [_dead_head(x, var, ranges) for x in s.stmts]
        return min(heads, default=0)
    if isinstance(s, For | Allocate):
        return _dead_head(s.body, var, ranges)
    if isinstance(s, IfThenElse) and s.else_case is None:
        starts = [_guard_start(c, var, ranges, lowest=True) for c in _conjuncts(s.cond)]
        starts.append(_dead_head(s.then_case, var, ranges))
        return max((t for t in starts if t is not None), default=0)
    return 0


def _start_point(loop: For, ranges: Ranges) -> int | None:
    """The first iteration from which every lower-bound guard on `loop` holds."""
    starts = [
        _guard_start(cond, loop.var, ranges)
        for n in _statements(loop.body)
        if isinstance(n, IfThenElse)
        for cond in _conjuncts(n.cond)
    ]
    known = [t for t in starts if t is not None]
    return max(known) if known else None


def _bound_form(cond: Expr, var: Var, ranges: Ranges) -> tuple[int, int, int, bool] | None:
    """A guard as `c * var + rest < 0` (strict) or `<= 0`: (c, rest's least and greatest
    values, strict), or None when it is no such linear guard."""
    if not isinstance(cond, Binary) or cond.op not in ("lt", "le", "gt", "ge"):
        return None
    if not dt.is_int(cond.a.dtype):
        return None
    diff = cond.a - cond.b if cond.op in ("lt", "le") else cond.b - cond.a
    lin = linear_form(diff)
    if lin is None:
        return None
    terms, const = lin
    c = terms.pop(var, 0)
    if c == 0 or any(var in walk(atom) for atom in terms):
        return None
    lo = hi = const
    for atom, coeff in terms.items():
        rng = bound(atom, ranges)
        if rng is None:
            return None
        lo += min(coeff * rng[0], coeff * rng[1])
        hi += max(coeff * rng[0], coeff * rng[1])
    return c, lo, hi, cond.op in ("lt", "gt")


def _guard_limit(cond: Expr, var: Var, ranges: Ranges, *, lowest: bool = False) -> int | None:
    """Iterations v (from 0) of an upper-bound guard `c * v + rest < N`: those for which it
    holds for every value of `rest`, or (lowest) for at least one."""
    form = _bound_form(cond, var, ranges)
    if form is None or form[0] < 0:
        return None
    c, lo, hi, strict = form
    rest = lo if lowest else hi
    # c * v + rest < 0 (strict) or <= 0  <=>  v < -rest / c  (resp. v <= -rest / c)
    limit = -rest - 1 if strict else -rest
    return max(0, limit // c + 1)


def _guard_start(cond: Expr, var: Var, ranges: Ranges, *, lowest: bool = False) -> int | None:
    """The first iteration v of a lower-bound guard `rest >= c * v` from which it holds for
    every value of `rest`, or (lowest) for at least one."""
    form = _bound_form(cond, var, ranges)
    if form is None or form[0] > 0:
        return None
    c, lo, hi, strict = form
    rest = lo if lowest else hi
    a = -c
    # rest - a * v < 0 (strict) or <= 0  <=>  v > rest / a  (resp. v >= rest / a)
    start = rest // a + 1 if strict else -(-rest // a)
    return max(0, start)
