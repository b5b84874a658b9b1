"""`loomtune apply` and `export --trace`: trace files replayed, verified and timed."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ir.task import library_task
from tuner.trace.file import TraceFile
from tuner.trace.traced_schedule import TracedSchedule

ROOT = Path(__file__).resolve().parents[3]


def loomtune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], cwd=ROOT, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    task = library_task("matmul", {"m": 48, "n": 32, "k": 16})
    sch = TracedSchedule(task.program, rng=random.Random(0))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=8, decision=[6, 8]))
    j0, j1 = sch.split(
        j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=16, decision=[2, 16])
    )
    sch.reorder(i0, j0, k, i1, j1)
    sch.vectorize(j1)
    sch.parallel(i0)
    path = tmp_path_factory.mktemp("traces") / "mm.trace.json"
    TraceFile.for_task(task, "host -num-threads=2", sch.trace).save(path)
    return path


def assert_user_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loomtune: error:"), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_apply_json(trace_path: Path) -> None:
    proc = loomtune("apply", str(trace_path), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["correct"] is True and out["threads"] == 2  # the trace's own thread count
    assert out["params"] == {"m": 48, "n": 32, "k": 16}
    assert out["workload_key"] == library_task("matmul", {"m": 48, "n": 32, "k": 16}).key
    assert out["speedup_vs_numpy"] == pytest.approx(out["numpy_ms"] / out["latency_ms"])


def test_apply_other_parameters_needs_repair(trace_path: Path) -> None:
    assert_user_error(loomtune("apply", str(trace_path), "m=50"), "no longer fits", "--repair")
    proc = loomtune(
        "apply", str(trace_path), "m=50", "n=40", "--repair", "--threads", "1", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["correct"] is True and out["params"]["m"] == 50 and out["threads"] == 1


def test_apply_bad_files(tmp_path: Path, trace_path: Path) -> None:
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"format": "loomtune.trace/1", "trace": ')
    assert_user_error(loomtune("apply", str(corrupt)), "not valid JSON")
    data = json.loads(trace_path.read_text())
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**data, "format": "loomtune.trace/9"}))
    assert_user_error(loomtune("apply", str(future)), "unknown trace file format")
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**data, "trace": {**data["trace"], "version": 5}}))
    assert_user_error(loomtune("apply", str(newer)), "unknown trace version 5")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({**data, "workload": {"op": "frobnicate", "params": {}}}))
    assert_user_error(loomtune("apply", str(unknown)), "unknown operator 'frobnicate'")
    assert_user_error(loomtune("apply", str(tmp_path / "missing.json")), "cannot read trace file")


def test_export_a_trace(tmp_path: Path, trace_path: Path) -> None:
    out = tmp_path / "mm.ll"
    proc = loomtune(
        "export",
        "matmul",
        "m=48",
        "n=32",
        "k=16",
        "--trace",
        str(trace_path),
        "--threads",
        "2",
        "--format",
        "ll",
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert "exporting the schedule of trace" in proc.stderr
    text = out.read_text()
    assert "pthread_create" in text and "<16 x float>" in text
