"""The layout-packing transform: B into column panels, computed inside the kernel."""

from __future__ import annotations

import pytest

from codegen.emit import emit_module
from ir.intrinsics import INTRINSICS
from ir.lower import lower
from ir.printer import print_program
from ir.schedule import Schedule
from ir.schedule.layout import IndexMap, panel_map
from ir.schedule.state import ScheduleError
from ir.task import library_task
from tests.ir.schedule.schedcheck import assert_correct, assert_refused


def test_pack_b_into_panels_golden_and_correct(golden) -> None:
    task = library_task("matmul", {"m": 37, "n": 70, "k": 19})
    sch = Schedule(task.program)
    packed = sch.transform_layout("C", "B", panel_map(32))
    assert packed.name == "B_packed"
    golden("pack_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert "B_packed = alloc(float32[3, 19, 32])" in text
    assert "B_packed[vj // 32, vr, vj % 32]" in text
    assert_correct(task, sch.program)


def test_pack_with_a_callable_and_then_tile() -> None:
    task = library_task("matmul", {"m": 20, "n": 48, "k": 9})
    sch = Schedule(task.program)
    sch.transform_layout("C", "B", lambda k, n: (n // 16, k, n % 16))
    j0, j1 = sch.split("j", [None, 16])
    sch.reorder(j0, "r", j1)
    sch.vectorize(j1)
    assert_correct(task, sch.program)


def test_the_copy_vectorizes_once_its_loop_is_split_by_the_panel_width() -> None:
    task = library_task("matmul", {"m": 8, "n": 96, "k": 5})
    sch = Schedule(task.program)
    packed = sch.transform_layout("C", "B", panel_map(32))
    _, n = sch.get_loops(packed)
    with pytest.raises(ScheduleError, match="overlapping"):
        sch.vectorize(
            n
        )  # n // 32, n % 32: lanes of one vector could collide, as far as it can tell
    _, lane = sch.split(n, [None, 32])
    sch.vectorize(lane)  # (o * 32 + i) // 32 is o under i's range: one panel row per vector
    text = emit_module(lower(sch.program), "k", vector_bits=256)
    assert "store <32 x float>" in text
    assert_correct(task, sch.program)


def test_pack_refusals() -> None:
    task = library_task("matmul", {"m": 8, "n": 8, "k": 8})
    sch = Schedule(task.program)
    assert_refused(
        sch, lambda s: s.transform_layout("C", "A", lambda a, b: (a // 2, b)), '"C"', "same place"
    )
    assert_refused(sch, lambda s: s.transform_layout("C", "Q", panel_map(4)), '"C"', "Q")
    assert_refused(sch, lambda s: s.transform_layout("C", "C", panel_map(4)), '"C"')
    assert_refused(
        sch, lambda s: s.transform_layout("C", "A", lambda a, b: (a - 1, b)), '"C"', "negative"
    )
    assert_refused(
        sch, lambda s: s.transform_layout("C", "A", lambda a: (a,)), '"C"', "invalid index map"
    )
    m = IndexMap.from_callable(2, lambda a, b: (b, a))
    sch.transform_layout("C", "A", m)  # a transpose is a fine layout
    assert_correct(task, sch.program)


@pytest.mark.parametrize(
    ("fn", "proved"),
    [
        (lambda k, n: (n // 16, k, n % 16), True),  # a panel map: n = 16·(n // 16) + n % 16
        (lambda k, n: (n % 4, n // 4, k), True),
        (lambda k, n: (n // 2, k), False),  # loses n % 2: not one-to-one, left to the enumeration
        (
            lambda k, n: (n // 2, n % 4, k),
            False,
        ),  # different constants: not proved (enumerated instead)
        (lambda k, n: (k + n, n), False),
    ],
)
def test_injectivity_is_proved_only_where_every_index_is_recoverable(
    fn: object, proved: bool
) -> None:
    from ir.schedule.layout import _provably_injective

    assert _provably_injective(IndexMap.from_callable(2, fn)) is proved


@pytest.mark.parametrize(("n", "width"), [(96, 32), (70, 16)])
def test_pack_panels_iterates_over_the_panels_and_computes_at_a_column_tile(
    n: int, width: int
) -> None:
    task = library_task("matmul", {"m": 12, "n": n, "k": 9})
    sch = Schedule(task.program)
    packed = sch.pack_panels("C", "B", width)
    text = print_program(sch.program)
    panels = -(-n // width)
    assert f"B_packed = alloc(float32[{panels}, 9, {width}])" in text
    assert "writes(B_packed[vax0, vax1, vax2])" in text  # its own iteration variables: movable
    if n % width:  # the last panel's padding repeats the last column: no read past B
        assert f"min(vax0 * {width} + vax2, {n - 1})" in text
    assert_correct(task, sch.program)
    j0, j1 = sch.split("j", [None, width])
    sch.reorder(j0, "i", "r", j1)
    sch.compute_at(packed, j0)  # one panel per column tile, packed right before it is read
    assert sch.get_loops(packed)[0].name == j0.name
    lowered = print_program(lower(sch.program))
    assert f"B_packed = alloc(float32[{9 * width}])" in lowered  # compacted to the one panel
    assert_correct(task, sch.program)
    _, _, lane = sch.get_loops(packed)[1:]
    sch.vectorize(lane)  # a panel row is contiguous in both buffers
    assert_correct(task, sch.program)


def test_pack_panels_refusals() -> None:
    task = library_task("matmul", {"m": 8, "n": 8, "k": 8})
    sch = Schedule(task.program)
    assert_refused(sch, lambda s: s.pack_panels("C", "Q", 4), '"C"', "Q")
    assert_refused(sch, lambda s: s.pack_panels("C", "B", 0), "panel width 0")


def _dense_int8_packed() -> tuple[object, Schedule, IndexMap]:
    """dense_int8 with its product reading W through a VNNI-packed copy."""
    task = library_task("dense_int8", {"m": 8, "n": 32, "k": 16})
    sch = Schedule(task.program)
    vnni = INTRINSICS["vnni"]
    _, fwd, inverse = vnni.packs[0]
    index_map = IndexMap.from_callable(2, fwd)
    sch.transform_layout("acc", "W", index_map, inverse)
    return task, sch, index_map


def test_read_through_makes_a_second_reader_read_the_packed_copy() -> None:
    """W's column sums read the copy the product reads (moved after it), and stay exact."""
    task, sch, index_map = _dense_int8_packed()
    before = print_program(sch.program)
    assert before.index('block("wsum")') < before.index('block("W_packed")')
    sch.read_through("wsum", "W", "W_packed", index_map)
    text = print_program(sch.program)
    assert text.index('block("W_packed")') < text.index('block("wsum")')
    assert "reads(W_packed[" in text.split('block("wsum")')[1].split("writes")[0]
    assert_correct(task, sch.program)


def test_read_through_refusals() -> None:
    _, sch, index_map = _dense_int8_packed()
    assert_refused(sch, lambda s: s.read_through("wsum", "X", "W_packed", index_map), '"wsum"', "X")
    assert_refused(
        sch,
        lambda s: s.read_through("wsum", "W", "acc_o", index_map),
        '"wsum"',
        "acc_o",
    )
    other = IndexMap.from_callable(2, lambda k, n: (n // 16, k // 4, k % 4, n % 16))
    assert_refused(
        sch, lambda s: s.read_through("wsum", "W", "W_packed", other), '"wsum"', "index map"
    )
    # the copy and the write-back (which reads the sums) inside the product's row loop:
    # the sums cannot move past that nest
    row = sch.get_loops("acc")[0]
    sch.reverse_compute_at("Y", row)
    sch.compute_at("W_packed", row)
    assert_refused(
        sch,
        lambda s: s.read_through("wsum", "W", "W_packed", index_map),
        '"wsum"',
        "cannot move",
    )
