"""Parallel: fuse the outer spatial loops of each top-level nest and run them on the threads.

Starting from the outermost loop of the nest, loops are taken while they are
perfectly nested, serial, data-parallel for every block under them, and their
extents multiply to at most the nest's `loomtune.parallel` annotation (the
first is taken even when larger; leading loops of extent 1 are passed over).
They are fused into one loop, made parallel. Only top-level loops (or under
extent-1 loops): a parallel loop inside another loop would fork threads once
per outer iteration. When the fused loop cannot be parallel, fewer loops are
tried: in practice `parallel` proves the writes of a fused loop disjoint only
when its index needs no division, so the outermost non-trivial loop alone is
often what runs in parallel.
"""

from __future__ import annotations

from ir.expr import Const
from ir.program import For, Stmt
from ir.schedule.state import blocks_under
from tuner.space.analysis import is_legal, loop_role, nest_annotation, root_stmts
from tuner.space.context import SpaceContext
from tuner.space.postprocs.base import POSTPROCS, Postproc
from tuner.space.rules.base import PARALLEL
from tuner.trace.traced_schedule import TracedSchedule


def _candidates(stmt: Stmt, limit: int) -> list[For]:
    """The perfectly nested, data-parallel outer loops to fuse, leading extent-1 loops skipped."""
    blocks = blocks_under(stmt)
    chain: list[For] = []
    product = 1
    s = stmt
    while isinstance(s, For):
        if s.kind != "serial" or not isinstance(s.extent, Const):
            break
        if any(loop_role(b, s) != "spatial" for b in blocks):
            break
        extent = int(s.extent.value)
        if chain and product * extent > limit:
            break
        if chain or extent > 1:
            chain.append(s)
            product *= extent
        s = s.body
    while len(chain) > 1 and int(chain[-1].extent.value) == 1:  # type: ignore[attr-defined]
        chain.pop()
    return chain


@POSTPROCS.register("rewrite-parallel")
class RewriteParallel(Postproc):
    def apply(self, sch: TracedSchedule, ctx: SpaceContext) -> None:
        for stmt in root_stmts(sch.program):
            blocks = blocks_under(stmt)
            if not blocks:
                continue
            first = blocks[0].block.name
            limit = nest_annotation(sch.program, first, PARALLEL)
            if not isinstance(limit, int) or limit <= 0:
                continue
            chain = _candidates(stmt, limit)
            names = [lp.var.name for lp in chain]
            while names:
                if _extent(chain[: len(names)]) >= 2 and is_legal(
                    sch.program, lambda s, n=tuple(names): _fuse_parallel(s, n)
                ):
                    handles = sch.get_loops(sch.get_block(first))
                    start = [h.name for h in handles].index(names[0])
                    picked = handles[start : start + len(names)]
                    loop = picked[0] if len(picked) == 1 else sch.fuse(*picked)
                    sch.parallel(loop)
                    break
                names.pop()


def _extent(loops: list[For]) -> int:
    out = 1
    for lp in loops:
        out *= int(lp.extent.value)  # type: ignore[attr-defined]
    return out


def _fuse_parallel(s, names: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    loop = names[0] if len(names) == 1 else s.fuse(*names)
    s.parallel(loop)
