"""Measurement in real child processes: statuses, crash/timeout isolation, fault injection."""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import ClassVar

import pytest

from codegen.host import host_target
from ir.task import library_task
from tuner.database import InMemoryDatabase
from tuner.search.loop import tune_loop
from tuner.search.strategy import SearchContext
from tuner.space.simple import SimpleSpace
from tuner.trace.trace import Trace
from tuner.trace.traced_schedule import TracedSchedule
from workers.measure import FAULT_KEY, Measurer
from workers.pool import LocalPool, core_slots
from workers.process import MeasureProcess

TASK = library_task("matmul", {"m": 33, "n": 40, "k": 17})
TARGET = host_target(1)


def _faulty(fault: str, tile: int = 8) -> Trace:
    """A correct schedule of TASK, annotated with a test fault."""
    sch = TracedSchedule(TASK.program)
    c = sch.get_block("C")
    _, j, _ = sch.get_loops(c)
    _, ji = sch.split(j, [None, tile])
    sch.vectorize(ji)
    sch.annotate(c, FAULT_KEY, fault)
    return sch.trace


def _fault_env() -> dict[str, str]:
    return {**os.environ, "LOOMTUNE_TEST_FAULTS": "1"}


def test_measurer_statuses_in_process() -> None:
    m = Measurer(worker="test")
    good = SimpleSpace(TASK.program).sample(random.Random(0))
    r = m.measure(TASK, TARGET, good)
    # the task's first candidate is the best so far: its 3 repeats get a second look
    assert r.extra["confirmed"] == m.confirm_repeat > 0
    assert (
        r.ok
        and len(r.run_times_ms) == 3 + m.confirm_repeat
        and r.median_ms > 0
        and r.compile_ms > 0
        and r.llvm_version
    )
    phases = r.extra["phases_ms"]  # where the time went; compile_ms is the first four
    assert list(phases) == ["replay", "lower", "emit", "llvm", "verify", "timing"]
    assert all(v >= 0 for v in phases.values()) and phases["timing"] > 0
    assert sum(phases[k] for k in ("replay", "lower", "emit", "llvm")) == pytest.approx(
        r.compile_ms
    )
    # a trace that does not apply to this program
    other = library_task("matmul", {"m": 16, "n": 16, "k": 16})
    stale = SimpleSpace(other.program).sample(random.Random(1))
    bad = m.measure(TASK, TARGET, stale)
    assert (
        bad.status == "compile_error" and "does not apply" in bad.message and bad.median_ms is None
    )
    # faults are ignored unless enabled in the environment
    assert "LOOMTUNE_TEST_FAULTS" not in os.environ
    assert m.measure(TASK, TARGET, _faulty("corrupt")).ok


def test_only_contenders_get_extra_repeats() -> None:
    """The task's first candidate and those near the best so far get more repeats; the rest keep 3."""
    trace = _faulty("none", tile=8)
    strict = Measurer(
        worker="strict", confirm_repeat=4, confirm_within=0.01
    )  # contender: 100x faster
    first = strict.measure(TASK, TARGET, trace)
    assert first.ok and first.extra["confirmed"] == 4 and len(first.run_times_ms) == 7
    second = strict.measure(TASK, TARGET, trace)  # the same kernel is no contender by this bar
    assert second.ok and second.extra["confirmed"] == 0 and len(second.run_times_ms) == 3
    other = library_task("matmul", {"m": 16, "n": 24, "k": 8})  # a new task has no best yet
    assert strict.measure(other, TARGET, Trace(())).extra["confirmed"] == 4
    lenient = Measurer(worker="lenient", confirm_repeat=4, confirm_within=100.0)
    assert [lenient.measure(TASK, TARGET, trace).extra["confirmed"] for _ in range(2)] == [4, 4]
    plain = Measurer(worker="plain", confirm_repeat=0)  # no second looks at all
    assert len(plain.measure(TASK, TARGET, trace).run_times_ms) == 3


def test_process_crash_timeout_corrupt_and_oom_each_end_with_their_status() -> None:
    p = MeasureProcess(timeout_s=5, env=_fault_env())
    try:
        spec, tgt = TASK.spec(), TARGET.canonical()
        ok = p.measure(spec, tgt, _faulty("none").to_json())
        assert ok.ok
        first_pid = p.pid
        crashed = p.measure(spec, tgt, _faulty("crash").to_json())
        assert crashed.status == "crashed" and "SIGSEGV" in crashed.message
        wrong = p.measure(spec, tgt, _faulty("corrupt").to_json())
        assert wrong.status == "wrong_result" and "outside the tolerance" in wrong.message
        # wrong only on the aligned arrays (as a broken variant of one offset would be)
        wrong = p.measure(spec, tgt, _faulty("corrupt-aligned").to_json())
        assert wrong.status == "wrong_result" and "(arrays 0 bytes past a line)" in wrong.message
        assert p.pid != first_pid  # the crashed process was replaced
        oom = p.measure(spec, tgt, _faulty("oom").to_json())
        assert oom.status == "runtime_error" and "LOOMTUNE_MAX_BYTES" in oom.message
        hung = p.measure(spec, tgt, _faulty("hang").to_json())
        assert hung.status == "timeout" and "killed" in hung.message
        assert p.measure(spec, tgt, _faulty("none", tile=4).to_json()).ok  # and it goes on
        assert p.starts == 3
    finally:
        p.close()


class _FaultySpace(SimpleSpace):
    """SimpleSpace, with some samples annotated to crash, hang or corrupt their output."""

    plan: ClassVar[dict[int, str]] = {2: "crash", 5: "hang", 7: "corrupt"}

    def __init__(self, program) -> None:
        super().__init__(program)
        self.count = 0

    def sample(self, rng):
        self.count += 1
        if self.count in self.plan:
            return _faulty(
                self.plan[self.count], tile=[8, 10, 4][list(self.plan).index(self.count)]
            )
        return super().sample(rng)


def test_tuning_goes_on_to_its_budget_through_crash_hang_and_wrong_output() -> None:
    from tuner.search.replay import ReplayStrategy

    db = InMemoryDatabase()
    tgt = TARGET.canonical()
    ctx = SearchContext(TASK, tgt, _FaultySpace(TASK.program), db)
    with LocalPool(threads=1, timeout_s=5, env=_fault_env(), max_slots=1) as pool:
        run = tune_loop(
            TASK,
            tgt,
            strategy=ReplayStrategy(ctx, 0),
            runner=pool,
            database=db,
            trials=12,
            batch_size=4,
        )
        starts = pool.processes[0].starts
    assert run.trials_done == 12 and len(run.history) == 12
    statuses = Counter(r.status for r in db.training_records(tgt))
    assert statuses == {"ok": 9, "crashed": 1, "timeout": 1, "wrong_result": 1}
    assert dict(run.failures) == {"crashed": 1, "timeout": 1, "wrong_result": 1}
    assert starts == 3  # first start, after the crash, after the timeout
    assert db.best(TASK.key, tgt).status == "ok"


def test_core_slots_cut_the_cores_into_disjoint_sets() -> None:
    assert core_slots(1, [0, 1, 2, 3]) == [(0,), (1,), (2,), (3,)]
    assert core_slots(2, [0, 1, 2, 3, 4]) == [(0, 1), (2, 3)]
    assert core_slots(4, [0, 1]) == [(0, 1)]  # more threads than cores: one oversubscribed slot
    with pytest.raises(ValueError):
        core_slots(0, [0])


def test_a_pool_pins_each_process_to_its_cores() -> None:
    cores = sorted(os.sched_getaffinity(0))
    with LocalPool(threads=1) as pool:
        futures = pool.submit(
            TASK,
            TARGET.canonical(),
            [SimpleSpace(TASK.program).sample(random.Random(i)) for i in range(4)],
        )
        assert all(f.result().ok for f in futures)
        pinned = sorted(tuple(p.hello["cores"]) for p in pool.processes if p.hello)
    assert pinned == [(c,) for c in cores][: len(pinned)] and pinned


def test_a_measurement_process_dies_with_its_parent() -> None:
    import signal
    import subprocess
    import sys
    import time

    code = "from workers.process import MeasureProcess\nimport time\np = MeasureProcess(); p.start(); print(p.pid, flush=True); time.sleep(60)\n"
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    state = "?"
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/status") as f:
                state = f.read().split("State:")[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z", "X"):
            break
        time.sleep(0.1)
    assert state in ("gone", "Z", "X"), state


def test_a_process_started_by_a_thread_that_ended_lives_on() -> None:
    import threading
    import time

    p = MeasureProcess()
    t = threading.Thread(target=p.start)
    t.start()
    t.join()
    time.sleep(1.0)
    try:
        assert p.proc is not None and p.proc.poll() is None
        assert p.measure(TASK.spec(), TARGET.canonical(), _faulty("none").to_json()).ok
        assert p.starts == 1
    finally:
        p.close()
