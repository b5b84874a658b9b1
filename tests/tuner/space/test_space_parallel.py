"""rewrite-parallel: a small M still runs in parallel, over the columns (issue 36)."""

from __future__ import annotations

import random

from codegen.host import host_target
from ir.program import SeqStmt
from ir.schedule.state import find_block, loops_above
from ir.task import library_task
from tests.tuner.space.spacecheck import check_correct, samples
from tuner.space import default_space
from tuner.space.analysis import loop_role, nest_annotation
from tuner.space.rules.base import PARALLEL


def test_a_one_row_matmul_runs_its_columns_in_parallel() -> None:
    """With M = 1 the row tiles are all 1: the column tiles must carry the parallel loop,
    also where the extent-1 outer loops lead to the weight's packing or the write-back
    beside the compute nest (before: 45% of the samples that asked for a parallel loop
    had none)."""
    task = library_task("matmul", {"m": 1, "n": 1000, "k": 512})
    target = host_target(2)
    space = default_space(task.program, target)
    traces = samples(space, random.Random(36), 40, max_tries=80)
    asked = under_seq = 0
    for trace in traces:
        program = trace.apply(task.program).program
        if not nest_annotation(program, "C", PARALLEL):
            continue  # the sampled extent was 0: serial
        asked += 1
        loops = loops_above(program, "C")
        parallel = [lp for lp in loops if lp.kind == "parallel"]
        if not parallel:
            continue
        (lp,) = parallel
        # M is 1: a data-parallel loop of 2 or more iterations splits the columns
        assert loop_role(find_block(program, "C"), lp) == "spatial"
        assert int(lp.extent.value) >= 2  # type: ignore[attr-defined]
        above = loops[: loops.index(lp)]
        under_seq += any(isinstance(a.body, SeqStmt) for a in above)
    ran = sum(
        any(lp.kind == "parallel" for lp in loops_above(t.apply(task.program).program, "C"))
        for t in traces
    )
    assert asked >= 20 and ran >= 0.75 * asked
    assert under_seq > 0  # the compute nest beside its packing or write-back runs in parallel


def test_statements_beside_each_other_get_parallel_loops_and_stay_correct() -> None:
    """Samples whose compute nest sits beside others under extent-1 loops compile and match
    numpy at 2 threads, and no innermost loop (a write-back row) is made parallel there."""
    task = library_task("dense", {"m": 1, "n": 72, "k": 40, "bias": 1, "relu": 1})
    target = host_target(2)
    space = default_space(task.program, target)
    rng = random.Random(7)
    checked = 0
    for trace in samples(space, rng, 60, max_tries=120):
        program = trace.apply(task.program).program
        loops = loops_above(program, "XW")
        parallel = [lp for lp in loops if lp.kind == "parallel"]
        if not parallel or not any(
            isinstance(a.body, SeqStmt) for a in loops[: loops.index(parallel[0])]
        ):
            continue
        write_back = loops_above(program, "XW_local")
        assert not write_back or write_back[-1].kind != "parallel"
        check_correct(task, trace, target)
        checked += 1
        if checked == 3:
            break
    assert checked > 0
