"""Columns first: a sampled order whose outermost loop walks the weight's column tiles,
so each column block of the weight is read (and packed) once for all row tiles."""

from __future__ import annotations

import random

from codegen.host import host_target
from ir.expr import Var
from ir.node import walk
from ir.program import Program
from ir.schedule.state import find_block, loops_above
from ir.task import library_task
from tests.tuner.space.spacecheck import check_correct, samples
from tuner.space import default_space


def _outermost_feeds_columns(program: Program, block: str) -> bool:
    """Whether the block's outermost loop feeds its last spatial axis (the columns)."""
    r = find_block(program, block)
    outer = loops_above(program, block)[0]
    columns = max(k for k, iv in enumerate(r.block.iter_vars) if iv.kind == "spatial")
    return any(isinstance(n, Var) and n == outer.var for n in walk(r.values[columns]))


def test_columns_first_samples_are_correct_and_pack_per_column_block() -> None:
    task = library_task("dense", {"m": 20, "n": 40, "k": 30, "bias": 1, "relu": 1})
    for threads in (1, 2):
        target = host_target(threads)
        space = default_space(task.program, target)
        traces = samples(space, random.Random(11), 48, max_tries=96)
        rules = [space.rule_part(t) for t in traces]
        tiled = [r.apply(task.program).program for r in rules if r is not None]
        first = [i for i, p in enumerate(tiled) if _outermost_feeds_columns(p, "XW")]
        assert 4 <= len(first) <= 24, f"{len(first)} of {len(tiled)} columns first"
        packed_under = 0
        for i in first[:4]:
            check_correct(task, traces[i], target)
        for i in first:
            loops = loops_above(tiled[i], "W_packed") if "W_packed" in str(tiled[i]) else []
            packed_under += bool(loops) and loops[0] == loops_above(tiled[i], "XW")[0]
        assert packed_under > 0  # a column block packed under its own loop, once for every row


def test_one_row_is_never_columns_first() -> None:
    task = library_task("matmul", {"m": 1, "n": 96, "k": 64})
    space = default_space(task.program, host_target(1))
    for trace in samples(space, random.Random(3), 32, max_tries=64):
        rules = space.rule_part(trace)
        assert rules is not None
        assert not _outermost_feeds_columns(rules.apply(task.program).program, "C")
