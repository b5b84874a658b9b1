"""`start_helpers`: the search's helper processes started ahead of the first proposal
(`loomtune tune` starts them before its own imports) are the ones that then make children."""

from __future__ import annotations

import pytest

from ir.task import library_task
from tuner.search.pool import PROCESSES_ENV, Job, SearchPool, helper_pids, shutdown, start_helpers
from tuner.space.simple import SimpleSpace

TASK = library_task("matmul", {"m": 16, "n": 16, "k": 8})


def test_started_helpers_make_the_children_and_the_same_ones_as_here() -> None:
    shutdown()
    try:
        start_helpers(2)
        pids = helper_pids()
        assert len(pids) == 2  # started at once, before anything asked them for work
        space = SimpleSpace(TASK.program)
        jobs = [Job(seed) for seed in range(8)]
        there = SearchPool(space, TASK.program, processes=2).children(jobs)
        assert helper_pids() == pids  # they made the children: no new process was needed
        here = SearchPool(space, TASK.program, processes=1).children(jobs)
        assert [t.hash for t, _ in there if t] == [t.hash for t, _ in here if t]
        assert sum(1 for t, _ in there if t) >= 4
    finally:
        shutdown()


def test_a_search_in_one_process_starts_no_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    shutdown()
    monkeypatch.setenv(PROCESSES_ENV, "1")
    start_helpers()
    assert helper_pids() == []
