"""A fused group as a task: a library operator when it is exactly one, else a custom workload.

The task's arguments are graph values, each with the shape the task declares for it:
buffers are contiguous, so a library matmul reads the graph's [1, 16, 64] activation as
[16, 64] (a view, no copy). Weights are task inputs like any other value; only scalar
constants (an epsilon, a GELU's 0.5, a clip's 6) become literals of the workload. The
inputs bound to load-time constants are the task's `layout_free` ones (part of its key):
the kernel is tuned as the model runs it, with what only rearranges them done at load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ir.definition import to_definition
from ir.graph.fuse import Group
from ir.graph.graph import Graph, Node
from ir.graph.lower_ops import GroupBuilder, Lazy, workload_of
from ir.graph.lower_winograd import winograd_eligible
from ir.graph.ops import OPS
from ir.task import Task, custom_task, library_task, with_layout_free


@dataclass(frozen=True)
class Arg:
    """A task argument: the graph value bound to it and the shape the task reads it as."""

    value: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class GroupTask:
    task: Task
    pattern: str
    inputs: tuple[Arg, ...]
    output: Arg
    flops: int
    alternatives: tuple[tuple[str, Task], ...] = ()
    """Other implementations of the group on the same arguments, by name ("winograd")."""


def pattern_of(graph: Graph, group: Group) -> str:
    """The group's ops in order, e.g. "matmul+add+gelu"; layout reads first, once each."""
    reads = list(dict.fromkeys(graph.nodes[i].op for i in group.reads))
    return "+".join([*reads, *(graph.nodes[i].op for i in group.nodes)])


def group_task(
    graph: Graph,
    group: Group,
    cache: dict[str, Task] | None = None,
    constant: Callable[[str], bool] = lambda _: False,
) -> GroupTask:
    """The task of one group (equal workloads share one Task object through `cache`);
    `constant(value)`: whether a graph value is a load-time constant of the model."""
    found = _group_task(graph, group, cache)
    alternatives = []
    if any(winograd_eligible(graph, graph.nodes[i]) for i in group.nodes):
        winograd = _custom(graph, group, cache, winograd=True)
        if winograd.inputs == found.inputs and winograd.output == found.output:
            alternatives.append(("winograd", winograd.task))
    return replace(
        found,
        task=_layout_free(found.task, found.inputs, cache, constant),
        alternatives=tuple(
            (name, _layout_free(t, found.inputs, cache, constant)) for name, t in alternatives
        ),
    )


def _layout_free(
    task: Task, args: Sequence[Arg], cache: dict[str, Task] | None, constant: Callable[[str], bool]
) -> Task:
    """`task` with its inputs bound to load-time constants declared layout-free."""
    names = [b.name for b in task.program.inputs]
    free = [n for n, a in zip(names, args) if constant(a.value)]
    if not free:
        return task
    return _cached(cache, f"{task.key}:{free}", lambda: with_layout_free(task, free))


def _group_task(graph: Graph, group: Group, cache: dict[str, Task] | None) -> GroupTask:
    pattern = pattern_of(graph, group)
    flops = sum(node_flops(graph, graph.nodes[i]) for i in group.nodes)
    matched = _library(graph, group)
    if matched is not None:
        op, params, ins, out = matched
        key = f"{op}:{sorted(params.items())}"
        task = _cached(cache, key, lambda: library_task(op, params))
        declared = [t.concrete_shape() for t in (*task.workload.inputs, *task.workload.outputs)]
        if declared == [a.shape for a in (*ins, out)]:
            return GroupTask(task, pattern, ins, out, flops)
    return _custom(graph, group, cache)


def _custom(
    graph: Graph, group: Group, cache: dict[str, Task] | None, *, winograd: bool = False
) -> GroupTask:
    """The group as a custom workload (`winograd`: its eligible convs by F(2×2, 3×3))."""
    pattern = pattern_of(graph, group)
    flops = sum(node_flops(graph, graph.nodes[i]) for i in group.nodes)
    builder, lazy = _build(graph, group, winograd)
    name = "fused_" + "_".join(graph.nodes[i].op for i in group.nodes)[:48]
    if winograd:
        name = "winograd_" + name[len("fused_") :]
    definition = to_definition(workload_of(builder, lazy, name))
    task = _cached(cache, repr(definition), lambda: custom_task(definition))
    ins = tuple(
        Arg(v, tuple(p.concrete_shape())) for v, p in zip(builder.input_values, builder.inputs)
    )
    out = Arg(group.output, task.workload.outputs[0].concrete_shape())
    return GroupTask(task, pattern, ins, out, flops)


def _cached(cache: dict[str, Task] | None, key: str, make: Callable[[], Task]) -> Task:
    if cache is None:
        return make()
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _build(graph: Graph, group: Group, winograd: bool = False) -> tuple[GroupBuilder, Lazy]:
    lazies: dict[str, Lazy] = {}
    reads = set(group.reads)

    def resolve(v: str) -> Lazy | None:
        if v in lazies:
            return lazies[v]
        p = graph.producer(v)
        if p is not None and p in reads:
            lazies.update(zip(graph.nodes[p].outputs, builder.lower(graph.nodes[p])))
            return lazies[v]
        return None

    builder = GroupBuilder(graph, resolve, winograd=winograd)
    for i in group.nodes:
        node = graph.nodes[i]
        lazies.update(zip(node.outputs, builder.lower(node)))
    return builder, lazies[group.output]


# --- FLOPs ----------------------------------------------------------------------------------


def node_flops(graph: Graph, node: Node) -> int:
    """Floating-point operations of one node (multiply-adds count two; layout ops none)."""
    out = graph.types[node.outputs[0]]
    size = out.size
    kind = OPS[node.op].kind
    if node.op == "matmul":
        a = graph.types[node.inputs[0]]
        return 2 * size * a.shape[-1]
    if node.op == "conv2d":
        w = graph.types[node.inputs[1]].shape
        taps = w[1] * w[2] * w[3] if node.attr("layout", "NCHW") == "NCHW" else w[0] * w[1] * w[2]
        return 2 * size * taps + (size if len(node.inputs) > 2 and node.inputs[2] else 0)
    if node.op in ("max_pool2d", "avg_pool2d"):
        kh, kw = node.attr("kernel")
        return size * kh * kw
    if node.op in ("global_avg_pool", "reduce_sum", "reduce_max", "reduce_mean"):
        return graph.types[node.inputs[0]].size
    if node.op == "softmax":
        return 4 * size
    if node.op == "layer_norm":
        return 8 * size
    if node.op == "gelu":
        return 8 * size
    return size if kind == "elementwise" else 0


# --- library operators -------------------------------------------------------------------------

Matched = tuple[str, dict[str, int], tuple[Arg, ...], Arg]
LIBRARY_EPS = 1e-5  # the library layer_norm's epsilon (ONNX's float32 1e-5 is within 1e-6 of it)


def _library(graph: Graph, group: Group) -> Matched | None:
    """The library operator a group is exactly (with views for its arguments), if any."""
    if group.reads:
        return None
    nodes = [graph.nodes[i] for i in group.nodes]
    ops = [n.op for n in nodes]
    if any(v in graph.constants and graph.constants[v].size == 1 for n in nodes for v in n.inputs):
        return None  # a scalar constant would be a literal of a custom workload instead
    first = nodes[0]
    if ops == ["matmul"]:
        return _matmul(graph, first, group.output)
    if ops in (["matmul", "add"], ["matmul", "add", "relu"]):
        return _dense(graph, nodes, group.output)
    if len(nodes) != 1:
        return None
    if first.op in ("softmax", "layer_norm", "gelu", "reduce_sum", "reduce_max"):
        return _rows(graph, first)
    if first.op == "conv2d":
        return _conv(graph, first)
    if first.op in ("max_pool2d", "avg_pool2d"):
        return _pool(graph, first)
    if first.op == "transpose" and graph.types[first.inputs[0]].rank == 2:
        m, n = graph.types[first.inputs[0]].shape
        return "transpose", {"m": m, "n": n}, (Arg(first.inputs[0], (m, n)),), _out(first, (n, m))
    return None


def _f32(graph: Graph, values: Sequence[str]) -> bool:
    return all(v and graph.types[v].dtype == "float32" for v in values)


def _out(node: Node, shape: tuple[int, ...], value: str | None = None) -> Arg:
    return Arg(value or node.outputs[0], shape)


def _matmul(graph: Graph, node: Node, output: str) -> Matched | None:
    a, b = (graph.types[v] for v in node.inputs)
    if not _f32(graph, node.inputs) or a.rank < 2 or b.rank < 2:
        return None
    k, n = b.shape[-2], b.shape[-1]
    if b.rank == 2:
        m = math.prod(a.shape[:-1])
        ins = (Arg(node.inputs[0], (m, k)), Arg(node.inputs[1], (k, n)))
        return "matmul", {"m": m, "n": n, "k": k}, ins, Arg(output, (m, n))
    if a.rank == b.rank and a.shape[:-2] == b.shape[:-2]:
        batch, m = math.prod(a.shape[:-2]), a.shape[-2]
        ins = (Arg(node.inputs[0], (batch, m, k)), Arg(node.inputs[1], (batch, k, n)))
        params = {"b": batch, "m": m, "n": n, "k": k}
        return "batch_matmul", params, ins, Arg(output, (batch, m, n))
    return None


def _dense(graph: Graph, nodes: list[Node], output: str) -> Matched | None:
    mm, add = nodes[0], nodes[1]
    found = _matmul(graph, mm, mm.outputs[0])
    if found is None or found[0] != "matmul":
        return None
    bias = [v for v in add.inputs if v != mm.outputs[0]]
    params = found[1]
    if len(bias) != 1 or graph.types[bias[0]].size != params["n"]:
        return None
    if (
        graph.types[bias[0]].shape[-1:] != (params["n"],)
        or graph.types[output].shape[-1] != params["n"]
    ):
        return None
    relu = int(len(nodes) == 3)
    ins = (*found[2], Arg(bias[0], (params["n"],)))
    return (
        "dense",
        {**params, "bias": 1, "relu": relu},
        ins,
        Arg(output, (params["m"], params["n"])),
    )


def _rows(graph: Graph, node: Node) -> Matched | None:
    """An operator along the last axis of a [m, n] view."""
    x = graph.types[node.inputs[0]]
    if not _f32(graph, [v for v in node.inputs if v]) or x.rank < 1:
        return None
    n = x.shape[-1]
    m = x.size // n if n else 0
    if node.op in ("reduce_sum", "reduce_max"):
        if tuple(node.attr("axes")) != (x.rank - 1,):
            return None
        return node.op, {"m": m, "n": n}, (Arg(node.inputs[0], (m, n)),), _out(node, (m,))
    if node.op == "gelu":
        if node.attr("approximate", "none") != "tanh":
            return None
    elif node.op == "softmax" and node.attr("axis") != x.rank - 1:
        return None
    elif node.op == "layer_norm":
        eps = float(node.attr("epsilon", 1e-5))
        if node.attr("axis") != x.rank - 1 or abs(eps - LIBRARY_EPS) > 1e-6 * LIBRARY_EPS:
            return None
        params = [v for v in node.inputs[1:] if v]
        if len(params) != 2 or any(graph.types[v].shape != (n,) for v in params):
            return None
        ins = (Arg(node.inputs[0], (m, n)), *(Arg(v, (n,)) for v in params))
        return "layer_norm", {"m": m, "n": n}, ins, _out(node, (m, n))
    return node.op, {"m": m, "n": n}, (Arg(node.inputs[0], (m, n)),), _out(node, (m, n))


def _symmetric(node: Node) -> tuple[int, int] | None:
    """(stride, pad) when both are the same along height and width and on every side."""
    (sh, sw), pads = node.attr("strides", (1, 1)), node.attr("pads", (0, 0, 0, 0))
    if node.attr("layout", "NCHW") != "NHWC" or sh != sw or len(set(pads)) != 1:
        return None
    return sh, pads[0]


def _conv(graph: Graph, node: Node) -> Matched | None:
    geometry = _symmetric(node)
    if geometry is None or (len(node.inputs) > 2 and node.inputs[2]):
        return None
    if not _f32(graph, node.inputs[:2]):
        return None
    (stride, pad), (dh, dw) = geometry, node.attr("dilations", (1, 1))
    n, h, w, ci = graph.types[node.inputs[0]].shape
    kh, kw, cig, co = graph.types[node.inputs[1]].shape
    out = _out(node, graph.types[node.outputs[0]].shape)
    x = Arg(node.inputs[0], (n, h, w, ci))
    groups = node.attr("groups", 1)
    if groups == 1 and dh == dw:
        params = {"n": n, "h": h, "w": w, "ci": ci, "co": co, "kh": kh, "kw": kw}
        params |= {"stride": stride, "pad": pad, "dilation": dh}
        return "conv2d_nhwc", params, (x, Arg(node.inputs[1], (kh, kw, ci, co))), out
    if groups == ci == co and cig == 1 and (dh, dw) == (1, 1):
        params = {"n": n, "h": h, "w": w, "c": ci, "kh": kh, "kw": kw, "stride": stride, "pad": pad}
        return "depthwise_conv2d_nhwc", params, (x, Arg(node.inputs[1], (kh, kw, ci))), out
    return None


def _pool(graph: Graph, node: Node) -> Matched | None:
    geometry = _symmetric(node)
    if geometry is None or not _f32(graph, node.inputs):
        return None
    if node.op == "avg_pool2d" and node.attr("count_include_pad", 0) and geometry[1]:
        return None
    n, h, w, c = graph.types[node.inputs[0]].shape
    kh, kw = node.attr("kernel")
    params = {"n": n, "h": h, "w": w, "c": c, "kh": kh, "kw": kw}
    params |= {"stride": geometry[0], "pad": geometry[1]}
    out = _out(node, graph.types[node.outputs[0]].shape)
    return node.op, params, (Arg(node.inputs[0], (n, h, w, c)),), out
