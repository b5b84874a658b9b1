"""`loomtune model inspect FILE.onnx` and `loomtune run --model FILE.onnx`: whole models.

inspect lists a model's distinct tasks (operator or fused pattern, shapes, how often each
runs, its share of the FLOPs, whether a tuned schedule is stored); run compiles the model
with the stored schedules, checks it against the graph's numpy interpreter and (when
installed) ONNX Runtime on seeded inputs, then times it against ONNX Runtime at the same
thread count, interleaved.
"""

from __future__ import annotations

import argparse
from typing import Any

from service.cli.common import (
    EXIT_INCORRECT,
    EXIT_INTERRUPTED,
    Parser,
    log,
    positive_int,
    print_json,
)
from service.cli.jobs import short_target  # the display form `jobs` prints


def add_model_parser(sub: Any) -> None:
    """`model inspect`: the tasks a model is cut into."""
    model = sub.add_parser("model", help="whole models (ONNX): the tasks they are cut into")
    model_sub = model.add_subparsers(dest="model_command", required=True, parser_class=Parser)
    inspect = model_sub.add_parser("inspect", help="a model's distinct tasks")
    inspect.add_argument("file", metavar="FILE.onnx", help="an ONNX model")
    inspect.add_argument(
        "--threads", type=positive_int, default=1, metavar="N", help="threads (default 1)"
    )
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    add_coordinator_options(inspect)


def add_coordinator_options(parser: Any) -> None:
    parser.add_argument(
        "--coordinator",
        metavar="URL",
        help="the schedules a coordinator stores (not the local database)",
    )
    parser.add_argument(
        "--token", metavar="T", help="with --coordinator: API token (default: LOOMTUNE_TOKEN)"
    )


def cmd_model(args: argparse.Namespace) -> int:
    return {"inspect": _inspect}[args.model_command](args)


def _prepare(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, Any]:
    """Graph, plan, target, compiled model and stored schedules of a command's model."""
    from codegen.host import host_target
    from ir.graph.plan import build_plan
    from service.model import compile_model, load_graph, stored_schedules

    graph = load_graph(args.file)
    plan = build_plan(graph)
    target = host_target(args.threads)
    remote = _remote_target(args)
    if getattr(args, "compile", True):
        log(f"compiling {len(plan.tasks)} tasks ({len(plan.steps)} kernel calls) ...")
        model, schedules = compile_model(
            plan, target, coordinator=args.coordinator, token=args.token, remote_target=remote
        )
    else:
        model = None
        lookup = remote if args.coordinator is not None else target.canonical()
        schedules = stored_schedules(plan, lookup, coordinator=args.coordinator, token=args.token)
    for problem in schedules.problems:
        log(f"warning: {problem}")
    return graph, schedules.choose(plan), target, model, schedules


def _remote_target(args: argparse.Namespace) -> str | None:
    if args.coordinator is None:
        return None
    from service.cli.jobs import remote_target

    return remote_target("host", args.threads)


def _tensors(graph: Any, names: list[str]) -> list[dict[str, Any]]:
    return [
        {"name": n, "shape": list(graph.types[n].shape), "dtype": graph.types[n].dtype}
        for n in names
    ]


def _inspect(args: argparse.Namespace) -> int:
    args.compile = False
    graph, plan, target, _, schedules = _prepare(args)
    total = plan.flops or 1
    tasks = []
    for t in plan.tasks:
        wl = t.task.workload
        tasks.append(
            {
                "key": t.task.key,
                "op": t.op,
                "pattern": t.pattern,
                "implementation": t.implementation,
                "alternatives": [name for name, _ in t.alternatives],
                "shapes": [list(x.concrete_shape()) for x in (*wl.inputs, *wl.outputs)],
                "count": t.count,
                "flops_share": t.flops * t.count / total,
                "tuned": schedules.tuned(t.task.key),
            }
        )
    result = {
        "model": str(args.file),
        "model_key": graph.key,
        "inputs": _tensors(graph, list(graph.input_names)),
        "outputs": _tensors(graph, list(graph.outputs)),
        "tasks": tasks,
    }
    if args.json:
        print_json(result)
        return 0
    _print_inspect(result, plan, target)
    return 0


def _print_inspect(result: dict[str, Any], plan: Any, target: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    def sig(ts: list[dict[str, Any]]) -> str:
        return ", ".join(f"{t['name']}{t['shape']} {t['dtype']}" for t in ts)

    print(f"{result['model']}  key {result['model_key'][:16]}")
    print(f"inputs: {sig(result['inputs'])}")
    print(f"outputs: {sig(result['outputs'])}")
    table = Table(title=f"{len(result['tasks'])} tasks, {len(plan.steps)} kernels per inference")
    for col in ("key", "op", "pattern", "shapes", "count", "FLOPs", "tuned"):
        table.add_column(col, justify="right" if col in ("count", "FLOPs") else "left")
    for t in result["tasks"]:
        shapes = " ".join("x".join(map(str, s)) for s in t["shapes"])
        table.add_row(
            t["key"][:12],
            t["op"],
            t["pattern"],
            shapes,
            str(t["count"]),
            f"{100 * t['flops_share']:.1f}%",
            "yes" if t["tuned"] else "-",
        )
    Console(width=160).print(table)
    print(f"arena: {plan.arena_bytes:,} bytes for {plan.stored_bytes:,} bytes of activations")
    print(f"target: {short_target(target.canonical())}")


def cmd_run_model(args: argparse.Namespace) -> int:
    """`run --model`: compile, verify (interpreter and ONNX Runtime), time against ONNX Runtime."""
    from service.model import check_model

    args.file = args.model
    graph, plan, target, model, schedules = _prepare(args)
    log(timing_note())
    check = check_model(args.model, graph, model, args.threads)
    result = run_fields(args.model, graph, plan, target, model, schedules, check)
    if args.json:
        print_json(result)
    else:
        print_run(result)
    return model_exit(check)


def timing_note() -> str:
    import importlib.util

    if importlib.util.find_spec("onnxruntime") is None:
        return "verifying and timing ..."
    return "verifying and timing (interleaved with ONNX Runtime) ..."


def run_fields(
    path: str, graph: Any, plan: Any, target: Any, model: Any, schedules: Any, check: Any
) -> dict[str, Any]:
    """`run --model --json`'s object (DESIGN.md "Models"); `tune --model` extends it."""
    result = {
        "model": str(path),
        "model_key": graph.key,
        "target": target.canonical(),
        "threads": target.num_threads,
        "tasks": len(plan.tasks),
        "tuned_tasks": sum(schedules.tuned(t.task.key) for t in plan.tasks),
        "kernels": model.kernel_calls,
        "correct": check.correct,
        "latency_ms": check.latency_ms,
        "onnxruntime_ms": check.onnxruntime_ms,
        "speedup_vs_onnxruntime": check.speedup_vs_onnxruntime,
        "max_abs_err": check.max_abs_err,
    }
    if check.problem is not None:
        result["error"] = check.problem
    return result


def model_exit(check: Any) -> int:
    """0, or (a wrong model) one line on stderr and exit 1."""
    if check.problem is not None:
        log(f"loomtune: the compiled model is wrong: {check.problem}")
        return EXIT_INCORRECT
    return 0


def print_run(r: dict[str, Any], tasks: int | None = None) -> None:
    """The model's table (loomtune vs ONNX Runtime) and its summary line."""
    from rich.console import Console
    from rich.table import Table

    n = r["tasks"] if tasks is None else tasks
    table = Table(title=f"{r['model']}: {n} tasks, {r['kernels']} kernels")
    for col in ("", "latency (ms)", "vs ONNX Runtime"):
        table.add_column(col, justify="right")
    if r["correct"]:
        speedup = r["speedup_vs_onnxruntime"]
        table.add_row("loomtune", f"{r['latency_ms']:.4f}", f"{speedup:.2f}x" if speedup else "-")
        if r["onnxruntime_ms"] is not None:
            table.add_row("ONNX Runtime", f"{r['onnxruntime_ms']:.4f}", "1.00x")
    else:
        table.add_row("loomtune", "wrong result", "")
    Console().print(table)
    print(
        f"correct: {r['correct']}  max |error|: {r['max_abs_err']:.3g}  tuned tasks: "
        f"{r['tuned_tasks']}/{n}  threads: {r['threads']}  target: {short_target(r['target'])}"
    )


def cmd_tune_model(args: argparse.Namespace) -> int:
    """`tune --model`: the model's tasks under one budget, then the model verified and timed."""
    from service.cli.tune import graceful_interrupt
    from service.tuning import ModelTuning
    from tuner.search.stopping import stopping_rules

    tuning = ModelTuning(
        args.model,
        trials=args.trials,
        threads=args.threads,
        seed=args.seed,
        strategy=args.strategy,
        time_budget_s=args.time_budget,
    )
    spent = sum(t.stored for t in tuning.tasks)
    if tuning.remaining == 0:
        log(f"budget of {args.trials} trials already spent ({spent} stored): nothing to measure")
    else:
        log(
            f"tuning {len(tuning.tasks)} tasks under one budget of {args.trials} trials "
            f"({spent} stored, {tuning.remaining} to measure), {args.threads} thread(s)"
        )
        with _TaskProgress(tuning) as on_trial, graceful_interrupt() as should_stop:
            tuning.tune(
                on_trial=on_trial,
                should_stop=should_stop,
                stop_rule=stopping_rules(None, args.early_stop),
            )
        if tuning.interrupted:
            log("stopped: interrupted; what was measured is stored")
        elif tuning.stopped_by is not None:
            log(f"stopped: {tuning.stopped_by}")
    log(f"compiling {len(tuning.tasks)} tasks with their best schedules; {timing_note()}")
    outcome = tuning.finish()
    for c in tuning.implementation_choices:
        won, lost = (c.challenger, c.reigning) if c.switched else (c.reigning, c.challenger)
        times = sorted((c.reigning_ms, c.challenger_ms))
        log(f"{c.pattern}: {won} in the model, {times[0]:.3g} ms vs {lost} {times[1]:.3g} ms")
    for problem in outcome.schedules.problems:
        log(f"warning: {problem}")
    result = run_fields(
        args.model,
        outcome.graph,
        outcome.plan,
        outcome.target,
        outcome.model,
        outcome.schedules,
        outcome.check,
    )
    result.update(
        trials=outcome.trials,
        trials_done=outcome.trials_done,
        tuning_seconds=outcome.tuning_seconds,
        stop_reason=outcome.stop_reason,
        tasks=[
            {
                "key": t.key,
                "op": t.op,
                "pattern": t.pattern,
                "count": t.count,
                "trials": t.trials,
                "trials_done": t.trials_done,
                "best_ms": t.best_ms,
                "share": t.share,
            }
            for t in outcome.tasks
        ],
    )
    if args.json:
        print_json(result)
    else:
        _print_tuned_tasks(result)
        print_run(result, tasks=len(outcome.tasks))
    if tuning.interrupted:
        return EXIT_INTERRUPTED
    return model_exit(outcome.check)


def _print_tuned_tasks(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{len(r['tasks'])} tasks — {r['trials_done']} trials this run in "
        f"{r['tuning_seconds']:.1f} s ({r['stop_reason']})"
    )
    for col in ("pattern", "count", "trials", "best (ms)", "share of model time"):
        table.add_column(col, justify="left" if col == "pattern" else "right")
    for t in r["tasks"]:
        table.add_row(
            t["pattern"],
            str(t["count"]),
            f"{t['trials']}" + (f" (+{t['trials_done']})" if t["trials_done"] else ""),
            f"{t['best_ms']:.4f}" if t["best_ms"] is not None else "-",
            f"{100 * t['share']:.1f}%" if t["share"] is not None else "-",
        )
    Console(width=160).print(table)


class _TaskProgress:
    """Rich progress on stderr when it is a terminal: the whole model's budget, then one row
    per task (its trials so far and best, its bar the part of this run's budget it got)."""

    def __init__(self, tuning: Any) -> None:
        self.tuning = tuning
        self.progress: Any = None

    def __enter__(self) -> Any:
        import sys

        if not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[trials]}"),
            TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        total = self.tuning.remaining
        model = self.progress.add_task("model", total=total, trials=f"0/{total}", best="")
        rows = [
            self.progress.add_task(
                f"  {t.pattern[:40]} ×{t.count}",
                total=total,
                trials=f"trials {t.trials}",
                best=_best_text(t.best_ms),
            )
            for t in self.tuning.tasks
        ]
        self.progress.start()
        done = [0]

        def on_trial(i: int, _trial: Any) -> None:
            done[0] += 1
            t = self.tuning.tasks[i]
            self.progress.update(model, completed=done[0], trials=f"{done[0]}/{total}")
            self.progress.update(
                rows[i],
                completed=t.trials_done,
                trials=f"trials {t.trials}",
                best=_best_text(t.best_ms),
            )

        return on_trial

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()


def _best_text(ms: float | None) -> str:
    return f"best {ms:.4f} ms" if ms is not None else "best -"
