"""Helpers every benchmark shares: where results go, the record line, CPU time, formatting.

A run writes its full result (JSON, and for the tuning benchmark a PNG) into
``benchmarks/results/`` (ignored by git) or ``--out``, and appends one compact
line to the committed ``benchmarks/results.jsonl`` (`append_record`): the
record that ``python -m benchmarks report`` turns into ``docs/results.md``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ir.task import Task, library_task

FORMAT = "loomtune.benchmarks/1"
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS_DIR = HERE / "results"
RECORD = HERE / "results.jsonl"


def log(message: str) -> None:
    """Progress goes to stderr so stdout carries only the results table."""
    print(message, file=sys.stderr, flush=True)


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0)


def utc_text(moment: _dt.datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) of a live process; 0 when it cannot be read."""
    if pid is None:
        return 0.0
    try:
        line = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return 0.0
    fields = line.rpartition(") ")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- numbers ---------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 3) -> str:
    """`digits` significant digits, whole numbers from 100 on; "–" for none."""
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def fmt_fixed(value: float | None, digits: int = 1) -> str:
    """`digits` decimals; "–" for none."""
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_ms(value: float | None) -> str:
    """About 3 significant digits, never in exponent notation."""
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def fmt_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def shown_path(path: Path) -> str:
    """`path` relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# -- result files and the record ---------------------------------------------------------


def write_result(
    result: dict[str, Any],
    out_dir: Path,
    started: _dt.datetime,
    record: Path | None = None,
) -> Path:
    """``<suite>-<UTC timestamp>.json`` in `out_dir` (never overwrites an earlier run); with
    `record`, the run's line is appended to it too (`append_record`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{result['suite']}-{started.strftime('%Y%m%dT%H%M%SZ')}"
    path = out_dir / f"{stem}.json"
    n = 1
    while path.exists():
        path = out_dir / f"{stem}-{n}.json"
        n += 1
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if record is not None:
        append_record(result, record)
    return path


def append_record(result: dict[str, Any], record: Path) -> dict[str, Any]:
    """Append the result's compact line (`benchmarks.record.line`) to `record`; the line."""
    from benchmarks.record import dumps, line

    entry = line(result)
    record.parent.mkdir(parents=True, exist_ok=True)
    with record.open("a", encoding="utf-8") as f:
        f.write(dumps(entry) + "\n")
    return entry


@dataclass(frozen=True)
class BenchWorkload:
    """A library operator at one shape, as the throughput and cost-model suites name it."""

    label: str
    op: str
    params: dict[str, int]

    def task(self) -> Task:
        return library_task(self.op, self.params)
