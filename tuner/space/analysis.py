"""Block facts the rules decide on: roles of loops, element-wise or reduction, data reuse.

All functions read the current program of a schedule (rules run on a program
that earlier rules already changed) and never change it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ir.expr import Call, Const, Expr, Load, Select, Var
from ir.node import walk
from ir.program import TRUE, BlockRealize, BufferStore, For, Program, SeqStmt, Stmt
from ir.schedule import Schedule, ScheduleError
from ir.schedule.analysis import bindings, readers
from ir.schedule.state import blocks_under, find_block, loops_above
from ir.visit import substitute


def root_stmts(program: Program) -> list[Stmt]:
    body = program.body
    return list(body.stmts) if isinstance(body, SeqStmt) else [body]


def root_nests(program: Program) -> list[list[str]]:
    """The blocks of each top-level statement, in program order."""
    return [[r.block.name for r in blocks_under(s)] for s in root_stmts(program)]


def nest_subject(nest: Sequence[str]) -> str:
    """What a top-level nest's annotations are for: its last block. Its first is often a
    packed weight or a padding computed under the main block's tiles, which another
    thread count may move to a nest of its own."""
    return nest[-1]


def loop_role(r: BlockRealize, loop: For) -> str:
    """How `loop` feeds block `r`: "spatial", "reduce", "both" or "none"."""
    spatial = reduce = False
    for iv, value in zip(r.block.iter_vars, r.values):
        if any(isinstance(n, Var) and n == loop.var for n in walk(value)):
            if iv.kind == "reduce":
                reduce = True
            else:
                spatial = True
    if spatial and reduce:
        return "both"
    return "spatial" if spatial else "reduce" if reduce else "none"


def is_simple(program: Program, block: str) -> bool:
    """A naive nest: alone in its top-level statement, one loop per iteration variable,
    each bound to exactly its own loop, constant extents, no predicate."""
    r = find_block(program, block)
    loops = loops_above(program, block)
    if r.predicate != TRUE or len(loops) != len(r.block.iter_vars):
        return False
    if any(not isinstance(lp.extent, Const) for lp in loops):
        return False
    if [lp.var for lp in loops] != list(r.values):
        return False
    nest = [names for names in root_nests(program) if block in names]
    return bool(nest) and nest[0] == [block]


def is_elementwise(r: BlockRealize) -> bool:
    b = r.block
    return (
        b.init is None
        and not b.is_reduction
        and isinstance(b.body, BufferStore)
        and len(b.writes) == 1
    )


def written_buffer(r: BlockRealize) -> str | None:
    names = {w.buffer.name for w in r.block.writes}
    return next(iter(names)) if len(names) == 1 else None


def is_output(program: Program, buffer: str) -> bool:
    return buffer in {b.name for b in program.outputs}


def consumers(program: Program, block: str) -> list[BlockRealize]:
    name = written_buffer(find_block(program, block))
    return [] if name is None else readers(program, name)


def has_reuse(r: BlockRealize) -> bool:
    """Some read buffer is indexed without some spatial axis (of extent > 1): each of its
    elements serves several outputs, so tiling can keep it in cache (matmul, conv)."""
    spatial = {
        iv.var
        for iv in r.block.iter_vars
        if iv.kind == "spatial" and iv.extent != Const(1, iv.extent.dtype)
    }
    written = {w.buffer.name for w in r.block.writes}
    for rd in r.block.reads:
        if rd.buffer.name in written:
            continue
        used = {n for rng in rd.region for n in walk(rng.min) if isinstance(n, Var)}
        if spatial - used:
            return True
    return False


def is_expensive(e: Expr) -> bool:
    """Calls (exp, tanh, ...) or selects: recomputing them per use costs more than a load."""
    return any(isinstance(n, Call | Select) for n in walk(e))


def load_loop_vars(program: Program, r: BlockRealize, buffer: str) -> list[set[Var]]:
    """For each load of `buffer` in block `r`: the loop variables its indices depend on."""
    binds = bindings(r)
    out = []
    parts = [r.block.body] + ([r.block.init] if r.block.init is not None else [])
    for part in parts:
        for ld in (n for n in walk(part) if isinstance(n, Load) and n.buffer.name == buffer):
            idx = [substitute(i, binds) for i in ld.indices]
            out.append({n for i in idx for n in walk(i) if isinstance(n, Var)})
    return out


def is_legal(program: Program, action: Callable[[Schedule], object]) -> bool:
    """Whether primitives would be accepted: tried on a scratch schedule, nothing recorded."""
    try:
        action(Schedule(program))
    except ScheduleError:
        return False
    return True


def nest_annotation(program: Program, block: str, key: str) -> Any:
    """The value a block annotation `key` has on the first annotated block of `block`'s top-level nest."""
    for names in root_nests(program):
        if block in names:
            for name in names:
                value = dict(find_block(program, name).block.annotations).get(key)
                if value is not None:
                    return value
    return None
