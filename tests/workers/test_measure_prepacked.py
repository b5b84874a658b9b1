"""A model task's candidate is measured as the model runs it: the blocks that only repack
its constant inputs run once before timing (`workers/prepacked.py`), the main program is
verified on their result and timed alone."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.host import host_target
from codegen.kernel import Kernel
from ir.schedule.state import all_blocks
from ir.task import library_task, with_layout_free
from tuner.trace.trace import Trace
from tuner.trace.traced_schedule import TracedSchedule
from workers import measure
from workers.measure import Measurer

TARGET = host_target(1)
STANDALONE = library_task("matmul", {"m": 16, "n": 256, "k": 256})
MODEL = with_layout_free(STANDALONE, ["B"])  # B a weight of a model


def _packing(width: int = 16) -> Trace:
    """B packed in panels under the column-tile loop, inside the row loop: per call the
    whole weight is repacked once per row (16 copies of B), unless B is a constant."""
    sch = TracedSchedule(STANDALONE.program)
    c = sch.get_block("C")
    packed = sch.pack_panels(c, "B", width)
    i, j, r = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, width])
    sch.reorder(i, j0, r, j1)
    sch.compute_at(packed, j0)
    sch.vectorize(j1)
    return sch.trace


def test_the_packing_of_a_weight_is_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    runs, timed = [], []
    real_prologue, real_bind = measure.run_prologue, Kernel.bind_call
    monkeypatch.setattr(measure, "run_prologue", lambda *a: runs.append(1) or real_prologue(*a))

    def bind(kernel: Kernel, *arrays: np.ndarray):
        timed.append(kernel.program)
        return real_bind(kernel, *arrays)

    monkeypatch.setattr(Kernel, "bind_call", bind)
    m = Measurer(confirm_repeat=0)
    model = m.measure(MODEL, TARGET, _packing())
    assert model.ok, model.message
    assert len(runs) == 1  # once per candidate, however many timed calls
    assert model.extra["prepacked"] == ["B_packed"]
    # every timed call (one per offset) runs the main program: B_packed is its input, and
    # no block of it writes B_packed
    assert len(timed) == len(model.extra["offsets"]) == 2
    for program in timed:
        assert [b.name for b in program.inputs] == ["A", "B_packed"]
        assert [r.block.name for r in all_blocks(program)] == ["C"]
    # the same trace as a standalone workload: the packing is timed with the rest
    timed.clear()
    standalone = m.measure(STANDALONE, TARGET, _packing())
    assert standalone.ok and standalone.extra["prepacked"] == [] and len(runs) == 1
    assert len(timed) == 2 and all(len(all_blocks(p)) == 2 and p.allocs for p in timed)


def test_a_task_without_constants_or_nothing_to_hoist_is_timed_whole() -> None:
    sch = TracedSchedule(STANDALONE.program)
    _, j, _ = sch.get_loops(sch.get_block("C"))
    _, ji = sch.split(j, [None, 16])
    sch.vectorize(ji)
    r = Measurer(confirm_repeat=0).measure(MODEL, TARGET, sch.trace)
    assert r.ok and r.extra["prepacked"] == [] and [len(o) for o in r.extra["offsets"]] == [3, 3]


def test_a_wrong_prologue_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = measure.run_prologue

    def off_by_one_panel(*args, **kwargs) -> dict[str, np.ndarray]:
        packed = real(*args, **kwargs)
        packed["B_packed"][0] = packed["B_packed"][1]  # the first panel packed wrong
        return packed

    monkeypatch.setattr(measure, "run_prologue", off_by_one_panel)
    r = Measurer(confirm_repeat=0).measure(MODEL, TARGET, _packing())
    assert r.status == "wrong_result" and "outside the tolerance" in r.message
    assert r.run_times_ms == ()
