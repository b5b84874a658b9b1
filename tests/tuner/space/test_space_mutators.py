"""Mutators run 1,000 times each: invariants hold, many distinct traces, None means "cannot mutate"."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from codegen.host import host_target
from ir.program import PREFETCH
from ir.target import Target
from tests.tuner.space.spacecheck import AVX2_2_THREADS, check_correct, odd_task
from tuner.space import MUTATORS, SpaceContext, default_space
from tuner.space.mutators.base import annotated_categoricals, structural_categoricals
from tuner.space.rules import DEFAULT_RULES, PARALLEL, UNROLL
from tuner.space.rules.multi_level_tiling import MultiLevelTiling
from tuner.space.rules.parallel_vectorize_unroll import ParallelVectorizeUnroll
from tuner.trace.instruction import RV
from tuner.trace.trace import Trace
from tuner.trace.traced_schedule import TracedSchedule, replay_instruction

STEPS = 1000


def _base(name: str = "") -> tuple[Trace, SpaceContext]:
    """The rule part of a conv2d sample: tiles, a sampled pad location, the write-back's loop,
    parallel and unroll choices; for `structure`, a matmul sample that chose whether to pack;
    for `prefetch`, the first matmul sample that did not pack (so it chose a prefetch)."""
    task = odd_task("matmul" if name in ("structure", "prefetch") else "conv2d_nhwc")
    space = default_space(task.program, AVX2_2_THREADS)
    for seed in range(2, 40):
        rules = space.rule_part(space.sample(random.Random(seed)))
        assert rules is not None
        if name != "prefetch" or annotated_categoricals(rules, PREFETCH, prefix=True):
            return rules, space.context
    raise AssertionError("no matmul sample in 38 chose a prefetch distance")


def _location_counts(trace: Trace, ctx: SpaceContext) -> dict[int, int]:
    """Per sample_compute_location: how many loops its block may go to (replaying the prefix)."""
    counts = {}
    for i, inst in enumerate(trace.instructions):
        if inst.kind == "sample_compute_location":
            arg = inst.inputs[0]
            assert isinstance(arg, RV)
            sch = TracedSchedule(ctx.program)
            env: dict[str, Any] = {}
            for k, x in enumerate(trace.instructions[:i]):
                replay_instruction(sch, x, env, trace.decisions.get(k))
            counts[i] = len(sch.compute_location_candidates(env[arg.name]))
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
    sites = structural_categoricals(base) if name == "structure" else None
    if name == "prefetch":
        sites = annotated_categoricals(base, PREFETCH, prefix=True)
    if key is None and sites is None:
        return 10**9
    if sites is None:
        sites = annotated_categoricals(base, key)
    return math.prod(len(base.instructions[i].attr("candidates")) for i in sites)


@pytest.mark.parametrize("name", MUTATORS.names())
def test_mutator_random_walk_keeps_invariants(name: str) -> None:
    base, ctx = _base(name)
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
    target = host_target(2)
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


def _structure(trace: Trace) -> list[str]:
    return [i.kind for i in trace.instructions if not i.is_sampling]


def test_a_structural_mutation_is_re_derived_keeping_the_other_decisions() -> None:
    """Flipping matmul's pack choice adds or drops the packing (and its copy's split and
    loop annotations), keeps every tile size, and compiles to a correct kernel."""
    task = odd_task("matmul")
    tiling = MultiLevelTiling(columns_first_probability=0)  # the pack its only choice
    rules = [tiling if r == "multi-level-tiling" else r for r in DEFAULT_RULES]
    space = default_space(task.program, AVX2_2_THREADS, rules=rules)
    mutator = MUTATORS.create("structure")
    assert mutator.rederives
    flips = 0
    for seed in range(6):
        trace = space.sample(random.Random(seed))
        rules = space.rule_part(trace)
        assert rules is not None
        (site,) = structural_categoricals(rules)
        packed = any(i.kind == "pack_panels" for i in trace.instructions)
        assert rules.decisions[site] == int(packed)
        # Re-deriving an unchanged rule part gives the same trace back.
        assert space.rederive(rules, random.Random(99)).hash == trace.hash
        changed = mutator.apply(rules, random.Random(seed), space.context)
        assert changed is not None and changed.decisions[site] != rules.decisions[site]
        # Replaying the flipped decision alone changes nothing: the rule decided in Python.
        assert _structure(space.complete(changed)) == _structure(trace)
        mutant = space.rederive(changed, random.Random(seed))
        assert any(i.kind == "pack_panels" for i in mutant.instructions) is not packed
        new_rules = space.rule_part(mutant)
        assert new_rules is not None

        def tiles(t: Trace) -> list[object]:
            return [
                t.decisions[i]
                for i, x in enumerate(t.instructions)
                if x.kind == "sample_perfect_tile"
            ]

        assert tiles(new_rules) == tiles(rules)
        check_correct(task, mutant, AVX2_2_THREADS)
        flips += 1
    assert flips == 6


def test_space_mutation_reaches_both_pack_choices() -> None:
    """Through `RuleSpace.mutate`, a walk from a packed matmul reaches unpacked traces and back."""
    task = odd_task("matmul")
    space = default_space(
        task.program, AVX2_2_THREADS, mutators={"structure": 1.0, "tile-size": 1.0}
    )
    rng = random.Random(4)
    trace = space.sample(rng)
    seen = set()
    for _ in range(60):
        mutant = space.mutate(trace, rng)
        assert mutant is not None
        seen.add(any(i.kind == "pack_panels" for i in mutant.instructions))
        trace = mutant
    assert seen == {True, False}
