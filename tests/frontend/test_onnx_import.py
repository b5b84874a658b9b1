"""The ONNX importer against ONNX Runtime: each shared model (tests/models.py) imported,
interpreted, and compared with onnxruntime on seeded random inputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from frontend.onnx import load_onnx
from ir.graph import run_graph
from tests.models import conv_net, encoder_layer, mlp


def _compare(model: onnx.ModelProto, seed: int = 1) -> None:
    graph = load_onnx(model)
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(t.shape).astype(t.dtype) for n, t in graph.inputs}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})
    got = run_graph(graph, feeds)
    assert len(got) == len(want)
    for out, ref in zip(got, want):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        assert not np.isnan(out).any()
        assert np.abs(out - ref).max() <= 1e-3 * np.abs(ref).max() + 1e-5


@pytest.mark.parametrize("opset", [11, 13, 17, 21])
def test_mlp_matches_onnxruntime(opset: int) -> None:
    _compare(mlp(opset=opset))


@pytest.mark.parametrize(("opset", "layers"), [(13, 1), (17, 1), (18, 2), (21, 1)])
def test_encoder_layer_matches_onnxruntime(opset: int, layers: int) -> None:
    _compare(encoder_layer(opset=opset, layers=layers))


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_conv_net_matches_onnxruntime(opset: int) -> None:
    _compare(conv_net(opset=opset))


def test_encoder_reshape_targets_are_folded_to_static_attributes() -> None:
    graph = load_onnx(encoder_layer())
    ops = {n.op for n in graph.nodes}
    assert ops <= {
        "matmul",
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "sqrt",
        "erf",
        "reshape",
        "transpose",
        "softmax",
        "layer_norm",
        "reduce_mean",
    }
    shapes = {n.attr("shape") for n in graph.nodes if n.op == "reshape"}
    assert shapes == {(1, 16, 4, 16), (1, 16, 64)}
    assert graph.outputs == ("y",) and graph.input_names == ("x",)
    assert all(n.name for n in graph.nodes)


def test_batch_norm_folds_into_the_conv_before_it() -> None:
    graph = load_onnx(conv_net())
    ops = [n.op for n in graph.nodes]
    assert ops.count("conv2d") == 3
    # two BatchNormalizations follow a Conv and vanish; the third becomes mul + add
    assert ops.count("mul") == 1 and ops.count("add") == 2
    first = graph.nodes[0]
    assert first.op == "conv2d" and first.inputs[2] in graph.constants
    assert first.attr("layout") == "NCHW" and graph.types[first.inputs[1]].shape == (16, 3, 3, 3)
    depthwise = next(n for n in graph.nodes if n.attr("groups") == 16)
    assert depthwise.attr("pads") == (1, 1, 1, 1)


def test_gemm_transposes_and_scalings_fold_into_weights() -> None:
    graph = load_onnx(mlp())
    assert [n.op for n in graph.nodes].count("transpose") == 0
    assert "mul" not in {n.op for n in graph.nodes}


def _single(node: onnx.NodeProto, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph([node], "one", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _f(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _i64(name: str, values) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


@pytest.mark.parametrize(
    ("node", "inputs", "outputs", "inits", "opset"),
    [
        # Softmax before opset 13 coerces its input to 2-D at `axis`
        (
            helper.make_node("Softmax", ["x"], ["y"], axis=1),
            [_f("x", [2, 3, 4])],
            [_f("y", [2, 3, 4])],
            [],
            11,
        ),
        (
            helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 2]),
            [_f("x", [2, 3])],
            [_f("a", [2, 1]), _f("b", [2, 2])],
            [],
            11,
        ),
        (
            helper.make_node("Split", ["x", "s"], ["a", "b"], axis=-1),
            [_f("x", [2, 5])],
            [_f("a", [2, 3]), _f("b", [2, 2])],
            [_i64("s", [3, 2])],
            13,
        ),
        (
            helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
            [_f("x", [2, 5])],
            [_f("a", [2, 3]), _f("b", [2, 2])],
            [],
            18,
        ),
        (
            helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]),
            [_f("x", [4, 6])],
            [_f("y", [4, 2])],
            [_i64("s", [-1]), _i64("e", [-100]), _i64("a", [1]), _i64("st", [-3])],
            13,
        ),
        (
            helper.make_node("Squeeze", ["x"], ["y"], axes=[0]),
            [_f("x", [1, 3])],
            [_f("y", [3])],
            [],
            11,
        ),
        (
            helper.make_node("Squeeze", ["x", "a"], ["y"]),
            [_f("x", [1, 3, 1])],
            [_f("y", [3])],
            [_i64("a", [0, -1])],
            13,
        ),
        (
            helper.make_node("Unsqueeze", ["x", "a"], ["y"]),
            [_f("x", [3])],
            [_f("y", [1, 3, 1])],
            [_i64("a", [0, -1])],
            13,
        ),
        (
            helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0),
            [_f("x", [2, 3, 4])],
            [_f("y", [3])],
            [_i64("a", [0, 2])],
            13,
        ),
        (
            helper.make_node("ReduceMax", ["x"], ["y"], axes=[1]),
            [_f("x", [2, 3, 4])],
            [_f("y", [2, 1, 4])],
            [],
            13,
        ),
        (
            helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.5),
            [_f("x", [8])],
            [_f("y", [8])],
            [],
            10,
        ),
        (
            helper.make_node("Gelu", ["x"], ["y"], approximate="tanh"),
            [_f("x", [8])],
            [_f("y", [8])],
            [],
            20,
        ),
        (
            helper.make_node("Expand", ["x", "s"], ["y"]),
            [_f("x", [3, 1])],
            [_f("y", [2, 3, 4])],
            [_i64("s", [2, 1, 4])],
            13,
        ),
        (
            helper.make_node("Reshape", ["x", "s"], ["y"]),
            [_f("x", [2, 3, 4])],
            [_f("y", [2, 12])],
            [_i64("s", [0, -1])],
            14,
        ),
        (
            helper.make_node("Flatten", ["x"], ["y"], axis=-1),
            [_f("x", [2, 3, 4])],
            [_f("y", [6, 4])],
            [],
            13,
        ),
        (
            helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER", strides=[2, 2]),
            [_f("x", [1, 2, 7, 8])],
            [_f("y", [1, 3, 4, 4])],
            [helper.make_tensor("w", TensorProto.FLOAT, [3, 2, 3, 3], np.linspace(-1, 1, 54))],
            13,
        ),
        (
            helper.make_node(
                "Conv",
                ["x", "w", "b"],
                ["y"],
                group=2,
                dilations=[2, 2],
                pads=[1, 0, 2, 1],
                strides=[1, 2],
            ),
            [_f("x", [1, 4, 9, 9])],
            [_f("y", [1, 6, 8, 3])],
            [
                helper.make_tensor("w", TensorProto.FLOAT, [6, 2, 3, 3], np.linspace(-1, 1, 108)),
                helper.make_tensor("b", TensorProto.FLOAT, [6], np.linspace(-1, 1, 6)),
            ],
            13,
        ),
        (
            helper.make_node(
                "MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1
            ),
            [_f("x", [1, 2, 8, 8])],
            [_f("y", [1, 2, 4, 4])],
            [],
            13,
        ),
        (
            helper.make_node(
                "AveragePool",
                ["x"],
                ["y"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                count_include_pad=1,
            ),
            [_f("x", [1, 2, 5, 5])],
            [_f("y", [1, 2, 5, 5])],
            [],
            13,
        ),
        (
            helper.make_node("Gather", ["x", "i"], ["y"], axis=1),
            [_f("x", [2, 5])],
            [_f("y", [2, 2])],
            [_i64("i", [4, -5])],
            13,
        ),
        (
            helper.make_node("Pow", ["x", "e"], ["y"]),
            [_f("x", [4])],
            [_f("y", [4])],
            [_i64("e", [2])],
            15,
        ),
    ],
)
def test_single_op_matches_onnxruntime(node, inputs, outputs, inits, opset) -> None:
    _compare(_single(node, inputs, outputs, inits, opset))


def test_graph_inputs_keep_their_onnx_names_and_unsafe_names_are_sanitised() -> None:
    node = helper.make_node("Relu", ["input ids"], ["out(0)"])
    graph = load_onnx(_single(node, [_f("input ids", [2])], [_f("out(0)", [2])]))
    assert graph.input_names == ("input_ids",) and graph.outputs == ("out_0_",)
    assert graph.nodes[0].name == "Relu_0"


def test_outputs_keep_their_names_through_identities() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
        helper.make_node("Identity", ["r"], ["z"]),
        helper.make_node("Identity", ["x"], ["echo"]),
        helper.make_node("Cast", ["r"], ["same"], to=TensorProto.FLOAT),
    ]
    outs = [_f(n, [3]) for n in ("y", "z", "echo", "same")]
    model = _single(nodes[0], [_f("x", [3])], outs)
    model.graph.node.extend(nodes[1:])
    graph = load_onnx(model)
    assert graph.outputs == ("y", "z", "echo", "same")
    assert [n.op for n in graph.nodes] == ["relu", "identity", "identity", "identity"]
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    y, z, echo, same = run_graph(graph, [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    np.testing.assert_array_equal(z, y)
    np.testing.assert_array_equal(same, y)
    np.testing.assert_array_equal(echo, x)
