"""The tiling rule's sampled software prefetch of an unpacked weight (codegen/prefetch.py)."""

from __future__ import annotations

import random

from codegen.host import host_target
from codegen.kernel import compile_program
from codegen.prefetch import prefetch_points, prefetch_requests
from ir.lower import lower
from ir.node import walk
from ir.program import PREFETCH, For
from ir.task import library_task
from tests.tuner.space.spacecheck import check_correct
from tuner.space import default_space

HOST = host_target(1)


def _samples(task, count: int) -> list:
    space = default_space(task.program, HOST)
    rng = random.Random(11)
    return [space.sample(rng) for _ in range(count)]


def test_unpacked_samples_prefetch_the_weight_and_packed_ones_do_not() -> None:
    task = library_task("matmul", {"m": 64, "n": 96, "k": 200})
    chosen, prefetched = set(), 0
    for trace in _samples(task, 24):
        packs = any(i.kind == "pack_panels" for i in trace.instructions)
        notes = [
            i
            for i in trace.instructions
            if i.kind == "annotate" and i.attr("key").startswith(PREFETCH)
        ]
        if packs:
            assert not notes
            continue
        # one sampled distance, taken by the innermost loop of both reduction levels
        assert [i.attr("key") for i in notes] == ["prefetch:B", "prefetch:B"]
        assert len({i.inputs[1] for i in notes}) == 1
        program = trace.apply(task.program).program
        k = next(
            k
            for k, i in enumerate(trace.instructions)
            if i.kind == "sample_categorical" and i.outputs[0] == notes[0].inputs[1].name
        )
        distance = trace.instructions[k].attr("candidates")[trace.decisions[k]]
        chosen.add(distance)
        low = lower(program)
        emitting = [
            f
            for f in walk(low.body)
            if isinstance(f, For) and prefetch_requests(f) and prefetch_points(f, "B", distance)
        ]
        # the innermost marked loop left after lowering prefetches (both copies of it where
        # partitioning split off a remainder); never two nested levels
        assert all(not any(g in walk(f.body) for g in emitting if g is not f) for f in emitting)
        kernel = compile_program(program, HOST)
        calls = "llvm.prefetch" in kernel.ir_text
        assert calls == (distance > 0 and bool(emitting))
        prefetched += calls
        check_correct(task, trace, HOST)
    assert len(chosen) >= 2, f"24 samples chose prefetch distances {chosen} only"
    assert prefetched, "no sample's kernel prefetches"
