"""The `loomtune` command line (DESIGN.md's spellings are the user's contract).

Every user error prints one line naming what was wrong to stderr and exits 2;
`--json` prints exactly one JSON object on stdout; progress and logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ir.errors import LoomtuneError

EXIT_USER_ERROR = 2
EXIT_INCORRECT = 1


class UsageError(LoomtuneError):
    """A command line that cannot be understood."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="loomtune", description="Auto-tune tensor programs for CPUs.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ops = sub.add_parser("ops", help="list the workload library")
    ops.add_argument("--json", action="store_true", help="print one JSON object")

    run = sub.add_parser("run", help="compile the default loop nest, verify, time against numpy")
    run.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    run.add_argument(
        "--workload", dest="workload_file", metavar="FILE.json", help="custom workload definition"
    )
    run.add_argument("--threads", type=_positive_int, default=1, help="threads (default 1)")
    run.add_argument("--json", action="store_true", help="print one JSON object")

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
        type=_positive_int,
        default=None,
        metavar="N",
        help="threads (default: the trace's)",
    )
    apply.add_argument("--json", action="store_true", help="print one JSON object")

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
        type=_positive_int,
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
    _add_database_parsers(sub)
    from service.tune_cli import add_tune_parser

    add_tune_parser(sub, _positive_int)
    from service.coordinator_cli import add_coordinator_parsers

    add_coordinator_parsers(sub, _Parser)
    from service.jobs_cli import add_jobs_parsers
    from service.worker_cli import add_worker_parser

    add_jobs_parsers(sub, _Parser, _positive_int)
    add_worker_parser(sub, _positive_int)
    return p


def _add_database_parsers(sub: Any) -> None:
    """`best` and `db upgrade|export|import`: the tuning database's commands."""
    best = sub.add_parser("best", help="the best stored record of a workload (no re-measuring)")
    best.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    best.add_argument(
        "--threads", type=_positive_int, default=None, metavar="N", help="threads (default 1)"
    )
    best.add_argument(
        "--target",
        metavar="T",
        default="host",
        help="'host' (default) or 'llvm -mcpu=... -mattr=...'",
    )
    best.add_argument(
        "-o",
        dest="output",
        metavar="TRACE.json",
        help="write the best trace as an apply-able trace file",
    )
    best.add_argument("--json", action="store_true", help="print one JSON object")
    best.add_argument(
        "--coordinator", metavar="URL", help="ask this coordinator instead of the local database"
    )
    best.add_argument(
        "--token", metavar="T", help="with --coordinator: API token (default: LOOMTUNE_TOKEN)"
    )

    db = sub.add_parser("db", help="the tuning database: upgrade, export, import")
    db_sub = db.add_subparsers(dest="db_command", required=True, parser_class=_Parser)
    db_sub.add_parser("upgrade", help="create or migrate the schema to this loomtune's")
    db_export = db_sub.add_parser("export", help="records as self-contained JSON lines")
    db_export.add_argument("--op", help="only this operator's records")
    db_export.add_argument(
        "--target", metavar="T", help="only this target's records ('host' = this machine, 1 thread)"
    )
    db_export.add_argument(
        "-o", dest="output", metavar="FILE", help="write to FILE (default: stdout)"
    )
    db_import = db_sub.add_parser("import", help="add the records of an export (all or nothing)")
    db_import.add_argument(
        "file", metavar="FILE", help="JSON lines written by `loomtune db export`"
    )


def parse_workload_args(
    words: Sequence[str], workload_file: str | None
) -> tuple[str | None, dict[str, str]]:
    """`OP k=v ...` or `--workload FILE k=v ...` -> (op or None, params)."""
    words = list(words)
    op: str | None = None
    if workload_file is None:
        if not words or "=" in words[0]:
            raise UsageError("name an operator (see `loomtune ops`) or pass --workload FILE.json")
        op = words.pop(0)
    params: dict[str, str] = {}
    for w in words:
        key, sep, value = w.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"expected a parameter as name=value, got {w!r}")
        if key in params:
            raise UsageError(f"parameter {key} given twice")
        params[key] = value
    return op, params


def resolve_task(words: Sequence[str], workload_file: str | None):
    from ir.definition import load_definition_file
    from ir.task import custom_task, library_task

    op, params = parse_workload_args(words, workload_file)
    if workload_file is not None:
        return custom_task(load_definition_file(workload_file), params)
    assert op is not None
    return library_task(op, params)


# ---------------------------------------------------------------------------
# Commands


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
        _print_json({"ops": entries})
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
        _log(
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
    _log(f"compiling {task.op} {_params_text(task.params)} for {target.cpu} ...")
    kernel = compile_program(program, target)
    _log("verifying against numpy and timing (interleaved) ...")
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
    if not cmp.correct:
        result["error"] = cmp.message
    if as_json:
        _print_json(result)
    else:
        _print_result_table(result)
    if not cmp.correct:
        print(f"loomtune: kernel is wrong: {cmp.message}", file=sys.stderr)
        return EXIT_INCORRECT
    return 0


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
    target = _export_target(args.target, args.threads)
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
        _log(f"compiling for {target.canonical()}, not this machine's CPU ({host_target().cpu})")
    _log(source)
    written = export_kernel(program, target, symbol=symbol, fmt=args.fmt, output=args.output)
    _log("wrote " + ", ".join(str(path) for path in written))
    return 0


def _export_target(text: str, threads: int | None):
    """`--target` with `--threads` applied; the two may not disagree on the thread count."""
    from codegen.host import parse_target

    target = parse_target(text)
    if threads is None:
        return target
    if "-num-threads=" in text and target.num_threads != threads:
        raise UsageError(
            f"--threads {threads} contradicts -num-threads={target.num_threads} in --target"
        )
    return target.with_threads(threads)


def _params_text(params: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def _print_result_table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{r['op']} {_params_text(r['params'])}")
    for col in ("", "latency (ms)", "GFLOP/s", "vs numpy"):
        table.add_column(col, justify="right")
    if r["correct"]:
        g = f"{r['gflops']:.2f}" if r["gflops"] is not None else "-"
        table.add_row("loomtune", f"{r['latency_ms']:.4f}", g, f"{r['speedup_vs_numpy']:.2f}x")
        table.add_row("numpy", f"{r['numpy_ms']:.4f}", "", "1.00x")
    else:
        table.add_row("loomtune", "wrong result", "", "")
    Console().print(table)
    print(f"correct: {r['correct']}  threads: {r['threads']}  target: {r['target']}")


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


# ---------------------------------------------------------------------------
# The tuning database: best, db upgrade|export|import


def cmd_best(args: argparse.Namespace) -> int:
    """Print (and with -o, write as a trace file) the best stored record; nothing is measured."""
    from service.db.store import open_database
    from tuner.database import DatabaseError
    from tuner.trace.errors import TraceError
    from tuner.trace.file import TraceFile
    from tuner.trace.trace import Trace

    if args.coordinator is not None:
        from service.jobs_cli import cmd_best_remote

        return cmd_best_remote(args)
    task = resolve_task(args.workload, None)
    target = _export_target(args.target, args.threads).canonical()
    database = open_database()
    record = database.best(task.key, target)
    if record is None:
        raise DatabaseError(
            f"no correct record of {task.op} {_params_text(task.params)} on {target}; tune it first"
        )
    final = database.final(task.key, target)
    retimed_ms = (
        final.retimed_ms if final is not None and final.record_id == record.record_id else None
    )
    if args.output is not None:
        try:
            trace = Trace.from_json(record.trace)
        except TraceError as e:
            raise TraceError(f"stored record {record.record_id}: {e}") from None
        TraceFile.for_task(task, record.target, trace).save(args.output)
        _log(f"wrote {args.output}")
    result = {
        "op": task.op,
        "params": task.params,
        "workload_key": task.key,
        "target": record.target,
        "record_id": record.record_id,
        "measured_at": record.measured_at.isoformat(),
        "latency_ms": record.median_ms,
        "retimed_ms": retimed_ms,
        "run_times_ms": list(record.run_times_ms),
        "trace": record.trace,
    }
    if args.json:
        _print_json(result)
    else:
        print(f"{task.op} {_params_text(task.params)} on {record.target}")
        print(best_line(record.median_ms, len(record.run_times_ms), retimed_ms))
        print(
            f"record {record.record_id}, measured {record.measured_at.isoformat()} by {record.worker or '?'}"
        )
    return 0


def best_line(median_ms: float, runs: int, retimed_ms: float | None) -> str:
    line = f"best: {median_ms:.4f} ms (median of {runs} runs)"
    if retimed_ms is not None:
        line += f"; {retimed_ms:.4f} ms re-timed beside the other finalists, which chose it"
    return line


def cmd_db(args: argparse.Namespace) -> int:
    return {"upgrade": _db_upgrade, "export": _db_export, "import": _db_import}[args.db_command](
        args
    )


def _db_upgrade(args: argparse.Namespace) -> int:
    """Create or migrate the schema (the only way a non-embedded database is upgraded)."""
    from sqlalchemy.exc import OperationalError

    import migrations
    from service.db.engine import make_engine
    from service.db.schema import upgrade
    from service.db.store import DatabaseUnavailableError

    engine = make_engine()
    where = engine.url.render_as_string(hide_password=True)
    try:
        upgrade(engine)
    except OperationalError as e:
        reason = str(e.orig).strip().splitlines()[0] if e.orig is not None else type(e).__name__
        raise DatabaseUnavailableError(f"cannot open the database {where}: {reason}") from None
    finally:
        engine.dispose()
    _log(f"{where}: schema at revision {migrations.head_revision()}")
    return 0


def _db_export(args: argparse.Namespace) -> int:
    """Every record (of an operator, of a target) as one self-contained JSON line."""
    from service.db.store import open_database

    target = _export_target(args.target, None).canonical() if args.target is not None else None
    records = open_database().records(op=args.op, target=target)
    lines = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records)
    if args.output is None:
        sys.stdout.write(lines)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(lines)
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e.strerror}") from None
    _log(f"exported {len(records)} record(s)" + (f" to {args.output}" if args.output else ""))
    return 0


def _db_import(args: argparse.Namespace) -> int:
    """Add the records of an export in one transaction: a bad line imports nothing."""
    from codegen.host import parse_target
    from service.db.store import open_database
    from tuner.database import DatabaseError, TuningRecord
    from tuner.trace.trace import Trace

    try:
        with open(args.file, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise UsageError(f"cannot read {args.file}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{args.file}: not UTF-8 text") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = TuningRecord.from_json(json.loads(line))
            if Trace.from_json(record.trace).hash != record.trace_hash:
                raise DatabaseError("trace_hash is not the hash of the trace")
            if parse_target(record.target).canonical() != record.target:
                raise DatabaseError(f"target {record.target!r} is not canonical")
        except json.JSONDecodeError as e:
            raise DatabaseError(
                f"{args.file}:{number}: not valid JSON ({e.msg}); nothing imported"
            ) from None
        except (LoomtuneError, RecursionError) as e:
            raise DatabaseError(f"{args.file}:{number}: {e}; nothing imported") from None
        records.append(record)
    added = open_database().commit_records(records)
    _log(f"imported {added} new record(s) of {len(records)} from {args.file}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from service.tune_cli import cmd_tune as run_tune

    return run_tune(args)


def cmd_serve(args: argparse.Namespace) -> int:
    from service.coordinator_cli import cmd_serve as serve

    return serve(args)


def cmd_token(args: argparse.Namespace) -> int:
    from service.coordinator_cli import cmd_token as token

    return token(args)


def cmd_jobs(args: argparse.Namespace) -> int:
    from service.jobs_cli import cmd_jobs as jobs

    return jobs(args)


def cmd_worker(args: argparse.Namespace) -> int:
    from service.worker_cli import cmd_worker as worker

    return worker(args)


COMMANDS = {
    "ops": cmd_ops,
    "run": cmd_run,
    "apply": cmd_apply,
    "export": cmd_export,
    "best": cmd_best,
    "db": cmd_db,
    "tune": cmd_tune,
    "serve": cmd_serve,
    "token": cmd_token,
    "jobs": cmd_jobs,
    "worker": cmd_worker,
}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except LoomtuneError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"loomtune: error: {msg}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("loomtune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
