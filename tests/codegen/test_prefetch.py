"""Software prefetch: a loop's `prefetch:<buffer>` annotation becomes `llvm.prefetch` calls
for the lines a later iteration reads; the kernel's result does not change."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.host import host_target
from codegen.kernel import compile_program
from codegen.prefetch import prefetch_points
from ir.expr import Const, Var
from ir.lower.simplify import simplify_expr
from ir.node import walk
from ir.program import For
from ir.schedule import Schedule, ScheduleError
from ir.task import library_task

HOST = host_target(1)


def _gemm(m: int, n: int, k: int, distance: int | None, rows: int = 4, cols: int = 16):
    """A register-tiled matmul whose inner k loop prefetches B `distance` rows ahead."""
    task = library_task("matmul", {"m": m, "n": n, "k": k})
    sch = Schedule(task.program)
    i, j, kk = sch.get_loops("C")
    i0, i1 = sch.split(i, [None, rows])
    j0, j1 = sch.split(j, [None, cols])
    sch.reorder(j0, i0, kk, i1, j1)
    sch.unroll(i1)
    sch.vectorize(j1)
    if distance is not None:
        sch.annotate(kk, "prefetch:B", distance)
    return task, sch.program


def _inner_k(program) -> For:
    from ir.lower import lower

    low = lower(program)
    loops = [
        f for f in walk(low.body) if isinstance(f, For) and "prefetch:B" in dict(f.annotations)
    ]
    assert len(loops) == 1, "the annotation did not survive lowering"
    return loops[0]


@pytest.mark.parametrize("distance", [0, 1, 8])
def test_prefetching_kernels_are_exact(distance: int) -> None:
    task, program = _gemm(24, 48, 40, distance)
    kernel = compile_program(program, HOST)
    a, b = task.make_inputs(seed=3)
    c = np.full((24, 48), np.nan, np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
    calls = sum("call void" in ln and "llvm.prefetch" in ln for ln in kernel.ir_text.splitlines())
    assert (calls > 0) == (distance > 0)


def test_the_lines_of_a_vector_row_and_of_each_unrolled_row() -> None:
    _, program = _gemm(24, 48, 40, 8, rows=4, cols=16)
    k = _inner_k(program)
    b_points = prefetch_points(k, "B", 8)
    # B[(k + 8) * 48 + j0 * 16 + j]: 16 floats = 64 bytes, at most 2 lines.
    assert len(b_points) == 2
    first, second = (p.indices[0] for p in b_points)
    assert simplify_expr(second - first) == Const(16, "int64")
    assert any(isinstance(v, Var) and v == k.var for v in walk(first))
    a_points = prefetch_points(k, "A", 8)
    # A[(i0 * 4 + i1) * 40 + k + 8]: one element in each of 4 rows, 160 bytes apart.
    assert len(a_points) == 4


def test_a_prefetch_names_a_buffer_and_a_distance() -> None:
    task = library_task("matmul", {"m": 8, "n": 8, "k": 8})
    sch = Schedule(task.program)
    _, _, k = sch.get_loops("C")
    with pytest.raises(ScheduleError, match="names no buffer"):
        sch.annotate(k, "prefetch:Z", 4)
    with pytest.raises(ScheduleError, match="distance"):
        sch.annotate(k, "prefetch:B", -1)
    with pytest.raises(ScheduleError, match="distance"):
        sch.annotate(k, "prefetch:B", "far")


def test_the_innermost_marked_loop_of_more_than_one_iteration_prefetches() -> None:
    """A k tile of 1 leaves a marked loop of one iteration inside the marked k-block loop:
    the block loop prefetches, not the single iteration (which would ask for the same
    lines again at every step of the loops between them)."""
    from ir.lower import lower

    task = library_task("matmul", {"m": 24, "n": 48, "k": 40})
    sch = Schedule(task.program)
    i, j, kk = sch.get_loops("C")
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(kk, [None, 1])
    sch.reorder(j0, i0, k0, k1, i1, j1)
    sch.unroll(i1)
    sch.vectorize(j1)
    for loop in (k0, k1):
        sch.annotate(loop, "prefetch:B", 4)
    low = lower(sch.program)
    marked = [f for f in walk(low.body) if isinstance(f, For) and f.annotations]
    assert [int(f.extent.value) for f in marked] == [40, 1]
    assert len(prefetch_points(marked[0], "B", 4)) == 2
    assert prefetch_points(marked[1], "B", 4) == []
    kernel = compile_program(sch.program, HOST)
    a, b = task.make_inputs(seed=1)
    c = np.full((24, 48), np.nan, np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
