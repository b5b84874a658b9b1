"""Shifted tiles: a streamed input's column tiles start on its cache lines at any offset,
the edges are peeled without guards, and the kernel picks the variant by address."""

from __future__ import annotations

from dataclasses import replace

import pytest

from codegen.host import host_target
from codegen.kernel import compile_program
from ir.arrays import copy_at_offset
from ir.lower import lower
from ir.node import walk
from ir.program import For, IfThenElse, Program
from ir.schedule import Schedule
from ir.schedule.shift import ShiftRefused, shift_tiles, streamed_input
from ir.task import Task, library_task
from tests.ir.lower.test_partition import _store_iterations
from workers.verify import empty_outputs, verify


def _streamed_dense(m: int = 8, n: int = 1024, k: int = 12, cols: int = 32) -> tuple[Task, Program]:
    """Dense + bias + relu, W read unpacked in `cols`-wide column tiles, rows of 4."""
    task = library_task("dense", {"m": m, "n": n, "k": k, "bias": 1, "relu": 1})
    sch = Schedule(task.program)
    i, j, r = sch.get_loops("XW")
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, cols])
    sch.reorder(j0, i0, r, i1, j1)
    written = sch.cache_write("XW", 0, "local")
    sch.reverse_compute_at(written, i0)
    sch.reverse_compute_inline("Y")
    sch.decompose_reduction("XW", r)
    sch.vectorize(j1)
    for block in ("XW_init", "XW_local"):
        sch.vectorize(sch.get_loops(block)[-1])
    return task, sch.program


def _vector_extents(program: Program) -> list[int]:
    return sorted(
        int(n.extent.value)  # type: ignore[attr-defined]
        for n in walk(program.body)
        if isinstance(n, For) and n.kind == "vectorized"
    )


def _check(task: Task, kernel, offset: int) -> None:
    made = task.make_inputs(seed=3)
    inputs = [copy_at_offset(a, offset) for a in made]
    outputs = empty_outputs(task.output_specs(), offset)
    kernel(*inputs, *outputs)
    reason = verify(outputs, task.reference(made), task.output_names, task.reduction_length)
    assert reason is None, f"offset {offset}: {reason}"


def test_the_streamed_input_is_the_weight_and_its_tile_loop() -> None:
    task, program = _streamed_dense()
    streamed = streamed_input(program)
    assert streamed is not None
    assert task.program.params[streamed.param].name == "W"
    assert streamed.columns == 32 and streamed.itemsize == 4
    assert [streamed.shift_for(a) for a in (0, 16, 48, 64 + 4, 6)] == [0, 4, 12, 1, 0]


@pytest.mark.parametrize("shift", [1, 4, 12, 15])
def test_shifted_edges_are_peeled_without_guards(shift: int) -> None:
    """1024 columns in 32-wide tiles shifted by s: a first tile of 32 - s live columns, 31
    whole ones, a last one of s; no guard is left and no dead column runs."""
    _, program = _streamed_dense()
    streamed = streamed_input(program)
    assert streamed is not None
    lowered = lower(shift_tiles(program, streamed, shift))
    assert not any(isinstance(n, IfThenElse) for n in walk(lowered.body)), "a guard survived"
    # init, update and write-back each: the first tile's, the whole tiles', the last one's
    assert _vector_extents(lowered) == sorted([32 - shift, 32, shift] * 3)
    # every store runs once per element (and reduction step), as without the shift
    assert _store_iterations(lowered.body) == _store_iterations(lower(program).body)
    assert streamed_input(shift_tiles(program, streamed, shift)) is None  # not shifted twice


def test_every_offset_gives_the_right_answer_through_its_own_variant() -> None:
    task, program = _streamed_dense(m=10, n=1536, k=33, cols=48)
    kernel = compile_program(program, host_target(1))
    for offset in (0, 16, 48, 4, 60, 32):
        _check(task, kernel, offset)
    assert kernel.variant_shifts == (0, 1, 4, 8, 12, 15)


def test_a_copy_under_the_tile_loop_runs_once_more_and_a_reduction_refuses() -> None:
    """A packed A under the column tiles ignores them: running the copy for the extra tile
    changes nothing, so the shift is kept. A block binding the loop other than as the tiles
    the shift is for is refused, and the kernel falls back to its one variant."""
    task = library_task("matmul", {"m": 8, "n": 512, "k": 16})
    sch = Schedule(task.program)
    i, j, k = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(j0, i, k, j1)
    sch.compute_at(sch.cache_read("C", 0), j0)
    sch.vectorize(j1)
    sch.decompose_reduction("C", k)
    streamed = streamed_input(sch.program)
    assert streamed is not None and streamed.loop == j0.name and streamed.columns == 16
    kernel = compile_program(sch.program, host_target(1))
    _check(task, kernel, 16)
    assert kernel.variant_shifts == (0, 4)
    with pytest.raises(ShiftRefused, match="other than as its 32-column tiles"):
        shift_tiles(sch.program, replace(streamed, columns=32), 4)


def test_few_tiles_or_parallel_tiles_get_no_shift() -> None:
    """Under 32 tiles the extra one costs more than the lines save; an extra iteration of a
    parallel loop would leave one thread two tiles and the other one."""
    _, program = _streamed_dense(n=992)
    assert streamed_input(program) is None
    _, program = _streamed_dense()
    sch = Schedule(program)
    sch.parallel(sch.get_loops("XW")[0])
    assert streamed_input(sch.program) is None


def test_a_packed_weight_needs_no_variants() -> None:
    task = library_task("matmul", {"m": 8, "n": 512, "k": 16})
    sch = Schedule(task.program)
    i, j, k = sch.get_loops("C")
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(j0, i, k, j1)
    packed = sch.cache_read("C", 1)
    sch.compute_at(packed, j0)
    sch.vectorize(j1)
    assert streamed_input(sch.program) is None
    kernel = compile_program(sch.program, host_target(1))
    _check(task, kernel, 16)
    assert kernel.variant_shifts == (0,)
