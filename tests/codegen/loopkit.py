"""Hand-built loop kinds for codegen tests (before schedule primitives exist to make them)."""

from __future__ import annotations

from dataclasses import replace

from ir.node import Node, map_children
from ir.program import For, Program, annotations


def with_loop(program: Program, loop: str, kind: str, **ann: object) -> Program:
    """`program` with loop `loop` given `kind` (and annotations); it must exist."""
    found = []

    def visit(n: Node) -> Node:
        n = map_children(n, visit)
        if isinstance(n, For) and n.var.name == loop:
            found.append(n)
            return replace(n, kind=kind, annotations=annotations({**dict(n.annotations), **ann}))
        return n

    out = replace(program, body=visit(program.body))
    assert found, f"no loop {loop} in {program.name}"
    return out
