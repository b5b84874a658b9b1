"""The softmax space (reduction-chain rule): many distinct programs from sampling, every one
correct, and sampling reaches the places the compute-location mutator moves blocks to."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from codegen.host import host_target
from ir.serialize import structural_hash
from ir.target import Target
from ir.task import library_task
from tests.tuner.space.spacecheck import check_correct, samples
from tuner.space import SpaceRejected, default_space
from tuner.space.analysis import root_nests
from tuner.space.rules.base import VECTORIZE
from tuner.trace.trace import Trace

ONE_THREAD = Target.parse("llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=1")


def _task():  # type: ignore[no-untyped-def]
    return library_task("softmax", {"m": 6, "n": 64})  # rows long enough to rfactor (8 lanes x 8)


def _locations(trace: Trace) -> dict[str, set[int]]:
    """Per block placed by sample_compute_location: the decisions it took."""
    names = {i.outputs[0]: i.attr("name") for i in trace.instructions if i.kind == "get_block"}
    out: dict[str, set[int]] = defaultdict(set)
    for k, inst in enumerate(trace.instructions):
        if inst.kind == "sample_compute_location":
            out[names[inst.inputs[0].name]].add(trace.decisions[k])
    return out


def test_sampling_gives_many_distinct_programs_at_one_thread() -> None:
    task = library_task("softmax", {"m": 4096, "n": 1024})  # the suite's shape: nothing compiled
    space = default_space(task.program, ONE_THREAD)
    programs = set()
    for seed in range(60):
        programs.add(structural_hash(space.sample_schedule(random.Random(seed)).program))
    assert len(programs) >= 30, f"only {len(programs)} distinct programs in 60 samples"


def test_each_block_is_placed_once() -> None:
    """random-compute-location leaves alone a block the reduction-chain rule placed
    (it used to draw softmax's exp again when the chain left it at the root)."""
    task = _task()
    space = default_space(task.program, ONE_THREAD)
    for seed in range(60):
        trace = space.sample(random.Random(seed))
        names = {i.outputs[0]: i.attr("name") for i in trace.instructions if i.kind == "get_block"}
        placed = [
            names[i.inputs[0].name]
            for i in trace.instructions
            if i.kind == "sample_compute_location"
        ]
        assert len(placed) == len(set(placed)), placed


def test_sampled_structures_include_row_root_inline_and_rfactor() -> None:
    task = _task()
    space = default_space(task.program, ONE_THREAD)
    kinds: set[str] = set()
    for seed in range(80):
        trace = space.sample(random.Random(seed))
        found = {i.kind for i in trace.instructions}
        if "rfactor" in found:
            kinds.add("rfactor")
        for decisions in _locations(trace).values():
            kinds |= {"inline" if d == -2 else "root" if d == -1 else "row" for d in decisions}
    assert kinds == {"rfactor", "inline", "root", "row"}


def test_every_sampled_program_is_correct() -> None:
    task = _task()
    space = default_space(task.program, ONE_THREAD)
    host = host_target(1)
    traces = samples(space, random.Random("softmax"), 16, max_tries=48)
    for trace in traces:
        check_correct(task, trace, host)
    kinds = {i.kind for t in traces for i in t.instructions}
    assert "rfactor" in kinds


def test_mutated_locations_are_ones_sampling_reaches() -> None:
    """Sampling and mutation agree: every compute location an accepted mutant has, some
    sample of the same rule structure has too (the mutator may propose more; the space
    rejects what repeats work)."""
    task = _task()
    space = default_space(task.program, ONE_THREAD)
    sampled: dict[str, set[int]] = defaultdict(set)
    traces = []
    for seed in range(200):
        try:
            trace = space.sample(random.Random(seed))
        except SpaceRejected:
            continue
        traces.append(trace)
        for block, decisions in _locations(trace).items():
            sampled[block] |= decisions
    mutator = {"compute-location": 1.0}
    mutating = default_space(task.program, ONE_THREAD, mutators=mutator)
    rng = random.Random(1)
    mutated: dict[str, set[int]] = defaultdict(set)
    for trace in traces[:40]:
        mutant = mutating.mutate(trace, rng)
        if mutant is None:
            continue
        for block, decisions in _locations(mutant).items():
            mutated[block] |= decisions
    assert mutated, "no mutant accepted"
    for block, decisions in mutated.items():
        assert decisions <= sampled[block], (block, decisions, sampled[block])


def test_a_recomputing_location_is_rejected() -> None:
    """exp_sum inside Y's column loop would sum the row once per column: refused."""
    task = _task()
    space = default_space(task.program, ONE_THREAD)
    for seed in range(50):
        rules = space.rule_part(space.sample(random.Random(seed)))
        assert rules is not None
        # exp_sum is the first block placed; location 0 is Y's row loop, 1 its column loop
        k = next(k for k, i in enumerate(rules.instructions) if i.kind == "sample_compute_location")
        if rules.decisions[k] == 0:
            break
    else:
        raise AssertionError("no sample computes exp_sum in Y's rows")
    space.complete(rules)
    with pytest.raises(SpaceRejected, match="repeats the same work in every iteration"):
        space.complete(rules.with_decision(k, 1))


def test_structure_mutation_turns_rfactor_on_and_off_and_stays_correct() -> None:
    """Softmax's rfactor width is a structural choice: the `structure` mutator, through the
    space's re-derivation, adds or removes the rfactor (and its split), and the kernels agree
    with numpy."""
    task = _task()
    space = default_space(task.program, ONE_THREAD, mutators={"structure": 1.0})
    rng = random.Random(7)
    kinds = set()
    trace = space.sample(rng)
    mutated = 0
    for step in range(40):
        mutant = space.mutate(trace, rng)
        if mutant is None:  # the rows went to the root or inline: nothing to rfactor
            trace = space.sample(rng)
            continue
        mutated += 1
        has_rf = any(i.kind == "rfactor" for i in mutant.instructions)
        if has_rf not in kinds or step % 10 == 0:
            check_correct(task, mutant, ONE_THREAD)
        kinds.add(has_rf)
        trace = mutant
    assert kinds == {True, False} and mutated >= 20


def test_a_moved_block_leaves_no_root_nest_without_its_annotations() -> None:
    """parallel-vectorize-unroll annotates each root nest; moving a block (compute-location)
    can add a nest, so the mutant is re-derived, not replayed: a replayed mutant left the new
    nest without `loomtune.vectorize`/`unroll` (znver5: the evolutionary search's softmax
    stuck at 1.40 ms, its exp loop vectorized only by LLVM, where replay found 1.24)."""
    task = _task()
    space = default_space(task.program, ONE_THREAD, mutators={"compute-location": 1.0})
    rng = random.Random(3)
    nests_changed = 0
    for seed in range(60):
        try:
            trace = space.sample(random.Random(seed))
        except SpaceRejected:
            continue
        mutant = space.mutate(trace, rng)
        if mutant is None:
            continue
        rules = space.rule_part(mutant)
        assert rules is not None
        program = rules.apply(task.program).program
        nests = [names for names in root_nests(program) if names]
        block_of = {
            i.outputs[0]: i.attr("name") for i in rules.instructions if i.kind == "get_block"
        }
        annotated = {
            block_of[i.inputs[0].name]
            for i in rules.instructions
            if i.kind == "annotate" and i.attr("key") == VECTORIZE
        }
        assert annotated == {names[0] for names in nests}, (annotated, nests)
        before = space.rule_part(trace)
        assert before is not None
        nests_changed += len(nests) != len(
            [n for n in root_nests(before.apply(task.program).program) if n]
        )
    assert nests_changed > 0, "no mutant changed the number of root nests: the test shows nothing"
