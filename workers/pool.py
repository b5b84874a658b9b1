"""The local pool: the `Runner` of the embedded `loomtune tune`.

The machine's cores are cut into slots of `threads` cores each; a slot is one
measurement process pinned to its cores, doing replay, compile, verify and
time for one candidate after another. A slot compiles only between its own
timings, so no core ever compiles while a candidate is timed on it; with
one-thread candidates every core is a slot, and one core compiles its next
candidate while another times. A slot's process is replaced after a crash or
a timeout; the futures of a closed pool end as `crashed` results.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from ir.task import Task
from tuner.runner import MeasureResult, RunnerFuture
from tuner.trace.trace import Trace
from workers.process import DEFAULT_TIMEOUT_S, MeasureProcess
from workers.timing import MeasureConfig


def core_slots(threads: int, cores: Sequence[int] | None = None) -> list[tuple[int, ...]]:
    """Disjoint core sets of `threads` cores each (at least one set, maybe oversubscribed)."""
    usable = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    slots = [tuple(usable[i : i + threads]) for i in range(0, len(usable) - threads + 1, threads)]
    return slots or [tuple(usable)]


class _PoolFuture:
    def __init__(self, future: Future[MeasureResult]) -> None:
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> MeasureResult:
        return self._future.result(timeout)


class LocalPool:
    def __init__(
        self,
        *,
        threads: int = 1,
        cores: Sequence[int] | None = None,
        config: MeasureConfig | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        max_slots: int | None = None,
    ) -> None:
        slots = core_slots(threads, cores)
        if max_slots is not None:
            slots = slots[: max(1, max_slots)]
        self.threads = threads
        self.config = config
        self.processes = [
            MeasureProcess(
                s, worker=f"local:cores={','.join(map(str, s))}", timeout_s=timeout_s, env=env
            )
            for s in slots
        ]
        self._free: queue.Queue[MeasureProcess] = queue.Queue()
        self._executor = ThreadPoolExecutor(len(self.processes), thread_name_prefix="loomtune-slot")
        self._closed = False
        self._lock = threading.Lock()
        self._started: list[MeasureProcess] = []
        # Each process starts now, in its slot's thread (first in the executor's queue, so
        # before any candidate): its imports (~0.5 s of numpy and llvmlite) overlap the
        # search's first proposal instead of following it.
        self._starting = [self._executor.submit(self._start, p) for p in self.processes]

    def wait_started(self) -> list[float]:
        """Block until every process has started (or failed to); the seconds each took."""
        return [f.result() for f in self._starting]

    def _start(self, process: MeasureProcess) -> float:
        begin = time.perf_counter()
        try:
            process.start()
        except Exception:  # measure() starts it again and reports the failure there
            process.kill()
        seconds = time.perf_counter() - begin
        with self._lock:  # close() kills the started ones; one closed meanwhile dies here
            closed = self._closed
            if not closed:
                self._started.append(process)
        if closed:
            process.kill()
        else:
            self._free.put(process)
        return seconds

    @property
    def slots(self) -> int:
        return len(self.processes)

    def _measure(self, workload: dict, target: str, trace: dict) -> MeasureResult:
        if self._closed:
            return MeasureResult.failure("crashed", "the pool was closed before this candidate ran")
        process = self._free.get()
        try:
            return process.measure(workload, target, trace, self.config)
        except Exception:
            if self._closed:  # killed under our feet by close()
                return MeasureResult.failure(
                    "crashed", "the pool was closed while this candidate ran"
                )
            raise
        finally:
            self._free.put(process)

    def submit(self, task: Task, target: str, traces: Sequence[Trace]) -> list[RunnerFuture]:
        spec = task.spec()
        return [
            _PoolFuture(self._executor.submit(self._measure, spec, target, t.to_json()))
            for t in traces
        ]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            started = list(self._started)
        self._executor.shutdown(wait=False, cancel_futures=True)
        for p in started:
            p.kill()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
