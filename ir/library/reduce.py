"""Row reductions along the last axis: reduce_sum and reduce_max."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ir import compute as te
from ir.compute import Workload
from ir.library.spec import OpDef, Param

ROW_PARAMS = (
    Param("m", 128, doc="rows: the length of the output"),
    Param("n", 256, doc="columns: the reduced (last) axis"),
)


def build_reduce_sum(m: int, n: int) -> Workload:
    """Y[i] = sum_r X[i, r]."""
    X = te.placeholder((m, n), "float32", "X")
    r = te.reduce_axis(n, "r")
    Y = te.compute((m,), lambda i: te.sum(X[i, r], axis=r), "Y")
    return Workload("reduce_sum", (X,), (Y,))


def build_reduce_max(m: int, n: int) -> Workload:
    """Y[i] = max_r X[i, r]."""
    X = te.placeholder((m, n), "float32", "X")
    r = te.reduce_axis(n, "r")
    Y = te.compute((m,), lambda i: te.max(X[i, r], axis=r), "Y")
    return Workload("reduce_max", (X,), (Y,))


def ref_reduce_sum(p: Mapping[str, int], X: np.ndarray) -> tuple[np.ndarray, ...]:
    return (X.sum(axis=-1),)


def ref_reduce_max(p: Mapping[str, int], X: np.ndarray) -> tuple[np.ndarray, ...]:
    return (X.max(axis=-1),)


def flops_row(p: Mapping[str, int]) -> int:
    """One add (or comparison) per element."""
    return p["m"] * p["n"]


REDUCE_SUM = OpDef(
    name="reduce_sum",
    params=ROW_PARAMS,
    doc="Sum along the last axis. Inputs: X[m,n] float32. Outputs: Y[m] float32.",
    build=build_reduce_sum,
    reference=ref_reduce_sum,
    flops=flops_row,
)

REDUCE_MAX = OpDef(
    name="reduce_max",
    params=ROW_PARAMS,
    doc="Maximum along the last axis. Inputs: X[m,n] float32. Outputs: Y[m] float32.",
    build=build_reduce_max,
    reference=ref_reduce_max,
    flops=flops_row,
)
