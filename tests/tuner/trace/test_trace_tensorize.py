"""Tensorized traces: pad_einsum, blockize and tensorize serialise, replay, mutate and repair."""

from __future__ import annotations

import random

import pytest

from ir.serialize import structural_hash
from ir.target import Target
from ir.task import library_task
from tuner.space import default_space
from tuner.trace.errors import TraceError
from tuner.trace.instruction import Instruction
from tuner.trace.trace import Trace, run_python

# Sampling does not compile: a fixed AVX-512 VNNI target, whatever the host.
VNNI = Target.parse("llvm -mcpu=znver4 -mattr=+avx2,+avx512f,+avx512bw,+avx512vnni")
TASK = library_task("matmul_int8", {"m": 12, "n": 40, "k": 18})  # N, K not whole tiles


@pytest.fixture(scope="module")
def sampled() -> tuple[object, Trace]:
    space = default_space(TASK.program, VNNI)
    return space, space.sample(random.Random(3))


def kinds(trace: Trace) -> list[str]:
    return [i.kind for i in trace.instructions]


def test_a_tensorized_trace_round_trips_through_json_and_python(sampled) -> None:
    _, trace = sampled
    assert {"pad_einsum", "blockize", "tensorize"} <= set(kinds(trace))
    again = Trace.from_json(trace.to_json())
    assert again == trace and again.hash == trace.hash
    program = trace.apply(TASK.program).program
    assert structural_hash(again.apply(TASK.program).program) == structural_hash(program)
    rebuilt = run_python(trace.as_python(), TASK.program).program
    assert structural_hash(rebuilt) == structural_hash(program)


def test_mutants_stay_tensorized_and_replay(sampled) -> None:
    space, trace = sampled
    rng = random.Random(0)
    mutants = [m for m in (space.mutate(trace, rng) for _ in range(6)) if m is not None]
    assert mutants
    for m in mutants:
        assert "tensorize" in kinds(m)
        m.apply(TASK.program)  # strict replay of a complete mutant


def test_repair_replays_on_another_shape(sampled) -> None:
    _, trace = sampled
    # padded too (a trace that pads names the padded copies, which a whole-tile shape lacks)
    other = library_task("matmul_int8", {"m": 20, "n": 72, "k": 22})
    with pytest.raises(TraceError):
        trace.apply(other.program)  # tile decisions made for 12 x 40 x 18 no longer fit
    repaired = trace.apply(other.program, repair=True).trace
    assert "tensorize" in kinds(repaired)


def test_a_tensorize_without_its_intrinsic_is_a_trace_error(sampled) -> None:
    _, trace = sampled
    at = kinds(trace).index("tensorize")
    bad = list(trace.instructions)
    bad[at] = Instruction("tensorize", bad[at].inputs, (("intrinsic", "no_such"),), bad[at].outputs)
    with pytest.raises(TraceError, match="unknown tensor intrinsic 'no_such'"):
        Trace(tuple(bad), trace.decisions).apply(TASK.program)
