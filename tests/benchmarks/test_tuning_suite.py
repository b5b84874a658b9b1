"""The tuning suite at smoke-test sizes: the real loop and pool, every field there, no failures.

Speed is not judged here (the machine is shared); the README's throughput
comes from a full run's committed result file.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import throughput
from benchmarks.__main__ import main
from benchmarks.report import suite_section
from workers.measure import TUNING_CONFIG
from workers.pool import core_slots


def test_quick_tuning_run_measures_every_candidate_and_says_where_the_time_went(
    tmp_path: Path,
) -> None:
    assert main(["run", "--suite", "tuning", "--quick", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("tuning-*.json")
    result = json.loads(path.read_text(encoding="utf-8"))
    assert result["suite"] == "tuning" and result["kind"] == "tuning" and result["quick"] is True
    details = result["tuning"]
    assert details["goal_per_core"] == throughput.GOAL_PER_CORE == 10
    assert (
        details["measure"]
        == result["measure"]
        == {
            "warmup": TUNING_CONFIG.warmup,
            "number": TUNING_CONFIG.number,
            "repeat": TUNING_CONFIG.repeat,
            "min_repeat_ms": TUNING_CONFIG.min_repeat_ms,
            "flush_cache": TUNING_CONFIG.flush_cache,
        }
    )
    assert details["children_cpu_s"] > 0

    setups, workloads = throughput.QUICK_SETUPS, throughput.QUICK_WORKLOADS
    runs = [(s, w) for s in setups for w in workloads if s.runs(w)]
    assert {s.space for s, _ in runs} == set(throughput.SPACES)
    assert [(r["setup"], r["case"]) for r in result["rows"]] == [(s.name, w.label) for s, w in runs]
    for row, (setup, _) in zip(result["rows"], runs):
        label = row["label"]
        assert row["correct"] is True and row["message"] is None, (label, row["message"])
        assert row["failures"] == {} and row["statuses"] == {"ok": setup.trials}, label
        assert row["trials_done"] == row["trials"] == setup.trials
        assert row["slots"] == (setup.slots or len(core_slots(1))) == len(row["cores"])
        assert row["candidates_per_s"] == row["trials_done"] / row["loop_s"]
        assert row["per_core"] == row["candidates_per_s"] / row["slots"]
        assert row["met"] == (row["per_core"] >= 10)
        assert row["startup_s"] > 0 and len(row["startup_per_process_s"]) == row["slots"]
        # the parent's split covers the loop's time; the processes report their phases
        parent = row["parent_s"]
        assert set(parent) >= {*throughput.PARENT_PHASES, "sample", "has_measured", "other"}
        assert parent["wait"] > 0 and parent["propose"] >= parent["sample"] > 0
        assert parent["record"] > 0 and row["parent_calls"]["record"] == setup.trials
        assert sum(parent[k] for k in (*throughput.PARENT_PHASES, "other")) >= row["loop_s"] * 0.999
        assert row["compile_ms"]["median"] > 0 and row["kernel_ms"]["median"] > 0
        assert set(row["phases_ms"]) == set(throughput.PHASES)
        assert all(row["phases_ms"][p]["mean"] >= 0 for p in throughput.PHASES)
        assert row["children_cpu_s"] > 0 and 0 < row["children_busy"] <= 1.2
        assert set(row["others_load"]) == {"others", "steal"}
    section = suite_section(result)
    assert "candidates/s" in section and "per core" in section and "≥ 10/s per core" in section
    assert "Where the time goes" in section and "LLVM" in section
