"""Cutting a graph into groups, each of which becomes one kernel (one task).

The rules (after TVM's FuseOps and the Apollo study, simplified to what the models need):
- nodes whose inputs are all constants run once, at load (`prepare`): a weight's
  transpose, a BatchNorm scale folded into it, a bias broadcast to NHWC;
- a reshape (or identity) is a view: its output reinterprets its input's buffer, so it
  costs nothing and bounds the groups around it;
- a layout op (transpose, slice, expand, gather, split) is read through: each consumer
  group folds it into its own load indices (`reads`), so it has no kernel — unless its
  value must exist in memory (a graph output or the input of a view); then a transpose
  joins the group that produces its input (that group writes in the transposed order),
  else it is a kernel of its own; a concat is always a kernel;
- every other node starts a group (matmul, conv, pool, reduction, softmax, layer norm,
  or an element-wise node no group took), and the group takes the element-wise nodes
  that consume it — the epilogue — as long as the group keeps one output and every
  other value they read is computed before the group starts (no cycle between groups).
A group runs at the position of its last node, which is its output's producer, so the
groups sorted that way are a valid order for the kernels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ir.graph.graph import Graph
from ir.graph.ops import OPS

VIEW_OPS = frozenset({"reshape", "identity"})
READ_THROUGH_OPS = frozenset({"transpose", "slice", "expand", "gather", "split"})
KERNEL_LAYOUT_OPS = frozenset({"concat"})


@dataclass(frozen=True)
class Group:
    """Nodes (indices into the graph, in order) computed by one kernel writing `output`;
    `reads`: layout nodes this group folds into its loads (recomputed, not stored)."""

    nodes: tuple[int, ...]
    output: str
    reads: tuple[int, ...]


@dataclass(frozen=True)
class Partition:
    """A graph cut into groups (in execution order), views and load-time nodes."""

    graph: Graph
    prepare: tuple[int, ...]
    groups: tuple[Group, ...]
    views: Mapping[str, str]  # value -> the stored value whose buffer it reinterprets


def _is_elementwise(graph: Graph, i: int) -> bool:
    node = graph.nodes[i]
    return OPS[node.op].kind == "elementwise" and node.op not in VIEW_OPS


def _load_time(graph: Graph) -> tuple[int, ...]:
    """Nodes computed from constants only (directly or through other such nodes)."""
    known = set(graph.constants)
    prepare = []
    for i, node in enumerate(graph.nodes):
        ins = [v for v in node.inputs if v]
        if ins and all(v in known for v in ins):
            prepare.append(i)
            known.update(node.outputs)
    return tuple(prepare)


def _views(graph: Graph, skip: set[int]) -> dict[str, str]:
    views: dict[str, str] = {}
    for i, node in enumerate(graph.nodes):
        if i not in skip and node.op in VIEW_OPS:
            src = node.inputs[0]
            views[node.outputs[0]] = views.get(src, src)
    return views


def _stored_layout_values(graph: Graph, skip: set[int]) -> set[str]:
    """Outputs of read-through layout nodes that must nevertheless exist in memory."""
    outputs = set(graph.outputs)
    stored = set()
    for i, node in enumerate(graph.nodes):
        if i in skip or node.op not in READ_THROUGH_OPS:
            continue
        for v in node.outputs:
            users = [graph.nodes[c] for c in graph.consumers(v)]
            if v in outputs or any(u.op in VIEW_OPS for u in users):
                stored.update(node.outputs)  # a split stores all its parts or none
    return stored


class _Grower:
    """Greedy epilogue growth of one group (see the module docstring)."""

    def __init__(self, graph: Graph, taken: set[int], read_through: set[int]) -> None:
        self.graph = graph
        self.taken = taken
        self.read_through = read_through
        self.outputs = set(graph.outputs)

    def descendants(self, nodes: set[int]) -> set[int]:
        seen: set[int] = set()
        stack = list(nodes)
        while stack:
            i = stack.pop()
            for v in self.graph.nodes[i].outputs:
                for c in self.graph.consumers(v):
                    if c not in seen:
                        seen.add(c)
                        stack.append(c)
        return seen

    def exits(self, nodes: set[int], values: set[str]) -> list[str]:
        """Values of the group read outside it (or graph outputs)."""
        out = []
        for v in sorted(values):
            users = set(self.graph.consumers(v))
            if v in self.outputs or users - nodes:
                out.append(v)
        return out

    def grow(self, start: int, produced: set[str]) -> tuple[set[int], set[str]]:
        nodes, values = {start}, set(produced)
        best = (set(nodes), set(values))
        changed = True
        while changed:
            changed = False
            below = self.descendants(nodes)
            for c in sorted({c for v in values for c in self.graph.consumers(v)}):
                if c in nodes or c in self.taken or not _is_elementwise(self.graph, c):
                    continue
                node = self.graph.nodes[c]
                ok = all(
                    v in values or self.graph.producer(v) not in below for v in node.inputs if v
                )
                if not ok:
                    continue
                nodes.add(c)
                values.update(node.outputs)
                below = self.descendants(nodes)
                changed = True
                if len(self.exits(nodes, values)) == 1:
                    best = (set(nodes), set(values))
        return best


def partition(graph: Graph) -> Partition:
    """Cut `graph` into groups (see the module docstring)."""
    prepare = _load_time(graph)
    skip = set(prepare)
    views = _views(graph, skip)
    stored = _stored_layout_values(graph, skip)
    view_nodes = {i for i, n in enumerate(graph.nodes) if i not in skip and n.op in VIEW_OPS}
    read_through = {
        i
        for i, n in enumerate(graph.nodes)
        if i not in skip and n.op in READ_THROUGH_OPS and not set(n.outputs) & stored
    }
    taken = skip | view_nodes | read_through
    grower = _Grower(graph, taken, read_through)
    groups: list[Group] = []
    for i, node in enumerate(graph.nodes):
        if i in taken:
            continue
        if node.op == "split":  # only some outputs are stored: one kernel each
            for v in node.outputs:
                if v in stored:
                    groups.append(Group((i,), v, _reads(graph, {i}, read_through)))
            taken.add(i)
            continue
        nodes, values = grower.grow(i, set(node.outputs))
        taken |= nodes
        (out,) = grower.exits(nodes, values) or [graph.nodes[max(nodes)].outputs[0]]
        nodes, out = _fold_transpose(graph, nodes, out, stored, taken)
        groups.append(Group(tuple(sorted(nodes)), out, _reads(graph, nodes, read_through)))
    groups.sort(key=lambda g: (max(g.nodes), g.output))
    return Partition(graph, prepare, tuple(groups), MappingProxyType(views))


def _fold_transpose(
    graph: Graph, nodes: set[int], out: str, stored: set[str], taken: set[int]
) -> tuple[set[int], str]:
    """A stored transpose of the group's only output joins the group: it writes transposed."""
    users = graph.consumers(out)
    if out in graph.outputs or len(users) != 1 or users[0] in taken:
        return nodes, out
    node = graph.nodes[users[0]]
    if node.op != "transpose" or node.outputs[0] not in stored:
        return nodes, out
    taken.add(users[0])
    return nodes | {users[0]}, node.outputs[0]


def _reads(graph: Graph, nodes: set[int], read_through: set[int]) -> tuple[int, ...]:
    """The read-through layout nodes a group's loads pass through (transitively)."""
    found: set[int] = set()
    stack = [v for i in nodes for v in graph.nodes[i].inputs if v]
    while stack:
        p = graph.producer(stack.pop())
        if p is not None and p in read_through and p not in found:
            found.add(p)
            stack.extend(v for v in graph.nodes[p].inputs if v)
    return tuple(sorted(found))
