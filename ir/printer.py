"""A program as readable Python-like text (what goldens and `--print` show)."""

from __future__ import annotations

from ir.expr import Buffer, Const, render
from ir.program import (
    Allocate,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    IfThenElse,
    IntrinsicCall,
    Program,
    SeqStmt,
    Stmt,
)

_INDENT = "    "
_LOOP_FN = {
    "serial": "range",
    "parallel": "parallel",
    "vectorized": "vectorized",
    "unrolled": "unrolled",
}


def buffer_decl(b: Buffer) -> str:
    shape = ", ".join(render(s) for s in b.shape)
    scope = "" if b.scope == "global" else f", scope={b.scope!r}"
    return f"{b.dtype}[{shape}]{scope}"


def region_text(r: BufferRegion) -> str:
    parts = []
    for rng in r.region:
        if isinstance(rng.extent, Const) and rng.extent.value == 1:
            parts.append(render(rng.min))
        else:
            parts.append(f"{render(rng.min)}:{render(rng.min + rng.extent)}")
    return f"{r.buffer.name}[{', '.join(parts)}]"


def print_program(program: Program) -> str:
    params = ", ".join(f"{b.name}: {buffer_decl(b)}" for b in program.params)
    lines = [f"def {program.name}({params}):"]
    for b in program.allocs:
        lines.append(f"{_INDENT}{b.name} = alloc({buffer_decl(b)})")
    _stmt(program.body, 1, lines)
    return "\n".join(lines) + "\n"


def print_stmt(stmt: Stmt) -> str:
    lines: list[str] = []
    _stmt(stmt, 0, lines)
    return "\n".join(lines) + "\n"


def _stmt(s: Stmt, depth: int, out: list[str]) -> None:
    pad = _INDENT * depth
    if isinstance(s, SeqStmt):
        for x in s.stmts:
            _stmt(x, depth, out)
    elif isinstance(s, For):
        ann = f"  # {dict(s.annotations)}" if s.annotations else ""
        out.append(f"{pad}for {s.var.name} in {_LOOP_FN[s.kind]}({render(s.extent)}):{ann}")
        _stmt(s.body, depth + 1, out)
    elif isinstance(s, BufferStore):
        idx = ", ".join(render(i) for i in s.indices)
        out.append(f"{pad}{s.buffer.name}[{idx}] = {render(s.value)}")
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if {render(s.cond)}:")
        _stmt(s.then_case, depth + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _stmt(s.else_case, depth + 1, out)
    elif isinstance(s, Allocate):
        out.append(f"{pad}{s.buffer.name} = alloc({buffer_decl(s.buffer)})")
        _stmt(s.body, depth, out)
    elif isinstance(s, IntrinsicCall):
        args = ", ".join(
            f"{a.buffer.name}[{', '.join(render(i) for i in a.indices)}]" for a in s.args
        )
        out.append(f"{pad}{s.name}({args})")
    elif isinstance(s, BlockRealize):
        _block(s, depth, out)
    elif isinstance(s, Block):  # a bare block (only inside a realize in valid programs)
        _block(
            BlockRealize(tuple(iv.var for iv in s.iter_vars), Const(True, "bool"), s), depth, out
        )
    else:
        raise TypeError(f"cannot print {type(s).__name__}")


def _block(r: BlockRealize, depth: int, out: list[str]) -> None:
    pad = _INDENT * depth
    inner = _INDENT * (depth + 1)
    b = r.block
    out.append(f'{pad}with block("{b.name}"):')
    for iv, value in zip(b.iter_vars, r.values):
        out.append(f"{inner}{iv.var.name} = {iv.kind}({render(iv.extent)}, {render(value)})")
    if not (isinstance(r.predicate, Const) and r.predicate.value is True):
        out.append(f"{inner}where({render(r.predicate)})")
    out.append(f"{inner}reads({', '.join(region_text(x) for x in b.reads)})")
    out.append(f"{inner}writes({', '.join(region_text(x) for x in b.writes)})")
    if b.annotations:
        out.append(f"{inner}annotate({dict(b.annotations)})")
    for buf in b.alloc_buffers:
        out.append(f"{inner}{buf.name} = alloc({buffer_decl(buf)})")
    if b.init is not None:
        out.append(f"{inner}with init():")
        _stmt(b.init, depth + 2, out)
    _stmt(b.body, depth + 1, out)
