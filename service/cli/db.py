"""`loomtune best` and `loomtune db upgrade|export|import`: the tuning database's commands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ir.errors import LoomtuneError
from service.cli.browse import add_prune_parser, cmd_db_prune
from service.cli.common import (
    Parser,
    UsageError,
    best_line,
    export_target,
    log,
    params_text,
    positive_int,
    print_json,
    resolve_task,
)
from service.cli.jobs import short_target


def add_db_parsers(sub: Any) -> None:
    """`best` and `db upgrade|export|import`: the tuning database's commands."""
    best = sub.add_parser("best", help="the best stored record of a workload (no re-measuring)")
    best.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    best.add_argument(
        "--threads", type=positive_int, default=None, metavar="N", help="threads (default 1)"
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

    db = sub.add_parser("db", help="the tuning database: upgrade, export, import, prune")
    db_sub = db.add_subparsers(dest="db_command", required=True, parser_class=Parser)
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
    db_invalidate = db_sub.add_parser(
        "invalidate-worker",
        help="void every record a registered worker posted and quarantine it",
    )
    db_invalidate.add_argument("worker_id", type=int, metavar="ID", help="the worker's id")
    add_prune_parser(db_sub)


def cmd_best(args: argparse.Namespace) -> int:
    """Print (and with -o, write as a trace file) the best stored record; nothing is measured."""
    from service.db.store import open_database
    from tuner.database import DatabaseError
    from tuner.trace.errors import TraceError
    from tuner.trace.file import TraceFile
    from tuner.trace.trace import Trace

    if args.coordinator is not None:
        from service.cli.jobs import cmd_best_remote

        return cmd_best_remote(args)
    task = resolve_task(args.workload, None)
    target = export_target(args.target, args.threads).canonical()
    database = open_database()
    record = database.best(task.key, target)
    if record is None:
        raise DatabaseError(
            f"no correct record of {task.op} {params_text(task.params)} on {short_target(target)}; "
            "tune it first"
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
        log(f"wrote {args.output}")
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
        print_json(result)
    else:
        print(f"{task.op} {params_text(task.params)} on {short_target(record.target)}")
        print(best_line(record.median_ms, len(record.run_times_ms), retimed_ms))
        print(
            f"record {record.record_id}, measured {record.measured_at.isoformat()} by {record.worker or '?'}"
        )
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    return {
        "upgrade": _db_upgrade,
        "export": _db_export,
        "import": _db_import,
        "invalidate-worker": _db_invalidate_worker,
        "prune": cmd_db_prune,
    }[args.db_command](args)


def _db_invalidate_worker(args: argparse.Namespace) -> int:
    """Every record of a worker becomes invalid (never served, never guiding a search)."""
    from service.coordinator.trust import invalidate_worker
    from service.db import models as m
    from service.db.session import Sessions
    from service.db.store import open_database

    database = open_database()
    with Sessions(database.engine).write() as session:
        if session.get(m.Worker, args.worker_id) is None:
            raise UsageError(f"worker {args.worker_id} is not registered in this database")
        count = invalidate_worker(session, args.worker_id)
    log(f"worker {args.worker_id}: {count} record(s) invalidated; the worker is quarantined")
    return 0


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
    log(f"{where}: schema at revision {migrations.head_revision()}")
    return 0


def _db_export(args: argparse.Namespace) -> int:
    """Every record (of an operator, of a target) as one self-contained JSON line."""
    from service.db.store import open_database

    target = export_target(args.target, None).canonical() if args.target is not None else None
    records = open_database().records(op=args.op, target=target)
    if not records and args.op is not None:
        from ir.library import get_op

        get_op(args.op)  # an unknown operator is refused like everywhere else (custom ones stored)
    lines = "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in records)
    if args.output is None:
        sys.stdout.write(lines)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(lines)
        except OSError as e:
            raise UsageError(f"cannot write {args.output}: {e.strerror}") from None
    log(f"exported {len(records)} record(s)" + (f" to {args.output}" if args.output else ""))
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
    log(f"imported {added} new record(s) of {len(records)} from {args.file}")
    return 0
