"""The task scheduler: one budget over weighted workloads (simulated runner)."""

from __future__ import annotations

import pytest

from ir.task import library_task
from tuner.database import InMemoryDatabase
from tuner.search.strategy import SearchContext, make_strategy
from tuner.search.task_scheduler import (
    ScheduledTask,
    SchedulerConfig,
    TaskScheduler,
    gradient,
    pick_task,
    scheduled_tasks,
    weighted_latency,
)
from tuner.simulated import SimulatedRunner
from tuner.space.simple import SimpleSpace

SPECS = [
    ("matmul", {"m": 96, "n": 80, "k": 48}, 1.0),
    ("matmul", {"m": 2, "n": 2, "k": 2}, 4.0),  # 8 candidates: runs out
    ("softmax", {"m": 48, "n": 64}, 2.0),
]


def _tasks(db: InMemoryDatabase, seed: int = 0) -> list[ScheduledTask]:
    out = []
    for op, params, weight in SPECS:
        task = library_task(op, params)
        context = SearchContext(task, "sim", SimpleSpace(task.program), db)
        out.append(ScheduledTask(task, weight, make_strategy("replay", context, seed)))
    return out


@pytest.mark.parametrize("policy", ["round_robin", "gradient"])
def test_the_budget_is_spent_once_over_every_task(policy: str) -> None:
    db = InMemoryDatabase()
    tasks = _tasks(db)
    scheduler = TaskScheduler(
        tasks,
        target="sim",
        runner=SimulatedRunner(),
        database=db,
        config=SchedulerConfig(policy=policy, batch_size=6),
    )
    done = scheduler.run(60)
    assert done == 60 == sum(t.run.trials_done for t in tasks)
    assert len(db.training_records("sim")) == 60
    assert all(t.run.trials_done > 0 for t in tasks)
    if policy == "round_robin":
        assert tasks[1].exhausted and tasks[1].run.trials_done == 8
    for t in tasks:
        assert len(t.run.history) == t.run.trials_done
        assert t.best == min(
            r.median_ms for r in db.training_records("sim") if r.workload_key == t.task.key
        )
    total = weighted_latency(tasks)
    assert total == pytest.approx(sum(t.weight * t.best for t in tasks))
    if policy == "round_robin":
        # every live task in turn
        assert scheduler.order[:3] == [0, 1, 2]


def test_gradient_spends_where_weighted_latency_drops() -> None:
    db = InMemoryDatabase()
    tasks = _tasks(db)
    scheduler = TaskScheduler(
        tasks,
        target="sim",
        runner=SimulatedRunner(),
        database=db,
        config=SchedulerConfig(policy="gradient", batch_size=4, epsilon=0.0),
    )
    scheduler.run(48)
    # the tiny matmul's weighted latency is negligible: after its warm-up batch it gets nothing
    assert tasks[1].run.trials_done == 4
    assert tasks[0].run.trials_done + tasks[2].run.trials_done == 44
    assert scheduler.order[:3] == [0, 1, 2]  # warm-up: one batch each


def test_an_alternative_well_behind_that_stopped_improving_gets_no_gradient() -> None:
    """Only the fastest of a group counts: the other must first get below it."""
    stalled = [5.0] * 40  # best 5 ms, nothing gained over the window
    improving = [9.0 - 0.1 * i for i in range(40)]  # 5.1 ms, dropping 0.1 ms per trial
    assert gradient(stalled, 1.0, 32) > 0  # alone: the optimistic share
    assert gradient(stalled, 1.0, 32, ahead=2.0) == 0.0  # 3 ms behind, not moving
    assert gradient(improving, 1.0, 32, ahead=5.0) > 0.0  # close and dropping fast
    assert gradient(stalled, 1.0, 32, ahead=6.0) == gradient(stalled, 1.0, 32)  # it leads
    fast, slow, other = [2.0] * 40, stalled, [1.0] * 40
    config = SchedulerConfig(epsilon=0.0)
    rng = __import__("random").Random(0)
    histories, weights = [fast, slow, other], [1.0, 1.0, 1.0]
    assert pick_task(histories, weights, [1, 2], config, 0, rng) == 1  # apart: slow's share
    assert pick_task(histories, weights, [1, 2], config, 0, rng, [0, 0, 1]) == 2  # grouped


def test_untried_tasks_go_heaviest_first() -> None:
    """A budget that ends before every task is tried leaves the smallest untried: the
    heaviest by weight × iterations first, in order among equals, the tried ones after."""
    from tuner.search.task_scheduler import iterations

    config = SchedulerConfig(epsilon=0.0)
    rng = __import__("random").Random(0)
    histories = [[], [], [3.0], []]
    live = [0, 1, 2, 3]
    assert pick_task(histories, [1.0] * 4, live, config, 0, rng) == 0  # no priorities: in order
    assert pick_task(histories, [1.0] * 4, live, config, 0, rng, None, [1, 5, 9, 5]) == 1
    assert pick_task(histories, [1.0] * 4, [0, 3], config, 0, rng, None, [1, 5, 9, 5]) == 3
    small = library_task("matmul", {"m": 8, "n": 8, "k": 8})
    large = library_task("matmul", {"m": 64, "n": 8, "k": 8})
    assert iterations(small.program) < iterations(large.program)
    assert iterations(large.program) >= 64 * 8 * 8


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        SchedulerConfig(policy="lottery")


def test_the_tasks_searches_share_one_cost_model_trained_on_every_task() -> None:
    db = InMemoryDatabase()
    tasks = scheduled_tasks(
        [(library_task(op, params), weight) for op, params, weight in SPECS],
        target="sim",
        database=db,
        space_of=lambda t: SimpleSpace(t.program),
        strategy="evolutionary",
        seed=0,
    )
    model = tasks[0].strategy.model  # type: ignore[attr-defined]
    assert all(t.strategy.model is model for t in tasks)  # type: ignore[attr-defined]
    scored_by_trained_model: list[bool] = []
    predict = model.predict
    model.predict = lambda features: (
        scored_by_trained_model.append(model.trained),
        predict(features),
    )[1]
    scheduler = TaskScheduler(
        tasks,
        target="sim",
        runner=SimulatedRunner(),
        database=db,
        config=SchedulerConfig(policy="round_robin", batch_size=8),
    )
    scheduler.run(40)
    assert model.trained and model.samples == 40
    assert set(model.groups) == {t.task.key for t in tasks}
    # Each task has 8 or 16 results of its own, fewer than the 16 a model of its own needs before
    # its scores count: the third task's first batch was picked by the model the others trained.
    assert any(scored_by_trained_model)


def test_a_shape_tuned_beside_another_of_its_operator_starts_from_the_others_best() -> None:
    """Reuse across shapes inside one scheduler run: the database is empty when the searches
    are made, so the second matmul can only start from the first one's best if it looks
    again before each batch; every best the first one had when the second proposed is
    repaired into the second's seeds, and the first such seed is measured."""
    from codegen.host import host_target
    from tuner.space import default_space

    target = host_target(1)
    db = InMemoryDatabase()
    first, second = (
        library_task("matmul", p)
        for p in ({"m": 128, "n": 128, "k": 128}, {"m": 120, "n": 128, "k": 136})
    )
    tasks = scheduled_tasks(
        [(first, 1.0), (second, 1.0)],
        target=target.canonical(),
        database=db,
        space_of=lambda t: default_space(t.program, target),
        strategy="evolutionary",
        seed=0,
    )
    strategy = tasks[1].strategy
    assert strategy.seeds == []  # type: ignore[attr-defined]
    bests_seen: list[str] = []
    propose = strategy.propose
    strategy.propose = lambda n: (
        bests_seen.append(db.best(first.key, target.canonical()).record_id),
        propose(n),
    )[1]  # type: ignore[method-assign,union-attr]
    scheduler = TaskScheduler(
        tasks,
        target=target.canonical(),
        runner=SimulatedRunner(),
        database=db,
        config=SchedulerConfig(policy="round_robin", batch_size=8),
    )
    scheduler.run(48)
    assert len(bests_seen) == 3
    assert set(bests_seen) <= strategy._seed_sources  # type: ignore[attr-defined]
    seeds = strategy.seeds  # type: ignore[attr-defined]
    assert len(seeds) >= 2
    assert db.has_measured(second.key, target.canonical(), seeds[0].hash)
