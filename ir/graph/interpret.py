"""The reference interpreter: runs a graph node by node with the ops' numpy evaluation.

It is what compiled models are checked against, so it favours precision (float32
matmuls, convolutions and reductions in float64) and frees each intermediate after
its last use so a large model's peak memory stays near its weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ir.dtype import to_numpy
from ir.errors import GraphInputError
from ir.graph.graph import Graph, TensorType
from ir.graph.ops import OPS


def _checked(name: str, want: TensorType, value: object) -> np.ndarray:
    array = np.asarray(value)
    got = TensorType.of(array) if str(array.dtype) != "object" else None
    if got != want:
        shown = got if got is not None else f"an array of {array.dtype}"
        raise GraphInputError(f"input {name!r}: expected {want}, got {shown}")
    return array


def bind_inputs(
    graph: Graph, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
) -> dict[str, np.ndarray]:
    """Match call arguments to the graph's inputs, checking names, shapes and dtypes."""
    names = graph.input_names
    if isinstance(inputs, Mapping):
        missing = [n for n in names if n not in inputs]
        extra = sorted(set(inputs) - set(names))
        if missing or extra:
            what = f"missing {missing}" if missing else f"unknown {extra}"
            raise GraphInputError(f"graph {graph.name!r}: inputs {what}; expected {list(names)}")
        values = [inputs[n] for n in names]
    else:
        values = list(inputs)
        if len(values) != len(names):
            raise GraphInputError(
                f"graph {graph.name!r} takes {len(names)} inputs {list(names)}, got {len(values)}"
            )
    return {n: _checked(n, t, v) for (n, t), v in zip(graph.inputs, values)}


def run_graph(
    graph: Graph, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Evaluate the graph on concrete inputs; returns the outputs in order (fresh arrays)."""
    env: dict[str, np.ndarray] = dict(graph.constants)
    env.update(bind_inputs(graph, inputs))
    last_use: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_use[v] = i
    keep = set(graph.outputs) | set(graph.constants) | set(graph.input_names)
    for i, node in enumerate(graph.nodes):
        args = [env[v] if v else None for v in node.inputs]
        results = OPS[node.op].evaluate(args, node)
        for v, r in zip(node.outputs, results):
            want = graph.types[v]
            env[v] = np.asarray(r, dtype=to_numpy(want.dtype)).reshape(want.shape)
        for v in dict.fromkeys(node.inputs):
            if v and last_use.get(v) == i and v not in keep:
                del env[v]
    return [np.array(env[v]) for v in graph.outputs]
