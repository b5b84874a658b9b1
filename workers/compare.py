"""Run a compiled kernel against numpy: verify it, then time both interleaved.

This is what `loomtune run` (and later `apply` and `tune`'s final table) report:
numpy is limited to the kernel's thread count and timed in the same run, never
taken from earlier measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.kernel import Kernel
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


def compare_with_numpy(
    kernel: Kernel, task: Task, *, threads: int = 1, config: MeasureConfig | None = None, seed: int = 0
) -> Comparison:
    """Verify `kernel` on seeded inputs; time it and numpy only if it is correct."""
    config = config or MeasureConfig()
    inputs = task.make_inputs(seed)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    with limit_numpy_threads(threads):
        refs = task.reference(inputs)
    reason = verify(outputs, refs, task.output_names, task.reduction_length)
    if reason is not None:
        return Comparison(False, reason, None, None)
    call = kernel.bind_call(*inputs, *outputs)
    with limit_numpy_threads(threads):
        k_time, np_time = time_interleaved([call, lambda: task.reference(inputs)], config)
    return Comparison(True, None, k_time, np_time)
