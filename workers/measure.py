"""Measure one candidate in this process: replay, compile, run, verify, time.

This is what a measurement process (`workers/child.py`) does for each request;
it never raises for a bad candidate — every outcome is a `MeasureResult` with
a status and a message. A wrong result never gets a time. A model task's
candidate is measured as the model runs it (`workers/prepacked.py`): what only
rearranges its constant inputs runs once, untimed.

Fault injection (tests only): with `LOOMTUNE_TEST_FAULTS=1` in the measuring
process's environment, a candidate whose trace annotates any block or loop
with `loomtune.test_fault` = "crash" (the process dies of SIGSEGV), "hang"
(it sleeps forever), "corrupt" (one output element is changed after the run),
or "oom" (it allocates past its address-space limit) misbehaves on purpose.
Without the variable the annotation is ignored.
"""

from __future__ import annotations

import os
import signal
import time
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from codegen.emit import emit_module
from codegen.host import llvm_version
from codegen.jit import compile_ir
from codegen.kernel import Kernel, compile_program
from ir.arrays import TIMED_OFFSETS, copy_at_offset, offset_of
from ir.errors import LoomtuneError
from ir.lower import lower
from ir.node import walk
from ir.program import Block, For, Program
from ir.target import Target
from ir.task import Task
from tuner.runner import MeasureResult
from tuner.trace.trace import Trace
from workers.machine import limit_numpy_threads
from workers.prepacked import main_arguments, run_prologue
from workers.timing import MeasureConfig, Timing, time_interleaved
from workers.verify import empty_outputs, first_wrong

FAULT_ENV = "LOOMTUNE_TEST_FAULTS"
FAULT_KEY = "loomtune.test_fault"
FAULTS = ("crash", "hang", "corrupt", "oom")

TUNING_CONFIG = MeasureConfig(warmup=1, number=0, repeat=3, min_repeat_ms=2.0)
"""Timing while tuning: short repeats, many candidates; the final comparison
with numpy uses the longer default protocol (`workers/compare.py`)."""

CONFIRM_REPEAT = 6
"""Extra repeats for a candidate that its first repeats put near the best."""
CONFIRM_WITHIN = 1.05
"""'Near the best': a median at most this factor above the best median this
process has timed for the task (or the task's first candidate)."""


def injected_fault(program: Program) -> str | None:
    """The fault a test asked for, when faults are enabled in this process."""
    if os.environ.get(FAULT_ENV) != "1":
        return None
    for node in walk(program.body):
        if isinstance(node, Block | For):
            value = dict(node.annotations).get(FAULT_KEY)
            if value is not None:
                return str(value)
    return None


@dataclass
class _Prepared:
    """A task's inputs (one copy per timed offset) and numpy's answers: made once per task
    and thread count."""

    task: Task
    inputs: dict[int, list[np.ndarray]]
    refs: list[np.ndarray]
    best_ms: float | None = None
    """The best median timed here for this task: the bar for a second look."""


class Measurer:
    """Measures candidates of any task; keeps the inputs of the last few tasks.

    A candidate is timed on arrays at each of `offsets` bytes past a 64-byte
    boundary (`ir.arrays.TIMED_OFFSETS`: 16, where numpy's large arrays start,
    and 0, where models' and PyTorch's do), interleaved, and its time is the
    slowest offset's: the search picks kernels whose speed holds on the arrays
    users pass, and a time does not depend on where this process's allocator
    put its buffers. It is verified at every offset: a kernel streaming an input
    runs a variant per offset of it (`codegen.kernel`).

    A candidate whose first repeats put it within `confirm_within` of the best
    this process has timed for its task gets `confirm_repeat` more: the search
    keeps the minimum of many short, noisy medians, and without a second look
    that minimum is mostly luck (best-so-far ran 10-25% below the kernel's
    re-timing on a 2-core VM). Only the few contenders pay for it.
    """

    def __init__(
        self,
        *,
        worker: str = "",
        keep_tasks: int = 4,
        confirm_repeat: int = CONFIRM_REPEAT,
        confirm_within: float = CONFIRM_WITHIN,
        offsets: tuple[int, ...] = TIMED_OFFSETS,
    ) -> None:
        self.worker = worker or f"pid{os.getpid()}"
        self.offsets = offsets
        self.keep_tasks = keep_tasks
        self.confirm_repeat = confirm_repeat
        self.confirm_within = confirm_within
        self._prepared: OrderedDict[tuple[str, int], _Prepared] = OrderedDict()
        self.llvm_version = llvm_version()

    def prepare(self, task: Task, threads: int) -> _Prepared:
        key = (task.key, threads)
        if key in self._prepared:
            self._prepared.move_to_end(key)
            return self._prepared[key]
        made = task.make_inputs(0)
        inputs = {off: [copy_at_offset(a, off) for a in made] for off in self.offsets}
        with limit_numpy_threads(threads):
            refs = [np.asarray(r) for r in task.reference(made)]
        prepared = _Prepared(task, inputs, refs)
        self._prepared[key] = prepared
        while len(self._prepared) > self.keep_tasks:
            self._prepared.popitem(last=False)
        return prepared

    def _fail(self, status: str, message: str, compile_ms: float = 0.0) -> MeasureResult:
        return MeasureResult(status, (), message, self.worker, compile_ms, self.llvm_version)

    def _time(
        self, prepared: _Prepared, calls: list, config: MeasureConfig
    ) -> tuple[list[Timing], int]:
        """Each offset's timing, interleaved; a contender's with `confirm_repeat` more repeats.

        Every candidate is timed at every offset, so its time does not depend on
        whether this process saw it as a contender (records of different
        workers and processes compare: trust's confirmation re-times them).
        """
        timings = time_interleaved(calls, config, one_number=True)
        worst = max(t.median_ms for t in timings)
        if self.confirm_repeat <= 0 or (
            prepared.best_ms is not None and worst > prepared.best_ms * self.confirm_within
        ):
            return timings, 0
        again = replace(config, warmup=0, number=timings[0].number, repeat=self.confirm_repeat)
        more = time_interleaved(calls, again)
        merged = [Timing(t.times_ms + m.times_ms, t.number) for t, m in zip(timings, more)]
        return merged, self.confirm_repeat

    def _wrong(self, task: Task, prepared: _Prepared, outputs: dict) -> str | None:
        """Why an offset's outputs are wrong (the first such offset), or None."""
        runs = ((o, outputs[o]) for o in self.offsets)
        found = first_wrong(runs, prepared.refs, task.output_names, task.reduction_length)
        if found is None:
            return None
        o, reason = found
        return reason + ("" if o == self.offsets[0] else f" (arrays {o} bytes past a line)")

    def measure(
        self, task: Task, target: Target, trace: Trace, config: MeasureConfig = TUNING_CONFIG
    ) -> MeasureResult:
        """Replay, compile, run once and verify, then time; `extra` says where the time went.

        An ok result's `extra` holds `number` (calls per repeat) and
        `phases_ms`: `replay` (the trace applied), `lower`, `emit` (LLVM IR
        text), `llvm` (optimise and JIT; `compile_ms` is these four),
        `verify` (inputs and numpy's answers when the task is new to this
        process, one run, the comparison) and `timing` (warm-up, calibration
        and the repeats); `confirmed` is the number of extra repeats a
        contender got (0 for the others); per timed offset, `offsets` the bytes
        past a 64-byte boundary where each array (inputs, then outputs) started
        and `offset_ms` the median there (the result's times are the slowest
        offset's); `prepacked`, the buffers computed once from the task's
        constants before timing (`workers/prepacked.py`; [] for most candidates).
        """
        t0 = time.perf_counter()
        try:
            program = trace.apply(task.program).program
        except LoomtuneError as e:
            return self._fail("compile_error", f"the trace does not apply: {e}")
        fault = injected_fault(program)
        t1 = time.perf_counter()
        try:
            prologue, main = task.hoist(program)
            # compile_program's steps, one by one so each is timed
            lowered = lower(main)
            t2 = time.perf_counter()
            text = emit_module(
                lowered,
                main.name,
                num_threads=target.num_threads,
                vector_bits=target.vector_bits,
                features=target.features,
            )
            t3 = time.perf_counter()
            kernel = Kernel(main, lowered, compile_ir(text, target), main.name, target=target)
            packer = compile_program(prologue, target) if prologue is not None else None
        except LoomtuneError as e:
            return self._fail(
                "compile_error", str(e).splitlines()[0] if str(e) else type(e).__name__
            )
        except RecursionError:
            return self._fail("compile_error", "the program is nested too deeply to compile")
        t4 = time.perf_counter()
        compile_ms = (t4 - t0) * 1e3
        try:
            prepared = self.prepare(task, target.num_threads)
        except LoomtuneError as e:  # the workload itself (a custom one reading out of bounds)
            return self._fail("runtime_error", f"the workload's reference fails: {e}", compile_ms)
        except (MemoryError, ValueError, ArithmeticError) as e:
            return self._fail(
                "runtime_error",
                f"the workload's reference fails: {type(e).__name__}: {e}",
                compile_ms,
            )
        outputs = {off: empty_outputs(task.output_specs(), off) for off in self.offsets}
        first = self.offsets[0]
        args = prepared.inputs
        try:
            if fault == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            if fault == "hang":
                while True:
                    time.sleep(3600)
            if fault == "oom":
                np.ones(1 << 40, dtype=np.uint8)
            if prologue is not None and packer is not None:  # once, untimed: as at a model's load
                packed = run_prologue(packer, prologue, task, prepared.inputs[first])
                args = {o: main_arguments(task, main, a, packed) for o, a in args.items()}
            for o in self.offsets:  # each offset may run its own variant (codegen.kernel)
                kernel(*args[o], *outputs[o])
        except MemoryError:
            return self._fail(
                "runtime_error",
                "out of memory (the process's address-space limit, LOOMTUNE_MAX_BYTES)",
                compile_ms,
            )
        except LoomtuneError as e:
            return self._fail("runtime_error", str(e), compile_ms)
        if fault in ("corrupt", "corrupt-aligned"):  # wrong at the first offset, or the last
            bad = outputs[first if fault == "corrupt" else self.offsets[-1]][0]
            bad.reshape(-1)[0] += 1.0 if np.issubdtype(bad.dtype, np.floating) else 1
        reason = self._wrong(task, prepared, outputs)
        if reason is not None:
            return self._fail("wrong_result", reason, compile_ms)
        t5 = time.perf_counter()
        calls = [kernel.bind_call(*args[o], *outputs[o]) for o in self.offsets]
        timings, confirmed = self._time(prepared, calls, config)
        timing = max(timings, key=lambda t: t.median_ms)
        if prepared.best_ms is None or timing.median_ms < prepared.best_ms:
            prepared.best_ms = timing.median_ms
        if any(call() != 0 for call in calls):
            return self._fail(
                "runtime_error",
                f"kernel {kernel.symbol} returned an error code while timed",
                compile_ms,
            )
        t6 = time.perf_counter()
        phases = {
            "replay": t1 - t0,
            "lower": t2 - t1,
            "emit": t3 - t2,
            "llvm": t4 - t3,
            "verify": t5 - t4,
            "timing": t6 - t5,
        }
        extra = {
            "number": timing.number,
            "confirmed": confirmed,
            "offsets": [[offset_of(a) for a in (*args[o], *outputs[o])] for o in self.offsets],
            "prepacked": [b.name for b in prologue.outputs] if prologue is not None else [],
            "offset_ms": [t.median_ms for t in timings],
            "phases_ms": {k: v * 1e3 for k, v in phases.items()},
        }
        return MeasureResult(
            "ok", timing.times_ms, "", self.worker, compile_ms, self.llvm_version, extra
        )
