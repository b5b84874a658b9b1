"""`python -m benchmarks tune` at smoke-test size: the real loop, pool and final comparison.

No timed assertions (the machine is shared): the fields are there, the ratios
come from the one interleaved timing of the same run, the PNG is written and
the README section renders.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.report import text_table
from benchmarks.tune import compare as tune_compare
from benchmarks.tune import plot as tune_plot
from benchmarks.tune import report as tune_report
from benchmarks.tune import run as tune_run
from benchmarks.tune import suite as tune_suite
from benchmarks.tune.compare import PLACEMENTS, paired_gap
from benchmarks.tune.extras import evo_replay as tune_evo
from benchmarks.tune.suite import select, thread_rows
from ir.task import library_task
from workers.timing import MeasureConfig, Timing

CONV = tune_suite.QUICK_LAYERS[1].name


def _assert_compared_on_numpy_arrays(row: dict, with_torch: bool) -> None:
    """The final comparison at the row's thread count, on arrays numpy allocated, beside the
    same kernel on 64-byte aligned copies timed in the same interleaved call."""
    assert row["correct"] is True
    assert row["target"].endswith(f"-num-threads={row['threads']}")
    # numpy's allocator placed them: on 16-byte boundaries (rarely on 64-byte ones)
    assert len(row["offsets"]) == 3  # A, B and C; X, W and Y
    assert row["offsets"] and all(o % 16 == 0 for o in row["offsets"])
    # the gap: its own call over sets of each kind, the first user set the row's arrays
    user, aligned = row["placements_ms"]["user"], row["placements_ms"]["aligned"]
    assert len(user) == len(aligned) == PLACEMENTS
    assert row["gap_offsets"][0] == row["offsets"]
    assert all(o == 0 for offs in row["gap_offsets"][PLACEMENTS:] for o in offs)
    assert aligned[0] == row["aligned"]["median_ms"]
    assert row["aligned_ms"] == statistics.median(aligned)
    assert math.isfinite(row["align_gap"])
    if with_torch:  # PyTorch at the row's thread count
        assert row["torch"] is not None and row["ratio_torch"] > 0


def test_paired_gap_compares_samples_taken_side_by_side() -> None:
    """A machine phase that slows every set in some repeats does not move the gap; the
    ratio of per-set medians would follow whichever sets the slow repeats hit."""
    phase = [1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 1.0]
    user = [Timing(tuple(1.1 * p for p in phase), 1) for _ in range(3)]
    # an aligned set that ran its slow phase at other moments
    aligned = [Timing(tuple(phase), 1), Timing(tuple(phase), 1), Timing(tuple(phase[::-1]), 1)]
    assert paired_gap(user, aligned) == pytest.approx(0.1)
    with pytest.raises(ValueError):  # sets timed in different calls cannot be paired
        paired_gap(user, [Timing((1.0,), 1)] * 3)


def test_quick_tune_run_writes_curves_ratios_and_png(tmp_path: Path) -> None:
    code = main(
        [
            "tune",
            "--quick",
            "--trials",
            "4",
            "--only",
            f"matmul,{CONV}",
            "--layers",
            "--parallel-only",
            "matmul",
            "--extras",
            "evo_replay",
            "--replay-trials",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    (path,) = tmp_path.glob("tune_only-*.json")
    result = json.loads(path.read_text(encoding="utf-8"))
    assert result["suite"] == "tune_only" and result["kind"] == "tune"  # --only: not the suite
    assert result["quick"] is True
    details = result["tune"]
    assert details["trials"] == 4 and details["checkpoints"] == [4]
    assert details["strategy"] == "evolutionary"
    # how candidates were timed while tuning, so the note describes this run and not the code of the day
    assert details["measure_tuning"] == {
        "repeat": 3,
        "min_repeat_ms": 2.0,
        "confirm_repeat": 6,
        "confirm_within": 1.05,
        "offsets": [16, 0],
    }
    assert "9 for a contender within 5% of the best (a contender at arrays 16 and 0 bytes" in (
        tune_report.note(result)
    )
    assert "reuse" in details["not_done"] and "scheduler" in details["not_done"]

    # --layers: the layer row after the suite's; at 1 and 2 threads (the default), the second
    # only for --parallel-only's matmul
    assert details["threads"] == [1, 2] and details["layers"] is True
    assert details["parallel_only"] == ["matmul"]
    assert [(r["case"], r["threads"]) for r in result["rows"]] == [
        ("matmul 32³", 1),
        ("matmul 32³, 2 threads", 2),
        (CONV, 1),
    ]
    for r in result["rows"]:
        _assert_compared_on_numpy_arrays(r, details["torch"] is not None)
    row = result["rows"][0]
    assert row["op"] == "matmul" and row["correct"] is True and row["trials_done"] == 4
    assert len(row["history_ms"]) == len(row["trial_times_s"]) == 4
    known = [v for v in row["history_ms"] if v is not None]
    assert known == sorted(known, reverse=True)  # best so far never gets worse
    assert row["checkpoints_ms"] == {"4": row["history_ms"][3]}
    assert row["tune_s"] >= row["loop_s"] > row["search_s"] > 0
    assert row["pool_cpu_s"] > 0 and row["search_cpu_s"] >= 0  # the search's helpers count as ours
    assert row["candidates_per_s"] == pytest.approx(4 / row["loop_s"])
    assert row["best_trace"] and "def " in row["best_trace"]
    assert row["best_trace_json"]["instructions"]
    assert (
        list(row["best_trace_json_at"]) == ["4"] and row["best_trace_json_at"]["4"]["instructions"]
    )

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

    evo_replay = details["extras"]["evo_replay"]
    assert evo_replay["trials"] == 2 and evo_replay["seeds"] == [0]
    (replay,) = evo_replay["workloads"]  # --only matmul: one workload
    assert replay["workload"] == row["case"]
    assert replay["trials"] == 2 and replay["replay"]["strategy"] == "replay"
    assert replay["per_seed"][0]["evolutionary"] is None  # the main run's curve
    assert replay["evolutionary_ms"] == row["history_ms"][1]

    png = path.with_suffix(".png")
    assert details["plot"] == png.name
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    for _caption, table, _note in tune_report.report_tables(result):
        assert text_table(table)
    # the core's FMA roof, measured in the run, and each kernel as a fraction of it
    assert result["peak_gflops"] > 0
    headers, cells = tune_report.main_table(result)
    assert cells[0][headers.index("aligned gap")] == f"{row['align_gap']:+.1%}"
    assert "1 and 2 threads (above 1 thread only matmul;" in tune_report.note(result)
    fraction = cells[0][headers.index("% of peak")]
    assert fraction == f"{row['gflops'] / result['peak_gflops']:.0%}"
    assert f"{result['peak_gflops']:.0f} GFLOP/s" in tune_report.note(result)


def test_the_layer_shapes_are_bert_bases_and_resnet_18s() -> None:
    layers = tune_suite.select(layers=True)[len(tune_suite.SUITE) :]
    assert [(w.params["m"], w.params["k"], w.params["n"]) for w in layers[:3]] == [
        (128, 768, 768),
        (128, 768, 3072),
        (128, 3072, 768),
    ]
    convs = [(w.params["h"], w.params["ci"], w.params["co"], w.params["pad"]) for w in layers[3:]]
    assert convs == [(56, 64, 64, 1), (28, 128, 128, 1), (14, 256, 256, 1), (7, 512, 512, 1)]
    assert tune_suite.select() == list(tune_suite.SUITE)  # not in the default run


def test_checkpoints_end_at_the_budget() -> None:
    assert tune_suite.checkpoints(256) == [16, 32, 64, 128, 256]
    assert tune_suite.checkpoints(100) == [16, 32, 64, 100]
    assert tune_suite.checkpoints(4) == [4]


def test_unknown_extra_is_refused(tmp_path: Path) -> None:
    assert main(["tune", "--quick", "--extras", "nope", "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


def test_evo_replay_alone_runs_every_workload_with_the_median_over_seeds(tmp_path: Path) -> None:
    code = main(
        [
            "tune",
            "--quick",
            "--no-main",
            "--extras",
            "evo_replay",
            "--evo-seeds",
            "2",
            "--trials",
            "2",
            "--replay-trials",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    (path,) = tmp_path.glob("tune_extras-*.json")
    result = json.loads(path.read_text(encoding="utf-8"))
    assert result["rows"] == []
    summary = result["tune"]["extras"]["evo_replay"]
    assert summary["trials"] == 2 and summary["seeds"] == [0, 1]
    entries = summary["workloads"]
    assert [e["workload"] for e in entries] == [w.name for w in tune_suite.QUICK_SUITE]
    assert summary["suite_complete"] is False  # the quick suite is not the tuning suite's six
    for e in entries:
        assert e["seeds"] == [0, 1] and len(e["per_seed"]) == 2
        for p in e["per_seed"]:
            assert p["evolutionary"]["strategy"] == "evolutionary"
            assert p["replay"]["strategy"] == "replay"
            assert p["evolutionary"]["seed"] == p["replay"]["seed"] == p["seed"]
            assert p["evolutionary"]["case"].startswith(e["workload"])
        evo = sorted(p["evolutionary_ms"] for p in e["per_seed"])
        assert e["evolutionary_ms"] == pytest.approx(sum(evo) / 2)
        c = e["checkpoints"]["2"]
        assert (c["evolutionary_ms"], c["replay_ms"]) == (e["evolutionary_ms"], e["replay_ms"])
        # each seed's two best kernels after 2 trials, timed head to head
        assert e["verdict_on"] == "head_to_head" and len(c["head_to_head"]) == 2
        for duel, ratio in zip(c["head_to_head"], c["replay_over_evolutionary_by_seed"]):
            assert duel is not None
            if duel.get("same_kernel"):
                assert ratio == 1.0
            else:
                assert ratio == pytest.approx(duel["replay_ms"] / duel["evolutionary_ms"])
        assert c["replay_over_evolutionary"] == pytest.approx(
            sum(c["replay_over_evolutionary_by_seed"]) / 2
        )
        assert c["evolutionary_ahead_head_to_head"] == (c["replay_over_evolutionary"] > 1)

    # The summary counts agree with the per-workload head-to-head medians.
    assert list(summary["ahead_at"]) == ["2"]
    ahead = [
        e["workload"] for e in entries if e["checkpoints"]["2"]["replay_over_evolutionary"] > 1
    ]
    assert summary["ahead_at"]["2"] == {
        "ahead": len(ahead),
        "of": 2,
        "unknown": 0,
        "workloads_ahead": ahead,
    }
    assert summary["ahead_at"] == tune_evo.evo_replay_ahead(entries)

    (_caption, table, _note) = tune_report.report_tables(result)[0]
    _headers, rows = table
    assert sum(r[0].startswith("evolutionary vs replay, ") for r in rows) == 2
    assert rows[-1][0] == "evolutionary ahead of replay (median of 2 seeds)"
    assert rows[-1][1] == f"{len(ahead)} of 2 workloads at 2 trials"
    assert rows[-1][2] == "–"  # not the six suite workloads: the count only
    assert text_table(table)
    assert path.with_suffix(".png").exists()


def _entry(name: str, trials: int, evo: dict[int, float], rep: dict[int, float]) -> dict:
    """An evo_vs_replay dict with the given medians (no runs); head to head, each
    checkpoint's replay / evolutionary is the ratio of the medians."""
    return {
        "workload": name,
        "trials": trials,
        "seeds": [0, 1, 2],
        "verdict_on": "head_to_head",
        "evolutionary_ms": evo[trials],
        "replay_ms": rep[trials],
        "evolutionary_ahead": evo[trials] < rep[trials],
        "replay": {"history_ms": [rep[trials]]},
        "per_seed": [],
        "checkpoints": {
            str(n): {
                "evolutionary_ms": evo[n],
                "replay_ms": rep[n],
                "replay_over_evolutionary": rep[n] / evo[n],
            }
            for n in evo
        },
    }


def test_evo_replay_summary_and_goal_over_the_six_workloads() -> None:
    names = [w.name for w in tune_suite.SUITE]
    # Ahead on all at 64; at 256 ahead on four, behind on one, a tie on one.
    entries = [
        _entry(
            name,
            256,
            {64: 1.0, 256: 0.5},
            {64: 2.0, 256: 1.0 if i < 4 else (0.4 if i == 4 else 0.5)},
        )
        for i, name in enumerate(names)
    ]
    ahead = tune_evo.evo_replay_ahead(entries)
    assert {n: (a["ahead"], a["of"]) for n, a in ahead.items()} == {"64": (6, 6), "256": (4, 6)}
    assert ahead["256"]["workloads_ahead"] == names[:4]
    assert tune_evo.suite_complete(entries) and not tune_evo.suite_complete(entries[:5])
    ex = {
        "evo_replay": {"workloads": entries, "trials": 256, "seeds": [0, 1, 2], "ahead_at": ahead}
    }
    rows = tune_evo.evo_replay_rows(ex)
    assert len(rows) == 6 * 2 + 1  # the budget and 64 per workload, the summary
    assert rows[-1] == [
        "evolutionary ahead of replay (median of 3 seeds)",
        "6 of 6 workloads at 64 trials / 4 of 6 workloads at 256 trials",
        "≥ 5 of 6: met at 64, not met at 256",
    ]


def test_evo_replay_is_judged_head_to_head_when_the_result_has_it() -> None:
    names = [w.name for w in tune_suite.SUITE]
    # While tuning the evolutionary medians are behind everywhere; head to head its
    # kernels are faster on five workloads after 64 trials and on none after 256.
    entries = [_entry(name, 256, {64: 2.0, 256: 1.0}, {64: 1.9, 256: 0.9}) for name in names]
    for i, e in enumerate(entries):
        e["verdict_on"] = "head_to_head"
        e["checkpoints"]["64"]["replay_over_evolutionary"] = 1.02 if i < 5 else 0.99
        e["checkpoints"]["256"]["replay_over_evolutionary"] = 1.0  # a tie is not ahead
    ahead = tune_evo.evo_replay_ahead(entries)
    assert {n: a["ahead"] for n, a in ahead.items()} == {"64": 5, "256": 0}
    rows = tune_evo.evo_replay_rows({"evo_replay": {"workloads": entries, "seeds": [0, 1, 2]}})
    assert rows[0][1] == "1 ms vs 0.9 ms; head to head replay / evolutionary 1.000"
    assert rows[0][2] == "replay ahead or tie"
    assert (
        rows[1][1].endswith("head to head replay / evolutionary 1.020")
        and rows[1][2] == "evolutionary ahead"
    )
    assert rows[-1][2] == "≥ 5 of 6: met at 64, not met at 256"
    note = tune_report.extras_note({"tune": {"extras": {"evo_replay": {"workloads": entries}}}})
    assert note is not None and "median over the seeds of replay / evolutionary" in note


def test_duel_at_times_each_runs_best_after_n_trials(tmp_path: Path) -> None:
    import random

    from codegen.host import host_target
    from tuner.space import default_space

    task = library_task("matmul", {"m": 32, "n": 48, "k": 16})
    target = host_target(1)
    space = default_space(task.program, target)
    a, b = (space.sample(random.Random(s)).to_json() for s in (1, 2))
    ctx = tune_compare.Context(
        folder=tmp_path,
        seed=0,
        quiet_wait_s=0,
        measure=MeasureConfig(warmup=1, number=2, repeat=3),
        log=lambda _: None,
        round_pause_s=0.0,
    )
    evo = {"best_trace_json_at": {"16": a, "32": b}, "target": target.canonical()}
    rep = {"best_trace_json_at": {"16": a, "32": a}, "target": target.canonical()}
    assert tune_compare.duel_at(ctx, task, {"evolutionary": evo, "replay": rep}, 16) == {
        "same_kernel": True
    }
    duel = tune_compare.duel_at(ctx, task, {"evolutionary": evo, "replay": rep}, 32)
    assert duel is not None and all(
        duel[k] > 0 for k in ("evolutionary_ms", "replay_ms", "numpy_ms")
    )
    assert (
        tune_compare.duel_at(
            ctx, task, {"evolutionary": evo, "replay": {**rep, "best_trace_json_at": {}}}, 32
        )
        is None
    )


def test_report_renders_evo_replay(tmp_path: Path) -> None:
    result = {
        "seed": 0,
        "utc": "2026-01-01T00:00:00Z",
        "rows": [],
        "tune": {
            "extras": {
                "evo_replay": {
                    "workloads": [
                        _entry(name, 64, {16: 3.0, 64: 2.0}, {16: 2.5, 64: 2.5})
                        for name in ("a", "b")
                    ],
                    "trials": 64,
                    "seeds": [0, 1, 2],
                }
            }
        },
    }
    for e in result["tune"]["extras"]["evo_replay"]["workloads"]:
        e["per_seed"] = [
            {"seed": s, "evolutionary": {"history_ms": [3.0, 2.0]}, "replay": {"history_ms": [2.5]}}
            for s in (0, 1)
        ]
    new_rows = tune_report.extras_table(result)[1]
    assert [r[0] for r in new_rows] == [
        "evolutionary vs replay, a, 64 trials, median of 3 seeds",
        "evolutionary vs replay, b, 64 trials, median of 3 seeds",
        "evolutionary ahead of replay (median of 3 seeds)",
    ]
    assert new_rows[-1][1] == "2 of 2 workloads at 64 trials"
    png = tune_plot.plot(result, tmp_path / "new.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


def test_the_scheduler_extra_alternates_the_arms_over_seeds_and_judges_the_medians(
    tmp_path: Path,
) -> None:
    code = main(
        [
            "tune",
            "--quick",
            "--no-main",
            "--extras",
            "scheduler",
            "--seeds",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    (path,) = tmp_path.glob("tune_extras-*.json")
    result = json.loads(path.read_text(encoding="utf-8"))
    e = result["tune"]["extras"]["scheduler"]
    assert e["seeds"] == [0, 1] and e["budget"] == 4 * len(tune_suite.QUICK_SUITE)
    assert e["verdict_on"] == "head_to_head" and e["baseline"] == "independent"
    for policy in ("gradient", "round_robin", "independent"):
        runs = e[f"{policy}_runs"]
        assert [r["seed"] for r in runs] == [0, 1] and e[policy] == runs[0]
        for r in runs:  # each workload's latency from the head-to-head call, numpy beside it
            assert len(r["latency_ms"]) == len(r["numpy_ms"]) == len(tune_suite.QUICK_SUITE)
            assert all(x > 0 for x in r["latency_ms"] + r["numpy_ms"])
            assert r["weighted_latency_ms"] == pytest.approx(
                sum(w.weight * x for w, x in zip(tune_suite.QUICK_SUITE, r["latency_ms"]))
            )
        assert all(sum(r["trials_per_task"]) == e["budget"] for r in runs)
        if policy == "independent":  # 4 trials each, every workload on its own
            assert all(r["trials_per_task"] == [4] * len(tune_suite.QUICK_SUITE) for r in runs)
        totals = e[f"{policy}_weighted_by_seed"]
        assert totals == [r["weighted_latency_ms"] for r in runs] and all(t > 0 for t in totals)
        assert e[f"{policy}_weighted_ms"] == pytest.approx(sum(totals) / 2)  # the median of two
    assert e["met"] == (e["gradient_weighted_ms"] < e["independent_weighted_ms"])
    _, rows = tune_report.extras_table(result)
    (row,) = rows
    assert "median of 2 seeds" in row[1] and "head-to-head timings" in row[1]
    assert "vs each on its own" in row[0] and "round-robin" in row[0]
    assert row[2].startswith("met" if e["met"] else "not met")
    assert "alternating seed by seed" in (tune_report.extras_note(result) or "")


def _reuse_extra(
    warm: list[tuple[float, float]], cold: list[tuple[float, float]], **fields: object
) -> dict[str, object]:
    """A reuse result over three seeds from (best while tuning, re-timed final) per seed."""

    def run(best: float, final: float) -> dict[str, object]:
        return {"history_ms": [2 * best, best], "latency_ms": final}

    warm_rows, cold_rows = [run(*w) for w in warm], [run(*c) for c in cold]
    return {
        "warm_trials": 32,
        "cold_trials": 128,
        "seeds": [0, 1, 2],
        "warm_by_seed": [b for b, _ in warm],
        "cold_by_seed": [b for b, _ in cold],
        "warm_final_by_seed": [f for _, f in warm],
        "cold_final_by_seed": [f for _, f in cold],
        "warm": warm_rows[0],
        "cold": cold_rows[0],
        "per_seed": [
            {"seed": s, "warm": w, "cold": c} for s, w, c in zip([0, 1, 2], warm_rows, cold_rows)
        ],
        **fields,
    }


def test_reuse_is_judged_head_to_head_when_the_result_has_it() -> None:
    duels = [
        {"warm_ms": 7.9, "cold_ms": 7.8, "numpy_ms": 8.0},
        {"warm_ms": 7.8, "cold_ms": 8.1, "numpy_ms": 8.0},
        {"warm_ms": 8.0, "cold_ms": 8.1, "numpy_ms": 8.2},
    ]
    ratios = [d["cold_ms"] / d["warm_ms"] for d in duels]
    ex = _reuse_extra(
        [(7.7, 7.9), (7.7, 7.9), (8.2, 8.1)],
        [(7.6, 7.8), (7.4, 8.2), (7.7, 8.1)],
        warm_best_ms=7.7,
        cold_best_ms=7.6,
        head_to_head=duels,
        cold_over_warm_by_seed=ratios,
        cold_over_warm=sorted(ratios)[1],
        verdict_on="head_to_head",
        met=sorted(ratios)[1] >= 1,
        met_while_tuning=False,
    )
    result = {"seed": 0, "tune": {"extras": {"reuse": ex}}}
    _, rows = tune_report.extras_table(result)
    (row,) = rows
    assert (
        row[1].startswith("head to head") and "7.9 vs 7.8" in row[1] and "7.7 vs 7.6 ms" in row[1]
    )
    assert (
        row[2] == "met"
    )  # median cold/warm 8.1/8.0 > 1, although the best while tuning says otherwise
    assert "median over the seeds of cold / warm" in (tune_report.extras_note(result) or "")
    assert (
        len(tune_run._all_rows([], result["tune"])) == 6
    )  # every seed's runs count as the tuner's own CPU


def test_head_to_head_times_verified_kernels_of_each_run_in_one_call(tmp_path: Path) -> None:
    import random

    from codegen.host import host_target
    from tuner.space import default_space

    task = library_task("matmul", {"m": 32, "n": 48, "k": 16})
    target = host_target(1)
    space = default_space(task.program, target)
    traces = [space.sample(random.Random(s)) for s in (1, 2)]
    rows = {
        name: {"best_trace_json": t.to_json(), "target": target.canonical()}
        for name, t in zip(("warm", "cold"), traces)
    }
    ctx = tune_compare.Context(
        folder=tmp_path,
        seed=0,
        quiet_wait_s=0,
        measure=MeasureConfig(warmup=1, number=2, repeat=3),
        log=lambda _: None,
        round_pause_s=0.0,
    )
    duel = tune_compare.head_to_head(ctx, task, rows)
    assert duel is not None and set(duel) == {"warm_ms", "cold_ms", "numpy_ms", "contended"}
    assert all(duel[k] > 0 for k in ("warm_ms", "cold_ms", "numpy_ms")) and duel["contended"] in (
        True,
        False,
    )
    assert (
        tune_compare.head_to_head(
            ctx, task, {"warm": rows["warm"], "cold": {"best_trace_json": None}}
        )
        is None
    )


def test_parallel_only_keeps_the_rows_above_one_thread_of_the_workloads_it_names() -> None:
    rows = select(layers=True, small=True)
    plan = thread_rows(rows, [1, 2], ["matmul 1024³", "dense+bias+relu 128×768→3072"])
    assert [w for w, n in plan if n == 1] == rows  # every workload at 1 thread, in order
    assert [w.name for w, n in plan if n == 2] == ["matmul 1024³", "dense+bias+relu 128×768→3072"]
    assert plan.index((rows[1], 2)) == plan.index((rows[1], 1)) + 1  # next to its 1-thread row
    assert thread_rows(rows, [1, 2]) == [(w, n) for w in rows for n in (1, 2)]
    with pytest.raises(ValueError, match="no workload named softmax 16×16"):
        thread_rows(rows, [1, 2], ["softmax 16×16"])


def test_an_unknown_parallel_only_name_is_one_line_before_any_tuning(capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["tune", "--quick", "--only", "matmul", "--parallel-only", "dense"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "--parallel-only: no workload named dense in this run"
