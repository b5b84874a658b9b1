"""The reuse extra: matmul 1000³ tuned with matmul 1024³'s records against a cold start."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.tune.compare import Context, head_to_head, median_or_none
from benchmarks.tune.suite import REUSE_TO
from benchmarks.tune.tuning import tune_one
from ir.task import library_task


def reuse(
    ctx: Context, source_db: Path, warm_trials: int, cold_trials: int, seeds: Sequence[int] = ()
) -> dict[str, Any]:
    """matmul 1000³ tuned in a copy of matmul 1024³'s database vs a cold start, per seed.

    The verdict compares the two best kernels of each seed head to head, timed
    interleaved in one call (`head_to_head`), on the median over the seeds of
    cold / warm. The best while tuning is the minimum over noisy short
    timings, so it favours the run that drew 4 times as many (a winner's
    curse); it is reported beside, with its own median. One pair of runs
    differs by less than runs of the same search with another seed.
    """
    task = library_task("matmul", REUSE_TO)
    seeds = list(seeds) or [ctx.seed]
    runs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    duels: list[dict[str, Any] | None] = []
    for s in seeds:
        tag = f" seed {s}" if len(seeds) > 1 else ""
        warm_db = ctx.folder / f"reuse-warm-{s}.sqlite"
        shutil.copyfile(source_db, warm_db)
        warm = tune_one(
            ctx,
            task,
            trials=warm_trials,
            strategy="evolutionary",
            db_file=warm_db,
            seed=s,
            label=f"matmul 1000³ with 1024³'s records{tag}",
            final=True,
        )
        cold = tune_one(
            ctx,
            task,
            trials=cold_trials,
            strategy="evolutionary",
            seed=s,
            db_file=ctx.folder / f"reuse-cold-{s}.sqlite",
            label=f"matmul 1000³ cold{tag}",
            final=True,
        )
        runs.append((warm, cold))
        duels.append(head_to_head(ctx, task, {"warm": warm, "cold": cold}))
    warm_by_seed = [w["history_ms"][-1] if w["history_ms"] else None for w, _ in runs]
    cold_by_seed = [c["history_ms"][-1] if c["history_ms"] else None for _, c in runs]
    w, c = median_or_none(warm_by_seed), median_or_none(cold_by_seed)
    ratios = [d["cold_ms"] / d["warm_ms"] if d else None for d in duels]
    ratio = median_or_none(ratios)
    return {
        "warm_trials": warm_trials,
        "cold_trials": cold_trials,
        "seeds": seeds,
        "warm_best_ms": w,
        "cold_best_ms": c,
        "warm_by_seed": warm_by_seed,
        "cold_by_seed": cold_by_seed,
        "warm_final_by_seed": [r["latency_ms"] for r, _ in runs],
        "cold_final_by_seed": [r["latency_ms"] for _, r in runs],
        "head_to_head": duels,
        "cold_over_warm_by_seed": ratios,
        "cold_over_warm": ratio,
        "verdict_on": "head_to_head",
        "met": None if ratio is None else ratio >= 1.0,
        "met_while_tuning": None if w is None or c is None else w <= c,
        "warm": runs[0][0],
        "cold": runs[0][1],
        "per_seed": [{"seed": s, "warm": w, "cold": c} for s, (w, c) in zip(seeds, runs)],
    }
