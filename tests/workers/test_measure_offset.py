"""Candidates are timed on arrays at numpy's offset from a 64-byte boundary, and any
element-aligned address gives the right answer (ir/arrays.py, docs/decisions.md)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from codegen.host import host_target
from codegen.kernel import compile_program
from ir.arrays import TIMED_OFFSETS, USER_OFFSET, copy_at_offset, offset_of
from ir.task import library_task
from tuner.space import default_space
from workers.compare import compare_with_numpy
from workers.measure import Measurer
from workers.timing import MeasureConfig
from workers.verify import empty_outputs, verify

TARGET = host_target(1)
MATMUL = library_task("matmul", {"m": 19, "n": 70, "k": 33})
SOFTMAX = library_task("softmax", {"m": 5, "n": 77})


def _sampled(task, seed: int):
    """A design-space candidate: vectorized, tiled, often with B packed in panels."""
    return default_space(task.program, TARGET).sample(random.Random(seed))


def test_a_candidate_is_timed_at_numpys_offset_and_on_the_boundary_and_counts_the_slower() -> None:
    measurer = Measurer(worker="t", confirm_repeat=2, confirm_within=0.01)
    trace = _sampled(MATMUL, 1)
    first = measurer.measure(MATMUL, TARGET, trace)  # a task's first candidate is a contender
    assert first.ok, first.message
    assert TIMED_OFFSETS == (USER_OFFSET, 0)
    # per offset, A, B, then C: the addresses the kernel was timed with, modulo 64
    assert first.extra["offsets"] == [[USER_OFFSET] * 3, [0] * 3]
    per_offset = first.extra["offset_ms"]
    assert len(per_offset) == 2 and first.median_ms == max(per_offset)
    assert len(first.run_times_ms) == 3 + 2  # as many samples at either offset
    # no contender (100x the best by this bar): fewer repeats, but at every offset still, so
    # that its time does not depend on this process's history
    again = measurer.measure(MATMUL, TARGET, trace)
    assert again.extra["confirmed"] == 0 and len(again.run_times_ms) == 3
    assert len(again.extra["offsets"]) == 2 and again.median_ms == max(again.extra["offset_ms"])


def test_the_offsets_are_the_measurers_to_choose() -> None:
    result = Measurer(worker="t", confirm_repeat=0, offsets=(4,)).measure(
        MATMUL, TARGET, _sampled(MATMUL, 1)
    )
    assert result.ok and result.extra["offsets"] == [[4] * 3]
    assert result.median_ms == result.extra["offset_ms"][0]


def test_numpys_offset_is_where_its_large_arrays_start() -> None:
    """The default is not a guess: in a fresh process numpy's allocator puts a large array
    16 bytes past a page (glibc mmaps it behind a 16-byte header). A long-running process
    may differ: glibc raises its mmap threshold after large frees, and a later array then
    comes from the heap at any multiple of 16 — so this asks a new interpreter."""
    import subprocess
    import sys

    code = "import numpy as np; print(np.empty((512, 512), np.float32).ctypes.data % 64)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == USER_OFFSET
    assert offset_of(np.empty((512, 512), np.float32)) % 16 == 0  # here: numpy's guarantee


@pytest.mark.parametrize("task", [MATMUL, SOFTMAX], ids=["matmul", "softmax"])
@pytest.mark.parametrize("seed", [0, 3])
def test_a_vectorized_kernel_is_right_at_any_element_aligned_address(task, seed: int) -> None:
    kernel = compile_program(_sampled(task, seed).apply(task.program).program, TARGET)
    base = task.make_inputs(0)
    refs = task.reference(base)
    for offset in (4, 16, 36, 60):
        inputs = [copy_at_offset(a, offset) for a in base]
        outputs = empty_outputs(task.output_specs(), offset)
        kernel(*inputs, *outputs)
        assert all(offset_of(a) == offset for a in (*inputs, *outputs))
        assert verify(outputs, refs, task.output_names, task.reduction_length) is None, offset


def test_the_comparison_with_numpy_runs_at_the_users_offset() -> None:
    kernel = compile_program(_sampled(MATMUL, 2).apply(MATMUL.program).program, TARGET)
    config = MeasureConfig(warmup=0, number=1, repeat=1)
    for offset in (USER_OFFSET, 4):
        cmp = compare_with_numpy(kernel, MATMUL, config=config, offset=offset)
        assert cmp.correct and cmp.latency_ms is not None and cmp.latency_ms > 0
