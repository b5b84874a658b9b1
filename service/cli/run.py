"""`loomtune ops`, `run` and `apply`: the workload library; a loop nest or a trace compiled, verified and timed against numpy."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ir.errors import LoomtuneError
from service.cli.baseline import EVALUATOR, baseline_of, vs_text, with_baseline
from service.cli.common import (
    EXIT_INCORRECT,
    UsageError,
    log,
    params_text,
    parse_workload_args,
    positive_int,
    print_json,
    resolve_task,
    warn_oversubscribed,
)
from service.cli.jobs import short_target  # the display form `jobs` prints
from service.cli.model import add_coordinator_options, cmd_run_model


def add_run_parsers(sub: Any) -> None:
    """`ops`, `run` and `apply`: the workload library, and a kernel compiled, verified and timed."""
    ops = sub.add_parser("ops", help="list the workload library")
    ops.add_argument("--json", action="store_true", help="print one JSON object")

    run = sub.add_parser("run", help="compile the default loop nest, verify, time against numpy")
    run.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    run.add_argument(
        "--workload", dest="workload_file", metavar="FILE.json", help="custom workload definition"
    )
    run.add_argument(
        "--model", metavar="FILE.onnx", help="a whole ONNX model: verify, time against ONNX Runtime"
    )
    run.add_argument("--threads", type=positive_int, default=1, help="threads (default 1)")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    add_coordinator_options(run)

    apply = sub.add_parser("apply", help="replay a trace file, verify, time against numpy")
    apply.add_argument("trace", metavar="TRACE.json", help="a trace file (loomtune.trace/1)")
    apply.add_argument(
        "params", nargs="*", metavar="k=v", help="other parameters of the same workload"
    )
    apply.add_argument(
        "--repair", action="store_true", help="re-choose decisions that no longer fit"
    )
    apply.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help="threads (default: the trace's)",
    )
    apply.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_ops(args: argparse.Namespace) -> int:
    from ir.library import OPS, instantiate

    entries = []
    for name, op in OPS.items():
        _, params, wl = instantiate(name, {})
        entries.append(
            {
                "name": name,
                "params": params,
                "inputs": [_tensor_json(t) for t in wl.inputs],
                "outputs": [_tensor_json(t) for t in wl.outputs],
                "flops": op.flops(params),
                "doc": op.doc,
            }
        )
    if args.json:
        print_json({"ops": entries})
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="loomtune operators (defaults)")
    for col in ("op", "parameters", "inputs", "outputs", "FLOPs"):
        table.add_column(col)
    for e in entries:
        table.add_row(
            e["name"],
            " ".join(f"{k}={v}" for k, v in e["params"].items()),
            "\n".join(_tensor_text(t) for t in e["inputs"]),
            "\n".join(_tensor_text(t) for t in e["outputs"]),
            "-" if e["flops"] is None else f"{e['flops']:,}",
        )
    Console(width=140).print(table)
    return 0


def _tensor_json(t: Any) -> dict[str, Any]:
    return {"name": t.name, "shape": list(t.concrete_shape()), "dtype": t.dtype}


def _tensor_text(t: dict[str, Any]) -> str:
    return f"{t['name']}{t['shape']} {t['dtype']}"


def cmd_run(args: argparse.Namespace) -> int:
    from codegen.host import host_target

    if args.model is not None:
        if args.workload or args.workload_file:
            raise UsageError("run: give an operator, --workload or --model, not several")
        return cmd_run_model(args)
    if args.coordinator is not None:
        raise UsageError("run: --coordinator goes with --model")
    task = resolve_task(args.workload, args.workload_file)
    return _run_and_report(task, task.program, host_target(args.threads), as_json=args.json)


def cmd_apply(args: argparse.Namespace) -> int:
    """Replay a trace file (on other parameters with --repair), verify, time against numpy."""
    from codegen.host import host_target
    from tuner.trace.errors import TraceError
    from tuner.trace.file import TraceFile

    trace_file = TraceFile.load(args.trace)
    _, overrides = parse_workload_args(["_", *args.params], None)
    task = trace_file.task(overrides)
    recorded = _trace_target(trace_file.target)
    threads = args.threads if args.threads is not None else recorded.num_threads
    target = host_target(threads)
    if recorded.cpu != target.cpu:
        log(
            f"warning: the trace was made for {recorded.cpu}; compiling for this machine ({target.cpu})"
        )
    try:
        program = trace_file.trace.apply(task.program, repair=args.repair).program
    except TraceError as e:
        hint = " (pass --repair)" if "repair" in str(e) and not args.repair else ""
        raise TraceError(f"{args.trace}: {e}{hint}") from None
    return _run_and_report(task, program, target, as_json=args.json)


def _trace_target(text: str):
    from codegen.host import parse_target
    from tuner.trace.errors import TraceError

    try:
        return parse_target(text)
    except LoomtuneError as e:
        raise TraceError(f"trace file target: {e}") from None


def _run_and_report(task: Any, program: Any, target: Any, *, as_json: bool) -> int:
    """Compile `program`, verify it, time it against numpy; print the run/apply result."""
    from codegen.kernel import compile_program
    from ir.task import gflops
    from workers.compare import compare_with_numpy

    threads = target.num_threads
    warn_oversubscribed(threads)
    log(f"compiling {task.op} {params_text(task.params)} for {target.cpu} ...")
    kernel = compile_program(program, target)
    against = "the evaluator" if baseline_of(task) == EVALUATOR else "numpy"
    log(f"verifying against {against} and timing (interleaved) ...")
    cmp = compare_with_numpy(kernel, task, threads=threads)
    result = {
        "op": task.op,
        "params": task.params,
        "workload_key": task.key,
        "target": target.canonical(),
        "threads": threads,
        "correct": cmp.correct,
        "latency_ms": cmp.latency_ms,
        "gflops": gflops(task.flops, cmp.latency_ms) if cmp.latency_ms else None,
        "numpy_ms": cmp.numpy_ms,
        "speedup_vs_numpy": (cmp.numpy_ms / cmp.latency_ms)
        if cmp.correct and cmp.latency_ms
        else None,
    }
    with_baseline(result, task)
    if not cmp.correct:
        result["error"] = cmp.message
    if as_json:
        print_json(result)
    else:
        _print_result_table(result)
    if not cmp.correct:
        print(f"loomtune: kernel is wrong: {cmp.message}", file=sys.stderr)
        return EXIT_INCORRECT
    return 0


def _print_result_table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{r['op']} {params_text(r['params'])}")
    for col in ("", "latency (ms)", "GFLOP/s", f"vs {r['baseline']}"):
        table.add_column(col, justify="right")
    if r["correct"]:
        g = f"{r['gflops']:.2f}" if r["gflops"] is not None else "-"
        table.add_row("loomtune", f"{r['latency_ms']:.4f}", g, vs_text(r))
        table.add_row(r["baseline"], f"{r['numpy_ms']:.4f}", "", "1.00x")
    else:
        table.add_row("loomtune", "wrong result", "", "")
    Console().print(table)
    print(f"correct: {r['correct']}  threads: {r['threads']}  target: {short_target(r['target'])}")
