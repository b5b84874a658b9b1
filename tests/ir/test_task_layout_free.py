"""A task's constant inputs (`layout_free`) are part of its workload and key: a kernel
whose weight is a model's load-time constant is another workload than one whose weight
arrives per call; standalone operators keep their keys."""

from __future__ import annotations

import pytest

from frontend.onnx import load_onnx
from ir.errors import WorkloadError
from ir.graph.plan import build_plan
from ir.prepack import layout_free, per_call
from ir.schedule import Schedule
from ir.schedule.state import all_blocks
from ir.serialize import structural_hash
from ir.task import library_task, task_from_spec, with_layout_free
from tests.models import encoder_layer

DENSE = {"m": 8, "n": 48, "k": 20, "bias": 1, "relu": 0}


def test_constants_change_the_key_and_travel_in_the_spec() -> None:
    task = library_task("dense", DENSE)
    assert task.layout_free == () and "layout_free" not in task.spec()
    assert task.key == structural_hash(task.program)
    free = with_layout_free(task, ["bias", "W"])
    assert free.layout_free == ("W", "bias")  # sorted: one spelling, one key
    assert free.key != task.key
    assert free.key == with_layout_free(task, ["W", "bias", "W"]).key
    assert free.key != with_layout_free(task, ["W"]).key
    assert with_layout_free(task, []).key == task.key
    spec = free.spec()
    assert spec == {"op": "dense", "params": free.params, "layout_free": ["W", "bias"]}
    assert task_from_spec(spec).key == free.key  # what a measurement process rebuilds
    assert task_from_spec(task.spec()).key == task.key


@pytest.mark.parametrize(
    ("free", "message"),
    [(["Q"], "Q is not an input of dense"), ("W", "a list of input names"), ([1], "a list")],
)
def test_a_wrong_layout_free_names_the_inputs(free, message: str) -> None:
    spec = {**library_task("dense", DENSE).spec(), "layout_free": free}
    with pytest.raises(WorkloadError, match=message):
        task_from_spec(spec)


def test_a_model_task_keys_its_weights() -> None:
    plan = build_plan(load_onnx(encoder_layer(layers=1)))
    dense = [t.task for t in plan.tasks if t.task.op == "dense"]
    assert dense and all(t.layout_free == ("W", "bias") for t in dense)
    standalone = library_task("dense", dense[0].params)
    assert dense[0].key != standalone.key
    assert with_layout_free(standalone, ["W", "bias"]).key == dense[0].key
    # attention's matmuls read two activations: nothing is constant
    assert any(t.task.is_custom and t.task.layout_free == () for t in plan.tasks)


def test_a_schedule_keeps_its_constants_and_per_call_drops_their_packing() -> None:
    task = library_task("matmul", {"m": 6, "n": 64, "k": 9})
    model = with_layout_free(task, ["B"])
    sch = Schedule(model.program)
    sch.pack_panels("C", "B", 16)
    scheduled = sch.program
    assert layout_free(scheduled) == ("B",)  # schedules keep the naive program's attrs
    main = per_call(scheduled)
    assert [b.name for b in main.inputs] == ["A", "B_packed"]
    assert [r.block.name for r in all_blocks(main)] == ["C"]
    assert model.hoist(scheduled)[1] == main
    standalone = Schedule(task.program)
    standalone.pack_panels("C", "B", 16)
    assert per_call(standalone.program) is standalone.program  # packed per call, timed so
    assert task.hoist(standalone.program) == (None, standalone.program)
