"""A memory-bandwidth neighbour: a child process streaming copies through arrays far larger
than the L3 on another core, paused and resumed by the benchmark.

Issue 36 asks for robustness as a measured property: how much a kernel slows while another
core saturates the memory bus (a neighbour VM on the same L3 and memory, on a cloud host).
The neighbour is bounded: it has a deadline of its own, dies with the benchmark
(``PR_SET_PDEATHSIG``, and a watch on its parent's pid), and `neighbour` kills it on the way
out, also when the timing raised. It is paused with SIGSTOP rather than told to stop
copying: a stopped process leaves the bus at once, mid-copy.

``python -m benchmarks.tune.neighbour CORE MIB SECONDS`` is the child (started by `neighbour`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIB = 256
"""Each of the child's two arrays, MiB: 8 times a 32 MiB L3 together, so every copy streams
from memory."""
DEADLINE_S = 1800.0
"""The child ends on its own after this long (a timing beside it takes minutes)."""
READY_TIMEOUT_S = 60.0
NEIGHBOUR_FIELDS = ("slowdown_loomtune", "slowdown_numpy", "slowdown_torch")
"""A row's slowdowns beside the neighbour: median beside / median alone, per callable."""


class NeighbourError(RuntimeError):
    """The neighbour could not be started (one usable core, or the child failed)."""


@dataclass
class Neighbour:
    """A started child, paused or streaming; `own_core` is where the caller should run."""

    process: subprocess.Popen[str]
    core: int
    own_core: int
    mib: int
    running: bool = False
    running_s: float = 0.0
    _since: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)

    def resume(self) -> None:
        """Stream (no-op when streaming: cheap enough to call before every timed call)."""
        if not self.running:
            if self.process.poll() is not None:  # its deadline passed: no figure beside it
                raise NeighbourError(
                    f"the neighbour ended (exit {self.process.returncode}) before the timing did"
                )
            os.kill(self.process.pid, signal.SIGCONT)
            self.running = True
            self._since = time.perf_counter()

    def pause(self) -> None:
        if self.running:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGSTOP)
            self.running = False
            self.running_s += time.perf_counter() - self._since

    def describe(self) -> dict[str, Any]:
        """Where it ran, how big, and what it streamed (once stopped: `stats`)."""
        return {
            "core": self.core,
            "own_core": self.own_core,
            "mib": self.mib,
            "running_s": self.running_s,
            **self.stats,
        }


def cores() -> tuple[int, int]:
    """(the caller's core, the neighbour's): the first and last usable core."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        raise NeighbourError(
            f"a neighbour needs a second usable core; this process may use only {usable}"
        )
    return usable[0], usable[-1]


@contextmanager
def neighbour(mib: int = MIB, deadline_s: float = DEADLINE_S) -> Iterator[Neighbour]:
    """Start the child on the other core, paused, and yield it; the caller is pinned to its
    own core meanwhile (so the two never share one). On the way out the child is stopped
    (its streaming figures in `stats`) and killed if it does not stop, and the caller's
    affinity is restored, whatever was raised."""
    own, other = cores()
    affinity = os.sched_getaffinity(0)
    command = [sys.executable, "-m", "benchmarks.tune.neighbour", str(other), str(mib)]
    process = subprocess.Popen(
        [*command, str(deadline_s)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],  # where `benchmarks` imports from
    )
    nb = Neighbour(process, other, own, mib)
    try:
        os.sched_setaffinity(0, {own})
        _wait_ready(process)
        os.kill(process.pid, signal.SIGSTOP)
        yield nb
    finally:
        nb.pause()
        nb.stats = _stop(process)
        os.sched_setaffinity(0, affinity)


def _wait_ready(process: subprocess.Popen[str]) -> None:
    """Block until the child has its arrays and streams (it prints ``ready``)."""
    import selectors

    assert process.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        if not sel.select(READY_TIMEOUT_S):
            raise NeighbourError(f"the neighbour did not start within {READY_TIMEOUT_S:g} s")
    line = process.stdout.readline().strip()
    if line != "ready":
        error = process.stderr.read() if process.stderr and process.poll() is not None else ""
        raise NeighbourError(f"the neighbour failed to start: {line!r} {error.strip()[-500:]}")


def _stop(process: subprocess.Popen[str]) -> dict[str, Any]:
    """Ask the child to end (SIGTERM reaches a stopped process only once it continues); kill
    it if it has not ended within 5 s. Its report: copies, bytes moved, its CPU seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        os.kill(process.pid, signal.SIGCONT)
    try:
        out, _ = process.communicate(timeout=5.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return {"gb_per_s": None, "ended": "killed"}
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"gb_per_s": None, "ended": f"exit {process.returncode}"}
    cpu_s = report.get("cpu_s") or 0.0
    report["gb_per_s"] = report["bytes"] / cpu_s / 1e9 if cpu_s > 0 else None
    report["ended"] = "asked"
    return report


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux; elsewhere the pid watch remains)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def child(core: int, mib: int, deadline_s: float) -> None:
    """Copy one array into another until the deadline, SIGTERM or the parent's end; print
    ``ready`` once streaming, and at the end what was moved (read + write bytes of whole
    copies) over the CPU seconds (a stopped process uses none: the rate while streaming)."""
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:
        return
    os.sched_setaffinity(0, {core})
    import numpy as np

    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    n = mib * (1 << 20) // 8
    src = np.ones(n)
    dst = np.zeros(n)
    end = time.monotonic() + deadline_s
    np.copyto(dst, src)
    print("ready", flush=True)
    copies = 0
    cpu = time.process_time()
    while not stopping and time.monotonic() < end and os.getppid() == parent:
        np.copyto(dst, src)
        copies += 1
    cpu_s = time.process_time() - cpu
    report = {"copies": copies, "bytes": 2 * copies * src.nbytes, "cpu_s": cpu_s}
    print(json.dumps({**report, "process_cpu_s": time.process_time()}))


if __name__ == "__main__":
    child(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
