"""Reduction init: a block's `init` runs on the first iteration of its reduction axes.

    block C(vk = reduce(k)): init: C = 0; C = C + ...
      ->  block C: if vk == 0: C = 0
                   C = C + ...

Schedules that hoist the init out of the reduction loops (decompose_reduction)
leave no init for this pass.
"""

from __future__ import annotations

from dataclasses import replace

from ir.expr import Const, eq, logical_and
from ir.node import Node
from ir.program import BlockRealize, IfThenElse, Program, seq
from ir.visit import post_order_rewrite


def _lower_init(n: Node) -> Node | None:
    if not isinstance(n, BlockRealize) or n.block.init is None:
        return None
    block = n.block
    conds = [eq(iv.var, Const(0, iv.var.dtype)) for iv in block.iter_vars if iv.kind == "reduce"]
    init = IfThenElse(logical_and(*conds), block.init) if conds else block.init
    return replace(n, block=replace(block, body=seq(init, block.body), init=None))


def lower_reduction_init(program: Program) -> Program:
    return replace(program, body=post_order_rewrite(program.body, _lower_init))
