"""A task with several tuned implementations (a conv directly and by Winograd) runs the one
that was faster inside the model, whatever the stored times taken alone said
(`service.model_implementations`); the in-model times become the final ones."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnx
import pytest

from codegen.host import host_target
from codegen.model import CompiledModel
from frontend.onnx import load_onnx
from ir.graph import run_graph
from ir.graph.plan import build_plan
from ir.task import Task
from service.model import sample_inputs, stored_schedules
from service.model_implementations import settle_implementations
from tests.models import res_block
from tuner.database import InMemoryDatabase
from tuner.runner import MeasureResult
from tuner.search.loop import make_record
from tuner.space import default_space

ONE = host_target(1)


def _store(db: InMemoryDatabase, task: Task, ms: float) -> None:
    trace = default_space(task.program, ONE).sample(random.Random(0))
    assert db.commit_record(make_record(task, ONE.canonical(), trace, MeasureResult("ok", (ms,))))


def test_the_model_runs_the_implementation_faster_inside_it(tmp_path: Path) -> None:
    """At 8 channels Winograd's eight nests cost more than the 3×3 conv they replace (about
    5× on a znver4 VM); stored times claiming Winograd 1,000× faster lose to the model."""
    path = tmp_path / "block.onnx"
    onnx.save(res_block(), path)
    graph = load_onnx(path)
    plan = build_plan(graph)
    db = InMemoryDatabase()
    contested = [t for t in plan.tasks if t.alternatives]
    assert len(contested) == 2
    for t in plan.tasks:
        for name, task in t.implementations:
            _store(db, task, 0.001 if name == "winograd" else 1.0)
    canonical = ONE.canonical()
    before = stored_schedules(plan, canonical, database=db).choose(plan)
    assert {t.implementation for t in before.tasks if t.alternatives} == {"winograd"}

    choices = settle_implementations(plan, ONE, db, sample_inputs(graph), model_name="block")

    assert sorted(c.pattern for c in choices) == sorted(t.pattern for t in contested)
    for c in choices:
        assert (c.reigning, c.challenger) == ("winograd", "direct")
        assert c.switched and c.challenger_ms < c.reigning_ms
    for t in contested:  # both implementations' in-model times are final now, per call
        for name, task in t.implementations:
            c = next(c for c in choices if c.pattern == t.pattern)
            final = db.final(task.key, canonical)
            assert final is not None
            want = c.reigning_ms if name == "winograd" else c.challenger_ms
            assert final.retimed_ms == pytest.approx(want)
    schedules = stored_schedules(plan, canonical, database=db)
    after = schedules.choose(plan)
    assert {t.implementation for t in after.tasks if t.alternatives} == {"direct"}
    model = CompiledModel(after, schedules.programs, ONE)
    inputs = sample_inputs(graph)
    (want,) = run_graph(graph, inputs)
    np.testing.assert_allclose(model(*inputs)[0], want, rtol=1e-4, atol=1e-4)
    # Deciding again: direct reigns now and defends its place in the model.
    again = settle_implementations(plan, ONE, db, inputs)
    assert [(c.reigning, c.switched) for c in again] == [("direct", False)] * 2


def test_nothing_to_decide_without_a_tuned_alternative(tmp_path: Path) -> None:
    path = tmp_path / "block.onnx"
    onnx.save(res_block(), path)
    graph = load_onnx(path)
    plan = build_plan(graph)
    db = InMemoryDatabase()
    for t in plan.tasks:  # only the direct implementations are tuned
        _store(db, t.task, 1.0)
    assert settle_implementations(plan, ONE, db, sample_inputs(graph)) == []
    assert all(db.final(t.task.key, ONE.canonical()) is None for t in plan.tasks)
