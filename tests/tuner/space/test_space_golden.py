"""The golden design-space sketch of matmul: SSRSRS loops and readable decisions.

Regenerate with one call: LOOMTUNE_UPDATE_GOLDENS=1 .venv/bin/pytest tests/tuner/space/test_space_golden.py
"""

from __future__ import annotations

import random

from ir.schedule.state import loops_above
from ir.task import library_task
from tests.tuner.space.spacecheck import AVX2_2_THREADS
from tuner.space import default_space
from tuner.space.sketch import sketch


def test_matmul_sketch(golden) -> None:  # type: ignore[no-untyped-def]
    task = library_task("matmul", {"m": 96, "n": 64, "k": 48})
    space = default_space(task.program, AVX2_2_THREADS)
    trace = space.sample(random.Random(2))  # a seed that packs B and unrolls a 6 x 16 register tile
    golden("matmul_sketch.txt", sketch(task.program, trace))

    rules = space.rule_part(trace)
    assert rules is not None
    tiled = rules.apply(task.program).program
    levels = [name.rsplit("_", 1)[1] for name in (lp.var.name for lp in loops_above(tiled, "C"))]
    assert levels == [
        "0",
        "0",
        "1",
        "1",
        "0",
        "2",
        "2",
        "1",
        "3",
        "3",
    ]  # S0 S1 R0 S2 R1 S3 for (i, j; r)
