"""TVM MetaSchedule beside loomtune: its tuning (cached, `benchmarks.tune.tvm_ref`), its row and goal, its table."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import fmt, shown_path
from benchmarks.tune.compare import TVMFactory
from benchmarks.tune.suite import SuiteWorkload, checkpoints


def tvm_reference(
    w: SuiteWorkload,
    trials: int,
    seed: int,
    settings: dict[str, Any],
    cache_dir: Path | None,
    retune: bool,
    log: Callable[[str], None],
) -> tuple[dict[str, Any], TVMFactory]:
    """TVM's tuning of `w` (now, or its cached run) and a factory of its best kernel."""
    import functools

    from benchmarks.tune import tvm_ref

    log(f"TVM MetaSchedule on {w.name} ({trials} trials)")
    meta, folder = tvm_ref.tune_cached(
        w.op,
        w.params,
        trials=trials,
        seed=seed,
        time_limit_s=settings["time_limit_s"],
        cache_dir=cache_dir or tvm_ref.CACHE_DIR,
        retune=retune,
        log=log,
    )
    if meta["cached"]:
        log(
            f"  TVM: cached run of {meta['tuned_utc']}: {meta['trials_done']} trials in {meta['tune_s']:.0f} s"
        )
    meta = {**meta, "folder": shown_path(folder)}
    return meta, functools.partial(tvm_ref.best_kernel, folder, w.op, w.params, meta["target"])


def tvm_row(meta: dict[str, Any], trials: int) -> dict[str, Any]:
    """What a row says about TVM's tuning: curve, times, and whether it came from the cache."""
    history = meta["history_ms"]
    keep = (
        "cached",
        "tuned_utc",
        "tune_s",
        "trials",
        "trials_done",
        "stop_reason",
        "history_ms",
        "trial_times_s",
        "best_tuning_ms",
        "statuses",
        "first_error",
        "folder",
        "key",
        "versions",
        "target",
        "time_limit_s",
        "tuning_others_load",
        "tuning_contended",
    )
    out = {k: meta.get(k) for k in keep}
    out["checkpoints_ms"] = {
        str(c): history[c - 1] if len(history) >= c else None for c in checkpoints(trials)
    }
    return out


def tvm_goal(row: dict[str, Any]) -> dict[str, Any] | None:
    """The goal against TVM: a faster final kernel in at most half TVM's tuning time.

    None when there is nothing to compare (no correct kernel on either side).
    """
    tvm_ms, ours = row.get("tvm_ms"), row.get("latency_ms")
    if tvm_ms is None or ours is None:
        return None
    tvm_s = row["tvm"]["tune_s"]
    faster = ours < tvm_ms
    half = row["tune_s"] <= 0.5 * tvm_s
    return {
        "faster": faster,
        "half_time": half,
        "met": faster and half,
        "speedup": tvm_ms / ours,
        "time_share": row["tune_s"] / tvm_s if tvm_s else None,
    }


def tvm_goal_cell(row: dict[str, Any]) -> str:
    """A verdict such as "1.23× faster, 41% of its time: met", or why there is none."""
    goal = row.get("tvm_goal")
    if goal is None:
        t = row.get("tvm")
        if t is None:
            return "–"
        if not row.get("correct"):
            return "– (no loomtune kernel)"
        if not t.get("trials_done"):
            return f"– (TVM measured no candidate in {t['tune_s']:.0f} s)"
        return "– (no correct TVM kernel)"
    speed = f"{goal['speedup']:.2f}× {'faster' if goal['faster'] else 'slower'}"
    share = "–" if goal["time_share"] is None else f"{goal['time_share']:.0%} of its time"
    return f"{speed}, {share}: {'met' if goal['met'] else 'not met'}"


def tvm_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """TVM's own curve and provenance, one row per workload (None without TVM)."""
    tune = result["tune"]
    if not tune.get("tvm"):
        return None
    checkpoints = tune["checkpoints"]
    headers = [
        "workload",
        *[f"TVM best @{c} ms" for c in checkpoints],
        "trials",
        "tuning s",
        "stopped by",
        "tuned (UTC)",
    ]
    rows = []
    for r in result["rows"]:
        t = r.get("tvm")
        if t is None:
            continue
        when = t["tuned_utc"].replace("T", " ").removesuffix("Z")
        when += " (cached run)" if t["cached"] else " (this run)"
        if t.get("tuning_contended"):
            when += " †"
        rows.append(
            [
                r["case"],
                *[fmt(t["checkpoints_ms"].get(str(c))) for c in checkpoints],
                str(t["trials_done"]),
                f"{t['tune_s']:.0f}",
                t["stop_reason"],
                when,
            ]
        )
    return headers, rows


def tvm_note(result: dict[str, Any]) -> str:
    tvm = result["tune"]["tvm"]
    v = tvm["versions"]
    rows = [r for r in result["rows"] if r.get("tvm")]
    cached = [r["case"] for r in rows if r["tvm"]["cached"]]
    parts = [
        f"TVM MetaSchedule (apache-tvm {v.get('apache-tvm')}, tvm-ffi {v.get('apache-tvm-ffi')}) on the same "
        f"workloads (same shapes, layouts and float32; TE definitions in `benchmarks/tune/tvm_ref.py`), "
        f"{result['tune']['trials']} trials each, `tune_tir` with its defaults (evolutionary search, XGBoost, "
        "64 candidates per round, local builder and runner: number 3, repeat 1, min_repeat_ms 100) but a "
        "build function without the tensor-intrinsics import; target "
        f"`{json.dumps(tvm['target'])}`, TVM_NUM_THREADS=1; a limit of {tvm['time_limit_s']:.0f} s of tuning "
        "per workload. TVM's best kernel was verified against numpy and timed in the same interleaved call "
        "as loomtune, numpy and PyTorch (TVM ms, TVM × numpy = numpy ms / TVM ms). TVM tuning s: "
        "`tune_tir`'s wall time, without the child process's start and imports (~35 s for the tensor "
        "intrinsics TuneContext loads); `TVM best @N`: the best-so-far median as its runner measured it. "
        "vs TVM: TVM ms / loomtune ms and loomtune's tuning time as a share of TVM's; the goal is met "
        "where loomtune is faster in at most half the time."
    ]
    if cached:
        dates = sorted({r["tvm"]["tuned_utc"] for r in rows if r["tvm"]["cached"]})
        parts.append(
            "TVM's tuning (its time and curve) comes from a cached earlier run on this machine "
            f"({dates[0]}" + (f" to {dates[-1]}" if len(dates) > 1 else "") + ", "
            f"`{tvm['cache_dir']}`) for: "
            + ", ".join(cached)
            + "; its kernels were re-timed in this run."
        )
    stopped = [
        f"{r['case']} ({r['tvm']['trials_done']} trials, {r['tvm']['stop_reason']})"
        for r in rows
        if r["tvm"]["stop_reason"] != "budget"
    ]
    if stopped:
        parts.append("TVM stopped before its budget: " + "; ".join(stopped) + ".")
    missing = [r["case"] for r in rows if r.get("correct") and r.get("tvm_ms") is None]
    if missing:
        parts.append("No correct TVM kernel to time: " + ", ".join(missing) + ".")
    flagged = [r["case"] for r in rows if r["tvm"].get("tuning_contended")]
    if flagged:
        parts.append(
            "† Other processes used > 10% of the CPUs while TVM tuned " + ", ".join(flagged) + "."
        )
    goals = [r.get("tvm_goal") for r in rows]
    if goals and all(g is not None for g in goals):
        met = sum(g["met"] for g in goals)
        parts.append(
            f"Goal against TVM met on {met} of {len(goals)} workloads"
            + (
                "."
                if met == len(goals)
                else ": not there yet on "
                + ", ".join(r["case"] for r, g in zip(rows, goals) if not g["met"])
                + "."
            )
        )
    return " ".join(parts)
