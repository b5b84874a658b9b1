"""The arena: values alive at the same step never share bytes, and reuse makes it smaller."""

from __future__ import annotations

import itertools

import pytest

from frontend.onnx import load_onnx
from ir.graph.memory import ALIGNMENT, Lifetime, plan_arena
from ir.graph.plan import build_plan
from tests.models import conv_net, encoder_layer


def _check_disjoint(slots, total: int) -> None:
    for a, b in itertools.combinations(slots.values(), 2):
        if a.overlaps(b):
            assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)
    for s in slots.values():
        assert s.offset % ALIGNMENT == 0 and s.offset + s.nbytes <= total


@pytest.mark.parametrize("make", [encoder_layer, conv_net], ids=["encoder", "conv_net"])
def test_live_buffers_never_overlap_and_the_arena_reuses_memory(make) -> None:
    plan = build_plan(load_onnx(make(layers=2) if make is encoder_layer else make()))
    _check_disjoint(plan.slots, plan.arena_bytes)
    assert plan.arena_bytes < plan.stored_bytes
    # every step's output is alive from its step to its last reader, inputs alive at the step
    for s, step in enumerate(plan.steps):
        out = plan.slots[plan.base(step.output.value)]
        assert out.first == s
        for arg in step.inputs:
            slot = plan.slots.get(plan.base(arg.value))
            if slot is not None:
                assert slot.first < s <= slot.last


def test_encoder_arena_is_much_smaller_than_its_activations() -> None:
    plan = build_plan(load_onnx(encoder_layer(layers=3)))
    assert plan.arena_bytes * 4 < plan.stored_bytes


def test_greedy_places_largest_first_and_reuses_dead_space() -> None:
    slots, total = plan_arena(
        [
            Lifetime("a", 1000, 0, 1),
            Lifetime("b", 100, 1, 2),
            Lifetime("c", 1000, 2, 3),  # a is dead by step 2: c takes its place
            Lifetime("d", 10, 0, 3),
        ]
    )
    assert slots["c"].offset == slots["a"].offset == 0
    assert total == 1024 + 128 + 64
    _check_disjoint(slots, total)
