"""Every graph op a kernel can hold, lowered, compiled and checked against the interpreter:
one small graph per case (1-D and broadcast matmuls, grouped and dilated convolutions,
pools with and without padding counted, gathers of token ids, concat/split/slice, ...)."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.model import CompiledModel
from ir.graph import TensorType, make_graph, make_node, run_graph
from ir.graph.plan import build_plan

RNG = np.random.default_rng(0)
F32 = "float32"


def w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def T(*shape: int, dtype: str = F32) -> TensorType:
    return TensorType(shape, dtype)


CASES = {
    "matmul_1d_left": ([("x", T(8))], [make_node("matmul", ["x", "W"], ["y"])], {"W": w(8, 4)}),
    "matmul_1d_right": ([("x", T(3, 8))], [make_node("matmul", ["x", "v"], ["y"])], {"v": w(8)}),
    "matmul_batch_broadcast": (
        [("x", T(2, 3, 4, 5))],
        [make_node("matmul", ["x", "W"], ["y"])],
        {"W": w(3, 5, 6)},
    ),
    "grouped_dilated_conv": (
        [("x", T(1, 4, 9, 9))],
        [
            make_node(
                "conv2d", ["x", "W", "B"], ["y"], groups=2, dilations=(2, 1), pads=(2, 0, 1, 1)
            )
        ],
        {"W": w(6, 2, 3, 3), "B": w(6)},
    ),
    "strided_conv_nhwc": (
        [("x", T(1, 7, 7, 3))],
        [make_node("conv2d", ["x", "W"], ["y"], layout="NHWC", strides=(2, 2), pads=(1, 1, 1, 1))],
        {"W": w(3, 3, 3, 5)},
    ),
    "padded_strided_dilated_conv_relu": (  # the padding a block of its own (lower_ops._padded)
        [("x", T(1, 3, 9, 8))],
        [
            make_node(
                "conv2d",
                ["x", "W", "B"],
                ["c"],
                strides=(2, 1),
                dilations=(1, 2),
                pads=(2, 0, 1, 3),
            ),
            make_node("relu", ["c"], ["y"]),
        ],
        {"W": w(5, 3, 3, 3), "B": w(5)},
    ),
    "avg_pool_pads_counted_and_not": (
        [("x", T(1, 3, 6, 6))],
        [
            make_node("avg_pool2d", ["x"], ["a"], kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
            make_node(
                "avg_pool2d",
                ["x"],
                ["b"],
                kernel=(3, 3),
                strides=(2, 2),
                pads=(1, 1, 1, 1),
                count_include_pad=1,
            ),
            make_node("max_pool2d", ["x"], ["c"], kernel=(2, 3), strides=(1, 2), pads=(0, 1, 1, 1)),
            make_node("global_avg_pool", ["x"], ["d"]),
        ],
        {},
    ),
    "embedding_gather_add": (
        [("ids", T(2, 5, dtype="int64"))],
        [
            make_node("gather", ["E", "ids"], ["e"], axis=0),
            make_node("gather", ["E", "last"], ["f"], axis=0),
            make_node("add", ["e", "f"], ["y"]),
        ],
        {"E": w(7, 4), "last": np.array(-1, np.int64)},
    ),
    "concat_split_slice_expand": (
        [("x", T(2, 6)), ("z", T(2, 3))],
        [
            make_node("split", ["x"], ["a", "b"], axis=1, sizes=(2, 4)),
            make_node("concat", ["b", "z", "a"], ["c"], axis=1),
            make_node("slice", ["c"], ["s"], starts=(7,), ends=(0,), axes=(1,), steps=(-2,)),
            make_node("expand", ["s"], ["e"], shape=(3, 2, 4)),
            make_node("relu", ["e"], ["y"]),
        ],
        {},
    ),
    "elementwise_zoo": (
        [("x", T(4, 8)), ("m", T(4, 8, dtype="bool"))],
        [
            make_node("sigmoid", ["x"], ["a"]),
            make_node("pow", ["a", "three"], ["b"]),
            make_node("pow", ["a", "half"], ["c"]),
            make_node("clip", ["x"], ["d"], min=-0.5, max=0.25),
            make_node("where", ["m", "b", "c"], ["e"]),
            make_node("sub", ["e", "d"], ["f"]),
            make_node("reciprocal", ["two_plus"], ["r"]),
            make_node("mul", ["f", "r"], ["g"]),
            make_node("gelu", ["g"], ["h"], approximate="tanh"),
            make_node("neg", ["h"], ["y"]),
        ],
        {
            "three": np.float32(3),
            "half": np.float32(0.5),
            "two_plus": (2 + RNG.random(8)).astype(np.float32),
        },
    ),
    "reductions": (
        [("x", T(3, 4, 5))],
        [
            make_node("reduce_sum", ["x"], ["a"], axes=(1,), keepdims=0),
            make_node("reduce_max", ["x"], ["b"], axes=(0, 2), keepdims=1),
            make_node("reduce_mean", ["x"], ["c"], axes=(2,), keepdims=1),
            make_node("softmax", ["x"], ["d"], axis=1),
            make_node("layer_norm", ["x", "g"], ["e"], axis=1, epsilon=1e-3),
        ],
        {"g": w(4, 5)},
    ),
    "integer_division_truncates": (
        [("x", T(6, dtype="int64"))],
        [make_node("div", ["x", "k"], ["y"])],
        {"k": np.array([3, -3, 3, -3, 2, 5], np.int64)},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_op_compiles_and_matches_the_interpreter(case: str) -> None:
    inputs, nodes, consts = CASES[case]
    outputs = [v for n in nodes for v in n.outputs if not any(v in m.inputs for m in nodes)]
    graph = make_graph(case, inputs, nodes, consts, outputs)
    model = CompiledModel(build_plan(graph))
    rng = np.random.default_rng(1)
    xs = []
    for _, t in graph.inputs:
        if t.dtype == "int64":
            xs.append(rng.integers(-7, 7, t.shape).astype(np.int64))
        elif t.dtype == "bool":
            xs.append(rng.integers(0, 2, t.shape).astype(np.bool_))
        else:
            xs.append(rng.uniform(-1, 1, t.shape).astype(np.float32))
    for out, ref in zip(model(*xs), run_graph(graph, xs)):
        assert out.shape == ref.shape and out.dtype == ref.dtype
        if ref.dtype.kind in "iu":
            np.testing.assert_array_equal(out, ref)
        else:
            assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max() + 1e-5
