"""`loomtune worker --coordinator URL --token T [--threads N] [--cores LIST] [--idle-seconds S]`:
a measurement worker.

The daemon itself is `workers/daemon.py`; this is its command line. The URL
and token fall back to LOOMTUNE_COORDINATOR and LOOMTUNE_TOKEN. Runs until
SIGTERM or SIGINT (exit 0, its leases handed back); a refused token or a bad
option prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from service.cli.common import UsageError, positive_float, positive_int


def add_worker_parser(sub: Any) -> None:
    worker = sub.add_parser(
        "worker", help="measure candidates for a coordinator (runs until SIGTERM/Ctrl-C)"
    )
    worker.add_argument(
        "--coordinator", metavar="URL", help="the coordinator (default: LOOMTUNE_COORDINATOR)"
    )
    worker.add_argument("--token", metavar="T", help="a worker token (default: LOOMTUNE_TOKEN)")
    worker.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        metavar="N",
        help="threads per candidate: the target's -num-threads (default 1)",
    )
    worker.add_argument(
        "--cores",
        metavar="LIST",
        help="cores to use, e.g. 0-3 or 0,2 (default: all); one slot per N of them",
    )
    worker.add_argument(
        "--idle-seconds",
        type=positive_float,
        default=1.0,
        metavar="S",
        help="longest wait between lease calls while there is no work (default 1)",
    )


def cmd_worker(args: argparse.Namespace) -> int:
    from workers.config import COORDINATOR_ENV, TOKEN_ENV, WorkerConfig, parse_cores
    from workers.daemon import run_worker

    url = args.coordinator or os.environ.get(COORDINATOR_ENV, "").strip()
    token = args.token or os.environ.get(TOKEN_ENV, "").strip()
    if not url:
        raise UsageError(f"no coordinator: pass --coordinator URL or set {COORDINATOR_ENV}")
    if not token:
        raise UsageError(
            f"no token: pass --token T or set {TOKEN_ENV} (`loomtune token create --role worker`)"
        )
    cores = parse_cores(args.cores) if args.cores is not None else None
    config = WorkerConfig(
        coordinator=url,
        token=token,
        threads=args.threads,
        cores=cores,
        idle_seconds=args.idle_seconds,
    )
    return run_worker(config)
