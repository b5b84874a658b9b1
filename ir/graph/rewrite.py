"""Graph rewrites before fusion: the patterns exporters spell out become one op each.

- layer norm written out (opset < 17 exporters): ReduceMean, Sub, Pow 2 (or Mul by
  itself), ReduceMean, Add ε, Sqrt, Div, then optionally Mul γ and Add β — becomes
  `layer_norm(x, γ, β)`, a single reduction group;
- GELU's erf form: x·0.5·(1 + erf(x/√2)) in the orders PyTorch writes it — becomes
  `gelu(approximate="none")`, so a matmul's epilogue reads "matmul+add+gelu";
- a transpose that only moves dimensions of extent 1 is a reshape (a view), and two
  transposes in a row are one.
Each rewrite only fires when the pattern's inner values are used nowhere else.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ir.graph.graph import Graph, Node, make_node


def canonicalize(graph: Graph) -> Graph:
    """`graph` with the patterns above rewritten and dead nodes removed."""
    g = graph.pruned()
    for rewrite in (_layer_norms, _gelus, _transposes):
        g = rewrite(g)
    return g


class _Editor:
    """Collects replacements: nodes dropped, nodes put in place of others, new constants."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.dropped: set[int] = set()
        self.replaced: dict[int, Node] = {}
        self.constants: dict[str, np.ndarray] = {}

    def only_user(self, value: str, node: int | None = None) -> int | None:
        """The single consumer of `value` (which is no graph output), if it has one."""
        users = self.graph.consumers(value)
        if value in self.graph.outputs or len(users) != 1:
            return None
        if users[0] in self.dropped or users[0] in self.replaced:
            return None
        return users[0] if node is None or users[0] == node else None

    def node(self, value: str) -> tuple[int, Node] | None:
        i = self.graph.producer(value)
        if i is None or i in self.dropped or i in self.replaced:
            return None
        return i, self.graph.nodes[i]

    def scalar(self, value: str) -> float | None:
        a = self.graph.constants.get(value)
        if a is None or a.size != 1 or a.dtype.kind != "f":
            return None
        return float(a.reshape(()))

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.graph.types or name in self.constants:
            n += 1
            name = f"{base}_{n}"
        return name

    def result(self) -> Graph:
        if not self.dropped and not self.replaced:
            return self.graph
        nodes = [
            self.replaced.get(i, n) for i, n in enumerate(self.graph.nodes) if i not in self.dropped
        ]
        consts = {**self.graph.constants, **self.constants}
        return self.graph.with_nodes(nodes, constants=consts).pruned()


def _other(node: Node, value: str) -> str | None:
    """The other input of a binary node that reads `value` once."""
    a, b = node.inputs
    if a == value and b != value:
        return b
    if b == value and a != value:
        return a
    return None


def _close(x: float | None, want: float) -> bool:
    return x is not None and abs(x - want) <= 1e-4 * abs(want)


def _match(ed: _Editor, value: str, op: str) -> tuple[int, Node] | None:
    found = ed.node(value)
    return found if found is not None and found[1].op == op else None


def _each(graph: Graph, op: str, fn: Callable[[_Editor, int], None]) -> Graph:
    ed = _Editor(graph)
    for i, node in enumerate(graph.nodes):
        if node.op == op and i not in ed.dropped and i not in ed.replaced:
            fn(ed, i)
    return ed.result()


# --- layer norm --------------------------------------------------------------------------


def _layer_norms(graph: Graph) -> Graph:
    return _each(graph, "div", _layer_norm_at)


def _layer_norm_at(ed: _Editor, div_i: int) -> None:
    g = ed.graph
    d, s = g.nodes[div_i].inputs
    root = _match(ed, s, "sqrt")
    if root is None or ed.only_user(s, div_i) is None:
        return
    e_val = root[1].inputs[0]
    add = _match(ed, e_val, "add")
    if add is None or ed.only_user(e_val, root[0]) is None:
        return
    v_val = next((v for v in add[1].inputs if ed.scalar(v) is None), None)
    eps_val = _other(add[1], v_val) if v_val else None
    eps = ed.scalar(eps_val) if eps_val else None
    var = _match(ed, v_val, "reduce_mean") if v_val else None
    if var is None or eps is None or ed.only_user(v_val, add[0]) is None:
        return
    p_val = var[1].inputs[0]
    sq = ed.node(p_val)
    if sq is None or ed.only_user(p_val, var[0]) is None:
        return
    square = sq[1].op == "pow" and _close(ed.scalar(sq[1].inputs[1]), 2.0) and sq[1].inputs[0] == d
    square = square or (sq[1].op == "mul" and sq[1].inputs == (d, d))
    sub = _match(ed, d, "sub")
    if not square or sub is None or set(g.consumers(d)) != {sq[0], div_i} or d in g.outputs:
        return
    x, m = sub[1].inputs
    mean = _match(ed, m, "reduce_mean")
    if mean is None or mean[1].inputs[0] != x or ed.only_user(m, sub[0]) is None:
        return
    rank = g.types[x].rank
    axes = tuple(mean[1].attr("axes"))
    if axes != tuple(var[1].attr("axes")) or not axes or axes != tuple(range(axes[0], rank)):
        return
    if not (mean[1].attr("keepdims", 1) and var[1].attr("keepdims", 1)):
        return
    inner = [mean[0], sub[0], sq[0], var[0], add[0], root[0]]
    out, last = g.nodes[div_i].outputs[0], div_i
    trailing = g.types[x].shape[axes[0] :]
    scale = bias = ""
    for op in ("mul", "add"):  # γ then β, each optional, folded when constant and fitting
        user = ed.only_user(out)
        other = _other(g.nodes[user], out) if user is not None and g.nodes[user].op == op else None
        if other is None or other not in g.constants or not _fits(g.types[other].shape, trailing):
            break
        if op == "mul":
            scale = other
        else:
            bias = other
        inner.append(last)
        out, last = g.nodes[user].outputs[0], user
    if not scale:
        if bias:
            return
        scale = ed.fresh(f"{out}_ln_scale")
        ed.constants[scale] = np.ones(trailing, _np_dtype(g, x))
    ed.dropped.update(inner)
    ed.replaced[last] = make_node(
        "layer_norm", (x, scale, bias), (out,), name=g.nodes[last].name, axis=axes[0], epsilon=eps
    )


def _np_dtype(g: Graph, value: str) -> np.dtype:
    from ir.dtype import to_numpy

    return np.dtype(to_numpy(g.types[value].dtype))


def _fits(shape: tuple[int, ...], trailing: tuple[int, ...]) -> bool:
    """`shape` broadcasts to the normalised dims without adding any (γ, β of a layer norm)."""
    if len(shape) > len(trailing):
        lead = shape[: len(shape) - len(trailing)]
        if any(d != 1 for d in lead):
            return False
        shape = shape[len(lead) :]
    return all(d in (1, t) for d, t in zip(shape, trailing[len(trailing) - len(shape) :]))


# --- GELU (erf form) ---------------------------------------------------------------------


def _gelus(graph: Graph) -> Graph:
    return _each(graph, "erf", _gelu_at)


def _gelu_at(ed: _Editor, erf_i: int) -> None:
    g = ed.graph
    a = g.nodes[erf_i].inputs[0]
    scaled = ed.node(a)
    if scaled is None or ed.only_user(a, erf_i) is None:
        return
    op, (x, k) = scaled[1].op, scaled[1].inputs
    ok = (op == "div" and _close(ed.scalar(k), math.sqrt(2.0))) or (
        op == "mul" and _close(ed.scalar(k), 1.0 / math.sqrt(2.0))
    )
    if not ok:
        return
    e = g.nodes[erf_i].outputs[0]
    one_i = ed.only_user(e)
    if one_i is None or g.nodes[one_i].op != "add":
        return
    if not _close(ed.scalar(_other(g.nodes[one_i], e) or ""), 1.0):
        return
    c = g.nodes[one_i].outputs[0]
    inner = [scaled[0], erf_i, one_i]
    last = _gelu_tail(ed, x, c, inner)
    if last is None:
        return
    ed.dropped.update(inner)
    out = g.nodes[last].outputs[0]
    ed.replaced[last] = make_node("gelu", (x,), (out,), name=g.nodes[last].name, approximate="none")


def _gelu_tail(ed: _Editor, x: str, c: str, inner: list[int]) -> int | None:
    """The node ending x·(1+erf)·0.5 in any of PyTorch's three orders (inner gets the rest)."""
    g = ed.graph
    user = ed.only_user(c)
    if user is None or g.nodes[user].op != "mul":
        return None
    other = _other(g.nodes[user], c)
    if other == x:  # (x·c)·0.5
        out = g.nodes[user].outputs[0]
        half = ed.only_user(out)
        if half is None or g.nodes[half].op != "mul":
            return None
        if not _close(ed.scalar(_other(g.nodes[half], out) or ""), 0.5):
            return None
        inner.append(user)
        return half
    if other is not None and _close(ed.scalar(other), 0.5):  # x·(c·0.5)
        out = g.nodes[user].outputs[0]
        final = ed.only_user(out)
        if final is None or g.nodes[final].op != "mul" or _other(g.nodes[final], out) != x:
            return None
        inner.append(user)
        return final
    h = ed.node(other) if other else None  # (x·0.5)·c
    if h is None or h[1].op != "mul" or ed.only_user(other, user) is None:
        return None
    if _other(h[1], x) is None or not _close(ed.scalar(_other(h[1], x) or ""), 0.5):
        return None
    inner.append(h[0])
    return user


# --- transposes --------------------------------------------------------------------------


def _transposes(graph: Graph) -> Graph:
    ed = _Editor(graph)
    for i, node in enumerate(graph.nodes):
        if node.op != "transpose":
            continue
        perm = tuple(node.attr("perm"))
        src = node.inputs[0]
        prev = _match(ed, src, "transpose")
        if prev is not None and ed.only_user(src, i) is not None:
            inner = tuple(prev[1].attr("perm"))
            perm = tuple(inner[p] for p in perm)
            src = prev[1].inputs[0]
            ed.dropped.add(prev[0])
        shape = graph.types[src].shape
        moved = [p for p in perm if shape[p] != 1]
        out = node.outputs[0]
        if perm == tuple(range(len(perm))) or moved == sorted(moved):
            new_shape = graph.types[out].shape
            ed.replaced[i] = make_node("reshape", (src,), (out,), name=node.name, shape=new_shape)
        elif src != node.inputs[0]:
            ed.replaced[i] = make_node("transpose", (src,), (out,), name=node.name, perm=perm)
    return ed.result()
