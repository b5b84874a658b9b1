"""Acceptance: for every library operator at an odd shape the default space generates,
and every sample compiles and matches numpy."""

from __future__ import annotations

import random

import pytest

from codegen.host import host_target
from ir.library import OPS
from tests.tuner.space.spacecheck import ODD_SHAPES, check_correct, odd_task, samples
from tuner.space import DesignSpace, default_space

SAMPLES = 10


def test_every_operator_has_an_odd_shape() -> None:
    assert sorted(ODD_SHAPES) == sorted(OPS)


@pytest.mark.parametrize("op", list(OPS))
def test_samples_compile_and_are_correct(op: str) -> None:
    task = odd_task(op)
    threads = 1 + list(OPS).index(op) % 2  # half the operators with 2 threads: parallel loops too
    target = host_target(threads)
    space = default_space(task.program, target)
    assert isinstance(space, DesignSpace)
    traces = samples(space, random.Random(op), SAMPLES, max_tries=3 * SAMPLES)
    assert len({t.hash for t in traces}) > 1, "the space gave one candidate only"
    for trace in traces:
        check_correct(task, trace, target)
