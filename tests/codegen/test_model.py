"""Compiled models with default schedules: correct against the graph interpreter and ONNX
Runtime, one kernel per distinct task, inputs checked with one-line errors."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from codegen.model import CompiledModel
from frontend.onnx import load_onnx
from ir.errors import GraphInputError
from ir.graph import run_graph
from ir.graph.plan import build_plan
from tests.models import conv_net, encoder_layer, mlp

MODELS = {
    "mlp": lambda: mlp(),
    "encoder": lambda: encoder_layer(layers=2),
    "encoder_opset13": lambda: encoder_layer(opset=13),  # every layer norm decomposed
    "conv_net": lambda: conv_net(),
}


def _close(out: np.ndarray, ref: np.ndarray) -> None:
    """DESIGN.md's rule for models: max|out - ref| <= 1e-3 max|ref| + 1e-5, no NaN."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert not np.isnan(out).any()
    assert np.abs(out - ref).max() <= 1e-3 * np.abs(ref).max() + 1e-5


@pytest.fixture(scope="module", params=list(MODELS))
def compiled(request):
    proto = MODELS[request.param]()
    graph = load_onnx(proto)
    return proto, graph, CompiledModel(build_plan(graph))


def test_default_schedules_match_the_interpreter_and_onnxruntime(compiled) -> None:
    proto, graph, model = compiled
    rng = np.random.default_rng(3)
    xs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for _, t in graph.inputs]
    outs = model(*xs)
    for out, ref in zip(outs, run_graph(graph, xs)):
        _close(out, ref)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(session.get_inputs(), xs)}
    for out, ref in zip(outs, session.run(None, feed)):
        _close(out, ref)


def test_calls_are_repeatable_by_name_and_return_copies(compiled) -> None:
    _, graph, model = compiled
    rng = np.random.default_rng(4)
    xs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for _, t in graph.inputs]
    first = model(*xs)
    first[0][...] = np.nan  # the caller's copy, not the arena
    again = model(**dict(zip(graph.input_names, xs)))
    np.testing.assert_array_equal(again[0], model(*xs)[0])
    assert not np.isnan(again[0]).any()


def test_one_kernel_per_distinct_task() -> None:
    plan = build_plan(load_onnx(encoder_layer(layers=2)))
    model = CompiledModel(plan)
    assert len(model.kernels) == len(plan.tasks) < model.kernel_calls == len(plan.steps)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda x: [x[:, :8]], "input 'x': expected float32[4,64], got float32[4,8]"),
        (lambda x: [x.astype(np.float64)], "input 'x': expected float32[4,64], got float64[4,64]"),
        (lambda x: [x, x], "takes 1 inputs ['x'], got 2"),
    ],
)
def test_a_wrong_input_is_one_line_naming_it(make, message: str) -> None:
    model = CompiledModel(build_plan(load_onnx(mlp())))
    x = np.zeros((4, 64), np.float32)
    with pytest.raises(GraphInputError) as e:
        model(*make(x))
    assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(GraphInputError, match=r"inputs missing \['x'\]"):
        model(y=x)
