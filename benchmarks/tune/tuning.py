"""One tuning run of one workload in a database of its own (`tune_one`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks.common import process_cpu_s
from benchmarks.tune.compare import Context, TVMFactory, final_comparison
from benchmarks.tune.suite import checkpoints
from ir.task import Task


def pool_cpu(pool: Any) -> float:
    return sum(process_cpu_s(getattr(p, "pid", None)) for p in pool.processes)


def search_cpu() -> float:
    """CPU seconds of the evolutionary search's helper processes (`tuner.search.pool`) so far."""
    from tuner.search.pool import helper_pids

    return sum(process_cpu_s(pid) for pid in helper_pids())


def tune_one(
    ctx: Context,
    task: Task,
    *,
    trials: int,
    strategy: str,
    db_file: Path,
    label: str,
    final: bool = True,
    seed: int | None = None,
    tvm: TVMFactory | None = None,
    threads: int = 1,
) -> dict[str, Any]:
    """Tune `task` at `threads` threads in the database `db_file`; the row (curve, times,
    final comparison at that thread count)."""
    from benchmarks import contention
    from service.db.store import open_database
    from service.tuning import tune_task
    from workers.pool import LocalPool

    database = open_database(f"sqlite:///{db_file}")
    pool = LocalPool(threads=threads)
    trial_times: list[float] = []
    statuses: dict[str, int] = {}
    marks = set(checkpoints(trials))
    best_at: dict[str, dict[str, Any] | None] = {}  # checkpoint -> the best trace by then (JSON)
    best_now: Any = None
    start = time.perf_counter()

    def on_trial(trial: Any) -> None:
        nonlocal best_now
        trial_times.append(time.perf_counter() - start)
        statuses[trial.result.status] = statuses.get(trial.result.status, 0) + 1
        if trial.result.ok and trial.best_ms == trial.result.median_ms:
            best_now = trial.trace
        if trial.index in marks:
            best_at[str(trial.index)] = best_now.to_json() if best_now is not None else None

    if ctx.quiet_wait_s > 0:
        contention.wait_until_quiet(ctx.quiet_wait_s)
    search_before = search_cpu()
    before = contention.cpu_snapshot()
    helped = searched = 0.0
    try:
        start = time.perf_counter()
        outcome = tune_task(
            task,
            threads=threads,
            trials=trials,
            strategy=strategy,
            database=database,
            seed=ctx.seed if seed is None else seed,
            runner=pool,
            on_trial=on_trial,
            compare=False,
        )
        tune_s = time.perf_counter() - start
        helped = pool_cpu(pool)
        searched = max(0.0, search_cpu() - search_before)
    finally:
        pool.close()
    for m in marks - {int(k) for k in best_at}:  # the run ended sooner: its last best stands
        best_at[str(m)] = best_now.to_json() if best_now is not None else None
    after = contention.cpu_snapshot()
    if after is not None:
        after = add_own(after, helped + searched)
    load = contention.others_load(before, after)
    run = outcome.run
    history = list(run.history)
    best_trace = outcome.best_trace
    row: dict[str, Any] = {
        "case": label,
        "label": label,
        "op": task.op,
        "params": dict(task.params),
        "threads": threads,
        "workload_key": task.key,
        "target": outcome.target.canonical(),
        "flops": task.flops,
        "strategy": outcome.strategy,
        "seed": ctx.seed if seed is None else seed,
        "trials": trials,
        "trials_done": run.trials_done,
        "stop_reason": run.stop_reason,
        "history_ms": history,
        "trial_times_s": trial_times,
        "checkpoints_ms": {
            str(c): history[c - 1] if len(history) >= c else None for c in checkpoints(trials)
        },
        "tune_s": tune_s,
        "loop_s": run.seconds,
        "search_s": run.search_seconds,
        "candidates_per_s": run.trials_done / run.seconds if run.seconds else None,
        "statuses": statuses,
        "failures": dict(run.failures),
        "best_record_id": outcome.best.record_id if outcome.best is not None else None,
        "best_tuning_ms": outcome.best.median_ms if outcome.best is not None else None,
        "finalists": [
            {"tuning_ms": f.record.median_ms, "retimed_ms": f.retimed_ms} for f in outcome.finalists
        ],
        "best_trace": best_trace.as_python() if best_trace is not None else None,
        "best_trace_json": best_trace.to_json() if best_trace is not None else None,
        "best_trace_json_at": best_at,
        "pool_cpu_s": helped,
        "search_cpu_s": searched,
        "tuning_others_load": load,
        "tuning_contended": contention.is_contended(load),
    }
    ctx.log(
        f"  {label}: {run.trials_done} trials in {tune_s:.1f} s "
        f"({row['candidates_per_s'] or 0:.2f}/s), best while tuning {history[-1] if history else None} ms, "
        f"the fastest finalist's {row['best_tuning_ms']} ms"
    )
    if final:
        row.update(final_comparison(ctx, task, outcome.kernel, tvm, threads))
    return row


def add_own(snapshot: Any, seconds: float) -> Any:
    import dataclasses

    return dataclasses.replace(snapshot, own=snapshot.own + seconds)
