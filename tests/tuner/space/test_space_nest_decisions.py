"""Re-deriving gives each top-level nest its own parallel extent and unroll depth,
wherever the nest now comes (a block moved to a nest of its own comes before it)."""

from __future__ import annotations

import random

from ir.task import library_task
from tests.tuner.space.spacecheck import AVX2_2_THREADS, check_correct, unrolls_by_nest
from tuner.space import default_space
from tuner.space.analysis import root_nests
from tuner.space.rules import UNROLL
from tuner.trace.trace import Trace
from tuner.trace.traced_schedule import TracedSchedule


def _placed(rules: Trace) -> list[int]:
    """The compute locations of a rule part that put a block under a loop."""
    return [
        i
        for i, inst in enumerate(rules.instructions)
        if inst.kind == "sample_compute_location" and rules.decisions.get(i, -1) >= 0
    ]


def test_a_block_moved_to_a_nest_of_its_own_leaves_the_kernel_its_unroll_depth() -> None:
    task = library_task("matmul", {"m": 96, "n": 128, "k": 64})
    space = default_space(task.program, AVX2_2_THREADS)
    rng = random.Random(5)
    checked = 0
    for _ in range(200):
        rules = space.rule_part(space.sample(rng))
        assert rules is not None
        sites = _placed(rules)
        if not sites:
            continue
        (before,) = [n for n in root_nests(rules.apply(task.program).program)]
        kernel = before[-1]
        for depth in range(3):  # every depth, so no draw can match it by chance
            unroll = next(i for i, (k, n) in space.nest_subjects(rules).items() if k == UNROLL)
            source = rules.with_decision(unroll, depth)
            moved = source.with_decision(sites[0], -1)  # the packed weight at the root
            trace = space.complete(moved, rederive_rng=random.Random(0), source=source)
            after = root_nests(trace.apply(task.program).program)
            assert len(after) == 2 and after[-1][-1] == kernel, after
            got = unrolls_by_nest(space, space.rule_part(trace))  # type: ignore[arg-type]
            assert got[kernel] == depth, (got, depth)
        check_correct(task, trace, AVX2_2_THREADS)
        checked += 1
        if checked == 2:
            break
    assert checked == 2


def test_forced_decisions_with_a_subject_go_to_the_call_naming_it() -> None:
    task = library_task("matmul", {"m": 8, "n": 8, "k": 8})
    forced = [(("sample_categorical", 3), 2, "b"), (("sample_categorical", 3), 1, None)]
    sch = TracedSchedule(task.program, rng=random.Random(0), forced=forced)
    first = sch.sample_categorical([0, 16, 64], [1 / 3] * 3, subject="a")  # none for "a": drawn
    second = sch.sample_categorical([0, 16, 64], [1 / 3] * 3)  # the next in order
    third = sch.sample_categorical([0, 16, 64], [1 / 3] * 3, subject="b")
    assert (int(second), int(third)) == (16, 64)
    assert sch.trace.decisions[2] == 2 and int(first) in (0, 16, 64)
