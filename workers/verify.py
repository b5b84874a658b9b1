"""Verification against the reference: DESIGN.md's tolerance, NaN-filled outputs.

A result is correct when, element-wise,
    |out - ref| <= 1e-4 * |ref| + 1e-5 * sqrt(K) * max|ref|
(K: the reduction length, 1 if none), NaNs stand exactly where the reference has
them, and integer results are exact. Outputs are filled with NaN (integers: a
sentinel pattern) before every run, so a kernel that writes nothing cannot pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

import numpy as np

from ir.arrays import aligned_empty

K = TypeVar("K")

SENTINEL_BYTE = 0xA5


def fill_outputs(arrays: Sequence[np.ndarray]) -> None:
    for a in arrays:
        if np.issubdtype(a.dtype, np.floating):
            a.fill(np.nan)
        else:
            a.view(np.uint8).fill(SENTINEL_BYTE)


def empty_outputs(
    specs: Sequence[tuple[tuple[int, ...], np.dtype]], offset: int = 0
) -> list[np.ndarray]:
    """NaN-filled outputs starting `offset` bytes past a 64-byte boundary (`ir.arrays`)."""
    out = [
        aligned_empty(shape, dtype, offset=offset - offset % np.dtype(dtype).itemsize)
        for shape, dtype in specs
    ]
    fill_outputs(out)
    return out


def mismatch(
    out: np.ndarray, ref: np.ndarray, reduction_length: int = 1, name: str = "output"
) -> str | None:
    """None when `out` matches `ref` within the tolerance, else a one-line reason."""
    if out.shape != ref.shape:
        return f"{name}: shape {out.shape}, reference {ref.shape}"
    if out.dtype != ref.dtype:
        return f"{name}: dtype {out.dtype}, reference {ref.dtype}"
    if not np.issubdtype(ref.dtype, np.floating):
        bad = out != ref
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return f"{name}: {int(bad.sum())} integer element(s) differ, first at {idx}: {out[idx]} != {ref[idx]}"
        return None
    o = out.astype(np.float64)
    r = ref.astype(np.float64)
    nan_o, nan_r = np.isnan(o), np.isnan(r)
    if (nan_o != nan_r).any():
        idx = tuple(int(i) for i in np.argwhere(nan_o != nan_r)[0])
        what = (
            "NaN where the reference is a number"
            if nan_o[idx]
            else "a number where the reference is NaN"
        )
        return f"{name}: {int((nan_o != nan_r).sum())} element(s) with {what}, first at {idx}"
    finite = ~nan_r
    scale = float(np.max(np.abs(r[finite]))) if finite.any() else 0.0
    with np.errstate(invalid="ignore"):
        err = np.where(finite, np.abs(o - r), 0.0)
        tol = 1e-4 * np.abs(r) + 1e-5 * math.sqrt(max(reduction_length, 1)) * scale
        bad = err > tol
        # Infinities must match exactly.
        inf_bad = finite & np.isinf(r) & (o != r)
    bad = bad | inf_bad
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        return (
            f"{name}: {int(bad.sum())} of {bad.size} element(s) outside the tolerance, "
            f"first at {idx}: {o[idx]!r} vs reference {r[idx]!r} (max error {float(err.max()):.3g})"
        )
    return None


def verify(
    outputs: Sequence[np.ndarray],
    refs: Sequence[np.ndarray],
    names: Sequence[str],
    reduction_length: int = 1,
) -> str | None:
    """None when every output matches its reference, else the first reason."""
    for out, ref, name in zip(outputs, refs, names):
        reason = mismatch(out, np.asarray(ref), reduction_length, name)
        if reason:
            return reason
    return None


def first_wrong(
    runs: Iterable[tuple[K, Sequence[np.ndarray]]],
    refs: Sequence[np.ndarray],
    names: Sequence[str],
    reduction_length: int = 1,
) -> tuple[K, str] | None:
    """The first run (key, its outputs) whose outputs do not match, with the reason; None
    when all do. A kernel may run a variant per array offset (`codegen.kernel`)."""
    for key, outputs in runs:
        reason = verify(outputs, refs, names, reduction_length)
        if reason is not None:
            return key, reason
    return None
