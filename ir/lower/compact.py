"""Compact buffers: an intermediate lives only where it is used, at the size used there.

    C_local = alloc(float32[1024, 1024])                for i_0 in parallel(128):
    for i_0 in parallel(128):                             for j_0 in range(32):
      for j_0 in range(32):                      ->         C_local = alloc(float32[8, 32])
        ... C_local[i_0*8 + i_1, j_0*32 + j_1] ...            ... C_local[i_1, j_1] ...

For each intermediate buffer: find the innermost loop L enclosing every access;
if the regions the accesses touch in one iteration of L are disjoint from those
of other iterations (so no value flows from one iteration to the next through
the buffer), allocate the buffer inside L at the size of one iteration's region
and shift the indices; otherwise try L's parent. A tile allocated inside a
parallel loop is private to each thread, and a small local tile can live in
registers. Buffers that cannot be compacted stay whole, allocated per call.
"""

from __future__ import annotations

from dataclasses import replace

from ir.arith import bound, build_linear, linear_form
from ir.expr import Buffer, Const, Expr, Load, Var
from ir.lower.simplify import simplify_expr
from ir.node import Node, map_children
from ir.program import (
    Allocate,
    BufferStore,
    For,
    IfThenElse,
    IntrinsicArg,
    IntrinsicCall,
    Program,
    SeqStmt,
    Stmt,
)

Access = tuple[tuple[Expr, ...], list[For]]


def compact_buffers(program: Program) -> Program:
    keep: list[Buffer] = []
    body = program.body
    for buf in program.allocs:
        new_body = _compact_one(body, buf)
        if new_body is None:
            keep.append(buf)
        else:
            body = new_body
    return replace(program, body=body, allocs=tuple(keep))


def _accesses(stmt: Stmt, name: str) -> list[Access]:
    out: list[Access] = []

    def visit(s: Stmt, loops: list[For]) -> None:
        if isinstance(s, For):
            visit(s.body, [*loops, s])
        elif isinstance(s, SeqStmt):
            for x in s.stmts:
                visit(x, loops)
        elif isinstance(s, IfThenElse):
            _exprs(s.cond, loops)
            visit(s.then_case, loops)
            if s.else_case is not None:
                visit(s.else_case, loops)
        elif isinstance(s, Allocate):
            visit(s.body, loops)
        elif isinstance(s, IntrinsicCall):
            for arg in s.args:
                if arg.buffer.name == name:  # its first and its last element bound the region
                    out.append((arg.indices, loops))
                    out.append((_last_element(arg), loops))
                for i in arg.indices:
                    _exprs(i, loops)
        elif isinstance(s, BufferStore):
            if s.buffer.name == name:
                out.append((s.indices, loops))
            _exprs(s.value, loops)
            for i in s.indices:
                _exprs(i, loops)

    def _exprs(e: Node, loops: list[For]) -> None:
        from ir.node import walk

        for n in walk(e):
            if isinstance(n, Load) and n.buffer.name == name:
                out.append((n.indices, loops))

    visit(stmt, [])
    return out


def _last_element(arg: IntrinsicArg) -> tuple[Expr, ...]:
    return tuple(
        simplify_expr(i + sum((e - 1) * st[d] for st, e in zip(arg.steps, arg.extents)))
        for d, i in enumerate(arg.indices)
    )


def _compact_one(body: Stmt, buf: Buffer) -> Stmt | None:
    accesses = _accesses(body, buf.name)
    if not accesses:
        return None
    common = _common_prefix([loops for _, loops in accesses])
    shape = buf.concrete_shape()
    # Each index's linear form, once: every depth tried below relaxes the same forms.
    forms = [[linear_form(simplify_expr(idx)) for idx in indices] for indices, _ in accesses]
    for depth in range(len(common), 0, -1):
        anchor = common[depth - 1]
        region = _union_region(accesses, forms, depth, shape)
        if region is None or not _disjoint_across(region, anchor):
            continue
        extents = [e for _, e in region]
        if extents == list(shape):
            return None
        mins = [m for m, _ in region]
        new_buf = replace(buf, shape=tuple(Const(e, "int64") for e in extents))
        return _rewrite(body, anchor.var, buf.name, new_buf, mins)
    return None


def _common_prefix(chains: list[list[For]]) -> list[For]:
    prefix: list[For] = []
    for group in zip(*chains):
        if all(f is group[0] for f in group):
            prefix.append(group[0])
        else:
            break
    return prefix


Linear = tuple[dict[Expr, int], int] | None


def _union_region(
    accesses: list[Access], forms: list[list[Linear]], depth: int, shape: tuple[int, ...]
) -> list[tuple[Expr, int]] | None:
    """Per dimension (min, extent) over one iteration of the depth-th loop, or None.

    `forms[a][d]` is the linear form of access a's d-th index (`linear_form`)."""
    dims: list[list[tuple[dict[Expr, int], int, int]]] = [[] for _ in shape]
    for (_, loops), lins in zip(accesses, forms):
        relax: dict[Var, tuple[int, int]] = {}
        for f in loops[depth:]:
            if not isinstance(f.extent, Const):
                return None
            relax[f.var] = (0, int(f.extent.value) - 1)
        for d, lin in enumerate(lins):
            if lin is None:
                return None
            terms, const = lin
            fixed: dict[Expr, int] = {}
            lo = hi = const
            for atom, c in terms.items():
                atom_vars = _vars(atom)
                if not any(v in relax for v in atom_vars):
                    fixed[atom] = c
                    continue
                if any(v not in relax for v in atom_vars):
                    return None
                rng = bound(atom, relax)
                if rng is None:
                    return None
                lo += min(c * rng[0], c * rng[1])
                hi += max(c * rng[0], c * rng[1])
            dims[d].append((fixed, lo, hi))
    region: list[tuple[Expr, int]] = []
    for entries in dims:
        fixed0 = entries[0][0]
        if any(fx != fixed0 for fx, _, _ in entries):
            return None
        lo = min(e[1] for e in entries)
        hi = max(e[2] for e in entries)
        region.append((build_linear(fixed0, lo, "int64"), hi - lo + 1))
    return region


def _vars(e: Expr) -> list[Var]:
    from ir.node import walk

    return [n for n in walk(e) if isinstance(n, Var)]


def _disjoint_across(region: list[tuple[Expr, int]], anchor: For) -> bool:
    """Whether iterations of `anchor` touch disjoint parts of the buffer."""
    for mn, ext in region:
        lin = linear_form(mn)
        if lin is not None and abs(lin[0].get(anchor.var, 0)) >= ext:
            return True
    return False


def _rewrite(body: Stmt, anchor: Var, name: str, new_buf: Buffer, mins: list[Expr]) -> Stmt:
    def shift(indices: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return tuple(simplify_expr(i - m) for i, m in zip(indices, mins))

    def visit(n: Node) -> Node:
        if isinstance(n, Load) and n.buffer.name == name:
            return Load(new_buf, shift(tuple(visit(i) for i in n.indices)))  # type: ignore[misc]
        if isinstance(n, BufferStore) and n.buffer.name == name:
            return BufferStore(new_buf, visit(n.value), shift(tuple(visit(i) for i in n.indices)))  # type: ignore[arg-type,misc]
        if isinstance(n, IntrinsicArg) and n.buffer.name == name:
            return replace(n, buffer=new_buf, indices=shift(tuple(visit(i) for i in n.indices)))  # type: ignore[misc]
        if isinstance(n, For) and n.var == anchor:
            return replace(n, body=Allocate(new_buf, visit(n.body)))  # type: ignore[arg-type]
        return map_children(n, visit)

    return visit(body)  # type: ignore[return-value]
