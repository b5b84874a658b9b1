"""What a newcomer tried from the README alone: Ctrl-C, `export --trace`,
`--database`, baselines named for what they are, and the small promises of the CLI."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.cli.common import export_target

ROOT = Path(__file__).resolve().parents[3]
TUNE_DENSE = ("tune", "dense", "m=64", "n=64", "k=64", "--trials", "64")


def loomtune(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{db}", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=full,
    )


def _records(db: Path) -> int:
    try:
        with sqlite3.connect(db) as con:
            return con.execute("SELECT count(*) FROM records").fetchone()[0]
    except sqlite3.Error:
        return 0


# -- 1. Ctrl-C during tune ------------------------------------------------------------------


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_to_the_process_group_exits_130_without_tracebacks(
    tmp_path: Path, presses: int
) -> None:
    """A terminal's Ctrl-C signals the whole group: the search helpers and measurement
    processes stay quiet, the tuner prints the best so far (or ends at once) and exits 130."""
    db = tmp_path / "loomtune.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", *TUNE_DENSE],
        cwd=ROOT,
        env={**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{db}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and _records(db) < 2 and proc.poll() is None:
        time.sleep(0.1)
    for i in range(presses):
        os.killpg(proc.pid, signal.SIGINT)
        if i + 1 < presses:
            time.sleep(0.3)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert "KeyboardInterrupt" not in stderr, stderr
    if presses == 1:
        assert "stopped: interrupted" in stderr and "loomtune (best)" in stdout, stderr


# -- 2. export --trace ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A database whose best for matmul 48x32x16 is the default nest, and a trace file of it."""
    from ir.task import library_task
    from service.db.store import open_database
    from tuner.runner import MeasureResult
    from tuner.search.loop import make_record
    from tuner.trace.file import TraceFile
    from tuner.trace.traced_schedule import TracedSchedule

    tmp = tmp_path_factory.mktemp("export")
    db, path = tmp / "loomtune.db", tmp / "mm.trace.json"
    task = library_task("matmul", {"m": 48, "n": 32, "k": 16})
    sch = TracedSchedule(task.program, rng=random.Random(0))
    i, _j, _k = sch.get_loops(sch.get_block("C"))
    i0, _i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=8, decision=[6, 8]))
    sch.parallel(i0)
    TraceFile.for_task(task, "host -num-threads=2", sch.trace).save(path)
    plain = TracedSchedule(task.program, rng=random.Random(0))
    plain.get_block("C")
    target = export_target("host", 2).canonical()
    ok = MeasureResult("ok", (1.0, 1.0, 1.0), worker="test")
    open_database(f"sqlite:///{db}").commit_record(make_record(task, target, plain.trace, ok))
    return db, path


def export(db: Path, trace: Path | None, *words: str) -> subprocess.CompletedProcess[str]:
    out = db.parent / f"k{time.monotonic_ns()}.ll"
    extra = ("--trace", str(trace)) if trace is not None else ()
    return loomtune(
        db, "export", *words, *extra, "--threads", "2", "--format", "ll", "-o", str(out)
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("loomtune: error:") and "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_export_trace_wins_over_the_stored_best(traced: tuple[Path, Path]) -> None:
    db, trace = traced
    proc = export(db, trace, "matmul", "m=48", "n=32", "k=16")
    assert proc.returncode == 0 and "exporting the schedule of trace" in proc.stderr, proc.stderr
    proc = export(db, None, "matmul", "m=48", "n=32", "k=16")  # documented: the stored best
    assert proc.returncode == 0 and "exporting the stored best record" in proc.stderr, proc.stderr


def test_export_trace_names_its_own_workload(traced: tuple[Path, Path]) -> None:
    db, trace = traced
    proc = export(db, trace)
    assert proc.returncode == 0, proc.stderr
    assert "of trace" in proc.stderr and "m=48 n=32 k=16" in proc.stderr
    assert_one_line_error(export(db, trace, "m=50"), "--repair")
    proc = export(db, trace, "m=50", "--repair")
    assert proc.returncode == 0 and "m=50" in proc.stderr, proc.stderr
    assert_one_line_error(export(db, trace, "gelu", "m=48", "n=32"), "a trace of matmul, not gelu")


# -- 3. --database URL ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("mysql://x/y", "unsupported database mysql"),
        ("/tmp/loomtune.db", "is not a URL"),
        ("sqlite:////nonexistent/dir/x.db", "folder /nonexistent/dir does not exist"),
        ("postgresql://u:secret@h:notaport/db", "malformed"),
    ],
)
def test_database_url_mistakes_are_one_line(tmp_path: Path, url: str, what: str) -> None:
    db = tmp_path / "unused.db"
    for args in (("db", "export", "--database", url), ("tune", "gelu", "--database", url)):
        proc = loomtune(db, *args)
        assert_one_line_error(proc, what, url.replace("secret", "***"))
        assert "secret" not in proc.stderr
    proc = loomtune(db, "best", "gelu", env={"LOOMTUNE_DATABASE_URL": url})
    assert_one_line_error(proc, what)
    assert not Path("/nonexistent").exists() and not db.exists()


def test_database_flag_overrides_the_environment(traced: tuple[Path, Path], tmp_path: Path) -> None:
    db, _ = traced
    proc = loomtune(tmp_path / "other.db", "db", "export", "--database", f"sqlite:///{db}")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1, proc.stderr
    proc = loomtune(db, "best", "matmul", "m=48", "n=32", "k=16", "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    empty = tmp_path / "empty.db"
    proc = loomtune(
        db, "best", "matmul", "m=48", "n=32", "k=16", "--database", f"sqlite:///{empty}"
    )
    assert proc.returncode != 0 and empty.exists(), proc.stderr


# -- 4. baselines named for what they are ------------------------------------------------------

TANH_MATMUL = str(ROOT / "examples" / "tanh_matmul.workload.json")


def test_run_names_its_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    """In-process (the imports once): each kind of workload and the baseline it is timed against
    (one int8 and one bf16 operator for "numpy float32": every such operator's float twin is
    tested in tests/ir/library/test_quantized.py)."""
    from service.cli.main import main

    cases = [
        (("--workload", TANH_MATMUL, "m=32"), "evaluator"),
        (("matmul_bf16", "m=32", "n=32", "k=32"), "numpy float32"),
        (("dense_int8", "m=32", "n=32", "k=32"), "numpy float32"),
        (("gelu", "m=32", "n=32"), "numpy"),
    ]
    for words, baseline in cases:
        assert main(["run", *words, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["baseline"] == baseline and out["numpy_ms"] > 0, words
        if baseline == "evaluator":
            assert out["speedup_vs_numpy"] is None
        else:
            assert out["speedup_vs_numpy"] == pytest.approx(out["numpy_ms"] / out["latency_ms"])
    assert main(["run", "--workload", TANH_MATMUL, "m=32"]) == 0
    text = capsys.readouterr()
    assert "vs evaluator" in text.out and "numpy" not in text.out + text.err


def test_tune_of_a_custom_workload_claims_no_numpy_speedup() -> None:
    """`tune --json`'s fields from an outcome (the tuning itself is tested elsewhere)."""
    from codegen.host import host_target
    from ir.definition import load_definition_file
    from ir.task import custom_task
    from service.cli.tune import tune_result
    from service.tuning import TuneOutcome
    from tuner.search.loop import TuneRun
    from workers.compare import Comparison
    from workers.timing import Timing

    task = custom_task(load_definition_file(TANH_MATMUL), {"m": "32"})
    timing = [Timing((t,) * 3, 1) for t in (0.01, 5.0)]
    outcome = TuneOutcome(
        task,
        host_target(1),
        "evolutionary",
        TuneRun(2),
        None,
        None,
        Comparison(True, None, *timing),
    )
    out = tune_result(outcome, 2)
    assert out["baseline"] == "evaluator" and out["speedup_vs_numpy"] is None
    assert out["latency_ms"] == pytest.approx(0.01) and out["numpy_ms"] == pytest.approx(5.0)


# -- 5. the smaller promises --------------------------------------------------------------------


def one_line_error(code: int, err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("loomtune: error:"), err
    for w in words:
        assert w in lines[0], lines[0]


def test_version_and_argparse_errors_without_a_doubled_prefix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from service.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("loomtune ")
    one_line_error(main(["run", "gelu", "--threads", "0"]), capsys.readouterr().err, "run: ")
    one_line_error(main(["db", "export", "--target"]), capsys.readouterr().err, "db export: ")
    assert "loomtune run" not in capsys.readouterr().err


def test_unknown_operator_and_strategy_refused_before_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.cli.main import main

    monkeypatch.setenv("LOOMTUNE_DATABASE_URL", f"sqlite:///{tmp_path / 'x.db'}")
    code = main(["db", "export", "--op", "matmull"])
    out = capsys.readouterr()
    one_line_error(code, out.err, "unknown operator 'matmull'")
    assert out.out == ""
    code = main(["tune", "gelu", "--strategy", "random"])
    one_line_error(code, capsys.readouterr().err, "unknown search strategy 'random'")


def test_run_threads_above_the_cores_warns(capsys: pytest.CaptureFixture[str]) -> None:
    from service.cli.main import main

    cores = len(os.sched_getaffinity(0))
    assert main(["run", "gelu", "m=8", "n=8", "--threads", str(cores + 1), "--json"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"--threads {cores + 1}" in warnings[0]


# -- 6. targets shown short (the canonical string stays in --json) ------------------------------


def test_text_output_and_errors_show_the_short_target(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.cli.main import main

    assert main(["run", "gelu", "m=8", "n=8"]) == 0
    out = capsys.readouterr().out
    assert "features), 1 thread(s)" in out and "-mattr" not in out
    monkeypatch.setenv("LOOMTUNE_DATABASE_URL", f"sqlite:///{tmp_path / 'x.db'}")
    code = main(["best", "gelu", "m=8", "n=8"])
    err = capsys.readouterr().err
    one_line_error(code, err, "features), 1 thread(s)")
    assert "-mattr" not in err
