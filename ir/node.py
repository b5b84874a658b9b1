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


_SCALAR_ANNOTATIONS = frozenset(
    {"str", "int", "float", "bool", "int | float | bool", "str | None", "int | None"}
)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    """The fields of `cls` that may hold nodes: all but those annotated as plain scalars.

    Traversal is the IR's hottest code (lowering, scheduling, features); skipping
    names, dtypes and operators there roughly halves it.
    """
    names = _CHILD_FIELDS.get(cls)
    if names is None:
        annotation = {f.name: f.type for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        names = tuple(
            name
            for name in cls.field_names()  # type: ignore[attr-defined]  # a class may hide fields (Tensor.op)
            if not (
                isinstance(annotation.get(name), str) and annotation[name] in _SCALAR_ANNOTATIONS
            )
        )
        _CHILD_FIELDS[cls] = names
    return names


def map_children(node: N, fn: Callable[[Node], Node]) -> N:
    """Return `node` with `fn` applied to every direct child node (same node if unchanged)."""
    changes: dict[str, Any] | None = None
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Node):
            new = fn(value)
        elif isinstance(value, tuple) and value:
            new = _map_tuple(value, fn)
        else:
            continue
        if new is not value:
            if changes is None:
                changes = {}
            changes[name] = new
    if changes is None:
        return node
    return dataclasses.replace(node, **changes)  # type: ignore[type-var]


def _map_tuple(value: tuple[Any, ...], fn: Callable[[Node], Node]) -> tuple[Any, ...]:
    items: list[Any] | None = None
    for i, v in enumerate(value):
        if isinstance(v, Node):
            new = fn(v)
        elif isinstance(v, tuple) and v:
            new = _map_tuple(v, fn)
        else:
            continue
        if new is not v:
            if items is None:
                items = list(value)
            items[i] = new
    return value if items is None else tuple(items)


def children(node: Node) -> list[Node]:
    """Direct child nodes in field order."""
    out: list[Node] = []
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Node):
            out.append(value)
        elif isinstance(value, tuple):
            _collect(value, out)
    return out


def _collect(value: tuple[Any, ...], out: list[Node]) -> None:
    for v in value:
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, tuple):
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
