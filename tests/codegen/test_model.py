"""Compiled models with default schedules: correct against the graph interpreter and ONNX
Runtime, one kernel per distinct task, inputs checked with one-line errors."""

from __future__ import annotations

import gc
import types
import weakref

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


def test_running_the_steps_one_by_one_is_one_inference(compiled) -> None:
    """What per-kernel profiles rely on: the steps in order compute what `run` does."""
    _, graph, model = compiled
    rng = np.random.default_rng(5)
    xs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for _, t in graph.inputs]
    expected = model(*xs)
    model.set_inputs(*[np.zeros_like(x) for x in xs])
    model.run()
    model.set_inputs(*xs)
    for i in range(model.kernel_calls):
        model.run_step(i)
        assert model.step_task(i) in model.tasks
    np.testing.assert_array_equal(model.read_outputs()[0], expected[0])


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


def _array_owners(*roots: object) -> dict[int, int]:
    """The memory blocks (an owning array's id: its bytes) reachable from `roots`, following
    containers, instances, closures and array bases but not modules, types or globals."""
    owners: dict[int, int] = {}
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            while isinstance(obj.base, np.ndarray):
                obj = obj.base
            owners[id(obj)] = obj.nbytes
        elif isinstance(obj, types.FunctionType):
            stack += [*(obj.__closure__ or ()), *(obj.__defaults__ or ())]
        else:
            stack += gc.get_referents(obj)
    return owners


def test_the_weights_are_held_once() -> None:
    """The conv net's weights are rearranged at load (OIHW → HWIO): the compiled model holds
    the arena and the arrays its kernels read, not the originals beside them."""
    graph = load_onnx(conv_net())
    plan = build_plan(graph)
    conv_weights = {v for node in plan.prepare for v in node.inputs if v in plan.graph.constants}
    assert conv_weights, "the conv net has no weight rearranged at load"
    originals = [weakref.ref(plan.graph.constants[v]) for v in conv_weights]
    model = CompiledModel(plan)
    read = {plan.base(a.value) for s in plan.steps for a in s.inputs} - set(plan.slots)
    assert set(model.constants) == read
    expected = _array_owners(model.arena, *model.constants.values())
    assert sum(_array_owners(model).values()) == sum(expected.values())
    assert model.weight_bytes == sum(a.nbytes for a in model.constants.values())
    weights = sum(a.nbytes for a in graph.constants.values())
    assert model.weight_bytes <= weights
    kept = [k for k in model.constants if k in plan.graph.constants]
    assert kept and all(model.constants[k] is plan.graph.constants[k] for k in kept)  # no copy
    del graph, plan
    gc.collect()
    assert all(ref() is None for ref in originals)  # the OIHW copies are gone
    x = np.random.default_rng(5).uniform(-1, 1, model.inputs[0][1].shape).astype(np.float32)
    assert not np.isnan(model(x)[0]).any()
