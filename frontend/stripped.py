"""A model's structure without its weights (`loomtune.graph/1`): what a model job sends.

A tuning service needs the graph, not the weights: the tasks, their shapes and
their kernels depend on shapes and dtypes only (`Graph.key` hashes weights the same
way). `strip_graph` writes a graph as JSON with every weight reduced to its shape
and dtype, except those whose values are part of the kernels or of the graph's
structure:

- scalars (one element, any dtype): they become literals in the fused kernels
  (GELU's 0.5, attention's 1/√d, a layer norm's ε), so a task's key depends on them;
- small integer and boolean tensors (at most `KEEP_INTEGER_ELEMENTS` elements):
  index lists and shapes the rewrites may read.

No floating-point tensor of more than one element is ever sent. `load_stripped` is
the other side (the coordinator): it checks the document and rebuilds a `Graph`
whose stripped weights are zeros that cost no memory (a lazily zeroed mapping that
is never written), so `ir.graph.plan.build_plan` cuts it into the same tasks as the
real model — with the same keys, which name the inputs bound to constants
(`Task.layout_free`): a stripped weight is still a constant; every problem is a
`StrippedGraphError` naming the JSON path.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ir import dtype as dt
from ir.errors import GraphError, LoomtuneError
from ir.graph.graph import Graph, TensorType, make_graph, make_node

FORMAT = "loomtune.graph/1"
KEEP_INTEGER_ELEMENTS = 64
"""Integer and boolean weights up to this many elements keep their values."""
MAX_NAME = 256
MAX_RANK = 8


class StrippedGraphError(LoomtuneError):
    """A stripped graph document is malformed; `path` names where (e.g. `nodes[3].attrs.axis`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def keeps_values(array: np.ndarray) -> bool:
    """Whether a weight's values travel with the graph (see the module's rule)."""
    if array.size <= 1:
        return True
    return array.dtype.kind in "biu" and array.size <= KEEP_INTEGER_ELEMENTS


def _attr_json(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_attr_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}  # JSON has no inf or nan
    return value


def strip_graph(graph: Graph) -> dict[str, Any]:
    """The graph as a `loomtune.graph/1` document, weights reduced to shape and dtype."""
    constants = []
    for name, array in graph.constants.items():
        t = graph.types[name]
        entry: dict[str, Any] = {"name": name, "shape": list(t.shape), "dtype": t.dtype}
        if keeps_values(array):
            raw = np.ascontiguousarray(array).tobytes()
            entry["data"] = base64.b64encode(raw).decode("ascii")
        constants.append(entry)
    return {
        "format": FORMAT,
        "name": graph.name,
        "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype} for n, t in graph.inputs],
        "outputs": list(graph.outputs),
        "constants": constants,
        "nodes": [
            {
                "op": node.op,
                "inputs": list(node.inputs),
                "outputs": list(node.outputs),
                "attrs": {k: _attr_json(v) for k, v in node.attrs},
                "name": node.name,
            }
            for node in graph.nodes
        ],
    }


# -- the coordinator's side ---------------------------------------------------------------------


def _field(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path: str) -> Any:
    if key not in doc:
        raise StrippedGraphError(path, f"missing field {key!r}")
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise StrippedGraphError(f"{path}.{key}".lstrip("."), f"expected {names}")
    return value


def _name(value: Any, path: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty) or len(value) > MAX_NAME:
        raise StrippedGraphError(path, f"a value name is a string of 1 to {MAX_NAME} characters")
    if any(ord(c) < 32 for c in value):
        raise StrippedGraphError(path, "a value name has no control characters")
    return value


def _tensor_type(entry: Any, path: str, max_bytes: int) -> TensorType:
    if not isinstance(entry, Mapping):
        raise StrippedGraphError(path, "expected an object with name, shape and dtype")
    shape = _field(entry, "shape", list, path)
    if len(shape) > MAX_RANK or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**31 for d in shape
    ):
        raise StrippedGraphError(
            f"{path}.shape", f"a shape is at most {MAX_RANK} non-negative integers"
        )
    dtype = _field(entry, "dtype", str, path)
    if dtype not in dt.DTYPES:
        raise StrippedGraphError(f"{path}.dtype", f"unknown dtype {dtype!r}")
    t = TensorType(tuple(shape), dtype)
    if t.size * np.dtype(dt.to_numpy(dtype)).itemsize > max_bytes:
        raise StrippedGraphError(
            f"{path}.shape", f"{t} is larger than {max_bytes} bytes (LOOMTUNE_MAX_BYTES)"
        )
    return t


def _constant(entry: Mapping[str, Any], t: TensorType, path: str) -> np.ndarray:
    np_dtype = np.dtype(dt.to_numpy(t.dtype))
    if "data" not in entry:
        zeros = np.zeros(t.shape, np_dtype)  # calloc: pages are mapped only if written
        zeros.setflags(write=False)
        return zeros
    data = entry["data"]
    if not isinstance(data, str):
        raise StrippedGraphError(f"{path}.data", "expected base64 text")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        raise StrippedGraphError(f"{path}.data", "not valid base64") from None
    if len(raw) != t.size * np_dtype.itemsize:
        raise StrippedGraphError(
            f"{path}.data", f"{len(raw)} bytes, but {t} needs {t.size * np_dtype.itemsize}"
        )
    array = np.frombuffer(raw, np_dtype).reshape(t.shape)
    array.setflags(write=False)
    return array


def _attr_value(value: Any, path: str) -> Any:
    if isinstance(value, Mapping):
        text = value.get("float")
        if set(value) != {"float"} or text not in ("inf", "-inf", "nan"):
            raise StrippedGraphError(
                path, 'a non-finite float is {"float": "inf" | "-inf" | "nan"}'
            )
        return float(text)
    if isinstance(value, list):
        return [_attr_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise StrippedGraphError(path, "an attribute is a number, a string or a list of them")
    return value


def _nodes(doc: Mapping[str, Any], max_nodes: int) -> list[Any]:
    nodes = _field(doc, "nodes", list, "")
    if len(nodes) > max_nodes:
        raise StrippedGraphError("nodes", f"more than {max_nodes} nodes")
    out = []
    for i, entry in enumerate(nodes):
        path = f"nodes[{i}]"
        if not isinstance(entry, Mapping):
            raise StrippedGraphError(path, "expected an object with op, inputs, outputs, attrs")
        op = _field(entry, "op", str, path)
        ins = [
            _name(v, f"{path}.inputs[{j}]", empty=True)
            for j, v in enumerate(_field(entry, "inputs", list, path))
        ]
        outs = [
            _name(v, f"{path}.outputs[{j}]")
            for j, v in enumerate(_field(entry, "outputs", list, path))
        ]
        attrs = entry.get("attrs", {})
        if not isinstance(attrs, Mapping):
            raise StrippedGraphError(f"{path}.attrs", "expected an object")
        values = {
            _name(k, f"{path}.attrs"): _attr_value(v, f"{path}.attrs.{k}") for k, v in attrs.items()
        }
        label = entry.get("name", "")
        if not isinstance(label, str) or len(label) > MAX_NAME:
            raise StrippedGraphError(f"{path}.name", f"at most {MAX_NAME} characters")
        try:
            out.append(make_node(op, ins, outs, name=label, **values))
        except (GraphError, TypeError) as e:
            raise StrippedGraphError(path, str(e)) from None
    return out


def load_stripped(doc: Any, *, max_bytes: int, max_nodes: int = 100_000) -> Graph:
    """The graph of a `loomtune.graph/1` document, stripped weights as zeros (see the module).

    `max_bytes` bounds every declared tensor (the coordinator's LOOMTUNE_MAX_BYTES), so
    a document cannot ask for more than a workload may use. Raises `StrippedGraphError`.
    """
    if not isinstance(doc, Mapping):
        raise StrippedGraphError("", "a stripped graph is a JSON object")
    if doc.get("format") != FORMAT:
        raise StrippedGraphError("format", f"expected {FORMAT!r}, got {doc.get('format')!r}")
    name = _name(_field(doc, "name", str, ""), "name", empty=True) or "model"
    inputs = []
    for i, entry in enumerate(_field(doc, "inputs", list, "")):
        t = _tensor_type(entry, f"inputs[{i}]", max_bytes)
        inputs.append((_name(entry.get("name"), f"inputs[{i}].name"), t))
    constants: dict[str, np.ndarray] = {}
    for i, entry in enumerate(_field(doc, "constants", list, "")):
        path = f"constants[{i}]"
        t = _tensor_type(entry, path, max_bytes)
        constants[_name(entry.get("name"), f"{path}.name")] = _constant(entry, t, path)
    outputs = [_name(v, f"outputs[{i}]") for i, v in enumerate(_field(doc, "outputs", list, ""))]
    if not outputs:
        raise StrippedGraphError("outputs", "a model has at least one output")
    nodes = _nodes(doc, max_nodes)
    try:
        return make_graph(name, inputs, nodes, constants, outputs)
    except GraphError as e:
        raise StrippedGraphError("nodes", str(e)) from None
    except Exception as e:  # an op's type inference meeting attributes no importer writes
        raise StrippedGraphError("nodes", f"{type(e).__name__}: {e}") from None
