"""Workload (compute DSL) -> loop-nest program: one naive loop nest per compute.

    for i in range(m):
      for j in range(n):
        for k in range(K):
          block C(vi=spatial(i), vj=spatial(j), vk=reduce(k)):
            init: C[vi, vj] = 0.0
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

Loop and iteration-variable names are unique program-wide, so schedules can move
blocks between nests without renaming.
"""

from __future__ import annotations

from collections.abc import Mapping

from ir.compute import Tensor, Workload, reduce_identity
from ir.errors import IRError, UnboundShapeError
from ir.expr import Buffer, Const, Expr, IterVar, Load, Reduce, Var, binary, render
from ir.node import Node, walk
from ir.program import (
    TRUE,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    Program,
    Range,
    annotations,
    seq,
)
from ir.visit import substitute


class NameSupply:
    """Hands out names not used before in one program (i, i_1, i_2, ...)."""

    def __init__(self, used: set[str] | None = None) -> None:
        self.used: set[str] = set(used or ())

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name


def combine(combiner: str, acc: Expr, value: Expr) -> Expr:
    if combiner == "sum":
        return binary("add", acc, value)
    return binary(combiner, acc, value)


def point_regions(buffer_loads: list[Load]) -> tuple[BufferRegion, ...]:
    """Distinct accessed points, in first-use order, as extent-1 regions."""
    seen: list[BufferRegion] = []
    for ld in buffer_loads:
        region = BufferRegion(ld.buffer, tuple(Range(i, Const(1, "int64")) for i in ld.indices))
        if region not in seen:
            seen.append(region)
    return tuple(seen)


def _plain(node: Node) -> Node:
    """Replace DSL tensors by plain buffers (the program does not keep the DAG)."""
    from ir.visit import post_order_rewrite

    return post_order_rewrite(node, lambda n: n.as_buffer() if isinstance(n, Tensor) else None)


def build_program(workload: Workload, attrs: Mapping[str, object] | None = None) -> Program:
    """The naive loop-nest program of `workload` (no schedule applied)."""
    # Size variables keep their names (bind() finds them by name), so loops avoid them.
    names = NameSupply(
        {t.name for t in workload.tensors()} | {v.name for v in workload.size_vars()}
    )
    nests = []
    outputs = set(workload.outputs)
    allocs: list[Buffer] = []
    for t in workload.computes():
        nests.append(_nest(t, names))
        if t not in outputs:
            allocs.append(t.as_buffer())
    body = seq(*nests)
    body = _plain(body)  # type: ignore[assignment]
    return Program(
        name=workload.name,
        inputs=tuple(t.as_buffer() for t in workload.inputs),
        outputs=tuple(t.as_buffer() for t in workload.outputs),
        body=body,  # type: ignore[arg-type]
        allocs=tuple(allocs),
        attrs=annotations(dict(attrs or {})),
    )


def _nest(t: Tensor, names: NameSupply) -> For:
    assert t.op is not None
    body = t.op.body
    spatial = list(t.op.axes)
    reduce_axes = list(body.axes) if isinstance(body, Reduce) else []
    loop_vars: list[Var] = []
    iter_vars: list[IterVar] = []
    mapping: dict[Var, Expr] = {}
    for axis in spatial + reduce_axes:
        loop = Var(names.fresh(axis.var.name))
        iv = IterVar(Var(names.fresh("v" + axis.var.name)), axis.extent, axis.kind)
        loop_vars.append(loop)
        iter_vars.append(iv)
        mapping[axis.var] = iv.var
    out_index = tuple(iv.var for iv in iter_vars[: len(spatial)])
    buffer = t.as_buffer()
    if isinstance(body, Reduce):
        source = substitute(body.source, mapping, into_buffers=False)
        value = combine(body.combiner, Load(buffer, out_index), source)  # type: ignore[arg-type]
        init = BufferStore(buffer, reduce_identity(body.combiner, t.dtype), out_index)
    else:
        value = substitute(body, mapping, into_buffers=False)  # type: ignore[assignment]
        source = value
        init = None
    store = BufferStore(buffer, value, out_index)
    # A reduction's update reads its own output; like TensorIR, the block's read
    # regions list only what the reduced expression reads.
    reads = point_regions([n for n in walk(source if init else value) if isinstance(n, Load)])
    writes = (BufferRegion(buffer, tuple(Range(i, Const(1, "int64")) for i in out_index)),)
    block = Block(t.name, tuple(iter_vars), reads, writes, store, init)
    stmt: For | BlockRealize = BlockRealize(tuple(loop_vars), TRUE, block)
    for loop, iv in reversed(list(zip(loop_vars, iter_vars))):
        stmt = For(loop, iv.extent, "serial", stmt)
    assert isinstance(stmt, For)
    return stmt


def bind(program: Program, sizes: Mapping[str, int]) -> Program:
    """Substitute symbolic sizes by integers (names not in the program are an error)."""
    present = {v.name: v for v in walk(program) if isinstance(v, Var)}
    mapping: dict[Var, Expr] = {}
    for name, value in sizes.items():
        if name not in present:
            raise IRError(f"cannot bind {name!r}: the program has no size variable of that name")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise IRError(f"size {name} must be a positive integer, got {value!r}")
        mapping[present[name]] = Const(value, "int64")
    return substitute(program, mapping)  # type: ignore[return-value]


def check_bound(program: Program) -> None:
    """Raise UnboundShapeError if a buffer shape is still symbolic."""
    for b in (*program.params, *program.allocs):
        for s in b.shape:
            if not isinstance(s, Const):
                raise UnboundShapeError(
                    f"shape of buffer {b.name} depends on unbound size {render(s)}; "
                    "bind it to an integer before code generation"
                )
