"""Loop partitioning: imperfect tiles lose their guards, and wholly dead iterations go."""

from __future__ import annotations

from ir.lower import lower
from ir.node import walk
from ir.program import Allocate, BufferStore, For, IfThenElse, Program, SeqStmt, Stmt
from ir.schedule import Schedule
from ir.task import library_task
from tests.ir.schedule.schedcheck import assert_correct


def _store_iterations(s: Stmt, outer: int = 1) -> int:
    """How many times the stores of `s` run (constant extents, no guards)."""
    if isinstance(s, BufferStore):
        return outer
    if isinstance(s, For):
        return _store_iterations(s.body, outer * int(s.extent.value))  # type: ignore[attr-defined]
    if isinstance(s, SeqStmt):
        return sum(_store_iterations(x, outer) for x in s.stmts)
    if isinstance(s, Allocate):
        return _store_iterations(s.body, outer)
    raise AssertionError(f"unexpected {type(s).__name__} in a lowered nest")


def _tiled(n: int, factors: list[int | None]) -> tuple[object, Program]:
    task = library_task("matmul", {"m": 4, "n": n, "k": 3})
    sch = Schedule(task.program)
    i, j, k = sch.get_loops("C")
    j0, j1, j2 = sch.split(j, factors)
    sch.reorder(i, j0, j1, k, j2)
    sch.vectorize(j2)
    sch.decompose_reduction("C", k)
    return task, sch.program


def test_a_covering_tile_keeps_only_live_iterations_and_no_guard() -> None:
    """100 columns covered by 2 x 4 x 16 = 128: the last strip (64..127) keeps 2 full
    16-wide tiles and one of 4 columns; the fourth tile (112..127) is dead and dropped."""
    task, program = _tiled(100, [2, 4, 16])
    lowered = lower(program)
    assert not any(isinstance(n, IfThenElse) for n in walk(lowered.body)), "a guard survived"
    vector = sorted(
        int(n.extent.value)
        for n in walk(lowered.body)
        if isinstance(n, For) and n.kind == "vectorized"
    )
    # init and update each: the first strip's tiles, the last strip's two and its 4-column tail
    assert vector == [4, 4, 16, 16, 16, 16]
    # every store runs once per element and reduction step, none on dead columns
    assert _store_iterations(lowered.body) == 4 * 100 + 4 * 100 * 3
    assert_correct(task, program)  # type: ignore[arg-type]


def test_a_wasteful_cover_is_as_cheap_as_a_tight_one() -> None:
    """2 x 16 x 48 covers 1000 with 536 to spare: only live iterations remain."""
    task, program = _tiled(1000, [2, 16, 48])
    lowered = lower(program)
    assert not any(isinstance(n, IfThenElse) for n in walk(lowered.body))
    assert _store_iterations(lowered.body) == 4 * 1000 + 4 * 1000 * 3
    assert_correct(task, program)  # type: ignore[arg-type]


def test_a_parallel_loop_keeps_its_tail_on_its_threads() -> None:
    """100 columns covered by 7 parallel strips of 16: the seventh (96..111) holds 4 live
    columns. It stays an iteration of the parallel loop, behind a test on the loop
    variable, not a loop of its own after it; neither branch keeps a guard per column."""
    task = library_task("matmul", {"m": 4, "n": 100, "k": 3})
    sch = Schedule(task.program)
    i, j, k = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(j0, i, k, j1)
    sch.parallel(j0)
    sch.vectorize(j1)
    sch.decompose_reduction("C", k)
    lowered = lower(sch.program)
    parallel = [n for n in walk(lowered.body) if isinstance(n, For) and n.kind == "parallel"]
    assert len(parallel) == 1 and int(parallel[0].extent.value) == 7  # type: ignore[attr-defined]
    (test,) = [n for n in walk(lowered.body) if isinstance(n, IfThenElse)]
    assert test is parallel[0].body
    vector = sorted(
        int(n.extent.value)
        for n in walk(lowered.body)
        if isinstance(n, For) and n.kind == "vectorized"
    )
    assert vector == [4, 4, 16, 16]  # init and update: the main strips' 16 columns, the tail's 4
    assert_correct(task, sch.program)  # type: ignore[arg-type]
