"""`loomtune export`: a kernel as code a C program links (.so + .h, .o, .ll, .s), or a whole
ONNX model as one shared library and its header (`--model`)."""

from __future__ import annotations

import argparse
from typing import Any

from service.cli.common import (
    UsageError,
    export_target,
    log,
    params_text,
    parse_workload_args,
    positive_int,
    resolve_task,
)
from service.cli.jobs import short_target


def add_export_parser(sub: Any) -> None:
    export = sub.add_parser(
        "export",
        help="write a kernel as code a C program links (.so + .h, .o, .ll, .s), or a model as a .so",
    )
    export.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    export.add_argument(
        "--workload", dest="workload_file", metavar="FILE.json", help="custom workload definition"
    )
    export.add_argument(
        "--model",
        metavar="FILE.onnx",
        help="a whole ONNX model as one library: N_run(inputs..., outputs...) (--format so)",
    )
    export.add_argument(
        "--trace",
        metavar="FILE",
        help="export this trace file's schedule (its workload unless one is named)",
    )
    export.add_argument(
        "--repair",
        action="store_true",
        help="with --trace on other parameters: re-choose decisions that no longer fit",
    )
    export.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        metavar="N",
        help="threads (default 1, or the target's)",
    )
    export.add_argument(
        "--target",
        metavar="T",
        default="host",
        help="'host' (default) or 'llvm -mcpu=... -mattr=...'",
    )
    export.add_argument(
        "--name",
        metavar="SYMBOL",
        help="C function name (default: the operator's name; with --model, N of N_run: "
        "the file's name)",
    )
    export.add_argument(
        "--format",
        dest="fmt",
        required=True,
        choices=("so", "obj", "ll", "asm"),
        help="what to write",
    )
    export.add_argument(
        "-o",
        dest="output",
        required=True,
        metavar="FILE",
        help="output file (-o libx.so also writes libx.h)",
    )


def cmd_export(args: argparse.Namespace) -> int:
    """Write the kernel of a workload as a .so (+ header), .o, .ll or .s.

    With `--trace` the schedule is that trace's (a user who names a file means
    it); otherwise the stored best record for the workload on the target, else
    the default loop nest. stderr says which.
    """
    from codegen.export import check_request, export_kernel, shift_variants

    if args.model is not None:
        return _export_model(args)
    if args.repair and args.trace is None:
        raise UsageError("export: --repair goes with --trace")
    if args.trace is not None:
        task, program, source = _from_trace(args)
    else:
        task, program, source = resolve_task(args.workload, args.workload_file), None, ""
    target = export_target(args.target, args.threads)
    symbol = args.name if args.name is not None else task.op
    check_request(symbol, args.fmt, args.output)  # a refused export prints only its error
    if args.trace is None:
        program, source = _stored_or_default(task, target)
    _log_target(target)
    log(source)
    variants = shift_variants(program)
    if variants is not None:
        streamed, programs = variants
        name = program.params[streamed.param].name
        log(
            f"{len(programs)} variants, one per offset of {name} in a cache line: "
            f"each call runs the one whose tiles start on {name}'s lines"
        )
    written = export_kernel(program, target, symbol=symbol, fmt=args.fmt, output=args.output)
    log("wrote " + ", ".join(str(path) for path in written))
    return 0


def _log_target(target: Any) -> None:
    from codegen.host import host_target, is_host

    if not is_host(target):
        log(
            f"compiling for {short_target(target.canonical())}, "
            f"not this machine's CPU ({host_target().cpu})"
        )


def _export_model(args: argparse.Namespace) -> int:
    """`export --model`: every task's best stored schedule for the target (else its default
    loop nest), the driver and the weights in one .so, and its header."""
    import time
    from pathlib import Path

    from codegen.model_export import check_model_request, default_name, export_model
    from ir.graph.plan import build_plan
    from service.model import load_graph, stored_schedules

    if args.workload or args.workload_file is not None or args.trace is not None:
        raise UsageError("export: give an operator, --workload or --model, not several")
    if args.repair:
        raise UsageError("export: --repair goes with --trace")
    if args.fmt != "so":
        raise UsageError(f"export --model writes a shared library: use --format so, not {args.fmt}")
    target = export_target(args.target, args.threads)
    name = args.name if args.name is not None else default_name(args.model)
    check_model_request(name, args.output)  # a refused export prints only its error
    start = time.perf_counter()
    graph = load_graph(args.model)
    plan = build_plan(graph)
    schedules = stored_schedules(plan, target.canonical())
    plan = schedules.choose(plan)  # each task by its fastest stored implementation
    for problem in schedules.problems:
        log(f"warning: {problem}")
    _log_target(target)
    tuned = sum(schedules.tuned(t.task.key) for t in plan.tasks)
    log(
        f"exporting {len(plan.tasks)} tasks ({len(plan.steps)} kernel calls): "
        f"{tuned} with their stored best schedule, {len(plan.tasks) - tuned} default loop nests"
    )
    done = export_model(
        plan,
        target,
        name=name,
        output=args.output,
        programs=schedules.programs,
        source=Path(args.model).name,
    )
    log(
        f"wrote {done.library} ({done.library.stat().st_size / 1e6:.1f} MB, weights embedded: "
        f"{done.weight_bytes / 1e6:.1f} MB; arena {done.arena_bytes / 1e6:.1f} MB), "
        f"{done.header}: {name}_run in {time.perf_counter() - start:.1f} s"
    )
    return 0


def _from_trace(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """The trace file's schedule on its own workload, or on the one named (same operator)."""
    from tuner.trace.errors import TraceError
    from tuner.trace.file import TraceFile

    trace_file = TraceFile.load(args.trace)
    recorded = trace_file.task()
    if args.workload_file is None and (not args.workload or "=" in args.workload[0]):
        _, overrides = parse_workload_args(["_", *args.workload], None)
        task = trace_file.task(overrides)
    else:
        task = resolve_task(args.workload, args.workload_file)
        if task.op != recorded.op:
            raise TraceError(
                f"{args.trace}: a trace of {recorded.op}, not {task.op} "
                "(name no operator to export the trace's own workload)"
            )
    try:
        program = trace_file.trace.apply(task.program, repair=args.repair).program
    except TraceError as e:
        hint = " (pass --repair)" if "repair" in str(e) and not args.repair else ""
        raise TraceError(f"{args.trace}: {e}{hint}") from None
    what = f"{task.op} {params_text(task.params)}"
    return task, program, f"exporting the schedule of trace {args.trace} on {what}"


def _stored_or_default(task: Any, target: Any) -> tuple[Any, str]:
    """The stored best record's schedule for `target`, else the default loop nest."""
    from service.db.store import open_database
    from tuner.trace.errors import TraceError
    from tuner.trace.trace import Trace

    record = open_database().best(task.key, target.canonical())
    if record is None:
        return task.program, "exporting the default loop nest (no stored record, no trace given)"
    try:
        program = Trace.from_json(record.trace).apply(task.program).program
    except TraceError as e:
        raise TraceError(f"stored record {record.record_id}: {e}") from None
    return (
        program,
        f"exporting the stored best record {record.record_id} ({record.median_ms:.4f} ms)",
    )
