"""Generic traversals: substitution, free variables, loads — pure functions over nodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ir.expr import Buffer, Expr, Load, Var
from ir.node import Node, map_children, walk


def post_order_rewrite(node: Node, fn: Callable[[Node], Node | None]) -> Node:
    """Rewrite bottom-up: children first, then `fn(node)` (None keeps the node)."""

    def visit(n: Node) -> Node:
        n = map_children(n, visit)
        out = fn(n)
        return n if out is None else out

    return visit(node)


def substitute(node: Node, mapping: Mapping[Var, Expr], *, into_buffers: bool = True) -> Node:
    """Replace variables by expressions everywhere in `node`.

    Buffer shapes only mention size variables; `into_buffers=False` leaves them
    alone when substituting loop or axis variables (whose names may coincide).
    """
    if not mapping:
        return node

    def visit(n: Node) -> Node:
        if isinstance(n, Var):
            return mapping.get(n, n)
        if not into_buffers and isinstance(n, Buffer):
            return n
        return map_children(n, visit)

    return visit(node)


def free_vars(node: Node) -> set[Var]:
    """All variables mentioned in `node` (bound or not: names are unique per program)."""
    return {n for n in walk(node) if isinstance(n, Var)}


def loads(node: Node) -> list[Load]:
    return [n for n in walk(node) if isinstance(n, Load)]


def uses_var(node: Node, var: Var) -> bool:
    return any(n == var for n in walk(node) if isinstance(n, Var))
