"""The scheduler extra: one shared budget over the workloads against each tuned on its own."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from benchmarks.common import fmt
from benchmarks.tune.compare import Context, median_or_none, time_kernels
from benchmarks.tune.suite import SuiteWorkload
from benchmarks.tune.tuning import add_own, pool_cpu, search_cpu
from codegen.kernel import Kernel
from ir.task import Task

SCHEDULER_ARMS = ("gradient", "round_robin", "independent")
"""The scheduler extra's arms: one shared budget under each policy, and each workload tuned on its own."""


def _tune_arm(
    arm: str, ctx: Context, tasks: Sequence[tuple[Task, float]], per_task: int, seed: int, pool: Any
) -> list[Any]:
    """One arm's tuning (outcomes in task order): `tune_tasks` under a policy in one fresh
    database, or (independent) `tune_task` per workload, each in a fresh database of its own
    with a search and cost model of its own: what a user without the scheduler does."""
    from service.db.store import open_database
    from service.tuning import tune_task, tune_tasks

    if arm != "independent":
        database = open_database(f"sqlite:///{ctx.folder / f'sched-{arm}-{seed}.sqlite'}")
        return tune_tasks(
            tasks,
            threads=1,
            trials=per_task * len(tasks),
            seed=seed,
            database=database,
            runner=pool,
            policy=arm,
            compare=False,
        ).outcomes
    out = []
    for i, (task, _) in enumerate(tasks):
        database = open_database(f"sqlite:///{ctx.folder / f'sched-independent-{seed}-{i}.sqlite'}")
        out.append(
            tune_task(
                task,
                threads=1,
                trials=per_task,
                seed=seed,
                database=database,
                runner=pool,
                compare=False,
            )
        )
    return out


def scheduler(
    ctx: Context, workloads: Sequence[SuiteWorkload], per_task: int, seeds: Sequence[int] = ()
) -> dict[str, Any]:
    """One shared budget (gradient policy) vs 128 trials each (each workload tuned on its own), weighted latency.

    Round-robin over the shared budget is the third arm: equal shares, but the
    searches share one cost model and database as the gradient policy's do (and
    so each other's bests between shapes of one operator), so it separates what
    the policy wins from what the sharing wins.
    After all arms have tuned with a seed, each workload's best kernels are
    timed head to head, interleaved in one call (`time_kernels`): the latencies that
    are summed are measured side by side, so a slow spell of the machine between
    two runs does not decide the verdict. With several seeds the verdict
    compares the medians of the weighted totals.
    """
    from benchmarks import contention
    from workers.pool import LocalPool

    tasks = [(w.task(), float(w.weight)) for w in workloads]
    budget = per_task * len(tasks)
    out: dict[str, Any] = {
        "weights": [w.weight for w in workloads],
        "budget": budget,
        "per_task": per_task,
        "verdict_on": "head_to_head",
        "baseline": "independent",
    }
    seeds = list(seeds) or [ctx.seed]
    runs: dict[str, list[dict[str, Any]]] = {a: [] for a in SCHEDULER_ARMS}
    for seed in seeds:
        kernels: dict[str, list[Kernel | None]] = {}
        for arm in SCHEDULER_ARMS:
            pool = LocalPool(threads=1)
            if ctx.quiet_wait_s > 0:
                contention.wait_until_quiet(ctx.quiet_wait_s)
            search_before = search_cpu()
            before = contention.cpu_snapshot()
            start = time.perf_counter()
            try:
                outcomes = _tune_arm(arm, ctx, tasks, per_task, seed, pool)
                seconds = time.perf_counter() - start
                helped = pool_cpu(pool) + max(0.0, search_cpu() - search_before)
            finally:
                pool.close()
            after = contention.cpu_snapshot()
            load = contention.others_load(before, add_own(after, helped) if after else None)
            kernels[arm] = [o.kernel for o in outcomes]
            runs[arm].append(
                {
                    "seed": seed,
                    "seconds": seconds,
                    "trials_per_task": [o.run.trials_done for o in outcomes],
                    "best_while_tuning_ms": [
                        o.run.best_trial.best_ms if o.run.best_trial else None for o in outcomes
                    ],
                    "pool_cpu_s": helped,
                    "others_load": load,
                    "contended": contention.is_contended(load),
                }
            )
            ctx.log(f"  scheduler {arm}, seed {seed}: tuned in {seconds:.0f} s")
        timed = [
            time_kernels(ctx, task, {a: kernels[a][i] for a in SCHEDULER_ARMS})
            for i, (task, _) in enumerate(tasks)
        ]
        for arm in SCHEDULER_ARMS:
            run = runs[arm][-1]
            latencies = [None if t is None else t[f"{arm}_ms"] for t in timed]
            run["latency_ms"] = latencies
            run["numpy_ms"] = [None if t is None else t["numpy_ms"] for t in timed]
            run["weighted_latency_ms"] = (
                None
                if None in latencies
                else sum(w * lat for w, lat in zip(out["weights"], latencies))  # type: ignore[operator]
            )
            run["contended"] = run["contended"] or any(
                t is not None and t["contended"] for t in timed
            )
            ctx.log(
                f"  scheduler {arm}, seed {seed}: weighted latency {run['weighted_latency_ms']} ms (head to head)"
            )
    out["seeds"] = seeds
    for arm, per_seed in runs.items():
        out[arm] = per_seed[0]  # the first seed's run in full (trials per task, times)
        out[f"{arm}_weighted_by_seed"] = [r["weighted_latency_ms"] for r in per_seed]
        out[f"{arm}_runs"] = per_seed
        out[f"{arm}_weighted_ms"] = median_or_none(out[f"{arm}_weighted_by_seed"])
    g, base = out["gradient_weighted_ms"], out["independent_weighted_ms"]
    out["met"] = None if g is None or base is None else g < base
    return out


def scheduler_row(e: dict[str, Any]) -> list[str]:
    """The scheduler extra's row: gradient against each workload tuned on its own, round-robin beside."""
    arms = ["gradient", "independent", "round_robin"]
    names = {"gradient": "gradient", "round_robin": "round-robin", "independent": "each on its own"}
    seeds = e["seeds"]
    totals = {a: e[f"{a}_weighted_ms"] for a in arms}
    verdict = "met" if e["met"] else "not met"
    if totals["gradient"] and totals["independent"]:
        change = totals["gradient"] / totals["independent"] - 1
        noise = ", within noise" if abs(change) < 0.03 else ""
        verdict += f" ({change:+.1%}{noise})"
    weights = ",".join(f"{w:g}" for w in e["weights"])
    first = f"seed {seeds[0]}: " if len(seeds) > 1 else ""
    described = [
        f"{names[a]} ({first if a == 'gradient' else ''}{'/'.join(str(n) for n in e[a]['trials_per_task'])} trials, "
        f"{e[a]['seconds']:.0f} s)"
        for a in arms
    ]
    label = (
        f"task scheduler, weights {weights}, {e['budget']} trials: "
        f"{described[0]} vs {described[1]}; {described[2]} beside"
    )
    shown = " vs ".join(f"{fmt(totals[a])}" for a in arms) + " ms"
    if len(seeds) > 1:
        per_seed = ", ".join(
            " vs ".join(fmt(v) for v in vals)
            for vals in zip(*(e[f"{a}_weighted_by_seed"] for a in arms))
        )
        shown = f"median of {len(seeds)} seeds: {shown} (weighted totals of the head-to-head timings; per seed: {per_seed})"
    else:
        shown += " (weighted totals of the head-to-head timings)"
    return [label, shown, verdict]
