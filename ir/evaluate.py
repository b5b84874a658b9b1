"""An independent numpy evaluator of the compute DSL: the reference of custom workloads.

It evaluates each compute over index grids with numpy broadcasting, never through
the loop-nest program or the compiled kernel, so it checks them rather than
repeating them. A load is only required to be in bounds where its value is used:
`select(cond, X[i - 1], 0.0)` is fine at i = 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from ir import dtype as dt
from ir.compute import Tensor, Workload
from ir.errors import IRError, UnboundShapeError
from ir.expr import Binary, Call, Cast, Const, Expr, IterVar, Load, Reduce, Select, Var, render
from ir.node import walk

_CHUNK_ELEMENTS = 1 << 22


_MATH_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf (numpy has none): Python's correctly rounded math.erf per element, cast back."""
    x = np.asarray(x)
    return _MATH_ERF(x.astype(np.float64)).astype(x.dtype)


_NP_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "floordiv": np.floor_divide,
    "floormod": np.mod,
    "max": np.maximum,
    "min": np.minimum,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}
_NP_CALL = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "erf": _erf,
    "rint": np.rint,
}


def evaluate(
    workload: Workload, inputs: Sequence[np.ndarray], sizes: Mapping[str, int] | None = None
) -> list[np.ndarray]:
    """Outputs of `workload` for `inputs` (in the workload's input order)."""
    sizes = dict(sizes or {})
    if len(inputs) != len(workload.inputs):
        raise IRError(f"{workload.name}: {len(workload.inputs)} inputs expected, got {len(inputs)}")
    values: dict[str, np.ndarray] = {}
    for t, arr in zip(workload.inputs, inputs):
        shape = tuple(_int(s, sizes) for s in t.shape)
        if tuple(arr.shape) != shape:
            raise IRError(f"input {t.name}: shape {arr.shape}, expected {shape}")
        values[t.name] = np.asarray(arr, dtype=dt.to_numpy(t.dtype))
    for t in workload.computes():
        values[t.name] = _compute(t, values, sizes)
    return [values[t.name] for t in workload.outputs]


def _int(e: Expr, sizes: Mapping[str, int]) -> int:
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        if e.name not in sizes:
            raise UnboundShapeError(f"size {e.name} is not bound to an integer")
        return int(sizes[e.name])
    if isinstance(e, Binary):
        a, b = _int(e.a, sizes), _int(e.b, sizes)
        ops = {"add": a + b, "sub": a - b, "mul": a * b, "max": max(a, b), "min": min(a, b)}
        if e.op in ("floordiv", "floormod"):
            return a // b if e.op == "floordiv" else a % b
        if e.op in ops:
            return ops[e.op]
    raise IRError(f"extent {render(e)} is not an integer expression of sizes")


def _compute(t: Tensor, values: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> np.ndarray:
    assert t.op is not None
    body = t.op.body
    spatial: list[IterVar] = list(t.op.axes)
    reduce_axes: list[IterVar] = list(body.axes) if isinstance(body, Reduce) else []
    source = body.source if isinstance(body, Reduce) else body
    sshape = [_int(a.extent, sizes) for a in spatial]
    rshape = [_int(a.extent, sizes) for a in reduce_axes]
    out = np.empty(sshape, dtype=dt.to_numpy(t.dtype))
    axes = spatial + reduce_axes
    factors = _factors(body, axes)
    if factors is not None:
        _contract(out, factors, axes, len(spatial), rshape, values)
        return out
    for where in _chunks(sshape, rshape):
        grid = [s.stop - s.start for s in where]
        full = grid + rshape
        env: dict[Var, np.ndarray] = {}
        for d, axis in enumerate(spatial + reduce_axes):
            base = np.arange(full[d], dtype=np.int64) + (where[d].start if d < len(grid) else 0)
            shape = [1] * len(full)
            shape[d] = full[d]
            env[axis.var] = base.reshape(shape)
        mask = np.ones(full, dtype=bool)
        val = np.broadcast_to(eval_expr(source, env, values, mask), full)
        if isinstance(body, Reduce):
            axes = tuple(range(len(grid), len(full)))
            reducer = {"sum": np.sum, "max": np.max, "min": np.min}[body.combiner]
            kwargs = {"dtype": val.dtype} if body.combiner == "sum" else {}
            val = reducer(val, axis=axes, **kwargs)
        out[tuple(where)] = val
    return out


def _factors(body: Expr, axes: Sequence[IterVar]) -> list[tuple[Expr, list[int]]] | None:
    """A sum of a product, each factor with the axes it reads (by position), or None.

    A convolution or matmul reduction factors so: each operand is gathered over its own
    axes only and `np.einsum` contracts them (BLAS), instead of the whole output ×
    reduction grid being built element by element (11 s and 441 MiB for one ResNet-18
    layer)."""
    if not isinstance(body, Reduce) or body.combiner != "sum":
        return None
    terms: list[Expr] = []
    stack = [body.source]
    while stack:
        e = stack.pop()
        if isinstance(e, Binary) and e.op == "mul":
            stack += [e.b, e.a]
        else:
            terms.append(e)
    if len(terms) < 2:
        return None
    index = {a.var: d for d, a in enumerate(axes)}
    out = []
    for term in terms:
        used = {index[n] for n in walk(term) if isinstance(n, Var) and n in index}
        out.append((term, sorted(used)))
    read = {d for _, dims in out for d in dims}
    if any(d not in read for d in range(len(axes)) if d >= len(axes) - len(body.axes)):
        return None  # a reduction axis no factor reads multiplies by its extent: the grid path
    return out


def _contract(
    out: np.ndarray,
    factors: Sequence[tuple[Expr, Sequence[int]]],
    axes: Sequence[IterVar],
    n_spatial: int,
    rshape: Sequence[int],
    values: Mapping[str, np.ndarray],
) -> None:
    """`out` = the sum over the reduction axes of the product of `factors`, chunked over
    the spatial axes by the largest factor's grid."""
    widest = max(factors, key=lambda f: len(f[1]))[1]
    inner = [rshape[d - n_spatial] for d in widest if d >= n_spatial]
    letters = [chr(ord("a") + d) for d in range(len(axes))]
    read = sorted({d for _, dims in factors for d in dims if d < n_spatial})
    spec = ",".join("".join(letters[d] for d in dims) for _, dims in factors)
    spec += "->" + "".join(letters[d] for d in read)  # an axis no factor reads: broadcast
    for where in _chunks(list(out.shape), inner):
        full = [s.stop - s.start for s in where] + list(rshape)
        env: dict[Var, np.ndarray] = {}
        for d, axis in enumerate(axes):
            base = np.arange(full[d], dtype=np.int64) + (where[d].start if d < n_spatial else 0)
            env[axis.var] = base.reshape([full[d] if k == d else 1 for k in range(len(full))])
        operands = []
        for term, dims in factors:
            mask = np.ones([full[d] if d in dims else 1 for d in range(len(full))], dtype=bool)
            value = np.broadcast_to(eval_expr(term, env, values, mask), mask.shape)
            operands.append(value.reshape([full[d] for d in dims]))
        result = np.einsum(spec, *operands, optimize=True)
        result = result.reshape([full[d] if d in read else 1 for d in range(n_spatial)])
        out[tuple(where)] = result.astype(out.dtype, copy=False)


def _chunks(sshape: Sequence[int], rshape: Sequence[int]) -> Iterator[list[slice]]:
    """Slices of the spatial domain whose grids (with the reduction) stay near
    `_CHUNK_ELEMENTS`: the leading axes one index at a time, the first axis whose
    remainder fits split in steps, the rest whole — so a batch-1 convolution is
    evaluated a few output rows at a time, not all at once."""
    inner = int(np.prod(rshape, dtype=np.int64))
    d = len(sshape)  # the axis to step along: the first whose inner part fits
    while d > 0 and inner * sshape[d - 1] <= _CHUNK_ELEMENTS:
        d -= 1
        inner *= sshape[d]
    if d == 0:  # everything fits at once
        yield [slice(0, n) for n in sshape]
        return
    split = d - 1  # sshape[split:] does not fit whole: step along `split`
    step = max(1, _CHUNK_ELEMENTS // max(inner, 1))
    for outer in np.ndindex(*sshape[:split]):
        for start in range(0, sshape[split], step):
            stop = min(sshape[split], start + step)
            yield (
                [slice(i, i + 1) for i in outer]
                + [slice(start, stop)]
                + [slice(0, n) for n in sshape[split + 1 :]]
            )


def eval_expr(
    e: Expr, env: Mapping[Var, np.ndarray], values: Mapping[str, np.ndarray], mask: np.ndarray
) -> np.ndarray:
    """`e` over index grids: `env` binds variables to arrays, `values` names buffers.

    Only lanes where `mask` holds must be valid (in bounds, no division by zero).
    """
    if isinstance(e, Var):
        if e not in env:
            raise IRError(f"variable {e.name} is not an axis of this compute")
        return env[e]
    if isinstance(e, Const):
        return np.asarray(e.value, dtype=dt.to_numpy(e.dtype))
    if isinstance(e, Binary):
        a = eval_expr(e.a, env, values, mask)
        b = eval_expr(e.b, env, values, mask)
        with np.errstate(all="ignore"):
            if e.op in ("floordiv", "floormod"):
                b = np.where(np.broadcast_to(mask, np.broadcast(a, b, mask).shape), b, 1)
            r = _NP_BINARY[e.op](a, b)
        return r.astype(dt.to_numpy(e.dtype), copy=False)
    if isinstance(e, Call):
        with np.errstate(all="ignore"):
            return _NP_CALL[e.fn](eval_expr(e.args[0], env, values, mask))
    if isinstance(e, Cast):
        v = eval_expr(e.value, env, values, mask)
        with np.errstate(all="ignore"):
            return v.astype(dt.to_numpy(e.dtype))
    if isinstance(e, Select):
        c = np.broadcast_to(eval_expr(e.cond, env, values, mask), mask.shape)
        t = eval_expr(e.true_value, env, values, mask & c)
        f = eval_expr(e.false_value, env, values, mask & ~c)
        return np.where(c, t, f)
    if isinstance(e, Load):
        arr = values[e.buffer.name]
        idx = []
        for d, ix in enumerate(e.indices):
            i = np.broadcast_to(eval_expr(ix, env, values, mask), mask.shape)
            bad = mask & ((i < 0) | (i >= arr.shape[d]))
            if bad.any():
                raise IRError(
                    f"{e.buffer.name}[{', '.join(render(x) for x in e.indices)}] reads out of "
                    f"bounds in dimension {d} (extent {arr.shape[d]})"
                )
            idx.append(np.clip(i, 0, arr.shape[d] - 1))
        return arr[tuple(idx)]
    if isinstance(e, Reduce):
        raise IRError("a reduction must be the whole body of a compute")
    raise IRError(f"cannot evaluate {type(e).__name__}")
