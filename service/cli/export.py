"""`loomtune export`: a kernel as code a C program links (.so + .h, .o, .ll, .s)."""

from __future__ import annotations

import argparse
from typing import Any

from service.cli.common import export_target, log, positive_int, resolve_task


def add_export_parser(sub: Any) -> None:
    export = sub.add_parser(
        "export", help="write a kernel as code a C program links (.so + .h, .o, .ll, .s)"
    )
    export.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    export.add_argument(
        "--workload", dest="workload_file", metavar="FILE.json", help="custom workload definition"
    )
    export.add_argument("--trace", metavar="FILE", help="export this trace file's schedule")
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
        "--name", metavar="SYMBOL", help="C function name (default: the operator's name)"
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

    The schedule is the stored best record for the workload on the target, else
    the given trace, else the default loop nest; stderr says which.
    """
    from codegen.export import check_request, export_kernel
    from codegen.host import host_target, is_host
    from service.db.store import open_database
    from tuner.trace.errors import TraceError
    from tuner.trace.file import TraceFile
    from tuner.trace.trace import Trace

    task = resolve_task(args.workload, args.workload_file)
    target = export_target(args.target, args.threads)
    symbol = args.name if args.name is not None else task.op
    check_request(symbol, args.fmt, args.output)  # a refused export prints only its error
    record = open_database().best(task.key, target.canonical())
    try:
        if record is not None:
            program = Trace.from_json(record.trace).apply(task.program).program
            source = (
                f"exporting the stored best record {record.record_id} ({record.median_ms:.4f} ms)"
            )
        elif args.trace is not None:
            program = TraceFile.load(args.trace).trace.apply(task.program).program
            source = f"exporting the schedule of trace {args.trace} (no stored record)"
        else:
            program = task.program
            source = "exporting the default loop nest (no stored record, no trace given)"
    except TraceError as e:
        raise TraceError(f"{args.trace or 'stored record'}: {e}") from None
    if not is_host(target):
        log(f"compiling for {target.canonical()}, not this machine's CPU ({host_target().cpu})")
    log(source)
    written = export_kernel(program, target, symbol=symbol, fmt=args.fmt, output=args.output)
    log("wrote " + ", ".join(str(path) for path in written))
    return 0
