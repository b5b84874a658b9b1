"""Software prefetch: the cache lines a loop's later iteration reads, asked for early.

A loop annotated `prefetch:<buffer>` = d (an int; 0 means none), unless a loop
inside it carries the same request, issues, at the top of iteration v, one
`llvm.prefetch` (read, kept in every cache level) for each cache line that
iteration v + d reads of `<buffer>`. Which lines is worked out
from the loads of the buffer in the loop's body: the loops inside it are set to
their range, so a load `B[(k + d) * N + j0 + j]` under a 48-lane vector loop over
j asks for the 4 lines its 192 bytes may touch (3 when they start on a line),
and one under an unrolled loop over 6 rows of A asks for a line per row.

Prefetching past the end of the loop or of the buffer is harmless (a prefetch
never faults), so no bound is checked. A load whose address is not affine in
the inner loops, or that spans more than `MAX_LINES` lines per row or more than
`MAX_ROWS` rows, is not prefetched: that is a whole panel, which the hardware
prefetcher follows better than a burst of prefetches would.
"""

from __future__ import annotations

import itertools
import math

from ir import dtype as dt
from ir.arith import linear_in
from ir.errors import IRError
from ir.expr import Const, Expr, Load, Var
from ir.lower.simplify import simplify_expr
from ir.node import walk
from ir.program import MAX_PREFETCH_DISTANCE, PREFETCH, For, prefetch_distance
from ir.visit import substitute

LINE = 64
"""Bytes in a cache line on every x86 target."""
MAX_LINES = 8
MAX_ROWS = 16


def prefetch_requests(loop: For) -> list[tuple[str, int]]:
    """The (buffer, distance) pairs `loop` asks to prefetch, distance > 0."""
    out = []
    for key, value in loop.annotations:
        if not key.startswith(PREFETCH):
            continue
        distance = prefetch_distance(value)
        if distance is None:
            raise IRError(
                f"loop {loop.var.name}: annotation {key} must be a prefetch distance "
                f"(0..{MAX_PREFETCH_DISTANCE} iterations), got {value!r}"
            )
        if distance:
            out.append((key[len(PREFETCH) :], distance))
    return out


def prefetch_points(loop: For, buffer: str, distance: int) -> list[Load]:
    """Loads of `buffer` (flat, in the variables outside `loop` and `loop.var`), one in
    each cache line iteration `loop.var + distance` reads: the addresses to prefetch.

    Empty when a loop inside `loop` asks to prefetch the same buffer: the innermost
    one does (a schedule may mark every loop level that could turn out to be the
    innermost streaming loop once a tile of 1 has removed the others). A loop of
    one iteration streams nothing: it neither prefetches nor stands in for the
    loops around it (lowering keeps an annotated one).
    """
    key = f"{PREFETCH}{buffer}"
    nodes = list(walk(loop.body))
    loops = [f for f in nodes if isinstance(f, For)]
    if _single(loop) or any(dict(f.annotations).get(key) and not _single(f) for f in loops):
        return []
    inner = {f.var: int(f.extent.value) for f in loops if isinstance(f.extent, Const)}
    unbounded = {f.var for f in loops} - set(inner)
    ahead = {loop.var: loop.var + Const(distance, dt.INDEX)}
    points: dict[Load, None] = {}
    for load in nodes:
        if not isinstance(load, Load) or load.buffer.name != buffer or len(load.indices) != 1:
            continue
        index = load.indices[0]
        used = {v for v in walk(index) if isinstance(v, Var)}
        if used & unbounded:
            continue
        terms = []
        for v in used & set(inner):
            stride, _ = linear_in(index, v)
            if stride is None:
                break
            terms.append((stride, inner[v]))
        else:
            zero = {v: Const(0, dt.INDEX) for v in used & set(inner)}
            base = substitute(index, {**zero, **ahead})
            for p in _lines(base, terms, dt.itemsize(load.buffer.dtype)):
                points.setdefault(Load(load.buffer, (simplify_expr(p),)))
    return list(points)


def _single(loop: For) -> bool:
    return isinstance(loop.extent, Const) and int(loop.extent.value) == 1


def _lines(base: Expr, terms: list[tuple[int, int]], itemsize: int) -> list[Expr]:
    """One index per line touched by base + sum(stride * [0, extent)) over `terms`.

    A term whose step crosses a line is a row (enumerated); the others make a
    contiguous span within each row.
    """
    per_line = max(1, LINE // itemsize)
    rows = [(s, e) for s, e in terms if abs(s) * itemsize >= LINE and e > 1]
    spans = [(s, e) for s, e in terms if abs(s) * itemsize < LINE and e > 1]
    lo = sum(min(0, s * (e - 1)) for s, e in spans)
    hi = sum(max(0, s * (e - 1)) for s, e in spans)
    # At worst the span starts one element before a line's end.
    lines = math.ceil(((hi - lo + 1) * itemsize + LINE - itemsize) / LINE)
    n_rows = math.prod(e for _, e in rows)
    if lines > MAX_LINES + 1 or n_rows > MAX_ROWS:
        return []
    out = []
    for values in itertools.product(*(range(e) for _, e in rows)):
        row = lo + sum(s * v for (s, _), v in zip(rows, values))
        out.extend(base + Const(row + t * per_line, dt.INDEX) for t in range(lines))
    return out
