"""The loop-nest program: buffers, loops, blocks and stores (TensorIR-style).

A `Block` is the unit of computation that schedules move around: it owns iteration
variables (spatial or reduction), reads and writes regions expressed in them, an
optional reduction `init`, and local scratch buffers. A `BlockRealize` binds the
iteration variables to expressions of the enclosing loops, under a predicate that
guards imperfect splits. Lowering turns all of this into plain loops and stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ir.errors import IRError
from ir.expr import Buffer, Const, Expr, IterVar, Var
from ir.node import Node

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")

Annotations = tuple[tuple[str, Any], ...]

PREFETCH = "prefetch:"
"""Loop annotation key prefix: `prefetch:B` = d asks codegen to prefetch, at the top of each
iteration, the cache lines of buffer B that iteration + d reads (0: none)."""
MAX_PREFETCH_DISTANCE = 4096


def prefetch_distance(value: Any) -> int | None:
    """The distance a `prefetch:` annotation's value gives (0…`MAX_PREFETCH_DISTANCE`
    iterations), None when the value is not one."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_PREFETCH_DISTANCE else None


def annotations(items: dict[str, Any] | None = None) -> Annotations:
    """Annotations are stored as sorted (key, value) pairs so nodes stay hashable."""
    return tuple(sorted((items or {}).items()))


@dataclass(frozen=True, slots=True, eq=True)
class Range(Node):
    min: Expr
    extent: Expr


@dataclass(frozen=True, slots=True, eq=True)
class BufferRegion(Node):
    buffer: Buffer
    region: tuple[Range, ...]


class Stmt(Node):
    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=True)
class BufferStore(Stmt):
    buffer: Buffer
    value: Expr
    indices: tuple[Expr, ...]


@dataclass(frozen=True, slots=True, eq=True)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True, eq=True)
class For(Stmt):
    var: Var
    extent: Expr
    kind: str
    body: Stmt
    annotations: Annotations = ()

    def __post_init__(self) -> None:
        if self.kind not in LOOP_KINDS:
            raise IRError(f"loop {self.var.name}: unknown kind {self.kind!r}")


@dataclass(frozen=True, slots=True, eq=True)
class IfThenElse(Stmt):
    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, slots=True, eq=True)
class Allocate(Stmt):
    """Scratch storage for `buffer`, live only inside `body` (lowered programs)."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True, eq=True)
class IntrinsicArg(Node):
    """One operand of a tensor intrinsic: where it starts and how it is laid out.

    `indices` name the operand's first element (n-d; one flat offset once
    flattened); `steps[l]` is the index delta (one entry per buffer dimension,
    a single flat stride once flattened) for one step of the intrinsic
    description's l-th loop, whose extent is `extents[l]`. So the region an
    operand touches, and its strides, survive compaction and flattening.
    """

    buffer: Buffer
    indices: tuple[Expr, ...]
    steps: tuple[tuple[int, ...], ...]
    extents: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=True)
class IntrinsicCall(Stmt):
    """A tensorized computation: the registered intrinsic `name` over `args` (its operands
    in the description's order; the first is the accumulator, read and written)."""

    name: str
    args: tuple[IntrinsicArg, ...]


@dataclass(frozen=True, slots=True, eq=True)
class Block(Stmt):
    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    annotations: Annotations = ()

    @property
    def is_reduction(self) -> bool:
        return any(iv.kind == "reduce" for iv in self.iter_vars)


@dataclass(frozen=True, slots=True, eq=True)
class BlockRealize(Stmt):
    """A block instance: iteration variables bound to `values` when `predicate` holds."""

    values: tuple[Expr, ...]
    predicate: Expr
    block: Block

    def __post_init__(self) -> None:
        if len(self.values) != len(self.block.iter_vars):
            raise IRError(
                f"block {self.block.name}: {len(self.block.iter_vars)} iter vars, "
                f"{len(self.values)} bindings"
            )


TRUE = Const(True, "bool")


@dataclass(frozen=True, slots=True, eq=True)
class Program(Node):
    """A kernel: parameters (inputs, then outputs, in call order) and a body.

    `allocs` are intermediate buffers (e.g. a padded input) that live for the whole
    call; `attrs` records what the program was built from (operator, parameters).
    """

    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    body: Stmt
    allocs: tuple[Buffer, ...] = ()
    attrs: Annotations = ()

    @property
    def params(self) -> tuple[Buffer, ...]:
        return self.inputs + self.outputs

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)


def seq(*stmts: Stmt) -> Stmt:
    """A statement sequence, flattened; a single statement stands for itself."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))
