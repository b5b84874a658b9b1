"""Loop primitives: before/after goldens, correctness through codegen, refusals."""

from __future__ import annotations

import pytest

from ir.printer import print_program
from ir.schedule import Schedule
from ir.task import library_task
from tests.ir.schedule.schedcheck import assert_correct, assert_refused

MM = {"m": 37, "n": 19, "k": 23}


@pytest.fixture
def mm() -> tuple:
    task = library_task("matmul", MM)
    return task, Schedule(task.program)


def test_get_loops_and_child_blocks() -> None:
    task = library_task("softmax", {"m": 4, "n": 8})
    sch = Schedule(task.program)
    assert [lp.name for lp in sch.get_loops("x_max")] == ["i", "r"]
    assert [b.name for b in sch.get_child_blocks()] == ["x_max", "x_exp", "exp_sum", "Y"]
    assert [b.name for b in sch.get_child_blocks("i_1")] == ["x_exp"]
    assert_refused(sch, lambda s: s.get_block("nope"), '"nope"')
    assert_refused(sch, lambda s: s.get_loops("nope"), '"nope"')


def test_split_golden_and_correct(mm, golden) -> None:
    task, sch = mm
    golden("matmul_before.txt", print_program(sch.program))
    outer, inner = sch.split("i", [None, 8])  # 37 = 5 * 8 - 3: imperfect, guarded
    assert (outer.name, inner.name) == ("i_0", "i_1")
    sch.split("r", [4, None])
    golden("split_after.txt", print_program(sch.program))
    assert "where(i_0 * 8 + i_1 < 37" in print_program(sch.program)
    assert_correct(task, sch.program)


def test_split_refusals(mm) -> None:
    _, sch = mm
    assert_refused(sch, lambda s: s.split("i", [4, 4]), "loop i", "< extent 37")
    assert_refused(sch, lambda s: s.split("i", [None, None]), "loop i")
    assert_refused(sch, lambda s: s.split("i", [0, 4]), "loop i")
    assert_refused(sch, lambda s: s.split("i", [37]), "loop i")
    assert_refused(sch, lambda s: s.split("q", [2, None]), "loop q")
    sch.parallel("i")
    assert_refused(sch, lambda s: s.split("i", [None, 2]), "loop i", "parallel")


def test_fuse_golden_and_correct(mm, golden) -> None:
    task, sch = mm
    fused = sch.fuse("i", "j")
    assert fused.name == "i_j_fused"
    golden("fuse_after.txt", print_program(sch.program))
    assert_correct(task, sch.program)
    sch.split(fused, [None, 16])
    assert_correct(task, sch.program)


def test_fuse_refusals(mm) -> None:
    _, sch = mm
    assert_refused(sch, lambda s: s.fuse("i", "r"), "loop i", "not perfectly nested")
    assert_refused(sch, lambda s: s.fuse("j", "i"), "loop j")
    assert_refused(sch, lambda s: s.fuse("i"), "fuse needs at least 2 loops")


def test_reorder_golden_and_correct(mm, golden) -> None:
    task, sch = mm
    i0, i1 = sch.split("i", [None, 4])
    j0, j1 = sch.split("j", [None, 8])
    sch.reorder(i0, j0, "r", i1, j1)
    golden("reorder_after.txt", print_program(sch.program))
    assert [lp.name for lp in sch.get_loops("C")] == ["i_0", "j_0", "r", "i_1", "j_1"]
    assert_correct(task, sch.program)


def test_reorder_refusals() -> None:
    task = library_task("softmax", {"m": 4, "n": 8})
    sch = Schedule(task.program)
    assert_refused(sch, lambda s: s.reorder("i", "i_1"), "loop")
    assert_refused(sch, lambda s: s.reorder("i", "i"), "distinct")


def test_parallel_vectorize_unroll_golden_and_correct(mm, golden) -> None:
    task, sch = mm
    i0, i1 = sch.split("i", [None, 8])
    sch.reorder(i0, "r", i1, "j")
    sch.parallel(i0)
    sch.unroll(i1)
    sch.vectorize("j")
    sch.annotate("j", "vector_width", 8)
    golden("kinds_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert (
        "for i_0 in parallel(5)" in text
        and "for i_1 in unrolled(8)" in text
        and "vectorized(19)" in text
    )
    assert_correct(task, sch.program, threads=2)


def test_parallel_and_vectorize_refuse_reduction_loops(mm) -> None:
    _, sch = mm
    assert_refused(sch, lambda s: s.parallel("r"), "loop r", '"C"')
    assert_refused(sch, lambda s: s.vectorize("r"), "loop r", '"C"')
    sch.unroll("r")
    assert_refused(sch, lambda s: s.parallel("r"), "loop r", "unrolled")


def test_annotate_loop_and_block(mm) -> None:
    task, sch = mm
    sch.annotate("i", "unroll_limit", 16)
    sch.annotate(sch.get_block("C"), "note", "hot")
    text = print_program(sch.program)
    assert "{'unroll_limit': 16}" in text and "annotate({'note': 'hot'})" in text
    assert_refused(sch, lambda s: s.annotate("i", "bad", [1, 2]), "loop i" if False else "i", "bad")
    assert_correct(task, sch.program)
