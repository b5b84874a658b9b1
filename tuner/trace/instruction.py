"""Trace instructions: a primitive or a sampling call, with its inputs and outputs.

Inputs refer to earlier outputs by random-variable name (`RV("l1")`) or are
literals (ints, strings, None, lists of those, or an IR node such as an
IndexMap). Outputs are the names of the random variables the instruction
defines: `b` blocks, `l` loops, `v` sampled integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ir.node import Node
from ir.serialize import decode, encode

PRIMITIVES = (
    "get_block",
    "get_loops",
    "get_child_blocks",
    "split",
    "fuse",
    "reorder",
    "parallel",
    "vectorize",
    "unroll",
    "annotate",
    "compute_at",
    "reverse_compute_at",
    "compute_inline",
    "reverse_compute_inline",
    "cache_read",
    "cache_write",
    "accumulate_at",
    "decompose_reduction",
    "rfactor",
    "transform_layout",
    "read_through",
    "pack_panels",
    "pad_einsum",
    "blockize",
    "tensorize",
)
SAMPLING = ("sample_perfect_tile", "sample_categorical", "sample_compute_location", "sample_loop")
KINDS = PRIMITIVES + SAMPLING
PURE = ("get_block", "get_loops", "get_child_blocks", *SAMPLING)


@dataclass(frozen=True)
class RV:
    """A reference to the output of an earlier instruction."""

    name: str


@dataclass(frozen=True)
class Instruction:
    kind: str
    inputs: tuple[Any, ...]
    attrs: tuple[tuple[str, Any], ...]
    outputs: tuple[str, ...]

    @property
    def is_sampling(self) -> bool:
        return self.kind in SAMPLING

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)

    def used_rvs(self) -> set[str]:
        out: set[str] = set()
        _collect(self.inputs, out)
        _collect(tuple(v for _, v in self.attrs), out)
        return out


def _collect(value: Any, out: set[str]) -> None:
    if isinstance(value, RV):
        out.add(value.name)
    elif isinstance(value, tuple | list):
        for v in value:
            _collect(v, out)


def encode_arg(value: Any) -> Any:
    if isinstance(value, RV):
        return {"rv": value.name}
    if isinstance(value, Node):
        return encode(value)
    if isinstance(value, tuple | list):
        return [encode_arg(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot store {type(value).__name__} {value!r} in a trace")


def decode_arg(value: Any, where: str) -> Any:
    from tuner.trace.errors import TraceError

    if isinstance(value, list):
        return tuple(decode_arg(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, dict):
        if set(value) == {"rv"} and isinstance(value["rv"], str):
            return RV(value["rv"])
        if "node" in value:
            import ir.schedule.layout  # noqa: F401  (registers IndexMap, the one node traces carry)
            from ir.errors import DefinitionError

            try:
                return decode(value, where)
            except DefinitionError as e:
                raise TraceError(str(e)) from None
        raise TraceError(f"{where}: unexpected object {sorted(value)}")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TraceError(f"{where}: unexpected value {value!r}")
