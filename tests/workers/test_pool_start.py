"""The local pool starts its measurement processes when it is made, not at the first candidate,
so their start-up (numpy and llvmlite imports) overlaps the search's first proposal."""

from __future__ import annotations

import os
import random
import time

from codegen.host import host_target
from ir.task import library_task
from tuner.space.simple import SimpleSpace
from workers.pool import LocalPool

TASK = library_task("matmul", {"m": 16, "n": 16, "k": 8})
TARGET = host_target(1).canonical()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_processes_are_ready_before_any_candidate_and_then_measure() -> None:
    with LocalPool(threads=1) as pool:
        deadline = time.monotonic() + 60
        while not all(p.hello for p in pool.processes):  # nothing submitted yet
            assert time.monotonic() < deadline, "the pool's processes did not start by themselves"
            time.sleep(0.02)
        pids = sorted(p.pid for p in pool.processes)
        traces = [SimpleSpace(TASK.program).sample(random.Random(i)) for i in range(3)]
        assert all(f.result(60).ok for f in pool.submit(TASK, TARGET, traces))
        assert sorted(p.pid for p in pool.processes) == pids  # the same processes measured
        assert all(p.starts == 1 for p in pool.processes)
    assert not any(_alive(pid) for pid in pids)


def test_a_pool_closed_while_its_processes_start_leaves_none_behind() -> None:
    pool = LocalPool(threads=1)
    time.sleep(0.05)  # Popen has run in the slot threads; the imports have not finished
    pool.close()
    pool._executor.shutdown(wait=True)  # the starts under way finish (and see the close)
    assert all(p.proc is None for p in pool.processes), "a process outlived its closed pool"
