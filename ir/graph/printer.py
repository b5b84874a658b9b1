"""Readable text for a graph: a header with the inputs, one line per node with its
attributes and result types, and the outputs. Inputs and node results print as
`%name`, weights by their bare name."""

from __future__ import annotations

from typing import Any

from ir.graph.graph import Graph


def _attr(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_attr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, str):
        return repr(value)
    return repr(value)


def print_graph(graph: Graph) -> str:
    def ref(value: str) -> str:
        if not value:
            return "_"
        return value if value in graph.constants else f"%{value}"

    params = ", ".join(f"%{n}: {t}" for n, t in graph.inputs)
    lines = [f"graph {graph.name}({params}) {{"]
    lines += [f"  const {n}: {graph.types[n]}" for n in graph.constants]
    for node in graph.nodes:
        outs = ", ".join(ref(v) for v in node.outputs)
        args = [ref(v) for v in node.inputs] + [f"{k}={_attr(v)}" for k, v in node.attrs]
        types = ", ".join(str(graph.types[v]) for v in node.outputs)
        lines.append(f"  {outs} = {node.op}({', '.join(args)})  # {types}")
    lines.append(f"  return {', '.join(ref(v) for v in graph.outputs)}")
    lines.append("}")
    return "\n".join(lines) + "\n"
