"""The memory-bandwidth neighbour of `python -m benchmarks tune --neighbour`: a real child
process, started paused, streaming while resumed, gone after an exception; the slowdowns it
yields in the row, the table and the record.

No timed assertions (the machine is shared): the slowdowns are the ratios of the medians of
the one interleaved call.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from benchmarks import results_doc
from benchmarks.tune import compare as tune_compare
from benchmarks.tune import report as tune_report
from benchmarks.tune.neighbour import NEIGHBOUR_FIELDS, neighbour
from codegen.kernel import compile_program
from ir.task import library_task
from workers.timing import MeasureConfig

QUICK = MeasureConfig(warmup=1, repeat=3, min_repeat_ms=1.0)


def _state(pid: int) -> str:
    """The process's state letter (R running, S sleeping, T stopped) from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, states: str) -> str:
    """The state once it is one of `states` (a signal is delivered asynchronously), or the
    last seen after 2 s."""
    deadline = time.monotonic() + 2.0
    while (state := _state(pid)) not in states and time.monotonic() < deadline:
        time.sleep(0.01)
    return state


def test_the_neighbour_streams_only_when_resumed_and_is_gone_after_an_exception() -> None:
    affinity = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="the timing failed"), neighbour(mib=8) as nb:
        pid = nb.process.pid
        assert nb.core != nb.own_core and os.sched_getaffinity(0) == {nb.own_core}
        assert os.sched_getaffinity(pid) == {nb.core}  # never on the caller's core
        assert _wait_state(pid, "T") == "T"  # started paused
        nb.resume()
        assert _wait_state(pid, "RD") in "RD"  # copying
        time.sleep(0.3)
        nb.pause()
        assert _wait_state(pid, "T") == "T"
        raise RuntimeError("the timing failed")
    assert nb.process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert os.sched_getaffinity(0) == affinity
    assert nb.stats["ended"] == "asked" and nb.stats["copies"] > 0
    assert nb.stats["bytes"] == 2 * nb.stats["copies"] * 8 << 20
    assert nb.stats["gb_per_s"] > 0 and 0.2 < nb.running_s < 2.0


def test_the_neighbour_ends_at_its_deadline_on_its_own() -> None:
    with neighbour(mib=8, deadline_s=0.2) as nb:
        nb.resume()
        assert nb.process.wait(timeout=10) == 0
    assert nb.stats["ended"] == "asked"  # its report was read although it had ended


def test_slowdowns_come_from_one_interleaved_call_alone_and_beside() -> None:
    task = library_task("matmul", {"m": 32, "n": 48, "k": 16})
    kernel = compile_program(task.program)
    out = tune_compare.compare(
        kernel, task, QUICK, with_torch=False, round_pause_s=0.0, with_neighbour=True
    )
    assert out["correct"]
    nb = out["neighbour"]
    assert nb["message"] is None and nb["core"] != nb["own_core"] and nb["order"] == "paired"
    assert set(nb["beside"]) == set(nb["alone"]) == {"loomtune", "numpy"}
    for name in ("loomtune", "numpy"):
        on, off = nb["beside"][name], nb["alone"][name]
        assert len(on["times_ms"]) == len(off["times_ms"]) == QUICK.repeat
        assert out[f"slowdown_{name}"] == pytest.approx(on["median_ms"] / off["median_ms"])
    assert out["slowdown_torch"] is None  # not timed: left out
    assert nb["process_cpu_s"] > 0  # counted as the run's own load


def test_no_neighbour_at_two_threads_it_would_take_a_kernel_thread_core() -> None:
    out = tune_compare.beside_neighbour({"numpy": lambda: np.ones(4)}, QUICK, 0.0, threads=2)
    assert all(out[k] is None for k in NEIGHBOUR_FIELDS)
    assert "2 threads" in out["neighbour"]["message"]


def _row(case: str, slowdowns: tuple[float, float, float | None]) -> dict:
    return {
        "case": case,
        "op": "matmul",
        "params": {"m": 1024, "n": 1024, "k": 1024},
        "checkpoints_ms": {"4": 1.0},
        "history_ms": [1.0],
        "trials_done": 4,
        "tune_s": 1.0,
        "search_s": 0.5,
        "candidates_per_s": 4.0,
        "latency_ms": 1.0,
        "numpy_ms": 1.0,
        "ratio_numpy": 1.0,
        "torch_ms": 1.1,
        "ratio_torch": 1.1,
        "align_gap": 0.0,
        "gflops": 10.0,
        "correct": True,
        "neighbour": {"message": None, "gb_per_s": 20.0},
        **dict(zip(NEIGHBOUR_FIELDS, slowdowns)),
    }


def test_the_slowdowns_in_the_table_and_the_record() -> None:
    result = {
        "peak_gflops": 50.0,
        "tune": {"checkpoints": [4], "torch": "2.13.0", "neighbour": {"mib": 256, "arrays": 2}},
        "rows": [_row("robust", (1.10, 1.20, 1.30)), _row("fragile", (1.30, 1.20, None))],
    }
    headers, cells = tune_report.main_table(result)
    at = headers.index(tune_report.NEIGHBOUR_HEADER)
    assert headers[at : at + 4] == [
        tune_report.NEIGHBOUR_HEADER,
        "numpy slowdown",
        "torch slowdown",
        "≤ numpy's",
    ]
    assert cells[0][at : at + 4] == ["1.1", "1.2", "1.3", "yes"]
    assert cells[1][at : at + 4] == ["1.3", "1.2", "–", "no"]
    note = tune_report.neighbour_note(result)
    assert note is not None and "512 MiB" in note and "20–20 GB/s" in note

    rows = tune_report.headline(result)["rows"]
    assert [r["slowdown_loomtune"] for r in rows] == [1.10, 1.30]
    assert [r["slows_no_more_than_numpy"] for r in rows] == [True, False]
    entry = {"machine": {"cpu": "x"}, "utc": "2026-11-26T20:00:00Z", "rows": rows}
    headers, cells = results_doc.suite_table([entry], "rows")
    assert "slowdown loomtune" in headers and "slowdown numpy" in headers
    assert cells[1][headers.index("slows no more than numpy")] == "not met"

    without = {**result, "tune": {**result["tune"], "neighbour": None}}
    assert tune_report.NEIGHBOUR_HEADER not in tune_report.main_table(without)[0]
    assert "slowdown_loomtune" not in tune_report.headline(without)["rows"][0]
    assert tune_report.neighbour_note(without) is None
