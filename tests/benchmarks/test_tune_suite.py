"""`python -m benchmarks tune` at smoke-test size: the real loop, pool and final comparison.

No timed assertions (the machine is shared): the fields are there, the ratios
come from the one interleaved timing of the same run, the PNG is written and
the README section renders.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import tune
from benchmarks.__main__ import main
from benchmarks.report import text_table


def test_quick_tune_run_writes_curves_ratios_and_png(tmp_path: Path) -> None:
    code = main(
        ["tune", "--quick", "--trials", "4", "--only", "matmul", "--extras", "evo_replay",
         "--replay-trials", "2", "--out", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    (path,) = tmp_path.glob("tune-*.json")
    result = json.loads(path.read_text(encoding="utf-8"))
    assert result["suite"] == "tune" and result["kind"] == "tune" and result["quick"] is True
    details = result["tune"]
    assert details["trials"] == 4 and details["checkpoints"] == [4]
    assert details["strategy"] == "evolutionary"
    assert "reuse" in details["not_done"] and "scheduler" in details["not_done"]

    (row,) = result["rows"]
    assert row["op"] == "matmul" and row["correct"] is True and row["trials_done"] == 4
    assert len(row["history_ms"]) == len(row["trial_times_s"]) == 4
    known = [v for v in row["history_ms"] if v is not None]
    assert known == sorted(known, reverse=True)  # best so far never gets worse
    assert row["checkpoints_ms"] == {"4": row["history_ms"][3]}
    assert row["tune_s"] >= row["loop_s"] > 0
    assert row["candidates_per_s"] == pytest.approx(4 / row["loop_s"])
    assert row["best_trace"] and "def " in row["best_trace"]
    assert row["best_trace_json"]["instructions"]

    # The ratios come from one interleaved timing: same repeats, same medians.
    k, n = row["loomtune"], row["numpy"]
    assert len(k["times_ms"]) == len(n["times_ms"]) == details["measure_final"]["repeat"]
    assert row["latency_ms"] == k["median_ms"] and row["numpy_ms"] == n["median_ms"]
    assert row["ratio_numpy"] == pytest.approx(n["median_ms"] / k["median_ms"])
    if details["torch"] is not None and row["torch"] is not None:
        assert len(row["torch"]["times_ms"]) == len(k["times_ms"])
        assert row["ratio_torch"] == pytest.approx(row["torch"]["median_ms"] / k["median_ms"])
    else:
        assert row["ratio_torch"] is None

    replay = details["extras"]["evo_replay"]
    assert replay["trials"] == 2 and replay["replay"]["strategy"] == "replay"
    assert replay["evolutionary_ms"] == row["history_ms"][1]

    png = path.with_suffix(".png")
    assert details["plot"] == png.name
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    for _caption, table, _note in tune.report_tables(result):
        assert text_table(table)


def test_checkpoints_end_at_the_budget() -> None:
    assert tune.checkpoints(256) == [16, 32, 64, 128, 256]
    assert tune.checkpoints(100) == [16, 32, 64, 100]
    assert tune.checkpoints(4) == [4]


def test_unknown_extra_is_refused(tmp_path: Path) -> None:
    assert main(["tune", "--quick", "--extras", "nope", "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


def test_evo_replay_alone_takes_the_median_over_seeds(tmp_path: Path) -> None:
    code = main(
        ["tune", "--quick", "--no-main", "--only", "matmul", "--extras", "evo_replay",
         "--evo-seeds", "2", "--trials", "2", "--replay-trials", "2", "--out", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    (path,) = tmp_path.glob("tune_extras-*.json")
    result = json.loads(path.read_text(encoding="utf-8"))
    assert result["rows"] == []
    e = result["tune"]["extras"]["evo_replay"]
    assert e["seeds"] == [0, 1] and len(e["per_seed"]) == 2
    for p in e["per_seed"]:
        assert p["evolutionary"]["strategy"] == "evolutionary"
        assert p["replay"]["strategy"] == "replay"
        assert p["evolutionary"]["seed"] == p["replay"]["seed"] == p["seed"]
    evo = sorted(p["evolutionary_ms"] for p in e["per_seed"])
    assert e["evolutionary_ms"] == pytest.approx(sum(evo) / 2)
    assert path.with_suffix(".png").exists()
