"""Pre-packing: blocks that only rearrange constant inputs run once, at load, not per call.

A schedule that packs a weight (`pack_panels`: B into column panels, often moved under
a column-tile loop by `compute_at`) makes the kernel copy the weight on every call:
for BERT-base's dense layers 9.4 MB per call. When the weight is a constant of a
model, that copy is the same on every call, so it can be split off:

    def dense(A, W, bias, C):                      def dense_prologue(W, W_packed):   # once
      W_packed = alloc(...)                            for ax0, ax1, ax2: block("W_packed")
      for j_0:                                ->   def dense(A, bias, W_packed, C):    # per call
        for ax..: block("W_packed")  # W only        for j_0:
        for i, r, j_1: block("C")                      for i, r, j_1: block("C")

A block is hoisted when it is a plain copy of constants into an intermediate: one store,
no init, it reads only `constant_inputs`, it is the only writer of the buffer, it writes
each point of its domain to a distinct element (every iteration variable can be read
back from its store's indices) and its reads stay inside their buffers over its whole
domain. Re-nested at the root over that whole domain (its iteration variables keep their
domains; only their bindings change to fresh loops), it computes every element any
iteration of the original could have, with the same arithmetic: so
main(prologue(W), X) == original(W, X) bit for bit. The main program reads the packed
buffer as an input at full size (compaction no longer shrinks it), and no longer takes
a constant input only the hoisted blocks read.

An integer reduction over constants is hoisted too (dense_int8's column sums of W, which
its zero-point correction needs: QNN folds them into the bias at compile time). Its
writers are one block with an init, or an init block and an update block as
`decompose_reduction` leaves them; each writes every element of the buffer (its spatial
domain, one to one, is the buffer's size) and the update reads only constants and its
own element. Re-nested, init over the whole buffer then the update over its whole
domain, it sums the same terms; integer addition is exact in any order, so again bit
for bit. Float reductions stay per call: their order of summation would change.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Set
from dataclasses import replace

from ir import dtype as dt
from ir.arith import bound
from ir.errors import LoomtuneError
from ir.expr import Binary, Const, Expr, IterVar, Load, Var
from ir.node import walk
from ir.program import (
    TRUE,
    Block,
    BlockRealize,
    BufferStore,
    For,
    IntrinsicCall,
    Program,
    Stmt,
    seq,
)
from ir.schedule.state import all_blocks, fresh_names, remove_stmt

__all__ = [
    "LAYOUT_FREE_ATTR",
    "PrepackError",
    "hoist_constant_blocks",
    "hoistable_reason",
    "layout_free",
    "per_call",
    "reduction_reason",
]

LAYOUT_FREE_ATTR = "layout_free"
"""A program attr naming its inputs that are constants of a model (comma-joined, sorted),
as TVM's `layout_free_buffers`: set on a model task's naive program (so part of its key,
`ir.task.with_layout_free`), kept by every schedule of it."""


class PrepackError(LoomtuneError):
    """`constant_inputs` names something that is not an input of the program."""


def hoist_constant_blocks(
    program: Program, constant_inputs: Set[str]
) -> tuple[Program | None, Program]:
    """Split `program` into (prologue, main): the prologue computes the hoistable blocks'
    buffers from the constant inputs (its outputs), main reads them as inputs (after the
    program's remaining inputs). (None, program) when no block can be hoisted."""
    unknown = set(constant_inputs) - {b.name for b in program.inputs}
    if unknown:
        raise PrepackError(
            f"{program.name}: {', '.join(sorted(unknown))} is not an input of the program"
        )
    blocks = all_blocks(program)
    writes = Counter(w.buffer.name for r in blocks for w in r.block.writes)
    intermediates = {b.name for b in program.allocs}
    writers: dict[str, list[BlockRealize]] = {}
    for r in blocks:
        writers.setdefault(_written(r), []).append(r)
    known = set(constant_inputs)  # constants, then also what hoisted blocks compute from them
    hoisted: list[BlockRealize] = []
    while True:
        sums = {
            name
            for name, group in writers.items()
            if name in intermediates
            and writes[name] == len(group)
            and reduction_reason(group, known) is None
        }
        found = [
            r
            for r in blocks
            if _written(r) in sums
            or hoistable_reason(r, known, intermediates, writes[_written(r)]) is None
        ]
        if len(found) == len(hoisted):
            break
        hoisted = found
        known |= {_written(r) for r in found}
    if not hoisted:
        return None, program
    names = fresh_names(program)
    moved = {r.block.name for r in hoisted}
    main = remove_stmt(program, lambda n: isinstance(n, BlockRealize) and n.block.name in moved)
    still_read = _buffers_read(main)
    written = list({b.name: b for r in hoisted for b in (r.block.writes[0].buffer,)}.values())
    packed = [b for b in written if b.name in still_read]
    scratch = tuple(b for b in written if b.name not in still_read)
    packed_names = {b.name for b in written}
    main = replace(
        main,
        inputs=(
            *(b for b in program.inputs if b.name not in constant_inputs or b.name in still_read),
            *packed,
        ),
        allocs=tuple(b for b in program.allocs if b.name not in packed_names),
    )
    read_by_prologue = {
        ld.buffer.name for r in hoisted for ld in _loads(r.block.body) + _loads(r.block.init)
    }
    prologue = Program(
        f"{program.name}_prologue",
        tuple(b for b in program.inputs if b.name in read_by_prologue),
        tuple(packed),
        seq(*(_renest(r.block, names.fresh) for r in hoisted)),
        allocs=scratch,
        attrs=(("prologue_of", program.name),),
    )
    return prologue, main


def layout_free(program: Program) -> tuple[str, ...]:
    """The inputs `program` declares constant (`LAYOUT_FREE_ATTR`); () for most programs."""
    names = program.attr(LAYOUT_FREE_ATTR)
    return tuple(str(names).split(",")) if names else ()


def per_call(program: Program) -> Program:
    """What a model runs per call of a scheduled program: its main part over its own
    layout-free inputs (the program itself when it has none or nothing is hoisted) —
    what measurement times, so what a cost model's features should describe."""
    free = layout_free(program)
    return hoist_constant_blocks(program, frozenset(free))[1] if free else program


def hoistable_reason(
    r: BlockRealize, constant: Set[str], intermediates: Set[str], writers: int
) -> str | None:
    """Why block `r` cannot run once at load (None: it can). `writers`: blocks writing its
    buffer."""
    block = r.block
    if block.init is not None or not isinstance(block.body, BufferStore):
        return "not a plain store"
    if len(block.writes) != 1 or _written(r) not in intermediates:
        return "does not write one intermediate buffer"
    if writers != 1:
        return "its buffer has other writers"
    loads = _loads(block.body)
    if not loads or any(ld.buffer.name not in constant for ld in loads):
        return "reads something that is not a constant input"
    if any(rd.buffer.name not in constant for rd in block.reads):
        return "reads something that is not a constant input"
    if not _one_to_one(block.body.indices, [iv.var for iv in block.iter_vars]):
        return "does not write each point of its domain once"
    domain = _domain(block.iter_vars)
    if domain is None:
        return "its domain is not constant"
    for ld in loads:
        if not _in_bounds(ld.indices, ld.buffer.concrete_shape(), domain):
            return f"its read of {ld.buffer.name} is not provably in bounds"
    return None


def reduction_reason(group: list[BlockRealize], constant: Set[str]) -> str | None:
    """Why the blocks `group` (every writer of one intermediate, in program order) cannot
    run once at load as an integer reduction over constants (None: they can)."""
    if len(group) == 1:
        init_block, update = None, group[0].block
        if not isinstance(update.init, BufferStore) or _loads(update.init):
            return "not a reduction with a constant init"
    elif len(group) == 2:
        init_block, update = group[0].block, group[1].block
        if init_block.init is not None or update.init is not None:
            return "not an init block and an update block"
        if not isinstance(init_block.body, BufferStore) or _loads(init_block.body):
            return "its init is not a constant store"
        if init_block.is_reduction:
            return "its init block reduces"
    else:
        return "more than an init and an update write it"
    store = update.body
    if not update.is_reduction or not isinstance(store, BufferStore):
        return "not a reduction"
    buffer = store.buffer
    if not dt.is_int(buffer.dtype):
        return "not an integer reduction (a float sum's order would change)"
    spatial = [iv for iv in update.iter_vars if iv.kind == "spatial"]
    reduce = {iv.var for iv in update.iter_vars if iv.kind == "reduce"}
    if not _covers(store.indices, spatial, buffer.concrete_shape()) or any(
        v in reduce for e in store.indices for v in _vars(e)
    ):
        return "its update does not write each element of its buffer from one spatial point"
    if init_block is not None:
        init_store = init_block.body
        assert isinstance(init_store, BufferStore)
        if init_store.buffer.name != buffer.name or not _covers(
            init_store.indices, list(init_block.iter_vars), buffer.concrete_shape()
        ):
            return "its init does not write each element of its buffer once"
    elif isinstance(update.init, BufferStore) and update.init.indices != store.indices:
        return "its init does not write the element it updates"
    domain = _domain(update.iter_vars)
    if domain is None:
        return "its domain is not constant"
    for ld in _loads(update.body):
        if ld.buffer.name == buffer.name:
            if ld.indices != store.indices:
                return "it reads another element of its own buffer"
            continue
        if ld.buffer.name not in constant:
            return "reads something that is not a constant input"
        if not _in_bounds(ld.indices, ld.buffer.concrete_shape(), domain):
            return f"its read of {ld.buffer.name} is not provably in bounds"
    if any(rd.buffer.name not in {*constant, buffer.name} for rd in update.reads):
        return "reads something that is not a constant input"
    return None


def _covers(indices: tuple[Expr, ...], ivars: list[IterVar], shape: tuple[int, ...]) -> bool:
    """Whether the store writes every element of a buffer of `shape` exactly once over
    the domain of `ivars`: one to one, in bounds, and the domain is the buffer's size."""
    domain = _domain(tuple(ivars))
    if domain is None or not _one_to_one(indices, [iv.var for iv in ivars]):
        return False
    if not _in_bounds(indices, shape, domain):
        return False
    return math.prod(hi - lo + 1 for lo, hi in domain.values()) == math.prod(shape)


def _vars(e: Expr) -> set[Var]:
    return {n for n in walk(e) if isinstance(n, Var)}


def _in_bounds(
    indices: tuple[Expr, ...], shape: tuple[int, ...], domain: dict[Var, tuple[int, int]]
) -> bool:
    """Whether every index stays inside its dimension over the whole `domain`."""
    for idx, size in zip(indices, shape):
        rng = bound(idx, domain)
        if rng is None or rng[0] < 0 or rng[1] >= size:
            return False
    return True


def _one_to_one(indices: tuple[Expr, ...], ivars: list[Var]) -> bool:
    """Whether every iteration variable can be read back from the store's indices: it is
    an index itself, or both `v // c` and `v % c` are (v = c·(v // c) + v % c) — the
    copies `pack_panels` and `transform_layout`'s panel and VNNI maps write. Then no two
    points of the domain write the same element."""
    plain = {e for e in indices if isinstance(e, Var)}
    parts: dict[tuple[Var, int], set[str]] = {}
    for e in indices:
        if (
            isinstance(e, Binary)
            and e.op in ("floordiv", "floormod")
            and isinstance(e.a, Var)
            and isinstance(e.b, Const)
            and int(e.b.value) > 0
        ):
            parts.setdefault((e.a, int(e.b.value)), set()).add(e.op)
    split = {v for (v, _), ops in parts.items() if ops == {"floordiv", "floormod"}}
    return set(ivars) <= plain | split


def _written(r: BlockRealize) -> str:
    return r.block.writes[0].buffer.name if r.block.writes else ""


def _loads(stmt: Stmt | None) -> list[Load]:
    """The loads in `stmt` (a block's body or init; none for None)."""
    return [n for n in walk(stmt) if isinstance(n, Load)] if stmt is not None else []


def _domain(iter_vars: tuple[IterVar, ...]) -> dict[Var, tuple[int, int]] | None:
    out: dict[Var, tuple[int, int]] = {}
    for iv in iter_vars:
        if not isinstance(iv.extent, Const):
            return None
        out[iv.var] = (0, int(iv.extent.value) - 1)
    return out


def _renest(block: Block, fresh: Callable[[str], str]) -> For:
    """The block alone, bound to fresh loops over its whole domain (outermost first)."""
    loops = [Var(fresh(f"p{iv.var.name}")) for iv in block.iter_vars]
    nest: For | BlockRealize = BlockRealize(tuple(loops), TRUE, block)
    for lv, iv in reversed(list(zip(loops, block.iter_vars))):
        nest = For(lv, iv.extent, "serial", nest)
    assert isinstance(nest, For)
    return nest


def _buffers_read(program: Program) -> set[str]:
    """Buffers whose values the program's blocks or statements read."""
    names: set[str] = set()
    for n in walk(program.body):
        if isinstance(n, Load):
            names.add(n.buffer.name)
        elif isinstance(n, Block):
            names.update(rd.buffer.name for rd in n.reads)
        elif isinstance(n, IntrinsicCall):
            names.update(a.buffer.name for a in n.args)
    return names
