"""Guards for imperfect extents: a block's predicate becomes an `if` around it.

with block("C"): where(i0 * 8 + i1 < 1000) ...
  ->  if i0 * 8 + i1 < 1000: with block("C"): ...
"""

from __future__ import annotations

from dataclasses import replace

from ir.expr import Const
from ir.node import Node
from ir.program import TRUE, BlockRealize, IfThenElse, Program
from ir.visit import post_order_rewrite


def _guard(n: Node) -> Node | None:
    if isinstance(n, BlockRealize) and not (isinstance(n.predicate, Const) and n.predicate.value):
        return IfThenElse(n.predicate, replace(n, predicate=TRUE))
    return None


def insert_guards(program: Program) -> Program:
    return replace(program, body=post_order_rewrite(program.body, _guard))
