"""The parent's handle on one measurement process (`workers/child.py`).

A candidate that crashes the process, or runs past its timeout (the process is
killed), ends as a `crashed` or `timeout` result; the next request starts a
fresh process. Nothing a candidate does can take the tuner down with it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tuner.runner import MeasureResult
from workers.timing import MeasureConfig

START_TIMEOUT_S = 60.0
"""A fresh process imports numpy and llvmlite before it says it is ready."""
DEFAULT_TIMEOUT_S = 60.0
"""Per candidate: replay, compile, verify and time."""

_ROOT = str(Path(__file__).resolve().parent.parent)


class ProcessStartError(RuntimeError):
    """A measurement process did not start (a broken installation, not a bad candidate)."""


def _signal_name(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class MeasureProcess:
    def __init__(
        self,
        cores: Sequence[int] = (),
        *,
        worker: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.cores = tuple(cores)
        self.worker = worker
        self.timeout_s = timeout_s
        self.env = dict(env) if env is not None else None
        self.proc: subprocess.Popen[str] | None = None
        self.hello: dict[str, Any] = {}
        self.starts = 0
        self._next_id = 0
        self._buffer = b""
        self._eof = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "workers.child", "--cores", ",".join(map(str, self.cores))]
        if self.worker:
            cmd += ["--worker", self.worker]
        # Its own session: a Ctrl-C at the terminal interrupts the tuner, which
        # then stops its processes; they must not die first and report a crash.
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            env=env,
            start_new_session=True,
        )
        self._buffer = b""
        self._eof = False
        self.starts += 1
        line = self._read_line(START_TIMEOUT_S)
        if line is None:
            self.kill()
            raise ProcessStartError(f"the measurement process did not start: {self._exit_text()}")
        self.hello = json.loads(line)

    def _exit_text(self) -> str:
        if self.proc is None:
            return "not started"
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "still running"
        return _signal_name(self.proc.returncode)

    def _read_line(self, timeout: float) -> bytes | None:
        """One line from the child; None on EOF (it died: `self._eof`) or on timeout."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._eof = True
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self.proc = None

    def measure(
        self,
        workload: Mapping[str, Any],
        target: str,
        trace: Mapping[str, Any],
        config: MeasureConfig | None = None,
    ) -> MeasureResult:
        """Measure one candidate; a crash or timeout is a result, and the process is replaced."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.kill()
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self._next_id += 1
        request = {
            "id": self._next_id,
            "workload": dict(workload),
            "target": target,
            "trace": dict(trace),
        }
        if config is not None:
            request["config"] = asdict(config)
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.kill()
            return MeasureResult.failure(
                "crashed",
                "the measurement process exited before the candidate was sent",
                self.worker,
            )
        line = self._read_line(self.timeout_s)
        if line is None:
            if not self._eof:
                self.kill()
                return MeasureResult.failure(
                    "timeout",
                    f"no result within {self.timeout_s:g} s; the measurement process was killed",
                    self.worker,
                )
            why = self._exit_text()  # EOF comes a moment before the exit status
            self.kill()
            return MeasureResult.failure(
                "crashed", f"the measurement process died ({why})", self.worker
            )
        reply = json.loads(line)
        body = reply["result"]
        return MeasureResult(
            body["status"],
            tuple(body["run_times_ms"]),
            body["message"],
            body["worker"] or self.worker,
            body["compile_ms"],
            body["llvm_version"],
            body.get("extra") or {},
        )

    def close(self) -> None:
        """Stop the process: closing its stdin ends its loop; kill it if it lingers."""
        if self.proc is None:
            return
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
            pass
        self.kill()
