"""`loomtune model inspect` and `run --model`, and `loomtune.load_model`: the contract's
fields, correctness against ONNX Runtime, one-line errors, and a stored schedule used."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import onnx
import pytest

import loomtune
from codegen.host import host_target
from frontend.onnx import load_onnx
from ir.errors import GraphInputError
from ir.graph.plan import build_plan
from ir.task import schedule_keys, with_layout_free
from service.cli.main import main
from service.db.store import open_database
from tests.models import conv_net
from tests.service.cli.modelkit import RUN_FIELDS, run_json
from tuner.database import TuningRecord
from tuner.space import default_space

INSPECT_FIELDS = {"model", "model_key", "inputs", "outputs", "tasks"}
TASK_FIELDS = {"key", "op", "pattern", "shapes", "count", "flops_share", "tuned"}
"""The contract's (shared/DESIGN.md, "Models"); beside them which implementation runs."""
IMPLEMENTATION_FIELDS = {"implementation", "alternatives"}


def test_inspect_json_has_the_contracts_fields(db, capsys, tmp_path: Path) -> None:
    path = tmp_path / "conv.onnx"
    onnx.save(conv_net(), path)
    code, r = run_json(capsys, "model", "inspect", str(path), "--json")
    assert code == 0 and set(r) == INSPECT_FIELDS
    assert r["inputs"] == [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert r["outputs"] == [{"name": "y", "shape": [1, 10], "dtype": "float32"}]
    assert r["model_key"] == load_onnx(path).key
    for t in r["tasks"]:
        assert set(t) == TASK_FIELDS | IMPLEMENTATION_FIELDS
        assert t["tuned"] is False and t["count"] >= 1
        assert t["implementation"] == "direct" and t["alternatives"] == []  # no 3×3 stride 1
    assert abs(sum(t["flops_share"] for t in r["tasks"]) - 1.0) < 1e-9
    assert {"max_pool2d", "dense", "fused"} <= {t["op"] for t in r["tasks"]}


def test_run_model_json_is_correct_against_onnxruntime(db, capsys, mlp_file: Path) -> None:
    code, r = run_json(capsys, "run", "--model", str(mlp_file), "--json")
    assert code == 0 and set(r) == RUN_FIELDS
    assert r["correct"] is True and r["max_abs_err"] < 1e-4
    assert r["tasks"] == r["kernels"] == 4 and r["tuned_tasks"] == 0 and r["threads"] == 1
    assert r["latency_ms"] > 0 and r["onnxruntime_ms"] > 0
    assert r["speedup_vs_onnxruntime"] == pytest.approx(r["onnxruntime_ms"] / r["latency_ms"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--model", "missing.onnx"], "missing.onnx"),
        (["model", "inspect", "missing.onnx"], "missing.onnx"),
        (["run", "matmul", "--model", "x.onnx"], "not several"),
    ],
)
def test_user_errors_are_one_line_exit_2(db, capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_load_model_checks_its_inputs(db, mlp_file: Path) -> None:
    model = loomtune.load_model(mlp_file, threads=1)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 64)).astype(np.float32)
    (y,) = model(x=x)
    assert y.shape == (4, 10) and np.allclose(y.sum(axis=1), 1.0, atol=1e-5)
    with pytest.raises(GraphInputError, match=r"input 'x': expected float32\[4,64\], got int32"):
        model(x.astype(np.int32))


def test_a_stored_schedule_is_used(db, capsys, mlp_file: Path) -> None:
    plan = build_plan(load_onnx(mlp_file))
    softmax = next(t for t in plan.tasks if t.pattern == "softmax")
    result = loomtune.tune(softmax.task, trials=2, database_url=db)
    assert result.record is not None
    code, r = run_json(capsys, "model", "inspect", str(mlp_file), "--json")
    assert code == 0
    tuned = {t["key"]: t["tuned"] for t in r["tasks"]}
    assert tuned[softmax.task.key] is True and sum(tuned.values()) == 1
    code, r = run_json(capsys, "run", "--model", str(mlp_file), "--json")
    assert code == 0 and r["correct"] is True and r["tuned_tasks"] == 1


def test_a_schedule_measured_whole_serves_a_model_task_without_its_own(
    db, capsys, mlp_file: Path
) -> None:
    """A model task's key names its weights (layout_free); records of the same computation
    with the weights measured per call (standalone, or stored before) still replay."""
    plan = build_plan(load_onnx(mlp_file))
    dense = next(t.task for t in plan.tasks if t.task.layout_free)
    whole = with_layout_free(dense, ())
    assert whole.key != dense.key and schedule_keys(dense) == (dense.key, whole.key)
    trace = default_space(whole.program, host_target(1)).sample(random.Random(0))
    record = TuningRecord.create(
        workload_key=whole.key,
        op=whole.op,
        params=whole.params,
        definition=whole.to_definition(),
        target=host_target(1).canonical(),
        trace=trace.to_json(),
        trace_hash=trace.hash,
        run_times_ms=[1.0, 1.0],
        status="ok",
    )
    assert open_database(db).commit_record(record)
    code, r = run_json(capsys, "model", "inspect", str(mlp_file), "--json")
    assert code == 0
    tuned = {t["key"]: t["tuned"] for t in r["tasks"]}
    assert tuned[dense.key] is True and sum(tuned.values()) == 1


def test_a_two_thread_build_runs_the_one_thread_best_until_its_own_is_faster(
    db, mlp_file: Path
) -> None:
    """A 2-thread build of a task tuned only at 1 thread runs the 1-thread best (serial),
    not the default nest; so it does while its own 2-thread best is slower (a serial
    schedule runs the same on more threads); a final choice on the 2-thread target (its
    finalists' or the model's in-model decision) stands."""
    from service.model import stored_schedules

    plan = build_plan(load_onnx(mlp_file))
    dense = next(t.task for t in plan.tasks if t.task.layout_free)
    database = open_database(db)

    def store(threads: int, seed: int, ms: float) -> TuningRecord:
        trace = default_space(dense.program, host_target(threads)).sample(random.Random(seed))
        record = TuningRecord.create(
            workload_key=dense.key,
            op=dense.op,
            params=dense.params,
            definition=dense.to_definition(),
            target=host_target(threads).canonical(),
            trace=trace.to_json(),
            trace_hash=trace.hash,
            run_times_ms=[ms, ms],
            status="ok",
        )
        assert database.commit_record(record)
        return record

    def borrowed() -> frozenset[str]:
        schedules = stored_schedules(plan, host_target(2).canonical(), database=database)
        assert schedules.tuned(dense.key)
        assert sum(schedules.tuned(t.task.key) for t in plan.tasks) == 1
        return schedules.borrowed

    store(1, 0, ms=1.0)
    assert borrowed() == {dense.key}
    slower = store(2, 1, ms=2.0)
    assert borrowed() == {dense.key}  # its own is slower
    two = host_target(2).canonical()
    database.commit_final(dense.key, two, slower.record_id, 2.0)
    assert borrowed() == frozenset()  # a final choice on the target stands
    database.commit_final(dense.key, two, store(2, 2, ms=0.5).record_id, 0.5)
    assert borrowed() == frozenset()
