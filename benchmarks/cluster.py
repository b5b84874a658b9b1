"""Real loomtune processes on loopback: the harness shared by the service benchmark
(`benchmarks/service_bench.py`) and the end-to-end tests (`tests/e2e/cluster.py`).

A `Proc` is a subprocess whose stderr goes to a file the caller can search;
`base_env` is the environment the subprocesses get (the repository on
PYTHONPATH, a database URL, no fault injection), `tree_cpu` the CPU seconds of
processes and their descendants from /proc.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def loomtune() -> list[str]:
    """The installed `loomtune` entry point beside this interpreter (else the module)."""
    script = Path(sys.executable).parent / "loomtune"
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(database_url: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOMTUNE_TEST_FAULTS")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if database_url is not None:
        env["LOOMTUNE_DATABASE_URL"] = database_url
    env.update(extra)
    return env


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (a worker's measurement processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cpu_of(pid: int, tick: int) -> tuple[float, int] | None:
    """(utime + stime seconds, parent pid) of a live process."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = line.rpartition(") ")[2].split()
    return (int(fields[11]) + int(fields[12])) / tick, int(fields[1])


def tree_cpu(pids: Sequence[int]) -> float:
    """CPU seconds so far of these processes and their live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[float, int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        got = _cpu_of(int(entry.name), tick)
        if got is not None:
            table[int(entry.name)] = got
    wanted, total, frontier = set(pids), 0.0, list(pids)
    while frontier:
        pid = frontier.pop()
        total += table.get(pid, (0.0, 0))[0]
        for child, (_, parent) in table.items():
            if parent == pid and child not in wanted:
                wanted.add(child)
                frontier.append(child)
    return total


class Proc:
    """A subprocess whose stderr goes to a file the caller can search."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.log, text=True
        )
        self.descendants: set[int] = set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        return Path(self.log.name).read_text(encoding="utf-8", errors="replace")

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.text())
            if m:
                return m
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.argv[:3]} exited {self.proc.returncode} before {pattern!r}:\n{self.text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {timeout} s:\n{self.text()[-3000:]}")
            time.sleep(0.05)

    def remember_children(self) -> None:
        self.descendants.update(children(self.pid))

    def signal(self, sig: int) -> None:
        self.remember_children()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, grace_s: float = 0.0) -> None:
        """With `grace_s`, SIGTERM and up to that long to exit; then SIGKILL it and whatever it
        was seen to start (an orphaned measurement process would linger)."""
        if grace_s > 0 and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        self.signal(signal.SIGKILL)
        self.proc.wait()
        for pid in self.descendants:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)
