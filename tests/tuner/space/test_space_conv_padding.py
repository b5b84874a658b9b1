"""A model's padded convolution: the padding is a block of its own (ir/graph/lower_ops.py), the
design space places it (never inlined into the conv's reduction), and what it makes is correct."""

from __future__ import annotations

import random

import numpy as np

from codegen.host import host_target
from ir.expr import Select
from ir.graph import TensorType, make_graph, make_node
from ir.graph.plan import build_plan
from ir.node import walk
from ir.program import BlockRealize, Program
from ir.task import Task
from tests.tuner.space.spacecheck import check_correct, odd_task, samples
from tuner.space import RuleSpace, default_space

RNG = np.random.default_rng(3)


def _fused_conv(stride: int, pads: tuple[int, int, int, int]) -> Task:
    """conv2d (NHWC, bias) + relu on a 1x9x8x6 input, 3x3 to 16 channels: one fused task."""
    nodes = [
        make_node(
            "conv2d", ["x", "W", "B"], ["c"], layout="NHWC", strides=(stride, stride), pads=pads
        ),
        make_node("relu", ["c"], ["y"]),
    ]
    consts = {
        "W": RNG.standard_normal((3, 3, 6, 16)).astype(np.float32),
        "B": RNG.standard_normal(16).astype(np.float32),
    }
    graph = make_graph("conv", [("x", TensorType((1, 9, 8, 6), "float32"))], nodes, consts, ["y"])
    (task,) = [t.task for t in build_plan(graph).tasks]
    assert task.op.startswith("fused_conv2d")
    return task


def _blocks(program: Program) -> list[BlockRealize]:
    return [n for n in walk(program.body) if isinstance(n, BlockRealize)]


def _selects_in_reductions(program: Program) -> int:
    return sum(
        any(isinstance(n, Select) for n in walk(r.block.body))
        for r in _blocks(program)
        if any(iv.kind == "reduce" for iv in r.block.iter_vars)
    )


def test_padding_is_a_block_of_its_own_and_the_reduction_reads_it_unguarded() -> None:
    for stride, pads in ((1, (1, 1, 1, 1)), (2, (1, 0, 2, 1))):
        program = _fused_conv(stride, pads).program
        pads_blocks = [
            r
            for r in _blocks(program)
            if r.block.init is None and any(isinstance(n, Select) for n in walk(r.block.body))
        ]
        assert len(pads_blocks) == 1
        assert _selects_in_reductions(program) == 0


def test_an_unpadded_conv_gets_no_padding_block() -> None:
    program = _fused_conv(1, (0, 0, 0, 0)).program
    assert not any(isinstance(n, Select) for n in walk(program.body))


class _LowestFirst(random.Random):
    """Draws options in ascending order: random-compute-location's inline (-2) first."""

    def shuffle(self, x: list) -> None:  # type: ignore[override]
        x.sort()


def test_padding_is_never_inlined_into_a_conv_but_still_into_a_depthwise_conv() -> None:
    rules = ["multi-level-tiling", "random-compute-location"]
    target = host_target(1)
    for task, inlined in (
        (_fused_conv(2, (1, 0, 2, 1)), 0),
        (odd_task("conv2d_nhwc"), 0),
        (odd_task("depthwise_conv2d_nhwc"), 1),  # no reuse: no hot loop to guard
    ):
        space = RuleSpace(task.program, target, rules=rules)
        trace = space.sample(_LowestFirst(0))
        assert _selects_in_reductions(trace.apply(task.program).program) == inlined, task.op


def test_sampled_schedules_of_a_strided_padded_fused_conv_are_correct() -> None:
    target = host_target(1)
    task = _fused_conv(2, (1, 0, 2, 1))
    for trace in samples(default_space(task.program, target), random.Random(7), 1, max_tries=4):
        check_correct(task, trace, target)
