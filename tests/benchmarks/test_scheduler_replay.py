"""The scheduler replay: policies spent over known curves, and the perfect-foresight bound."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from benchmarks import scheduler_replay as sr
from benchmarks.report import text_report
from benchmarks.tune.suite import SUITE


def _flat(value: float, n: int = 64) -> list[float]:
    return [value] * n


def _improving(start: float, end: float, n: int = 64) -> list[float]:
    return [start + (end - start) * t / (n - 1) for t in range(n)]


def test_round_robin_spends_equal_shares_and_the_total_reads_the_curves() -> None:
    curves = [_improving(10, 5), _flat(3.0), _improving(4, 2)]
    total, trials = sr.replay(curves, [1.0, 1.0, 2.0], 48, "round_robin", batch=8)
    assert trials == [16, 16, 16]
    assert total == pytest.approx(curves[0][15] + curves[1][15] + 2 * curves[2][15])


def test_gradient_leaves_a_flat_curve_for_one_that_still_improves() -> None:
    curves = [_flat(5.0), _improving(5.0, 1.0)]
    total, trials = sr.replay(curves, [1.0, 1.0], 64, "gradient", batch=8)
    rr_total, _ = sr.replay(curves, [1.0, 1.0], 64, "round_robin", batch=8)
    assert trials[1] > trials[0] and total < rr_total


def test_foresight_is_the_best_allocation_of_whole_batches() -> None:
    curves = [_improving(9, 1, 32), _improving(5, 4, 32), [math.inf] * 8 + _flat(2.0, 24)]
    weights = [1.0, 3.0, 1.0]
    total, alloc = sr.foresight(curves, weights, 48, batch=8)
    brute = min(
        (sum(w * c[k * 8 - 1] for c, w, k in zip(curves, weights, ks)), [k * 8 for k in ks])
        for ks in itertools.product(range(1, 5), repeat=3)
        if sum(ks) <= 6
    )
    assert total == pytest.approx(brute[0])
    assert total == pytest.approx(sum(w * c[t - 1] for c, w, t in zip(curves, weights, alloc)))
    assert alloc[2] >= 16  # the third workload needs a second batch to have a correct kernel
    for policy in ("round_robin", "gradient"):
        assert total <= sr.replay(curves, weights, 48, policy, batch=8)[0]


def test_curves_are_read_per_machine_kind_from_full_tune_runs(tmp_path: Path) -> None:
    def result(cpu: str, quick: bool = False, drop: bool = False) -> dict:
        rows = [
            {"case": w.name, "history_ms": [None, 3.0 + i, 2.0 + i]} for i, w in enumerate(SUITE)
        ]
        return {
            "kind": "tune",
            "quick": quick,
            "target": f"llvm -mcpu={cpu} -num-threads=1",
            "rows": rows[:-1] if drop else rows,
        }

    for name, r in [
        ("tune-1.json", result("znver3")),
        ("tune-2.json", result("znver3")),
        ("tune-3.json", result("znver4", quick=True)),
        ("tune-4.json", result("znver4", drop=True)),
        ("tune_extras-5.json", result("znver4")),
    ]:
        (tmp_path / name).write_text(json.dumps(r), encoding="utf-8")
    curves, used = sr.load_curves(tmp_path, [w.name for w in SUITE])
    assert used == ["tune-1.json", "tune-2.json"] and list(curves) == ["znver3"]
    assert [len(c) for c in curves["znver3"]] == [2] * len(SUITE)
    assert curves["znver3"][1][0] == [math.inf, 4.0, 3.0]


def test_the_result_compares_both_policies_with_round_robin_and_renders(tmp_path: Path) -> None:
    for seed in range(2):
        rows = [
            {
                "case": w.name,
                "history_ms": _improving(3.0 + i + seed, 1.0 + i, 256)
                if i % 2
                else _flat(2.0 + i, 256),
            }
            for i, w in enumerate(SUITE)
        ]
        run = {
            "kind": "tune",
            "quick": False,
            "target": "llvm -mcpu=znver3 -num-threads=1",
            "rows": rows,
        }
        (tmp_path / f"tune-{seed}.json").write_text(json.dumps(run), encoding="utf-8")
    result = sr.run(tmp_path, draws=6)
    m = result["machines"]["znver3"]
    assert m["draws"] == 6 and m["runs_per_workload"] == [2] * len(SUITE)
    # flat curves give nothing to win: foresight moves their trials to the improving ones
    assert m["foresight"]["mean_change"] <= m["gradient"]["mean_change"] < 0
    assert m["foresight"]["median_trials"][0] == 16
    text = text_report(result)
    assert "znver3" in text and f"{m['gradient']['mean_change']:+.2%}" in text
    assert "No timing in this run" in text
