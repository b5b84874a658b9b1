"""`python -m benchmarks tune --with-tvm`: TVM MetaSchedule beside loomtune.

Without TVM: the one-line refusal, the interleaved comparison with a fourth
kernel, and the report's TVM columns. With TVM (the bench extra), guarded by
``pytest.importorskip``: each suite operator's TVM definition computes what
loomtune's does, and a tiny tuning gives a kernel that matches numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.__main__ import main
from benchmarks.report import markdown_table, text_table
from benchmarks.tune import compare as tune_compare
from benchmarks.tune import plot as tune_plot
from benchmarks.tune import report as tune_report
from benchmarks.tune import tvm as tune_tvm
from benchmarks.tune import tvm_ref
from codegen.kernel import compile_program
from ir.task import library_task
from workers.timing import MeasureConfig
from workers.verify import verify

QUICK = MeasureConfig(warmup=1, repeat=3, min_repeat_ms=1.0)


def test_with_tvm_without_tvm_says_to_install_the_bench_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tvm_ref, "versions", lambda: None)  # as if apache-tvm were absent
    code = main(["tune", "--quick", "--with-tvm", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "bench" in err and "pip install -e '.[bench]'" in err
    assert not list(tmp_path.iterdir())


class NumpyKernel:
    """A stand-in for TVM's kernel (same interface as tvm_ref.TVMKernel): numpy's answer,
    or nothing at all when `lazy` (its NaN outputs must then be refused)."""

    def __init__(self, task, inputs, specs, lazy: bool = False) -> None:  # type: ignore[no-untyped-def]
        self.task, self.inputs, self.lazy = task, inputs, lazy
        self.out = [np.full(shape, np.nan, dtype=dtype) for shape, dtype in specs]

    def reset(self) -> None:
        for a in self.out:
            a.fill(np.nan)

    def call(self) -> object:
        if not self.lazy:
            for a, r in zip(self.out, self.task.reference(self.inputs)):
                a[...] = r
        return None

    def outputs(self) -> list[np.ndarray]:
        return self.out


def _row(task, result: dict) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """A main-table row as tune_one writes it, around `compare`'s result."""
    row = {
        "case": "matmul 16³",
        "label": "matmul 16³",
        "op": task.op,
        "params": dict(task.params),
        "trials": 4,
        "trials_done": 4,
        "stop_reason": "budget",
        "strategy": "evolutionary",
        "history_ms": [0.02, 0.01, 0.01, 0.005],
        "checkpoints_ms": {"4": 0.005},
        "tune_s": 3.0,
        "candidates_per_s": 1.5,
        "contended": False,
    }
    row.update(result)
    return row


def test_tvm_kernel_joins_the_interleaved_timing_and_the_report(tmp_path: Path) -> None:
    task = library_task("matmul", {"m": 16, "n": 16, "k": 16})
    kernel = compile_program(task.program)

    def stand_in(inputs, specs):  # type: ignore[no-untyped-def]
        return NumpyKernel(task, inputs, specs)

    out = tune_compare.compare(
        kernel, task, QUICK, with_torch=False, tvm=stand_in, round_pause_s=0.0
    )
    assert out["correct"] and out["tvm_message"] is None
    # One interleaved call: the same repeats for every callable.
    assert len(out["tvm"]["times_ms"]) == len(out["loomtune"]["times_ms"]) == QUICK.repeat
    assert out["tvm_ms"] == out["tvm"]["median_ms"]
    assert out["ratio_tvm"] == pytest.approx(out["tvm_ms"] / out["latency_ms"])
    assert out["tvm_ratio_numpy"] == pytest.approx(out["numpy_ms"] / out["tvm_ms"])

    # A TVM kernel that writes nothing is refused and not timed.
    lazy = tune_compare.compare(
        kernel,
        task,
        QUICK,
        with_torch=False,
        round_pause_s=0.0,
        tvm=lambda i, s: NumpyKernel(task, i, s, lazy=True),
    )
    assert lazy["correct"] and "NaN" in lazy["tvm_message"] and lazy["tvm_ms"] is None

    # TVM's run as tune_cached records it: events in trials.jsonl, summarised by read_trials.
    trials_path = tmp_path / tvm_ref.TRIALS_FILE
    tvm_ref.append_event(trials_path, {"event": "start"})
    tvm_ref.append_event(
        trials_path, {"t_s": 5.0, "candidates": [{"ms": 0.03}, {"error": "run: x"}]}
    )
    tvm_ref.append_event(trials_path, {"t_s": 9.0, "candidates": [{"ms": 0.02}, {"ms": 0.04}]})
    tvm_ref.append_event(trials_path, {"event": "done", "t_s": 10.0})
    times, walls, statuses, first_error, events = tvm_ref.read_trials(tmp_path)
    assert times == [0.03, None, 0.02, 0.04] and walls == [5.0, 5.0, 9.0, 9.0]
    assert statuses == {"ok": 3, "run_error": 1} and first_error == "run: x"
    assert set(events) == {"start", "done"}
    history = tvm_ref.best_so_far(times)
    assert history == [0.03, 0.03, 0.02, 0.02]
    meta = {
        "cached": True,
        "tuned_utc": "2026-11-24T04:00:00Z",
        "tune_s": 10.0,
        "trials": 4,
        "trials_done": 4,
        "stop_reason": "budget",
        "history_ms": history,
        "trial_times_s": walls,
        "best_tuning_ms": 0.02,
        "statuses": statuses,
        "first_error": first_error,
        "folder": "x",
        "key": "k",
        "versions": {"apache-tvm": "0.27.0.post1"},
        "target": {"kind": "llvm"},
        "time_limit_s": 900.0,
    }

    row = _row(task, out)
    row["tvm"] = tune_tvm.tvm_row(meta, 4)
    row["tvm_goal"] = tune_tvm.tvm_goal(row)
    assert row["tvm"]["checkpoints_ms"] == {"4": 0.02}
    goal = row["tvm_goal"]
    assert goal["faster"] == (out["latency_ms"] < out["tvm_ms"])
    assert goal["half_time"] is True and goal["time_share"] == pytest.approx(0.3)
    assert goal["met"] == goal["faster"]

    result = {
        "rows": [row],
        "seed": 0,
        "utc": "2026-11-24T04:00:00Z",
        "peak_gflops": 100.0,
        "tune": {
            "trials": 4,
            "strategy": "evolutionary",
            "checkpoints": [4],
            "torch": None,
            "measure_final": {"warmup": 1, "repeat": 3, "min_repeat_ms": 5.0, "rounds": 1},
            "measure_tuning": {
                "repeat": 3,
                "min_repeat_ms": 2.0,
                "confirm_repeat": 6,
                "confirm_within": 1.05,
            },
            "usable_cores": 2,
            "extras": {},
            "not_done": [],
            "tvm": {
                "versions": {"apache-tvm": "0.27.0.post1", "apache-tvm-ffi": "0.1.14.post1"},
                "target": {"kind": "llvm", "mcpu": "znver3", "num-cores": 1},
                "cache_dir": "benchmarks/.tvm_cache",
                "time_limit_s": 900.0,
            },
        },
    }
    tables = tune_report.report_tables(result)
    (headers, rows), tvm_caption = tables[0][1], tables[1][0]
    assert "TVM ms" in headers and "TVM tuning s" in headers
    cells = dict(zip(headers, rows[0]))
    assert cells["TVM tuning s"] == "10"
    assert cells["vs TVM: faster in ≤ ½ its time"].endswith("met")
    assert "30% of its time" in cells["vs TVM: faster in ≤ ½ its time"]
    assert tvm_caption and "TVM" in tvm_caption
    tvm_headers, tvm_rows = tables[1][1]
    assert tvm_rows[0][tvm_headers.index("tuned (UTC)")] == "2026-11-24 04:00:00 (cached run)"
    assert "cached earlier run" in tables[1][2]
    for _caption, table, _note in tables:
        assert text_table(table) and markdown_table(table)
    assert tune_plot.plot(result, tmp_path / "curves.png") is not None


def test_the_goal_needs_both_kernels() -> None:
    row = {
        "tvm_ms": None,
        "latency_ms": 1.0,
        "tvm": {"tune_s": 10.0, "trials_done": 4},
        "tune_s": 1.0,
        "correct": True,
    }
    assert tune_tvm.tvm_goal(row) is None
    assert tune_tvm.tvm_goal_cell(row) == "– (no correct TVM kernel)"
    row["tvm"] = {"tune_s": 900.0, "trials_done": 0}  # killed at the limit before a batch ended
    assert tune_tvm.tvm_goal_cell(row) == "– (TVM measured no candidate in 900 s)"


def test_cache_key_changes_with_what_changes_the_tuning() -> None:
    base = dict(
        trials=256,
        target={"kind": "llvm", "mcpu": "znver3", "num-cores": 1},
        seed=0,
        time_limit_s=900.0,
        tvm_versions={"apache-tvm": "0.27.0.post1"},
    )
    key = tvm_ref.cache_key("matmul", {"m": 8, "n": 8, "k": 8}, **base)  # type: ignore[arg-type]
    assert key == tvm_ref.cache_key("matmul", {"k": 8, "n": 8, "m": 8}, **base)  # type: ignore[arg-type]
    for change in (
        {"trials": 128},
        {"seed": 1},
        {"tvm_versions": {"apache-tvm": "0.28"}},
        {"target": {"kind": "llvm", "mcpu": "skylake", "num-cores": 1}},
    ):
        assert key != tvm_ref.cache_key("matmul", {"m": 8, "n": 8, "k": 8}, **{**base, **change})  # type: ignore[arg-type]


# -- with TVM installed ---------------------------------------------------------------------------

SMALL = {
    "matmul": {"m": 8, "n": 12, "k": 16},
    "batch_matmul": {"b": 2, "m": 8, "n": 12, "k": 4},
    "dense": {"m": 4, "k": 16, "n": 8, "bias": 1, "relu": 1},
    "conv2d_nhwc": {
        "n": 1,
        "h": 7,
        "w": 6,
        "ci": 3,
        "co": 5,
        "kh": 3,
        "kw": 3,
        "stride": 2,
        "pad": 1,
        "dilation": 1,
    },
    "softmax": {"m": 4, "n": 32},
}


@pytest.mark.parametrize("op", sorted(SMALL))
def test_tvm_definitions_compute_what_loomtune_computes(op: str) -> None:
    pytest.importorskip("tvm")
    tvm_ref.require_tvm()
    import tvm

    task = library_task(op, SMALL[op])
    target = tvm_ref.host_target()
    lib = tvm.compile(tvm_ref.te_workload(op, dict(task.params)), target=tvm.target.Target(target))
    inputs = task.make_inputs(0)
    outs = [tvm.runtime.tensor(np.full(s, np.nan, dtype=d)) for s, d in task.output_specs()]
    lib["main"](*[tvm.runtime.tensor(a) for a in inputs], *outs)
    got = [o.numpy() for o in outs]
    assert verify(got, task.reference(inputs), task.output_names, task.reduction_length) is None


def test_tiny_tvm_tuning_matches_numpy_and_is_cached(tmp_path: Path) -> None:
    pytest.importorskip("tvm")
    task = library_task("matmul", {"m": 16, "n": 16, "k": 16})
    params = dict(task.params)
    kwargs = dict(trials=2, cache_dir=tmp_path, preload_intrinsics=False, log=lambda _: None)
    meta, folder = tvm_ref.tune_cached("matmul", params, **kwargs)  # type: ignore[arg-type]
    assert meta["cached"] is False and meta["trials_done"] == 2 and meta["stop_reason"] == "budget"
    assert len(meta["history_ms"]) == 2 and meta["best_tuning_ms"] > 0
    saved = json.loads((folder / tvm_ref.META_FILE).read_text(encoding="utf-8"))
    assert saved["key"] == meta["key"] and folder.name.endswith(meta["key"])

    inputs = task.make_inputs(0)
    k = tvm_ref.best_kernel(folder, "matmul", params, meta["target"], inputs, task.output_specs())
    assert k is not None
    k.reset()
    k.call()
    assert (
        verify(k.outputs(), task.reference(inputs), task.output_names, task.reduction_length)
        is None
    )

    again, folder_again = tvm_ref.tune_cached("matmul", params, **kwargs)  # type: ignore[arg-type]
    assert again["cached"] is True and folder_again == folder
    assert again["tune_s"] == meta["tune_s"] and again["tuned_utc"] == meta["tuned_utc"]
