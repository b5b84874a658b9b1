"""The last step of a tuning run: the few best stored records re-timed together.

While tuning, each candidate is timed with a few short repeats at its own
moment, and the machine drifts (by up to 25% over tens of minutes on a
shared VM). The record with the lowest median is then the minimum over many
noisy draws, and often a lucky one: on the znver5 VM the best matmul 512³
kernel re-timed 7% slower than its tuning median while the runner-up was not
(a winner's curse). So the top `FINALISTS` records are compiled, verified
and timed interleaved in one call, and the fastest of them is what a tuning
run returns.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from codegen.kernel import Kernel, compile_program
from ir.arrays import TIMED_OFFSETS, copy_at_offset
from ir.errors import LoomtuneError
from ir.program import Program
from ir.schedule import ScheduleError
from ir.target import Target
from ir.task import Task
from tuner.database import TuningRecord
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace
from workers.machine import limit_numpy_threads
from workers.prepacked import main_arguments, run_prologue
from workers.timing import MeasureConfig, time_interleaved
from workers.verify import empty_outputs, first_wrong

FINALISTS = 4
"""Stored bests re-timed together at the end of a run."""

FINAL_CONFIG = MeasureConfig(warmup=1, number=0, repeat=7, min_repeat_ms=10.0)
"""Longer than a tuning measurement (3 repeats of 2 ms): 4 kernels cost about two seconds."""

FINAL_SETS = 2
"""Array sets per timed offset each finalist runs on (its time there: their median). Where
a set lies moved one kernel by up to 45 % on a VM, as much as its offset did
(docs/decisions.md): with one set, a finalist could win by where its buffers fell."""


@dataclass(frozen=True)
class Finalist:
    record: TuningRecord
    retimed_ms: float | None
    """Median of the interleaved re-timing at the slower offset (`ir.arrays.TIMED_OFFSETS`;
    at each, the median over `FINAL_SETS` sets); None when it no longer compiled or verified."""
    message: str | None = None


@dataclass(frozen=True)
class Selection:
    best: TuningRecord
    kernel: Kernel
    finalists: tuple[Finalist, ...]


def select_fastest(
    task: Task,
    target: Target,
    records: Sequence[TuningRecord],
    config: MeasureConfig = FINAL_CONFIG,
) -> Selection | None:
    """The fastest of `records` (best first, as the database orders them) re-timed together.

    A record whose trace no longer compiles or whose kernel is wrong is left out
    (with its message); None when none is left. A single record is returned
    without timing. Like a candidate (`workers.measure`), each is timed at every offset of
    `ir.arrays.TIMED_OFFSETS`, there on `FINAL_SETS` sets, and ranked by the slower offset's
    median; it is verified on each offset's first set; a model
    task's is timed without what only rearranges its constants (`workers.prepacked`), and
    the kernel returned is still the whole program's.
    """
    made = task.make_inputs(seed=0)
    sets = [(off, i) for off in TIMED_OFFSETS for i in range(FINAL_SETS)]
    inputs = {s: [copy_at_offset(a, s[0]) for a in made] for s in sets}
    first = sets[0]
    checked = [s for s in sets if s[1] == 0]  # each offset's variant (`codegen.kernel`)
    with limit_numpy_threads(target.num_threads):
        refs = task.reference(made)
    kernels: list[tuple[TuningRecord, Kernel, dict, dict, Program]] = []
    dropped: list[Finalist] = []
    for record in records:
        try:
            program = Trace.from_json(record.trace).apply(task.program).program
            prologue, main = task.hoist(program)  # as a model runs it
            kernel = compile_program(main, target)
            packer = compile_program(prologue, target) if prologue is not None else None
        except (
            ScheduleError,
            TraceError,
            LoomtuneError,
        ) as e:  # a stored trace this version refuses
            dropped.append(Finalist(record, None, f"{type(e).__name__}: {e}"))
            continue
        outputs = {s: empty_outputs(task.output_specs(), s[0]) for s in sets}
        args = inputs
        try:
            if prologue is not None and packer is not None:
                packed = run_prologue(packer, prologue, task, inputs[first])
                args = {o: main_arguments(task, main, a, packed) for o, a in inputs.items()}
            for s in checked:
                kernel(*args[s], *outputs[s])
        except LoomtuneError as e:  # e.g. a scratch allocation that fails here
            dropped.append(Finalist(record, None, str(e)))
            continue
        runs = ((s, outputs[s]) for s in checked)
        wrong = first_wrong(runs, refs, task.output_names, task.reduction_length)
        if wrong is not None:
            dropped.append(Finalist(record, None, wrong[1]))
            continue
        kernels.append((record, kernel, args, outputs, program))
    if not kernels:
        return None
    if len(kernels) == 1:
        record, kernel, _, _, program = kernels[0]
        return Selection(
            record, _whole(kernel, program, target), (Finalist(record, None), *dropped)
        )
    calls = [k.bind_call(*args[s], *out[s]) for _, k, args, out, _ in kernels for s in sets]
    timings = iter(time_interleaved(calls, config))
    worst = []
    for _ in kernels:
        at = {s: next(timings).median_ms for s in sets}
        worst.append(
            max(statistics.median(at[off, i] for i in range(FINAL_SETS)) for off in TIMED_OFFSETS)
        )
    ranked = sorted(zip(kernels, worst), key=lambda kt: kt[1])
    (record, kernel, _, _, program), _ = ranked[0]
    finalists = tuple(Finalist(r, ms) for (r, *_), ms in ranked) + tuple(dropped)
    return Selection(record, _whole(kernel, program, target), finalists)


def _whole(kernel: Kernel, program: Program, target: Target) -> Kernel:
    """The kernel of the whole scheduled program (packing included, callable on the task's
    inputs), whichever part of it was timed."""
    return kernel if kernel.program is program else compile_program(program, target)
