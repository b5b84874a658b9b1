"""Exact JSON round trip of IR nodes, and the structural hash (the workload key).

A node is encoded as {"node": ClassName, field: value, ...}; tuples become lists and
non-finite floats become {"float": "inf" | "-inf" | "nan"}. The hash is the sha256
of the canonical encoding (sorted keys, no spaces), so it is the same in every
process and changes with any attribute of any node.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ir.errors import DefinitionError
from ir.node import NODE_TYPES, Node

PROGRAM_FORMAT = "loomtune.program/1"


def encode(value: Any) -> Any:
    if isinstance(value, Node):
        out: dict[str, Any] = {"node": type(value).__name__}
        for name in type(value).__dataclass_fields__:  # type: ignore[attr-defined]
            out[name] = encode(getattr(value, name))
        return out
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"cannot encode {type(value).__name__} in the IR")


def decode(data: Any, where: str = "$") -> Any:
    if isinstance(data, list):
        return tuple(decode(v, f"{where}[{i}]") for i, v in enumerate(data))
    if isinstance(data, dict):
        if set(data) == {"float"}:
            try:
                return float(data["float"])
            except (TypeError, ValueError):
                raise DefinitionError(f"{where}: bad float {data['float']!r}") from None
        kind = data.get("node")
        cls = NODE_TYPES.get(kind) if isinstance(kind, str) else None
        if cls is None or not hasattr(cls, "__dataclass_fields__"):
            raise DefinitionError(f"{where}: unknown node type {kind!r}")
        fields = cls.__dataclass_fields__  # type: ignore[attr-defined]
        extra = sorted(set(data) - set(fields) - {"node"})
        if extra:
            raise DefinitionError(f"{where}: {kind} has no field {extra[0]!r}")
        kwargs = {k: decode(v, f"{where}.{k}") for k, v in data.items() if k != "node"}
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as e:
            raise DefinitionError(f"{where}: invalid {kind}: {e}") from None
        except Exception as e:  # IRError from a node's own validation
            if type(e).__module__.startswith("ir."):
                raise DefinitionError(f"{where}: invalid {kind}: {e}") from None
            raise
    return data


def canonical_json(node: Node) -> str:
    return json.dumps(encode(node), sort_keys=True, separators=(",", ":"), allow_nan=False)


def structural_hash(node: Node) -> str:
    """sha256 hex of the canonical encoding: stable across processes and runs."""
    return hashlib.sha256(canonical_json(node).encode()).hexdigest()


def program_to_json(program: Node) -> dict[str, Any]:
    return {"format": PROGRAM_FORMAT, "program": encode(program)}


def program_from_json(data: Any) -> Any:
    from ir.program import Program

    if not isinstance(data, dict) or data.get("format") != PROGRAM_FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise DefinitionError(
            f"not a loomtune program: format is {got!r}, expected {PROGRAM_FORMAT!r}"
        )
    program = decode(data.get("program"), "$.program")
    if not isinstance(program, Program):
        raise DefinitionError("$.program: expected a Program node")
    return program
