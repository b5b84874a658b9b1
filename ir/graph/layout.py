"""NCHW to NHWC: convolutions and pools run channels-last inside the graph.

A channels-last convolution reads a pixel's channels contiguously, which is what a
vectorised kernel wants (and the library's conv2d_nhwc). The pass rewrites every NCHW
conv/pool to NHWC with its weight transposed OIHW→HWIO (a node over a constant: it runs
once at load), and carries the NHWC layout forward through element-wise nodes (their
constant operands — a BatchNorm scale [C,1,1], a bias — are rearranged to match), so
consecutive convolutions exchange NHWC tensors without converting. A value goes back
to NCHW (one transpose) only where something needs it so: a graph output, a reshape
that flattens it, any other op. A transpose that only moves unit dims (after a global
pool) is a view, which `rewrite.canonicalize` turns into a reshape.
"""

from __future__ import annotations

from ir.graph.graph import Graph, Node, make_node
from ir.graph.ops import OPS

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
SPATIAL_OPS = frozenset({"conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool"})


class _Pass:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: list[Node] = []
        self.nhwc: dict[str, str] = {}  # logical NCHW value -> its NHWC twin
        self.twin_only: set[str] = set()  # values computed NHWC whose NCHW form is not (yet)
        self.names = set(graph.types)

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.names:
            n += 1
            name = f"{base}_{n}"
        self.names.add(name)
        return name

    def emit(self, op: str, inputs: tuple[str, ...], outputs: tuple[str, ...], **attrs) -> None:
        self.nodes.append(make_node(op, inputs, outputs, **attrs))

    def as_nhwc(self, value: str) -> str:
        """The NHWC twin of a 4-D NCHW value (a transpose, once per value)."""
        if value not in self.nhwc:
            twin = self.fresh(f"{value}_nhwc")
            self.emit("transpose", (value,), (twin,), perm=TO_NHWC)
            self.nhwc[value] = twin
        return self.nhwc[value]

    def as_nchw(self, value: str) -> str:
        """`value` in its logical layout (a transpose back from its NHWC twin if needed)."""
        if value in self.twin_only:
            self.emit("transpose", (self.nhwc[value],), (value,), perm=TO_NCHW)
            self.twin_only.discard(value)
        return value

    def broadcast_nhwc(self, value: str) -> str:
        """An operand of rank <= 4 broadcasting against an NCHW value, rearranged for NHWC."""
        if value in self.nhwc:
            return self.nhwc[value]
        t = self.graph.types[value]
        if t.size == 1:
            return value  # a scalar broadcasts the same in every layout
        src = value
        if t.rank < 4:
            src = self.fresh(f"{value}_4d")
            self.emit("reshape", (value,), (src,), shape=(1,) * (4 - t.rank) + t.shape)
        twin = self.fresh(f"{value}_nhwc")
        self.emit("transpose", (src,), (twin,), perm=TO_NHWC)
        self.nhwc[value] = twin
        return twin

    def spatial(self, node: Node) -> None:
        x = self.as_nhwc(node.inputs[0])
        ins = [x, *node.inputs[1:]]
        if node.op == "conv2d":
            w = self.fresh(f"{node.inputs[1]}_hwio")
            self.emit("transpose", (node.inputs[1],), (w,), perm=(2, 3, 1, 0))
            ins[1] = w
        out = node.outputs[0]
        twin = self.fresh(f"{out}_nhwc")
        attrs = {**dict(node.attrs), "layout": "NHWC"}
        self.nodes.append(make_node(node.op, ins, (twin,), name=node.name, **attrs))
        self.nhwc[out] = twin
        self.twin_only.add(out)

    def elementwise(self, node: Node) -> bool:
        """Carry NHWC through an element-wise node when an input is NHWC (False: not here)."""
        ins = [v for v in node.inputs if v]
        out_t = self.graph.types[node.outputs[0]]
        if not any(v in self.twin_only for v in ins) or out_t.rank != 4:
            return False
        if any(self.graph.types[v].rank > 4 for v in ins):
            return False
        twins = tuple(self.broadcast_nhwc(v) if v else "" for v in node.inputs)
        out = node.outputs[0]
        twin = self.fresh(f"{out}_nhwc")
        self.nodes.append(Node(node.op, twins, (twin,), node.attrs, node.name))
        self.nhwc[out] = twin
        self.twin_only.add(out)
        return True

    def run(self) -> Graph:
        g = self.graph
        for node in g.nodes:
            if node.op in SPATIAL_OPS and node.attr("layout", "NCHW") == "NCHW":
                self.spatial(node)
            elif OPS[node.op].kind == "elementwise" and self.elementwise(node):
                pass
            else:
                ins = tuple(self.as_nchw(v) if v else "" for v in node.inputs)
                self.nodes.append(Node(node.op, ins, node.outputs, node.attrs, node.name))
        for v in g.outputs:
            self.as_nchw(v)
        return g.with_nodes(self.nodes)


def to_nhwc(graph: Graph) -> Graph:
    """`graph` with NCHW convolutions and pools run NHWC (see the module docstring)."""
    if not any(n.op in SPATIAL_OPS and n.attr("layout", "NCHW") == "NCHW" for n in graph.nodes):
        return graph
    return _Pass(graph).run().pruned()
