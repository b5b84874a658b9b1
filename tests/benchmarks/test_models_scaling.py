"""The models benchmark's arithmetic without PyTorch: thread counts and own scaling."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.__main__ import _thread_counts
from benchmarks.models.run import own_scaling


def test_rows_above_one_thread_get_their_gain_over_the_models_one_thread_row() -> None:
    rows = [
        {"model": "a", "threads": 1, "loomtune_ms": 10.0},
        {"model": "a", "threads": 2, "loomtune_ms": 6.0},
        {"model": "b", "threads": 2, "loomtune_ms": 3.0},  # no 1-thread row: nothing to say
        {"model": "c", "threads": 1, "loomtune_ms": None},  # wrong, not timed
        {"model": "c", "threads": 2, "loomtune_ms": 4.0},
    ]
    own_scaling(rows)
    assert rows[1]["x_own_1thread"] == pytest.approx(10 / 6)
    assert "x_own_1thread" not in rows[0] and "x_own_1thread" not in rows[2]
    assert "x_own_1thread" not in rows[4]
    timed_beside = {"model": "a", "threads": 2, "loomtune_ms": 6.0, "x_own_1thread": 1.9}
    own_scaling([rows[0], timed_beside])  # its 1-thread build timed in its own call wins
    assert timed_beside["x_own_1thread"] == 1.9


def test_thread_counts_parse_lists_and_refuse_nonsense() -> None:
    assert _thread_counts("1,2") == [1, 2] and _thread_counts("4") == [4]
    for bad in ("0", "1,x", "", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            _thread_counts(bad)


def test_tasks_above_one_thread_get_their_own_gain() -> None:
    one = [{"key": "k1", "ms": 2.0}, {"key": "k2", "ms": 1.0}, {"key": "k3"}]
    two = [{"key": "k1", "ms": 1.0}, {"key": "k2", "ms": 1.25}, {"key": "k3", "ms": 1.0}]
    rows = [
        {"model": "a", "threads": 1, "loomtune_ms": 3.0, "task_list": one},
        {"model": "a", "threads": 2, "loomtune_ms": 2.2, "task_list": two},
    ]
    own_scaling(rows)
    assert two[0]["x_own_1thread"] == pytest.approx(2.0)
    assert two[1]["x_own_1thread"] == pytest.approx(0.8)  # slower with a second core
    assert "x_own_1thread" not in two[2] and "x_own_1thread" not in one[0]


def test_task_profile_sums_each_tasks_calls() -> None:
    """A compiled model's per-task profile: every task timed, the calls of one summed."""
    from benchmarks.models import profile
    from codegen.model import CompiledModel
    from codegen.model_profile import task_times_ms
    from frontend.onnx import load_onnx
    from ir.graph.plan import build_plan
    from tests.models import encoder_layer

    plan = build_plan(load_onnx(encoder_layer(layers=2)))
    model = CompiledModel(plan)
    times = task_times_ms(model, rounds=2)
    assert set(times) == {t.task.key for t in plan.tasks}
    assert all(ms > 0 for ms in times.values())
    tasks = [{"key": t.task.key[:12]} for t in plan.tasks]
    profile.annotate(tasks, times)
    assert sum(t["time_share"] for t in tasks) == pytest.approx(1.0)
