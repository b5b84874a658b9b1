"""How a library operator is described: parameters, builder, numpy reference, FLOPs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ir.compute import Workload


@dataclass(frozen=True)
class Param:
    """An integer parameter with its default and allowed values."""

    name: str
    default: int
    minimum: int = 1
    choices: tuple[int, ...] | None = None
    doc: str = ""
    maximum: int | None = None


@dataclass(frozen=True)
class OpDef:
    """One operator of the workload library.

    `build(**params)` returns the Workload whose inputs and outputs are in the
    documented call order; `reference(params, *inputs)` is the numpy function that
    is both the verification reference and the baseline timed against;
    `flops(params)` counts floating-point (or integer multiply-add) operations;
    `check(params)` raises WorkloadError for combinations that are not allowed
    (e.g. an empty output). `input_ranges(params)` narrows the verification
    inputs of some inputs to `{name: (low, high)}` (inclusive; a requantizing
    operator's scale and bias, whose full ranges would saturate every output);
    `float_twin(params)` is the float32 operator and parameters an integer or
    bf16 operator is timed against (DESIGN.md "Baselines").
    """

    name: str
    params: tuple[Param, ...]
    doc: str
    build: Callable[..., Workload]
    reference: Callable[..., tuple[np.ndarray, ...]]
    flops: Callable[[Mapping[str, int]], int | None]
    check: Callable[[Mapping[str, int]], None] = field(default=lambda p: None)
    input_ranges: Callable[[Mapping[str, int]], dict[str, tuple[float, float]]] = field(
        default=lambda p: {}
    )
    float_twin: Callable[[Mapping[str, int]], tuple[str, dict[str, int]]] | None = None

    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}
