"""Fusion: the models of tests/models.py cut into the expected tasks, repeated layers sharing
them, weights outside every task, and each rewrite keeping the interpreter's answer."""

from __future__ import annotations

import numpy as np
import pytest

from frontend.onnx import load_onnx
from ir.graph import TensorType, make_graph, make_node, run_graph
from ir.graph.layout import to_nhwc
from ir.graph.plan import ModelPlan, build_plan, lower_graph
from ir.graph.rewrite import canonicalize
from tests.models import conv_net, encoder_layer, mlp

F32 = "float32"


def _inputs(graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, t.shape).astype(np.float32) for _, t in graph.inputs]


def _same(a, b, graph) -> None:
    xs = _inputs(graph)
    for x, y in zip(run_graph(a, xs), run_graph(b, xs)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def _patterns(plan: ModelPlan) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in plan.tasks:
        out[t.pattern] = out.get(t.pattern, 0) + t.count
    return out


@pytest.fixture(scope="module")
def encoder3():
    return load_onnx(encoder_layer(layers=3))


def test_encoder_fuses_epilogues_and_layer_norms(encoder3) -> None:
    plan = build_plan(encoder3)
    patterns = _patterns(plan)
    assert patterns["matmul+add+gelu"] == 3  # the erf-form GELU recognised, in the epilogue
    assert patterns["layer_norm"] == 6  # LayerNormalization and the decomposed form alike
    assert patterns["softmax"] == 3
    assert "matmul+add+add" in patterns  # the residual add joins the projection's epilogue
    # the heads' transposes are read through by the attention matmuls, never a kernel
    assert not any(p == "transpose" for p in patterns)
    assert {t.op for t in plan.tasks if t.pattern == "layer_norm"} == {"layer_norm"}


def test_repeated_layers_share_their_tasks(encoder3) -> None:
    one = build_plan(load_onnx(encoder_layer(layers=1)))
    three = build_plan(encoder3)
    assert [t.task.key for t in three.tasks] == [t.task.key for t in one.tasks]
    assert [t.count for t in three.tasks] == [3 * t.count for t in one.tasks]
    assert len(three.steps) == 3 * len(one.steps)


def test_weights_are_task_inputs_never_part_of_a_task() -> None:
    a = build_plan(load_onnx(encoder_layer(seed=0)))
    b = build_plan(load_onnx(encoder_layer(seed=7)))
    assert [t.task.key for t in a.tasks] == [t.task.key for t in b.tasks]
    weights = {v for v, arr in a.graph.constants.items() if arr.size > 1}
    read = {arg.value for s in a.steps for arg in s.inputs}
    assert weights <= read  # every weight reaches its kernel as an argument


def test_conv_net_runs_nhwc_with_weights_rearranged_at_load() -> None:
    graph = load_onnx(conv_net())
    plan = build_plan(graph)
    convs = [n for n in plan.graph.nodes if n.op == "conv2d"]
    assert convs and all(n.attr("layout") == "NHWC" for n in convs)
    hwio = [n for n in plan.prepare if n.op == "transpose" and n.attr("perm") == (2, 3, 1, 0)]
    assert len(hwio) == len(convs)
    patterns = _patterns(plan)
    assert (
        "transpose+conv2d+clip" in patterns
    )  # BN folded, ReLU6 in the epilogue, NCHW input read through
    assert "conv2d+relu" in patterns
    # one layout change at the input (read through); none back: after the global pool it is a view
    transposes = [n for n in plan.graph.nodes if n.op == "transpose"]
    assert len([n for n in transposes if n not in plan.prepare]) == 1
    _same(graph, plan.graph, graph)


def test_nhwc_cancels_between_consecutive_convolutions() -> None:
    rng = np.random.default_rng(0)
    consts = {
        "w1": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
        "w2": rng.standard_normal((8, 8, 1, 1)).astype(np.float32),
        "s": rng.standard_normal((8, 1, 1)).astype(np.float32),
    }
    nodes = [
        make_node("conv2d", ["x", "w1"], ["a"], pads=(1, 1, 1, 1)),
        make_node("mul", ["a", "s"], ["b"]),
        make_node("conv2d", ["b", "w2"], ["c"]),
        make_node("add", ["c", "b"], ["y"]),
    ]
    g = make_graph("convs", [("x", TensorType((1, 4, 8, 8), F32))], nodes, consts, ["y"])
    lowered = to_nhwc(g)
    moves = [n for n in lowered.nodes if n.op == "transpose" and n.inputs[0] in ("x", "y_nhwc")]
    assert len(moves) == 2  # into NHWC at the input, back at the output, nothing between
    _same(g, lowered, g)
    assert _patterns(build_plan(g)) == {"transpose+conv2d+mul": 1, "conv2d+add+transpose": 1}


def _decomposed_layer_norm(gamma: bool) -> object:
    rng = np.random.default_rng(1)
    consts = {
        "two": np.float32(2.0),
        "eps": np.float32(1e-5),
        "g": rng.standard_normal(16).astype(np.float32),
        "b": rng.standard_normal(16).astype(np.float32),
    }
    nodes = [
        make_node("reduce_mean", ["x"], ["m"], axes=(2,), keepdims=1),
        make_node("sub", ["x", "m"], ["d"]),
        make_node("pow", ["d", "two"], ["p"]),
        make_node("reduce_mean", ["p"], ["v"], axes=(2,), keepdims=1),
        make_node("add", ["v", "eps"], ["e"]),
        make_node("sqrt", ["e"], ["s"]),
        make_node("div", ["d", "s"], ["n"]),
    ]
    if gamma:
        nodes += [make_node("mul", ["n", "g"], ["ng"]), make_node("add", ["ng", "b"], ["y"])]
    else:
        nodes += [make_node("relu", ["n"], ["y"])]
    return make_graph("ln", [("x", TensorType((2, 8, 16), F32))], nodes, consts, ["y"])


@pytest.mark.parametrize("gamma", [True, False])
def test_decomposed_layer_norm_becomes_one_layer_norm(gamma: bool) -> None:
    g = _decomposed_layer_norm(gamma)
    c = canonicalize(g)
    assert [n.op for n in c.nodes] == (["layer_norm"] if gamma else ["layer_norm", "relu"])
    _same(g, c, g)
    plan = build_plan(g)
    assert list(_patterns(plan)) == (["layer_norm"] if gamma else ["layer_norm+relu"])


def test_a_layer_norm_pattern_whose_inner_value_escapes_is_left_alone() -> None:
    g = _decomposed_layer_norm(True)
    g = g.with_nodes(g.nodes, outputs=("y", "m"))  # the mean is an output too
    assert "layer_norm" not in [n.op for n in canonicalize(g).nodes]


@pytest.mark.parametrize("order", ["x*c*half", "x*(c*half)", "(x*half)*c"])
def test_erf_gelu_in_each_exporter_order_becomes_gelu(order: str) -> None:
    consts = {"r2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    nodes = [
        make_node("div", ["x", "r2"], ["a"]),
        make_node("erf", ["a"], ["e"]),
        make_node("add", ["e", "one"], ["c"]),
    ]
    if order == "x*c*half":
        nodes += [make_node("mul", ["x", "c"], ["t"]), make_node("mul", ["t", "half"], ["y"])]
    elif order == "x*(c*half)":
        nodes += [make_node("mul", ["c", "half"], ["t"]), make_node("mul", ["x", "t"], ["y"])]
    else:
        nodes += [make_node("mul", ["x", "half"], ["t"]), make_node("mul", ["t", "c"], ["y"])]
    g = make_graph("gelu", [("x", TensorType((4, 8), F32))], nodes, consts, ["y"])
    c = canonicalize(g)
    assert [n.op for n in c.nodes] == ["gelu"]
    _same(g, c, g)


def test_unit_dim_transpose_is_a_view_and_transposes_compose() -> None:
    nodes = [
        make_node("transpose", ["x"], ["a"], perm=(0, 2, 3, 1)),  # [1,1,1,8]: only unit dims move
        make_node("transpose", ["z"], ["b"], perm=(1, 0, 2)),
        make_node("transpose", ["b"], ["c"], perm=(2, 1, 0)),
    ]
    inputs = [("x", TensorType((1, 8, 1, 1), F32)), ("z", TensorType((2, 3, 4), F32))]
    g = make_graph("t", inputs, nodes, {}, ["a", "c"])
    c = canonicalize(g)
    assert [(n.op, n.inputs) for n in c.nodes] == [("reshape", ("x",)), ("transpose", ("z",))]
    _same(g, c, g)


def test_every_lowering_keeps_the_interpreters_answer() -> None:
    for proto in (mlp(), encoder_layer(opset=13), conv_net()):
        g = load_onnx(proto)
        _same(g, lower_graph(g), g)
