"""Trace files: self-contained candidates (format, workload, target, trace).

    {"format": "loomtune.trace/1",
     "workload": {"op": "matmul", "params": {"m": 1024, "n": 1024, "k": 1024}},
                 (or {"definition": {...a loomtune.workload/1 definition...}})
     "target": "llvm -mcpu=znver3 -mattr=+avx2,... -num-threads=1",
     "trace": {...see tuner/trace/trace.py...}}

`loomtune apply` reads these, `tune --json` prints its best as one, and the
database stores the same trace object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ir.errors import LoomtuneError
from ir.task import Task, task_from_spec
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace

FILE_FORMAT = "loomtune.trace/1"


@dataclass(frozen=True)
class TraceFile:
    workload: dict[str, Any]
    target: str
    trace: Trace

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FILE_FORMAT,
            "workload": self.workload,
            "target": self.target,
            "trace": self.trace.to_json(),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @staticmethod
    def for_task(task: Task, target: str, trace: Trace) -> TraceFile:
        return TraceFile(task.spec(), target, trace)

    def task(self, overrides: dict[str, str] | None = None) -> Task:
        """The workload the trace was made for, with parameters overridden."""
        try:
            return task_from_spec(self.workload, overrides)
        except LoomtuneError as e:
            raise TraceError(f"trace file workload: {e}") from None

    @staticmethod
    def from_json(data: Any) -> TraceFile:
        if not isinstance(data, dict):
            raise TraceError(f"a trace file is a JSON object, got {type(data).__name__}")
        fmt = data.get("format")
        if fmt != FILE_FORMAT:
            raise TraceError(
                f"unknown trace file format {fmt!r}; this loomtune reads {FILE_FORMAT!r}"
            )
        workload = data.get("workload")
        if not isinstance(workload, dict) or not (
            isinstance(workload.get("op"), str) or isinstance(workload.get("definition"), dict)
        ):
            raise TraceError('trace file workload must be {"op", "params"} or {"definition"}')
        if not isinstance(workload.get("params", {}), dict):
            raise TraceError("trace file workload.params must be an object")
        target = data.get("target")
        if not isinstance(target, str) or not target:
            raise TraceError("trace file target must be a target string")
        return TraceFile(workload, target, Trace.from_json(data.get("trace")))

    @staticmethod
    def load(path: str | Path) -> TraceFile:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise TraceError(f"cannot read trace file {path}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise TraceError(f"{path}: not UTF-8 text") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        except RecursionError:
            raise TraceError(f"{path}: JSON nested too deeply") from None
        return TraceFile.from_json(data)
