"""How a measurement worker runs: its options (`WorkerConfig`), its cores, and the error that stops it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ir.errors import LoomtuneError
from workers.process import DEFAULT_TIMEOUT_S

COORDINATOR_ENV = "LOOMTUNE_COORDINATOR"
TOKEN_ENV = "LOOMTUNE_TOKEN"
HEARTBEAT_SECONDS_ENV = "LOOMTUNE_HEARTBEAT_SECONDS"


class WorkerError(LoomtuneError):
    """A worker that cannot run: a refused token, bad cores, a coordinator that refuses it."""


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How a worker runs.

    Attributes:
        coordinator: the coordinator's base URL (`http://host:8000`, `https://...`).
        token: a worker token (`loomtune token create --role worker`).
        threads: threads per candidate, the `-num-threads` of the worker's target.
        cores: the cores this worker may use (None: all this process may run on).
        batch: candidates per lease call (None: two per slot).
        heartbeat_seconds: heartbeat interval, s (None: LOOMTUNE_HEARTBEAT_SECONDS
            of this process if set, else the coordinator's); never more than a
            third of the lease time.
        idle_seconds: longest wait, s, between lease calls when there is no work.
        backoff_seconds: first wait, s, after the coordinator did not answer;
            doubled after each failure up to `max_backoff_seconds` (with jitter).
        request_timeout_seconds: one HTTP request's timeout, s.
        measure_timeout_seconds: one candidate's time limit (replay, compile, verify, time), s.
        name: the worker's name (None: `host:pid cores=... llvm=...`).
        verify: TLS verification (True, False, or a CA bundle path).
    """

    coordinator: str
    token: str
    threads: int = 1
    cores: tuple[int, ...] | None = None
    batch: int | None = None
    heartbeat_seconds: float | None = None
    idle_seconds: float = 1.0
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0
    request_timeout_seconds: float = 10.0
    measure_timeout_seconds: float = DEFAULT_TIMEOUT_S
    name: str | None = None
    verify: bool | str = True

    def __post_init__(self) -> None:
        if not self.coordinator.startswith(("http://", "https://")):
            raise WorkerError(
                f"--coordinator must be an http:// or https:// URL, got {self.coordinator!r}"
            )
        if not self.token:
            raise WorkerError(f"no token: pass --token or set {TOKEN_ENV}")
        if self.threads < 1:
            raise WorkerError(f"--threads must be >= 1, got {self.threads}")
        if self.cores is not None and len(self.cores) < self.threads:
            raise WorkerError(
                f"--threads {self.threads} needs at least {self.threads} cores; --cores gives {len(self.cores)}"
            )


def parse_cores(text: str) -> tuple[int, ...]:
    """`0,2,4-7` -> (0, 2, 4, 5, 6, 7); each core must be one this process may run on."""
    cores: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise WorkerError(f"--cores: expected a list like 0,2,4-7, got {text!r}") from None
        if first < 0 or last < first:
            raise WorkerError(f"--cores: bad range {part!r}")
        cores.update(range(first, last + 1))
    usable = os.sched_getaffinity(0)
    missing = sorted(cores - usable)
    if missing:
        raise WorkerError(
            f"--cores: core {missing[0]} is not available to this process (usable: {core_text(usable)})"
        )
    return tuple(sorted(cores))


def core_text(cores: Sequence[int] | set[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    out: list[str] = []
    for c in sorted(cores):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)
