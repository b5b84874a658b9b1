"""Immutable IR nodes: frozen dataclasses whose children live in fields or tuples.

Every node class registers itself by name so that the serialiser and the generic
rewriters can walk any node without a per-class switch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

NODE_TYPES: dict[str, type[Node]] = {}

N = TypeVar("N", bound="Node")


class Node:
    """Base of expressions and statements; subclasses are frozen slotted dataclasses."""

    __slots__ = ()
    _field_names: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        NODE_TYPES[cls.__name__] = cls

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        names = cls.__dict__.get("_cached_field_names")
        if names is None:
            names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
            cls._cached_field_names = names  # type: ignore[attr-defined]
        return names


def map_children(node: N, fn: Callable[[Node], Node]) -> N:
    """Return `node` with `fn` applied to every direct child node (same node if unchanged)."""
    changes: dict[str, Any] = {}
    for name in node.field_names():
        value = getattr(node, name)
        new = _map_value(value, fn)
        if new is not value:
            changes[name] = new
    if not changes:
        return node
    return dataclasses.replace(node, **changes)  # type: ignore[type-var]


def _map_value(value: Any, fn: Callable[[Node], Node]) -> Any:
    if isinstance(value, Node):
        return fn(value)
    if isinstance(value, tuple) and value and any(isinstance(v, Node | tuple) for v in value):
        items = tuple(_map_value(v, fn) for v in value)
        if all(a is b for a, b in zip(items, value)):
            return value
        return items
    return value


def children(node: Node) -> list[Node]:
    """Direct child nodes in field order."""
    out: list[Node] = []
    for name in node.field_names():
        _collect(getattr(node, name), out)
    return out


def _collect(value: Any, out: list[Node]) -> None:
    if isinstance(value, Node):
        out.append(value)
    elif isinstance(value, tuple):
        for v in value:
            _collect(v, out)


def walk(node: Node) -> list[Node]:
    """All nodes of the tree in pre-order (parents before children)."""
    out: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(children(n)))
    return out
