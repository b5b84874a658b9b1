"""`loomtune workloads`, `loomtune records` and `loomtune db prune`: what the database knows.

Nothing here measures; `db prune` deletes only with `--yes` and never a record
still in use (a workload's best on its target, a job's best): it lists those
as kept instead (docs/usage.md).
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from service.cli.common import (
    UsageError,
    export_target,
    log,
    params_text,
    positive_float,
    positive_int,
    print_json,
    resolve_task,
)
from service.cli.jobs import short_target  # the display form `jobs` prints


def add_browse_parsers(sub: Any) -> None:
    workloads = sub.add_parser("workloads", help="the workloads the database knows")
    workloads.add_argument("--json", action="store_true", help="print one JSON object")

    records = sub.add_parser("records", help="the fastest correct records of a workload")
    records.add_argument("workload", nargs="*", metavar="OP k=v", help="operator and parameters")
    records.add_argument(
        "--top", type=positive_int, default=10, metavar="K", help="how many (default 10)"
    )
    records.add_argument(
        "--threads", type=positive_int, default=None, metavar="N", help="threads (default 1)"
    )
    records.add_argument(
        "--target", metavar="T", default="host", help="'host' (default) or a target string"
    )
    records.add_argument("--json", action="store_true", help="print one JSON object")


def add_prune_parser(db_sub: Any) -> None:
    prune = db_sub.add_parser(
        "prune", help="delete old records or a worker's (dry run unless --yes)"
    )
    prune.add_argument(
        "--older-than",
        type=positive_float,
        metavar="DAYS",
        help="records measured more than DAYS ago",
    )
    prune.add_argument("--worker", metavar="NAME", help="records measured by this worker")
    prune.add_argument("--yes", action="store_true", help="delete (default: only say what)")
    prune.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_workloads(args: argparse.Namespace) -> int:
    from service.db.browse import workload_summaries
    from service.db.store import open_database

    summaries = workload_summaries(open_database())
    if args.json:
        print_json(
            {
                "workloads": [
                    {
                        "op": w.op,
                        "params": w.params,
                        "workload_key": w.key,
                        "records": w.records,
                        "best_ms": w.best_ms,
                    }
                    for w in summaries
                ]
            }
        )
        return 0
    if not summaries:
        print("no workloads yet: `loomtune tune OP k=v…` stores some")
    for w in summaries:
        bests = ", ".join(
            f"{short_target(t)}: {ms:.4f} ms" if ms is not None else f"{short_target(t)}: -"
            for t, ms in sorted(w.best_ms.items())
        )
        print(f"{w.op} {params_text(w.params)}  [{w.key[:12]}]  {w.records} records  best: {bests}")
    return 0


def cmd_records(args: argparse.Namespace) -> int:
    from service.db.store import open_database

    task = resolve_task(args.workload, None)
    target = export_target(args.target, args.threads).canonical()
    records = open_database().top_k(task.key, target, args.top)
    rows = [
        {
            "record_id": r.record_id,
            "median_ms": r.median_ms,
            "measured_at": r.measured_at.isoformat(),
            "worker": r.worker,
        }
        for r in records
    ]
    if args.json:
        print_json(
            {
                "op": task.op,
                "params": task.params,
                "workload_key": task.key,
                "target": target,
                "records": rows,
            }
        )
        return 0
    print(f"{task.op} {params_text(task.params)} on {short_target(target)}: {len(rows)} record(s)")
    for row in rows:
        print(
            f"{row['record_id']}  {row['median_ms']:.4f} ms  {row['measured_at']}  {row['worker'] or '?'}"
        )
    return 0


def cmd_db_prune(args: argparse.Namespace) -> int:
    from service.db.browse import delete_records, plan_prune
    from service.db.store import open_database
    from tuner.database import utc_now

    if args.older_than is None and args.worker is None:
        raise UsageError("db prune: say which records: --older-than DAYS and/or --worker NAME")
    before = utc_now() - timedelta(days=args.older_than) if args.older_than is not None else None
    database = open_database()
    plan = plan_prune(database, before=before, worker=args.worker)
    deleted = delete_records(database, plan.delete) if args.yes else 0
    if args.json:
        print_json(
            {
                "dry_run": not args.yes,
                "matched": len(plan.delete) + len(plan.kept),
                "to_delete": plan.delete,
                "deleted": deleted,
                "kept": plan.kept,
            }
        )
    for record_id, why in plan.kept.items():
        log(f"keeping record {record_id}: {why}")
    if args.yes:
        log(f"deleted {deleted} record(s); kept {len(plan.kept)} still in use")
    else:
        log(
            f"would delete {len(plan.delete)} record(s), keeping {len(plan.kept)} still in use; "
            "run again with --yes to delete"
        )
    return 0
