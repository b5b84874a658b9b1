"""Loop primitives: split, fuse, reorder, parallel, vectorize, unroll, annotate.

Each is a pure function `(program, ...) -> (program, result)` that checks its own
legality and raises ScheduleError naming the loop or block; `Schedule` wraps them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from ir.expr import Const, Expr, Var, binary, logical_and
from ir.node import walk
from ir.program import (
    MAX_PREFETCH_DISTANCE,
    PREFETCH,
    TRUE,
    Block,
    BlockRealize,
    For,
    Program,
    annotations,
    prefetch_distance,
)
from ir.schedule.analysis import bindings, binds_reduce, mentions
from ir.schedule.state import (
    ScheduleError,
    blocks_under,
    find_block,
    find_loop,
    fresh_names,
    is_perfect_chain,
    loops_above,
    path_to,
    replace_loop,
)
from ir.visit import substitute


def _const_extent(lp: For) -> int:
    if not isinstance(lp.extent, Const):
        raise ScheduleError(f"loop {lp.var.name}: extent is not a constant")
    return int(lp.extent.value)


def _index(value: int) -> Const:
    return Const(value, "int64")


def _and_predicate(r: BlockRealize, cond: Expr) -> BlockRealize:
    pred = cond if r.predicate == TRUE else logical_and(r.predicate, cond)
    return replace(r, predicate=pred)


def get_loops(program: Program, block: str) -> list[str]:
    """Loops enclosing `block`, outermost first.

    for i: for j: with block("C")   ->   ["i", "j"]
    """
    return [lp.var.name for lp in loops_above(program, block)]


def get_child_blocks(program: Program, loop: str | None) -> list[str]:
    """Blocks under `loop` (the whole program for None), in program order."""
    root = program.body if loop is None else find_loop(program, loop)
    return [r.block.name for r in blocks_under(root)]


def split(program: Program, loop: str, factors: list[int | None]) -> tuple[Program, list[str]]:
    """Split a loop into nested loops; one factor may be None (inferred).

        for i in range(10): B[i] = ...
      split(i, [None, 4]) ->
        for i_0 in range(3):
          for i_1 in range(4):
            with block: vi = spatial(10, i_0 * 4 + i_1); where(i_0 * 4 + i_1 < 10)

    A factor that does not divide the extent makes an imperfect split: the blocks
    under it are guarded by a predicate.
    """
    lp = find_loop(program, loop)
    if lp.kind != "serial":
        raise ScheduleError(
            f"loop {loop}: cannot split a {lp.kind} loop (split it before changing its kind)"
        )
    n = _const_extent(lp)
    if len(factors) < 2:
        raise ScheduleError(f"loop {loop}: split needs at least 2 factors, got {len(factors)}")
    if sum(f is None for f in factors) > 1:
        raise ScheduleError(f"loop {loop}: at most one split factor may be inferred (None)")
    for f in factors:
        if f is not None and (isinstance(f, bool) or not isinstance(f, int) or f <= 0):
            raise ScheduleError(f"loop {loop}: split factor {f!r} is not a positive integer")
    known = math.prod(f for f in factors if f is not None)
    sizes = [f if f is not None else -(-n // known) for f in factors]
    total = math.prod(sizes)
    if total < n:
        raise ScheduleError(f"loop {loop}: split factors {sizes} multiply to {total} < extent {n}")
    names = fresh_names(program)
    new_vars = [Var(names.fresh(f"{loop}_{j}")) for j in range(len(sizes))]
    fused: Expr = new_vars[0]
    for v, f in zip(new_vars[1:], sizes[1:]):
        fused = fused * f + v
    body = substitute(lp.body, {lp.var: fused})
    if total > n:
        guard = binary("lt", fused, n)
        body = _map_realizes(body, lambda r: _and_predicate(r, guard))
    for v, f in reversed(list(zip(new_vars, sizes))):
        body = For(v, _index(f), "serial", body)
    return replace_loop(program, loop, lambda _: body), [v.name for v in new_vars]


def _map_realizes(stmt, fn):
    from ir.node import map_children

    def visit(n):
        if isinstance(n, BlockRealize):
            return fn(n)
        return map_children(n, visit)

    return visit(stmt)


def fuse(program: Program, loops: list[str]) -> tuple[Program, str]:
    """Fuse perfectly nested loops into one.

      for i in range(4): for j in range(8): body(i, j)
    fuse(i, j) ->
      for i_j_fused in range(32): body(i_j_fused // 8, i_j_fused % 8)
    """
    if len(loops) < 2:
        raise ScheduleError(f"fuse needs at least 2 loops, got {loops}")
    fors = [find_loop(program, name) for name in loops]
    chain = is_perfect_chain(fors[0], fors[-1])
    if chain is None or [f.var.name for f in chain] != list(loops):
        raise ScheduleError(
            f"loop {loops[0]}: loops {', '.join(loops)} are not perfectly nested in this order "
            "(each loop's body must be exactly the next loop)"
        )
    for f in fors:
        if f.kind != "serial":
            raise ScheduleError(f"loop {f.var.name}: cannot fuse a {f.kind} loop")
    extents = [_const_extent(f) for f in fors]
    names = fresh_names(program)
    fused = Var(names.fresh("_".join(loops) + "_fused"))
    mapping: dict[Var, Expr] = {}
    inner = 1
    for f, ext in reversed(list(zip(fors, extents))):
        e: Expr = fused if inner == 1 else fused // inner
        if f is not fors[0]:
            e = e % ext
        mapping[f.var] = e
        inner *= ext
    body = substitute(fors[-1].body, mapping)
    for f in fors[1:]:
        if any(mentions(g.extent, f.var) for g in fors):
            raise ScheduleError(f"loop {f.var.name}: an extent depends on it")
    new = For(fused, _index(inner), "serial", body)
    return replace_loop(program, loops[0], lambda _: new), fused.name


def reorder(program: Program, loops: list[str]) -> Program:
    """Reorder loops of one perfect nest into the given order.

        for i: for j: for k: body        reorder(k, i) ->   for k: for j: for i: body
    (the named loops swap positions; loops not named stay where they are)
    """
    if len(loops) < 2 or len(set(loops)) != len(loops):
        raise ScheduleError(f"reorder needs at least 2 distinct loops, got {loops}")
    fors = {name: find_loop(program, name) for name in loops}
    # The chain runs from the outermost named loop to the innermost one.
    depth = {}
    for name, f in fors.items():
        path = path_to(program.body, lambda n, f=f: n is f)
        depth[name] = len(path) if path else 0
    outer = min(loops, key=lambda n: depth[n])
    innermost = max(loops, key=lambda n: depth[n])
    chain = is_perfect_chain(fors[outer], fors[innermost])
    if chain is None:
        raise ScheduleError(
            f"loop {outer}: loops {', '.join(loops)} are not in one perfect nest "
            "(every loop between them must have exactly one child loop)"
        )
    chain_names = [f.var.name for f in chain]
    missing = [n for n in loops if n not in chain_names]
    if missing:
        raise ScheduleError(f"loop {missing[0]}: not in the nest of loop {outer}")
    for f in chain:
        for g in chain:
            if f is not g and mentions(g.extent, f.var):
                raise ScheduleError(f"loop {g.var.name}: its extent depends on loop {f.var.name}")
    _check_no_inner_dependences(chain[-1], loops[0])
    positions = [i for i, name in enumerate(chain_names) if name in fors]
    order = list(chain)
    for pos, name in zip(positions, loops):
        order[pos] = fors[name]
    body = chain[-1].body
    for f in reversed(order):
        body = replace(f, body=body)
    return replace_loop(program, outer, lambda _: body)


def _check_no_inner_dependences(innermost: For, what: str) -> None:
    """Several blocks in one nest: refuse when one reads what another writes."""
    realizes = blocks_under(innermost.body)
    if len(realizes) <= 1:
        return
    written = {w.buffer.name: r.block.name for r in realizes for w in r.block.writes}
    for r in realizes:
        for rd in r.block.reads:
            w = written.get(rd.buffer.name)
            if w is not None and w != r.block.name:
                raise ScheduleError(
                    f'loop {what}: block "{r.block.name}" reads {rd.buffer.name}, written by block '
                    f'"{w}" in the same nest; reordering could change the result'
                )


def _set_kind(program: Program, loop: str, kind: str) -> Program:
    lp = find_loop(program, loop)
    if lp.kind == kind:
        return program
    if lp.kind != "serial":
        raise ScheduleError(f"loop {loop}: already {lp.kind}, cannot make it {kind}")
    if kind in ("parallel", "vectorized"):
        for r in blocks_under(lp):
            if binds_reduce(r, lp.var):
                raise ScheduleError(
                    f'loop {loop}: feeds a reduction axis of block "{r.block.name}"; '
                    f"only data-parallel loops can be {kind}"
                )
            _check_disjoint_writes(program, r, lp, kind)
    return replace_loop(program, loop, lambda f: replace(f, kind=kind))


def _check_disjoint_writes(program: Program, r: BlockRealize, lp: For, kind: str) -> None:
    """Different iterations of `lp` must write different elements of every buffer.

    The region one iteration writes (relaxed over the loops between `lp` and the
    block) must move by at least its extent, in some dimension, from one iteration
    to the next.
    """
    from ir.arith import linear_form
    from ir.lower.simplify import simplify_expr
    from ir.schedule.analysis import loop_ranges, relaxed_region

    chain = loops_above(program, r.block.name)
    inner = chain[[f.var.name for f in chain].index(lp.var.name) + 1 :]
    relax = loop_ranges(inner)
    ranges = loop_ranges(chain)
    binds = bindings(r)
    for w in r.block.writes:
        shape = w.buffer.concrete_shape()
        # simplified under the loops' ranges: a packed panel's (o*32 + i) // 32 is o
        idx = tuple(simplify_expr(substitute(rng.min, binds), ranges) for rng in w.region)
        region = relaxed_region(idx, relax, shape)  # type: ignore[arg-type]
        ok = False
        for mn, ext in region:
            lin = linear_form(mn)
            if lin is not None and abs(lin[0].get(lp.var, 0)) >= ext:
                ok = True
                break
        if not ok:
            raise ScheduleError(
                f'loop {lp.var.name}: block "{r.block.name}" writes overlapping parts of {w.buffer.name} '
                f"in different iterations; the loop cannot be {kind}"
            )


def parallel(program: Program, loop: str) -> Program:
    """Run a data-parallel loop on the target's threads.

    for i in range(64): ...   ->   for i in parallel(64): ...
    """
    return _set_kind(program, loop, "parallel")


def vectorize(program: Program, loop: str) -> Program:
    """Run a data-parallel loop as vector operations.

    for j in range(16): ...   ->   for j in vectorized(16): ...
    """
    return _set_kind(program, loop, "vectorized")


def unroll(program: Program, loop: str) -> Program:
    """Emit the loop body once per iteration.

    for k in range(4): ...    ->   for k in unrolled(4): ...
    """
    lp = find_loop(program, loop)
    if lp.kind not in ("serial", "unrolled"):
        raise ScheduleError(f"loop {loop}: already {lp.kind}, cannot unroll it")
    if not isinstance(lp.extent, Const):
        raise ScheduleError(f"loop {loop}: extent is not a constant; cannot unroll")
    return _set_kind(program, loop, "unrolled")


_ANNOTATION_TYPES = (int, float, str, bool)


def annotate(program: Program, target: str, key: str, value: Any, *, is_block: bool) -> Program:
    """Attach a key/value hint to a loop or block (e.g. an unroll limit, a vector width).

    for j in range(32): ...   annotate(j, "vector_width", 8) ->
    for j in range(32):  # {'vector_width': 8}
    """
    if not isinstance(key, str) or not key:
        raise ScheduleError(f"{target}: annotation key must be a non-empty string, got {key!r}")
    if not isinstance(value, _ANNOTATION_TYPES):
        raise ScheduleError(
            f"{target}: annotation {key} must be an int, float, str or bool, got {value!r}"
        )
    if key.startswith(PREFETCH):
        _check_prefetch(program, target, key, value, is_block)
    if is_block:
        r = find_block(program, target)
        from ir.schedule.state import replace_realize

        new_block = replace(
            r.block, annotations=annotations({**dict(r.block.annotations), key: value})
        )
        return replace_realize(program, target, lambda x: replace(x, block=new_block))
    find_loop(program, target)
    return replace_loop(
        program,
        target,
        lambda f: replace(f, annotations=annotations({**dict(f.annotations), key: value})),
    )


def _check_prefetch(program: Program, target: str, key: str, value: Any, is_block: bool) -> None:
    """A prefetch hint names a buffer of the program and a distance in iterations."""
    name = key[len(PREFETCH) :]
    if is_block:
        raise ScheduleError(f"{target}: {key} is a loop annotation, not a block's")
    if prefetch_distance(value) is None:
        raise ScheduleError(
            f"{target}: {key} must be a distance in iterations, 0..{MAX_PREFETCH_DISTANCE}, "
            f"got {value!r}"
        )
    known = {b.name for b in (*program.params, *program.allocs)} | {
        b.name for n in walk(program.body) if isinstance(n, Block) for b in n.alloc_buffers
    }
    if name not in known:
        raise ScheduleError(f"{target}: {key} names no buffer of the program")
