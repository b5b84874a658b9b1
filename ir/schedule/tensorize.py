"""tensorize: replace a block's inner loops by a registered tensor intrinsic.

    with block("C_o"): ...                      with block("C_o"): ...
      for j1 in range(16):                 ->     vnni(C_local[vi_o, vj_o], A[vi_o, vk_o],
        for k in range(4):                             B_packed[vj_o // 16, vk_o // 4, 0, 0])
          with block("C"): C += A * B

The loops below must match the intrinsic's description (`ir.intrinsics`):
as many loops, the same extents, each spatial or reduction as the
description's; the same computation (operations and dtypes, operand by
operand); and each operand accessed with the description's element strides
(its layout: vnni wants B packed [N/16][K/4][16][4]), except the row stride of
an operand whose rows are free (AMX tiles). Given a loop, the loops at and
below it are blockized first. Refusals name the block, the loop or the
operand, and what differs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from ir.arith import Bounds, strides_in
from ir.expr import Binary, Buffer, Cast, Const, Expr, Load, Var, render
from ir.intrinsics import IntrinsicError, TensorIntrinsic, get_intrinsic
from ir.lower.simplify import simplify_expr
from ir.node import walk
from ir.program import BlockRealize, BufferStore, For, IntrinsicArg, IntrinsicCall, Program
from ir.schedule.blockize import blockize, loop_chain
from ir.schedule.state import (
    ScheduleError,
    all_blocks,
    find_block,
    find_loop,
    loops_above,
    replace_realize,
)
from ir.visit import substitute

Access = tuple[Buffer, tuple[Expr, ...]]


def tensorize(
    program: Program,
    target: str,
    intrinsic: str,
    *,
    is_block: bool,
    features: Sequence[str] | None = None,
) -> tuple[Program, str]:
    """Tensorize the block `target` (a blockized block) or the loops at `target`.

    `features` (the target's, without '+') are checked when given. Returns the
    tensorized block's name.
    """
    try:
        intrin = get_intrinsic(intrinsic)
    except IntrinsicError as e:
        raise ScheduleError(f"{'block' if is_block else 'loop'} {target}: {e}") from None
    where = f'block "{target}"' if is_block else f"loop {target}"
    if features is not None:
        missing = intrin.missing_features(tuple(features))
        if missing:
            raise ScheduleError(
                f"{where}: intrinsic {intrinsic} needs the target feature(s) "
                f"{', '.join(missing)}, which the target lacks"
            )
    if not is_block:
        _as_candidate(find_loop(program, target), where)
        program, target = blockize(program, target)
    r = find_block(program, target)
    body = r.block.body
    if not isinstance(body, For):
        raise ScheduleError(
            f'block "{target}": its body is not a loop nest over one block (blockize it first)'
        )
    outer = {
        iv.var: (0, int(iv.extent.value) - 1)
        for iv in r.block.iter_vars
        if isinstance(iv.extent, Const)
    }
    call = _match(intrin, _as_candidate(body, where), outer, where)
    new_block = replace(r.block, body=call)
    return replace_realize(program, target, lambda x: replace(x, block=new_block)), target


def _as_candidate(top: For, where: str) -> tuple[list[For], BlockRealize]:
    found = loop_chain(top)
    if found is None:
        raise ScheduleError(f"{where}: the loops below must nest perfectly over one block")
    return found


def _match(
    intrin: TensorIntrinsic,
    candidate: tuple[list[For], BlockRealize],
    outer: dict[Var, tuple[int, int]],
    where: str,
) -> IntrinsicCall:
    """The call replacing `candidate`'s loops, or ScheduleError saying what does not match."""
    name = intrin.name
    d_realize = all_blocks(intrin.program)[0]
    d_loops = loops_above(intrin.program, d_realize.block.name)
    loops, r = candidate
    extents = [int(lp.extent.value) if isinstance(lp.extent, Const) else None for lp in loops]
    want = [int(lp.extent.value) for lp in d_loops]  # type: ignore[attr-defined]
    if extents != want:
        shown = ", ".join("?" if e is None else str(e) for e in extents)
        raise ScheduleError(
            f"{where}: intrinsic {name} needs loops of extents ({', '.join(map(str, want))}) below, "
            f"found ({shown})"
        )
    for d_lp, lp in zip(d_loops, loops):
        d_role, role = _role(d_realize, d_lp.var), _role(r, lp.var)
        if d_role != role:
            raise ScheduleError(
                f"{where}: loop {lp.var.name} is {role} where intrinsic {name} has a {d_role} loop"
            )
    d_store, store = d_realize.block.body, r.block.body
    if not isinstance(store, BufferStore) or not isinstance(d_store, BufferStore):
        raise ScheduleError(f"{where}: the block below does not compute one store")
    if r.block.init is not None:
        raise ScheduleError(f"{where}: the block below still has its init (blockize moves it out)")
    bufmap: dict[str, Buffer] = {d_store.buffer.name: store.buffer}
    _same(d_store.value, store.value, bufmap, where, name)
    if d_store.buffer.dtype != store.buffer.dtype:
        raise ScheduleError(
            f"{where}: writes {store.buffer.dtype} where intrinsic {name} writes {d_store.buffer.dtype}"
        )
    # every access, in terms of the loops (bindings substituted)
    d_env = {iv.var: v for iv, v in zip(d_realize.block.iter_vars, d_realize.values)}
    env = {iv.var: v for iv, v in zip(r.block.iter_vars, r.values)}
    d_vars = [lp.var for lp in d_loops]
    c_vars = [lp.var for lp in loops]
    d_acc = _accesses(d_store, d_env)
    c_acc = _accesses(store, env)
    operands: dict[str, IntrinsicArg] = {}
    d_ranges = {lp.var: (0, e - 1) for lp, e in zip(d_loops, want)}
    c_ranges = {**outer, **{lp.var: (0, e - 1) for lp, e in zip(loops, want)}}
    for (d_buf, d_idx), (c_buf, c_idx) in zip(d_acc, c_acc):
        arg = _operand(
            intrin, (d_buf, d_idx, d_vars, d_ranges), (c_buf, c_idx, c_vars, c_ranges), want, where
        )
        known = operands.get(d_buf.name)
        if known is not None and known != arg:
            raise ScheduleError(
                f"{where}: {c_buf.name} is read and written at different elements; "
                f"intrinsic {name} accumulates in place"
            )
        operands[d_buf.name] = arg
    order = [b.name for b in (*intrin.program.outputs, *intrin.program.inputs)]
    return IntrinsicCall(name, tuple(operands[n] for n in order))


def _role(r: BlockRealize, var: Var) -> str:
    kinds = {
        iv.kind
        for iv, v in zip(r.block.iter_vars, r.values)
        if any(isinstance(n, Var) and n == var for n in walk(v))
    }
    return "reduction" if "reduce" in kinds else "spatial" if kinds else "unused"


def _same(d: Expr, c: Expr, bufmap: dict[str, Buffer], where: str, name: str) -> None:
    """`c` computes what `d` does (same operations and dtypes; loads matched operand by operand)."""
    why = None
    if type(d) is not type(c) or d.dtype != c.dtype:
        why = f"{render(c)} ({c.dtype}) where it computes {render(d)} ({d.dtype})"
    elif isinstance(d, Load):
        assert isinstance(c, Load)
        known = bufmap.setdefault(d.buffer.name, c.buffer)
        if known.name != c.buffer.name:
            why = f"reads {c.buffer.name} where it reads operand {d.buffer.name} ({known.name})"
    elif isinstance(d, Binary):
        assert isinstance(c, Binary)
        if d.op != c.op:
            why = f"{render(c)} where it computes {render(d)}"
        else:
            _same(d.a, c.a, bufmap, where, name)
            _same(d.b, c.b, bufmap, where, name)
    elif isinstance(d, Cast):
        assert isinstance(c, Cast)
        _same(d.value, c.value, bufmap, where, name)
    elif d != c:
        why = f"{render(c)} where it computes {render(d)}"
    if why is not None:
        raise ScheduleError(f"{where}: does not match intrinsic {name}: {why}")


def _accesses(store: BufferStore, env: dict[Var, Expr]) -> list[Access]:
    """The store and then every load, indices with the bindings substituted, in tree order."""
    out: list[Access] = [(store.buffer, tuple(substitute(i, env) for i in store.indices))]  # type: ignore[misc]
    for n in walk(store.value):
        if isinstance(n, Load):
            out.append((n.buffer, tuple(substitute(i, env) for i in n.indices)))  # type: ignore[misc]
    return out


def _steps(
    idx: tuple[Expr, ...], loop_vars: list[Var], ranges: Bounds, where: str, buf: str
) -> list[list[int]]:
    """Per loop, the index delta (per buffer dimension) of one step of that loop."""
    per_dim = [strides_in(simplify_expr(i, ranges), loop_vars) for i in idx]
    steps = [[0] * len(idx) for _ in loop_vars]
    for d, strides in enumerate(per_dim):
        for k, s in enumerate(strides):
            if s is None or s < 0:
                raise ScheduleError(
                    f"{where}: the access to {buf} is not a non-negative linear function of loop "
                    f"{loop_vars[k].name}"
                )
            steps[k][d] = s
    return steps


def _row_strides(buf: Buffer) -> list[int]:
    shape = buf.concrete_shape()
    return [math.prod(shape[d + 1 :]) for d in range(len(shape))]


Side = tuple[Buffer, tuple[Expr, ...], list[Var], dict[Var, tuple[int, int]]]


def _operand(
    intrin: TensorIntrinsic, desc: Side, cand: Side, extents: list[int], where: str
) -> IntrinsicArg:
    """The candidate's access as an operand, checked against the description's layout."""
    d_buf, d_idx, d_vars, d_ranges = desc
    c_buf, c_idx, c_vars, c_ranges = cand
    if c_buf.dtype != d_buf.dtype:
        raise ScheduleError(
            f"{where}: {c_buf.name} is {c_buf.dtype} where intrinsic {intrin.name}'s operand "
            f"{d_buf.name} is {d_buf.dtype}"
        )
    d_steps = _steps(d_idx, d_vars, d_ranges, where, d_buf.name)
    c_steps = _steps(c_idx, c_vars, c_ranges, where, c_buf.name)
    d_row, c_row = _row_strides(d_buf), _row_strides(c_buf)
    d_flat = [sum(s * w for s, w in zip(st, d_row)) for st in d_steps]
    c_flat = [sum(s * w for s, w in zip(st, c_row)) for st in c_steps]
    free = d_buf.name in intrin.free_rows
    for k, (want, got) in enumerate(zip(d_flat, c_flat)):
        rows = free and d_steps[k][0] != 0
        if (rows and got < want) or (not rows and got != want):
            raise ScheduleError(
                f"{where}: {c_buf.name} is accessed with element strides ({', '.join(map(str, c_flat))}) "
                f"over loops ({', '.join(v.name for v in c_vars)}), where intrinsic {intrin.name} "
                f"needs ({', '.join(map(str, d_flat))}) for its operand {d_buf.name}"
                + (" (rows may be further apart)" if free else "")
                + "; pack it into the intrinsic's layout"
            )
    zero = {v: Const(0, "int64") for v in c_vars}
    base = tuple(simplify_expr(substitute(i, zero), c_ranges) for i in c_idx)  # type: ignore[arg-type]
    return IntrinsicArg(c_buf, base, tuple(tuple(s) for s in c_steps), tuple(extents))


def operand_buffers(program: Program, block: str, intrinsic: str) -> dict[str, str] | None:
    """Which buffer of `block` each operand of `intrinsic` would be (None: the computation
    differs), so a rule knows what to pack before it tiles."""
    r = find_block(program, block)
    d_store = all_blocks(get_intrinsic(intrinsic).program)[0].block.body
    store = r.block.body
    if not isinstance(store, BufferStore) or not isinstance(d_store, BufferStore):
        return None
    if store.buffer.dtype != d_store.buffer.dtype:
        return None
    bufmap: dict[str, Buffer] = {d_store.buffer.name: store.buffer}
    try:
        _same(d_store.value, store.value, bufmap, f'block "{block}"', intrinsic)
    except ScheduleError:
        return None
    return {k: v.name for k, v in bufmap.items()}
