"""How much any task scheduler can win on the suite: its policies replayed over recorded curves.

``python -m benchmarks.scheduler_replay [--results DIR] [--draws N] [--out DIR]``

The goal: the gradient policy beats equal shares (128 trials each) under
one budget of 768. Live, that verdict rests on the final kernels' timings,
whose run-to-run spread on a shared VM is several percent. This replay asks
the question without that noise: the best-so-far curves that the main tune
runs recorded (256 trials per workload) say what each workload reaches after
any number of trials, so an allocation of the budget has a known weighted
total. Per machine kind (the target's CPU), each draw picks one recorded
curve per workload (from different runs: seeds of the search, in effect) and
spends the budget three ways:

- round-robin: the batches in turn, as `TaskScheduler` does;
- gradient: `tuner.search.task_scheduler.pick_task`, the same decision the live
  scheduler makes, fed the replayed histories;
- perfect foresight: the allocation (in whole batches, at most the curve's
  length per workload) with the lowest weighted total, by dynamic programming
  over the true curves: no policy can do better.

The result's table gives the mean change of the weighted total against
round-robin and how often each policy was below it. The curves cover only what
a 256-trial run measured, so a workload gets at most 256 trials here.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuner.search.loop import DEFAULT_BATCH
from tuner.search.task_scheduler import SchedulerConfig, pick_task

Curve = list[float]
"""Best-so-far latency (ms) after 1, 2, ... trials; inf until a correct candidate."""


def load_curves(
    results_dir: Path, labels: Sequence[str]
) -> tuple[dict[str, list[list[Curve]]], list[str]]:
    """Per machine kind, per workload (in `labels` order), the curves of every full tune run; and the files read."""
    curves: dict[str, list[list[Curve]]] = {}
    used: list[str] = []
    for path in sorted(results_dir.glob("tune-*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        if result.get("quick") or result.get("kind") != "tune":
            continue
        by_case = {r["case"]: r.get("history_ms") for r in result.get("rows", [])}
        if not all(by_case.get(label) for label in labels):
            continue
        cpu = (
            result["target"].split("-mcpu=")[1].split()[0]
            if "-mcpu=" in result.get("target", "")
            else "?"
        )
        per_workload = curves.setdefault(cpu, [[] for _ in labels])
        for i, label in enumerate(labels):
            per_workload[i].append([math.inf if v is None else float(v) for v in by_case[label]])
        used.append(path.name)
    return curves, used


def _total(curves: Sequence[Curve], weights: Sequence[float], trials: Sequence[int]) -> float:
    return sum(w * c[t - 1] for c, w, t in zip(curves, weights, trials))


def replay(
    curves: Sequence[Curve],
    weights: Sequence[float],
    budget: int,
    policy: str,
    *,
    batch: int = DEFAULT_BATCH,
    seed: int = 0,
) -> tuple[float, list[int]]:
    """(weighted total, trials per workload) when `policy` spends `budget` in batches, as `TaskScheduler.run` does."""
    config = SchedulerConfig(policy=policy, batch_size=batch, seed=seed)
    rng = random.Random(seed)
    share = max(1, -(-budget // (2 * len(curves))))
    trials = [0] * len(curves)
    done = turn = 0
    while done < budget:
        live = [i for i, c in enumerate(curves) if trials[i] < len(c)]
        histories = [c[: trials[i]] for i, c in enumerate(curves)]
        index = pick_task(histories, weights, live, config, turn, rng)
        turn += 1
        if index is None:
            break
        n = min(batch, budget - done, share, len(curves[index]) - trials[index])
        trials[index] += n
        done += n
    return _total(curves, weights, trials), trials


def foresight(
    curves: Sequence[Curve], weights: Sequence[float], budget: int, *, batch: int = DEFAULT_BATCH
) -> tuple[float, list[int]]:
    """The lowest weighted total over allocations of whole batches (each workload at least one)."""
    batches = budget // batch
    # best[j][b]: the lowest total of the first j workloads with b batches, and its allocation
    best: list[dict[int, tuple[float, list[int]]]] = [{0: (0.0, [])}]
    for curve, weight in zip(curves, weights):
        step: dict[int, tuple[float, list[int]]] = {}
        for used, (total, alloc) in best[-1].items():
            for k in range(1, min(len(curve) // batch, batches - used) + 1):
                value = total + weight * curve[k * batch - 1]
                if used + k not in step or value < step[used + k][0]:
                    step[used + k] = (value, [*alloc, k * batch])
        best.append(step)
    feasible = [v for b, v in best[-1].items() if b <= batches]
    total, alloc = min(feasible, key=lambda v: v[0])
    return total, alloc


def compare(
    curves: Sequence[Sequence[Curve]],
    weights: Sequence[float],
    budget: int,
    draws: int,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean change against round-robin and win rates of gradient and foresight over `draws` random draws."""
    rng = random.Random(seed)
    changes: dict[str, list[float]] = {"gradient": [], "foresight": []}
    trials: dict[str, list[list[int]]] = {"gradient": [], "foresight": []}
    for d in range(draws):
        pick = [rng.choice(list(options)) for options in curves]
        base, _ = replay(pick, weights, budget, "round_robin")
        for name, (total, alloc) in (
            ("gradient", replay(pick, weights, budget, "gradient", seed=d)),
            ("foresight", foresight(pick, weights, budget)),
        ):
            changes[name].append((total - base) / base)
            trials[name].append(alloc)
    return {
        "draws": draws,
        "runs_per_workload": [len(c) for c in curves],
        **{
            name: {
                "mean_change": statistics.fmean(values),
                "below_round_robin": sum(v < 0 for v in values) / len(values),
                "median_trials": [
                    statistics.median(a[i] for a in trials[name]) for i in range(len(curves))
                ],
            }
            for name, values in changes.items()
        },
    }


def run(results_dir: Path, draws: int = 400, seed: int = 0) -> dict[str, Any]:
    from benchmarks.common import result_header, utc_now
    from benchmarks.tune.suite import SUITE

    started = utc_now()
    wall = time.perf_counter()
    labels = [w.name for w in SUITE]
    weights = [float(w.weight) for w in SUITE]
    budget = 128 * len(SUITE)
    curves, used = load_curves(results_dir, labels)
    machines = {
        cpu: compare(c, weights, budget, draws, seed) for cpu, c in sorted(curves.items()) if all(c)
    }
    header = result_header(
        suite="scheduler_replay",
        kind="scheduler_replay",
        description="the task scheduler's policies replayed over the tuning curves recorded "
        "by the tune runs, against perfect foresight",
        quick=False,
        command="python -m benchmarks.scheduler_replay",
        seed=seed,
        started=started,
        wall_s=time.perf_counter() - wall,
    )
    return {
        **header,
        "weights": weights,
        "budget": budget,
        "batch": DEFAULT_BATCH,
        "sources": used,
        "machines": machines,
        "rows": [],
    }


def report_tables(
    result: dict[str, Any], footnote: str | None = None
) -> list[tuple[str | None, Any, str | None]]:
    headers = [
        "machine kind",
        "runs per workload",
        "draws",
        "gradient vs round-robin",
        "gradient below it",
        "perfect foresight vs round-robin",
        "foresight's median trials",
    ]
    rows = []
    for cpu, m in result["machines"].items():
        rows.append(
            [
                cpu,
                str(min(m["runs_per_workload"]))
                + ("" if len(set(m["runs_per_workload"])) == 1 else "+"),
                str(m["draws"]),
                f"{m['gradient']['mean_change']:+.2%}",
                f"{m['gradient']['below_round_robin']:.0%}",
                f"{m['foresight']['mean_change']:+.2%}",
                " / ".join(f"{t:.0f}" for t in m["foresight"]["median_trials"]),
            ]
        )
    note = (
        f"Weighted total = sum(weight × best after the trials given), weights {', '.join(f'{w:g}' for w in result['weights'])}, "
        f"one budget of {result['budget']} trials in batches of {result['batch']}; round-robin gives each workload "
        f"{result['budget'] // len(result['weights'])}. Each draw takes one recorded curve per workload of that machine kind "
        f"({len(result['sources'])} tune runs in `benchmarks/results/`); gradient is the live scheduler's own decision "
        "(`pick_task`). Perfect foresight bounds what any policy could win; where it is a few percent, the live "
        "verdict is decided by the final kernels' timing spread as much as by the policy."
    )
    return [(None, (headers, rows), "\n\n".join(n for n in (note, footnote) if n))]


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks import common, record

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scheduler_replay", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--results", type=Path, default=common.RESULTS_DIR, help="where the tune runs are"
    )
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="result folder (default: --results)")
    parser.add_argument(
        "--record",
        type=Path,
        default=None,
        help="append the run's line to this record (default benchmarks/results.jsonl)",
    )
    args = parser.parse_args(argv)
    result = run(args.results, args.draws, args.seed)
    if not result["machines"]:
        print(
            f"no full tune run with all {len(result['weights'])} suite workloads in {args.results}"
        )
        return 1
    path = record.write_result(
        result, args.out or args.results, common.utc_now(), args.record or common.RECORD
    )
    print(f"{result['suite']}: {result['description']}")
    for caption, table, note in report_tables(result, None):
        print("\n" + "\n".join(part for part in (caption, common.text_table(table), note) if part))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
