"""decompose_reduction and rfactor: goldens, correctness through codegen, refusals.

Ends with the combination a GEMM schedule is made of: tiles, a local accumulator
(cache_write), its init hoisted out of the reduction (decompose_reduction), and
vector/unrolled inner loops.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from ir.expr import Binary, Const, Var
from ir.printer import print_program
from ir.program import BufferStore, For
from ir.schedule import Schedule
from ir.schedule.state import replace_loop, replace_realize
from ir.task import library_task
from ir.visit import substitute
from tests.ir.schedule.schedcheck import assert_correct, assert_refused

MM = {"m": 37, "n": 19, "k": 23}


@pytest.fixture
def mm() -> tuple:
    task = library_task("matmul", MM)
    return task, Schedule(task.program)


# ---------------------------------------------------------------------------
# decompose_reduction


def test_decompose_reduction_golden_and_correct(mm, golden) -> None:
    task, sch = mm
    i0, i1 = sch.split("i", [None, 8])  # imperfect: 37 = 5 * 8 - 3
    r0, r1 = sch.split("r", [None, 4])  # imperfect: 23 = 6 * 4 - 1
    sch.reorder(i0, "j", r0, r1, i1)
    golden("decompose_before.txt", print_program(sch.program))
    init = sch.decompose_reduction("C", r0)
    assert init.name == "C_init"
    golden("decompose_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert "for i_1_init in range(8):" in text
    assert "C[vi_init, vj_init] = 0.0" in text
    assert "with init():" not in text  # the block lost its init
    # The init keeps the spatial guard, not the reduction one.
    assert "where(i_0 * 8 + i_1_init < 37)" in text
    assert [lp.name for lp in sch.get_loops(init)] == ["i_0", "j", "i_1_init"]
    assert_correct(task, sch.program)
    sch.vectorize("i_1_init")
    sch.parallel(i0)
    assert_correct(task, sch.program, threads=2)


@pytest.mark.parametrize("at", ["i", "j", "r"])
def test_decompose_reduction_at_every_level(at: str) -> None:
    task = library_task("matmul", MM)
    sch = Schedule(task.program)
    sch.decompose_reduction("C", at)
    assert_correct(task, sch.program)


def test_decompose_reduction_of_a_max() -> None:
    task = library_task("softmax", {"m": 7, "n": 29})
    sch = Schedule(task.program)
    sch.split("r", [None, 8])
    sch.decompose_reduction("x_max", "r_0")
    sch.decompose_reduction("exp_sum", "i_2")
    assert_correct(task, sch.program)


def test_decompose_reduction_refusals(mm) -> None:
    _, sch = mm
    assert_refused(sch, lambda s: s.decompose_reduction("C", "q"), "loop q")
    assert_refused(sch, lambda s: s.decompose_reduction("nope", "i"), '"nope"')
    sch.reorder("r", "i")  # r, j, i: the reduction loop is outermost
    assert_refused(
        sch, lambda s: s.decompose_reduction("C", "j"), "loop r", '"C"', "more than once"
    )
    sch.decompose_reduction("C", "r")
    assert_refused(sch, lambda s: s.decompose_reduction("C", "r"), '"C"', "no init")
    sm = Schedule(library_task("softmax", {"m": 4, "n": 8}).program)
    assert_refused(
        sm,
        lambda s: s.decompose_reduction("x_max", "i_1"),
        "loop i_1",
        '"x_max"',
        "not an ancestor",
    )
    assert_refused(sm, lambda s: s.decompose_reduction("x_exp", "i_1"), '"x_exp"', "no init")


def test_decompose_reduction_refuses_to_hoist_the_init_above_a_recomputation() -> None:
    """After compute_at under a loop that does not feed it, the reduction repeats per iteration."""
    pytest.importorskip("ir.schedule.compute_at")
    task = library_task("softmax", {"m": 7, "n": 29})
    sch = Schedule(task.program)
    sch.compute_at("exp_sum", "j_1")  # exp_sum recomputed for every j_1
    assert_refused(sch, lambda s: s.decompose_reduction("exp_sum", "i_3"), "loop j_1", "repeats")
    inner = sch.get_loops("exp_sum")[2]  # the loop compute_at made, inside j_1
    sch.decompose_reduction("exp_sum", inner)
    assert_correct(task, sch.program)


def test_decompose_reduction_refuses_overlapping_tiles() -> None:
    """A nest that reaches the same element from two tiles recomputes it in each one."""
    task = library_task("reduce_sum", {"m": 5, "n": 7})
    sch = Schedule(task.program)
    a = Var("a")

    def overlap(f: For) -> For:  # for i in range(4): for a in range(2): vi = i + a
        body = substitute(f.body, {f.var: f.var + a})
        return replace(f, extent=Const(4, "int64"), body=For(a, Const(2, "int64"), "serial", body))

    sch.program = replace_loop(sch.program, "i", overlap)
    assert_correct(task, sch.program)  # every tile recomputes its elements from scratch
    assert_refused(sch, lambda s: s.decompose_reduction("Y", "i"), "loop i", "more than once")
    sch.decompose_reduction("Y", "a")  # inside one tile each element is reached once
    assert_correct(task, sch.program)


# ---------------------------------------------------------------------------
# rfactor


@pytest.fixture
def rsum() -> tuple:
    task = library_task("reduce_sum", {"m": 5, "n": 37})
    return task, Schedule(task.program)


def test_rfactor_inner_golden_and_correct(rsum, golden) -> None:
    task, sch = rsum
    r0, r1 = sch.split("r", [None, 8])  # imperfect: 37 = 5 * 8 - 3
    golden("rfactor_before.txt", print_program(sch.program))
    rf = sch.rfactor(r1, 0)
    assert rf.name == "Y_rf"
    golden("rfactor_inner_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert "Y_rf = alloc(float32[8, 5])" in text
    assert "vr_1 = spatial(8, r_1)" in text and "vr_0 = reduce(5, r_0)" in text
    assert "Y_rf[vr_1, vi] = Y_rf[vr_1, vi] + X[vi, vr_0 * 8 + vr_1]" in text
    assert "Y[vax0] = Y[vax0] + Y_rf[vax1, vax0]" in text
    assert [b.name for b in sch.get_child_blocks()] == ["Y_rf", "Y"]
    assert_correct(task, sch.program)
    # What rfactor is for: the factored loop is data-parallel now.
    sch.reorder(r1, r0)
    sch.vectorize(r1)
    assert_correct(task, sch.program)


def test_rfactor_outer_golden_and_correct(rsum, golden) -> None:
    task, sch = rsum
    r0, _ = sch.split("r", [None, 8])
    sch.rfactor(r0, 1)
    golden("rfactor_outer_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert "Y_rf = alloc(float32[5, 5])" in text
    assert "writes(Y_rf[vi, vr_0])" in text
    assert_correct(task, sch.program)
    sch.reorder(r0, "i")
    sch.parallel(r0)
    assert_correct(task, sch.program, threads=2)


def test_rfactor_whole_reduction_and_a_max() -> None:
    task = library_task("reduce_sum", {"m": 3, "n": 19})
    sch = Schedule(task.program)
    sch.rfactor("r", 0)  # no reduction loop left in the rfactor block
    assert_correct(task, sch.program)
    task = library_task("reduce_max", {"m": 3, "n": 37})
    sch = Schedule(task.program)
    _, r1 = sch.split("r", [None, 4])
    sch.rfactor(r1, 1)
    assert "Y_rf[vi, vr_1] = max(Y_rf[vi, vr_1], X[vi, vr_0 * 4 + vr_1])" in print_program(
        sch.program
    )
    assert_correct(task, sch.program)


def test_rfactor_matmul_with_a_split_k() -> None:
    task = library_task("matmul", MM)
    sch = Schedule(task.program)
    k0, k1 = sch.split("r", [None, 4])  # imperfect: 23 = 6 * 4 - 1
    rf = sch.rfactor(k0, 2)
    assert "C_rf = alloc(float32[37, 19, 6])" in print_program(sch.program)
    assert_correct(task, sch.program)
    sch.reorder(k0, "i")
    sch.parallel(k0)
    init = sch.decompose_reduction(rf, k1)
    assert init.name == "C_rf_init"
    assert_correct(task, sch.program, threads=2)


def test_rfactor_refusals(rsum) -> None:
    _, sch = rsum
    assert_refused(sch, lambda s: s.rfactor("i", 0), "loop i", '"Y"', "spatial")
    assert_refused(sch, lambda s: s.rfactor("r", 2), "loop r", "factor_axis")
    assert_refused(sch, lambda s: s.rfactor("r", -1), "loop r", "factor_axis")
    assert_refused(sch, lambda s: s.rfactor("q", 0), "loop q")
    # An over-sized split leaves partial rows r_0 = 5..9 without any element.
    r0, _ = sch.split("r", [10, 8])
    assert_refused(sch, lambda s: s.rfactor(r0, 0), "loop r_0", "uninitialised")
    # Two blocks under a loop.
    mm = Schedule(library_task("matmul", MM).program)
    mm.decompose_reduction("C", "j")
    assert_refused(mm, lambda s: s.rfactor("i", 0), "loop i", "2 blocks")
    # A reduction without its init (decomposed) is not recognised.
    assert_refused(mm, lambda s: s.rfactor("r", 0), '"C"', "no init")


def test_rfactor_refuses_an_unknown_combiner(rsum) -> None:
    _, sch = rsum

    def to_product(block):
        store = block.body
        assert isinstance(store, BufferStore) and isinstance(store.value, Binary)
        return replace(
            block, body=replace(store, value=Binary("mul", store.value.a, store.value.b))
        )

    sch.program = replace_realize(sch.program, "Y", lambda x: replace(x, block=to_product(x.block)))
    assert_refused(sch, lambda s: s.rfactor("r", 0), '"Y"', "not a sum, max or min")


# ---------------------------------------------------------------------------
# the combination


def _gemm_schedule() -> tuple:
    """matmul 64x48x37: 8x16 tiles over a split k, accumulated in a local buffer."""
    task = library_task("matmul", {"m": 64, "n": 48, "k": 37})
    sch = Schedule(task.program)
    i0, i1 = sch.split("i", [None, 8])
    j0, j1 = sch.split("j", [None, 16])
    k0, k1 = sch.split("r", [None, 4])  # imperfect: 37 = 10 * 4 - 3
    sch.reorder(i0, j0, k0, k1, i1, j1)
    wb = sch.cache_write("C", 0, "local")
    return task, sch, (i0, i1, j0, j1, k0, k1), wb


def test_gemm_tile_with_local_accumulator(golden) -> None:
    task, sch, (i0, i1, _, j1, k0, k1), wb = _gemm_schedule()
    init = sch.decompose_reduction("C", k0)
    assert (wb.name, init.name) == ("C_local", "C_init")
    assert [lp.name for lp in sch.get_loops(init)] == ["i_0", "j_0", "i_1_init", "j_1_init"]
    sch.vectorize(j1)
    sch.vectorize("j_1_init")
    sch.unroll(k1)
    sch.unroll(i1)
    sch.parallel(i0)
    sch.vectorize(sch.get_loops(wb)[-1])
    golden("gemm_local_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert "C_local = alloc(float32[64, 48], scope='local')" in text
    assert "C_local[vi, vj] = C_local[vi, vj] + A[vi, vr] * B[vr, vj]" in text
    assert_correct(task, sch.program)
    assert_correct(task, sch.program, threads=3)


def test_gemm_tile_with_write_back_inside_the_tile(golden) -> None:
    """reverse_compute_at moves the write-back into the tile: an 8x16 register tile."""
    pytest.importorskip("ir.schedule.compute_at")
    task, sch, (i0, _, j0, j1, k0, k1), wb = _gemm_schedule()
    sch.reverse_compute_at(wb, j0)
    init = sch.decompose_reduction("C", k0)
    assert [lp.name for lp in sch.get_loops(init)] == ["i_0", "j_0", "i_1_init", "j_1_init"]
    assert [b.name for b in sch.get_child_blocks(j0)] == ["C_init", "C", "C_local"]
    sch.vectorize(j1)
    sch.vectorize("j_1_init")
    sch.vectorize(sch.get_loops(wb)[-1])
    sch.unroll(k1)
    sch.parallel(i0)
    golden("gemm_tile_after.txt", print_program(sch.program))
    assert_correct(task, sch.program)
    assert_correct(task, sch.program, threads=2)
