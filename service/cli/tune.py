"""`loomtune tune`: tune on this machine, show progress, then a table, JSON or a plot."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from service.cli.baseline import vs_text, with_baseline
from service.cli.common import (
    EXIT_INCORRECT,
    EXIT_INTERRUPTED,
    StopNow,
    UsageError,
    check_strategy,
    log,
    params_text,
    positive_float,
    positive_int,
    print_json,
    resolve_task,
    warn_oversubscribed,
)
from service.cli.jobs import short_target  # the display form `jobs` prints
from tuner.database import STATUSES


def add_tune_parser(sub: Any) -> None:
    tune = sub.add_parser(
        "tune", help="tune a workload on this machine (local database and worker pool)"
    )
    tune.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    tune.add_argument(
        "--workload", dest="workload_file", metavar="FILE.json", help="custom workload definition"
    )
    tune.add_argument(
        "--tasks", metavar="FILE.json", help="several weighted workloads sharing one budget"
    )
    tune.add_argument(
        "--model", metavar="FILE.onnx", help="a whole ONNX model: its tasks under one budget"
    )
    tune.add_argument(
        "--trials",
        type=positive_int,
        default=64,
        metavar="N",
        help="new measurements this run; with --model, the model's whole budget, stored "
        "trials included (default 64)",
    )
    tune.add_argument(
        "--threads", type=positive_int, default=1, metavar="N", help="threads (default 1)"
    )
    tune.add_argument(
        "--strategy", metavar="S", help="evolutionary | replay (default: the best available)"
    )
    tune.add_argument(
        "--seed", type=int, default=0, metavar="S", help="random seed of the search (default 0)"
    )
    tune.add_argument(
        "--plot", metavar="FILE.png", help="write the tuning curve (best so far vs trials)"
    )
    tune.add_argument(
        "--time-budget",
        type=positive_float,
        metavar="SECONDS",
        help="start no new trial after SECONDS of tuning (the result in hand finishes); "
        "with --model, SECONDS bound the tuning and the finalists' re-times together",
    )
    tune.add_argument(
        "--early-stop",
        type=positive_int,
        metavar="N",
        help="stop after N trials in a row that do not improve the best",
    )
    tune.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_tune(args: argparse.Namespace) -> int:
    from tuner.search.stopping import stopping_rules

    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise UsageError(f"--plot writes a PNG file; got {args.plot!r}")
    check_strategy(args.strategy)
    if args.model is not None:
        if args.workload or args.workload_file or args.tasks:
            raise UsageError("tune: give an operator, --workload, --tasks or --model, not several")
        if args.plot is not None:
            raise UsageError("tune: --plot goes with a workload or --tasks, not --model")
        from service.cli.model import cmd_tune_model

        warn_oversubscribed(args.threads)
        return cmd_tune_model(args)
    if args.tasks is not None:
        if args.workload or args.workload_file:
            raise UsageError("--tasks names its workloads itself; do not also name one")
        return _cmd_tune_tasks(args)
    if args.workload_file is None and not args.workload:
        raise UsageError("name an operator (see `loomtune ops`) or pass --workload FILE.json")
    task = resolve_task(args.workload, args.workload_file)
    warn_oversubscribed(args.threads)
    log(
        f"tuning {task.op} {params_text(task.params)}: {args.trials} trials, {args.threads} thread(s)"
    )
    with (
        _progress(args.trials) as on_trial,
        graceful_interrupt() as should_stop,
        _measurement(args) as runner,
    ):
        from service.tuning import tune_task

        outcome = tune_task(
            task,
            threads=args.threads,
            trials=args.trials,
            strategy=args.strategy,
            seed=args.seed,
            runner=runner,
            on_trial=on_trial,
            should_stop=should_stop,
            stop_rule=stopping_rules(args.time_budget, args.early_stop),
            compare=False,  # below, once the measurement processes are gone
        )
    compare_final(outcome, args.trials)
    if outcome.run.interrupted or outcome.run.exhausted or outcome.run.stopped_by:
        log(f"stopped: {outcome.run.stop_reason}")
    result = tune_result(outcome, args.trials)
    if args.plot is not None:
        write_plot(
            args.plot,
            outcome.run.history,
            result["numpy_ms"],
            f"{task.op} {params_text(task.params)}",
        )
        log(f"wrote {args.plot}")
    if args.json:
        print_json(result)
    else:
        _print_table(result)
    if outcome.run.interrupted:
        return EXIT_INTERRUPTED
    if not result["correct"]:
        log(f"loomtune: {result.get('error', 'no correct kernel')}")
        return EXIT_INCORRECT
    return 0


QUICK_LOOK_TRIALS = 32
"""A budget under this many trials is a quick look: at one thread its final comparison
with numpy takes repeats of 40 ms, not 100 (`workers.compare.COMPARE_CONFIG`, whose long
repeats are for several threads' wake-ups), about 0.8 s less of a short tune."""


def compare_final(outcome: Any, trials: int) -> None:
    """Verify the best kernel and time it against numpy, interleaved: `tune_task`'s `compare`,
    with a quick look's shorter repeats."""
    from workers.compare import compare_with_numpy
    from workers.timing import MeasureConfig

    if outcome.kernel is None:
        return
    threads = outcome.target.num_threads
    quick = trials < QUICK_LOOK_TRIALS and threads == 1
    outcome.comparison = compare_with_numpy(
        outcome.kernel,
        outcome.task,
        threads=threads,
        config=MeasureConfig(min_repeat_ms=40.0) if quick else None,
    )


def tune_result(outcome: Any, trials: int) -> dict[str, Any]:
    """One workload's `tune --json` object (DESIGN.md's fields)."""
    from ir.task import gflops
    from tuner.trace.file import TraceFile

    task, run, cmp = outcome.task, outcome.run, outcome.comparison
    correct = bool(cmp and cmp.correct)
    latency = cmp.latency_ms if correct and cmp else None
    numpy_ms = cmp.numpy_ms if correct and cmp else None
    failures = Counter({s: 0 for s in STATUSES if s != "ok"})
    failures.update(run.failures)
    result: dict[str, Any] = {
        "op": task.op,
        "params": task.params,
        "workload_key": task.key,
        "target": outcome.target.canonical(),
        "threads": outcome.target.num_threads,
        "strategy": outcome.strategy,
        "correct": correct,
        "latency_ms": latency,
        "gflops": gflops(task.flops, latency) if latency else None,
        "numpy_ms": numpy_ms,
        "speedup_vs_numpy": numpy_ms / latency if latency and numpy_ms else None,
        "trials": trials,
        "trials_done": run.trials_done,
        "tuning_seconds": run.seconds,
        "stop_reason": run.stop_reason,
        "best_trace": (
            TraceFile.for_task(task, outcome.best.target, outcome.best_trace).to_json()
            if outcome.best is not None and outcome.best_trace is not None
            else None
        ),
        "best_record_ms": outcome.best.median_ms if outcome.best is not None else None,
        "finalists": [_finalist(f) for f in getattr(outcome, "finalists", ())],
        "history": list(run.history),
        "failures": dict(failures),
    }
    with_baseline(result, task)
    if outcome.best is None:
        result["error"] = "no candidate measured correct"
    elif cmp is not None and not cmp.correct:
        result["error"] = cmp.message
    return result


def _finalist(f: Any) -> dict[str, Any]:
    """A finalist's record, its tuning median and its re-timed median (workers/finalists.py)."""
    out = {
        "record_id": f.record.record_id,
        "tuning_ms": f.record.median_ms,
        "retimed_ms": f.retimed_ms,
    }
    if f.message:
        out["message"] = f.message
    return out


def load_tasks_file(path: str) -> list[tuple[Any, float]]:
    """`{"tasks": [{"op", "params", "weight"} | {"definition", "params", "weight"}, ...]}`."""
    import json
    from pathlib import Path

    from ir.errors import LoomtuneError, WorkloadError
    from ir.task import task_from_spec

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise WorkloadError(f"cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WorkloadError(f"{path}: not valid JSON ({e})") from None
    entries = data.get("tasks") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise WorkloadError(f'{path}: expected {{"tasks": [...]}} with at least one workload')
    tasks = []
    for i, entry in enumerate(entries):
        where = f"{path}: tasks[{i}]"
        if not isinstance(entry, dict):
            raise WorkloadError(f"{where}: expected an object")
        weight = entry.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise WorkloadError(f"{where}.weight: expected a positive number, got {weight!r}")
        spec = {k: v for k, v in entry.items() if k != "weight"}
        try:
            tasks.append((task_from_spec(spec), float(weight)))
        except LoomtuneError as e:
            raise WorkloadError(f"{where}: {e}") from None
    return tasks


def _cmd_tune_tasks(args: argparse.Namespace) -> int:
    from tuner.search.stopping import stopping_rules

    tasks = load_tasks_file(args.tasks)
    warn_oversubscribed(args.threads)
    log(
        f"tuning {len(tasks)} workloads under one budget of {args.trials} trials, {args.threads} thread(s)"
    )
    with (
        _progress(args.trials) as on_trial,
        graceful_interrupt() as should_stop,
        _measurement(args) as runner,
    ):
        from service.tuning import tune_tasks

        outcome = tune_tasks(
            tasks,
            threads=args.threads,
            trials=args.trials,
            strategy=args.strategy,
            seed=args.seed,
            runner=runner,
            on_trial=on_trial,
            should_stop=should_stop,
            stop_rule=stopping_rules(args.time_budget, args.early_stop),
            compare=False,
        )
    for o in outcome.outcomes:
        compare_final(o, args.trials)
    results = [tune_result(o, o.run.trials_done) for o in outcome.outcomes]
    for r, (_, w) in zip(results, tasks):
        r["weight"] = w
    combined = {"tasks": results, "weighted_latency_ms": outcome.weighted_latency_ms}
    if args.plot is not None:
        write_plots(args.plot, results)
        log(f"wrote {args.plot}")
    if args.json:
        print_json(combined)
    else:
        for r in results:
            _print_table(r)
        total = outcome.weighted_latency_ms
        print(
            f"weighted latency: {total:.4f} ms"
            if total is not None
            else "weighted latency: - (a workload has no correct kernel)"
        )
    if any(o.run.interrupted for o in outcome.outcomes):
        return EXIT_INTERRUPTED
    if not all(r["correct"] for r in results):
        log("loomtune: a workload has no correct kernel")
        return EXIT_INCORRECT
    return 0


@contextmanager
def _measurement(args: argparse.Namespace) -> Iterator[Any]:
    """The measurement processes and the search's helper processes, started before the
    tuner's own imports and the database: their start-up (each imports numpy and llvmlite)
    then overlaps this process's instead of following it."""
    from tuner.search.pool import start_helpers
    from tuner.search.strategy import default_strategy
    from workers.pool import LocalPool

    if (args.strategy or default_strategy()) == "evolutionary":  # the one with helpers
        start_helpers()
    with LocalPool(threads=args.threads) as pool:
        yield pool


class graceful_interrupt:
    """The first Ctrl-C asks the tuning loop to stop after the result in hand
    (`should_stop`); a second one raises `StopNow` and the command ends at once.

    The search and measurement processes run in their own sessions and never see
    the terminal's SIGINT: the stop is the tuner's alone, so none prints a traceback.
    """

    def __init__(self) -> None:
        import threading

        self.event = threading.Event()
        self._previous: Any = None

    def __enter__(self) -> Any:
        import signal

        def second(_signum: int, _frame: Any) -> None:
            raise StopNow

        def first(_signum: int, _frame: Any) -> None:
            self.event.set()
            signal.signal(signal.SIGINT, second)

        self._previous = signal.signal(signal.SIGINT, first)
        return self.event.is_set

    def __exit__(self, *exc: object) -> None:
        import signal

        # A Ctrl-C after tuning (re-timing, the numpy comparison) still ends at once.
        signal.signal(signal.SIGINT, self._previous if not self.event.is_set() else _stop_now)


def _stop_now(_signum: int, _frame: Any) -> None:
    raise StopNow


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
            TextColumn("tuning"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
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
        raise UsageError(f"cannot write {path}: {e.strerror}") from None
    finally:
        plt.close(fig)


def write_plots(path: str, results: list[dict[str, Any]]) -> None:
    """One tuning curve per workload, each relative to its numpy time, on one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for r in results:
        pts = [
            (i + 1, r["numpy_ms"] / v)
            for i, v in enumerate(r["history"])
            if v is not None and r["numpy_ms"]
        ]
        if pts:
            ax.step(
                [p[0] for p in pts],
                [p[1] for p in pts],
                where="post",
                label=f"{r['op']} (w={r['weight']:g})",
            )
    ax.axhline(1.0, color="tab:red", linestyle="--", label="numpy")
    ax.set_xlabel("trials of that workload")
    ax.set_ylabel("speed vs numpy (higher is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from None
    finally:
        plt.close(fig)


def _print_table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{r['op']} {params_text(r['params'])} — {r['trials_done']} trials in {r['tuning_seconds']:.1f} s"
    )
    for col in ("", "latency (ms)", "GFLOP/s", f"vs {r['baseline']}"):
        table.add_column(col, justify="right")
    if r["correct"]:
        g = f"{r['gflops']:.2f}" if r["gflops"] is not None else "-"
        table.add_row("loomtune (best)", f"{r['latency_ms']:.4f}", g, vs_text(r))
        table.add_row(r["baseline"], f"{r['numpy_ms']:.4f}", "", "1.00x")
    else:
        table.add_row("loomtune", "no correct kernel", "", "")
    Console(stderr=False).print(table)
    failed = ", ".join(f"{k} {v}" for k, v in r["failures"].items() if v) or "none"
    print(f"trials: {r['trials_done']} of {r['trials']} ({r['stop_reason']}); failures: {failed}")
    print(
        f"strategy: {r['strategy']}  threads: {r['threads']}  target: {short_target(r['target'])}"
    )
