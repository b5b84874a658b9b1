"""load_onnx: an ONNX model (path, bytes or ModelProto) → an `ir.graph.Graph`.

The steps: read and check the model (loader.py), name the graph inputs, convert the
nodes in order through the handler tables (ops_math.py, ops_tensor.py) while folding
constants, and keep the ONNX names of the outputs.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import onnx

from frontend.onnx.builder import Builder, OnnxNode, dtype_name
from frontend.onnx.errors import UnsupportedOperatorError
from frontend.onnx.loader import read_model
from frontend.onnx.ops_math import HANDLERS as MATH
from frontend.onnx.ops_tensor import HANDLERS as TENSOR
from ir.graph import Graph, TensorType

HANDLERS = {**MATH, **TENSOR}
SUPPORTED = tuple(sorted(HANDLERS))
"""The ONNX operator types the importer reads (Shape, Range, Equal… only when foldable)."""


def load_onnx(
    source: str | os.PathLike | bytes | onnx.ModelProto,
    *,
    base_dir: str | os.PathLike | None = None,
) -> Graph:
    """Import an ONNX model; `base_dir` is where external-data files are (default: the
    model file's folder). Raises ModelError or UnsupportedOperatorError (one line each)."""
    model, label, opset = read_model(source, base_dir)
    g = model.graph
    uses = Counter(v for node in g.node for v in node.input if v)
    uses.update(o.name for o in g.output)
    b = Builder(label, g.initializer, uses)
    inputs = []
    initializers = {t.name for t in g.initializer}
    for value in g.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dtype = dtype_name(tensor.elem_type, f"{label}: input {value.name!r}")
        t = TensorType(tuple(int(d.dim_value) for d in tensor.shape.dim), dtype)
        name = b.claim(value.name)
        b.bind(value.name, name)
        b.types[name] = t
        inputs.append((name, t))
    for index, proto in enumerate(g.node):
        node = OnnxNode.of(proto, index, opset)
        b.where = f"node {node.name!r} ({node.op_type})"
        handler = HANDLERS.get(node.op_type) if proto.domain in ("", "ai.onnx") else None
        if handler is None:
            op_type = f"{proto.domain}.{proto.op_type}" if proto.domain else proto.op_type
            raise UnsupportedOperatorError(op_type, node.name, SUPPORTED)
        for onnx_name, value in zip(node.outputs, handler(b, node)):
            b.bind(onnx_name, value)
    outputs = [_output(b, out.name, {n for n, _ in inputs}) for out in g.output]
    name = g.name or (Path(label).stem if not label.startswith("<") else "model")
    return b.finish(name, inputs, outputs)


def _output(b: Builder, onnx_name: str, input_names: set[str]) -> str:
    """The graph value of an ONNX output, under the output's name: a node result that
    an Identity (or a folded BatchNormalization) left under another name is renamed; an
    input, or a value that is already another output, is copied by an identity node."""
    b.where = f"output {onnx_name!r}"
    value = b.value(onnx_name)
    if value not in b.types or b.claimed.get(onnx_name) == value:
        return value  # a constant, or already under its own name
    if value not in input_names and value not in b.renamed_outputs:
        return b.rename(value, b.claim(onnx_name))
    return b.emit_to("identity", [value], [b.claim(onnx_name)], onnx_name)[0]
