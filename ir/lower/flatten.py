"""Flattened buffers: n-dimensional accesses become one row-major offset.

C[i, j]  (C: float32[64, 48])  ->  C[i * 48 + j]  (C: float32[3072])
"""

from __future__ import annotations

import math
from dataclasses import replace

from ir.errors import UnboundShapeError
from ir.expr import Buffer, Const, Expr, Load, render
from ir.node import Node, map_children
from ir.program import Allocate, BufferStore, IntrinsicArg, Program


def flat_buffer(b: Buffer) -> Buffer:
    n = 1
    for s in b.shape:
        if not isinstance(s, Const):
            raise UnboundShapeError(
                f"buffer {b.name} has symbolic dimension {render(s)}; bind it before lowering"
            )
        n *= int(s.value)
    return Buffer(b.name, (Const(n, "int64"),), b.dtype, b.scope)


def flat_index(b: Buffer, indices: tuple[Expr, ...]) -> Expr:
    offset: Expr | None = None
    for dim, idx in zip(b.shape, indices):
        offset = idx if offset is None else offset * dim + idx
    return offset if offset is not None else Const(0, "int64")


def _row_strides(b: Buffer) -> list[int]:
    shape = b.concrete_shape()
    return [math.prod(shape[d + 1 :]) for d in range(len(shape))]


def flatten(program: Program) -> Program:
    def visit(n: Node) -> Node:
        if isinstance(n, Load):
            idx = tuple(visit(i) for i in n.indices)
            return Load(flat_buffer(n.buffer), (flat_index(n.buffer, idx),))  # type: ignore[arg-type]
        if isinstance(n, BufferStore):
            idx = tuple(visit(i) for i in n.indices)
            value = visit(n.value)
            return BufferStore(flat_buffer(n.buffer), value, (flat_index(n.buffer, idx),))  # type: ignore[arg-type]
        if isinstance(n, IntrinsicArg):
            idx = tuple(visit(i) for i in n.indices)
            rows = _row_strides(n.buffer)
            steps = tuple((sum(s * w for s, w in zip(st, rows)),) for st in n.steps)
            return replace(
                n, buffer=flat_buffer(n.buffer), indices=(flat_index(n.buffer, idx),), steps=steps
            )
        if isinstance(n, Allocate):
            return Allocate(flat_buffer(n.buffer), visit(n.body))  # type: ignore[arg-type]
        return map_children(n, visit)

    return replace(
        program,
        inputs=tuple(flat_buffer(b) for b in program.inputs),
        outputs=tuple(flat_buffer(b) for b in program.outputs),
        allocs=tuple(flat_buffer(b) for b in program.allocs),
        body=visit(program.body),
    )
