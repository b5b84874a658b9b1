"""Program features: a fixed-length vector describing a lowered candidate program.

The cost model never sees a trace; it sees what the code generator will
compile. For every buffer store of the lowered program (`ir.lower.lower`, the
same program codegen compiles) one vector of `STORE_FEATURES` numbers is
computed from the store and the loops around it; the program's vector pools
those (iteration-weighted mean and max) and adds two program-level numbers.
Counts and sizes are log2(1 + x): they span many orders of magnitude.

Per store (`STORE_FEATURE_NAMES` lists them in order):

- loops, innermost first, `LEVELS` levels: log2 extent and whether the loop
  is parallel / vectorized / unrolled;
- log2 of: iterations of the store, nesting depth, vector lanes (extent of
  the innermost vectorized loop), unrolled iterations, parallel extent;
- arithmetic executed, by kind (float add/sub, mul, div, max/min,
  compare/select, math calls, integer ops, casts), times iterations;
- memory, per loop level (innermost first): bytes touched by one iteration of
  that loop over all accesses, and reuse (accesses / distinct elements);
- innermost accesses by stride: invariant, unit, other (gathers); the same
  for the vectorized loop;
- bytes of scratch allocated around the store, bytes of the stored buffer,
  whether the stored buffer is local scratch;
- whether the entry is a tensor intrinsic (a tensorized block is one entry,
  its operands the accesses, as many bytes as one call touches) and the
  intrinsic's operations times iterations (0 for plain stores).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ir import dtype as dt
from ir.arith import strides_in
from ir.expr import CMP_OPS, LOGIC_OPS, Binary, Buffer, Call, Cast, Const, Expr, Load, Select
from ir.intrinsics import get_intrinsic
from ir.lower import lower
from ir.node import walk
from ir.prepack import per_call
from ir.program import (
    Allocate,
    BufferStore,
    For,
    IfThenElse,
    IntrinsicCall,
    Program,
    SeqStmt,
    Stmt,
)

LEVELS = 6
"""Loop levels described per store, innermost first (deeper nests are cut)."""

_KINDS = ("parallel", "vectorized", "unrolled")
_ARITH = ("fadd", "fmul", "fdiv", "fminmax", "cmp_select", "math_call", "int_op", "cast")

STORE_FEATURE_NAMES: tuple[str, ...] = (
    *(f"loop{lv}_{what}" for lv in range(LEVELS) for what in ("log_extent", *_KINDS)),
    "log_iterations",
    "log_depth",
    "log_vector_lanes",
    "log_unrolled",
    "log_parallel",
    *(f"arith_{k}" for k in _ARITH),
    *(f"mem{lv}_{what}" for lv in range(LEVELS) for what in ("log_bytes", "log_reuse")),
    "inner_stride0",
    "inner_stride1",
    "inner_gather",
    "vec_stride0",
    "vec_stride1",
    "vec_gather",
    "log_scratch_bytes",
    "log_store_buffer_bytes",
    "store_is_local",
    "tensorized",
    "log_tensor_ops",
)
STORE_FEATURES = len(STORE_FEATURE_NAMES)
FEATURE_NAMES: tuple[str, ...] = (
    *(f"mean_{n}" for n in STORE_FEATURE_NAMES),
    *(f"max_{n}" for n in STORE_FEATURE_NAMES),
    "log_stores",
    "log_total_iterations",
)
FEATURES = len(FEATURE_NAMES)


def _log(x: float) -> float:
    return math.log2(1.0 + max(x, 0.0))


def _extent(lp: For) -> int:
    return int(lp.extent.value) if isinstance(lp.extent, Const) else 64


def _bytes(buf: Buffer) -> int:
    n = 1
    for s in buf.shape:
        n *= int(s.value) if isinstance(s, Const) else 1
    return n * dt.itemsize(buf.dtype)


@dataclass(frozen=True)
class _Access:
    index: Expr
    elem_bytes: int


def _arith(value: Expr) -> list[int]:
    counts = [0] * len(_ARITH)
    for n in walk(value):
        if isinstance(n, Binary):
            if n.op in CMP_OPS or n.op in LOGIC_OPS:
                counts[4] += 1
            elif not dt.is_float(n.dtype):
                counts[6] += 1
            elif n.op in ("max", "min"):
                counts[3] += 1
            elif n.op == "mul":
                counts[1] += 1
            elif n.op in ("div", "floordiv", "floormod"):
                counts[2] += 1
            else:
                counts[0] += 1
        elif isinstance(n, Select):
            counts[4] += 1
        elif isinstance(n, Call):
            counts[5] += 1
        elif isinstance(n, Cast):
            counts[7] += 1
    return counts


def _stride_class(stride: int | None) -> int:
    """0: invariant, 1: unit stride, 2: anything else (None: not linear)."""
    if stride == 0:
        return 0
    return 1 if stride in (1, -1) else 2


def _store_vector(
    store: BufferStore, loops: Sequence[For], scratch: int
) -> tuple[list[float], float]:
    accesses = [
        _Access(ld.indices[-1] if ld.indices else Const(0, dt.INDEX), dt.itemsize(ld.dtype))
        for ld in walk(store.value)
        if isinstance(ld, Load)
    ]
    accesses.append(
        _Access(
            store.indices[-1] if store.indices else Const(0, dt.INDEX),
            dt.itemsize(store.buffer.dtype),
        )
    )
    return _vector(loops, scratch, _arith(store.value), accesses, store.buffer, 0)


def _intrinsic_vector(
    call: IntrinsicCall, loops: Sequence[For], scratch: int
) -> tuple[list[float], float]:
    """A tensorized block as one entry: its operands as accesses (each as many bytes as one
    call touches) and the intrinsic's operations per call."""
    accesses = [
        _Access(
            a.indices[-1],
            dt.itemsize(a.buffer.dtype)
            * math.prod(e for st, e in zip(a.steps, a.extents) if any(st)),
        )
        for a in call.args
    ]
    ops = get_intrinsic(call.name).ops_per_call
    return _vector(loops, scratch, [0] * len(_ARITH), accesses, call.args[0].buffer, ops)


def _vector(
    loops: Sequence[For],
    scratch: int,
    arith: list[int],
    accesses: list[_Access],
    stored: Buffer,
    tensor_ops: int,
) -> tuple[list[float], float]:
    extents = [_extent(lp) for lp in loops]
    iterations = math.prod(extents) if extents else 1
    inner = list(zip(reversed(loops), reversed(extents)))[:LEVELS]
    v: list[float] = []
    for lv in range(LEVELS):
        if lv < len(inner):
            lp, ext = inner[lv]
            v += [_log(ext), *(1.0 if lp.kind == k else 0.0 for k in _KINDS)]
        else:
            v += [0.0, 0.0, 0.0, 0.0]
    vec_at = next((k for k in reversed(range(len(loops))) if loops[k].kind == "vectorized"), None)
    vec = loops[vec_at] if vec_at is not None else None
    unrolled = math.prod(e for lp, e in zip(loops, extents) if lp.kind == "unrolled")
    parallel = math.prod(e for lp, e in zip(loops, extents) if lp.kind == "parallel")
    v += [
        _log(iterations),
        _log(len(loops)),
        _log(_extent(vec) if vec else 1),
        _log(unrolled),
        _log(parallel),
    ]
    v += [_log(c * iterations) for c in arith]
    # Distinct elements each access touches within one iteration of each level:
    # the product of the extents of the loops inside it that its index moves with.
    strides = [strides_in(a.index, [lp.var for lp in loops]) for a in accesses]
    moves = [[st != 0 for st in row] for row in strides]
    for lv in range(LEVELS):
        if lv >= len(inner):
            v += [0.0, 0.0]
            continue
        depth = len(loops) - 1 - lv  # loops[depth:] run inside one iteration of this level
        total_bytes = 0.0
        distinct = 0.0
        inside = math.prod(extents[depth:])
        for a, mv in zip(accesses, moves):
            elems = math.prod(e for e, m in zip(extents[depth:], mv[depth:]) if m)
            distinct += elems
            total_bytes += elems * a.elem_bytes
        v += [_log(total_bytes), _log(inside * len(accesses) / max(distinct, 1.0))]
    innermost = len(loops) - 1 if loops else None
    for at in (innermost, vec_at):
        classes = [0, 0, 0]
        for row in strides:
            classes[_stride_class(0 if at is None else row[at])] += 1
        v += [float(c) for c in classes]
    v += [_log(scratch), _log(_bytes(stored)), 1.0 if stored.scope != "global" else 0.0]
    v += [1.0 if tensor_ops else 0.0, _log(tensor_ops * iterations)]
    return v, float(iterations)


def _collect(s: Stmt, loops: list[For], scratch: int, out: list[tuple[list[float], float]]) -> None:
    if isinstance(s, SeqStmt):
        for x in s.stmts:
            _collect(x, loops, scratch, out)
    elif isinstance(s, For):
        loops.append(s)
        _collect(s.body, loops, scratch, out)
        loops.pop()
    elif isinstance(s, IfThenElse):
        _collect(s.then_case, loops, scratch, out)
        if s.else_case is not None:
            _collect(s.else_case, loops, scratch, out)
    elif isinstance(s, Allocate):
        _collect(s.body, loops, scratch + _bytes(s.buffer), out)
    elif isinstance(s, BufferStore):
        out.append(_store_vector(s, loops, scratch))
    elif isinstance(s, IntrinsicCall):
        out.append(_intrinsic_vector(s, loops, scratch))


def lowered_features(lowered: Program) -> np.ndarray:
    """The feature vector of an already lowered program."""
    stores: list[tuple[list[float], float]] = []
    _collect(lowered.body, [], 0, stores)
    if not stores:
        return np.zeros(FEATURES, dtype=np.float32)
    mat = np.asarray([v for v, _ in stores], dtype=np.float64)
    weights = np.asarray([w for _, w in stores], dtype=np.float64)
    mean = (mat * weights[:, None]).sum(axis=0) / weights.sum()
    out = np.concatenate([mean, mat.max(axis=0), [_log(len(stores)), _log(float(weights.sum()))]])
    return out.astype(np.float32)


def program_features(program: Program) -> np.ndarray:
    """The feature vector of a scheduled (not yet lowered) program, as it is timed: a
    model task's blocks that only repack its layout-free inputs run once at load, so
    they are left out (`ir.prepack.per_call`), as measurement leaves them out."""
    return lowered_features(lower(per_call(program)))
