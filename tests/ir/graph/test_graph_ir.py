"""The graph IR: types inferred, bad graphs refused naming the node, keys and digests."""

from __future__ import annotations

import numpy as np
import pytest

from ir.errors import GraphError, GraphInputError
from ir.graph import TensorType, make_graph, make_node, run_graph

F32 = "float32"


def _mlp(names=("x", "h", "a", "y"), *, hidden: int = 16, weights_seed: int = 0, act: str = "none"):
    x, h, a, y = names
    rng = np.random.default_rng(weights_seed)
    consts = {
        "W1": rng.standard_normal((8, hidden)).astype(np.float32),
        "W2": rng.standard_normal((hidden, 4)).astype(np.float32),
    }
    nodes = [
        make_node("matmul", [x, "W1"], [h], name="fc1"),
        make_node("gelu", [h], [a], name="act", approximate=act),
        make_node("matmul", [a, "W2"], [y], name="fc2"),
    ]
    return make_graph("mlp", [(x, TensorType((2, 8), F32))], nodes, consts, [y])


def test_types_are_inferred_for_every_value() -> None:
    g = _mlp()
    assert g.types["x"] == TensorType((2, 8), F32)
    assert g.types["W1"] == TensorType((8, 16), F32)
    assert g.types["h"] == TensorType((2, 16), F32)
    assert g.types["y"] == TensorType((2, 4), F32)
    assert g.producer("h") == 0 and g.producer("W1") is None and g.producer("x") is None
    assert g.consumers("h") == (1,) and g.consumers("y") == ()


def test_constants_are_read_only_copies() -> None:
    w = np.ones((8, 4), np.float32)
    g = make_graph(
        "g",
        [("x", TensorType((2, 8), F32))],
        [make_node("matmul", ["x", "w"], ["y"])],
        {"w": w},
        ["y"],
    )
    w[0, 0] = 5.0  # the caller's array stays theirs
    assert g.constants["w"][0, 0] == 1.0
    with pytest.raises(ValueError):
        g.constants["w"][0, 0] = 2.0


@pytest.mark.parametrize(
    ("nodes", "outputs", "message"),
    [
        (
            [make_node("matmul", ["x", "nope"], ["y"], name="mm")],
            ["y"],
            "node 'mm' (matmul): input 'nope' is not defined",
        ),
        (
            [make_node("frobnicate", ["x"], ["y"], name="f")],
            ["y"],
            "node 'f' (frobnicate): unknown graph op",
        ),
        (
            [make_node("relu", ["x"], ["x"], name="r")],
            ["x"],
            "node 'r' (relu): value 'x' is defined twice",
        ),
        (
            [make_node("matmul", ["x", "x"], ["y"], name="mm")],
            ["y"],
            "node 'mm' (matmul): inner dimensions differ",
        ),
        (
            [make_node("softmax", ["x"], ["y"], name="sm", axis=-1)],
            ["y"],
            "node 'sm' (softmax): axis=-1 must be normalised",
        ),
        (
            [make_node("relu", ["x"], ["y"], name="r", alpha=0.1)],
            ["y"],
            "node 'r' (relu): unknown attribute 'alpha'",
        ),
        (
            [make_node("reshape", ["x"], ["y"], name="rs", shape=(3, 5))],
            ["y"],
            "node 'rs' (reshape): cannot reshape",
        ),
        ([make_node("relu", ["x"], ["y"], name="r")], ["z"], "output 'z' is not defined"),
        (
            [make_node("exp", ["i"], ["y"], name="e")],
            ["y"],
            "node 'e' (exp): expects a float input",
        ),
    ],
)
def test_bad_graphs_are_refused_naming_the_node(nodes, outputs, message) -> None:
    inputs = [("x", TensorType((2, 8), F32)), ("i", TensorType((2,), "int64"))]
    with pytest.raises(GraphError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_graph("bad", inputs, nodes, {}, outputs)


def test_unsorted_attributes_are_refused() -> None:
    from ir.graph import Node

    node = Node("clip", ("x",), ("y",), (("min", 0.0), ("max", 6.0)), "c")
    with pytest.raises(GraphError, match="sorted"):
        make_graph("g", [("x", TensorType((2,), F32))], [node], {}, ["y"])


def test_key_is_stable_under_renaming_and_weight_data() -> None:
    base = _mlp()
    assert _mlp(("in", "t1", "t2", "out")).key == base.key
    assert _mlp(weights_seed=7).key == base.key
    assert _mlp(weights_seed=7).weights_digest != base.weights_digest
    assert _mlp().weights_digest == base.weights_digest


def test_key_changes_with_an_attribute_or_a_shape() -> None:
    base = _mlp()
    assert _mlp(act="tanh").key != base.key
    assert _mlp(hidden=32).key != base.key


def test_key_distinguishes_int_and_float_attributes() -> None:
    def clip(lo):
        node = make_node("clip", ["x"], ["y"], min=lo, max=6.0)
        return make_graph("g", [("x", TensorType((2,), F32))], [node], {}, ["y"])

    assert clip(0).key != clip(0.0).key


def test_pruned_drops_dead_nodes_and_constants() -> None:
    g = _mlp()
    dead = make_node("matmul", ["x", "W1"], ["unused"])
    g2 = g.with_nodes((*g.nodes, dead), constants={**g.constants, "extra": np.zeros(3, np.float32)})
    p = g2.pruned()
    assert [n.name for n in p.nodes] == ["fc1", "act", "fc2"]
    assert set(p.constants) == {"W1", "W2"}
    assert p.key == g.key


def test_run_graph_checks_its_inputs() -> None:
    g = _mlp()
    x = np.zeros((2, 8), np.float32)
    assert run_graph(g, {"x": x})[0].shape == (2, 4)
    with pytest.raises(
        GraphInputError, match=r"input 'x': expected float32\[2,8\], got float64\[2,8\]"
    ):
        run_graph(g, [x.astype(np.float64)])
    with pytest.raises(
        GraphInputError, match=r"input 'x': expected float32\[2,8\], got float32\[3,8\]"
    ):
        run_graph(g, [np.zeros((3, 8), np.float32)])
    with pytest.raises(GraphInputError, match="missing"):
        run_graph(g, {"y": x})
    with pytest.raises(GraphInputError, match="takes 1 inputs"):
        run_graph(g, [x, x])


def test_run_graph_matches_numpy() -> None:
    g = _mlp(act="tanh")
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    h = x.astype(np.float64) @ g.constants["W1"]
    a = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    want = a @ g.constants["W2"]
    (got,) = run_graph(g, [x])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
