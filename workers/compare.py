"""Run a compiled kernel against numpy: verify it, then time both interleaved.

This is what `loomtune run` (and later `apply` and `tune`'s final table) report:
numpy is limited to the kernel's thread count and timed in the same run, never
taken from earlier measurements. Both run on the same arrays, at the offset from
a 64-byte boundary where numpy puts large arrays (`ir.arrays.USER_OFFSET`): the
speed a user sees, and the one candidates were tuned for.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.kernel import Kernel
from ir.arrays import USER_OFFSET, copy_at_offset
from ir.task import Task
from workers.machine import limit_numpy_threads
from workers.timing import MeasureConfig, Timing, time_interleaved
from workers.verify import empty_outputs, verify


@dataclass(frozen=True)
class Comparison:
    correct: bool
    message: str | None
    kernel: Timing | None
    numpy: Timing | None

    @property
    def latency_ms(self) -> float | None:
        return self.kernel.median_ms if self.kernel else None

    @property
    def numpy_ms(self) -> float | None:
        return self.numpy.median_ms if self.numpy else None


COMPARE_CONFIG = MeasureConfig(min_repeat_ms=100.0)
"""Repeats of at least 100 ms: a repeat of one or two calls of a multi-threaded
kernel measured up to 2x slow on this VM (vCPU wake-ups), several calls do not."""


SETTLE_S = 0.2
"""Pause before each repeat at several threads, for numpy's spinning BLAS threads to sleep."""


def compare_with_numpy(
    kernel: Kernel,
    task: Task,
    *,
    threads: int = 1,
    config: MeasureConfig | None = None,
    seed: int = 0,
    offset: int = USER_OFFSET,
) -> Comparison:
    """Verify `kernel` on seeded inputs `offset` bytes past a 64-byte boundary; time it and
    numpy only if it is correct."""
    config = config or COMPARE_CONFIG
    inputs = [copy_at_offset(a, offset) for a in task.make_inputs(seed)]
    outputs = empty_outputs(task.output_specs(), offset)
    kernel(*inputs, *outputs)
    with limit_numpy_threads(threads):
        refs = task.reference(inputs)
    reason = verify(outputs, refs, task.output_names, task.reduction_length)
    if reason is not None:
        return Comparison(False, reason, None, None)
    call = kernel.bind_call(*inputs, *outputs)
    with limit_numpy_threads(threads):
        pause = SETTLE_S if threads > 1 else 0.0
        k_time, np_time = time_interleaved(
            [call, lambda: task.reference(inputs)], config, pause_s=pause
        )
    return Comparison(True, None, k_time, np_time)
