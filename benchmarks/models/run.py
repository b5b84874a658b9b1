"""Whole models against ONNX Runtime and PyTorch: correctness, latency, memory.

Per model (`definitions.py`: BERT-base, ResNet-18, MobileNetV2; exported once, cached):
import the ONNX file with loomtune, cut it into tasks (what ``loomtune model inspect``
lists), compile it with each task's best stored schedule from the database (the
default loop nest where none is stored), and run loomtune, ONNX Runtime and PyTorch
once each on seeded inputs: loomtune (and PyTorch) checked against ONNX Runtime with
``max|out − ref| ≤ 1e-3·max|ref| + 1e-5``. That first call is each engine's warm-up;
then the three are timed interleaved in one `time_interleaved` call: 3 repeats unless asked
otherwise (1 when loomtune's first call took over 2 minutes), each back-to-back inferences
for at least 200 ms, at several threads after a 0.2 s pause for the others' spinning
threads to sleep; per-inference times. A wrong model is
recorded ``correct: false`` and not timed. Memory: each engine in a child process of
its own loads the model and runs one inference (`rss.py`); its peak RSS is reported
beside the size of the weights.
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import contention
from benchmarks.common import REPO, Table, fmt_ms, fmt_ratio, result_header, utc_now
from benchmarks.models import definitions, profile
from benchmarks.models.rss import ENGINES
from benchmarks.record import write_result
from workers.compare import SETTLE_S
from workers.timing import MeasureConfig, Timing, time_interleaved

SLOW_CALL_S = 120.0  # a first call slower than this is timed with one repeat
BATCH_MS = 200.0
"""A repeat runs back-to-back inferences for at least this long: a single inference right
after an idle pause met a sleeping second vCPU (MobileNetV2 at 2 threads 4.4–9.7 ms per
single call, 3.2 ms back to back)."""
RSS_TIMEOUT_S = 1800.0
PROGRESS_S = 120.0  # how often model tuning logs its progress


def onnxruntime_session(path: str | os.PathLike, threads: int) -> Any:
    """ONNX Runtime as the benchmark runs it: every graph optimisation, sequential
    execution, `threads` intra-op threads, the CPU provider."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def task_summary(plan: Any, tuned: Callable[[str], bool]) -> list[dict[str, Any]]:
    """The distinct tasks, most frequent first: what `loomtune model inspect` lists."""
    total = plan.flops or 1
    tasks = [
        {
            "key": t.task.key[:12],
            "op": t.op,
            "pattern": t.label(),
            "count": t.count,
            "flops_share": t.flops * t.count / total,
            "tuned": tuned(t.task.key),
        }
        for t in plan.tasks
    ]
    return sorted(tasks, key=lambda t: (-t["count"], -t["flops_share"]))


def peak_rss(
    engine: str, name: str, path: os.PathLike, *, quick: bool, threads: int, seed: int
) -> dict[str, Any]:
    """`rss.py` in a child process: its JSON, or ``{"error": ...}`` naming what failed."""
    command = [sys.executable, "-m", "benchmarks.models.rss", engine, name, str(path)]
    command += ["--threads", str(threads), "--seed", str(seed)] + (["--quick"] if quick else [])
    try:
        done = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=RSS_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return {"engine": engine, "error": f"timed out after {RSS_TIMEOUT_S:g} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"engine": engine, "error": f"exit {done.returncode}: {tail}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _timing_dict(t: Timing) -> dict[str, Any]:
    return {"times_ms": list(t.times_ms), "number": t.number, "median_ms": t.median_ms,
            "min_ms": t.min_ms}  # fmt: skip


def _timed_first(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - start) * 1e3


@dataclass(frozen=True)
class Tuning:
    """Tune each model before timing it: at most `minutes` of wall time and `trials` in all
    (the model's whole budget on the target, stored trials included). `per_threads`
    overrides the minutes at some thread counts: a 2-thread pass that starts from the
    1-thread bests needs less time than the first."""

    minutes: float
    trials: int = 100_000
    per_threads: tuple[tuple[int, float], ...] = ()

    def minutes_at(self, threads: int) -> float:
        return dict(self.per_threads).get(threads, self.minutes)


def tune_first(
    path: os.PathLike,
    threads: int,
    seed: int,
    tuning: Tuning,
    database: Any,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """`loomtune tune --model` with a time budget: its wall time and trials, for the row."""
    from service.tuning import ModelTuning

    minutes = tuning.minutes_at(threads)
    start = time.perf_counter()
    state = ModelTuning(
        path,
        trials=tuning.trials,
        threads=threads,
        seed=seed,
        database=database,
        time_budget_s=minutes * 60.0,
    )
    stored = tuning.trials - state.remaining
    log(f"tuning {Path(path).name} for up to {minutes:g} min in all ({stored} trials stored)")
    last = [start]

    def progress(_task: int, _trial: Any) -> None:
        now = time.perf_counter()
        if now - last[0] >= PROGRESS_S:
            last[0] = now
            fastest: dict[int, float] = {}  # per plan task, its fastest implementation's best
            for g, t in zip(state.groups, state.tasks):
                if t.best_ms is not None:
                    ms = t.count * t.best_ms
                    fastest[g] = min(fastest.get(g, ms), ms)
            trials = sum(t.trials_done for t in state.tasks)
            log(
                f"  {now - start:.0f} s: {trials} trials, tuned kernels sum to "
                f"{sum(fastest.values()):.3g} ms ({len(fastest)} of {len(state.plan.tasks)} tasks)"
            )

    done = state.tune(on_trial=progress)
    state.finish(check=False)
    fewer = [c.pattern for c in state.thread_choices if c.fewer]
    if state.thread_choices:
        log(
            f"in the model {len(fewer)} of {len(state.thread_choices)} task(s) run their "
            f"fewer-thread best: {', '.join(fewer) or '-'}"
        )
    for c in state.implementation_choices:
        log(
            f"in the model {c.pattern}: {c.reigning} {c.reigning_ms:.3g} ms, "
            f"{c.challenger} {c.challenger_ms:.3g} ms per call"
        )
    if state.not_retimed:
        log(f"the budget left {len(state.not_retimed)} task(s) without a finalists' re-time")
    return {
        "tuning_s": time.perf_counter() - start,
        "trials_new": done,
        "trials": stored + done,
        "minutes": minutes,
        "stopped_by": state.stopped_by,
        "not_retimed": len(state.not_retimed),
        "fewer_thread_tasks": len(fewer),
    }


def measure_model(
    name: str,
    *,
    quick: bool,
    threads: int,
    seed: int,
    quiet_wait_s: float,
    memory: bool,
    log: Callable[[str], None],
    tuning: Tuning | None = None,
    database_url: str | None = None,
    repeat: int = 3,
) -> dict[str, Any]:
    """One model's row at `threads`: tuning (when asked), tasks, correctness, the interleaved
    timing, the children's memory."""
    from codegen.host import host_target
    from codegen.model_profile import task_times_ms
    from frontend.onnx import load_onnx
    from ir.graph.plan import build_plan
    from service.db.store import open_database
    from service.model import compile_model

    spec = definitions.spec(name, quick)
    path = definitions.exported(spec, seed)
    row: dict[str, Any] = {"case": name, "model": name, "description": spec.description}
    row |= {"config": spec.config, "file": str(path), "onnx_mb": path.stat().st_size / 2**20}
    row["threads"] = threads
    database = open_database(database_url)
    if tuning is not None:
        row["tuning"] = tune_first(path, threads, seed, tuning, database, log)
    start = time.perf_counter()
    graph = load_onnx(path)
    row["import_s"] = time.perf_counter() - start
    row["weights_mb"] = sum(a.nbytes for a in graph.constants.values()) / 2**20
    start = time.perf_counter()
    plan = build_plan(graph)
    row["plan_s"] = time.perf_counter() - start
    log(f"{name}: {len(plan.tasks)} tasks, {len(plan.steps)} kernels; compiling ...")
    start = time.perf_counter()
    model, schedules = compile_model(plan, host_target(threads), database=database)
    row["compile_s"] = time.perf_counter() - start
    plan = schedules.choose(plan)  # the implementations the compiled model runs
    tasks = task_summary(plan, schedules.tuned)
    row |= {"tasks": len(tasks), "kernels": model.kernel_calls, "task_list": tasks}
    row["tuned_tasks"] = sum(t["tuned"] for t in tasks)
    row["borrowed_tasks"] = len(schedules.borrowed)  # another thread count's best
    row["schedule_problems"] = list(schedules.problems)
    row["model_bytes"] = {"weights": model.weight_bytes, "arena": int(model.arena.nbytes)}
    for t in tasks:
        log(f"  {t['count']:>3} × {t['pattern']:<32} {100 * t['flops_share']:5.1f}% FLOPs")
    # The second core's gain is timed in the same interleaved call as the rest: two rows
    # timed minutes apart on a VM differ by its phases (MobileNetV2's own 2-thread gain
    # read 1.53–1.75 over five runs of the same kernels).
    single = None
    if threads > 1:
        log(f"{name}: compiling its 1-thread build too, timed beside")
        single, _ = compile_model(plan, host_target(1), database=database)
    out_names = list(graph.outputs)
    del graph, plan
    gc.collect()
    _run_engines(
        row, spec, path, model, out_names, quick, threads, seed, quiet_wait_s, log, repeat, single
    )
    del single
    if row["correct"]:
        profile.annotate(tasks, task_times_ms(model))
        for t in sorted(tasks, key=lambda t: -t.get("ms", 0.0))[:5]:
            log(f"  {t['ms']:8.3f} ms  {t['count']:>3} × {t['pattern']}")
    del model
    gc.collect()
    if memory:
        row["rss"] = {}
        for engine in ENGINES:
            log(f"{name}: peak RSS of {engine} (a child process: load + 1 inference)")
            row["rss"][engine] = peak_rss(
                engine, name, path, quick=quick, threads=threads, seed=seed
            )
    return row


def _run_engines(
    row: dict[str, Any],
    spec: definitions.ModelSpec,
    path: os.PathLike,
    model: Any,
    out_names: list[str],
    quick: bool,
    threads: int,
    seed: int,
    quiet_wait_s: float,
    log: Callable[[str], None],
    repeat: int = 3,
    single: Any = None,
) -> None:
    """Each engine's first call checked against ONNX Runtime's, then the interleaved
    timing (skipped when loomtune is wrong); into `row`. `single`: loomtune's 1-thread
    build of the model, timed in the same call (`loomtune_1thread_ms`, `x_own_1thread`)."""
    import torch

    from service.model import check_outputs

    name = spec.name
    inputs = spec.inputs(spec.config, np.random.default_rng(seed))
    session = onnxruntime_session(path, threads)
    feed = dict(zip(spec.input_names, inputs))
    torch.set_num_threads(threads)
    module = definitions.build(spec, seed)
    tensors = definitions.torch_inputs(spec, inputs)

    def torch_call() -> Any:
        with torch.inference_mode():
            return module(*tensors)

    references, _ = _timed_first(lambda: session.run(None, feed))
    outputs, first_ms = _timed_first(lambda: model(*inputs))
    log(f"{name}: loomtune's first call {first_ms / 1e3:.1f} s")
    problem, err = check_outputs(outputs, references, out_names)
    row |= {"correct": problem is None, "message": problem or "", "max_abs_err": err}
    row["first_call_ms"] = first_ms
    theirs, _ = _timed_first(torch_call)
    t_problem, t_err = check_outputs([theirs.numpy()], references[:1], out_names[:1])
    row |= {"torch_correct": t_problem is None, "torch_message": t_problem or ""}
    row["torch_max_abs_err"] = t_err
    row["reference_max"] = float(max(np.abs(r).max() for r in references))
    if problem is None:
        repeats = 1 if first_ms > SLOW_CALL_S * 1e3 else repeat
        config = (
            MeasureConfig(warmup=1, number=0, repeat=repeat, min_repeat_ms=5.0)
            if quick
            else MeasureConfig(warmup=1, number=0, repeat=repeats, min_repeat_ms=BATCH_MS)
        )
        row["measure"] = {"warmup": config.warmup, "number": config.number,
                          "repeat": config.repeat, "min_repeat_ms": config.min_repeat_ms,
                          "pause_s": SETTLE_S if threads > 1 else 0.0}  # fmt: skip
        row["quiet_wait_s"] = contention.wait_until_quiet(quiet_wait_s) if quiet_wait_s else 0.0
        log(f"{name}: timing loomtune, ONNX Runtime and PyTorch interleaved ({config.repeat} ×)")
        before = contention.cpu_snapshot()
        fns = [lambda: model(*inputs), lambda: session.run(None, feed), torch_call]
        if single is not None:
            wrong, _ = check_outputs(single(*inputs), references, out_names)
            row["single_message"] = wrong or ""
            if wrong is None:
                fns.append(lambda: single(*inputs))
        # ONNX Runtime's and PyTorch's worker threads spin after a call and would take
        # the second core from the engine timed next: let them sleep first.
        timings = time_interleaved(fns, config, pause_s=SETTLE_S if threads > 1 else 0.0)
        row["others_load"] = contention.others_load(before, contention.cpu_snapshot())
        row["contended"] = contention.is_contended(row["others_load"])
        for engine, t in zip(ENGINES, timings):
            row[engine] = _timing_dict(t)
            row[f"{engine}_ms"] = t.median_ms
        row["x_onnxruntime"] = row["onnxruntime_ms"] / row["loomtune_ms"]
        row["x_torch"] = row["torch_ms"] / row["loomtune_ms"]
        if len(timings) > len(ENGINES):
            row["loomtune_1thread"] = _timing_dict(timings[-1])
            row["loomtune_1thread_ms"] = timings[-1].median_ms
            row["x_own_1thread"] = timings[-1].median_ms / row["loomtune_ms"]


def run_and_write(
    *,
    models: Sequence[str],
    threads: Sequence[int],
    quick: bool,
    seed: int,
    quiet_wait_s: float,
    memory: bool,
    out_dir: os.PathLike,
    record: os.PathLike | None,
    command: str,
    environment: dict[str, Any],
    log: Callable[[str], None],
    tuning: Tuning | None = None,
    database_url: str | None = None,
    repeat: int = 3,
) -> tuple[dict[str, Any], Any]:
    """Every model's row at each thread count (tuned first when `tuning`), the result file
    written and its line appended to `record`."""
    import torch

    started = utc_now()
    wall = time.perf_counter()
    before = contention.cpu_snapshot()
    rows = []
    for i, name in enumerate(models):
        for j, n in enumerate(threads):
            rows.append(
                measure_model(
                    name,
                    quick=quick,
                    threads=n,
                    seed=seed,
                    quiet_wait_s=quiet_wait_s,
                    # quick: the first model's memory only; one thread count's in any case
                    memory=memory and j == 0 and not (quick and i),
                    log=log,
                    tuning=tuning,
                    database_url=database_url,
                    repeat=repeat,
                )
            )
    own_scaling(rows)
    counts = ",".join(str(n) for n in threads)
    description = (
        "whole models against ONNX Runtime and PyTorch, "
        + (f"{counts} threads" if list(threads) != [1] else "1 thread")
        + (", tuned first" if tuning else "")
    )
    result: dict[str, Any] = {
        **result_header(
            suite="models",
            kind="models",
            description=description,
            quick=quick,
            command=command,
            seed=seed,
            started=started,
            threads=max(threads),
        ),
        "environment": environment,
        "quiet_wait_s": quiet_wait_s,
        "contended_threshold": contention.CONTENDED,
        "others_load": contention.others_load(before, contention.cpu_snapshot()),
        "first_compile_ms": None,
        "rows": rows,
        "scaling": [],
        "models": {
            "threads": list(threads),
            "tuning": None if tuning is None else vars(tuning),
            "cache": str(definitions.cache_dir()),
            "versions": {
                "torch": str(torch.__version__),
                "onnxruntime": importlib.metadata.version("onnxruntime"),
                "onnx": importlib.metadata.version("onnx"),
            },
        },
    }
    result["wall_s"] = time.perf_counter() - wall
    path = write_result(result, Path(out_dir), started, Path(record) if record else None)
    return result, path


def own_scaling(rows: list[dict[str, Any]]) -> None:
    """Each row above one thread without its own `x_own_1thread` (its 1-thread build timed
    beside it) gets loomtune's 1-thread row of that model in this run over this row's (the
    second core's gain); its profiled tasks get theirs."""
    single = {r["model"]: r for r in rows if r["threads"] == 1}
    for r in rows:
        one = single.get(r["model"])
        if r["threads"] == 1 or one is None:
            continue
        base, ms = one.get("loomtune_ms"), r.get("loomtune_ms")
        if base and ms and r.get("x_own_1thread") is None:
            r["x_own_1thread"] = base / ms
        profile.scaling(one.get("task_list", []), r.get("task_list", []))


def _mb(row: dict[str, Any], engine: str, key: str = "peak_mb") -> float | None:
    return ((row.get("rss") or {}).get(engine) or {}).get(key)


def report_tables(result: dict[str, Any]) -> list[tuple[str | None, Table, str | None]]:
    """The timing table, the memory table and each model's tasks, for the terminal."""
    rows = result["rows"]
    timing = (
        ["model", "threads", "tasks", "kernels", "tuned", "tuning s", "trials", "loomtune ms",
         "ORT ms", "PyTorch ms", "× ORT", "× PyTorch", "× own 1 thread", "correct", "max |err|"],
        [[r["model"] + (" †" if r.get("contended") else ""), str(r.get("threads", 1)),
          str(r["tasks"]), str(r["kernels"]), str(r["tuned_tasks"]),
          fmt_ms((r.get("tuning") or {}).get("tuning_s")),
          str((r.get("tuning") or {}).get("trials", "–")), fmt_ms(r.get("loomtune_ms")),
          fmt_ms(r.get("onnxruntime_ms")), fmt_ms(r.get("torch_ms")),
          fmt_ratio(r.get("x_onnxruntime")), fmt_ratio(r.get("x_torch")),
          fmt_ratio(r.get("x_own_1thread")), "yes" if r["correct"] else "**no**",
          f"{r['max_abs_err']:.2g}"] for r in rows],
    )  # fmt: skip
    memory = (
        ["model", "weights MB", *(f"{e} peak MB" for e in ENGINES),
         *(f"{e} holds MB" for e in ENGINES)],
        [[r["model"], fmt_ms(r["weights_mb"]), *(fmt_ms(_mb(r, e)) for e in ENGINES),
          *(fmt_ms(_mb(r, e, "held_mb")) for e in ENGINES)] for r in rows if r.get("rss")],
    )  # fmt: skip
    out: list[tuple[str | None, Table, str | None]] = [(None, timing, None)]
    if memory[1]:
        note = (
            "peak = VmHWM of a child process that loads the model and runs it once; holds = "
            "its VmRSS then, less its VmRSS after the engine's imports (before the model)"
        )
        out.append(("Memory (MiB):", memory, note))
    for r in rows:
        tasks = (
            ["count", "pattern", "FLOPs", "tuned", "ms", "time", "× own 1 thread"],
            [[str(t["count"]), t["pattern"], f"{100 * t['flops_share']:.1f}%",
              "yes" if t["tuned"] else "-", fmt_ms(t.get("ms")),
              f"{100 * t['time_share']:.1f}%" if "time_share" in t else "–",
              fmt_ratio(t.get("x_own_1thread"))] for t in r["task_list"]],
        )  # fmt: skip
        out.append((f"{r['model']} ({r['description']}): tasks", tasks, None))
    return out
