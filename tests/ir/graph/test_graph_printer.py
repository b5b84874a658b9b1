"""The graph printer's text for a tiny graph (a golden: LOOMTUNE_UPDATE_GOLDENS=1 rewrites it)."""

from __future__ import annotations

import numpy as np

from ir.graph import TensorType, make_graph, make_node, print_graph


def test_tiny_graph_prints_as_its_golden(golden) -> None:
    nodes = [
        make_node("matmul", ["x", "W"], ["h"]),
        make_node("add", ["h", "b"], ["z"]),
        make_node("clip", ["z"], ["r"], min=0.0, max=6.0),
        make_node("split", ["r"], ["p", "q"], axis=1, sizes=(2, 2)),
        make_node("softmax", ["q"], ["y"], axis=1),
    ]
    consts = {"W": np.zeros((3, 4), np.float32), "b": np.zeros(4, np.float32)}
    g = make_graph("tiny", [("x", TensorType((2, 3), "float32"))], nodes, consts, ["p", "y"])
    golden("tiny_graph.txt", print_graph(g))
