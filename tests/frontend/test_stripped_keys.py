"""The coordinator cuts a stripped graph into the client's tasks: same keys, the same
inputs bound to constants (`Task.layout_free`), though the weights are zeros."""

from __future__ import annotations

import pytest

from frontend.onnx import load_onnx
from frontend.stripped import load_stripped, strip_graph
from ir.graph.plan import build_plan
from tests.models import conv_net, encoder_layer


@pytest.mark.parametrize("model", [conv_net, encoder_layer])
def test_the_stripped_graph_cuts_the_same_tasks(model) -> None:
    graph = load_onnx(model())
    stripped = load_stripped(strip_graph(graph), max_bytes=1 << 30)
    ours, theirs = build_plan(graph), build_plan(stripped)
    assert [t.task.key for t in ours.tasks] == [t.task.key for t in theirs.tasks]
    assert [t.task.layout_free for t in ours.tasks] == [t.task.layout_free for t in theirs.tasks]
    assert any(t.task.layout_free for t in ours.tasks)
    # a conv's weight (in1) is a load-time result (OIHW -> HWIO, BN folded): constant too
    if model is conv_net:
        convs = [t.task for t in ours.tasks if "conv2d" in t.pattern]
        assert convs and all(t.layout_free == ("in1", "in2") for t in convs)
