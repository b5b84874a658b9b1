"""`loomtune best` and `loomtune db upgrade|export|import`, as a user runs them.

Records are made through the Python API in a SQLite file of tmp_path named by
LOOMTUNE_DATABASE_URL; the commands run in subprocesses.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from codegen.host import host_target
from ir.task import library_task
from service.db.store import open_database
from tests.sqlite import fresh_sqlite
from tuner.database import TuningRecord
from tuner.trace.file import TraceFile
from tuner.trace.traced_schedule import TracedSchedule

ROOT = Path(__file__).resolve().parents[3]
PARAMS = {"m": 48, "n": 32, "k": 16}
HOST1 = host_target(1).canonical()
HOST2 = host_target(2).canonical()


def loomtune(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOMTUNE_DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode != 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loomtune: error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def tiled(i_inner: int) -> TracedSchedule:
    task = library_task("matmul", PARAMS)
    sch = TracedSchedule(task.program, rng=random.Random(0))
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(
        i,
        sch.sample_perfect_tile(i, n=2, max_innermost_factor=48, decision=[48 // i_inner, i_inner]),
    )
    sch.reorder(i0, j, k, i1)
    return sch


def make_record(
    i_inner: int, median: float | None, *, status: str = "ok", target: str = HOST1
) -> TuningRecord:
    task = library_task("matmul", PARAMS)
    trace = tiled(i_inner).trace
    return TuningRecord.create(
        workload_key=task.key,
        op=task.op,
        params=task.params,
        definition=task.to_definition(),
        target=target,
        trace=trace.to_json(),
        trace_hash=trace.hash,
        run_times_ms=[median, median] if median is not None else [],
        status=status,
        message="" if status == "ok" else "on purpose",
        worker="test",
        loomtune_version="0.1.0",
        llvm_version="22.1.0",
    )


@pytest.fixture
def url(tmp_path: Path, migrated_sqlite: Path) -> str:
    """A database with three records of matmul: the fastest is wrong, the best is 2 ms."""
    url = fresh_sqlite(migrated_sqlite, tmp_path / "db" / "loomtune.db")
    db = open_database(url)
    db.commit_records(
        [
            make_record(4, 3.0),
            make_record(8, 2.0),
            make_record(16, None, status="wrong_result"),
            make_record(2, 9.0, target=HOST2),
        ]
    )
    db.engine.dispose()
    return url


def test_best_json_is_the_lowest_correct_median(url: str) -> None:
    proc = loomtune(url, "best", "matmul", "m=48", "n=32", "k=16", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["latency_ms"] == 2.0
    assert out["target"] == HOST1
    assert out["op"] == "matmul" and out["params"] == PARAMS
    assert out["workload_key"] == library_task("matmul", PARAMS).key
    assert out["trace"] == tiled(8).trace.to_json()
    assert {"record_id", "measured_at"} <= set(out)


def test_best_on_another_thread_count_is_another_target(url: str) -> None:
    proc = loomtune(url, "best", "matmul", "m=48", "n=32", "k=16", "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["latency_ms"] == 9.0
    other = loomtune(
        url,
        "best",
        "matmul",
        "m=48",
        "n=32",
        "k=16",
        "--target",
        "llvm -mcpu=generic -num-threads=1",
    )
    # `llvm -mcpu=generic` without -mattr is a short form: LLVM's features of that CPU
    assert_one_line_error(other, "no correct record", "generic (", "features), 1 thread(s)")


def test_best_writes_an_applyable_trace_file(url: str, tmp_path: Path) -> None:
    path = tmp_path / "best.trace.json"
    proc = loomtune(url, "best", "matmul", "m=48", "n=32", "k=16", "-o", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "2.0000 ms" in proc.stdout
    trace_file = TraceFile.load(path)
    assert trace_file.target == HOST1 and trace_file.trace.hash == tiled(8).trace.hash
    applied = loomtune(url, "apply", str(path), "--json")
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["correct"] is True


def test_export_then_import_into_an_empty_database(url: str, tmp_path: Path) -> None:
    exported = loomtune(url, "db", "export")
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.splitlines()
    assert len(lines) == 4
    first = json.loads(lines[0])
    assert {
        "record_id",
        "workload",
        "target",
        "trace",
        "run_times_ms",
        "loomtune_version",
        "llvm_version",
    } <= set(first)
    assert first["workload"]["definition"] == library_task("matmul", PARAMS).to_definition()

    dump = tmp_path / "records.jsonl"
    dump.write_text(exported.stdout)
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert loomtune(fresh, "db", "import", str(dump)).returncode == 0
    best = loomtune(fresh, "best", "matmul", "m=48", "n=32", "k=16", "--json")
    assert best.returncode == 0, best.stderr
    assert (
        json.loads(best.stdout)["record_id"]
        == json.loads(loomtune(url, "best", "matmul", "m=48", "n=32", "k=16", "--json").stdout)[
            "record_id"
        ]
    )

    again = loomtune(fresh, "db", "import", str(dump))
    assert again.returncode == 0 and "imported 0 new" in again.stderr
    assert loomtune(fresh, "db", "export").stdout.splitlines() == lines


def test_merging_two_overlapping_exports_is_their_exact_union(url: str, tmp_path: Path) -> None:
    # B shares two of A's records (copied there by an import) and has three of its own,
    # one faster than A's best.
    a_lines = loomtune(url, "db", "export").stdout.splitlines()
    shared = tmp_path / "shared.jsonl"
    shared.write_text("\n".join(a_lines[:2]) + "\n")
    b_url = f"sqlite:///{tmp_path / 'b.db'}"
    assert loomtune(b_url, "db", "import", str(shared)).returncode == 0
    b = open_database(b_url)
    b.commit_records(
        [
            make_record(3, 1.5),
            make_record(6, None, status="crashed"),
            make_record(12, 4.0, target=HOST2),
        ]
    )
    b.engine.dispose()
    b_lines = loomtune(b_url, "db", "export").stdout.splitlines()
    union = set(a_lines) | set(b_lines)
    assert len(a_lines) == 4 and len(b_lines) == 5 and len(union) == 7

    dumps = {}
    for name, lines in (("a", a_lines), ("b", b_lines)):
        dumps[name] = tmp_path / f"{name}.jsonl"
        dumps[name].write_text("\n".join(lines) + "\n")
    merged = []
    for order in (("a", "b"), ("b", "a")):  # either way round
        c_url = f"sqlite:///{tmp_path / ('merged_' + ''.join(order) + '.db')}"
        for name in order:
            proc = loomtune(c_url, "db", "import", str(dumps[name]))
            assert proc.returncode == 0, proc.stderr
        merged.append(loomtune(c_url, "db", "export").stdout.splitlines())
    assert sorted(merged[0]) == sorted(union) and merged[1] == merged[0]

    # merging B into A itself: A now holds the union, and B's faster record is A's best
    assert "imported 3 new" in loomtune(url, "db", "import", str(dumps["b"])).stderr
    assert sorted(loomtune(url, "db", "export").stdout.splitlines()) == sorted(union)
    best = json.loads(loomtune(url, "best", "matmul", "m=48", "n=32", "k=16", "--json").stdout)
    assert best["latency_ms"] == 1.5 and best["trace"] == tiled(3).trace.to_json()


def test_export_filters_and_output_file(url: str, tmp_path: Path) -> None:
    out = tmp_path / "host2.jsonl"
    proc = loomtune(
        url, "db", "export", "--op", "matmul", "--target", "host -num-threads=2", "-o", str(out)
    )
    assert proc.returncode == 0 and proc.stdout == ""
    [line] = out.read_text().splitlines()
    assert json.loads(line)["target"] == HOST2
    assert loomtune(url, "db", "export", "--op", "softmax").stdout == ""


def test_a_corrupt_line_imports_nothing(url: str, tmp_path: Path) -> None:
    lines = loomtune(url, "db", "export").stdout.splitlines()
    broken = json.loads(lines[2])
    broken["trace_hash"] = "0" * 64
    bad_hash = tmp_path / "bad_hash.jsonl"
    bad_hash.write_text("\n".join([lines[0], lines[1], json.dumps(broken)]) + "\n")
    not_json = tmp_path / "not_json.jsonl"
    not_json.write_text(lines[0] + "\n{oops\n")

    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert_one_line_error(
        loomtune(fresh, "db", "import", str(bad_hash)), "bad_hash.jsonl:3", "trace_hash"
    )
    assert_one_line_error(
        loomtune(fresh, "db", "import", str(not_json)), "not_json.jsonl:2", "JSON"
    )
    assert loomtune(fresh, "db", "export").stdout == ""  # nothing written


def test_upgrade_creates_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "new" / "loomtune.db"
    proc = loomtune(f"sqlite:///{path}", "db", "upgrade")
    assert proc.returncode == 0, proc.stderr
    assert path.exists() and "revision" in proc.stderr


def test_unreachable_database_is_one_line(tmp_path: Path) -> None:
    proc = loomtune("postgresql://nobody@127.0.0.1:1/none", "best", "matmul")
    assert_one_line_error(proc, "cannot open the database")


def test_export_prefers_the_stored_best(url: str, tmp_path: Path) -> None:
    out = tmp_path / "best.ll"
    proc = loomtune(
        url, "export", "matmul", "m=48", "n=32", "k=16", "--format", "ll", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert "exporting the stored best record" in proc.stderr
    # The best record's schedule (i split by 8) is what was compiled, not the default nest.
    default = tmp_path / "default.ll"
    other = loomtune(
        url, "export", "matmul", "m=40", "n=32", "k=16", "--format", "ll", "-o", str(default)
    )
    assert other.returncode == 0 and "exporting the default loop nest" in other.stderr
