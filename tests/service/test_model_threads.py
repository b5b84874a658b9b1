"""Above one thread a model's tasks choose, inside the model, between the target's own best
and a best tuned at fewer threads (`service.model_threads`); the choice is a final one."""

from __future__ import annotations

import random
from pathlib import Path

import onnx
import pytest

from codegen.host import host_target
from frontend.onnx import load_onnx
from ir.graph.plan import ModelPlan, build_plan
from service import model_threads
from service.in_model import WORKER
from service.model import sample_inputs, stored_schedules
from service.model_threads import challenger_wins, settle_thread_counts
from tests.models import mlp
from tuner.database import InMemoryDatabase, TuningRecord
from tuner.space import default_space

ONE, TWO = host_target(1), host_target(2)


def test_the_reigning_schedule_keeps_its_place_within_the_margin() -> None:
    m = model_threads.MARGIN
    assert challenger_wins(1.0, 1.0 - 2 * m)
    assert not challenger_wins(1.0, 1.0 - m / 2)
    assert not challenger_wins(1.0, 1.0)


def _store(db: InMemoryDatabase, plan: ModelPlan) -> dict[str, tuple[TuningRecord, TuningRecord]]:
    """Per task: a 1-thread record (1 ms) and a different, faster 2-thread one (0.5 ms)."""
    out = {}
    for t in plan.tasks:
        task = t.task
        pair = []
        for target, seed, ms in ((ONE, 0, 1.0), (TWO, 1, 0.5)):
            space = default_space(task.program, target)
            traces = (space.sample(random.Random(seed + 7 * n)) for n in range(50))
            taken = {r.trace_hash for r in pair}
            trace = next(tr for tr in traces if tr.hash not in taken)
            record = TuningRecord.create(
                workload_key=task.key,
                op=task.op,
                params=task.params,
                definition=task.to_definition(),
                target=target.canonical(),
                trace=trace.to_json(),
                trace_hash=trace.hash,
                run_times_ms=[ms, ms],
                status="ok",
            )
            assert db.commit_record(record)
            pair.append(record)
        out[task.key] = (pair[0], pair[1])
    return out


@pytest.mark.parametrize("margin", [-100.0, 0.999])
def test_the_choice_in_the_model_becomes_the_final_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, margin: float
) -> None:
    """A margin no time can meet keeps the reigning 2-thread best; a negative one always
    takes the 1-thread schedule, stored on the 2-thread target from its in-model times."""
    monkeypatch.setattr(model_threads, "MARGIN", margin)
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    graph = load_onnx(path)
    plan = build_plan(graph)
    db = InMemoryDatabase()
    stored = _store(db, plan)
    two = TWO.canonical()

    choices = settle_thread_counts(plan, TWO, db, sample_inputs(graph), model_name="mlp")

    assert sorted(c.key for c in choices) == sorted(stored)
    for c in choices:
        one, own = stored[c.key]
        assert c.fewer is (margin < 0) and c.own_ms > 0 and c.fewer_ms > 0
        best, final = db.best(c.key, two), db.final(c.key, two)
        assert best is not None and final is not None and final.record_id == best.record_id
        if c.fewer:
            assert best.trace_hash == one.trace_hash and best.worker == WORKER
            assert final.retimed_ms == pytest.approx(c.fewer_ms)
        else:
            assert best.record_id == own.record_id
            assert final.retimed_ms == pytest.approx(c.own_ms)
    assert stored_schedules(plan, two, database=db).borrowed == frozenset()
    # Deciding again: the 1-thread schedule is now the target's own (nothing to decide), or
    # the 2-thread best defends its place again.
    again = settle_thread_counts(plan, TWO, db, sample_inputs(graph))
    assert [c.fewer for c in again] == ([] if margin < 0 else [False] * len(stored))
    assert len(db.training_records(two)) == len(stored) * (2 if margin < 0 else 1)


def test_nothing_to_decide_at_one_thread(tmp_path: Path) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    graph = load_onnx(path)
    assert settle_thread_counts(build_plan(graph), ONE, InMemoryDatabase(), []) == []
