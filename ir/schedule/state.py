"""The schedule state: a program plus handles, and the tree surgery primitives share.

Loops and blocks are named uniquely program-wide (ir/build.py), so a handle is a
name and every rewrite is a name-directed pure function on the immutable tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ir.build import NameSupply
from ir.errors import LoomtuneError
from ir.expr import Var
from ir.node import Node, map_children, walk
from ir.program import Allocate, BlockRealize, For, Program, SeqStmt, Stmt


class ScheduleError(LoomtuneError):
    """A primitive was refused: the message names the block or loop and the reason."""


@dataclass(frozen=True)
class BlockRV:
    """A handle to a block, by its unique name."""

    name: str

    def __str__(self) -> str:
        return f'block "{self.name}"'


@dataclass(frozen=True)
class LoopRV:
    """A handle to a loop, by its loop variable's unique name."""

    name: str

    def __str__(self) -> str:
        return f"loop {self.name}"


def block_name(b: BlockRV | str) -> str:
    return b.name if isinstance(b, BlockRV) else b


def loop_name(loop: LoopRV | str) -> str:
    return loop.name if isinstance(loop, LoopRV) else loop


def names_in(program: Program) -> set[str]:
    """Every name in use: buffers, loop and iteration variables, blocks, shape variables.

    Names are only introduced by loops, blocks (their iteration variables and
    scratch buffers) and buffers, so the loop tree and the buffers are visited,
    not every index expression (this runs once per primitive).
    """
    used: set[str] = set()
    buffers = [*program.params, *program.allocs]
    stack: list[Stmt] = [program.body]
    while stack:  # the loop tree, and inside blocks (a blockized block holds loops and a block)
        for s in _stmts(stack.pop()):
            if isinstance(s, For):
                used.add(s.var.name)
            elif isinstance(s, BlockRealize):
                block = s.block
                used.add(block.name)
                used.update(iv.var.name for iv in block.iter_vars)
                buffers.extend(block.alloc_buffers)
                buffers.extend(r.buffer for r in (*block.reads, *block.writes))
                stack.append(block.body)
                if block.init is not None:
                    stack.append(block.init)
            elif isinstance(s, Allocate):
                buffers.append(s.buffer)
    for b in buffers:
        used.add(b.name)
        for n in (x for dim in b.shape for x in walk(dim)):
            if isinstance(n, Var):
                used.add(n.name)
    return used


def fresh_names(program: Program) -> NameSupply:
    return NameSupply(names_in(program))


# ---------------------------------------------------------------------------
# Finding things


def _stmts(root: Stmt) -> list[Stmt]:
    """The loop tree's statements in pre-order, without descending into expressions.

    Loops and blocks live only there, so finding one need not visit every index
    expression of the program (which `walk` would, many times per primitive).
    """
    out: list[Stmt] = []
    stack = [root]
    while stack:
        s = stack.pop()
        out.append(s)
        stack.extend(reversed(_stmt_children(s)))
    return out


def find_loop(program: Program, name: str) -> For:
    for n in _stmts(program.body):
        if isinstance(n, For) and n.var.name == name:
            return n
    raise ScheduleError(f"loop {name}: no such loop in {program.name}")


def find_block(program: Program, name: str) -> BlockRealize:
    for n in _stmts(program.body):
        if isinstance(n, BlockRealize) and n.block.name == name:
            return n
    raise ScheduleError(f'block "{name}": no such block in {program.name}')


def path_to(root: Stmt, pred: Callable[[Node], bool]) -> list[Stmt] | None:
    """Statements from `root` down to the first node satisfying `pred` (inclusive)."""
    if pred(root):
        return [root]
    for child in _stmt_children(root):
        sub = path_to(child, pred)
        if sub is not None:
            return [root, *sub]
    return None


def _stmt_children(s: Stmt) -> list[Stmt]:
    if isinstance(s, SeqStmt):
        return list(s.stmts)
    if isinstance(s, For):
        return [s.body]
    if isinstance(s, BlockRealize):
        return []  # blocks are leaves of the loop tree
    from ir.program import Allocate, IfThenElse

    if isinstance(s, IfThenElse):
        return [s.then_case] + ([s.else_case] if s.else_case is not None else [])
    if isinstance(s, Allocate):
        return [s.body]
    return []


def loops_above(program: Program, block: str) -> list[For]:
    """The loops enclosing `block`, outermost first."""
    path = path_to(program.body, lambda n: isinstance(n, BlockRealize) and n.block.name == block)
    if path is None:
        raise ScheduleError(f'block "{block}": no such block in {program.name}')
    return [s for s in path if isinstance(s, For)]


def blocks_under(stmt: Stmt) -> list[BlockRealize]:
    """Block instances under `stmt`, in program order."""
    return [n for n in _stmts(stmt) if isinstance(n, BlockRealize)]


def all_blocks(program: Program) -> list[BlockRealize]:
    return blocks_under(program.body)


def root_index(program: Program, name: str) -> int:
    """Position in the root sequence of the top-level statement holding loop or block `name`."""
    stmts = program.body.stmts if isinstance(program.body, SeqStmt) else (program.body,)
    for i, s in enumerate(stmts):
        for n in walk(s):
            if (isinstance(n, For) and n.var.name == name) or (
                isinstance(n, BlockRealize) and n.block.name == name
            ):
                return i
    raise ScheduleError(f"{name}: not found in {program.name}")


# ---------------------------------------------------------------------------
# Rewriting (name-directed, so exact)


def rewrite(program: Program, fn: Callable[[Node], Node | None]) -> Program:
    """Post-order rewrite of the statements; `fn` returns a replacement or None."""

    def visit(n: Node) -> Node:
        if not isinstance(n, Stmt):
            return n
        n = map_children(n, visit)
        out = fn(n)
        return n if out is None else out

    return replace(program, body=visit(program.body))


def replace_loop(program: Program, name: str, fn: Callable[[For], Stmt]) -> Program:
    return rewrite(program, lambda n: fn(n) if isinstance(n, For) and n.var.name == name else None)


def replace_realize(program: Program, name: str, fn: Callable[[BlockRealize], Stmt]) -> Program:
    return rewrite(
        program, lambda n: fn(n) if isinstance(n, BlockRealize) and n.block.name == name else None
    )


def remove_stmt(program: Program, pred: Callable[[Node], bool]) -> Program:
    """Remove statements matching `pred`, and loops left empty by the removal."""
    from ir.program import seq

    def visit(s: Stmt) -> Stmt | None:
        if pred(s):
            return None
        if isinstance(s, SeqStmt):
            parts = [x for x in (visit(t) for t in s.stmts) if x is not None]
            return seq(*parts) if parts else None
        if isinstance(s, For):
            body = visit(s.body)
            return None if body is None else replace(s, body=body)
        return s

    body = visit(program.body)
    return replace(program, body=body if body is not None else SeqStmt(()))


def is_perfect_chain(outer: For, inner: For) -> list[For] | None:
    """The loops from `outer` to `inner` if each one's body is exactly the next loop."""
    chain = [outer]
    cur = outer
    while cur is not inner:
        if not isinstance(cur.body, For):
            return None
        cur = cur.body
        chain.append(cur)
    return chain
