"""What every `loomtune` command shares: usage errors, exit codes, logging, JSON output, workloads.

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
EXIT_INTERRUPTED = 130
"""128 + SIGINT, as a shell reports a Ctrl-C; 1 stays reserved for wrong results."""


class StopNow(BaseException):
    """A second Ctrl-C: end at once. Not a KeyboardInterrupt, which the tuning loop
    catches to keep what it measured; `main` prints one line and exits 130."""


class UsageError(LoomtuneError):
    """A command line that cannot be understood."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are `UsageError`s (one line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        # main prints "loomtune: error: "; the subcommand names where ("run: ...").
        where = self.prog.removeprefix("loomtune").strip()
        raise UsageError(f"{where}: {message}" if where else message)


def add_database_option(parser: argparse.ArgumentParser) -> None:
    """`--database URL` on a command that opens the tuning database."""
    parser.add_argument(
        "--database",
        metavar="URL",
        help="the tuning database (default: LOOMTUNE_DATABASE_URL, else the local SQLite file)",
    )


def use_database_option(args: argparse.Namespace) -> None:
    """Check the database URL a command will open (`--database`, else the environment's)
    before it prints anything; `--database` becomes the environment's for this process
    and the measurement processes it starts."""
    import os

    from service.db.engine import DATABASE_URL_ENV, database_url, default_database_path
    from service.db.url import check_database_url

    # `db upgrade` is asked to make a database: it may make its folder, as before.
    creates = args.command == "db" and getattr(args, "db_command", None) == "upgrade"
    if getattr(args, "database", None) is not None:
        url = args.database.strip()
        os.environ[DATABASE_URL_ENV] = check_database_url(url, folder_must_exist=not creates)
    opens = hasattr(args, "database") and getattr(args, "coordinator", None) is None
    if opens and (args.command != "run" or args.model is not None):  # run: only with --model
        url = database_url()
        default = url == f"sqlite:///{default_database_path()}"
        check_database_url(url, folder_must_exist=not (default or creates))


def check_strategy(name: str | None) -> None:
    """Refuse an unknown `--strategy` before a command prints or measures anything."""
    if name is None:
        return
    import tuner.search.evolutionary
    import tuner.search.replay  # noqa: F401
    from tuner.search.strategy import STRATEGIES

    if name not in STRATEGIES:
        known = ", ".join(sorted(STRATEGIES))
        raise UsageError(f"unknown search strategy {name!r}; this loomtune has: {known}")


def warn_oversubscribed(threads: int) -> None:
    """One line on stderr when `--threads` exceeds the cores this process may use:
    the kernel and numpy would then share cores and the comparison means little."""
    import os

    cores = len(os.sched_getaffinity(0))
    if threads > cores:
        log(
            f"warning: --threads {threads} is more than the {cores} core(s) available; "
            "timings (the kernel's and numpy's) will not mean much"
        )


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


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


def export_target(text: str, threads: int | None):
    """`--target` (short forms too: `znver3`) with `--threads` applied; the two must agree."""
    from codegen.host import parse_user_target

    target = parse_user_target(text)
    if threads is None:
        return target
    if "-num-threads=" in text and target.num_threads != threads:
        raise UsageError(
            f"--threads {threads} contradicts -num-threads={target.num_threads} in --target"
        )
    return target.with_threads(threads)


def params_text(params: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def best_line(median_ms: float, runs: int, retimed_ms: float | None) -> str:
    line = f"best: {median_ms:.4f} ms (median of {runs} runs)"
    if retimed_ms is not None:
        line += f"; {retimed_ms:.4f} ms re-timed beside the other finalists, which chose it"
    return line


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


def log(msg: str) -> None:
    print(msg, file=sys.stderr)
