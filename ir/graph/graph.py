"""The model graph: values with static types, nodes of graph ops, and read-only weights.

A `Graph` is what a model importer produces and what fusion cuts into tasks. It is
immutable: a pass returns a new graph built with `make_graph`, which checks the
wiring and infers every value's type, so a graph that exists is well-formed.

Two hashes: `key` is structural (ops, attributes, types and wiring, with value names
renumbered and weights reduced to their shape and dtype) and names what a compiled
model depends on; `weights_digest` covers the weight bytes as well.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from ir.arrays import aligned_empty
from ir.dtype import DTYPES
from ir.errors import GraphError

AttrValue = int | float | str | tuple[Any, ...]


@dataclass(frozen=True)
class TensorType:
    """A static shape and an `ir.dtype` name."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if not isinstance(self.shape, tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in self.shape
        ):
            raise GraphError(f"a shape must be a tuple of non-negative ints, got {self.shape!r}")
        if self.dtype not in DTYPES:
            raise GraphError(f"unknown dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        dtype = "bool" if array.dtype == np.bool_ else str(array.dtype)
        return TensorType(tuple(int(d) for d in array.shape), dtype)


def _attr_value(key: str, value: Any) -> AttrValue:
    """Canonical attribute values: bools become ints, lists and arrays become tuples."""
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple | np.ndarray):
        return tuple(_attr_value(key, v) for v in value)
    raise GraphError(f"attribute {key!r} has a value of type {type(value).__name__}")


@dataclass(frozen=True)
class Node:
    """One application of a graph op; `inputs` holds "" for an omitted optional input."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    name: str = ""

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def label(self) -> str:
        """How messages name the node: its source name, else its first output."""
        return self.name or (self.outputs[0] if self.outputs else self.op)

    def with_attrs(self, **attrs: Any) -> Node:
        merged = dict(self.attrs) | attrs
        return make_node(self.op, self.inputs, self.outputs, name=self.name, **merged)


def make_node(
    op: str, inputs: Iterable[str], outputs: Iterable[str], *, name: str = "", **attrs: Any
) -> Node:
    """A node with its attributes sorted by key and their values made canonical."""
    canon = tuple(sorted((k, _attr_value(k, v)) for k, v in attrs.items()))
    return Node(op, tuple(inputs), tuple(outputs), canon, name)


@dataclass(frozen=True, eq=False)
class Graph:
    """A checked, typed, topologically ordered graph (build it with `make_graph`).

    Compared by identity; compare `key` (and `weights_digest`) for structure.
    """

    name: str
    inputs: tuple[tuple[str, TensorType], ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    constants: Mapping[str, np.ndarray] = field(repr=False)
    types: Mapping[str, TensorType] = field(repr=False)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.inputs)

    @cached_property
    def key(self) -> str:
        """sha256 of the structure; value names renumbered in definition order."""
        ids: dict[str, str] = {"": ""}
        for n, _ in self.inputs:
            ids[n] = f"%{len(ids) - 1}"
        consts: list[list[Any]] = []

        def ref(value: str) -> str:
            if value not in ids:  # a constant, numbered at its first use
                ids[value] = f"c{len(consts)}"
                t = self.types[value]
                consts.append([list(t.shape), t.dtype])
            return ids[value]

        nodes = []
        for node in self.nodes:
            ins = [ref(v) for v in node.inputs]
            for v in node.outputs:
                ids[v] = f"%{len(ids) - 1}"
            outs = [[ids[v], list(self.types[v].shape), self.types[v].dtype] for v in node.outputs]
            nodes.append([node.op, ins, outs, [[k, _jsonable(v)] for k, v in node.attrs]])
        outputs = [ref(v) for v in self.outputs]
        ins = [[list(t.shape), t.dtype] for _, t in self.inputs]
        doc = {"inputs": ins, "constants": consts, "nodes": nodes, "outputs": outputs}
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @cached_property
    def weights_digest(self) -> str:
        """sha256 over the constants' names (in order), shapes, dtypes and bytes."""
        h = hashlib.sha256()
        for name, array in self.constants.items():
            t = self.types[name]
            h.update(json.dumps([name, list(t.shape), t.dtype]).encode())
            h.update(memoryview(np.ascontiguousarray(array).reshape(-1)).cast("B"))
        return h.hexdigest()

    @cached_property
    def _producers(self) -> Mapping[str, int]:
        return {v: i for i, node in enumerate(self.nodes) for v in node.outputs}

    @cached_property
    def _consumers(self) -> Mapping[str, tuple[int, ...]]:
        uses: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for v in dict.fromkeys(node.inputs):
                if v:
                    uses.setdefault(v, []).append(i)
        return {v: tuple(idx) for v, idx in uses.items()}

    def producer(self, value: str) -> int | None:
        """Index of the node defining `value` (None for an input or a constant)."""
        return self._producers.get(value)

    def consumers(self, value: str) -> tuple[int, ...]:
        """Indices of the nodes using `value`, in order, each once."""
        return self._consumers.get(value, ())

    def with_nodes(
        self,
        nodes: Sequence[Node],
        *,
        constants: Mapping[str, np.ndarray] | None = None,
        outputs: Sequence[str] | None = None,
        inputs: Sequence[tuple[str, TensorType]] | None = None,
        name: str | None = None,
    ) -> Graph:
        """A new checked graph with the given parts replaced (the rest kept)."""
        return make_graph(
            self.name if name is None else name,
            self.inputs if inputs is None else inputs,
            nodes,
            self.constants if constants is None else constants,
            self.outputs if outputs is None else outputs,
        )

    def pruned(self) -> Graph:
        """The graph without nodes and constants that no output depends on."""
        live = set(self.outputs)
        keep = []
        for node in reversed(self.nodes):
            if any(v in live for v in node.outputs):
                keep.append(node)
                live.update(v for v in node.inputs if v)
        constants = {k: a for k, a in self.constants.items() if k in live}
        if len(keep) == len(self.nodes) and len(constants) == len(self.constants):
            return self
        return self.with_nodes(tuple(reversed(keep)), constants=constants)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return ["f", repr(value)]  # ints and floats stay distinct, inf and nan spelt out
    return value


def _frozen_array(name: str, array: Any) -> np.ndarray:
    a = np.asarray(array)
    if a.dtype == np.bool_:
        pass
    elif str(a.dtype) not in DTYPES:
        raise GraphError(f"constant {name!r} has unsupported dtype {a.dtype}")
    if a.flags.writeable or not a.flags.c_contiguous:
        # 64-byte aligned, as kernels read it: a compiled model then shares the array.
        frozen = aligned_empty(a.shape, a.dtype)
        frozen[...] = a
        frozen.setflags(write=False)
        return frozen
    return a


def make_graph(
    name: str,
    inputs: Sequence[tuple[str, TensorType]],
    nodes: Sequence[Node],
    constants: Mapping[str, np.ndarray],
    outputs: Sequence[str],
) -> Graph:
    """Check a graph and infer its types: names unique, every use defined before it,
    ops known, attributes valid. A problem raises GraphError naming the node."""
    from ir.graph.ops import OPS  # ops.py imports this module for the types

    types: dict[str, TensorType] = {}

    def define(value: str, t: TensorType, what: str) -> None:
        if not value:
            raise GraphError(f"{what}: a value needs a non-empty name")
        if value in types:
            raise GraphError(f"{what}: value {value!r} is defined twice")
        types[value] = t

    for value, t in inputs:
        if not isinstance(t, TensorType):
            raise GraphError(f"graph input {value!r}: type must be a TensorType, got {t!r}")
        define(value, t, f"graph input {value!r}")
    frozen = {}
    for value, array in constants.items():
        frozen[value] = _frozen_array(value, array)
        define(value, TensorType.of(frozen[value]), f"constant {value!r}")
    for node in nodes:
        where = f"node {node.label!r} ({node.op})"
        op = OPS.get(node.op)
        if op is None:
            raise GraphError(f"{where}: unknown graph op {node.op!r}")
        _check_attrs(node, op.attrs, where)
        for v in node.inputs:
            if v and v not in types:
                raise GraphError(f"{where}: input {v!r} is not defined before it")
        try:
            out_types = op.infer([types[v] if v else None for v in node.inputs], node)
        except GraphError as e:
            raise GraphError(f"{where}: {e}") from None
        if len(out_types) != len(node.outputs):
            raise GraphError(
                f"{where}: has {len(node.outputs)} outputs, the op gives {len(out_types)}"
            )
        for v, t in zip(node.outputs, out_types):
            define(v, t, where)
    for v in outputs:
        if v not in types:
            raise GraphError(f"graph {name!r}: output {v!r} is not defined")
    return Graph(
        name,
        tuple(inputs),
        tuple(outputs),
        tuple(nodes),
        MappingProxyType(frozen),
        MappingProxyType(types),
    )


def _check_attrs(node: Node, allowed: frozenset[str], where: str) -> None:
    keys = [k for k, _ in node.attrs]
    if keys != sorted(set(keys)):
        raise GraphError(f"{where}: attributes must be sorted by key and unique (use make_node)")
    extra = sorted(set(keys) - allowed)
    if extra:
        raise GraphError(f"{where}: unknown attribute {extra[0]!r}; allowed: {sorted(allowed)}")
