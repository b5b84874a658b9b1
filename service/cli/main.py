"""The `loomtune` command line (DESIGN.md's spellings are the user's contract).

Every user error prints one line naming what was wrong to stderr and exits 2;
`--json` prints exactly one JSON object on stdout; progress and logs go to stderr.
One module per command group builds its parsers and runs its commands; this one
puts them together.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ir.errors import LoomtuneError
from service.cli import coordinator, db, export, jobs, run, tune, worker
from service.cli.common import EXIT_USER_ERROR, Parser


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="loomtune", description="Auto-tune tensor programs for CPUs.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    run.add_parsers(sub)
    export.add_parser(sub)
    db.add_parsers(sub)
    tune.add_parser(sub)
    coordinator.add_parsers(sub)
    jobs.add_parsers(sub)
    worker.add_parser(sub)
    return p


COMMANDS = {
    "ops": run.cmd_ops,
    "run": run.cmd_run,
    "apply": run.cmd_apply,
    "export": export.cmd_export,
    "best": db.cmd_best,
    "db": db.cmd_db,
    "tune": tune.cmd_tune,
    "serve": coordinator.cmd_serve,
    "token": coordinator.cmd_token,
    "jobs": jobs.cmd_jobs,
    "worker": worker.cmd_worker,
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
