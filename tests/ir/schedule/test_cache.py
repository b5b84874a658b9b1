"""cache_read, cache_write and accumulate_at: goldens, correctness through codegen, refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ir.expr import Binary, Const, Load
from ir.lower import lower
from ir.printer import print_program
from ir.program import Block, BufferRegion, Range, seq
from ir.schedule import Schedule
from ir.schedule.state import blocks_under, find_block, find_loop, replace_realize
from ir.task import library_task
from ir.visit import post_order_rewrite
from tests.ir.schedule.schedcheck import assert_correct, assert_refused

MM = {"m": 37, "n": 19, "k": 23}


@pytest.fixture
def mm() -> tuple:
    task = library_task("matmul", MM)
    return task, Schedule(task.program)


def test_cache_read_golden_and_correct(mm, golden) -> None:
    task, sch = mm
    golden("cache_matmul_before.txt", print_program(sch.program))
    copy = sch.cache_read("C", 1, "global")
    assert copy.name == "B_global"
    golden("cache_read_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert "B_global = alloc(float32[23, 19])" in text
    assert "reads(A[vi, vr], B_global[vr, vj])" in text
    assert "A[vi, vr] * B_global[vr, vj]" in text
    assert [b.name for b in sch.get_child_blocks()] == ["B_global", "C"]
    assert_correct(task, sch.program)
    # The copy is an ordinary block: tile it, with an imperfect split.
    a0, _ = sch.split(sch.get_loops(copy)[0], [None, 4])
    sch.parallel(a0)
    sch.split("i", [None, 8])
    assert_correct(task, sch.program, threads=2)


def test_cache_read_of_an_intermediate_goes_after_its_producer() -> None:
    task = library_task("softmax", {"m": 5, "n": 19})
    sch = Schedule(task.program)
    # Y reads x_exp (written by block x_exp, read first by exp_sum) and exp_sum.
    sch.cache_read("Y", 0, "local")
    sch.cache_read("Y", 1, "global")
    assert [b.name for b in sch.get_child_blocks()] == [
        "x_max",
        "x_exp",
        "x_exp_local",
        "exp_sum",
        "exp_sum_global",
        "Y",
    ]
    text = print_program(sch.program)
    assert "x_exp_local = alloc(float32[5, 19], scope='local')" in text
    assert "Y[vi_3, vj_1] = x_exp_local[vi_3, vj_1] / exp_sum_global[vi_3]" in text
    # exp_sum still reads the original buffer: only the named block is redirected.
    assert "exp_sum[vi_2] + x_exp[vi_2, vr2]" in text
    assert_correct(task, sch.program)


def test_cache_read_refusals(mm) -> None:
    _, sch = mm
    assert_refused(sch, lambda s: s.cache_read("C", 2, "global"), '"C"', "out of range")
    assert_refused(sch, lambda s: s.cache_read("C", -1, "global"), '"C"', "out of range")
    assert_refused(sch, lambda s: s.cache_read("C", 0, "shared"), '"C"', "scope")
    assert_refused(sch, lambda s: s.cache_read("nope", 0, "global"), '"nope"')
    # A block that lists its own output among what it reads cannot cache it.
    r = find_block(sch.program, "C")
    own = BufferRegion(r.block.writes[0].buffer, r.block.writes[0].region)
    sch.program = replace_realize(
        sch.program, "C", lambda x: replace(x, block=replace(x.block, reads=(*x.block.reads, own)))
    )
    assert_refused(sch, lambda s: s.cache_read("C", 2, "global"), '"C"', "writes C")


def test_cache_write_golden_and_correct(mm, golden) -> None:
    task, sch = mm
    wb = sch.cache_write("C", 0, "local")
    assert wb.name == "C_local"
    golden("cache_write_after.txt", print_program(sch.program))
    text = print_program(sch.program)
    assert "C_local = alloc(float32[37, 19], scope='local')" in text
    assert "C_local[vi, vj] = 0.0" in text  # the init follows the block
    assert "C_local[vi, vj] = C_local[vi, vj] + A[vi, vr] * B[vr, vj]" in text
    assert "C[vax0, vax1] = C_local[vax0, vax1]" in text
    assert [b.name for b in sch.get_child_blocks()] == ["C", "C_local"]
    assert_correct(task, sch.program)
    i0, _ = sch.split("i", [None, 8])  # imperfect: 37 = 5 * 8 - 3
    sch.split(sch.get_loops(wb)[1], [None, 4])
    sch.parallel(i0)
    assert_correct(task, sch.program, threads=2)


def test_cache_write_of_an_intermediate_and_an_elementwise_block() -> None:
    task = library_task("softmax", {"m": 7, "n": 23})
    sch = Schedule(task.program)
    sch.cache_write("x_exp", 0, "global")
    sch.cache_write("x_max", 0, "local")
    sch.cache_write("Y", 0, "global")
    assert [b.name for b in sch.get_child_blocks()] == [
        "x_max",
        "x_max_local",
        "x_exp",
        "x_exp_global",
        "exp_sum",
        "Y",
        "Y_global",
    ]
    assert_correct(task, sch.program)


def test_cache_write_refusals(mm) -> None:
    _, sch = mm
    assert_refused(sch, lambda s: s.cache_write("C", 1, "local"), '"C"', "out of range")
    assert_refused(sch, lambda s: s.cache_write("C", 0, "register"), '"C"', "scope")
    assert_refused(sch, lambda s: s.cache_write("nope", 0, "local"), '"nope"')
    # A block that writes two buffers.
    r = find_block(sch.program, "C")
    a = sch.program.inputs[0]
    extra = BufferRegion(
        a,
        tuple(
            Range(iv.var, rng.extent)
            for iv, rng in zip(r.block.iter_vars, r.block.writes[0].region)
        ),
    )
    sch.program = replace_realize(
        sch.program,
        "C",
        lambda x: replace(x, block=replace(x.block, writes=(*x.block.writes, extra))),
    )
    assert_refused(sch, lambda s: s.cache_write("C", 0, "local"), '"C"', "several buffers")


def test_cache_write_refuses_a_buffer_with_another_writer(mm) -> None:
    _, sch = mm
    # A second nest whose block (renamed C2) writes C again.
    twin = post_order_rewrite(
        sch.program.body, lambda n: replace(n, name="C2") if isinstance(n, Block) else None
    )
    sch.program = replace(sch.program, body=seq(sch.program.body, twin))  # type: ignore[arg-type]
    assert_refused(
        sch, lambda s: s.cache_write("C", 0, "local"), '"C"', 'also written by block "C2"'
    )


def _k_blocked(sch: Schedule) -> tuple:
    """matmul as i0 | k0 | i1 j0 | k1 | j1 (K-outer); the init decomposed before k0."""
    i, j, k = sch.get_loops("C")
    i0, i1 = sch.split(i, [None, 8])  # 37 = 5 * 8 - 3: guarded rows
    j0, j1 = sch.split(j, [None, 8])
    k0, k1 = sch.split(k, [None, 6])  # 23 = 4 * 6 - 1: a guarded k-block
    sch.reorder(i0, k0, i1, j0, k1, j1)
    sch.decompose_reduction("C", k0)
    return i0, k0, i1, j0, k1, j1


def test_accumulate_at_keeps_a_tile_per_k_block_and_is_correct(mm) -> None:
    task, sch = mm
    i0, _, _, j0, _, _ = _k_blocked(sch)
    wb = sch.accumulate_at("C", j0)
    assert wb.name == "C_local"
    text = print_program(sch.program)
    assert "C_local = alloc(float32[37, 19], scope='local')" in text
    assert "C_local[vi, vj] = C_local[vi, vj] + A[vi, vr] * B[vr, vj]" in text
    assert [b.name for b in sch.get_child_blocks()] == ["C_init", "C_local_fill", "C", "C_local"]
    # fill, update and write-back all run inside j0, once per k-block
    j0_loop = find_loop(sch.program, j0.name)
    assert [b.block.name for b in blocks_under(j0_loop)] == ["C_local_fill", "C", "C_local"]
    assert_correct(task, sch.program)
    # compaction shrinks the local buffer to one 8-column tile of a row
    lowered = lower(sch.program)
    assert "C_local = alloc(float32[8], scope='local')" in print_program(lowered)
    sch.parallel(i0)
    assert_correct(task, sch.program, threads=2)


def test_accumulate_at_refusals(mm) -> None:
    _, sch = mm
    i, j, k = sch.get_loops("C")
    assert_refused(sch, lambda s: s.accumulate_at("C", j), '"C"', "init", "decompose")
    sch.decompose_reduction("C", k)
    assert_refused(sch, lambda s: s.accumulate_at("C", "nope"), "nope")
    sch.cache_read("C", 1, "global")
    sch.compute_at("B_global", i)
    assert_refused(sch, lambda s: s.accumulate_at("C", i), '"C"', 'also holds block "B_global"')


def test_accumulate_at_refuses_an_output_read_at_another_index() -> None:
    task = library_task("matmul", MM)
    sch = Schedule(task.program)
    _, _, k = sch.get_loops("C")
    sch.decompose_reduction("C", k)
    r = find_block(sch.program, "C")
    store = r.block.body
    shifted = Load(store.buffer, (store.indices[0], Const(0, "int64")))
    sch.program = replace_realize(
        sch.program,
        "C",
        lambda x: replace(
            x,
            block=replace(x.block, body=replace(store, value=Binary("add", store.value, shifted))),
        ),
    )
    assert_refused(sch, lambda s: s.accumulate_at("C", k), '"C"', "another index")
