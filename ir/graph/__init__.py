"""Model graphs: typed, immutable graphs of tensor ops, their numpy interpreter and printer.

An importer (frontend/onnx) normalises a model into these ops; fusion cuts a graph
into tasks. Pure: standard library and numpy only.
"""

from ir.graph.graph import Graph, Node, TensorType, make_graph, make_node
from ir.graph.interpret import run_graph
from ir.graph.ops import OPS, GraphOp, normalize_slice
from ir.graph.printer import print_graph

__all__ = [
    "OPS",
    "Graph",
    "GraphOp",
    "Node",
    "TensorType",
    "make_graph",
    "make_node",
    "normalize_slice",
    "print_graph",
    "run_graph",
]
