"""K-outer tiling: a sampled structure that blocks the reduction outside the cache tiles
and keeps each register tile for one k-block (`accumulate_at`), as OpenBLAS does."""

from __future__ import annotations

import math
import random

from codegen.host import host_target
from ir.lower import lower
from ir.node import walk
from ir.program import Allocate, For
from ir.task import library_task
from tests.tuner.space.spacecheck import check_correct
from tuner.space import default_space
from tuner.space.rules.multi_level_tiling import k_outer_structure
from tuner.trace.trace import Trace

HOST = host_target(1)


def _k_outer(trace: Trace) -> bool:
    return any(i.kind == "accumulate_at" for i in trace.instructions)


def test_the_first_reduction_level_moves_right_after_the_first_spatial_one() -> None:
    assert k_outer_structure("SSRSRS") == "SRSSRS"
    assert k_outer_structure("SSSRSRS") == "SRSSSRS"
    assert k_outer_structure("SRS") == "SRS"


def _accumulators(program) -> list[Allocate]:
    return [n for n in walk(lower(program).body) if isinstance(n, Allocate)]


def test_k_outer_samples_are_correct_and_accumulate_a_register_tile_per_k_block() -> None:
    task = library_task("matmul", {"m": 40, "n": 48, "k": 600})  # 600 > 256: always >1 k-block
    space = default_space(task.program, HOST)
    rng = random.Random(3)
    traces = [space.sample(rng) for _ in range(32)]
    chosen = [t for t in traces if _k_outer(t)]
    assert 3 <= len(chosen) <= 20, f"{len(chosen)} of 32 samples are K-outer"
    for trace in chosen[:4]:
        check_correct(task, trace, HOST)
        program = trace.apply(task.program).program
        # each tile (partitioning copies it for remainders) lives inside an outer k-block
        # loop, at the size of a register tile
        lowered = lower(program)
        tiles = [a for a in _accumulators(program) if a.buffer.name.startswith("C_local")]
        assert tiles, trace.as_python()
        outer_k = [
            f for f in walk(lowered.body) if isinstance(f, For) and f.var.name.startswith("r")
        ]
        for acc in tiles:
            assert any(acc in walk(f.body) for f in outer_k), trace.as_python()
            assert math.prod(acc.buffer.concrete_shape()) <= 24 * 16


def test_k_outer_convolution_and_two_threads_are_correct() -> None:
    conv = library_task(
        "conv2d_nhwc",
        {"n": 1, "h": 6, "w": 5, "ci": 40, "co": 24, "kh": 3, "kw": 3, "stride": 1, "pad": 1},
    )
    dense = library_task("dense", {"m": 20, "n": 40, "k": 300, "bias": 1, "relu": 1})
    for task, threads in ((conv, 1), (dense, 2)):
        target = host_target(threads)
        space = default_space(task.program, target)
        rng = random.Random(7)
        chosen = [t for t in (space.sample(rng) for _ in range(24)) if _k_outer(t)]
        assert chosen, f"{task.op}: no K-outer sample in 24"
        for trace in chosen[:2]:
            check_correct(task, trace, target)


def test_a_reduction_the_inner_level_holds_is_never_k_outer() -> None:
    task = library_task("matmul", {"m": 40, "n": 48, "k": 200})
    space = default_space(task.program, HOST)
    rng = random.Random(3)
    assert not any(_k_outer(space.sample(rng)) for _ in range(24))
