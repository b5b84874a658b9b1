"""2-D pooling over NHWC: max_pool2d and avg_pool2d.

Padding is guarded inside the reduction (no padded copy): for max a padding cell
reads as -inf so it never wins, for avg it adds 0 and is not counted, i.e. the
average is over the valid cells of each window only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ir import compute as te
from ir import dtype as dt
from ir.compute import Tensor, Workload
from ir.errors import WorkloadError
from ir.expr import Expr, IterVar, cast, logical_and, maximum, minimum, select
from ir.library.conv import check_window, out_size, pad_np, scaled, windows
from ir.library.spec import OpDef, Param

POOL_PARAMS = (
    Param("n", 1, doc="batch size"),
    Param("h", 32, doc="input height"),
    Param("w", 32, doc="input width"),
    Param("c", 32, doc="channels"),
    Param("kh", 3, doc="window height"),
    Param("kw", 3, doc="window width"),
    Param("stride", 2, doc="stride along height and width"),
    Param("pad", 1, minimum=0, doc="padding on each side; must be smaller than kh and kw"),
)


def check_pool(op: str, p: Mapping[str, int]) -> None:
    """Empty outputs and windows made only of padding (no valid cell to pool) are refused."""
    check_window(op, p)
    for kernel in ("kh", "kw"):
        if p["pad"] >= p[kernel]:
            raise WorkloadError(
                f"{op}: pad={p['pad']} must be smaller than {kernel}={p[kernel]}: "
                "some windows would hold only padding"
            )


def _window_load(
    X: Tensor,
    p: Mapping[str, int],
    b: Expr,
    i: Expr,
    j: Expr,
    ch: Expr,
    rh: IterVar,
    rw: IterVar,
    fill: float,
) -> Expr:
    """X at the window cell (rh, rw) of output (i, j); `fill` where that cell is padding."""
    stride, pad = p["stride"], p["pad"]
    y = scaled(i, stride) + rh
    x = scaled(j, stride) + rw
    if not pad:
        return X[b, y, x, ch]
    y, x = y - pad, x - pad
    inside = logical_and(y >= 0, y < p["h"], x >= 0, x < p["w"])
    return select(inside, X[b, y, x, ch], fill)


def _valid_count(start: Expr, kernel: int, size: int) -> Expr:
    """Cells of [start, start + kernel) that lie inside [0, size)."""
    return minimum(start + kernel, size) - maximum(start, 0)


# ---------------------------------------------------------------------------
# max_pool2d


def build_max_pool2d(
    n: int, h: int, w: int, c: int, kh: int, kw: int, stride: int, pad: int
) -> Workload:
    """Y[b,i,j,ch] = max over the window of X, padding cells reading as -inf."""
    p = {"h": h, "w": w, "stride": stride, "pad": pad}
    ho, wo = out_size(h, kh, stride, pad), out_size(w, kw, stride, pad)
    X = te.placeholder((n, h, w, c), "float32", "X")
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    lowest = dt.min_value("float32")
    Y = te.compute(
        (n, ho, wo, c),
        lambda b, i, j, ch: te.max(_window_load(X, p, b, i, j, ch, rh, rw, lowest), axis=[rh, rw]),
        "Y",
    )
    return Workload("max_pool2d", (X,), (Y,))


def ref_max_pool2d(p: Mapping[str, int], X: np.ndarray) -> tuple[np.ndarray, ...]:
    xp = pad_np(X, p["pad"], 1, value=-np.inf)
    return (windows(xp, p["kh"], p["kw"], p["stride"], 1, 1).max(axis=(-2, -1)),)


def flops_pool(p: Mapping[str, int]) -> int:
    """One comparison (max) or add (avg) per window cell."""
    ho = out_size(p["h"], p["kh"], p["stride"], p["pad"])
    wo = out_size(p["w"], p["kw"], p["stride"], p["pad"])
    return p["n"] * ho * wo * p["c"] * p["kh"] * p["kw"]


MAX_POOL2D = OpDef(
    name="max_pool2d",
    params=POOL_PARAMS,
    doc=(
        "2-D max pooling over NHWC; padding cells never win. Inputs: X[n,h,w,c] float32. "
        "Outputs: Y[n,ho,wo,c] float32 with ho = (h + 2·pad − kh) // stride + 1 (wo likewise)."
    ),
    build=build_max_pool2d,
    reference=ref_max_pool2d,
    flops=flops_pool,
    check=lambda p: check_pool("max_pool2d", p),
)

# ---------------------------------------------------------------------------
# avg_pool2d


def build_avg_pool2d(
    n: int, h: int, w: int, c: int, kh: int, kw: int, stride: int, pad: int
) -> Workload:
    """pool_sum = window sum of X (padding adds 0); Y = pool_sum / number of valid cells."""
    p = {"h": h, "w": w, "stride": stride, "pad": pad}
    ho, wo = out_size(h, kh, stride, pad), out_size(w, kw, stride, pad)
    X = te.placeholder((n, h, w, c), "float32", "X")
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    S = te.compute(
        (n, ho, wo, c),
        lambda b, i, j, ch: te.sum(_window_load(X, p, b, i, j, ch, rh, rw, 0.0), axis=[rh, rw]),
        "pool_sum",
    )

    def average(b: Expr, i: Expr, j: Expr, ch: Expr) -> Expr:
        if not pad:
            return S[b, i, j, ch] / float(kh * kw)
        count_h = _valid_count(scaled(i, stride) - pad, kh, h)
        count_w = _valid_count(scaled(j, stride) - pad, kw, w)
        return S[b, i, j, ch] / cast("float32", count_h * count_w)

    Y = te.compute((n, ho, wo, c), average, "Y")
    return Workload("avg_pool2d", (X,), (Y,))


def ref_avg_pool2d(p: Mapping[str, int], X: np.ndarray) -> tuple[np.ndarray, ...]:
    h, w, kh, kw, stride, pad = (p[k] for k in ("h", "w", "kh", "kw", "stride", "pad"))
    sums = windows(pad_np(X, pad, 1), kh, kw, stride, 1, 1).sum(axis=(-2, -1))
    ho, wo = sums.shape[1], sums.shape[2]
    start_h = np.arange(ho) * stride - pad
    start_w = np.arange(wo) * stride - pad
    count_h = np.minimum(start_h + kh, h) - np.maximum(start_h, 0)
    count_w = np.minimum(start_w + kw, w) - np.maximum(start_w, 0)
    counts = (count_h[:, None] * count_w[None, :]).astype(np.float32)
    return (sums / counts[None, :, :, None],)


def flops_avg_pool(p: Mapping[str, int]) -> int:
    ho = out_size(p["h"], p["kh"], p["stride"], p["pad"])
    wo = out_size(p["w"], p["kw"], p["stride"], p["pad"])
    return flops_pool(p) + p["n"] * ho * wo * p["c"]  # plus one divide per output


AVG_POOL2D = OpDef(
    name="avg_pool2d",
    params=POOL_PARAMS,
    doc=(
        "2-D average pooling over NHWC; padding cells are excluded from the average. "
        "Inputs: X[n,h,w,c] float32. Outputs: Y[n,ho,wo,c] float32 with "
        "ho = (h + 2·pad − kh) // stride + 1 (wo likewise). "
        "Intermediate: pool_sum[n,ho,wo,c] float32."
    ),
    build=build_avg_pool2d,
    reference=ref_avg_pool2d,
    flops=flops_avg_pool,
    check=lambda p: check_pool("avg_pool2d", p),
)
