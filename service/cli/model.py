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

from service.cli.common import EXIT_INCORRECT, Parser, log, positive_int, print_json


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
    return graph, plan, target, model, schedules


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
    print(f"target: {target.canonical()}")


def cmd_run_model(args: argparse.Namespace) -> int:
    """`run --model`: compile, verify (interpreter and ONNX Runtime), time against ONNX Runtime."""
    from ir.graph.interpret import run_graph
    from service.model import check_outputs, onnxruntime_session, sample_inputs
    from workers.compare import COMPARE_CONFIG
    from workers.timing import time_callable, time_interleaved

    args.file = args.model
    graph, plan, target, model, schedules = _prepare(args)
    inputs = sample_inputs(graph, seed=0)
    outputs = model(*inputs)
    names = list(graph.outputs)
    problem, err = check_outputs(outputs, run_graph(graph, inputs), names)
    session = onnxruntime_session(args.model, args.threads)
    feed = {}
    if session is not None:
        feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
        ort_problem, ort_err = check_outputs(outputs, session.run(None, feed), names)
        if problem is None and ort_problem is not None:
            problem = f"against ONNX Runtime: {ort_problem}"
        err = max(err, ort_err)
    latency = ort_ms = None
    if problem is None:
        log("timing (interleaved with ONNX Runtime) ..." if session else "timing ...")
        model.set_inputs(*inputs)
        if session is not None:
            mine, theirs = time_interleaved(
                [model.run, lambda: session.run(None, feed)], COMPARE_CONFIG
            )
            latency, ort_ms = mine.median_ms, theirs.median_ms
        else:
            latency = time_callable(model.run, COMPARE_CONFIG).median_ms
    result = {
        "model": str(args.model),
        "model_key": graph.key,
        "target": target.canonical(),
        "threads": args.threads,
        "tasks": len(plan.tasks),
        "tuned_tasks": sum(schedules.tuned(t.task.key) for t in plan.tasks),
        "kernels": model.kernel_calls,
        "correct": problem is None,
        "latency_ms": latency,
        "onnxruntime_ms": ort_ms,
        "speedup_vs_onnxruntime": ort_ms / latency if latency and ort_ms else None,
        "max_abs_err": err,
    }
    if problem is not None:
        result["error"] = problem
    if args.json:
        print_json(result)
    else:
        _print_run(result)
    if problem is not None:
        log(f"loomtune: the compiled model is wrong: {problem}")
        return EXIT_INCORRECT
    return 0


def _print_run(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{r['model']}: {r['tasks']} tasks, {r['kernels']} kernels")
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
        f"{r['tuned_tasks']}/{r['tasks']}  threads: {r['threads']}  target: {r['target']}"
    )
