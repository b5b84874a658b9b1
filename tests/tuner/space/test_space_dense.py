"""The dense+bias+relu space (multi-level tiling): packed weights, register tiles that fill
the registers in whole vectors, bias + relu folded into the tile's write-back, and
non-power-of-two vector tiles emitted register by register (codegen's default lanes)."""

from __future__ import annotations

import random

from codegen.emit import emit_module
from codegen.host import host_target
from ir.lower import lower
from ir.printer import print_program
from ir.schedule.state import all_blocks, loops_above
from ir.target import Target
from ir.task import library_task
from tests.tuner.space.spacecheck import check_correct
from tuner.space import default_space
from tuner.trace.trace import Trace

AVX2_1 = Target.parse("llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=1")
SUITE = {"m": 128, "k": 768, "n": 3072, "bias": 1, "relu": 1}
SMALL = {"m": 8, "k": 16, "n": 48, "bias": 1, "relu": 1}


def _tiles(rules: Trace) -> list[list[int]]:
    return [
        rules.decisions[k]
        for k, inst in enumerate(rules.instructions)
        if inst.kind == "sample_perfect_tile"
    ]


def test_sampled_register_tiles_fill_half_the_registers_in_whole_vectors() -> None:
    task = library_task("dense", SUITE)
    space = default_space(task.program, AVX2_1)
    packed = good = 0
    for seed in range(40):
        rules = space.rule_part(space.sample(random.Random(seed)))
        assert rules is not None
        (*_, rows), (*_, vector), _ = _tiles(rules)
        accumulators = rows * vector // 8
        good += vector % 8 == 0 and 6 <= accumulators <= 12
        packed += any(i.kind == "pack_panels" for i in rules.instructions)
    assert good >= 36, f"only {good} of 40 register tiles use 6-12 whole-vector accumulators"
    assert 10 <= packed <= 30


def _packed_4x24(space, task) -> Trace:  # type: ignore[no-untyped-def]
    """The hand-written GEMM's structure in the space's own terms: W packed into 24-wide
    panels, a 4 x 24 register tile accumulated over the whole k, the write-back (with
    bias + relu) right after it. The structure (packed, written back after S1) is found
    by sampling; the tile decisions are then set."""
    m, k, n = task.params["m"], task.params["k"], task.params["n"]
    for seed in range(200):
        rules = space.rule_part(space.sample(random.Random(seed)))
        kinds = [i.kind for i in rules.instructions]
        levels = [
            rules.decisions[i]
            for i, inst in enumerate(rules.instructions)
            if inst.kind == "sample_loop"
        ]
        if "pack_panels" in kinds and levels == [1]:  # written back after S1 (structural)
            break
    else:
        raise AssertionError("no packed sample")
    decided = {
        0: [1, m // 4, 1, 4],
        1: [n // 24, 1, 1, 24],
        2: [k // min(k, 64), min(k, 64)],
    }
    tiles = [i for i, inst in enumerate(rules.instructions) if inst.kind == "sample_perfect_tile"]
    for pos, index in enumerate(tiles):
        rules = rules.with_decision(index, decided[pos])
    return space.complete(rules)


def test_the_space_holds_the_packed_register_tiled_structure_with_the_epilogue_fused() -> None:
    task = library_task("dense", SMALL)
    space = default_space(task.program, AVX2_1)
    trace = _packed_4x24(space, task)
    program = trace.apply(task.program).program
    names = [r.block.name for r in all_blocks(program)]
    assert "W_packed" in names and "Y" not in names  # bias + relu live in the write-back
    writeback = next(r for r in all_blocks(program) if r.block.name == "XW_local")
    text = print_program(program)
    assert "max(XW_local" in text and "bias[" in text
    loops = loops_above(program, "XW")
    assert [lp.kind for lp in loops[-2:]] == ["unrolled", "vectorized"]
    ir_text = emit_module(lower(program), "dense", vector_bits=256)
    assert (
        "<8 x float>" in ir_text and "<24 x float>" not in ir_text
    )  # three registers, not one odd vector
    assert int(loops[-1].extent.value) == 24 and int(loops[-2].extent.value) == 4  # type: ignore[attr-defined]
    wb_loops = loops_above(program, writeback.block.name)
    assert [int(lp.extent.value) for lp in wb_loops[-2:]] == [4, 24]  # type: ignore[attr-defined]
    pack_loops = loops_above(program, "W_packed")  # the copy: one panel row per vectorized loop
    assert pack_loops[-1].kind == "vectorized" and int(pack_loops[-1].extent.value) == 24  # type: ignore[attr-defined]
    check_correct(task, trace, host_target(1))
