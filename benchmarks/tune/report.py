"""The tuning benchmark's tables and notes."""

from __future__ import annotations

from typing import Any

from benchmarks import roofline
from benchmarks.common import fmt
from benchmarks.tune.extras.evo_replay import (
    EVO_GOAL_AHEAD,
    EVO_GOAL_AT,
    evo_replay_entries,
    evo_replay_rows,
)
from benchmarks.tune.extras.scheduler import SCHEDULER_ARMS, scheduler_row
from benchmarks.tune.neighbour import NEIGHBOUR_FIELDS
from benchmarks.tune.suite import GOALS, SUITE
from benchmarks.tune.tvm import tvm_goal_cell, tvm_note, tvm_table
from ir.task import gflops


def goal_verdict(row: dict[str, Any]) -> tuple[str, float | None, bool | None] | None:
    """(the goal as text, this run's value, met) for the row's workload; None without a goal.

    A goal "after N trials" divides the final run's numpy time by the best
    measured while tuning after N trials (the only time there is for it).
    """
    goal = GOALS.get((row["op"], tuple(sorted(row["params"].items()))))
    if goal is None:
        return None
    ratio, at, max_s = goal
    if at is not None:
        best = row["checkpoints_ms"].get(str(at))
        value = row["numpy_ms"] / best if best and row.get("numpy_ms") else None
        text = f"≥ {ratio:g}× @{at}"
    else:
        value = row.get("ratio_numpy")
        text = f"≥ {ratio:g}×"
    if max_s is not None:
        text += f" in ≤ {max_s:.0f} s"
    if value is None:
        return text, None, None
    return text, value, value >= ratio and (max_s is None or row["tune_s"] <= max_s)


def goal_cell(row: dict[str, Any], peak_gflops: float | None = None) -> str:
    """The goal for the row's workload and whether this run met it (`goal_verdict`).

    With the core's FMA peak measured, a goal that is not met says what fraction
    of the peak it asks for: above about 90%, no kernel gets there.
    """
    verdict = goal_verdict(row)
    if verdict is None:
        return "–"
    text, value, met = verdict
    if value is None:
        return text + " (–)"
    ratio = GOALS[(row["op"], tuple(sorted(row["params"].items())))][0]
    needs = goal_peak_fraction(row, ratio, peak_gflops)
    asks = "" if met or needs is None else f"; it asks for {needs:.0%} of the core's peak"
    return f"{text} ({value:.2f}×: {'met' if met else 'not met'}{asks})"


def goal_peak_fraction(
    row: dict[str, Any], ratio: float, peak_gflops: float | None
) -> float | None:
    """The fraction of the FMA peak that `ratio` × numpy's speed on this row stands for."""
    if not row.get("numpy_ms") or not row.get("flops"):
        return None
    return roofline.peak_fraction(ratio * gflops(row["flops"], row["numpy_ms"]), peak_gflops)


def main_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    tune = result["tune"]
    checkpoints = tune["checkpoints"]
    headers = [
        "workload",
        *[f"best @{c} ms" for c in checkpoints],
        "tuning s",
        "of which search s",
        "cand/s",
        "final ms",
        "numpy ms",
        "× numpy",
    ]
    peak = result["peak_gflops"]
    headers += ["% of peak"]
    if tune.get("torch"):
        headers += ["torch ms", "× torch"]
    headers += ["aligned gap"]
    if tune.get("neighbour"):
        headers += [NEIGHBOUR_HEADER, "numpy slowdown", "torch slowdown", "≤ numpy's"]
    if tune.get("tvm"):
        headers += ["TVM ms", "TVM × numpy", "TVM tuning s", "vs TVM: faster in ≤ ½ its time"]
    headers += ["correct", "goal"]
    rows = []
    for r in result["rows"]:
        cells = [r["case"] + (" †" if r.get("contended") else "")]
        cells += [fmt(r["checkpoints_ms"].get(str(c))) for c in checkpoints]
        cells += [
            f"{r['tune_s']:.0f}",
            "–" if r.get("search_s") is None else f"{r['search_s']:.0f}",
            fmt(r["candidates_per_s"]),
            fmt(r["latency_ms"]),
            fmt(r["numpy_ms"]),
            fmt(r["ratio_numpy"]),
        ]
        fraction = roofline.peak_fraction(r.get("gflops"), peak)
        cells.append("–" if fraction is None else f"{fraction:.0%}")
        if tune.get("torch"):
            cells += [fmt(r["torch_ms"]), fmt(r["ratio_torch"])]
        gap = r.get("align_gap")
        cells.append("–" if gap is None else f"{gap:+.1%}")
        if tune.get("neighbour"):
            cells += [fmt(r.get(k)) for k in NEIGHBOUR_FIELDS] + [
                {None: "–", True: "yes", False: "no"}[slows_no_more_than_numpy(r)]
            ]
        if tune.get("tvm"):
            t = r.get("tvm") or {}
            tvm_s = "–" if t.get("tune_s") is None else f"{t['tune_s']:.0f}"
            if t.get("tune_s") is not None and t.get("stop_reason", "budget") != "budget":
                tvm_s += " (stopped)"
            cells += [fmt(r.get("tvm_ms")), fmt(r.get("tvm_ratio_numpy")), tvm_s, tvm_goal_cell(r)]
        cells.append("yes" if r["correct"] else "**no**")
        cells.append(goal_cell(r, peak))
        rows.append(cells)
    return headers, rows


NEIGHBOUR_HEADER = "slowdown beside a bandwidth neighbour"


def slows_no_more_than_numpy(row: dict[str, Any]) -> bool | None:
    """Issue 36's robustness check: the kernel slows beside the neighbour no more than numpy."""
    mine, numpy_s = row.get("slowdown_loomtune"), row.get("slowdown_numpy")
    return None if mine is None or numpy_s is None else mine <= numpy_s


def neighbour_note(result: dict[str, Any]) -> str | None:
    """How the slowdowns were measured (None when the run had no neighbour)."""
    nb = result["tune"].get("neighbour")
    if not nb:
        return None
    rates = [
        (r.get("neighbour") or {}).get("gb_per_s")
        for r in result["rows"]
        if (r.get("neighbour") or {}).get("gb_per_s")
    ]
    rate = f", {min(rates):.0f}–{max(rates):.0f} GB/s read + written while it ran" if rates else ""
    skipped = sorted(
        {
            r["neighbour"]["message"]
            for r in result["rows"]
            if (r.get("neighbour") or {}).get("message")
        }
    )
    return (
        f"{NEIGHBOUR_HEADER}: the final kernel, numpy and PyTorch timed again in one interleaved "
        "call, each sample taken once while a child process on the other core copies one "
        f"{nb['mib']} MiB array into another ({nb['arrays'] * nb['mib']} MiB: far beyond the L3, "
        f"so it streams from memory{rate}) and right after once while that child is stopped "
        "(SIGSTOP); "
        "this process pinned to its own core. Slowdown = median beside / median alone; "
        "≤ numpy's: the kernel slows no more than numpy does (issue 36)."
        + (" Not timed: " + "; ".join(skipped) + "." if skipped else "")
    )


def extras_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    ex = result["tune"].get("extras") or {}
    rows = []
    rows += evo_replay_rows(ex)
    if "reuse" in ex:
        e = ex["reuse"]
        duels = ", ".join(
            f"{fmt(d['warm_ms'])} vs {fmt(d['cold_ms'])}" if d else "no kernel"
            for d in e["head_to_head"]
        )
        per_seed = ", ".join(
            f"{fmt(w)} vs {fmt(c)}" for w, c in zip(e["warm_by_seed"], e["cold_by_seed"])
        )
        shown = (
            f"head to head (both best kernels timed in one call), median cold/warm over {len(e['seeds'])} "
            f"seed(s): {fmt(e['cold_over_warm'])} (per seed, ms: {duels}); best while tuning, "
            f"median: {fmt(e['warm_best_ms'])} vs {fmt(e['cold_best_ms'])} ms (per seed: {per_seed})"
        )
        rows.append(
            [
                f"matmul 1000³: {e['warm_trials']} trials with 1024³'s records vs {e['cold_trials']} cold",
                shown,
                "met" if e["met"] else "not met",
            ]
        )
    if "scheduler" in ex:
        rows.append(scheduler_row(ex["scheduler"]))
    if not rows:
        return None
    return ["experiment (same run)", "best ms while tuning / latency", "goal"], rows


def _threads_text(tune: dict[str, Any]) -> str:
    """'1 thread', or '1 and 2 threads: tuned and compared at each'."""
    threads = tune.get("threads") or [1]
    if threads == [1]:
        return "1 thread"
    listed = " and ".join(str(n) for n in threads)
    if tune.get("parallel_only"):
        return (
            f"{listed} threads (above 1 thread only {', '.join(tune['parallel_only'])}; "
            "each tuned and compared at each)"
        )
    return f"{listed} threads (each workload tuned and compared at each)"


def _tuning_timing(tune: dict[str, Any]) -> str:
    """How candidates were timed while tuning."""
    m = tune["measure_tuning"]
    more = m["repeat"] + m["confirm_repeat"]
    text = (
        f"{m['repeat']} repeats of at least {m['min_repeat_ms']:g} ms, {more} for a contender "
        f"within {m['confirm_within'] - 1:.0%} of the best"
    )
    offsets = m.get("offsets") or []  # results before issue 36 timed on aligned arrays only
    if len(offsets) > 1:
        listed = " and ".join(str(o) for o in offsets)
        text += (
            f" (a contender at arrays {listed} bytes past a 64-byte boundary: the slower counts)"
        )
    return text


def _gap_text(result: dict[str, Any]) -> str:
    """How this result's gap was timed: the protocol changed twice (docs/decisions.md)."""
    rows = result.get("rows") or []
    if any("gap_offsets" in r for r in rows):
        return (
            "the same kernel on three sets of numpy's arrays (the first those above) and three "
            "64-byte aligned copies, timed alone in a call of many short repeats (each visits "
            "all six), the median over repeats of the user sets' median over the aligned "
            "sets', minus 1"
        )
    return (
        "the same kernel's time on those arrays over its time on 64-byte aligned copies of "
        "them, timed in the same call, minus 1 (where the rows hold `placements_ms`, medians "
        "over that many sets of each kind, as where one set lies moves a kernel as much as "
        "its offset)"
    )


def note(result: dict[str, Any]) -> str:
    tune = result["tune"]
    parts = [
        f"{tune['strategy']} search, {tune['trials']} trials per workload, "
        f"{_threads_text(tune)}, a fresh SQLite database per "
        f"workload, the local pool of measurement processes ({tune['usable_cores']} cores cut "
        "into slots of the row's thread count). "
        "`best @N`: the best-so-far median after N trials as measured while tuning ("
        + _tuning_timing(tune)
        + "; the other core measuring the next candidate). `final`: the best kernel re-timed in this process, interleaved with "
        "numpy"
        + (
            f" and PyTorch {tune['torch']} (each at the row's thread count)"
            if tune.get("torch")
            else ""
        )
        + " in one call"
        + (
            f" ({tune['measure_final']['repeat']} repeats in {tune['measure_final']['rounds']} rounds "
            f"{tune['measure_final']['round_pause_s']:g} s apart, pooled: a slow phase of the machine costs a minority of the samples)"
            if tune["measure_final"]["rounds"] > 1
            else ""
        )
        + ", all on arrays numpy allocated (as a user's are: large ones start 16 bytes past a "
        "64-byte boundary); `aligned gap`: "
        + _gap_text(result)
        + "; × = their time / loomtune's. conv2d's numpy is the library's reference "
        "(sliding windows + tensordot: im2col + GEMM). Tuning s: the whole `tune_task` call; search s: of that, the strategy proposing and learning (the measurement processes wait meanwhile); cand/s: trials / the loop's time.",
    ]
    parts.append(
        f"% of peak: the final kernel's GFLOP/s over one core's FMA peak, {result['peak_gflops']:.0f} GFLOP/s, "
        "measured at the start of this run (`benchmarks/roofline.py`: independent FMA chains on registers)."
    )
    if not tune.get("torch"):
        parts.append("PyTorch was not installed: no PyTorch column.")
    if tune.get("tvm") is None:
        parts.append(
            "TVM MetaSchedule was not run beside loomtune (`--with-tvm` not given): no TVM column."
        )
    if tune.get("not_done"):
        parts.append("Not run in this result: " + ", ".join(tune["not_done"]) + ".")
    short = [
        f"{r['case']} ({r['stop_reason']})"
        for r in result["rows"]
        if r["trials_done"] < r["trials"]
    ]
    if short:
        parts.append("Stopped early: " + "; ".join(short) + ".")
    flagged = [r["case"] for r in result["rows"] if r.get("tuning_contended")]
    if flagged:
        parts.append(
            "Other processes used > 10% of the CPUs while tuning " + ", ".join(flagged) + "."
        )
    if tune.get("plot"):
        parts.append(f"Curves: [{tune['plot']}](benchmarks/results/{tune['plot']}).")
    return " ".join(parts)


def report_tables(
    result: dict[str, Any], footnote: str | None = None
) -> list[tuple[str | None, Any, str | None]]:
    out: list[tuple[str | None, Any, str | None]] = []
    if result["rows"]:
        out.append(
            (
                None,
                main_table(result),
                "\n\n".join(n for n in (note(result), neighbour_note(result), footnote) if n),
            )
        )
        tt = tvm_table(result)
        if tt is not None:
            out.append(("TVM MetaSchedule's tuning, beside loomtune's:", tt, tvm_note(result)))
    ex = extras_table(result)
    if ex is not None:
        caption = "Extras, in the same run:" if result["rows"] else None
        notes = (extras_note(result), None if result["rows"] else footnote)
        out.append((caption, ex, "\n\n".join(n for n in notes if n) or None))
    return out


def extras_note(result: dict[str, Any]) -> str | None:
    """How the extras were measured, and what to keep in mind reading them."""
    ex = result["tune"].get("extras") or {}
    parts = []
    if "evo_replay" in ex:
        parts.append(
            "Evolutionary vs replay: best-so-far medians as the pool measured them while tuning, "
            "each run in a fresh database; with several seeds, the median over them (a run whose "
            "design space ran out before a checkpoint counts with its last best). Ahead: per seed, "
            "the kernels that were each run's best after that many trials are verified and timed "
            "interleaved in one call (pooled rounds, numpy beside); the evolutionary search is ahead "
            "where the median over the seeds of replay / evolutionary is above 1. The best while "
            "tuning is the minimum of short timings taken minutes apart on a VM whose speed drifts; "
            "it is shown beside. The goal "
            f"(the search goal) is ahead on at least {EVO_GOAL_AHEAD} of the {len(SUITE)} suite workloads at "
            + " and ".join(str(n) for n in EVO_GOAL_AT)
            + " trials."
        )
    if "reuse" in ex:
        parts.append(
            "Reuse: per seed, the warm and the cold run's best kernels are verified and timed "
            "interleaved in one call; the verdict is the median over the seeds of cold / warm "
            "(met: ≥ 1, the warm kernel at least as fast). The best while tuning is the minimum "
            "over short noisy timings and favours the run with 4× the trials; it is shown beside. "
            f"Seeds {', '.join(map(str, ex['reuse']['seeds']))}; the curves of the first seed."
        )
    if "scheduler" in ex:
        e = ex["scheduler"]
        contended = [a for a in SCHEDULER_ARMS if any(r["contended"] for r in e[f"{a}_runs"])]
        seeds = e["seeds"]
        parts.append(
            "Task scheduler: the weighted total is sum(weight × latency), each workload's best "
            "kernels timed head to head (interleaved in one call, pooled rounds) once every arm "
            f"has tuned. The baseline is {e['per_task']} trials each, every workload tuned on its "
            "own in a fresh database with a search and cost model of its own; the shared-budget "
            "arms (gradient, round-robin) run in one fresh database and pool, their searches "
            "sharing one cost model and, between shapes of one operator (matmul 512³ and 1024³), "
            "each other's bests as seeds. Round-robin gives equal shares (a workload whose space "
            "runs out leaves its share to the others): gradient vs round-robin is what the policy "
            "wins, round-robin vs each on its own what sharing the model and the bests wins."
            + (
                f" Seeds {', '.join(map(str, seeds))}, the arms alternating seed by seed; the verdict "
                "compares the medians."
                if len(seeds) > 1
                else ""
            )
            + (f" Contended (> 10% others) during: {', '.join(contended)}." if contended else "")
        )
    return " ".join(parts) or None


def extras_headline(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The extras' verdicts for the record: one short row per extra that ran."""
    from benchmarks.tune.extras.evo_replay import evo_replay_ahead, suite_complete

    ex = result["tune"].get("extras") or {}
    out: list[dict[str, Any]] = []
    entries = evo_replay_entries(ex)
    if entries:
        ahead = evo_replay_ahead(entries)
        seeds = len(ex["evo_replay"]["seeds"])
        figures = ", ".join(f"{a['ahead']} of {a['of']} at {n}" for n, a in ahead.items())
        met = None
        if suite_complete(entries):
            met = all(
                ahead[str(n)]["ahead"] >= EVO_GOAL_AHEAD for n in EVO_GOAL_AT if str(n) in ahead
            )
        out.append(
            {
                "experiment": "evo_replay",
                "figures": f"evolutionary ahead on {figures} trials ({seeds} seeds)",
                "met": met,
            }
        )
    if "reuse" in ex:
        e = ex["reuse"]
        out.append(
            {
                "experiment": "reuse",
                "figures": f"matmul 1000³, {e['warm_trials']} warm vs {e['cold_trials']} cold trials: "
                f"cold / warm {fmt(e['cold_over_warm'])} head to head, median of {len(e['seeds'])} seeds",
                "met": e["met"],
            }
        )
    if "scheduler" in ex:
        e = ex["scheduler"]
        totals = " vs ".join(f"{arm} {fmt(e[f'{arm}_weighted_ms'])}" for arm in SCHEDULER_ARMS)
        out.append(
            {
                "experiment": "scheduler",
                "figures": f"weighted ms {totals}, median of {len(e['seeds'])} seeds",
                "met": e["met"],
            }
        )
    return out


def _neighbour_headline(result: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The slowdowns beside the neighbour, in runs that had one (older lines stay as they were)."""
    if not result["tune"].get("neighbour"):
        return {}
    return {
        **{k: row.get(k) for k in NEIGHBOUR_FIELDS},
        "slows_no_more_than_numpy": slows_no_more_than_numpy(row),
    }


def headline(result: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The tuning benchmark's figures in the results record (`benchmarks.record.line`)."""
    rows = []
    for r in result["rows"]:
        verdict = goal_verdict(r)
        history = r.get("history_ms") or []
        rows.append(
            {
                "workload": r["case"],
                "trials": r.get("trials_done"),
                "best_ms": history[-1] if history else None,
                "final_ms": r.get("latency_ms"),
                "x_numpy": r.get("ratio_numpy"),
                "x_torch": r.get("ratio_torch"),
                "x_tvm": r.get("ratio_tvm"),
                **_neighbour_headline(result, r),
                "tune_s": r.get("tune_s"),
                "goal": verdict[0] if verdict else None,
                "met": verdict[2] if verdict else None,
                "correct": r["correct"],
            }
        )
    return {"rows": rows, "extras": extras_headline(result)}
