"""Parallel: fuse the outer spatial loops of each top-level nest and run them on the threads.

Starting from the outermost loop of the nest, loops are taken while they are
perfectly nested, serial, data-parallel for every block under them, and their
extents multiply to at most the nest's `loomtune.parallel` annotation (the
first is taken even when larger; leading loops of extent 1 are passed over,
whatever blocks they feed). They are fused into one loop, made parallel. Only
top-level loops (or under extent-1 loops): a parallel loop inside another loop
would fork threads once per outer iteration. When the fused loop cannot be
parallel, fewer loops are tried: in practice `parallel` proves the writes of a
fused loop disjoint only when its index needs no division, so the outermost
non-trivial loop alone is often what runs in parallel.

Where the extent-1 loops lead to several statements (a small M leaves the outer
row and column tiles at 1, and the weight's packing or the accumulator's
write-back sits at that level beside the compute nest), each statement is a nest
of its own here: otherwise a dense 1x512 -> 1000 whose tiles put the 1000
columns under such a sequence would run on one thread.
"""

from __future__ import annotations

from ir.expr import Const
from ir.program import For, SeqStmt, Stmt
from ir.schedule.state import blocks_under
from tuner.space.analysis import is_legal, loop_role, nest_annotation, root_stmts
from tuner.space.context import SpaceContext
from tuner.space.postprocs.base import POSTPROCS, Postproc
from tuner.space.rules.base import PARALLEL
from tuner.trace.traced_schedule import TracedSchedule


def _candidates(stmt: Stmt, limit: int, innermost: bool = True) -> tuple[list[For], Stmt | None]:
    """The perfectly nested, data-parallel outer loops to fuse, leading extent-1 loops skipped
    (without `innermost`, not a loop right above a block); and, when there are none, the
    sequence of statements those extent-1 loops lead to."""
    blocks = blocks_under(stmt)
    chain: list[For] = []
    product = 1
    s = stmt
    while isinstance(s, For):
        if s.kind != "serial" or not isinstance(s.extent, Const):
            break
        extent = int(s.extent.value)
        if not chain and extent == 1:  # runs once: it feeds nothing in parallel
            s = s.body
            continue
        if any(loop_role(b, s) != "spatial" for b in blocks):
            break
        if not innermost and not isinstance(s.body, For | SeqStmt):
            break
        if chain and product * extent > limit:
            break
        chain.append(s)
        product *= extent
        s = s.body
    while len(chain) > 1 and int(chain[-1].extent.value) == 1:  # type: ignore[attr-defined]
        chain.pop()
    return chain, (s if not chain and isinstance(s, SeqStmt) else None)


@POSTPROCS.register("rewrite-parallel")
class RewriteParallel(Postproc):
    def apply(self, sch: TracedSchedule, ctx: SpaceContext) -> None:
        for stmt in root_stmts(sch.program):
            blocks = blocks_under(stmt)
            if not blocks:
                continue
            limit = nest_annotation(sch.program, blocks[0].block.name, PARALLEL)
            if isinstance(limit, int) and limit > 0:
                _parallelize(sch, stmt, limit)


def _parallelize(sch: TracedSchedule, stmt: Stmt, limit: int, part: bool = False) -> None:
    """Make the outer loops of `stmt` (a statement of the current program) one parallel loop,
    or, past its extent-1 loops, those of each statement they lead to (`part`: one of
    those, whose innermost loop is left to the vectorizer: a write-back's or a packing's
    row would otherwise run in parallel rather than in vectors)."""
    blocks = blocks_under(stmt)
    if not blocks:
        return
    chain, sequence = _candidates(stmt, limit, innermost=not part)
    names = [lp.var.name for lp in chain]
    while names:
        if _extent(chain[: len(names)]) >= 2 and is_legal(
            sch.program, lambda s, n=tuple(names): _fuse_parallel(s, n)
        ):
            handles = sch.get_loops(sch.get_block(blocks[0].block.name))
            start = [h.name for h in handles].index(names[0])
            picked = handles[start : start + len(names)]
            loop = picked[0] if len(picked) == 1 else sch.fuse(*picked)
            sch.parallel(loop)
            return
        names.pop()
    if isinstance(sequence, SeqStmt):
        for part in sequence.stmts:
            _parallelize(sch, part, limit, part=True)


def _extent(loops: list[For]) -> int:
    out = 1
    for lp in loops:
        out *= int(lp.extent.value)  # type: ignore[attr-defined]
    return out


def _fuse_parallel(s, names: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    loop = names[0] if len(names) == 1 else s.fuse(*names)
    s.parallel(loop)
