"""The tuning benchmark: tune each suite workload for a budget of trials, then time
the best kernel against numpy (and PyTorch where installed) interleaved in one run.

``python -m benchmarks tune [--trials N] [--only NAME,...] [--extras evo_replay,reuse,scheduler]``

Per workload, in a fresh SQLite tuning database of its own (a temporary
folder), ``service.tuning.tune_task`` runs the real loop: the rule-based
design space, the strategy (evolutionary by default), the local pool of
one-thread measurement processes (one per usable core). The curve is the
best-so-far median per trial as the pool measured it while tuning
(``workers.measure.TUNING_CONFIG``, short repeats, the other core busy with
the next candidate). Then, in this process, the best stored kernel is
compiled, verified, and timed interleaved with numpy (limited to one thread)
and PyTorch (``torch.set_num_threads(1)``; its answer verified too) in one
``time_interleaved`` call: the ratios of the table come from that call only.

The extras (each optional, each in the same run):

- ``evo_replay``: on every workload of the run (``--only`` narrows it), the
  replay strategy for ``--replay-trials`` (64) trials against the evolutionary
  search, each run in a fresh database, median over ``--seeds`` seeds (the
  main run's curve stands for the first seed's evolutionary run); how many
  workloads the evolutionary median is ahead on at 64 and 256 trials (issue
  13: at least 5 of the 6);
- ``reuse``: matmul 1000³ tuned for 32 trials in a copy of matmul 1024³'s
  database (the evolutionary search seeds its population with the other
  shape's best, re-derived, and their structural variants) against a cold
  start of 128 trials, judged head to head (both best kernels timed in one
  interleaved call per seed);
- ``scheduler``: ``service.tuning.tune_tasks`` over the six workloads, weights
  1,1,4,4,2,2, one budget of 6 × 128 trials (gradient policy) against 128
  trials each (every workload tuned on its own, fresh databases), with
  round-robin over the shared budget beside; total weighted latency of the
  best kernels, timed head to head.

The result goes to ``results/tune-<UTC>.json`` and the curves to a PNG of
the same stem next to it (matplotlib, when installed).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import roofline
from codegen.host import host_target, parse_target
from codegen.kernel import Kernel
from ir.task import Task, gflops, library_task
from workers.machine import limit_numpy_threads
from workers.measure import CONFIRM_REPEAT, CONFIRM_WITHIN, TUNING_CONFIG
from workers.timing import MeasureConfig, Timing, time_interleaved
from workers.verify import empty_outputs, verify

CHECKPOINTS = (16, 32, 64, 128, 256)
EXTRAS = ("evo_replay", "reuse", "scheduler")


def checkpoints(trials: int) -> list[int]:
    """The trial counts the table reports: 16, 32, ... below the budget, and the budget."""
    return sorted({c for c in CHECKPOINTS if c < trials} | {trials})


@dataclass(frozen=True)
class Workload:
    name: str
    op: str
    params: dict[str, int]
    weight: float = 1.0  # in the scheduler extra

    def task(self) -> Task:
        return library_task(self.op, self.params)


SUITE = (
    Workload("matmul 512³", "matmul", {"m": 512, "n": 512, "k": 512}, 1),
    Workload("matmul 1024³", "matmul", {"m": 1024, "n": 1024, "k": 1024}, 1),
    Workload(
        "dense+bias+relu 128×768→3072",
        "dense",
        {"m": 128, "k": 768, "n": 3072, "bias": 1, "relu": 1},
        4,
    ),
    Workload(
        "conv2d_nhwc 1×56×56×64→64 3×3",
        "conv2d_nhwc",
        {
            "n": 1,
            "h": 56,
            "w": 56,
            "ci": 64,
            "co": 64,
            "kh": 3,
            "kw": 3,
            "stride": 1,
            "pad": 1,
            "dilation": 1,
        },
        4,
    ),
    Workload(
        "batch_matmul 12×128×128×64", "batch_matmul", {"b": 12, "m": 128, "n": 128, "k": 64}, 2
    ),
    Workload("softmax 4096×1024", "softmax", {"m": 4096, "n": 1024}, 2),
)

QUICK_SUITE = (
    Workload("matmul 32³", "matmul", {"m": 32, "n": 32, "k": 32}, 1),
    Workload("softmax 16×64", "softmax", {"m": 16, "n": 64}, 2),
)

REUSE_FROM = {"m": 1024, "n": 1024, "k": 1024}
REUSE_TO = {"m": 1000, "n": 1000, "k": 1000}


def short_name(w: Workload) -> str:
    return w.name.split()[0]


def select(*, quick: bool = False, only: Sequence[str] | None = None) -> list[Workload]:
    """The suite (or the quick suite), restricted to the names in `only` (short or full)."""
    workloads = list(QUICK_SUITE if quick else SUITE)
    if only:
        wanted = {name.strip().lower() for name in only}
        workloads = [
            w for w in workloads if short_name(w).lower() in wanted or w.name.lower() in wanted
        ]
    return workloads


# -- PyTorch -------------------------------------------------------------------------


def torch_version() -> str | None:
    try:
        import torch
    except Exception:  # not installed, or a broken install: no torch column
        return None
    return str(torch.__version__)


def torch_call(
    task: Task, inputs: Sequence[np.ndarray]
) -> tuple[Callable[[], object], Callable[[], list[np.ndarray]]] | None:
    """(a call computing `task` with PyTorch at 1 thread, a getter of its outputs), or None.

    The inputs are converted once, outside the timed call; the call writes into
    preallocated outputs where PyTorch allows it (``out=``).
    """
    try:
        import torch
    except Exception:
        return None
    torch.set_num_threads(1)
    p = task.params
    t = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]
    if task.op in ("matmul", "batch_matmul"):
        out = torch.empty(tuple(task.output_specs()[0][0]), dtype=torch.float32)
        fn = torch.matmul if task.op == "matmul" else torch.bmm
        A, B = t

        def call() -> object:
            return fn(A, B, out=out)

        return call, lambda: [out.numpy()]
    if task.op == "dense":
        X, W = t[0], t[1]
        bias = t[2] if p["bias"] else torch.zeros(W.shape[1])
        out = torch.empty((X.shape[0], W.shape[1]), dtype=torch.float32)

        def call() -> object:
            torch.addmm(bias, X, W, out=out)
            if p["relu"]:
                torch.relu_(out)
            return out

        return call, lambda: [out.numpy()]
    if task.op == "conv2d_nhwc":
        # NHWC data is NCHW in channels_last memory format: no copy; the
        # weight (HWIO -> OIHW) is rearranged once, outside the timed call.
        X = t[0].permute(0, 3, 1, 2)
        W = t[1].permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        result: list[Any] = [None]

        def call() -> object:
            result[0] = torch.nn.functional.conv2d(
                X, W, stride=p["stride"], padding=p["pad"], dilation=p["dilation"]
            )
            return result[0]

        return call, lambda: [result[0].permute(0, 2, 3, 1).contiguous().numpy()]
    if task.op == "softmax":
        X = t[0]
        out = torch.empty_like(X)

        def call() -> object:
            return torch.softmax(X, dim=-1, out=out)

        return call, lambda: [out.numpy()]
    return None


# -- the final comparison ----------------------------------------------------------------


FINAL_ROUNDS = 3
ROUND_PAUSE_S = 5.0
"""A final comparison's repeats come in 3 rounds 5 s apart, pooled: this VM has slow phases
of seconds that slow a whole interleaved call, unevenly (conv2d on znver3: loomtune 1.4x,
TVM 1.9x, numpy 1.6x slower than a minute later); one phase then costs a third of the samples."""


# Builds TVM's best kernel on the given inputs (benchmarks.tvm_ref.best_kernel with the
# workload bound); None when TVM has no correct record to compile.
TVMFactory = Callable[[Sequence[np.ndarray], Sequence[tuple[tuple[int, ...], Any]]], Any]


def compare(
    kernel: Kernel,
    task: Task,
    config: MeasureConfig,
    seed: int = 0,
    with_torch: bool = True,
    tvm: TVMFactory | None = None,
    round_pause_s: float = ROUND_PAUSE_S,
) -> dict[str, Any]:
    """Verify the kernel (PyTorch, TVM); time them and numpy in one interleaved call."""
    inputs = task.make_inputs(seed)
    outputs = empty_outputs(task.output_specs())
    kernel(*inputs, *outputs)
    with limit_numpy_threads(1):
        refs = task.reference(inputs)
    message = verify(outputs, refs, task.output_names, task.reduction_length)
    out: dict[str, Any] = {"correct": message is None, "message": message, "torch_message": None}
    if message is not None:
        return out
    fns: list[Callable[[], object]] = [
        kernel.bind_call(*inputs, *outputs),
        lambda: task.reference(inputs),
    ]
    names = ["loomtune", "numpy"]
    torch_fn = torch_call(task, inputs) if with_torch else None
    if torch_fn is not None:
        call, result = torch_fn
        call()
        torch_wrong = verify(result(), refs, task.output_names, task.reduction_length)
        if torch_wrong is None:
            fns.append(call)
            names.append("torch")
        else:  # say so rather than time a different computation
            out["torch_message"] = torch_wrong
    if tvm is not None:
        tvm_kernel = tvm(inputs, task.output_specs())
        if tvm_kernel is None:
            out["tvm_message"] = "TVM's database holds no successful record to compile"
        else:
            tvm_kernel.reset()  # NaN outputs: a kernel that writes nothing cannot pass
            tvm_kernel.call()
            tvm_wrong = verify(tvm_kernel.outputs(), refs, task.output_names, task.reduction_length)
            out["tvm_message"] = tvm_wrong
            if tvm_wrong is None:
                fns.append(tvm_kernel.call)
                names.append("tvm")
    with limit_numpy_threads(1):
        timings = dict(
            zip(
                names,
                time_interleaved(fns, config, rounds=FINAL_ROUNDS, round_pause_s=round_pause_s),
            )
        )
    latency = timings["loomtune"].median_ms
    for name in ("loomtune", "numpy", "torch", "tvm"):
        out[name] = _timing(timings[name]) if name in timings else None
    out["latency_ms"] = latency
    out["numpy_ms"] = timings["numpy"].median_ms
    out["torch_ms"] = timings["torch"].median_ms if "torch" in timings else None
    out["ratio_numpy"] = out["numpy_ms"] / latency
    out["ratio_torch"] = out["torch_ms"] / latency if out["torch_ms"] else None
    if tvm is not None:
        tvm_ms = timings["tvm"].median_ms if "tvm" in timings else None
        out["tvm_ms"] = tvm_ms
        out["ratio_tvm"] = tvm_ms / latency if tvm_ms else None  # > 1: loomtune faster
        out["tvm_ratio_numpy"] = out["numpy_ms"] / tvm_ms if tvm_ms else None
    out["gflops"] = gflops(task.flops, latency) if task.flops else None
    return out


def _timing(t: Timing) -> dict[str, Any]:
    return {
        "times_ms": list(t.times_ms),
        "number": t.number,
        "median_ms": t.median_ms,
        "min_ms": t.min_ms,
    }


# -- one tuning run ------------------------------------------------------------------------


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) of a live process; 0 when it cannot be read."""
    if pid is None:
        return 0.0
    try:
        line = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return 0.0
    fields = line.rpartition(") ")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Context:
    folder: Path
    seed: int
    quiet_wait_s: float
    measure: MeasureConfig
    log: Callable[[str], None]
    with_torch: bool = True
    round_pause_s: float = ROUND_PAUSE_S
    """Between the rounds of a final comparison (0 in a --quick smoke test)."""


def _pool_cpu(pool: Any) -> float:
    return sum(process_cpu_s(getattr(p, "pid", None)) for p in pool.processes)


def _search_cpu() -> float:
    """CPU seconds of the evolutionary search's helper processes (`tuner.search_pool`) so far."""
    from tuner.search_pool import helper_pids

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
) -> dict[str, Any]:
    """Tune `task` in the database `db_file`; the row (curve, times, final comparison)."""
    from benchmarks import harness
    from service.db.store import open_database
    from service.tuning import tune_task
    from workers.pool import LocalPool

    database = open_database(f"sqlite:///{db_file}")
    pool = LocalPool(threads=1)
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
        harness.wait_until_quiet(ctx.quiet_wait_s)
    search_before = _search_cpu()
    before = harness.cpu_snapshot()
    helped = searched = 0.0
    try:
        start = time.perf_counter()
        outcome = tune_task(
            task,
            threads=1,
            trials=trials,
            strategy=strategy,
            database=database,
            seed=ctx.seed if seed is None else seed,
            runner=pool,
            on_trial=on_trial,
            compare=False,
        )
        tune_s = time.perf_counter() - start
        helped = _pool_cpu(pool)
        searched = max(0.0, _search_cpu() - search_before)
    finally:
        pool.close()
    for m in marks - {int(k) for k in best_at}:  # the run ended sooner: its last best stands
        best_at[str(m)] = best_now.to_json() if best_now is not None else None
    after = harness.cpu_snapshot()
    if after is not None:
        after = _add_own(after, helped + searched)
    load = harness.others_load(before, after)
    run = outcome.run
    history = list(run.history)
    best_trace = outcome.best_trace
    row: dict[str, Any] = {
        "case": label,
        "label": label,
        "op": task.op,
        "params": dict(task.params),
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
        "tuning_contended": harness.is_contended(load),
    }
    ctx.log(
        f"  {label}: {run.trials_done} trials in {tune_s:.1f} s "
        f"({row['candidates_per_s'] or 0:.2f}/s), best while tuning {history[-1] if history else None} ms, "
        f"the fastest finalist's {row['best_tuning_ms']} ms"
    )
    if final:
        row.update(final_comparison(ctx, task, outcome.kernel, tvm))
    return row


def _add_own(snapshot: Any, seconds: float) -> Any:
    import dataclasses

    return dataclasses.replace(snapshot, own=snapshot.own + seconds)


def final_comparison(
    ctx: Context, task: Task, kernel: Kernel | None, tvm: TVMFactory | None = None
) -> dict[str, Any]:
    from benchmarks import harness

    if kernel is None:
        return {
            "correct": False,
            "message": "no correct candidate",
            "latency_ms": None,
            "numpy_ms": None,
            "torch_ms": None,
            "ratio_numpy": None,
            "ratio_torch": None,
            "others_load": None,
            "contended": False,
            **(
                {"tvm_ms": None, "ratio_tvm": None, "tvm_ratio_numpy": None, "tvm_message": None}
                if tvm
                else {}
            ),
        }
    if ctx.quiet_wait_s > 0:
        harness.wait_until_quiet(ctx.quiet_wait_s)
    before = harness.cpu_snapshot()
    out = compare(kernel, task, ctx.measure, ctx.seed, ctx.with_torch, tvm, ctx.round_pause_s)
    load = harness.others_load(before, harness.cpu_snapshot())
    out.setdefault("latency_ms", None)
    out.setdefault("numpy_ms", None)
    out.setdefault("torch_ms", None)
    out.setdefault("ratio_numpy", None)
    out.setdefault("ratio_torch", None)
    out["others_load"] = load
    out["contended"] = harness.is_contended(load)
    if out["correct"]:
        torch_text = f", torch {out['torch_ms']:.3f} ms" if out["torch_ms"] else ""
        if tvm is not None:
            torch_text += (
                f", TVM {out['tvm_ms']:.3f} ms"
                if out.get("tvm_ms")
                else f", TVM: {out.get('tvm_message')}"
            )
        ctx.log(
            f"    final: loomtune {out['latency_ms']:.3f} ms, numpy {out['numpy_ms']:.3f} ms "
            f"({out['ratio_numpy']:.2f}×){torch_text}{' (contended)' if out['contended'] else ''}"
        )
    else:
        ctx.log(f"    final: WRONG: {out['message']}")
    return out


# -- extras -----------------------------------------------------------------------------------


def best_after(history: Sequence[float | None], n: int) -> float | None:
    """The best-so-far after `n` trials; a run that ended sooner (its design space ran
    out) keeps the last best it had. None without a valid candidate by then."""
    if not history:
        return None
    return history[min(n, len(history)) - 1]


def _duel_ratio(duel: dict[str, Any] | None) -> float | None:
    """Replay's kernel time over the evolutionary one's in a duel (1 when they are one kernel)."""
    if duel is None:
        return None
    if duel.get("same_kernel"):
        return 1.0
    return duel["replay_ms"] / duel["evolutionary_ms"]


def _ahead(evo: float | None, rep: float | None) -> bool | None:
    return None if evo is None or rep is None else evo < rep


def evo_vs_replay(
    ctx: Context,
    main_row: dict[str, Any] | None,
    workload: Workload,
    trials: int,
    seeds: Sequence[int] = (),
    *,
    index: int = 0,
) -> dict[str, Any]:
    """Evolutionary against replay on `workload` for `trials`, each run in a fresh database.

    The evolutionary curve of seed ``ctx.seed`` is the main run's (`main_row`)
    when there is one; every other curve is a run of its own. Medians over `seeds`.
    `index` (the workload's place in the run) keeps the database files of
    different workloads apart.
    """
    seeds = list(seeds) or [ctx.seed]
    main_history = main_row["history_ms"] if main_row is not None else []
    per_seed = []
    for seed in seeds:
        evo_row = None
        if main_row is None or seed != ctx.seed:
            evo_row = tune_one(
                ctx,
                workload.task(),
                trials=trials,
                strategy="evolutionary",
                seed=seed,
                db_file=ctx.folder / f"evo-{index}-{seed}.sqlite",
                label=f"{workload.name} evolutionary seed {seed}",
                final=False,
            )
        rep_row = tune_one(
            ctx,
            workload.task(),
            trials=trials,
            strategy="replay",
            seed=seed,
            db_file=ctx.folder / f"replay-{index}-{seed}.sqlite",
            label=f"{workload.name} replay seed {seed}",
            final=False,
        )
        evo_history = evo_row["history_ms"] if evo_row is not None else main_history
        per_seed.append(
            {
                "seed": seed,
                "evolutionary_ms": best_after(evo_history, trials),
                "replay_ms": best_after(rep_row["history_ms"], trials),
                "evolutionary": evo_row,
                "replay": rep_row,
            }
        )

    def at(p: dict[str, Any], key: str, n: int) -> float | None:
        row = p[key]
        return best_after(row["history_ms"] if row is not None else main_history, n)

    by_checkpoint: dict[str, dict[str, Any]] = {}
    for n in checkpoints(trials):
        e_n = [v for p in per_seed if (v := at(p, "evolutionary", n)) is not None]
        r_n = [v for p in per_seed if (v := at(p, "replay", n)) is not None]
        e_med = statistics.median(e_n) if e_n else None
        r_med = statistics.median(r_n) if r_n else None
        by_checkpoint[str(n)] = {
            "evolutionary_ms": e_med,
            "replay_ms": r_med,
            "evolutionary_ahead": _ahead(e_med, r_med),
        }
    task = workload.task()
    for n in summary_checkpoints(trials):
        duels = []
        for p in per_seed:
            evo = p["evolutionary"] if p["evolutionary"] is not None else main_row
            ctx.log(
                f"  {workload.name}, seed {p['seed']}: the best kernels after {n} trials head to head"
            )
            duels.append(duel_at(ctx, task, {"evolutionary": evo, "replay": p["replay"]}, n))
        ratios = [_duel_ratio(d) for d in duels]
        ratio = _median_or_none(ratios)
        by_checkpoint[str(n)].update(
            head_to_head=duels,
            replay_over_evolutionary_by_seed=ratios,
            replay_over_evolutionary=ratio,
            evolutionary_ahead_head_to_head=None if ratio is None else ratio > 1.0,
        )
    evos = [p["evolutionary_ms"] for p in per_seed if p["evolutionary_ms"] is not None]
    reps = [p["replay_ms"] for p in per_seed if p["replay_ms"] is not None]
    evo_median = statistics.median(evos) if evos else None
    rep_median = statistics.median(reps) if reps else None
    return {
        "workload": workload.name,
        "trials": trials,
        "seeds": seeds,
        "verdict_on": "head_to_head",
        "evolutionary_ms": evo_median,
        "replay_ms": rep_median,
        "evolutionary_ahead": _ahead(evo_median, rep_median),
        "replay": per_seed[0]["replay"],
        "per_seed": per_seed,
        "checkpoints": by_checkpoint,
    }


# Issue 13's acceptance for the search: the evolutionary median over the seeds ahead of
# replay's on at least 5 of the 6 suite workloads, at each of these trial counts.
EVO_GOAL_AHEAD = 5
EVO_GOAL_AT = (64, 256)


def evo_replay_entries(ex: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-workload ``evo_vs_replay`` dicts of ``extras["evo_replay"]``, in either form:
    the current ``{"workloads": [...], ...}`` or the older single dict of one workload."""
    e = ex.get("evo_replay")
    if not e:
        return []
    if "workloads" in e:
        return list(e["workloads"])
    return [e]


def summary_checkpoints(trials: int) -> list[int]:
    """The trial counts evo_replay reports: 64 and 256 where within the budget, and the budget."""
    return [c for c in checkpoints(trials) if c in EVO_GOAL_AT or c == trials]


def _medians_at(entry: dict[str, Any], n: int) -> tuple[float, float] | None:
    c = (entry.get("checkpoints") or {}).get(str(n))
    if c is None and n == entry["trials"]:  # older files: the budget only
        c = entry
    if c is None or c.get("evolutionary_ms") is None or c.get("replay_ms") is None:
        return None
    return c["evolutionary_ms"], c["replay_ms"]


def _duel_ratio_at(entry: dict[str, Any], n: int) -> float | None:
    """The median over the seeds of replay / evolutionary, timed head to head after n trials."""
    return ((entry.get("checkpoints") or {}).get(str(n)) or {}).get("replay_over_evolutionary")


def _ahead_at(entry: dict[str, Any], n: int) -> bool | None:
    """Whether the evolutionary search is ahead after n trials: on the head-to-head ratio's
    median (`verdict_on`), or in older files on the medians of the best while tuning."""
    if entry.get("verdict_on") == "head_to_head":
        ratio = _duel_ratio_at(entry, n)
        return None if ratio is None else ratio > 1.0
    m = _medians_at(entry, n)
    return None if m is None else m[0] < m[1]


def evo_replay_ahead(entries: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per reported checkpoint: on how many of the workloads the evolutionary search is
    strictly ahead (`_ahead_at`; ``ahead`` of ``of``; ``unknown``: no value on one side)."""
    if not entries:
        return {}
    trials = min(e["trials"] for e in entries)
    out = {}
    for n in summary_checkpoints(trials):
        verdicts = [_ahead_at(e, n) for e in entries]
        ahead = [e["workload"] for e, v in zip(entries, verdicts) if v]
        out[str(n)] = {
            "ahead": len(ahead),
            "of": len(entries),
            "unknown": sum(v is None for v in verdicts),
            "workloads_ahead": ahead,
        }
    return out


def suite_complete(entries: Sequence[dict[str, Any]]) -> bool:
    """Whether the entries are the six suite workloads (the goal's condition)."""
    names = [e["workload"] for e in entries]
    return len(names) == len(SUITE) and set(names) == {w.name for w in SUITE}


def evo_replay_all(
    ctx: Context,
    workloads: Sequence[Workload],
    main_rows: Sequence[dict[str, Any]] | None,
    trials: int,
    seeds: Sequence[int],
) -> dict[str, Any]:
    """``evo_vs_replay`` on each workload (`main_rows`: the main run's rows, in the same
    order, or None) and how many of them the evolutionary search is ahead on."""
    entries = []
    for i, w in enumerate(workloads):
        ctx.log(f"evolutionary vs replay on {w.name} at {trials} trials, seeds {list(seeds)}")
        entries.append(
            evo_vs_replay(ctx, main_rows[i] if main_rows else None, w, trials, seeds, index=i)
        )
    ahead = evo_replay_ahead(entries)
    for n, a in ahead.items():
        ctx.log(f"  evolutionary ahead at {n} trials on {a['ahead']} of {a['of']} workloads")
    return {
        "trials": trials,
        "seeds": list(seeds),
        "workloads": entries,
        "ahead_at": ahead,
        "suite_complete": suite_complete(entries),
    }


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
    w, c = _median_or_none(warm_by_seed), _median_or_none(cold_by_seed)
    ratios = [d["cold_ms"] / d["warm_ms"] if d else None for d in duels]
    ratio = _median_or_none(ratios)
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


def head_to_head(
    ctx: Context, task: Task, rows: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The best kernels of several runs, compiled from their traces, verified, and timed
    interleaved in one call (with numpy for scale): the fair comparison of what each run
    found. None when a run found no correct kernel."""
    if any(not row.get("best_trace_json") for row in rows.values()):
        return None
    return time_kernels(
        ctx, task, _compile_traces(task, {k: r["best_trace_json"] for k, r in rows.items()}, rows)
    )


def _compile_traces(
    task: Task, traces: Mapping[str, dict[str, Any]], rows: Mapping[str, dict[str, Any]]
) -> dict[str, Kernel | None]:
    """Each run's trace (JSON) applied to `task` and compiled for that run's target."""
    from codegen.kernel import compile_program
    from tuner.trace.trace import Trace

    return {
        name: compile_program(
            Trace.from_json(t).apply(task.program).program, parse_target(rows[name]["target"])
        )
        for name, t in traces.items()
    }


def duel_at(
    ctx: Context, task: Task, rows: Mapping[str, dict[str, Any]], n: int
) -> dict[str, Any] | None:
    """The kernels that were each run's best after `n` trials (`best_trace_json_at`), timed
    interleaved in one call (`time_kernels`); one kernel found by both is not timed
    against itself. None when a run had no correct kernel by then."""
    from tuner.trace.trace import Trace

    traces = {name: (row.get("best_trace_json_at") or {}).get(str(n)) for name, row in rows.items()}
    if any(t is None for t in traces.values()):
        return None
    if len({Trace.from_json(t).hash for t in traces.values()}) == 1:
        return {"same_kernel": True}
    return time_kernels(ctx, task, _compile_traces(task, traces, rows))  # type: ignore[arg-type]


def time_kernels(
    ctx: Context, task: Task, kernels: Mapping[str, Kernel | None]
) -> dict[str, Any] | None:
    """Verify the kernels, then time them and numpy interleaved in one call (pooled rounds):
    `{name}_ms` per kernel and `numpy_ms`. None when one is missing or wrong."""
    from benchmarks import harness

    inputs = task.make_inputs(ctx.seed)
    with limit_numpy_threads(1):
        refs = task.reference(inputs)
    fns: list[Callable[[], object]] = []
    for kernel in kernels.values():
        if kernel is None:
            return None
        outputs = empty_outputs(task.output_specs())
        kernel(*inputs, *outputs)
        if verify(outputs, refs, task.output_names, task.reduction_length) is not None:
            return None
        fns.append(kernel.bind_call(*inputs, *outputs))
    fns.append(lambda: task.reference(inputs))
    if ctx.quiet_wait_s > 0:
        harness.wait_until_quiet(ctx.quiet_wait_s)
    before = harness.cpu_snapshot()
    with limit_numpy_threads(1):
        timings = time_interleaved(
            fns, ctx.measure, rounds=FINAL_ROUNDS, round_pause_s=ctx.round_pause_s
        )
    load = harness.others_load(before, harness.cpu_snapshot())
    out: dict[str, Any] = {f"{name}_ms": t.median_ms for name, t in zip(kernels, timings)}
    out["numpy_ms"] = timings[-1].median_ms
    ctx.log("    head to head: " + ", ".join(f"{k} {v:.3f}" for k, v in out.items()))
    out["contended"] = harness.is_contended(load)
    return out


def _median_or_none(values: Sequence[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else statistics.median(values)  # type: ignore[type-var]


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
    ctx: Context, workloads: Sequence[Workload], per_task: int, seeds: Sequence[int] = ()
) -> dict[str, Any]:
    """One shared budget (gradient policy) vs 128 trials each (each workload tuned on its own), weighted latency.

    Round-robin over the shared budget is the third arm: equal shares, but the
    searches share one cost model and database as the gradient policy's do (and
    so each other's bests between shapes of one operator), so it separates what
    the policy wins from what the sharing wins.
    After all arms have tuned with a seed, each workload's best kernels are
    timed head to head, interleaved in one call (`time_kernels`): the latencies that
    are summed are measured side by side, so a slow spell of the machine between
    two runs does not decide the verdict (on znver3 a mm1024 final read 32.7 ms after
    one run and 25.2 after the other, minutes apart). With several seeds the verdict
    compares the medians of the weighted totals.
    """
    from benchmarks import harness
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
                harness.wait_until_quiet(ctx.quiet_wait_s)
            search_before = _search_cpu()
            before = harness.cpu_snapshot()
            start = time.perf_counter()
            try:
                outcomes = _tune_arm(arm, ctx, tasks, per_task, seed, pool)
                seconds = time.perf_counter() - start
                helped = _pool_cpu(pool) + max(0.0, _search_cpu() - search_before)
            finally:
                pool.close()
            after = harness.cpu_snapshot()
            load = harness.others_load(before, _add_own(after, helped) if after else None)
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
                    "contended": harness.is_contended(load),
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
        out[f"{arm}_weighted_ms"] = _median_or_none(out[f"{arm}_weighted_by_seed"])
    g, base = out["gradient_weighted_ms"], out["independent_weighted_ms"]
    out["met"] = None if g is None or base is None else g < base
    return out


# -- the run ------------------------------------------------------------------------------------


def run(
    *,
    trials: int = 256,
    quick: bool = False,
    only: Sequence[str] | None = None,
    extras: Sequence[str] = (),
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
    log: Callable[[str], None] = print,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows (one per workload) and ``{"tune": ...}`` with the extras and the settings.

    Without `main` the workloads are not tuned one by one (no rows): only the
    extras that need no main run (``scheduler``) run. With `with_tvm`, TVM
    MetaSchedule tunes each workload first (or its cached records are used,
    ``benchmarks.tvm_ref``) and its best kernel joins the final timing.
    """
    workloads = select(quick=quick, only=only)
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
        },
        "usable_cores": len(os.sched_getaffinity(0)),
        "tvm": None,
        "extras": {},
        "not_done": [e for e in EXTRAS if e not in extras],
    }
    if with_tvm and main:
        from benchmarks import tvm_ref

        extra["tvm"] = {
            "versions": tvm_ref.require_tvm(),
            "target": tvm_ref.host_target(),
            "cache_dir": _shown_path(tvm_cache_dir or tvm_ref.CACHE_DIR),
            "time_limit_s": tvm_time_limit_s or tvm_ref.DEFAULT_TIME_LIMIT_S,
            "retune": tvm_retune,
        }
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loomtune-tune-") as tmp:
        ctx = Context(
            Path(tmp), seed, quiet_wait_s, measure, log, with_torch, 0.0 if quick else ROUND_PAUSE_S
        )
        db_files: dict[str, Path] = {}
        for w in workloads if main else ():
            task = w.task()
            db_files[w.name] = ctx.folder / f"{len(db_files)}-{task.op}.sqlite"
            tvm_meta, tvm_factory = None, None
            if extra["tvm"] is not None:
                tvm_meta, tvm_factory = tvm_reference(
                    w, trials, seed, extra["tvm"], tvm_cache_dir, tvm_retune, log
                )
            log(f"tuning {w.name} ({trials} trials)")
            row = tune_one(
                ctx,
                task,
                trials=trials,
                strategy=strategy,
                db_file=db_files[w.name],
                label=w.name,
                tvm=tvm_factory,
            )
            row["weight"] = w.weight
            if tvm_meta is not None:
                row["tvm"] = tvm_row(tvm_meta, trials)
                row["tvm_goal"] = tvm_goal(row)
            rows.append(row)
        seeds = [seed + i for i in range(max(1, evo_seeds))]
        if "evo_replay" in extras and workloads:
            n = min(replay_trials, trials)
            # The main run's curves stand for seed `seed`'s evolutionary runs (when evolutionary).
            main_rows = rows if rows and strategy == "evolutionary" else None
            extra["extras"]["evo_replay"] = evo_replay_all(ctx, workloads, main_rows, n, seeds)
        if "reuse" in extras:
            source = next(
                (w for w in workloads if w.op == "matmul" and w.params == REUSE_FROM and main), None
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


# -- TVM MetaSchedule beside loomtune -------------------------------------------------------


def _shown_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path(__file__).resolve().parent.parent))
    except ValueError:
        return str(path)


def tvm_reference(
    w: Workload,
    trials: int,
    seed: int,
    settings: dict[str, Any],
    cache_dir: Path | None,
    retune: bool,
    log: Callable[[str], None],
) -> tuple[dict[str, Any], TVMFactory]:
    """TVM's tuning of `w` (now, or its cached run) and a factory of its best kernel."""
    import functools

    from benchmarks import tvm_ref

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
    meta = {**meta, "folder": _shown_path(folder)}
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
    """Issue 13's goal against TVM: a faster final kernel in at most half TVM's tuning time.

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


# -- report ------------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


# Issue 13's acceptance, per workload: (op, params) -> (ratio to numpy, after how many
# trials (None: the final kernel), most seconds of tuning (None: no limit)).
GOALS: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[float, int | None, float | None]] = {
    ("matmul", (("k", 1024), ("m", 1024), ("n", 1024))): (0.9, None, None),
    ("matmul", (("k", 512), ("m", 512), ("n", 512))): (0.7, 64, None),
    ("dense", (("bias", 1), ("k", 768), ("m", 128), ("n", 3072), ("relu", 1))): (1.2, None, None),
    ("conv2d_nhwc", tuple(sorted(SUITE[3].params.items()))): (2.0, None, None),
    ("batch_matmul", (("b", 12), ("k", 64), ("m", 128), ("n", 128))): (1.0, None, None),
    ("softmax", (("m", 4096), ("n", 1024))): (3.0, None, 600.0),
}


def goal_cell(row: dict[str, Any], peak_gflops: float | None = None) -> str:
    """The issue's goal for the row's workload and whether this run met it.

    A goal "after N trials" divides the final run's numpy time by the best
    measured while tuning after N trials (the only time there is for it). With
    the core's FMA peak measured, a goal that is not met says what fraction of
    the peak it asks for: above about 90%, no kernel gets there.
    """
    goal = GOALS.get((row["op"], tuple(sorted(row["params"].items()))))
    if goal is None:
        return "–"
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
        return text + " (–)"
    met = value >= ratio and (max_s is None or row["tune_s"] <= max_s)
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
    peak = result.get("peak_gflops")
    if peak:
        headers += ["% of peak"]
    if tune.get("torch"):
        headers += ["torch ms", "× torch"]
    if tune.get("tvm"):
        headers += ["TVM ms", "TVM × numpy", "TVM tuning s", "vs TVM: faster in ≤ ½ its time"]
    headers += ["correct", "issue 13 goal"]
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
        if peak:
            fraction = roofline.peak_fraction(r.get("gflops"), peak)
            cells.append("–" if fraction is None else f"{fraction:.0%}")
        if tune.get("torch"):
            cells += [fmt(r["torch_ms"]), fmt(r["ratio_torch"])]
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
        f"workloads (same shapes, layouts and float32; TE definitions in `benchmarks/tvm_ref.py`), "
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


def extras_table(result: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    ex = result["tune"].get("extras") or {}
    rows = []
    rows += evo_replay_rows(ex, result["seed"])
    if "reuse" in ex:
        e = ex["reuse"]
        seeds = e.get("seeds") or [result["seed"]]
        if e.get("verdict_on") == "head_to_head":
            duels = ", ".join(
                f"{fmt(d['warm_ms'])} vs {fmt(d['cold_ms'])}" if d else "no kernel"
                for d in e["head_to_head"]
            )
            per_seed = ", ".join(
                f"{fmt(w)} vs {fmt(c)}" for w, c in zip(e["warm_by_seed"], e["cold_by_seed"])
            )
            shown = (
                f"head to head (both best kernels timed in one call), median cold/warm over {len(seeds)} "
                f"seed(s): {fmt(e['cold_over_warm'])} (per seed, ms: {duels}); best while tuning, "
                f"median: {fmt(e['warm_best_ms'])} vs {fmt(e['cold_best_ms'])} ms (per seed: {per_seed})"
            )
        elif len(seeds) > 1:
            per_seed = ", ".join(
                f"{fmt(w)} vs {fmt(c)}" for w, c in zip(e["warm_by_seed"], e["cold_by_seed"])
            )
            finals = ", ".join(
                f"{fmt(w)} vs {fmt(c)}"
                for w, c in zip(e["warm_final_by_seed"], e["cold_final_by_seed"])
            )
            shown = (
                f"median of {len(seeds)} seeds: {fmt(e['warm_best_ms'])} ms vs {fmt(e['cold_best_ms'])} ms "
                f"(per seed: {per_seed}; re-timed finals: {finals})"
            )
        else:
            shown = (
                f"{fmt(e['warm_best_ms'])} ms vs {fmt(e['cold_best_ms'])} ms "
                f"(final: {fmt(e['warm']['latency_ms'])} vs {fmt(e['cold']['latency_ms'])})"
            )
        rows.append(
            [
                f"matmul 1000³: {e['warm_trials']} trials with 1024³'s records vs {e['cold_trials']} cold",
                shown,
                "met" if e["met"] else "not met",
            ]
        )
    if "scheduler" in ex:
        rows.append(scheduler_row(ex["scheduler"], result["seed"]))
    if not rows:
        return None
    return ["experiment (same run)", "best ms while tuning / latency", "goal"], rows


def scheduler_row(e: dict[str, Any], default_seed: int) -> list[str]:
    """The scheduler extra's row: gradient against its baseline (each workload tuned on its own;
    round-robin over the shared budget in runs before that arm existed), round-robin beside."""
    base = e.get("baseline", "round_robin")
    arms = ["gradient", base] + (["round_robin"] if base != "round_robin" else [])
    names = {"gradient": "gradient", "round_robin": "round-robin", "independent": "each on its own"}
    seeds = e.get("seeds") or [default_seed]
    totals = {a: e.get(f"{a}_weighted_ms", e[a]["weighted_latency_ms"]) for a in arms}
    verdict = "met" if e["met"] else "not met"
    if totals["gradient"] and totals[base]:
        change = totals["gradient"] / totals[base] - 1
        noise = ", within noise" if abs(change) < 0.03 else ""
        verdict += f" ({change:+.1%}{noise})"
    weights = ",".join(f"{w:g}" for w in e["weights"])
    timed = "head-to-head timings" if e.get("verdict_on") == "head_to_head" else "re-timed finals"
    first = f"seed {seeds[0]}: " if len(seeds) > 1 else ""
    described = [
        f"{names[a]} ({first if a == 'gradient' else ''}{'/'.join(str(n) for n in e[a]['trials_per_task'])} trials, "
        f"{e[a]['seconds']:.0f} s)"
        for a in arms
    ]
    label = f"task scheduler, weights {weights}, {e['budget']} trials: " + " vs ".join(
        described[:2]
    )
    if len(arms) > 2:
        label += f"; {described[2]} beside"
    shown = " vs ".join(f"{fmt(totals[a])}" for a in arms) + " ms"
    if len(seeds) > 1:
        per_seed = ", ".join(
            " vs ".join(fmt(v) for v in vals)
            for vals in zip(*(e[f"{a}_weighted_by_seed"] for a in arms))
        )
        shown = f"median of {len(seeds)} seeds: {shown} (weighted totals of the {timed}; per seed: {per_seed})"
    else:
        shown += f" (weighted totals of the {timed})"
    return [label, shown, verdict]


def _verdict(ahead: bool | None) -> str:
    if ahead is None:
        return "–"
    return "evolutionary ahead" if ahead else "replay ahead or tie"


def _evo_replay_value(entry: dict[str, Any], n: int, medians: tuple[float, float]) -> str:
    """The best-while-tuning medians after n trials, and the head-to-head ratio where timed."""
    text = f"{fmt(medians[0])} ms vs {fmt(medians[1])} ms"
    ratio = _duel_ratio_at(entry, n)
    if ratio is not None:
        text += f"; head to head replay / evolutionary {ratio:.3f}"
    return text


def evo_replay_rows(ex: dict[str, Any], seed: int) -> list[list[str]]:
    """The extras table's evolutionary-vs-replay rows: per workload at 64 trials and the
    budget (old single-workload files too), and with the current form a summary row."""
    entries = evo_replay_entries(ex)
    rows = []
    for e in entries:
        seeds = e.get("seeds") or [seed]
        median = f", median of {len(seeds)} seeds" if len(seeds) > 1 else ""
        budget = _medians_at(e, e["trials"]) or (e["evolutionary_ms"], e["replay_ms"])
        rows.append(
            [
                f"evolutionary vs replay, {e['workload']}, {e['trials']} trials{median}",
                _evo_replay_value(e, e["trials"], budget),
                _verdict(_ahead_at(e, e["trials"])),
            ]
        )
        for n in e.get("checkpoints") or {}:
            medians = _medians_at(e, int(n))
            if int(n) in EVO_GOAL_AT and int(n) != e["trials"] and medians is not None:
                rows.append(
                    [
                        f"… the same runs after {n} trials{median}",
                        _evo_replay_value(e, int(n), medians),
                        _verdict(_ahead_at(e, int(n))),
                    ]
                )
    if entries and "workloads" in ex["evo_replay"]:
        seeds = ex["evo_replay"].get("seeds") or [seed]
        over = f"median of {len(seeds)} seeds" if len(seeds) > 1 else f"seed {seeds[0]}"
        ahead = evo_replay_ahead(entries)
        counts = " / ".join(
            f"{a['ahead']} of {a['of']} workloads at {n} trials"
            + (f" ({a['unknown']} without a value)" if a["unknown"] else "")
            for n, a in ahead.items()
        )
        goal = "–"
        if suite_complete(entries):
            verdicts = [
                f"{'met' if ahead[str(n)]['ahead'] >= EVO_GOAL_AHEAD else 'not met'} at {n}"
                if str(n) in ahead
                else f"{n} not run"
                for n in EVO_GOAL_AT
            ]
            goal = f"≥ {EVO_GOAL_AHEAD} of {len(SUITE)}: " + ", ".join(verdicts)
        rows.append([f"evolutionary ahead of replay ({over})", counts, goal])
    return rows


def _tuning_timing(tune: dict[str, Any]) -> str:
    """How candidates were timed while tuning; results from before contenders were re-timed say less."""
    m = tune.get("measure_tuning")
    if m is None:
        return "short repeats"
    more = m["repeat"] + m["confirm_repeat"]
    return (
        f"{m['repeat']} repeats of at least {m['min_repeat_ms']:g} ms, {more} for a contender "
        f"within {m['confirm_within'] - 1:.0%} of the best"
    )


def note(result: dict[str, Any]) -> str:
    tune = result["tune"]
    parts = [
        f"{tune['strategy']} search, {tune['trials']} trials per workload, 1 thread, a fresh SQLite database per "
        f"workload, the local pool of {tune['usable_cores']} one-thread measurement processes. "
        "`best @N`: the best-so-far median after N trials as measured while tuning ("
        + _tuning_timing(tune)
        + "; the other core measuring the next candidate). `final`: the best kernel re-timed in this process, interleaved with "
        "numpy"
        + (f" and PyTorch {tune['torch']} (1 thread)" if tune.get("torch") else "")
        + " in one call"
        + (
            f" ({tune['measure_final']['repeat']} repeats in {tune['measure_final']['rounds']} rounds "
            f"{tune['measure_final']['round_pause_s']:g} s apart, pooled: a slow phase of the machine costs a minority of the samples)"
            if tune.get("measure_final", {}).get("rounds", 1) > 1
            else ""
        )
        + "; × = their time / loomtune's. conv2d's numpy is the library's reference "
        "(sliding windows + tensordot: im2col + GEMM). Tuning s: the whole `tune_task` call; search s: of that, the strategy proposing and learning (the measurement processes wait meanwhile); cand/s: trials / the loop's time.",
    ]
    if result.get("peak_gflops"):
        parts.append(
            f"% of peak: the final kernel's GFLOP/s over one core's FMA peak, {result['peak_gflops']:.0f} GFLOP/s, "
            "measured at the start of this run (`benchmarks/roofline.py`: independent FMA chains on registers)."
        )
    if not tune.get("torch"):
        parts.append("PyTorch was not installed: no PyTorch column.")
    if tune.get("tvm") is None:
        parts.append(
            "TVM MetaSchedule was not run beside loomtune (`--with-tvm` not given): "
            "no TVM column. For orientation only (another machine, not this run): issue 13 quotes "
            "TVM 0.27 at 256 trials on a 2-core Sapphire Rapids VM at 0.67× numpy on matmul 1024³ "
            "(693 s of tuning), 1.17× on dense+bias+relu (391 s), 2.5× numpy's im2col on conv2d "
            "(473 s), 1.15× on batch_matmul (323 s), and no softmax within 10 minutes."
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
            (None, main_table(result), "\n\n".join(n for n in (note(result), footnote) if n))
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
        entries = evo_replay_entries(ex)
        if any(e.get("verdict_on") == "head_to_head" for e in entries):
            how = (
                "Ahead: per seed, the kernels that were each run's best after that many trials are "
                "verified and timed interleaved in one call (pooled rounds, numpy beside); the "
                "evolutionary search is ahead where the median over the seeds of replay / "
                "evolutionary is above 1. The best while tuning is the minimum of short timings "
                "taken minutes apart on a VM whose speed drifts; it is shown beside."
            )
        else:
            how = "Ahead: the evolutionary median strictly below replay's."
        parts.append(
            "Evolutionary vs replay: best-so-far medians as the pool measured them while tuning, "
            "each run in a fresh database; with several seeds, the median over them (a run whose "
            f"design space ran out before a checkpoint counts with its last best). {how} The goal "
            f"(issue 13) is ahead on at least {EVO_GOAL_AHEAD} of the {len(SUITE)} suite workloads at "
            + " and ".join(str(n) for n in EVO_GOAL_AT)
            + " trials."
        )
    if "reuse" in ex:
        if ex["reuse"].get("verdict_on") == "head_to_head":
            parts.append(
                "Reuse: per seed, the warm and the cold run's best kernels are verified and timed "
                "interleaved in one call; the verdict is the median over the seeds of cold / warm "
                "(met: ≥ 1, the warm kernel at least as fast). The best while tuning is the minimum "
                "over short noisy timings and favours the run with 4× the trials; it is shown beside. "
                f"Seeds {', '.join(map(str, ex['reuse']['seeds']))}; the curves of the first seed."
            )
        else:
            parts.append(
                "Reuse: best while tuning, then (final) both best kernels re-timed interleaved with numpy"
                + (
                    f"; seeds {', '.join(map(str, ex['reuse']['seeds']))}, the verdict on the medians of the best "
                    "while tuning, the curves of the first seed."
                    if len(ex["reuse"].get("seeds") or []) > 1
                    else "."
                )
            )
    if "scheduler" in ex:
        e = ex["scheduler"]
        arms = [a for a in SCHEDULER_ARMS if a in e]
        contended = [a for a in arms if any(r["contended"] for r in e.get(f"{a}_runs", [e[a]]))]
        seeds = e.get("seeds") or []
        timing = (
            "sum(weight × latency), each workload's best kernels timed head to head (interleaved "
            "in one call, pooled rounds) once every arm has tuned. "
            if e.get("verdict_on") == "head_to_head"
            else "sum(weight × final latency), the final kernels re-timed in this process as in the main table. "
        )
        if e.get("baseline") == "independent":
            baseline = (
                f"The baseline is {e['per_task']} trials each, every workload tuned on its own in a fresh "
                "database with a search and cost model of its own; the shared-budget arms (gradient, "
                "round-robin) run in one fresh database and pool, their searches sharing one cost model "
                "and, between shapes of one operator (matmul 512³ and 1024³), each other's bests as seeds. "
                "Round-robin gives equal shares (a workload whose space runs out leaves its share to the "
                "others): gradient vs round-robin is what the policy wins, round-robin vs each on its own "
                "what sharing the model and the bests wins."
            )
        else:
            baseline = (
                "Each policy in a fresh database with one pool. The equal-shares baseline is round-robin "
                "over the same budget: a workload whose space runs out (softmax) leaves its share to the "
                f"others, so they get more than {e['per_task']} each."
            )
        parts.append(
            "Task scheduler: the weighted total is "
            + timing
            + baseline
            + (
                f" Seeds {', '.join(map(str, seeds))}, the arms alternating seed by seed; the verdict "
                "compares the medians."
                if len(seeds) > 1
                else ""
            )
            + (f" Contended (> 10% others) during: {', '.join(contended)}." if contended else "")
        )
    return " ".join(parts) or None


# -- the PNG -------------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Best-so-far curves (GFLOP/s while tuning per trial), one panel per workload; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = result["rows"]
    ex = result["tune"].get("extras") or {}
    evo_entries = evo_replay_entries(ex)
    replay_of = {e["workload"]: e for e in evo_entries}
    # A panel of each seed's curves per workload, where there are several or no main run.
    seed_panels = [
        e for e in evo_entries if e.get("per_seed") and (len(e["per_seed"]) > 1 or not rows)
    ]
    panels = len(rows) + (1 if "reuse" in ex else 0) + len(seed_panels)
    if not panels:
        return None
    cols = 3 if panels > 2 else max(1, panels)
    nrows = max(1, -(-panels // cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    flat = [ax for line in axes for ax in line]

    from matplotlib.ticker import FormatStrFormatter

    def axes_style(ax: Any, title: str) -> None:
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("trial")
        ax.set_xscale("log", base=2)
        ax.set_ylabel("best ms (lower is better)")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FormatStrFormatter("%d"))
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
        ax.tick_params(axis="y", which="minor", labelsize=6)
        ax.legend(fontsize=7)

    def curve(ax: Any, row: dict[str, Any], label: str, style: str = "-") -> None:
        h = row["history_ms"]
        xs = [i + 1 for i, v in enumerate(h) if v is not None]
        ys = [v for v in h if v is not None]
        ax.plot(xs, ys, style, label=label)

    for ax, row in zip(flat, rows):
        curve(ax, row, f"loomtune {row['strategy']}")
        if row.get("tvm") and any(v is not None for v in row["tvm"]["history_ms"]):
            curve(
                ax,
                row["tvm"],
                "TVM MetaSchedule" + (" (cached run)" if row["tvm"]["cached"] else ""),
                "-",
            )
            if row.get("tvm_ms"):
                ax.plot(
                    [row["tvm"]["trials_done"]], [row["tvm_ms"]], "s", label="TVM final, re-timed"
                )
        if row["case"] in replay_of and replay_of[row["case"]].get("replay"):
            curve(ax, replay_of[row["case"]]["replay"], "loomtune replay", "--")
        for name, key, style in (("numpy", "numpy_ms", ":"), ("PyTorch", "torch_ms", "-.")):
            if row.get(key):
                ax.axhline(
                    row[key],
                    linestyle=style,
                    color="gray" if name == "numpy" else "black",
                    label=f"{name} (final run)",
                )
        if row.get("latency_ms"):
            ax.plot(
                [row["trials_done"]], [row["latency_ms"]], "o", label="loomtune final, re-timed"
            )
        axes_style(ax, row["case"])
    if "reuse" in ex:
        ax = flat[len(rows)]
        curve(ax, ex["reuse"]["cold"], f"cold ({ex['reuse']['cold_trials']} trials)")
        curve(ax, ex["reuse"]["warm"], f"with 1024³'s records ({ex['reuse']['warm_trials']})")
        axes_style(ax, "matmul 1000³: reuse across shapes")
    for j, e in enumerate(seed_panels):
        ax = flat[len(rows) + (1 if "reuse" in ex else 0) + j]
        for i, p in enumerate(e["per_seed"]):
            color = f"C{i}"
            evo = p.get("evolutionary")
            if evo is None:  # the main run's curve, cut at the budget
                main = next((r for r in rows if r["case"] == e["workload"]), None)
                evo = {"history_ms": main["history_ms"][: e["trials"]]} if main else None
            if evo is not None:
                xs, ys = _points(evo["history_ms"])
                ax.plot(xs, ys, "-", color=color, label=f"evolutionary, seed {p['seed']}")
            xs, ys = _points(p["replay"]["history_ms"])
            ax.plot(xs, ys, "--", color=color, label=f"replay, seed {p['seed']}")
        axes_style(ax, f"{e['workload']}: evolutionary vs replay")
    for ax in flat[panels:]:
        ax.axis("off")
    fig.suptitle(f"loomtune tuning curves, 1 thread ({result['utc']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _points(history: Sequence[float | None]) -> tuple[list[int], list[float]]:
    xs = [i + 1 for i, v in enumerate(history) if v is not None]
    return xs, [v for v in history if v is not None]


# -- one result file ------------------------------------------------------------------------------


def run_and_write(
    *,
    out_dir: Path,
    command: str = "",
    environment: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    suite: str | None = None,
    **kwargs: Any,
) -> tuple[dict[str, Any], Path]:
    """Run the benchmark; write ``tune-<UTC>.json`` and the PNG of the same stem; (result, path)."""
    import dataclasses

    from benchmarks import harness
    from workers.machine import machine_info

    started = harness.utc_now()
    wall = time.perf_counter()
    peak = roofline.fma_peak_gflops()
    before = harness.cpu_snapshot()
    rows, extra = run(log=log, **kwargs)
    after = harness.cpu_snapshot()
    helped = sum(
        (r.get("pool_cpu_s") or 0.0) + (r.get("search_cpu_s") or 0.0)
        for r in _all_rows(rows, extra["tune"])
    )
    if after is not None:
        after = dataclasses.replace(after, own=after.own + helped)
    result: dict[str, Any] = {
        "format": harness.FORMAT,
        "suite": suite or ("tune" if kwargs.get("main", True) else "tune_extras"),
        "kind": "tune",
        "description": "tuning to the best kernel: best-so-far per trial, tuning time, the final kernel "
        + (
            "against numpy, PyTorch and TVM MetaSchedule (tuned for the same trials), 1 thread"
            if kwargs.get("with_tvm")
            else "against numpy and PyTorch, 1 thread"
        )
        if kwargs.get("main", True)
        else "the tuning benchmark's extras on their own ("
        + ", ".join(kwargs.get("extras") or ())
        + "), 1 thread",
        "quick": bool(kwargs.get("quick")),
        "command": command,
        "seed": kwargs.get("seed", 0),
        "utc": started.isoformat().replace("+00:00", "Z"),
        "wall_s": 0.0,
        "machine": machine_info().to_dict(),
        "target": host_target().canonical(),
        "peak_gflops": peak,
        "loomtune_version": importlib.metadata.version("loomtune"),
        "environment": environment or {},
        "measure": extra["tune"]["measure_final"],
        "quiet_wait_s": kwargs.get("quiet_wait_s", 0.0),
        "contended_threshold": harness.CONTENDED,
        "others_load": harness.others_load(before, after),
        "first_compile_ms": None,
        "rows": rows,
        "scaling": [],
        **extra,
    }
    result["wall_s"] = time.perf_counter() - wall
    path = harness.write_result(result, out_dir, started)
    png = plot(result, path.with_suffix(".png"))
    if png is not None:
        result["tune"]["plot"] = png.name
        path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return result, path


def _all_rows(rows: Sequence[dict[str, Any]], tune: dict[str, Any]) -> list[dict[str, Any]]:
    out = list(rows)
    ex = tune.get("extras") or {}
    for e in evo_replay_entries(ex):
        for p in e.get("per_seed") or [{"replay": e["replay"]}]:
            out += [r for r in (p.get("evolutionary"), p["replay"]) if r is not None]
    if "reuse" in ex:
        for p in ex["reuse"].get("per_seed") or [ex["reuse"]]:
            out += [p["warm"], p["cold"]]
    if "scheduler" in ex:
        e = ex["scheduler"]
        for arm in SCHEDULER_ARMS:
            if arm in e:
                out += e.get(f"{arm}_runs") or [e[arm]]
    return out
