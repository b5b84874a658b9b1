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
from service.cli.browse import add_browse_parsers, cmd_records, cmd_workloads
from service.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_USER_ERROR,
    Parser,
    StopNow,
    add_database_option,
    use_database_option,
)
from service.cli.coordinator import add_coordinator_parsers, cmd_serve, cmd_token
from service.cli.db import add_db_parsers, cmd_best, cmd_db
from service.cli.export import add_export_parser, cmd_export
from service.cli.jobs import add_jobs_parsers, cmd_jobs
from service.cli.model import add_model_parser, cmd_model
from service.cli.run import add_run_parsers, cmd_apply, cmd_ops, cmd_run
from service.cli.tune import add_tune_parser, cmd_tune
from service.cli.worker import add_worker_parser, cmd_worker


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="loomtune", description="Auto-tune tensor programs for CPUs.")
    p.add_argument("--version", action="version", version=f"loomtune {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    add_run_parsers(sub)
    add_export_parser(sub)
    add_db_parsers(sub)
    add_browse_parsers(sub)
    add_tune_parser(sub)
    add_coordinator_parsers(sub)
    add_jobs_parsers(sub)
    add_worker_parser(sub)
    add_model_parser(sub)
    for name in DATABASE_COMMANDS:
        _add_database_option(sub.choices[name])
    return p


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("loomtune")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


DATABASE_COMMANDS = (
    *("run", "tune", "best", "export", "db", "model", "serve", "token"),
    *("workloads", "records"),
)
"""The commands that open the tuning database (`run` with --model) take `--database URL`."""


def _add_database_option(parser: argparse.ArgumentParser) -> None:
    """`--database` on a command, or on each of its subcommands (`db export --database URL`)."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        add_database_option(parser)
    for group in groups:
        for child in dict.fromkeys(group.choices.values()):
            _add_database_option(child)


COMMANDS = {
    "ops": cmd_ops,
    "run": cmd_run,
    "apply": cmd_apply,
    "export": cmd_export,
    "best": cmd_best,
    "db": cmd_db,
    "workloads": cmd_workloads,
    "records": cmd_records,
    "tune": cmd_tune,
    "serve": cmd_serve,
    "token": cmd_token,
    "jobs": cmd_jobs,
    "worker": cmd_worker,
    "model": cmd_model,
}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        use_database_option(args)
        return COMMANDS[args.command](args)
    except LoomtuneError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"loomtune: error: {msg}", file=sys.stderr)
        return EXIT_USER_ERROR
    except (KeyboardInterrupt, StopNow):
        print("loomtune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
