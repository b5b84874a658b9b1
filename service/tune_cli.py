"""`loomtune tune`: tune on this machine, show progress, then a table, JSON or a plot."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from tuner.database import STATUSES


def add_tune_parser(sub: Any, positive_int: Any) -> None:
    tune = sub.add_parser("tune", help="tune a workload on this machine (local database and worker pool)")
    tune.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    tune.add_argument("--workload", dest="workload_file", metavar="FILE.json", help="custom workload definition")
    tune.add_argument("--tasks", metavar="FILE.json", help="several weighted workloads sharing one budget")
    tune.add_argument("--trials", type=positive_int, default=64, metavar="N", help="new measurements this run (default 64)")
    tune.add_argument("--threads", type=positive_int, default=1, metavar="N", help="threads (default 1)")
    tune.add_argument("--strategy", metavar="S", help="evolutionary | replay (default: the best available)")
    tune.add_argument("--seed", type=int, default=0, metavar="S", help="random seed of the search (default 0)")
    tune.add_argument("--plot", metavar="FILE.png", help="write the tuning curve (best so far vs trials)")
    tune.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_tune(args: argparse.Namespace) -> int:
    from ir.task import gflops
    from service.cli import EXIT_INCORRECT, UsageError, _log, _print_json, resolve_task
    from service.tuning import tune_task
    from tuner.trace.file import TraceFile

    if args.tasks is not None:
        raise UsageError("--tasks (a budget shared by several workloads) is not available yet; tune one workload")
    if args.workload_file is None and not args.workload:
        raise UsageError("name an operator (see `loomtune ops`) or pass --workload FILE.json")
    task = resolve_task(args.workload, args.workload_file)
    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot writes a PNG file; got {args.plot!r}")
    _log(f"tuning {task.op} {' '.join(f'{k}={v}' for k, v in task.params.items())}: {args.trials} trials, "
         f"{args.threads} thread(s)")  # fmt: skip
    with _progress(args.trials) as on_trial:
        outcome = tune_task(
            task, threads=args.threads, trials=args.trials, strategy=args.strategy, seed=args.seed,
            on_trial=on_trial,
        )  # fmt: skip
    run = outcome.run
    if run.interrupted or run.exhausted:
        _log(f"stopped: {run.stop_reason}")
    cmp = outcome.comparison
    correct = bool(cmp and cmp.correct)
    failures = Counter({s: 0 for s in STATUSES if s != "ok"})
    failures.update(run.failures)
    result: dict[str, Any] = {
        "op": task.op,
        "params": task.params,
        "workload_key": task.key,
        "target": outcome.target.canonical(),
        "threads": args.threads,
        "strategy": outcome.strategy,
        "correct": correct,
        "latency_ms": cmp.latency_ms if correct and cmp else None,
        "gflops": gflops(task.flops, cmp.latency_ms) if correct and cmp and cmp.latency_ms else None,
        "numpy_ms": cmp.numpy_ms if correct and cmp else None,
        "speedup_vs_numpy": cmp.numpy_ms / cmp.latency_ms if correct and cmp and cmp.latency_ms and cmp.numpy_ms else None,
        "trials": args.trials,
        "trials_done": run.trials_done,
        "tuning_seconds": run.seconds,
        "stop_reason": run.stop_reason,
        "best_trace": (
            TraceFile.for_task(task, outcome.best.target, outcome.best_trace).to_json()
            if outcome.best is not None and outcome.best_trace is not None
            else None
        ),
        "best_record_ms": outcome.best.median_ms if outcome.best is not None else None,
        "history": list(run.history),
        "failures": dict(failures),
    }
    if outcome.best is None:
        result["error"] = "no candidate measured correct"
    elif cmp is not None and not cmp.correct:
        result["error"] = cmp.message
    if args.plot is not None:
        write_plot(args.plot, run.history, result["numpy_ms"], f"{task.op} {_params(task.params)}")
        _log(f"wrote {args.plot}")
    if args.json:
        _print_json(result)
    else:
        _print_table(result)
    if not correct:
        _log(f"loomtune: {result.get('error', 'no correct kernel')}")
        return EXIT_INCORRECT
    return 0


def _params(params: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


class _progress:
    """A rich progress bar on stderr when it is a terminal; otherwise nothing."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.progress: Any = None

    def __enter__(self):
        if not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("tuning"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(), console=Console(stderr=True), transient=False,
        )  # fmt: skip
        self.progress.start()
        bar = self.progress.add_task("tune", total=self.total, best="best: -")

        def on_trial(trial: Any) -> None:
            best = f"best: {trial.best_ms:.4f} ms" if trial.best_ms is not None else "best: -"
            self.progress.update(bar, completed=trial.index, best=best)

        return on_trial

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


def write_plot(path: str, history: list[float | None], numpy_ms: float | None, title: str) -> None:
    """Best-so-far latency against trials, with numpy's time as a line beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    xs = [i + 1 for i, v in enumerate(history) if v is not None]
    ys = [v for v in history if v is not None]
    ax.step(xs, ys, where="post", label="loomtune best so far")
    if numpy_ms is not None:
        ax.axhline(numpy_ms, color="tab:red", linestyle="--", label=f"numpy ({numpy_ms:.4f} ms)")
    ax.set_xlabel("trials")
    ax.set_ylabel("latency (ms)")
    ax.set_title(title)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        from service.cli import UsageError

        raise UsageError(f"cannot write {path}: {e.strerror}") from None
    finally:
        plt.close(fig)


def _print_table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{r['op']} {_params(r['params'])} — {r['trials_done']} trials in {r['tuning_seconds']:.1f} s")
    for col in ("", "latency (ms)", "GFLOP/s", "vs numpy"):
        table.add_column(col, justify="right")
    if r["correct"]:
        g = f"{r['gflops']:.2f}" if r["gflops"] is not None else "-"
        table.add_row("loomtune (best)", f"{r['latency_ms']:.4f}", g, f"{r['speedup_vs_numpy']:.2f}x")
        table.add_row("numpy", f"{r['numpy_ms']:.4f}", "", "1.00x")
    else:
        table.add_row("loomtune", "no correct kernel", "", "")
    Console(stderr=False).print(table)
    failed = ", ".join(f"{k} {v}" for k, v in r["failures"].items() if v) or "none"
    print(f"trials: {r['trials_done']} of {r['trials']} ({r['stop_reason']}); failures: {failed}")
    print(f"strategy: {r['strategy']}  threads: {r['threads']}  target: {r['target']}")
