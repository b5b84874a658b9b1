"""The measurement process: `python -m workers.child`, driven over its stdin/stdout.

One JSON object per line each way. The parent (`workers/process.py`) sends

    {"id": 7, "workload": {...Task.spec()...}, "target": "llvm -mcpu=...",
     "trace": {...Trace.to_json()...}, "config": {...MeasureConfig fields...}}

and reads back `{"id": 7, "result": {...MeasureResult fields...}}`. The first
line the child writes is `{"ready": true, "pid": ..., "cores": [...]}`.
The process pins itself to `--cores` and limits its address space to what it
had mapped after start-up plus LOOMTUNE_MAX_BYTES, so a runaway candidate
fails (`runtime_error`) instead of taking the machine down. Anything a kernel
or a library prints goes to stderr: stdout carries only the protocol.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from dataclasses import asdict, fields
from typing import Any, TextIO

from codegen.amx import request_amx_permission
from codegen.host import parse_target
from ir.errors import LoomtuneError
from ir.library import max_bytes
from ir.task import Task, task_from_spec
from tuner.runner import MeasureResult
from tuner.trace.trace import Trace
from workers.measure import TUNING_CONFIG, Measurer
from workers.timing import MeasureConfig


def _vm_bytes() -> int:
    """Bytes of address space this process has mapped now (VmSize)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def limit_address_space(extra_bytes: int) -> int:
    """Cap the address space at what is mapped now plus `extra_bytes`; the cap set."""
    limit = _vm_bytes() + extra_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return limit


def die_with_parent(interval_s: float = 0.5) -> None:
    """Exit when the parent dies (even by SIGKILL), whatever this process is doing.

    A hung candidate would otherwise outlive a killed worker or tuner; stdin's
    EOF only ends the loop between candidates. (Linux's PR_SET_PDEATHSIG would
    fire when the *thread* that started us ends, which kills processes a pool
    starts from short-lived threads; a watchdog on the parent's pid does not.)
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="loomtune-parent-watch", daemon=True).start()


def config_from_json(data: dict[str, Any] | None) -> MeasureConfig:
    if not data:
        return TUNING_CONFIG
    names = {f.name for f in fields(MeasureConfig)}
    return MeasureConfig(**{k: v for k, v in data.items() if k in names})


class Child:
    def __init__(self, measurer: Measurer) -> None:
        self.measurer = measurer
        self._tasks: dict[str, Task] = {}

    def task(self, spec: dict[str, Any]) -> Task:
        key = json.dumps(spec, sort_keys=True)
        if key not in self._tasks:
            if len(self._tasks) > 8:
                self._tasks.clear()
            self._tasks[key] = task_from_spec(spec)
        return self._tasks[key]

    def handle(self, request: dict[str, Any]) -> MeasureResult:
        try:
            task = self.task(request["workload"])
            target = parse_target(request["target"])
            trace = Trace.from_json(request["trace"])
            config = config_from_json(request.get("config"))
        except (LoomtuneError, KeyError, TypeError, ValueError) as e:
            return MeasureResult.failure(
                "compile_error", f"bad measurement request: {e}", self.measurer.worker
            )
        return self.measurer.measure(task, target, trace, config)


def serve(inp: TextIO, out: TextIO, child: Child, hello: dict[str, Any]) -> None:
    out.write(json.dumps({"ready": True, **hello}) + "\n")
    out.flush()
    for line in inp:
        if not line.strip():
            continue
        request = json.loads(line)
        result = child.handle(request)
        body = asdict(result)
        body["run_times_ms"] = list(result.run_times_ms)
        out.write(json.dumps({"id": request.get("id"), "result": body}) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m workers.child")
    parser.add_argument("--cores", default="", help="comma-separated CPU numbers to pin to")
    parser.add_argument("--worker", default="", help="name recorded with each result")
    args = parser.parse_args(argv)
    die_with_parent()
    # The protocol gets its own copy of stdout; fd 1 then points at stderr, so
    # stray prints (from native code too) cannot corrupt the protocol.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    cores = [int(c) for c in args.cores.split(",") if c.strip()]
    if cores:
        os.sched_setaffinity(0, cores)
    measurer = Measurer(worker=args.worker or f"local:{os.getpid()}")
    # Once, before any kernel: AMX tiles (a no-op where the CPU has none; kernels ask too).
    request_amx_permission()
    limit = limit_address_space(max_bytes())
    # A crashing candidate must die at once, not spend seconds writing a core file.
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    hello = {
        "pid": os.getpid(),
        "cores": sorted(os.sched_getaffinity(0)),
        "address_space_limit": limit,
    }
    serve(sys.stdin, protocol, Child(measurer), hello)


if __name__ == "__main__":
    main()
