"""A deterministic simulated runner: an analytic cost of the lowered program.

Search logic is tested against this, never against real timings: the same
trace always gets the same "run time", in any process, so a seeded search is
reproducible and comparisons between strategies mean something. The cost is
a crude roofline of the lowered loop nest — per-iteration loop overhead,
arithmetic and memory accesses per store, divided by the vector lanes of an
enclosing vectorized loop and by the threads of a parallel one, with
non-unit-stride innermost accesses charged as cache misses — crude, but it
rewards what real CPUs reward (vectorized unit-stride inner loops, fewer loop
iterations, parallel outer loops), so smarter search does measurably better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ir.arith import linear_in
from ir.expr import Binary, Call, Const, Load, Select
from ir.lower import lower
from ir.node import walk
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
from ir.task import Task
from tuner.runner import MeasureResult, ReadyFuture, RunnerFuture
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace

NS_PER_UNIT = 0.5
LANES = 8
"""float32 lanes of one AVX2 register: the most a vectorized loop can gain."""
LOOP_OVERHEAD = 1.0
MISS_COST = 8.0


@dataclass(frozen=True)
class _Ctx:
    iterations: float  # how many times the statement runs
    inner_var: object  # innermost enclosing loop variable (for strides)
    lanes: int
    threads: int


def _store_cost(s: BufferStore, ctx: _Ctx) -> float:
    ops = sum(1 for n in walk(s.value) if isinstance(n, Binary | Select)) + 4 * sum(
        1 for n in walk(s.value) if isinstance(n, Call)
    )
    loads = [n for n in walk(s.value) if isinstance(n, Load)]
    mem = 0.0
    for access in [*loads, s]:
        index = access.indices[-1] if access.indices else Const(0, "int64")
        stride = 0 if ctx.inner_var is None else linear_in(index, ctx.inner_var)[0]  # type: ignore[arg-type]
        if stride is None or abs(stride) > 1:
            mem += MISS_COST
        else:
            mem += 1.0 if stride == 1 else 0.5
    return ctx.iterations * (ops + mem) / ctx.lanes


def _cost(s: Stmt, ctx: _Ctx) -> float:
    if isinstance(s, SeqStmt):
        return sum(_cost(x, ctx) for x in s.stmts)
    if isinstance(s, For):
        extent = float(s.extent.value) if isinstance(s.extent, Const) else 64.0
        lanes, threads = ctx.lanes, ctx.threads
        if s.kind == "vectorized":
            lanes = min(LANES, max(int(extent), 1))
        if s.kind == "parallel":
            threads = max(threads, 1)
        inner = _Ctx(ctx.iterations * extent, s.var, lanes, threads)
        overhead = (
            0.0 if s.kind in ("unrolled", "vectorized") else ctx.iterations * extent * LOOP_OVERHEAD
        )
        body = _cost(s.body, inner)
        if s.kind == "parallel":
            return (overhead + body) / max(1, min(ctx.threads, int(extent)))
        return overhead + body
    if isinstance(s, IfThenElse):
        return _cost(s.then_case, ctx) + (
            _cost(s.else_case, ctx) if s.else_case is not None else 0.0
        )
    if isinstance(s, Allocate):
        return _cost(s.body, ctx)
    if isinstance(s, BufferStore):
        return _store_cost(s, ctx)
    if isinstance(s, IntrinsicCall):  # one instruction, one (vector) access per operand
        return ctx.iterations * (1.0 + len(s.args))
    return 0.0


def analytic_cost_ms(program: Program, threads: int = 1) -> float:
    """The simulated run time of a scheduled program, in ms (deterministic)."""
    lowered = lower(program)
    units = _cost(lowered.body, _Ctx(1.0, None, 1, threads))
    return max(units * NS_PER_UNIT * 1e-6, 1e-6)


class SimulatedRunner:
    """A `Runner` that "measures" with `analytic_cost_ms`; failures as a real runner reports them."""

    def __init__(self, threads: int = 1, repeat: int = 3) -> None:
        self.threads = threads
        self.repeat = repeat
        self.measured = 0

    def measure(self, task: Task, trace: Trace) -> MeasureResult:
        try:
            program = trace.apply(task.program).program
        except TraceError as e:
            return MeasureResult.failure("compile_error", str(e), "simulated")
        ms = analytic_cost_ms(program, self.threads)
        return MeasureResult("ok", (ms,) * self.repeat, "", "simulated")

    def submit(self, task: Task, target: str, traces: Sequence[Trace]) -> list[RunnerFuture]:
        self.measured += len(traces)
        return [ReadyFuture(self.measure(task, t)) for t in traces]

    def close(self) -> None:
        pass
