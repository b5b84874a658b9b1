"""The tuning benchmark's run: the workloads, the extras, one result file."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import roofline
from benchmarks.common import result_header, shown_path, utc_now
from benchmarks.record import append_record, write_result
from benchmarks.tune.compare import FINAL_ROUNDS, ROUND_PAUSE_S, Context
from benchmarks.tune.extras.evo_replay import evo_replay_all, evo_replay_entries
from benchmarks.tune.extras.reuse import reuse
from benchmarks.tune.extras.scheduler import SCHEDULER_ARMS, scheduler
from benchmarks.tune.neighbour import MIB as NEIGHBOUR_MIB
from benchmarks.tune.plot import plot
from benchmarks.tune.report import headline
from benchmarks.tune.suite import (
    EXTRAS,
    REUSE_FROM,
    SuiteWorkload,
    checkpoints,
    select,
    thread_rows,
)
from benchmarks.tune.torch_ref import torch_version
from benchmarks.tune.tuning import tune_one
from benchmarks.tune.tvm import tvm_goal, tvm_reference, tvm_row
from ir.arrays import TIMED_OFFSETS
from workers.compare import SETTLE_S
from workers.measure import CONFIRM_REPEAT, CONFIRM_WITHIN, TUNING_CONFIG
from workers.timing import MeasureConfig


def run(
    *,
    trials: int = 256,
    quick: bool = False,
    only: Sequence[str] | None = None,
    extras: Sequence[str] = (),
    layers: bool = False,
    threads: Sequence[int] = (1,),
    parallel_only: Sequence[str] | None = None,
    seed: int = 0,
    quiet_wait_s: float = 0.0,
    strategy: str = "evolutionary",
    replay_trials: int = 64,
    with_torch: bool = True,
    main: bool = True,
    evo_seeds: int = 1,
    with_tvm: bool = False,
    tvm_cache_dir: Path | None = None,
    tvm_time_limit_s: float | None = None,
    tvm_retune: bool = False,
    neighbour: bool = False,
    log: Callable[[str], None] = print,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows (one per workload) and ``{"tune": ...}`` with the extras and the settings.

    Without `main` the workloads are not tuned one by one (no rows): only the
    extras that need no main run (``scheduler``) run. With `layers`, BERT-base's
    and ResNet-18's layer shapes follow the suite's workloads as rows (not in
    the extras). Each workload is tuned and compared at each of `threads`
    (numpy and PyTorch limited to the same count); with `parallel_only`, the counts above
    one only for the workloads it names (`suite.thread_rows`). With `with_tvm`, TVM
    MetaSchedule tunes each workload first (or its cached records are used,
    ``benchmarks.tune.tvm_ref``) and its best kernel joins the final timing at
    1 thread. With `neighbour`, each 1-thread row's final kernel, numpy and PyTorch are
    also timed alone and beside a memory-bandwidth neighbour on the other core
    (``compare.beside_neighbour``): their slowdowns.
    """
    workloads = select(quick=quick, only=only)
    rows_of = select(quick=quick, only=only, layers=layers, small=True)
    row_plan = thread_rows(rows_of, threads, parallel_only)
    measure = (
        MeasureConfig(warmup=1, repeat=3, min_repeat_ms=5.0)
        if quick
        else MeasureConfig(warmup=2, repeat=15, min_repeat_ms=50.0)
    )
    extra: dict[str, Any] = {
        "trials": trials,
        "strategy": strategy,
        "checkpoints": checkpoints(trials),
        "torch": torch_version() if with_torch else None,
        "threads": list(threads),
        "parallel_only": list(parallel_only) if parallel_only is not None else None,
        "layers": layers,
        **_timing_settings(measure, quick),
        "usable_cores": len(os.sched_getaffinity(0)),
        "tvm": None,
        "neighbour": {"mib": NEIGHBOUR_MIB, "arrays": 2} if neighbour else None,
        "extras": {},
        "not_done": [e for e in EXTRAS if e not in extras],
    }
    if with_tvm and main:
        extra["tvm"] = _tvm_settings(tvm_cache_dir, tvm_time_limit_s, tvm_retune)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loomtune-tune-") as tmp:
        ctx = Context(
            Path(tmp),
            seed,
            quiet_wait_s,
            measure,
            log,
            with_torch,
            0.0 if quick else ROUND_PAUSE_S,
            0.0 if quick else SETTLE_S,
            neighbour,
        )
        db_files: dict[str, Path] = {}
        if main:
            rows = _tune_rows(
                ctx,
                row_plan,
                trials=trials,
                strategy=strategy,
                tvm=extra["tvm"],
                tvm_cache_dir=tvm_cache_dir,
                tvm_retune=tvm_retune,
                db_files=db_files,
            )
        seeds = [seed + i for i in range(max(1, evo_seeds))]
        if "evo_replay" in extras and workloads:
            n = min(replay_trials, trials)
            # The main run's 1-thread suite rows (in the workloads' order, no layer rows) stand for
            # seed `seed`'s evolutionary runs (when evolutionary).
            suite_rows = [r for r in rows if r["threads"] == 1][: len(workloads)]
            main_rows = (
                suite_rows
                if len(suite_rows) == len(workloads) and strategy == "evolutionary"
                else None
            )
            extra["extras"]["evo_replay"] = evo_replay_all(ctx, workloads, main_rows, n, seeds)
        if "reuse" in extras:
            source = next(
                (
                    w
                    for w in workloads
                    if w.op == "matmul" and w.params == REUSE_FROM and w.name in db_files
                ),
                None,
            )
            if source is None:
                extra["not_done"].append("reuse (matmul 1024³ not in this run)")
            else:
                log("reuse across shapes: matmul 1000³")
                warm, cold = (8, 16) if quick else (32, 128)
                extra["extras"]["reuse"] = reuse(ctx, db_files[source.name], warm, cold, seeds)
        if "scheduler" in extras:
            log("task scheduler over the workloads")
            extra["extras"]["scheduler"] = scheduler(ctx, workloads, 4 if quick else 128, seeds)
    return rows, {"tune": extra}


def _tvm_settings(
    cache_dir: Path | None, time_limit_s: float | None, retune: bool
) -> dict[str, Any]:
    """TVM's versions and how it tunes (checked first: TVM must be importable)."""
    from benchmarks.tune import tvm_ref

    return {
        "versions": tvm_ref.require_tvm(),
        "target": tvm_ref.host_target(),
        "cache_dir": shown_path(cache_dir or tvm_ref.CACHE_DIR),
        "time_limit_s": time_limit_s or tvm_ref.DEFAULT_TIME_LIMIT_S,
        "retune": retune,
    }


def _timing_settings(measure: MeasureConfig, quick: bool) -> dict[str, Any]:
    """How the final comparison and the tuning's measurements time (the result says so)."""
    return {
        "measure_final": {
            "warmup": measure.warmup,
            "repeat": measure.repeat,
            "min_repeat_ms": measure.min_repeat_ms,
            "rounds": FINAL_ROUNDS,
            "round_pause_s": 0.0 if quick else ROUND_PAUSE_S,
        },
        "measure_tuning": {
            "repeat": TUNING_CONFIG.repeat,
            "min_repeat_ms": TUNING_CONFIG.min_repeat_ms,
            "confirm_repeat": CONFIRM_REPEAT,
            "confirm_within": CONFIRM_WITHIN,
            "offsets": list(TIMED_OFFSETS),
        },
    }


def _tune_rows(
    ctx: Context,
    cases: Sequence[tuple[SuiteWorkload, int]],
    *,
    trials: int,
    strategy: str,
    tvm: dict[str, Any] | None,
    tvm_cache_dir: Path | None,
    tvm_retune: bool,
    db_files: dict[str, Path],
) -> list[dict[str, Any]]:
    """One row per (workload, threads): tuned in a fresh database, then the final comparison;
    `db_files` gets each workload's 1-thread database (for the reuse extra)."""
    rows: list[dict[str, Any]] = []
    for w, n in cases:
        task = w.task()
        label = w.name if n == 1 else f"{w.name}, {n} threads"
        db_file = ctx.folder / f"{len(rows)}-{task.op}-{n}.sqlite"
        if n == 1:
            db_files[w.name] = db_file
        tvm_meta, tvm_factory = None, None
        if tvm is not None and n == 1:
            tvm_meta, tvm_factory = tvm_reference(
                w, trials, ctx.seed, tvm, tvm_cache_dir, tvm_retune, ctx.log
            )
        ctx.log(f"tuning {label} ({trials} trials)")
        row = tune_one(
            ctx,
            task,
            trials=trials,
            strategy=strategy,
            db_file=db_file,
            label=label,
            tvm=tvm_factory,
            threads=n,
        )
        row["weight"] = w.weight
        if tvm_meta is not None:
            row["tvm"] = tvm_row(tvm_meta, trials)
            row["tvm_goal"] = tvm_goal(row)
        rows.append(row)
    return rows


def default_suite(kwargs: dict[str, Any]) -> str:
    """`tune` for the whole suite; `tune_only` for a run of some workloads (`--only`), which
    must not stand for the suite in the README; `tune_extras` for the extras alone."""
    if not kwargs.get("main", True):
        return "tune_extras"
    return "tune_only" if kwargs.get("only") else "tune"


def run_and_write(
    *,
    out_dir: Path,
    command: str = "",
    environment: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    suite: str | None = None,
    record: Path | None = None,
    **kwargs: Any,
) -> tuple[dict[str, Any], Path]:
    """Run the benchmark; write ``tune-<UTC>.json`` and the PNG of the same stem, append the
    run's line to `record` when given; (result, path)."""
    import dataclasses

    from benchmarks import contention

    started = utc_now()
    wall = time.perf_counter()
    peak = roofline.fma_peak_gflops()
    before = contention.cpu_snapshot()
    rows, extra = run(log=log, **kwargs)
    after = contention.cpu_snapshot()
    helped = sum(
        (r.get("pool_cpu_s") or 0.0)
        + (r.get("search_cpu_s") or 0.0)
        + ((r.get("neighbour") or {}).get("process_cpu_s") or 0.0)
        for r in _all_rows(rows, extra["tune"])
    )
    if after is not None:
        after = dataclasses.replace(after, own=after.own + helped)
    description = (
        "tuning to the best kernel: best-so-far per trial, tuning time, the final kernel "
        + (
            "against numpy, PyTorch and TVM MetaSchedule (tuned for the same trials, 1 thread)"
            if kwargs.get("with_tvm")
            else "against numpy and PyTorch"
        )
        + f" on numpy-allocated arrays, at {' and '.join(map(str, kwargs.get('threads', (1,))))} "
        "thread(s)"
        + (
            f" (above 1 thread only {', '.join(kwargs['parallel_only'])})"
            if kwargs.get("parallel_only")
            else ""
        )
        + (
            "; at 1 thread also alone and beside a memory-bandwidth neighbour on the other core"
            if kwargs.get("neighbour")
            else ""
        )
        if kwargs.get("main", True)
        else "the tuning benchmark's extras on their own ("
        + ", ".join(kwargs.get("extras") or ())
        + "), 1 thread"
    )
    result: dict[str, Any] = {
        **result_header(
            suite=suite or default_suite(kwargs),
            kind="tune",
            description=description,
            quick=bool(kwargs.get("quick")),
            command=command,
            seed=kwargs.get("seed", 0),
            started=started,
        ),
        "peak_gflops": peak,
        "environment": environment or {},
        "measure": extra["tune"]["measure_final"],
        "quiet_wait_s": kwargs.get("quiet_wait_s", 0.0),
        "contended_threshold": contention.CONTENDED,
        "others_load": contention.others_load(before, after),
        "first_compile_ms": None,
        "rows": rows,
        "scaling": [],
        **extra,
    }
    result["wall_s"] = time.perf_counter() - wall
    path = write_result(result, out_dir, started)
    png = plot(result, path.with_suffix(".png"))
    if png is not None:
        result["tune"]["plot"] = png.name
        path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if record is not None:
        append_record(result, record, headline)
    return result, path


def _all_rows(rows: Sequence[dict[str, Any]], tune: dict[str, Any]) -> list[dict[str, Any]]:
    out = list(rows)
    ex = tune.get("extras") or {}
    for e in evo_replay_entries(ex):
        for p in e["per_seed"]:
            out += [r for r in (p["evolutionary"], p["replay"]) if r is not None]
    if "reuse" in ex:
        for p in ex["reuse"]["per_seed"]:
            out += [p["warm"], p["cold"]]
    if "scheduler" in ex:
        for arm in SCHEDULER_ARMS:
            out += ex["scheduler"][f"{arm}_runs"]
    return out
