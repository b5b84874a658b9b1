"""Blocks to plain loops and stores: iteration variables replaced by their bindings.

    with block("C"): vi = spatial(64, i) ...  C[vi, vj] = ...
      ->  C[i, j] = ...

A block's local scratch buffers become `Allocate` statements around its body; the
program's intermediate buffers stay in `Program.allocs` (compact_buffers may move
them into loops; codegen allocates what remains once per call).
"""

from __future__ import annotations

from dataclasses import replace

from ir.node import Node
from ir.program import Allocate, BlockRealize, Program, Stmt
from ir.visit import post_order_rewrite, substitute


def _inline_block(n: Node) -> Node | None:
    if not isinstance(n, BlockRealize):
        return None
    block = n.block
    mapping = {iv.var: v for iv, v in zip(block.iter_vars, n.values)}
    body: Stmt = substitute(block.body, mapping)  # type: ignore[assignment]
    for buf in reversed(block.alloc_buffers):
        body = Allocate(buf, body)
    return body


def blocks_to_loops(program: Program) -> Program:
    body: Stmt = post_order_rewrite(program.body, _inline_block)  # type: ignore[assignment]
    return replace(program, body=body)
