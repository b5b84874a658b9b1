"""A design-space sketch for people: the trace with its decisions as literals, and the loops it makes.

    print(sketch(task.program, space.sample(random.Random(0))))

The first part is `Trace.as_python` (every `decision=` a literal; index maps
written as formulas instead of their JSON); the second is the scheduled
program's loop nest alone, with loop kinds and extents and where each block
sits, which is where a structure such as SSRSRS shows.
"""

from __future__ import annotations

import json

from ir.expr import render
from ir.program import BlockRealize, For, IfThenElse, Program, SeqStmt, Stmt
from ir.schedule.layout import IndexMap
from tuner.trace.instruction import encode_arg
from tuner.trace.trace import Trace

_KINDS = {
    "serial": "range",
    "parallel": "parallel",
    "vectorized": "vectorized",
    "unrolled": "unrolled",
}


def loop_outline(program: Program) -> str:
    """Loops (name, kind, extent) and block names, indented like the program."""
    lines: list[str] = []

    def visit(s: Stmt, depth: int) -> None:
        pad = "    " * depth
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                visit(x, depth)
        elif isinstance(s, For):
            lines.append(f"{pad}for {s.var.name} in {_KINDS[s.kind]}({render(s.extent)}):")
            visit(s.body, depth + 1)
        elif isinstance(s, BlockRealize):
            lines.append(f"{pad}block {s.block.name}")
        elif isinstance(s, IfThenElse):
            visit(s.then_case, depth)
            if s.else_case is not None:
                visit(s.else_case, depth)

    visit(program.body, 0)
    return "\n".join(lines) + "\n"


def index_map_text(imap: IndexMap) -> str:
    src = ", ".join(v.name for v in imap.src)
    dst = ", ".join(render(e) for e in imap.dst)
    return f"lambda {src}: ({dst})"


def sketch(program: Program, trace: Trace) -> str:
    code = trace.as_python()
    for inst in trace.instructions:
        imap = inst.attr("index_map")
        if isinstance(imap, IndexMap):
            code = code.replace(f"node({json.dumps(encode_arg(imap))})", index_map_text(imap))
    scheduled = trace.apply(program).program
    return f"# the trace (decisions as literals)\n{code}\n# the loops it makes\n{loop_outline(scheduled)}"
