"""The workload library: the operators of DESIGN.md, their parameters and numpy references.

    op, params, workload = instantiate("matmul", {"m": "256"})
    inputs = make_inputs(workload)
    (expected,) = op.reference(params, *inputs)

`instantiate` refuses a workload whose buffers exceed LOOMTUNE_MAX_BYTES before
anything is allocated: building a Workload only creates IR nodes, and its byte
count is Python-int arithmetic on the shapes.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping

import numpy as np

from ir import dtype as dt
from ir.arrays import aligned_copy
from ir.compute import Workload
from ir.errors import BufferTooLargeError, UnboundShapeError, WorkloadError
from ir.expr import Const, Reduce
from ir.library.conv import CONV2D_NCHW, CONV2D_NHWC, DEPTHWISE_CONV2D_NHWC
from ir.library.elementwise import GELU, TRANSPOSE
from ir.library.matmul import BATCH_MATMUL, DENSE, MATMUL, MATMUL_INT8
from ir.library.norm import LAYER_NORM, SOFTMAX
from ir.library.pool import AVG_POOL2D, MAX_POOL2D
from ir.library.quantized import (
    BATCH_MATMUL_BF16,
    CONV2D_NHWC_INT8,
    DENSE_BF16,
    DENSE_INT8,
    MATMUL_BF16,
)
from ir.library.reduce import REDUCE_MAX, REDUCE_SUM
from ir.library.spec import OpDef, Param

__all__ = [
    "DEFAULT_MAX_BYTES",
    "OPS",
    "OpDef",
    "Param",
    "get_op",
    "instantiate",
    "make_inputs",
    "max_bytes",
    "reduction_length",
    "resolve_params",
    "workload_bytes",
]

# In the order of DESIGN.md's table, then its Wave 2 operators (what `loomtune ops` lists).
OPS: dict[str, OpDef] = {
    op.name: op
    for op in (
        MATMUL,
        BATCH_MATMUL,
        DENSE,
        CONV2D_NHWC,
        CONV2D_NCHW,
        DEPTHWISE_CONV2D_NHWC,
        MAX_POOL2D,
        AVG_POOL2D,
        SOFTMAX,
        LAYER_NORM,
        REDUCE_SUM,
        REDUCE_MAX,
        GELU,
        TRANSPOSE,
        MATMUL_INT8,
        DENSE_INT8,
        CONV2D_NHWC_INT8,
        MATMUL_BF16,
        DENSE_BF16,
        BATCH_MATMUL_BF16,
    )
}

DEFAULT_MAX_BYTES = 4 * 2**30
MAX_BYTES_ENV = "LOOMTUNE_MAX_BYTES"

_INT_TEXT = re.compile(r"[+-]?[0-9]+")


def get_op(name: str) -> OpDef:
    """The library operator called `name`; the error lists the known names."""
    try:
        return OPS[name]
    except KeyError:
        raise WorkloadError(f"unknown operator {name!r}; known: {', '.join(OPS)}") from None


def _as_int(op: OpDef, name: str, value: object) -> int:
    """An integer from CLI text or JSON; floats, booleans and other text are refused."""
    if isinstance(value, bool):
        raise WorkloadError(f"{op.name}: parameter {name} must be an integer, got {value!r}")
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            try:
                return int(text)
            except ValueError:  # more digits than Python converts
                pass
    raise WorkloadError(f"{op.name}: parameter {name} must be an integer, got {value!r}")


def resolve_params(op: OpDef, given: Mapping[str, str | int]) -> dict[str, int]:
    """The defaults overridden by `given`, each validated, then the operator's own check."""
    specs = {p.name: p for p in op.params}
    params = op.defaults()
    for name, raw in given.items():
        spec = specs.get(name)
        if spec is None:
            raise WorkloadError(f"{op.name}: unknown parameter {name!r}; known: {', '.join(specs)}")
        value = _as_int(op, name, raw)
        if spec.choices is not None and value not in spec.choices:
            allowed = ", ".join(str(c) for c in spec.choices)
            raise WorkloadError(
                f"{op.name}: parameter {name} must be one of {allowed}, got {value}"
            )
        if value < spec.minimum:
            raise WorkloadError(
                f"{op.name}: parameter {name} must be >= {spec.minimum}, got {value}"
            )
        if spec.maximum is not None and value > spec.maximum:
            raise WorkloadError(
                f"{op.name}: parameter {name} must be <= {spec.maximum}, got {value}"
            )
        params[name] = value
    op.check(params)
    return params


def workload_bytes(workload: Workload) -> int:
    """Bytes of every tensor (inputs, intermediates, outputs), as exact Python ints."""
    total = 0
    for t in workload.tensors():
        total += math.prod(t.concrete_shape()) * dt.itemsize(t.dtype)
    return total


def max_bytes() -> int:
    """LOOMTUNE_MAX_BYTES (bytes), default 4 GiB; read at call time so tests and users can set it."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    if not _INT_TEXT.fullmatch(raw) or int(raw) <= 0:
        raise WorkloadError(
            f"{MAX_BYTES_ENV} must be a positive integer number of bytes, got {raw!r}"
        )
    return int(raw)


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def instantiate(
    name: str, given: Mapping[str, str | int]
) -> tuple[OpDef, dict[str, int], Workload]:
    """Resolve, build and size-check one library workload; nothing is allocated here."""
    op = get_op(name)
    params = resolve_params(op, given)
    workload = op.build(**params)
    total, limit = workload_bytes(workload), max_bytes()
    if total > limit:
        raise BufferTooLargeError(
            f"{name}: the workload's buffers need {total} bytes ({_gib(total)}), "
            f"over the limit of {limit} bytes ({_gib(limit)}, {MAX_BYTES_ENV})"
        )
    return op, params, workload


def make_inputs(
    workload: Workload,
    seed: int = 0,
    ranges: Mapping[str, tuple[float, float]] | None = None,
) -> list[np.ndarray]:
    """Verification and timing inputs: floats uniform in [-1, 1], integers over their full range,
    unless `ranges` names the input (`OpDef.input_ranges`, bounds inclusive).

    One generator seeded with `seed` draws the inputs in input order, so the same
    workload and seed give the same arrays in any process, each 64-byte aligned
    (`ir.arrays`).
    """
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for t in workload.inputs:
        shape = t.concrete_shape()
        np_dtype = dt.to_numpy(t.dtype)
        bounds = (ranges or {}).get(t.name)
        if dt.is_float(t.dtype):
            lo, hi = bounds or (-1.0, 1.0)
            arr = rng.uniform(lo, hi, size=shape).astype(np_dtype)
        elif t.dtype == "bool":
            arr = rng.integers(0, 1, size=shape, endpoint=True).astype(np_dtype)
        else:
            info = np.iinfo(np_dtype)
            lo, hi = (int(b) for b in bounds) if bounds else (info.min, info.max)
            arr = rng.integers(lo, hi, size=shape, dtype=np_dtype, endpoint=True)
        out.append(aligned_copy(arr))
    return out


def reduction_length(workload: Workload) -> int:
    """K of the tolerance: the element count of the largest reduction (1 if none)."""
    longest = 1
    for t in workload.computes():
        assert t.op is not None
        body = t.op.body
        if isinstance(body, Reduce):
            extents = []
            for axis in body.axes:
                if not isinstance(axis.extent, Const):
                    raise UnboundShapeError(
                        f"{workload.name}: reduction {axis.var.name} of {t.name} has a "
                        "symbolic extent; bind it to an integer first"
                    )
                extents.append(int(axis.extent.value))
            longest = max(longest, math.prod(extents))
    return longest
