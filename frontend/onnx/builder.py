"""The importer's working state: ONNX values mapped to graph values, constants known at
import, and the graph nodes emitted so far.

`Builder.emit` is where constant folding happens: a graph op whose inputs are all
constants is evaluated with the op's own numpy reference (unless its result would be
much larger than its inputs, like an Expand of a scalar), so shape arithmetic written
by exporters (Shape → Gather → Concat → Reshape) leaves static attributes behind.
The builder is mutable while one model is read; what it returns is an immutable Graph.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ir.arrays import ALIGNMENT, aligned_empty
from ir.errors import GraphError, ModelError
from ir.graph import OPS, Graph, Node, TensorType, make_graph, make_node

DTYPES = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.BOOL: "bool",
}
"""ONNX element types the importer reads, by their `ir.dtype` names."""

FOLD_BYTES = 1 << 16
"""A folded result may always take this many bytes; beyond it, no more than its inputs."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_./:\-]")


def dtype_name(elem_type: int, what: str) -> str:
    if elem_type not in DTYPES:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "undefined"
        raise ModelError(
            f"{what} has element type {name}; loomtune reads {', '.join(DTYPES.values())}"
        )
    return DTYPES[elem_type]


def frozen(array: np.ndarray) -> np.ndarray:
    """A C-contiguous, 64-byte aligned, read-only array (the graph then keeps it without
    copying, and a compiled model reads it in place: the weights are held once); arrays
    that are views of something writeable, or misaligned, are copied first."""
    out = np.asarray(array)
    if (
        not out.flags.c_contiguous
        or (out.flags.writeable and out.base is not None)
        or out.ctypes.data % ALIGNMENT
    ):
        copy = aligned_empty(out.shape, out.dtype)
        copy[...] = out
        out = copy
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class OnnxNode:
    """What a handler needs of one ONNX node: its type, name, wiring and decoded attributes."""

    op_type: str
    name: str
    inputs: tuple[str, ...]  # ONNX value names, "" for an omitted optional input
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    opset: int

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def input(self, i: int) -> str:
        """The i-th input's ONNX name, "" when omitted."""
        return self.inputs[i] if i < len(self.inputs) else ""

    @staticmethod
    def of(proto: onnx.NodeProto, index: int, opset: int) -> OnnxNode:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
        for k, v in attrs.items():
            if isinstance(v, bytes):
                attrs[k] = v.decode()
        return OnnxNode(
            proto.op_type,
            proto.name or f"{proto.op_type}_{index}",
            tuple(proto.input),
            tuple(proto.output),
            attrs,
            opset,
        )


class Builder:
    """Graph values for ONNX values, constants for what is known at import, nodes emitted."""

    def __init__(
        self, label: str, initializers: Sequence[onnx.TensorProto], uses: Mapping[str, int]
    ) -> None:
        self.label = label
        self.uses = uses  # how many times each ONNX value is read (nodes and graph outputs)
        self.consts: dict[str, np.ndarray] = {}
        self.types: dict[str, TensorType] = {}
        self.nodes: list[Node] = []
        self.alias: dict[str, str] = {}  # ONNX value name -> graph value name
        self._taken: set[str] = set()
        self.renamed_outputs: set[str] = set()
        self.claimed: dict[str, str] = {}  # ONNX name -> the graph name first made for it
        self._lazy: dict[str, onnx.TensorProto] = {t.name: t for t in initializers}
        self.where = ""  # the node being converted, for messages

    # --- names ------------------------------------------------------------------------

    def claim(self, onnx_name: str) -> str:
        """A fresh graph name for an ONNX value, as close to its own as allowed."""
        base = _UNSAFE.sub("_", onnx_name) or "v"
        name, k = base, 1
        while name in self._taken:
            name, k = f"{base}_{k}", k + 1
        self._taken.add(name)
        self.claimed.setdefault(onnx_name, name)
        return name

    def fresh(self, hint: str) -> str:
        return self.claim(f"{hint}__t")

    def bind(self, onnx_name: str, value: str) -> None:
        if onnx_name:
            self.alias[onnx_name] = value

    # --- values -----------------------------------------------------------------------

    def value(self, onnx_name: str) -> str:
        """The graph value of an ONNX value ("" stays ""); initializers are read on first use."""
        if not onnx_name:
            return ""
        if onnx_name in self.alias:
            return self.alias[onnx_name]
        tensor = self._lazy.pop(onnx_name, None)
        if tensor is None:
            raise ModelError(f"{self.label}: {self.where}: value {onnx_name!r} is not defined")
        return self.add_const(tensor_array(tensor, f"initializer {onnx_name!r}"), onnx_name)

    def add_const(self, array: np.ndarray, onnx_name: str = "", *, hint: str = "const") -> str:
        name = self.claim(onnx_name) if onnx_name else self.fresh(hint)
        self.consts[name] = frozen(array)
        self.bind(onnx_name, name)
        return name

    def is_const(self, value: str) -> bool:
        return value in self.consts

    def const(self, value: str, what: str) -> np.ndarray:
        if value not in self.consts:
            raise ModelError(
                f"{self.label}: {self.where}: {what} must be computable at import (a constant), "
                f"but {value!r} depends on the graph inputs"
            )
        return self.consts[value]

    def type(self, value: str) -> TensorType:
        if value in self.consts:
            return TensorType.of(self.consts[value])
        return self.types[value]

    def error(self, message: str) -> ModelError:
        return ModelError(f"{self.label}: {self.where}: {message}")

    # --- emitting ----------------------------------------------------------------------

    def emit(
        self, op: str, inputs: Sequence[str], name: str, *, outs: int = 1, **attrs: Any
    ) -> list[str]:
        """Add a graph op (or fold it); returns its output names. `name` is the ONNX node."""
        out_names = [self.fresh(op) for _ in range(outs)]
        return self.emit_to(op, inputs, out_names, name, **attrs)

    def emit_to(
        self, op: str, inputs: Sequence[str], outputs: Sequence[str], name: str, **attrs: Any
    ) -> list[str]:
        node = make_node(op, inputs, outputs, name=name, **attrs)
        try:
            types = OPS[op].infer([self.type(v) if v else None for v in inputs], node)
        except GraphError as e:
            raise self.error(f"{op}: {e}") from None
        present = [v for v in inputs if v]
        if present and all(v in self.consts for v in present):
            in_bytes = sum(self.consts[v].nbytes for v in present)
            out_bytes = sum(t.size * np.dtype(_np(t.dtype)).itemsize for t in types)
            if out_bytes <= max(FOLD_BYTES, in_bytes):
                results = OPS[op].evaluate([self.consts[v] if v else None for v in inputs], node)
                for v, r, t in zip(outputs, results, types):
                    self.consts[v] = frozen(np.asarray(r, dtype=_np(t.dtype)).reshape(t.shape))
                return list(outputs)
        self.nodes.append(node)
        self.types.update(zip(outputs, types))
        return list(outputs)

    def rename(self, value: str, new: str) -> str:
        """Give a node result a new name everywhere (for graph outputs)."""
        swap = lambda names: tuple(new if v == value else v for v in names)  # noqa: E731
        self.nodes = [
            Node(n.op, swap(n.inputs), swap(n.outputs), n.attrs, n.name) for n in self.nodes
        ]
        self.types[new] = self.types.pop(value)
        self.alias = {k: new if v == value else v for k, v in self.alias.items()}
        self.renamed_outputs.add(new)
        return new

    def producer(self, value: str) -> int | None:
        for i in range(len(self.nodes) - 1, -1, -1):
            if value in self.nodes[i].outputs:
                return i
        return None

    def finish(
        self, name: str, inputs: Sequence[tuple[str, TensorType]], outputs: Sequence[str]
    ) -> Graph:
        """The immutable graph: constants used by nodes or outputs, dead nodes dropped."""
        used = {v for node in self.nodes for v in node.inputs} | set(outputs)
        constants = {k: a for k, a in self.consts.items() if k in used}
        try:
            return make_graph(name, inputs, self.nodes, constants, outputs).pruned()
        except GraphError as e:
            raise ModelError(f"{self.label}: the imported graph is ill-formed ({e})") from None


def _np(dtype: str) -> np.dtype:
    return np.dtype(np.bool_ if dtype == "bool" else dtype)


def tensor_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    """A TensorProto's data as a numpy array of a supported dtype."""
    dtype = dtype_name(tensor.data_type, what)
    array = numpy_helper.to_array(tensor)
    return array.astype(_np(dtype), copy=False)
