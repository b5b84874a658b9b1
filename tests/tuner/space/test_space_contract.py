"""The DesignSpace contract: complete traces, the rule-part marker, mutation, rejection, determinism."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.host import host_target
from ir.target import Target
from ir.task import library_task
from tests.tuner.space.spacecheck import AVX2_2_THREADS, check_correct, odd_task
from tuner.space import (
    MARKER,
    DesignSpace,
    RuleSpace,
    ScheduleRule,
    SpaceContext,
    SpaceRejected,
    default_space,
)
from tuner.space.analysis import root_nests
from tuner.space.mutators.base import structural_categoricals
from tuner.space.postprocs.verify import Verify
from tuner.space.rules import PARALLEL, VECTORIZE
from tuner.trace.trace import Trace
from tuner.trace.traced_schedule import TracedSchedule

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("op", ["matmul", "dense", "conv2d_nhwc", "softmax", "reduce_sum"])
def test_a_sample_is_a_complete_trace(op: str) -> None:
    task = odd_task(op)
    space = default_space(task.program, AVX2_2_THREADS)
    sch = space.sample_schedule(random.Random(3))
    trace = sch.trace
    assert trace.apply(task.program).program == sch.program
    again = Trace.from_json(json.loads(json.dumps(trace.to_json())))
    assert again == trace and again.apply(task.program).program == sch.program
    assert space.complete(space.rule_part(trace)) == trace  # the postprocessors are deterministic


def test_the_marker_separates_the_rule_part() -> None:
    task = odd_task("matmul")
    trace = default_space(task.program, AVX2_2_THREADS).sample(random.Random(0))
    rules = RuleSpace.rule_part(trace)
    assert rules is not None
    marker = next(i for i, inst in enumerate(trace.instructions) if inst.attr("key") == MARKER)
    assert len(rules.instructions) == marker - 1  # the marker's get_block belongs to neither part
    assert trace.instructions[: len(rules.instructions)] == rules.instructions
    assert all(
        inst.kind not in ("parallel", "vectorize", "decompose_reduction")
        for inst in rules.instructions
    )
    assert all(k < len(rules.instructions) for k in rules.decisions)


def test_the_target_decides_threads_and_vector_width() -> None:
    task = odd_task("gelu")
    one = default_space(
        task.program, Target.parse("llvm -mcpu=znver3 -mattr=+avx2 -num-threads=1")
    ).sample(random.Random(0))
    two = default_space(task.program, AVX2_2_THREADS).sample(random.Random(0))
    keys = lambda t: {i.attr("key"): i.inputs[1] for i in t.instructions if i.kind == "annotate"}  # noqa: E731
    assert PARALLEL not in keys(one) and PARALLEL in keys(two)
    assert keys(one)[VECTORIZE] == keys(two)[VECTORIZE] == 32  # 4 AVX2 registers of float32


def test_the_same_seed_gives_the_same_trace_in_another_process() -> None:
    task = odd_task("conv2d_nhwc")
    here = default_space(task.program, AVX2_2_THREADS).sample(random.Random(11)).hash
    assert default_space(task.program, AVX2_2_THREADS).sample(random.Random(11)).hash == here
    code = (
        "import random\n"
        "from tests.tuner.space.spacecheck import AVX2_2_THREADS, odd_task\n"
        "from tuner.space import default_space\n"
        "t = odd_task('conv2d_nhwc')\n"
        "print(default_space(t.program, AVX2_2_THREADS).sample(random.Random(11)).hash)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == here


def test_mutants_are_complete_correct_neighbours() -> None:
    task = odd_task("dense")
    target = host_target(2)
    space = default_space(task.program, target)
    rng = random.Random(4)
    trace = space.sample(rng)
    seen = {trace.hash}
    for step in range(24):
        mutant = space.mutate(trace, rng)
        assert mutant is not None
        before, after = space.rule_part(trace), space.rule_part(mutant)
        assert before is not None and after is not None
        if after.instructions != before.instructions:
            # only a re-derived mutant changes the rule part's instructions: a structural
            # choice, or a moved block that changed the root nests the rules annotate
            def structure(t: Trace) -> list[object]:
                return [t.decisions[i] for i in structural_categoricals(t)]

            def nests(t: Trace) -> list[list[str]]:
                return [n for n in root_nests(t.apply(task.program).program) if n]

            assert structure(after) != structure(before) or nests(after) != nests(before)
        assert after.decisions != before.decisions
        assert (
            mutant.apply(task.program).program == space.complete(after).apply(task.program).program
        )
        if step % 8 == 0:
            check_correct(task, mutant, target)
        seen.add(mutant.hash)
        trace = mutant
    assert len(seen) >= 12


def test_a_trace_without_the_marker_cannot_be_mutated() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gemm_traces", ROOT / "examples" / "gemm_traces.py"
    )
    assert spec is not None and spec.loader is not None
    gemm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gemm)
    task = library_task("matmul", {"m": 64, "n": 64, "k": 64})
    sch = TracedSchedule(task.program)
    gemm.gemm_schedule(sch, parallel=False)
    space = default_space(task.program, AVX2_2_THREADS)
    assert space.rule_part(sch.trace) is None
    assert space.mutate(sch.trace, random.Random(0)) is None


def test_no_applicable_mutator_means_none() -> None:
    task = odd_task("gelu")
    target = Target.parse("llvm -mcpu=znver3 -mattr=+avx2 -num-threads=1")
    space = default_space(task.program, target, mutators={"parallel": 1.0, "tile-size": 1.0})
    assert space.mutate(space.sample(random.Random(0)), random.Random(0)) is None


class _Refused(ScheduleRule):
    name = "test-refused"

    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        (loop,) = sch.get_loops(sch.get_block(block))[-1:]
        sch.split(loop, [0, 4])  # not a positive factor: the primitive refuses


def test_a_refused_rule_rejects_the_sample() -> None:
    space = RuleSpace(odd_task("gelu").program, AVX2_2_THREADS, rules=[_Refused()])
    assert isinstance(space, DesignSpace)
    with pytest.raises(SpaceRejected, match="split factor 0"):
        space.sample(random.Random(0))


def test_verify_rejects_huge_unrolls_and_nested_parallel_loops() -> None:
    task = library_task("gelu", {"m": 8, "n": 64})
    ctx = SpaceContext(task.program, AVX2_2_THREADS)
    sch = TracedSchedule(task.program)
    _, j = sch.get_loops(sch.get_block("Y"))
    sch.unroll(j)
    Verify(max_unrolled=64).apply(sch, ctx)
    with pytest.raises(SpaceRejected, match="unrolled 64 times"):
        Verify(max_unrolled=32).apply(sch, ctx)
    sch = TracedSchedule(task.program)
    _, j = sch.get_loops(sch.get_block("Y"))
    sch.parallel(j)
    with pytest.raises(SpaceRejected, match="parallel inside loop i"):
        Verify().apply(sch, ctx)
