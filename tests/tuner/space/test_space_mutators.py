"""Mutators run 1,000 times each: invariants hold, many distinct traces, None means "cannot mutate"."""

from __future__ import annotations

import math
import random

import pytest

from codegen.target import Target
from tests.tuner.space.spacecheck import AVX2_2_THREADS, check_correct, odd_task
from tuner.space import MUTATORS, SpaceContext, default_space
from tuner.space.mutators.base import annotated_categoricals
from tuner.space.rules import PARALLEL, UNROLL
from tuner.space.rules.parallel_vectorize_unroll import ParallelVectorizeUnroll
from tuner.trace.instruction import RV
from tuner.trace.trace import Trace

STEPS = 1000


def _base() -> tuple[Trace, SpaceContext]:
    """The rule part of a conv2d sample: tiles, a sampled pad location, the write-back's loop,
    parallel and unroll choices."""
    task = odd_task("conv2d_nhwc")
    space = default_space(task.program, AVX2_2_THREADS)
    rules = space.rule_part(space.sample(random.Random(2)))
    assert rules is not None
    return rules, space.context


def _location_counts(trace: Trace, ctx: SpaceContext) -> dict[int, int]:
    """Per sample_compute_location: how many loops its block may go to (replaying the prefix)."""
    counts = {}
    for i, inst in enumerate(trace.instructions):
        if inst.kind == "sample_compute_location":
            arg = inst.inputs[0]
            assert isinstance(arg, RV)
            name = next(x.attr("name") for x in trace.instructions if x.outputs == (arg.name,))
            prefix = Trace(
                trace.instructions[:i], {k: v for k, v in trace.decisions.items() if k < i}
            )
            counts[i] = len(prefix.apply(ctx.program).compute_location_candidates(name))
    return counts


def _check_invariants(base: Trace, trace: Trace, counts: dict[int, int]) -> None:
    assert trace.instructions == base.instructions
    for i, inst in enumerate(trace.instructions):
        d = trace.decisions.get(i)
        if inst.kind == "sample_perfect_tile":
            assert len(d) == inst.attr("n") and all(f >= 1 for f in d)
            assert math.prod(d) == math.prod(base.decisions[i]), "tile product changed"
            assert d[-1] <= inst.attr("max_innermost_factor")
        elif inst.kind == "sample_categorical":
            assert 0 <= d < len(inst.attr("candidates"))
        elif inst.kind == "sample_compute_location":
            assert -2 <= d < counts[i]
        elif inst.kind == "sample_loop":
            assert 0 <= d < len(inst.inputs[0])


def _reachable(base: Trace, name: str, counts: dict[int, int]) -> int:
    """How many different decision sets the mutator can reach (a bound on distinct traces)."""
    if name == "compute-location":
        return math.prod(n + 2 for n in counts.values())
    if name == "loop-choice":
        return math.prod(len(i.inputs[0]) for i in base.instructions if i.kind == "sample_loop")
    key = {"parallel": PARALLEL, "unroll": UNROLL}.get(name)
    if key is None:
        return 10**9
    return math.prod(
        len(base.instructions[i].attr("candidates")) for i in annotated_categoricals(base, key)
    )


@pytest.mark.parametrize("name", MUTATORS.names())
def test_mutator_random_walk_keeps_invariants(name: str) -> None:
    base, ctx = _base()
    counts = _location_counts(base, ctx)
    mutator = MUTATORS.create(name)
    rng = random.Random(name)
    trace, seen = base, {base.hash}
    for _ in range(STEPS):
        mutant = mutator.apply(trace, rng, ctx)
        assert mutant is not None, f"{name} found nothing to change in a trace it applies to"
        _check_invariants(base, mutant, counts)
        assert mutant.decisions != trace.decisions
        seen.add(mutant.hash)
        trace = mutant
    reachable = _reachable(base, name, counts)
    assert len(seen) >= min(50, reachable), (
        f"{name}: {len(seen)} distinct traces, {reachable} reachable"
    )


@pytest.mark.parametrize("name", MUTATORS.names())
def test_none_means_cannot_mutate(name: str) -> None:
    task = odd_task("gelu")
    target = Target.parse("llvm -mcpu=znver3 -num-threads=1")
    ctx = SpaceContext(task.program, target)
    mutator = MUTATORS.create(name)
    assert mutator.apply(Trace(()), random.Random(0), ctx) is None
    # gelu on one thread with a single unroll depth: no tile, no compute location,
    # no parallel choice, and an unroll choice with nothing else to choose
    space = default_space(
        task.program, target, rules=[ParallelVectorizeUnroll(unroll_depths=(16,))]
    )
    rules = space.rule_part(space.sample(random.Random(0)))
    assert rules is not None and any(i.is_sampling for i in rules.instructions)
    assert mutator.apply(rules, random.Random(0), ctx) is None
    assert space.mutate(space.sample(random.Random(0)), random.Random(0)) is None


def test_space_mutation_walk_stays_complete_and_correct() -> None:
    task = odd_task("conv2d_nhwc")
    target = Target.host(2)
    space = default_space(task.program, target)
    rng = random.Random(9)
    trace = space.sample(rng)
    seen = {trace.hash}
    for step in range(40):
        mutant = space.mutate(trace, rng)
        if mutant is None:
            continue
        seen.add(mutant.hash)
        if step % 10 == 0:
            check_correct(task, mutant, target)
        trace = mutant
    assert len(seen) >= 20
